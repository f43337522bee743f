"""Inputs of the AcceleratorQuota projection's member activities (activities/placement/activities.py:
`placement.project_quota`, `placement.unproject_quota`; both answer a ClusterOutcome,
rendering/quota_projection.py) and of `placement.read_member_capacity` (the management plane's
per-cluster capacity, rendering/capacity_per_cluster.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from servingops.rendering.capacity_per_cluster import MemberCapacityReport


class QuotaProjectInput(BaseModel):
    cluster: str
    """The WorkloadCluster to write into."""
    name: str
    """The source node's name (the copy's)."""
    body: dict[str, Any] | None = None
    """The copy as rendered (`projected_copy`); None when the node's share does not resolve (then nothing is
    written and the copy is only read back)."""
    unresolved: str = ""
    """Why there is no body."""


class QuotaUnprojectInput(BaseModel):
    cluster: str
    name: str
    origin: str
    """The source node's uid: only a copy carrying it is deleted."""


class QuotaReleaseInput(BaseModel):
    cluster: str
    """A WorkloadCluster being deregistered (its deletion held by PROJECTION_FINALIZER)."""


__all__ = ["QuotaProjectInput", "QuotaReleaseInput", "QuotaUnprojectInput"]


class MemberCapacityInput(BaseModel):
    root: str
    """The management plane's root AcceleratorQuota the reports are for (named in the activity's log)."""


class MemberCapacityReading(BaseModel):
    members: list[MemberCapacityReport] = []
    """One per registered WorkloadCluster (none being deregistered), by name."""
    refused: str | None = None
    """The apiserver refused (403) the list of WorkloadClusters: its answer, and no member was read. An answer
    rather than an error: the capacity report says it on the root (CapacityReported False AccessRefused) and
    keeps the members' last rows, marked unavailable. None in older histories."""
