"""The worker's metrics endpoint: the Temporal SDK's runtime metrics and the worker's own, read as
Prometheus reads them (the text the SDK's server answers), each counted where the worker counts it."""

from __future__ import annotations

import asyncio
import os
import re
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.runtime import Runtime
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from devstack.services import OciRegistry, TemporalDevServer
from servingops.activities.kubernetes import EventNote, StatusPatch
from servingops.activities.oci.activities import OciActivities, PushFileInput, RegistryTarget
from servingops.activities.sources.activities import SourceActivities
from servingops.activities.sources.types import FetchedFile
from servingops.api_models.contract import search_attributes
from servingops.api_models.contract.rollout import ServiceState
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.ome.enums import RolloutRunOutcome
from servingops.api_models.refs import ObjectRef
from servingops.clients.oci import media_types as mt
from servingops.clients.oci.registry_client import MiB
from servingops.runtime import metrics as metrics_module
from servingops.runtime.metrics import WorkerMetrics, prometheus_runtime
from servingops.runtime.temporal import TemporalSettings, connect
from servingops.workers import observability
from servingops.workers.observability import MetricsInterceptor, count_status_write, observe_visibility
from servingops.workflows.rollout import status

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(address: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(name, labels) -> value, parsed from the endpoint's text exposition."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and not line.startswith("#"):
            labels = frozenset(_LABEL.findall(match.group(3) or ""))
            samples[(match.group(1), labels)] = float(match.group(4))
    return samples


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    """The sum over the series of `name` whose labels include `labels` (None when there is none)."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    return sum(found) if found else None


@pytest.fixture(scope="module")
def runtime() -> Iterator[tuple[Runtime, str, WorkerMetrics]]:
    """One Prometheus-serving runtime for the module (a runtime per test would leak threads)."""
    rt, bound = prometheus_runtime("127.0.0.1:0")
    yield rt, bound, WorkerMetrics(rt.metric_meter)


def _isvc(uid: str) -> ObjectRef:
    return ObjectRef(group="ome.io", version="v1beta1", plural="inferenceservices", kind="InferenceService",
                     name="chat", namespace="team", uid=uid)


# -- what a status write says: the real status builders -----------------------------------------


@pytest.mark.unit
def test_parks_and_run_closes_are_read_from_the_status_write(runtime: tuple[Runtime, str, WorkerMetrics]) -> None:
    _, bound, metrics = runtime
    reason = f"PolicyNotFound{uuid.uuid4().hex[:6]}"  # a reason no other test counts
    why = f"{reason}: RolloutPolicy team/standard not found"
    parked = ServiceState(parked={"engine": why, "router": "ProgressionMismatch: canary != blueGreen"})
    park = StatusPatch(ref=_isvc("u1"), conditions=status.conditions(parked),
                       events=[status.park_note("engine", why)])
    # The next writes of the same parked group carry no note: nothing more is counted.
    again = StatusPatch(ref=_isvc("u1"), conditions=status.conditions(parked), events=[])
    targets: list[Any] = []
    closed = status.closed_note("engine", RolloutRunOutcome.COMPLETED, targets)
    assert closed is not None
    # A refused spec's Warning is no park, even with the same reason: it names no parked group.
    done = StatusPatch(ref=_isvc("u1"), conditions=status.conditions(ServiceState()), events=[
        closed, EventNote(type="Warning", reason=reason, message="generation 3: refused")])
    # A Model's Warning with the same reason is not a rollout park.
    model = StatusPatch(ref=ObjectRef(group="ai.deckhouse.io", version="v1alpha1", plural="models", kind="Model",
                                      name="m", namespace="team", uid="m1"),
                        events=[EventNote(type="Warning", reason=reason, message=f"group engine: {why}")])
    before = scrape(bound)
    for patch in (park, again, done, model):
        count_status_write(metrics, patch)
    after = scrape(bound)

    assert value(after, "servingops_rollout_parks_total", reason=reason) == 1
    completed_before = value(before, "servingops_rollout_runs_closed_total", outcome="Completed") or 0
    assert value(after, "servingops_rollout_runs_closed_total", outcome="Completed") == completed_before + 1


@pytest.mark.unit
def test_a_failed_run_parks_with_its_error_type(runtime: tuple[Runtime, str, WorkerMetrics]) -> None:
    _, bound, metrics = runtime
    message = f"readiness timed out {uuid.uuid4().hex[:6]}"
    note = status.failed_run_note("engine", ErrorType.INVALID_INPUT, message)
    state = ServiceState(parked={"engine": f"{note.reason}: {message}"})
    before = value(scrape(bound), "servingops_rollout_parks_total", reason=ErrorType.INVALID_INPUT.value) or 0
    count_status_write(metrics, StatusPatch(ref=_isvc("u2"), conditions=status.conditions(state), events=[note]))
    after = value(scrape(bound), "servingops_rollout_parks_total", reason=ErrorType.INVALID_INPUT.value)
    assert after == before + 1


@pytest.mark.unit
def test_the_interceptor_watches_the_worker_s_real_activity_names() -> None:
    def name(fn: Any) -> str:
        return str(fn.__temporal_activity_definition.name)

    assert observability.FETCH == name(SourceActivities.fetch_file)
    assert observability.PUSH == name(OciActivities.push_file)
    from servingops.activities.kubernetes import KubernetesActivities

    assert observability.PATCH_STATUS == name(KubernetesActivities.patch_status)


# -- the interceptor, through a real worker and Temporal server ------------------------------------


@activity.defn(name=observability.FETCH)
def _fetch(req: dict[str, Any]) -> FetchedFile:
    return FetchedFile(path="/spool/uid/model.safetensors", relative_path="model.safetensors", size=4096,
                       sha256="0" * 64, transferred_bytes=4096, header_only=False)


@activity.defn(name="test.refuse")
def _refuse() -> None:
    raise application_error(ErrorType.SOURCE_NOT_FOUND, "no such repository")


@activity.defn(name="test.crash")
def _crash() -> None:
    raise KeyError("a bug")


@workflow.defn(name="MetricsProbe", sandboxed=False)
class _Probe:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(_fetch, {}, start_to_close_timeout=timedelta(seconds=30))
        await workflow.execute_activity(_refuse, start_to_close_timeout=timedelta(seconds=30))


@workflow.defn(name="MetricsCrashProbe", sandboxed=False)
class _CrashProbe:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(_crash, start_to_close_timeout=timedelta(seconds=30),
                                        retry_policy=RetryPolicy(maximum_attempts=2,
                                                                 initial_interval=timedelta(milliseconds=10)))


@pytest.mark.integration
async def test_interceptor_counts_bytes_and_failures_by_error_type(
        temporal_server: TemporalDevServer, runtime: tuple[Runtime, str, WorkerMetrics]) -> None:
    rt, bound, metrics = runtime
    temporal = await connect(TemporalSettings(address=temporal_server.address), runtime=rt)
    queue = f"metrics-{uuid.uuid4().hex[:6]}"
    before = scrape(bound)
    with ThreadPoolExecutor(max_workers=4) as pool:
        async with Worker(temporal, task_queue=queue, workflows=[_Probe, _CrashProbe],
                          activities=[_fetch, _refuse, _crash], activity_executor=pool,
                          interceptors=[MetricsInterceptor(metrics)]):
            with pytest.raises(WorkflowFailureError):
                await temporal.execute_workflow(_Probe.run, id=f"probe-{uuid.uuid4()}", task_queue=queue)
            with pytest.raises(WorkflowFailureError):
                await temporal.execute_workflow(_CrashProbe.run, id=f"crash-{uuid.uuid4()}", task_queue=queue)
    after = scrape(bound)

    def grew(name: str, **labels: str) -> float:
        return (value(after, name, **labels) or 0) - (value(before, name, **labels) or 0)

    assert grew("servingops_worker_fetched_bytes_total") == 4096
    # A permanent error fails once (not retried); a bug is retried, each attempt counted.
    assert grew("servingops_worker_activity_failures_total", activity="test.refuse",
                error_type=ErrorType.SOURCE_NOT_FOUND.value) == 1
    assert grew("servingops_worker_activity_failures_total", activity="test.crash", error_type="KeyError") == 2
    assert value(after, "servingops_worker_transfers_in_flight", activity=observability.FETCH) == 0
    # The SDK's own runtime metrics share the endpoint.
    # The SDK counts the same failures with failure_reason="ActivityError" only: ours says which error.
    assert grew("temporal_activity_execution_failed_total", activity_type="test.crash") == 2
    assert value(after, "temporal_worker_task_slots_available", task_queue=queue) is not None


# -- state gauges from Temporal visibility ---------------------------------------------------------


@workflow.defn(name="ModelWorkflow", sandboxed=False)
class _PublishingModel:
    """Stands in for an import in flight: the type and phase visibility shows for one."""

    def __init__(self) -> None:
        self.done = False

    @workflow.run
    async def run(self, phase: str) -> None:
        workflow.upsert_search_attributes([search_attributes.PHASE.value_set(phase)])
        await workflow.wait_condition(lambda: self.done)

    @workflow.signal
    def finish(self) -> None:
        self.done = True


@workflow.defn(name="RolloutWorkflow", sandboxed=False)
class _PausedRun:
    """Stands in for an open rollout run in a phase."""

    def __init__(self) -> None:
        self.done = False

    @workflow.run
    async def run(self, phase: str) -> None:
        workflow.upsert_search_attributes([search_attributes.PHASE.value_set(phase)])
        await workflow.wait_condition(lambda: self.done)

    @workflow.signal
    def finish(self) -> None:
        self.done = True


@pytest.mark.integration
async def test_visibility_gauges_count_this_installation_s_runs_and_imports(
        temporal_server: TemporalDevServer, runtime: tuple[Runtime, str, WorkerMetrics]) -> None:
    rt, bound, metrics = runtime
    temporal: Client = await connect(TemporalSettings(address=temporal_server.address), runtime=rt)
    queue = f"gauges-{uuid.uuid4().hex[:6]}"
    starts = [(_PublishingModel, "Publishing"), (_PublishingModel, "Publishing"), (_PublishingModel, "Ready"),
              (_PausedRun, "Paused"), (_PausedRun, "Canarying")]
    async with Worker(temporal, task_queue=queue, workflows=[_PublishingModel, _PausedRun]):
        handles = [await temporal.start_workflow(cls.run, phase, id=f"{phase}-{uuid.uuid4().hex[:6]}",
                                                 task_queue=queue) for cls, phase in starts]
        # Another installation's run (another task queue) is not counted.
        other = await temporal.start_workflow(_PausedRun.run, "Paused", id=f"other-{uuid.uuid4().hex[:6]}",
                                              task_queue=queue + "-other")
        expected = {"imports": 2, "Paused": 1, "Canarying": 1}
        seen: dict[str, float | None] = {}
        for _ in range(100):  # visibility is eventually consistent
            await observe_visibility(temporal, queue, metrics)
            samples = scrape(bound)
            seen = {"imports": value(samples, "servingops_imports_in_flight"),
                    "Paused": value(samples, "servingops_rollout_runs", phase="Paused"),
                    "Canarying": value(samples, "servingops_rollout_runs", phase="Canarying")}
            if seen == expected:
                break
            await asyncio.sleep(0.2)
        assert seen == expected
        assert value(samples, "servingops_rollout_runs", phase="Promoting") == 0
        for handle in handles:
            await handle.signal("finish")
        await other.terminate("not this installation's")
        for _ in range(100):  # eventually consistent again: wait for both counts, not the first to settle
            await observe_visibility(temporal, queue, metrics)
            samples = scrape(bound)
            if (value(samples, "servingops_imports_in_flight"),
                    value(samples, "servingops_rollout_runs", phase="Paused")) == (0, 0):
                break
            await asyncio.sleep(0.2)
        assert value(samples, "servingops_imports_in_flight") == 0
        assert value(samples, "servingops_rollout_runs", phase="Paused") == 0


@pytest.mark.integration
def test_a_push_counts_the_bytes_it_sends(oci_registry: OciRegistry, runtime: tuple[Runtime, str, WorkerMetrics],
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, bound, metrics = runtime
    monkeypatch.setattr(metrics_module, "_current", metrics)  # what the worker process installs
    path = tmp_path / "weights.safetensors"
    path.write_bytes(os.urandom(3 * MiB + 5))
    target = RegistryTarget(address=oci_registry.address, repository=f"models/metrics-{uuid.uuid4().hex[:6]}",
                            insecure=True)
    before = value(scrape(bound), "servingops_worker_pushed_bytes_total") or 0
    pushed = ActivityEnvironment().run(OciActivities(state_dir=tmp_path / "state").push_file, PushFileInput(
        target=target, path=str(path), media_type=mt.MODEL_WEIGHT_RAW, chunk_size=MiB))
    after = value(scrape(bound), "servingops_worker_pushed_bytes_total")
    assert pushed.transferred_bytes == path.stat().st_size
    assert after == before + path.stat().st_size
