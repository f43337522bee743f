"""Inputs and outputs of the routing controller's activities (routing.*) and the publisher's (publisher.*).

Everything here travels in workflow history: references, counts and URLs, never a credential. Every
field added later needs a default (stored histories decode old payloads).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from servingops.api_models.ome.enums import PlacementMode
from servingops.api_models.ome.placement_status import PlacementStatus
from servingops.api_models.ome.routing import RoutingSpec
from servingops.api_models.ome.traffic_map import TrafficMapEntry, TrafficMapSpec, TrafficMapStatus
from servingops.api_models.operator_config import EndpointConfig, RoutingDefaults
from servingops.api_models.refs import ConditionUpdate, ObjectRef


class SourceInput(BaseModel):
    isvc: ObjectRef
    """The routed InferenceService (its uid set: a reused name reads as gone)."""


class TrafficMapView(BaseModel):
    """The TrafficMap named after the InferenceService, as read."""

    uid: str
    generation: int
    resource_version: str
    controller_uid: str | None = None
    """The uid of its controlling owner reference: another InferenceService's map is not ours to write."""
    deleting: bool = False
    finalizers: list[str] = []
    spec: TrafficMapSpec | None = None
    status: TrafficMapStatus | None = None


class RoutingSource(BaseModel):
    """One read of everything a routing table is computed from."""

    present: bool
    """False when the InferenceService is gone (or its name belongs to a newer object)."""
    uid: str = ""
    generation: int = 0
    deleting: bool = False
    annotations: dict[str, str] = {}
    """Only the routing annotations (contract.routing.ROUTING_ANNOTATIONS)."""
    placed_spec: bool = False
    """spec.placement is set: routing applies only to a placed service."""
    mode: PlacementMode | None = None
    routing: RoutingSpec | None = None
    routing_error: str | None = None
    """spec.routing as stored does not parse (an object from before a CRD rule): said, not guessed."""
    placement: PlacementStatus | None = None
    defaults: RoutingDefaults = RoutingDefaults()
    endpoint: EndpointConfig = EndpointConfig()
    config_error: str | None = None
    """The operator ConfigMap's routing or endpoint block does not parse."""
    traffic_map: TrafficMapView | None = None


class CheckTarget(BaseModel):
    """One home to probe or poll: its endpoint, and where to connect when its name does not resolve."""

    cluster: str
    endpoint: str
    connect: str | None = None
    """host:port to connect to instead of the endpoint's own (the member Gateway's address, from the
    EndpointSlice fallback); the endpoint's host still goes in the Host header."""


class ProbeRequest(BaseModel):
    targets: list[CheckTarget]
    path: str
    method: str
    timeout_s: float
    keep_body: bool = False
    """A capacity poll: each answer's body is kept (bounded) to be parsed as a report."""


class ProbeAnswer(BaseModel):
    cluster: str
    status: int | None = None
    error: str | None = None
    at: datetime
    body: bytes = b""
    """The answer's body, bounded (a capacity report); empty for a probe."""


class WriteMapInput(BaseModel):
    isvc: ObjectRef
    spec: TrafficMapSpec
    conditions: list[ConditionUpdate]
    """Routable, OverrideActive and CapacityFallback: the routing controller's own."""


class MapWritten(BaseModel):
    written: bool
    """False: the map belongs to another object (InvalidOwner), or the InferenceService is gone."""
    reason: str | None = None
    message: str | None = None
    generation: int = 0
    uid: str = ""
    spec_changed: bool = False


class DeleteMapInput(BaseModel):
    isvc: ObjectRef


class PublishInput(BaseModel):
    isvc: ObjectRef
    map_uid: str
    generation: int
    """The map generation this publication realizes (observedTrafficMapGeneration)."""
    observed_isvc_generation: int
    annotations: dict[str, str] = {}
    """The service's routing annotations (its global hostname, over the template)."""
    entries: list[TrafficMapEntry]
    endpoint: EndpointConfig
    addresses: dict[str, list[str]] = {}
    """Per cluster, its serving Gateway's IP addresses (EndpointSlice fallback); empty: off."""
    address_failures: dict[str, str] = {}
    """Per cluster whose addresses could not be read, why: nothing is written (ApplyFailed), as upstream."""
    options: dict[str, str] = {}
    """spec.routing.publisher.options: the built-in publisher takes none (InvalidOptions, nothing written)."""


class PublishOutcome(BaseModel):
    published: bool
    reason: str
    message: str
    routed: list[str] = []
    """Published: the clusters the route now gives a positive weight. Not published: nothing (the last
    route stands, and the workflow's record of it)."""
    withdrawn: bool = False
    """Nothing can be published (no global Gateway, port or hostname): the route is gone, nothing routed."""
    partial: bool = False
    """A write failed part way: the data plane may run the old route or the new one."""
    gateway_ref: dict[str, str] | None = None


class UnpublishInput(BaseModel):
    isvc: ObjectRef
    map_uid: str | None = None
    reason: str
    message: str
    release: bool = False
    """Also remove the map's finalizer (the map is being deleted, or is deleted next)."""
    delete_map: bool = False
    """Then delete the map (the service stopped being routed)."""


class Unpublished(BaseModel):
    done: bool
    message: str = ""


class GatewayAddressesInput(BaseModel):
    isvc: ObjectRef
    clusters: list[str]


class GatewayAddresses(BaseModel):
    addresses: dict[str, list[str]] = {}
    failures: dict[str, str] = {}
    """Per cluster that could not be read, why (upstream: one failure holds every update)."""
