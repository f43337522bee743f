"""AcceleratorClass end to end: the worker and the bridge as processes under the chart's identities, the
session's cluster with kwok nodes that advertise `nvidia.com/gpu` as an extended resource (so the real
kube-scheduler counts it) and carry a GPU operator's product label and node-feature-discovery's PCI label.

- an AcceleratorClass whose discovery names the product and the PCI ids gets status: its two nodes, 8
  accelerators, all available, Ready; the Kueue ResourceFlavor it names is created from its nodeSelector
  (KueueResourceFlavorSynced True);
- a pod taking 3 GPUs (placed by the scheduler) lowers availableAccelerators to 5;
- an InferenceService whose acceleratorSelector names the class gets pods with the class's nodeSelector
  and an `nvidia.com/gpu` request and limit, which the scheduler puts on one of the class's nodes;
  status.components.engine.selectedAccelerator names the class; the pod's GPU shows in the class's status;
- an InferenceService whose request no class satisfies (BestFit with a minimum memory no class has) is held:
  Ready False with reason NoAcceleratorClassMatches and a Warning Event of that reason, and no pods.

The nodes are tainted so no other test's pod lands on them; the pods here tolerate the taint. Their product
label is this run's own, so the class matches no other node (the session's kwok nodes advertise GPUs too)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from testkit.waiting import wait_until
from tests.support.cleanup import ignore_404
from tests.support.rollout_stack import worker_and_bridge

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

GROUP, VERSION = "ome.io", "v1beta1"
GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
PCI = "feature.node.kubernetes.io/pci-10de_20b2.present"
TAINT = "servingops.test/accelerators"
DEADLINE = 120.0
TOLERATION = {"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}
KUEUE = ("kueue.x-k8s.io", "v1beta2")


@pytest.fixture(scope="module")
def accel_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "accel", "InferenceService,AcceleratorClass",
                           identities=chart_identities) as stack:
        yield stack


def _status(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    return dict(custom.get_cluster_custom_object(GROUP, VERSION, "acceleratorclasses", name).get("status") or {})


def _isvc(name: str, ns: str, selector: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": name, "namespace": ns},
            "spec": {"acceleratorSelector": selector,
                     "engine": {"minReplicas": 1, "tolerations": [TOLERATION],
                                "runner": {"name": "engine", "image": "example.invalid/engine:1",
                                           "ports": [{"containerPort": 8000}]}}}}


def test_a_class_counts_its_gpu_nodes_and_serves_the_services_that_select_it(
        kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, accel_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = accel_stack
    custom, core = client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api)
    suffix = uuid.uuid4().hex[:6]
    product, klass = f"A100-{suffix}", f"a100-{suffix}"
    nodes = [f"gpu-{suffix}-{i}" for i in range(2)]
    served, held = f"served-{suffix}", f"held-{suffix}"
    try:
        for name in nodes:
            kube_cluster.add_accelerator_node(name, {GPU: "4"}, {PRODUCT: product, PCI: "true"}, taints=[
                client.V1Taint(key=TAINT, value="true", effect="NoSchedule")])
        custom.create_cluster_custom_object(GROUP, VERSION, "acceleratorclasses", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "AcceleratorClass", "metadata": {"name": klass},
            "spec": {"vendor": "nvidia", "family": "ampere", "model": "a100",
                     "discovery": {"nodeSelector": {PRODUCT: product}, "pciVendorID": "10de", "deviceIDs": ["20b2"]},
                     "capabilities": {"memoryGB": "80Gi", "computeCapability": "8.0", "features": ["nvlink"]},
                     "resources": [{"name": GPU, "quantity": "1"}],
                     "integration": {"kueueResourceFlavor": f"a100-{suffix}"},
                     "cost": {"perHour": "3", "tier": "high"}}})

        def counted(total: int, available: int, available_nodes: int) -> bool:
            status = _status(custom, klass)
            return (status.get("nodes") == nodes and status.get("totalAccelerators") == total
                    and status.get("availableAccelerators") == available
                    and status.get("availableNodes") == available_nodes)

        wait_until("the class's status counts its two nodes", lambda: counted(8, 8, 2), worker, DEADLINE)
        status = _status(custom, klass)
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("True", "NodesDiscovered")
        assert status["lastUpdated"]
        # integration.kueueResourceFlavor: the flavor made from the class's nodeSelector, the condition True.
        flavor = custom.get_cluster_custom_object(*KUEUE, "resourceflavors", f"a100-{suffix}")
        assert flavor["spec"]["nodeLabels"] == {PRODUCT: product}
        assert flavor["metadata"]["annotations"]["ome.io/accelerator-class"] == klass
        wait_until("KueueResourceFlavorSynced True", lambda: any(
            c["type"] == "KueueResourceFlavorSynced" and c["status"] == "True" and c["reason"] == "FlavorMatches"
            for c in _status(custom, klass)["conditions"]), worker, DEADLINE)
        print(f"class status after the nodes: {status}")

        core.create_namespaced_pod(ns, client.V1Pod(
            metadata=client.V1ObjectMeta(name=f"takes-three-{suffix}"),
            spec=client.V1PodSpec(node_selector={PRODUCT: product}, tolerations=[client.V1Toleration(**TOLERATION)],
                                  containers=[client.V1Container(name="c", image="example.invalid/none", resources=
                                                                 client.V1ResourceRequirements(limits={GPU: "3"}))])))
        wait_until("the scheduler places the pod taking three GPUs", lambda: (core.read_namespaced_pod(
            f"takes-three-{suffix}", ns).spec.node_name in nodes), worker, DEADLINE)
        wait_until("availableAccelerators drops by three", lambda: counted(8, 5, 2), worker, DEADLINE)
        print(f"class status after the pod: {_status(custom, klass)}")

        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices",
                                               _isvc(served, ns, {"acceleratorClass": klass}))

        def served_pods() -> list[client.V1Pod]:
            pods = core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/name={served}").items
            return [p for p in pods if p.spec.node_name]

        wait_until("the selected service's pod is scheduled", lambda: len(served_pods()) == 1, worker, DEADLINE)
        [pod] = served_pods()
        assert pod.spec.node_selector == {PRODUCT: product}
        main = next(c for c in pod.spec.containers if c.name == "engine")
        assert main.resources.limits[GPU] == "1" and main.resources.requests[GPU] == "1"
        assert pod.spec.node_name in nodes
        # The node that holds both pods has 4 - 3 - 1 = 0 left; the other has its 4.
        shared = pod.spec.node_name == core.read_namespaced_pod(f"takes-three-{suffix}", ns).spec.node_name
        wait_until("the service's GPU counted", lambda: counted(8, 4, 1 if shared else 2), worker, DEADLINE)
        print(f"class status after the service's pod: {_status(custom, klass)}")

        def selected() -> dict[str, Any]:
            isvc = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", served)
            return dict((((isvc.get("status") or {}).get("components") or {}).get("engine") or {})
                        .get("selectedAccelerator") or {})

        wait_until("status.components.engine.selectedAccelerator", lambda: bool(selected()), worker, DEADLINE)
        assert selected() == {"acceleratorClass": klass, "reason": "named by spec.acceleratorSelector",
                              "nodeSelector": {PRODUCT: product}, "resourceRequests": {GPU: "1"}}
        print(f"selectedAccelerator: {selected()}; pod {pod.metadata.name} on {pod.spec.node_name}")

        # The class is edited (its nodeSelector gains the PCI label both nodes carry): no event of the inline
        # service, which finds it at its by-reference timer (30 s) and rolls to a revision rendered from it.
        edited_at = time.monotonic()
        custom.patch_cluster_custom_object(GROUP, VERSION, "acceleratorclasses", klass, {
            "spec": {"discovery": {"nodeSelector": {PRODUCT: product, PCI: "true"}}}})

        def rerendered() -> bool:
            return any(p.spec.node_selector == {PRODUCT: product, PCI: "true"} and p.metadata.deletion_timestamp
                       is None and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
                       for p in served_pods())

        wait_until("the service's pod re-rendered from the edited class", rerendered, worker, DEADLINE)
        wait_until("selectedAccelerator shows the edited nodeSelector", lambda: selected().get("nodeSelector")
                   == {PRODUCT: product, PCI: "true"}, worker, DEADLINE)
        print(f"class edit -> re-rendered pod Ready: {time.monotonic() - edited_at:.1f} s")

        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", _isvc(
            held, ns, {"policy": "BestFit", "constraints": {"minMemory": 100000}}))

        def ready_condition() -> dict[str, Any]:
            isvc = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", held)
            return next((c for c in (isvc.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})

        wait_until("the unsatisfiable service held", lambda: ready_condition().get("reason")
                   == "NoAcceleratorClassMatches", worker, DEADLINE)
        assert ready_condition()["status"] == "False"
        assert "100000GB" in ready_condition()["message"]

        def warned() -> list[client.CoreV1Event]:
            return [e for e in core.list_namespaced_event(ns, field_selector=f"involvedObject.name={held}").items
                    if e.reason == "NoAcceleratorClassMatches" and e.type == "Warning"]

        wait_until("a Warning Event NoAcceleratorClassMatches", lambda: bool(warned()), worker, DEADLINE)
        assert not core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/name={held}").items
        print(f"held: {ready_condition()}; event: {warned()[0].message}")
    finally:
        for name in (served, held):
            ignore_404(lambda n=name: custom.delete_namespaced_custom_object(GROUP, VERSION, ns,
                                                                              "inferenceservices", n))
        ignore_404(lambda: core.delete_namespaced_pod(f"takes-three-{suffix}", ns, grace_period_seconds=0))
        ignore_404(lambda: custom.delete_cluster_custom_object(GROUP, VERSION, "acceleratorclasses", klass))
        ignore_404(lambda: custom.delete_cluster_custom_object(*KUEUE, "resourceflavors", f"a100-{suffix}"))
        for name in nodes:
            kube_cluster.remove_node(name)
