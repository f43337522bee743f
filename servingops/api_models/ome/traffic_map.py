"""The TrafficMap kind: the capacity-aware routing projection of one placed InferenceService.

Placement decides where an InferenceService runs, quota how much each home may run, and the TrafficMap the
weights: one entry per serving home with its endpoint, an apply-verbatim integer weight and the provenance
of that weight. Two writers share the object (seed 004): the routing controller owns `spec`,
`status.sourceUID` and the Routable, CapacityFallback and OverrideActive conditions; the publisher owns the
rest of the status and the Published and PublicationFallback conditions. Each patches only its own fields.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from servingops.api_models.base import (
    ApiModel,
    Condition,
    CrdInfo,
    KubeResource,
    PrinterColumn,
    Quantity,
    Time,
    condition_list_schema,
)
from servingops.api_models.ome.constants import GROUP, VERSION
from servingops.api_models.ome.enums import CapacitySource, PlacementMode, ProbeResult

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
MAX_WEIGHT = 1_000_000
"""The Gateway API's backendRef weight limit: a publisher applies an entry's weight verbatim."""


class TrafficMapCapacity(ApiModel):
    """TrafficMapCapacity records why an entry's weight is what it is."""

    allocated: int | None = None
    """Allocated is the effective allocation ceiling for this home: the control-plane-admitted count,
    optionally lowered by a capacity report. Ready independently caps it when computing Weight."""
    ready: int | None = None
    """Ready is the home's live ready-replica count. It caps Allocated when computing Weight; zero
    health-gates the entry to weight 0."""
    factor: Quantity | None = None
    """Factor is the per-replica relative serving capacity of this home's accelerator (baseline "1"):
    weight is proportional to min(allocated, ready) * factor. Defaults to "1" when unset."""
    source: CapacitySource = CapacitySource.CONTROL_PLANE
    """Source names which input produced Allocated."""
    reported: int | None = Field(default=None, ge=0)
    """Reported is the home's own servable-capacity figure, recorded whenever the endpoint source
    answered, including when it did not lower Allocated."""
    fallback_reason: str | None = None
    """FallbackReason explains why a configured endpoint capacity source did not produce an applied
    ceiling and the control-plane allocation was retained."""


class TrafficMapProbe(ApiModel):
    """TrafficMapProbe records what the active end-to-end probe observed for one home."""

    policy_digest: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    """PolicyDigest identifies the effective probe policy that produced this observation."""
    result: ProbeResult | None = None
    """Result is the most recent probe attempt's verdict."""
    gated: bool | None = None
    """Gated is the current hysteresis gate."""
    last_probe_time: Time | None = None
    """LastProbeTime is when the latest probe attempt completed."""
    consecutive_failures: int | None = Field(default=None, ge=0)
    """ConsecutiveFailures counts unbroken Failing verdicts."""
    message: str | None = None
    """Message explains the current Result."""


class TrafficMapEntry(ApiModel):
    """TrafficMapEntry is one serving home's routing target and the provenance of its weight."""

    cluster: str
    """Cluster is the WorkloadCluster serving this home."""
    endpoint: str | None = None
    """Endpoint is the home's externally-addressable URL, from status.placement.candidates[].endpoint."""
    weight: int | None = Field(default=None, ge=0, le=MAX_WEIGHT)
    """Weight is the home's final, normalized, capacity-planned, health-gated traffic share as a relative
    integer from 0 through 1,000,000."""
    healthy: bool | None = None
    """Healthy is the readiness-plus-probe result for this home."""
    capacity: TrafficMapCapacity | None = None
    """Capacity is the provenance of Weight."""
    probe: TrafficMapProbe | None = None
    """Probe is the active end-to-end health probe's contribution to Healthy, present only when probing
    is configured."""
    drain_refs: list[str] | None = None
    """DrainRefs names the override IDs in the InferenceService's ome.io/traffic-drain annotation that
    force this entry's weight to zero."""


class TrafficMapSpec(ApiModel):
    """TrafficMapSpec is the computed routing table, machine-written by the routing controller."""

    placement_plan_id: str | None = Field(default=None, alias="placementPlanID")
    """PlacementPlanID identifies the accepted allocation behind this routing table. Publication must
    acknowledge this plan before a placement drains."""
    service: str
    """Service is the routed logical service: the InferenceService name."""
    mode: PlacementMode | None = None
    """Mode mirrors the InferenceService's spec.placement.mode."""
    entries: list[TrafficMapEntry] | None = None
    """Entries is the routing table: one entry per serving home."""
    observed_isvc_generation: int | None = Field(default=None, alias="observedISVCGeneration")
    """ObservedISVCGeneration is the InferenceService generation this table was computed from."""


class TrafficMapGatewayRef(ApiModel):
    """TrafficMapGatewayRef points at the data plane object a publisher created to realize a TrafficMap."""

    group: str | None = None
    """Group is the API group of the realizing object. Empty means the core group."""
    kind: str | None = None
    """Kind is the object kind (e.g. "HTTPRoute")."""
    name: str | None = None
    """Name is the object name."""
    namespace: str | None = None
    """Namespace is the object namespace. Empty means the TrafficMap's namespace."""


class TrafficMapPublisherTarget(ApiModel):
    """One canonical target and its exact applied integer weight in a retained publisher plan."""

    target: str = Field(min_length=1, max_length=512)
    """Target is a publisher-defined canonical identifier covered by the publisher's claim journal."""
    weight: int = Field(ge=0)
    """Weight is the exact non-negative integer applied by the publisher."""


class TrafficMapPublisherLastPositive(ApiModel):
    """A complete post-transform publisher plan retained for restart-safe replay."""

    traffic_map_generation: int = Field(ge=1)
    """TrafficMapGeneration is the generation whose positive plan was applied."""
    observed_isvc_generation: int = Field(ge=1, alias="observedISVCGeneration")
    """ObservedISVCGeneration is the source generation that produced the plan."""
    plan_compatibility_digest: str = Field(pattern=DIGEST_PATTERN)
    """PlanCompatibilityDigest identifies the effective publisher options that affect target identity or
    weights."""
    targets: list[TrafficMapPublisherTarget] = Field(min_length=1, max_length=128)
    """Targets is the complete canonical target-to-weight plan, inactive targets at weight zero included."""


class TrafficMapPublisherStatus(ApiModel):
    """The durable cleanup and replay journal for one publisher: claims are persisted before external
    mutation and retained until their targets have been cleaned up."""

    publisher_name: str = Field(min_length=1, max_length=128)
    """PublisherName identifies the publisher implementation whose cleanup semantics apply."""
    claimed_targets: list[str] = Field(
        min_length=1, max_length=128,
        json_schema_extra={"items": {"type": "string", "minLength": 1, "maxLength": 512}},
    )  # fmt: skip
    """ClaimedTargets are publisher-defined canonical identifiers owned by this map."""
    observed_options_digest: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    """ObservedOptionsDigest is the SHA-256 digest of the effective safe publisher options used by the
    most recent successful reconciliation."""
    last_positive: TrafficMapPublisherLastPositive | None = None
    """LastPositive is the latest complete positive publisher plan that was fully applied."""


class TrafficMapStatus(ApiModel):
    """Whether the active publisher has realized this map onto a data plane, and whether the map has
    anything to realize."""

    source_uid: str | None = Field(default=None, alias="sourceUID")
    """SourceUID is the UID of the InferenceService that generated this map."""
    published: bool | None = None
    """Published reports whether the active publisher has realized this map onto its data plane."""
    gateway_ref: TrafficMapGatewayRef | None = None
    """GatewayRef identifies the data plane object realizing this map. Empty until published."""
    observed_traffic_map_generation: int | None = None
    """ObservedTrafficMapGeneration is the spec generation the publisher last realized."""
    publisher: TrafficMapPublisherStatus | None = None
    """Publisher records the durable target claims and optional replay state."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Routable, CapacityFallback and OverrideActive (routing controller); Published and
    PublicationFallback (publisher)."""


def _condition(kind: str, field: str) -> str:
    return f'.status.conditions[?(@.type=="{kind}")].{field}'


class TrafficMap(KubeResource):
    """TrafficMap is the capacity-aware routing projection of one multi-cluster InferenceService: the
    per-home traffic split a gateway consumes. One per routed InferenceService, named after it and owned by
    it. Alpha."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="TrafficMap",
        plural="trafficmaps",
        scope="Namespaced",
        short_names=["tm", "tmap"],
        categories=["ome"],
        printer_columns=[
            PrinterColumn(name="Mode", type="string", json_path=".spec.mode"),
            PrinterColumn(name="Published", type="string", json_path=_condition("Published", "status")),
            PrinterColumn(name="Routable", type="string", json_path=_condition("Routable", "status")),
            PrinterColumn(name="Override", type="string", json_path=_condition("OverrideActive", "status")),
            PrinterColumn(name="Reason", type="string", json_path=_condition("Routable", "reason")),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )

    spec: TrafficMapSpec | None = None
    """The desired state of the TrafficMap."""
    status: TrafficMapStatus | None = None
    """The observed state of the TrafficMap."""
