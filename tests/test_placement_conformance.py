"""The in-memory fleet behind the time-skipping placement tests (testkit/placement_fakes.py) answers as
the real placement activities (activities/placement/) do against a real member cluster: one suite,
run against both.

Each case drives a backend through the four activities by their method names (read_source,
apply_member, observe_member, delete_member) and checks what they answer. The real backend is
PlacementActivities as the chart's worker identity on the session's control-plane apiserver, and
one member cluster (devstack/members.py: its own apiserver, kwok nodes, the real Kueue with a
ClusterQueue whose cpu quota decides admission, and its own servingops worker and bridge),
registered as a WorkloadCluster through a kubeconfig Secret of the chart's placement-member
identity. The fake is FakeFleet's activities, called the same way. A case that passes on one and
fails on the other is a difference the time-skipping workflow tests would hide.

What each case covers:
- read_source: the source (uid, generation, deleting, placement, components, floors), the
  registrations (name, uid, labels, Ready), status.placement and the finalizers as written; a
  deleting source; a gone source is None, and applying it is SourceGone.
- apply_member: creates the derived service (origin label, execution annotation, queue), then
  updates the same object (same uid: new execution, floors as minReplicas).
- observe_member: exists False before any apply; exists with every component counted, none
  admitted while the member has no quota; once it has quota, admitted and ready with a url.
- delete_member: removes our copy, gone is done; a same-named object without our origin label is
  NameInUse for apply (not written) and delete (kept, done) and not ours for observe.
- inventory_member: nothing stands (identified, no uid); a same-named object not derived from the source
  is identified as standing (its uid, no origin, its admitted Instances); a target naming that uid
  (adopt_uid) observes, writes (the same object, now with our origin label) and deletes it, and the
  inventory then says it is ours; a target naming another uid still gets NameInUse.
- a member that cannot be reached: every call answers Unreachable (done False / reachable False;
  the inventory not identified).
- a deregistered member (its WorkloadCluster deleted): every call answers RegistrationNotFound,
  and read_source lists it no more.

Where they differed before this suite (the fake was changed to match the real activities):
- apply_member of a gone source: the fake wrote the copy; the real one answers SourceGone.
- a same-named object not derived from the source: the fake had no such thing and overwrote or
  deleted whatever was there; the real ones never touch it (NameInUse).
- a member without a WorkloadCluster: the fake raised KeyError; the real ones answer
  RegistrationNotFound.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.testing import ActivityEnvironment

from devstack import identities
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster, apply_objects
from devstack.members import PLACEMENT_QUEUE, MemberCluster
from devstack.services import TemporalDevServer
from servingops.activities.placement.activities import PlacementActivities
from servingops.activities.placement.types import (
    ApplyMemberInput,
    CapacityInput,
    CapacityReading,
    ClusterRegistration,
    MemberInventory,
    MemberObservation,
    MemberTarget,
    MemberWrite,
    PlacementSource,
    SourceInput,
)
from servingops.api_models.ome.placement import EXECUTION_ANNOTATION, ORIGIN_LABEL
from servingops.api_models.refs import ObjectRef
from servingops.rendering.kueue import QUEUE_LABEL
from testkit.placement_fakes import FakeFleet, FakeMember
from testkit.waiting import wait_until
from tests.fixtures.kube import api_as
from tests.support.conformance import FAKE_UNIT_AND_REAL, chosen_backend

GROUP, VERSION = "ome.io", "v1beta1"
DEADLINE = 240.0
"""Real seconds the member may take to act (admission goes through its worker and Kueue); an upper
bound on a loaded machine, never asserted."""
FINALIZER = "test.servingops.io/hold"
GPUS_PER_REPLICA = 4
MEMBER = "conformance-member"
"""The fake's member name (the real one's carries a random suffix)."""


@dataclass(frozen=True)
class Derived:
    """The derived service in the member as both backends can say it."""

    uid: str
    origin: str | None
    execution: dict[str, Any] | None
    queue: str | None
    floor: int | None


class Backend(Protocol):
    member: str
    """The registered member's WorkloadCluster name."""

    def create_source(self, placement: dict[str, Any], gpus: int = 0) -> ObjectRef:
        """A new source InferenceService (one engine, minReplicas 1, `gpus` per replica) placed by
        `placement`."""
        ...

    def call(self, activity: str, arg: Any) -> Any:
        """Run the activity named by its method name."""
        ...

    def until(self, probe: Callable[[], bool], what: str) -> None: ...

    def registration(self) -> ClusterRegistration:
        """The member's WorkloadCluster as read_source must list it."""
        ...

    def set_ready(self, ready: bool) -> None:
        """The member's Ready condition (what the WorkloadCluster workflow writes)."""
        ...

    def set_quota(self, cpu: str) -> None:
        """The member's Kueue quota: "0" admits nothing."""
        ...

    def derived(self, target: MemberTarget) -> Derived | None: ...

    def put_foreign(self, target: MemberTarget) -> None:
        """A same-named InferenceService in the member that no source of placement made."""
        ...

    def write_status_placement(self, source: ObjectRef, placement: dict[str, Any]) -> None: ...

    def set_finalizers(self, source: ObjectRef, finalizers: list[str]) -> None: ...

    def delete_source(self, source: ObjectRef) -> None: ...

    def register_alias(self) -> str:
        """Another WorkloadCluster for the same member (to be deregistered): its name."""
        ...

    def deregister(self, name: str) -> None: ...

    def register_unreachable(self) -> str:
        """A WorkloadCluster whose apiserver refuses every connection: its name."""
        ...

    def report_capacity(self) -> None:
        """The member reports its capacity: 16 GPUs (two kwok nodes of 8) on its root AcceleratorQuota,
        so a source asking 4 GPUs per replica has 4 whole replicas there."""
        ...


# -- the fake ----------------------------------------------------------------------------------------


_RESULTS: dict[str, Any] = {"read_source": PlacementSource, "apply_member": MemberWrite,
                            "inventory_member": MemberInventory,
                            "observe_member": MemberObservation, "delete_member": MemberWrite,
                            "read_capacity": CapacityReading}


class FakeBackend:
    """One FakeFleet per case: its one source is team-a/chat."""

    def __init__(self) -> None:
        self.member = MEMBER
        self.fleet = FakeFleet({MEMBER: FakeMember(MEMBER, {"role": "conformance"}, url="http://chat.member.example")},
                               placement=None)
        self.fleet.gone = True  # no source until a case creates one

    def _member(self) -> FakeMember:
        return self.fleet.members[MEMBER]

    def create_source(self, placement: dict[str, Any], gpus: int = 0) -> ObjectRef:
        self.fleet.placement, self.fleet.gone, self.fleet.min_replicas = copy.deepcopy(placement), False, {"engine": 1}
        return ObjectRef.model_validate(self.fleet.ref())

    def call(self, activity: str, arg: Any) -> Any:
        activities = {fn.__name__: fn for fn in self.fleet.activities()}
        payload = arg.model_dump(mode="json") if hasattr(arg, "model_dump") else arg
        answer = asyncio.run(ActivityEnvironment().run(activities[activity], payload))
        return None if answer is None else _RESULTS[activity].model_validate(answer)

    def until(self, probe: Callable[[], bool], what: str) -> None:
        assert probe(), f"never happened on the fake: {what}"

    def registration(self) -> ClusterRegistration:
        m = self._member()
        return ClusterRegistration(name=m.name, uid=m.uid, labels=m.labels, ready=m.ready)

    def set_ready(self, ready: bool) -> None:
        self._member().ready = ready

    def set_quota(self, cpu: str) -> None:
        self._member().admit = cpu != "0"

    def derived(self, target: MemberTarget) -> Derived | None:
        body = self.fleet.members[target.cluster].derived if target.cluster in self.fleet.members else None
        if body is None:
            return None
        floor = (body.get("floors") or {}).get("engine", self.fleet.min_replicas.get("engine"))
        return Derived(uid=body["uid"], origin=body.get("origin"), execution=body.get("execution"),
                       queue=body.get("queue"), floor=floor)

    def put_foreign(self, target: MemberTarget) -> None:
        self.fleet.members[target.cluster].derived = {"uid": str(uuid.uuid4()), "origin": None}

    def report_capacity(self) -> None:
        self._member().capacity = 16 // GPUS_PER_REPLICA

    def write_status_placement(self, source: ObjectRef, placement: dict[str, Any]) -> None:
        self.fleet.status_placement = copy.deepcopy(placement)

    def set_finalizers(self, source: ObjectRef, finalizers: list[str]) -> None:
        self.fleet.finalizers = list(finalizers)
        self.fleet.gone = self.fleet.gone or (self.fleet.deleting and not finalizers)

    def delete_source(self, source: ObjectRef) -> None:
        self.fleet.deleting = True
        self.fleet.gone = not self.fleet.finalizers

    def register_alias(self) -> str:
        name = f"{MEMBER}-alias"
        self.fleet.members[name] = FakeMember(name, {})
        return name

    def deregister(self, name: str) -> None:
        del self.fleet.members[name]

    def register_unreachable(self) -> str:
        name = f"{MEMBER}-dead"
        self.fleet.members[name] = FakeMember(name, {}, reachable=False)
        return name


# -- a real member -----------------------------------------------------------------------------------


class RealBackend:
    """The session's control plane as the chart's worker, and one member cluster."""

    def __init__(self, admin: client.ApiClient, worker: client.ApiClient, namespace: str,
                 member: MemberCluster) -> None:
        self.admin, self.namespace, self.cluster = admin, namespace, member
        self.member = member.name
        self.custom = client.CustomObjectsApi(admin)
        self.core = client.CoreV1Api(admin)
        self.placement = PlacementActivities(worker, identities.NAMESPACE)
        self.activities: dict[str, Callable[..., Any]] = {fn.__name__: fn for fn in self.placement.all()}
        self.registrations: list[str] = []
        """Extra WorkloadClusters (and their Secrets, same name) to delete at the end."""
        self.roots: list[str] = []
        """Root AcceleratorQuotas made in the member, deleted at the end."""

    def create_source(self, placement: dict[str, Any], gpus: int = 0) -> ObjectRef:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
                "metadata": {"name": f"conf-{uuid.uuid4().hex[:6]}", "namespace": self.namespace},
                "spec": {**_engine_spec(gpus), "placement": placement}}
        created = cast(dict[str, Any], self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "inferenceservices", body))
        meta = created["metadata"]
        return ObjectRef(group=GROUP, version=VERSION, plural="inferenceservices", kind="InferenceService",
                         name=meta["name"], namespace=self.namespace, uid=meta["uid"])

    def call(self, activity: str, arg: Any) -> Any:
        return ActivityEnvironment().run(self.activities[activity], arg)

    def until(self, probe: Callable[[], bool], what: str) -> None:
        wait_until(f"{what} (on the real member)", probe, self.cluster.worker, timeout=DEADLINE)

    def _workload_cluster(self, name: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.custom.get_cluster_custom_object(GROUP, VERSION, "workloadclusters", name))

    def registration(self) -> ClusterRegistration:
        obj = self._workload_cluster(self.member)
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (obj.get("status") or {}).get("conditions") or [])
        return ClusterRegistration(name=self.member, uid=obj["metadata"]["uid"],
                                   labels=obj["metadata"].get("labels") or {}, ready=ready)

    def set_ready(self, ready: bool) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now,
                     "reason": "Connected" if ready else "Unreachable", "message": "set by the conformance suite",
                     "observedGeneration": self._workload_cluster(self.member)["metadata"].get("generation", 1)}
        self.custom.patch_cluster_custom_object_status(GROUP, VERSION, "workloadclusters", self.member,
                                                       {"status": {"conditions": [condition]}})

    def set_quota(self, cpu: str) -> None:
        self.cluster.set_quota(cpu)

    def _member_service(self, target: MemberTarget) -> dict[str, Any] | None:
        try:
            obj = cast(dict[str, Any], client.CustomObjectsApi(self.cluster.api).get_namespaced_custom_object(
                GROUP, VERSION, target.namespace, "inferenceservices", target.name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    def derived(self, target: MemberTarget) -> Derived | None:
        obj = self._member_service(target)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return None
        meta, engine = obj["metadata"], (obj.get("spec") or {}).get("engine") or {}
        execution = (meta.get("annotations") or {}).get(EXECUTION_ANNOTATION)
        return Derived(uid=meta["uid"], origin=(meta.get("labels") or {}).get(ORIGIN_LABEL),
                       execution=json.loads(execution) if execution else None,
                       queue=(engine.get("labels") or {}).get(QUEUE_LABEL), floor=engine.get("minReplicas"))

    def put_foreign(self, target: MemberTarget) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
                "metadata": {"name": target.name, "namespace": target.namespace}, "spec": _engine_spec()}
        # Its pods in the member's queue, as a copy made by hand for that member would be: Kueue decides.
        body["spec"]["engine"]["labels"] = {QUEUE_LABEL: PLACEMENT_QUEUE}
        client.CustomObjectsApi(self.cluster.api).create_namespaced_custom_object(
            GROUP, VERSION, target.namespace, "inferenceservices", body)

    def write_status_placement(self, source: ObjectRef, placement: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, self.namespace, "inferenceservices",
                                                          source.name, {"status": {"placement": placement}})

    def set_finalizers(self, source: ObjectRef, finalizers: list[str]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, "inferenceservices", source.name,
                                                   {"metadata": {"finalizers": finalizers or None}})

    def delete_source(self, source: ObjectRef) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, "inferenceservices", source.name)

    def _register(self, name: str, kubeconfig: str) -> str:
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                  "metadata": {"name": name, "namespace": identities.NAMESPACE},
                  "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()}}
        registration = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadCluster", "metadata": {"name": name},
                        "spec": {"clusterSource": {"kubeConfig": {"secretRef": {
                            "name": name, "namespace": identities.NAMESPACE}}}}}
        apply_objects(self.admin, [secret, registration])
        self.registrations.append(name)
        return name

    def register_alias(self) -> str:
        return self._register(f"{self.member}-alias-{uuid.uuid4().hex[:4]}", self.cluster.member_kubeconfig())

    def deregister(self, name: str) -> None:
        self.custom.delete_cluster_custom_object(GROUP, VERSION, "workloadclusters", name)

    def report_capacity(self) -> None:
        member = client.CustomObjectsApi(self.cluster.api)
        name = f"conf-root-{uuid.uuid4().hex[:4]}"
        member.create_cluster_custom_object(GROUP, VERSION, "acceleratorquotas", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "AcceleratorQuota", "metadata": {"name": name},
            "spec": {"role": "Cohort"}})
        self.roots.append(name)

        def reported() -> bool:  # the member's own servingops writes it (its AcceleratorCapacityWorkflow)
            quota = member.get_cluster_custom_object(GROUP, VERSION, "acceleratorquotas", name)
            return any(e.get("resourceName") == "nvidia.com/gpu" for e in (quota.get("status") or {}).get("capacity")
                       or [])
        self.until(reported, "the member's capacity report")

    def register_unreachable(self) -> str:
        config = yaml.safe_load(self.cluster.member_kubeconfig())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{_closed_port()}"
        return self._register(f"{self.member}-dead-{uuid.uuid4().hex[:4]}", yaml.safe_dump(config))

    def cleanup(self) -> None:
        for name in self.roots:
            with contextlib.suppress(ApiException):
                client.CustomObjectsApi(self.cluster.api).delete_cluster_custom_object(
                    GROUP, VERSION, "acceleratorquotas", name)
        for name in self.registrations:
            with contextlib.suppress(ApiException):
                self.custom.delete_cluster_custom_object(GROUP, VERSION, "workloadclusters", name)
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_secret(name, identities.NAMESPACE)
        self.placement.clients.close()


def _engine_spec(gpus: int = 0) -> dict[str, Any]:
    """One engine Instance asking for one cpu (and `gpus`): the member's Kueue admits it only with quota."""
    resources = {"cpu": "1", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {"deploymentMode": "OMENative", "engine": {"minReplicas": 1, "runner": {
        "name": "engine", "image": "vllm/vllm-openai:v0.9", "ports": [{"containerPort": 8000}],
        "resources": {"requests": resources, "limits": resources}}}}


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def real_backend(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                 chart_identities: Identities, stack_logs: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealBackend]:
    suffix = uuid.uuid4().hex[:5]
    namespace = f"plconf-{suffix}"
    client.CoreV1Api(kube_api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    member = MemberCluster(f"plconf-{suffix}", tmp_path_factory.mktemp("member"), stack_logs,
                           labels={f"conformance-{suffix}.placement.test/role": "member"}, cpu_quota="0")
    try:
        member.start(temporal_server.address)
        member.prepare_namespace(namespace)
        member.register(kube_api, identities.NAMESPACE)
        with api_as(chart_identities.worker) as worker:
            backend = RealBackend(kube_api, worker, namespace, member)
            try:
                yield backend
            finally:
                backend.cleanup()
    finally:
        member.unregister(kube_api, identities.NAMESPACE)
        member.stop()
        client.CoreV1Api(kube_api).delete_namespace(namespace)


@pytest.fixture(params=FAKE_UNIT_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, FakeBackend)


# -- helpers -------------------------------------------------------------------------------------------


def _placement(backend: Backend) -> dict[str, Any]:
    labels = backend.registration().labels
    return {"policy": "ClusterAffinity", "mode": "Single", "clusterAffinity": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]} for key, value in labels.items()]}


def _target(source: ObjectRef, cluster: str) -> MemberTarget:
    assert source.namespace and source.uid
    return MemberTarget(cluster=cluster, namespace=source.namespace, name=source.name, source_uid=source.uid)


def _execution(source: ObjectRef, cluster: str, plan: str, revision: int = 1) -> dict[str, Any]:
    return {"planID": plan, "revision": revision, "sourceUID": source.uid, "clusterUID": cluster, "pauseSurge": False}


def read(backend: Backend, source: ObjectRef) -> PlacementSource | None:
    answer: PlacementSource | None = backend.call("read_source", SourceInput(isvc=source))
    return answer


def apply(backend: Backend, source: ObjectRef, target: MemberTarget, execution: dict[str, Any],
          floors: dict[str, int] | None = None) -> MemberWrite:
    answer: MemberWrite = backend.call("apply_member", ApplyMemberInput(
        target=target, source=source, execution=execution, queue=PLACEMENT_QUEUE, replica_floors=floors))
    return answer


def observe(backend: Backend, target: MemberTarget) -> MemberObservation:
    answer: MemberObservation = backend.call("observe_member", target)
    return answer


def delete(backend: Backend, target: MemberTarget) -> MemberWrite:
    answer: MemberWrite = backend.call("delete_member", target)
    return answer


@contextlib.contextmanager
def withdrawn(backend: Backend, source: ObjectRef, target: MemberTarget) -> Iterator[None]:
    """At the end of a case: our copy deleted, the source's finalizers gone (a later case starts clean)."""
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            delete(backend, target)
        with contextlib.suppress(Exception):
            backend.set_finalizers(source, [])


# -- the cases -----------------------------------------------------------------------------------------


def test_read_source_answers_the_source_the_fleet_status_and_finalizers(backend: Backend) -> None:
    placement = _placement(backend)
    source = backend.create_source(placement)
    target = _target(source, backend.member)
    with withdrawn(backend, source, target):
        backend.set_ready(True)
        seen = read(backend, source)
        assert seen is not None
        assert (seen.uid, seen.generation, seen.deleting, seen.placement) == (source.uid, 1, False, placement)
        assert (seen.components, seen.min_replicas) == (["engine"], {"engine": 1})
        assert (seen.status_placement, seen.finalizers) == (None, [])
        mine = {r.name: r for r in seen.registrations}
        assert mine[backend.member] == backend.registration() and mine[backend.member].ready is True

        backend.set_ready(False)
        status = {"phase": "Racing", "cluster": backend.member}
        backend.write_status_placement(source, status)
        backend.set_finalizers(source, [FINALIZER])
        seen = read(backend, source)
        assert seen is not None and seen.status_placement == status and seen.finalizers == [FINALIZER]
        assert {r.name: r for r in seen.registrations}[backend.member].ready is False

        backend.delete_source(source)  # the finalizer holds it: deleting, still read
        seen = read(backend, source)
        assert seen is not None and seen.deleting is True and seen.finalizers == [FINALIZER]

        backend.set_finalizers(source, [])
        backend.until(lambda: read(backend, source) is None, "the source gone once its finalizer is removed")
        written = apply(backend, source, target, _execution(source, backend.member, "p1"))
        assert (written.done, written.reason) == (False, "SourceGone")
        assert backend.derived(target) is None


def test_apply_creates_then_updates_the_derived_service_and_observe_counts_it(backend: Backend) -> None:
    backend.set_quota("0")
    source = backend.create_source(_placement(backend))
    target = _target(source, backend.member)
    with withdrawn(backend, source, target):
        before = observe(backend, target)
        assert (before.reachable, before.exists, before.components, before.url) == (True, False, [], None)

        first = _execution(source, backend.member, "p1")
        assert apply(backend, source, target, first).done is True
        created = backend.derived(target)
        assert created is not None
        assert (created.origin, created.execution, created.queue, created.floor) == (
            source.uid, first, PLACEMENT_QUEUE, 1)

        second = _execution(source, backend.member, "p2", revision=2)
        assert apply(backend, source, target, second, floors={"engine": 2}).done is True
        updated = backend.derived(target)
        assert updated is not None
        assert (updated.uid, updated.origin, updated.execution, updated.floor) == (created.uid, source.uid, second, 2)

        # No quota: the copy exists, its engine counted at its new floor (once the member's own worker
        # has carried the floor to its replica), nothing admitted.
        backend.until(lambda: [(c.component, c.desired) for c in observe(backend, target).components] == [
            ("engine", 2)], "the engine counted at its floor")
        seen = observe(backend, target)
        assert (seen.reachable, seen.exists, seen.admitted) == (True, True, False)
        assert [(c.component, c.admitted, c.ready, c.desired) for c in seen.components] == [("engine", 0, 0, 2)]


def test_observe_says_admitted_ready_and_url_once_the_member_has_quota(backend: Backend) -> None:
    backend.set_quota("0")
    source = backend.create_source(_placement(backend))
    target = _target(source, backend.member)
    with withdrawn(backend, source, target):
        assert apply(backend, source, target, _execution(source, backend.member, "p1")).done is True
        backend.set_quota("4")
        try:
            backend.until(lambda: (o := observe(backend, target)).admitted and o.components[0].ready == 1
                          and bool(o.url), "admitted, ready and a url")
            seen = observe(backend, target)
            assert (seen.reachable, seen.exists, seen.admitted) == (True, True, True)
            assert [(c.component, c.admitted, c.ready, c.desired) for c in seen.components] == [("engine", 1, 1, 1)]
            assert isinstance(seen.url, str) and seen.url

            gone = delete(backend, target)
            assert (gone.done, gone.reason) == (True, None)
            backend.until(lambda: backend.derived(target) is None, "the copy deleted")
            backend.until(lambda: not observe(backend, target).exists, "observe says the copy is gone")
            again = delete(backend, target)
            assert (again.done, again.reason) == (True, None), "gone is done"
        finally:
            backend.set_quota("0")


def test_a_same_named_object_not_derived_from_the_source_is_never_touched(backend: Backend) -> None:
    source = backend.create_source(_placement(backend))
    target = _target(source, backend.member)
    backend.put_foreign(target)
    foreign = backend.derived(target)
    assert foreign is not None and foreign.origin is None

    written = apply(backend, source, target, _execution(source, backend.member, "p1"))
    assert (written.done, written.reason) == (False, "NameInUse")
    seen = observe(backend, target)
    assert (seen.reachable, seen.exists) == (True, False)
    deleted = delete(backend, target)
    assert (deleted.done, deleted.reason) == (True, "NameInUse")
    assert backend.derived(target) == foreign, "kept as it was"


def inventory(backend: Backend, target: MemberTarget) -> MemberInventory:
    answer: MemberInventory = backend.call("inventory_member", target)
    return answer


def test_inventory_identifies_a_standing_copy_and_adoption_takes_over_that_object_only(backend: Backend) -> None:
    backend.set_quota("0")  # nothing is admitted: both backends count 0 Instances
    source = backend.create_source(_placement(backend))
    target = _target(source, backend.member)
    nothing = inventory(backend, target)
    assert (nothing.identified, nothing.standing_uid, nothing.ours, nothing.replicas) == (True, None, False, 0)
    backend.put_foreign(target)
    foreign = backend.derived(target)
    assert foreign is not None
    found = inventory(backend, target)
    assert (found.identified, found.standing_uid, found.standing_origin, found.ours) == (True, foreign.uid, None, False)
    assert (found.replicas, found.admitted) == (0, False)

    other = target.model_copy(update={"adopt_uid": "not-" + foreign.uid})
    refused = apply(backend, source, other, _execution(source, backend.member, "p1"))
    assert (refused.done, refused.reason) == (False, "NameInUse"), "only the inventoried object is adopted"
    adopting = target.model_copy(update={"adopt_uid": foreign.uid})
    with withdrawn(backend, source, adopting):
        assert observe(backend, adopting).exists is True
        execution = _execution(source, backend.member, "p1")
        assert apply(backend, source, adopting, execution).done is True
        adopted = backend.derived(target)
        assert adopted is not None and (adopted.uid, adopted.origin, adopted.execution) == (
            foreign.uid, source.uid, execution)
        assert inventory(backend, target).ours is True
        assert delete(backend, adopting).done is True
        backend.until(lambda: backend.derived(target) is None, "the adopted copy deleted")


def test_a_member_that_cannot_be_reached_is_an_answer_not_an_error(backend: Backend) -> None:
    dead = backend.register_unreachable()
    source = backend.create_source(_placement(backend))
    target = _target(source, dead)
    written = apply(backend, source, target, _execution(source, dead, "p1"))
    assert (written.done, written.reason) == (False, "Unreachable")
    seen = observe(backend, target)
    assert (seen.reachable, seen.reason, seen.exists) == (False, "Unreachable", False)
    deleted = delete(backend, target)
    assert (deleted.done, deleted.reason) == (False, "Unreachable")
    unknown = inventory(backend, target)
    assert (unknown.identified, unknown.reason) == (False, "Unreachable")


def test_a_deregistered_member_answers_registration_not_found(backend: Backend) -> None:
    alias = backend.register_alias()
    source = backend.create_source(_placement(backend))
    target = _target(source, alias)
    try:
        assert apply(backend, source, target, _execution(source, alias, "p1")).done is True
        assert observe(backend, target).exists is True
        backend.deregister(alias)
        seen = read(backend, source)
        assert seen is not None and alias not in {r.name for r in seen.registrations}
        observed = observe(backend, target)
        assert (observed.reachable, observed.reason) == (False, "RegistrationNotFound")
        written = apply(backend, source, target, _execution(source, alias, "p1"))
        assert (written.done, written.reason) == (False, "RegistrationNotFound")
        deleted = delete(backend, target)
        assert (deleted.done, deleted.reason) == (False, "RegistrationNotFound")
    finally:
        # The copy written through the alias is the member's (same cluster): withdraw it as ours.
        with contextlib.suppress(Exception):
            delete(backend, _target(source, backend.member))


def test_read_capacity_is_unknown_without_a_report_and_whole_replicas_with_one(backend: Backend) -> None:
    source = backend.create_source({**_placement(backend), "mode": "SplitByCapacity"}, gpus=GPUS_PER_REPLICA)
    target = _target(source, backend.member)
    asked = CapacityInput(target=target, source=source, queue=PLACEMENT_QUEUE)
    unknown: CapacityReading = backend.call("read_capacity", asked)
    assert (unknown.sample, unknown.reason) == (None, "NoCapacityReport"), unknown
    assert unknown.message and "AcceleratorQuota" in unknown.message
    backend.report_capacity()
    known: CapacityReading = backend.call("read_capacity", asked)
    assert known.reason is None and known.sample is not None and known.sample.replicas == 16 // GPUS_PER_REPLICA
    assert known.sample.demand_contract is not None
    assert known.sample.demand_contract.fingerprint == known.sample.demand_fingerprint
    assert backend.derived(target) is None, "reading capacity writes nothing to the member"
