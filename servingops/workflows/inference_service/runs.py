"""The InferenceService's rollout runs: one RolloutWorkflow child per unit whose revision changed
(id rollout/<ns>/<isvc>/<uid>/<group>). Planning them from an observation (steer the open runs, open
the units workflows/rollout/plan.py admits, park a unit whose policy does not resolve), and taking
what they say back: their reports and results, folded into the state the status write reads. Also
tells each RolloutPolicy when this service's references to it changed.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ChildWorkflowError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import KubernetesActivities
    from servingops.activities.operator_config import OperatorConfigActivities
    from servingops.activities.serving.types import ServiceObservation
    from servingops.api_models import contract
    from servingops.api_models.contract import Signal, WorkflowType
    from servingops.api_models.contract.rollout import (
        ActiveRun,
        ComponentTarget,
        PinnedGroup,
        Progression,
        RetargetRequest,
        RolloutReport,
    )
    from servingops.api_models.durations import parse_duration
    from servingops.api_models.errors import ErrorType, error_message, error_type_of
    from servingops.api_models.ome.enums import CanaryFailureReason, RolloutPlanSource, RolloutRunOutcome
    from servingops.api_models.ome.rollout import RolloutGroup, RolloutSpec
    from servingops.api_models.ome.rollout_status import RolloutGroupResolution, ShadowedRolloutPolicyRef
    from servingops.api_models.refs import ObjectRef
    from servingops.api_models.serving import TrafficWeight
    from servingops.workflows import options
    from servingops.workflows.inference_service.context import ServiceContext
    from servingops.workflows.rollout import analysis, plan, policy_pinning, status
    from servingops.workflows.rollout.models import AnnotationState, RolloutInput, RolloutResult
    from servingops.workflows.rollout.plan import Unit, entrypoint


class RolloutRuns:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.reports: list[RolloutReport] = []
        """Reports the runs sent, not yet folded into the state."""
        self.results: list[tuple[str, RolloutResult | None, str, ErrorType | None]] = []
        """Runs that ended: (unit key, result or None when it failed, why, the error's type)."""
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.rollback_forwarded: set[str] = set()
        """Runs that were handed ome.io/rollout-rollback=true and have not answered it yet."""
        self.rollback_refused = False
        """A run refused the forwarded rollback (its stable revision is missing): the annotation goes."""

    # -- planning ----------------------------------------------------------------------------------

    async def plan_runs(self, spec: RolloutSpec | None, observation: ServiceObservation) -> None:
        """Steer the runs that are open, then open the units plan.admit lets start."""
        state = self.ctx.state
        seen = {c.component: c for c in observation.components}
        planned_units = plan.units(spec, list(seen))
        state.resolutions = await self._resolutions(spec)
        running, startable = plan.triage(planned_units, seen, state)
        for unit, targets in running:
            await self._steer(state.active[unit.key], unit, targets)
        # Admission reads the clock after the steers, as their signals may have taken a while.
        for unit, targets in plan.admit(spec, startable, state, workflow.now()):
            await self._open(unit, targets)

    async def _steer(self, run: ActiveRun, unit: Unit, targets: list[ComponentTarget]) -> None:
        """A running unit whose target set or plan changed: retarget (re-arm, keeping the original
        stable) or repin (same targets, new plan)."""
        state = self.ctx.state
        current = {t.component: t.revision for t in run.targets}
        wanted = {t.component: t.revision for t in targets}
        pinned: PinnedGroup | None = None
        # Only a canary plan is repinned mid-run (with the hold-or-tighten rule); blue-green and
        # rolling runs keep the plan they opened with.
        if unit.group is not None and unit.group.canary is not None and run.pinned.group.canary is not None:
            resolution = policy_pinning.resolve(unit.group, None)
            if resolution.group is not None and resolution.digest != run.pinned.portable_digest:
                pinned = run.pinned.model_copy(update={"group": resolution.group, "portable_digest": resolution.digest})
        if current == wanted and pinned is None:
            return
        if current != wanted:
            # The run closes Superseded and a fresh run opens; the child re-arms in place.
            state.last_run = status.run_record(run, RolloutRunOutcome.SUPERSEDED, workflow.now())
            state.run_counter += 1
            run.run_id = self._run_id()
            run.opened_at = workflow.now()
            stables = {t.component: t.stable_revision for t in run.targets}
            run.targets = [t.model_copy(update={"stable_revision": stables.get(t.component, t.stable_revision)})
                           for t in targets]
        if pinned is not None:
            run.pinned = pinned
        await self.signal(run, Signal.RETARGET, RetargetRequest(run_id=run.run_id, targets=run.targets, pinned=pinned))

    async def _open(self, unit: Unit, targets: list[ComponentTarget]) -> None:
        """Pin the unit's progression and start its run; park (fail-closed) when a policyRef
        does not resolve or contradicts its declared progression."""
        ref = self.ctx.require_ref()
        state = self.ctx.state
        group = unit.group or RolloutGroup(components=list(unit.components))
        resolution = policy_pinning.resolve(group, await self._read_policy(group))
        if resolution.group is None:
            self._park(unit.key, f"{resolution.park_reason}: {resolution.park_message}")
            return
        # The operator's defaults are read now and pinned for the run, like its policy. A history
        # recorded before this read existed (no patch marker) keeps opening runs as it did then:
        # with its start settings and no operator parks (docs/durability.md).
        operator = self.ctx.settings.operator
        if workflow.patched("operator-config-at-run-open"):
            operator = await workflow.execute_activity_method(OperatorConfigActivities.read, **options.KUBE)
            if operator.error is not None:
                self._park(unit.key, f"OperatorConfigInvalid: {operator.error}")
                return
            unbound = analysis.unbound_provider(resolution.group.canary, operator)
            if unbound is not None:
                self._park(unit.key, f"MetricProviderUnbound: providerRef {unbound!r} is not bound in the "
                                     f"operator's metricProviders ({operator.source or 'no operator ConfigMap'})")
                return
        state.parked.pop(unit.key, None)
        state.run_counter += 1
        pinned = PinnedGroup(key=unit.key, index=unit.index, group=resolution.group, source=resolution.source,
                             policy_ref=group.policy_ref if resolution.source == RolloutPlanSource.POLICY else None,
                             policy_generation=resolution.policy_generation,
                             portable_digest=resolution.digest or "")
        run_id = self._run_id()
        workflow_id = contract.rollout_workflow_id(ref.namespace or "", ref.name, ref.uid or "", unit.key)
        annotations = state.annotations
        params = RolloutInput(
            isvc=ref, pinned=pinned, targets=targets, run_id=run_id,
            settings=self.ctx.settings.model_copy(update={"operator": operator}),
            annotations=AnnotationState(
                promote=annotations.get(contract.ROLLOUT_PROMOTE),
                promote_force=annotations.get(contract.ROLLOUT_PROMOTE_FORCE),
                paused=annotations.get(contract.ROLLOUT_PAUSED) == "true",
                ready_timeout=annotations.get(contract.ROLLOUT_READY_TIMEOUT)))
        handle: ChildWorkflowHandle[object, RolloutResult] = await workflow.start_child_workflow(
            WorkflowType.ROLLOUT, params, id=workflow_id, result_type=RolloutResult,
            parent_close_policy=ParentClosePolicy.TERMINATE,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE)
        state.active[unit.key] = ActiveRun(key=unit.key, workflow_id=workflow_id, run_id=run_id, targets=targets,
                                           pinned=pinned, opened_at=workflow.now())
        self.tasks[unit.key] = asyncio.create_task(self._await(unit.key, handle))

    async def _await(self, key: str, handle: ChildWorkflowHandle[object, RolloutResult]) -> None:
        error_type: ErrorType | None = None
        try:
            result: RolloutResult | None = await handle
            message = ""
        except ChildWorkflowError as error:
            error_type = error_type_of(error)
            result = None
            message = error_message(error) if error_type is not None else str(error.cause or error)
        self.results.append((key, result, message, error_type))

    def _park(self, key: str, why: str) -> None:
        if self.ctx.state.parked.get(key) != why:
            self.ctx.note(status.park_note(key, why))
        self.ctx.state.parked[key] = why
        self.ctx.dirty = True

    async def _read_policy(self, group: RolloutGroup) -> dict[str, object] | None:
        if group.policy_ref is None:
            return None
        ref = self.ctx.require_ref()
        policy_ref = ObjectRef(group="ome.io", version="v1beta1", plural="rolloutpolicies", kind="RolloutPolicy",
                               name=group.policy_ref.name, namespace=ref.namespace)
        return await workflow.execute_activity_method(KubernetesActivities.read_object, policy_ref, **options.KUBE)

    async def _resolutions(self, spec: RolloutSpec | None) -> list[dict[str, object]]:
        """status.rollout.groups: per spec group, what a run opened now would pin. Also tells each
        referenced RolloutPolicy when this service's references to it changed."""
        views = []
        attachments: dict[str, int] = {}
        for index, group in enumerate((spec.groups if spec else None) or []):
            live = await self._read_policy(group)
            metadata = (live or {}).get("metadata")
            policy_uid = str(metadata.get("uid") or "") if isinstance(metadata, dict) else ""
            if group.policy_ref is not None and policy_uid:
                ref = self.ctx.require_ref()
                wid = contract.rollout_policy_workflow_id(ref.namespace or "", group.policy_ref.name, policy_uid)
                attachments[wid] = attachments.get(wid, 0) + 1
            resolution = policy_pinning.resolve(group, live)
            view = RolloutGroupResolution(index=index, source=resolution.source, policy_ref=group.policy_ref,
                                          observed_digest=resolution.digest)
            if resolution.source == RolloutPlanSource.INLINE and group.policy_ref is not None:
                view.shadowed_policy_ref = ShadowedRolloutPolicyRef(name=group.policy_ref.name,
                                                                    would_pin_digest=resolution.shadowed_digest)
            views.append(view.to_api())
        await self.announce_attachments(attachments)
        return views

    async def announce_attachments(self, attachments: dict[str, int]) -> None:
        """Nudge every RolloutPolicy whose count of this service's referencing groups changed to
        recount (its attachedGroups spans the namespace, so it counts; we only say when). A
        policy whose workflow is not running misses nothing: it counts when it starts, and
        re-counts periodically as a safety net."""
        before = self.ctx.state.policy_attachments
        changed = sorted(wid for wid in before.keys() | attachments.keys() if before.get(wid) != attachments.get(wid))
        self.ctx.state.policy_attachments = attachments
        # Each nudge is a SignalExternalWorkflowExecution command: a history recorded before the
        # nudges existed (no patch marker) sends none; the policy's periodic recount covers it.
        if changed and not workflow.patched("refresh-now-nudges"):
            return
        for wid in changed:
            try:
                await workflow.get_external_workflow_handle(wid).signal(contract.Signal.REFRESH_NOW)
            except Exception as error:
                workflow.logger.debug("RolloutPolicy workflow %s not signalled: %s", wid, error)

    # -- children's news -----------------------------------------------------------------------

    def take_reports(self) -> None:
        reports, self.reports = self.reports, []
        for report in sorted(reports, key=lambda r: r.seq):
            run = self.ctx.state.active.get(report.key)
            if run is None or report.seq <= run.seq:
                continue  # late or duplicate
            run.seq = report.seq
            self._apply(run, report)
            self.ctx.dirty = True

    def _apply(self, run: ActiveRun, report: RolloutReport) -> None:
        components = self.ctx.state.components
        for component, weights in report.traffic.items():
            if component in components:
                self.ctx.note(status.traffic_note(component, components[component].traffic, list(weights)))
                components[component].traffic = list(weights)
        for component, revision in report.ready.items():
            if component in components:
                components[component].latest_ready = revision
        if report.progression == Progression.CANARY:
            entry = entrypoint([t.component for t in report.targets]) if report.targets else None
            if entry is not None and entry in components:
                steps = run.pinned.group.canary.steps if run.pinned.group.canary else None
                self.ctx.note(status.step_note(components[entry].canary, report.canary, len(steps or [])))
                self.ctx.note(status.stopped_note(run.key, components[entry].canary, report.canary))
                components[entry].canary = report.canary
                components[entry].rollout_phase = report.phase
            failed = report.canary.failed if report.canary is not None else None
            if run.key in self.rollback_forwarded and failed is not None \
                    and failed.reason == CanaryFailureReason.STABLE_REVISION_MISSING:
                # The run refused the rollback it was handed: nothing to revert to.
                self.rollback_forwarded.discard(run.key)
                self.rollback_refused = True
        elif report.coordination is not None:
            self.ctx.state.coordination[report.key] = report.coordination

    def take_results(self) -> None:
        results, self.results = self.results, []
        for key, result, message, error_type in results:
            self.tasks.pop(key, None)
            self.rollback_forwarded.discard(key)
            run = self.ctx.state.active.pop(key, None)
            if run is None:
                continue
            if result is not None:
                if result.last.seq > run.seq:
                    self._apply(run, result.last)
                self._close(run, result)
            else:
                # A crashed run: hold its target (never retried blindly) and say why, with the
                # error's own type as the reason when an activity refused it.
                self._hold(run)
                note = status.failed_run_note(key, error_type, message)
                self.ctx.state.parked[key] = f"{note.reason}: {message}"
                self.ctx.note(note)
                self.ctx.state.last_run = status.run_record(run, RolloutRunOutcome.ROLLED_BACK, workflow.now())
            self.ctx.changed = True  # the next group may start, or a newer target may be waiting
            self.ctx.dirty = True

    def _close(self, run: ActiveRun, result: RolloutResult) -> None:
        state = self.ctx.state
        outcome = result.outcome
        now = workflow.now()
        if outcome == RolloutRunOutcome.COMPLETED:
            for target in result.targets:
                view = state.components.get(target.component)
                if view is None or target.revision == target.stable_revision:
                    continue
                view.previous = target.stable_revision
                view.stable = target.revision
                view.latest_ready = target.revision
                view.traffic = [TrafficWeight(revision=target.revision, weight=100)]
            soak = run.pinned.group.soak
            if soak and run.pinned.index is not None:
                state.soak_until = now + parse_duration(soak)
        elif outcome in (RolloutRunOutcome.ROLLED_BACK, None):
            self._hold(run, result.targets)
        coordination = result.last.coordination
        why = (coordination.message or "") if coordination is not None else ""
        self.ctx.note(status.closed_note(run.key, outcome, result.targets, why))
        state.last_run = status.run_record(run, outcome or RolloutRunOutcome.ROLLED_BACK, now)

    def _hold(self, run: ActiveRun, targets: list[ComponentTarget] | None = None) -> None:
        """A rolled-back (or failed) target set is held on stable until a different one appears."""
        state = self.ctx.state
        targets = targets or run.targets
        state.held[run.key] = {t.component: t.revision for t in targets}
        primary = entrypoint([t.component for t in targets])
        state.held_primary[run.key] = next(t.revision for t in targets if t.component == primary)
        for target in targets:
            view = state.components.get(target.component)
            if view is not None and view.stable:
                view.traffic = [TrafficWeight(revision=view.stable, weight=100)]
                # The rejected revision's pods are gone: the newest Ready revision is stable again.
                view.latest_ready = view.stable

    async def signal(self, run: ActiveRun, name: str, value: object) -> None:
        try:
            await workflow.get_external_workflow_handle(run.workflow_id).signal(name, value)
        except Exception:
            pass  # its result is on its way through _await

    def _run_id(self) -> str:
        uid = (self.ctx.require_ref().uid or "")[:8]
        return f"{uid}-{self.ctx.state.run_counter}"
