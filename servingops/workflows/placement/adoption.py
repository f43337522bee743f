"""Adoption of standing homes as pure rules (seed 004: PlacementPlanStatus.adoptionDigest,
CandidateAllocationStatus.inventoryPending and originalReplicas). No Temporal, no I/O: the workflow
feeds in each member's inventory (activities/placement: `placement.inventory_member`) and writes what
comes out.

Only for a source that opts in (servingops.io/placement-adopt: "true"). Before a plan is accepted every
matched member is inventoried: what stands there under the source's name. A standing copy (made by hand,
or derived from an earlier source of that name) is a home the service already has: its row's
originalReplicas and currentReplicas are the Instances its Kueue admitted, and it is adopted (that very
object, by uid) instead of being left alone as NameInUse. A member that cannot be read is
`inventoryPending`: nothing is written there, its retained floor stays, it is no free capacity
(SplitByCapacity counts it unknown), and the plan's `adoptionDigest` fixes the intent the inventory began
under. While any inventory is pending a changed intent cannot add homes (nor inventory new members): it
is held `InventoryPending` until the pending members answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from servingops.api_models.ome.enums import CandidatePlacementPhase, PlacementPhase
from servingops.api_models.ome.placement_status import (
    CandidateAllocationStatus,
    CandidatePlacement,
    PlacementStatus,
)
from servingops.workflows.placement import race
from servingops.workflows.placement.matching import Candidate

if TYPE_CHECKING:  # only its attributes are read here; the workflow imports it passed through
    from servingops.activities.placement.types import MemberInventory

HELD_REASON = "InventoryPending"


def pending(inventory: Mapping[str, MemberInventory]) -> list[str]:
    """The members whose inventory is not identified yet, by name."""
    return sorted(cluster for cluster, entry in inventory.items() if not entry.identified)


def standing(inventory: Mapping[str, MemberInventory], cluster: str) -> MemberInventory | None:
    """The identified standing copy in `cluster` (not derived from this source), if one stands there."""
    entry = inventory.get(cluster)
    return entry if entry is not None and entry.identified and entry.standing_uid else None


def to_read(inventory: Mapping[str, MemberInventory], matched: Sequence[str], planned: bool) -> list[str]:
    """Which members to inventory this pass. Before a plan: every matched one, afresh. With a plan: the
    pending ones, and members matched since, but only once nothing is pending ("a changed intent cannot
    expand an incomplete inventory")."""
    if not planned:
        return list(matched)
    unread = [c for c in matched if c not in inventory or not inventory[c].identified]
    if pending(inventory):
        return [c for c in unread if c in inventory]
    return unread


def held_clusters(status: PlacementStatus) -> set[str]:
    """The members the accepted plan keeps a floor or a home in (any inventory state)."""
    winner = status.plan.winner if status.plan is not None else None
    return {row.cluster or "" for row in status.candidates or []
            if not race.draining(row) and (row.cluster == winner or (
                row.allocation is not None and ((row.allocation.desired_replicas or 0) > 0
                                                or row.allocation.race_candidate)))}


def expansion(status: PlacementStatus, homes: Iterable[str], inventory: Mapping[str, MemberInventory]) -> list[str]:
    """The homes a new plan would add to the accepted one while the inventory is incomplete (empty when it
    is complete, or when there is no accepted plan: the initial intent is what adoptionDigest fixes)."""
    if status.plan is None or not pending(inventory):
        return []
    kept = held_clusters(status)
    return sorted(set(homes) - kept)


def held_message(added: Sequence[str], inventory: Mapping[str, MemberInventory]) -> str:
    waiting = "; ".join(f"{c}: {inventory[c].reason or 'not read'}" for c in pending(inventory))
    return (f"the changed spec.placement would add {', '.join(added)}, but the standing homes of "
            f"{', '.join(pending(inventory))} are not inventoried yet ({waiting}): the accepted plan is kept "
            "until they answer")


def mark(status: PlacementStatus, inventory: Mapping[str, MemberInventory], adopting: bool) -> None:
    """Bring the rows and the plan in line with the inventory: inventoryPending on each pending member's row,
    a standing copy's admitted Instances as the original and current floor of a row that never had its copy
    written, and adoptionDigest set (to the plan's digest, once) while anything is pending, cleared after."""
    for row in status.candidates or []:
        if row.allocation is None or race.draining(row):
            continue
        entry = inventory.get(row.cluster or "")
        row.allocation.inventory_pending = True if adopting and entry is not None and not entry.identified else None
        found = standing(inventory, row.cluster or "") if adopting else None
        if found is not None and not row.applied_plan_id and not row.allocation.original_replicas:
            row.allocation.original_replicas = row.allocation.current_replicas = found.replicas
    if status.plan is not None:
        if adopting and pending(inventory):
            status.plan.adoption_digest = status.plan.adoption_digest or status.plan.input_digest
        else:
            status.plan.adoption_digest = None


def listed_row(candidate: Candidate, inventory: Mapping[str, MemberInventory]) -> CandidatePlacement:
    """A row for a matched member the plan does not race or hold, listed for what stands (or may stand)
    there: a pending inventory, or a standing copy kept until the plan's homes serve."""
    allocation: CandidateAllocationStatus = candidate.allocation_status()
    allocation.race_candidate = False
    row = CandidatePlacement(cluster=candidate.cluster, allocation=allocation, observation_known=False)
    found = standing(inventory, candidate.cluster)
    if found is not None:
        _hold_standing(row, allocation, found)
    else:
        allocation.inventory_pending = True
    return row


def _hold_standing(row: CandidatePlacement, allocation: CandidateAllocationStatus, found: MemberInventory) -> None:
    """The row of a standing copy the plan does not keep: what it holds is its original and authorized floor,
    it is moving to none, and it serves (Admitted) or waits for its Kueue (Admitting) as the inventory saw."""
    allocation.original_replicas = allocation.current_replicas = found.replicas
    allocation.desired_replicas = 0
    row.phase = CandidatePlacementPhase.ADMITTED if found.admitted else CandidatePlacementPhase.ADMITTING


def retained(status: PlacementStatus, inventory: Mapping[str, MemberInventory]) -> list[str]:
    """Rows of standing copies the accepted plan does not keep (not the winner, not a race candidate, no
    floor): they keep serving until the plan's homes do, then are drained and deleted."""
    kept = held_clusters(status)
    return [row.cluster or "" for row in status.candidates or []
            if row.cluster not in kept and not race.draining(row) and standing(inventory, row.cluster or "")]


def single_start(status: PlacementStatus, matched: Sequence[Candidate],
                 inventory: Mapping[str, MemberInventory]) -> str | None:
    """A new Single plan (race.new_race over the Ready, identified candidates) under adoption: every other
    matched member with a pending inventory or a standing copy is listed, not raced; a standing copy that
    already serves (every component admitted) in a racing member is the winner at once, the first by name,
    and nothing else races. Returns that winner (None: the race runs)."""
    listed = {row.cluster for row in status.candidates or []}
    racers = race.racing(status)
    winner = next((c for c in racers if (found := standing(inventory, c)) is not None and found.admitted), None)
    rows = list(status.candidates or [])
    if winner is not None:
        kept: list[CandidatePlacement] = []
        for row in rows:
            if row.cluster == winner:
                assert row.allocation is not None
                row.allocation.race_candidate = False  # a retained winner carries no cleanup permission
                row.phase = CandidatePlacementPhase.ADMITTED
                kept.append(row)
            elif race.draining(row) or standing(inventory, row.cluster or ""):
                if row.allocation is not None and not race.draining(row):
                    row.allocation.race_candidate = False
                kept.append(row)
            # a candidate with nothing standing gets no copy: the standing winner serves already
        rows = kept
    rows += [listed_row(c, inventory) for c in matched if c.cluster not in listed
             and (c.cluster in pending(inventory) or standing(inventory, c.cluster))]
    status.candidates = rows
    if winner is not None and status.plan is not None:
        status.plan.winner = status.cluster = winner
        status.phase = PlacementPhase.ADMITTING  # Placed once the settle has seen it serve as the source's copy
    return winner


def single_pass(status: PlacementStatus, inventory: Mapping[str, MemberInventory], ready: set[str]) -> list[str]:
    """A Single plan's members whose inventory answered since it began: with no winner yet, a Ready one races
    (a standing copy there is adopted if it wins); with a winner, a standing copy stays listed until the
    winner serves, and a member with nothing standing is no longer listed (nor one whose inventory was
    awaited and that is no longer matched). Returns the members that join the race."""
    winner = status.plan.winner if status.plan is not None else None
    joined: list[str] = []
    rows: list[CandidatePlacement] = []
    for row in status.candidates or []:
        entry = inventory.get(row.cluster or "")
        allocation = row.allocation
        if allocation is None or race.draining(row) or not allocation.inventory_pending:
            rows.append(row)
            continue
        if entry is None and not allocation.race_candidate and row.cluster != winner:
            continue  # listed only while its inventory was awaited, and no longer matched: not waited for
        if entry is None or not entry.identified:
            rows.append(row)
            continue
        allocation.inventory_pending = None
        if not winner and row.cluster in ready:
            allocation.race_candidate = True
            row.phase = CandidatePlacementPhase.ADMITTING
            joined.append(row.cluster or "")
            rows.append(row)
        elif entry.standing_uid:
            _hold_standing(row, allocation, entry)
            rows.append(row)
        # otherwise nothing stands there and the race is decided: the row goes
    status.candidates = rows
    return joined
