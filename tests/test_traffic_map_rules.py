"""The TrafficMap's routing table (rendering/traffic_map.py): weights from capacity, factors, readiness, the
probe's gate and drains, and the Routable / OverrideActive / CapacityFallback verdicts, as seed 004 and
upstream OME's "How OME sets the weights" state them."""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import pytest

from servingops.api_models.errors import CONDITION_REASON_PATTERN
from servingops.api_models.ome.enums import CapacitySource, PlacementMode, ProbeResult, RoutingAllFailedPolicy
from servingops.api_models.ome.traffic_map import MAX_WEIGHT, TrafficMap, TrafficMapProbe
from servingops.api_models.quantity import quantity
from servingops.rendering.traffic_map import (
    CapacityFallbackReason,
    Drain,
    Home,
    InvalidDrains,
    OverrideReason,
    RoutableReason,
    RoutingInputs,
    parse_drains,
    reduce_weights,
    routing_table,
)

pytestmark = pytest.mark.unit


def home(cluster: str, admitted: int = 1, ready: int | None = None, **extra: object) -> Home:
    return Home(cluster, f"http://chat.demo.{cluster}.example.com", admitted,
                admitted if ready is None else ready, **extra)  # type: ignore[arg-type]


def inputs(*homes: Home, **extra: object) -> RoutingInputs:
    values: dict[str, object] = {"service": "chat", "mode": PlacementMode.SPLIT, "placed": True, "homes": homes,
                                 "isvc_generation": 7}
    values.update(extra)
    return RoutingInputs(**values)  # type: ignore[arg-type]


def weights(table_inputs: RoutingInputs) -> dict[str, int | None]:
    return {e.cluster: e.weight for e in routing_table(table_inputs).spec.entries or []}


def gated(result: str = "Failing") -> TrafficMapProbe:
    return TrafficMapProbe(result=ProbeResult(result), gated=True, consecutive_failures=3)


def test_weights_are_capacity_reduced_to_the_smallest_ratio_upstreams_example() -> None:
    table = routing_table(inputs(home("cluster-a", 4), home("cluster-b", 2)))
    assert [(e.cluster, e.weight, e.healthy) for e in table.spec.entries or []] == [
        ("cluster-a", 2, True), ("cluster-b", 1, True)]
    [a, _] = table.spec.entries or []
    assert a.capacity is not None and (a.capacity.allocated, a.capacity.ready, a.capacity.source) == (
        4, 4, CapacitySource.CONTROL_PLANE)
    assert (table.spec.service, table.spec.mode, table.spec.observed_isvc_generation) == ("chat", "Split", 7)
    routable, override, fallback = table.conditions
    assert (routable.status, routable.reason) == (True, RoutableReason.ROUTABLE)
    assert (override.status, override.reason) == (False, OverrideReason.NO_OVERRIDES)
    assert (fallback.status, fallback.reason) == (False, CapacityFallbackReason.CAPACITY_POLLING_DISABLED)


def test_ready_caps_allocated_and_factors_weigh_heterogeneous_homes() -> None:
    # a: min(4 admitted, 2 ready) x 1.5 = 3; b: 3 x 1 = 3 -> 1:1. c: factor "500m" halves 4 -> 2.
    found = weights(inputs(home("a", 4, 2), home("b", 3), home("c", 4),
                           factors={"a": quantity("1.5"), "c": quantity("500m")}))
    assert found == {"a": 3, "b": 3, "c": 2}
    entry = routing_table(inputs(home("a", 4, 2), factors={"a": Fraction(3, 2)})).spec.entries or []
    assert entry[0].capacity is not None and entry[0].capacity.factor == "1.5"


def test_an_unready_home_weighs_zero_and_is_unhealthy() -> None:
    table = routing_table(inputs(home("a", 2, 0), home("b", 2)))
    assert [(e.cluster, e.weight, e.healthy) for e in table.spec.entries or []] == [("a", 0, False), ("b", 1, True)]
    a = (table.spec.entries or [])[0]
    assert a.capacity is not None and a.capacity.ready is None  # zero counts are left out, as upstream's map does


def test_a_drain_zeroes_its_cluster_and_the_others_keep_their_ratio() -> None:
    drains = [Drain("maintenance-a", "a", "planned"), Drain("second", "a", "again")]
    table = routing_table(inputs(home("a", 4), home("b", 2), home("c", 2), drains=drains))
    assert [(e.cluster, e.weight, e.drain_refs) for e in table.spec.entries or []] == [
        ("a", 0, ["maintenance-a", "second"]), ("b", 1, None), ("c", 1, None)]
    routable, override, _ = table.conditions
    assert routable.reason == RoutableReason.ROUTABLE and routable.status
    assert (override.status, override.reason) == (True, OverrideReason.OVERRIDES_APPLIED)
    assert "a by maintenance-a, second" in override.message


def test_a_drain_naming_no_cluster_in_the_table_is_pending() -> None:
    table = routing_table(inputs(home("a"), drains=[Drain("typo", "worker-x", "")]))
    _, override, _ = table.conditions
    assert (override.status, override.reason) == (False, OverrideReason.OVERRIDES_PENDING)
    assert "worker-x" in override.message and weights(inputs(home("a"))) == {"a": 1}


def test_drains_holding_every_home_with_capacity_make_it_unroutable() -> None:
    table = routing_table(inputs(home("a", 2), home("b", 0, 0), drains=[Drain("all", "a", "")]))
    assert weights(inputs(home("a", 2), home("b", 0, 0), drains=[Drain("all", "a", "")])) == {"a": 0, "b": 0}
    assert (table.routable.status, table.routable.reason) == (False, RoutableReason.TRAFFIC_DRAIN)


@pytest.mark.parametrize(("table_inputs", "reason"), [
    (inputs(home("a"), placed=False), RoutableReason.NOT_PLACED),
    (inputs(), RoutableReason.NO_ADDRESSABLE_HOME),
    (inputs(home("a", 2, 0), home("b", 1, 0)), RoutableReason.ALL_HOMES_UNREADY),
    (inputs(home("a", 0, 2)), RoutableReason.NO_ROUTABLE_CAPACITY),
])  # fmt: skip
def test_an_unroutable_table_says_why(table_inputs: RoutingInputs, reason: RoutableReason) -> None:
    table = routing_table(table_inputs)
    assert (table.routable.status, table.routable.reason) == (False, reason)
    assert all(e.weight == 0 for e in table.spec.entries or [])
    if reason in (RoutableReason.NOT_PLACED, RoutableReason.NO_ADDRESSABLE_HOME):
        assert table.spec.entries == []


def test_a_gated_home_weighs_zero_and_the_others_stay() -> None:
    table = routing_table(inputs(home("a", 2, probe=gated()), home("b", 2, probe=TrafficMapProbe(gated=False)),
                                 probing=True))
    assert [(e.cluster, e.weight, e.healthy) for e in table.spec.entries or []] == [("a", 0, False), ("b", 1, True)]
    assert (table.spec.entries or [])[0].probe == gated()


def test_every_home_gated_drains_or_preserves_by_policy() -> None:
    both = (home("a", 4, probe=gated()), home("b", 2, probe=gated()), home("c", 2, 0, probe=gated()))
    drained = routing_table(inputs(*both, probing=True, all_failed_policy=RoutingAllFailedPolicy.DRAIN))
    assert all(e.weight == 0 for e in drained.spec.entries or [])
    assert (drained.routable.status, drained.routable.reason) == (False, RoutableReason.ALL_HOMES_PROBE_FAILED)

    kept = routing_table(inputs(*both, probing=True, all_failed_policy=RoutingAllFailedPolicy.PRESERVE_TRAFFIC))
    # The capacity weights of the ready homes stay; an unready home is still 0; health evidence is unchanged.
    assert [(e.cluster, e.weight, e.healthy) for e in kept.spec.entries or []] == [
        ("a", 2, False), ("b", 1, False), ("c", 0, False)]
    assert (kept.routable.status, kept.routable.reason) == (True, RoutableReason.ALL_HOMES_PROBE_FAILED)


def test_a_capacity_report_only_lowers_allocated_and_is_recorded_either_way() -> None:
    table = routing_table(inputs(home("a", 4, reported=2), home("b", 4, reported=6), capacity_polling=True))
    a, b = table.spec.entries or []
    assert a.capacity is not None and b.capacity is not None
    assert (a.capacity.allocated, a.capacity.source, a.capacity.reported) == (2, CapacitySource.ENDPOINT, 2)
    assert (b.capacity.allocated, b.capacity.source, b.capacity.reported) == (4, CapacitySource.CONTROL_PLANE, 6)
    assert (a.weight, b.weight) == (1, 2)
    _, _, fallback = table.conditions
    assert (fallback.status, fallback.reason) == (False, CapacityFallbackReason.ENDPOINT_CAPACITY_AVAILABLE)


def test_a_home_without_a_usable_report_falls_back_to_the_control_plane() -> None:
    table = routing_table(inputs(home("a", 4, reported=0), home("b", 2, fallback_reason="report older than maxAge"),
                                 capacity_polling=True))
    a, b = table.spec.entries or []
    assert a.capacity is not None and b.capacity is not None
    # A report of 0 says the home can serve nothing although its replicas are ready.
    assert (a.weight, a.capacity.allocated, a.capacity.source, a.capacity.reported) == (
        0, None, CapacitySource.ENDPOINT, 0)
    assert (b.weight, b.capacity.fallback_reason) == (1, "report older than maxAge")
    _, _, fallback = table.conditions
    assert (fallback.status, fallback.reason) == (True, CapacityFallbackReason.ENDPOINT_CAPACITY_UNAVAILABLE)
    assert "b" in fallback.message
    empty = routing_table(inputs(capacity_polling=True))
    assert empty.conditions[2].reason == CapacityFallbackReason.NO_CAPACITY_TARGETS


def test_weights_past_the_gateway_limit_are_scaled_keeping_every_positive_home() -> None:
    assert reduce_weights({"a": Fraction(3_000_000), "b": Fraction(1), "c": Fraction(0)}) == {
        "a": MAX_WEIGHT, "b": 1, "c": 0}
    assert reduce_weights({"a": Fraction(7, 3), "b": Fraction(1, 2)}) == {"a": 14, "b": 3}
    assert reduce_weights({"a": Fraction(0)}) == {"a": 0}


def test_drain_annotation_parses_strictly() -> None:
    value = json.dumps({"maintenance-a": {"cluster": "worker-a", "reason": "planned maintenance"},
                        "b": {"cluster": "worker-b"}})
    assert parse_drains(value) == [Drain("b", "worker-b", ""),
                                   Drain("maintenance-a", "worker-a", "planned maintenance")]
    assert parse_drains(None) == [] and parse_drains("  ") == []
    for bad, says in [("{", "not JSON"), ("[]", "JSON object"), ('{"A": {"cluster": "x"}}', "DNS label"),
                      ('{"a": {"cluster": "x", "extra": 1}}', "only 'cluster' and 'reason'"),
                      ('{"a": {"cluster": ""}}', "needs a 'cluster'"),
                      (json.dumps({f"d{i}": {"cluster": "x"} for i in range(65)}), "more than 64")]:
        with pytest.raises(InvalidDrains, match=says):
            parse_drains(bad)


def test_quantities_parse_exactly() -> None:
    assert [quantity(q) for q in ("1", "1.5", "500m", "2k", "1e3", "1Ki", ".5")] == [
        1, Fraction(3, 2), Fraction(1, 2), 2000, 1000, 1024, Fraction(1, 2)]
    assert quantity(3) == 3
    with pytest.raises(ValueError, match="not a quantity"):
        quantity("1.5x")


def test_every_reason_is_a_valid_condition_reason_and_the_spec_is_what_the_crd_accepts() -> None:
    for reasons in (RoutableReason, OverrideReason, CapacityFallbackReason):
        for reason in reasons:
            assert CONDITION_REASON_PATTERN.match(reason.value), reason
    table = routing_table(inputs(home("a", 4, probe=gated()), home("b", 2), probing=True,
                                 drains=[Drain("x", "b", "")], placement_plan_id="plan-1"))
    body: dict[str, Any] = {"apiVersion": "ome.io/v1beta1", "kind": "TrafficMap", "metadata": {"name": "chat"},
            "spec": table.spec.to_api()}
    assert body["spec"]["placementPlanID"] == "plan-1" and body["spec"]["observedISVCGeneration"] == 7
    assert TrafficMap.model_validate(body).spec == table.spec
