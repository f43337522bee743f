"""The AcceleratorQuota tree projected onto WorkloadClusters, pure (seed 004: AcceleratorBudget.perCluster,
AcceleratorClusterShare, AcceleratorQuotaDistributionPolicy, AcceleratorQuotaStatus.sourceGeneration and
.clusters, AcceleratorBudgetStatus.perCluster / AcceleratorClusterBudgetStatus).

Where the tree is authored (the management plane, with WorkloadClusters registered), every node that is not
itself a projection is copied into every member as an AcceleratorQuota of the same name, so the member's own
AcceleratorQuotaWorkflow materializes it into that member's Kueue and the member's tree validates:

- a grouping's copy is a Cohort with the same parentRef and no budgets (a grouping's budget is an authoring
  guardrail in fleet terms; on a member it would be held against the member's own capacity, and a grouping
  without a budget counts as its children's sum);
- a leaf's copy is a ClusterQueue with the same parentRef and priorityTier, and one budget per (resource,
  flavor) whose nominal is this cluster's resolved share (`shares`): no perCluster, no policy, no
  distribution (a copy carries one resolved share, not a fleet split). borrowingLimit is passed through;
  lendingLimit is capped at the share (the seed: it must not exceed the share Kueue sees);
- every copy carries the label `ome.io/quota-projected: servingops` and the annotations
  `ome.io/quota-origin` (the source node's uid) and `ome.io/quota-source-generation` (the source
  generation it was built from). The member's controller echoes that generation into the copy's
  status.sourceGeneration once it has materialized it (`source_generation_of`).

An AcceleratorQuota of the same name in the member without the projection label is the member's own: it is
never written or deleted (`copy_conflict`), and that cluster's row says so.

Back on the management plane, `cluster_rows` builds status.clusters (appliedGeneration and appliedTime of
the last successful write, materializedGeneration read back from the copy's status.sourceGeneration, and a
message whenever a cluster is behind: unreachable, refused, a conflict, a share that does not resolve, or
the member's controller not yet caught up), and `with_per_cluster` adds budgets[].perCluster (each cluster's
nominal, and admitted / reserved / borrowed read back from the copy's status.budgets)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from servingops.api_models.ome.accelerator_quota import (
    AcceleratorBudgetStatus,
    AcceleratorCapacityStatus,
    AcceleratorQuotaClusterStatus,
    AcceleratorQuotaStatus,
)
from servingops.api_models.ome.enums import AcceleratorQuotaDistributionPolicy, AcceleratorQuotaRole
from servingops.api_models.quantity import quantity, quantity_text
from servingops.rendering.accelerator_quota import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    ORIGIN_ANNOTATION,
    PROJECTED_LABEL,
    SOURCE_GENERATION_ANNOTATION,
    Pair,
    QuotaNode,
    _pair,
    effective_policy,
    projected_generation,
    split,
)

GROUP, VERSION, KIND = "ome.io", "v1beta1", "AcceleratorQuota"


# -- the split ------------------------------------------------------------------------------------


def cluster_capacity(capacity: Iterable[AcceleratorCapacityStatus]) -> dict[Pair, dict[str, str]]:
    """From the management root's status.capacity: per (resource, flavor), each cluster's capacity, the
    high-water mark (a drain does not reshuffle the split), else allocatable. A cluster whose report is
    not available counts nothing."""
    out: dict[Pair, dict[str, str]] = {}
    for entry in capacity:
        if entry.resource_name is None or entry.resource_flavor is None:
            continue
        for row in entry.per_cluster or []:
            value = row.high_water_mark if row.high_water_mark is not None else row.allocatable
            if row.cluster and value is not None and row.report_available is not False:
                out.setdefault((entry.resource_name, entry.resource_flavor), {})[row.cluster] = str(value)
    return out


class Shares(BaseModel):
    """A leaf's budgets resolved per cluster."""

    per_cluster: dict[str, dict[str, str]] = {}
    """cluster -> "<resource>|<flavor>" -> share (every registered cluster, 0 where it gets nothing)."""
    unresolved: list[str] = []
    """Why a budget has no split (then no copy of the leaf is written anywhere)."""
    unknown_clusters: list[str] = []
    """Clusters an Explicit perCluster names that are not registered (their share goes nowhere)."""


def pair_key(pair: Pair) -> str:
    return f"{pair[0]}|{pair[1]}"


def shares(node: QuotaNode, clusters: Iterable[str], capacity: Mapping[Pair, Mapping[str, str]],
           default: AcceleratorQuotaDistributionPolicy | None = None) -> Shares:
    """Each registered cluster's share of each of the leaf's budgets (`split`: Explicit perCluster as
    written; Proportional by each registered cluster's capacity of the flavor)."""
    registered = sorted(set(clusters))
    out = Shares(per_cluster={c: {} for c in registered})
    if node.role != AcceleratorQuotaRole.CLUSTER_QUEUE:
        return out
    unknown: set[str] = set()
    for budget in node.budgets:
        pair = _pair(budget)
        policy = effective_policy(node, budget, default)
        where = f"{pair[0]} on {pair[1]}"
        if policy is None:
            out.unresolved.append(f"no distribution policy for {where}")
            continue
        weights = {c: v for c, v in capacity.get(pair, {}).items() if c in registered}
        try:
            split_ = split(budget, policy, weights)
        except ValueError as exc:
            out.unresolved.append(f"{where}: {exc}")
            continue
        unknown.update(c for c in split_ if c not in registered and quantity(split_[c]) != 0)
        for cluster in registered:
            out.per_cluster[cluster][pair_key(pair)] = split_.get(cluster, "0")
    out.unknown_clusters = sorted(unknown)
    return out


# -- the copy -------------------------------------------------------------------------------------


def projected_copy(node: QuotaNode, share: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The AcceleratorQuota written into one member for `node`. `share`: that cluster's share per
    pair_key (a leaf only; a missing pair is 0)."""
    spec: dict[str, Any] = {"role": node.role.value}
    if node.parent:
        spec["parentRef"] = {"name": node.parent}
    if node.role == AcceleratorQuotaRole.CLUSTER_QUEUE:
        if node.priority_tier:
            spec["priorityTier"] = node.priority_tier
        budgets = []
        for budget in node.budgets:
            nominal = quantity((share or {}).get(pair_key(_pair(budget)), "0"))
            entry: dict[str, Any] = {"resourceName": budget.resource_name,
                                     "resourceFlavor": budget.resource_flavor, "nominal": quantity_text(nominal)}
            if budget.borrowing_limit is not None:
                entry["borrowingLimit"] = str(budget.borrowing_limit)
            if budget.lending_limit is not None:
                entry["lendingLimit"] = quantity_text(min(quantity(budget.lending_limit), nominal))
            budgets.append(entry)
        spec["budgets"] = budgets
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
            "metadata": {"name": node.name, "labels": {PROJECTED_LABEL: MANAGED_BY, MANAGED_BY_LABEL: MANAGED_BY},
                         "annotations": {ORIGIN_ANNOTATION: node.uid,
                                         SOURCE_GENERATION_ANNOTATION: str(node.generation)}},
            "spec": spec}


class CopyView(BaseModel):
    """A member's AcceleratorQuota of the source node's name, as read back."""

    name: str
    projected: bool
    """Carries the projection label (else it is the member's own: never written or deleted)."""
    uid: str = ""
    origin: str = ""
    applied_generation: int | None = None
    """The source generation in the annotation (what the last write carried)."""
    spec: dict[str, Any] = {}
    status: AcceleratorQuotaStatus | None = None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> CopyView:
        meta = obj.get("metadata") or {}
        raw_status = obj.get("status")
        try:
            status = AcceleratorQuotaStatus.model_validate(raw_status) if raw_status else None
        except ValidationError:
            status = None  # a status this version cannot read reads as none (the copy is not blocked on it)
        return cls(name=str(meta.get("name", "")),
                   projected=(meta.get("labels") or {}).get(PROJECTED_LABEL) == MANAGED_BY,
                   uid=str(meta.get("uid", "")),
                   origin=str((meta.get("annotations") or {}).get(ORIGIN_ANNOTATION, "")),
                   applied_generation=projected_generation(meta), spec=dict(obj.get("spec") or {}),
                   status=status)


def copy_conflict(cluster: str, existing: CopyView | None) -> str:
    """Why the copy must not be written there ("" when it may)."""
    if existing is not None and not existing.projected:
        return (f"{cluster} already has an AcceleratorQuota {existing.name} of its own (no {PROJECTED_LABEL} "
                "label); it is not overwritten")
    return ""


def copy_in_sync(wanted: Mapping[str, Any], existing: CopyView | None) -> bool:
    """The member already holds the copy as rendered (nothing to write)."""
    if existing is None or not existing.projected:
        return False
    meta = wanted["metadata"]
    return (existing.applied_generation == int(meta["annotations"][SOURCE_GENERATION_ANNOTATION])
            and existing.origin == meta["annotations"][ORIGIN_ANNOTATION] and _same_spec(wanted["spec"], existing.spec))


def _same_spec(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    def norm(spec: Mapping[str, Any]) -> Any:
        budgets = []
        for entry in spec.get("budgets") or []:
            budgets.append({k: (str(quantity(v)) if k in ("nominal", "borrowingLimit", "lendingLimit") else v)
                            for k, v in entry.items()})
        return {**{k: v for k, v in spec.items() if k != "budgets"}, "budgets": budgets}
    return bool(norm(a) == norm(b))


def source_generation_of(projected: int | None, materialized_generation: int | None, generation: int,
                         previous: int | None) -> int | None:
    """On a member: status.sourceGeneration for a copy. The annotation's source generation once the copy's
    own generation is materialized (lastAppliedGeneration reached it, not frozen); until then what was
    echoed before. None for a node that is no projection."""
    if projected is None:
        return None
    if materialized_generation is not None and materialized_generation >= generation:
        return projected
    return previous


# -- the management plane's status ----------------------------------------------------------------


PROJECTION_FINALIZER = "ome.io/quota-projection"
"""On a WorkloadCluster once a copy is projected into it: its deregistration waits until the management plane has
deleted the copies there (`placement.release_quota_hold`)."""


class ClusterOutcome(BaseModel):
    """What one pass did and read in one member for one node."""

    cluster: str
    error: str = ""
    """Why the member could not be reached or refused the write ("" when it answered)."""
    conflict: str = ""
    unresolved: str = ""
    """The node's share does not resolve (nothing written there this pass)."""
    wrote: bool = False
    """This pass wrote the copy."""
    copy_: CopyView | None = None
    """The copy as read back (None: absent, or the member did not answer)."""


def cluster_rows(node: QuotaNode, outcomes: Iterable[ClusterOutcome],
                 previous: Iterable[AcceleratorQuotaClusterStatus], now: datetime,
                 unknown: Iterable[str] = ()) -> list[AcceleratorQuotaClusterStatus]:
    """status.clusters, one row per registered cluster (sorted), plus one per cluster an Explicit perCluster
    names that is not registered."""
    before = {r.cluster: r for r in previous if r.cluster}
    rows = []
    for out in sorted(outcomes, key=lambda o: o.cluster):
        prior = before.get(out.cluster)
        applied = prior.applied_generation if prior else None
        applied_time = prior.applied_time if prior else None
        materialized = prior.materialized_generation if prior else None
        copy = out.copy_
        if out.wrote:
            applied, applied_time = node.generation, now
        elif not out.error and copy is not None and copy.projected and copy.applied_generation is not None:
            applied = copy.applied_generation
        if not out.error:
            projected = copy is not None and copy.projected
            materialized = copy.status.source_generation if projected and copy and copy.status else None
        message = _behind(node, out, applied, materialized)
        rows.append(AcceleratorQuotaClusterStatus.model_validate({
            "cluster": out.cluster, "appliedGeneration": applied,
            "appliedTime": applied_time.isoformat().replace("+00:00", "Z") if isinstance(applied_time, datetime)
            else applied_time,
            "materializedGeneration": materialized, "message": message or None}))
    for name in sorted(set(unknown) - {r.cluster for r in rows}):
        rows.append(AcceleratorQuotaClusterStatus.model_validate({
            "cluster": name, "message": "perCluster names this cluster, but no WorkloadCluster of that name is "
                                        "registered; its share is not projected"}))
    return rows


def _behind(node: QuotaNode, out: ClusterOutcome, applied: int | None, materialized: int | None) -> str:
    if out.error:
        return out.error
    if out.conflict:
        return out.conflict
    if out.unresolved:
        return f"no copy written: {out.unresolved}"
    if applied is None or applied < node.generation:
        return f"generation {node.generation} not projected yet (the copy carries {applied or 'nothing'})"
    if materialized is None or materialized < applied:
        held = _member_hold(out.copy_)
        return (f"the member has not materialized generation {applied} yet (it reports "
                f"{materialized if materialized is not None else 'none'})" + (f": {held}" if held else ""))
    return ""


def _member_hold(copy: CopyView | None) -> str:
    if copy is None or copy.status is None:
        return ""
    for cond in copy.status.conditions or []:
        if cond.type == "Ready" and cond.status == "False":
            return f"{cond.reason}: {cond.message}"
    return ""


def with_per_cluster(budgets: list[AcceleratorBudgetStatus], per_cluster: Mapping[str, Mapping[str, str]],
                     copies: Mapping[str, CopyView | None]) -> list[AcceleratorBudgetStatus]:
    """budgets[].perCluster: for every cluster of `copies` (sorted), the nominal assigned there (the leaf's
    share; a grouping's: what its copy reports) and admitted / reserved / borrowed from the copy's
    status.budgets (absent when nothing was read back). The plane-wide admitted / reserved / borrowed then
    add up the clusters' on top of this plane's own queues."""
    out = []
    for entry in budgets:
        pair = (entry.resource_name or "", entry.resource_flavor or "")
        rows: list[dict[str, Any]] = []
        totals = {k: quantity(getattr(entry, k) or 0) for k in ("admitted", "reserved", "borrowed")}
        for cluster in sorted(copies):
            copy = copies[cluster]
            read = None
            if copy is not None and copy.projected and copy.status is not None:
                read = next((b for b in copy.status.budgets or [] if (b.resource_name, b.resource_flavor) == pair),
                            None)
            nominal = per_cluster.get(cluster, {}).get(pair_key(pair))
            if nominal is None and read is not None:
                nominal = str(read.nominal) if read.nominal is not None else None
            row: dict[str, Any] = {"cluster": cluster, "nominal": nominal}
            if read is not None:
                for key in ("admitted", "reserved", "borrowed"):
                    value = getattr(read, key)
                    if value is not None:
                        row[key] = str(value)
                        totals[key] += quantity(value)
            rows.append(row)
        if not rows:
            out.append(entry)
            continue
        update = {k: quantity_text(v) for k, v in totals.items()}
        update["reserved"] = quantity_text(max(totals["reserved"], totals["admitted"]))
        out.append(AcceleratorBudgetStatus.model_validate({
            **entry.to_api(), **update, "perCluster": rows}))
    return out


__all__ = [
    "ORIGIN_ANNOTATION", "PROJECTED_LABEL", "PROJECTION_FINALIZER", "SOURCE_GENERATION_ANNOTATION", "ClusterOutcome",
    "CopyView", "Shares",
    "cluster_capacity", "cluster_rows", "copy_conflict", "copy_in_sync", "pair_key", "projected_copy",
    "projected_generation", "shares", "source_generation_of", "with_per_cluster",
]
