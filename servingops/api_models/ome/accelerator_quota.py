"""The AcceleratorQuota kind (seed 004, since v1.3): one node of the fleet quota tree, cluster-scoped.

Every field of AcceleratorQuota and the types it uses, with the seed's names, bounds and patterns,
and the seed's same-object "Validation:" rules as CEL. The rules needing the rest of the tree
(parent resolution, cycles, depth, containment, role transitions) are the webhook's and the
controller's in upstream OME; here the controller re-checks them at every pass (no webhook).

What this project implements of the kind: the tree materialized into Kueue with status.budgets,
status.parent, status.materialization (freezes) and the Ready / Degraded / Materialized conditions
(workflows/accelerator_quota.py, rules in rendering/accelerator_quota.py, docs/quota.md); the workload-cluster
side of status.capacity on the root node (workflows/capacity/report.py); and the projection onto
WorkloadClusters (rendering/quota_projection.py): each node copied into every member with a leaf's share,
status.clusters, status.sourceGeneration on a copy, and budgets[].perCluster.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, Field

from servingops.api_models.base import (
    DNS1123_SUBDOMAIN,
    ApiModel,
    Condition,
    CrdInfo,
    KubeResource,
    PrinterColumn,
    Quantity,
    Time,
    cel,
    condition_list_schema,
    validations,
)
from servingops.api_models.ome.accelerator import AcceleratorCapacityAttribution
from servingops.api_models.ome.constants import GROUP, VERSION
from servingops.api_models.ome.enums import AcceleratorQuotaDistributionPolicy, AcceleratorQuotaRole

MAX_NAME_LENGTH = 63
"""AcceleratorQuotaMaxNameLength: a node's name (and its priorityTier) is copied into a label value."""
RESOURCE_NAME_PATTERN = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
)
MAX_BUDGETS = 16
"""The number of entries one Kueue resourceGroup accepts."""

# The effective distribution policy of a budget `b` inside a spec `self`: its own, else the node's
# default; '' when neither is set (the operator-level default applies; the controller decides).
_EFFECTIVE_POLICY = ("(has(b.policy) ? b.policy : ((has(self.distribution) && has(self.distribution.policy)) ? "
                     "self.distribution.policy : ''))")


class AcceleratorQuotaParentRef(ApiModel):
    """AcceleratorQuotaParentRef names the parent node by CR name. Nodes are cluster-scoped, so the name
    is globally unique and needs no namespace."""

    name: str = Field(max_length=253, pattern=DNS1123_SUBDOMAIN)
    """Name is the parent AcceleratorQuota's metadata.name."""


class AcceleratorQuotaDistribution(ApiModel):
    """AcceleratorQuotaDistribution holds a node's default split policy. A struct rather than a bare
    field so future policy inputs attach to the policy they configure."""

    policy: AcceleratorQuotaDistributionPolicy | None = None
    """Policy is the default split for every budget on this node that does not override it."""


class AcceleratorClusterShare(ApiModel):
    """AcceleratorClusterShare is one cluster's slice of a flavor's budget."""

    cluster: str = Field(max_length=253)
    """Cluster is the WorkloadCluster's name."""
    nominal: Quantity
    """Nominal is that cluster's share, and becomes the nominalQuota of the ClusterQueue materialized
    there."""


class AcceleratorBudget(ApiModel):
    """AcceleratorBudget is one node's allowance of one resource on one ResourceFlavor. Kueue quota is
    keyed by that pair, so both halves are needed: a flavor names a hardware class by node labels and
    says nothing about which resource the count applies to.

    Accelerators are the only budgeted dimension: cpu and memory are covered on the materialized
    ClusterQueue so Kueue admission never blocks on them, but they are not authored here."""

    resource_name: str = Field(max_length=253, pattern=RESOURCE_NAME_PATTERN)
    """ResourceName is the Kubernetes resource this allowance counts, such as nvidia.com/gpu or
    google.com/tpu. It becomes the resource entry in the materialized ClusterQueue's resourceGroup.
    Which names are budgetable is operator config; the API accepts any qualified resource name."""
    resource_flavor: str = Field(max_length=253, pattern=DNS1123_SUBDOMAIN)
    """ResourceFlavor names an existing Kueue ResourceFlavor. OME references flavors and does not own
    node labeling; a flavor missing on a target cluster makes that cluster's ClusterQueue inactive, so
    the budget is not materialized there."""
    policy: AcceleratorQuotaDistributionPolicy | None = None
    """Policy overrides the node's default split for this flavor only, so a leaf can be Explicit on a
    reserved flavor and Proportional on a fungible one. Leaves only."""
    nominal: Quantity
    """Nominal is the allowance for this flavor, in the plane's own terms: the fleet-wide total where
    the tree is authored, this cluster's resolved share on a projected copy. It becomes the
    ClusterQueue's nominalQuota."""
    borrowing_limit: Quantity | None = None
    """BorrowingLimit is how far above its share this leaf may burst by borrowing idle sibling
    capacity, passed through to Kueue. Unset, this leaf does not borrow: nominal is its ceiling, and
    the materialized queue carries an explicit limit of zero to say so. Leaves only."""
    lending_limit: Quantity | None = None
    """LendingLimit is how much of this leaf's share siblings may borrow while it is idle, passed
    through to Kueue. It MUST NOT exceed the share Kueue sees. Leaves only."""
    per_cluster: list[AcceleratorClusterShare] | None = None
    """PerCluster is the admin-authored split, required when the effective policy is Explicit and
    rejected otherwise. Entries MUST sum to Nominal. It is absent on a projected copy, which carries
    one already-resolved share rather than a fleet split."""


class AcceleratorQuotaSpec(ApiModel):
    """AcceleratorQuotaSpec is one node's declared position in the tree and, for a leaf, its budget.

    The rules here are same-object shape checks only; everything needing the rest of the tree is the
    validating webhook's and the controller's."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("self.role != 'ClusterQueue' || has(self.parentRef)",
                "a ClusterQueue node must set parentRef; only the reserved root node is parent-less",
                field_path=".parentRef"),
            cel("self.role != 'Cohort' || (!has(self.priorityTier) && !has(self.distribution))",
                "a Cohort node must not set priorityTier or distribution; no workload binds to a grouping"),
            cel("self.role != 'Cohort' || !has(self.budgets) || self.budgets.all(b, !has(b.policy) && "
                "!has(b.borrowingLimit) && !has(b.lendingLimit) && !has(b.perCluster))",
                "a Cohort node's budgets carry only resourceName, resourceFlavor, and nominal",
                field_path=".budgets"),
            cel("self.role != 'ClusterQueue' || (has(self.budgets) && size(self.budgets) > 0)",
                "a ClusterQueue node must carry at least one budget", field_path=".budgets"),
            cel(f"!has(self.budgets) || self.budgets.all(b, {_EFFECTIVE_POLICY} != 'Explicit' || "
                "has(b.perCluster))",
                "a budget whose effective distribution policy is Explicit must set perCluster",
                field_path=".budgets"),
            cel(f"!has(self.budgets) || self.budgets.all(b, {_EFFECTIVE_POLICY} != 'Proportional' || "
                "!has(b.perCluster))",
                "a budget whose effective distribution policy is Proportional must not set perCluster; "
                "the split is computed", field_path=".budgets"),
        )
    )

    role: AcceleratorQuotaRole
    """Role declares whether this node groups other nodes or is a leaf carrying the budget. A node is
    one or the other, never both. Changing it is admitted only under the drained-leaf /
    childless-grouping guard, because the change deletes the underlying Kueue object."""
    parent_ref: AcceleratorQuotaParentRef | None = None
    """ParentRef is the edge to this node's parent. Every node sets it except the single reserved root.
    It is mutable: re-parenting updates the materialized ClusterQueue's cohort in place."""
    priority_tier: str | None = Field(default=None, max_length=MAX_NAME_LENGTH, pattern=DNS1123_SUBDOMAIN)
    """PriorityTier names the WorkloadPriorityClass stamped on this leaf's workloads. It is a default,
    not a partition. OME references the class and does not create it. Capped at
    AcceleratorQuotaMaxNameLength because it is stamped into a label value."""
    distribution: AcceleratorQuotaDistribution | None = None
    """Distribution is this leaf's default split policy, overridable per budget entry. Unset means the
    operator-level default from the quota config applies; absent that too, the node reports Degraded
    rather than guessing."""
    budgets: list[AcceleratorBudget] | None = Field(default=None, max_length=MAX_BUDGETS)
    """Budgets is the per-flavor allowance, one entry per ResourceFlavor. On a leaf this is the budget;
    on a Cohort node it is an authoring guardrail only (parent >= sum(children)). Capped at the number
    of entries one Kueue resourceGroup accepts."""


class AcceleratorClusterBudgetStatus(ApiModel):
    """AcceleratorClusterBudgetStatus is one cluster's slice of a flavor's status."""

    cluster: str | None = None
    """Cluster is the WorkloadCluster's name."""
    nominal: Quantity | None = None
    """Nominal is the share assigned to this cluster."""
    admitted: Quantity | None = None
    """Admitted is the quantity admitted on this cluster, including borrowed."""
    reserved: Quantity | None = None
    """Reserved is the quantity reserved on this cluster, admitted or not."""
    borrowed: Quantity | None = None
    """Borrowed is the admitted quantity above this cluster's share."""


class AcceleratorBudgetStatus(ApiModel):
    """AcceleratorBudgetStatus is one (resource, flavor) pair's resolved allowance and observed use."""

    resource_name: str | None = None
    """ResourceName is the resource these numbers describe."""
    resource_flavor: str | None = None
    """ResourceFlavor is the flavor these numbers describe."""
    nominal: Quantity | None = None
    """Nominal is the resolved allowance for this plane: the fleet total where the tree is authored,
    this cluster's share on a projection."""
    admitted: Quantity | None = None
    """Admitted is the quantity of this flavor currently admitted against the materialized queues,
    including anything borrowed."""
    reserved: Quantity | None = None
    """Reserved is the quantity held by workloads carrying a quota reservation, admitted or not. It is
    never below Admitted."""
    borrowed: Quantity | None = None
    """Borrowed is the admitted quantity above the nominal share, taken from idle siblings and
    reclaimable on contention."""
    per_cluster: list[AcceleratorClusterBudgetStatus] | None = None
    """PerCluster breaks the numbers above down by cluster. Populated where the tree is authored; empty
    on a projected copy, which knows only itself."""


class AcceleratorClusterCapacityStatus(ApiModel):
    """AcceleratorClusterCapacityStatus is one cluster's contribution to a flavor's observed capacity."""

    cluster: str | None = None
    """Cluster is the WorkloadCluster's name."""
    cluster_uid: str | None = Field(default=None, alias="clusterUID")
    """ClusterUID identifies the registration through which the report was read. Omission cannot
    establish that a same-name cluster owns this sample."""
    report_uid: str | None = Field(default=None, alias="reportUID")
    """ReportUID identifies the member's root AcceleratorQuota."""
    report_resource_version: str | None = None
    """ReportResourceVersion identifies the source object read for this sample."""
    report_available: bool | None = None
    """ReportAvailable means the most recent collection verified the source object and registration.
    It does not imply that ObservedAt is fresh."""
    allocatable: Quantity | None = None
    """Allocatable is that cluster's schedulable quantity of the flavor."""
    high_water_mark: Quantity | None = None
    """HighWaterMark is the greatest Allocatable observed on this cluster."""
    observed_at: Time | None = None
    """ObservedAt is when this cluster's value was last sampled. A stale stamp distinguishes "capacity
    dropped" from "the cluster stopped reporting"."""
    attribution: AcceleratorCapacityAttribution | None = None
    """Attribution is the member's hardware mapping at observation time."""


class AcceleratorCapacityStatus(ApiModel):
    """AcceleratorCapacityStatus is the observed physical capacity of one flavor, the denominator an
    admin reads a budget against. It is derived, never authored."""

    resource_name: str | None = None
    """ResourceName is the resource these numbers describe."""
    resource_flavor: str | None = None
    """ResourceFlavor is the flavor these numbers describe."""
    allocatable: Quantity | None = None
    """Allocatable is the currently schedulable quantity: the flavor's resource summed over Ready,
    uncordoned nodes matching the flavor's node labels. Nodes that are NotReady or cordoned remain
    physical inventory but contribute no schedulable capacity."""
    high_water_mark: Quantity | None = None
    """HighWaterMark is the greatest Allocatable observed for this flavor. Budget checks compare against
    it rather than the instantaneous value. It is lowered only once the observed value stays below it
    by more than the configured hysteresis band."""
    observed_at: Time | None = None
    """ObservedAt is when Allocatable was last sampled."""
    per_cluster: list[AcceleratorClusterCapacityStatus] | None = None
    """PerCluster breaks capacity down by cluster on a management plane. Empty on a workload cluster,
    whose root reports only its own capacity."""
    attribution: AcceleratorCapacityAttribution | None = None
    """Attribution identifies the hardware mapping used for this observation. Omission cannot establish
    whether an observed zero is a complete sample."""


class AcceleratorQuotaClusterStatus(ApiModel):
    """AcceleratorQuotaClusterStatus is one workload cluster's projection state, reported where the
    tree is authored."""

    cluster: str | None = None
    """Cluster is the WorkloadCluster's name."""
    applied_generation: int | None = None
    """AppliedGeneration is the source generation this cluster's projection last carried. Behind
    metadata.generation means the update has not landed."""
    applied_time: Time | None = None
    """AppliedTime is when the projection was last applied successfully."""
    materialized_generation: int | None = None
    """MaterializedGeneration is the source generation this cluster has actually materialized, read
    back from the projection's status.sourceGeneration."""
    message: str | None = None
    """Message explains why this cluster is behind."""


class AcceleratorQuotaMaterialization(ApiModel):
    """AcceleratorQuotaMaterialization is the freeze bookkeeping that makes last-good behavior durable
    across controller restarts."""

    frozen: bool | None = None
    """Frozen reports that output is held at its last-good state because a computed invariant is
    violated."""
    frozen_at: Time | None = None
    """FrozenAt is when the freeze began."""
    reason: str | None = None
    """Reason is the condition reason that caused the freeze, retained so the cause survives a later
    condition update."""
    last_applied_generation: int | None = None
    """LastAppliedGeneration is the spec generation the frozen output was built from."""
    last_applied_time: Time | None = None
    """LastAppliedTime is when that output was written."""


class AcceleratorQuotaStatus(ApiModel):
    """AcceleratorQuotaStatus is the observed state of one node. The quota controller owning the plane
    is its sole writer."""

    observed_generation: int | None = None
    """ObservedGeneration is the metadata.generation the most recent status flush reflects."""
    parent: str | None = None
    """Parent echoes the resolved parent's name."""
    source_generation: int | None = None
    """SourceGeneration is the source CR's generation this node's materialization reflects. Set only on
    a projected copy."""
    budgets: list[AcceleratorBudgetStatus] | None = None
    """Budgets reports, per resource and flavor, the resolved allowance and the usage rolled up from the
    materialized ClusterQueues."""
    capacity: list[AcceleratorCapacityStatus] | None = None
    """Capacity is the observed accelerator capacity behind this tree, reported on the root node only.
    On a workload cluster it is that cluster's own derived capacity, which is the only thing the local
    controller writes on its root."""
    clusters: list[AcceleratorQuotaClusterStatus] | None = None
    """Clusters reports per-cluster projection state on a management plane. Empty on a workload
    cluster, which projects nothing."""
    materialization: AcceleratorQuotaMaterialization | None = None
    """Materialization records what this node last wrote successfully and whether that output is
    currently frozen."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions reports Ready, Degraded, and Materialized."""


class AcceleratorQuota(KubeResource):
    """AcceleratorQuota is one node of the fleet quota tree. Cluster-scoped: it is fleet-level capacity
    policy, not a namespaced workload."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
                f"an AcceleratorQuota name may not exceed {MAX_NAME_LENGTH} characters; it is copied into a "
                "label value on every Kueue object the node materializes"),
        )
    )

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="AcceleratorQuota",
        plural="acceleratorquotas",
        scope="Cluster",
        categories=["ome"],
        # Only status.budgets[0] fits a row (the first (resource, flavor) pair); -o yaml shows every pair.
        printer_columns=[
            PrinterColumn(name="Role", type="string", json_path=".spec.role"),
            PrinterColumn(name="Parent", type="string", json_path=".spec.parentRef.name"),
            PrinterColumn(name="Flavor", type="string", json_path=".status.budgets[0].resourceFlavor"),
            PrinterColumn(name="Nominal", type="string", json_path=".status.budgets[0].nominal"),
            PrinterColumn(name="Admitted", type="string", json_path=".status.budgets[0].admitted"),
            PrinterColumn(name="Borrowed", type="string", json_path=".status.budgets[0].borrowed", priority=1),
            PrinterColumn(name="Resource", type="string", json_path=".status.budgets[0].resourceName", priority=1),
            PrinterColumn(name="Ready", type="string", json_path='.status.conditions[?(@.type=="Ready")].status'),
            PrinterColumn(name="Degraded", type="string",
                          json_path='.status.conditions[?(@.type=="Degraded")].status'),
            PrinterColumn(name="Frozen", type="boolean", json_path=".status.materialization.frozen", priority=1),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )

    spec: AcceleratorQuotaSpec | None = None
    """The desired state of the AcceleratorQuota."""
    status: AcceleratorQuotaStatus | None = None
    """The observed state of the AcceleratorQuota."""


__all__ = [
    "MAX_NAME_LENGTH",
    "AcceleratorBudget",
    "AcceleratorBudgetStatus",
    "AcceleratorCapacityAttribution",
    "AcceleratorCapacityStatus",
    "AcceleratorClusterBudgetStatus",
    "AcceleratorClusterCapacityStatus",
    "AcceleratorClusterShare",
    "AcceleratorQuota",
    "AcceleratorQuotaClusterStatus",
    "AcceleratorQuotaDistribution",
    "AcceleratorQuotaMaterialization",
    "AcceleratorQuotaParentRef",
    "AcceleratorQuotaSpec",
    "AcceleratorQuotaStatus",
]
