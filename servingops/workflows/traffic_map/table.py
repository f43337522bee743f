"""From one read of the InferenceService (and what the workflow remembers) to the routing table's inputs:
pure rules, no Temporal, no I/O.

- `routed`: whether the service gets a TrafficMap at all (the installation's gate, spec.routing.enabled,
  spec.placement);
- `homes`: the admitted homes that report an endpoint, each with its probe record and capacity ceiling; a
  home placement is withdrawing keeps its entry at weight 0 (with the endpoint it last reported) until its
  copy is gone, so the route takes traffic off it first;
- `placed`: Placed, or a placed service in a transition (a new plan while homes still serve): upstream OME
  empties the table whenever status.placement.phase is not Placed, which drops every request of a service
  whose Split plan is being replaced; here the homes that serve keep serving through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from fractions import Fraction

from servingops.activities.routing.types import CheckTarget, RoutingSource
from servingops.api_models.contract.routing import DRAIN_ANNOTATION
from servingops.api_models.ome.enums import PlacementPhase, RoutingAllFailedPolicy
from servingops.api_models.ome.placement_status import CandidatePlacement, PlacementStatus
from servingops.api_models.quantity import quantity
from servingops.rendering import capacity_poll, routing_probe
from servingops.rendering.traffic_map import Home, RoutingInputs, parse_drains
from servingops.workflows.traffic_map.state import CapacityMemory, ProbeMemory


def routed(source: RoutingSource) -> tuple[bool, str]:
    """(routed, why not): the installation's gate first (spec.routing.enabled true cannot bypass it)."""
    if not source.placed_spec:
        return False, "the InferenceService has no spec.placement"
    if not source.defaults.enabled:
        return False, "routing is off for the installation (operator ConfigMap routing.enabled)"
    if source.routing is not None and source.routing.enabled is False:
        return False, "spec.routing.enabled is false"
    return True, ""


def _withdrawn(row: CandidatePlacement) -> bool:
    return bool(row.allocation is not None and row.allocation.drain_requested)


def placed(placement: PlacementStatus | None) -> bool:
    if placement is None:
        return False
    if placement.phase == PlacementPhase.PLACED:
        return True
    return placement.plan is not None and any(
        row.endpoint and (row.ready_replicas or 0) > 0 and not _withdrawn(row) for row in placement.candidates or [])


def endpoints(placement: PlacementStatus | None, remembered: Mapping[str, str]) -> dict[str, str]:
    """Each listed home's endpoint: the one it reports, or the one it last reported while it is withdrawn."""
    found = {}
    for row in placement.candidates or [] if placement else []:
        cluster = row.cluster or ""
        endpoint = row.endpoint or (remembered.get(cluster) if _withdrawn(row) else None)
        if cluster and endpoint:
            found[cluster] = endpoint
    return found


def check_targets(placement: PlacementStatus | None, known: Mapping[str, str],
                  connect: Mapping[str, str]) -> list[CheckTarget]:  # fmt: skip
    """The homes to probe or poll: every listed home with an endpoint that is not being withdrawn."""
    rows = [r for r in placement.candidates or [] if r.cluster in known and not _withdrawn(r)] if placement else []
    return [CheckTarget(cluster=r.cluster or "", endpoint=known[r.cluster or ""],
                        connect=connect.get(r.cluster or "")) for r in rows]  # fmt: skip


def probe_record(memory: ProbeMemory | None) -> routing_probe.ProbeState | None:
    return routing_probe.ProbeState(memory.record, memory.successes) if memory is not None else None


def capacity_window(memory: CapacityMemory | None) -> capacity_poll.CapacityWindow | None:
    if memory is None:
        return None
    return capacity_poll.CapacityWindow(
        memory.policy_digest, tuple(capacity_poll.Reading(r.servable, r.observed_at) for r in memory.readings),
        memory.failure)


def inputs(service: str, source: RoutingSource, known: Mapping[str, str], probes: Mapping[str, ProbeMemory],
           capacity: Mapping[str, CapacityMemory], probe: routing_probe.ProbePolicy | None,
           poll: capacity_poll.CapacityPolicy | None, now: datetime) -> RoutingInputs:
    """The table's inputs. Raises InvalidDrains (a malformed drain annotation) and ValueError (a capacity
    factor that is not a quantity or not positive): the caller keeps the last table and says why."""
    placement = source.placement
    homes = []
    for row in placement.candidates or [] if placement else []:
        cluster = row.cluster or ""
        if cluster not in known or (not (row.admitted_replicas or 0) and not _withdrawn(row)):
            continue
        reported, fallback = None, None
        if poll is not None:
            limit = capacity_poll.ceiling(poll, capacity_window(capacity.get(cluster)), now)
            reported, fallback = limit.value, limit.fallback_reason
        memory = probes.get(cluster) if probe is not None else None
        if memory is not None and probe is not None and memory.record.policy_digest != probe.digest:
            memory = None  # another policy's record: the new policy starts with its gates open
        homes.append(Home(
            cluster=cluster, endpoint=known[cluster], admitted=row.admitted_replicas or 0,
            ready=row.ready_replicas or 0, reported=reported, fallback_reason=fallback,
            probe=memory.record if memory is not None else None,
            withdrawn=_withdrawn(row)))  # fmt: skip
    factors: dict[str, Fraction] = {}
    for cluster, value in ((source.routing.capacity_factors or {}) if source.routing else {}).items():
        factor = quantity(value)
        if factor <= 0:
            raise ValueError(f"spec.routing.capacityFactors[{cluster}] is {value}: a factor must be positive")
        factors[cluster] = factor
    return RoutingInputs(
        service=service, mode=source.mode, placed=placed(placement), homes=homes,
        isvc_generation=source.generation,
        placement_plan_id=placement.plan.id if placement is not None and placement.plan is not None else None,
        factors=factors, drains=parse_drains(source.annotations.get(DRAIN_ANNOTATION)),
        probing=probe is not None,
        all_failed_policy=probe.all_failed_policy if probe is not None else RoutingAllFailedPolicy.DRAIN,
        capacity_polling=poll is not None)
