"""Inputs and outputs of the AcceleratorQuota tree's activities (activities/capacity/accelerator_quota.py):
`acceleratorquota.observe`, `acceleratorquota.apply`, `acceleratorquota.write_status`, `acceleratorquota.reap`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from servingops.api_models.ome.accelerator_quota import AcceleratorCapacityStatus, AcceleratorQuotaStatus
from servingops.api_models.ome.enums import AcceleratorQuotaDistributionPolicy
from servingops.api_models.refs import ObjectRef
from servingops.rendering.accelerator_quota import Plane, QuotaNode, Removal


class QuotaObserveInput(BaseModel):
    quota: ObjectRef
    """The AcceleratorQuota (its uid set: a reused name reads as gone)."""


class QuotaObserveOutput(BaseModel):
    present: bool
    """False when the node is gone (or its name belongs to another uid): nothing was observed."""
    deleting: bool = False
    """Its deletion is pending (the finalizer holds it until the workflow reaps its Kueue objects)."""
    node: QuotaNode | None = None
    tree: list[QuotaNode] = []
    """Every AcceleratorQuota of the plane (the node among them)."""
    plane: Plane = Plane()
    status: AcceleratorQuotaStatus | None = None
    """status as read (a new run starts from what is already written: a freeze survives restarts)."""
    clusters: list[str] = []
    """The WorkloadClusters registered on this plane (the projection's targets; none on a member, or where
    the kind is not served)."""
    deregistering: list[str] = []
    """WorkloadClusters being deregistered whose deletion waits on the projection's finalizer: their copies are
    to be deleted (`placement.release_quota_hold`)."""
    root_capacity: list[AcceleratorCapacityStatus] = []
    """The root node's status.capacity (its perCluster rows weigh a Proportional split)."""
    default_distribution: AcceleratorQuotaDistributionPolicy | None = None
    """The operator ConfigMap's quota.defaultDistribution (None: unset, or no reader)."""
    config_error: str = ""
    """Why the ConfigMap's quota block does not parse (then no operator default applies)."""


class QuotaApplyInput(BaseModel):
    quota: ObjectRef
    objects: list[dict[str, Any]]
    """Kueue objects to server-side apply (render's output)."""
    removals: list[Removal] = []
    """Objects of this node to delete (each checked to carry the node's labels first)."""


class QuotaApplyOutput(BaseModel):
    present: bool
    """False when the node is gone or going: nothing was written."""
    applied: list[str] = []
    """kind/namespace/name of each object applied."""
    removed: list[str] = []
    refused: str = ""
    """Why the apiserver refused an object (a 422 from Kueue's webhook or schema): nothing more was written."""


class QuotaEvent(BaseModel):
    type: str
    """Normal or Warning."""
    reason: str
    message: str


class QuotaWriteInput(BaseModel):
    quota: ObjectRef
    status: AcceleratorQuotaStatus
    """The whole status (every field is replaced)."""
    events: list[QuotaEvent] = []
    """Recorded on the node after the write."""


class QuotaWriteOutput(BaseModel):
    present: bool
    resource_version: str | None = None


class QuotaReapInput(BaseModel):
    quota: ObjectRef


class QuotaReapOutput(BaseModel):
    removed: list[str] = []
    released: bool = False
    """The finalizer was removed (the apiserver then completes the deletion)."""
    refused: str = ""
    """Why the apiserver refused a delete (a 403: the worker's role lacks it): the finalizer is kept, the node
    says so and the workflow tries again."""


__all__ = ["QuotaApplyInput", "QuotaApplyOutput", "QuotaEvent", "QuotaObserveInput", "QuotaObserveOutput",
           "QuotaReapInput", "QuotaReapOutput", "QuotaWriteInput", "QuotaWriteOutput"]
