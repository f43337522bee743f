"""The fake cluster behind the time-skipping replica engine tests (testkit/replica_fakes.py) answers as
the real InferenceReplica activities (activities/replica/) do on the local cluster: one suite, run
against both.

Each case drives a backend through the activities by their method names (observe,
ensure_revision, create_pods, delete_pods, set_serving, update_in_place, prune_revisions) and
checks what they answer and refuse. The real backend is ReplicaActivities as the chart's worker
identity on the session's apiserver, with kwok playing the kubelets (its stages fail and restart
pods, and hold Ready False until the ome.io/serving gate is True); the fake is FakeReplicaCluster on
a time-skipping test server's clock. A case that passes on one and fails on the other is a
difference the time-skipping tests of the engine would hide.

Where they differed before this suite (the fake was changed to match the real activities):
- create_pods and update_in_place from a revision that does not exist (or is not the replica's):
  InvalidRevision in the fake, RevisionNotFound in the real ones.
- update_in_place on a missing (or terminating) pod: the fake raised; the real one answers
  applied=False, "pod ... is gone". The fake refused every non-image change with the one reason
  "env of container main differs"; it now diffs the rendered pods with the real in_place.diff, so
  its reasons are the real ones.
- delete_pods of a pod already terminating: left out by the fake, listed again by the real one
  (the apiserver accepts the repeated delete). The fake also turned a deleted pod's ome.io/serving
  False; a delete leaves the condition as it was.
- PodView.ready: the fake said Ready as soon as the containers were; a kubelet (and kwok) holds
  Ready False until every readiness gate, ome.io/serving included, is True, and ready_since is when
  Ready turned True (after the gate opened), so minReadySeconds counts from there.
- ensure_revision numbered a new revision after every revision in the namespace, foreign ones
  included; the real one numbers after the replica's own only. The fake's revision names, pod
  names, labels and pod order (observe lists anchor first) now come from the real pure parts.
- a failed pod's last_termination carried the time of each observe in the fake; the kubelet's
  finishedAt is fixed, so the fake now keeps the time the pod failed.

Left as they are (not asserted here):
- the real ensure_revision renders runners from spec.modelRef / runtimeRef
  (activities/replica/from_refs.py); the fake has no models or runtimes and refuses every spec
  without runners as InvalidSpec, which is what the real one answers while the model or runtime is
  missing (the case below names a model that does not exist).
- kwok's restart stage rewrites containerStatuses only, so a restart leaves Ready's
  lastTransitionTime alone on the local cluster, while the fake (like a real kubelet, whose
  containers go unready while restarting) moves ready_since to the restart.
- kwok turns Ready True about a second after the gate opens (its pod-ready-again stage); the fake
  at once. Cases wait for Ready, never for a delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any, Protocol

import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from devstack import kueue as kueue_devstack
from devstack.identities import Identities
from devstack.kube import POD_FAIL_ANNOTATION, POD_RESTART_ANNOTATION
from servingops.activities.replica import pods as render
from servingops.activities.replica.activities import QUOTA_EXCEEDED, ReplicaActivities
from servingops.activities.replica.revisions import revision_hash
from servingops.activities.replica.types import (
    CreatePodsInput,
    CreatePodsResult,
    DeletePodsInput,
    EnsureRevisionInput,
    InPlaceInput,
    InPlaceResult,
    PodView,
    PruneRevisionsInput,
    ReplicaObservation,
    ReplicaRef,
    RevisionResult,
    SetServingInput,
    SetServingResult,
)
from servingops.api_models.errors import ErrorType
from servingops.api_models.ome import instance_keys as keys
from servingops.api_models.ome.replica import InferenceReplica, Runner
from servingops.api_models.refs import ObjectRef
from testkit.replica_fakes import FakeReplicaCluster, FakeRevision
from testkit.rollout_harness import start_env
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as
from tests.support.conformance import FAKE_TIMESKIP_AND_REAL, chosen_backend

DEADLINE = 90.0
"""Real seconds the local cluster may take to act (an upper bound on a loaded machine, never asserted)."""
SETTLE = 3.0
"""Seconds (real or the fake's) for the kubelets to have acted on a pod, and undone what they undo."""
HOLD = "test.servingops.io/hold"
KUEUE_QUEUE = "serving"


class Backend(Protocol):
    """One cluster the activities run against, and what a user or a kubelet would do to it."""

    async def create_replica(self, spec: dict[str, Any], *, pod_limit: int | None = None) -> ReplicaRef:
        """A new InferenceReplica; with `pod_limit`, alone under a ResourceQuota of that many pods."""
        ...

    async def patch_spec(self, replica: ReplicaRef, patch: dict[str, Any]) -> None:
        """A merge patch of the spec (a new generation)."""
        ...

    async def call(self, replica: ReplicaRef, activity: str, arg: Any) -> Any:
        """Run the activity of that replica's cluster named by its method name."""
        ...

    async def until(self, probe: Callable[[], Awaitable[bool]], what: str) -> None:
        """Let time pass (real seconds, or the fake's clock) until `probe` holds."""
        ...

    async def settle(self) -> None:
        """Let SETTLE seconds pass."""
        ...

    async def fail_pod(self, replica: ReplicaRef, name: str) -> None:
        """The pod's containers exit 1: phase Failed."""
        ...

    async def restart_pod(self, replica: ReplicaRef, name: str) -> None:
        """The pod's first container is OOM-killed once more and runs again."""
        ...

    async def hold_deletion(self, replica: ReplicaRef, name: str) -> None:
        """A finalizer keeps the pod terminating once deleted."""
        ...

    async def release_deletion(self, replica: ReplicaRef, name: str) -> None: ...

    async def put_foreign_revision(self, replica: ReplicaRef, number: int) -> str:
        """A ControllerRevision with the replica's labels and that number, not controlled by it."""
        ...

    async def create_queued_replica(self, spec: dict[str, Any], *, capacity: int) -> ReplicaRef:
        """A new InferenceReplica where Kueue runs: its LocalQueue KUEUE_QUEUE admits `capacity` pods."""
        ...

    async def set_capacity(self, replica: ReplicaRef, capacity: int) -> None:
        """The replica's ClusterQueue now admits `capacity` pods."""
        ...


def _ns(replica: ReplicaRef) -> str:
    assert replica.ref.namespace, "an InferenceReplica is namespaced"
    return replica.ref.namespace


# -- the fake ----------------------------------------------------------------------------------------


class FakeBackend:
    def __init__(self, env: WorkflowEnvironment) -> None:
        self.env = env
        self.clusters: dict[str, FakeReplicaCluster] = {}

    def _cluster(self, replica: ReplicaRef) -> FakeReplicaCluster:
        return self.clusters[replica.ref.uid or ""]

    async def create_replica(self, spec: dict[str, Any], *, pod_limit: int | None = None) -> ReplicaRef:
        cluster = FakeReplicaCluster(self.env, ready_delay=2.0)
        cluster.spec = copy.deepcopy(spec)
        cluster.quota = pod_limit
        self.clusters[cluster.uid] = cluster
        return ReplicaRef(ref=cluster.ref, base=cluster.ref.name)

    async def patch_spec(self, replica: ReplicaRef, patch: dict[str, Any]) -> None:
        self._cluster(replica).edit(**patch)

    async def call(self, replica: ReplicaRef, activity: str, arg: Any) -> Any:
        activities = {fn.__name__: fn for fn in self._cluster(replica).activities()}
        return await ActivityEnvironment().run(activities[activity], arg)

    async def until(self, probe: Callable[[], Awaitable[bool]], what: str) -> None:
        for _ in range(600):
            if await probe():
                return
            await self.env.sleep(1)
        raise AssertionError(f"never happened on the fake's clock: {what}")

    async def settle(self) -> None:
        await self.env.sleep(SETTLE)

    async def fail_pod(self, replica: ReplicaRef, name: str) -> None:
        self._cluster(replica).fail_pod(name)

    async def restart_pod(self, replica: ReplicaRef, name: str) -> None:
        await self._cluster(replica).restart_pod(name)

    async def hold_deletion(self, replica: ReplicaRef, name: str) -> None:
        self._cluster(replica).hold_deletion(name)

    async def release_deletion(self, replica: ReplicaRef, name: str) -> None:
        self._cluster(replica).release_deletion(name)

    async def put_foreign_revision(self, replica: ReplicaRef, number: int) -> str:
        name = f"foreign-{uuid.uuid4().hex[:6]}"
        self._cluster(replica).revisions[name] = FakeRevision(name=name, revision=number, data={"not": "ours"},
                                                              owned=False)
        return name

    async def create_queued_replica(self, spec: dict[str, Any], *, capacity: int) -> ReplicaRef:
        replica = await self.create_replica(spec)
        self._cluster(replica).kueue_capacity = capacity
        return replica

    async def set_capacity(self, replica: ReplicaRef, capacity: int) -> None:
        self._cluster(replica).kueue_capacity = capacity


# -- the local cluster --------------------------------------------------------------------------------


class RealBackend:
    def __init__(self, admin: client.ApiClient, worker: client.ApiClient, namespace: str) -> None:
        self.admin, self.namespace = admin, namespace
        self.core = client.CoreV1Api(admin)
        self.apps = client.AppsV1Api(admin)
        self.custom = client.CustomObjectsApi(admin)
        self.activities: dict[str, Callable[..., Any]] = {fn.__name__: fn for fn in ReplicaActivities(worker).all()}
        self.restarts: dict[tuple[str, str], int] = {}
        self.created: list[str] = [namespace]
        """Namespaces to delete at the end: a later module's bridge would otherwise pick their replicas up."""
        self.kueue_objects: list[tuple[str, str]] = []
        """Cluster-scoped Kueue objects (plural, name) to delete at the end."""

    async def create_replica(self, spec: dict[str, Any], *, pod_limit: int | None = None) -> ReplicaRef:
        namespace = self.namespace
        if pod_limit is not None:
            namespace = new_namespace(self.admin, "replica-quota")
            self.created.append(namespace)
            await self._limit_pods(namespace, pod_limit)
        obj = create(self.admin, InferenceReplica, manifest(InferenceReplica, spec), namespace)
        ref = ObjectRef.of(InferenceReplica, obj["metadata"]["name"], namespace, obj["metadata"]["uid"])
        return ReplicaRef(ref=ref, base=ref.name)

    async def _limit_pods(self, namespace: str, count: int) -> None:
        body: Any = {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": str(count)}}}
        self.core.create_namespaced_resource_quota(namespace, body)

        async def counted() -> bool:
            # Admission enforces a quota only once its controller has counted what is there.
            status = self.core.read_namespaced_resource_quota("pods", namespace).status
            return status is not None and (status.hard or {}).get("pods") == str(count)

        await self.until(counted, "the quota counted")

    async def patch_spec(self, replica: ReplicaRef, patch: dict[str, Any]) -> None:
        ref = replica.ref
        self.custom.patch_namespaced_custom_object(ref.group, ref.version, _ns(replica), ref.plural, ref.name,
                                                   {"spec": patch}, _content_type="application/merge-patch+json")

    async def call(self, replica: ReplicaRef, activity: str, arg: Any) -> Any:
        return await asyncio.to_thread(ActivityEnvironment().run, self.activities[activity], arg)

    async def until(self, probe: Callable[[], Awaitable[bool]], what: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while not await probe():
            assert time.monotonic() < deadline, f"never happened on the local cluster: {what}"
            await asyncio.sleep(0.3)

    async def settle(self) -> None:
        await asyncio.sleep(SETTLE)

    def _annotate(self, replica: ReplicaRef, name: str, annotations: dict[str, str]) -> None:
        self.core.patch_namespaced_pod(name, _ns(replica), {"metadata": {"annotations": annotations}})

    async def fail_pod(self, replica: ReplicaRef, name: str) -> None:
        self._annotate(replica, name, {POD_FAIL_ANNOTATION: "true"})

    async def restart_pod(self, replica: ReplicaRef, name: str) -> None:
        key = (_ns(replica), name)
        self.restarts[key] = self.restarts.get(key, 0) + 1
        self._annotate(replica, name, {POD_RESTART_ANNOTATION: str(self.restarts[key])})

    async def hold_deletion(self, replica: ReplicaRef, name: str) -> None:
        self.core.patch_namespaced_pod(name, _ns(replica), {"metadata": {"finalizers": [HOLD]}})

    async def release_deletion(self, replica: ReplicaRef, name: str) -> None:
        self.core.patch_namespaced_pod(name, _ns(replica), {"metadata": {"finalizers": None}},
                                       _content_type="application/merge-patch+json")

    async def put_foreign_revision(self, replica: ReplicaRef, number: int) -> str:
        name = f"foreign-{uuid.uuid4().hex[:6]}"
        labels = keys.selector_labels(replica.ref.name, "engine")
        body: Any = {"metadata": {"name": name, "labels": labels}, "data": {"not": "ours"}, "revision": number}
        self.apps.create_namespaced_controller_revision(_ns(replica), body)
        return name

    async def create_queued_replica(self, spec: dict[str, Any], *, capacity: int) -> ReplicaRef:
        """A namespace Kueue manages, a ResourceFlavor and a ClusterQueue of `capacity` pods for it alone,
        and the LocalQueue KUEUE_QUEUE (Kueue itself: the `kueue` fixture, which the case asks for)."""
        namespace = new_namespace(self.admin, "replica-kueue")
        self.created.append(namespace)
        kueue_devstack.label_namespace(self.admin, namespace)
        group, version = "kueue.x-k8s.io", "v1beta2"
        self.custom.create_cluster_custom_object(group, version, "resourceflavors", {
            "apiVersion": f"{group}/{version}", "kind": "ResourceFlavor", "metadata": {"name": namespace}})
        self.custom.create_cluster_custom_object(group, version, "clusterqueues", {
            "apiVersion": f"{group}/{version}", "kind": "ClusterQueue", "metadata": {"name": namespace},
            "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                     "resourceGroups": [{"coveredResources": ["pods"], "flavors": [
                         {"name": namespace, "resources": [{"name": "pods", "nominalQuota": capacity}]}]}]}})
        self.kueue_objects += [("clusterqueues", namespace), ("resourceflavors", namespace)]
        self.custom.create_namespaced_custom_object(group, version, namespace, "localqueues", {
            "apiVersion": f"{group}/{version}", "kind": "LocalQueue", "metadata": {"name": KUEUE_QUEUE},
            "spec": {"clusterQueue": namespace}})
        obj = create(self.admin, InferenceReplica, manifest(InferenceReplica, spec), namespace)
        ref = ObjectRef.of(InferenceReplica, obj["metadata"]["name"], namespace, obj["metadata"]["uid"])
        return ReplicaRef(ref=ref, base=ref.name)

    async def set_capacity(self, replica: ReplicaRef, capacity: int) -> None:
        queue = self.custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", _ns(replica))
        groups = queue["spec"]["resourceGroups"]
        groups[0]["flavors"][0]["resources"][0]["nominalQuota"] = capacity
        self.custom.patch_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", _ns(replica),
                                                {"spec": {"resourceGroups": groups}})


@pytest.fixture(scope="module")
def real_backend(kube_api: client.ApiClient, chart_identities: Identities) -> Iterator[RealBackend]:
    with api_as(chart_identities.worker) as worker:
        backend = RealBackend(kube_api, worker, new_namespace(kube_api, "replica-conformance"))
        yield backend
        for name in backend.created:
            client.CoreV1Api(kube_api).delete_namespace(name)
        for plural, name in backend.kueue_objects:
            with contextlib.suppress(client.exceptions.ApiException):
                client.CustomObjectsApi(kube_api).delete_cluster_custom_object("kueue.x-k8s.io", "v1beta2", plural,
                                                                               name)


@pytest.fixture(scope="module")
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


@pytest.fixture(params=FAKE_TIMESKIP_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, lambda: FakeBackend(request.getfixturevalue("skipping_env")))


# -- helpers -------------------------------------------------------------------------------------------


def _template(image: str = "registry.invalid/engine:v1", env: str = "serve") -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "chat"}},
            "spec": {"containers": [{"name": "main", "image": image, "env": [{"name": "MODE", "value": env}]}]}}


def single(image: str = "registry.invalid/engine:v1", env: str = "serve") -> dict[str, Any]:
    return {"component": "engine", "runners": [{"name": "default", "size": 1, "template": _template(image, env)}]}


def gang(workers: int) -> dict[str, Any]:
    return {"component": "engine", "runners": [
        {"name": "leader", "size": 1, "template": _template()},
        {"name": "worker", "size": workers, "template": _template("registry.invalid/worker:v1")}]}


async def ensure(backend: Backend, replica: ReplicaRef) -> RevisionResult:
    result: RevisionResult = await backend.call(replica, "ensure_revision", EnsureRevisionInput(replica=replica))
    return result


async def observe(backend: Backend, replica: ReplicaRef) -> ReplicaObservation:
    result: ReplicaObservation | None = await backend.call(replica, "observe", replica.ref)
    assert result is not None
    return result


async def views(backend: Backend, replica: ReplicaRef) -> dict[str, PodView]:
    return {pod.name: pod for pod in (await observe(backend, replica)).pods}


async def create_pods(backend: Backend, replica: ReplicaRef, revision: str, index: int = 0, *,
                      incarnation: int = 0, slot: int = 0) -> CreatePodsResult:
    result: CreatePodsResult = await backend.call(replica, "create_pods", CreatePodsInput(
        replica=replica, index=index, revision=revision, incarnation=incarnation, slot=slot))
    return result


async def set_serving(backend: Backend, replica: ReplicaRef, names: list[str], serving: bool) -> SetServingResult:
    result: SetServingResult = await backend.call(replica, "set_serving", SetServingInput(
        namespace=_ns(replica), pods=names, serving=serving, reason="Test"))
    return result


async def delete_pods(backend: Backend, replica: ReplicaRef, names: list[str],
                      uids: dict[str, str] | None = None) -> list[str]:
    result: list[str] = await backend.call(replica, "delete_pods", DeletePodsInput(
        namespace=_ns(replica), pods=names, uids=uids or {}))
    return result


async def in_place(backend: Backend, replica: ReplicaRef, pod: str, revision: str) -> InPlaceResult:
    result: InPlaceResult = await backend.call(replica, "update_in_place",
                                               InPlaceInput(replica=replica, pod=pod, revision=revision))
    return result


async def refused(call: Awaitable[Any]) -> ErrorType:
    """The permanent error type a call is refused with (never a retryable failure)."""
    with pytest.raises(ApplicationError) as info:
        await call
    assert info.value.non_retryable, f"refused but retryable: {info.value}"
    assert info.value.type is not None
    return ErrorType(info.value.type)


async def wait_pod(backend: Backend, replica: ReplicaRef, name: str, test: Callable[[PodView], bool],
                   what: str) -> PodView:
    seen: list[PodView] = []

    async def probe() -> bool:
        view = (await views(backend, replica)).get(name)
        if view is not None and test(view):
            seen.append(view)
            return True
        return False

    await backend.until(probe, f"{name}: {what}")
    return seen[-1]


def hashed_name(replica: ReplicaRef, spec: dict[str, Any]) -> str:
    """The name the real hash gives a spec's runners at collision count 0."""
    runners = [Runner.model_validate(r) for r in spec["runners"]]
    return keys.revision_object_name(replica.base, revision_hash(render.revision_payload(runners, None), 0))


# -- the cases -----------------------------------------------------------------------------------------


async def test_a_revision_per_spec_numbered_after_the_replicas_own(backend: Backend) -> None:
    replica = await backend.create_replica(single())
    first = await ensure(backend, replica)
    assert (first.name, first.revision, first.collision_count) == (hashed_name(replica, single()), 1, 0)
    assert first.runner_sizes == {"default": 1} and first.pairing_protocol is None
    assert await ensure(backend, replica) == first, "the same spec: the same revision, no new number"

    await backend.put_foreign_revision(replica, 7)
    await backend.patch_spec(replica, {"runners": single("registry.invalid/engine:v2")["runners"]})
    second = await ensure(backend, replica)
    assert second.name == hashed_name(replica, single("registry.invalid/engine:v2")) != first.name
    assert second.revision == 2, "a foreign revision's number is not counted"
    seen = await observe(backend, replica)
    assert [(r.name, r.revision) for r in seen.revisions] == [(first.name, 1), (second.name, 2)]

    unrendered = await backend.create_replica({"component": "engine", "modelRef": {"name": "no-such-model"}})
    assert await refused(ensure(backend, unrendered)) is ErrorType.INVALID_SPEC


async def test_pods_are_created_once_under_the_instance_names(backend: Backend) -> None:
    replica = await backend.create_replica(single())
    revision = (await ensure(backend, replica)).name
    name = keys.pod_name(replica.base, 0)
    created = await create_pods(backend, replica, revision, incarnation=2)
    assert (created.created, created.existed, created.refused) == ([name], [], None)
    again = await create_pods(backend, replica, revision, incarnation=2)
    assert (again.created, again.existed, again.refused) == ([], [name], None)
    surge = await create_pods(backend, replica, revision, 1, slot=1)
    assert surge.created == [keys.pod_name(replica.base, 1, slot=1)] == [f"{replica.base}-1-s1"]
    assert await refused(create_pods(backend, replica, "no-such-revision", 2)) is ErrorType.REVISION_NOT_FOUND
    seen = await observe(backend, replica)
    assert [(p.name, p.index, p.slot, p.incarnation, p.revision) for p in seen.pods] == [
        (name, 0, 0, 2, revision), (f"{replica.base}-1-s1", 1, 1, 0, revision)]

    team = await backend.create_replica(gang(2))
    revision = (await ensure(backend, team)).name
    leader = keys.pod_name(team.base, 0)
    workers = [keys.pod_name(team.base, 0, worker=k) for k in (1, 2)]
    assert (await create_pods(backend, team, revision)).created == [leader, *workers], "the leader first"
    seen = await observe(backend, team)
    assert [(p.name, p.runner, p.worker) for p in seen.pods] == [
        (leader, "leader", 0), (workers[0], "worker", 1), (workers[1], "worker", 2)]


async def test_a_pod_is_ready_only_once_serving_and_ready_since_is_then(backend: Backend) -> None:
    replica = await backend.create_replica(single())
    revision = (await ensure(backend, replica)).name
    name = keys.pod_name(replica.base, 0)
    await create_pods(backend, replica, revision, incarnation=1)
    view = await wait_pod(backend, replica, name, lambda v: v.containers_ready, "containers ready")
    assert (view.index, view.slot, view.runner, view.worker, view.incarnation, view.revision) == (
        0, 0, "default", 0, 1, revision)
    assert view.phase == "Running" and view.scheduled and not view.gated and view.node
    assert view.serving is None and view.created_at is not None and not view.deleting
    assert (view.restart_count, view.last_termination) == (0, None)
    await backend.settle()
    held = (await views(backend, replica))[name]
    assert held.containers_ready and not held.ready and held.ready_since is None, "the gate holds Ready"

    before = (await observe(backend, replica)).now.replace(microsecond=0)
    assert (await set_serving(backend, replica, [name], True)).changed == [name]
    ready = await wait_pod(backend, replica, name, lambda v: v.ready, "Ready with the gate open")
    assert ready.serving is True and ready.ready_since is not None and ready.ready_since >= before

    assert (await set_serving(backend, replica, [name], False)).changed == [name]
    closed = await wait_pod(backend, replica, name, lambda v: not v.ready, "not Ready with the gate closed")
    assert closed.serving is False and closed.containers_ready and closed.ready_since is None


async def test_the_serving_condition_is_set_only_on_change(backend: Backend) -> None:
    replica = await backend.create_replica(single())
    revision = (await ensure(backend, replica)).name
    name = keys.pod_name(replica.base, 0)
    await create_pods(backend, replica, revision)
    first = await set_serving(backend, replica, [name, "nobody"], True)
    assert (first.changed, first.missing) == ([name], ["nobody"])
    same = await set_serving(backend, replica, [name], True)
    assert (same.changed, same.missing) == ([], [])
    off = await set_serving(backend, replica, [name], False)
    assert (off.changed, off.missing) == ([name], [])
    assert (await views(backend, replica))[name].serving is False


async def test_in_place_applies_an_image_and_refuses_anything_else(backend: Backend) -> None:
    replica = await backend.create_replica(single())
    first = (await ensure(backend, replica)).name
    name = keys.pod_name(replica.base, 0)
    await create_pods(backend, replica, first)
    uid = (await views(backend, replica))[name].uid

    await backend.patch_spec(replica, {"runners": single("registry.invalid/engine:v2")["runners"]})
    second = (await ensure(backend, replica)).name
    assert await in_place(backend, replica, name, second) == InPlaceResult(applied=True)
    view = (await views(backend, replica))[name]
    assert (view.uid, view.revision) == (uid, second), "the same pod, at the new revision"
    assert await in_place(backend, replica, name, second) == InPlaceResult(applied=True), "already there"

    await backend.patch_spec(replica, {"runners": single("registry.invalid/engine:v3", env="debug")["runners"]})
    third = (await ensure(backend, replica)).name
    assert await in_place(backend, replica, name, third) == InPlaceResult(
        applied=False, reason="env of container main differs")
    assert (await views(backend, replica))[name].revision == second, "untouched"

    missing = f"{replica.base}-9"
    assert await in_place(backend, replica, missing, second) == InPlaceResult(
        applied=False, reason=f"pod {missing} is gone")
    assert await refused(in_place(backend, replica, name, "no-such-revision")) is ErrorType.REVISION_NOT_FOUND


async def test_delete_honours_the_uid_and_lists_a_terminating_pod_again(backend: Backend) -> None:
    replica = await backend.create_replica(single())
    revision = (await ensure(backend, replica)).name
    name = keys.pod_name(replica.base, 0)
    await create_pods(backend, replica, revision)
    uid = (await views(backend, replica))[name].uid

    assert await delete_pods(backend, replica, [name], {name: str(uuid.uuid4())}) == []
    await backend.settle()
    assert name in await views(backend, replica), "a different pod holds the name: left alone"

    await set_serving(backend, replica, [name], True)
    await backend.hold_deletion(replica, name)
    assert await delete_pods(backend, replica, [name, "nobody"], {name: uid}) == [name]
    assert await delete_pods(backend, replica, [name], {name: uid}) == [name], "terminating: listed again"
    await backend.settle()
    view = (await views(backend, replica))[name]
    assert view.deleting and view.uid == uid
    assert view.serving is True, "a delete leaves the gate's condition as it was"

    await backend.release_deletion(replica, name)

    async def gone() -> bool:
        return name not in await views(backend, replica)

    await backend.until(gone, "the pod gone")
    assert await delete_pods(backend, replica, [name]) == [], "gone: not listed"


async def test_a_full_quota_refuses_new_pods_and_counts_existing_ones(backend: Backend) -> None:
    replica = await backend.create_replica(gang(2), pod_limit=2)
    revision = (await ensure(backend, replica)).name
    placed = [keys.pod_name(replica.base, 0), keys.pod_name(replica.base, 0, worker=1)]
    first = await create_pods(backend, replica, revision)
    assert first.created == placed and first.existed == []
    assert first.refused_reason == QUOTA_EXCEEDED and first.refused and "exceeded quota" in first.refused
    again = await create_pods(backend, replica, revision)
    assert (again.created, again.existed, again.refused_reason) == ([], placed, QUOTA_EXCEEDED)


async def test_prune_keeps_the_newest_and_never_a_live_revision(backend: Backend) -> None:
    replica = await backend.create_replica(single("registry.invalid/engine:v1"))
    names = [(await ensure(backend, replica)).name]
    for version in (2, 3, 4):
        await backend.patch_spec(replica, {"runners": single(f"registry.invalid/engine:v{version}")["runners"]})
        names.append((await ensure(backend, replica)).name)
    r1, r2, r3, r4 = names
    live = [r4, r1]

    async def prune(limit: int) -> list[str]:
        result: list[str] = await backend.call(replica, "prune_revisions",
                                               PruneRevisionsInput(replica=replica, live=live, limit=limit))
        return result

    assert await prune(1) == [r2]
    assert [r.name for r in (await observe(backend, replica)).revisions] == [r1, r3, r4]
    assert await prune(0) == [r3]
    assert await prune(0) == []
    assert [r.name for r in (await observe(backend, replica)).revisions] == [r1, r4]


async def test_a_failed_pod_and_a_restarted_container_are_observed(backend: Backend) -> None:
    replica = await backend.create_replica(single())
    revision = (await ensure(backend, replica)).name
    failing, restarting = keys.pod_name(replica.base, 0), keys.pod_name(replica.base, 1)
    await create_pods(backend, replica, revision, 0)
    await create_pods(backend, replica, revision, 1)
    for name in (failing, restarting):
        await wait_pod(backend, replica, name, lambda v: v.containers_ready, "running")

    await backend.fail_pod(replica, failing)
    failed = await wait_pod(backend, replica, failing, lambda v: v.phase == "Failed", "Failed")
    assert not failed.containers_ready and not failed.ready
    ended = failed.last_termination
    assert ended is not None and (ended.pod_name, ended.container_name, ended.exit_code, ended.reason) == (
        failing, "main", 1, "Error")
    assert isinstance(ended.time, datetime)
    await backend.settle()
    assert (await views(backend, replica))[failing].last_termination == ended, "the same termination, read again"

    for count in (1, 2):
        await backend.restart_pod(replica, restarting)

        def restarted_again(view: PodView, count: int = count) -> bool:
            return view.restart_count == count

        view = await wait_pod(backend, replica, restarting, restarted_again, f"{count} restarts")
        assert view.phase == "Running" and view.containers_ready
        restarted = view.last_termination
        assert restarted is not None and (restarted.pod_name, restarted.container_name, restarted.exit_code,
                                          restarted.reason) == (restarting, "main", 137, "OOMKilled")
        assert restarted.time is not None


@pytest.mark.timeskip
async def test_the_fake_records_what_the_real_activities_refuse(skipping_env: WorkflowEnvironment) -> None:
    """A time-skipping test fails on any refused call (tests/test_replica_workflow.py asserts
    `violations` is empty)."""
    fake = FakeBackend(skipping_env)
    replica = await fake.create_replica(single())
    with pytest.raises(ApplicationError):
        await create_pods(fake, replica, "no-such-revision")
    assert fake._cluster(replica).violations == ["a pod from unknown revision no-such-revision"]


async def test_kueue_gates_what_names_a_queue_and_admits_a_gang_whole(backend: Backend,
                                                                     request: pytest.FixtureRequest) -> None:
    """Pods whose runners name a LocalQueue wait at Kueue's gate until their Workload has quota, and
    observe says why in Kueue's words; a gang is one pod group: its pods are admitted together."""
    if isinstance(backend, RealBackend):
        request.getfixturevalue("kueue")
    spec = gang(1)
    for runner in spec["runners"]:
        runner["template"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = KUEUE_QUEUE
    replica = await backend.create_queued_replica(spec, capacity=2)
    revision = (await ensure(backend, replica)).name
    first = [keys.pod_name(replica.base, 0), keys.pod_name(replica.base, 0, worker=1)]
    second = [keys.pod_name(replica.base, 1), keys.pod_name(replica.base, 1, worker=1)]
    await create_pods(backend, replica, revision, 0)

    async def admitted(names: list[str]) -> bool:
        seen = await views(backend, replica)
        return all(name in seen and not seen[name].gated and seen[name].scheduled for name in names)

    await backend.until(lambda: admitted(first), "the first gang admitted")
    await create_pods(backend, replica, revision, 1)

    async def held() -> bool:
        seen = await views(backend, replica)
        return all(name in seen and seen[name].gated and seen[name].admission for name in second)

    await backend.until(held, "the second gang held, with Kueue's reason")
    seen = await views(backend, replica)
    for name in second:
        assert seen[name].queue == KUEUE_QUEUE and not seen[name].scheduled
        assert "couldn't assign flavors" in (seen[name].admission or "")
        assert "insufficient" in (seen[name].admission or "")
    assert all(seen[name].queue == KUEUE_QUEUE and seen[name].admission is None for name in first)
    await backend.settle()
    seen = await views(backend, replica)
    assert all(seen[name].gated for name in second), "no pod of a gang is admitted on its own"

    await backend.set_capacity(replica, 4)
    await backend.until(lambda: admitted(second), "the second gang admitted once there is room")
