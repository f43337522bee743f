"""Why a placement decision is held: the workflow keeps its last accepted plan and reports this."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Held:
    reason: str
    """A CamelCase reason, fit for an Event or a condition."""
    message: str
    """Names what disagreed, so the reader can fix the spec or the labels without reading code."""


COMPONENT_AFFINITY_MISMATCH = "ComponentAffinityMismatch"
NO_FLOOR = "NoReplicaFloor"
CEILING_EXCEEDED = "MaxReplicasPerClusterExceeded"
CAPACITY_UNKNOWN = "CapacityUnknown"
