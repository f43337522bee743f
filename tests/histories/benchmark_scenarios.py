"""Recorded scenarios of BenchmarkJobWorkflow (tests/histories/record.py runs them), against the fake cluster
of testkit/benchmark_fakes.py (the activities' wire names and payloads)."""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.worker import Worker

from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.benchmark_fakes import FakeBenchWorld
from testkit.rollout_fakes import until

if TYPE_CHECKING:
    from tests.histories.record import Recording

SPEC: dict[str, Any] = {
    "endpoint": {"inferenceService": {"name": "tiny", "namespace": "ns"}},
    "task": "text-to-text", "trafficScenarios": ["D(10,10)"], "numConcurrency": [1],
    "maxTimePerIteration": 1, "maxRequestsPerIteration": 5,
    "outputLocation": {"storageUri": "oci://127.0.0.1:5000/bench/results"},
}


async def benchmark_job(rec: Recording) -> None:
    """A BenchmarkJob against an InferenceService not Ready at first (Pending, waiting), then run: its Job
    created, Running, Completed; its spec edited (a new run, g2), edited again mid-run (g2's Job stopped, g3
    runs and fails: its pod killed); then deleted."""
    env = rec.env
    world = FakeBenchWorld()
    world.services[("ns", "tiny")] = (False, "")
    stored = world.add("bench", SPEC)
    queue = f"bj-{uuid.uuid4().hex[:8]}"

    def state() -> str | None:
        return (stored.status or {}).get("state")

    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(env.get_current_time), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "BenchmarkJobWorkflow", {"ref": stored.ref().model_dump(),
                                     "settings": {"poll_seconds": 10, "wait_seconds": 30}},
            id=f"benchmarkjob/ns/{stored.name}/{stored.uid}", task_queue=queue)
        await rec.root(handle)

        async def changed(deleting: bool = False) -> None:
            await handle.signal("object-changed", {"uid": stored.uid, "generation": stored.generation,
                                                   "resource_version": str(stored.generation), "deleting": deleting})

        await until(env, lambda: "not Ready" in (stored.status or {}).get("failureMessage", ""), what="waiting")
        world.services[("ns", "tiny")] = (True, "http://tiny.ns.example.com")
        await until(env, lambda: world.created == ["bench-g1"], step=5, what="g1 created")
        world.run("bench-g1")
        await until(env, lambda: state() == "Running", step=2, what="g1 Running")
        world.succeed("bench-g1")
        await until(env, lambda: state() == "Completed", step=2, what="g1 Completed")
        stored.generation = 2
        await changed()
        await until(env, lambda: world.created[-1] == "bench-g2", what="g2 created")
        world.run("bench-g2")
        await until(env, lambda: state() == "Running", step=2, what="g2 Running")
        stored.generation = 3
        await changed()
        await until(env, lambda: world.created[-1] == "bench-g3", what="g3 created")
        world.run("bench-g3")
        world.fail("bench-g3", "Job bench-g3 failed: BackoffLimitExceeded; container genai-bench exited 137 (Error)")
        await until(env, lambda: state() == "Failed", step=2, what="g3 Failed")
        stored.deleting = True
        await changed(deleting=True)
        await handle.result()
        await rec.save()


def _fixture_archive(folder: str) -> bytes:
    """genai-bench 0.0.5's iteration files (tests/fixtures/genai_bench) packed as oras packs a folder."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted((Path(__file__).parent.parent / "fixtures" / "genai_bench").glob("*.json")):
            archive.add(path, arcname=f"{folder}/{path.name}")
    return buffer.getvalue()


PVC_SUMMARY = ('{"benchSummary":1,"total":2,"rows":[["D(10,10)",1,17,0,24.881,29.9,232.756],'
               '["D(10,10)",2,32,0,25.281,33.838,510.608]]}')
"""What a pvc:// Job's summarize step reports as its termination message (rendering/benchmark_summary_step.py)."""


async def benchmark_summaries(rec: Recording) -> None:
    """The two summaries of a Completed run: an oci:// run's read from the registry (`benchmark.summarize`,
    patch `benchmark-summary`), then, its outputLocation edited to pvc:// (g2), a pvc:// run's from its pod's
    summarize step, carried by `benchmark.job_state` (no command of its own); then deleted."""
    env = rec.env
    world = FakeBenchWorld(artifacts={"127.0.0.1:5000/bench/results:sums-g1": _fixture_archive("sums-g1")})
    world.services[("ns", "tiny")] = (True, "http://tiny.ns.example.com")
    stored = world.add("sums", SPEC)
    queue = f"bj-{uuid.uuid4().hex[:8]}"

    def state() -> str | None:
        return (stored.status or {}).get("state")

    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(env.get_current_time), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "BenchmarkJobWorkflow", {"ref": stored.ref().model_dump(),
                                     "settings": {"poll_seconds": 10, "wait_seconds": 30}},
            id=f"benchmarkjob/ns/{stored.name}/{stored.uid}", task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: world.created == ["sums-g1"], step=5, what="g1 created")
        world.run("sums-g1")
        world.succeed("sums-g1")
        await until(env, lambda: state() == "Completed" and '"summary"' in stored.status["details"], step=2,
                    what="g1 Completed with its summary")
        stored.spec = {**SPEC, "outputLocation": {"storageUri": "pvc://results/runs"}}
        stored.generation = 2
        await handle.signal("object-changed", {"uid": stored.uid, "generation": 2, "resource_version": "2",
                                               "deleting": False})
        await until(env, lambda: world.created[-1:] == ["sums-g2"], what="g2 created")
        world.run("sums-g2")
        world.succeed("sums-g2", termination_message=PVC_SUMMARY)
        await until(env, lambda: state() == "Completed" and '"generation": 2' in stored.status["details"]
                    and '"summary"' in stored.status["details"], step=2, what="g2 Completed with its summary")
        stored.deleting = True
        await handle.signal("object-changed", {"uid": stored.uid, "generation": 2, "resource_version": "3",
                                               "deleting": True})
        await handle.result()
        await rec.save()


SCENARIOS = {"benchmark-job": benchmark_job, "benchmark-summaries": benchmark_summaries}
