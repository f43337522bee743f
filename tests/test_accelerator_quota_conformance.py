"""The AcceleratorQuota fake (testkit/accelerator_quota_fakes.py) against the real activities
(activities/capacity/accelerator_quota.py): the same cases on both, the real side against the session's
kube-apiserver (Kueue's CRDs installed, no Kueue controller: nothing reports a queue's usage) as the chart's
worker identity, so its RBAC is proven too, called by the activities' wire names with their payloads through
the data converter. Names carry a suffix of the run, so no other test's nodes enter the tree."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, Protocol

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.testing import ActivityEnvironment

from devstack.identities import NAMESPACE, Identities
from servingops.activities.capacity.accelerator_quota import AcceleratorQuotaActivities
from servingops.activities.capacity.quota_types import (
    QuotaApplyInput,
    QuotaApplyOutput,
    QuotaEvent,
    QuotaObserveInput,
    QuotaObserveOutput,
    QuotaReapInput,
    QuotaReapOutput,
    QuotaWriteInput,
    QuotaWriteOutput,
)
from servingops.activities.operator_config import QuotaConfigReader
from servingops.api_models.ome.accelerator_quota import AcceleratorQuota, AcceleratorQuotaStatus
from servingops.api_models.operator_config import DEFAULT_CONFIGMAP, OperatorConfigError, parse_quota
from servingops.api_models.refs import ObjectRef
from servingops.rendering.accelerator_quota import NODE_LABEL, in_sync, removals, render
from testkit.accelerator_quota_fakes import FakeQuotaWorld
from tests.fixtures.kube import api_as
from tests.support.cleanup import ignore_404
from tests.support.conformance import FAKE_UNIT_AND_REAL, chosen_backend, wire

GPU = "nvidia.com/gpu"
KUEUE = ("kueue.x-k8s.io", "v1beta2")


class Backend(Protocol):
    suffix: str

    def add_quota(self, name: str, spec: dict[str, Any]) -> ObjectRef: ...
    def bind(self, namespace: str, leaf: str) -> None: ...
    def add_flavor(self, name: str) -> None: ...
    def foreign_queue(self, name: str) -> None: ...
    def delete_quota(self, name: str) -> None: ...
    def exists(self, kind: str, name: str, namespace: str | None = None) -> bool: ...
    def observe(self, request: QuotaObserveInput) -> QuotaObserveOutput: ...
    def apply(self, request: QuotaApplyInput) -> QuotaApplyOutput: ...
    def write_status(self, request: QuotaWriteInput) -> QuotaWriteOutput: ...
    def reap(self, request: QuotaReapInput) -> QuotaReapOutput: ...
    def operator_quota(self, block: str | None) -> None: ...


class Fake:
    def __init__(self) -> None:
        self.suffix = uuid.uuid4().hex[:6]
        self.world = FakeQuotaWorld()

    def add_quota(self, name: str, spec: dict[str, Any]) -> ObjectRef:
        return self.world.add_quota(name, spec).ref()

    def bind(self, namespace: str, leaf: str) -> None:
        self.world.bind_namespace(namespace, leaf)

    def add_flavor(self, name: str) -> None:
        self.world.flavors.add(name)

    def foreign_queue(self, name: str) -> None:
        self.world.cluster_queues[name] = {"kind": "ClusterQueue", "metadata": {"name": name, "uid": "x"},
                                           "spec": {"resourceGroups": []}}

    def delete_quota(self, name: str) -> None:
        self.world.delete_quota(name)

    def exists(self, kind: str, name: str, namespace: str | None = None) -> bool:
        if kind == "AcceleratorQuota":
            return name in self.world.quotas
        if kind == "LocalQueue":
            return (namespace, name) in self.world.local_queues
        return name in (self.world.cohorts if kind == "Cohort" else self.world.cluster_queues)

    def observe(self, request: QuotaObserveInput) -> QuotaObserveOutput:
        return self.world.observe(wire(request, QuotaObserveInput))

    def operator_quota(self, block: str | None) -> None:
        """As the real observe reads the ConfigMap's quota block (parsed the same way)."""
        try:
            parsed = parse_quota(None if block is None else {"quota": block})
        except OperatorConfigError as exc:
            self.world.operator_default = None
            self.world.config_error = f"ConfigMap {NAMESPACE}/{DEFAULT_CONFIGMAP}: {exc}"
            return
        self.world.operator_default, self.world.config_error = parsed.default_distribution, ""

    def apply(self, request: QuotaApplyInput) -> QuotaApplyOutput:
        return self.world.apply(wire(request, QuotaApplyInput))

    def write_status(self, request: QuotaWriteInput) -> QuotaWriteOutput:
        return self.world.write_status(wire(request, QuotaWriteInput))

    def reap(self, request: QuotaReapInput) -> QuotaReapOutput:
        return self.world.reap(wire(request, QuotaReapInput))


_PLURALS = {"Cohort": "cohorts", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}


class Real:
    def __init__(self, admin: client.ApiClient, worker: client.ApiClient) -> None:
        self.suffix = uuid.uuid4().hex[:6]
        self.activities = AcceleratorQuotaActivities(worker, QuotaConfigReader(worker, NAMESPACE, ttl=0))
        self.original_block: str | None = None
        self.config_touched = False
        self.created_config = False
        self.core, self.custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
        self.quotas: list[str] = []
        self.namespaces: list[str] = []
        self.flavors: list[str] = []
        self.queues: list[str] = []

    def add_quota(self, name: str, spec: dict[str, Any]) -> ObjectRef:
        body = {"apiVersion": "ome.io/v1beta1", "kind": "AcceleratorQuota", "metadata": {"name": name}, "spec": spec}
        created = self.custom.create_cluster_custom_object("ome.io", "v1beta1", "acceleratorquotas", body)
        self.quotas.append(name)
        return ObjectRef.of(AcceleratorQuota, name, uid=created["metadata"]["uid"])

    def bind(self, namespace: str, leaf: str) -> None:
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
            name=namespace, labels={NODE_LABEL: leaf})))
        self.namespaces.append(namespace)

    def add_flavor(self, name: str) -> None:
        self.custom.create_cluster_custom_object(*KUEUE, "resourceflavors", {
            "apiVersion": "/".join(KUEUE), "kind": "ResourceFlavor", "metadata": {"name": name}})
        self.flavors.append(name)

    def foreign_queue(self, name: str) -> None:
        self.custom.create_cluster_custom_object(*KUEUE, "clusterqueues", {
            "apiVersion": "/".join(KUEUE), "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {}}})
        self.queues.append(name)

    def delete_quota(self, name: str) -> None:
        self.custom.delete_cluster_custom_object("ome.io", "v1beta1", "acceleratorquotas", name)

    def exists(self, kind: str, name: str, namespace: str | None = None) -> bool:
        try:
            if kind == "AcceleratorQuota":
                self.custom.get_cluster_custom_object("ome.io", "v1beta1", "acceleratorquotas", name)
            elif namespace:
                self.custom.get_namespaced_custom_object(*KUEUE, namespace, _PLURALS[kind], name)
            else:
                self.custom.get_cluster_custom_object(*KUEUE, _PLURALS[kind], name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def observe(self, request: QuotaObserveInput) -> QuotaObserveOutput:
        answer: QuotaObserveOutput = ActivityEnvironment().run(self.activities.observe,
                                                               wire(request, QuotaObserveInput))
        return wire(answer, QuotaObserveOutput)

    def apply(self, request: QuotaApplyInput) -> QuotaApplyOutput:
        answer: QuotaApplyOutput = ActivityEnvironment().run(self.activities.apply, wire(request, QuotaApplyInput))
        return wire(answer, QuotaApplyOutput)

    def write_status(self, request: QuotaWriteInput) -> QuotaWriteOutput:
        answer: QuotaWriteOutput = ActivityEnvironment().run(self.activities.write_status,
                                                             wire(request, QuotaWriteInput))
        return wire(answer, QuotaWriteOutput)

    def reap(self, request: QuotaReapInput) -> QuotaReapOutput:
        answer: QuotaReapOutput = ActivityEnvironment().run(self.activities.reap, wire(request, QuotaReapInput))
        return wire(answer, QuotaReapOutput)

    def operator_quota(self, block: str | None) -> None:
        """The operator ConfigMap's quota key set (or removed), the ConfigMap created when there is none; close()
        puts back what was there."""
        try:
            found: client.V1ConfigMap | None = self.core.read_namespaced_config_map(DEFAULT_CONFIGMAP, NAMESPACE)
        except ApiException as exc:
            if exc.status != 404:
                raise
            found = None
        if not self.config_touched:
            self.config_touched = True
            self.original_block = ((found.data or {}).get("quota") if found is not None else None)
        if found is None:
            self.created_config = True
            self.core.create_namespaced_config_map(NAMESPACE, client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=DEFAULT_CONFIGMAP), data={"quota": block} if block else {}))
            return
        self.core.patch_namespaced_config_map(DEFAULT_CONFIGMAP, NAMESPACE, {"data": {"quota": block}})

    def close(self) -> None:
        if self.created_config:
            ignore_404(lambda: self.core.delete_namespaced_config_map(DEFAULT_CONFIGMAP, NAMESPACE))
        elif self.config_touched:
            self.operator_quota(self.original_block)
        for name in self.quotas:
            if self.exists("AcceleratorQuota", name):
                ref = ObjectRef.of(AcceleratorQuota, name)
                ActivityEnvironment().run(self.activities.reap, QuotaReapInput(quota=ref))
                ignore_404(lambda n=name: self.delete_quota(n))
        for name in self.queues:
            ignore_404(lambda n=name: self.custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", n))
        for name in self.flavors:
            ignore_404(lambda n=name: self.custom.delete_cluster_custom_object(*KUEUE, "resourceflavors", n))
        for name in self.namespaces:
            ignore_404(lambda n=name: self.core.delete_namespace(n))


@pytest.fixture
def real_backend(kube_api: client.ApiClient, chart_identities: Identities) -> Iterator[Real]:
    with api_as(chart_identities.worker) as worker:
        real = Real(kube_api, worker)
        try:
            yield real
        finally:
            real.close()


@pytest.fixture(params=FAKE_UNIT_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, Fake)


def _leaf(parent: str, flavor: str) -> dict[str, Any]:
    return {"role": "ClusterQueue", "parentRef": {"name": parent}, "distribution": {"policy": "Proportional"},
            "budgets": [{"resourceName": GPU, "resourceFlavor": flavor, "nominal": 2}]}


def test_observe_apply_and_observe_again_in_sync(backend: Backend) -> None:
    s = backend.suffix
    group, leaf, flavor, ns = f"grp-{s}", f"team-{s}", f"gpu-{s}", f"ns-{s}"
    backend.add_flavor(flavor)
    backend.add_quota(group, {"role": "Cohort", "parentRef": {"name": f"root-{s}"}})
    ref = backend.add_quota(leaf, _leaf(group, flavor))
    backend.bind(ns, leaf)
    seen = backend.observe(QuotaObserveInput(quota=ref))
    assert seen.present and not seen.deleting and seen.node is not None and seen.node.parent == group
    assert {group, leaf} <= {n.name for n in seen.tree}
    plane = seen.plane
    assert plane.served and plane.cluster_queue is None and plane.cohort is None and plane.local_queues == []
    assert plane.bound_namespaces == [ns] and plane.flavors == [flavor] and plane.priority_classes == []
    assert seen.status is None
    applied = backend.apply(QuotaApplyInput(quota=ref, objects=render(seen.node, plane.bound_namespaces),
                                            removals=removals(seen.node, plane)))
    assert applied.present and applied.refused == "" and applied.removed == []
    assert sorted(applied.applied) == sorted([f"ClusterQueue//{leaf}", f"LocalQueue/{ns}/{leaf}"])
    again = backend.observe(QuotaObserveInput(quota=ref))
    assert again.node is not None and in_sync(again.node, again.plane)
    assert again.plane.cluster_queue is not None and again.plane.cluster_queue.ours
    assert again.plane.cluster_queue.cohort == group
    assert [(q.namespace, q.cluster_queue) for q in again.plane.local_queues] == [(ns, leaf)]
    assert leaf in again.plane.leaf_queues
    moved = again.node.model_copy(update={"parent": f"other-{s}"})
    assert not in_sync(moved, again.plane)
    backend.apply(QuotaApplyInput(quota=ref, objects=render(moved, [ns])))
    assert backend.observe(QuotaObserveInput(quota=ref)).plane.cluster_queue.cohort == f"other-{s}"  # type: ignore[union-attr]


def test_an_object_not_ours_is_never_applied_over(backend: Backend) -> None:
    s = backend.suffix
    leaf = f"taken-{s}"
    backend.foreign_queue(leaf)
    ref = backend.add_quota(leaf, _leaf(f"grp-{s}", f"gpu-{s}"))
    seen = backend.observe(QuotaObserveInput(quota=ref))
    assert seen.plane.cluster_queue is not None and not seen.plane.cluster_queue.ours
    answer = backend.apply(QuotaApplyInput(quota=ref, objects=render(seen.node, [])))  # type: ignore[arg-type]
    assert answer.present and "not adopted" in answer.refused and answer.applied == []
    reaped = backend.reap(QuotaReapInput(quota=ref))
    assert reaped.removed == [] and backend.exists("ClusterQueue", leaf)


def test_status_writes_the_owned_fields_and_reap_releases_the_node(backend: Backend) -> None:
    s = backend.suffix
    leaf, flavor, ns = f"gone-{s}", f"gpu-{s}", f"gns-{s}"
    ref = backend.add_quota(leaf, _leaf(f"grp-{s}", flavor))
    backend.bind(ns, leaf)
    seen = backend.observe(QuotaObserveInput(quota=ref))
    assert seen.node is not None
    backend.apply(QuotaApplyInput(quota=ref, objects=render(seen.node, [ns])))
    status = AcceleratorQuotaStatus.model_validate({
        "observedGeneration": 1, "parent": f"grp-{s}",
        "budgets": [{"resourceName": GPU, "resourceFlavor": flavor, "nominal": "2", "admitted": "0"}],
        "materialization": {"frozen": False, "lastAppliedGeneration": 1, "lastAppliedTime": "2026-12-07T10:00:00Z"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Admitted", "message": "m",
                        "lastTransitionTime": "2026-12-07T10:00:00Z"}]})
    written = backend.write_status(QuotaWriteInput(quota=ref, status=status, events=[
        QuotaEvent(type="Normal", reason="Materialized", message="applied")]))
    assert written.present
    read = backend.observe(QuotaObserveInput(quota=ref)).status
    assert read is not None and read.parent == f"grp-{s}" and read.materialization is not None
    assert read.materialization.last_applied_generation == 1 and read.budgets is not None
    frozen = status.model_copy(update={"parent": None, "materialization": status.materialization.model_copy(  # type: ignore[union-attr]
        update={"frozen": True, "frozen_at": "2026-12-07T11:00:00Z", "reason": "ContainmentViolated"})})
    backend.write_status(QuotaWriteInput(quota=ref, status=frozen))
    read = backend.observe(QuotaObserveInput(quota=ref)).status
    assert read is not None and read.parent is None and read.materialization is not None
    assert read.materialization.frozen and read.materialization.reason == "ContainmentViolated"
    backend.write_status(QuotaWriteInput(quota=ref, status=status))  # thawed: the freeze's fields go
    read = backend.observe(QuotaObserveInput(quota=ref)).status
    assert read is not None and read.materialization is not None
    assert (read.materialization.frozen, read.materialization.frozen_at, read.materialization.reason) == (
        False, None, None)
    backend.delete_quota(leaf)
    assert backend.exists("AcceleratorQuota", leaf)  # the finalizer holds it
    assert backend.observe(QuotaObserveInput(quota=ref)).deleting
    refused = backend.apply(QuotaApplyInput(quota=ref, objects=[]))
    assert not refused.present
    reaped = backend.reap(QuotaReapInput(quota=ref))
    assert reaped.released
    assert sorted(reaped.removed) == sorted([f"ClusterQueue//{leaf}", f"LocalQueue/{ns}/{leaf}"])
    assert not backend.exists("ClusterQueue", leaf) and not backend.exists("LocalQueue", leaf, ns)
    assert not backend.exists("AcceleratorQuota", leaf)
    assert not backend.observe(QuotaObserveInput(quota=ref)).present


def test_observe_reads_the_operator_default_distribution(backend: Backend) -> None:
    """The operator ConfigMap's quota.defaultDistribution, read by observe as the worker identity (its role reads
    only that ConfigMap): set, it is reported; a block that does not parse is reported as an error, not a
    default; removed, nothing."""
    s = backend.suffix
    ref = backend.add_quota(f"od-{s}", {"role": "ClusterQueue", "parentRef": {"name": f"grp-{s}"},
                                        "budgets": [{"resourceName": GPU, "resourceFlavor": f"gpu-{s}", "nominal": 1}]})
    backend.operator_quota("defaultDistribution: Proportional\n")
    seen = backend.observe(QuotaObserveInput(quota=ref))
    assert (seen.default_distribution, seen.config_error) == ("Proportional", "")
    backend.operator_quota("defaultDistribution: Evenly\n")
    seen = backend.observe(QuotaObserveInput(quota=ref))
    assert seen.default_distribution is None
    assert seen.config_error.startswith(f"ConfigMap {NAMESPACE}/{DEFAULT_CONFIGMAP}: quota.defaultDistribution")
    backend.operator_quota(None)
    seen = backend.observe(QuotaObserveInput(quota=ref))
    assert (seen.default_distribution, seen.config_error) == (None, "")
