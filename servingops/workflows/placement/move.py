"""A Single move as pure rules: the committed winner no longer matches spec.placement, and a
replacement home is found one probe at a time while the winner keeps serving.

- A probe is a copy of the derived service in one matching, Ready member (a row with raceCandidate
  and `replacementStartedAt`). A move holds at most one extra full copy beside the winner (the seed's
  "one extra full copy of the desired allocation"): while any other copy is still listed (a probe, or
  one being withdrawn), the next candidate waits, said as SurgeBudgetExhausted.
- Candidates are nominated in name order starting after `singleMove.cursor` (the last nominated),
  wrapping around, so every candidate gets its turn and a timed-out one is tried again only after
  the others.
- `replacementTimeout` bounds a probe that does not admit: past it the probe is withdrawn and the
  next one nominated. Without it a pending probe is kept until it admits.
- An admitted probe is `singleMove.selected`; it takes over (becomes the winner, the old home is
  withdrawn) only once it serves: admitted with an endpoint. The old home's copy is deleted only
  after that handoff is persisted.
- The winner matching again cancels the move: the probes are withdrawn, the winner stays.
No Temporal, no I/O: the workflow feeds in the rows, the matches and the clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from servingops.api_models.ome.placement_status import CandidatePlacement, PlacementStatus
from servingops.workflows.placement import race

BUDGET_REASON = "SurgeBudgetExhausted"


def moving(status: PlacementStatus) -> bool:
    return status.plan is not None and status.plan.single_move is not None


def others(status: PlacementStatus) -> list[CandidatePlacement]:
    """Every listed row but the winner's: probes and homes being withdrawn (each holds, or may still
    hold, a copy and so a share of the one-extra-copy budget)."""
    winner = status.plan.winner if status.plan else None
    return [row for row in status.candidates or [] if row.cluster != winner]


def probes(status: PlacementStatus) -> list[str]:
    """The live probes of a move, in listed order."""
    if not moving(status):
        return []
    return [row.cluster or "" for row in others(status)
            if row.allocation is not None and row.allocation.race_candidate and not race.draining(row)]


def rotation(names: Sequence[str], cursor: str | None) -> list[str]:
    """`names` in name order, starting after `cursor` and wrapping around (all of them when no cursor)."""
    ordered = sorted(names)
    if not cursor:
        return ordered
    after = [name for name in ordered if name > cursor]
    return after + [name for name in ordered if name <= cursor]


def expired(row: CandidatePlacement, timeout: timedelta | None, now: datetime) -> bool:
    """A probe past replacementTimeout since it was nominated (never, without a timeout)."""
    started = row.allocation.replacement_started_at if row.allocation is not None else None
    return timeout is not None and started is not None and now >= started + timeout


def first_selected(probe_order: Sequence[str], admitted: set[str]) -> str | None:
    """The probe that takes over: the first admitted one in listed order (the outcome does not
    depend on which member answered first)."""
    return next((name for name in probe_order if name in admitted), None)


def nominate(candidates: Sequence[str], winner: str, cursor: str | None,
             status: PlacementStatus) -> tuple[str | None, str | None]:
    """The next probe, or why none: (name, None) or (None, reason). `candidates`: the Ready members
    the spec matches."""
    eligible = [name for name in candidates if name != winner]
    if not eligible:
        return None, "NoReplacementCandidate"
    if others(status):
        return None, BUDGET_REASON
    return rotation(eligible, cursor)[0], None
