"""The projection of the AcceleratorQuota tree onto WorkloadClusters, pure (rendering/quota_projection.py):
which shares each cluster gets, the copies and their annotations, the member-side echo of the source
generation, and the management plane's status.clusters and budgets[].perCluster read back from the copies."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from servingops.api_models.ome.accelerator_quota import (
    AcceleratorBudget,
    AcceleratorBudgetStatus,
    AcceleratorCapacityStatus,
    AcceleratorQuotaClusterStatus,
)
from servingops.api_models.ome.enums import AcceleratorQuotaDistributionPolicy as Policy
from servingops.rendering.accelerator_quota import QuotaNode, Reason, tree_problems
from servingops.rendering.quota_projection import (
    ORIGIN_ANNOTATION,
    PROJECTED_LABEL,
    SOURCE_GENERATION_ANNOTATION,
    ClusterOutcome,
    CopyView,
    cluster_capacity,
    cluster_rows,
    copy_conflict,
    copy_in_sync,
    projected_copy,
    shares,
    source_generation_of,
    with_per_cluster,
)

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"
KEY = f"{GPU}|a100"
NOW = datetime(2026, 12, 7, 16, 0, tzinfo=UTC)


def budget(nominal: int | str, **extra: Any) -> AcceleratorBudget:
    return AcceleratorBudget.model_validate({"resourceName": GPU, "resourceFlavor": "a100", "nominal": nominal,
                                             **extra})


def leaf(*budgets: AcceleratorBudget, policy: Policy | None = Policy.PROPORTIONAL, generation: int = 3) -> QuotaNode:
    return QuotaNode(name="team-a", uid="uid-a", generation=generation, role="ClusterQueue", parent="grp",
                     priority_tier="serving-high", distribution=policy, budgets=list(budgets))


def capacity(**per_cluster: int) -> list[AcceleratorCapacityStatus]:
    return [AcceleratorCapacityStatus.model_validate({
        "resourceName": GPU, "resourceFlavor": "a100",
        "perCluster": [{"cluster": c, "allocatable": v, "highWaterMark": v, "reportAvailable": True}
                       for c, v in per_cluster.items()]})]


def test_proportional_follows_each_registered_clusters_capacity() -> None:
    caps = cluster_capacity(capacity(east=6, west=2, gone=8))
    got = shares(leaf(budget(4)), ["east", "west"], caps)
    assert got.per_cluster == {"east": {KEY: "3"}, "west": {KEY: "1"}}  # "gone" is not registered: not weighed
    assert got.unresolved == []


def test_capacity_prefers_the_high_water_mark_and_skips_unavailable_reports() -> None:
    caps = cluster_capacity([AcceleratorCapacityStatus.model_validate({
        "resourceName": GPU, "resourceFlavor": "a100", "perCluster": [
            {"cluster": "east", "allocatable": 1, "highWaterMark": 4},
            {"cluster": "west", "allocatable": 4, "highWaterMark": 4, "reportAvailable": False}]})])
    assert caps == {(GPU, "a100"): {"east": "4"}}


def test_explicit_uses_per_cluster_and_gives_unnamed_clusters_zero() -> None:
    node = leaf(budget(5, perCluster=[{"cluster": "east", "nominal": 5}]), policy=Policy.EXPLICIT)
    got = shares(node, ["east", "west"], {})
    assert got.per_cluster == {"east": {KEY: "5"}, "west": {KEY: "0"}}
    assert got.unknown_clusters == []


def test_explicit_naming_an_unregistered_cluster_is_reported() -> None:
    node = leaf(budget(5, perCluster=[{"cluster": "east", "nominal": 3}, {"cluster": "mars", "nominal": 2}]),
                policy=Policy.EXPLICIT)
    got = shares(node, ["east"], {})
    assert got.per_cluster == {"east": {KEY: "3"}}
    assert got.unknown_clusters == ["mars"]
    rows = cluster_rows(node, [ClusterOutcome(cluster="east", wrote=True)], [], NOW, unknown=got.unknown_clusters)
    assert [r.cluster for r in rows] == ["east", "mars"]
    assert rows[1].message is not None and "no WorkloadCluster" in rows[1].message


def test_unresolved_shares_say_why() -> None:
    assert shares(leaf(budget(4)), ["east"], {}).unresolved == [
        f"{GPU} on a100: no cluster reports capacity of the flavor; a Proportional split has nothing to follow"]
    unresolved = shares(leaf(budget(4), policy=None), ["east"], {}).unresolved
    assert unresolved == [f"no distribution policy for {GPU} on a100"]


def test_a_leaf_copy_carries_one_resolved_share_and_the_source_generation() -> None:
    node = leaf(budget(4, borrowingLimit=2, lendingLimit=3))
    copy = projected_copy(node, {KEY: "1"})
    assert copy["metadata"] == {
        "name": "team-a", "labels": {PROJECTED_LABEL: "servingops", "ome.io/quota-managed-by": "servingops"},
        "annotations": {ORIGIN_ANNOTATION: "uid-a", SOURCE_GENERATION_ANNOTATION: "3"}}
    assert copy["spec"] == {
        "role": "ClusterQueue", "parentRef": {"name": "grp"}, "priorityTier": "serving-high",
        "budgets": [{"resourceName": GPU, "resourceFlavor": "a100", "nominal": "1", "borrowingLimit": "2",
                     "lendingLimit": "1"}]}  # no perCluster, no policy; lending capped at the share


def test_a_grouping_copy_has_no_budget() -> None:
    grp = QuotaNode(name="grp", uid="u", generation=2, role="Cohort", parent="fleet", budgets=[budget(8)])
    assert projected_copy(grp)["spec"] == {"role": "Cohort", "parentRef": {"name": "fleet"}}
    root = QuotaNode(name="fleet", uid="u", generation=1, role="Cohort", budgets=[budget(8)])
    assert projected_copy(root)["spec"] == {"role": "Cohort"}


def test_the_member_tree_of_copies_validates_without_a_policy() -> None:
    """A copy has no policy and no perCluster: the member's rules read it as a projection, not ShareUnresolved."""
    node = leaf(budget(4))
    objs = [projected_copy(QuotaNode(name="fleet", uid="r", generation=1, role="Cohort")),
            projected_copy(QuotaNode(name="grp", uid="g", generation=1, role="Cohort", parent="fleet")),
            projected_copy(node, {KEY: "1"})]
    member = [QuotaNode.from_object(o) for o in objs]
    assert member[2].projected == 3 and member[2].distribution is None
    assert tree_problems("team-a", member) == []
    authored = QuotaNode.from_object({**objs[2], "metadata": {"name": "team-a"}})
    assert [p.reason for p in tree_problems("team-a", [*member[:2], authored])] == [Reason.SHARE_UNRESOLVED]


def test_the_members_own_node_is_never_overwritten() -> None:
    theirs = CopyView.from_object({"metadata": {"name": "team-a", "labels": {}}, "spec": {"role": "Cohort"}})
    assert "of its own" in copy_conflict("east", theirs)
    ours = CopyView.from_object(projected_copy(leaf(budget(4)), {KEY: "1"}))
    assert copy_conflict("east", ours) == "" and copy_conflict("east", None) == ""


def test_in_sync_compares_generation_origin_and_spec() -> None:
    node = leaf(budget(4))
    wanted = projected_copy(node, {KEY: "1"})
    assert copy_in_sync(wanted, CopyView.from_object(wanted))
    assert not copy_in_sync(wanted, CopyView.from_object(projected_copy(node, {KEY: "2"})))
    assert not copy_in_sync(wanted, CopyView.from_object(projected_copy(leaf(budget(4), generation=2), {KEY: "1"})))
    assert not copy_in_sync(wanted, None)


def test_the_member_echoes_the_source_generation_once_materialized() -> None:
    assert source_generation_of(7, materialized_generation=2, generation=2, previous=5) == 7
    assert source_generation_of(7, materialized_generation=1, generation=2, previous=5) == 5  # not yet rendered
    assert source_generation_of(None, materialized_generation=2, generation=2, previous=None) is None


def _copy(generation: int, materialized: int | None, admitted: str = "0", ready: str = "True") -> CopyView:
    obj = projected_copy(leaf(budget(4), generation=generation), {KEY: "1"})
    obj["status"] = {"sourceGeneration": materialized,
                     "budgets": [{"resourceName": GPU, "resourceFlavor": "a100", "nominal": "1",
                                  "admitted": admitted, "reserved": admitted, "borrowed": "0"}],
                     "conditions": [{"type": "Ready", "status": ready, "reason": "FlavorMissing" if ready == "False"
                                     else "Admitted", "message": "m", "lastTransitionTime": "2026-12-07T00:00:00Z"}]}
    return CopyView.from_object(obj)


def test_cluster_rows_report_applied_materialized_and_why_behind() -> None:
    node = leaf(budget(4))
    rows = cluster_rows(node, [
        ClusterOutcome(cluster="east", copy_=_copy(3, 3)),
        ClusterOutcome(cluster="west", wrote=True, copy_=_copy(3, 2, ready="False")),
        ClusterOutcome(cluster="south", error="WorkloadCluster south is unreachable: connection refused"),
    ], [AcceleratorQuotaClusterStatus.model_validate({"cluster": "south", "appliedGeneration": 2,
                                                      "appliedTime": "2026-12-07T15:00:00Z",
                                                      "materializedGeneration": 2})], NOW)
    by = {r.cluster: r for r in rows}
    assert [r.cluster for r in rows] == ["east", "south", "west"]
    assert (by["east"].applied_generation, by["east"].materialized_generation, by["east"].message) == (3, 3, None)
    assert by["west"].applied_generation == 3 and by["west"].materialized_generation == 2
    assert by["west"].message == "the member has not materialized generation 3 yet (it reports 2): FlavorMissing: m"
    assert by["west"].to_api()["appliedTime"] == "2026-12-07T16:00:00Z"
    # unreachable: its last known numbers stay, and the row says why
    assert (by["south"].applied_generation, by["south"].materialized_generation) == (2, 2)
    assert by["south"].message == "WorkloadCluster south is unreachable: connection refused"


def test_cluster_rows_for_conflict_and_unresolved() -> None:
    node = leaf(budget(4))
    rows = cluster_rows(node, [ClusterOutcome(cluster="a", conflict="a has its own"),
                               ClusterOutcome(cluster="b", unresolved="no capacity")], [], NOW)
    assert [r.message for r in rows] == ["a has its own", "no copy written: no capacity"]


def test_per_cluster_budgets_read_back_from_the_copies() -> None:
    local = [AcceleratorBudgetStatus.model_validate({"resourceName": GPU, "resourceFlavor": "a100", "nominal": "4",
                                                     "admitted": "0", "reserved": "0", "borrowed": "0"})]
    got = with_per_cluster(local, {"east": {KEY: "3"}, "west": {KEY: "1"}},
                           {"east": _copy(3, 3, admitted="2"), "west": None})
    api = got[0].to_api()
    assert api["perCluster"] == [
        {"cluster": "east", "nominal": "3", "admitted": "2", "reserved": "2", "borrowed": "0"},
        {"cluster": "west", "nominal": "1"}]
    assert (api["nominal"], api["admitted"], api["reserved"]) == ("4", "2", "2")


def test_a_grouping_per_cluster_nominal_is_what_its_copy_reports() -> None:
    local = [AcceleratorBudgetStatus.model_validate({"resourceName": GPU, "resourceFlavor": "a100", "nominal": "8"})]
    got = with_per_cluster(local, {}, {"east": _copy(1, 1, admitted="1")})
    assert got[0].to_api()["perCluster"] == [
        {"cluster": "east", "nominal": "1", "admitted": "1", "reserved": "1", "borrowed": "0"}]
    assert with_per_cluster(local, {}, {}) == local


def test_an_unreadable_copy_status_reads_as_none() -> None:
    obj = projected_copy(leaf(budget(4)), {KEY: "1"})
    obj["status"] = {"sourceGeneration": "not a number"}
    view = CopyView.from_object(obj)
    assert view.projected and view.status is None


def test_a_members_own_root_wins_over_a_projected_root_and_the_projected_tree_is_root_conflict() -> None:
    """The single reserved root on a member: its own parent-less node stays the root whatever the ages (here the
    projected `fleet` is older), and every projected node under the projected root is RootConflict; the member's
    own nodes are not touched by the rule. Without the rule (a run from before the patch) the older projected
    root wins and the member's own root is NodeKindInvalid."""
    objs = [projected_copy(QuotaNode(name="fleet", uid="r", generation=1, role="Cohort")),
            projected_copy(QuotaNode(name="grp", uid="g", generation=1, role="Cohort", parent="fleet")),
            projected_copy(leaf(budget(4)), {KEY: "1"})]
    member = [QuotaNode.from_object(o).model_copy(update={"created": "2026-01-01T00:00:00Z"}) for o in objs]
    own = [QuotaNode(name="local", uid="l", generation=1, role="Cohort", created="2026-06-01T00:00:00Z"),
           QuotaNode(name="mine", uid="m", generation=1, role="ClusterQueue", parent="local", budgets=[budget(1)],
                     created="2026-06-01T00:00:00Z")]
    tree = [*member, *own]
    for name in ("fleet", "grp", "team-a"):
        [problem] = tree_problems(name, tree, single_root=True)
        assert problem.reason == Reason.ROOT_CONFLICT and "has its own root local" in problem.message
    assert tree_problems("local", tree, single_root=True) == []
    assert [p.reason for p in tree_problems("local", tree)] == [Reason.NODE_KIND_INVALID]
    assert tree_problems("team-a", tree) == []
