"""The AcceleratorQuota tree at admission, pure: which violations a write would bring into the tree.

The rules are the controller's own (rendering/accelerator_quota.py: `tree_problems`, `role_change_problem`); the
webhook applies them to the tree as it would be after the write and refuses what the write adds. A violation
already in the tree before the write (a tree built before the webhook was installed, or while it was down) is
not charged to an unrelated write: the controller reports it on the node that has it (Degraded, frozen). One
the write changes is charged to it: a new child in a family already over its budget changes the family's
ContainmentViolated message (the sum and the children it names), and is refused.

Checked here: ParentMissing (unknown parent), ParentCycle, Unreachable (an ancestor's parentRef fails),
NodeKindInvalid (a leaf as parent, a second root, a grouping turned leaf with children, two budgets of one
pair), DepthExceeded, ContainmentViolated (a grouping's budget per (resource, flavor) below its children's sum),
and RoleChangeBlocked (a leaf turned grouping while its ClusterQueue holds reserving or admitted workloads).
Not here: ShareUnresolved (it depends on the operator's default distribution policy, which the controller reads)
and CapacityExceeded (it depends on the capacity report in the root's status): the controller judges those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from servingops.api_models.ome.enums import AcceleratorQuotaRole
from servingops.rendering.accelerator_quota import (
    DEFAULT_MAX_DEPTH,
    ClusterQueueView,
    QuotaNode,
    Reason,
    children_of,
    role_change_problem,
    tree_problems,
)

ADMISSION_REASONS = frozenset({
    Reason.PARENT_MISSING, Reason.PARENT_CYCLE, Reason.UNREACHABLE, Reason.NODE_KIND_INVALID,
    Reason.DEPTH_EXCEEDED, Reason.CONTAINMENT_VIOLATED,
})
"""The tree rules the webhook refuses on; each is a reason of the controller's Degraded condition."""

NOT_YET_CREATED = "9999-12-31T23:59:59Z"
"""The creation time of a candidate that has none yet: the newest node (the oldest parent-less node is the root)."""


class Refusal(BaseModel):
    """One rule a write breaks: the controller's reason, the node that would carry it, and why."""

    reason: str
    node: str
    message: str

    def text(self, candidate: str) -> str:
        where = "" if self.node == candidate else f" on {self.node}"
        return f"{self.reason}{where}: {self.message}"


def candidate_node(obj: Mapping[str, Any]) -> QuotaNode:
    """The written object as a tree node (a CREATE may carry no creationTimestamp yet)."""
    node = QuotaNode.from_object(obj)
    return node if node.created else node.model_copy(update={"created": NOT_YET_CREATED})


def _affected(candidate: QuotaNode, old: QuotaNode | None, tree: list[QuotaNode]) -> list[str]:
    """The nodes whose verdict the write can change: the candidate, its ancestors old and new (containment
    rolls up through groupings that list no budget for a pair), and its descendants (depth, reachability, a
    leaf as their parent). Every other node's problems are the same before and after."""
    by_name = {n.name: n for n in tree}
    names: list[str] = [candidate.name]
    for start in (candidate.parent, old.parent if old else None):
        current = start
        while current is not None and current not in names:
            names.append(current)
            node = by_name.get(current)
            current = node.parent if node else None
    frontier = [candidate.name]
    while frontier:
        for child in children_of(frontier.pop(), tree):
            if child.name not in names:
                names.append(child.name)
                frontier.append(child.name)
    return [n for n in names if n in by_name]


def _violations(names: Iterable[str], tree: list[QuotaNode], max_depth: int) -> list[Refusal]:
    judged = {n.name: n for n in tree}
    out: list[Refusal] = []
    for name in names:
        node = judged.get(name)
        # A node being deleted or projected from a management plane is not authored here: not judged.
        if node is None or node.deleting or node.projected is not None:
            continue
        for problem in tree_problems(name, tree, max_depth=max_depth):
            refusal = Refusal(reason=problem.reason, node=name, message=problem.message)
            if problem.reason in ADMISSION_REASONS and refusal not in out:
                out.append(refusal)
    return out


def tree_refusals(candidate: QuotaNode, old: QuotaNode | None, stored: Iterable[QuotaNode], *,
                  max_depth: int = DEFAULT_MAX_DEPTH) -> list[Refusal]:
    """What writing `candidate` (over `old` on an UPDATE) would add to the tree `stored` (every
    AcceleratorQuota as read, the candidate's stored self among them or not)."""
    if candidate.projected is not None or candidate.deleting:
        return []
    others = [n for n in stored if n.name != candidate.name]
    before = others + ([old] if old is not None else [])
    after = [*others, candidate]
    names = _affected(candidate, old, after)  # its descendants name it, so they are the same before and after
    seen = {(r.reason, r.message) for r in _violations(names, before, max_depth)}
    # Sameness is the rule and its message, whichever node carries it: containment is reported on the grouping
    # and on each of its children, and a re-parented node carries its old family's verdict to no one.
    out: list[Refusal] = []
    for refusal in _violations(names, after, max_depth):
        if (refusal.reason, refusal.message) not in seen:
            seen.add((refusal.reason, refusal.message))
            out.append(refusal)
    return out


def turns_leaf_into_grouping(candidate: QuotaNode, old: QuotaNode | None) -> bool:
    """ClusterQueue -> Cohort: the write would delete the leaf's ClusterQueue (the guard reads it first)."""
    return (old is not None and old.role == AcceleratorQuotaRole.CLUSTER_QUEUE
            and candidate.role == AcceleratorQuotaRole.COHORT)


def role_change_refusal(candidate: QuotaNode, old: QuotaNode | None,
                        queue: ClusterQueueView | None) -> Refusal | None:
    """The drained-leaf guard: a leaf turned grouping while its ClusterQueue (ours) holds work is refused. The
    other direction (a grouping turned leaf) is the childless-grouping rule of `tree_refusals`."""
    if not turns_leaf_into_grouping(candidate, old):
        return None
    problem = role_change_problem(candidate, queue)
    return None if problem is None else Refusal(reason=problem.reason, node=candidate.name, message=problem.message)
