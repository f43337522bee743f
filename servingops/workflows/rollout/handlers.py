"""The RolloutWorkflow's handlers and plumbing: the forwarded annotation signals, the SDK's
`promote` / `rollback` updates and the `state` query, the driver surface every progression uses
(progressions/driver.py: Driver, CanaryDriver), and publishing reports to the InferenceService
workflow. The step machines themselves are in progressions/.

Handlers can run before the workflow's run method (signal-with-start, an early update), so
everything they touch is initialised in __init__.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.api_models import contract
    from servingops.api_models.contract import AnnotationEvent, Query, Signal, Update
    from servingops.api_models.contract.rollout import (
        ComponentTarget,
        PinnedGroup,
        Progression,
        PromoteRequest,
        RetargetRequest,
        RolloutReport,
        RolloutState,
        progression_of,
    )
    from servingops.api_models.ome.enums import (
        CanaryFailureReason,
        ComponentType,
        CoordinationPhase,
        CoordinationPolicy,
        RolloutPhase,
    )
    from servingops.api_models.ome.rollout import RolloutGroupStep
    from servingops.api_models.ome.rollout_status import CanaryStatus, RolloutCoordinationGroupStatus
    from servingops.api_models.refs import ObjectRef
    from servingops.api_models.serving import TrafficWeight
    from servingops.workflows.rollout.models import AnnotationState, CarriedRun, RolloutInput, RolloutSettings
    from servingops.workflows.rollout.plan import entrypoint
    from servingops.workflows.rollout.steps import Gate, StepWait, poll_interval, ready_timeout
    from servingops.workflows.visibility import Visibility

REPORTS_IN_FLIGHT = "reports-in-flight"
"""The patch after which a report is sent without waiting for the parent's acknowledgement before
the run's next command (docs/durability.md): the run's next activity leaves in the same workflow
task as the report, instead of a workflow task later."""


class RolloutHandlers:
    def __init__(self) -> None:
        # Signals and updates may arrive before run() starts: everything they touch lives here.
        self.annotations = AnnotationState()
        self._rollback_requested = False
        self._resume: str | None = None
        self._retarget: RetargetRequest | None = None
        self._promote_tokens: list[str] = []
        self._applied_tokens: set[str] = set()
        self._consumed: list[str] = []
        self._needs_publish = False
        self.progress = CarriedRun()
        self.targets: list[ComponentTarget] = []
        self.pinned: PinnedGroup | None = None
        self.settings = RolloutSettings()
        self._params: RolloutInput | None = None
        self.gate_name: str | None = None
        self.message = ""
        self._finished = False
        self._visibility: Visibility | None = None
        self.isvc = ObjectRef(group="", version="", plural="", kind="", name="")
        self._report_in_flight: asyncio.Task[None] | None = None
        """The last report sent and not yet acknowledged by the parent (patch reports-in-flight)."""

    # -- annotation signals (from the bridge and the InferenceService workflow) -----------------

    @workflow.signal(name=Signal.RUN_ANNOTATION)
    def on_annotation(self, event: AnnotationEvent) -> None:
        """A rollout annotation's change, as the bridge saw it. It comes twice: straight from the
        bridge (the update below: the short path from a promote to its weights) and forwarded by the InferenceService
        workflow (the path that cannot be lost), in either order. Each change is acted on once, by
        its resourceVersion: a change no newer than the last one acted on for that annotation is
        dropped, so a late copy cannot undo a newer change (a promote's value forwarded after its
        removal arrived would otherwise promote a second step)."""
        if self._acted_on(event):
            return
        order = contract.resource_version_order(event.resource_version)
        if order is not None:
            self.progress.annotation_versions[event.name] = order
        # The annotation's own signal handler below (contract.ROLLOUT_SIGNALS names it) does the rest.
        name = contract.ROLLOUT_SIGNALS.get(event.name)
        handler = workflow.get_signal_handler(name) if name is not None else None
        if handler is not None:
            handler(event.value)

    @workflow.update(name=Update.RUN_ANNOTATION)
    def on_annotation_update(self, event: AnnotationEvent) -> None:
        """The same change as the signal above, from the bridge straight to this run: as an update the
        server hands it to the worker without writing it to the history first, so a promote's scale and
        weights start sooner (contract.Update.RUN_ANNOTATION)."""
        self.on_annotation(event)

    @on_annotation_update.validator
    def _annotation_update_is_new(self, event: AnnotationEvent) -> None:
        """A change acted on already (its copy through the service came first) is rejected: a rejected
        update leaves nothing in the history."""
        if self._acted_on(event):
            raise ValueError(f"{event.name} at resourceVersion {event.resource_version} was acted on already")

    def _acted_on(self, event: AnnotationEvent) -> bool:
        """Whether this run acted on this change of the annotation, or a newer one, already (a non-numeric
        resourceVersion is acted on: contract.resource_version_order)."""
        order = contract.resource_version_order(event.resource_version)
        return order is not None and order <= self.progress.annotation_versions.get(event.name, -1)

    # The signals below carry the value alone: what the InferenceService workflow forwarded before
    # the patch `annotation-events-to-runs` (histories recorded then still send them).

    @workflow.signal(name=Signal.PROMOTE)
    def on_promote(self, value: str | None) -> None:
        """Level-triggered like upstream: acts while value == canary hash != promotedThrough;
        its removal clears promotedThrough, re-arming manual promotion for later steps."""
        self.annotations.promote = value
        canary = self.progress.canary
        if value is None and canary is not None and canary.promoted_through and not self._finished:
            canary.promoted_through = None
            self._needs_publish = True  # the main loop's next wake writes it

    @workflow.signal(name=Signal.PROMOTE_FORCE)
    def on_promote_force(self, value: str | None) -> None:
        """Skips the current step's gate (analysis, bake, timed, manual, pre-step hold): one
        step per distinct value, which must equal the canary revision hash."""
        self.annotations.promote_force = value
        canary = self.progress.canary
        if canary is not None and value and value == canary.canary_revision_hash \
                and value != self.progress.forced_through:
            self.progress.pending_force = True
            self.progress.forced_through = value
        if value is None:
            self.progress.forced_through = None

    @workflow.signal(name=Signal.ROLLBACK)
    def on_rollback(self, value: str | None) -> None:
        # Only the exact value "true" asks for a rollback (upstream OME's contract).
        if value == "true" and not self._finished:
            self._rollback_requested = True

    @workflow.signal(name=Signal.RESUME)
    def on_resume(self, value: str | None) -> None:
        if value:
            self._resume = value

    @workflow.signal(name=Signal.PAUSED)
    def on_paused(self, value: str | None) -> None:
        self.annotations.paused = value == "true"

    @workflow.signal(name=Signal.READY_TIMEOUT)
    def on_ready_timeout(self, value: str | None) -> None:
        self.annotations.ready_timeout = value

    @workflow.signal(name=Signal.RETARGET)
    def on_retarget(self, request: RetargetRequest) -> None:
        self._retarget = request

    # -- SDK updates and query ------------------------------------------------------------------

    @workflow.update(name=Update.PROMOTE)
    async def promote(self, request: PromoteRequest) -> CanaryStatus:
        info = workflow.current_update_info()
        token = info.id if info else str(len(self._promote_tokens))
        self._promote_tokens.append(token)
        await workflow.wait_condition(lambda: token in self._applied_tokens or self._finished)
        return self.canary().model_copy(deep=True)

    @promote.validator
    def _validate_promote(self, request: PromoteRequest) -> None:
        canary = self.progress.canary
        if canary is None or self._finished:
            raise ValueError("no canary is running in this group")
        if request.revision != canary.canary_revision_hash:
            raise ValueError(f"promote names {request.revision!r} but the canary revision is "
                             f"{canary.canary_revision_hash!r}")
        if canary.failed is not None:
            raise ValueError(f"the canary is parked ({canary.failed.reason}); roll back or retarget")
        if self.gate_name not in (Gate.MANUAL.value, StepWait.HOLD.value):
            raise ValueError(f"step {canary.current_step} is not waiting for a promote (gate: {self.gate_name})")

    @workflow.update(name=Update.ROLLBACK)
    async def rollback(self) -> CanaryStatus:
        self._rollback_requested = True
        rejected = self.canary().canary_revision_hash
        # Answer once traffic is back on stable (the drain follows), or the request was refused.
        await workflow.wait_condition(lambda: self._finished or self.canary().rolled_back_revision_hash == rejected
                                      or self._stable_missing())
        return self.canary().model_copy(deep=True)

    def _stable_missing(self) -> bool:
        failed = self.canary().failed
        return failed is not None and failed.reason == CanaryFailureReason.STABLE_REVISION_MISSING

    @rollback.validator
    def _validate_rollback(self) -> None:
        canary = self.progress.canary
        if canary is None or self._finished:
            raise ValueError("no canary is running in this group")
        if canary.failed is not None and canary.failed.reason == CanaryFailureReason.STABLE_REVISION_MISSING:
            raise ValueError("the stable revision is missing: there is nothing to roll back to")
        if self.progress.phase in (RolloutPhase.PROMOTING, RolloutPhase.STABLE, RolloutPhase.ROLLING_BACK,
                               RolloutPhase.ROLLED_BACK):
            raise ValueError(f"the canary is {self.progress.phase}: too late to roll back")

    @workflow.query(name=Query.STATE)
    def state(self) -> RolloutState:
        pinned = self.pinned
        return RolloutState(
            key=pinned.key if pinned else "", run_id=self._params.run_id if self._params else "",
            progression=progression_of(pinned) if pinned else Progression.BLUE_GREEN, phase=self.progress.phase,
            gate=self.gate_name, paused=self.annotations.paused, canary=self.progress.canary,
            coordination=self.progress.coordination, targets=self.targets, traffic=self.progress.traffic,
            last_message=self.message)

    # -- the Driver surface every progression uses (progressions/driver.py) -----------------------

    def moving(self) -> list[ComponentTarget]:
        return [t for t in self.targets if t.revision != t.stable_revision]

    def rollback_requested(self) -> bool:
        return self._rollback_requested

    def retarget_requested(self) -> bool:
        return self._retarget is not None

    def request_rollback(self) -> None:
        self._rollback_requested = True

    def clear_rollback(self) -> None:
        self._rollback_requested = False

    def take_retarget(self) -> RetargetRequest | None:
        request, self._retarget = self._retarget, None
        return request

    def take_resume(self) -> str | None:
        value, self._resume = self._resume, None
        return value

    def ready_timeout(self) -> timedelta:
        canary = self.pinned.group.canary if self.pinned else None
        return ready_timeout(self.annotations.ready_timeout, canary.ready_timeout if canary else None,
                             self.settings.operator.ready_timeout)

    def scale_down_delay(self) -> timedelta:
        canary = self.pinned.group.canary if self.pinned else None
        seconds = canary.scale_down_delay_seconds if canary and canary.scale_down_delay_seconds is not None \
            else self.settings.operator.scale_down_delay_seconds
        return timedelta(seconds=max(0, seconds))

    def poll_seconds(self, waited: timedelta) -> float:
        return poll_interval(waited, self.settings.poll_seconds)

    def record_traffic(self, component: ComponentType, weights: list[TrafficWeight]) -> None:
        self.progress.traffic[component] = weights

    def record_ready(self, component: ComponentType, revision: str) -> None:
        self.progress.ready[component] = revision

    async def coordinate(self, phase: CoordinationPhase, message: str = "", surge: int | str | None = None) -> None:
        pinned = self.group()
        previous = self.progress.coordination
        changed = previous is None or previous.phase != phase
        policy = CoordinationPolicy.ROLLING_UPDATE if pinned.group.rolling_update is not None \
            else CoordinationPolicy.BLUE_GREEN
        self.progress.coordination = RolloutCoordinationGroupStatus(
            name=pinned.key, components=[t.component for t in self.targets], policy=policy, phase=phase,
            composite_phase=phase.value, observed_surge=surge if surge is not None else
            (previous.observed_surge if previous else None),
            last_transition_time=workflow.now() if changed or previous is None else previous.last_transition_time,
            message=message or None)
        self.message = message
        self._set_phase(phase.value)
        await self.publish()

    # -- promote bookkeeping --------------------------------------------------------------------

    def promote_available(self) -> bool:
        canary = self.progress.canary
        if self._promote_tokens:
            return True
        value = self.annotations.promote
        return canary is not None and bool(value) and value == canary.canary_revision_hash \
            and value != canary.promoted_through

    def take_promote(self) -> bool:
        if not self.promote_available():
            return False
        self._consumed = self._promote_tokens[:1]
        del self._promote_tokens[:1]
        return True

    def mark_promotes_applied(self) -> None:
        self._applied_tokens.update(self._consumed)
        self._consumed = []

    # -- plumbing -------------------------------------------------------------------------------

    def interrupted(self) -> bool:
        return self._rollback_requested or self._resume is not None or self._retarget is not None

    async def wait(self, seconds: float | None, until: Callable[[], bool] | None = None) -> None:
        if seconds is not None and seconds <= 0:
            return
        def condition() -> bool:
            return self.interrupted() or self._needs_publish or (until is not None and until())

        try:
            await workflow.wait_condition(condition, timeout=seconds)
        except TimeoutError:
            pass
        if self._needs_publish:
            self._needs_publish = False
            await self.publish()

    def canary(self) -> CanaryStatus:
        return self.progress.canary if self.progress.canary is not None else CanaryStatus()

    def group(self) -> PinnedGroup:
        assert self.pinned is not None
        return self.pinned

    def steps(self) -> list[RolloutGroupStep]:
        canary = self.group().group.canary
        return list(canary.steps or []) if canary else []

    def has_analysis(self) -> bool:
        return any(step.analysis is not None for step in self.steps())

    def primary(self) -> ComponentTarget:
        main = entrypoint([t.component for t in self.targets])
        return next(t for t in self.targets if t.component == main)

    def _set_phase(self, phase: str) -> None:
        self.progress.phase = phase
        if self._visibility is not None:
            self._visibility.publish(phase)

    async def enter(self, phase: RolloutPhase, *, force: bool = False) -> None:
        """Move to `phase`, publishing when it changed (or when asked to)."""
        if self.progress.phase == phase.value and not force:
            return
        self._set_phase(phase.value)
        await self.publish()

    def _report(self) -> RolloutReport:
        pinned = self.group()
        return RolloutReport(
            key=pinned.key, seq=self.progress.seq, run_id=self._params.run_id if self._params else "",
            progression=progression_of(pinned), phase=self.progress.phase, canary=self.progress.canary,
            coordination=self.progress.coordination, traffic=dict(self.progress.traffic),
            ready=dict(self.progress.ready), targets=list(self.targets))

    async def publish(self, *, sample: bool = False) -> None:
        """Report to the InferenceService workflow, which writes status. A sample that changed
        no outcome is throttled so a week-long bake does not flood the parent's history."""
        now = workflow.now()
        if sample and self.progress.last_published_sample is not None and \
                (now - self.progress.last_published_sample).total_seconds() < self.settings.sample_report_seconds:
            return
        self.progress.last_published_sample = now
        if self._visibility is not None and self.progress.phase:
            self._visibility.publish(self.progress.phase)
        self.progress.seq += 1
        parent = workflow.info().parent
        if parent is None:
            return
        report = self._report()
        handle = workflow.get_external_workflow_handle(parent.workflow_id)
        if not workflow.patched(REPORTS_IN_FLIGHT):
            await handle.signal(Signal.ROLLOUT_REPORT, report)
            return
        # One report in flight at a time, so the parent receives them in order (Temporal does not
        # order two signals in flight); the signal itself is durable once its command is recorded,
        # so the run goes on (its next activity leaves in this same workflow task) instead of
        # spending a workflow task round trip on the acknowledgement.
        await self.reports_delivered()
        self._report_in_flight = asyncio.create_task(handle.signal(Signal.ROLLOUT_REPORT, report))

    async def reports_delivered(self) -> None:
        """Wait until the parent acknowledged the last report (raising what its signal raised).
        Before the run completes or continues as new: a signal still in flight then is cancelled."""
        in_flight, self._report_in_flight = self._report_in_flight, None
        if in_flight is not None:
            await in_flight

    async def maybe_continue_as_new(self) -> None:
        info = workflow.info()
        budget = self.settings.history_budget
        if not (info.is_continue_as_new_suggested() or info.get_current_history_length() > budget):
            return
        if self.interrupted() or self._promote_tokens:
            return  # handle what is pending first; it is carried nowhere else
        if self._report_in_flight is not None:
            await self.reports_delivered()
            if self.interrupted() or self._promote_tokens:
                return  # arrived while the report was acknowledged
        await workflow.wait_condition(workflow.all_handlers_finished)
        assert self._params is not None
        workflow.continue_as_new(self._params.model_copy(update={
            "targets": self.targets, "pinned": self.pinned, "annotations": self.annotations, "carried": self.progress}))

