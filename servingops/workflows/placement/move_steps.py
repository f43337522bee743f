"""Single moves, as steps of the placement workflow (workflows/placement/move.py holds their pure
rules): a committed, healthy winner that spec.placement no longer matches keeps serving while one
replacement probe at a time is tried; the first admitted probe takes over once it serves (persisted
before the old home is withdrawn); a winner that matches again calls the move off.

"Serves" is the seed's "while it becomes ready and routable" (PlacementSingleMoveStatus.selected): the
replacement's derived service has a URL and every component has a Ready replica. A URL alone is not enough:
the member writes it with the route, before any pod is Ready, and withdrawing the old home then would leave
the TrafficMap nothing to route to (every request refused until the replacement's pods came up; seen in CI
as 320 requests answered 503 in the one throttle period of the global route that weighted no home).
"""

from __future__ import annotations

from temporalio import workflow

from servingops.workflows.placement import adoption, move, race
from servingops.workflows.placement.matching import match_clusters
from servingops.workflows.placement.members import Members, registrations
from servingops.workflows.placement.record import PlacementRecord
from servingops.workflows.placement.state import PlacementState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote
    from servingops.activities.placement.types import PlacementSource
    from servingops.api_models.durations import parse_duration
    from servingops.api_models.ome.enums import CandidatePlacementPhase
    from servingops.api_models.ome.placement import PlacementSpec
    from servingops.api_models.ome.placement_status import CandidatePlacement, PlacementSingleMoveStatus
    from servingops.api_models.refs import ObjectRef


HANDOVER_READY_PATCH = "placement-move-hands-over-when-ready"
"""Histories recorded before it handed over on the replacement's URL alone."""


class MoveSteps:
    def __init__(self, record: PlacementRecord, members: Members) -> None:
        self.record = record
        self.members = members
        self.state: PlacementState = record.state

    async def move_if_unmatched(self, ref: ObjectRef, source: PlacementSource, spec: PlacementSpec) -> bool:
        """The committed winner is healthy: move it when spec.placement no longer matches it. Returns
        whether a move is under way (it is looked at on the race's poll)."""
        status = self.state.status
        plan = status.plan
        assert plan is not None and plan.winner
        winner = plan.winner
        matches = match_clusters(spec, registrations(source))
        if matches.held is not None:
            self._say_once(matches.held.reason, matches.held.message + f"; {winner} keeps serving")
            return move.moving(status)
        if winner in matches.names():
            return await self._cancel_move(ref, winner)
        if source.adopt and (waiting := adoption.pending(self.state.inventory)):
            # A changed intent cannot expand an incomplete inventory: no probe until it is complete.
            self._say_once(adoption.HELD_REASON, (
                f"{winner} no longer matches spec.placement, but the standing homes of {', '.join(waiting)} are "
                f"not inventoried yet: no replacement is probed until they answer; {winner} keeps serving"))
            return move.moving(status)
        if plan.single_move is None:
            plan.single_move = PlacementSingleMoveStatus()
            self.record.notes.append(EventNote(reason="PlacementMoveStarted", message=(
                f"{winner} no longer matches spec.placement: a replacement home is probed one at a time "
                f"while {winner} keeps serving")))
            await self.record.persist(force=True)
        assert plan.single_move is not None
        live = move.probes(status)
        admitted, urls, pods_ready = set(), {}, set()
        for cluster in live:
            if self.state.applied_generation.get(cluster) != source.generation:
                await self.members.apply(ref, source, cluster)
            seen = await self.members.observe(ref, source, cluster)
            if seen.admitted:
                admitted.add(cluster)
                row = race.row(status, cluster)
                if row is not None:
                    row.phase = CandidatePlacementPhase.ADMITTED
                if seen.url:
                    urls[cluster] = seen.url
                if seen.components and all(c.ready > 0 for c in seen.components):
                    pods_ready.add(cluster)
        selected = plan.single_move.selected
        if selected is not None and selected not in live:
            selected = plan.single_move.selected = None  # withdrawn meanwhile: nominate again
        if selected is None and (selected := move.first_selected(live, admitted)) is not None:
            plan.single_move.selected = selected
            for other in [c for c in live if c != selected]:
                self.members.withdraw_probe(other, f"lost to {selected}, admitted first")
            self.state.why[selected] = "admitted as the replacement: takes over once it serves"
            self.record.notes.append(EventNote(reason="PlacementReplacementSelected", message=(
                f"{selected} admitted the derived service; it takes over from {winner} once it serves")))
            await self.record.persist(force=True)  # before any other probe is deleted
        if selected is not None:
            url = urls.get(selected)
            if url is None:
                return True
            if selected not in pods_ready and workflow.patched(HANDOVER_READY_PATCH):
                self.state.why[selected] = ("admitted as the replacement: takes over once a replica of every "
                                            "component is Ready")
                await self.record.persist()
                return True
            await self._hand_over(ref, winner, selected, url)
            return True
        timeout = parse_duration(spec.replacement_timeout) if spec.replacement_timeout else None
        now = workflow.now()
        for cluster in live:
            row = race.row(status, cluster)
            if row is not None and move.expired(row, timeout, now):
                self.members.withdraw_probe(cluster,
                                            f"not admitted within replacementTimeout {spec.replacement_timeout}")
                self.record.notes.append(EventNote(type="Warning", reason="PlacementProbeRotated", message=(
                    f"{cluster} did not admit the derived service within replacementTimeout "
                    f"{spec.replacement_timeout}: withdrawn, the next candidate is probed")))
        ready = [c.cluster for c in matches.race_order()]
        name, reason = move.nominate(ready, winner, plan.single_move.cursor, status)
        if name is None:
            waiting = [c for c in ready if c != winner and race.row(status, c) is None]
            for cluster in waiting:
                self.state.why[cluster] = f"{reason}: a move holds one extra copy at a time, this one waits its turn"
            if reason == "NoReplacementCandidate":
                self._say_once(reason, f"{winner} no longer matches spec.placement and no other Ready "
                                       f"WorkloadCluster does: {winner} keeps serving")
            await self.record.persist()
            return True
        candidate = next(c for c in matches.race_order() if c.cluster == name)
        allocation = candidate.allocation_status()
        allocation.race_candidate, allocation.replacement_started_at = True, now
        status.candidates = [*(status.candidates or []), CandidatePlacement(
            cluster=name, phase=CandidatePlacementPhase.ADMITTING, allocation=allocation, observation_known=False)]
        plan.single_move.cursor = name
        self.state.why[name] = "probed as the replacement, waiting for its Kueue to admit"
        self.record.notes.append(EventNote(reason="PlacementProbe", message=(
            f"probing {name} as the replacement for {winner}"
            + (f" (replacementTimeout {spec.replacement_timeout})" if timeout else " (kept until it admits)"))))
        await self.record.persist(force=True)  # the nomination before the member is written
        await self.members.apply(ref, source, name)
        return True

    def _say_once(self, reason: str, message: str) -> None:
        """A Warning about a move that cannot go on while the winner keeps serving (not a hold: the
        phase stays Placed), said once per distinct message."""
        said = f"{reason}: {message}"
        if self.state.move_note != said:
            self.state.move_note = said
            self.record.notes.append(EventNote(type="Warning", reason=reason, message=message))

    async def _hand_over(self, ref: ObjectRef, old: str, new: str, url: str) -> None:
        """The selected replacement serves: it becomes the winner, persisted before the old home's copy
        is deleted (the drained row is removed by the next settle)."""
        status = self.state.status
        assert status.plan is not None and status.plan.single_move is not None
        status.plan.winner = status.cluster = new
        status.endpoint = url
        rows = []
        for row in status.candidates or []:
            if row.cluster == old:
                row = race.drain(row)
            elif row.cluster == new:
                row.phase, row.endpoint = CandidatePlacementPhase.PLACED, url
                if row.allocation is not None:
                    row.allocation.race_candidate, row.allocation.replacement_started_at = False, None
            rows.append(row)
        status.candidates = rows
        self.state.why[new] = "took over as the winner: the replacement serves"
        self.state.why[old] = f"moved away from: {new} serves now"
        self.record.notes.append(EventNote(reason="PlacementMoved", message=(
            f"{new} serves at {url}: it is the home now; the copy in {old} is withdrawn")))
        await self.record.persist(force=True)

    async def _cancel_move(self, ref: ObjectRef, winner: str) -> bool:
        """The winner matches (again): a move under way is called off, its probes withdrawn; the move's
        record goes once no other copy is listed."""
        status = self.state.status
        assert status.plan is not None
        if status.plan.single_move is None:
            return False
        live = move.probes(status)
        for cluster in live:
            self.members.withdraw_probe(cluster, f"the move was called off: {winner} matches spec.placement again")
        if live:
            self.record.notes.append(EventNote(reason="PlacementMoveCancelled", message=(
                f"{winner} matches spec.placement again: the move is called off, probes in "
                f"{', '.join(live)} withdrawn")))
        if not move.others(status):
            status.plan.single_move = None
            self.state.move_note = None
        await self.record.persist()
        return status.plan.single_move is not None
