"""Every call the placement workflow makes to a member cluster, and what it keeps about each member:
apply a derived copy at the plan's floors, observe it (admission, counts, endpoint, mirrors), delete
it, withdraw every copy when the source goes or is no longer placed; a member that cannot be written
or read is said once as member trouble and tried again on a later pass.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.placement import adoption, race, routing_gate, spread
from servingops.workflows.placement.matching import Registration
from servingops.workflows.placement.record import PlacementRecord
from servingops.workflows.placement.state import PlacementState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote, FinalizerChange, KubernetesActivities
    from servingops.activities.placement.activities import PlacementActivities
    from servingops.activities.placement.types import (
        ApplyMemberInput,
        MemberObservation,
        MemberTarget,
        MemberWrite,
        PlacementSource,
    )
    from servingops.api_models.ome.enums import CandidatePlacementPhase, ComponentType
    from servingops.api_models.ome.placement import PlacementComponentFloor, PlacementExecutionPolicy
    from servingops.api_models.ome.placement_status import PlacementStatus
    from servingops.api_models.refs import ObjectRef

PLACEMENT_QUEUE = "ome-placement"
"""The Kueue LocalQueue a derived service's pods name in every member (a component's own
kueue.x-k8s.io/queue-name label in the source wins)."""
FINALIZER = "servingops.io/placement"
"""On the source while derived copies may exist: its deletion waits for their withdrawal."""
WITHDRAW_RETRY_FIRST = timedelta(seconds=5)
WITHDRAW_RETRY_MAX = timedelta(minutes=5)
"""A withdrawal a member refused (unreachable) is tried again after 5 s, doubling up to 5 min."""
PUBLICATION_WAIT = timedelta(minutes=10)
"""How long a withdrawal of every copy (the source deleted, or no longer placed) waits for the routing
workflow to take the global route off them; past it the copies go anyway, said in a Warning (a routing
workflow that cannot publish must not keep a deleted service forever)."""


def gone(result: MemberWrite | None) -> bool:
    """A delete_member answer after which no copy is left to delete: done, or the member deregistered."""
    return result is not None and (result.done or result.reason == "RegistrationNotFound")


def registrations(source: PlacementSource) -> list[Registration]:
    """The WorkloadClusters of one read, as matching takes them."""
    return [Registration(name=r.name, uid=r.uid, labels=r.labels, ready=r.ready) for r in source.registrations]


class Members:
    def __init__(self, record: PlacementRecord) -> None:
        self.record = record
        self.state: PlacementState = record.state

    def target(self, ref: ObjectRef, source: PlacementSource, cluster: str) -> MemberTarget:
        found = adoption.standing(self.state.inventory, cluster) if source.adopt else None
        return MemberTarget(cluster=cluster, namespace=ref.namespace or "", name=ref.name, source_uid=source.uid,
                            adopt_uid=found.standing_uid if found is not None else None)

    async def apply(self, ref: ObjectRef, source: PlacementSource, cluster: str,
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
            ApplyMemberInput(target=self.target(ref, source, cluster), source=ref,
                             execution=execution.to_api(), queue=PLACEMENT_QUEUE, replica_floors=floors),
            **options.MEMBER)
        if result.done:
            self.state.trouble.pop(cluster, None)
            self.state.applied_generation[cluster] = source.generation
            if row is not None:
                row.applied_plan_id = status.plan.id
        else:
            self.trouble(cluster, result)

    async def observe(self, ref: ObjectRef, source: PlacementSource, cluster: str) -> MemberObservation:
        seen = await workflow.execute_activity_method(
            PlacementActivities.observe_member, self.target(ref, source, cluster), **options.MEMBER)
        row = race.row(self.state.status, cluster)
        if row is None:
            return seen
        if not seen.reachable:
            row.observation_known = False
            row.observation_failing_since = row.observation_failing_since or workflow.now()
            self.trouble(cluster, MemberWrite(done=False, reason=seen.reason, message=seen.message))
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

    def trouble(self, cluster: str, result: MemberWrite) -> None:
        """A member that could not be written or read: said once (a Warning Event) until it changes or
        the member answers again; `why` keeps the race's own story."""
        said = f"{result.reason}: {result.message}"
        if self.state.trouble.get(cluster) != said:
            self.state.trouble[cluster] = said
            self.record.notes.append(EventNote(type="Warning", reason=f"Member{result.reason or 'Unavailable'}",
                                         message=result.message or cluster))

    def withdraw_probe(self, cluster: str, why: str) -> None:
        status = self.state.status
        status.candidates = [race.drain(r) if r.cluster == cluster else r for r in status.candidates or []]
        self.state.why[cluster] = f"withdrawn: {why}"

    def await_publication(self, clusters: list[str]) -> None:
        """Say once which copies wait for the global route to stop sending to them."""
        fresh = [c for c in clusters if c not in self.state.awaiting_publication]
        if fresh:
            self.state.awaiting_publication = sorted({*self.state.awaiting_publication, *fresh})
            for cluster in fresh:
                self.state.why[cluster] = "its copy stays until the global route stops sending requests to it"
            self.record.notes.append(EventNote(reason="PlacementAwaitingPublication", message=(
                f"the copy in {', '.join(fresh)} is withdrawn once the global route (the TrafficMap's publication) "
                "no longer sends requests there")))

    async def remove(self, ref: ObjectRef, source: PlacementSource, cluster: str) -> bool:
        """Delete the copy in `cluster` and drop its row; True when its copy is gone (the caller says so),
        False when the member could not be written (said as member trouble, tried again next pass) or the
        global route may still send requests there (routing_gate: tried again once it says otherwise)."""
        result = await self.delete_copy(ref, source, cluster)
        if not gone(result):
            return False
        # Gone, or a deregistered member (its copy given up, said once): the row goes either way.
        status = self.state.status
        status.candidates = [c for c in status.candidates or [] if c.cluster != cluster]
        return result is not None and result.done

    async def delete_copy(self, ref: ObjectRef, source: PlacementSource, cluster: str) -> MemberWrite | None:
        """Delete the copy in `cluster`, once the global route may no longer send requests there; the row is the
        caller's. None: the route still names the member (said once, tried again once it says otherwise). A
        member that could not be written is said as member trouble; one deregistered (RegistrationNotFound)
        cannot be reached any more and its copy is given up, said once."""
        if routing_gate.routed(self.state.publication, cluster):
            self.await_publication([cluster])
            return None
        result = await workflow.execute_activity_method(
            PlacementActivities.delete_member, self.target(ref, source, cluster), **options.MEMBER)
        if not gone(result):
            self.trouble(cluster, result)
            return result
        self.state.applied_generation.pop(cluster, None)
        if cluster in self.state.awaiting_publication:
            self.state.awaiting_publication = [c for c in self.state.awaiting_publication if c != cluster]
        self.state.publication_timed_out = [c for c in self.state.publication_timed_out if c != cluster]
        self.state.trouble.pop(cluster, None)
        if not result.done:
            self.record.notes.append(EventNote(type="Warning", reason="MemberRegistrationNotFound",
                                               message=result.message or cluster))
        return result

    async def remove_drained(self, ref: ObjectRef, source: PlacementSource) -> None:
        """Delete the copies of the homes a plan no longer holds (drained rows), all at once."""
        drained = [r.cluster or "" for r in self.state.status.candidates or [] if race.draining(r)]
        # A home that waited and is a home again (a newer plan holds it) waits no more; a zero share whose
        # copy waits for the route (spread_steps) still does.
        zero = [r.cluster for r in self.state.status.candidates or []
                if spread.copy_left(r, self.state.applied_generation)]
        self.state.awaiting_publication = [c for c in self.state.awaiting_publication if c in drained or c in zero]
        removed = await asyncio.gather(*(self.remove(ref, source, cluster) for cluster in drained))
        for cluster in [c for c, done in zip(drained, removed, strict=True) if done]:
            self.record.notes.append(EventNote(reason="PlacementHomeDrained", message=(
                f"the copy in {cluster}, a home the plan no longer holds, was deleted")))

    async def withdraw_all(self, ref: ObjectRef, source: PlacementSource | None) -> list[str]:
        """Delete every derived copy this workflow knows of (the source is going or no longer placed);
        returns the members that could not be reached, whose rows stay (draining) to be tried again."""
        uid = source.uid if source is not None else (ref.uid or "")
        clusters = [row.cluster or "" for row in self.state.status.candidates or []]
        await self._unrouted(clusters)
        results = await asyncio.gather(*(workflow.execute_activity_method(
            PlacementActivities.delete_member, MemberTarget(cluster=cluster, namespace=ref.namespace or "",
                                                            name=ref.name, source_uid=uid), **options.MEMBER)
            for cluster in clusters))
        left = []
        for cluster, result in zip(clusters, results, strict=True):
            # A deregistered member is given up: its WorkloadCluster's deletion is the operator's say-so.
            if not result.done and result.reason != "RegistrationNotFound":
                self.trouble(cluster, result)
                left.append(cluster)
        if left:
            self.state.status = PlacementStatus(candidates=[
                race.drain(r) for r in self.state.status.candidates or [] if r.cluster in left])
        elif self.state.status.plan is not None or self.state.status.candidates:
            self.state.status = PlacementStatus()
            self.state.applied_generation = {}
            if source is not None and not source.deleting:
                await self.record.persist(force=True, clear=True)
        return left

    async def _unrouted(self, clusters: list[str]) -> None:
        """Wait (bounded) until the global route sends no request to any of `clusters`."""
        waiting = [c for c in routing_gate.held(self.state.publication, clusters)
                   if c not in self.state.publication_timed_out]
        if not waiting:
            return
        self.await_publication(waiting)
        await self.record.persist()
        try:
            await workflow.wait_condition(lambda: not routing_gate.held(self.state.publication, waiting),
                                          timeout=PUBLICATION_WAIT)
        except TimeoutError:
            # Waited once: a withdrawal tried again (an unreachable member) does not wait the bound again.
            self.state.publication_timed_out = sorted({*self.state.publication_timed_out, *waiting})
            self.record.notes.append(EventNote(type="Warning", reason="PlacementPublicationTimeout", message=(
                f"the global route still named {', '.join(waiting)} after {PUBLICATION_WAIT}: their copies are "
                "withdrawn anyway")))
            await self.record.persist()  # said on the object now: a deleted source may be gone before a next write

    async def withdraw_until_done(self, ref: ObjectRef, source: PlacementSource | None) -> None:
        """The source is being deleted (or is gone): withdraw every copy, trying unreachable members
        again with backoff and saying which on the object, then let the source go (the finalizer)."""
        wait, said = WITHDRAW_RETRY_FIRST, None
        while left := await self.withdraw_all(ref, source):
            if source is not None and said != left:
                said = left
                troubles = "; ".join(f"{c}: {self.state.trouble.get(c, 'unreachable')}" for c in left)
                self.record.notes.append(EventNote(type="Warning", reason="PlacementWithdrawalPending", message=(
                    f"the source is deleted, but its derived service is still in {', '.join(left)} ({troubles}); "
                    "tried again with backoff up to every 5m (deleting a WorkloadCluster gives it up)")))
                await self.record.persist()
            await workflow.sleep(wait)
            wait = min(wait * 2, WITHDRAW_RETRY_MAX)
        if source is not None and FINALIZER in source.finalizers:
            await workflow.execute_activity_method(
                KubernetesActivities.remove_finalizer, FinalizerChange(ref=ref, finalizer=FINALIZER), **options.KUBE)
