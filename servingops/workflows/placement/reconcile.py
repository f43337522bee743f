"""One pass of the placement workflow: act on one read of the source by its spec.placement (withdraw
everything when it was removed; All / Split / SplitByCapacity spread over their homes; Single races,
settles, adopts and moves), and say when to look again. The steps live beside it: `race_steps`,
`spread_steps`, `move_steps`, `adoption_steps`, every member call in `members`, what is written on the
source in `record`.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import ValidationError
from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.placement import race
from servingops.workflows.placement.adoption_steps import AdoptionSteps
from servingops.workflows.placement.members import FINALIZER, Members
from servingops.workflows.placement.move_steps import MoveSteps
from servingops.workflows.placement.race_steps import PLACED_POLL, RACE_POLL, RaceSteps
from servingops.workflows.placement.record import PlacementRecord
from servingops.workflows.placement.spread_steps import SpreadSteps
from servingops.workflows.placement.state import PlacementState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import FinalizerChange, KubernetesActivities
    from servingops.activities.placement.types import PlacementSource
    from servingops.api_models.ome.enums import PlacementMode
    from servingops.api_models.ome.placement import PlacementSpec
    from servingops.api_models.ome.placement_status import PlacementStatus
    from servingops.api_models.refs import ObjectRef

PENDING_POLL = timedelta(seconds=15)
"""How often a service with no candidate looks again (a WorkloadCluster becomes Ready: no event of
the source says so)."""
CAPACITY_PATCH = "placement-split-by-capacity"
"""SplitByCapacity reads each member's capacity (before: held CapacityUnknown, no activity)."""


class PlacementPass:
    """The steps of one run of the placement workflow, over the state the run keeps."""

    def __init__(self, ref: ObjectRef, state: PlacementState) -> None:
        self.state = state
        self.record = PlacementRecord(ref, state)
        self.members = Members(self.record)
        self.adoption_steps = AdoptionSteps(self.record, self.members)
        self.race_steps = RaceSteps(self.record, self.members)
        self.move_steps = MoveSteps(self.record, self.members)
        self.spread_steps = SpreadSteps(self.record, self.members, self.adoption_steps)

    async def reconcile(self, ref: ObjectRef, source: PlacementSource) -> timedelta | None:
        """Act on one read of the source; returns when to look again (None: only on a change)."""
        if source.placement is None:
            left = await self.members.withdraw_all(ref, source)
            if left:
                self.record.hold("NotPlaced", "spec.placement was removed: withdrawing the derived services; "
                                              f"not yet from {', '.join(left)} (tried again)")
                return PENDING_POLL
            self.record.hold("NotPlaced", "spec.placement was removed: the derived services were withdrawn")
            if FINALIZER in source.finalizers:
                await workflow.execute_activity_method(
                    KubernetesActivities.remove_finalizer, FinalizerChange(ref=ref, finalizer=FINALIZER),
                    **options.KUBE)
            return None
        try:
            spec = PlacementSpec.model_validate(source.placement)
        except ValidationError as exc:
            # The CRD's schema and CEL refuse bad placements at apply time; one that got past them (an
            # older CRD) is said, never a failed workflow task.
            self.record.hold("InvalidPlacement",
                             f"spec.placement cannot be read: {exc.errors()[0].get('msg', exc)}")
            return None
        plan = self.state.status.plan
        if plan is not None and plan.mode != spec.mode:
            # A new mode: every home of the old plan is drained; the new plan starts from nothing.
            self.state.last_revision = max(self.state.last_revision, plan.revision or 1)
            self.state.status = PlacementStatus(candidates=[race.drain(r) for r in self.state.status.candidates or []])
            self.state.applied_generation = {}
        if spec.mode == PlacementMode.SPLIT_BY_CAPACITY and not workflow.patched(CAPACITY_PATCH):
            # Runs that began before members' capacity was read keep holding (replay).
            self.record.hold("CapacityUnknown",
                             "SplitByCapacity divides by the capacity each member verifiably reports, and no member "
                             "reports capacity to this release: the last plan is kept (none yet), nothing is written")
            return None
        if source.adopt:
            await self.adoption_steps.inventory(ref, source, spec)
        elif self.state.inventory:
            self.adoption_steps.abandon_adoption()
        if spec.mode != PlacementMode.SINGLE:
            return await self.spread_steps.spread_homes(ref, source, spec)
        grace_left: timedelta | None = None
        for _ in range(2):  # a winner lost in this pass races again in the same pass
            plan = self.state.status.plan
            if plan is None or plan.source_uid != source.uid:
                candidates = self.race_steps.match(spec, source)
                if not candidates:
                    return PENDING_POLL
                await self.race_steps.start_race(ref, source, candidates, spec)
            if not (self.state.status.plan and self.state.status.plan.winner):
                await self.race_steps.run_race(ref, source)
            if not (self.state.status.plan and self.state.status.plan.winner):
                break
            grace_left = await self.race_steps.settle(ref, source)
            if grace_left != timedelta(0):
                break
        moving = False
        status = self.state.status
        if source.adopt and status.plan is not None:
            await self.adoption_steps.adopt_single(ref, source, spec)
            status = self.state.status
        if grace_left is None and status.plan is not None and status.plan.winner and not race.losers(status):
            moving = await self.move_steps.move_if_unmatched(ref, source, spec)
        self.state.status.phase = race.phase(self.state.status)
        poll = PLACED_POLL if self.state.status.phase == "Placed" and not moving else RACE_POLL
        if grace_left:
            poll = min(poll, max(grace_left, timedelta(seconds=1)))
        return poll

    def resume(self, source: PlacementSource) -> None:
        """A fresh run for a source whose plan is already in status: take it up where it stands."""
        carried = PlacementStatus.model_validate(source.status_placement)
        if carried.plan is not None and carried.plan.source_uid == source.uid:
            self.state.status = carried
            self.state.last_revision = max(self.state.last_revision, carried.plan.revision or 0)
            self.state.why = {c.cluster or "": "resumed from status" for c in carried.candidates or []}
