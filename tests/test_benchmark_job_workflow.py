"""BenchmarkJobWorkflow on Temporal's time-skipping server against the fake cluster (testkit/benchmark_fakes.py).

What is held: a URL endpoint runs Pending -> Running -> Completed with startTime and completionTime from the Job;
an InferenceService not Ready keeps the run Pending, saying so, until it is; a scheme with no writer ends Failed
naming it; a pod killed mid-run (its Job Failed) ends Failed with the Job's reason; a finished job whose spec is
edited runs again as a new run with its own Job; a spec edited mid-run stops the running Job; deleting the
BenchmarkJob mid-run stops its Job; a start that created the Job and lost its answer (retried) and a worker
replaced mid-run both leave one Job for the generation; no credential reaches the history."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models.contract import Signal, benchmark_job_workflow_id
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.benchmark_fakes import FakeBenchWorld, StoredBench
from testkit.rollout_fakes import until
from tests.histories.record import start_env

pytestmark = [pytest.mark.timeskip, pytest.mark.asyncio]

URL_SPEC: dict[str, Any] = {
    "endpoint": {"endpoint": {"url": "http://10.250.0.9:8000", "apiFormat": "openai", "modelName": "org/tiny"}},
    "task": "text-to-text", "trafficScenarios": ["D(10,10)"], "numConcurrency": [1],
    "maxTimePerIteration": 1, "maxRequestsPerIteration": 5,
    "outputLocation": {"storageUri": "oci://127.0.0.1:5000/bench/results"},
    "huggingFaceSecretReference": {"name": "hf-secret-name"},
}
ISVC_SPEC: dict[str, Any] = {**URL_SPEC, "endpoint": {"inferenceService": {"name": "tiny", "namespace": "ns"}}}
SETTINGS = {"poll_seconds": 10, "wait_seconds": 30}


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


def worker(env: WorkflowEnvironment, world: FakeBenchWorld, queue: str, *, cache: bool = True) -> Worker:
    """A worker; `cache` False: it keeps no workflow in memory (each task replays the history, as on a worker
    that replaced a killed one)."""
    return Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                  activities=world.activities(env.get_current_time), workflow_runner=workflow_runner(),
                  **({} if cache else {"max_cached_workflows": 0}))


async def start(env: WorkflowEnvironment, stored: StoredBench, queue: str) -> WorkflowHandle[Any, Any]:
    return await env.client.start_workflow(
        "BenchmarkJobWorkflow", {"ref": stored.ref().model_dump(), "settings": SETTINGS},
        id=benchmark_job_workflow_id(stored.namespace, stored.name, stored.uid), task_queue=queue)


def state(stored: StoredBench) -> str | None:
    return (stored.status or {}).get("state")


async def changed(handle: WorkflowHandle[Any, Any], stored: StoredBench, *, deleting: bool = False) -> None:
    await handle.signal(Signal.OBJECT_CHANGED, {"uid": stored.uid, "generation": stored.generation,
                                                "resource_version": str(stored.generation), "deleting": deleting})


async def test_a_url_endpoint_runs_to_completed_with_its_times(env: WorkflowEnvironment) -> None:
    world = FakeBenchWorld()
    stored = world.add("url", URL_SPEC)
    queue = f"bj-{uuid.uuid4().hex[:8]}"
    async with worker(env, world, queue):
        handle = await start(env, stored, queue)
        await until(env, lambda: world.created == ["url-g1"], what="the Job created")
        assert state(stored) == "Pending" and "lastReconcileTime" in (stored.status or {})
        world.run("url-g1")
        await until(env, lambda: state(stored) == "Running", step=2, what="Running")
        assert stored.status and stored.status["startTime"]
        world.succeed("url-g1")
        await until(env, lambda: state(stored) == "Completed", step=2, what="Completed")
        status = stored.status or {}
        assert status["completionTime"] >= status["startTime"] and "failureMessage" not in status
        assert json.loads(status["details"]) == {"generation": 1, "job": "url-g1", "endpoint": "http://10.250.0.9:8000",
                                                 "results": "127.0.0.1:5000/bench/results:url-g1",
                                                 "summaryProblem": "no artifact at 127.0.0.1:5000/bench/results:url-g1"}
        # A status change (no new generation) runs nothing.
        await changed(handle, stored)
        await env.sleep(60)
        assert world.created == ["url-g1"]
        # The spec's content never travels through the workflow (activities read it by reference): not even the
        # credential Secret's name is in the history.
        history = "".join([str(e) async for e in handle.fetch_history_events()])
        assert "url-g1" in history and "hf-secret-name" not in history
        del world.benches[("ns", "url")]
        await changed(handle, stored, deleting=True)
        assert (await handle.result())["phase"] == "Deleted"


async def test_an_unready_service_waits_pending_then_runs(env: WorkflowEnvironment) -> None:
    world = FakeBenchWorld()
    world.services[("ns", "tiny")] = (False, "")
    stored = world.add("svc", ISVC_SPEC)
    queue = f"bj-{uuid.uuid4().hex[:8]}"
    async with worker(env, world, queue):
        await start(env, stored, queue)
        await until(env, lambda: "not Ready" in (stored.status or {}).get("failureMessage", ""), what="waiting said")
        assert state(stored) == "Pending" and world.created == []
        world.services[("ns", "tiny")] = (True, "http://tiny.ns.example.com")
        await until(env, lambda: world.created == ["svc-g1"], step=5, what="started once Ready")
        await until(env, lambda: "failureMessage" not in (stored.status or {}), step=1, what="the wait's message gone")
        assert world.job("svc-g1").manifest["spec"]["template"]["spec"]["initContainers"][0]["args"][4] == \
            "http://tiny.ns.example.com"


async def test_a_scheme_without_a_writer_fails_naming_it(env: WorkflowEnvironment) -> None:
    world = FakeBenchWorld()
    stored = world.add("s3", {**URL_SPEC, "outputLocation": {"storageUri": "s3://bucket/prefix"}})
    queue = f"bj-{uuid.uuid4().hex[:8]}"
    async with worker(env, world, queue):
        await start(env, stored, queue)
        await until(env, lambda: state(stored) == "Failed", what="Failed")
        assert "s3://" in (stored.status or {})["failureMessage"] and world.created == []
        assert stored.status and stored.status["completionTime"]


async def test_a_create_no_retry_can_fix_ends_failed_saying_why(env: WorkflowEnvironment) -> None:
    """The worker may not create Jobs in the namespace (a 403 its interceptor makes permanent): the run ends
    Failed with the reason on the object, and the workflow lives on for the next generation."""
    world = FakeBenchWorld(refuse_create="jobs.batch is forbidden: cannot create resource \"jobs\" in ns")
    stored = world.add("denied", URL_SPEC)
    queue = f"bj-{uuid.uuid4().hex[:8]}"
    async with worker(env, world, queue):
        handle = await start(env, stored, queue)
        await until(env, lambda: state(stored) == "Failed", what="Failed")
        assert (stored.status or {})["failureMessage"].startswith("the benchmark Job could not be created: jobs.batch")
        assert world.created == []
        world.refuse_create = None  # the role mended; an edit asks for a new run
        stored.generation = 2
        await changed(handle, stored)
        await until(env, lambda: world.created == ["denied-g2"], what="the next generation's Job")


async def test_a_pod_killed_mid_run_ends_failed_with_the_reason(env: WorkflowEnvironment) -> None:
    world = FakeBenchWorld()
    stored = world.add("killed", URL_SPEC)
    queue = f"bj-{uuid.uuid4().hex[:8]}"
    async with worker(env, world, queue):
        await start(env, stored, queue)
        await until(env, lambda: world.created == ["killed-g1"], what="created")
        world.run("killed-g1")
        await until(env, lambda: state(stored) == "Running", step=2, what="Running")
        world.fail("killed-g1", "Job killed-g1 failed: BackoffLimitExceeded; container genai-bench exited 137 (Error)")
        await until(env, lambda: state(stored) == "Failed", step=2, what="Failed")
        assert "exited 137" in (stored.status or {})["failureMessage"]
        assert world.created == ["killed-g1"]


async def test_editing_a_finished_job_runs_it_again_and_mid_run_edits_stop_the_old_job(
        env: WorkflowEnvironment) -> None:
    world = FakeBenchWorld()
    stored = world.add("edit", URL_SPEC)
    queue = f"bj-{uuid.uuid4().hex[:8]}"
    async with worker(env, world, queue):
        handle = await start(env, stored, queue)
        await until(env, lambda: world.created == ["edit-g1"], what="g1")
        world.run("edit-g1")
        world.succeed("edit-g1")
        await until(env, lambda: state(stored) == "Completed", step=2, what="g1 Completed")
        stored.spec = {**URL_SPEC, "numConcurrency": [1, 2]}
        stored.generation = 2
        await changed(handle, stored)
        await until(env, lambda: world.created == ["edit-g1", "edit-g2"], what="g2 started")
        assert state(stored) == "Pending" and "completionTime" not in (stored.status or {})
        world.run("edit-g2")
        await until(env, lambda: state(stored) == "Running", step=2, what="g2 Running")
        stored.generation = 3
        await changed(handle, stored)
        await until(env, lambda: world.created[-1] == "edit-g3", what="g3 started")
        assert world.stopped == ["edit-g2"] and ("ns", "edit-g1") in world.jobs
        assert json.loads((stored.status or {})["details"])["generation"] == 3


async def test_deleting_mid_run_stops_the_job(env: WorkflowEnvironment) -> None:
    world = FakeBenchWorld()
    stored = world.add("gone", URL_SPEC)
    queue = f"bj-{uuid.uuid4().hex[:8]}"
    async with worker(env, world, queue):
        handle = await start(env, stored, queue)
        await until(env, lambda: world.created == ["gone-g1"], what="created")
        world.run("gone-g1")
        await until(env, lambda: state(stored) == "Running", step=2, what="Running")
        stored.deleting = True
        await changed(handle, stored, deleting=True)
        assert (await handle.result())["phase"] == "Deleted"
        assert world.stopped == ["gone-g1"] and world.jobs == {}


async def test_a_lost_create_answer_and_a_replaced_worker_leave_one_job(env: WorkflowEnvironment) -> None:
    world = FakeBenchWorld(fail_after_create=1)
    stored = world.add("once", URL_SPEC)
    queue = f"bj-{uuid.uuid4().hex[:8]}"
    async with worker(env, world, queue, cache=False):
        handle = await start(env, stored, queue)
        await until(env, lambda: "job" in json.loads((stored.status or {}).get("details", "{}")), step=1,
                    what="the retried start answered")
        assert world.created == ["once-g1"]
    # The worker is gone (killed mid-run); the pod runs on; a new worker takes the workflow over.
    world.run("once-g1")
    world.succeed("once-g1")
    async with worker(env, world, queue, cache=False):
        await until(env, lambda: state(stored) == "Completed", step=2, what="Completed under the new worker")
        assert world.created == ["once-g1"]
        del world.benches[("ns", "once")]
        await changed(handle, stored, deleting=True)
        await handle.result()


async def test_a_completed_run_carries_the_summary_of_its_results(env: WorkflowEnvironment) -> None:
    import io
    import tarfile
    from pathlib import Path

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted((Path(__file__).parent / "fixtures" / "genai_bench").glob("*.json")):
            archive.add(path, arcname=f"sum-g1/{path.name}")
    world = FakeBenchWorld(artifacts={"127.0.0.1:5000/bench/results:sum-g1": buffer.getvalue()})
    stored = world.add("sum", URL_SPEC)
    queue = f"bj-{uuid.uuid4().hex[:8]}"
    async with worker(env, world, queue):
        await start(env, stored, queue)
        await until(env, lambda: world.created == ["sum-g1"], what="created")
        world.run("sum-g1")
        world.succeed("sum-g1")
        await until(env, lambda: state(stored) == "Completed", step=2, what="Completed")
        summary = json.loads((stored.status or {})["details"])["summary"]
        assert [(s["scenario"], s["concurrency"]) for s in summary] == [("D(10,10)", 1), ("D(10,10)", 2)]
        assert summary[1]["requests"] == 38 and summary[1]["errors"] == 0
        assert summary[1]["ttftP50Ms"] <= summary[1]["ttftP99Ms"] and summary[1]["outputTokensPerSecond"] > 0


async def test_a_completed_pvc_run_carries_the_summary_its_pod_reported(env: WorkflowEnvironment) -> None:
    """pvc://: the pod's summarize step's termination message, read by job_state, is details.summary (no
    registry read); a pod that reported none is a summaryProblem, the run still Completed."""
    world = FakeBenchWorld()
    pvc = {**URL_SPEC, "outputLocation": {"storageUri": "pvc://results/runs"}}
    stored = world.add("pvcsum", pvc)
    queue = f"bj-{uuid.uuid4().hex[:8]}"
    message = ('{"benchSummary":1,"total":2,"rows":[["D(10,10)",1,17,0,24.881,29.9,232.756],'
               '["D(10,10)",2,32,1,25.281,33.838,510.608]]}')
    async with worker(env, world, queue):
        handle = await start(env, stored, queue)
        await until(env, lambda: world.created == ["pvcsum-g1"], what="created")
        world.run("pvcsum-g1")
        world.succeed("pvcsum-g1", termination_message=message)
        await until(env, lambda: state(stored) == "Completed", step=2, what="Completed")
        details = json.loads((stored.status or {})["details"])
        assert details["results"] == "pvc://results/runs/pvcsum-g1" and "summaryProblem" not in details, details
        assert details["summary"] == [
            {"scenario": "D(10,10)", "concurrency": 1, "requests": 17, "errors": 0, "ttftP50Ms": 24.881,
             "ttftP99Ms": 29.9, "outputTokensPerSecond": 232.756},
            {"scenario": "D(10,10)", "concurrency": 2, "requests": 32, "errors": 1, "ttftP50Ms": 25.281,
             "ttftP99Ms": 33.838, "outputTokensPerSecond": 510.608}]
        stored.generation = 2
        await changed(handle, stored)
        await until(env, lambda: world.created[-1] == "pvcsum-g2", what="g2 created")
        world.run("pvcsum-g2")
        world.succeed("pvcsum-g2")
        await until(env, lambda: json.loads((stored.status or {}).get("details") or "{}").get("generation") == 2
                    and state(stored) == "Completed", step=2, what="g2 Completed")
        details = json.loads((stored.status or {})["details"])
        assert "summary" not in details and "did not report its summarize step" in details["summaryProblem"]


async def test_a_run_tells_its_start_and_end_as_events(env: WorkflowEnvironment) -> None:
    """Normal BenchmarkStarted when the pod runs, Normal BenchmarkCompleted at the end; a failed run's Warning
    BenchmarkFailed carries the failureMessage; a Pending status rewritten (the wait's message) tells nothing."""
    world = FakeBenchWorld()
    world.services[("ns", "tiny")] = (False, "")
    stored = world.add("told", ISVC_SPEC)
    queue = f"bj-{uuid.uuid4().hex[:8]}"
    async with worker(env, world, queue):
        handle = await start(env, stored, queue)
        await until(env, lambda: "not Ready" in (stored.status or {}).get("failureMessage", ""), what="waiting")
        world.services[("ns", "tiny")] = (True, "http://tiny.ns.example.com")
        await until(env, lambda: world.created == ["told-g1"], step=5, what="created")
        assert world.events == []
        world.run("told-g1")
        await until(env, lambda: state(stored) == "Running", step=2, what="Running")
        world.succeed("told-g1")
        await until(env, lambda: state(stored) == "Completed", step=2, what="Completed")
        assert [(e.type, e.reason) for e in world.events] == [("Normal", "BenchmarkStarted"),
                                                              ("Normal", "BenchmarkCompleted")]
        assert "told-g1" in world.events[0].message and "http://tiny.ns.example.com" in world.events[0].message
        stored.generation = 2
        await changed(handle, stored)
        await until(env, lambda: world.created == ["told-g1", "told-g2"], what="the next generation's Job")
        world.run("told-g2")
        await until(env, lambda: state(stored) == "Running", step=2, what="Running again")
        world.fail("told-g2", "Job told-g2 failed: BackoffLimitExceeded; container genai-bench exited 1 (Error)")
        await until(env, lambda: state(stored) == "Failed", step=2, what="Failed")
        assert [(e.type, e.reason) for e in world.events[2:]] == [("Normal", "BenchmarkStarted"),
                                                                 ("Warning", "BenchmarkFailed")]
        assert world.events[-1].message == (stored.status or {})["failureMessage"]
