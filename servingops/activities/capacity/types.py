"""Inputs and outputs of `capacity.observe` and `capacity.write_status` (CapacityActivities)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from servingops.activities.capacity.attribution import DEFAULT_RESOURCE_NAMES, FlavorCapacity
from servingops.api_models.ome.accelerator_quota import AcceleratorCapacityStatus
from servingops.api_models.refs import ObjectRef


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


class WriteInput(BaseModel):
    quota: ObjectRef
    capacity: list[AcceleratorCapacityStatus] | None
    """The whole new status.capacity; None removes it (a node that stopped being the root)."""


class WriteOutput(BaseModel):
    present: bool
    """False when the AcceleratorQuota is gone (or its name now belongs to another uid): nothing written."""
    resource_version: str | None = None
    """The resourceVersion the write produced."""


__all__ = ["ObserveInput", "ObserveOutput", "WriteInput", "WriteOutput"]
