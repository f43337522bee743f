"""The AcceleratorClass inventory rules (activities/capacity/class_inventory.py): discovery matching by
nodeSelector, required node affinity and PCI labels; counting total and available accelerators."""

from __future__ import annotations

from typing import Any

import pytest

from servingops.activities.capacity.attribution import NodeView
from servingops.activities.capacity.class_inventory import (
    PodView,
    effective_requests,
    inventory,
    matches,
)
from servingops.api_models.ome.accelerator_class import AcceleratorClassSpec, AcceleratorDiscovery

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"


def node(name: str, gpus: int = 8, ready: bool = True, unschedulable: bool = False, **labels: str) -> NodeView:
    return NodeView(name=name, labels=labels, ready=ready, unschedulable=unschedulable,
                    allocatable={"cpu": "32", GPU: str(gpus)} if gpus else {"cpu": "32"})


def spec(**discovery: Any) -> AcceleratorClassSpec:
    return AcceleratorClassSpec.model_validate({"discovery": discovery, "capabilities": {"memoryGB": "80Gi"},
                                                "resources": [{"name": GPU}]})


def test_node_selector_needs_every_label() -> None:
    d = AcceleratorDiscovery.model_validate({"nodeSelector": {"nvidia.com/gpu.product": "A100", "zone": "a"}})
    assert matches(d, node("n", **{"nvidia.com/gpu.product": "A100", "zone": "a", "other": "x"}))
    assert not matches(d, node("n", **{"nvidia.com/gpu.product": "A100"}))
    assert not matches(d, node("n", **{"nvidia.com/gpu.product": "H100", "zone": "a"}))


def test_required_affinity_terms_are_ored_and_expressions_anded() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100", "h100"]},
                              {"key": "tainted", "operator": "DoesNotExist"}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]},
    ]}}}
    d = AcceleratorDiscovery.model_validate({"affinity": affinity})
    assert matches(d, node("a", gpu="h100"))
    assert not matches(d, node("b", gpu="h100", tainted="yes"))
    assert not matches(d, node("c", gpu="t4"))
    assert matches(d, node("special"))
    gt = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "mem", "operator": "Gt", "values": ["40"]}]}]}}}
    assert matches(AcceleratorDiscovery.model_validate({"affinity": gt}), node("m", mem="80"))
    assert not matches(AcceleratorDiscovery.model_validate({"affinity": gt}), node("m", mem="40"))
    assert not matches(AcceleratorDiscovery.model_validate({"affinity": gt}), node("m", mem="lots"))


def test_preferred_affinity_selects_nothing() -> None:
    d = AcceleratorDiscovery.model_validate({"affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]}}})
    assert matches(d, node("any"))


def test_pci_ids_are_read_from_node_feature_labels() -> None:
    vendor = AcceleratorDiscovery.model_validate({"pciVendorID": "10DE"})
    device = AcceleratorDiscovery.model_validate({"pciVendorID": "10de", "deviceIDs": ["2330", "20b5"]})
    h100 = node("h", **{"feature.node.kubernetes.io/pci-10de_2330.present": "true"})
    other = node("o", **{"feature.node.kubernetes.io/pci-10de_1eb8.present": "true"})
    amd = node("a", **{"feature.node.kubernetes.io/pci-0300_1002.present": "true"})
    absent = node("x", **{"feature.node.kubernetes.io/pci-10de_2330.present": "false"})
    assert matches(vendor, h100) and matches(vendor, other)
    assert not matches(vendor, amd) and not matches(vendor, absent) and not matches(vendor, node("bare"))
    assert matches(device, h100) and not matches(device, other)


def test_empty_discovery_matches_every_node() -> None:
    assert matches(AcceleratorDiscovery(), node("n", gpus=0))


def test_counts_total_and_what_pods_have_not_taken() -> None:
    nodes = [node("g1", 8, gpu="a100"), node("g2", 8, gpu="a100"), node("g3", 4, ready=False, gpu="a100"),
             node("g4", 2, unschedulable=True, gpu="a100"), node("h1", 8, gpu="h100")]
    pods = [PodView(name="p1", namespace="x", node_name="g1", requests={GPU: "6"}),
            PodView(name="p2", namespace="x", node_name="g1", requests={GPU: "2"}),
            PodView(name="p3", namespace="x", node_name="g2", requests={GPU: "3"}),
            PodView(name="done", namespace="x", node_name="g2", terminal=True, requests={GPU: "5"}),
            PodView(name="pending", namespace="x", node_name=None, requests={GPU: "8"}),
            PodView(name="cpu", namespace="x", node_name="g2", requests={"cpu": "1"})]
    counted = inventory(spec(nodeSelector={"gpu": "a100"}), nodes, pods)
    assert counted.nodes == ["g1", "g2", "g3", "g4"]
    assert counted.total_accelerators == 8 + 8 + 4 + 2
    assert counted.available_accelerators == 0 + 5  # g3 not Ready, g4 cordoned: none available there
    assert counted.available_nodes == 1


def test_quantity_per_accelerator_divides_and_a_class_without_resources_counts_gpus() -> None:
    halves = AcceleratorClassSpec.model_validate({"discovery": {}, "capabilities": {},
                                                  "resources": [{"name": GPU, "quantity": "2"}]})
    counted = inventory(halves, [node("n", 7)], [PodView(name="p", namespace="x", node_name="n", requests={GPU: "2"})])
    assert (counted.total_accelerators, counted.available_accelerators) == (3, 2)
    plain = AcceleratorClassSpec.model_validate({"discovery": {}, "capabilities": {}})
    assert inventory(plain, [node("n", 4)], []).total_accelerators == 4
    over = inventory(plain, [node("n", 1)], [PodView(name="p", namespace="x", node_name="n", requests={GPU: "3"})])
    assert over.available_accelerators == 0


def test_effective_requests_as_the_scheduler_counts() -> None:
    pod = {"containers": [{"resources": {"limits": {GPU: "2"}}},
                          {"resources": {"requests": {GPU: "1", "cpu": "500m"}}}],
           "initContainers": [{"resources": {"requests": {GPU: "4"}}}],
           "overhead": {"cpu": "250m"}}
    assert effective_requests(pod) == {GPU: "4", "cpu": "0.750"}
