"""All, Split and SplitByCapacity as pure rules: the status rows an accepted allocation plan
(allocation.py) becomes, and what the phase says. No Temporal, no I/O.

Every home with a positive engine floor holds a derived service whose components run the home's
floors; a candidate with a zero floor (weight 0, or a share rounded to none) is listed and holds
nothing: a copy it holds from an earlier plan serves until the plan's homes do, then leaves the route
and is deleted once the route leaves it out; its row stays. A home the new plan no longer holds is
drained (drainRequested) until its copy is gone. In these modes `status.cluster` and
`status.endpoint` stay empty: the candidates, each with its own endpoint, are authoritative (seed:
"this list is the source of truth an external LB/DNS consumes to route across homes").
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping

from servingops.api_models.ome.enums import CandidatePlacementPhase, PlacementPhase
from servingops.api_models.ome.placement_status import (
    CandidateAllocationStatus,
    CandidatePlacement,
    PlacementCapacitySample,
    PlacementHomePolicy,
    PlacementPlanStatus,
    PlacementStatus,
)
from servingops.workflows.placement import race
from servingops.workflows.placement.allocation import Plan


def accepted(plan: Plan, plan_id: str, revision: int, source_uid: str, generation: int,
             previous: PlacementStatus,
             capacity: Mapping[str, PlacementCapacitySample] | None = None,
             copies: Collection[str] | None = None) -> PlacementStatus:
    """The status of a newly accepted plan: one row per candidate, rows of homes it drops drained.
    `capacity` (SplitByCapacity): each member's accepted sample, kept on its row as the evidence of
    its weight.

    `copies`: the members known to hold this source's copy (spread_steps.ZERO_SHARE_PATCH). Given, each
    row keeps the plan its member acknowledged (appliedPlanID: a new plan is not acknowledged until it is
    applied there), so a home whose share drops to zero is still known to hold a copy and that copy is
    deleted (spread_steps); a dropped member that still holds one is drained even when its share was
    already zero. None: as runs recorded before that patch did (every row started without appliedPlanID,
    so a zero share's copy was never deleted)."""
    before = {row.cluster: row for row in previous.candidates or []}
    # "Original assignments remain fixed throughout a transition, including retargets": a plan that
    # replaces a settled one starts a transition from what each home holds now; one that replaces a
    # plan still moving keeps that transition's originals.
    mid_transition = previous.plan is not None and previous.phase != PlacementPhase.PLACED
    rows: list[CandidatePlacement] = []
    for home in plan.homes:
        old = before.get(home.cluster)
        held = old.allocation if old is not None and old.allocation is not None else None
        current = (held.current_replicas or 0) if held is not None else 0
        original = held.original_replicas if mid_transition and held is not None and held.original_replicas \
            is not None else current
        allocation = CandidateAllocationStatus(
            cluster_uid=home.cluster_uid, matched=True, weight=home.weight,
            capacity=(capacity or {}).get(home.cluster),
            original_replicas=original, current_replicas=current, desired_replicas=home.desired_replicas,
            desired_home=home.desired_home(plan.input_digest) if home.desired_replicas > 0 else None,
            current_home=(old.allocation.desired_home if old is not None and old.allocation is not None else None))
        rows.append(CandidatePlacement(
            cluster=home.cluster, allocation=allocation, phase=CandidatePlacementPhase.ADMITTING,
            applied_plan_id=old.applied_plan_id if old is not None and copies is not None else None,
            observation_known=old.observation_known if old is not None else False,
            admitted_replicas=old.admitted_replicas if old is not None else None,
            ready_replicas=old.ready_replicas if old is not None else None,
            endpoint=old.endpoint if old is not None else None))
    names = {home.cluster for home in plan.homes}
    rows += [race.drain(row) for row in previous.candidates or [] if row.cluster not in names
             and (race.draining(row) or (row.allocation is not None and (row.allocation.desired_replicas or 0) > 0)
                  or (copies is not None and row.cluster in copies))]
    status = PlacementStatus(plan=PlacementPlanStatus(
        id=plan_id, mode=plan.mode, revision=revision, source_uid=source_uid, observed_generation=generation or None,
        pause_surge=False,  # placement never stops a member's rollout surges
        input_digest=plan.input_digest, requested_replicas=plan.requested_replicas,
        assigned_replicas=plan.assigned_replicas, unassigned_replicas=plan.unassigned_replicas,
        original_unassigned_replicas=(previous.plan.original_unassigned_replicas
                                      if previous.plan is not None and previous.plan.original_unassigned_replicas
                                      is not None else plan.unassigned_replicas)),
        candidates=rows)
    status.phase = phase(status)
    return status


def holds(row: CandidatePlacement) -> bool:
    """The row is a home of the accepted plan (a positive engine floor, not draining)."""
    return (not race.draining(row) and row.allocation is not None
            and (row.allocation.desired_replicas or 0) > 0)


def copy_left(row: CandidatePlacement, applied: Container[str]) -> bool:
    """The row is a candidate the plan gives a zero share (not draining) whose member still holds this
    source's copy: it acknowledged a plan (appliedPlanID), or this workflow applied a copy there
    (`applied`: the members it applied to and has not deleted from; what a run that began before
    appliedPlanID was kept has to go by)."""
    return (not race.draining(row) and row.allocation is not None and row.allocation.desired_replicas == 0
            and bool(row.applied_plan_id or row.cluster in applied))


def emptied(row: CandidatePlacement) -> None:
    """A zero share whose copy is gone: its member acknowledges no plan, runs and serves nothing."""
    row.applied_plan_id, row.endpoint = None, None
    row.admitted_replicas = row.ready_replicas = 0
    if row.allocation is not None:
        row.allocation.current_replicas, row.allocation.current_home = 0, None


def floors(row: CandidatePlacement) -> dict[str, int]:
    """The home's per-component floors, as its derived service runs them."""
    home: PlacementHomePolicy | None = row.allocation.desired_home if row.allocation is not None else None
    return {f.component.value: f.replicas for f in (home.replica_floors if home is not None else None) or []}


def settled(row: CandidatePlacement) -> bool:
    desired = row.allocation.desired_replicas if row.allocation is not None else 0
    return (row.admitted_replicas or 0) >= (desired or 0)


def phase(status: PlacementStatus) -> PlacementPhase:
    """Admitting until every home admitted its floor, then Placed (drained homes aside: they only
    lose their copies)."""
    if status.plan is None:
        return PlacementPhase.PENDING
    homes = [row for row in status.candidates or [] if holds(row)]
    return PlacementPhase.PLACED if homes and all(settled(r) for r in homes) else PlacementPhase.ADMITTING


def mark(row: CandidatePlacement) -> None:
    """The row's phase from its counts: Admitted once its floor is admitted, Placed once it also
    serves that many (ready) and is addressable."""
    if not holds(row):
        return
    desired = row.allocation.desired_replicas or 0 if row.allocation is not None else 0
    if not settled(row):
        row.phase = CandidatePlacementPhase.ADMITTING
    elif (row.ready_replicas or 0) >= desired and row.endpoint:
        row.phase = CandidatePlacementPhase.PLACED
        if row.allocation is not None:
            row.allocation.current_replicas = desired
            row.allocation.current_home = row.allocation.desired_home
    else:
        row.phase = CandidatePlacementPhase.ADMITTED
