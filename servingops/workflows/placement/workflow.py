"""PlacementWorkflow: one per InferenceService with spec.placement (id placement/<ns>/<isvc>/<uid>).
The writer of the source's status.placement; the derived InferenceServices in the member clusters
are its own.

Single mode, the admission race (workflows/placement/race.py holds its rules):
1. match the WorkloadClusters (workflows/placement/matching.py); the race order is the Ready ones
   by name;
2. persist the plan (id, revision, inputDigest, sourceUID, every candidate a race copy) in status
   BEFORE any member is written;
3. apply the derived InferenceService to every candidate (same name and namespace, origin label,
   execution annotation, its pods in the member's Kueue LocalQueue);
4. observe admission in each (every component admitted by Kueue, confirmed by live pods);
5. persist plan.winner: the first admitted in race order;
6. only then delete the losers, each removed from the candidates once gone;
7. Placed; the winner's status.url mirrored as the endpoint once it has one.

A crash between any two steps replays to the same point: the plan and the winner are in this
workflow's state and in status before anything acts on them, so a restarted worker never races
twice nor deletes the winner. A new run of this workflow for the same source (after a reset)
resumes from the plan persisted in status.

Deletion: the source carries the finalizer servingops.io/placement from before the first member
write, so a deleted source stays (Deleting) until every derived copy is withdrawn: a member that
cannot be reached is retried with backoff and said in a Warning naming it, never forgotten (deleting
its WorkloadCluster is how an operator gives a member up). The same withdrawal runs when
spec.placement is removed.

A winner unreadable, or without its copy, past placement.observationGrace (a durable timer) is lost:
drained, and a new race at plan revision + 1.

All, Split and SplitByCapacity (workflows/placement/spread.py): the allocation plan (allocation.py)
over the matches, accepted when its inputs move and persisted before any member write; every home
runs its floors; dropped homes drained. SplitByCapacity weighs each member by the whole replicas its
own capacity report holds for this source (placement.read_capacity, every pass); one member without
a verified report keeps the last plan (CapacityUnknown, naming the member and why).

Single moves (workflows/placement/move.py holds the rules): a committed, healthy winner that
spec.placement no longer matches keeps serving while one replacement probe at a time is tried, in
name order after plan.singleMove.cursor; a probe past replacementTimeout is withdrawn and the next
one nominated; the first admitted probe is singleMove.selected and becomes the winner once it serves
(endpoint), persisted before the old home is withdrawn. A spec change that still matches the winner
is applied to it in place.

Adoption (workflows/placement/adoption.py holds the rules), for a source annotated
servingops.io/placement-adopt: "true": every matched member is inventoried before a plan is accepted; a
standing copy of the service there is a home it already has (originalReplicas: its admitted Instances),
adopted by uid instead of refused as NameInUse; one that already serves wins a Single plan at once. A member
that cannot be read is inventoryPending (nothing written there, no free capacity) and the plan's
adoptionDigest holds the initial intent until it answers; a changed intent that would add homes meanwhile is
held (InventoryPending). Standing copies the plan does not keep serve until its homes do, then are drained.

The loop is here; one pass is workflows/placement/reconcile.py, which drives the steps beside it
(race_steps, spread_steps, move_steps, adoption_steps, members, record). It runs its own loop rather
than workflows/entity.py's: each pass reads the source first, and a delete is what that read (or
the state) says, so the withdrawal runs with the source as it was read.
"""

from __future__ import annotations

from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.entity import EntitySignals
from servingops.workflows.placement import routing_gate
from servingops.workflows.placement.members import FINALIZER
from servingops.workflows.placement.reconcile import PlacementPass
from servingops.workflows.placement.state import PlacementInput, PlacementState
from servingops.workflows.visibility import Visibility

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import FinalizerChange, KubernetesActivities
    from servingops.activities.placement.activities import PlacementActivities
    from servingops.activities.placement.types import SourceInput
    from servingops.api_models.contract import Signal, WorkflowType
    from servingops.api_models.contract.routing import Publication

MAX_PASSES_PER_RUN = 500


@workflow.defn(name=WorkflowType.PLACEMENT)
class PlacementWorkflow(EntitySignals[PlacementState]):
    def __init__(self) -> None:
        self.state = PlacementState()
        self._acted_generation = -1
        self._publication_news = False

    @workflow.signal(name=Signal.PUBLICATION)
    def publication(self, publication: Publication) -> None:
        """The routing workflow's word on what the global route may send requests to (routing_gate.py)."""
        if routing_gate.newer(self.state.publication, publication):
            self.state.publication = publication
            self._publication_news = True

    @workflow.run
    async def run(self, start: PlacementInput) -> None:
        ref = start.ref
        if start.carried is not None:
            self.adopt(start.carried)
        visibility = Visibility("Placement", ref.namespace, ref.name)
        placement = PlacementPass(ref, self.state)
        record = placement.record
        while True:
            self.state.passes += 1
            source = await workflow.execute_activity_method(
                PlacementActivities.read_source, SourceInput(isvc=ref), **options.KUBE)
            if source is None or source.deleting or self.state.deleting:
                visibility.publish("Deleting")
                await placement.members.withdraw_until_done(ref, source)
                return
            if source.placement is not None and FINALIZER not in source.finalizers:
                # Before any member is written: from here on a delete waits for the withdrawal.
                await workflow.execute_activity_method(
                    KubernetesActivities.ensure_finalizer, FinalizerChange(ref=ref, finalizer=FINALIZER),
                    **options.KUBE)
            self._acted_generation = source.generation
            if self.state.status.plan is None and source.status_placement:
                placement.resume(source)
            record.held_this_pass = False
            self._publication_news = False
            poll = await placement.reconcile(ref, source)
            if not record.held_this_pass:
                # Whatever held the service before is over: the phase the UI shows is the plan's again.
                self.state.held = None
            await record.persist()
            visibility.publish("Pending" if self.state.held else (self.state.status.phase or "Pending"))
            if workflow.info().is_continue_as_new_suggested() or self.state.passes >= MAX_PASSES_PER_RUN:
                await workflow.wait_condition(workflow.all_handlers_finished)
                self.state.passes = 0
                workflow.continue_as_new(PlacementInput(ref=ref, carried=self.state))
            # A removal the global route held waits for the routing workflow's next word, not for the poll.
            try:
                await workflow.wait_condition(
                    lambda: self.state.deleting or self.state.generation > self._acted_generation
                    or (bool(self.state.awaiting_publication) and self._publication_news), timeout=poll)
            except TimeoutError:
                pass
