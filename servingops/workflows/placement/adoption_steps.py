"""Adoption, as steps of the placement workflow (workflows/placement/adoption.py holds its pure rules),
for a source annotated servingops.io/placement-adopt: "true": inventory what stands in the matched
members before a plan takes them, let a Single race take members whose inventory answered since, and
drain the standing copies the plan does not keep once its homes serve.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.placement import adoption, race
from servingops.workflows.placement.matching import match_clusters
from servingops.workflows.placement.members import Members, registrations
from servingops.workflows.placement.record import PlacementRecord
from servingops.workflows.placement.state import PlacementState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote
    from servingops.activities.placement.activities import PlacementActivities
    from servingops.activities.placement.types import MemberInventory, MemberTarget, MemberWrite, PlacementSource
    from servingops.api_models.ome.enums import CandidatePlacementPhase, PlacementMode
    from servingops.api_models.ome.placement import PlacementSpec
    from servingops.api_models.refs import ObjectRef


class AdoptionSteps:
    def __init__(self, record: PlacementRecord, members: Members) -> None:
        self.record = record
        self.members = members
        self.state: PlacementState = record.state

    async def inventory(self, ref: ObjectRef, source: PlacementSource, spec: PlacementSpec) -> None:
        """Read what stands in the members this pass needs: every matched one before a plan (afresh), the
        pending ones after it (and members matched since, once nothing is pending). All at once."""
        matches = match_clusters(spec, registrations(source))
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
                self.members.trouble(cluster, MemberWrite(done=False, reason=entry.reason, message=(
                    f"{entry.message}; its inventory is pending: nothing is written there and it counts as no "
                    "free capacity until it answers")))
                continue
            self.state.trouble.pop(cluster, None)
            if entry.standing_uid:
                origin = (f"derived from an earlier source ({entry.standing_origin})" if entry.standing_origin
                          else "not derived by placement")
                self.record.notes.append(EventNote(reason="PlacementInventoried", message=(
                    f"{cluster} has InferenceService {ref.namespace}/{ref.name} standing, {origin}, with "
                    f"{entry.replicas} admitted Instances: a home the service already has (uid "
                    f"{entry.standing_uid}), adopted if the plan keeps it, else withdrawn once the plan's homes "
                    "serve")))

    def abandon_adoption(self) -> None:
        """The annotation was removed: what adoption listed but never wrote is not ours, so those rows go
        (their objects stay as they are), pending flags and the adoption digest are cleared."""
        status = self.state.status
        kept = adoption.held_clusters(status)
        status.candidates = [r for r in status.candidates or []
                             if r.cluster in kept or race.draining(r) or r.applied_plan_id] or None
        adoption.mark(status, {}, False)
        self.state.inventory = {}

    async def adopt_single(self, ref: ObjectRef, source: PlacementSource, spec: PlacementSpec) -> None:
        """A Single plan under adoption, each pass: members whose inventory answered since join the race (no
        winner yet, Ready) or stay listed as standing homes; standing copies the plan does not keep are
        drained once the winner serves."""
        status = self.state.status
        ready = {c.cluster for c in match_clusters(spec, registrations(source)).race_order()}
        joined = adoption.single_pass(status, self.state.inventory, ready)
        for cluster in joined:
            self.state.why[cluster] = "inventoried: races now"
        adoption.mark(status, self.state.inventory, True)
        await self.drain_retained(ref, source)

    async def drain_retained(self, ref: ObjectRef, source: PlacementSource) -> None:
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
            self.members.withdraw_probe(cluster, "a standing copy the plan does not keep: its homes serve now")
        self.record.notes.append(EventNote(reason="PlacementStandingDrained", message=(
            f"the plan's homes serve: the standing {'copy' if len(retained) == 1 else 'copies'} in "
            f"{', '.join(retained)} {'is' if len(retained) == 1 else 'are'} withdrawn")))
        await self.record.persist(force=True)  # the drain before the deletion
        await self.members.remove_drained(ref, source)
