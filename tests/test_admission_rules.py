"""The validating webhook's AcceleratorQuota rules (admission/quota_tree.py) through its review
(admission/review.py): an AdmissionReview as the apiserver sends it, the tree as the reader would return it,
the answer as the apiserver reads it. The rules themselves are rendering/accelerator_quota.py's
(tests/test_accelerator_quota_rules.py); this is what admission adds: the tree after the write, only what the
write brings in, the drained-leaf guard read from the ClusterQueue, and the answer's shape."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from servingops.admission.review import ReadFailed, review

pytestmark = pytest.mark.unit

GPU = "nvidia.com/gpu"


def quota(name: str, role: str = "Cohort", parent: str | None = None, gpus: int | None = None, *,
          created: str = "2026-01-01T00:00:00Z", flavor: str = "a100", **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"role": role}
    if parent:
        spec["parentRef"] = {"name": parent}
    if gpus is not None:
        spec["budgets"] = [{"resourceName": GPU, "resourceFlavor": flavor, "nominal": str(gpus)}]
    if role == "ClusterQueue":
        spec["distribution"] = {"policy": "Proportional"}
    metadata = {"name": name, "creationTimestamp": created, **meta}
    return {"apiVersion": "ome.io/v1beta1", "kind": "AcceleratorQuota", "metadata": metadata, "spec": spec}


class Tree:
    """The stored objects, as the apiserver's list and get would return them."""

    def __init__(self, *quotas: dict[str, Any], queues: Mapping[str, dict[str, Any]] | None = None,
                 broken: bool = False) -> None:
        self.items = list(quotas)
        self.queues = dict(queues or {})
        self.broken = broken
        self.queue_reads: list[str] = []

    def quotas(self) -> list[Mapping[str, Any]]:
        if self.broken:
            raise ReadFailed("could not list acceleratorquotas: 503 Service Unavailable")
        return copy.deepcopy(self.items)

    def cluster_queue(self, name: str) -> Mapping[str, Any] | None:
        self.queue_reads.append(name)
        return self.queues.get(name)


def request(obj: dict[str, Any], old: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "e911857d-c318-11e8-bbad-025000000001",
        "kind": {"group": "ome.io", "version": "v1beta1", "kind": "AcceleratorQuota"},
        "resource": {"group": "ome.io", "version": "v1beta1", "resource": "acceleratorquotas"},
        "name": obj["metadata"]["name"], "operation": "UPDATE" if old else "CREATE",
        "object": obj, "oldObject": old, **extra}}


def response(body: dict[str, Any], tree: Tree, max_depth: int = 8) -> dict[str, Any]:
    answer = review(body, tree, max_depth=max_depth)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == body["request"]["uid"]
    return dict(answer["response"])


def refused(body: dict[str, Any], tree: Tree, max_depth: int = 8) -> str:
    answer = response(body, tree, max_depth)
    assert answer["allowed"] is False, answer
    assert answer["status"]["code"] == 403 and answer["status"]["reason"] == "Forbidden"
    return str(answer["status"]["message"])


def admitted(body: dict[str, Any], tree: Tree, max_depth: int = 8) -> dict[str, Any]:
    answer = response(body, tree, max_depth)
    assert answer["allowed"] is True, answer
    return answer


def fleet() -> Tree:
    """fleet (8) > grp-a (4) > team-a (2), team-b (2); fleet > grp-b (no budget)."""
    return Tree(quota("fleet", gpus=8), quota("grp-a", parent="fleet", gpus=4), quota("grp-b", parent="fleet"),
                quota("team-a", "ClusterQueue", "grp-a", 2), quota("team-b", "ClusterQueue", "grp-a", 2))


def test_a_valid_tree_is_admitted_node_by_node() -> None:
    tree = Tree()
    for obj in fleet().items:
        answer = admitted(request(obj), tree)
        assert "warnings" not in answer
        tree.items.append(obj)


def test_an_unknown_parent_is_refused() -> None:
    message = refused(request(quota("team-c", "ClusterQueue", "grp-z", 1)), fleet())
    assert message == ("AcceleratorQuota team-c breaks the tree's rules: ParentMissing: parentRef grp-z names no "
                       "AcceleratorQuota")


def test_a_cycle_is_refused() -> None:
    tree = fleet()
    tree.items.append(quota("grp-c", parent="grp-b"))
    grp_b = next(q for q in tree.items if q["metadata"]["name"] == "grp-b")
    message = refused(request(quota("grp-b", parent="grp-c"), grp_b), tree)
    assert "ParentCycle: the parentRef chain loops: grp-b -> grp-c -> grp-b" in message


def test_a_child_over_its_parents_budget_is_refused() -> None:
    message = refused(request(quota("team-c", "ClusterQueue", "grp-a", 1)), fleet())
    assert "ContainmentViolated" in message
    assert "grp-a's budget for nvidia.com/gpu on a100 is 4, below its children's sum 5" in message
    # A raise of an existing child is refused the same way; within the budget it is admitted.
    team_b = fleet().items[4]
    assert "ContainmentViolated" in refused(request(quota("team-b", "ClusterQueue", "grp-a", 3), team_b), fleet())
    admitted(request(quota("team-b", "ClusterQueue", "grp-a", 1), team_b), fleet())


def test_containment_rolls_up_through_a_grouping_without_a_budget_and_a_parent_may_not_shrink() -> None:
    # grp-b lists no budget: its children count against fleet directly (8 = 4 + 5 > 8).
    tree = fleet()
    message = refused(request(quota("team-x", "ClusterQueue", "grp-b", 5)), tree)
    assert "fleet's budget for nvidia.com/gpu on a100 is 8, below its children's sum 9" in message
    grp_a = tree.items[1]
    assert "grp-a's budget for nvidia.com/gpu on a100 is 3, below its children's sum 4" in refused(
        request(quota("grp-a", parent="fleet", gpus=3), grp_a), tree)
    # Per flavor: another flavor's budget is its own pair.
    admitted(request(quota("team-h", "ClusterQueue", "grp-a", 6, flavor="h100")), tree)


def test_a_leaf_as_parent_is_refused() -> None:
    message = refused(request(quota("team-c", "ClusterQueue", "team-a", 1)), fleet())
    assert "NodeKindInvalid: parent team-a is a leaf (role ClusterQueue); only a Cohort takes children" in message


def test_a_second_root_is_refused_whether_or_not_it_has_a_creation_time_yet() -> None:
    message = refused(request(quota("fleet-2", gpus=4, created="2026-06-01T00:00:00Z")), fleet())
    assert "NodeKindInvalid: fleet is already the tree's root; every other node sets parentRef" in message
    bare = quota("aaa-first-by-name", gpus=4)
    del bare["metadata"]["creationTimestamp"]
    assert "fleet is already the tree's root" in refused(request(bare), fleet())
    # The first root of an empty tree is admitted.
    admitted(request(quota("fleet", gpus=8)), Tree())


def test_depth_is_refused_on_the_node_written_and_on_a_descendant_it_moves() -> None:
    tree = Tree(quota("root"), quota("l1", parent="root"), quota("l2", parent="l1"))
    message = refused(request(quota("l3", parent="l2")), tree, max_depth=2)
    assert "DepthExceeded: l3 is 3 levels below the root; at most 2 are allowed" in message
    # Moving l1 under a new grouping pushes l2 one level deeper: refused, naming l2.
    tree.items.append(quota("side", parent="root"))
    l1 = tree.items[1]
    message = refused(request(quota("l1", parent="side"), l1), tree, max_depth=2)
    assert "DepthExceeded on l2: l2 is 3 levels below the root" in message


def test_a_grouping_with_children_cannot_become_a_leaf() -> None:
    tree = fleet()
    message = refused(request(quota("grp-a", "ClusterQueue", "fleet", 4), tree.items[1]), tree)
    assert "a leaf takes no children, and team-a, team-b name grp-a as parent" in message
    # Childless, it may.
    admitted(request(quota("grp-b", "ClusterQueue", "fleet", 1), tree.items[2]), tree)


def _queue(name: str, reserving: int, admitted_: int) -> dict[str, Any]:
    labels = {"ome.io/quota-managed-by": "servingops", "ome.io/accelerator-quota": name}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"cohortName": "grp-a"},
            "status": {"reservingWorkloads": reserving, "admittedWorkloads": admitted_}}


def test_a_leaf_holding_work_cannot_become_a_grouping_and_a_drained_one_can() -> None:
    team_a = fleet().items[3]
    to_grouping = quota("team-a", "Cohort", "grp-a", 2)
    busy = Tree(*fleet().items, queues={"team-a": _queue("team-a", 3, 2)})
    message = refused(request(to_grouping, team_a), busy)
    assert ("RoleChangeBlocked: role ClusterQueue -> Cohort deletes ClusterQueue team-a, which still holds "
            "3 reserving and 2 admitted workload(s); drain it first") in message
    assert busy.queue_reads == ["team-a"]
    admitted(request(to_grouping, team_a), Tree(*fleet().items, queues={"team-a": _queue("team-a", 0, 0)}))
    admitted(request(to_grouping, team_a), Tree(*fleet().items))  # never materialized
    # Only that transition reads the queue.
    plain = Tree(*fleet().items)
    admitted(request(quota("team-a", "ClusterQueue", "grp-a", 1), team_a), plain)
    assert plain.queue_reads == []


def test_a_violation_already_in_the_tree_is_not_charged_to_an_unrelated_write() -> None:
    # Built while the webhook was down: grp-a's children sum to 5 of its 4, and a second root.
    tree = fleet()
    tree.items.append(quota("team-c", "ClusterQueue", "grp-a", 1))
    tree.items.append(quota("other-root", gpus=1, created="2026-02-01T00:00:00Z"))
    admitted(request(quota("team-x", "ClusterQueue", "grp-b", 1)), tree)
    team_a = tree.items[3]
    admitted(request({**team_a, "metadata": {**team_a["metadata"], "labels": {"x": "y"}}}, team_a), tree)
    # A spec change inside the violating family that leaves the violation as it was.
    borrowing = copy.deepcopy(team_a)
    borrowing["spec"]["budgets"][0]["borrowingLimit"] = "1"
    admitted(request(borrowing, team_a), tree)
    # A write that mends it is admitted; one that makes it worse changes the verdict and is refused.
    team_c = tree.items[5]
    admitted(request(quota("team-c", "ClusterQueue", "grp-a", 0), team_c), tree)
    assert "below its children's sum 6" in refused(request(quota("team-c", "ClusterQueue", "grp-a", 2), team_c), tree)


def test_every_broken_rule_is_named_in_one_message() -> None:
    message = refused(request(quota("team-c", "ClusterQueue", "team-a", 9)), fleet())
    assert "NodeKindInvalid" in message and "; " in message


def test_what_is_not_judged_is_admitted() -> None:
    tree = fleet()
    # A copy projected from a management plane carries resolved shares; the projection writes it.
    projected = quota("team-c", "ClusterQueue", "grp-z", 1, labels={"ome.io/quota-projected": "servingops"},
                      annotations={"ome.io/quota-source-generation": "3"})
    admitted(request(projected), tree)
    # Another kind, a delete, a status write.
    other = request(quota("team-c", "ClusterQueue", "grp-z", 1))
    other["request"]["kind"] = {"group": "ome.io", "version": "v1beta1", "kind": "RolloutPolicy"}
    admitted(other, tree)
    admitted(request(quota("team-c", "ClusterQueue", "grp-z", 1), operation="DELETE"), tree)
    admitted(request(quota("team-c", "ClusterQueue", "grp-z", 1), subResource="status"), tree)


def test_a_tree_that_cannot_be_read_is_admitted_with_a_warning() -> None:
    answer = admitted(request(quota("team-c", "ClusterQueue", "grp-z", 1)), Tree(broken=True))
    assert answer["warnings"] == ["AcceleratorQuota tree not checked at admission (could not list acceleratorquotas: "
                                  "503 Service Unavailable); the controller checks it at reconcile"]
