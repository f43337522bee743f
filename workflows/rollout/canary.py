"""RolloutWorkflow: one run of one rollout group (id rollout/<ns>/<isvc>/<uid>/<group>).

A canary group walks its steps: each step converges capacity (new-revision replicas per
component), then programs traffic, then waits on its gate (analysis → timed pause → manual pause
→ immediate). Blue-green and rolling groups are delegated to their modules. Every transition is
reported to the InferenceService workflow, which owns the status write.

Annotations arrive as signals forwarded by the InferenceService workflow, with upstream OME's
meaning; the SDK uses the `promote` / `rollback` updates, which act like the annotations but
answer with the resulting CanaryStatus.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from api_models.durations import parse_duration
    from api_models.ome.enums import (
        CanaryFailureReason,
        ComponentType,
        RolloutPhase,
        RolloutRunOutcome,
    )
    from api_models.ome.rollout import GroupCanary, RolloutGroupStep
    from api_models.ome.rollout_status import (
        CanaryFailure,
    )
    from api_models.serving_io import (
        TrafficWeight,
    )
    from workflows.rollout import actions, analysis, bluegreen, rolling, status
    from workflows.rollout.handlers import RolloutHandlers
    from workflows.rollout.models import (
        ComponentTarget,
        PinnedGroup,
        Progression,
        RetargetRequest,
        RolloutInput,
        RolloutResult,
        progression_of,
    )
    from workflows.rollout.steps import (
        Gate,
        Verdict,
        clamp_step,
        gate_of,
        judge_sample,
        pause_of,
        repin_raises_exposure,
        stall_anchor,
        step_capacity,
    )
    from workflows.visibility import Visibility

_FINAL = RolloutGroupStep(capacity="100%", traffic=100)
"""Completion's capacity gate: the canary must carry the full desired set before it owns 100%."""


@workflow.defn(name="RolloutWorkflow")
class RolloutWorkflow(RolloutHandlers):
    # -- entry ------------------------------------------------------------------------------

    @workflow.run
    async def run(self, params: RolloutInput) -> RolloutResult:
        self._params = params
        self.isvc = params.isvc
        self._pinned = params.pinned
        self._targets = list(params.targets)
        self._settings = params.settings
        # Signals that arrived before run() already updated the annotation state; the input only
        # fills what they did not touch.
        self._ann = params.annotations.model_copy(update=self._ann.model_dump(exclude_unset=True))
        self._visibility = Visibility("Rollout", params.isvc.namespace, f"{params.isvc.name}/{params.pinned.key}")
        if params.carried is not None:
            self._run = params.carried
        progression = progression_of(params.pinned)
        if progression == Progression.CANARY:
            if self._run.canary is None:
                self._arm(rearm=False)
                await self._publish()
            outcome = await self._run_canary()
        elif progression == Progression.ROLLING_UPDATE:
            outcome = await rolling.run(self, params.pinned.group.rolling_update)
        else:
            outcome = await bluegreen.run(self)
        self._finished = True
        await self._publish()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return RolloutResult(key=params.pinned.key, run_id=params.run_id, outcome=outcome, targets=self._targets,
                             last=self._report())

    # -- the canary step machine ----------------------------------------------------------------

    async def _run_canary(self) -> RolloutRunOutcome | None:
        while True:
            await self._maybe_continue_as_new()
            if self._retarget is not None:
                superseded = await self._apply_retarget()
                if superseded is not None:
                    return superseded
                continue
            if self._resume is not None:
                await self._apply_resume()
                continue
            if self._rollback_requested:
                outcome = await self._rollback()
                self._rollback_requested = False
                if outcome is not None:
                    return outcome
                continue
            canary = self._canary()
            if canary.failed is not None:
                # Parked: the step machine does not run; stable keeps serving whatever it serves.
                self._gate_name = None
                await self._enter(RolloutPhase.FAILED)
                await self._wait(None)
                continue
            steps = self._steps()
            current = canary.current_step or 0
            if current >= len(steps):
                completed = await self._complete()
                if completed:
                    return RolloutRunOutcome.COMPLETED
                continue
            step = steps[current]
            if not await self._capacity_gate(step):
                continue
            await self._apply_traffic(step)
            verdict = await self._gate(step)
            if verdict == "rollback":
                self._rollback_requested = True
            elif verdict in ("advance", "promoted", "forced"):
                await self._advance(promoted=verdict == "promoted")

    def _arm(self, *, rearm: bool) -> None:
        """Write a fresh CanaryStatus for the current targets (replacing it in place on re-arm)."""
        self._run.canary = status.armed_canary(
            self._targets, self._primary(), previous=self._run.canary, rearm=rearm,
            has_analysis=self._has_analysis(), now=workflow.now())
        self._reset_step_clock()
        self._run.phase = RolloutPhase.PENDING.value

    def _reset_step_clock(self) -> None:
        self._run.analysis_start = None
        self._run.last_sample = None
        self._run.last_outcome_key = ""

    async def _capacity_gate(self, step: RolloutGroupStep) -> bool:
        """Converge new-revision replicas for the step; False when interrupted or parked."""
        canary = self._canary()
        self._gate_name = "capacity"
        want = {t.component: step_capacity(step, t.desired_replicas) for t in self.moving()}
        try:
            for target in self.moving():
                await actions.ensure_revision(self.isvc, target.component, target.revision, want[target.component])
        except ActivityError as error:
            if not actions.is_superseded(error):
                raise
            self._message = "the canary revision is no longer rendered by the spec; waiting for the new target"
            await self._enter(RolloutPhase.PENDING)
            await self._wait(None)
            return False
        while True:
            met = True
            ready: dict[ComponentType, int] = {}
            for target in self.moving():
                seen = await actions.revision_status(self.isvc, target.component, target.revision)
                ready[target.component] = seen.ready_replicas
                met = met and ready[target.component] >= want[target.component]
            if met:
                changed = canary.capacity_wait_since is not None
                canary.capacity_wait_since = None
                for target in self.moving():
                    if ready[target.component] > 0 and self._run.ready.get(target.component) != target.revision:
                        self._run.ready[target.component] = target.revision
                        changed = True
                if changed:
                    await self._publish()
                return True
            now = workflow.now()
            if canary.capacity_wait_since is None:
                canary.capacity_wait_since = now
                await self._enter(RolloutPhase.PENDING, force=True)
            limit = self.ready_timeout()
            elapsed = now - canary.capacity_wait_since
            if elapsed >= limit:
                # Traffic never moved for this step, so stable keeps serving; park for a decision.
                canary.failed = CanaryFailure(reason=CanaryFailureReason.CAPACITY_TIMEOUT, time=now)
                self._message = f"step {canary.current_step} capacity not Ready within {limit}"
                await self._enter(RolloutPhase.FAILED, force=True)
                return False
            await self._wait(min(self.poll_seconds(elapsed), (limit - elapsed).total_seconds()))
            if self._interrupted():
                return False

    async def _apply_traffic(self, step: RolloutGroupStep) -> None:
        canary = self._canary()
        weight = step.traffic
        programmed = canary.observed_traffic_weight or 0
        if canary.pre_step_hold and weight > programmed:
            weight = programmed  # a repin may only hold or tighten exposure
        if self._run.programmed_weight != weight:
            for target in self.moving():
                await self._route(target, weight)
            self._run.programmed_weight = weight
            canary.observed_traffic_weight = weight
            await self._publish()
        if self._run.analysis_start is None:
            self._run.analysis_start = workflow.now()

    async def _route(self, target: ComponentTarget, weight: int) -> None:
        weights = [TrafficWeight(revision=target.stable_revision, weight=100 - weight),
                   TrafficWeight(revision=target.revision, weight=weight)]
        await actions.set_traffic(self.isvc, target.component, weights)
        self._run.traffic[target.component] = weights

    async def _gate(self, step: RolloutGroupStep) -> str:
        """'advance' / 'promoted' / 'forced' when the step may advance, 'rollback', or 'again'
        when something else (a signal, a park, a released hold) needs the outer loop."""
        gate = gate_of(step)
        while True:
            await self._maybe_continue_as_new()
            if self._interrupted():
                return "again"
            canary = self._canary()
            if self._run.pending_force:
                self._run.pending_force = False
                return "forced"
            if canary.pre_step_hold:
                self._gate_name = "hold"
                if self._take_promote():
                    canary.pre_step_hold = False
                    canary.promoted_through = canary.canary_revision_hash
                    canary.step_entered_time = workflow.now()
                    self._mark_tokens()
                    await self._publish()
                    return "again"
                await self._enter(RolloutPhase.PAUSED)
                await self._wait(None, lambda: self._promote_available() or self._run.pending_force)
                continue
            if self._ann.paused:
                self._gate_name = "paused"
                await self._enter(RolloutPhase.PAUSED)
                await self._wait(None, lambda: not self._ann.paused or self._run.pending_force)
                continue
            self._gate_name = gate.value
            if gate == Gate.IMMEDIATE:
                return "advance"
            if gate == Gate.TIMED:
                deadline = (canary.step_entered_time or workflow.now()) + pause_of(step)
                remaining = (deadline - workflow.now()).total_seconds()
                if remaining <= 0:
                    return "advance"
                await self._enter(RolloutPhase.CANARYING)
                await self._wait(remaining, self._gate_disturbed)
                continue
            if gate == Gate.MANUAL:
                if self._take_promote():
                    return "promoted"
                await self._enter(RolloutPhase.PAUSED)
                await self._wait(None, lambda: self._promote_available() or self._gate_disturbed())
                continue
            await self._enter(RolloutPhase.CANARYING)
            verdict = await self._analysis(step)
            if verdict is not None:
                return verdict

    def _gate_disturbed(self) -> bool:
        return self._ann.paused or self._run.pending_force

    async def _analysis(self, step: RolloutGroupStep) -> str | None:
        spec = step.analysis
        assert spec is not None
        canary = self._canary()
        now = workflow.now()
        started = self._run.analysis_start or now
        first = started + (parse_duration(spec.initial_delay) if spec.initial_delay else timedelta(0))
        due = first if self._run.last_sample is None else max(first, self._run.last_sample +
                                                              parse_duration(spec.interval))
        if now < due:
            await self._wait((due - now).total_seconds(), self._gate_disturbed)
            return None
        canary_spec = self._group().group.canary or GroupCanary()
        source = analysis.prometheus_source(canary_spec, self._settings.operator, self.isvc.namespace)
        context = analysis.query_context(self.isvc, self._primary(),
                                         canary.stable_revision_hash or self._primary().stable_revision)
        evaluation = await analysis.sample(spec, source, context)
        now = workflow.now()
        self._run.last_sample = now
        canary.last_evaluation_time = now
        if evaluation.conclusive:
            canary.last_conclusive_evaluation_time = now
        canary.metric_results = analysis.metric_results(spec, evaluation, now)
        verdict, canary.analysis_failed_checks = judge_sample(
            failed=evaluation.failed, conclusive=evaluation.conclusive,
            failed_checks=canary.analysis_failed_checks or 0, failure_limit=spec.failure_limit,
            on_inconclusive=spec.on_inconclusive, now=now,
            stall_anchor=stall_anchor(canary.last_conclusive_evaluation_time, first),
            stall_timeout=parse_duration(self._settings.operator.stall_timeout))
        outcome_key = analysis.outcome_key(verdict, canary.analysis_failed_checks, evaluation)
        changed = outcome_key != self._run.last_outcome_key
        self._run.last_outcome_key = outcome_key
        if verdict == Verdict.ROLLBACK:
            self._message = f"analysis at step {canary.current_step}: " + "; ".join(
                m.message for m in evaluation.metrics if m.passed is not True)
            await self._publish()
            return "rollback"
        if verdict == Verdict.PARK:
            canary.failed = CanaryFailure(reason=CanaryFailureReason.ANALYSIS_STALLED, time=now)
            self._message = f"analysis inconclusive for {self._settings.operator.stall_timeout}"
            await self._publish()
            return "again"
        baked = now >= (canary.step_entered_time or now) + pause_of(step)
        if verdict == Verdict.PASS and baked:
            return "advance"
        await self._publish(sample=not changed)
        return None

    async def _advance(self, *, promoted: bool) -> None:
        canary = self._canary()
        canary.current_step = (canary.current_step or 0) + 1
        canary.step_entered_time = workflow.now()
        canary.capacity_wait_since = None
        if self._has_analysis():
            canary.analysis_failed_checks = 0  # failureLimit counts per step
        if promoted:
            # Stamped in the same report as the advance: the durable record of the promotion.
            canary.promoted_through = canary.canary_revision_hash
        self._reset_step_clock()
        self._mark_tokens()
        self._run.phase = RolloutPhase.CANARYING.value
        await self._publish()

    async def _complete(self) -> bool:
        """Canary becomes stable: full capacity, 100% traffic, old revision drained after the delay."""
        canary = self._canary()
        if not await self._capacity_gate(_FINAL):
            return False
        for target in self.moving():
            weights = [TrafficWeight(revision=target.revision, weight=100)]
            await actions.set_traffic(self.isvc, target.component, weights)
            self._run.traffic[target.component] = weights
        self._run.programmed_weight = 100
        canary.observed_traffic_weight = 100
        canary.stable_revision_hash = None
        canary.pre_step_hold = False
        canary.current_step = len(self._steps())
        self._gate_name = None
        await self._enter(RolloutPhase.PROMOTING, force=True)
        await workflow.sleep(self.scale_down_delay())
        for target in self.moving():
            await actions.delete_revision(self.isvc, target.component, target.stable_revision)
        await self._enter(RolloutPhase.STABLE, force=True)
        return True

    async def _rollback(self) -> RolloutRunOutcome | None:
        canary = self._canary()
        if canary.failed is not None and canary.failed.reason == CanaryFailureReason.STABLE_REVISION_MISSING:
            self._message = "rollback refused: the stable revision is missing"
            await self._publish()
            return None
        missing = await self._missing_stables()
        if missing:
            canary.failed = CanaryFailure(reason=CanaryFailureReason.STABLE_REVISION_MISSING, time=workflow.now())
            self._message = "cannot roll back: " + ", ".join(f"{t.component.value} revision {t.stable_revision}"
                                                             for t in missing) + " is gone"
            await self._enter(RolloutPhase.FAILED, force=True)
            return None
        self._gate_name = None
        await self._enter(RolloutPhase.ROLLING_BACK, force=True)
        for target in self.moving():
            await actions.ensure_revision(self.isvc, target.component, target.stable_revision, target.desired_replicas)
            weights = [TrafficWeight(revision=target.stable_revision, weight=100)]
            await actions.set_traffic(self.isvc, target.component, weights)
            self._run.traffic[target.component] = weights
        self._run.programmed_weight = 0
        canary.observed_traffic_weight = 0
        canary.rolled_back_revision_hash = canary.canary_revision_hash
        canary.failed = None
        canary.pre_step_hold = False
        canary.capacity_wait_since = None
        await self._publish()
        self._rollback_requested = False  # traffic is back on stable: the update may answer now
        await workflow.sleep(self.scale_down_delay())
        for target in self.moving():
            await actions.delete_revision(self.isvc, target.component, target.revision)
        await self._enter(RolloutPhase.ROLLED_BACK, force=True)
        return RolloutRunOutcome.ROLLED_BACK

    async def _missing_stables(self) -> list[ComponentTarget]:
        """Stable revisions whose Deployment no longer exists (the revert could not run)."""
        observation = await actions.observe(self.isvc)
        if observation is None:
            return []  # the InferenceService is gone; the parent is ending this run
        existing = {(c.component, r.revision) for c in observation.components for r in c.revisions}
        return [t for t in self.moving() if (t.component, t.stable_revision) not in existing]

    async def _apply_retarget(self) -> RolloutRunOutcome | None:
        request = self._retarget
        assert request is not None
        self._retarget = None
        old = {t.component: t for t in self._targets}
        new = {t.component: t for t in request.targets}
        if any(old.get(c) is None or old[c].revision != t.revision for c, t in new.items()):
            return await self._rearm(request, old)
        if request.pinned is not None and request.pinned.group.canary is not None:
            await self._repin(request.pinned)
        return None

    async def _rearm(self, request: RetargetRequest, old: dict[ComponentType, ComponentTarget]) -> \
            RolloutRunOutcome | None:
        """A new target mid-canary: keep the ORIGINAL stable (the rollback target), drop the
        intermediate revision after moving its traffic back to stable, and start at step 0."""
        abandoned = [t for t in old.values() if t.revision != t.stable_revision]
        self._targets = [t.model_copy(update={"stable_revision": old[t.component].stable_revision})
                         if t.component in old else t for t in request.targets]
        if request.pinned is not None:
            self._pinned = request.pinned
        for target in abandoned:
            weights = [TrafficWeight(revision=target.stable_revision, weight=100)]
            await actions.set_traffic(self.isvc, target.component, weights)
            self._run.traffic[target.component] = weights
        self._run.programmed_weight = 0
        if not self.moving():
            # The spec went back to the stable revisions: nothing left to roll.
            await self._drain(abandoned)
            await self._enter(RolloutPhase.STABLE, force=True)
            return RolloutRunOutcome.SUPERSEDED
        self._arm(rearm=True)
        self._message = "re-armed toward a new target; stable kept"
        await self._publish()
        await self._drain([t for t in abandoned if t.revision not in {n.revision for n in self._targets}])
        return None

    async def _drain(self, revisions: list[ComponentTarget]) -> None:
        if not revisions:
            return
        await workflow.sleep(self.scale_down_delay())
        for target in revisions:
            await actions.delete_revision(self.isvc, target.component, target.revision)

    async def _repin(self, pinned: PinnedGroup) -> None:
        """The plan changed under a running canary: clamp the step; hold traffic if the clamped
        step would raise exposure (capacity may still converge ahead of traffic)."""
        self._pinned = pinned
        canary = self._canary()
        steps = self._steps()
        canary.current_step = clamp_step(canary.current_step or 0, len(steps))
        if repin_raises_exposure(steps[canary.current_step], canary.observed_traffic_weight or 0):
            canary.pre_step_hold = True
        await self._publish()

    async def _apply_resume(self) -> None:
        """ome.io/rollout-resume=<canary hash>: re-enter at step 0, clearing a park."""
        value = self._resume
        self._resume = None
        canary = self._canary()
        if value != canary.canary_revision_hash:
            return
        canary.current_step = 0
        canary.step_entered_time = workflow.now()
        canary.failed = None
        canary.pre_step_hold = False
        canary.capacity_wait_since = None
        if self._has_analysis():
            canary.analysis_failed_checks = 0
        self._reset_step_clock()
        self._message = "resumed at step 0"
        await self._enter(RolloutPhase.CANARYING, force=True)

