"""The projection's member activities, fake (testkit/accelerator_quota_fakes.py FakeQuotaFleet) against real
(activities/placement/activities.py `placement.project_quota` / `placement.unproject_quota`): one suite on both.

The real backend is PlacementActivities as the chart's worker identity on the session's control plane, talking
to a lean member cluster (devstack/members.py: its own apiserver with the project's CRDs, the chart's identities
and Kueue, no servingops of its own) registered as a WorkloadCluster through a kubeconfig of the chart's
placement-member identity, so that identity's RBAC (deploy/chart/templates/rbac-placement-member.yaml) is proven
too. Calls go by the activities' wire names with their payloads through the data converter.

Cases: a copy is written (labelled, annotated, one share) and read back, a second identical projection writes
nothing, a new generation updates the same object; a node of the member's own is never written (conflict) nor
deleted; a projection without a body reads back only; unproject deletes our copy and nothing else; a member that
cannot be reached answers with an error, not an exception."""

from __future__ import annotations

import base64
import contextlib
import socket
import uuid
from collections.abc import Callable, Iterator
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
from devstack.members import MemberCluster
from servingops.activities.placement.activities import PlacementActivities
from servingops.activities.placement.quota_types import QuotaProjectInput, QuotaReleaseInput, QuotaUnprojectInput
from servingops.rendering.accelerator_quota import QuotaNode
from servingops.rendering.quota_projection import ClusterOutcome, projected_copy
from testkit.accelerator_quota_fakes import FakeQuotaFleet
from tests.fixtures.kube import api_as
from tests.support.conformance import FAKE_UNIT_AND_REAL, chosen_backend, wire

GROUP, VERSION = "ome.io", "v1beta1"
GPU = "nvidia.com/gpu"


class Backend(Protocol):
    cluster: str

    def call(self, name: str, arg: Any) -> ClusterOutcome: ...
    def own_node(self, name: str) -> None: ...
    def stored(self, name: str) -> dict[str, Any] | None: ...
    def unreachable(self) -> str: ...
    def second_registration(self) -> str: ...
    def deregister(self, cluster: str) -> None: ...
    def held(self, cluster: str) -> bool | None: ...


class Fake:
    def __init__(self) -> None:
        self.cluster = "member"
        self.fleet = FakeQuotaFleet()
        self.fleet.member(self.cluster)

    def call(self, name: str, arg: Any) -> ClusterOutcome:
        fn = {"project_quota": self.fleet.project, "unproject_quota": self.fleet.unproject,
              "release_quota_hold": self.fleet.release}[name]
        return cast(ClusterOutcome, wire(fn(wire(arg, type(arg))), ClusterOutcome))

    def own_node(self, name: str) -> None:
        self.fleet.members[self.cluster].add_quota(name, {"role": "Cohort"})

    def stored(self, name: str) -> dict[str, Any] | None:
        found = self.fleet.members[self.cluster].quotas.get(name)
        return None if found is None or found.deleting else found.object()

    def unreachable(self) -> str:
        self.fleet.unreachable["dead"] = "dead cannot be reached: connection refused"
        return "dead"

    def second_registration(self) -> str:
        self.fleet.members["leaving"] = self.fleet.members[self.cluster]
        return "leaving"

    def deregister(self, cluster: str) -> None:
        self.fleet.deregistering.add(cluster)

    def held(self, cluster: str) -> bool | None:
        """True: the hold is on; False: off; None: the registration is gone."""
        if cluster in self.fleet.deregistering and cluster not in self.fleet.holds:
            return None
        return cluster in self.fleet.holds


class Real:
    def __init__(self, admin: client.ApiClient, worker: client.ApiClient, member: MemberCluster) -> None:
        self.admin, self.member, self.cluster = admin, member, member.name
        self.placement = PlacementActivities(worker, identities.NAMESPACE)
        self.fns: dict[str, Callable[..., Any]] = {fn.__name__: fn for fn in self.placement.all()}
        self.member_custom = client.CustomObjectsApi(member.api)
        self.names: list[str] = []
        self.registrations: list[str] = []
        self.leaving = ""

    def call(self, name: str, arg: Any) -> ClusterOutcome:
        return cast(ClusterOutcome, wire(ActivityEnvironment().run(self.fns[name], wire(arg, type(arg))),
                                         ClusterOutcome))

    def own_node(self, name: str) -> None:
        self.member_custom.create_cluster_custom_object(GROUP, VERSION, "acceleratorquotas", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "AcceleratorQuota", "metadata": {"name": name},
            "spec": {"role": "Cohort"}})
        self.names.append(name)

    def stored(self, name: str) -> dict[str, Any] | None:
        try:
            found = self.member_custom.get_cluster_custom_object(GROUP, VERSION, "acceleratorquotas", name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return None if found["metadata"].get("deletionTimestamp") else cast(dict[str, Any], found)

    def unreachable(self) -> str:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        config = yaml.safe_load(self.member.member_kubeconfig())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
        name = f"{self.cluster}-dead"
        apply_objects(self.admin, [
            {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {
                "name": name, "namespace": identities.NAMESPACE},
             "data": {"kubeconfig": base64.b64encode(yaml.safe_dump(config).encode()).decode()}},
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadCluster", "metadata": {"name": name},
             "spec": {"clusterSource": {"kubeConfig": {"secretRef": {"name": name,
                                                                       "namespace": identities.NAMESPACE}}}}}])
        self.registrations.append(name)
        return name

    def second_registration(self) -> str:
        """Another WorkloadCluster for the same member (its kubeconfig Secret), to be deregistered."""
        custom = client.CustomObjectsApi(self.admin)
        spec = custom.get_cluster_custom_object(GROUP, VERSION, "workloadclusters", self.cluster)["spec"]
        name = f"{self.cluster}-leaving"
        custom.create_cluster_custom_object(GROUP, VERSION, "workloadclusters", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadCluster", "metadata": {"name": name}, "spec": spec})
        self.leaving = name
        return name

    def deregister(self, cluster: str) -> None:
        client.CustomObjectsApi(self.admin).delete_cluster_custom_object(GROUP, VERSION, "workloadclusters", cluster)

    def held(self, cluster: str) -> bool | None:
        try:
            found = client.CustomObjectsApi(self.admin).get_cluster_custom_object(GROUP, VERSION, "workloadclusters",
                                                                                  cluster)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return "ome.io/quota-projection" in (found["metadata"].get("finalizers") or [])

    def cleanup(self) -> None:
        custom = client.CustomObjectsApi(self.admin)
        for name in [self.cluster, *self.registrations, *([self.leaving] if self.leaving else [])]:
            with contextlib.suppress(ApiException):  # as an administrator leaving the copies: the hold goes
                custom.patch_cluster_custom_object(GROUP, VERSION, "workloadclusters", name,
                                                   {"metadata": {"finalizers": None}})
        for name in self.names:
            with contextlib.suppress(ApiException):
                self.member_custom.delete_cluster_custom_object(GROUP, VERSION, "acceleratorquotas", name)
        for name in self.registrations:
            with contextlib.suppress(ApiException):
                client.CustomObjectsApi(self.admin).delete_cluster_custom_object(GROUP, VERSION, "workloadclusters",
                                                                                 name)
            with contextlib.suppress(ApiException):
                client.CoreV1Api(self.admin).delete_namespaced_secret(name, identities.NAMESPACE)
        self.placement.clients.close()


@pytest.fixture(scope="module")
def real_backend(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, chart_identities: Identities,
                 stack_logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Real]:
    member = MemberCluster(f"qpconf-{uuid.uuid4().hex[:5]}", tmp_path_factory.mktemp("member"), stack_logs,
                           servingops=False, controllers=False)
    try:
        member.start("unused:0")
        member.register(kube_api, identities.NAMESPACE)
        with api_as(chart_identities.worker) as worker:
            backend = Real(kube_api, worker, member)
            try:
                yield backend
            finally:
                backend.cleanup()
    finally:
        member.unregister(kube_api, identities.NAMESPACE)
        member.stop()


@pytest.fixture(params=FAKE_UNIT_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, Fake)


def _leaf(name: str, generation: int = 1) -> QuotaNode:
    return QuotaNode.model_validate({"name": name, "uid": f"uid-{name}", "generation": generation,
                                     "role": "ClusterQueue", "parent": "grp", "priority_tier": "high",
                                     "budgets": [{"resourceName": GPU, "resourceFlavor": "a100", "nominal": 4,
                                                  "borrowingLimit": 1}]})


def _name() -> str:
    return f"qp-{uuid.uuid4().hex[:6]}"


def test_a_copy_is_written_read_back_and_updated_in_place(backend: Backend) -> None:
    name = _name()
    body = projected_copy(_leaf(name), {f"{GPU}|a100": "3"})
    out = backend.call("project_quota", QuotaProjectInput(cluster=backend.cluster, name=name, body=body))
    assert (out.error, out.conflict, out.wrote) == ("", "", True)
    assert out.copy_ is not None and out.copy_.projected and out.copy_.applied_generation == 1
    assert out.copy_.origin == f"uid-{name}"
    stored = backend.stored(name)
    assert stored is not None
    assert stored["spec"] == {"role": "ClusterQueue", "parentRef": {"name": "grp"}, "priorityTier": "high",
                              "budgets": [{"resourceName": GPU, "resourceFlavor": "a100", "nominal": "3",
                                           "borrowingLimit": "1"}]}
    assert stored["metadata"]["annotations"]["ome.io/quota-source-generation"] == "1"
    uid = stored["metadata"]["uid"]
    again = backend.call("project_quota", QuotaProjectInput(cluster=backend.cluster, name=name, body=body))
    assert not again.wrote and again.copy_ is not None and again.copy_.uid == uid
    newer = projected_copy(_leaf(name, generation=2), {f"{GPU}|a100": "2"})
    updated = backend.call("project_quota", QuotaProjectInput(cluster=backend.cluster, name=name, body=newer))
    assert updated.wrote and updated.copy_ is not None and updated.copy_.applied_generation == 2
    stored = backend.stored(name)
    assert stored is not None and stored["metadata"]["uid"] == uid and stored["spec"]["budgets"][0]["nominal"] == "2"
    gone = backend.call("unproject_quota", QuotaUnprojectInput(cluster=backend.cluster, name=name,
                                                               origin=f"uid-{name}"))
    assert gone.wrote and gone.error == "" and backend.stored(name) is None


def test_the_members_own_node_is_neither_written_nor_deleted(backend: Backend) -> None:
    name = _name()
    backend.own_node(name)
    out = backend.call("project_quota", QuotaProjectInput(
        cluster=backend.cluster, name=name, body=projected_copy(_leaf(name), {f"{GPU}|a100": "3"})))
    assert "of its own" in out.conflict and not out.wrote
    kept = backend.call("unproject_quota", QuotaUnprojectInput(cluster=backend.cluster, name=name,
                                                               origin=f"uid-{name}"))
    assert not kept.wrote
    stored = backend.stored(name)
    assert stored is not None and stored["spec"] == {"role": "Cohort"}


def test_no_body_reads_back_only(backend: Backend) -> None:
    name = _name()
    out = backend.call("project_quota", QuotaProjectInput(cluster=backend.cluster, name=name,
                                                          unresolved="frozen while ContainmentViolated"))
    assert (out.wrote, out.copy_, out.unresolved) == (False, None, "frozen while ContainmentViolated")
    assert backend.stored(name) is None


def test_a_copy_of_another_origin_is_not_deleted(backend: Backend) -> None:
    name = _name()
    backend.call("project_quota", QuotaProjectInput(
        cluster=backend.cluster, name=name, body=projected_copy(_leaf(name), {f"{GPU}|a100": "1"})))
    out = backend.call("unproject_quota", QuotaUnprojectInput(cluster=backend.cluster, name=name, origin="other"))
    assert not out.wrote and backend.stored(name) is not None
    backend.call("unproject_quota", QuotaUnprojectInput(cluster=backend.cluster, name=name, origin=f"uid-{name}"))


def test_an_unreachable_member_answers_with_why(backend: Backend) -> None:
    dead = backend.unreachable()
    name = _name()
    out = backend.call("project_quota", QuotaProjectInput(
        cluster=dead, name=name, body=projected_copy(_leaf(name), {f"{GPU}|a100": "1"})))
    assert out.error and not out.wrote and out.copy_ is None
    # Never reached, nothing written: its registration is not held (deleting it would otherwise wait for a
    # release that can never reach it, until the finalizer was removed by hand).
    assert backend.held(dead) is False
    gone = backend.call("unproject_quota", QuotaUnprojectInput(cluster=dead, name=name, origin=f"uid-{name}"))
    assert gone.error


def test_a_deregistered_clusters_copies_are_deleted_and_its_hold_released(backend: Backend) -> None:
    """A copy written holds the WorkloadCluster (the finalizer ome.io/quota-projection); deleting the registration
    waits for release_quota_hold, which deletes every projected copy there and removes the finalizer. While it is
    being deregistered no copy is written there."""
    cluster = backend.second_registration()
    name = _name()
    body = projected_copy(_leaf(name), {f"{GPU}|a100": "1"})
    written = backend.call("project_quota", QuotaProjectInput(cluster=cluster, name=name, body=body))
    assert written.wrote and written.error == "" and backend.held(cluster) is True
    backend.deregister(cluster)
    assert backend.held(cluster) is True, "the finalizer holds the deregistration"
    refused = backend.call("project_quota", QuotaProjectInput(cluster=cluster, name=f"{name}-x", body=body))
    assert "being deregistered" in refused.error and backend.stored(f"{name}-x") is None
    released = backend.call("release_quota_hold", QuotaReleaseInput(cluster=cluster))
    assert released.error == "" and released.wrote
    assert backend.stored(name) is None and backend.held(cluster) is None
