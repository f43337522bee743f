"""The RolloutWorkflow's handlers and plumbing: the forwarded annotation signals, the SDK's
`promote` / `rollback` updates and the `state` query, the Driver surface the blue-green and
rolling progressions use, and publishing reports to the InferenceService workflow. The step
machine itself is in `canary`.

Handlers can run before the workflow's run method (signal-with-start, an early update), so
everything they touch is initialised in __init__.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from api_models.ome.enums import (
        CanaryFailureReason,
        ComponentType,
        CoordinationPhase,
        CoordinationPolicy,
        RolloutPhase,
    )
    from api_models.ome.rollout import RolloutGroupStep
    from api_models.ome.rollout_status import CanaryStatus, RolloutCoordinationGroupStatus
    from api_models.refs import ObjectRef
    from api_models.serving_io import TrafficWeight
    from workflows.rollout.models import (
        PAUSED,
        PROMOTE,
        PROMOTE_FORCE,
        READY_TIMEOUT,
        RESUME,
        RETARGET,
        ROLLBACK,
        ROLLOUT_REPORT,
        STATE,
        AnnotationState,
        CarriedRun,
        ComponentTarget,
        PinnedGroup,
        Progression,
        PromoteRequest,
        RetargetRequest,
        RolloutInput,
        RolloutReport,
        RolloutSettings,
        RolloutState,
        progression_of,
    )
    from workflows.rollout.steps import Gate, poll_interval, ready_timeout
    from workflows.rollout.units import entrypoint
    from workflows.visibility import Visibility


class RolloutHandlers:
    def __init__(self) -> None:
        # Signals and updates may arrive before run() starts: everything they touch lives here.
        self._ann = AnnotationState()
        self._rollback_requested = False
        self._resume: str | None = None
        self._retarget: RetargetRequest | None = None
        self._promote_tokens: list[str] = []
        self._applied_tokens: set[str] = set()
        self._consumed: list[str] = []
        self._needs_publish = False
        self._run = CarriedRun()
        self._targets: list[ComponentTarget] = []
        self._pinned: PinnedGroup | None = None
        self._settings = RolloutSettings()
        self._params: RolloutInput | None = None
        self._gate_name: str | None = None
        self._message = ""
        self._finished = False
        self._visibility: Visibility | None = None
        self.isvc = ObjectRef(group="", version="", plural="", kind="", name="")

    # -- annotation signals (forwarded by the InferenceService workflow) -----------------------

    @workflow.signal(name=PROMOTE)
    def on_promote(self, value: str | None) -> None:
        """Level-triggered like upstream: acts while value == canary hash != promotedThrough;
        its removal clears promotedThrough, re-arming manual promotion for later steps."""
        self._ann.promote = value
        canary = self._run.canary
        if value is None and canary is not None and canary.promoted_through and not self._finished:
            canary.promoted_through = None
            self._needs_publish = True  # the main loop's next wake writes it

    @workflow.signal(name=PROMOTE_FORCE)
    def on_promote_force(self, value: str | None) -> None:
        """Skips the current step's gate (analysis, bake, timed, manual, pre-step hold): one
        step per distinct value, which must equal the canary revision hash."""
        self._ann.promote_force = value
        canary = self._run.canary
        if canary is not None and value and value == canary.canary_revision_hash and value != self._run.forced_through:
            self._run.pending_force = True
            self._run.forced_through = value
        if value is None:
            self._run.forced_through = None

    @workflow.signal(name=ROLLBACK)
    def on_rollback(self, value: str | None) -> None:
        # Only the exact value "true" asks for a rollback (upstream OME's contract).
        if value == "true" and not self._finished:
            self._rollback_requested = True

    @workflow.signal(name=RESUME)
    def on_resume(self, value: str | None) -> None:
        if value:
            self._resume = value

    @workflow.signal(name=PAUSED)
    def on_paused(self, value: str | None) -> None:
        self._ann.paused = value == "true"

    @workflow.signal(name=READY_TIMEOUT)
    def on_ready_timeout(self, value: str | None) -> None:
        self._ann.ready_timeout = value

    @workflow.signal(name=RETARGET)
    def on_retarget(self, request: RetargetRequest) -> None:
        self._retarget = request

    # -- SDK updates and query ------------------------------------------------------------------

    @workflow.update(name=PROMOTE)
    async def promote(self, request: PromoteRequest) -> CanaryStatus:
        info = workflow.current_update_info()
        token = info.id if info else str(len(self._promote_tokens))
        self._promote_tokens.append(token)
        await workflow.wait_condition(lambda: token in self._applied_tokens or self._finished)
        return self._canary().model_copy(deep=True)

    @promote.validator
    def _validate_promote(self, request: PromoteRequest) -> None:
        canary = self._run.canary
        if canary is None or self._finished:
            raise ValueError("no canary is running in this group")
        if request.revision != canary.canary_revision_hash:
            raise ValueError(f"promote names {request.revision!r} but the canary revision is "
                             f"{canary.canary_revision_hash!r}")
        if canary.failed is not None:
            raise ValueError(f"the canary is parked ({canary.failed.reason}); roll back or retarget")
        if self._gate_name not in (Gate.MANUAL.value, "hold"):
            raise ValueError(f"step {canary.current_step} is not waiting for a promote (gate: {self._gate_name})")

    @workflow.update(name=ROLLBACK)
    async def rollback(self) -> CanaryStatus:
        self._rollback_requested = True
        rejected = self._canary().canary_revision_hash
        # Answer once traffic is back on stable (the drain follows), or the request was refused.
        await workflow.wait_condition(lambda: self._finished or self._canary().rolled_back_revision_hash == rejected
                                      or self._stable_missing())
        return self._canary().model_copy(deep=True)

    def _stable_missing(self) -> bool:
        failed = self._canary().failed
        return failed is not None and failed.reason == CanaryFailureReason.STABLE_REVISION_MISSING

    @rollback.validator
    def _validate_rollback(self) -> None:
        canary = self._run.canary
        if canary is None or self._finished:
            raise ValueError("no canary is running in this group")
        if canary.failed is not None and canary.failed.reason == CanaryFailureReason.STABLE_REVISION_MISSING:
            raise ValueError("the stable revision is missing: there is nothing to roll back to")
        if self._run.phase in (RolloutPhase.PROMOTING, RolloutPhase.STABLE, RolloutPhase.ROLLING_BACK,
                               RolloutPhase.ROLLED_BACK):
            raise ValueError(f"the canary is {self._run.phase}: too late to roll back")

    @workflow.query(name=STATE)
    def state(self) -> RolloutState:
        pinned = self._pinned
        return RolloutState(
            key=pinned.key if pinned else "", run_id=self._params.run_id if self._params else "",
            progression=progression_of(pinned) if pinned else Progression.BLUE_GREEN, phase=self._run.phase,
            gate=self._gate_name, paused=self._ann.paused, canary=self._run.canary,
            coordination=self._run.coordination, targets=self._targets, traffic=self._run.traffic,
            last_message=self._message)

    # -- the Driver surface used by blue-green and rolling --------------------------------------

    def moving(self) -> list[ComponentTarget]:
        return [t for t in self._targets if t.revision != t.stable_revision]

    def rollback_requested(self) -> bool:
        return self._rollback_requested

    def retarget_requested(self) -> bool:
        return self._retarget is not None

    def ready_timeout(self) -> timedelta:
        canary = self._pinned.group.canary if self._pinned else None
        return ready_timeout(self._ann.ready_timeout, canary.ready_timeout if canary else None,
                             self._settings.operator.ready_timeout)

    def scale_down_delay(self) -> timedelta:
        canary = self._pinned.group.canary if self._pinned else None
        seconds = canary.scale_down_delay_seconds if canary and canary.scale_down_delay_seconds is not None \
            else self._settings.operator.scale_down_delay_seconds
        return timedelta(seconds=max(0, seconds))

    def poll_seconds(self, waited: timedelta) -> float:
        return poll_interval(waited, self._settings.poll_seconds)

    async def wait(self, seconds: float) -> None:
        await self._wait(seconds)

    def record_traffic(self, component: ComponentType, weights: list[TrafficWeight]) -> None:
        self._run.traffic[component] = weights

    def record_ready(self, component: ComponentType, revision: str) -> None:
        self._run.ready[component] = revision

    async def coordinate(self, phase: CoordinationPhase, message: str = "", surge: int | str | None = None) -> None:
        pinned = self._group()
        previous = self._run.coordination
        changed = previous is None or previous.phase != phase
        policy = CoordinationPolicy.ROLLING_UPDATE if pinned.group.rolling_update is not None \
            else CoordinationPolicy.BLUE_GREEN
        self._run.coordination = RolloutCoordinationGroupStatus(
            name=pinned.key, components=[t.component for t in self._targets], policy=policy, phase=phase,
            composite_phase=phase.value, observed_surge=surge if surge is not None else
            (previous.observed_surge if previous else None),
            last_transition_time=workflow.now() if changed or previous is None else previous.last_transition_time,
            message=message or None)
        self._message = message
        self._set_phase(phase.value)
        await self._publish()

    # -- promote bookkeeping --------------------------------------------------------------------

    def _promote_available(self) -> bool:
        canary = self._run.canary
        if self._promote_tokens:
            return True
        value = self._ann.promote
        return canary is not None and bool(value) and value == canary.canary_revision_hash \
            and value != canary.promoted_through

    def _take_promote(self) -> bool:
        if not self._promote_available():
            return False
        self._consumed = self._promote_tokens[:1]
        del self._promote_tokens[:1]
        return True

    def _mark_tokens(self) -> None:
        self._applied_tokens.update(self._consumed)
        self._consumed = []

    # -- plumbing -------------------------------------------------------------------------------

    def _interrupted(self) -> bool:
        return self._rollback_requested or self._resume is not None or self._retarget is not None

    async def _wait(self, seconds: float | None, until: Callable[[], bool] | None = None) -> None:
        if seconds is not None and seconds <= 0:
            return
        def condition() -> bool:
            return self._interrupted() or self._needs_publish or (until is not None and until())

        try:
            await workflow.wait_condition(condition, timeout=seconds)
        except TimeoutError:
            pass
        if self._needs_publish:
            self._needs_publish = False
            await self._publish()

    def _canary(self) -> CanaryStatus:
        return self._run.canary if self._run.canary is not None else CanaryStatus()

    def _group(self) -> PinnedGroup:
        assert self._pinned is not None
        return self._pinned

    def _steps(self) -> list[RolloutGroupStep]:
        canary = self._group().group.canary
        return list(canary.steps or []) if canary else []

    def _has_analysis(self) -> bool:
        return any(step.analysis is not None for step in self._steps())

    def _primary(self) -> ComponentTarget:
        main = entrypoint([t.component for t in self._targets])
        return next(t for t in self._targets if t.component == main)

    def _phase(self) -> str:
        return self._run.phase

    def _set_phase(self, phase: str) -> None:
        self._run.phase = phase
        if self._visibility is not None:
            self._visibility.publish(phase)

    async def _enter(self, phase: RolloutPhase, *, force: bool = False) -> None:
        """Move to `phase`, publishing when it changed (or when asked to)."""
        if self._run.phase == phase.value and not force:
            return
        self._set_phase(phase.value)
        await self._publish()

    def _report(self) -> RolloutReport:
        pinned = self._group()
        return RolloutReport(
            key=pinned.key, seq=self._run.seq, run_id=self._params.run_id if self._params else "",
            progression=progression_of(pinned), phase=self._run.phase, canary=self._run.canary,
            coordination=self._run.coordination, traffic=dict(self._run.traffic), ready=dict(self._run.ready),
            targets=list(self._targets))

    async def _publish(self, *, sample: bool = False) -> None:
        """Report to the InferenceService workflow, which writes status. A sample that changed
        no outcome is throttled so a week-long bake does not flood the parent's history."""
        now = workflow.now()
        if sample and self._run.last_published_sample is not None and \
                (now - self._run.last_published_sample).total_seconds() < self._settings.sample_report_seconds:
            return
        self._run.last_published_sample = now
        if self._visibility is not None and self._run.phase:
            self._visibility.publish(self._run.phase)
        self._run.seq += 1
        parent = workflow.info().parent
        if parent is None:
            return
        await workflow.get_external_workflow_handle(parent.workflow_id).signal(ROLLOUT_REPORT, self._report())

    async def _maybe_continue_as_new(self) -> None:
        info = workflow.info()
        budget = self._settings.history_budget
        if not (info.is_continue_as_new_suggested() or info.get_current_history_length() > budget):
            return
        if self._interrupted() or self._promote_tokens:
            return  # handle what is pending first; it is carried nowhere else
        await workflow.wait_condition(workflow.all_handlers_finished)
        assert self._params is not None
        workflow.continue_as_new(self._params.model_copy(update={
            "targets": self._targets, "pinned": self._pinned, "annotations": self._ann, "carried": self._run}))

