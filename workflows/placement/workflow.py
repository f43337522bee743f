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
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from pydantic import ValidationError
from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.entity import EntitySignals, EntityState
from servingops.workflows.placement import adoption, move, race, spread
from servingops.workflows.placement.allocation import Components, KeepLast, allocate
from servingops.workflows.placement.held import Held
from servingops.workflows.placement.matching import Candidate, Registration, match_clusters
from servingops.workflows.placement.readiness import ready_condition
from servingops.workflows.visibility import Visibility

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote, FinalizerChange, KubernetesActivities, StatusPatch
    from servingops.activities.operator_config import OperatorConfigActivities
    from servingops.activities.placement.activities import PlacementActivities
    from servingops.activities.placement.types import (
        ApplyMemberInput,
        CapacityInput,
        MemberInventory,
        MemberObservation,
        MemberTarget,
        MemberWrite,
        PlacementSource,
        SourceInput,
    )
    from servingops.api_models.contract import StartObject, WorkflowType
    from servingops.api_models.durations import parse_duration
    from servingops.api_models.ome.enums import CandidatePlacementPhase, ComponentType, PlacementMode
    from servingops.api_models.ome.placement import (
        PlacementComponentFloor,
        PlacementExecutionPolicy,
        PlacementSpec,
    )
    from servingops.api_models.ome.placement_status import (
        CandidatePlacement,
        PlacementCapacitySample,
        PlacementSingleMoveStatus,
        PlacementStatus,
    )
    from servingops.api_models.refs import ConditionUpdate, ObjectRef

PLACEMENT_QUEUE = "ome-placement"
"""The Kueue LocalQueue a derived service's pods name in every member (a component's own
kueue.x-k8s.io/queue-name label in the source wins)."""
RACE_POLL = timedelta(seconds=2)
"""How often a race looks at its candidates: admission is a member's decision no event here reports."""
PLACED_POLL = timedelta(seconds=30)
"""How often a placed service looks at its winner (its endpoint, its counts)."""
PENDING_POLL = timedelta(seconds=15)
"""How often a service with no candidate looks again (a WorkloadCluster becomes Ready: no event of
the source says so)."""
MAX_PASSES_PER_RUN = 500
SETTLE_PATCH = "placement-settle-together"
"""A committed winner is read again together with the losers' deletion (before: after it)."""
SPREAD_PATCH = "placement-spread-concurrent"
"""All / Split keep their homes at once (before: one home after the other)."""
CAPACITY_PATCH = "placement-split-by-capacity"
"""SplitByCapacity reads each member's capacity (before: held CapacityUnknown, no activity)."""
DEMAND_PATCH = "placement-demand-in-digest"
"""SplitByCapacity's input digest covers each member's demand fingerprint: a changed rendering is a new plan
revision carrying the contract the member checks (before: only whole replicas counted, and the member, once it
enforced the contract, would hold a copy whose spec changed under an unchanged plan)."""
FINALIZER = "servingops.io/placement"
"""On the source while derived copies may exist: its deletion waits for their withdrawal."""
WITHDRAW_RETRY_FIRST = timedelta(seconds=5)
WITHDRAW_RETRY_MAX = timedelta(minutes=5)
"""A withdrawal a member refused (unreachable) is tried again after 5 s, doubling up to 5 min."""


class PlacementState(EntityState):
    status: PlacementStatus = PlacementStatus()
    """What status.placement says (written after every decision)."""
    why: dict[str, str] = {}
    """Per candidate, the last thing that held it back or why it lost: the race query's answer."""
    applied_generation: dict[str, int] = {}
    """Per candidate, the source generation its derived service was last applied from."""
    held: str | None = None
    """Why nothing races (no candidate, a held match, a mode not served), as said on the object."""
    trouble: dict[str, str] = {}
    """Per member, what its last failed read or write answered (cleared when it answers again)."""
    missing_since: datetime | None = None
    """When the winner's member last answered that the derived service is not there (reachable, but
    gone); unreachable is the winner row's observationFailingSince."""
    move_note: str | None = None
    """What was last said about a Single move that cannot go on (said once per distinct message)."""
    inventory: dict[str, MemberInventory] = {}
    """Adoption: per matched member, what its inventory found (not identified: pending)."""
    last_revision: int = 0
    """The revision of the latest plan accepted for this source (0: none), so revisions only grow."""
    passes: int = 0


class PlacementInput(StartObject):
    carried: PlacementState | None = None


def _registrations(source: PlacementSource) -> list[Registration]:
    """The WorkloadClusters of one read, as matching takes them."""
    return [Registration(name=r.name, uid=r.uid, labels=r.labels, ready=r.ready) for r in source.registrations]


@workflow.defn(name=WorkflowType.PLACEMENT)
class PlacementWorkflow(EntitySignals[PlacementState]):
    def __init__(self) -> None:
        self.state = PlacementState()
        self._acted_generation = -1
        self._notes: list[EventNote] = []
        self._written: dict[str, object] | None = None
        """status.placement as last written by this run (a write only when it moved)."""
        self._held_this_pass = False
        """Whether the pass under way held the service: a pass that did not clears `state.held`."""
        self._written_ready: ConditionUpdate | None = None
        """The Ready condition as last written by this run."""

    @workflow.run
    async def run(self, start: PlacementInput) -> None:
        ref = start.ref
        if start.carried is not None:
            self.adopt(start.carried)
        visibility = Visibility("Placement", ref.namespace, ref.name)
        while True:
            self.state.passes += 1
            source = await workflow.execute_activity_method(
                PlacementActivities.read_source, SourceInput(isvc=ref), **options.KUBE)
            if source is None or source.deleting or self.state.deleting:
                visibility.publish("Deleting")
                await self._withdraw_until_done(ref, source)
                return
            if source.placement is not None and FINALIZER not in source.finalizers:
                # Before any member is written: from here on a delete waits for the withdrawal.
                await workflow.execute_activity_method(
                    KubernetesActivities.ensure_finalizer, FinalizerChange(ref=ref, finalizer=FINALIZER),
                    **options.KUBE)
            self._acted_generation = source.generation
            if self.state.status.plan is None and source.status_placement:
                self._resume(source)
            self._held_this_pass = False
            poll = await self._reconcile(ref, source)
            if not self._held_this_pass:
                # Whatever held the service before is over: the phase the UI shows is the plan's again.
                self.state.held = None
            await self._persist(ref)
            visibility.publish("Pending" if self.state.held else (self.state.status.phase or "Pending"))
            if workflow.info().is_continue_as_new_suggested() or self.state.passes >= MAX_PASSES_PER_RUN:
                await workflow.wait_condition(workflow.all_handlers_finished)
                self.state.passes = 0
                workflow.continue_as_new(PlacementInput(ref=ref, carried=self.state))
            try:
                await workflow.wait_condition(
                    lambda: self.state.deleting or self.state.generation > self._acted_generation,
                    timeout=poll)
            except TimeoutError:
                pass

    # -- one pass -----------------------------------------------------------------------------

    async def _reconcile(self, ref: ObjectRef, source: PlacementSource) -> timedelta | None:
        """Act on one read of the source; returns when to look again (None: only on a change)."""
        if source.placement is None:
            left = await self._withdraw_all(ref, source)
            if left:
                self._hold("NotPlaced", "spec.placement was removed: withdrawing the derived services; "
                                        f"not yet from {', '.join(left)} (tried again)")
                return PENDING_POLL
            self._hold("NotPlaced", "spec.placement was removed: the derived services were withdrawn")
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
            self._hold("InvalidPlacement", f"spec.placement cannot be read: {exc.errors()[0].get('msg', exc)}")
            return None
        plan = self.state.status.plan
        if plan is not None and plan.mode != spec.mode:
            # A new mode: every home of the old plan is drained; the new plan starts from nothing.
            self.state.last_revision = max(self.state.last_revision, plan.revision or 1)
            self.state.status = PlacementStatus(candidates=[race.drain(r) for r in self.state.status.candidates or []])
            self.state.applied_generation = {}
        if spec.mode == PlacementMode.SPLIT_BY_CAPACITY and not workflow.patched(CAPACITY_PATCH):
            # Runs that began before members' capacity was read keep holding (replay).
            self._hold("CapacityUnknown",
                       "SplitByCapacity divides by the capacity each member verifiably reports, and no member "
                       "reports capacity to this release: the last plan is kept (none yet), nothing is written")
            return None
        if source.adopt:
            await self._inventory(ref, source, spec)
        elif self.state.inventory:
            self._abandon_adoption()
        if spec.mode != PlacementMode.SINGLE:
            return await self._spread(ref, source, spec)
        grace_left: timedelta | None = None
        for _ in range(2):  # a winner lost in this pass races again in the same pass
            plan = self.state.status.plan
            if plan is None or plan.source_uid != source.uid:
                candidates = self._match(spec, source)
                if not candidates:
                    return PENDING_POLL
                await self._start_race(ref, source, candidates, spec)
            if not (self.state.status.plan and self.state.status.plan.winner):
                await self._race(ref, source)
            if not (self.state.status.plan and self.state.status.plan.winner):
                break
            grace_left = await self._settle(ref, source)
            if grace_left != timedelta(0):
                break
        moving = False
        status = self.state.status
        if source.adopt and status.plan is not None:
            await self._adopt_single(ref, source, spec)
            status = self.state.status
        if grace_left is None and status.plan is not None and status.plan.winner and not race.losers(status):
            moving = await self._move(ref, source, spec)
        self.state.status.phase = race.phase(self.state.status)
        poll = PLACED_POLL if self.state.status.phase == "Placed" and not moving else RACE_POLL
        if grace_left:
            poll = min(poll, max(grace_left, timedelta(seconds=1)))
        return poll

    def _match(self, spec: PlacementSpec, source: PlacementSource) -> list[Candidate]:
        result = match_clusters(spec, _registrations(source))
        if result.held is not None:
            self._hold(result.held.reason, result.held.message)
            return []
        order = list(result.race_order())
        if not order:
            unready = [c.cluster for c in result.candidates]
            self._hold("NoReadyCandidate", (
                f"no Ready WorkloadCluster matches spec.placement (matched but not Ready: {', '.join(unready)})"
                if unready else "no WorkloadCluster matches spec.placement"))
            return []
        return order

    def _hold(self, reason: str, message: str) -> None:
        self._held_this_pass = True
        said = f"{reason}: {message}"
        if said != self.state.held:
            self._notes.append(EventNote(type="Warning", reason=reason, message=message))
            self.state.held = said

    async def _start_race(self, ref: ObjectRef, source: PlacementSource, candidates: list[Candidate],
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
            matched = match_clusters(spec, _registrations(source)).candidates
            winner = adoption.single_start(self.state.status, matched, self.state.inventory)
            adoption.mark(self.state.status, self.state.inventory, True)
        plan_id = self.state.status.plan.id if self.state.status.plan else ""
        if winner is not None:
            found = self.state.inventory[winner]
            self.state.why[winner] = "adopted: its standing InferenceService serves already"
            self._notes.append(EventNote(reason="PlacementAdopted", message=(
                f"plan {plan_id}: the InferenceService standing in {winner} serves already "
                f"({found.replicas} admitted Instances): adopted as the home, nothing races")))
        else:
            self.state.why.update({c.cluster: "fanned out, waiting for its Kueue to admit" for c in candidates})
            self._notes.append(EventNote(reason="PlacementRacing", message=(
                f"plan {plan_id}: the derived service races in "
                f"{', '.join(c.cluster for c in candidates) or 'no member yet'}; the first to admit it wins")))
        # Persisted before any member is written: a crash from here on resumes this plan.
        await self._persist(ref, force=True)

    async def _race(self, ref: ObjectRef, source: PlacementSource) -> None:
        status = self.state.status
        names = race.race_copies(status)
        # Every member at once: a race's pass costs one member round trip, not one per candidate.
        await asyncio.gather(*(self._apply(ref, source, cluster) for cluster in names
                               if self.state.applied_generation.get(cluster) != source.generation))
        looked = [cluster for cluster in names if cluster in self.state.applied_generation]
        seen_all = await asyncio.gather(*(self._observe(ref, source, cluster) for cluster in looked))
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
        self._notes.append(EventNote(reason="PlacementWinner", message=(
            f"{winner} admitted the derived service first; "
            + (f"{', '.join(race.losers(status))} lose and are removed" if race.losers(status) else "no other copy"))))
        # The commit: persisted before any loser is deleted.
        await self._persist(ref, force=True)

    async def _settle(self, ref: ObjectRef, source: PlacementSource) -> timedelta | None:
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
                asyncio.gather(*(self._remove(ref, source, loser) for loser in losers)),
                self._observe(ref, source, winner))
            self._say_removed(losers, removed)
            await self._remove_drained(ref, source)
        else:
            removed = await asyncio.gather(*(self._remove(ref, source, loser) for loser in losers))
            self._say_removed(losers, removed)
            await self._remove_drained(ref, source)
            if not current:
                await self._apply(ref, source, winner)  # a spec change reaches the serving home
            seen = await self._observe(ref, source, winner)
        row = race.row(status, winner)
        if row is not None and seen.reachable and seen.exists:
            row.phase = CandidatePlacementPhase.PLACED if seen.admitted else CandidatePlacementPhase.ADMITTED
            if seen.admitted and seen.url:
                row.endpoint = seen.url
                if status.endpoint != seen.url:
                    self._notes.append(EventNote(reason="PlacementEndpoint",
                                                 message=f"served from {winner} at {seen.url}"))
                status.endpoint = seen.url
        if not race.losers(status) and status.phase != "Placed":
            self._notes.append(EventNote(reason="Placed", message=f"placed in {winner}"))
        return await self._judge_winner(ref, source, winner, seen)

    def _say_removed(self, losers: list[str], removed: list[bool]) -> None:
        gone = [loser for loser, done in zip(losers, removed, strict=True) if done]
        if gone:  # one Event for the pass, however many members raced
            self._notes.append(EventNote(reason="PlacementLoserRemoved", message=(
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
        self._notes.append(EventNote(type="Warning", reason="PlacementWinnerLost", message=(
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

    # -- adoption (workflows/placement/adoption.py holds the rules) ------------------------------

    async def _inventory(self, ref: ObjectRef, source: PlacementSource, spec: PlacementSpec) -> None:
        """Read what stands in the members this pass needs: every matched one before a plan (afresh), the
        pending ones after it (and members matched since, once nothing is pending). All at once."""
        matches = match_clusters(spec, _registrations(source))
        if matches.held is not None:
            return
        plan = self.state.status.plan
        planned = plan is not None and plan.source_uid == source.uid
        # Afresh before a plan; after it, a member no longer matched (deregistered, relabelled) is no
        # longer waited for.
        self.state.inventory = {c: e for c, e in self.state.inventory.items() if planned and c in matches.names()}
        target = MemberTarget(cluster="", namespace=ref.namespace or "", name=ref.name, source_uid=source.uid)
        # Twice at most: the pending members, then (once none is) the members matched meanwhile, so a plan
        # never takes a home whose member was not read.
        for _ in range(2):
            clusters = adoption.to_read(self.state.inventory, matches.names(), planned)
            if not clusters:
                return
            found = await asyncio.gather(*(workflow.execute_activity_method(
                PlacementActivities.inventory_member, target.model_copy(update={"cluster": cluster}),
                **options.MEMBER) for cluster in clusters))
            self._inventoried(ref, clusters, found)
            planned = True  # every matched member has been read once now
            if adoption.pending(self.state.inventory):
                return

    def _inventoried(self, ref: ObjectRef, clusters: list[str], found: list[MemberInventory]) -> None:
        for cluster, entry in zip(clusters, found, strict=True):
            self.state.inventory[cluster] = entry
            if not entry.identified:
                self.state.why[cluster] = f"inventory pending: {entry.reason}"
                self._member_trouble(cluster, MemberWrite(done=False, reason=entry.reason, message=(
                    f"{entry.message}; its inventory is pending: nothing is written there and it counts as no "
                    "free capacity until it answers")))
                continue
            self.state.trouble.pop(cluster, None)
            if entry.standing_uid:
                origin = (f"derived from an earlier source ({entry.standing_origin})" if entry.standing_origin
                          else "not derived by placement")
                self._notes.append(EventNote(reason="PlacementInventoried", message=(
                    f"{cluster} has InferenceService {ref.namespace}/{ref.name} standing, {origin}, with "
                    f"{entry.replicas} admitted Instances: a home the service already has (uid "
                    f"{entry.standing_uid}), adopted if the plan keeps it, else withdrawn once the plan's homes "
                    "serve")))

    def _abandon_adoption(self) -> None:
        """The annotation was removed: what adoption listed but never wrote is not ours, so those rows go
        (their objects stay as they are), pending flags and the adoption digest are cleared."""
        status = self.state.status
        kept = adoption.held_clusters(status)
        status.candidates = [r for r in status.candidates or []
                             if r.cluster in kept or race.draining(r) or r.applied_plan_id] or None
        adoption.mark(status, {}, False)
        self.state.inventory = {}

    async def _adopt_single(self, ref: ObjectRef, source: PlacementSource, spec: PlacementSpec) -> None:
        """A Single plan under adoption, each pass: members whose inventory answered since join the race (no
        winner yet, Ready) or stay listed as standing homes; standing copies the plan does not keep are
        drained once the winner serves."""
        status = self.state.status
        ready = {c.cluster for c in match_clusters(spec, _registrations(source)).race_order()}
        joined = adoption.single_pass(status, self.state.inventory, ready)
        for cluster in joined:
            self.state.why[cluster] = "inventoried: races now"
        adoption.mark(status, self.state.inventory, True)
        await self._drain_retained(ref, source)

    async def _drain_retained(self, ref: ObjectRef, source: PlacementSource) -> None:
        """Standing copies the accepted plan does not keep: once its homes serve (phase Placed; a Single
        winner serving), withdrawn and deleted. Until then they keep serving: no gap is made by adopting."""
        status = self.state.status
        winner_row = race.row(status, status.plan.winner) if status.plan and status.plan.winner else None
        serving = (winner_row is not None and winner_row.phase == CandidatePlacementPhase.PLACED) if (
            status.plan is not None and status.plan.mode == PlacementMode.SINGLE) else status.phase == "Placed"
        retained = adoption.retained(status, self.state.inventory)
        if not (serving and retained):
            return
        for cluster in retained:
            self._withdraw_probe(cluster, "a standing copy the plan does not keep: its homes serve now")
        self._notes.append(EventNote(reason="PlacementStandingDrained", message=(
            f"the plan's homes serve: the standing {'copy' if len(retained) == 1 else 'copies'} in "
            f"{', '.join(retained)} {'is' if len(retained) == 1 else 'are'} withdrawn")))
        await self._persist(ref, force=True)  # the drain before the deletion
        await self._remove_drained(ref, source)

    # -- Single moves (workflows/placement/move.py holds the rules) ------------------------------

    async def _move(self, ref: ObjectRef, source: PlacementSource, spec: PlacementSpec) -> bool:
        """The committed winner is healthy: move it when spec.placement no longer matches it. Returns
        whether a move is under way (it is looked at on the race's poll)."""
        status = self.state.status
        plan = status.plan
        assert plan is not None and plan.winner
        winner = plan.winner
        matches = match_clusters(spec, _registrations(source))
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
            self._notes.append(EventNote(reason="PlacementMoveStarted", message=(
                f"{winner} no longer matches spec.placement: a replacement home is probed one at a time "
                f"while {winner} keeps serving")))
            await self._persist(ref, force=True)
        assert plan.single_move is not None
        live = move.probes(status)
        admitted, urls = set(), {}
        for cluster in live:
            if self.state.applied_generation.get(cluster) != source.generation:
                await self._apply(ref, source, cluster)
            seen = await self._observe(ref, source, cluster)
            if seen.admitted:
                admitted.add(cluster)
                row = race.row(status, cluster)
                if row is not None:
                    row.phase = CandidatePlacementPhase.ADMITTED
                if seen.url:
                    urls[cluster] = seen.url
        selected = plan.single_move.selected
        if selected is not None and selected not in live:
            selected = plan.single_move.selected = None  # withdrawn meanwhile: nominate again
        if selected is None and (selected := move.first_selected(live, admitted)) is not None:
            plan.single_move.selected = selected
            for other in [c for c in live if c != selected]:
                self._withdraw_probe(other, f"lost to {selected}, admitted first")
            self.state.why[selected] = "admitted as the replacement: takes over once it serves"
            self._notes.append(EventNote(reason="PlacementReplacementSelected", message=(
                f"{selected} admitted the derived service; it takes over from {winner} once it serves")))
            await self._persist(ref, force=True)  # before any other probe is deleted
        if selected is not None:
            url = urls.get(selected)
            if url is None:
                return True
            await self._hand_over(ref, winner, selected, url)
            return True
        timeout = parse_duration(spec.replacement_timeout) if spec.replacement_timeout else None
        now = workflow.now()
        for cluster in live:
            row = race.row(status, cluster)
            if row is not None and move.expired(row, timeout, now):
                self._withdraw_probe(cluster, f"not admitted within replacementTimeout {spec.replacement_timeout}")
                self._notes.append(EventNote(type="Warning", reason="PlacementProbeRotated", message=(
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
            await self._persist(ref)
            return True
        candidate = next(c for c in matches.race_order() if c.cluster == name)
        allocation = candidate.allocation_status()
        allocation.race_candidate, allocation.replacement_started_at = True, now
        status.candidates = [*(status.candidates or []), CandidatePlacement(
            cluster=name, phase=CandidatePlacementPhase.ADMITTING, allocation=allocation, observation_known=False)]
        plan.single_move.cursor = name
        self.state.why[name] = "probed as the replacement, waiting for its Kueue to admit"
        self._notes.append(EventNote(reason="PlacementProbe", message=(
            f"probing {name} as the replacement for {winner}"
            + (f" (replacementTimeout {spec.replacement_timeout})" if timeout else " (kept until it admits)"))))
        await self._persist(ref, force=True)  # the nomination before the member is written
        await self._apply(ref, source, name)
        return True

    def _withdraw_probe(self, cluster: str, why: str) -> None:
        status = self.state.status
        status.candidates = [race.drain(r) if r.cluster == cluster else r for r in status.candidates or []]
        self.state.why[cluster] = f"withdrawn: {why}"

    def _say_once(self, reason: str, message: str) -> None:
        """A Warning about a move that cannot go on while the winner keeps serving (not a hold: the
        phase stays Placed), said once per distinct message."""
        said = f"{reason}: {message}"
        if self.state.move_note != said:
            self.state.move_note = said
            self._notes.append(EventNote(type="Warning", reason=reason, message=message))

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
        self._notes.append(EventNote(reason="PlacementMoved", message=(
            f"{new} serves at {url}: it is the home now; the copy in {old} is withdrawn")))
        await self._persist(ref, force=True)

    async def _cancel_move(self, ref: ObjectRef, winner: str) -> bool:
        """The winner matches (again): a move under way is called off, its probes withdrawn; the move's
        record goes once no other copy is listed."""
        status = self.state.status
        assert status.plan is not None
        if status.plan.single_move is None:
            return False
        live = move.probes(status)
        for cluster in live:
            self._withdraw_probe(cluster, f"the move was called off: {winner} matches spec.placement again")
        if live:
            self._notes.append(EventNote(reason="PlacementMoveCancelled", message=(
                f"{winner} matches spec.placement again: the move is called off, probes in "
                f"{', '.join(live)} withdrawn")))
        if not move.others(status):
            status.plan.single_move = None
            self.state.move_note = None
        await self._persist(ref)
        return status.plan.single_move is not None

    async def _remove_drained(self, ref: ObjectRef, source: PlacementSource) -> None:
        """Delete the copies of the homes a plan no longer holds (drained rows), all at once."""
        drained = [r.cluster or "" for r in self.state.status.candidates or [] if race.draining(r)]
        removed = await asyncio.gather(*(self._remove(ref, source, cluster) for cluster in drained))
        for cluster in [c for c, done in zip(drained, removed, strict=True) if done]:
            self._notes.append(EventNote(reason="PlacementHomeDrained", message=(
                f"the copy in {cluster}, a home the plan no longer holds, was deleted")))

    async def _remove(self, ref: ObjectRef, source: PlacementSource, cluster: str) -> bool:
        """Delete the copy in `cluster` and drop its row; True when its copy is gone (the caller says so),
        False when the member could not be written (said as member trouble, tried again next pass)."""
        result = await workflow.execute_activity_method(
            PlacementActivities.delete_member, self._target(ref, source, cluster), **options.MEMBER)
        if not (result.done or result.reason == "RegistrationNotFound"):
            self._member_trouble(cluster, result)
            return False
        status = self.state.status
        status.candidates = [c for c in status.candidates or [] if c.cluster != cluster]
        self.state.applied_generation.pop(cluster, None)
        self.state.trouble.pop(cluster, None)
        if not result.done:
            # A deregistered member cannot be reached any more: its row goes, said once.
            self._notes.append(EventNote(type="Warning", reason="MemberRegistrationNotFound",
                                         message=result.message or cluster))
            return False
        return True

    # -- All / Split ----------------------------------------------------------------------------

    async def _spread(self, ref: ObjectRef, source: PlacementSource, spec: PlacementSpec) -> timedelta:
        """All / Split: accept a new plan when its inputs moved (persisted before any member write),
        then keep every home's copy at its floors, observe each, and delete what no home holds."""
        # Allocated over every matching registration, Ready or not: a plan follows the fleet's labels and
        # weights, never a connection that flaps (a home that cannot be written keeps its share, said as
        # member trouble, until it answers again).
        matches = match_clusters(spec, _registrations(source))
        components = Components(
            engine_min_replicas=source.min_replicas.get("engine"), decoder="decoder" in source.components,
            router="router" in source.components, router_min_replicas=source.min_replicas.get("router"))
        samples: dict[str, PlacementCapacitySample] = {}
        capacities: dict[str, int | None] | None = None
        unknown: dict[str, str] = {}
        if spec.mode == PlacementMode.SPLIT_BY_CAPACITY and matches.held is None:
            samples, unknown = await self._capacities(ref, source, [c.cluster for c in matches.candidates])
            for cluster in adoption.pending(self.state.inventory) if source.adopt else []:
                # Seed: inventoryPending "prevents unknown standing resources from becoming free capacity".
                samples.pop(cluster, None)
                unknown[cluster] = f"{adoption.HELD_REASON} (what stands there is not known yet)"
            capacities = {cluster: sample.replicas for cluster, sample in samples.items()}
        demands = None
        if samples and workflow.patched(DEMAND_PATCH):
            demands = {cluster: sample.demand_fingerprint or "" for cluster, sample in samples.items()}
        result = allocate(spec, matches, components, capacities, demands)
        if isinstance(result, KeepLast) and unknown:
            # Which member, and why: the operator reads this on the object, not in a log.
            result = KeepLast(Held(result.held.reason, "no verified capacity from " + "; ".join(
                f"{cluster}: {why}" for cluster, why in unknown.items())))
        status = self.state.status
        # Seed: homeInputsPending "holds movement when current full-policy inputs cannot be verified,
        # while retaining the last accepted desired floors": a home whose capacity is unknown.
        for row in status.candidates or []:
            if row.allocation is not None and not race.draining(row):
                row.allocation.home_inputs_pending = (row.cluster in unknown) or None
        held = result.held
        plan_accepted = False
        added = [] if isinstance(result, KeepLast) or held is not None or not source.adopt else adoption.expansion(
            status, [h.cluster for h in result.homes if h.desired_replicas > 0], self.state.inventory)
        if added:
            self._hold(adoption.HELD_REASON, adoption.held_message(added, self.state.inventory))
        elif held is None and not isinstance(result, KeepLast) and not matches.candidates:
            self._hold("NoMatchingCluster", "no WorkloadCluster matches spec.placement")
        elif held is not None:
            self._hold(held.reason, held.message + ("; the last accepted plan is kept" if status.plan else ""))
        elif not isinstance(result, KeepLast) and (status.plan is None or status.plan.input_digest
                                                   != result.input_digest or status.plan.source_uid != source.uid):
            self.state.held = None
            revision = self.state.last_revision = max(
                self.state.last_revision, (status.plan.revision or 0) if status.plan else 0) + 1
            self.state.status = status = spread.accepted(result, str(workflow.uuid4()), revision, source.uid,
                                                         source.generation, status, samples)
            shares = ", ".join(f"{h.cluster}={h.desired_replicas}" for h in result.homes)
            self._notes.append(EventNote(reason="PlacementPlanned", message=(
                f"plan revision {revision} ({spec.mode.value}): {shares or 'no home'}; "
                f"{result.unassigned_replicas} of {result.requested_replicas} unassigned")))
            plan_accepted = True
        if source.adopt:
            adoption.mark(status, self.state.inventory, True)
        if plan_accepted:
            await self._persist(ref, force=True)  # before any member is written
        # A home whose inventory is pending keeps its floor but gets no write until it is known.
        homes = [r for r in status.candidates or [] if spread.holds(r)
                 and not (r.allocation is not None and r.allocation.inventory_pending)]
        if workflow.patched(SPREAD_PATCH):
            # Every home at once: a pass costs one member round trip, not one per home.
            await asyncio.gather(*(self._keep_home(ref, source, status, row) for row in homes))
        else:
            for row in homes:
                await self._keep_home(ref, source, status, row)
        for row in [r for r in status.candidates or [] if not spread.holds(r) and not race.draining(r)
                    and r.applied_plan_id]:
            # A candidate whose share went to zero: its copy goes, the row stays (weight 0, unassigned).
            result_ = await workflow.execute_activity_method(
                PlacementActivities.delete_member, self._target(ref, source, row.cluster or ""), **options.MEMBER)
            if result_.done:
                row.applied_plan_id, row.endpoint = None, None
                self.state.applied_generation.pop(row.cluster or "", None)
        await self._remove_drained(ref, source)
        before = status.phase
        status.phase = spread.phase(status)
        if status.phase == "Placed" and before != "Placed":
            self._notes.append(EventNote(reason="Placed", message="every home admitted its floor: " + ", ".join(
                f"{r.cluster}={r.admitted_replicas}" for r in status.candidates or [] if spread.holds(r))))
        if source.adopt:
            await self._drain_retained(ref, source)
            status = self.state.status
        return PLACED_POLL if status.phase == "Placed" else RACE_POLL

    async def _keep_home(self, ref: ObjectRef, source: PlacementSource, status: PlacementStatus,
                         row: CandidatePlacement) -> None:
        """One home of an All / Split plan: its copy at the plan's floors, then observed and marked."""
        cluster = row.cluster or ""
        if self.state.applied_generation.get(cluster) != source.generation or (
                status.plan is not None and row.applied_plan_id != status.plan.id):
            await self._apply(ref, source, cluster, spread.floors(row))
        seen = await self._observe(ref, source, cluster)
        if seen.reachable and seen.exists:
            row.endpoint = seen.url if seen.url and (row.admitted_replicas or 0) > 0 else None
        spread.mark(row)

    async def _capacities(self, ref: ObjectRef, source: PlacementSource,
                          clusters: list[str]) -> tuple[dict[str, PlacementCapacitySample], dict[str, str]]:
        """SplitByCapacity: every matched member's verified whole-replica capacity for this source, read
        at once; and, for each member that has none, who and why."""
        readings = await asyncio.gather(*(workflow.execute_activity_method(
            PlacementActivities.read_capacity,
            CapacityInput(target=self._target(ref, source, cluster), source=ref, queue=PLACEMENT_QUEUE),
            **options.MEMBER) for cluster in clusters))
        samples: dict[str, PlacementCapacitySample] = {}
        unknown: dict[str, str] = {}
        for cluster, reading in zip(clusters, readings, strict=True):
            if reading.sample is not None and reading.sample.replicas is not None:
                samples[cluster] = reading.sample
                self.state.why[cluster] = f"capacity {reading.sample.replicas} whole replicas"
            else:
                unknown[cluster] = f"{reading.reason} ({reading.message})"
                self.state.why[cluster] = f"capacity unknown: {reading.reason}"
        return samples, unknown

    # -- members ------------------------------------------------------------------------------

    def _target(self, ref: ObjectRef, source: PlacementSource, cluster: str) -> MemberTarget:
        found = adoption.standing(self.state.inventory, cluster) if source.adopt else None
        return MemberTarget(cluster=cluster, namespace=ref.namespace or "", name=ref.name, source_uid=source.uid,
                            adopt_uid=found.standing_uid if found is not None else None)

    async def _apply(self, ref: ObjectRef, source: PlacementSource, cluster: str,
                     floors: dict[str, int] | None = None) -> None:
        status = self.state.status
        assert status.plan is not None
        row = race.row(status, cluster)
        execution = PlacementExecutionPolicy(
            plan_id=status.plan.id or "", revision=status.plan.revision or 1, source_uid=source.uid,
            cluster_uid=(row.allocation.cluster_uid if row and row.allocation else None) or "", pause_surge=False,
            demand=(row.allocation.capacity.demand_contract if row and row.allocation and row.allocation.capacity
                    else None),
            replica_floors=[PlacementComponentFloor(component=ComponentType(c), replicas=n)
                            for c, n in floors.items()] if floors else None)
        result = await workflow.execute_activity_method(
            PlacementActivities.apply_member,
            ApplyMemberInput(target=self._target(ref, source, cluster), source=ref,
                             execution=execution.to_api(), queue=PLACEMENT_QUEUE, replica_floors=floors),
            **options.MEMBER)
        if result.done:
            self.state.trouble.pop(cluster, None)
            self.state.applied_generation[cluster] = source.generation
            if row is not None:
                row.applied_plan_id = status.plan.id
        else:
            self._member_trouble(cluster, result)

    async def _observe(self, ref: ObjectRef, source: PlacementSource, cluster: str) -> MemberObservation:
        seen = await workflow.execute_activity_method(
            PlacementActivities.observe_member, self._target(ref, source, cluster), **options.MEMBER)
        row = race.row(self.state.status, cluster)
        if row is None:
            return seen
        if not seen.reachable:
            row.observation_known = False
            row.observation_failing_since = row.observation_failing_since or workflow.now()
            self._member_trouble(cluster, MemberWrite(done=False, reason=seen.reason, message=seen.message))
            return seen
        row.observation_known, row.observation_failing_since = True, None
        self.state.trouble.pop(cluster, None)
        # Seed: each mirror is "set only when" the source references a policy of its kind.
        row.rollout = seen.rollout if source.rollout_policies and seen.exists else None
        row.autoscaling = seen.autoscaling if source.autoscaler_policy_components and seen.exists else None
        counted = seen.counted
        row.admitted_replicas = counted.admitted if counted else 0
        row.ready_replicas = counted.ready if counted else 0
        if not seen.exists:
            self.state.why[cluster] = "its derived service is not there (yet)"
        elif seen.admitted:
            if not (self.state.status.plan and self.state.status.plan.winner):
                row.phase = CandidatePlacementPhase.ADMITTED
        elif not (self.state.status.plan and self.state.status.plan.winner):
            waiting = [c.component for c in seen.components if c.admitted == 0]
            self.state.why[cluster] = f"waiting for its Kueue to admit {', '.join(waiting) or 'the service'}"
        return seen

    def _member_trouble(self, cluster: str, result: MemberWrite) -> None:
        """A member that could not be written or read: said once (a Warning Event) until it changes or
        the member answers again; `why` keeps the race's own story."""
        said = f"{result.reason}: {result.message}"
        if self.state.trouble.get(cluster) != said:
            self.state.trouble[cluster] = said
            self._notes.append(EventNote(type="Warning", reason=f"Member{result.reason or 'Unavailable'}",
                                         message=result.message or cluster))

    async def _withdraw_all(self, ref: ObjectRef, source: PlacementSource | None) -> list[str]:
        """Delete every derived copy this workflow knows of (the source is going or no longer placed);
        returns the members that could not be reached, whose rows stay (draining) to be tried again."""
        uid = source.uid if source is not None else (ref.uid or "")
        clusters = [row.cluster or "" for row in self.state.status.candidates or []]
        results = await asyncio.gather(*(workflow.execute_activity_method(
            PlacementActivities.delete_member, MemberTarget(cluster=cluster, namespace=ref.namespace or "",
                                                            name=ref.name, source_uid=uid), **options.MEMBER)
            for cluster in clusters))
        left = []
        for cluster, result in zip(clusters, results, strict=True):
            # A deregistered member is given up: its WorkloadCluster's deletion is the operator's say-so.
            if not result.done and result.reason != "RegistrationNotFound":
                self._member_trouble(cluster, result)
                left.append(cluster)
        if left:
            self.state.status = PlacementStatus(candidates=[
                race.drain(r) for r in self.state.status.candidates or [] if r.cluster in left])
        elif self.state.status.plan is not None or self.state.status.candidates:
            self.state.status = PlacementStatus()
            self.state.applied_generation = {}
            if source is not None and not source.deleting:
                await self._persist(ref, force=True, clear=True)
        return left

    async def _withdraw_until_done(self, ref: ObjectRef, source: PlacementSource | None) -> None:
        """The source is being deleted (or is gone): withdraw every copy, trying unreachable members
        again with backoff and saying which on the object, then let the source go (the finalizer)."""
        wait, said = WITHDRAW_RETRY_FIRST, None
        while left := await self._withdraw_all(ref, source):
            if source is not None and said != left:
                said = left
                troubles = "; ".join(f"{c}: {self.state.trouble.get(c, 'unreachable')}" for c in left)
                self._notes.append(EventNote(type="Warning", reason="PlacementWithdrawalPending", message=(
                    f"the source is deleted, but its derived service is still in {', '.join(left)} ({troubles}); "
                    "tried again with backoff up to every 5m (deleting a WorkloadCluster gives it up)")))
                await self._persist(ref)
            await workflow.sleep(wait)
            wait = min(wait * 2, WITHDRAW_RETRY_MAX)
        if source is not None and FINALIZER in source.finalizers:
            await workflow.execute_activity_method(
                KubernetesActivities.remove_finalizer, FinalizerChange(ref=ref, finalizer=FINALIZER), **options.KUBE)

    def _resume(self, source: PlacementSource) -> None:
        """A fresh run for a source whose plan is already in status: take it up where it stands."""
        carried = PlacementStatus.model_validate(source.status_placement)
        if carried.plan is not None and carried.plan.source_uid == source.uid:
            self.state.status = carried
            self.state.last_revision = max(self.state.last_revision, carried.plan.revision or 0)
            self.state.why = {c.cluster or "": "resumed from status" for c in carried.candidates or []}

    # -- status ---------------------------------------------------------------------------------

    async def _persist(self, ref: ObjectRef, *, force: bool = False, clear: bool = False) -> None:
        # Ready is this workflow's while the source is placed; a cleared placement hands it back to
        # the InferenceService workflow (it renders the service here again).
        ready = None
        if not clear:
            ready = ready_condition(self.state.status, self.state.held)
        if not (force or self._notes or self._dirty() or ready != self._written_ready):
            return
        body: dict[str, object] = {"placement": None if clear else self.state.status.to_api()}
        self._written, self._written_ready = self.state.status.to_api(), ready
        notes, self._notes = self._notes, []
        await workflow.execute_activity_method(
            KubernetesActivities.patch_status,
            StatusPatch(ref=ref, status=body, conditions=[ready] if ready else [], events=notes), **options.KUBE)

    def _dirty(self) -> bool:
        return self._written != self.state.status.to_api()
