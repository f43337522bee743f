"""Inputs of the AcceleratorQuota projection's member activities (activities/placement/activities.py:
`placement.project_quota`, `placement.unproject_quota`); both answer a ClusterOutcome
(rendering/quota_projection.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


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
