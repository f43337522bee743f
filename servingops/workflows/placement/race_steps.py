"""The Single admission race, as steps of the placement workflow (workflows/placement/race.py holds its
pure rules): match the candidates, persist a new race's plan before any member is written, fan the
derived copy out and observe admission, commit the first admitted home as the winner before any loser
is deleted, then settle (losers and drained homes removed, the winner kept current, its endpoint
mirrored) and judge a winner that is lost past the observation grace.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.placement import adoption, race
from servingops.workflows.placement.matching import Candidate, match_clusters
from servingops.workflows.placement.members import Members, registrations
from servingops.workflows.placement.record import PlacementRecord
from servingops.workflows.placement.state import PlacementState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote
    from servingops.activities.operator_config import OperatorConfigActivities
    from servingops.activities.placement.types import MemberObservation, PlacementSource
    from servingops.api_models.durations import parse_duration
    from servingops.api_models.ome.enums import CandidatePlacementPhase
    from servingops.api_models.ome.placement import PlacementSpec
    from servingops.api_models.ome.placement_status import PlacementStatus
    from servingops.api_models.refs import ObjectRef

RACE_POLL = timedelta(seconds=2)
"""How often a race looks at its candidates: admission is a member's decision no event here reports."""
PLACED_POLL = timedelta(seconds=30)
"""How often a placed service looks at its winner (its endpoint, its counts)."""
SETTLE_PATCH = "placement-settle-together"
"""A committed winner is read again together with the losers' deletion (before: after it)."""


class RaceSteps:
    def __init__(self, record: PlacementRecord, members: Members) -> None:
        self.record = record
        self.members = members
        self.state: PlacementState = record.state

    def match(self, spec: PlacementSpec, source: PlacementSource) -> list[Candidate]:
        result = match_clusters(spec, registrations(source))
        if result.held is not None:
            self.record.hold(result.held.reason, result.held.message)
            return []
        order = list(result.race_order())
        if not order:
            unready = [c.cluster for c in result.candidates]
            self.record.hold("NoReadyCandidate", (
                f"no Ready WorkloadCluster matches spec.placement (matched but not Ready: {', '.join(unready)})"
                if unready else "no WorkloadCluster matches spec.placement"))
            return []
        return order

    async def start_race(self, ref: ObjectRef, source: PlacementSource, candidates: list[Candidate],
                         spec: PlacementSpec) -> None:
        draining = [r for r in self.state.status.candidates or [] if race.draining(r)]
        pending = adoption.pending(self.state.inventory) if source.adopt else []
        candidates = [c for c in candidates if c.cluster not in pending]  # nothing is written to an unknown home
        self.state.last_revision += 1
        self.state.status = race.new_race(str(workflow.uuid4()), source.uid, source.generation, candidates,
                                          revision=self.state.last_revision, draining=draining)
        self.state.applied_generation = {}
        winner = None
        if source.adopt:
            matched = match_clusters(spec, registrations(source)).candidates
            winner = adoption.single_start(self.state.status, matched, self.state.inventory)
            adoption.mark(self.state.status, self.state.inventory, True)
        plan_id = self.state.status.plan.id if self.state.status.plan else ""
        if winner is not None:
            found = self.state.inventory[winner]
            self.state.why[winner] = "adopted: its standing InferenceService serves already"
            self.record.notes.append(EventNote(reason="PlacementAdopted", message=(
                f"plan {plan_id}: the InferenceService standing in {winner} serves already "
                f"({found.replicas} admitted Instances): adopted as the home, nothing races")))
        else:
            self.state.why.update({c.cluster: "fanned out, waiting for its Kueue to admit" for c in candidates})
            self.record.notes.append(EventNote(reason="PlacementRacing", message=(
                f"plan {plan_id}: the derived service races in "
                f"{', '.join(c.cluster for c in candidates) or 'no member yet'}; the first to admit it wins")))
        # Persisted before any member is written: a crash from here on resumes this plan.
        await self.record.persist(force=True)

    async def run_race(self, ref: ObjectRef, source: PlacementSource) -> None:
        status = self.state.status
        names = race.race_copies(status)
        # Every member at once: a race's pass costs one member round trip, not one per candidate.
        await asyncio.gather(*(self.members.apply(ref, source, cluster) for cluster in names
                               if self.state.applied_generation.get(cluster) != source.generation))
        looked = [cluster for cluster in names if cluster in self.state.applied_generation]
        seen_all = await asyncio.gather(*(self.members.observe(ref, source, cluster) for cluster in looked))
        admitted = {cluster for cluster, seen in zip(looked, seen_all, strict=True) if seen.admitted}
        winner = race.first_admitted(names, admitted)
        if winner is None or status.plan is None:
            return
        status.plan.winner = winner
        status.cluster = winner
        row = race.row(status, winner)
        if row is not None:
            row.phase = CandidatePlacementPhase.ADMITTED
            if row.allocation is not None:
                row.allocation.race_candidate = False  # a retained winner carries no cleanup permission
        for loser in race.losers(status):
            self.state.why[loser] = (f"lost the race: {winner} admitted first" if loser not in admitted
                                     else f"lost the race: also admitted, but {winner} is earlier in race order")
        self.state.why[winner] = "won the race: admitted first"
        self.record.notes.append(EventNote(reason="PlacementWinner", message=(
            f"{winner} admitted the derived service first; "
            + (f"{', '.join(race.losers(status))} lose and are removed" if race.losers(status) else "no other copy"))))
        # The commit: persisted before any loser is deleted.
        await self.record.persist(force=True)

    async def settle(self, ref: ObjectRef, source: PlacementSource) -> timedelta | None:
        """The winner is committed: remove the losers and drained homes, keep the winner's copy current,
        mirror its endpoint, and judge whether it is lost. Returns how soon the grace of a failing
        winner runs out (None when it is not failing)."""
        status = self.state.status
        assert status.plan is not None and status.plan.winner
        winner = status.plan.winner
        losers = race.losers(status)
        current = self.state.applied_generation.get(winner) == source.generation
        if current and workflow.patched(SETTLE_PATCH):
            # The winner is committed (persisted) already: reading it again needs no wait for the
            # losers' deletion, so both go out in one workflow task.
            removed, seen = await asyncio.gather(
                asyncio.gather(*(self.members.remove(ref, source, loser) for loser in losers)),
                self.members.observe(ref, source, winner))
            self._say_removed(losers, removed)
            await self.members.remove_drained(ref, source)
        else:
            removed = await asyncio.gather(*(self.members.remove(ref, source, loser) for loser in losers))
            self._say_removed(losers, removed)
            await self.members.remove_drained(ref, source)
            if not current:
                await self.members.apply(ref, source, winner)  # a spec change reaches the serving home
            seen = await self.members.observe(ref, source, winner)
        row = race.row(status, winner)
        if row is not None and seen.reachable and seen.exists:
            row.phase = CandidatePlacementPhase.PLACED if seen.admitted else CandidatePlacementPhase.ADMITTED
            if seen.admitted and seen.url:
                row.endpoint = seen.url
                if status.endpoint != seen.url:
                    self.record.notes.append(EventNote(reason="PlacementEndpoint",
                                                 message=f"served from {winner} at {seen.url}"))
                status.endpoint = seen.url
        if not race.losers(status) and status.phase != "Placed":
            self.record.notes.append(EventNote(reason="Placed", message=f"placed in {winner}"))
        return await self._judge_winner(ref, source, winner, seen)

    def _say_removed(self, losers: list[str], removed: list[bool]) -> None:
        gone = [loser for loser, done in zip(losers, removed, strict=True) if done]
        if gone:  # one Event for the pass, however many members raced
            self.record.notes.append(EventNote(reason="PlacementLoserRemoved", message=(
                f"the race {'copy' if len(gone) == 1 else 'copies'} in {', '.join(gone)} "
                f"{'was' if len(gone) == 1 else 'were'} deleted")))

    async def _judge_winner(self, ref: ObjectRef, source: PlacementSource, winner: str,
                            seen: MemberObservation) -> timedelta | None:
        """A winner unreadable, or whose copy is gone, for the observation grace is lost: its row is
        drained and a new race starts (plan revision + 1). The grace is a durable timer: the pass
        after it runs out decides, whichever worker runs it."""
        now = workflow.now()
        if seen.reachable and not seen.exists:
            self.state.missing_since = self.state.missing_since or now
        elif seen.reachable:
            self.state.missing_since = None
        row = race.row(self.state.status, winner)
        since = self.state.missing_since if seen.reachable else (row.observation_failing_since if row else None)
        if since is None:
            return None
        defaults = await workflow.execute_activity_method(OperatorConfigActivities.read, **options.KUBE)
        grace = parse_duration(defaults.placement.observation_grace)
        left = since + grace - now
        if left > timedelta(0):
            return left
        why = ("its derived service is gone" if seen.reachable
               else f"it cannot be read ({seen.reason}: {seen.message})")
        self.record.notes.append(EventNote(type="Warning", reason="PlacementWinnerLost", message=(
            f"{winner} lost: {why} since {since.isoformat()}, past the observation grace of "
            f"{defaults.placement.observation_grace}; a new race starts")))
        self.state.why[winner] = f"lost as the winner: {why}"
        old = self.state.status
        # Every listed copy is withdrawn: the lost winner's, a loser or probe not yet deleted, and the
        # homes already draining (none is dropped from the list before its copy is gone).
        drained = [race.drain(r) for r in old.candidates or []]
        self.state.status = PlacementStatus(plan=None, candidates=drained)
        self.state.missing_since = None
        self.state.inventory = {}  # what stood before is stale: the new race's members are read again
        self.state.applied_generation.pop(winner, None)
        self.state.last_revision = max(self.state.last_revision, (old.plan.revision or 1) if old.plan else 1)
        return timedelta(0)
