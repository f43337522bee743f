"""The AcceleratorQuota tree's rules and its Kueue objects, pure (seed 004: AcceleratorQuotaSpec, Role,
ParentRef, AcceleratorBudget, AcceleratorQuotaMaterialization).

The tree is the set of AcceleratorQuota nodes and their spec.parentRef edges. What one node's workflow
decides from a snapshot of the whole tree (`QuotaNode` per node) and of the Kueue objects on the plane:

- `tree_problems`: the checks needing the rest of the tree, each a (reason, message) with the reasons of
  upstream OME's controller: ParentMissing, ParentCycle, Unreachable (an ancestor is missing or loops),
  NodeKindInvalid (a leaf named as a parent, a parent-less leaf, a second parent-less node, two budgets
  of one (resource, flavor) pair), DepthExceeded, ContainmentViolated (a grouping's budget for a pair
  below the sum of its children's; every node of that family is held), ShareUnresolved (no distribution
  policy for a leaf's budget and no operator default; an Explicit perCluster not summing to nominal),
  NameTooLong; and on the root, CapacityExceeded (`capacity_problems`: a budget above the capacity
  report's high-water mark). Any of them is a violated invariant: the node is Degraded and its Kueue output frozen at
  its last-good state (`freeze`): nothing written, nothing deleted.
- `role_change_problem`: the drained-leaf / childless-grouping guard. A leaf (ClusterQueue) becoming a
  grouping deletes its ClusterQueue and LocalQueues, admitted only while the queue holds no reserved or
  admitted workload (RoleChangeBlocked otherwise); a grouping becoming a leaf must have no children
  (NodeKindInvalid from `tree_problems`).
- `render`: the objects a node materializes. A grouping is a Kueue Cohort named after the node
  (spec.parentName = its parent; no resourceGroups: a grouping's budgets are an authoring guardrail,
  never quota). A leaf is a ClusterQueue named after the node (spec.cohortName = its parent: re-parenting
  is an in-place update of that one field) with one resourceGroup holding every budget (Kueue keys quota
  by (resource, flavor): each flavor lists every covered resource, 0 where no budget names the pair),
  cpu and memory covered with a nominal no workload reaches so admission never blocks on them, and an
  explicit borrowingLimit of 0 where the budget sets none (Kueue reads an absent limit as unbounded);
  and one LocalQueue named after the node in every namespace labelled `ome.io/accelerator-quota: <leaf>`
  (a label has one value, so a namespace charges exactly one leaf). Every object carries the labels
  `ome.io/quota-managed-by: servingops` and `ome.io/accelerator-quota: <node>`; an object of that name
  without them is someone else's and is never written (ObjectConflict).
- `budget_status`: status.budgets from the materialized ClusterQueues' Kueue status (flavorsUsage:
  admitted and borrowed; flavorsReservation: reserved), rolled up over a grouping's leaves.
- `split`: a leaf's fleet nominal into per-cluster shares (Explicit: perCluster verbatim, which must sum
  to nominal; Proportional: by each cluster's capacity, largest remainders). Used by the projection to
  WorkloadClusters (rendering/quota_projection.py).

Seed 004 says OME references ResourceFlavors and WorkloadPriorityClasses and creates neither: a budget's
flavor that does not exist is FlavorMissing (Kueue keeps the ClusterQueue inactive), a priorityTier whose
class does not exist is PriorityTierMissing; the AcceleratorClass workflow creates flavors from classes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from pydantic import BaseModel

from servingops.api_models.ome.accelerator_quota import (
    MAX_NAME_LENGTH,
    AcceleratorBudget,
    AcceleratorBudgetStatus,
    AcceleratorCapacityStatus,
)
from servingops.api_models.ome.enums import AcceleratorQuotaDistributionPolicy, AcceleratorQuotaRole
from servingops.api_models.quantity import quantity, quantity_text

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
MANAGED_BY_LABEL = "ome.io/quota-managed-by"
MANAGED_BY = "servingops"
NODE_LABEL = "ome.io/accelerator-quota"
"""On every Kueue object a node materializes, and on a namespace: the leaf the namespace charges."""
PRIORITY_TIER_LABEL = "ome.io/priority-tier"
"""On a leaf's ClusterQueue and LocalQueues: the WorkloadPriorityClass its workloads are stamped with."""
UNBOUNDED_CPU = "100k"
UNBOUNDED_MEMORY = "1Pi"
"""cpu and memory are covered on every ClusterQueue so Kueue admission never blocks on them."""
DEFAULT_MAX_DEPTH = 8
PROJECTED_LABEL = "ome.io/quota-projected"
"""On every AcceleratorQuota projected into a member (value MANAGED_BY): rendering/quota_projection.py."""
ORIGIN_ANNOTATION = "ome.io/quota-origin"
"""On a projected copy: the source node's uid."""
SOURCE_GENERATION_ANNOTATION = "ome.io/quota-source-generation"
"""On a projected copy: the source generation it was built from (status.sourceGeneration echoes it once the
member's controller has materialized it)."""


def projected_generation(meta: Mapping[str, Any]) -> int | None:
    """The source generation a projected copy carries; None for a node that is no projection."""
    if (meta.get("labels") or {}).get(PROJECTED_LABEL) != MANAGED_BY:
        return None
    raw = (meta.get("annotations") or {}).get(SOURCE_GENERATION_ANNOTATION)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


class Reason:
    """Condition reasons (upstream OME's names where it has one)."""

    ADMITTED = "Admitted"
    PARENT_MISSING = "ParentMissing"
    PARENT_CYCLE = "ParentCycle"
    UNREACHABLE = "Unreachable"
    NODE_KIND_INVALID = "NodeKindInvalid"
    DEPTH_EXCEEDED = "DepthExceeded"
    CONTAINMENT_VIOLATED = "ContainmentViolated"
    CAPACITY_EXCEEDED = "CapacityExceeded"
    SHARE_UNRESOLVED = "ShareUnresolved"
    NAME_TOO_LONG = "NameTooLong"
    ROLE_CHANGE_BLOCKED = "RoleChangeBlocked"
    FLAVOR_MISSING = "FlavorMissing"
    PRIORITY_TIER_MISSING = "PriorityTierMissing"
    OBJECT_CONFLICT = "ObjectConflict"
    FROZEN = "Frozen"
    MATERIALIZED = "Materialized"
    QUEUE_INACTIVE = "ClusterQueueInactive"
    KUEUE_NOT_SERVED = "KueueNotServed"
    NO_VIOLATION = "NoViolation"
    ROOT_CONFLICT = "RootConflict"


class Problem(BaseModel):
    reason: str
    message: str


class QuotaNode(BaseModel):
    """One AcceleratorQuota as the tree checks see it."""

    name: str
    uid: str = ""
    generation: int = 0
    created: str = ""
    """metadata.creationTimestamp (the oldest parent-less node is the root)."""
    role: AcceleratorQuotaRole
    parent: str | None = None
    priority_tier: str | None = None
    distribution: AcceleratorQuotaDistributionPolicy | None = None
    budgets: list[AcceleratorBudget] = []
    deleting: bool = False
    projected: int | None = None
    """A copy projected into this member from a management plane: the source generation it carries (its
    budgets are already resolved shares: no split is checked). None for a node authored here."""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> QuotaNode:
        """From an AcceleratorQuota as the apiserver returns it (the CRD schema already checked its shape)."""
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        return cls(name=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
                   generation=int(meta.get("generation", 0)), created=str(meta.get("creationTimestamp", "")),
                   role=AcceleratorQuotaRole(spec.get("role", "Cohort")),
                   parent=(spec.get("parentRef") or {}).get("name") or None,
                   priority_tier=spec.get("priorityTier") or None,
                   distribution=(spec.get("distribution") or {}).get("policy") or None,
                   budgets=[AcceleratorBudget.model_validate(b) for b in spec.get("budgets") or []],
                   deleting=bool(meta.get("deletionTimestamp")), projected=projected_generation(meta))


Pair = tuple[str, str]
"""(resourceName, resourceFlavor): how Kueue keys quota."""


def _pair(budget: AcceleratorBudget) -> Pair:
    return budget.resource_name, budget.resource_flavor


# -- the tree ------------------------------------------------------------------------------------


def root_of(tree: Iterable[QuotaNode], *, own_first: bool = False) -> str | None:
    """The reserved root: the parent-less node (the oldest, then the first by name, when several are).
    `own_first`: on a member, its own parent-less node wins over a projected one whatever their ages (the
    single-root rule: a projection never displaces the member's own tree)."""
    roots = sorted((n for n in tree if n.parent is None),
                   key=lambda n: (own_first and n.projected is not None, n.created, n.name))
    return roots[0].name if roots else None


def roots_conflict(tree: Iterable[QuotaNode]) -> bool:
    """A member holding its own parent-less node beside a projected one of another name (two roots)."""
    roots = [n for n in tree if n.parent is None]
    return any(n.projected is None for n in roots) and any(n.projected is not None for n in roots)


def _root_conflict(name: str, by_name: Mapping[str, QuotaNode], root: str | None) -> Problem | None:
    """A projected node whose tree tops out at a projected root while the member has its own root: the
    projected tree is not materialized beside the member's (seed 004: "the single reserved root")."""
    node = by_name[name]
    if node.projected is None or root is None or by_name[root].projected is not None:
        return None
    chain, stop = _chain(name, by_name)
    top = chain[-1] if stop is None else None
    if top is None or top == root:
        return None
    return Problem(reason=Reason.ROOT_CONFLICT, message=(
        f"this cluster has its own root {root}; the projected tree under {top} is not materialized beside it "
        f"(a single reserved root). Parent {top} under {root} in the management plane's tree, or remove "
        f"{root} here"))


def children_of(name: str, tree: Iterable[QuotaNode]) -> list[QuotaNode]:
    return sorted((n for n in tree if n.parent == name), key=lambda n: n.name)


def _chain(name: str, by_name: Mapping[str, QuotaNode]) -> tuple[list[str], str | None]:
    """The ancestors of `name` up to the root, and what stopped the walk short of a root: 'missing:<n>'
    (a parentRef names no node), 'cycle:<n>' (the walk came back to n), or None (a root was reached)."""
    seen = [name]
    current = by_name[name]
    while current.parent is not None:
        if current.parent not in by_name:
            return seen, f"missing:{current.parent}"
        if current.parent in seen:
            return seen, f"cycle:{current.parent}"
        seen.append(current.parent)
        current = by_name[current.parent]
    return seen, None


def _contribution(node: QuotaNode, pair: Pair, by_name: Mapping[str, QuotaNode],
                  tree: list[QuotaNode], depth: int = 0) -> Fraction:
    """What a node claims of one pair: its own nominal when it lists the pair, else its children's sum."""
    for budget in node.budgets:
        if _pair(budget) == pair:
            return quantity(budget.nominal)
    if node.role != AcceleratorQuotaRole.COHORT or depth > 64:
        return Fraction(0)
    return sum((_contribution(c, pair, by_name, tree, depth + 1) for c in children_of(node.name, tree)),
               Fraction(0))


def containment_problems(parent: QuotaNode, tree: list[QuotaNode]) -> list[Problem]:
    """parent >= sum(children) for every pair the parent's budgets list."""
    by_name = {n.name: n for n in tree}
    children = children_of(parent.name, tree)
    out = []
    for budget in parent.budgets:
        pair = _pair(budget)
        total = sum((_contribution(c, pair, by_name, tree) for c in children), Fraction(0))
        if total > quantity(budget.nominal):
            out.append(Problem(reason=Reason.CONTAINMENT_VIOLATED, message=(
                f"{parent.name}'s budget for {pair[0]} on {pair[1]} is {budget.nominal}, below its children's "
                f"sum {quantity_text(total)} ({', '.join(c.name for c in children)})")))
    return out


def effective_policy(node: QuotaNode, budget: AcceleratorBudget,
                     default: AcceleratorQuotaDistributionPolicy | None) -> AcceleratorQuotaDistributionPolicy | None:
    return budget.policy or node.distribution or default


def share_problems(node: QuotaNode, default: AcceleratorQuotaDistributionPolicy | None) -> list[Problem]:
    if node.role != AcceleratorQuotaRole.CLUSTER_QUEUE or node.projected is not None:
        return []
    out = []
    for budget in node.budgets:
        policy = effective_policy(node, budget, default)
        where = f"{budget.resource_name} on {budget.resource_flavor}"
        if policy is None:
            out.append(Problem(reason=Reason.SHARE_UNRESOLVED, message=(
                f"no distribution policy for {where}: set spec.distribution.policy, the budget's policy, or the "
                "operator default")))
        elif policy == AcceleratorQuotaDistributionPolicy.EXPLICIT:
            total = sum((quantity(s.nominal) for s in budget.per_cluster or []), Fraction(0))
            if total != quantity(budget.nominal):
                out.append(Problem(reason=Reason.SHARE_UNRESOLVED, message=(
                    f"perCluster of {where} sums to {quantity_text(total)}, not its nominal {budget.nominal}")))
    return out


def tree_problems(name: str, tree: list[QuotaNode], *, max_depth: int = DEFAULT_MAX_DEPTH,
                  default_policy: AcceleratorQuotaDistributionPolicy | None = None,
                  single_root: bool = False) -> list[Problem]:
    """Every tree-level invariant node `name` violates (empty: it may materialize). `single_root`: the member's
    own root wins over a projected one, and every projected node under a losing projected root is
    RootConflict (the workflow asks it behind a patch)."""
    by_name = {n.name: n for n in tree}
    node = by_name[name]
    out: list[Problem] = []
    root = root_of(tree, own_first=single_root)
    conflict = _root_conflict(name, by_name, root) if single_root else None
    if conflict is not None:
        out.append(conflict)
    if len(node.name) > MAX_NAME_LENGTH:
        out.append(Problem(reason=Reason.NAME_TOO_LONG, message=(
            f"the name has {len(node.name)} characters; a node's name is copied into a label value "
            f"(at most {MAX_NAME_LENGTH})")))
    pairs = [_pair(b) for b in node.budgets]
    for pair in sorted({p for p in pairs if pairs.count(p) > 1}):
        out.append(Problem(reason=Reason.NODE_KIND_INVALID, message=(
            f"two budgets name {pair[0]} on {pair[1]}; one entry per (resource, flavor)")))
    if node.parent is None:
        if node.role == AcceleratorQuotaRole.CLUSTER_QUEUE:
            out.append(Problem(reason=Reason.NODE_KIND_INVALID, message=(
                "a ClusterQueue node must set parentRef; only the reserved root node is parent-less")))
        elif root != node.name and conflict is None:
            out.append(Problem(reason=Reason.NODE_KIND_INVALID, message=(
                f"{root} is already the tree's root; every other node sets parentRef")))
    else:
        chain, stop = _chain(name, by_name)
        if stop is not None:
            kind, culprit = stop.split(":", 1)
            if kind == "missing" and culprit == node.parent:
                out.append(Problem(reason=Reason.PARENT_MISSING,
                                   message=f"parentRef {culprit} names no AcceleratorQuota"))
            elif kind == "cycle" and culprit == name:
                out.append(Problem(reason=Reason.PARENT_CYCLE, message=(
                    f"the parentRef chain loops: {' -> '.join([*chain, name])}")))
            else:
                why = f"{culprit} does not exist" if kind == "missing" else f"the chain loops at {culprit}"
                out.append(Problem(reason=Reason.UNREACHABLE, message=(
                    f"no path to the root from {name}: an ancestor's parentRef fails ({why})")))
        else:
            parent = by_name[node.parent]
            if parent.role == AcceleratorQuotaRole.CLUSTER_QUEUE:
                out.append(Problem(reason=Reason.NODE_KIND_INVALID, message=(
                    f"parent {parent.name} is a leaf (role ClusterQueue); only a Cohort takes children")))
            depth = len(chain) - 1
            if depth > max_depth:
                out.append(Problem(reason=Reason.DEPTH_EXCEEDED, message=(
                    f"{name} is {depth} levels below the root; at most {max_depth} are allowed")))
            out.extend(containment_problems(parent, tree))  # a child of a violating family is held too
    if node.role == AcceleratorQuotaRole.CLUSTER_QUEUE:
        kids = children_of(name, tree)
        if kids:
            out.append(Problem(reason=Reason.NODE_KIND_INVALID, message=(
                f"a leaf takes no children, and {', '.join(k.name for k in kids)} name {name} as parent "
                "(a grouping becomes a leaf only once childless)")))
        if not node.budgets:
            out.append(Problem(reason=Reason.NODE_KIND_INVALID, message="a ClusterQueue node must carry a budget"))
    else:
        out.extend(containment_problems(node, tree))
    out.extend(share_problems(node, default_policy))
    unique: list[Problem] = []
    for problem in out:
        if problem not in unique:
            unique.append(problem)
    return unique


def capacity_problems(node: QuotaNode, capacity: Iterable[AcceleratorCapacityStatus]) -> list[Problem]:
    """The root's budget for a pair above the observed capacity's high-water mark (status.capacity, written by
    the capacity report): CapacityExceeded. The high-water mark, never the instantaneous allocatable, so a
    drain or a cordon never raises it; a pair the report does not cover is not judged, nor one whose
    attribution is not complete (nodes matching two flavors' labels: its zero proves nothing, seed 004's
    "Complete means every observed node advertising this resource was unambiguously attributed")."""
    marks = {(c.resource_name, c.resource_flavor): c.high_water_mark for c in capacity
             if c.high_water_mark is not None and (c.attribution is None or c.attribution.complete is not False)}
    out = []
    for budget in node.budgets:
        mark = marks.get(_pair(budget))
        if mark is not None and quantity(budget.nominal) > quantity(mark):
            out.append(Problem(reason=Reason.CAPACITY_EXCEEDED, message=(
                f"the budget for {budget.resource_name} on {budget.resource_flavor} is {budget.nominal}, above the "
                f"{mark} ever observed allocatable")))
    return out


def role_change_problem(node: QuotaNode, queue: ClusterQueueView | None) -> Problem | None:
    """A leaf turning grouping deletes its ClusterQueue: refused while the queue still holds work."""
    if node.role != AcceleratorQuotaRole.COHORT or queue is None or not queue.ours:
        return None
    if queue.reserving_workloads or queue.admitted_workloads:
        return Problem(reason=Reason.ROLE_CHANGE_BLOCKED, message=(
            f"role ClusterQueue -> Cohort deletes ClusterQueue {queue.name}, which still holds "
            f"{queue.reserving_workloads} reserving and {queue.admitted_workloads} admitted workload(s); "
            "drain it first"))
    return None


# -- what is on the plane ------------------------------------------------------------------------


class FlavorUse(BaseModel):
    total: str = "0"
    borrowed: str = "0"


class ClusterQueueView(BaseModel):
    """A ClusterQueue of a node's name, as observed."""

    name: str
    ours: bool
    """Carries this node's labels (else it is someone else's: never written, never deleted)."""
    cohort: str | None = None
    quotas: dict[str, dict[str, str]] = {}
    """flavor -> resource -> nominalQuota (as written)."""
    borrowing_limits: dict[str, dict[str, str]] = {}
    namespace_label: str | None = None
    """The namespaceSelector's value of NODE_LABEL."""
    usage: dict[str, dict[str, FlavorUse]] = {}
    """status.flavorsUsage: flavor -> resource -> admitted (total, borrowed)."""
    reservation: dict[str, dict[str, FlavorUse]] = {}
    """status.flavorsReservation: flavor -> resource -> reserved."""
    reserving_workloads: int = 0
    admitted_workloads: int = 0
    pending_workloads: int = 0
    active: bool | None = None
    active_reason: str = ""
    active_message: str = ""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any], node: str) -> ClusterQueueView:
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        quotas: dict[str, dict[str, str]] = {}
        limits: dict[str, dict[str, str]] = {}
        for group in spec.get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for res in flavor.get("resources") or []:
                    quotas.setdefault(flavor["name"], {})[res["name"]] = str(res.get("nominalQuota", "0"))
                    if res.get("borrowingLimit") is not None:
                        limits.setdefault(flavor["name"], {})[res["name"]] = str(res["borrowingLimit"])

        def uses(entries: list[dict[str, Any]] | None) -> dict[str, dict[str, FlavorUse]]:
            return {f["name"]: {r["name"]: FlavorUse(total=str(r.get("total", "0")),
                                                     borrowed=str(r.get("borrowed", "0")))
                                for r in f.get("resources") or []} for f in entries or []}

        active = next((c for c in status.get("conditions") or [] if c.get("type") == "Active"), None)
        return cls(name=str(meta.get("name", "")), ours=owned(meta, node), cohort=spec.get("cohortName") or None,
                   quotas=quotas, borrowing_limits=limits,
                   namespace_label=((spec.get("namespaceSelector") or {}).get("matchLabels") or {}).get(NODE_LABEL),
                   usage=uses(status.get("flavorsUsage")), reservation=uses(status.get("flavorsReservation")),
                   reserving_workloads=int(status.get("reservingWorkloads") or 0),
                   admitted_workloads=int(status.get("admittedWorkloads") or 0),
                   pending_workloads=int(status.get("pendingWorkloads") or 0),
                   active=None if active is None else active.get("status") == "True",
                   active_reason=str((active or {}).get("reason", "")),
                   active_message=str((active or {}).get("message", "")))


class CohortView(BaseModel):
    name: str
    ours: bool
    parent: str | None = None


class LocalQueueView(BaseModel):
    namespace: str
    name: str
    cluster_queue: str = ""


def owned(meta: Mapping[str, Any], node: str) -> bool:
    labels = meta.get("labels") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(NODE_LABEL) == node)


class Plane(BaseModel):
    """The Kueue objects of one node (and the leaves' queues a grouping rolls up), as observed."""

    served: bool = True
    """Kueue's Cohort and ClusterQueue kinds are served."""
    cohort: CohortView | None = None
    cluster_queue: ClusterQueueView | None = None
    local_queues: list[LocalQueueView] = []
    """This node's LocalQueues (found by NODE_LABEL)."""
    bound_namespaces: list[str] = []
    """Namespaces labelled NODE_LABEL=<node>."""
    flavors: list[str] = []
    """Which of the flavors the node's budgets name exist."""
    priority_classes: list[str] = []
    """Which WorkloadPriorityClass the node's priorityTier names exists (empty or that one)."""
    leaf_queues: dict[str, ClusterQueueView] = {}
    """Every managed ClusterQueue by node name (a grouping's status rolls them up)."""


# -- rendering -----------------------------------------------------------------------------------


def _labels(node: QuotaNode) -> dict[str, str]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY, NODE_LABEL: node.name}
    if node.priority_tier:
        labels[PRIORITY_TIER_LABEL] = node.priority_tier
    return labels


def _kueue(kind: str, name: str, labels: dict[str, str], spec: dict[str, Any],
           namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": kind, "metadata": meta, "spec": spec}


def render_cohort(node: QuotaNode) -> dict[str, Any]:
    spec: dict[str, Any] = {"parentName": node.parent} if node.parent else {}
    return _kueue("Cohort", node.name, _labels(node), spec)


def covered_resources(node: QuotaNode) -> list[str]:
    names: list[str] = []
    for budget in node.budgets:
        if budget.resource_name not in names:
            names.append(budget.resource_name)
    return [*names, *(r for r in ("cpu", "memory") if r not in names)]


def render_cluster_queue(node: QuotaNode) -> dict[str, Any]:
    covered = covered_resources(node)
    by_pair = {_pair(b): b for b in node.budgets}
    flavors: list[dict[str, Any]] = []
    for flavor in dict.fromkeys(b.resource_flavor for b in node.budgets):
        resources = []
        for name in covered:
            budget = by_pair.get((name, flavor))
            entry: dict[str, Any] = {"name": name}
            if budget is not None:
                entry["nominalQuota"] = quantity_text(quantity(budget.nominal))
                entry["borrowingLimit"] = quantity_text(quantity(budget.borrowing_limit or 0))
                if budget.lending_limit is not None:
                    entry["lendingLimit"] = quantity_text(quantity(budget.lending_limit))
            elif name in ("cpu", "memory"):
                entry["nominalQuota"] = UNBOUNDED_CPU if name == "cpu" else UNBOUNDED_MEMORY
                entry["borrowingLimit"] = "0"
            else:
                entry["nominalQuota"] = "0"
                entry["borrowingLimit"] = "0"
            resources.append(entry)
        flavors.append({"name": flavor, "resources": resources})
    spec: dict[str, Any] = {"namespaceSelector": {"matchLabels": {NODE_LABEL: node.name}},
                            "resourceGroups": [{"coveredResources": covered, "flavors": flavors}]}
    if node.parent:
        spec["cohortName"] = node.parent
    return _kueue("ClusterQueue", node.name, _labels(node), spec)


def render_local_queue(node: QuotaNode, namespace: str) -> dict[str, Any]:
    return _kueue("LocalQueue", node.name, _labels(node), {"clusterQueue": node.name}, namespace)


def render(node: QuotaNode, bound_namespaces: Iterable[str]) -> list[dict[str, Any]]:
    """Every Kueue object the node materializes."""
    if node.role == AcceleratorQuotaRole.COHORT:
        return [render_cohort(node)]
    return [render_cluster_queue(node), *(render_local_queue(node, ns) for ns in sorted(set(bound_namespaces)))]


class Removal(BaseModel):
    kind: str
    name: str
    namespace: str | None = None


def removals(node: QuotaNode, plane: Plane) -> list[Removal]:
    """Objects of this node that its spec no longer calls for: the other role's object (a role change the
    guard admitted) and LocalQueues of namespaces no longer bound. Only objects carrying the node's labels."""
    out: list[Removal] = []
    if node.role == AcceleratorQuotaRole.COHORT:
        if plane.cluster_queue is not None and plane.cluster_queue.ours:
            out.append(Removal(kind="ClusterQueue", name=node.name))
        out.extend(Removal(kind="LocalQueue", name=q.name, namespace=q.namespace) for q in plane.local_queues)
    else:
        if plane.cohort is not None and plane.cohort.ours:
            out.append(Removal(kind="Cohort", name=node.name))
        out.extend(Removal(kind="LocalQueue", name=q.name, namespace=q.namespace) for q in plane.local_queues
                   if q.namespace not in plane.bound_namespaces)
    return out


def conflict_problem(node: QuotaNode, plane: Plane) -> Problem | None:
    """An object of the node's name that is not ours: not adopted, nothing written."""
    theirs = plane.cohort if node.role == AcceleratorQuotaRole.COHORT else plane.cluster_queue
    if theirs is not None and not theirs.ours:
        kind = "Cohort" if node.role == AcceleratorQuotaRole.COHORT else "ClusterQueue"
        return Problem(reason=Reason.OBJECT_CONFLICT, message=(
            f"a Kueue {kind} named {node.name} exists without the {NODE_LABEL}={node.name} label; it is not "
            "adopted (remove it or rename the node)"))
    return None


def _same(a: str | int | None, b: str | int | None) -> bool:
    try:
        return quantity(a if a is not None else 0) == quantity(b if b is not None else 0)
    except ValueError:
        return a == b


def in_sync(node: QuotaNode, plane: Plane) -> bool:
    """The plane already holds what `render` calls for (nothing to write) and nothing to remove."""
    if removals(node, plane):
        return False
    if node.role == AcceleratorQuotaRole.COHORT:
        return plane.cohort is not None and plane.cohort.ours and plane.cohort.parent == node.parent
    queue = plane.cluster_queue
    if queue is None or not queue.ours or queue.cohort != node.parent or queue.namespace_label != node.name:
        return False
    wanted = render_cluster_queue(node)["spec"]["resourceGroups"][0]["flavors"]
    for flavor in wanted:
        have = queue.quotas.get(flavor["name"], {})
        limits = queue.borrowing_limits.get(flavor["name"], {})
        if set(have) != {r["name"] for r in flavor["resources"]}:
            return False
        for res in flavor["resources"]:
            if not _same(have.get(res["name"]), res["nominalQuota"]) or not _same(limits.get(res["name"]),
                                                                                  res.get("borrowingLimit")):
                return False
    if set(queue.quotas) != {f["name"] for f in wanted}:
        return False
    return {q.namespace for q in plane.local_queues} == set(plane.bound_namespaces)


# -- status --------------------------------------------------------------------------------------


def leaves_under(name: str, tree: list[QuotaNode]) -> list[QuotaNode]:
    by_name = {n.name: n for n in tree}
    out = []
    for node in tree:
        if node.role != AcceleratorQuotaRole.CLUSTER_QUEUE:
            continue
        chain, _ = _chain(node.name, by_name)
        if name in chain:
            out.append(node)
    return sorted(out, key=lambda n: n.name)


def budget_status(node: QuotaNode, tree: list[QuotaNode], queues: Mapping[str, ClusterQueueView], *,
                  frozen: bool = False) -> list[AcceleratorBudgetStatus]:
    """status.budgets: per (resource, flavor) of the node's budgets (a grouping: also every pair its leaves
    carry), the nominal and what Kueue reports admitted, reserved and borrowed on the leaves' queues. A frozen
    leaf reports the nominal its ClusterQueue still enforces (the last-good one), not the spec's new number."""
    leaves = leaves_under(node.name, tree) if node.role == AcceleratorQuotaRole.COHORT else [node]
    pairs: list[Pair] = [_pair(b) for b in node.budgets]
    for leaf in leaves:
        pairs.extend(p for p in (_pair(b) for b in leaf.budgets) if p not in pairs)
    out = []
    by_name = {n.name: n for n in tree}
    for resource, flavor in pairs:
        own = next((b for b in node.budgets if _pair(b) == (resource, flavor)), None)
        nominal = quantity(own.nominal) if own is not None else _contribution(node, (resource, flavor), by_name, tree)
        held = queues.get(node.name)
        if frozen and node.role == AcceleratorQuotaRole.CLUSTER_QUEUE and held is not None:
            enforced = held.quotas.get(flavor, {}).get(resource)
            nominal = quantity(enforced) if enforced is not None else Fraction(0)
        admitted = reserved = borrowed = Fraction(0)
        for leaf in leaves:
            queue = queues.get(leaf.name)
            if queue is None:
                continue
            use = queue.usage.get(flavor, {}).get(resource)
            hold = queue.reservation.get(flavor, {}).get(resource)
            if use is not None:
                admitted += quantity(use.total)
                borrowed += quantity(use.borrowed)
            if hold is not None:
                reserved += quantity(hold.total)
        out.append(AcceleratorBudgetStatus.model_validate({
            "resourceName": resource, "resourceFlavor": flavor, "nominal": quantity_text(nominal),
            "admitted": quantity_text(admitted), "reserved": quantity_text(max(reserved, admitted)),
            "borrowed": quantity_text(borrowed)}))
    return out


# -- the per-cluster split (the projection's rule: rendering/quota_projection.py) ---------------------------


def split(budget: AcceleratorBudget, policy: AcceleratorQuotaDistributionPolicy,
          capacity: Mapping[str, int | str]) -> dict[str, str]:
    """A leaf budget's fleet nominal as per-cluster shares. Explicit: perCluster as written, which must sum to
    nominal (ValueError otherwise). Proportional: by each cluster's capacity of the flavor (`capacity`:
    cluster -> allocatable), whole units by largest remainder (ties to the cluster first by name), so the
    shares always sum to nominal; no capacity anywhere is a ValueError (nothing to be proportional to)."""
    nominal = quantity(budget.nominal)
    if policy == AcceleratorQuotaDistributionPolicy.EXPLICIT:
        if budget.per_cluster is None:
            raise ValueError("an Explicit budget must set perCluster")
        shares = {s.cluster: quantity(s.nominal) for s in budget.per_cluster}
        if sum(shares.values(), Fraction(0)) != nominal:
            summed = quantity_text(sum(shares.values(), Fraction(0)))
            raise ValueError(f"perCluster sums to {summed}, not {budget.nominal}")
        return {k: quantity_text(v) for k, v in sorted(shares.items())}
    if budget.per_cluster is not None:
        raise ValueError("a Proportional budget must not set perCluster; the split is computed")
    weights = {k: quantity(v) for k, v in sorted(capacity.items()) if quantity(v) > 0}
    total = sum(weights.values(), Fraction(0))
    if total == 0:
        raise ValueError("no cluster reports capacity of the flavor; a Proportional split has nothing to follow")
    if nominal.denominator != 1:
        return {k: quantity_text(nominal * w / total) for k, w in weights.items()}
    exact = {k: nominal * w / total for k, w in weights.items()}
    floors = {k: v.numerator // v.denominator for k, v in exact.items()}
    left = int(nominal) - sum(floors.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - floors[k]), k))[:left]:
        floors[k] += 1
    return {k: str(v) for k, v in sorted(floors.items())}


__all__ = [
    "DEFAULT_MAX_DEPTH",
    "KUEUE_GROUP",
    "KUEUE_VERSION",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "NODE_LABEL",
    "ORIGIN_ANNOTATION",
    "PRIORITY_TIER_LABEL",
    "PROJECTED_LABEL",
    "SOURCE_GENERATION_ANNOTATION",
    "ClusterQueueView",
    "CohortView",
    "FlavorUse",
    "LocalQueueView",
    "Pair",
    "Plane",
    "Problem",
    "QuotaNode",
    "Reason",
    "Removal",
    "budget_status",
    "capacity_problems",
    "children_of",
    "conflict_problem",
    "containment_problems",
    "covered_resources",
    "effective_policy",
    "in_sync",
    "leaves_under",
    "owned",
    "projected_generation",
    "removals",
    "render",
    "render_cluster_queue",
    "render_cohort",
    "render_local_queue",
    "role_change_problem",
    "root_of",
    "roots_conflict",
    "share_problems",
    "split",
    "tree_problems",
]
