"""The management plane's perCluster capacity rows, pure (rendering/capacity_per_cluster.py), and the
Proportional split that follows them (rendering/quota_projection.cluster_capacity)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from servingops.api_models.ome.accelerator_quota import AcceleratorCapacityStatus, AcceleratorClusterCapacityStatus
from servingops.rendering.capacity_per_cluster import MemberCapacityReport, with_per_cluster
from servingops.rendering.quota_projection import cluster_capacity

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _entry(flavor: str, allocatable: int, mark: int | None = None) -> AcceleratorCapacityStatus:
    return AcceleratorCapacityStatus(resource_name=GPU, resource_flavor=flavor, allocatable=allocatable,
                                     high_water_mark=mark, observed_at=NOW)


def _member(cluster: str, *entries: AcceleratorCapacityStatus) -> MemberCapacityReport:
    return MemberCapacityReport(cluster=cluster, cluster_uid=f"uid-{cluster}", available=True,
                                report_uid=f"root-{cluster}", report_resource_version="7", capacity=list(entries))


def _rows(entry: AcceleratorCapacityStatus) -> dict[str, AcceleratorClusterCapacityStatus]:
    return {r.cluster or "": r for r in entry.per_cluster or []}


def test_no_member_leaves_the_planes_own_report_as_it_is() -> None:
    own = [_entry("a100", 8, 8)]
    assert with_per_cluster(own, [], None, NOW) == own


def test_each_member_row_carries_its_report_and_registration() -> None:
    out = with_per_cluster([_entry("a100", 8, 8)],
                           [_member("west", _entry("a100", 2, 4)), _member("east", _entry("a100", 6, 6))], None, NOW)
    [entry] = out
    assert (entry.allocatable, entry.high_water_mark) == (8, 8)  # this plane's own numbers stay
    rows = _rows(entry)
    assert list(rows) == ["east", "west"]
    assert (rows["west"].allocatable, rows["west"].high_water_mark, rows["west"].report_available) == (2, 4, True)
    assert (rows["east"].cluster_uid, rows["east"].report_uid, rows["east"].report_resource_version) == (
        "uid-east", "root-east", "7")


def test_a_pair_only_members_have_gets_their_sum_and_no_mark_of_its_own() -> None:
    out = with_per_cluster([], [_member("east", _entry("h100", 6, 6)), _member("west", _entry("h100", 2, 3))],
                           None, NOW)
    [entry] = out
    assert (entry.resource_flavor, entry.allocatable, entry.high_water_mark, entry.observed_at) == (
        "h100", "8", None, NOW)
    assert cluster_capacity(out) == {(GPU, "h100"): {"east": "6", "west": "3"}}  # the split follows the marks


def test_an_unreadable_member_keeps_its_last_row_marked_unavailable_and_counts_nothing() -> None:
    first = with_per_cluster([], [_member("east", _entry("h100", 6, 6)), _member("west", _entry("h100", 2, 2))],
                             None, NOW)
    gone = MemberCapacityReport(cluster="west", cluster_uid="uid-west", reason="Unreachable", message="no route")
    second = with_per_cluster([], [_member("east", _entry("h100", 6, 6)), gone], first, NOW)
    [entry] = second
    west = _rows(entry)["west"]
    assert (west.report_available, west.allocatable, west.high_water_mark) == (False, 2, 2)
    assert entry.allocatable == "6"  # only what was read this time
    assert cluster_capacity(second) == {(GPU, "h100"): {"east": "6"}}


def test_a_member_never_read_has_no_row() -> None:
    never = MemberCapacityReport(cluster="north", reason="Unreachable", message="no route")
    [entry] = with_per_cluster([], [_member("east", _entry("h100", 6, 6)), never], None, NOW)
    assert list(_rows(entry)) == ["east"]


def test_a_deregistered_member_drops_out() -> None:
    first = with_per_cluster([], [_member("east", _entry("h100", 6, 6)), _member("west", _entry("h100", 2, 2))],
                             None, NOW)
    [entry] = with_per_cluster([], [_member("east", _entry("h100", 6, 6))], first, NOW)
    assert list(_rows(entry)) == ["east"]
