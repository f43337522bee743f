"""The fakes behind the time-skipping migration tests (tests/test_migration_workflow.py: the
FakeReplicaCluster of testkit/replica_fakes.py with its nodes, EndpointSlices, parent InferenceService
and audit ledger, as testkit/migration_world.py serves them) answer as the real activities do
on the local cluster: one suite, run against both.

Each case drives a backend through the activities a migration calls by their names
(migration.resolve, migration.remove_request, migration.ready_endpoints, migration.archive, and the
replica.* calls of a surge and a drain: create_pods with a hint and an avoided node, set_serving,
delete_pods) and checks what they answer and refuse. The real backend is MigrationActivities and
ReplicaActivities as the chart's worker identity on the session's apiserver (kube-scheduler placing
pods on the kwok nodes, the endpoint controller writing EndpointSlices), with the ledger in a
namespace of its own (its bound is a constructor argument); the fake is FakeReplicaCluster on a
time-skipping test server's clock (its kubelet, scheduler and endpoint controller run on that
clock, so the fake cases are of the timeskip tier). The real InferenceReplica is the one an
OMENative InferenceService's workflow would project: `<service>-<component>`, controlled by it.

Where they differed before this suite (the fake was changed to match the real activities):
- migration.resolve answered any InferenceService as the fake's `svc`: a deleted service, or one of
  another uid under the name, is InferenceServiceNotFound in the real one (and now in the fake:
  `isvc_gone`, `isvc_uid`); remove_request on a deleted service answers False.
- a pod no node can take (its required affinity, with the avoided node, leaves none): the fake's
  observe said Running and scheduled; the real one says Pending, not scheduled, unschedulable
  (kube-scheduler's PodScheduled False / Unschedulable), which GangSchedulingUnavailable reads.
- migration.archive in the fake always used the default ledger bound; it now takes `ledger_bound`
  as MigrationActivities does.

Left as they are (not asserted here; docs/testing.md):
- the replica name: the fake's replica is `engine-set` for service `svc` (the replica engine
  fakes' name); the real rule (`<service>-<component>`) is asserted on the real backend only.
- the endpoint controller's lag after a gate turns False (the fake's `endpoint_lag`, 0 by default)
  is a delay only; cases wait for the slices, never for a duration.
- a sick node (the fake's `sick_nodes`, kwok's unready node stage) and the fake scheduler's
  spreading to the least loaded node are end-to-end matters (tests/test_migration_e2e.py).
- kube.emit_event on the InferenceService: best effort in the real one (a failure is logged, never
  raised); the fake records every call.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from servingops.activities.kubernetes import KubernetesActivities
from servingops.activities.migration import ledger
from servingops.activities.migration.activities import MigrationActivities
from servingops.activities.migration.types import (
    EndpointQuery,
    LedgerWrite,
    LedgerWritten,
    RequestRemoval,
    Resolved,
    ResolveInput,
)
from servingops.activities.replica.activities import ReplicaActivities
from servingops.activities.replica.types import (
    CreatePodsInput,
    CreatePodsResult,
    DeletePodsInput,
    EnsureRevisionInput,
    PodView,
    ReplicaObservation,
    ReplicaRef,
    RevisionResult,
    SetServingInput,
)
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome import instance_keys as keys
from servingops.api_models.ome.migration import MigrationStatus
from servingops.api_models.ome.replica import InferenceReplica
from servingops.api_models.refs import ObjectRef
from servingops.workers.kubernetes_errors import classify
from testkit.migration_world import ISVC
from testkit.replica_fakes import FakeReplicaCluster
from testkit.rollout_harness import start_env
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as
from tests.support.conformance import FAKE_TIMESKIP_AND_REAL, activity_name, chosen_backend

DEADLINE = 90.0
"""Real seconds the local cluster may take to act (an upper bound on a loaded machine, never asserted)."""
HOLD = "test.servingops.io/hold"
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


@dataclass
class Served:
    """An InferenceService, and the InferenceReplica serving its engine when it is OMENative."""

    isvc: ObjectRef
    replica: ReplicaRef
    """The replica serving the engine (for a service that is not OMENative: the one that would)."""


class Backend(Protocol):
    async def new_service(self, *, omenative: bool = True, template: dict[str, Any] | None = None) -> Served:
        """An InferenceService with an engine; when OMENative, its InferenceReplica (one runner of
        `template`, no pods yet)."""
        ...

    async def delete_service(self, served: Served) -> None: ...

    async def annotate(self, served: Served, annotations: dict[str, str]) -> None: ...

    async def annotations(self, served: Served) -> dict[str, str]: ...

    async def call(self, served: Served | None, activity: str, arg: Any) -> Any:
        """Run the named activity in that service's cluster (None: the ledger's)."""
        ...

    async def until(self, probe: Callable[[], Awaitable[bool]], what: str) -> None: ...

    async def hold_deletion(self, served: Served, pod: str) -> None: ...

    async def release_deletion(self, served: Served, pod: str) -> None: ...

    def nodes(self) -> list[str]:
        """The schedulable nodes, by name."""
        ...

    async def new_ledger(self, bound: int = ledger.BOUND_BYTES) -> None:
        """An empty audit ledger of that bound, which migration.archive writes from now on."""
        ...

    async def ledger(self) -> tuple[dict[str, str], int]:
        """The ledger's data and how many entries its bound has dropped."""
        ...

    async def break_ledger(self, broken: bool) -> None:
        """While broken, the ledger cannot be written (the real one: the worker has no right to it)."""
        ...


# -- the fake ----------------------------------------------------------------------------------------


class FakeBackend:
    def __init__(self, env: WorkflowEnvironment) -> None:
        self.env = env
        self.clusters: dict[str, FakeReplicaCluster] = {}
        self.ledger_cluster = FakeReplicaCluster(env)
        self.node_names = ["node-a", "node-b", "node-c"]

    def _cluster(self, served: Served) -> FakeReplicaCluster:
        return self.clusters[served.isvc.uid or ""]

    async def new_service(self, *, omenative: bool = True, template: dict[str, Any] | None = None) -> Served:
        cluster = FakeReplicaCluster(self.env, isvc_uid=str(uuid.uuid4()))
        cluster.nodes = list(self.node_names)
        cluster.omenative = omenative
        cluster.spec = single(template)
        self.clusters[cluster.isvc_uid] = cluster
        return Served(isvc=ISVC.model_copy(update={"uid": cluster.isvc_uid}),
                      replica=ReplicaRef(ref=cluster.ref, base=cluster._base()))

    async def delete_service(self, served: Served) -> None:
        self._cluster(served).isvc_gone = True

    async def annotate(self, served: Served, annotations: dict[str, str]) -> None:
        self._cluster(served).isvc_annotations.update(annotations)

    async def annotations(self, served: Served) -> dict[str, str]:
        return dict(self._cluster(served).isvc_annotations)

    async def call(self, served: Served | None, activity: str, arg: Any) -> Any:
        cluster = self._cluster(served) if served is not None else self.ledger_cluster
        fns = {activity_name(fn): fn
               for fn in [*cluster.activities(), *cluster.migration_activities()]}
        return await ActivityEnvironment().run(fns[activity], arg)

    async def until(self, probe: Callable[[], Awaitable[bool]], what: str) -> None:
        for _ in range(600):
            if await probe():
                return
            await self.env.sleep(1)
        raise AssertionError(f"never happened on the fake's clock: {what}")

    async def hold_deletion(self, served: Served, pod: str) -> None:
        self._cluster(served).hold_deletion(pod)

    async def release_deletion(self, served: Served, pod: str) -> None:
        self._cluster(served).release_deletion(pod)

    def nodes(self) -> list[str]:
        return list(self.node_names)

    async def new_ledger(self, bound: int = ledger.BOUND_BYTES) -> None:
        self.ledger_cluster = FakeReplicaCluster(self.env, ledger_bound=bound)

    async def ledger(self) -> tuple[dict[str, str], int]:
        return dict(self.ledger_cluster.ledger), self.ledger_cluster.ledger_dropped

    async def break_ledger(self, broken: bool) -> None:
        self.ledger_cluster.ledger_broken = broken


# -- the local cluster --------------------------------------------------------------------------------


class RealBackend:
    def __init__(self, admin: client.ApiClient, worker: client.ApiClient, cluster: LocalKubeCluster) -> None:
        self.admin, self.worker, self.kube = admin, worker, cluster
        self.custom = client.CustomObjectsApi(admin)
        self.core = client.CoreV1Api(admin)
        self.namespace = new_namespace(admin, "migration-conformance")
        self.created = [self.namespace]
        kube = KubernetesActivities(worker)
        self.activities: dict[str, Callable[..., Any]] = {
            activity_name(fn): fn
            for fn in [*MigrationActivities(worker).all(), *ReplicaActivities(worker).all(), kube.emit_event]}
        self.ledger_ns = ""
        self.ledger_acts: MigrationActivities | None = None
        self.broken = False

    async def new_service(self, *, omenative: bool = True, template: dict[str, Any] | None = None) -> Served:
        name = f"mig-{uuid.uuid4().hex[:5]}"
        spec = {"deploymentMode": "OMENative" if omenative else "RawDeployment", "engine": {
            "minReplicas": 1, "runner": {"name": "engine", "image": "registry.invalid/engine:v1",
                                         "ports": [{"containerPort": 8000}]}}}
        obj = create(self.admin, InferenceService, manifest(InferenceService, spec, name=name), self.namespace)
        isvc = ObjectRef.of(InferenceService, name, self.namespace, obj["metadata"]["uid"])
        replica_name = f"{name}-engine"
        replica = ObjectRef.of(InferenceReplica, replica_name, self.namespace, None)
        if omenative:  # what the service's workflow projects: the replica, controlled by the service
            body = manifest(InferenceReplica, single(template), name=replica_name)
            body["metadata"]["ownerReferences"] = [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                                                    "name": name, "uid": isvc.uid, "controller": True}]
            made = create(self.admin, InferenceReplica, body, self.namespace)
            replica = ObjectRef.of(InferenceReplica, replica_name, self.namespace, made["metadata"]["uid"])
        return Served(isvc=isvc, replica=ReplicaRef(ref=replica, base=replica_name))

    async def delete_service(self, served: Served) -> None:
        self.custom.delete_namespaced_custom_object("ome.io", "v1beta1", self.namespace, "inferenceservices",
                                                    served.isvc.name)

        async def gone() -> bool:
            try:
                self.custom.get_namespaced_custom_object("ome.io", "v1beta1", self.namespace, "inferenceservices",
                                                         served.isvc.name)
            except ApiException as exc:
                return exc.status == 404
            return False

        await self.until(gone, "the InferenceService gone")

    async def annotate(self, served: Served, annotations: dict[str, str]) -> None:
        self.custom.patch_namespaced_custom_object("ome.io", "v1beta1", self.namespace, "inferenceservices",
                                                   served.isvc.name, {"metadata": {"annotations": annotations}})

    async def annotations(self, served: Served) -> dict[str, str]:
        obj = self.custom.get_namespaced_custom_object("ome.io", "v1beta1", self.namespace, "inferenceservices",
                                                       served.isvc.name)
        return dict(obj["metadata"].get("annotations") or {})

    async def call(self, served: Served | None, activity: str, arg: Any) -> Any:
        fn = self.activities[activity]
        if activity == "migration.archive":
            assert self.ledger_acts is not None, "new_ledger first"
            fn = (MigrationActivities(self.worker, self.ledger_ns) if self.broken else self.ledger_acts).archive
        try:
            return await asyncio.to_thread(ActivityEnvironment().run, fn, arg)
        except ApiException as exc:  # the worker's interceptor on a first attempt (workers/kubernetes_errors.py)
            permanent = classify(exc, attempt=1)
            if permanent is None:
                raise
            raise permanent from exc

    async def until(self, probe: Callable[[], Awaitable[bool]], what: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while not await probe():
            assert time.monotonic() < deadline, f"never happened on the local cluster: {what}"
            await asyncio.sleep(0.3)

    async def hold_deletion(self, served: Served, pod: str) -> None:
        self.core.patch_namespaced_pod(pod, self.namespace, {"metadata": {"finalizers": [HOLD]}})

    async def release_deletion(self, served: Served, pod: str) -> None:
        self.core.patch_namespaced_pod(pod, self.namespace, {"metadata": {"finalizers": None}},
                                       _content_type="application/merge-patch+json")

    def nodes(self) -> list[str]:
        return list(self.kube.node_names)

    async def new_ledger(self, bound: int = ledger.BOUND_BYTES) -> None:
        self.ledger_ns = new_namespace(self.admin, "ledger-conformance")
        self.created.append(self.ledger_ns)
        self.ledger_acts = MigrationActivities(self.admin, self.ledger_ns, ledger_bound=bound)
        self.broken = False

    async def ledger(self) -> tuple[dict[str, str], int]:
        try:
            cm = self.core.read_namespaced_config_map(ledger.NAME, self.ledger_ns)
        except ApiException as exc:
            if exc.status == 404:
                return {}, 0
            raise
        dropped = (cm.metadata.annotations or {}).get(ledger.DROPPED, "0")
        return dict(cm.data or {}), int(dropped)

    async def break_ledger(self, broken: bool) -> None:
        self.broken = broken


@pytest.fixture(scope="module")
def real_backend(kube_api: client.ApiClient, kube_cluster: LocalKubeCluster,
                 chart_identities: Identities) -> Iterator[RealBackend]:
    with api_as(chart_identities.worker) as worker:
        backend = RealBackend(kube_api, worker, kube_cluster)
        yield backend
        for name in backend.created:
            with contextlib.suppress(ApiException):
                client.CoreV1Api(kube_api).delete_namespace(name)


@pytest.fixture(scope="module")
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


@pytest.fixture(params=FAKE_TIMESKIP_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, lambda: FakeBackend(request.getfixturevalue("skipping_env")))


# -- helpers -------------------------------------------------------------------------------------------


def single(template: dict[str, Any] | None = None) -> dict[str, Any]:
    body = copy.deepcopy(template) if template is not None else {
        "metadata": {"labels": {"app": "chat"}},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/engine:v1",
                                 "ports": [{"containerPort": 8000}]}]}}
    return {"component": "engine", "runners": [{"name": "default", "size": 1, "template": body}]}


def pinned(node: str) -> dict[str, Any]:
    """A runner template whose pods may run on `node` only."""
    template = single()["runners"][0]["template"]
    template["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}
    return dict(template)


async def resolve(backend: Backend, served: Served, isvc: ObjectRef | None = None,
                  component: str = "engine") -> Resolved:
    result: Resolved = await backend.call(served, "migration.resolve",
                                          ResolveInput(isvc=isvc or served.isvc, component=component))
    return result


async def remove(backend: Backend, served: Served, annotation: str) -> bool:
    result: bool = await backend.call(served, "migration.remove_request",
                                      RequestRemoval(isvc=served.isvc, annotation=annotation))
    return result


async def ready_endpoints(backend: Backend, served: Served, pods: list[str]) -> list[str]:
    result: list[str] = await backend.call(served, "migration.ready_endpoints",
                                           EndpointQuery(namespace=served.replica.ref.namespace or "", pods=pods))
    return result


async def revision(backend: Backend, served: Served) -> str:
    result: RevisionResult = await backend.call(served, "replica.ensure_revision",
                                                EnsureRevisionInput(replica=served.replica))
    await backend.call(served, "replica.ensure_service", served.replica)
    return result.name


async def create_pods(backend: Backend, served: Served, rev: str, index: int, *, slot: int = 0,
                      preferred: list[str] | None = None, avoid: str | None = None) -> CreatePodsResult:
    result: CreatePodsResult = await backend.call(served, "replica.create_pods", CreatePodsInput(
        replica=served.replica, index=index, revision=rev, slot=slot, preferred_nodes=preferred or [],
        avoid_node=avoid))
    return result


async def views(backend: Backend, served: Served) -> dict[str, PodView]:
    seen: ReplicaObservation | None = await backend.call(served, "replica.observe", served.replica.ref)
    assert seen is not None
    return {pod.name: pod for pod in seen.pods}


async def wait_pod(backend: Backend, served: Served, name: str, test: Callable[[PodView], bool],
                   what: str) -> PodView:
    seen: list[PodView] = []

    async def probe() -> bool:
        view = (await views(backend, served)).get(name)
        if view is not None and test(view):
            seen.append(view)
            return True
        return False

    await backend.until(probe, f"{name}: {what}")
    return seen[-1]


async def serving(backend: Backend, served: Served, pods: list[str], value: bool) -> None:
    await backend.call(served, "replica.set_serving", SetServingInput(
        namespace=served.replica.ref.namespace or "", pods=pods, serving=value, reason="Test"))


async def archive(backend: Backend, replica: ObjectRef, records: list[MigrationStatus]) -> LedgerWritten:
    result: LedgerWritten = await backend.call(None, "migration.archive", LedgerWrite(replica=replica,
                                                                                      records=records))
    return result


def record(n: int, *, phase: str = "Completed", succeeded: bool | None = None) -> MigrationStatus:
    return MigrationStatus(request_uuid=f"{n:08d}-0000-4000-8000-000000000000", trigger="Manual", phase=phase,
                           source_instance=n, surge_instance=n + 100, from_node=f"node-{n}", reason="defrag",
                           message="done", started_at=T0 + timedelta(minutes=n),
                           completed_at=T0 + timedelta(minutes=n, seconds=30), succeeded=succeeded)


def replica_ref(name: str) -> ObjectRef:
    return ObjectRef(group="ome.io", version="v1beta1", plural="inferencereplicas", kind="InferenceReplica",
                     name=name, namespace="team-a", uid=str(uuid.uuid4()))


# -- the cases -----------------------------------------------------------------------------------------


async def test_resolve_names_the_replica_or_says_why_not(backend: Backend) -> None:
    served = await backend.new_service()
    isvc = served.isvc
    found = await resolve(backend, served)
    assert found == Resolved(replica=served.replica.ref.name, replica_uid=served.replica.ref.uid)
    if isinstance(backend, RealBackend):
        assert found.replica == f"{isvc.name}-engine", "the replica an OMENative service projects"

    missing = await resolve(backend, served, component="decoder")
    assert (missing.refused, missing.replica) == ("ComponentNotFound", None)
    assert missing.message == f"InferenceService {isvc.namespace}/{isvc.name} has no component 'decoder'"

    other_uid = await resolve(backend, served, isvc.model_copy(update={"uid": str(uuid.uuid4())}))
    assert (other_uid.refused, other_uid.message) == (
        "InferenceServiceNotFound", f"InferenceService {isvc.namespace}/{isvc.name} is gone")

    raw = await backend.new_service(omenative=False)
    refused = await resolve(backend, raw)
    assert (refused.refused, refused.replica) == ("NotOMENative", None)
    assert refused.message == (
        f"component engine of InferenceService {raw.isvc.namespace}/{raw.isvc.name} is not OMENative (no "
        f"InferenceReplica {raw.replica.ref.name} serves it): only OMENative Instances can be migrated")

    await backend.delete_service(served)
    gone = await resolve(backend, served)
    assert (gone.refused, gone.message) == (
        "InferenceServiceNotFound", f"InferenceService {isvc.namespace}/{isvc.name} is gone")


async def test_remove_request_removes_only_its_own_annotation(backend: Backend) -> None:
    served = await backend.new_service()
    first, second = (f"ome.io/migration-request-v1-{uuid.uuid4()}" for _ in range(2))
    await backend.annotate(served, {first: "{}", second: "{}", "team.example/keep": "yes"})
    assert await remove(backend, served, first) is True
    left = await backend.annotations(served)
    assert first not in left and left[second] == "{}" and left["team.example/keep"] == "yes"
    assert await remove(backend, served, first) is False, "already removed"
    await backend.delete_service(served)
    assert await remove(backend, served, second) is False, "the service is gone"


async def test_ready_endpoints_lists_the_asked_pods_a_slice_has_ready(backend: Backend) -> None:
    served = await backend.new_service()
    rev = await revision(backend, served)
    one, two = keys.pod_name(served.replica.base, 0), keys.pod_name(served.replica.base, 1)
    await create_pods(backend, served, rev, 0)
    await create_pods(backend, served, rev, 1)
    for name in (one, two):
        await wait_pod(backend, served, name, lambda v: v.containers_ready, "containers ready")
    assert await ready_endpoints(backend, served, [one, two, "nobody"]) == [], "the gate holds them out"

    await serving(backend, served, [one, two], True)

    async def listed(pods: list[str], expected: list[str]) -> bool:
        return await ready_endpoints(backend, served, pods) == expected

    await backend.until(lambda: listed([two, one, "nobody"], [one, two]), "both Ready in a slice")
    assert await ready_endpoints(backend, served, [two]) == [two], "only the pods asked about"

    await serving(backend, served, [two], False)
    await backend.until(lambda: listed([one, two], [one]), "the closed gate's pod out of the slices")

    await backend.hold_deletion(served, one)
    views_before = await views(backend, served)
    deleted: list[str] = await backend.call(served, "replica.delete_pods", DeletePodsInput(
        namespace=served.replica.ref.namespace or "", pods=[one], uids={one: views_before[one].uid}))
    assert deleted == [one]
    await backend.until(lambda: listed([one, two], []), "a terminating pod is no Ready endpoint")
    assert (await views(backend, served))[one].deleting
    await backend.release_deletion(served, one)


async def test_a_surge_avoids_the_source_node_and_takes_the_hint(backend: Backend) -> None:
    source, other, hinted = backend.nodes()[:3]
    served = await backend.new_service()
    rev = await revision(backend, served)
    surge = await create_pods(backend, served, rev, 0, slot=1, preferred=[hinted], avoid=source)
    name = keys.pod_name(served.replica.base, 0, slot=1)
    assert surge.created == [name]
    placed = await wait_pod(backend, served, name, lambda v: v.scheduled, "scheduled")
    assert (placed.node, placed.slot, placed.index) == (hinted, 1, 0)

    await create_pods(backend, served, rev, 1, preferred=[source], avoid=source)
    elsewhere = await wait_pod(backend, served, keys.pod_name(served.replica.base, 1), lambda v: v.scheduled,
                               "scheduled")
    assert elsewhere.node not in (None, source), "the avoided node wins over a hint"

    stuck = await backend.new_service(template=pinned(other))
    rev = await revision(backend, stuck)
    await create_pods(backend, stuck, rev, 0, avoid=other)
    nowhere = await wait_pod(backend, stuck, keys.pod_name(stuck.replica.base, 0), lambda v: v.unschedulable,
                             "unschedulable")
    assert (nowhere.node, nowhere.phase, nowhere.scheduled, nowhere.gated) == (None, "Pending", False, False)
    assert not nowhere.containers_ready and not nowhere.ready


async def test_the_ledger_archives_once_and_rewrites_a_changed_record(backend: Backend) -> None:
    await backend.new_ledger()
    ref = replica_ref(f"ledger-{uuid.uuid4().hex[:6]}")
    records = [record(1), record(2, phase="Failed")]
    assert await archive(backend, ref, records) == LedgerWritten(changed=True, dropped=0)
    data, dropped = await backend.ledger()
    assert data == ledger.entries("team-a", ref.name, records) and dropped == 0
    assert await archive(backend, ref, records) == LedgerWritten(changed=False), "the same records: no write"
    stamped = record(1, succeeded=True)
    assert await archive(backend, ref, [stamped]) == LedgerWritten(changed=True, dropped=0)
    data, _ = await backend.ledger()
    assert data == ledger.entries("team-a", ref.name, [stamped, records[1]])


async def test_the_ledger_bound_drops_the_oldest_and_counts_them(backend: Backend) -> None:
    entry = ledger.entries("team-a", "r", [record(0)])
    await backend.new_ledger(bound=3 * sum(len(k) + len(v) for k, v in entry.items()) + 10)
    ref = replica_ref("r")
    answers = [await archive(backend, ref, [record(n)]) for n in range(5)]
    assert [a.dropped for a in answers] == [0, 0, 0, 1, 1] and all(a.changed for a in answers)
    data, dropped = await backend.ledger()
    assert data == ledger.entries("team-a", "r", [record(n) for n in (2, 3, 4)]) and dropped == 2
    assert await archive(backend, ref, [record(4)]) == LedgerWritten(changed=False)


async def test_a_ledger_that_cannot_be_written_fails_retryably(backend: Backend) -> None:
    await backend.new_ledger()
    ref = replica_ref(f"ledger-{uuid.uuid4().hex[:6]}")
    await backend.break_ledger(True)
    with pytest.raises(Exception) as failed:
        await archive(backend, ref, [record(1)])
    assert not (isinstance(failed.value, ApplicationError) and failed.value.non_retryable), \
        f"a write that may work later failed for good: {failed.value!r}"
    assert await backend.ledger() == ({}, 0)
    await backend.break_ledger(False)
    assert (await archive(backend, ref, [record(1)])).changed
