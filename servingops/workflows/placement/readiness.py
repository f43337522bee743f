"""The source's Ready condition under placement, as a pure rule.

Seed 004: on a multi-cluster control-plane source, Ready is "placement serving readiness" (on a
workload cluster it is the components' aggregate, which the InferenceService workflow writes; for a
placed source that workflow leaves Ready to the placement workflow). Ready is True only while every
home of the accepted plan serves: admitted (its row Placed) with at least one ready replica. Its
reason says what holds it otherwise, so `kubectl get isvc` and `kubectl describe` tell an operator
why without reading logs.
"""

from __future__ import annotations

from servingops.api_models.ome.enums import CandidatePlacementPhase, PlacementMode
from servingops.api_models.ome.placement_status import CandidatePlacement, PlacementStatus
from servingops.api_models.refs import ConditionUpdate
from servingops.workflows.placement import race, spread


def _ready(status: str, reason: str, message: str) -> ConditionUpdate:
    return ConditionUpdate(type="Ready", status=status, reason=reason, message=message)


def _serves(row: CandidatePlacement | None) -> bool:
    return row is not None and row.phase == CandidatePlacementPhase.PLACED and (row.ready_replicas or 0) > 0


def ready_condition(status: PlacementStatus, held: str | None) -> ConditionUpdate:
    plan = status.plan
    if plan is not None and plan.mode == PlacementMode.SINGLE and plan.winner:
        winner = race.row(status, plan.winner)
        if _serves(winner):
            where = f" at {status.endpoint}" if status.endpoint else ""
            return _ready("True", "PlacementServing", f"served from {plan.winner}{where}")
        return _ready("False", "HomeNotReady", (
            f"{plan.winner} won the placement; its derived service has no ready replica yet"))
    if plan is not None and plan.mode != PlacementMode.SINGLE:
        homes = [row for row in status.candidates or [] if spread.holds(row)]
        waiting = [row.cluster or "" for row in homes if not _serves(row)]
        if homes and not waiting:
            return _ready("True", "PlacementServing", (
                "served from " + ", ".join(f"{r.cluster} ({r.ready_replicas} ready)" for r in homes)))
        if homes:
            return _ready("False", "HomesNotReady", f"not serving yet in {', '.join(waiting)}")
    if held:
        reason, _, message = held.partition(": ")
        return _ready("False", reason, message)
    if plan is not None and plan.mode == PlacementMode.SINGLE:
        return _ready("False", "PlacementRacing", (
            f"racing in {', '.join(race.racing(status)) or 'no member'}: no member admitted it yet"))
    return _ready("False", "PlacementPending", "no placement plan accepted yet")
