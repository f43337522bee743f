"""All, Split and SplitByCapacity, as steps of the placement workflow (workflows/placement/spread.py and
allocation.py hold their pure rules): accept an allocation plan when its inputs move (persisted before
any member write), keep every home's copy at its floors and observe it, delete the copies of homes the
plan no longer holds. SplitByCapacity reads each member's verified capacity first.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.placement import adoption, race, spread
from servingops.workflows.placement.adoption_steps import AdoptionSteps
from servingops.workflows.placement.allocation import Components, KeepLast, allocate
from servingops.workflows.placement.held import Held
from servingops.workflows.placement.matching import match_clusters
from servingops.workflows.placement.members import PLACEMENT_QUEUE, Members, gone, registrations
from servingops.workflows.placement.race_steps import PLACED_POLL, RACE_POLL
from servingops.workflows.placement.record import PlacementRecord
from servingops.workflows.placement.state import PlacementState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote
    from servingops.activities.placement.activities import PlacementActivities
    from servingops.activities.placement.types import CapacityInput, PlacementSource
    from servingops.api_models.ome.enums import PlacementMode, PlacementPhase
    from servingops.api_models.ome.placement import PlacementSpec
    from servingops.api_models.ome.placement_status import CandidatePlacement, PlacementCapacitySample, PlacementStatus
    from servingops.api_models.refs import ObjectRef

SPREAD_PATCH = "placement-spread-concurrent"
"""All / Split keep their homes at once (before: one home after the other)."""
ZERO_SHARE_PATCH = "placement-zero-share-withdrawn"
"""A new plan's rows keep appliedPlanID (the plan each member acknowledged), so a home whose share drops to zero
is known to hold a copy: once the plan's homes serve it leaves the route, and its copy is deleted once the route
leaves it out (before: its row started without appliedPlanID and its copy was never deleted)."""
DEMAND_PATCH = "placement-demand-in-digest"
"""SplitByCapacity's input digest covers each member's demand fingerprint: a changed rendering is a new plan
revision carrying the contract the member checks (before: only whole replicas counted, and the member, once it
enforced the contract, would hold a copy whose spec changed under an unchanged plan)."""


class SpreadSteps:
    def __init__(self, record: PlacementRecord, members: Members, adoption_steps: AdoptionSteps) -> None:
        self.record = record
        self.members = members
        self.adoption_steps = adoption_steps
        self.state: PlacementState = record.state

    async def spread_homes(self, ref: ObjectRef, source: PlacementSource, spec: PlacementSpec) -> timedelta:
        """All / Split: accept a new plan when its inputs moved (persisted before any member write),
        then keep every home's copy at its floors, observe each, and delete what no home holds."""
        # Allocated over every matching registration, Ready or not: a plan follows the fleet's labels and
        # weights, never a connection that flaps (a home that cannot be written keeps its share, said as
        # member trouble, until it answers again).
        matches = match_clusters(spec, registrations(source))
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
            self.record.hold(adoption.HELD_REASON, adoption.held_message(added, self.state.inventory))
        elif held is None and not isinstance(result, KeepLast) and not matches.candidates:
            self.record.hold("NoMatchingCluster", "no WorkloadCluster matches spec.placement")
        elif held is not None:
            self.record.hold(held.reason, held.message + ("; the last accepted plan is kept" if status.plan else ""))
        elif not isinstance(result, KeepLast) and (status.plan is None or status.plan.input_digest
                                                   != result.input_digest or status.plan.source_uid != source.uid):
            self.state.held = None
            revision = self.state.last_revision = max(
                self.state.last_revision, (status.plan.revision or 0) if status.plan else 0) + 1
            copies = self._copies(status) if workflow.patched(ZERO_SHARE_PATCH) else None
            self.state.status = status = spread.accepted(result, str(workflow.uuid4()), revision, source.uid,
                                                         source.generation, status, samples, copies)
            shares = ", ".join(f"{h.cluster}={h.desired_replicas}" for h in result.homes)
            self.record.notes.append(EventNote(reason="PlacementPlanned", message=(
                f"plan revision {revision} ({spec.mode.value}): {shares or 'no home'}; "
                f"{result.unassigned_replicas} of {result.requested_replicas} unassigned")))
            plan_accepted = True
        if source.adopt:
            adoption.mark(status, self.state.inventory, True)
        if plan_accepted:
            await self.record.persist(force=True)  # before any member is written
        # A home whose inventory is pending keeps its floor but gets no write until it is known.
        homes = [r for r in status.candidates or [] if spread.holds(r)
                 and not (r.allocation is not None and r.allocation.inventory_pending)]
        if workflow.patched(SPREAD_PATCH):
            # Every home at once: a pass costs one member round trip, not one per home.
            await asyncio.gather(*(self._keep_home(ref, source, status, row) for row in homes))
        else:
            for row in homes:
                await self._keep_home(ref, source, status, row)
        await self._empty_zero_shares(ref, source, status)
        await self.members.remove_drained(ref, source)
        before = status.phase
        status.phase = spread.phase(status)
        if status.phase == "Placed" and before != "Placed":
            self.record.notes.append(EventNote(reason="Placed", message="every home admitted its floor: " + ", ".join(
                f"{r.cluster}={r.admitted_replicas}" for r in status.candidates or [] if spread.holds(r))))
        if source.adopt:
            await self.adoption_steps.drain_retained(ref, source)
            status = self.state.status
        return PLACED_POLL if status.phase == "Placed" else RACE_POLL

    async def _keep_home(self, ref: ObjectRef, source: PlacementSource, status: PlacementStatus,
                         row: CandidatePlacement) -> None:
        """One home of an All / Split plan: its copy at the plan's floors, then observed and marked."""
        cluster = row.cluster or ""
        if self.state.applied_generation.get(cluster) != source.generation or (
                status.plan is not None and row.applied_plan_id != status.plan.id):
            await self.members.apply(ref, source, cluster, spread.floors(row))
        seen = await self.members.observe(ref, source, cluster)
        if seen.reachable and seen.exists:
            row.endpoint = seen.url if seen.url and (row.admitted_replicas or 0) > 0 else None
        spread.mark(row)

    def _copies(self, status: PlacementStatus) -> set[str]:
        """The members known to hold this source's copy: acknowledged a plan, or applied by this workflow."""
        return {r.cluster or "" for r in status.candidates or [] if r.applied_plan_id} | set(
            self.state.applied_generation)

    async def _empty_zero_shares(self, ref: ObjectRef, source: PlacementSource, status: PlacementStatus) -> None:
        """Candidates whose share went to zero and whose member still holds a copy: once the plan's homes serve,
        each leaves the route and its copy goes once the route leaves that home out (routing_gate), all at once;
        the rows stay (nothing desired)."""
        # A member whose inventory is pending gets no write (a delete is one) until it is known.
        rows = [r for r in status.candidates or [] if spread.copy_left(r, self.state.applied_generation)
                and not (r.allocation is not None and r.allocation.inventory_pending)]
        before = [r for r in status.candidates or [] if not spread.holds(r) and not race.draining(r)
                  and r.applied_plan_id]
        if not (rows or before):
            return
        if not workflow.patched(ZERO_SHARE_PATCH):
            # Runs recorded before the patch, as they ran: only a row with appliedPlanID, and no zero share had
            # one there (its row started without it), so a zero share's copy stayed.
            for row in before:
                result = await workflow.execute_activity_method(
                    PlacementActivities.delete_member, self.members.target(ref, source, row.cluster or ""),
                    **options.MEMBER)
                if result.done:
                    row.applied_plan_id, row.endpoint = None, None
                    self.state.applied_generation.pop(row.cluster or "", None)
            return
        if spread.phase(status) != PlacementPhase.PLACED:
            # They serve until the plan's homes do (as standing copies under adoption): lowering a share opens
            # no gap. With no home at all (a total weight of zero) nothing takes their traffic over: they stay.
            return
        for row in rows:
            # Off the route first; the delete waits until the route agrees (seed: "a zero current floor does
            # not authorize deletion before traffic drains").
            row.endpoint = None
        answers = await asyncio.gather(*(self.members.delete_copy(ref, source, r.cluster or "") for r in rows))
        for row, answer in zip(rows, answers, strict=True):
            if gone(answer):
                spread.emptied(row)
            if answer is not None and answer.done:
                self.record.notes.append(EventNote(reason="PlacementShareWithdrawn", message=(
                    f"the copy in {row.cluster}, a home whose share the plan lowered to 0, was deleted")))

    async def _capacities(self, ref: ObjectRef, source: PlacementSource,
                          clusters: list[str]) -> tuple[dict[str, PlacementCapacitySample], dict[str, str]]:
        """SplitByCapacity: every matched member's verified whole-replica capacity for this source, read
        at once; and, for each member that has none, who and why."""
        readings = await asyncio.gather(*(workflow.execute_activity_method(
            PlacementActivities.read_capacity,
            CapacityInput(target=self.members.target(ref, source, cluster), source=ref, queue=PLACEMENT_QUEUE),
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
