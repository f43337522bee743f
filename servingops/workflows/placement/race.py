"""The Single admission race as pure rules: the plan a race starts from, the rows of its candidates,
who wins, and what the phase says. No Temporal, no I/O: the workflow feeds in what the members
answered and writes what comes out.

The order of a Single race is matching's race order (Ready registrations, by name). The winner is
the first candidate, in that order, whose derived service has every component admitted by its
Kueue (confirmed by live pods). Two members admitted in the same look: the earlier in race order
wins, so the outcome does not depend on which answer arrived first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

from servingops.api_models.ome.enums import CandidatePlacementPhase, PlacementMode, PlacementPhase
from servingops.api_models.ome.placement_status import (
    CandidatePlacement,
    PlacementPlanStatus,
    PlacementStatus,
)
from servingops.workflows.placement.matching import Candidate


def race_digest(source_uid: str, generation: int, candidates: Sequence[Candidate]) -> str:
    """sha256 of what the race was accepted for: the source, its generation, the candidates and
    their matches (no timestamps, no observations)."""
    body = {"source": source_uid, "generation": generation,
            "candidates": [[c.cluster, c.cluster_uid, list(c.matching_terms)] for c in candidates]}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def new_race(plan_id: str, source_uid: str, generation: int, candidates: Sequence[Candidate],
             revision: int = 1, draining: Sequence[CandidatePlacement] = ()) -> PlacementStatus:
    """The plan persisted before any member is written: every candidate a race copy, none a winner.
    `draining`: rows of homes a former plan left (a lost winner) whose copies are still to be
    deleted; they stay listed, drainRequested, until they are."""
    rows = []
    for candidate in candidates:
        allocation = candidate.allocation_status()
        allocation.race_candidate = True
        rows.append(CandidatePlacement(cluster=candidate.cluster, phase=CandidatePlacementPhase.ADMITTING,
                                       allocation=allocation, applied_plan_id=None, observation_known=False))
    names = {c.cluster for c in candidates}
    rows += [row for row in draining if row.cluster not in names]
    # pauseSurge false, said: placement never stops a member's rollout surges (it owns no shared
    # transition allowance here).
    plan = PlacementPlanStatus(id=plan_id, mode=PlacementMode.SINGLE, revision=revision, source_uid=source_uid,
                               pause_surge=False, observed_generation=generation or None,
                               input_digest=race_digest(source_uid, generation, candidates))
    status = PlacementStatus(plan=plan, candidates=rows)
    status.phase = phase(status)
    return status


def first_admitted(order: Iterable[str], admitted: set[str]) -> str | None:
    """The winner: the first candidate in race order that is admitted."""
    return next((cluster for cluster in order if cluster in admitted), None)


def racing(status: PlacementStatus) -> list[str]:
    """The rows of the current race (every listed home but the draining ones), in listed order."""
    return [c.cluster or "" for c in status.candidates or [] if not draining(c)]


def race_copies(status: PlacementStatus) -> list[str]:
    """The racing rows that get a race copy: an adoption's rows listed for a pending inventory or a standing
    copy (not race candidates) get none."""
    return [c.cluster or "" for c in status.candidates or []
            if not draining(c) and c.allocation is not None and c.allocation.race_candidate]


def draining(row: CandidatePlacement) -> bool:
    return bool(row.allocation is not None and row.allocation.drain_requested)


def drain(row: CandidatePlacement) -> CandidatePlacement:
    """A home a plan no longer holds: withdrawn from routing (no endpoint), its copy to be deleted."""
    drained = row.model_copy(deep=True)
    if drained.allocation is not None:
        drained.allocation.drain_requested, drained.allocation.race_candidate = True, False
    drained.endpoint = None
    return drained


def row(status: PlacementStatus, cluster: str) -> CandidatePlacement | None:
    return next((c for c in status.candidates or [] if c.cluster == cluster), None)


def losers(status: PlacementStatus) -> list[str]:
    """Race copies still listed that are not the winner: the ones to delete, in listed order."""
    winner = status.plan.winner if status.plan else None
    if not winner or (status.plan is not None and status.plan.single_move is not None):
        return []  # during a move the race candidates are its probes (workflows/placement/move.py)
    return [c.cluster or "" for c in status.candidates or []
            if c.cluster != winner and c.allocation is not None and c.allocation.race_candidate and not draining(c)]


def phase(status: PlacementStatus) -> PlacementPhase:
    """Pending without a plan; Admitting while a race of one waits for its only candidate; Racing
    while several copies exist (before the winner is committed, and after it until every loser is
    removed); Placed once the committed winner is the only home left."""
    if status.plan is None:
        return PlacementPhase.PENDING
    if status.plan.winner and not losers(status):
        return PlacementPhase.PLACED
    return PlacementPhase.ADMITTING if len(racing(status)) == 1 else PlacementPhase.RACING
