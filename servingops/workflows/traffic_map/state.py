"""What the routing workflow keeps between its passes, answers to the `state` query and carries into a
continued run: the probe's hysteresis and the capacity poll's windows per home (the map shows only part of
them), what was last written and published, and the Publications told to placement."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel
from temporalio import workflow

from servingops.workflows.entity import ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract import StartObject
    from servingops.api_models.ome.traffic_map import TrafficMapProbe


class ProbeMemory(BaseModel):
    """One home's probe record under one policy, and the passes in a row the map does not carry."""

    record: TrafficMapProbe
    successes: int = 0


class CapacityReadingMemory(BaseModel):
    servable: int
    observed_at: datetime


class CapacityMemory(BaseModel):
    """One home's recent capacity readings under one policy, or the last poll's failure."""

    policy_digest: str
    readings: list[CapacityReadingMemory] = []
    failure: str | None = None


class TrafficMapState(ReconcileState):
    probes: dict[str, ProbeMemory] = {}
    capacity: dict[str, CapacityMemory] = {}
    probe_due: datetime | None = None
    poll_due: datetime | None = None
    addresses: dict[str, list[str]] = {}
    """EndpointSlice fallback: per home, its serving Gateway's IP addresses as last read."""
    address_failures: dict[str, str] = {}
    """... and per home whose addresses could not be read, why (the publisher holds the last route then)."""
    addresses_due: datetime | None = None
    endpoints: dict[str, str] = {}
    """The last endpoint each home reported: a home placement is withdrawing keeps its entry (weight 0)
    after its row stops reporting one, until its copy is gone."""
    written_spec: dict[str, object] | None = None
    """The spec and the controller's conditions last written (a write only when they move)."""
    written_conditions: list[tuple[str, str, str, str]] = []
    map_generation: int = 0
    map_uid: str = ""
    published_generation: int = 0
    """The map generation last published (observedTrafficMapGeneration)."""
    published_digest: str = ""
    """What that publication was computed from beyond the map (host, endpoint options, addresses)."""
    published_at: datetime | None = None
    routed: list[str] = []
    """The homes the global route gives a positive weight, as last published."""
    sequence: int = 0
    """The last Publication's sequence told to placement."""
    told: tuple[list[str], str | None, bool] | None = None
    """(routed, plan, settled) of the last Publication told, so an unchanged one is not told again."""
    held: str | None = None
    """Why no table is computed (a malformed drain, a bad policy or ConfigMap), as said on the object."""
    routing_changed: int = 0
    """routing-changed signals received (a pass after each)."""
    acted_changes: int = 0
    passes: int = 0


class TrafficMapInput(StartObject):
    carried: TrafficMapState | None = None
