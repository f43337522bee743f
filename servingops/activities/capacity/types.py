"""Inputs and outputs of `capacity.observe` and `capacity.write_status` (CapacityActivities)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from servingops.activities.capacity.attribution import DEFAULT_RESOURCE_NAMES, FlavorCapacity
from servingops.api_models.ome.accelerator_quota import AcceleratorCapacityStatus
from servingops.api_models.refs import ConditionUpdate, ObjectRef

CAPACITY_CONDITION = "CapacityReported"
"""The root AcceleratorQuota's condition the capacity report owns (AcceleratorQuotaWorkflow writes the others and
keeps this one: activities/capacity/accelerator_quota.py write_status). Set only once a reading was refused:
False AccessRefused with the apiserver's answer, True Reported once the readings succeed again."""
ACCESS_REFUSED = "AccessRefused"


class ObserveInput(BaseModel):
    quota: ObjectRef
    """The AcceleratorQuota the report is for (its uid set: a reused name reads as gone)."""
    resource_names: list[str] = list(DEFAULT_RESOURCE_NAMES)
    """Resource names reported in addition to every budget resourceName of the tree."""


class ObserveOutput(BaseModel):
    present: bool
    """False when the AcceleratorQuota is gone or being deleted: nothing was observed."""
    root: bool = False
    """The AcceleratorQuota has no spec.parentRef. False: nothing else was observed."""
    generation: int = 0
    resource_version: str = ""
    observed_at: datetime | None = None
    """When the Nodes were listed (the activity's clock)."""
    resource_names: list[str] = []
    """What was reported: the configured names and every budget resourceName of the tree."""
    capacity: list[FlavorCapacity] = []
    """Every (resource, flavor) pair, sorted by resource then flavor."""
    reported: list[AcceleratorCapacityStatus] = []
    """status.capacity as read: a new run adopts its high-water marks; on a node that is not the root,
    something to remove."""
    flavors_served: bool = True
    """False when the cluster serves no Kueue ResourceFlavor API (Kueue not installed)."""
    workload_clusters: int = 0
    """WorkloadClusters registered here (at least this many): a management plane, whose report then carries
    each member's row (perCluster). A history recorded before the field decodes it as 0: no member read."""
    refused: str | None = None
    """The apiserver refused (403) the list of WorkloadClusters: its answer. An answer rather than an error (the
    worker's interceptor would make a 403 a permanent failure, and the workflow retried the sample forever):
    the report says it (CapacityReported False AccessRefused, a Warning) and the next sample tries again.
    The capacity itself was observed; `workload_clusters` is then unknown (0). None in older histories."""


class CapacityEvent(BaseModel):
    type: str
    """Normal or Warning."""
    reason: str
    message: str


class WriteInput(BaseModel):
    quota: ObjectRef
    capacity: list[AcceleratorCapacityStatus] | None
    """The whole new status.capacity; None removes it (a node that stopped being the root)."""
    condition: ConditionUpdate | None = None
    """The CapacityReported condition to set beside it (the other conditions of the object are kept)."""
    events: list[CapacityEvent] = []
    """Recorded on the AcceleratorQuota once the write succeeded."""


class WriteOutput(BaseModel):
    present: bool
    """False when the AcceleratorQuota is gone (or its name now belongs to another uid): nothing written."""
    resource_version: str | None = None
    """The resourceVersion the write produced."""


__all__ = ["ACCESS_REFUSED", "CAPACITY_CONDITION", "CapacityEvent", "ObserveInput", "ObserveOutput", "WriteInput",
           "WriteOutput"]
