"""The InferenceReplica activities (activities/replica/) against the session's apiserver, run in
Temporal's activity environment as the chart's worker identity (so the worker's RBAC is exercised
by every call), with kwok playing the kubelets and the real scheduler placing the pods.

The cases reach the cluster only through `ReplicaCluster` (a Protocol): this module's
`RealCluster` is the apiserver; the engine's fake cluster can implement the same few methods and
run the same cases (`cluster` fixture), so where the two differ a case says so.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devstack.identities import Identities
from devstack.kube import POD_FAIL_ANNOTATION, POD_RESTART_ANNOTATION
from servingops.activities.replica import pods
from servingops.activities.replica.activities import QUOTA_EXCEEDED, ReplicaActivities
from servingops.activities.replica.revisions import revision_hash
from servingops.activities.replica.types import (
    CreatePodsInput,
    DeletePodsInput,
    EnsureRevisionInput,
    InPlaceInput,
    PodView,
    PruneRevisionsInput,
    ReplicaObservation,
    ReplicaRef,
    RevisionResult,
    SetServingInput,
)
from servingops.api_models.errors import ErrorType
from servingops.api_models.ome import instance_keys as keys
from servingops.api_models.ome.replica import InferenceReplica, Runner
from servingops.api_models.refs import ObjectRef
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as

pytestmark = pytest.mark.integration

DEADLINE = 90.0
"""Generous: the suite may run on a loaded 2-core machine. Only an upper bound, never asserted."""
SETTLE = 3.0
"""Long enough for kwok's stages (no delay but pod-ready-again's 1 s) to have acted on a pod."""
HOSTNAME = "kubernetes.io/hostname"
T = TypeVar("T")


class ReplicaCluster(Protocol):
    """What the cases need of a cluster besides the activities themselves."""

    def activities(self) -> ReplicaActivities: ...
    def namespace(self) -> str: ...
    def create_replica(self, namespace: str, spec: dict[str, Any]) -> ObjectRef: ...
    def patch_replica_spec(self, ref: ObjectRef, patch: dict[str, Any]) -> None: ...
    def delete_replica(self, ref: ObjectRef) -> None: ...
    def pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def revision(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def service(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def put_foreign_revision(self, namespace: str, name: str, data: dict[str, Any]) -> None: ...
    def limit_pods(self, namespace: str, count: int) -> None: ...
    def release_scheduling_gates(self, namespace: str, name: str) -> None: ...
    def settle(self) -> None:
        """Give the kubelets time to act (and to undo what they would undo)."""


class RealCluster:
    def __init__(self, admin: client.ApiClient, worker: client.ApiClient) -> None:
        self.admin, self.worker = admin, worker
        self.core = client.CoreV1Api(admin)
        self.apps = client.AppsV1Api(admin)
        self.custom = client.CustomObjectsApi(admin)
        self.created: list[str] = []

    def activities(self) -> ReplicaActivities:
        return ReplicaActivities(self.worker)

    def namespace(self) -> str:
        name = new_namespace(self.admin, "replica")
        self.created.append(name)
        return name

    def clean_up(self) -> None:
        """Delete the namespaces this module made: their replicas must not be picked up by a later
        module's bridge (bridges follow every namespace) and worked on by its worker."""
        for name in self.created:
            try:
                self.core.delete_namespace(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def create_replica(self, namespace: str, spec: dict[str, Any]) -> ObjectRef:
        obj = create(self.admin, InferenceReplica, manifest(InferenceReplica, spec), namespace)
        return ObjectRef.of(InferenceReplica, obj["metadata"]["name"], namespace, obj["metadata"]["uid"])

    def patch_replica_spec(self, ref: ObjectRef, patch: dict[str, Any]) -> None:
        assert ref.namespace
        self.custom.patch_namespaced_custom_object(ref.group, ref.version, ref.namespace, ref.plural, ref.name,
                                                   {"spec": patch}, _content_type="application/merge-patch+json")

    def delete_replica(self, ref: ObjectRef) -> None:
        assert ref.namespace
        self.custom.delete_namespaced_custom_object(ref.group, ref.version, ref.namespace, ref.plural, ref.name)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._raw(lambda: self.core.read_namespaced_pod(name, namespace))

    def revision(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._raw(lambda: self.apps.read_namespaced_controller_revision(name, namespace))

    def service(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._raw(lambda: self.core.read_namespaced_service(name, namespace))

    def _raw(self, read: Callable[[], Any]) -> dict[str, Any] | None:
        try:
            obj = read()
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(self.admin.sanitize_for_serialization(obj))  # type: ignore[no-untyped-call]

    def put_foreign_revision(self, namespace: str, name: str, data: dict[str, Any]) -> None:
        body: Any = {"metadata": {"name": name}, "data": data, "revision": 1}
        self.apps.create_namespaced_controller_revision(namespace, body)

    def limit_pods(self, namespace: str, count: int) -> None:
        body: Any = {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": str(count)}}}
        self.core.create_namespaced_resource_quota(namespace, body)
        # Admission enforces a quota only once its controller has counted what is there.

        def counted() -> bool:
            status = self.core.read_namespaced_resource_quota("pods", namespace).status
            return status is not None and (status.hard or {}).get("pods") == str(count)

        _wait("the quota counted", counted)

    def release_scheduling_gates(self, namespace: str, name: str) -> None:
        self.core.patch_namespaced_pod(name, namespace, {"spec": {"schedulingGates": None}},
                                       _content_type="application/merge-patch+json")

    def settle(self) -> None:
        time.sleep(SETTLE)


@pytest.fixture(scope="module")
def cluster(kube_api: client.ApiClient, chart_identities: Identities) -> Iterator[ReplicaCluster]:
    with api_as(chart_identities.worker) as worker:
        real = RealCluster(kube_api, worker)
        yield real
        real.clean_up()


@pytest.fixture(scope="module")
def ns(cluster: ReplicaCluster) -> str:
    return cluster.namespace()


@pytest.fixture(scope="module")
def acts(cluster: ReplicaCluster) -> ReplicaActivities:
    return cluster.activities()


# -- helpers ----------------------------------------------------------------------------------------


def _run(fn: Callable[..., T], *args: Any) -> T:
    return ActivityEnvironment().run(fn, *args)


def _refused(fn: Callable[..., Any], arg: Any) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        _run(fn, arg)
    return info.value


def _wait(what: str, probe: Callable[[], T | None]) -> T:
    end = time.monotonic() + DEADLINE
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"not reached within {DEADLINE}s: {what}")
        time.sleep(0.3)


def _template(image: str = "registry.invalid/engine:v1", annotations: dict[str, str] | None = None,
              **container: Any) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "chat"}, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "main", "image": image, "env": [{"name": "MODE", "value": "serve"}],
                                     **container}]}}


def _single(image: str = "registry.invalid/engine:v1", **extra: Any) -> dict[str, Any]:
    return {"component": "engine", "runners": [{"name": "default", "size": 1, "template": _template(image)}], **extra}


def _gang(workers: int, **extra: Any) -> dict[str, Any]:
    return {"component": "engine", "runners": [
        {"name": "leader", "size": 1, "template": _template(ports=[{"name": "http", "containerPort": 8000}])},
        {"name": "worker", "size": workers, "template": _template("registry.invalid/worker:v1")}], **extra}


def _replica(cluster: ReplicaCluster, ns: str, spec: dict[str, Any]) -> ReplicaRef:
    ref = cluster.create_replica(ns, spec)
    return ReplicaRef(ref=ref, base=ref.name)


def _revision(acts: ReplicaActivities, replica: ReplicaRef, collision_count: int = 0) -> RevisionResult:
    return _run(acts.ensure_revision, EnsureRevisionInput(replica=replica, collision_count=collision_count))


def _observe(acts: ReplicaActivities, replica: ReplicaRef) -> ReplicaObservation:
    observation = _run(acts.observe, replica.ref)
    assert observation is not None
    return observation


def _views(acts: ReplicaActivities, replica: ReplicaRef) -> dict[str, PodView]:
    return {p.name: p for p in _observe(acts, replica).pods}


def _all_running(acts: ReplicaActivities, replica: ReplicaRef, names: list[str], *,
                 ready: bool = False) -> dict[str, PodView]:
    """Until the pods' containers are ready (and, with `ready`, the pods: kwok, as a kubelet,
    holds Ready False until the ome.io/serving gate is True)."""
    def running() -> dict[str, PodView] | None:
        views = _views(acts, replica)
        return views if all(n in views and views[n].containers_ready and (views[n].ready or not ready)
                            for n in names) else None
    return _wait(f"{names} running{' and Ready' if ready else ''}", running)


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}


# -- revisions --------------------------------------------------------------------------------------


def test_a_revision_is_minted_once_per_spec_and_walks_past_collisions(cluster: ReplicaCluster, ns: str,
                                                                     acts: ReplicaActivities) -> None:
    replica = _replica(cluster, ns, _single())
    first = _revision(acts, replica)
    assert (first.revision, first.collision_count, first.generation) == (1, 0, 1)
    assert first.runner_sizes == {"default": 1} and first.pairing_protocol is None
    assert first.name.startswith(f"{replica.base}-") and len(first.name) == len(replica.base) + 11
    assert _revision(acts, replica) == first, "the same spec: the same revision, no new number"

    stored = cluster.revision(ns, first.name)
    assert stored is not None and stored["revision"] == 1
    assert stored["metadata"]["labels"] == {**keys.selector_labels(replica.ref.name, "engine"),
                                            keys.REVISION_LABEL: first.name}
    [owner] = stored["metadata"]["ownerReferences"]
    assert (owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == (replica.ref.uid, True, True)
    assert stored["data"]["runners"][0]["template"]["spec"]["containers"][0]["image"] == "registry.invalid/engine:v1"
    assert stored["data"]["pairingProtocol"] is None

    cluster.patch_replica_spec(replica.ref, {"runners": _single("registry.invalid/engine:v2")["runners"]})
    second = _revision(acts, replica)
    assert second.name != first.name and (second.revision, second.generation) == (2, 2)

    cluster.patch_replica_spec(replica.ref, {"pairingProtocol": "nixl-v1"})
    third = _revision(acts, replica)
    assert third.name not in (first.name, second.name) and third.revision == 3
    assert third.pairing_protocol == "nixl-v1"

    # A foreign object under the name the next spec hashes to: the count goes up past it.
    v3 = _single("registry.invalid/engine:v3")["runners"]
    payload = pods.revision_payload([Runner.model_validate(r) for r in v3], "nixl-v1")
    taken = keys.revision_object_name(replica.base, revision_hash(payload, 0))
    cluster.put_foreign_revision(ns, taken, {"not": "ours"})
    cluster.patch_replica_spec(replica.ref, {"runners": v3})
    fourth = _revision(acts, replica)
    assert fourth.collision_count == 1 and fourth.revision == 4
    assert fourth.name == keys.revision_object_name(replica.base, revision_hash(payload, 1))
    assert _revision(acts, replica, collision_count=1) == fourth
    assert _revision(acts, replica) == fourth, "from 0 the walk meets the same collision and lands there again"

    # Back to an earlier spec at an earlier salt: that revision again, not a new one.
    cluster.patch_replica_spec(replica.ref, {"runners": _single()["runners"], "pairingProtocol": None})
    assert _revision(acts, replica).name == first.name


def test_a_replica_renders_from_a_runtime_ref_and_waits_for_a_missing_model(
        cluster: ReplicaCluster, ns: str, acts: ReplicaActivities, kube_api: client.ApiClient) -> None:
    runtime = f"srt-{uuid.uuid4().hex[:6]}"
    custom = client.CustomObjectsApi(kube_api)
    custom.create_cluster_custom_object("ome.io", "v1beta1", "clusterservingruntimes", {
        "apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime", "metadata": {"name": runtime},
        "spec": {"engineConfig": {"runner": {"name": "ome-container", "image": "lmsysorg/sglang:v0.4.6",
                                             "ports": [{"containerPort": 30000}]}}}})
    try:
        replica = _replica(cluster, ns, {"component": "engine", "runtimeRef": {"name": runtime}})
        minted = _revision(acts, replica)
        assert minted.runner_sizes == {"default": 1}
        stored = cluster.revision(ns, minted.name)
        assert stored is not None
        (runner,) = stored["data"]["runners"]
        assert runner["name"] == "default"
        assert runner["template"]["spec"]["containers"][0]["image"] == "lmsysorg/sglang:v0.4.6"
        assert runner["template"]["metadata"]["labels"]["ome.io/runner"] == "default"
        pods_of = _run(acts.create_pods, CreatePodsInput(replica=replica, index=0, revision=minted.name))
        assert pods_of.created == [f"{replica.base}-0"]
    finally:
        custom.delete_cluster_custom_object("ome.io", "v1beta1", "clusterservingruntimes", runtime)

    missing = _replica(cluster, ns, {"component": "engine", "modelRef": {"name": "no-such-model"}})
    error = _refused(acts.ensure_revision, EnsureRevisionInput(replica=missing))
    assert error.type == ErrorType.INVALID_SPEC.value and error.non_retryable
    assert "ModelNotFound" in error.message and "no-such-model" in error.message


def test_a_runtime_with_leader_and_worker_renders_a_gang(cluster: ReplicaCluster, ns: str, acts: ReplicaActivities,
                                                         kube_api: client.ApiClient) -> None:
    """rendering/multinode.py through from_refs: the runtime's engineConfig leader/worker."""
    runtime = f"srt-{uuid.uuid4().hex[:6]}"
    custom = client.CustomObjectsApi(kube_api)
    custom.create_cluster_custom_object("ome.io", "v1beta1", "clusterservingruntimes", {
        "apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime", "metadata": {"name": runtime},
        "spec": {"engineConfig": {
            "leader": {"runner": {"name": "ome-container", "image": "lmsysorg/sglang:v0.4.6",
                                  "ports": [{"containerPort": 30000}]}},
            "worker": {"size": 2, "runner": {"name": "ome-container", "image": "lmsysorg/sglang:v0.4.6-w"}}}}})
    try:
        replica = _replica(cluster, ns, {"component": "engine", "runtimeRef": {"name": runtime}})
        minted = _revision(acts, replica)
        assert minted.runner_sizes == {"leader": 1, "worker": 2}
        pods_of = _run(acts.create_pods, CreatePodsInput(replica=replica, index=0, revision=minted.name))
        assert pods_of.created == [f"{replica.base}-0", f"{replica.base}-0-w1", f"{replica.base}-0-w2"]
        worker = client.CoreV1Api(kube_api).read_namespaced_pod(f"{replica.base}-0-w2", ns)
        assert worker.spec.containers[0].image == "lmsysorg/sglang:v0.4.6-w"
        assert worker.metadata.labels[keys.RUNNER_LABEL] == "worker"
    finally:
        custom.delete_cluster_custom_object("ome.io", "v1beta1", "clusterservingruntimes", runtime)


# -- the Service and the pods -------------------------------------------------------------------------


def test_the_headless_service_follows_the_runners_ports(cluster: ReplicaCluster, ns: str,
                                                        acts: ReplicaActivities) -> None:
    replica = _replica(cluster, ns, _gang(1))
    _run(acts.ensure_service, replica)
    _run(acts.ensure_service, replica)  # idempotent
    service = cluster.service(ns, replica.base)
    assert service is not None
    assert service["spec"]["clusterIP"] == "None" and not service["spec"].get("publishNotReadyAddresses")
    assert service["spec"]["selector"] == keys.selector_labels(replica.ref.name, "engine")
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [("http", 8000, 8000)]
    assert service["metadata"]["ownerReferences"][0]["uid"] == replica.ref.uid

    runners = _gang(1)["runners"]
    runners[0]["template"]["spec"]["containers"][0]["ports"] = [{"name": "grpc", "containerPort": 9000}]
    cluster.patch_replica_spec(replica.ref, {"runners": runners})
    _run(acts.ensure_service, replica)
    service = cluster.service(ns, replica.base)
    assert service is not None and [p["port"] for p in service["spec"]["ports"]] == [9000]

    portless = _replica(cluster, ns, _single())
    _run(acts.ensure_service, portless)
    service = cluster.service(ns, portless.base)
    assert service is not None and not service["spec"].get("ports")


def test_a_foreign_service_under_the_name_is_refused_for_good(
        cluster: ReplicaCluster, ns: str, acts: ReplicaActivities, kube_api: client.ApiClient) -> None:
    replica = _replica(cluster, ns, _single())
    client.CoreV1Api(kube_api).create_namespaced_service(ns, {
        "metadata": {"name": replica.base}, "spec": {"clusterIP": "None", "selector": {"app": "someone-else"}}})
    error = _refused(acts.ensure_service, replica)
    assert error.type == ErrorType.NAME_IN_USE.value and error.non_retryable
    assert "not controlled by InferenceReplica" in error.message


def test_a_single_pod_instance_is_created_placed_and_observed(cluster: ReplicaCluster, ns: str,
                                                              acts: ReplicaActivities) -> None:
    replica = _replica(cluster, ns, _single(topologySpread="Required", topologySpreadKey=HOSTNAME))
    revision = _revision(acts, replica)
    request = CreatePodsInput(replica=replica, index=0, revision=revision.name, incarnation=2)
    created = _run(acts.create_pods, request)
    name = keys.pod_name(replica.base, 0)
    assert (created.created, created.existed, created.refused) == ([name], [], None)
    again = _run(acts.create_pods, request)
    assert (again.created, again.existed) == ([], [name])

    pod = cluster.pod(ns, name)
    assert pod is not None
    assert pod["metadata"]["labels"] == {
        "app": "chat", **keys.selector_labels(replica.ref.name, "engine"), keys.INSTANCE_LABEL: "0",
        keys.INCARNATION_LABEL: "2", keys.RUNNER_LABEL: "default", keys.SLOT_LABEL: "0",
        keys.REVISION_LABEL: revision.name}
    assert pod["metadata"]["ownerReferences"][0]["uid"] == replica.ref.uid
    assert pod["spec"]["readinessGates"] == [{"conditionType": keys.SERVING_GATE}]
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (name, replica.base)
    assert _env(pod) == {"MODE": "serve", keys.RUNNER_ENV: "default"}
    assert pod["spec"]["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {**keys.selector_labels(replica.ref.name, "engine"),
                                          keys.RUNNER_LABEL: "default"}}}]

    # A migration's hints: toward node 1 if it can, never node 0; slot 1 (a surge pod).
    surge = _run(acts.create_pods, CreatePodsInput(replica=replica, index=1, slot=1, revision=revision.name,
                                                   preferred_nodes=["kwok-node-1"], avoid_node="kwok-node-0"))
    surge_name = keys.pod_name(replica.base, 1, slot=1)
    assert surge.created == [surge_name]
    surge_pod = cluster.pod(ns, surge_name)
    assert surge_pod is not None and surge_pod["metadata"]["labels"][keys.SLOT_LABEL] == "1"
    node_affinity = surge_pod["spec"]["affinity"]["nodeAffinity"]
    assert node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": HOSTNAME, "operator": "NotIn", "values": ["kwok-node-0"]}]}]
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]["matchExpressions"] == [
        {"key": HOSTNAME, "operator": "In", "values": ["kwok-node-1"]}]

    views = _all_running(acts, replica, [name, surge_name])
    view, surge_view = views[name], views[surge_name]
    assert (view.index, view.slot, view.runner, view.worker, view.incarnation, view.revision) == (
        0, 0, "default", 0, 2, revision.name)
    assert view.uid == pod["metadata"]["uid"] and view.phase == "Running" and view.node
    assert view.scheduled and view.containers_ready and not view.unschedulable and not view.gated
    assert view.serving is None, "nobody has decided yet: kwok leaves the gate alone"
    assert view.created_at is not None
    cluster.settle()
    held = _views(acts, replica)[name]
    assert not held.ready and held.ready_since is None, "and holds Ready while the gate is not True"

    _run(acts.set_serving, SetServingInput(namespace=ns, pods=[name, surge_name], serving=True, reason="Admitted"))
    views = _all_running(acts, replica, [name, surge_name], ready=True)
    view = views[name]
    assert view.serving is True and view.ready_since is not None and view.ready_since >= view.created_at
    assert (view.restart_count, view.last_termination, view.deleting) == (0, None, False)
    assert (surge_view.index, surge_view.slot) == (1, 1) and surge_view.node != "kwok-node-0"

    observation = _observe(acts, replica)
    assert observation.base == replica.base and observation.uid == replica.ref.uid
    assert [p.name for p in observation.pods] == [name, surge_name]
    assert [(r.name, r.revision) for r in observation.revisions] == [(revision.name, 1)]
    assert observation.status is None and observation.rollback_target is None
    assert abs(observation.now - datetime.now(UTC)) < timedelta(minutes=1)


def test_a_gang_is_created_leader_first_and_workers_land_beside_it(cluster: ReplicaCluster, ns: str,
                                                                   acts: ReplicaActivities) -> None:
    replica = _replica(cluster, ns, _gang(2, topologyKey=HOSTNAME, pairingProtocol="nixl-v1"))
    revision = _revision(acts, replica)
    assert revision.runner_sizes == {"leader": 1, "worker": 2}
    created = _run(acts.create_pods, CreatePodsInput(replica=replica, index=0, revision=revision.name, incarnation=1))
    leader, w1, w2 = (keys.pod_name(replica.base, 0), keys.pod_name(replica.base, 0, worker=1),
                      keys.pod_name(replica.base, 0, worker=2))
    assert created.created == [leader, w1, w2]

    worker = cluster.pod(ns, w2)
    assert worker is not None
    labels = worker["metadata"]["labels"]
    assert (labels[keys.RUNNER_LABEL], labels[keys.WORKER_LABEL], labels[keys.PAIRING_LABEL]) == (
        "worker", "2", "nixl-v1")
    assert _env(worker) == {"MODE": "serve", keys.RUNNER_ENV: "worker",
                            keys.LEADER_ADDRESS_ENV: f"{leader}.{replica.base}",
                            keys.LWS_LEADER_ADDRESS_ENV: f"{leader}.{replica.base}", keys.LWS_GROUP_SIZE_ENV: "3",
                            keys.LWS_WORKER_INDEX_ENV: "2"}
    assert worker["spec"]["containers"][0]["image"] == "registry.invalid/worker:v1"
    assert worker["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [{
        "topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {
            keys.REPLICA_LABEL: replica.ref.name, keys.INSTANCE_LABEL: "0", keys.RUNNER_LABEL: "leader",
            keys.INCARNATION_LABEL: "1"}}}]
    leader_pod = cluster.pod(ns, leader)
    assert leader_pod is not None and _env(leader_pod)[keys.RUNNER_ENV] == "leader"
    assert keys.LEADER_ADDRESS_ENV not in _env(leader_pod) and "affinity" not in leader_pod["spec"]

    views = _all_running(acts, replica, [leader, w1, w2])
    assert [views[n].worker for n in (leader, w1, w2)] == [0, 1, 2]
    assert len({views[n].node for n in (leader, w1, w2)}) == 1, "the scheduler kept the gang on one node"


# -- the serving gate ----------------------------------------------------------------------------------


def test_the_serving_condition_is_set_only_on_change_and_kwok_keeps_it(cluster: ReplicaCluster, ns: str,
                                                                      acts: ReplicaActivities) -> None:
    replica = _replica(cluster, ns, _single())
    revision = _revision(acts, replica)
    name = keys.pod_name(replica.base, 0)
    _run(acts.create_pods, CreatePodsInput(replica=replica, index=0, revision=revision.name))
    _all_running(acts, replica, [name])

    on = _run(acts.set_serving, SetServingInput(namespace=ns, pods=[name, "nobody"], serving=True,
                                                reason="Admitted", message="in rotation"))
    assert (on.changed, on.missing) == ([name], ["nobody"])
    pod = cluster.pod(ns, name)
    assert pod is not None
    condition = _condition(pod, keys.SERVING_GATE)
    assert condition is not None
    assert (condition["status"], condition["reason"], condition["message"]) == ("True", "Admitted", "in rotation")
    since = condition["lastTransitionTime"]

    time.sleep(1.1)  # a rewrite would carry a later second
    same = _run(acts.set_serving, SetServingInput(namespace=ns, pods=[name], serving=True, reason="Other"))
    assert same.changed == []
    cluster.settle()
    pod = cluster.pod(ns, name)
    assert pod is not None
    kept = _condition(pod, keys.SERVING_GATE)
    assert kept is not None and (kept["status"], kept["reason"], kept["lastTransitionTime"]) == (
        "True", "Admitted", since), "neither our no-op nor kwok rewrote it"
    ready = _condition(pod, "Ready")
    assert ready is not None and ready["status"] == "True", "Ready with the gate open, kubelet conditions kept"
    assert _views(acts, replica)[name].serving is True

    off = _run(acts.set_serving, SetServingInput(namespace=ns, pods=[name], serving=False, reason="Draining"))
    assert off.changed == [name]
    cluster.settle()
    assert _views(acts, replica)[name].serving is False


def test_a_serving_condition_set_before_the_pod_runs_survives_kwoks_pod_ready(
        cluster: ReplicaCluster, ns: str, acts: ReplicaActivities) -> None:
    """kwok's pod-ready stage writes the pod's conditions when it starts the pod: as a strategic
    merge keyed by type, which must keep ours (and, cut from its template, not set the gate)."""
    template = _template()
    template["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    replica = _replica(cluster, ns, {"component": "engine",
                                     "runners": [{"name": "default", "size": 1, "template": template}]})
    revision = _revision(acts, replica)
    name = keys.pod_name(replica.base, 0)
    _run(acts.create_pods, CreatePodsInput(replica=replica, index=0, revision=revision.name))
    held = _views(acts, replica)[name]
    assert held.gated and not held.scheduled and held.phase == "Pending" and held.serving is None

    assert _run(acts.set_serving, SetServingInput(namespace=ns, pods=[name], serving=False,
                                                  reason="NotYet")).changed == [name]
    pod = cluster.pod(ns, name)
    assert pod is not None
    before = _condition(pod, keys.SERVING_GATE)
    assert before is not None
    cluster.release_scheduling_gates(ns, name)

    def running() -> PodView | None:
        view = _views(acts, replica)[name]
        return view if view.containers_ready else None

    view = _wait("the released pod running", running)
    assert not view.gated and view.scheduled and view.serving is False
    cluster.settle()
    pod = cluster.pod(ns, name)
    assert pod is not None and _condition(pod, keys.SERVING_GATE) == before
    assert (_condition(pod, "Ready") or {}).get("status") == "False", "the closed gate holds Ready"


def test_the_serving_condition_goes_only_to_the_pod_it_was_decided_on(cluster: ReplicaCluster, ns: str,
                                                                       acts: ReplicaActivities,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod recreated under the same name between set_serving's read and its write is left alone
    (the write carries the read pod's uid; the apiserver refuses it for another pod)."""
    replica = _replica(cluster, ns, _single())
    revision = _revision(acts, replica)
    name = keys.pod_name(replica.base, 0)
    request = CreatePodsInput(replica=replica, index=0, revision=revision.name)
    _run(acts.create_pods, request)
    stale = cluster.pod(ns, name)
    assert stale is not None
    _run(acts.delete_pods, DeletePodsInput(namespace=ns, pods=[name]))
    _wait("the pod gone", lambda: cluster.pod(ns, name) is None)
    _run(acts.create_pods, request)
    fresh = cluster.pod(ns, name)
    assert fresh is not None and fresh["metadata"]["uid"] != stale["metadata"]["uid"]

    racing = cluster.activities()
    monkeypatch.setattr(racing, "_pod", lambda namespace, pod: stale)  # the read that came before the recreate
    result = _run(racing.set_serving, SetServingInput(namespace=ns, pods=[name], serving=True, reason="Admitted"))
    assert (result.changed, result.missing) == ([], [name])
    now = cluster.pod(ns, name)
    assert now is not None and _condition(now, keys.SERVING_GATE) is None


# -- in place, delete, prune -------------------------------------------------------------------------


def test_in_place_applies_an_image_change_and_refuses_anything_else(cluster: ReplicaCluster, ns: str,
                                                                    acts: ReplicaActivities) -> None:
    replica = _replica(cluster, ns, _single())
    first = _revision(acts, replica)
    name = keys.pod_name(replica.base, 0)
    _run(acts.create_pods, CreatePodsInput(replica=replica, index=0, revision=first.name))
    _all_running(acts, replica, [name])
    uid = _views(acts, replica)[name].uid

    cluster.patch_replica_spec(replica.ref, {"runners": _single("registry.invalid/engine:v2")["runners"]})
    second = _revision(acts, replica)
    applied = _run(acts.update_in_place, InPlaceInput(replica=replica, pod=name, revision=second.name))
    assert applied.applied and applied.reason == ""
    pod = cluster.pod(ns, name)
    assert pod is not None and pod["metadata"]["uid"] == uid, "the same pod"
    assert pod["spec"]["containers"][0]["image"] == "registry.invalid/engine:v2"
    assert pod["metadata"]["labels"][keys.REVISION_LABEL] == second.name
    assert _run(acts.update_in_place, InPlaceInput(replica=replica, pod=name, revision=second.name)).applied

    runners = _single("registry.invalid/engine:v3")["runners"]
    runners[0]["template"]["spec"]["containers"][0]["env"] = [{"name": "MODE", "value": "debug"}]
    cluster.patch_replica_spec(replica.ref, {"runners": runners})
    third = _revision(acts, replica)
    refused = _run(acts.update_in_place, InPlaceInput(replica=replica, pod=name, revision=third.name))
    assert not refused.applied and refused.reason == "env of container main differs"
    pod = cluster.pod(ns, name)
    assert pod is not None and pod["spec"]["containers"][0]["image"] == "registry.invalid/engine:v2", "untouched"
    assert pod["metadata"]["labels"][keys.REVISION_LABEL] == second.name

    gone = _run(acts.update_in_place, InPlaceInput(replica=replica, pod=f"{replica.base}-9", revision=second.name))
    assert not gone.applied and "gone" in gone.reason


def test_delete_honours_the_uid_it_was_decided_on(cluster: ReplicaCluster, ns: str,
                                                  acts: ReplicaActivities) -> None:
    replica = _replica(cluster, ns, _single())
    revision = _revision(acts, replica)
    name = keys.pod_name(replica.base, 0)
    _run(acts.create_pods, CreatePodsInput(replica=replica, index=0, revision=revision.name))
    pod = cluster.pod(ns, name)
    assert pod is not None

    stale = _run(acts.delete_pods, DeletePodsInput(namespace=ns, pods=[name], uids={name: str(uuid.uuid4())}))
    assert stale == []
    cluster.settle()
    assert cluster.pod(ns, name) is not None, "a different pod holds the name: left alone"

    deleted = _run(acts.delete_pods, DeletePodsInput(namespace=ns, pods=[name, "nobody"],
                                                     uids={name: pod["metadata"]["uid"]}))
    assert deleted == [name]
    _wait("the pod gone", lambda: cluster.pod(ns, name) is None)
    assert _run(acts.delete_pods, DeletePodsInput(namespace=ns, pods=[name])) == []


def test_prune_keeps_the_newest_and_never_a_live_revision(cluster: ReplicaCluster, ns: str,
                                                          acts: ReplicaActivities) -> None:
    replica = _replica(cluster, ns, _single("registry.invalid/engine:v1"))
    names = [_revision(acts, replica).name]
    for version in (2, 3, 4):
        cluster.patch_replica_spec(replica.ref, {"runners": _single(f"registry.invalid/engine:v{version}")["runners"]})
        names.append(_revision(acts, replica).name)
    r1, r2, r3, r4 = names
    live = [r4, r1]

    assert _run(acts.prune_revisions, PruneRevisionsInput(replica=replica, live=live, limit=1)) == [r2]
    assert [r.name for r in _observe(acts, replica).revisions] == [r1, r3, r4]
    assert _run(acts.prune_revisions, PruneRevisionsInput(replica=replica, live=live, limit=0)) == [r3]
    assert _run(acts.prune_revisions, PruneRevisionsInput(replica=replica, live=live, limit=0)) == []
    assert cluster.revision(ns, r1) is not None and cluster.revision(ns, r4) is not None


# -- admission, observation --------------------------------------------------------------------------


def test_a_quota_refusal_is_reported_not_raised(cluster: ReplicaCluster, acts: ReplicaActivities) -> None:
    ns = cluster.namespace()
    cluster.limit_pods(ns, 2)
    replica = _replica(cluster, ns, _gang(2))
    revision = _revision(acts, replica)
    request = CreatePodsInput(replica=replica, index=0, revision=revision.name)
    first = _run(acts.create_pods, request)
    assert first.created == [keys.pod_name(replica.base, 0), keys.pod_name(replica.base, 0, worker=1)]
    assert first.refused_reason == QUOTA_EXCEEDED and first.refused and "exceeded quota" in first.refused
    again = _run(acts.create_pods, request)
    assert again.created == [] and len(again.existed) == 2 and again.refused_reason == QUOTA_EXCEEDED


def test_observe_reads_the_rollback_target_and_a_gone_replica(cluster: ReplicaCluster, ns: str,
                                                              acts: ReplicaActivities) -> None:
    replica = _replica(cluster, ns, _single())
    own = _revision(acts, replica).name
    foreign = f"foreign-{uuid.uuid4().hex[:6]}"
    cluster.put_foreign_revision(ns, foreign, {"not": "ours"})
    for target, exists, owned in ((own, True, True), (foreign, True, False), ("missing", False, False)):
        cluster.patch_replica_spec(replica.ref, {"pacing": {"rollbackToRevision": target}})
        lookup = _observe(acts, replica).rollback_target
        assert lookup is not None and (lookup.name, lookup.exists, lookup.owned) == (target, exists, owned)

    other = ObjectRef.of(InferenceReplica, replica.ref.name, ns, str(uuid.uuid4()))
    assert _run(acts.observe, other) is None, "the name now belongs to another uid"
    cluster.delete_replica(replica.ref)
    _wait("the replica gone", lambda: _run(acts.observe, replica.ref) is None)
    error = _refused(acts.ensure_revision, EnsureRevisionInput(replica=replica))
    assert error.type == ErrorType.OBJECT_GONE.value


def _restarted(view: PodView) -> bool:
    return (view.restart_count == 3 and view.containers_ready and view.last_termination is not None
            and (view.last_termination.exit_code, view.last_termination.reason) == (137, "OOMKilled"))


def _failed(view: PodView) -> bool:
    return (view.phase == "Failed" and not view.ready and view.last_termination is not None
            and (view.last_termination.exit_code, view.last_termination.reason) == (1, "Error"))


@pytest.mark.parametrize(("annotation", "seen"), [({POD_RESTART_ANNOTATION: "3"}, _restarted),
                                                  ({POD_FAIL_ANNOTATION: "true"}, _failed)],
                         ids=["restarts", "failure"])
def test_observe_reports_restarts_and_failures(cluster: ReplicaCluster, ns: str, acts: ReplicaActivities,
                                               annotation: dict[str, str], seen: Callable[[PodView], bool]) -> None:
    spec = {"component": "engine", "runners": [{"name": "default", "size": 1,
                                                "template": _template(annotations=annotation)}]}
    replica = _replica(cluster, ns, spec)
    revision = _revision(acts, replica)
    name = keys.pod_name(replica.base, 0)
    _run(acts.create_pods, CreatePodsInput(replica=replica, index=0, revision=revision.name))

    def observed() -> PodView | None:
        view = _views(acts, replica).get(name)
        return view if view is not None and seen(view) else None

    view = _wait(f"{annotation} observed", observed)
    assert view.last_termination is not None and view.last_termination.pod_name == name
    assert view.last_termination.container_name == "main" and view.last_termination.time is not None
