"""Input and output of `workloadcluster.check` (WorkloadClusterActivities)."""

from __future__ import annotations

from pydantic import BaseModel

from servingops.api_models.contract.workload_cluster import ConnectionVerdict
from servingops.api_models.refs import ObjectRef


class CheckInput(BaseModel):
    cluster: ObjectRef
    """The WorkloadCluster (its uid set: a name reused by another object reads as gone)."""


class CheckOutput(BaseModel):
    present: bool
    """False when the WorkloadCluster is gone or being deleted: nothing was probed."""
    verdict: ConnectionVerdict | None = None


__all__ = ["CheckInput", "CheckOutput", "ConnectionVerdict"]
