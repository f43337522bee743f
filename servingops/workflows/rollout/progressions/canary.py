"""The canary progression: one group's step machine, driven through the run that owns it.

Each step converges capacity (new-revision replicas per component), then programs traffic, then
waits on its gate (analysis, then a timed pause, then a manual pause, then none; steps.gate_of)
and advances, rolls back or parks. Completion gives the canary full capacity and 100% traffic
and drains the old revision after the scale-down delay; a rollback puts traffic back on stable
first. A retarget re-arms toward the new target keeping the original stable; a repin clamps the
step and may hold traffic until a promote; ome.io/rollout-resume re-enters at step 0.

Same entry as the other progressions: `run(driver)`, returning the run's outcome. The pure rules
(capacity, gates, verdicts, timeouts) are in `workflows.rollout.steps`; everything the machine
reads or writes about the run (CanaryStatus, phase, messages, promotes, annotations) goes
through the driver (`progressions.driver.CanaryDriver`), which publishes it to the parent.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from servingops.activities.serving.activities import ServingActivities
    from servingops.activities.serving.types import ObserveInput, RevisionKey, RevisionObservation
    from servingops.api_models.contract.rollout import ComponentTarget, PinnedGroup, RetargetRequest
    from servingops.api_models.durations import parse_duration
    from servingops.api_models.errors import ErrorType, error_type_of
    from servingops.api_models.ome.enums import CanaryFailureReason, ComponentType, RolloutPhase, RolloutRunOutcome
    from servingops.api_models.ome.rollout import GroupCanary, RolloutGroupStep
    from servingops.api_models.ome.rollout_status import CanaryFailure
    from servingops.api_models.serving import TrafficWeight
    from servingops.workflows import options
    from servingops.workflows.rollout import analysis, status
    from servingops.workflows.rollout.progressions.driver import CanaryDriver
    from servingops.workflows.rollout.progressions.readiness import (
        SCALE_THEN_ROUTE,
        scale_down_delay,
        scale_revision,
        scale_then_route,
        set_weights,
    )
    from servingops.workflows.rollout.steps import (
        Gate,
        GateOutcome,
        StepWait,
        Verdict,
        clamp_step,
        gate_of,
        judge_sample,
        pause_of,
        repin_raises_exposure,
        stall_anchor,
        step_capacity,
    )

_FINAL = RolloutGroupStep(capacity="100%", traffic=100)
"""Completion's capacity gate: the canary must carry the full desired set before it owns 100%."""
CAPACITY_FROM_SCALE = "capacity-from-scale"
"""The patch after which a step's first capacity check reads the Deployments the scale just
returned instead of asking again with serving.revision_status (docs/durability.md)."""


async def run(driver: CanaryDriver) -> RolloutRunOutcome | None:
    """Completed, RolledBack, or Superseded (the spec went back to the stable revisions); a park
    (capacity timeout, stalled analysis, missing stable) waits inside for a decision."""
    return await _StepMachine(driver).run()


class _StepMachine:
    def __init__(self, driver: CanaryDriver) -> None:
        self.d = driver
        self._routed_with_scale: int | None = None
        """The weight the step's capacity gate already programmed with its scale (patch
        scale-then-route), which _apply_traffic then records instead of writing again."""

    async def run(self) -> RolloutRunOutcome | None:
        if self.d.progress.canary is None:
            self._arm(rearm=False)
            await self.d.publish()
        while True:
            await self.d.maybe_continue_as_new()
            request = self.d.take_retarget()
            if request is not None:
                superseded = await self._apply_retarget(request)
                if superseded is not None:
                    return superseded
                continue
            resume = self.d.take_resume()
            if resume is not None:
                await self._apply_resume(resume)
                continue
            if self.d.rollback_requested():
                outcome = await self._rollback()
                self.d.clear_rollback()
                if outcome is not None:
                    return outcome
                continue
            canary = self.d.canary()
            if canary.failed is not None:
                # Parked: the step machine does not run; stable keeps serving whatever it serves.
                self.d.gate_name = None
                await self.d.enter(RolloutPhase.FAILED)
                await self.d.wait(None)
                continue
            steps = self.d.steps()
            current = canary.current_step or 0
            if current >= len(steps):
                completed = await self._complete()
                if completed:
                    return RolloutRunOutcome.COMPLETED
                continue
            step = steps[current]
            if not await self._capacity_gate(step, route=True):
                continue
            await self._apply_traffic(step)
            verdict = await self._gate(step)
            if verdict == GateOutcome.ROLLBACK:
                self.d.request_rollback()
            elif verdict in (GateOutcome.ADVANCE, GateOutcome.PROMOTED, GateOutcome.FORCED):
                await self._advance(promoted=verdict == GateOutcome.PROMOTED)

    def _arm(self, *, rearm: bool) -> None:
        """Write a fresh CanaryStatus for the current targets (replacing it in place on re-arm)."""
        self.d.progress.canary = status.armed_canary(
            self.d.targets, self.d.primary(), previous=self.d.progress.canary, rearm=rearm,
            has_analysis=self.d.has_analysis(), now=workflow.now())
        self._reset_step_clock()
        self.d.progress.phase = RolloutPhase.PENDING.value

    def _reset_step_clock(self) -> None:
        self.d.progress.analysis_start = None
        self.d.progress.last_sample = None
        self.d.progress.last_outcome_key = ""

    async def _capacity_gate(self, step: RolloutGroupStep, *, route: bool = False) -> bool:
        """Converge new-revision replicas for the step; False when interrupted or parked. With `route`,
        the step's weights are written together with the scale when its capacity is already Ready
        (patch scale-then-route: a promote between steps of equal capacity costs one local activity)."""
        canary = self.d.canary()
        self.d.gate_name = StepWait.CAPACITY.value
        want = {t.component: step_capacity(step, t.desired_replicas) for t in self.d.moving()}
        scaled: dict[ComponentType, RevisionObservation] = {}
        self._routed_with_scale = None
        try:
            if route and workflow.patched(SCALE_THEN_ROUTE):
                weight = self._step_weight(step)
                routes = [] if self.d.progress.programmed_weight == weight else \
                    [(t.component, self._split(t, weight)) for t in self.d.moving()]
                both = await scale_then_route(
                    self.d.isvc, [(t.component, t.revision, want[t.component]) for t in self.d.moving()], routes)
                scaled = {t.component: seen for t, seen in zip(self.d.moving(), both.scaled, strict=True)}
                if both.routed:
                    self._routed_with_scale = weight
            else:
                for target in self.d.moving():
                    scaled[target.component] = await scale_revision(self.d.isvc, target.component, target.revision,
                                                                    want[target.component])
        except ActivityError as error:
            if error_type_of(error) is not ErrorType.REVISION_SUPERSEDED:
                raise
            self.d.message = "the canary revision is no longer rendered by the spec; waiting for the new target"
            await self.d.enter(RolloutPhase.PENDING)
            await self.d.wait(None)
            return False
        # The scale's answer is the Deployment as the apiserver holds it after the write, as fresh as
        # a read: the first check uses it, saving a round trip per step (a promote's path to its
        # traffic). A history from before the patch read again.
        if not workflow.patched(CAPACITY_FROM_SCALE):
            scaled = {}
        while True:
            met = True
            ready: dict[ComponentType, int] = {}
            for target in self.d.moving():
                seen = scaled.pop(target.component, None)
                if seen is None:
                    seen = await workflow.execute_activity_method(
                        ServingActivities.revision_status,
                        RevisionKey(isvc=self.d.isvc, component=target.component, revision=target.revision),
                        **options.KUBE)
                ready[target.component] = seen.ready_replicas
                met = met and ready[target.component] >= want[target.component]
            if met:
                changed = canary.capacity_wait_since is not None
                canary.capacity_wait_since = None
                for target in self.d.moving():
                    if ready[target.component] > 0 and self.d.progress.ready.get(target.component) != target.revision:
                        self.d.progress.ready[target.component] = target.revision
                        changed = True
                if changed:
                    await self.d.publish()
                return True
            now = workflow.now()
            if canary.capacity_wait_since is None:
                canary.capacity_wait_since = now
                await self.d.enter(RolloutPhase.PENDING, force=True)
            limit = self.d.ready_timeout()
            elapsed = now - canary.capacity_wait_since
            if elapsed >= limit:
                # Traffic never moved for this step, so stable keeps serving; park for a decision.
                canary.failed = CanaryFailure(reason=CanaryFailureReason.CAPACITY_TIMEOUT, time=now)
                self.d.message = f"step {canary.current_step} capacity not Ready within {limit}"
                await self.d.enter(RolloutPhase.FAILED, force=True)
                return False
            await self.d.wait(min(self.d.poll_seconds(elapsed), (limit - elapsed).total_seconds()))
            if self.d.interrupted():
                return False

    def _step_weight(self, step: RolloutGroupStep) -> int:
        """The canary weight the step programs."""
        canary = self.d.canary()
        programmed = canary.observed_traffic_weight or 0
        if canary.pre_step_hold and step.traffic > programmed:
            return programmed  # a repin may only hold or tighten exposure
        return step.traffic

    async def _apply_traffic(self, step: RolloutGroupStep) -> None:
        canary = self.d.canary()
        weight = self._step_weight(step)
        routed, self._routed_with_scale = self._routed_with_scale, None
        if self.d.progress.programmed_weight != weight:
            for target in self.d.moving():
                if routed == weight:  # written by the capacity gate's call: only remembered here
                    self.d.progress.traffic[target.component] = self._split(target, weight)
                else:
                    await self._route(target, weight)
            self.d.progress.programmed_weight = weight
            canary.observed_traffic_weight = weight
            await self.d.publish()
        if self.d.progress.analysis_start is None:
            self.d.progress.analysis_start = workflow.now()

    async def _route(self, target: ComponentTarget, weight: int) -> None:
        await self._set_weights(target.component, self._split(target, weight))

    @staticmethod
    def _split(target: ComponentTarget, weight: int) -> list[TrafficWeight]:
        return [TrafficWeight(revision=target.stable_revision, weight=100 - weight),
                TrafficWeight(revision=target.revision, weight=weight)]

    async def _send_all_to(self, target: ComponentTarget, revision: str) -> None:
        await self._set_weights(target.component, [TrafficWeight(revision=revision, weight=100)])

    async def _set_weights(self, component: ComponentType, weights: list[TrafficWeight]) -> None:
        """Program the component's route, then remember what it now carries."""
        await set_weights(self.d.isvc, component, weights)
        self.d.progress.traffic[component] = weights

    async def _gate(self, step: RolloutGroupStep) -> GateOutcome:
        """ADVANCE / PROMOTED / FORCED when the step may advance, ROLLBACK, or AGAIN when
        something else (a signal, a park, a released hold) needs the outer loop."""
        gate = gate_of(step)
        while True:
            await self.d.maybe_continue_as_new()
            if self.d.interrupted():
                return GateOutcome.AGAIN
            canary = self.d.canary()
            if self.d.progress.pending_force:
                self.d.progress.pending_force = False
                return GateOutcome.FORCED
            if canary.pre_step_hold:
                self.d.gate_name = StepWait.HOLD.value
                if self.d.take_promote():
                    canary.pre_step_hold = False
                    canary.promoted_through = canary.canary_revision_hash
                    canary.step_entered_time = workflow.now()
                    self.d.mark_promotes_applied()
                    await self.d.publish()
                    return GateOutcome.AGAIN
                await self.d.enter(RolloutPhase.PAUSED)
                await self.d.wait(None, lambda: self.d.promote_available() or self.d.progress.pending_force)
                continue
            if self.d.annotations.paused:
                self.d.gate_name = StepWait.PAUSED.value
                await self.d.enter(RolloutPhase.PAUSED)
                await self.d.wait(None, lambda: not self.d.annotations.paused or self.d.progress.pending_force)
                continue
            self.d.gate_name = gate.value
            if gate == Gate.IMMEDIATE:
                return GateOutcome.ADVANCE
            if gate == Gate.TIMED:
                deadline = (canary.step_entered_time or workflow.now()) + pause_of(step)
                remaining = (deadline - workflow.now()).total_seconds()
                if remaining <= 0:
                    return GateOutcome.ADVANCE
                await self.d.enter(RolloutPhase.CANARYING)
                await self.d.wait(remaining, self._gate_disturbed)
                continue
            if gate == Gate.MANUAL:
                if self.d.take_promote():
                    return GateOutcome.PROMOTED
                await self.d.enter(RolloutPhase.PAUSED)
                await self.d.wait(None, lambda: self.d.promote_available() or self._gate_disturbed())
                continue
            await self.d.enter(RolloutPhase.CANARYING)
            verdict = await self._analysis(step)
            if verdict is not None:
                return verdict

    def _gate_disturbed(self) -> bool:
        return self.d.annotations.paused or self.d.progress.pending_force

    async def _analysis(self, step: RolloutGroupStep) -> GateOutcome | None:
        spec = step.analysis
        assert spec is not None
        canary = self.d.canary()
        now = workflow.now()
        started = self.d.progress.analysis_start or now
        first = started + (parse_duration(spec.initial_delay) if spec.initial_delay else timedelta(0))
        last = self.d.progress.last_sample
        due = first if last is None else max(first, last + parse_duration(spec.interval))
        if now < due:
            await self.d.wait((due - now).total_seconds(), self._gate_disturbed)
            return None
        canary_spec = self.d.group().group.canary or GroupCanary()
        source = analysis.prometheus_source(canary_spec, self.d.settings.operator, self.d.isvc.namespace)
        context = analysis.query_context(self.d.isvc, self.d.primary(),
                                         canary.stable_revision_hash or self.d.primary().stable_revision)
        evaluation = await analysis.sample(spec, source, context)
        now = workflow.now()
        self.d.progress.last_sample = now
        canary.last_evaluation_time = now
        if evaluation.conclusive:
            canary.last_conclusive_evaluation_time = now
        canary.metric_results = analysis.metric_results(spec, evaluation, now)
        verdict, canary.analysis_failed_checks = judge_sample(
            failed=evaluation.failed, conclusive=evaluation.conclusive,
            failed_checks=canary.analysis_failed_checks or 0, failure_limit=spec.failure_limit,
            on_inconclusive=spec.on_inconclusive, now=now,
            stall_anchor=stall_anchor(canary.last_conclusive_evaluation_time, first),
            stall_timeout=parse_duration(self.d.settings.operator.stall_timeout))
        outcome_key = analysis.outcome_key(verdict, canary.analysis_failed_checks, evaluation)
        changed = outcome_key != self.d.progress.last_outcome_key
        self.d.progress.last_outcome_key = outcome_key
        if verdict == Verdict.ROLLBACK:
            self.d.message = f"analysis at step {canary.current_step}: " + "; ".join(
                m.message for m in evaluation.metrics if m.passed is not True)
            await self.d.publish()
            return GateOutcome.ROLLBACK
        if verdict == Verdict.PARK:
            canary.failed = CanaryFailure(reason=CanaryFailureReason.ANALYSIS_STALLED, time=now)
            self.d.message = f"analysis inconclusive for {self.d.settings.operator.stall_timeout}"
            await self.d.publish()
            return GateOutcome.AGAIN
        baked = now >= (canary.step_entered_time or now) + pause_of(step)
        if verdict == Verdict.PASS and baked:
            return GateOutcome.ADVANCE
        await self.d.publish(sample=not changed)
        return None

    async def _advance(self, *, promoted: bool) -> None:
        canary = self.d.canary()
        canary.current_step = (canary.current_step or 0) + 1
        canary.step_entered_time = workflow.now()
        canary.capacity_wait_since = None
        if self.d.has_analysis():
            canary.analysis_failed_checks = 0  # failureLimit counts per step
        if promoted:
            # Stamped in the same report as the advance: the durable record of the promotion.
            canary.promoted_through = canary.canary_revision_hash
        self._reset_step_clock()
        self.d.mark_promotes_applied()
        self.d.progress.phase = RolloutPhase.CANARYING.value
        await self.d.publish()

    async def _complete(self) -> bool:
        """Canary becomes stable: full capacity, 100% traffic, old revision drained after the delay."""
        canary = self.d.canary()
        if not await self._capacity_gate(_FINAL):
            return False
        for target in self.d.moving():
            await self._send_all_to(target, target.revision)
        self.d.progress.programmed_weight = 100
        canary.observed_traffic_weight = 100
        canary.stable_revision_hash = None
        canary.pre_step_hold = False
        canary.current_step = len(self.d.steps())
        self.d.gate_name = None
        await self.d.enter(RolloutPhase.PROMOTING, force=True)
        await scale_down_delay(self.d.scale_down_delay())
        for target in self.d.moving():
            await workflow.execute_activity_method(
                ServingActivities.delete_revision,
                RevisionKey(isvc=self.d.isvc, component=target.component, revision=target.stable_revision),
                **options.KUBE)
        await self.d.enter(RolloutPhase.STABLE, force=True)
        return True

    async def _rollback(self) -> RolloutRunOutcome | None:
        canary = self.d.canary()
        if canary.failed is not None and canary.failed.reason == CanaryFailureReason.STABLE_REVISION_MISSING:
            self.d.message = "rollback refused: the stable revision is missing"
            await self.d.publish()
            return None
        missing = await self._missing_stables()
        if missing:
            canary.failed = CanaryFailure(reason=CanaryFailureReason.STABLE_REVISION_MISSING, time=workflow.now())
            self.d.message = "cannot roll back: " + ", ".join(f"{t.component.value} revision {t.stable_revision}"
                                                             for t in missing) + " is gone"
            await self.d.enter(RolloutPhase.FAILED, force=True)
            return None
        self.d.gate_name = None
        await self.d.enter(RolloutPhase.ROLLING_BACK, force=True)
        for target in self.d.moving():
            await scale_revision(self.d.isvc, target.component, target.stable_revision, target.desired_replicas)
            await self._send_all_to(target, target.stable_revision)
        self.d.progress.programmed_weight = 0
        canary.observed_traffic_weight = 0
        canary.rolled_back_revision_hash = canary.canary_revision_hash
        canary.failed = None
        canary.pre_step_hold = False
        canary.capacity_wait_since = None
        await self.d.publish()
        self.d.clear_rollback()  # traffic is back on stable: the update may answer now
        await scale_down_delay(self.d.scale_down_delay())
        for target in self.d.moving():
            await workflow.execute_activity_method(
                ServingActivities.delete_revision,
                RevisionKey(isvc=self.d.isvc, component=target.component, revision=target.revision), **options.KUBE)
        await self.d.enter(RolloutPhase.ROLLED_BACK, force=True)
        return RolloutRunOutcome.ROLLED_BACK

    async def _missing_stables(self) -> list[ComponentTarget]:
        """Stable revisions whose Deployment no longer exists (the revert could not run)."""
        observation = await workflow.execute_activity_method(
            ServingActivities.observe, ObserveInput(isvc=self.d.isvc), **options.KUBE)
        if observation is None:
            return []  # the InferenceService is gone; the parent is ending this run
        existing = {(c.component, r.revision) for c in observation.components for r in c.revisions}
        return [t for t in self.d.moving() if (t.component, t.stable_revision) not in existing]

    async def _apply_retarget(self, request: RetargetRequest) -> RolloutRunOutcome | None:
        old = {t.component: t for t in self.d.targets}
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
        self.d.targets = [t.model_copy(update={"stable_revision": old[t.component].stable_revision})
                         if t.component in old else t for t in request.targets]
        if request.pinned is not None:
            self.d.pinned = request.pinned
        for target in abandoned:
            await self._send_all_to(target, target.stable_revision)
        self.d.progress.programmed_weight = 0
        if not self.d.moving():
            # The spec went back to the stable revisions: nothing left to roll.
            await self._drain(abandoned)
            await self.d.enter(RolloutPhase.STABLE, force=True)
            return RolloutRunOutcome.SUPERSEDED
        self._arm(rearm=True)
        self.d.message = "re-armed toward a new target; stable kept"
        await self.d.publish()
        await self._drain([t for t in abandoned if t.revision not in {n.revision for n in self.d.targets}])
        return None

    async def _drain(self, revisions: list[ComponentTarget]) -> None:
        if not revisions:
            return
        await scale_down_delay(self.d.scale_down_delay())
        for target in revisions:
            await workflow.execute_activity_method(
                ServingActivities.delete_revision,
                RevisionKey(isvc=self.d.isvc, component=target.component, revision=target.revision), **options.KUBE)

    async def _repin(self, pinned: PinnedGroup) -> None:
        """The plan changed under a running canary: clamp the step; hold traffic if the clamped
        step would raise exposure (capacity may still converge ahead of traffic)."""
        self.d.pinned = pinned
        canary = self.d.canary()
        steps = self.d.steps()
        canary.current_step = clamp_step(canary.current_step or 0, len(steps))
        if repin_raises_exposure(steps[canary.current_step], canary.observed_traffic_weight or 0):
            canary.pre_step_hold = True
        await self.d.publish()

    async def _apply_resume(self, value: str) -> None:
        """ome.io/rollout-resume=<canary hash>: re-enter at step 0, clearing a park."""
        canary = self.d.canary()
        if value != canary.canary_revision_hash:
            return
        canary.current_step = 0
        canary.step_entered_time = workflow.now()
        canary.failed = None
        canary.pre_step_hold = False
        canary.capacity_wait_since = None
        if self.d.has_analysis():
            canary.analysis_failed_checks = 0
        self._reset_step_clock()
        self.d.message = "resumed at step 0"
        await self.d.enter(RolloutPhase.CANARYING, force=True)

