"""Canary rollouts under failure, end to end: worker and bridge as processes against the local
cluster (kwok pods), the session's Temporal, and Prometheus servers of the tests' own.

- the worker is SIGKILLed and restarted (same host id, task queue and env) at every step boundary
  of a timed canary; the canary still walks every step exactly once, in order, and completes;
- a dedicated Prometheus is stopped while an analysis step bakes: under onInconclusive Rollback
  the canary rolls back on the first inconclusive sample; under Hold and RollbackOnStall it holds
  its traffic within the stall timeout (20s, from the operator ConfigMap this stack's worker
  reads), then Hold parks Failed / AnalysisStalled with traffic unchanged and RollbackOnStall rolls
  back. The RollbackOnStall canary names no Prometheus: it samples the operator's bundled source.

Deadlines are generous upper bounds (the suite may run on a loaded machine); nothing is timed.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.product import BridgeLauncher, restart_worker, start_worker
from devstack.services import OciRegistry, Prometheus, TemporalDevServer
from servingops.api_models.ome import InferenceService
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest
from tests.fixtures.kube import own_identities
from tests.metrics_exporter import Exporter
from tests.support.rollout_stack import route_weights

pytestmark = pytest.mark.e2e

DEADLINE = 240.0
STALL_SECONDS = 20
METRIC = "servingops_resilience_error_ratio"
GOOD = 0.01


@dataclass
class RestartableStack:
    """A worker that can be crashed and brought back exactly as it was started."""

    cluster: LocalKubeCluster
    temporal: TemporalDevServer
    registry: OciRegistry
    hub: HubServer
    task_queue: str
    spool: Path
    logs: Path
    host_id: str
    namespace: str
    """Also the worker's controller namespace: the operator ConfigMap of this stack lives here."""
    identities: Identities
    """The chart's identities, rendered for this controller namespace."""
    worker: ManagedProcess = field(init=False)
    restarts: int = 0

    def start(self) -> ManagedProcess:
        self.worker = start_worker(self.cluster, self.temporal, self.registry, self.hub, self.task_queue,
                                   self.spool, self.logs, host_id=self.host_id,
                                   identities=self.identities)
        return self.worker

    def crash_and_restart(self) -> None:
        """SIGKILL the worker, then start a new one with the same host id, queue and env. The log
        file is appended to, so readiness is judged on what the new process wrote."""
        restart_worker(self.worker)
        self.restarts += 1


@pytest.fixture(scope="module")
def resilient_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                    oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestartableStack]:
    task_queue = f"resilience-{uuid.uuid4().hex[:6]}"
    namespace = f"resilience-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(kube_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    with own_identities(kube_cluster, namespace, tmp_path_factory.mktemp("identities")) as identities:
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=identities.operator_config),
            data={"rollout": f"stallTimeout: {STALL_SECONDS}s\n"}))
        stack = RestartableStack(kube_cluster, temporal_server, oci_registry, hub_server, task_queue,
                                 tmp_path_factory.mktemp("spool"), stack_logs, f"host-{task_queue}", namespace,
                                 identities)
        stack.start()
        launcher = BridgeLauncher(identities, temporal_server.address, stack_logs)
        launcher.start(task_queue=task_queue, kinds="InferenceService")
        try:
            yield stack
        finally:
            launcher.stop_all()
            stack.worker.stop()


def _spec(image: str, steps: list[dict[str, Any]], prometheus_url: str | None = None) -> dict[str, Any]:
    canary: dict[str, Any] = {"steps": steps, "scaleDownDelaySeconds": 1}
    if prometheus_url:
        canary["prometheus"] = {"serverAddress": prometheus_url}
    return {
        "engine": {"minReplicas": 2, "runner": {"name": "engine", "image": image, "ports": [{"containerPort": 8000}]}},
        "rollout": {"groups": [{"components": ["engine"], "canary": canary}]},
    }


def _engine(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object("ome.io", "v1beta1", ns, "inferenceservices", name)
    engine: dict[str, Any] = ((obj.get("status") or {}).get("components") or {}).get("engine") or {}
    return engine


def _canary_status(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    canary: dict[str, Any] = _engine(api, ns, name).get("canary") or {}
    return canary


def _set_image(api: client.ApiClient, ns: str, name: str, image: str) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object("ome.io", "v1beta1", ns, "inferenceservices", name, {
        "spec": {"engine": {"runner": {"name": "engine", "image": image, "ports": [{"containerPort": 8000}]}}}})


def _serving(name: str, revision: str) -> str:
    return f"{name}-engine-rev-{revision}"


def _first_revision(api: client.ApiClient, stack: RestartableStack, name: str, steps: list[dict[str, Any]],
                    prometheus_url: str | None = None) -> str:
    """Create the InferenceService and answer its first revision's backend once it serves 100%."""
    ns = stack.namespace
    create(api, InferenceService, manifest(InferenceService, _spec("vllm/vllm-openai:v0.9", steps, prometheus_url),
                                           name=name), ns)
    first = wait_until("the first revision serving 100%", lambda: (
        (w := route_weights(api, ns, f"{name}-engine")) and list(w.values()) == [100] and w), stack.worker, DEADLINE)
    [stable] = first
    wait_until("the first revision rolled out", lambda: _engine(api, ns, name).get("latestRolledoutRevision"),
          stack.worker, DEADLINE)
    return stable


def _wait_canary_at(api: client.ApiClient, stack: RestartableStack, name: str, stable: str, weight: int) -> str:
    """Wait for the canary at `weight`%; answer the canary backend."""
    weights = wait_until(f"the canary at {weight}%", lambda: (
        (w := route_weights(api, stack.namespace, f"{name}-engine")).get(stable) == 100 - weight and len(w) == 2
        and w), stack.worker, DEADLINE)
    [canary] = [backend for backend in weights if backend != stable]
    assert weights[canary] == weight
    return canary


class RouteRecorder:
    """Polls the HTTPRoute every 0.2s in a thread and keeps every distinct weight map, in order.
    With `isvc`, each poll first reads that InferenceService's engine CanaryStatus and keeps the
    (currentStep, observedTrafficWeight, route weights) snapshots, to hold status to the route."""

    def __init__(self, api: client.ApiClient, ns: str, route: str, isvc: str | None = None) -> None:
        self.api, self.ns, self.route, self.isvc = api, ns, route, isvc
        self.seen: list[dict[str, int]] = []
        self.snapshots: list[tuple[int | None, int | None, dict[str, int]]] = []
        self.errors: list[BaseException] = []
        self.written: list[dict[str, int]] = []
        """Every distinct route the apiserver stored, in order, from a watch: a poll can miss a
        step that lasts less than its interval (a pause that elapsed while the worker was down)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._watcher = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> RouteRecorder:
        self._thread.start()
        self._watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._watcher.join(timeout=10)

    def _watch(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        version = ""
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(
                        custom.list_namespaced_custom_object, "gateway.networking.k8s.io", "v1", self.ns,
                        "httproutes", field_selector=f"metadata.name={self.route}", resource_version=version,
                        timeout_seconds=2):
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    refs = obj["spec"]["rules"][0]["backendRefs"]
                    weights = {ref["name"]: ref.get("weight", 1) for ref in refs}
                    if not self.written or self.written[-1] != weights:
                        self.written.append(weights)
            except Exception as error:  # an expired resourceVersion or a hiccup: resume from the last seen
                self.errors.append(error)
                time.sleep(0.1)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                # Status before route: the workflow programs the route, then writes status, so a
                # status read first can only lag the route read after it, never lead it.
                status = _canary_status(self.api, self.ns, self.isvc) if self.isvc else {}
                weights = route_weights(self.api, self.ns, self.route)
            except Exception as error:  # a transient apiserver hiccup must not end the recording
                self.errors.append(error)
                status, weights = {}, {}
            if weights and (not self.seen or self.seen[-1] != weights):
                self.seen.append(weights)
            if weights and status.get("canaryRevisionHash"):
                self.snapshots.append((status.get("currentStep"), status.get("observedTrafficWeight"), weights))
            self._stop.wait(0.2)


def test_worker_killed_at_every_step_boundary(kube_api: client.ApiClient,
                                              resilient_stack: RestartableStack) -> None:
    stack = resilient_stack
    ns, name = stack.namespace, "canary-crash"
    traffic = [25, 50, 75]
    steps: list[dict[str, Any]] = [{"capacity": f"{t}%", "traffic": t, "pause": {"duration": "3s"}} for t in traffic]
    steps.append({"capacity": "100%", "traffic": 100})
    stable = _first_revision(kube_api, stack, name, steps)

    with RouteRecorder(kube_api, ns, f"{name}-engine", isvc=name) as recorder:
        _set_image(kube_api, ns, name, "vllm/vllm-openai:v0.10")
        canary = _wait_canary_at(kube_api, stack, name, stable, traffic[0])
        # Crash at the first step, then after every observed step change (route weight or currentStep).
        stack.crash_and_restart()
        seen_weight = traffic[0]
        seen_step = _canary_status(kube_api, ns, name).get("currentStep")
        while seen_weight < 100:
            def changed(seen_weight: int = seen_weight, seen_step: Any = seen_step) -> tuple[int, Any] | None:
                weight = route_weights(kube_api, ns, f"{name}-engine").get(canary, 0)
                step = _canary_status(kube_api, ns, name).get("currentStep")
                if weight != seen_weight or (step is not None and step != seen_step):
                    return weight, step
                return None

            seen_weight, step = wait_until(f"a step change after {seen_weight}%", changed, stack.worker, DEADLINE)
            seen_step = step if step is not None else seen_step
            stack.crash_and_restart()

        wait_until("the route 100% on the new revision", lambda: route_weights(kube_api, ns, f"{name}-engine")
              == {canary: 100}, stack.worker, DEADLINE)
        engine = wait_until("status reports the completed canary", lambda: (
            (e := _engine(kube_api, ns, name)) and (e.get("canary") or {}).get("currentStep") == len(steps)
            and e.get("rolloutPhase") == "Stable" and e), stack.worker, DEADLINE)
        time.sleep(1)  # a last few polls of the settled route

    assert stack.restarts >= len(traffic) + 1
    status = engine["canary"]
    assert status.get("stableRevisionHash") is None
    assert status["observedTrafficWeight"] == 100
    assert _serving(name, status["canaryRevisionHash"]) == canary
    wait_until("the new revision recorded as rolled out", lambda: _engine(kube_api, ns, name).get(
        "latestRolledoutRevision") == canary, stack.worker, DEADLINE)

    # Every distinct route seen: only the two revisions, always summing to 100, and the canary's
    # weight walks 0 -> 25 -> 50 -> 75 -> 100 with nothing skipped, repeated or reordered.
    seen = recorder.written
    assert seen, "the route was never read"
    for weights in seen:
        assert set(weights) <= {stable, canary}, seen
        assert sum(weights.values()) == 100, seen
    canary_weights = [w.get(canary, 0) for w in seen]
    print(f"\n{stack.restarts} worker restarts; canary weights seen in order: {canary_weights}")
    collapsed = [v for i, v in enumerate(canary_weights) if i == 0 or canary_weights[i - 1] != v]
    assert collapsed in ([*traffic, 100], [0, *traffic, 100]), f"route weights seen in order: {seen}"

    # CanaryStatus against the route, at every poll: the step and the weight it reports agree with
    # each other (step i programs traffic[i], and until its capacity is Ready it still reports the
    # previous step's weight; completion is step len(steps) at 100), the status never reports a
    # weight the route does not carry yet, and it walks the steps in order.
    step_weight = [*traffic, 100, 100]
    reported = [(step, weight) for step, weight, _ in recorder.snapshots]
    assert reported, "no CanaryStatus was read while the canary ran"
    for step, weight, weights in recorder.snapshots:
        assert step is not None and weight in (step_weight[step], step_weight[step - 1] if step else 0), reported
        assert weights.get(canary, 0) >= weight, f"status ahead of the route: {(step, weight, weights)}"
    assert reported == sorted(reported), f"status went back: {reported}"
    assert {step for step, _ in reported} >= {0, len(steps)}, reported


# --- analysis with its Prometheus gone -------------------------------------------------------


@pytest.fixture
def own_prometheus(tmp_path: Path, stack_logs: Path) -> Iterator[tuple[Prometheus, Exporter]]:
    """A Prometheus of this test's own (the test stops it) scraping an exporter of its own."""
    exporter = Exporter()
    prometheus = Prometheus(tmp_path / "prometheus", stack_logs)
    prometheus.workdir.mkdir(parents=True)
    prometheus.set_targets([exporter.target])
    prometheus.start()
    try:
        yield prometheus, exporter
    finally:
        prometheus.stop()
        exporter.stop()


def _prometheus_has(prometheus: Prometheus, query: str) -> bool:
    url = f"{prometheus.url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
    except OSError:
        return False
    return body.get("status") == "success" and bool(body["data"]["result"])


def _delete(api: client.ApiClient, ns: str, name: str) -> None:
    try:
        client.CustomObjectsApi(api).delete_namespaced_custom_object("ome.io", "v1beta1", ns, "inferenceservices",
                                                                     name)
    except client.exceptions.ApiException:
        pass


def _analysis_canary_then_stop_prometheus(api: client.ApiClient, stack: RestartableStack, name: str, mode: str,
                                          prometheus: Prometheus, exporter: Exporter, *,
                                          bundled: bool = False) -> tuple[str, str]:
    """A canary whose analysis step (onInconclusive `mode`) passes on a good value but bakes for an
    hour; once a conclusive passing sample is on status, stop its Prometheus. With `bundled` the
    spec names no source and the operator ConfigMap's bundledPrometheusAddress points at this
    Prometheus. Answers (stable backend, canary backend)."""
    ns, label = stack.namespace, uuid.uuid4().hex[:8]
    series = METRIC + '{isvc="' + name + '",test="' + label + '"}'
    exporter.set({series: GOOD})
    # Rollback acts on the very first inconclusive sample: the series must be in Prometheus first.
    wait_until("the series scraped by the dedicated Prometheus", lambda: _prometheus_has(prometheus, series),
          stack.worker, DEADLINE)
    steps = [{"capacity": "50%", "traffic": 20, "pause": {"duration": "1h"}, "analysis": {
                "interval": "2s", "failureLimit": 2, "onInconclusive": mode,
                "metrics": [{"name": "error-ratio", "operator": "LT", "threshold": "0.05",
                             "query": METRIC + '{isvc="{{.ISVCName}}",test="' + label + '"}'}]}},
             {"capacity": "100%", "traffic": 100}]
    stable = _first_revision(api, stack, name, steps, None if bundled else prometheus.url)
    # Read when the canary's run opens, which the image change below does.
    client.CoreV1Api(api).patch_namespaced_config_map(stack.identities.operator_config, ns, {"data": {
        "canaryAnalysis": f"bundledPrometheusAddress: '{prometheus.url if bundled else ''}'\n"}})
    _set_image(api, ns, name, "vllm/vllm-openai:v0.10")
    canary = _wait_canary_at(api, stack, name, stable, 20)
    wait_until("a conclusive passing sample", lambda: (
        (c := _canary_status(api, ns, name)).get("lastConclusiveEvaluationTime")
        and [r.get("passed") for r in c.get("metricResults") or []] == [True]), stack.worker, DEADLINE)
    assert route_weights(api, ns, f"{name}-engine") == {stable: 80, canary: 20}

    prometheus.stop()
    assert prometheus.process is not None and not prometheus.process.alive
    return stable, canary


def _held(engine: dict[str, Any], stable: str, canary: str, weights: dict[str, int]) -> None:
    status = engine.get("canary") or {}
    assert weights == {stable: 80, canary: 20}
    assert engine.get("rolloutPhase") not in ("RolledBack", "Failed", "Stable"), engine
    assert status.get("currentStep") == 0 and not status.get("failed") and not status.get(
        "rolledBackRevisionHash"), status


def _assert_holds_within_the_stall(api: client.ApiClient, stack: RestartableStack, name: str, stable: str,
                                   canary: str) -> datetime:
    """An inconclusive sample reaches status, then until shortly before the stall timeout nothing
    moves: same traffic, same step, no rollback and no failure. Answers lastConclusiveEvaluationTime."""
    ns = stack.namespace
    held = wait_until("an inconclusive sample on status", lambda: (
        (c := _canary_status(api, ns, name)).get("metricResults")
        and [r.get("passed") for r in c["metricResults"]] == [False] and c), stack.worker, DEADLINE)
    assert held.get("currentStep") == 0
    assert held["metricResults"][0].get("message"), held
    assert not held.get("analysisFailedChecks"), "an inconclusive sample is not a breach"
    conclusive = datetime.fromisoformat(held["lastConclusiveEvaluationTime"])
    until = conclusive + timedelta(seconds=STALL_SECONDS - 3)
    checks = 0
    while datetime.now(UTC) < until:
        _held(_engine(api, ns, name), stable, canary, route_weights(api, ns, f"{name}-engine"))
        checks += 1
        time.sleep(0.5)
    assert checks >= 5, "the machine was too slow to watch the hold; the stall started before we looked"
    assert _engine(api, ns, name).get("latestRolledoutRevision") == stable
    return conclusive
def test_prometheus_stopped_rollback_rolls_back(kube_api: client.ApiClient, resilient_stack: RestartableStack,
                                                own_prometheus: tuple[Prometheus, Exporter]) -> None:
    stack, (prometheus, exporter) = resilient_stack, own_prometheus
    ns, name = stack.namespace, "inconclusive-rollback"
    stable, canary = _analysis_canary_then_stop_prometheus(kube_api, stack, name, "Rollback", prometheus, exporter)

    wait_until("traffic back on stable", lambda: (
        (w := route_weights(kube_api, ns, f"{name}-engine")) and w.get(stable) == 100
        and not any(v for k, v in w.items() if k != stable)), stack.worker, DEADLINE)
    engine = wait_until("status reports the rollback", lambda: (
        (e := _engine(kube_api, ns, name)) and e.get("rolloutPhase") == "RolledBack" and e), stack.worker, DEADLINE)
    status = engine["canary"]
    assert _serving(name, status["rolledBackRevisionHash"]) == canary
    assert not status.get("analysisFailedChecks"), "rolled back for inconclusive, not for a breach"
    assert [r.get("passed") for r in status.get("metricResults") or []] == [False]
    assert engine["latestRolledoutRevision"] == stable


def test_prometheus_stopped_hold_parks_after_the_stall(kube_api: client.ApiClient, resilient_stack: RestartableStack,
                                                      own_prometheus: tuple[Prometheus, Exporter]) -> None:
    stack, (prometheus, exporter) = resilient_stack, own_prometheus
    ns, name = stack.namespace, "inconclusive-hold"
    stable, canary = _analysis_canary_then_stop_prometheus(kube_api, stack, name, "Hold", prometheus, exporter)
    conclusive = _assert_holds_within_the_stall(kube_api, stack, name, stable, canary)

    engine = wait_until("parked Failed / AnalysisStalled", lambda: (
        (e := _engine(kube_api, ns, name)).get("rolloutPhase") == "Failed" and e), stack.worker, DEADLINE)
    failed = engine["canary"]["failed"]
    assert failed["reason"] == "AnalysisStalled"
    assert datetime.fromisoformat(failed["time"]) - conclusive >= timedelta(seconds=STALL_SECONDS)
    # A monitoring outage is not evidence against the canary: traffic stays where the step put it.
    assert route_weights(kube_api, ns, f"{name}-engine") == {stable: 80, canary: 20}
    assert engine["canary"]["currentStep"] == 0 and not engine["canary"].get("rolledBackRevisionHash")
    _delete(kube_api, ns, name)  # no point sampling a dead Prometheus for the rest of the session


def test_prometheus_stopped_rollback_on_stall_rolls_back_after_the_stall(
        kube_api: client.ApiClient, resilient_stack: RestartableStack,
        own_prometheus: tuple[Prometheus, Exporter]) -> None:
    stack, (prometheus, exporter) = resilient_stack, own_prometheus
    ns, name = stack.namespace, "inconclusive-stall"
    stable, canary = _analysis_canary_then_stop_prometheus(kube_api, stack, name, "RollbackOnStall", prometheus,
                                                           exporter, bundled=True)
    conclusive = _assert_holds_within_the_stall(kube_api, stack, name, stable, canary)

    wait_until("traffic back on stable after the stall", lambda: (
        (w := route_weights(kube_api, ns, f"{name}-engine")) and w.get(stable) == 100
        and not any(v for k, v in w.items() if k != stable)), stack.worker, DEADLINE)
    assert datetime.now(UTC) - conclusive >= timedelta(seconds=STALL_SECONDS)
    engine = wait_until("status reports the rollback", lambda: (
        (e := _engine(kube_api, ns, name)) and e.get("rolloutPhase") == "RolledBack" and e), stack.worker, DEADLINE)
    status = engine["canary"]
    assert _serving(name, status["rolledBackRevisionHash"]) == canary and not status.get("failed")
    assert not status.get("analysisFailedChecks"), "rolled back for the stall, not for a breach"
    assert engine["latestRolledoutRevision"] == stable
