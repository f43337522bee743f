"""The source's Ready condition under placement (workflows/placement/readiness.py): serving readiness of
every home of the accepted plan, and otherwise the reason that holds it."""

from __future__ import annotations

import pytest

from servingops.api_models.ome.enums import CandidatePlacementPhase, PlacementMode
from servingops.api_models.ome.placement_status import (
    CandidateAllocationStatus,
    CandidatePlacement,
    PlacementPlanStatus,
    PlacementStatus,
)
from servingops.workflows.placement.readiness import ready_condition

pytestmark = pytest.mark.unit


def _row(cluster: str, *, placed: bool, ready: int, desired: int = 1, probe: bool = False) -> CandidatePlacement:
    return CandidatePlacement(
        cluster=cluster, phase=CandidatePlacementPhase.PLACED if placed else CandidatePlacementPhase.ADMITTING,
        ready_replicas=ready, allocation=CandidateAllocationStatus(desired_replicas=desired, race_candidate=probe))


def _said(status: PlacementStatus, held: str | None = None) -> tuple[str, str, str]:
    ready = ready_condition(status, held)
    assert ready.type == "Ready"
    return ready.status, ready.reason or "", ready.message or ""


def test_single() -> None:
    racing = PlacementStatus(plan=PlacementPlanStatus(id="p", mode=PlacementMode.SINGLE), candidates=[
        _row("a", placed=False, ready=0, probe=True), _row("b", placed=False, ready=0, probe=True)])
    assert _said(racing) == ("False", "PlacementRacing", "racing in a, b: no member admitted it yet")
    won = PlacementStatus(plan=PlacementPlanStatus(id="p", mode=PlacementMode.SINGLE, winner="b"),
                          candidates=[_row("b", placed=True, ready=0)])
    assert _said(won)[:2] == ("False", "HomeNotReady")
    serving = PlacementStatus(plan=PlacementPlanStatus(id="p", mode=PlacementMode.SINGLE, winner="b"),
                              candidates=[_row("b", placed=True, ready=1)], endpoint="http://chat.b")
    assert _said(serving) == ("True", "PlacementServing", "served from b at http://chat.b")
    # A winner that serves stays Ready through a hold said about something else (a move that cannot go on).
    assert _said(serving, "NoReplacementCandidate: nothing else matches")[0] == "True"


def test_split_needs_every_home() -> None:
    plan = PlacementPlanStatus(id="p", mode=PlacementMode.SPLIT)
    partial = PlacementStatus(plan=plan, candidates=[_row("a", placed=True, ready=3, desired=3),
                                                     _row("b", placed=False, ready=0)])
    assert _said(partial) == ("False", "HomesNotReady", "not serving yet in b")
    every = PlacementStatus(plan=plan, candidates=[_row("a", placed=True, ready=3, desired=3),
                                                   _row("b", placed=True, ready=1),
                                                   _row("c", placed=False, ready=0, desired=0)])
    assert _said(every) == ("True", "PlacementServing", "served from a (3 ready), b (1 ready)")


def test_no_plan_says_the_hold() -> None:
    assert _said(PlacementStatus(), "NoReadyCandidate: no WorkloadCluster matches spec.placement") == (
        "False", "NoReadyCandidate", "no WorkloadCluster matches spec.placement")
    assert _said(PlacementStatus()) == ("False", "PlacementPending", "no placement plan accepted yet")
