"""The product's own ScaledObject really scales a component: an OMENative InferenceService whose engine
attaches an AutoscalerPolicy of class KEDA scales from 1 to MAX_REPLICAS Ready Instances under real load
and back to 1 after it stops, with KEDA's operator and metrics adapter (devstack/keda.py, built from
KEDA's Go module) acting on what the worker rendered.

The chain, all real and all separate processes: load (testkit/load.py) through Traefik (the stack's
Gateway, the service's HTTPRoute) -> the engine's pods, answered by the stack's pod runtime, each exporting
vLLM's `vllm:request_success_total` -> the session's Prometheus (scrape every second) -> KEDA's operator
runs the trigger the worker rendered from the policy (the query's `{{ .Namespace }}`, `{{ .ISVCName }}`,
`{{ .Component }}` filled in, `serverAddress` bound through the operator ConfigMap's metricProviders) ->
KEDA's adapter on external.metrics.k8s.io -> kube-controller-manager's HPA controller (sync every 2 s)
scales the projected InferenceReplica through its /scale subresource -> the replica's workflow (worker)
creates and deletes Instances -> kwok and the pod runtime start the pods and say when they are Ready. The
bridge wakes the service's workflow on the replica's changes, and the service mirrors the ScaledObject (its
conditions) and KEDA's HPA (the counts) into status.components.engine.autoscaler.

OMENative rather than RawDeployment: the scale target is the replica's /scale (KEDA reaches any kind's
scale subresource; its role grants `*/scale`), the replica's status changes wake the service so its mirror
follows the scaling, and no rollout run writes the count beside the scaler.

A second service shows KEDA's refusal: a policy whose trigger type KEDA has no scaler for renders (the
product cannot know KEDA's scaler list), KEDA marks the ScaledObject Ready False, and the service shows
that condition with KEDA's reason and message in status.components.engine.autoscaler.conditions.

The seconds measured are printed (-s); the bounds asserted are generous upper limits for a loaded 2-core
machine, not targets. No request may fail.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devstack.keda import KedaProcess
from servingops.api_models.ome import AutoscalerPolicy, InferenceService
from servingops.api_models.ome.instance_keys import REPLICA_LABEL
from testkit.load import BackgroundLoad, LoadSpec
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest
from tests.support.replica_stack import serving_instances
from tests.support.traffic_stack import DEFAULT_BRIDGE_KINDS, TrafficStack, failures, traffic_stack

pytestmark = pytest.mark.e2e

__all__ = ["traffic_stack"]  # the fixture, reused
BRIDGE_KINDS = DEFAULT_BRIDGE_KINDS + ",AutoscalerPolicy"

GROUP, VERSION = "ome.io", "v1beta1"
PROVIDER = "prom"
RATE = 24.0
"""Requests per second during the load: RATE / THRESHOLD = MAX_REPLICAS replicas wanted."""
THRESHOLD = 6
MAX_REPLICAS = 4
LOAD_SECONDS = 300.0
"""The load's own bound; the test stops it once MAX_REPLICAS Instances serve and the service mirrors it."""
TIMEOUT = 240.0
"""Upper bound of each wait (never asserted as a timing)."""
MIRROR_DEADLINE = 60.0
"""The bound of the wait for a RawDeployment service's mirror to follow its scaler: an event reaches it in
seconds, where the service's own periodic look (pacing.RESYNC_INGRESS, 293 s) would miss this deadline."""
POLL = 0.2
QUERY = ('sum(rate(vllm:request_success_total{namespace="{{ .Namespace }}",'
         'pod=~"{{ .ISVCName }}-{{ .Component }}-.*"}[10s]))')
"""The engine's answered-request rate per second over 10 s, from the pods' own counter (an OMENative
engine's pods are `<isvc>-engine-<index>`)."""


@dataclass(frozen=True)
class KedaServiceStack:
    traffic: TrafficStack
    keda: KedaProcess


@pytest.fixture(scope="module")
def keda_service_stack(traffic_stack: TrafficStack, stack_logs: Path,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[KedaServiceStack]:
    """KEDA on the traffic stack's cluster (prometheus-adapter never runs there, so KEDA owns
    external.metrics.k8s.io), and the worker's operator ConfigMap binding the provider name `prom` to the
    session's Prometheus (before any service renders: the worker reads the ConfigMap at most every 10 s)."""
    stack = traffic_stack
    core = client.CoreV1Api(stack.live.api)
    config = core.read_namespaced_config_map(stack.operator_config, stack.namespace)
    core.patch_namespaced_config_map(stack.operator_config, stack.namespace, {"data": {
        **(config.data or {}),
        "metricProviders": yaml.safe_dump({PROVIDER: {"serverAddress": stack.prometheus.url}})}})
    workdir = tmp_path_factory.mktemp("keda-service")
    keda = KedaProcess(stack.cluster, workdir, stack_logs / workdir.name).start()
    try:
        yield KedaServiceStack(stack, keda)
    finally:
        keda.stop()


def _policy(trigger_type: str = "prometheus") -> dict[str, Any]:
    """Class KEDA, scaled fast: KEDA polls every second; the HPA scales up at once (up to MAX_REPLICAS per
    step) and down after a 5 s stabilization window; cooldownPeriod (1 -> 0, never taken at min 1) short."""
    trigger: dict[str, Any] = {"type": trigger_type, "metricType": "AverageValue",
                               "metadata": {"query": QUERY, "threshold": str(THRESHOLD), "ignoreNullValues": "false"}}
    if trigger_type == "prometheus":
        trigger["providerRef"] = {"name": PROVIDER}
    return {"class": "KEDA", "keda": {
        "triggers": [trigger], "pollingInterval": 1, "cooldownPeriod": 5,
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
            "scaleUp": {"stabilizationWindowSeconds": 0,
                        "policies": [{"type": "Pods", "value": MAX_REPLICAS, "periodSeconds": 1}]},
            "scaleDown": {"stabilizationWindowSeconds": 5,
                          "policies": [{"type": "Percent", "value": 100, "periodSeconds": 1}]}}}}}}


def _service(policy: str) -> dict[str, Any]:
    return {"deploymentMode": "OMENative", "engine": {
        "minReplicas": 1, "maxReplicas": MAX_REPLICAS, "autoscalerPolicyRef": {"name": policy},
        "runner": {"name": "engine", "image": "vllm/vllm-openai:v0.9", "ports": [{"containerPort": 8000}]}}}


def _get(api: client.ApiClient, ns: str, plural: str, name: str, group: str = GROUP,
         version: str = VERSION) -> dict[str, Any]:
    try:
        found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            group, version, ns, plural, name)
        return found
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return {}
        raise


def _scaled_object(api: client.ApiClient, ns: str, isvc: str) -> dict[str, Any]:
    return _get(api, ns, "scaledobjects", f"scaledobject-{isvc}-engine", "keda.sh", "v1alpha1")


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def _mirrored(mirror: dict[str, Any], kind: str) -> dict[str, Any]:
    """A condition of the service's mirror (its conditions sit at the top of the block)."""
    return next((c for c in mirror.get("conditions") or [] if c.get("type") == kind), {})


def _mirror(api: client.ApiClient, ns: str, isvc: str) -> dict[str, Any]:
    """status.components.engine.autoscaler of the service."""
    found: dict[str, Any] = ((((_get(api, ns, "inferenceservices", isvc).get("status") or {})
                               .get("components") or {}).get("engine") or {}).get("autoscaler") or {})
    return found


@dataclass(frozen=True)
class _Sample:
    at: float
    """Seconds since the load started."""
    hpa_desired: int
    """KEDA's HPA's status.desiredReplicas: the HPA controller's decision."""
    replicas: int
    """The InferenceReplica's spec.replicas: the decision written through /scale."""
    serving: int
    """Instances whose pod is Ready (containers and the serving gate)."""
    live: int
    """Pods of the replica not being deleted."""
    mirrored: int
    """The service's status.components.engine.autoscaler.desiredReplicas."""


class _Watch:
    """The HPA, the replica, its pods and the service's mirror, sampled every POLL s in a thread of its own,
    so each moment is timed by the first sample that shows it, whatever the test waits for meanwhile."""

    def __init__(self, stack: TrafficStack, isvc: str, hpa: str) -> None:
        self.api = stack.cluster.api_client()
        self.ns, self.isvc, self.hpa = stack.namespace, isvc, hpa
        self.replica = f"{isvc}-engine"
        self.samples: list[_Sample] = []
        self.origin = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="keda-service-watch", daemon=True)

    def start(self) -> _Watch:
        self.origin = time.monotonic()
        self._thread.start()
        return self

    def now(self) -> float:
        return time.monotonic() - self.origin

    def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        while not self._stop.is_set():
            at = self.now()
            hpa = _get(self.api, self.ns, "horizontalpodautoscalers", self.hpa, "autoscaling", "v2")
            replica = _get(self.api, self.ns, "inferencereplicas", self.replica)
            pods = [p for p in core.list_namespaced_pod(self.ns, label_selector=f"{REPLICA_LABEL}={self.replica}").items
                    if p.metadata.deletion_timestamp is None]
            self.samples.append(_Sample(
                at, int((hpa.get("status") or {}).get("desiredReplicas") or 0),
                int((replica.get("spec") or {}).get("replicas") or 0), serving_instances(pods), len(pods),
                int(_mirror(self.api, self.ns, self.isvc).get("desiredReplicas") or 0)))
            self._stop.wait(POLL)

    @property
    def latest(self) -> _Sample | None:
        return self.samples[-1] if self.samples else None

    def first(self, predicate: Callable[[_Sample], bool], after: float = 0.0) -> float:
        return next(sample.at for sample in self.samples if sample.at >= after and predicate(sample))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.api.close()  # type: ignore[no-untyped-call]


# The first test of the module also starts the traffic stack and KEDA (about 2 minutes on a loaded 2-core
# machine) before its own waits (each bounded by TIMEOUT): more than the suite's 600 s default.
@pytest.mark.timeout(1200)
def test_the_services_scaled_object_scales_the_engine_under_load_and_back(
        keda_service_stack: KedaServiceStack) -> None:
    stack, keda = keda_service_stack.traffic, keda_service_stack.keda
    api, ns, worker = stack.live.api, stack.namespace, stack.live.worker
    assert keda.operator is not None
    name, policy = f"kscale-{uuid.uuid4().hex[:5]}", "rate-keda"
    create(api, AutoscalerPolicy, manifest(AutoscalerPolicy, _policy(), name=policy), ns)
    create(api, InferenceService, manifest(InferenceService, _service(policy), name=name), ns)

    # What the worker rendered, and KEDA took it: Ready, its HPA made on the replica's /scale.
    scaled = wait_until("the engine's ScaledObject Ready with its HPA", lambda: (
        _condition(found := _scaled_object(api, ns, name), "Ready").get("status") == "True"
        and (found.get("status") or {}).get("hpaName") and found), worker, TIMEOUT)
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                                                "name": f"{name}-engine"}
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["metadata"]["query"] == (f'sum(rate(vllm:request_success_total{{namespace="{ns}",'
                                            f'pod=~"{name}-engine-.*"}}[10s]))')
    assert trigger["metadata"]["serverAddress"] == stack.prometheus.url
    hpa_name = str(scaled["status"]["hpaName"])
    hpa = _get(api, ns, "horizontalpodautoscalers", hpa_name, "autoscaling", "v2")
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "InferenceReplica"
    assert [m["type"] for m in hpa["spec"]["metrics"]] == ["External"]
    wait_until("one serving Instance", lambda: serving_instances([
        p for p in client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"{REPLICA_LABEL}={name}-engine")
        .items if p.metadata.deletion_timestamp is None]) == 1, worker, TIMEOUT)
    wait_until("answered through the Gateway", lambda: stack.traefik.get("/v1/models", stack.host(name))[0] == 200,
               worker, TIMEOUT)
    resolved = wait_until("AutoscalerResolved True", lambda: (
        c := _condition(_get(api, ns, "inferenceservices", name), "AutoscalerResolved")).get("status") == "True"
        and c, worker, TIMEOUT)
    assert resolved["reason"] == "PolicyRendered"
    mirrored = wait_until("the service mirrors KEDA's Ready", lambda: (
        m := _mirror(api, ns, name)).get("class") == "KEDA" and _mirrored(m, "Ready").get("status") == "True"
        and m, worker, TIMEOUT, detail=lambda: _mirror(api, ns, name))
    assert (mirrored["managedBy"], mirrored["specSource"], mirrored["policy"]["name"]) == ("ome", "policy", policy)

    load = BackgroundLoad(LoadSpec(url=stack.traefik.url, host=stack.host(name), rate=RATE, max_seconds=LOAD_SECONDS,
                                   max_requests=int(RATE * LOAD_SECONDS), max_tokens=4))
    watch = _Watch(stack, name, hpa_name)
    load.start()
    watch.start()
    try:
        try:
            wait_until(f"{MAX_REPLICAS} serving Instances, mirrored on the service", lambda: (
                s := watch.latest) is not None and (s.replicas, s.serving, s.mirrored) == (MAX_REPLICAS,) * 3,
                keda.operator, TIMEOUT, interval=POLL)
            active = _mirror(api, ns, name)
            assert _condition(_scaled_object(api, ns, name), "Active").get("status") == "True"
        finally:
            report = load.stop()
        stopped = watch.now()
        wait_until("back to one pod, mirrored", lambda: (s := watch.latest) is not None and s.at > stopped
                   and (s.replicas, s.live, s.mirrored) == (1, 1, 1), keda.operator, TIMEOUT, interval=POLL)
    finally:
        watch.stop()
    assert active["currentReplicas"] >= 1 and _mirrored(active, "Active").get("status") == "True", active
    assert _condition(_get(api, ns, "inferenceservices", name), "AutoscalerResolved").get("status") == "True"
    decided = watch.first(lambda s: s.hpa_desired > 1)
    written = watch.first(lambda s: s.replicas > 1)
    first_step = next(s.replicas for s in watch.samples if s.replicas > 1)
    wanted = watch.first(lambda s: s.replicas == MAX_REPLICAS)
    serving = watch.first(lambda s: s.serving == MAX_REPLICAS)
    mirrored_up = watch.first(lambda s: s.mirrored == MAX_REPLICAS)
    down_decided = watch.first(lambda s: s.replicas == 1, after=stopped) - stopped
    down_done = watch.first(lambda s: s.live == 1 and s.replicas == 1, after=stopped) - stopped
    print(f"\nKEDA on the service's ScaledObject, {RATE:.0f} req/s, threshold {THRESHOLD}/replica, sampled every "
          f"{POLL} s: from the load's start, HPA desired > 1 at {decided:.1f} s, replica scaled at {written:.1f} s "
          f"(to {first_step}), {MAX_REPLICAS} wanted {wanted:.1f} s, {MAX_REPLICAS} serving {serving:.1f} s, "
          f"service mirrors {MAX_REPLICAS} {mirrored_up:.1f} s; from the load's stop ({stopped:.1f} s), back to 1 "
          f"decided {down_decided:.1f} s, one pod left {down_done:.1f} s; load: {report.total} requests, "
          f"{report.succeeded} succeeded, {report.failed} failed, {report.achieved_rate:.1f} req/s; answered by pod "
          f"{sorted(report.by_pod.values(), reverse=True)}")
    assert report.failed == 0, failures(report)
    assert len(report.by_pod) >= 2, report.by_pod


def test_a_trigger_keda_cannot_run_shows_on_the_service(keda_service_stack: KedaServiceStack) -> None:
    stack = keda_service_stack.traffic
    api, ns, worker = stack.live.api, stack.namespace, stack.live.worker
    name, policy = f"krefused-{uuid.uuid4().hex[:5]}", "no-such-scaler"
    create(api, AutoscalerPolicy, manifest(AutoscalerPolicy, _policy("no-such-scaler"), name=policy), ns)
    create(api, InferenceService, manifest(InferenceService, _service(policy), name=name), ns)
    refused = wait_until("KEDA refuses the ScaledObject", lambda: (
        c := _condition(_scaled_object(api, ns, name), "Ready")).get("status") == "False" and c, worker, TIMEOUT)
    assert "no-such-scaler" in refused["message"], refused
    shown = wait_until("the service shows KEDA's refusal", lambda: (
        c := _mirrored(_mirror(api, ns, name), "Ready")).get("status") == "False" and c, worker, TIMEOUT,
        detail=lambda: _mirror(api, ns, name))
    assert (shown["reason"], shown["message"]) == (refused["reason"], refused["message"])
    assert shown["lastTransitionTime"]
    # The product rendered what the policy says: its own condition stays True; the refusal is KEDA's.
    resolved = _condition(_get(api, ns, "inferenceservices", name), "AutoscalerResolved")
    assert (resolved.get("status"), resolved.get("reason")) == ("True", "PolicyRendered")
    print(f"\nKEDA's refusal on the service: {shown['reason']}: {shown['message']}")


def _revision_counts(api: client.ApiClient, ns: str, isvc: str) -> tuple[int, int]:
    """(spec.replicas, readyReplicas) summed over the engine's revision Deployments `<isvc>-engine-rev-<hash>`."""
    items = [d for d in client.AppsV1Api(api).list_namespaced_deployment(ns).items
             if d.metadata.name.startswith(f"{isvc}-engine-rev-") and d.metadata.deletion_timestamp is None]
    return sum(d.spec.replicas or 0 for d in items), sum((d.status.ready_replicas or 0) for d in items)


@pytest.mark.timeout(900)
def test_a_raw_deployment_engine_scales_on_its_scaled_object_under_load_and_back(
        keda_service_stack: KedaServiceStack) -> None:
    """The RawDeployment path: the same policy, the ScaledObject on the Deployment of the revision carrying the
    engine's traffic (its pods `<isvc>-engine-rev-<hash>-...` match the same query); KEDA's HPA writes that
    Deployment's replicas and the service leaves them to it."""
    stack, keda = keda_service_stack.traffic, keda_service_stack.keda
    api, ns, worker = stack.live.api, stack.namespace, stack.live.worker
    assert keda.operator is not None
    name, policy = f"kraw-{uuid.uuid4().hex[:5]}", "rate-keda-raw"
    create(api, AutoscalerPolicy, manifest(AutoscalerPolicy, _policy(), name=policy), ns)
    create(api, InferenceService, manifest(InferenceService, {**_service(policy), "deploymentMode": "RawDeployment"},
                                           name=name), ns)
    scaled = wait_until("the engine's ScaledObject Ready on the revision's Deployment", lambda: (
        _condition(found := _scaled_object(api, ns, name), "Ready").get("status") == "True"
        and (found.get("status") or {}).get("hpaName") and found), worker, TIMEOUT)
    target = scaled["spec"]["scaleTargetRef"]
    assert target["kind"] == "Deployment" and target["name"].startswith(f"{name}-engine-rev-"), target
    wait_until("answered through the Gateway", lambda: stack.traefik.get("/v1/models", stack.host(name))[0] == 200,
               worker, TIMEOUT)
    wait_until("one Ready engine pod", lambda: _revision_counts(api, ns, name) == (1, 1), worker, TIMEOUT)
    hpa_name = str(scaled["status"]["hpaName"])
    follow = _MirrorLag(api, ns, name, hpa_name, MAX_REPLICAS)
    load = BackgroundLoad(LoadSpec(url=stack.traefik.url, host=stack.host(name), rate=RATE, max_seconds=LOAD_SECONDS,
                                   max_requests=int(RATE * LOAD_SECONDS), max_tokens=4))
    started = time.monotonic()
    load.start()
    follow.start()
    try:
        wait_until(f"{MAX_REPLICAS} Ready engine pods", lambda: _revision_counts(api, ns, name) == (MAX_REPLICAS,) * 2,
                   keda.operator, TIMEOUT, interval=POLL)
        up = time.monotonic() - started
        # KEDA's HPA scaling the revision's Deployment is no event of the service: the bridge's HPA watch wakes
        # it (replica-changed), and its mirror follows within MIRROR_DEADLINE, far below its periodic look.
        wait_until(f"the mirror follows KEDA's HPA to {MAX_REPLICAS}", follow.followed, worker, MIRROR_DEADLINE,
                   interval=POLL, detail=lambda: _mirror(api, ns, name))
        mirror = _mirror(api, ns, name)
    finally:
        report = load.stop()
        follow.stop()
    stopped = time.monotonic()
    down_follow = _MirrorLag(api, ns, name, hpa_name, 1).start()
    try:
        wait_until("back to one engine pod", lambda: _revision_counts(api, ns, name) == (1, 1), keda.operator,
                   TIMEOUT, interval=POLL)
        down = time.monotonic() - stopped
        wait_until("the mirror follows KEDA's HPA back to 1", down_follow.followed, worker, MIRROR_DEADLINE,
                   interval=POLL, detail=lambda: _mirror(api, ns, name))
    finally:
        down_follow.stop()
    assert (mirror["class"], mirror["managedBy"], mirror["specSource"]) == ("KEDA", "ome", "policy")
    assert (mirror["desiredReplicas"], mirror["currentReplicas"]) == (MAX_REPLICAS, MAX_REPLICAS), mirror
    status = _get(api, ns, "inferenceservices", name).get("status") or {}
    assert ((status.get("components") or {}).get("engine") or {}).get("scaleTargetRef", {}).get("name") \
        == target["name"]
    print(f"\nKEDA on a RawDeployment engine: {MAX_REPLICAS} Ready {up:.1f} s after the load's start, back to 1 "
          f"{down:.1f} s after its stop; load: {report.total} requests, {report.failed} failed; the service's "
          f"mirror (desiredReplicas, currentReplicas) followed KEDA's HPA to {MAX_REPLICAS} {follow.lag():.1f} s "
          f"after the HPA showed it, back to 1 {down_follow.lag():.1f} s after (sampled every {POLL} s)")
    assert report.failed == 0, failures(report)


class _MirrorLag:
    """KEDA's HPA and the service's mirror of it, sampled every POLL s in a thread of its own from `start()`: when
    the HPA first showed (desiredReplicas, currentReplicas) = (n, n), and when status.components.engine.autoscaler
    first did, so the mirror's lag behind the scaler is timed whatever the test waits for meanwhile."""

    def __init__(self, api: client.ApiClient, ns: str, isvc: str, hpa: str, n: int) -> None:
        self.api, self.ns, self.isvc, self.hpa, self.n = api, ns, isvc, hpa, n
        self.hpa_at: float | None = None
        self.mirror_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mirror-lag", daemon=True)

    def start(self) -> _MirrorLag:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set() and self.mirror_at is None:
            now = time.monotonic()
            status = (_get(self.api, self.ns, "horizontalpodautoscalers", self.hpa, "autoscaling", "v2")
                      .get("status") or {})
            if self.hpa_at is None and (status.get("desiredReplicas"), status.get("currentReplicas")) == (self.n,) * 2:
                self.hpa_at = now
            mirror = _mirror(self.api, self.ns, self.isvc)
            if (mirror.get("desiredReplicas"), mirror.get("currentReplicas")) == (self.n,) * 2:
                self.mirror_at = now
            self._stop.wait(POLL)

    def followed(self) -> bool:
        return self.mirror_at is not None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def lag(self) -> float:
        """Seconds from the HPA to the mirror (the HPA is read first in each sample: both in one sample is 0)."""
        assert self.mirror_at is not None and self.hpa_at is not None
        return self.mirror_at - self.hpa_at
