"""The Single move's pure rules (workflows/placement/move.py): rotation after the cursor, the one-extra-copy
budget, replacementTimeout, and which admitted probe takes over."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from servingops.api_models.ome.placement_status import (
    CandidateAllocationStatus,
    CandidatePlacement,
    PlacementPlanStatus,
    PlacementSingleMoveStatus,
    PlacementStatus,
)
from servingops.workflows.placement import move

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _row(cluster: str, *, probe: bool = False, draining: bool = False,
         started: datetime | None = None) -> CandidatePlacement:
    return CandidatePlacement(cluster=cluster, allocation=CandidateAllocationStatus(
        race_candidate=probe, drain_requested=draining or None, replacement_started_at=started))


def _status(*rows: CandidatePlacement, winner: str = "b", moving: bool = True) -> PlacementStatus:
    plan = PlacementPlanStatus(id="p", winner=winner,
                               single_move=PlacementSingleMoveStatus() if moving else None)
    return PlacementStatus(plan=plan, candidates=[_row(winner), *rows])


def test_rotation_starts_after_the_cursor_and_wraps() -> None:
    assert move.rotation(["c", "a", "d"], None) == ["a", "c", "d"]
    assert move.rotation(["c", "a", "d"], "a") == ["c", "d", "a"]
    assert move.rotation(["c", "a", "d"], "d") == ["a", "c", "d"]
    assert move.rotation(["c", "a", "d"], "b") == ["c", "d", "a"], "a cursor no longer listed still orders"


def test_one_extra_copy_at_a_time() -> None:
    assert move.nominate(["a", "b", "c"], "b", None, _status()) == ("a", None)
    assert move.nominate(["a", "b", "c"], "b", "a", _status()) == ("c", None)
    assert move.nominate(["a", "b", "c"], "b", "a", _status(_row("a", probe=True))) == (None, move.BUDGET_REASON)
    # A withdrawn probe still listed (its copy not yet deleted) holds the budget too.
    assert move.nominate(["a", "b", "c"], "b", "a", _status(_row("a", draining=True))) == (None, move.BUDGET_REASON)
    assert move.nominate(["b"], "b", None, _status()) == (None, "NoReplacementCandidate")
    assert move.nominate([], "b", None, _status()) == (None, "NoReplacementCandidate")


def test_probes_are_the_live_race_candidates_of_a_move_only() -> None:
    status = _status(_row("a", probe=True), _row("c", probe=True, draining=True))
    assert move.probes(status) == ["a"]
    assert move.probes(_status(_row("a", probe=True), moving=False)) == [], "race losers are not probes"


def test_replacement_timeout() -> None:
    started = NOW - timedelta(seconds=30)
    assert move.expired(_row("a", probe=True, started=started), timedelta(seconds=30), NOW)
    assert not move.expired(_row("a", probe=True, started=started), timedelta(seconds=31), NOW)
    assert not move.expired(_row("a", probe=True, started=started), None, NOW), "no timeout: kept"


def test_the_first_admitted_probe_in_listed_order_is_selected() -> None:
    assert move.first_selected(["a", "c"], {"c", "a"}) == "a"
    assert move.first_selected(["a", "c"], {"c"}) == "c"
    assert move.first_selected(["a", "c"], set()) is None
