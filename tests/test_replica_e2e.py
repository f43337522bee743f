"""The InferenceReplica engine end to end: worker and bridge as processes under the chart's
identities, the local cluster with kwok playing the kubelets (its stages make pods fail, restart or
stay unready: devstack/kube.py). What the time-skipping tests prove on the fake
(tests/test_replica_workflow.py) is shown here on the real apiserver for:

- Instances, their pods, headless Service and ControllerRevision, status, and the scale subresource;
- SurgeThenDrain never leaving fewer Instances in rotation than desired; RecreatePod holding
  maxUnavailable;
- InPlaceIfPossible patching the pods of an image-only change (same pods) and recreating them for
  any other change; InPlaceOnly holding a change it cannot apply (rolloutHold Held, a Held
  RetryBlock, FailedUpdate with the reason, a Warning InPlaceUpdateImpossible) with the pods untouched;
- a failed pod and a gang that lost a worker recreated; a container restart after Ready recreating
  the Instance only under RecreateInstanceOnPodRestart;
- partition and rollbackToRevision; a failing revision's backoff surviving a worker restart;
- Recover repairing while paused and Freeze not; a worker killed during operations duplicating
  nothing; a ResourceQuota refusal parking the Create; revisionHistoryLimit pruning;
- a replica rendered from a runtime, held while its model does not exist.

While a rollout runs, a sampler thread reads the pods every 100 ms and counts the Instances whose
every pod is Ready and in rotation (ome.io/serving True): the budget is checked against every
sample, not only the end state."""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest
from kubernetes import client

from devstack.kube import POD_RESTART_ANNOTATION, POD_UNREADY_ANNOTATION
from devstack.process import ManagedProcess
from servingops.api_models.ome.instance_keys import INCARNATION_LABEL, INSTANCE_LABEL, REPLICA_LABEL, SERVING_GATE
from testkit.waiting import hold, wait_until
from tests.support.replica_stack import (
    GROUP,
    PLURAL,
    VERSION,
    Replica,
    replica_stack,
    restart,
    runner,
    serving_instances,
)

__all__ = ["replica_stack"]  # the fixture, reused
pytestmark = pytest.mark.e2e
T = TypeVar("T")


class Sampler:
    """Counts serving Instances every 100 ms on a thread while a rollout runs."""

    def __init__(self, replica: Replica, per_instance: int = 1) -> None:
        self.replica, self.per = replica, per_instance
        self.samples: list[int] = []
        self.pod_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = self.replica.pods()
            self.samples.append(serving_instances(pods, self.per))
            self.pod_peak = max(self.pod_peak, len(pods))
            time.sleep(0.1)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def new(api: client.ApiClient, stack: tuple[str, ManagedProcess], prefix: str) -> Replica:
    ns, worker = stack
    return Replica(api, ns, worker, f"{prefix}-{uuid.uuid4().hex[:5]}")


def test_instances_scale_and_status(kube_api: client.ApiClient, replica_stack: tuple[str, ManagedProcess]) -> None:
    r = new(kube_api, replica_stack, "ir")
    r.create(replicas=3)
    status = r.settle(3)
    names = sorted(p.metadata.name for p in r.pods())
    assert names == [f"{r.name}-{i}" for i in range(3)]
    pod = r.core.read_namespaced_pod(f"{r.name}-1", r.ns)
    assert pod.metadata.labels[INSTANCE_LABEL] == "1" and pod.metadata.labels[INCARNATION_LABEL] == "0"
    assert pod.metadata.labels["controller-revision-hash"] == status["updateRevision"]
    assert [g.condition_type for g in pod.spec.readiness_gates] == [SERVING_GATE]
    assert pod.spec.subdomain == r.name and pod.spec.hostname == pod.metadata.name
    assert {e.name: e.value for e in pod.spec.containers[0].env}["OME_RUNNER"] == "default"
    assert pod.metadata.owner_references[0].kind == "InferenceReplica"
    headless = r.core.read_namespaced_service(r.name, r.ns)
    assert headless.spec.cluster_ip == "None"
    assert status["labelSelector"] == f"ome.io/component=engine,{REPLICA_LABEL}={r.name}"
    assert status["readyReplicas"] == status["servingReplicas"] == status["updatedReadyReplicas"] == 3
    revision = client.AppsV1Api(kube_api).read_namespaced_controller_revision(status["updateRevision"], r.ns)
    assert revision.metadata.owner_references[0].name == r.name

    # The scale subresource, as kubectl scale and an HPA use it.
    scale = r.custom.get_namespaced_custom_object_scale(GROUP, VERSION, r.ns, PLURAL, r.name)
    assert scale["status"]["replicas"] == 3 and scale["status"]["selector"] == status["labelSelector"]
    r.custom.patch_namespaced_custom_object_scale(GROUP, VERSION, r.ns, PLURAL, r.name, {"spec": {"replicas": 5}})
    r.settle(5, "scaled up through /scale")
    r.custom.patch_namespaced_custom_object_scale(GROUP, VERSION, r.ns, PLURAL, r.name, {"spec": {"replicas": 2}})
    r.settle(2, "scaled down through /scale")
    assert sorted(row["index"] for row in r.rows()) == [0, 1], "the highest indexes go first"
    assert sorted(p.metadata.name for p in r.pods()) == [f"{r.name}-0", f"{r.name}-1"]


def test_surge_then_drain_never_leaves_rotation(kube_api: client.ApiClient,
                                                replica_stack: tuple[str, ManagedProcess]) -> None:
    r = new(kube_api, replica_stack, "surge")
    r.create(replicas=3, lifecycle={"updateStrategy": {"rollingUpdate": {"maxSurge": 1}}})
    first = r.settle(3)["updateRevision"]
    with Sampler(r) as sampler:
        r.patch({"runners": [runner(image="vllm/vllm-openai:v0.10")]})
        r.wait("rolled", lambda: r.status.get("updateRevision") != first and r.settled(3, r.status["updateRevision"]))
    assert min(sampler.samples) == 3, f"a sample saw fewer than 3 serving Instances: {min(sampler.samples)}"
    assert sampler.pod_peak <= 4
    assert sorted(p.metadata.name for p in r.pods()) == [f"{r.name}-{i}-s1" for i in range(3)]


def test_recreate_update_holds_max_unavailable(kube_api: client.ApiClient,
                                               replica_stack: tuple[str, ManagedProcess]) -> None:
    r = new(kube_api, replica_stack, "recreate")
    r.create(replicas=4, lifecycle={"updateStrategy": {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 1}}})
    first = r.settle(4)["updateRevision"]
    with Sampler(r) as sampler:
        r.patch({"runners": [runner(env="b")]})
        r.wait("recreated",
               lambda: r.status.get("updateRevision") != first and r.settled(4, r.status["updateRevision"]))
    assert min(sampler.samples) >= 3, f"more than maxUnavailable=1 out of rotation: {min(sampler.samples)}"
    assert all(row["incarnation"] == 1 for row in r.rows())


def _uids(r: Replica) -> dict[str, str]:
    return {p.metadata.name: p.metadata.uid for p in r.pods()}


def _seen(r: Replica) -> str:
    """The replica's status and its pods, for a failure message."""
    pods = [(p.metadata.name, p.metadata.uid[:8], p.spec.containers[0].image, dict(p.metadata.labels),
             {c.type: c.status for c in p.status.conditions or []}) for p in r.pods()]
    return f"status: {r.status}\npods: {pods}"


def _wait(r: Replica, what: str, probe: Callable[[], T], timeout: float = 120) -> T:
    """Replica.wait, failing with the status and the pods."""
    return wait_until(f"{r.name}: {what}", probe, r.worker, timeout, detail=lambda: _seen(r))


def _events(r: Replica, reason: str) -> list[client.CoreV1Event]:
    items = r.core.list_namespaced_event(
        r.ns, field_selector=f"involvedObject.kind=InferenceReplica,involvedObject.name={r.name}").items
    return [e for e in items if e.reason == reason]


def test_in_place_when_only_the_image_changes_and_recreate_otherwise(
        kube_api: client.ApiClient, replica_stack: tuple[str, ManagedProcess]) -> None:
    """InPlaceIfPossible: an image-only change patches the running pods (same uids, incarnation 0);
    an env change cannot be applied in place, so the Instances are recreated (incarnation 1)."""
    r = new(kube_api, replica_stack, "inplace")
    r.create(replicas=2, lifecycle={"updateStrategy": {"type": "InPlaceIfPossible",
                                                       "rollingUpdate": {"maxUnavailable": 1}}})
    first = r.settle(2)["updateRevision"]
    uids = _uids(r)
    assert sorted(uids) == [f"{r.name}-0", f"{r.name}-1"]

    r.patch({"runners": [runner(image="vllm/vllm-openai:v0.10")]})
    second = _wait(r, "updated in place", lambda: (s := r.status).get("updateRevision") != first
                    and s.get("updatedReplicas") == 2 and r.settled(2, s["updateRevision"]) and s["updateRevision"])
    assert _uids(r) == uids, "an image-only change must patch the pods, not replace them"
    for pod in r.pods():
        assert pod.spec.containers[0].image == "vllm/vllm-openai:v0.10", pod.metadata.name
        assert pod.metadata.labels["controller-revision-hash"] == second, pod.metadata.name
        assert pod.metadata.labels[INCARNATION_LABEL] == "0", pod.metadata.name
    assert all(row.get("incarnation", 0) == 0 and row["runningRevision"] == second for row in r.rows()), r.rows()

    r.patch({"runners": [runner(image="vllm/vllm-openai:v0.10", env="b")]})
    third = _wait(r, "an env change recreates", lambda: (s := r.status).get("updateRevision") not in (first, second)
                   and all(row.get("incarnation") == 1 for row in r.rows()) and r.settled(2, s["updateRevision"])
                   and s["updateRevision"])
    pods = r.pods()
    assert not set(_uids(r).values()) & set(uids.values()), "an env change must recreate the pods"
    assert {p.metadata.labels[INCARNATION_LABEL] for p in pods} == {"1"}
    assert {p.metadata.labels["controller-revision-hash"] for p in pods} == {third}
    assert all({e.name: e.value for e in p.spec.containers[0].env}["MODE"] == "b" for p in pods)


def test_in_place_only_holds_a_change_it_cannot_apply(kube_api: client.ApiClient,
                                                      replica_stack: tuple[str, ManagedProcess]) -> None:
    """InPlaceOnly: an env change cannot be applied in place; the rollout is held on it (rolloutHold
    Held, a Held RetryBlock, FailedUpdate True, a Warning InPlaceUpdateImpossible) with the reason,
    every Instance keeps running the first revision, and at least one serves throughout."""
    r = new(kube_api, replica_stack, "inplaceonly")
    r.create(replicas=2, lifecycle={"updateStrategy": {"type": "InPlaceOnly", "rollingUpdate": {"maxUnavailable": 1}}})
    first = r.settle(2)["updateRevision"]
    uids = _uids(r)
    with Sampler(r) as sampler:
        r.patch({"runners": [runner(env="b")]})
        hold = _wait(r, "held", lambda: (h := r.status.get("rolloutHold") or {}).get("gate") == "Held" and h)
        _wait(r, "the Instances back in rotation on the first revision",
               lambda: all(row["runningRevision"] == first and "operation" not in row for row in r.rows())
               and serving_instances(r.pods()) == 2)
    status = r.status
    second = status["updateRevision"]
    assert second != first
    assert "InPlaceOnly cannot apply" in hold["reason"] and "env" in hold["reason"], hold
    assert hold.get("target") == second, hold
    assert [b["state"] for b in status["retryBlocks"]] == ["Held"], status["retryBlocks"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["FailedUpdate"]["status"] == "True", conditions["FailedUpdate"]
    assert conditions["FailedUpdate"]["reason"] == "RetryBlockHeld", conditions["FailedUpdate"]
    assert "InPlaceOnly cannot apply" in conditions["FailedUpdate"]["message"], conditions["FailedUpdate"]
    assert status["currentRevision"] == first
    assert _uids(r) == uids, "InPlaceOnly must never recreate a pod"
    assert all({e.name: e.value for e in p.spec.containers[0].env}["MODE"] == "a" for p in r.pods())
    assert min(sampler.samples) >= 1, f"a sample saw no serving Instance: {min(sampler.samples)}"
    warnings = _wait(r, "a Warning InPlaceUpdateImpossible", lambda: _events(r, "InPlaceUpdateImpossible"))
    assert all(e.type == "Warning" and "InPlaceOnly cannot apply" in e.message for e in warnings), warnings


def test_pod_failure_and_gang_loss_recreate(kube_api: client.ApiClient,
                                            replica_stack: tuple[str, ManagedProcess]) -> None:
    from devstack.kube import POD_FAIL_ANNOTATION

    r = new(kube_api, replica_stack, "repair")
    r.create(replicas=2)
    r.settle(2)
    r.core.patch_namespaced_pod(f"{r.name}-1", r.ns, {"metadata": {"annotations": {POD_FAIL_ANNOTATION: "true"}}})
    r.wait("recreated after the failure", lambda: any(row["index"] == 1 and row.get("incarnation") == 1
                                                      for row in r.rows()) and r.settled(2))
    row = next(row for row in r.rows() if row["index"] == 1)
    assert row["lastFailure"]["podName"] == f"{r.name}-1"

    g = new(kube_api, replica_stack, "gang")
    g.create(replicas=1, runners=[runner("leader"), runner("worker", size=2)], topologyKey="kubernetes.io/hostname")
    g.settle(1)
    assert len(g.pods()) == 3
    worker = g.core.read_namespaced_pod(f"{g.name}-0-w1", g.ns)
    env = {e.name: e.value for e in worker.spec.containers[0].env}
    assert env["OME_RUNNER"] == "worker" and env["OME_LEADER_ADDRESS"] == f"{g.name}-0.{g.name}"
    assert worker.spec.affinity.pod_affinity.required_during_scheduling_ignored_during_execution
    g.core.delete_namespaced_pod(f"{g.name}-0-w2", g.ns, grace_period_seconds=0)
    g.wait("the gang recreated whole", lambda: g.rows() and g.rows()[0].get("incarnation") == 1 and g.settled(1))
    assert {p.metadata.labels[INCARNATION_LABEL] for p in g.pods()} == {"1"}


def _restart_pod(r: Replica, pod: str) -> None:
    """kwok reports the pod's first container OOM-killed once, then running again (devstack/kube.py)."""
    r.core.patch_namespaced_pod(pod, r.ns, {"metadata": {"annotations": {POD_RESTART_ANNOTATION: "1"}}})


def _restarts(r: Replica, pod: str) -> int | None:
    """The first container's restartCount of a live pod (None: no such pod, or no status yet)."""
    found = next((p for p in r.pods() if p.metadata.name == pod), None)
    statuses = (found.status.container_statuses or []) if found is not None else []
    return statuses[0].restart_count if statuses else None


def _past_ready_since(r: Replica) -> None:
    """kwok stamps a restart with whole seconds, like readySince: a restart in the same second as
    readySince would read as boot; wait until the clock is past that second."""
    since = datetime.fromisoformat(r.rows()[0]["readySince"].replace("Z", "+00:00"))
    _wait(r, "a second past readySince", lambda: datetime.now(UTC) >= since + timedelta(seconds=1.5))


def test_restart_after_ready_recreates_only_with_the_policy(kube_api: client.ApiClient,
                                                            replica_stack: tuple[str, ManagedProcess]) -> None:
    """RecreateInstanceOnPodRestart: a container restart after Ready recreates the Instance
    (incarnation 1, a new pod). Without it (single pod: policy None) the same restart leaves the
    Instance and its pod alone."""
    r = new(kube_api, replica_stack, "restart")
    r.create(replicas=1, lifecycle={"restartPolicy": "RecreateInstanceOnPodRestart"})
    r.settle(1)
    pod = f"{r.name}-0"
    [before] = _uids(r).values()
    _past_ready_since(r)
    _restart_pod(r, pod)
    _wait(r, "recreated on restart", lambda: r.rows() and r.rows()[0].get("incarnation") == 1 and r.settled(1))
    pods = r.pods()
    assert [p.metadata.labels[INCARNATION_LABEL] for p in pods] == ["1"]
    assert pods[0].metadata.uid != before
    row = r.rows()[0]
    assert row["lastFailure"]["podName"] == pod and row["lastFailure"].get("reason") == "OOMKilled", row

    n = new(kube_api, replica_stack, "norestart")
    n.create(replicas=1)  # a single-pod Instance: restartPolicy None by default
    n.settle(1)
    [kept] = _uids(n).values()
    _past_ready_since(n)
    _restart_pod(n, f"{n.name}-0")
    _wait(n, "the restart reported on the pod", lambda: _restarts(n, f"{n.name}-0") == 1)
    # What a recreate would show within seconds above must not happen here.
    hold(f"{n.name}: incarnation 0 and the same pod (no replacement without the policy)",
         lambda: n.rows()[0].get("incarnation", 0) == 0 and list(_uids(n).values()) == [kept], 15, n.worker,
         detail=lambda: f"rows: {n.rows()}\n{_seen(n)}")
    assert n.settled(1), n.status


def test_partition_and_rollback(kube_api: client.ApiClient, replica_stack: tuple[str, ManagedProcess]) -> None:
    r = new(kube_api, replica_stack, "canary")
    r.create(replicas=4)
    first = r.settle(4)["updateRevision"]
    r.patch({"runners": [runner(image="vllm/vllm-openai:v0.10")], "pacing": {"partition": 3}})
    r.wait("one Instance updated", lambda: r.status.get("updatedReplicas") == 1
           and not any("operation" in row for row in r.rows()))
    second = r.status["updateRevision"]
    assert {row["index"]: row["runningRevision"] for row in r.rows()} == {0: first, 1: first, 2: first, 3: second}
    assert r.status["rolloutHold"]["gate"] == "Held"
    r.patch({"pacing": {"partition": 0, "rollbackToRevision": first}})
    r.wait("rolled back", lambda: all(row["runningRevision"] == first for row in r.rows())
           and not any("operation" in row for row in r.rows()) and len(r.rows()) == 4)
    assert r.status["updateRevision"] == second and r.status["currentRevision"] == first


def test_failing_revision_backoff_survives_a_worker_restart(
        kube_api: client.ApiClient, replica_stack: tuple[str, ManagedProcess]) -> None:
    r = new(kube_api, replica_stack, "backoff")
    r.create(replicas=2, lifecycle={"updateStrategy": {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 1}},
                                    "instanceReadyTimeout": "5s"})
    r.settle(2)
    r.patch({"runners": [runner(annotations={POD_UNREADY_ANNOTATION: "true"})]})
    block = r.wait("a RetryBlock", lambda: (r.status.get("retryBlocks") or [None])[0])
    assert block["state"] == "Backoff" and block["nextRetryAt"]
    conditions = {c["type"]: c for c in r.status["conditions"]}
    assert conditions["FailedUpdate"]["status"] == "True"
    assert r.status["rolloutHold"]["gate"] == "RetryBlock"
    assert r.status["servingReplicas"] >= 1
    # The worker dies and comes back: the backoff's nextRetryAt is persisted, not recomputed.
    _, worker = replica_stack
    restart(worker)
    r.wait("a second attempt", lambda: ((r.status.get("retryBlocks") or [{}])[0].get("attemptsStarted") or 0) >= 2,
           timeout=90)
    assert (r.status.get("retryBlocks") or [{}])[0].get("firstFailureAt") == block.get("firstFailureAt")
    r.patch({"runners": [runner(image="vllm/vllm-openai:v0.11")]})
    r.wait("a fixed spec rolls out", lambda: r.settled(2, r.status.get("updateRevision")))
    assert not r.status.get("retryBlocks")


def test_freeze_does_not_repair_and_recover_does(kube_api: client.ApiClient,
                                                 replica_stack: tuple[str, ManagedProcess]) -> None:
    r = new(kube_api, replica_stack, "pause")
    r.create(replicas=2)
    first = r.settle(2)["updateRevision"]
    r.patch({"paused": True, "runners": [runner(image="vllm/vllm-openai:v0.10")]})
    r.wait("paused", lambda: {c["type"]: c for c in r.status.get("conditions") or []}
           .get("Progressing", {}).get("reason") == "Paused")
    r.core.delete_namespaced_pod(f"{r.name}-0", r.ns, grace_period_seconds=0)
    r.wait("repaired under Recover", lambda: r.settled(2))
    assert all(row["runningRevision"] == first for row in r.rows())
    r.patch({"pauseMode": "Freeze"})
    r.wait("frozen", lambda: r.get()["status"].get("observedGeneration") == r.get()["metadata"]["generation"])
    r.core.delete_namespaced_pod(f"{r.name}-1", r.ns, grace_period_seconds=0)
    r.wait("demoted to Pending", lambda: any(row["index"] == 1 and row["phase"] == "Pending" for row in r.rows()))
    time.sleep(3)
    assert f"{r.name}-1" not in {p.metadata.name for p in r.pods()}
    r.patch({"paused": False, "pauseMode": None})
    r.wait("unfrozen: repaired and rolled", lambda: r.settled(2, r.status.get("updateRevision"))
           and r.status.get("updateRevision") != first)


def test_worker_killed_during_operations_duplicates_nothing(
        kube_api: client.ApiClient, replica_stack: tuple[str, ManagedProcess]) -> None:
    r = new(kube_api, replica_stack, "crash")
    r.create(replicas=3, lifecycle={"updateStrategy": {"type": "RecreatePod", "rollingUpdate": {"maxUnavailable": 1}}})
    r.settle(3)
    ns, worker = replica_stack
    seen: dict[str, set[str]] = {}
    stop = threading.Event()

    def record() -> None:
        while not stop.is_set():
            for pod in r.core.list_namespaced_pod(ns, label_selector=f"{REPLICA_LABEL}={r.name}").items:
                seen.setdefault(pod.metadata.name, set()).add(pod.metadata.uid)
            time.sleep(0.05)

    watcher = threading.Thread(target=record, daemon=True)
    watcher.start()
    try:
        r.patch({"runners": [runner(env="crash")]})
        for _ in range(4):  # kill the worker at whatever step the operations are in
            time.sleep(1.5)
            restart(worker)
        r.wait("rolled despite the kills", lambda: r.settled(3, r.status.get("updateRevision")), timeout=180)
    finally:
        stop.set()
        watcher.join(timeout=5)
    # Each Instance was recreated once (incarnation 1): each name carried at most 2 pods (old, new).
    assert all(row["incarnation"] == 1 for row in r.rows()), r.rows()
    assert all(len(uids) <= 2 for uids in seen.values()), {n: len(u) for n, u in seen.items()}
    assert len(r.pods()) == 3


def test_quota_refusal_parks_the_operation(kube_api: client.ApiClient,
                                           replica_stack: tuple[str, ManagedProcess]) -> None:
    """A real ResourceQuota refuses the third pod: the Create waits (QuotaExceeded, deadline parked),
    FailedScale is True with the apiserver's message in a Warning; more quota lets it finish."""
    _, worker = replica_stack
    core = client.CoreV1Api(kube_api)
    ns = f"quota-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    core.create_namespaced_resource_quota(ns, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="pods"), spec=client.V1ResourceQuotaSpec(hard={"pods": "2"})))
    r = Replica(kube_api, ns, worker, f"quota-{uuid.uuid4().hex[:5]}")
    r.create(replicas=3, lifecycle={"instanceReadyTimeout": "10s"})
    r.wait("refused by the quota", lambda: {c["type"]: c for c in r.status.get("conditions") or []}
           .get("FailedScale", {}).get("status") == "True")
    waiting = r.wait("the Create waits", lambda: next((row for row in r.rows() if (row.get("operation") or {})
                                                       .get("waiting") == "QuotaExceeded"), None))
    assert waiting["operation"].get("capacityRefusedAt") and "deadline" not in waiting["operation"]
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={r.name}").items
    assert any(e.reason == "FailedCreate" and "exceeded quota" in e.message for e in events)
    time.sleep(12)  # past instanceReadyTimeout: a parked clock does not fail the Instance
    assert not r.status.get("retryBlocks")
    core.patch_namespaced_resource_quota("pods", ns, {"spec": {"hard": {"pods": "3"}}})
    r.settle(3, "created once the quota allows")
    conditions = {c["type"]: c for c in r.status["conditions"]}
    assert conditions["FailedScale"]["status"] == "False"


def test_revision_history_limit_keeps_live_revisions(kube_api: client.ApiClient,
                                                     replica_stack: tuple[str, ManagedProcess]) -> None:
    r = new(kube_api, replica_stack, "history")
    r.create(replicas=1, revisionHistoryLimit=1)
    revisions = [r.settle(1)["updateRevision"]]
    for tag in ("v0.10", "v0.11", "v0.12"):
        r.patch({"runners": [runner(image=f"vllm/vllm-openai:{tag}")]})
        r.wait(f"rolled to {tag}", lambda: r.status.get("updateRevision") not in revisions
               and r.settled(1, r.status.get("updateRevision")))
        revisions.append(r.status["updateRevision"])
    apps = client.AppsV1Api(kube_api)

    def kept() -> list[str]:
        return sorted(cr.metadata.name for cr in apps.list_namespaced_controller_revision(r.ns).items
                      if cr.metadata.name.startswith(r.name))

    r.wait("pruned to the live one and one more", lambda: kept() == sorted(revisions[-2:]))


def test_a_replica_rendered_from_a_runtime(kube_api: client.ApiClient,
                                          replica_stack: tuple[str, ManagedProcess]) -> None:
    """No runners: the runtime's engine piece renders the pods; a model that does not exist holds the
    replica with Progressing False and the reason, and the replica serves once the refs render."""
    runtime = f"srt-{uuid.uuid4().hex[:6]}"
    custom = client.CustomObjectsApi(kube_api)
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterServingRuntime", "metadata": {"name": runtime},
        "spec": {"engineConfig": {"runner": {"name": "ome-container", "image": "lmsysorg/sglang:v0.4.6"}}}})
    try:
        r = new(kube_api, replica_stack, "byref")
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceReplica", "metadata": {"name": r.name},
                "spec": {"component": "engine", "replicas": 2, "modelRef": {"name": f"missing-{r.name}"}}}
        r.custom.create_namespaced_custom_object(GROUP, VERSION, r.ns, PLURAL, body)
        held = r.wait("held on the missing model", lambda: next(
            (c for c in r.status.get("conditions") or [] if c["type"] == "Progressing" and c["status"] == "False"),
            None))
        assert held["reason"] == "InvalidSpec" and "ModelNotFound" in held["message"]
        r.custom.patch_namespaced_custom_object(GROUP, VERSION, r.ns, PLURAL, r.name,
                                                {"spec": {"modelRef": None, "runtimeRef": {"name": runtime}}})
        r.settle(2, "rendered from the runtime")
        images = {p.spec.containers[0].image for p in r.pods()}
        assert images == {"lmsysorg/sglang:v0.4.6"}
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", runtime)
