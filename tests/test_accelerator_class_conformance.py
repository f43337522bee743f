"""The AcceleratorClass fake (testkit/accelerator_class_fakes.py) against the real activities
(activities/capacity/accelerator_class.py): the same cases on both, the real side against the session's
kube-apiserver as the chart's worker identity (so its RBAC is proven too), called by the activities' wire
names with their payloads through the data converter.

The real side's nodes are plain Node objects created with their status (no kubelet: their Ready
condition is what the case says), tainted NoSchedule, labelled with a value of this run only, so no other
node enters the numbers; its pods are bound to them by spec.nodeName (no scheduler; they stay Pending,
which holds their requests as a running pod would). What differed when the suite was written: nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, Protocol

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from devstack.identities import Identities
from servingops.activities.capacity.accelerator_class import AcceleratorClassActivities
from servingops.activities.capacity.class_types import (
    ClassFlavorInput,
    ClassFlavorOutput,
    ClassObserveInput,
    ClassObserveOutput,
    ClassWriteInput,
    ClassWriteOutput,
)
from servingops.api_models.ome.accelerator_class import AcceleratorClass, AcceleratorClassStatus
from servingops.api_models.refs import ObjectRef
from testkit.accelerator_class_fakes import FakeAcceleratorWorld
from tests.fixtures.kube import api_as
from tests.support.cleanup import ignore_404
from tests.support.conformance import FAKE_UNIT_AND_REAL, chosen_backend, wire

GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"


class Backend(Protocol):
    suffix: str

    def add_class(self, name: str, spec: dict[str, Any]) -> ObjectRef: ...
    def add_node(self, name: str, labels: dict[str, str], gpus: int, *, ready: bool = True) -> None: ...
    def run_pod(self, name: str, node: str, gpus: int) -> None: ...
    def observe(self, request: ClassObserveInput) -> ClassObserveOutput: ...
    def write_status(self, request: ClassWriteInput) -> ClassWriteOutput: ...
    def ensure_flavor(self, request: ClassFlavorInput) -> ClassFlavorOutput: ...


class Fake:
    def __init__(self) -> None:
        self.suffix = uuid.uuid4().hex[:6]
        self.world = FakeAcceleratorWorld()

    def add_class(self, name: str, spec: dict[str, Any]) -> ObjectRef:
        return self.world.add_class(name, spec).ref()

    def add_node(self, name: str, labels: dict[str, str], gpus: int, *, ready: bool = True) -> None:
        self.world.add_node(name, labels, gpus, ready=ready)

    def run_pod(self, name: str, node: str, gpus: int) -> None:
        self.world.run_pod(name, node, {GPU: str(gpus)})

    def observe(self, request: ClassObserveInput) -> ClassObserveOutput:
        return self.world.observe(wire(request, ClassObserveInput))

    def write_status(self, request: ClassWriteInput) -> ClassWriteOutput:
        return self.world.write_status(wire(request, ClassWriteInput))

    def ensure_flavor(self, request: ClassFlavorInput) -> ClassFlavorOutput:
        return self.world.ensure_flavor(wire(request, ClassFlavorInput))


class Real:
    def __init__(self, admin: client.ApiClient, worker: client.ApiClient) -> None:
        self.suffix = uuid.uuid4().hex[:6]
        self.admin, self.activities = admin, AcceleratorClassActivities(worker)
        self.core, self.custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
        self.namespace = f"accel-{self.suffix}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace)))
        self.nodes: list[str] = []
        self.classes: list[str] = []
        self.flavors: list[str] = []

    def add_class(self, name: str, spec: dict[str, Any]) -> ObjectRef:
        body = {"apiVersion": "ome.io/v1beta1", "kind": "AcceleratorClass", "metadata": {"name": name}, "spec": spec}
        created = self.custom.create_cluster_custom_object("ome.io", "v1beta1", "acceleratorclasses", body)
        self.classes.append(name)
        return ObjectRef.of(AcceleratorClass, name, uid=created["metadata"]["uid"])

    def add_node(self, name: str, labels: dict[str, str], gpus: int, *, ready: bool = True) -> None:
        allocatable = {GPU: str(gpus), "cpu": "8", "pods": "10"}
        self.core.create_node(client.V1Node(
            metadata=client.V1ObjectMeta(name=name, labels=labels),
            spec=client.V1NodeSpec(taints=[client.V1Taint(key="servingops.test/accel", value="true",
                                                          effect="NoSchedule")]),
            status=client.V1NodeStatus(capacity=allocatable, allocatable=allocatable, conditions=[
                client.V1NodeCondition(type="Ready", status="True" if ready else "False", reason="Test")])))
        self.nodes.append(name)

    def run_pod(self, name: str, node: str, gpus: int) -> None:
        self.core.create_namespaced_pod(self.namespace, client.V1Pod(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(
                name="c", image="example.invalid/none", resources=client.V1ResourceRequirements(
                    limits={GPU: str(gpus)}))])))

    def observe(self, request: ClassObserveInput) -> ClassObserveOutput:
        answer: ClassObserveOutput = ActivityEnvironment().run(self.activities.observe,
                                                               wire(request, ClassObserveInput))
        return wire(answer, ClassObserveOutput)

    def write_status(self, request: ClassWriteInput) -> ClassWriteOutput:
        answer: ClassWriteOutput = ActivityEnvironment().run(self.activities.write_status,
                                                             wire(request, ClassWriteInput))
        return wire(answer, ClassWriteOutput)

    def ensure_flavor(self, request: ClassFlavorInput) -> ClassFlavorOutput:
        self.flavors.append(request.flavor)
        answer: ClassFlavorOutput = ActivityEnvironment().run(self.activities.ensure_flavor,
                                                              wire(request, ClassFlavorInput))
        return wire(answer, ClassFlavorOutput)

    def close(self) -> None:
        for name in self.flavors:
            ignore_404(lambda n=name: self.custom.delete_cluster_custom_object("kueue.x-k8s.io", "v1beta2",
                                                                                "resourceflavors", n))
        for name in self.classes:
            ignore_404(lambda n=name: self.custom.delete_cluster_custom_object("ome.io", "v1beta1",
                                                                                "acceleratorclasses", n))
        ignore_404(lambda: self.core.delete_namespace(self.namespace, grace_period_seconds=0))
        for name in self.nodes:
            ignore_404(lambda n=name: self.core.delete_node(n))


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


def _spec(product: str) -> dict[str, Any]:
    return {"vendor": "nvidia", "model": "a100", "discovery": {"nodeSelector": {PRODUCT: product}},
            "capabilities": {"memoryGB": "80Gi"}, "resources": [{"name": GPU, "quantity": "1"}]}


def test_observe_counts_the_matched_nodes_and_what_pods_have_not_taken(backend: Backend) -> None:
    product = f"A100-{backend.suffix}"
    names = [f"accel-{backend.suffix}-{i}" for i in range(3)]
    backend.add_node(names[0], {PRODUCT: product}, 8)
    backend.add_node(names[1], {PRODUCT: product}, 4)
    backend.add_node(names[2], {PRODUCT: product}, 8, ready=False)
    backend.add_node(f"accel-{backend.suffix}-other", {PRODUCT: f"H100-{backend.suffix}"}, 8)
    backend.run_pod("takes-six", names[0], 6)
    backend.run_pod("takes-four", names[1], 4)
    ref = backend.add_class(f"a100-{backend.suffix}", _spec(product))
    seen = backend.observe(ClassObserveInput(accelerator_class=ref))
    assert seen.present and seen.generation == 1 and seen.observed_at is not None and seen.problem == ""
    assert seen.status is None
    assert seen.inventory is not None
    assert seen.inventory.nodes == sorted(names)
    assert (seen.inventory.total_accelerators, seen.inventory.available_accelerators,
            seen.inventory.available_nodes) == (20, 2, 1)


def test_a_written_status_reads_back_and_a_gone_or_reused_name_is_never_written(backend: Backend) -> None:
    ref = backend.add_class(f"wr-{backend.suffix}", _spec(f"none-{backend.suffix}"))
    status = AcceleratorClassStatus.model_validate({
        "nodes": [], "totalAccelerators": 0, "availableAccelerators": 0, "availableNodes": 0,
        "lastUpdated": "2026-12-07T12:00:00Z",
        "conditions": [{"type": "Ready", "status": "False", "reason": "NoMatchingNodes", "message": "none",
                        "lastTransitionTime": "2026-12-07T12:00:00Z", "observedGeneration": 1}]})
    written = backend.write_status(ClassWriteInput(accelerator_class=ref, status=status))
    assert written.present and written.resource_version
    seen = backend.observe(ClassObserveInput(accelerator_class=ref))
    assert seen.status is not None and seen.status.to_api() == status.to_api()
    assert seen.inventory is not None and seen.inventory.nodes == []
    reused = ref.model_copy(update={"uid": str(uuid.uuid4())})
    assert not backend.write_status(ClassWriteInput(accelerator_class=reused, status=status)).present
    assert not backend.observe(ClassObserveInput(accelerator_class=reused)).present
    gone = ObjectRef.of(AcceleratorClass, f"gone-{backend.suffix}", uid="x")
    assert not backend.observe(ClassObserveInput(accelerator_class=gone)).present
    assert not backend.write_status(ClassWriteInput(accelerator_class=gone, status=status)).present


def test_the_named_flavor_is_created_once_from_the_node_selector(backend: Backend) -> None:
    product = f"A100-{backend.suffix}"
    flavor = f"flavor-{backend.suffix}"
    ref = backend.add_class(f"fl-{backend.suffix}", {**_spec(product), "integration": {"kueueResourceFlavor": flavor}})
    first = backend.observe(ClassObserveInput(accelerator_class=ref))
    assert first.flavor is not None
    assert (first.flavor.name, first.flavor.exists, first.flavor.served) == (flavor, False, True)
    assert first.flavor.desired_labels == {PRODUCT: product}
    made = backend.ensure_flavor(ClassFlavorInput(accelerator_class=ref, flavor=flavor,
                                                  node_labels={PRODUCT: product}))
    assert made.served and made.created
    again = backend.ensure_flavor(ClassFlavorInput(accelerator_class=ref, flavor=flavor,
                                                   node_labels={PRODUCT: "other"}))
    assert again.served and not again.created
    seen = backend.observe(ClassObserveInput(accelerator_class=ref))
    assert seen.flavor is not None and seen.flavor.exists and seen.flavor.node_labels == {PRODUCT: product}
    plain = backend.add_class(f"nofl-{backend.suffix}", _spec(product))
    assert backend.observe(ClassObserveInput(accelerator_class=plain)).flavor is None
