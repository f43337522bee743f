"""AcceleratorQuotaWorkflow: one per AcceleratorQuota node (id acceleratorquota/<name>/<uid>), the single
plane's quota controller for that node: it materializes the node into Kueue and is the sole writer of the
status fields observedGeneration, parent, budgets, materialization and conditions (the root's
status.capacity is AcceleratorCapacityWorkflow's).

One pass (rendering/accelerator_quota.py holds every rule):
1. `acceleratorquota.observe`: the node, the whole tree, and the node's Kueue objects.
2. The tree checks and the role-change guard. Any violation makes the node Degraded and freezes its
   output at the last-good state: no Kueue object written or deleted, status.materialization.frozen with
   the reason and when it began (kept across restarts: a new run reads it back from status), a Warning
   Event when the freeze begins, a Normal `Unfrozen` when it ends.
3. Not frozen, and the plane not already holding what the node renders: `acceleratorquota.apply` (the
   finalizer, then server-side apply of the Cohort, or the ClusterQueue and its LocalQueues, and the removal
   of what the spec no longer calls for) and a Normal `Materialized` Event.
4. status: budgets rolled up from the ClusterQueues' Kueue status, conditions Degraded, Materialized and
   Ready (Admitted when the tree checks pass, the objects are written, the flavors and the priority class
   exist and Kueue reports the ClusterQueue Active), written only when something moved.

Keeping it current: a durable timer (`interval_seconds`, 10 s by default) re-runs the pass, because other
nodes (a child's budget, a parent's deletion) and Kueue's usage move this node's status without any event
of its own. A deletion (the finalizer holds the object) ends the loop: `acceleratorquota.reap` deletes the
node's Kueue objects and releases the finalizer. History stays bounded with continue-as-new after
`passes_per_run` passes, carrying what was written.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from pydantic import BaseModel
from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.entity import EntityWorkflow, ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.capacity.accelerator_quota import AcceleratorQuotaActivities
    from servingops.activities.capacity.quota_types import (
        QuotaApplyInput,
        QuotaApplyOutput,
        QuotaEvent,
        QuotaObserveInput,
        QuotaObserveOutput,
        QuotaReapInput,
        QuotaReapOutput,
        QuotaWriteInput,
        QuotaWriteOutput,
    )
    from servingops.activities.placement.activities import PlacementActivities
    from servingops.activities.placement.quota_types import QuotaProjectInput, QuotaReleaseInput, QuotaUnprojectInput
    from servingops.api_models.conditions import merge_conditions
    from servingops.api_models.contract import StartObject, WorkflowType
    from servingops.api_models.ome.accelerator_quota import AcceleratorQuotaMaterialization, AcceleratorQuotaStatus
    from servingops.api_models.ome.enums import AcceleratorQuotaDistributionPolicy, AcceleratorQuotaRole
    from servingops.api_models.refs import ConditionUpdate
    from servingops.rendering.accelerator_quota import (
        DEFAULT_MAX_DEPTH,
        Plane,
        Problem,
        QuotaNode,
        Reason,
        budget_status,
        capacity_problems,
        conflict_problem,
        in_sync,
        removals,
        render,
        role_change_problem,
        roots_conflict,
        tree_problems,
    )
    from servingops.rendering.quota_projection import (
        ClusterOutcome,
        Shares,
        cluster_capacity,
        cluster_rows,
        projected_copy,
        shares,
        source_generation_of,
        with_per_cluster,
    )

READY, DEGRADED, MATERIALIZED = "Ready", "Degraded", "Materialized"
REAP_REFUSED = "ReapRefused"
"""Ready False while a deletion's reap is refused (the finalizer holds the node; tried again each interval)."""
SINGLE_ROOT_PATCH = "quota-single-root"
"""A member's own root wins over a projected root of another name; the projected tree there is RootConflict."""
PROJECTION_PATCH = "quota-projection"
DEREGISTRATION_PATCH = "quota-deregistration"
"""A WorkloadCluster being deregistered: its projected copies deleted (placement.release_quota_hold)."""
"""The projection onto WorkloadClusters (placement.project_quota / .unproject_quota per registered cluster):
histories recorded before it replay without those commands."""
_PLACEMENT_REASONS = {Reason.PARENT_MISSING, Reason.PARENT_CYCLE, Reason.UNREACHABLE}


class QuotaSettings(BaseModel):
    """How the controller samples; the defaults are what the bridge's start uses."""

    interval_seconds: float = 10.0
    max_depth: int = DEFAULT_MAX_DEPTH
    default_distribution: AcceleratorQuotaDistributionPolicy | None = None
    """The worker's fallback for the operator-level default distribution policy: the operator ConfigMap's
    quota.defaultDistribution (read by observe on every pass) wins when set. Both None: a leaf that names
    none is Degraded ShareUnresolved."""
    passes_per_run: int = 500


class QuotaState(ReconcileState):
    phase: str = "Pending"
    """Pending, Materialized, Frozen, Conflict, Waiting (Kueue not served), or Deleted."""
    written: AcceleratorQuotaStatus | None = None
    passes: int = 0
    applies: int = 0
    writes: int = 0
    reaped: list[str] = []
    projected_to: list[str] = []
    """The WorkloadClusters the last pass projected into (deletion removes the copies there)."""


class QuotaRun(StartObject):
    settings: QuotaSettings = QuotaSettings()
    carried: QuotaState | None = None


class Decision(BaseModel):
    """What one pass decided, before any write."""

    problems: list[Problem] = []
    """Violated invariants: Degraded, frozen."""
    conflict: Problem | None = None
    write: bool = False
    """Objects to apply (not frozen, no conflict, Kueue served, the plane not in sync)."""


def decide(node: QuotaNode, tree: list[QuotaNode], plane: Plane, settings: QuotaSettings,
           status: AcceleratorQuotaStatus | None = None, *, single_root: bool = True) -> Decision:
    """`status`: the node's status as read (the root's status.capacity is what its budgets are held to).
    `single_root`: the member's own root wins over a projected one (False only for a run from before the
    patch)."""
    problems = tree_problems(node.name, tree, max_depth=settings.max_depth,
                             default_policy=settings.default_distribution, single_root=single_root)
    if node.parent is None and status is not None and status.capacity:
        problems.extend(capacity_problems(node, status.capacity))
    guard = role_change_problem(node, plane.cluster_queue)
    if guard is not None:
        problems.append(guard)
    conflict = conflict_problem(node, plane) if plane.served else None
    write = plane.served and not problems and conflict is None and not in_sync(node, plane)
    return Decision(problems=problems, conflict=conflict, write=write)


def effective_settings(settings: QuotaSettings, observed: QuotaObserveOutput) -> QuotaSettings:
    """The settings one pass decides with: the operator ConfigMap's default distribution, when it sets one,
    over the worker's."""
    if observed.default_distribution is None:
        return settings
    return settings.model_copy(update={"default_distribution": observed.default_distribution})


def with_config_error(decision: Decision, error: str) -> Decision:
    """A ShareUnresolved that an unreadable quota block may be the cause of says so (operators read status)."""
    if not error:
        return decision
    problems = [p.model_copy(update={"message": f"{p.message} (the operator default is not read: {error})"})
                if p.reason == Reason.SHARE_UNRESOLVED else p for p in decision.problems]
    return decision.model_copy(update={"problems": problems})


def _messages(problems: list[Problem]) -> str:
    return "; ".join(p.message for p in problems)[:1000]


def desired_status(node: QuotaNode, tree: list[QuotaNode], plane: Plane, decision: Decision,
                   applied: QuotaApplyOutput | None, previous: AcceleratorQuotaStatus | None,
                   now: datetime) -> AcceleratorQuotaStatus:
    """The whole owned status one pass calls for."""
    before = previous.materialization if previous and previous.materialization else AcceleratorQuotaMaterialization()
    frozen = bool(decision.problems)
    refused = applied.refused if applied is not None else ""
    materialization = before.model_copy()
    if frozen:
        first = decision.problems[0].reason
        materialization = materialization.model_copy(update={
            "frozen": True, "reason": first, "frozen_at": before.frozen_at if before.frozen else now})
    else:
        materialization = materialization.model_copy(update={"frozen": False, "frozen_at": None, "reason": None})
        current = plane.served and decision.conflict is None and not refused
        if current and (decision.write or (before.last_applied_generation or 0) < node.generation):
            materialization = materialization.model_copy(update={
                "last_applied_generation": node.generation,
                "last_applied_time": now if decision.write or before.last_applied_time is None
                else before.last_applied_time})
    updates = [_degraded(decision), _materialized(node, plane, decision, refused, materialization),
               _ready(node, plane, decision, refused)]
    conditions = merge_conditions([c.to_api() for c in (previous.conditions or [])] if previous else [], updates,
                                  generation=node.generation, now=now)
    placed = not any(p.reason in _PLACEMENT_REASONS for p in decision.problems)
    queues = dict(plane.leaf_queues)
    if plane.cluster_queue is not None and plane.cluster_queue.ours:
        queues[node.name] = plane.cluster_queue
    echoed = source_generation_of(
        node.projected, None if frozen or not plane.served or decision.conflict is not None or refused
        else materialization.last_applied_generation, node.generation, previous.source_generation if previous else None)
    return AcceleratorQuotaStatus.model_validate({
        "observedGeneration": node.generation,
        "parent": node.parent if node.parent and placed else None,
        "sourceGeneration": echoed,
        "budgets": [b.to_api() for b in budget_status(node, tree, queues, frozen=frozen)],
        "materialization": materialization.to_api(),
        "conditions": conditions})


def projection_inputs(node: QuotaNode, observed: QuotaObserveOutput, decision: Decision,
                      settings: QuotaSettings) -> tuple[Shares, list[QuotaProjectInput]]:
    """What one pass writes into each registered WorkloadCluster: the node's copy with that cluster's share, or
    no body (read back only) while the node is frozen (the seed: no new projections while frozen) or its
    split does not resolve."""
    split_ = shares(node, observed.clusters, cluster_capacity(observed.root_capacity), settings.default_distribution)
    hold = ""
    if decision.problems:
        hold = f"frozen while {decision.problems[0].reason}"
    elif split_.unresolved:
        hold = "; ".join(split_.unresolved)
    inputs = [QuotaProjectInput(cluster=cluster, name=node.name, unresolved=hold,
                                body=None if hold else projected_copy(node, split_.per_cluster.get(cluster)))
              for cluster in observed.clusters]
    return split_, inputs


def with_projection(desired: AcceleratorQuotaStatus, node: QuotaNode, split_: Shares,
                    outcomes: list[ClusterOutcome], previous: AcceleratorQuotaStatus | None,
                    now: datetime) -> AcceleratorQuotaStatus:
    """status.clusters and budgets[].perCluster from what the members answered."""
    rows = cluster_rows(node, outcomes, (previous.clusters or []) if previous else [], now,
                        unknown=split_.unknown_clusters)
    budgets = with_per_cluster(desired.budgets or [], split_.per_cluster, {o.cluster: o.copy_ for o in outcomes})
    return desired.model_copy(update={"clusters": rows or None, "budgets": budgets or None})


def _degraded(decision: Decision) -> ConditionUpdate:
    if decision.problems:
        return ConditionUpdate(type=DEGRADED, status="True", reason=decision.problems[0].reason,
                               message=_messages(decision.problems))
    return ConditionUpdate(type=DEGRADED, status="False", reason=Reason.NO_VIOLATION,
                           message="every tree invariant holds")


def _what(node: QuotaNode, plane: Plane) -> str:
    if node.role == AcceleratorQuotaRole.COHORT:
        return f"Cohort {node.name}" + (f" under {node.parent}" if node.parent else " (root)")
    spaces = ", ".join(plane.bound_namespaces) or "no namespace yet"
    return f"ClusterQueue {node.name} in cohort {node.parent}; LocalQueues in {spaces}"


def _materialized(node: QuotaNode, plane: Plane, decision: Decision, refused: str,
                  materialization: AcceleratorQuotaMaterialization) -> ConditionUpdate:
    def no(reason: str, message: str) -> ConditionUpdate:
        return ConditionUpdate(type=MATERIALIZED, status="False", reason=reason, message=message)

    if decision.problems:
        held = materialization.last_applied_generation
        return no(Reason.FROZEN, (f"held at generation {held}'s output" if held else "nothing materialized yet")
                  + f" while {decision.problems[0].reason}")
    if not plane.served:
        return no(Reason.KUEUE_NOT_SERVED, "the cluster serves no kueue.x-k8s.io Cohort / ClusterQueue")
    if decision.conflict is not None:
        return no(decision.conflict.reason, decision.conflict.message)
    if refused:
        return no("MaterializationFailed", refused)
    return ConditionUpdate(type=MATERIALIZED, status="True", reason=Reason.MATERIALIZED, message=_what(node, plane))


def _ready(node: QuotaNode, plane: Plane, decision: Decision, refused: str) -> ConditionUpdate:
    def no(reason: str, message: str) -> ConditionUpdate:
        return ConditionUpdate(type=READY, status="False", reason=reason, message=message)

    if decision.problems:
        return no(decision.problems[0].reason, _messages(decision.problems))
    if not plane.served:
        return no(Reason.KUEUE_NOT_SERVED, "the cluster serves no kueue.x-k8s.io Cohort / ClusterQueue")
    if decision.conflict is not None:
        return no(decision.conflict.reason, decision.conflict.message)
    if refused:
        return no("MaterializationFailed", refused)
    if node.role == AcceleratorQuotaRole.CLUSTER_QUEUE:
        missing = sorted({b.resource_flavor for b in node.budgets} - set(plane.flavors))
        if missing:
            return no(Reason.FLAVOR_MISSING, (f"ResourceFlavor {', '.join(missing)} does not exist; Kueue keeps "
                                              f"ClusterQueue {node.name} inactive until it does"))
        if node.priority_tier and node.priority_tier not in plane.priority_classes:
            return no(Reason.PRIORITY_TIER_MISSING, f"WorkloadPriorityClass {node.priority_tier} does not exist")
        queue = plane.cluster_queue
        if queue is None or queue.active is None:
            return no(Reason.QUEUE_INACTIVE, f"Kueue has not reported ClusterQueue {node.name} yet")
        if not queue.active:
            return no(Reason.QUEUE_INACTIVE, f"Kueue: {queue.active_reason}: {queue.active_message}")
    return ConditionUpdate(type=READY, status="True", reason=Reason.ADMITTED, message=_what(node, plane))


_HELD_REASONS = {Reason.FLAVOR_MISSING, Reason.PRIORITY_TIER_MISSING, Reason.KUEUE_NOT_SERVED}
"""Ready False reasons that hold a node without freezing it: a Warning Event when one begins."""


def _ready_of(status: AcceleratorQuotaStatus | None) -> tuple[str, str, str]:
    found = next((c for c in (status.conditions or []) if c.type == READY), None) if status else None
    return (found.status, found.reason or "", found.message or "") if found else ("", "", "")


def events_for(decision: Decision, previous: AcceleratorQuotaStatus | None, desired: AcceleratorQuotaStatus,
               applied: QuotaApplyOutput | None) -> list[QuotaEvent]:
    """Warning when a freeze begins, Normal Unfrozen when it ends, Normal Materialized for an apply, Warning for
    a refused apply, a new ObjectConflict, or a new hold (FlavorMissing, PriorityTierMissing, KueueNotServed)."""
    was_frozen = bool(previous and previous.materialization and previous.materialization.frozen)
    out = []
    _, reason, message = _ready_of(desired)
    if reason in _HELD_REASONS and _ready_of(previous)[1] != reason:
        out.append(QuotaEvent(type="Warning", reason=reason, message=message))
    if decision.problems and not was_frozen:
        out.append(QuotaEvent(type="Warning", reason=decision.problems[0].reason, message=(
            f"output frozen at its last-good state: {_messages(decision.problems)}")))
    if not decision.problems and was_frozen:
        out.append(QuotaEvent(type="Normal", reason="Unfrozen", message="every tree invariant holds again"))
    if applied is not None and applied.refused:
        out.append(QuotaEvent(type="Warning", reason="MaterializationFailed", message=applied.refused))
    elif applied is not None and (applied.applied or applied.removed):
        what = ", ".join(applied.applied) + (f"; removed {', '.join(applied.removed)}" if applied.removed else "")
        out.append(QuotaEvent(type="Normal", reason="Materialized", message=f"applied {what}"))
    if decision.conflict is not None and not (previous and any(
            c.reason == Reason.OBJECT_CONFLICT for c in previous.conditions or [])):
        out.append(QuotaEvent(type="Warning", reason=Reason.OBJECT_CONFLICT, message=decision.conflict.message))
    return out


def phase_of(decision: Decision, plane: Plane) -> str:
    if decision.problems:
        return "Frozen"
    if not plane.served:
        return "Waiting"
    if decision.conflict is not None:
        return "Conflict"
    return "Materialized"


@workflow.defn(name=WorkflowType.ACCELERATOR_QUOTA)
class AcceleratorQuotaWorkflow(EntityWorkflow[QuotaState]):
    def __init__(self) -> None:
        super().__init__(QuotaState())
        self.settings = QuotaSettings()

    @workflow.run
    async def run(self, start: QuotaRun) -> QuotaState:
        self.settings = start.settings
        self.begin(start, start.carried)
        return await self.live()

    async def next_pass(self, timed_out: bool) -> bool:
        return await self._pass()

    def rest_time(self) -> timedelta:
        return timedelta(seconds=self.settings.interval_seconds)

    def run_is_full(self) -> bool:
        return self.state.passes >= self.settings.passes_per_run

    def reset_run_counts(self) -> None:
        self.state.passes = self.state.applies = self.state.writes = 0

    async def _pass(self) -> bool:
        assert self.ref is not None
        self.state.passes += 1
        observed: QuotaObserveOutput = await workflow.execute_activity_method(
            AcceleratorQuotaActivities.observe, QuotaObserveInput(quota=self.ref), **options.KUBE)
        if not observed.present or observed.deleting or observed.node is None:
            self.state.deleting = True
            return False
        node, plane = observed.node, observed.plane
        self.state.generation = max(self.state.generation, node.generation)
        self.state.acted_generation = max(self.state.acted_generation, node.generation)
        settings = effective_settings(self.settings, observed)
        # Asked only when a member holds its own root beside a projected one: no stored history meets it.
        single_root = roots_conflict(observed.tree) and workflow.patched(SINGLE_ROOT_PATCH)
        decision = with_config_error(decide(node, observed.tree, plane, settings, observed.status,
                                            single_root=single_root), observed.config_error)
        applied: QuotaApplyOutput | None = None
        if decision.write:
            applied = await workflow.execute_activity_method(
                AcceleratorQuotaActivities.apply,
                QuotaApplyInput(quota=self.ref, objects=render(node, plane.bound_namespaces),
                                removals=removals(node, plane)), **options.KUBE)
            if not applied.present:
                return False
            self.state.applies += 1
        written = self.state.written if self.state.written is not None else observed.status
        now = workflow.now().replace(microsecond=0)
        desired = desired_status(node, observed.tree, plane, decision, applied, written, now)
        if node.projected is None and (observed.clusters or self.state.projected_to or observed.deregistering) \
                and workflow.patched(PROJECTION_PATCH):
            split_, inputs = projection_inputs(node, observed, decision, settings)
            outcomes = list(await asyncio.gather(*(workflow.execute_activity_method(
                PlacementActivities.project_quota, inp, **options.MEMBER) for inp in inputs)))
            if observed.deregistering and workflow.patched(DEREGISTRATION_PATCH):
                # A deregistered cluster's copies are deleted before its registration goes; one that cannot
                # be reached keeps its row here, saying so, until it can (or the finalizer is removed by hand).
                released = await asyncio.gather(*(workflow.execute_activity_method(
                    PlacementActivities.release_quota_hold, QuotaReleaseInput(cluster=c), **options.MEMBER)
                    for c in observed.deregistering))
                outcomes.extend(r for r in released if r.error)
            self.state.projected_to = list(observed.clusters)
            desired = with_projection(desired, node, split_, outcomes, written, now)
        events = events_for(decision, written, desired, applied)
        if written is None or written.to_api() != desired.to_api() or events:
            result: QuotaWriteOutput = await workflow.execute_activity_method(
                AcceleratorQuotaActivities.write_status,
                QuotaWriteInput(quota=self.ref, status=desired, events=events), **options.KUBE)
            if not result.present:
                return False
            self.state.writes += 1
        self.state.written = desired
        self._publish(phase_of(decision, plane))
        return True

    async def closing(self) -> None:
        assert self.ref is not None
        if self.state.projected_to and workflow.patched(PROJECTION_PATCH):
            # The copies first: a member that cannot be reached keeps its copy (its row said so), and the
            # deletion goes on.
            await asyncio.gather(*(workflow.execute_activity_method(
                PlacementActivities.unproject_quota,
                QuotaUnprojectInput(cluster=c, name=self.ref.name, origin=self.ref.uid or ""), **options.MEMBER)
                for c in self.state.projected_to))
        while True:
            reaped: QuotaReapOutput = await workflow.execute_activity_method(
                AcceleratorQuotaActivities.reap, QuotaReapInput(quota=self.ref), **options.KUBE)
            self.state.reaped = reaped.removed
            if not reaped.refused or not await self._report_reap_refused(reaped.refused):
                return
            # The finalizer holds the node: the next try after the pass interval (a role mended meanwhile
            # completes the deletion). Only a refused reap takes this branch, and before it a refusal failed
            # the workflow, so no recorded history has a command here.
            await workflow.sleep(timedelta(seconds=self.settings.interval_seconds))

    async def _report_reap_refused(self, refused: str) -> bool:
        """Ready False ReapRefused and a Warning on the node (once per message); False when the node is gone."""
        assert self.ref is not None
        written = self.state.written or AcceleratorQuotaStatus()
        update = ConditionUpdate(type=READY, status="False", reason=REAP_REFUSED,
                                 message=f"deleting: the Kueue objects could not be deleted: {refused}"[:1000])
        before = next((c for c in written.conditions or [] if c.type == READY), None)
        if before is not None and before.reason == REAP_REFUSED and before.message == update.message:
            return True
        now = workflow.now().replace(microsecond=0)
        conditions = merge_conditions([c.to_api() for c in written.conditions or []], [update],
                                      generation=written.observed_generation or 0, now=now)
        desired = written.model_copy(update={"conditions": AcceleratorQuotaStatus.model_validate(
            {"conditions": conditions}).conditions})
        result: QuotaWriteOutput = await workflow.execute_activity_method(
            AcceleratorQuotaActivities.write_status,
            QuotaWriteInput(quota=self.ref, status=desired, events=[QuotaEvent(
                type="Warning", reason=REAP_REFUSED, message=update.message)]), **options.KUBE)
        self.state.written = desired
        return result.present

    def _publish(self, phase: str) -> None:
        assert self.visibility is not None
        if phase != self.state.phase:
            self.state.phase = phase
            self.visibility.publish(phase)


__all__ = ["PROJECTION_PATCH", "AcceleratorQuotaWorkflow", "Decision", "QuotaRun", "QuotaSettings", "QuotaState",
           "decide", "desired_status", "effective_settings", "events_for", "projection_inputs", "with_projection"]
