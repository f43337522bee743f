"""The capacity rules of a workload cluster's root AcceleratorQuota (activities/capacity/attribution.py):
node-to-flavor attribution, allocatable per (resource, flavor), completeness, the flavor-set hash and
the high-water mark's hysteresis. Pure: no cluster."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal

import pytest

from servingops.activities.capacity.attribution import (
    FlavorCapacity,
    FlavorView,
    HighWaterMark,
    NodeView,
    advance_high_water_mark,
    attribute,
    flavor_set_hash,
    observe_capacity,
    quantity,
    quantity_value,
)

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"
TPU = "google.com/tpu"


def gpus(name: str, count: int, labels: dict[str, str] | None = None, **kw: bool) -> NodeView:
    return NodeView(name=name, labels=labels or {}, ready=kw.get("ready", True),
                    unschedulable=kw.get("cordoned", False), allocatable={GPU: str(count), "cpu": "32"})


A100 = FlavorView(name="a100", uid="uid-a100", node_labels={"gpu": "a100"})
A100_ZONE = FlavorView(name="a100-zone-a", uid="uid-a100z", node_labels={"gpu": "a100", "zone": "a"})
H100 = FlavorView(name="h100", uid="uid-h100", node_labels={"gpu": "h100"})
DEFAULT = FlavorView(name="default", uid="uid-default", node_labels={})


def by_pair(observed: list[FlavorCapacity]) -> dict[tuple[str, str], tuple[object, bool | None]]:
    return {(o.resource_name, o.resource_flavor): (o.allocatable, o.attribution.complete) for o in observed}


def test_allocatable_sums_ready_uncordoned_nodes_of_each_flavor() -> None:
    nodes = [gpus("n1", 8, {"gpu": "a100"}), gpus("n2", 8, {"gpu": "a100"}),
             gpus("n3", 8, {"gpu": "a100"}, ready=False), gpus("n4", 8, {"gpu": "a100"}, cordoned=True),
             gpus("n5", 4, {"gpu": "h100"})]
    got = by_pair(observe_capacity(nodes, [A100, H100], [GPU]))
    # NotReady and cordoned nodes are attributed (the sample stays complete) but contribute 0.
    assert got == {(GPU, "a100"): (16, True), (GPU, "h100"): (4, True)}


def test_every_pair_is_reported_with_zeros_and_sorted() -> None:
    observed = observe_capacity([gpus("n1", 8, {"gpu": "a100"})], [H100, A100], [TPU, GPU])
    assert [(o.resource_name, o.resource_flavor) for o in observed] == [
        (TPU, "a100"), (TPU, "h100"), (GPU, "a100"), (GPU, "h100")]
    got = by_pair(observed)
    assert got[(GPU, "h100")] == (0, True)
    assert got[(TPU, "a100")] == (0, True)  # no node advertises the TPU: a complete zero


def test_the_most_specific_flavor_wins_and_an_empty_selector_matches_every_node() -> None:
    flavors = [DEFAULT, A100, A100_ZONE]
    assert attribute(gpus("n", 1, {"gpu": "a100", "zone": "a"}), flavors)[0] == A100_ZONE
    assert attribute(gpus("n", 1, {"gpu": "a100", "zone": "b"}), flavors)[0] == A100
    assert attribute(gpus("n", 1, {"gpu": "t4"}), flavors)[0] == DEFAULT
    nodes = [gpus("z", 8, {"gpu": "a100", "zone": "a"}), gpus("b", 4, {"gpu": "a100", "zone": "b"}),
             gpus("t", 2, {"gpu": "t4"})]
    got = by_pair(observe_capacity(nodes, flavors, [GPU]))
    assert got == {(GPU, "a100"): (4, True), (GPU, "a100-zone-a"): (8, True), (GPU, "default"): (2, True)}


def test_ambiguous_nodes_count_for_no_flavor_and_make_the_involved_flavors_incomplete() -> None:
    twin = FlavorView(name="a100-twin", uid="uid-twin", node_labels={"gpu": "a100"})
    zone = FlavorView(name="zone-a", uid="uid-zone", node_labels={"zone": "a"})
    chosen, matches = attribute(gpus("n", 8, {"gpu": "a100"}), [A100, twin])
    assert chosen is None and {m.name for m in matches} == {"a100", "a100-twin"}
    # Overlapping selectors, neither containing the other.
    assert attribute(gpus("n", 8, {"gpu": "a100", "zone": "a"}), [A100, zone])[0] is None
    nodes = [gpus("amb", 8, {"gpu": "a100"}), gpus("h", 4, {"gpu": "h100"})]
    got = by_pair(observe_capacity(nodes, [A100, twin, H100], [GPU]))
    assert got == {(GPU, "a100"): (0, False), (GPU, "a100-twin"): (0, False), (GPU, "h100"): (4, True)}


def test_a_node_advertising_the_resource_that_matches_no_flavor_makes_the_resource_incomplete() -> None:
    nodes = [gpus("a", 8, {"gpu": "a100"}), gpus("stray", 8, {"gpu": "v100"}),
             NodeView(name="cpu-only", labels={"gpu": "none"}, ready=True, allocatable={"cpu": "8"})]
    got = by_pair(observe_capacity(nodes, [A100, H100], [GPU, TPU]))
    assert got[(GPU, "a100")] == (8, False) and got[(GPU, "h100")] == (0, False)
    # The stray node advertises no TPU, and the cpu-only node no accelerator: TPU stays complete.
    assert got[(TPU, "a100")] == (0, True)


def test_a_flavor_without_uid_is_not_complete() -> None:
    anonymous = FlavorView(name="a100", uid=None, node_labels={"gpu": "a100"})
    [only] = observe_capacity([gpus("a", 8, {"gpu": "a100"})], [anonymous], [GPU])
    assert only.allocatable == 8 and only.attribution.complete is False and only.attribution.flavor_uid is None


def test_attribution_carries_identity_labels_and_the_flavor_set_hash() -> None:
    [entry] = observe_capacity([gpus("a", 8, {"gpu": "a100"})], [A100], [GPU])
    body = {"flavors": [{"name": "a100", "uid": "uid-a100", "nodeLabels": {"gpu": "a100"}}],
            "resourceNames": [GPU]}
    expected = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert entry.attribution.to_api() == {"flavorUID": "uid-a100", "nodeLabels": {"gpu": "a100"},
                                          "flavorSetHash": expected, "complete": True}


def test_the_flavor_set_hash_moves_with_any_flavor_definition_or_resource_name() -> None:
    base = flavor_set_hash([A100, H100], [GPU])
    assert flavor_set_hash([H100, A100], [GPU, GPU]) == base  # order and duplicates do not matter
    assert flavor_set_hash([A100, H100, A100_ZONE], [GPU]) != base  # a more specific selector
    assert flavor_set_hash([A100, H100.model_copy(update={"uid": "re-created"})], [GPU]) != base
    assert flavor_set_hash([A100, H100.model_copy(update={"node_labels": {"gpu": "h200"}})], [GPU]) != base
    assert flavor_set_hash([A100, H100], [GPU, TPU]) != base


def test_quantities_are_summed_as_kubernetes_reads_them() -> None:
    nodes = [NodeView(name="a", labels={}, ready=True, allocatable={"memory": "1Gi"}),
             NodeView(name="b", labels={}, ready=True, allocatable={"memory": "1024Mi"})]
    [entry] = observe_capacity(nodes, [DEFAULT], ["memory"])
    assert entry.allocatable == 2 * 1024**3
    assert quantity(Decimal("0.5")) == "0.5" and quantity(Decimal(8)) == 8
    assert quantity_value("500m") == Decimal("0.5") and quantity_value(None) == 0


@pytest.mark.parametrize(
    ("samples", "marks"),
    [
        # Rises at once.
        ([8, 16], [8, 16]),
        # Within the band (>= 90 % of 10): never lowered.
        ([10, 9, 9, 9, 9], [10, 10, 10, 10, 10]),
        # More than 10 % below for three consecutive samples: lowered to the latest.
        ([10, 8, 8, 7], [10, 10, 10, 7]),
        # A sample back inside the band restarts the count.
        ([10, 8, 8, 10, 8, 8, 6], [10, 10, 10, 10, 10, 10, 6]),
        # Back up above the mark while counting: raised, count restarted.
        ([10, 8, 12, 8, 8], [10, 10, 12, 12, 12]),
    ],
    ids=["rises", "within-band", "lowered-after-three", "count-restarts", "raised-while-counting"],
)
def test_high_water_mark_hysteresis(samples: list[int], marks: list[int]) -> None:
    mark: HighWaterMark | None = None
    seen = []
    for sample in samples:
        mark = advance_high_water_mark(mark, sample, complete=True)
        seen.append(mark.value)
    assert seen == marks


def test_incomplete_samples_neither_lower_nor_restart_the_count() -> None:
    mark = advance_high_water_mark(None, 10, complete=True)
    mark = advance_high_water_mark(mark, 4, complete=True)
    mark = advance_high_water_mark(mark, 4, complete=False)
    mark = advance_high_water_mark(mark, 0, complete=False)
    assert (mark.value, mark.below) == (10, 1)
    mark = advance_high_water_mark(mark, 4, complete=True)
    mark = advance_high_water_mark(mark, 4, complete=True)
    assert mark.value == 4
    # But an incomplete sample still raises the mark.
    assert advance_high_water_mark(mark, 9, complete=False).value == 9


def test_high_water_mark_band_and_count_are_configurable_and_identity_restarts_it() -> None:
    mark = advance_high_water_mark(None, 10, complete=True, identity="x")
    mark = advance_high_water_mark(mark, 8, complete=True, identity="x", band=0.25, lower_after=1)
    assert mark.value == 10  # 8 is within a 25 % band
    mark = advance_high_water_mark(mark, 7, complete=True, identity="x", band=0.25, lower_after=1)
    assert mark.value == 7
    # Another flavor identity (re-created flavor, other labels): the mark starts over.
    assert advance_high_water_mark(mark, 2, complete=True, identity="y").value == 2
