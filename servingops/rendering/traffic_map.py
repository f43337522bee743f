"""A TrafficMap's routing table from what placement, quota, the probe and the drains say: pure rules.

What a home gets (seed 004, TrafficMapEntry and TrafficMapCapacity; upstream OME's docs, "How OME sets the
weights"), in this order:

0. A home placement is withdrawing (drainRequested) gets 0: the route stops sending to it before its
   copy is removed (seed 004: publication acknowledges the plan before a placement drains).
1. Its serving capacity: min(allocated, ready) x its capacity factor. `allocated` is what placement
   admitted there, lowered to the home's own capacity report when one is lower (source Endpoint).
2. A home the probe gates gets 0, unless every probed home is gated and the all-failed policy is
   PreserveTraffic: then the capacity-derived weights stay (the probe's verdict is uniform, so it more
   likely says something about the prober than about every home at once).
3. The weights are reduced to their smallest whole-number ratio (4 and 2 become 2 and 1), scaled down
   to the Gateway API's limit of 1,000,000 if they exceed it.
4. A home that a drain (`ome.io/traffic-drain`) names gets 0; the others keep their weights, so they
   share the traffic in the same ratio as before.

The conditions the routing controller owns (Routable, OverrideActive, CapacityFallback) come out of the
same computation, so a table and the reasons it gives cannot disagree.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

from servingops.api_models.contract.routing import DRAIN_ANNOTATION
from servingops.api_models.ome.enums import CapacitySource, PlacementMode, RoutingAllFailedPolicy
from servingops.api_models.ome.traffic_map import (
    MAX_WEIGHT,
    TrafficMapCapacity,
    TrafficMapEntry,
    TrafficMapProbe,
    TrafficMapSpec,
)
from servingops.api_models.quantity import quantity_text

MAX_DRAINS = 64
"""Bounded state: more drains than this in one annotation is refused, not truncated."""
_DRAIN_ID = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")


class RoutableReason(StrEnum):
    ROUTABLE = "Routable"
    ALL_HOMES_PROBE_FAILED = "AllHomesProbeFailed"
    NOT_PLACED = "NotPlaced"
    NO_ADDRESSABLE_HOME = "NoAddressableHome"
    TRAFFIC_DRAIN = "TrafficDrain"
    ALL_HOMES_UNREADY = "AllHomesUnready"
    NO_ROUTABLE_CAPACITY = "NoRoutableCapacity"


class OverrideReason(StrEnum):
    OVERRIDES_APPLIED = "OverridesApplied"
    OVERRIDES_PENDING = "OverridesPending"
    NO_OVERRIDES = "NoOverrides"


class CapacityFallbackReason(StrEnum):
    ENDPOINT_CAPACITY_UNAVAILABLE = "EndpointCapacityUnavailable"
    ENDPOINT_CAPACITY_AVAILABLE = "EndpointCapacityAvailable"
    CAPACITY_POLLING_DISABLED = "CapacityPollingDisabled"
    NO_CAPACITY_TARGETS = "NoCapacityTargets"


class RoutingCondition(StrEnum):
    ROUTABLE = "Routable"
    OVERRIDE_ACTIVE = "OverrideActive"
    CAPACITY_FALLBACK = "CapacityFallback"


@dataclass(frozen=True)
class Drain:
    id: str
    cluster: str
    reason: str


class InvalidDrains(ValueError):
    """The drain annotation does not parse: the table is not recomputed until it is fixed (a malformed
    drain must not silently release a cluster it was meant to hold)."""


def parse_drains(value: str | None) -> list[Drain]:
    """The drains of an `ome.io/traffic-drain` value, strictly: a JSON object keyed by drain ID whose
    values hold exactly `cluster` (non-empty) and `reason`; anything else is InvalidDrains."""
    if value is None or not value.strip():
        return []
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidDrains(f"{DRAIN_ANNOTATION} is not JSON: {exc.msg} at character {exc.pos}") from exc
    if not isinstance(parsed, dict):
        raise InvalidDrains(f"{DRAIN_ANNOTATION} must be a JSON object keyed by drain ID")
    if len(parsed) > MAX_DRAINS:
        raise InvalidDrains(f"{DRAIN_ANNOTATION} holds {len(parsed)} drains, more than {MAX_DRAINS}")
    drains = []
    for drain_id, body in parsed.items():
        if not _DRAIN_ID.match(drain_id):
            raise InvalidDrains(f"{DRAIN_ANNOTATION}: drain ID {drain_id!r} is not a lower-case DNS label")
        if not isinstance(body, dict) or set(body) - {"cluster", "reason"}:
            raise InvalidDrains(f"{DRAIN_ANNOTATION}: drain {drain_id!r} must hold only 'cluster' and 'reason'")
        cluster, reason = body.get("cluster"), body.get("reason", "")
        if not isinstance(cluster, str) or not cluster or not isinstance(reason, str):
            raise InvalidDrains(f"{DRAIN_ANNOTATION}: drain {drain_id!r} needs a 'cluster' name and a text 'reason'")
        drains.append(Drain(drain_id, cluster, reason))
    return sorted(drains, key=lambda d: d.id)


@dataclass(frozen=True)
class Home:
    """One admitted home with an endpoint, as placement and its probes observed it."""

    cluster: str
    endpoint: str
    admitted: int
    """What placement (Kueue on the home) admitted: the control plane's allocation."""
    ready: int
    """Ready replicas there; for an engine with a decoder, the lower of the two components'."""
    reported: int | None = None
    """The home's own capacity report, when polling is on and the latest answer was usable."""
    fallback_reason: str | None = None
    """Why polling (when on) produced no usable report for this home."""
    probe: TrafficMapProbe | None = None
    """The probe's record for this home, when probing is configured."""
    withdrawn: bool = False
    """Placement asked for this home to be drained (drainRequested): weight 0 until its copy is gone, so
    the route takes traffic off it before placement removes it."""


@dataclass(frozen=True)
class RoutingInputs:
    service: str
    mode: PlacementMode | None
    placed: bool
    """status.placement.phase is Placed."""
    homes: Sequence[Home]
    """Admitted homes that report an endpoint."""
    isvc_generation: int
    placement_plan_id: str | None = None
    factors: Mapping[str, Fraction] = field(default_factory=dict)
    """spec.routing.capacityFactors, parsed; a cluster absent here has factor 1."""
    drains: Sequence[Drain] = ()
    probing: bool = False
    all_failed_policy: RoutingAllFailedPolicy = RoutingAllFailedPolicy.DRAIN
    capacity_polling: bool = False


@dataclass(frozen=True)
class ConditionVerdict:
    type: RoutingCondition
    status: bool
    reason: str
    message: str


@dataclass(frozen=True)
class RoutingTable:
    spec: TrafficMapSpec
    conditions: tuple[ConditionVerdict, ConditionVerdict, ConditionVerdict]
    """Routable, OverrideActive, CapacityFallback."""

    @property
    def routable(self) -> ConditionVerdict:
        return self.conditions[0]


def routing_table(inputs: RoutingInputs) -> RoutingTable:
    homes = sorted(inputs.homes, key=lambda h: h.cluster) if inputs.placed else []
    gated = {h.cluster for h in homes if h.probe is not None and h.probe.gated}
    probed = [h for h in homes if h.probe is not None]
    all_gated = inputs.probing and bool(probed) and len(gated) == len(homes)
    preserve = all_gated and inputs.all_failed_policy == RoutingAllFailedPolicy.PRESERVE_TRAFFIC

    capacities = {h.cluster: _capacity(h, inputs) for h in homes}
    raw: dict[str, Fraction] = {}
    for home in homes:
        capacity = capacities[home.cluster]
        serving = min(capacity.allocated or 0, capacity.ready or 0) * inputs.factors.get(home.cluster, Fraction(1))
        open_ = home.cluster not in gated or preserve
        raw[home.cluster] = serving if open_ and home.ready > 0 and not home.withdrawn else Fraction(0)
    weights = reduce_weights(raw)

    drained: dict[str, list[str]] = {}
    for drain in inputs.drains:
        if drain.cluster in weights:
            drained.setdefault(drain.cluster, []).append(drain.id)
    entries = []
    for home in homes:
        refs = drained.get(home.cluster)
        entries.append(TrafficMapEntry(
            cluster=home.cluster, endpoint=home.endpoint,
            weight=0 if refs else weights[home.cluster],
            healthy=home.ready > 0 and home.cluster not in gated,
            capacity=capacities[home.cluster], probe=home.probe, drain_refs=sorted(refs) if refs else None,
        ))  # fmt: skip

    spec = TrafficMapSpec(service=inputs.service, mode=inputs.mode, entries=entries,
                          observed_isvc_generation=inputs.isvc_generation,
                          placement_plan_id=inputs.placement_plan_id)  # fmt: skip
    routable = _routable(inputs, homes, entries, weights, gated, all_gated, preserve)
    return RoutingTable(spec, (routable, _override(inputs, drained), _capacity_fallback(inputs, homes)))


def _capacity(home: Home, inputs: RoutingInputs) -> TrafficMapCapacity:
    allocated = home.admitted if home.reported is None else min(home.admitted, home.reported)
    lowered = allocated < home.admitted
    factor = inputs.factors.get(home.cluster)
    return TrafficMapCapacity(
        # The map leaves out counts of 0 (upstream's convention: "no capacity.ready" reads as none ready).
        allocated=allocated or None, ready=home.ready or None,
        factor=quantity_text(factor) if factor is not None else None,
        source=CapacitySource.ENDPOINT if lowered else CapacitySource.CONTROL_PLANE,
        reported=home.reported if inputs.capacity_polling else None,
        fallback_reason=home.fallback_reason if inputs.capacity_polling else None,
    )


def reduce_weights(raw: Mapping[str, Fraction]) -> dict[str, int]:
    """Exact capacities to the smallest integer ratio (zeros stay 0); scaled down, each positive weight
    kept at least 1, when the largest would pass the Gateway API's 1,000,000."""
    positive = {k: v for k, v in raw.items() if v > 0}
    if not positive:
        return dict.fromkeys(raw, 0)
    scale = math.lcm(*(v.denominator for v in positive.values()))
    ints = {k: int(v * scale) for k, v in positive.items()}
    divisor = math.gcd(*ints.values())
    ints = {k: v // divisor for k, v in ints.items()}
    largest = max(ints.values())
    if largest > MAX_WEIGHT:
        ints = {k: max(1, round(v * MAX_WEIGHT / largest)) for k, v in ints.items()}
        divisor = math.gcd(*ints.values())
        ints = {k: v // divisor for k, v in ints.items()}
    return {k: ints.get(k, 0) for k in raw}


def _names(clusters: Sequence[str]) -> str:
    return ", ".join(clusters)


def _routable(inputs: RoutingInputs, homes: Sequence[Home], entries: Sequence[TrafficMapEntry],
              weights: Mapping[str, int], gated: set[str], all_gated: bool, preserve: bool) -> ConditionVerdict:
    kind = RoutingCondition.ROUTABLE
    if not inputs.placed:
        return ConditionVerdict(kind, False, RoutableReason.NOT_PLACED,
                                "the InferenceService's status.placement.phase is not Placed: the table is empty")
    if not homes:
        return ConditionVerdict(kind, False, RoutableReason.NO_ADDRESSABLE_HOME,
                                "placed, but no admitted workload cluster reports an endpoint: the table is empty")
    serving = [e.cluster for e in entries if e.weight]
    if serving:
        if preserve:
            return ConditionVerdict(kind, True, RoutableReason.ALL_HOMES_PROBE_FAILED,
                                    "the probe gates every cluster; allFailedPolicy PreserveTraffic keeps the "
                                    f"capacity weights of {_names(serving)}")
        return ConditionVerdict(kind, True, RoutableReason.ROUTABLE, f"routes to {_names(serving)}")
    before_drains = [cluster for cluster, weight in weights.items() if weight]
    if before_drains:
        return ConditionVerdict(kind, False, RoutableReason.TRAFFIC_DRAIN,
                                f"drains hold every cluster with capacity ({_names(before_drains)})")
    if all_gated:
        return ConditionVerdict(kind, False, RoutableReason.ALL_HOMES_PROBE_FAILED,
                                "the probe gates every cluster and allFailedPolicy is Drain")
    if not any(h.ready > 0 for h in homes):
        return ConditionVerdict(kind, False, RoutableReason.ALL_HOMES_UNREADY, "no cluster has a ready replica")
    return ConditionVerdict(kind, False, RoutableReason.NO_ROUTABLE_CAPACITY,
                            "no cluster the probe leaves open has both allocated and ready replicas"
                            + (f" (gated: {_names(sorted(gated))})" if gated else ""))


def _override(inputs: RoutingInputs, drained: Mapping[str, list[str]]) -> ConditionVerdict:
    kind = RoutingCondition.OVERRIDE_ACTIVE
    if not inputs.drains:
        return ConditionVerdict(kind, False, OverrideReason.NO_OVERRIDES, f"no {DRAIN_ANNOTATION} entries")
    if drained:
        held = "; ".join(f"{cluster} by {', '.join(sorted(ids))}" for cluster, ids in sorted(drained.items()))
        return ConditionVerdict(kind, True, OverrideReason.OVERRIDES_APPLIED, f"drains hold {held}")
    names = sorted({d.cluster for d in inputs.drains})
    return ConditionVerdict(kind, False, OverrideReason.OVERRIDES_PENDING,
                            f"drains name clusters not in the table: {_names(names)}")


def _capacity_fallback(inputs: RoutingInputs, homes: Sequence[Home]) -> ConditionVerdict:
    kind = RoutingCondition.CAPACITY_FALLBACK
    if not inputs.capacity_polling:
        return ConditionVerdict(kind, False, CapacityFallbackReason.CAPACITY_POLLING_DISABLED,
                                "capacity polling is off")
    if not homes:
        return ConditionVerdict(kind, False, CapacityFallbackReason.NO_CAPACITY_TARGETS,
                                "the table is empty: nothing to poll")
    unavailable = [h.cluster for h in homes if h.reported is None]
    if unavailable:
        return ConditionVerdict(kind, True, CapacityFallbackReason.ENDPOINT_CAPACITY_UNAVAILABLE,
                                f"no usable capacity report from {_names(unavailable)}: the control plane's "
                                "count is used")
    return ConditionVerdict(kind, False, CapacityFallbackReason.ENDPOINT_CAPACITY_AVAILABLE,
                            "every cluster's capacity report is usable")
