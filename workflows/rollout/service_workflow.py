"""InferenceServiceWorkflow: the entity workflow of one InferenceService (id isvc/<ns>/<name>/<uid>).

Started by the bridge with StartObject; woken by "object-changed" / "delete" / "annotation"
signals and by its rollout children's reports. It re-reads the object through serving.observe
(a signal carries a version, never the object), serves a new InferenceService's first revision
at 100%, and when a component's desired revision changes it opens a run for the unit holding the
component: one RolloutWorkflow child per unit (id rollout/<ns>/<isvc>/<uid>/<group>). It is the
single writer of the status fields rollouts own, so concurrent groups never overwrite each
other's part of status.components.

A serving activity that refuses the spec with a permanent error (a component with nothing to
run, a Deployment the apiserver rejects) ends that reconcile: the refusal becomes the Ready
condition's reason and message and a Warning Event, and the workflow waits for the next
generation instead of retrying the same spec.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, ChildWorkflowError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import AnnotationRemoval, EventNote, KubernetesActivities, StatusPatch
    from servingops.activities.operator_config import OperatorConfigActivities
    from servingops.activities.serving.activities import ServingActivities
    from servingops.activities.serving.autoscaler import AutoscalerActivities, EnsureAutoscalerInput
    from servingops.activities.serving.types import (
        ComponentObservation,
        EnsureRevisionInput,
        ObserveInput,
        RevisionKey,
        ServiceObservation,
        ServingHold,
        SetTrafficInput,
    )
    from servingops.api_models import contract
    from servingops.api_models.contract import AnnotationEvent, ObjectEvent, Query, Signal, StartObject, WorkflowType
    from servingops.api_models.contract.rollout import (
        ActiveRun,
        ComponentTarget,
        ComponentView,
        PinnedGroup,
        Progression,
        RetargetRequest,
        RolloutReport,
        ServiceState,
        ServiceView,
    )
    from servingops.api_models.durations import parse_duration
    from servingops.api_models.errors import ErrorType, error_message, error_type_of
    from servingops.api_models.ome.enums import (
        AutoscalerManagedBy,
        CanaryFailureReason,
        ComponentType,
        RolloutPlanSource,
        RolloutRunOutcome,
    )
    from servingops.api_models.ome.migration import MigrationHistoryEntry
    from servingops.api_models.ome.model_status import MountedOverlay
    from servingops.api_models.ome.rollout import RolloutGroup, RolloutSpec
    from servingops.api_models.ome.rollout_status import (
        RolloutGroupResolution,
        ShadowedRolloutPolicyRef,
    )
    from servingops.api_models.refs import ObjectRef
    from servingops.api_models.serving import TrafficWeight
    from servingops.workflows import options
    from servingops.workflows.migration import history as migration_history
    from servingops.workflows.rollout import analysis, plan, policy_pinning, status
    from servingops.workflows.rollout.models import (
        AnnotationState,
        Refusal,
        RolloutInput,
        RolloutResult,
        RolloutSettings,
    )
    from servingops.workflows.rollout.plan import Unit, entrypoint
    from servingops.workflows.rollout.steps import poll_interval
    from servingops.workflows.visibility import Visibility

_RESYNC_PARKED = 60.0
"""How often a parked group re-tries resolving its policy (it may have been created since)."""
_RESYNC_BY_REFERENCE = 30.0
"""How often a service rendered from a model and runtime is observed again without an event of its
own: a runtime edit (autoSync) or a model change re-renders, and a new template rolls out."""
_RESYNC_HELD = 60.0
"""The longest wait between looks at a held spec's model and runtime (sooner at first)."""
_RETRY_REMOVAL = 60.0
"""How soon a consumed annotation whose removal failed is tried again (a pass re-reads it first)."""
_RESYNC_INGRESS_WAIT = 60.0
"""The longest wait between looks at routes the Gateway has not accepted yet (sooner at first): its
verdict is written on the HTTPRoute, and no event of the InferenceService says it arrived."""
_RESYNC_INGRESS = 293.0
"""How often a service whose routes are settled is observed again (about 5 minutes): a Gateway that
later refuses a route turns IngressReady (and Ready) False within this long, and a change of the
operator's ingress block (a Gateway configured after the service was served) reaches its routes.
Neither is an event of the InferenceService; the cost is one observe (and status write) per
service per interval. Not a round number: at 300 s it came due at the instant a run's 5m
readyTimeout report woke the service, and the time-skipping test server refuses the CancelTimer
of a timer that fires while the task is with the worker (temporalio/sdk-java#2606, #3088; see
tests/test_replica_workflow.py). The real server takes it; the tests would strand the run."""
ANNOTATION_EVENTS_TO_RUNS = "annotation-events-to-runs"
"""The patch after which a rollout annotation is forwarded to the runs as the bridge's event
(Signal.RUN_ANNOTATION, ordered by resourceVersion) instead of its value alone (docs/durability.md)."""
REMOVE_CONSUMED_ANNOTATIONS = "remove-consumed-annotations"
"""The patch that added the kube.remove_annotation calls (docs/durability.md)."""
OMENATIVE_AUTOSCALER = "omenative-autoscaler"
"""The patch that added serving.ensure_autoscaler for OMENative components (docs/replicas.md)."""
AUTOSCALER_WHEN_NEEDED = "autoscaler-when-needed"
"""The patch that calls serving.ensure_autoscaler only when the scaler's inputs moved or a scaler of
ours is live (before it: every pass, four apiserver reads for a component with no scaler at all)."""


class ServiceInput(StartObject):
    """StartObject as the bridge sends it, plus the state continue-as-new carries."""

    carried: ServiceState | None = None
    settings: RolloutSettings = RolloutSettings()
    refusal: Refusal | None = None
    """The refused generation, carried so a continue-as-new does not retry it."""


def _loaded_copies(observation: ServiceObservation) -> int:
    """Ready pods of the engine's revisions that carry traffic (the copies of the model serving)."""
    for seen in observation.components:
        if seen.component is ComponentType.ENGINE:
            carrying = {w.revision for w in seen.traffic if w.weight > 0}
            return sum(r.ready_replicas for r in seen.revisions if r.revision in carrying)
    return 0


@workflow.defn(name=WorkflowType.INFERENCE_SERVICE)
class InferenceServiceWorkflow:
    def __init__(self) -> None:
        self._state = ServiceState()
        self._settings = RolloutSettings()
        self._ref: ObjectRef | None = None
        self._changed = True
        self._deleting = False
        self._dirty = False
        self._reports: list[RolloutReport] = []
        self._results: list[tuple[str, RolloutResult | None, str, ErrorType | None]] = []
        self._annotations: list[AnnotationEvent] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._phase = "Pending"
        self._unready_since: datetime | None = None
        """When the current wait for components to serve began (paces the readiness poll)."""
        self._refusal: Refusal | None = None
        self._held: ServingHold | None = None
        self._placed = False
        """The source has spec.placement: its Ready condition is the placement workflow's."""
        """The spec serves by reference and its model / runtime cannot serve it yet: what serves keeps
        serving, nothing new is rendered, and the service is observed again (not refused)."""
        self._held_since: datetime | None = None
        self._by_reference = False
        self._pin: tuple[str | None, str | None] = (None, None)
        """(status.pinnedRevisionName, status.lastRuntimeSyncToken) as last observed: autoSync false."""
        self._pin_dropped = False
        self._model_copies: int | None = None
        self._overlays: tuple[list[dict[str, object]], list[str]] = ([], [])
        """(status.mountedOverlays, overlays left out with why) as last rendered."""
        """Ready engine pods on revisions carrying traffic, for status.modelStatus.modelCopies."""
        """The last observation rendered from a model and runtime: re-observed every _RESYNC_BY_REFERENCE."""
        self._notes: list[EventNote] = []
        """Events to record with the next status write."""
        self._rollback_forwarded: set[str] = set()
        """Runs that were handed ome.io/rollout-rollback=true and have not answered it yet."""
        self._rollback_refused = False
        """A run refused the forwarded rollback (its stable revision is missing): the annotation goes."""
        self._removals_done: set[tuple[str, str]] = set()
        """(annotation, value) already removed or found changed: not tried again until it changes."""
        self._removal_failed = False
        self._ingress_since: datetime | None = None
        """When the current wait for the Gateway to accept the routes began (paces its poll)."""
        self._ingress_settling = False
        """A route was applied again for a new ingress configuration: looked at soon, whatever the
        last verdict said (it was about the route before)."""

    # -- bridge signals ----------------------------------------------------------------------

    @workflow.signal(name=Signal.OBJECT_CHANGED)
    def object_changed(self, event: ObjectEvent) -> None:
        if not self._same_object(event.uid):
            return
        if event.deleting:
            self._deleting = True
        elif event.generation > self._state.generation:
            self._changed = True

    @workflow.signal(name=Signal.DELETE)
    def delete(self, event: ObjectEvent) -> None:
        if self._same_object(event.uid):
            self._deleting = True

    @workflow.signal(name=Signal.ANNOTATION)
    def annotation(self, event: AnnotationEvent) -> None:
        if self._same_object(event.uid):
            self._annotations.append(event)

    @workflow.signal(name=Signal.ROLLOUT_REPORT)
    def rollout_report(self, report: RolloutReport) -> None:
        self._reports.append(report)

    @workflow.query(name=Query.STATE)
    def state(self) -> ServiceView:
        return ServiceView.model_validate({**self._state.model_dump(), "phase": self._phase})

    @workflow.signal(name=Signal.REPLICA_CHANGED)
    def replica_changed(self) -> None:
        """A projected InferenceReplica's status moved: observe again (its lifecycle is mirrored)."""
        self._changed = True

    @workflow.signal(name=Signal.MIGRATION_OUTCOME)
    def migration_outcome(self, entry: MigrationHistoryEntry) -> None:
        """A migration of one of this service's Instances ended: status.migrationHistory keeps it
        (only histories that hold this signal write it, so older ones replay unchanged)."""
        self._state.migration_history = migration_history.window(self._state.migration_history, entry)
        self._changed = self._dirty = True

    def _same_object(self, uid: str) -> bool:
        # Before run() the ref is unknown; the uid in the workflow id already scopes the object.
        return self._ref is None or not self._ref.uid or uid == self._ref.uid

    # -- main loop ------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: ServiceInput) -> None:
        self._ref = start.ref
        self._settings = start.settings
        if start.carried is not None:
            self._state = start.carried
        self._refusal = start.refusal
        visibility = Visibility("InferenceService", start.ref.namespace, start.ref.name)
        while True:
            if self._deleting:
                # Children are closed by their ParentClosePolicy when this run ends; the policies
                # this service referenced learn that its groups are gone.
                visibility.publish("Deleting")
                await self._announce_attachments({})
                return
            self._take_results()
            self._take_reports()
            await self._take_annotations()
            if self._changed:
                self._changed = False
                await self._reconcile()
                if self._deleting:
                    continue
            if self._dirty:
                self._dirty = False
                await self._write_status()
                await self._remove_consumed_annotations()
            self._phase = self._summary()
            visibility.publish(self._phase)
            if self._idle() and self._history_full():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(ServiceInput(ref=start.ref, carried=self._state, settings=self._settings,
                                                      refusal=self._refusal))
            try:
                await workflow.wait_condition(self._has_work, timeout=self._next_wake())
            except TimeoutError:
                self._changed = True  # a poll: re-observe readiness / retry a parked group / end a soak

    def _has_work(self) -> bool:
        return (self._deleting or self._changed or bool(self._reports) or bool(self._results)
                or bool(self._annotations))

    def _idle(self) -> bool:
        return not self._state.active and not self._has_work()

    def _history_full(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > self._settings.history_budget

    def _next_wake(self) -> float | None:
        waits: list[float] = []
        # A refused spec is not polled: nothing will serve until a new generation arrives.
        if self._refusal is None and any(not v.serving_ready for v in self._state.components.values()):
            self._unready_since = self._unready_since or workflow.now()
            waits.append(poll_interval(workflow.now() - self._unready_since, self._settings.poll_seconds))
        else:
            self._unready_since = None
        if self._state.parked:
            waits.append(_RESYNC_PARKED)
        if self._by_reference:
            waits.append(_RESYNC_BY_REFERENCE)
        if self._held is not None:
            # A model turns Ready, a runtime appears: no event of this object says so.
            self._held_since = self._held_since or workflow.now()
            waits.append(poll_interval(workflow.now() - self._held_since, _RESYNC_HELD))
        else:
            self._held_since = None
        if self._removal_failed:
            waits.append(_RETRY_REMOVAL)
        if self._state.soak_until is not None:
            waits.append(max(0.0, (self._state.soak_until - workflow.now()).total_seconds()))
        waits.extend(self._ingress_wait())
        return min(waits) if waits else None

    def _ingress_wait(self) -> list[float]:
        """Polls for what no event of this object brings (the Gateway's verdict, the operator's ingress
        block): soon while a route is not accepted, every few minutes once all are. None for an
        observation from before the ingress block (histories recorded then replay without these
        timers) or a refused spec."""
        ingress = self._state.ingress
        condition = status.ingress_condition(ingress, self._state.components)
        if self._refusal is not None or ingress is None or condition is None:
            self._ingress_since = None
            return []
        if self._ingress_settling or not status.ingress_ready(condition):
            self._ingress_since = self._ingress_since or workflow.now()
            return [poll_interval(workflow.now() - self._ingress_since, _RESYNC_INGRESS_WAIT)]
        self._ingress_since = None
        return [_RESYNC_INGRESS]

    def _summary(self) -> str:
        if self._refusal is not None:
            return "Failed"
        if self._held is not None:
            return "Held"
        if self._state.parked:
            return "Parked"
        if self._state.active:
            return "RollingOut"
        views = self._state.components.values()
        ingress = status.ingress_condition(self._state.ingress, self._state.components)
        serving = bool(views) and all(v.serving_ready for v in views)
        return "Ready" if serving and status.ingress_ready(ingress) else "Pending"

    # -- observing and acting -------------------------------------------------------------------

    async def _reconcile(self) -> None:
        """Observe and act; a permanent refusal from a serving activity ends the attempt."""
        try:
            await self._observe_and_act()
        except ActivityError as error:
            error_type = error_type_of(error)
            if error_type is ErrorType.OBJECT_GONE:
                self._deleting = True
            elif error_type is ErrorType.REVISION_SUPERSEDED:
                self._changed = True  # the spec moved on between the read and the write: read it again
            elif error_type is not None and error_type.permanent:
                self._refuse(error_type, error_message(error))
            else:
                raise

    def _refuse(self, error_type: ErrorType, message: str) -> None:
        refusal = Refusal(generation=self._state.generation, reason=error_type, message=message)
        if refusal != self._refusal:
            self._notes.append(status.refusal_note(refusal))
        self._refusal = refusal
        self._dirty = True

    async def _observe_and_act(self) -> None:
        ref = self._require_ref()
        observation = await workflow.execute_activity_method(
            ServingActivities.observe, ObserveInput(isvc=ref), **options.KUBE)
        if observation is None or observation.deleting:
            self._deleting = True
            return
        state = self._state
        state.generation = observation.generation
        state.annotations = dict(observation.annotations)
        self._ingress_settling = False
        if observation.ingress is not None and observation.ingress != state.ingress:
            state.ingress = observation.ingress
            self._dirty = True
        if observation.placed != self._placed:
            self._placed = observation.placed
            self._dirty = True
        if self._refusal is not None:
            if self._refusal.generation == observation.generation:
                return  # the refused spec has not changed: wait for the next generation
            self._refusal = None
            self._dirty = True
        self._by_reference = observation.by_reference
        if observation.held is None and (observation.mounted_overlays, observation.skipped_overlays) != self._overlays:
            self._overlays = (observation.mounted_overlays, observation.skipped_overlays)
            self._dirty = True
        if observation.by_reference and observation.held is None:
            copies = _loaded_copies(observation)
            if copies != self._model_copies:
                self._model_copies = copies
                self._dirty = True
        pin = (observation.pinned_revision, observation.runtime_sync_token)
        if observation.held is None and pin != self._pin:
            self._pin_dropped = pin == (None, None)  # back to autoSync: the old pin leaves status
            self._pin = pin
            self._dirty = True
        if observation.held != self._held:
            if observation.held is not None:
                self._notes.append(status.held_note(observation.held))
            self._held = observation.held
            self._dirty = True
        if observation.held is not None:
            return  # nothing to render: what serves keeps serving, the next poll looks again
        if observation.placed:
            # Member clusters serve it: the placement workflow writes the derived services there and
            # status.placement here. Nothing is rendered in this cluster, no rollout runs here.
            if state.components:
                state.components.clear()
                self._dirty = True
            return
        for seen in observation.components:
            await self._serve(seen)
        served = [c.component for c in observation.components]
        for gone in [c for c in state.components if c not in served]:
            del state.components[gone]
        spec = RolloutSpec.model_validate(observation.spec_rollout) if observation.spec_rollout else None
        await self._plan(spec, observation)
        self._dirty = True

    async def _serve(self, seen: ComponentObservation) -> None:
        """Keep a component served: its first revision at 100%, stable replicas at the spec's
        count when no run moves it, and readiness of whatever carries its traffic."""
        ref = self._require_ref()
        view = self._state.components.setdefault(seen.component, ComponentView())
        ingress = self._state.ingress
        if ingress is None or ingress.problem_reason is None:
            view.url = seen.url  # else the last known: the ingress block that gave it cannot be read now
        view.address, view.route_status = seen.address, seen.route_status
        view.desired = seen.desired_revision
        view.replica, view.lifecycle = seen.replica, seen.lifecycle
        if view.stable is None and seen.traffic:
            view.stable = max(seen.traffic, key=lambda w: w.weight).revision
            view.traffic = list(seen.traffic)
        if view.stable is None:
            await workflow.execute_activity_method(
                ServingActivities.ensure_revision,
                EnsureRevisionInput(key=RevisionKey(isvc=ref, component=seen.component, revision=seen.desired_revision),
                                    replicas=seen.desired_replicas),
                **options.KUBE)
            weights = [TrafficWeight(revision=seen.desired_revision, weight=100)]
            await workflow.execute_activity_method(
                ServingActivities.set_traffic, SetTrafficInput(isvc=ref, component=seen.component, weights=weights),
                **options.KUBE)
            view.stable = seen.desired_revision
            view.traffic = weights
        revisions = {r.revision: r for r in seen.revisions}
        moving = any(seen.component in (t.component for t in run.targets) for run in self._state.active.values())
        stable = revisions.get(view.stable)
        if seen.ingress_drift and not moving:
            await self._reattach(seen)
        if not moving and stable is not None and stable.replicas != seen.desired_replicas:
            await workflow.execute_activity_method(
                ServingActivities.ensure_revision,
                EnsureRevisionInput(key=RevisionKey(isvc=ref, component=seen.component, revision=view.stable),
                                    replicas=seen.desired_replicas),
                **options.KUBE)
        if seen.replica is not None and workflow.patched(OMENATIVE_AUTOSCALER) and self._scaler_due(seen, view):
            # The service owns the scaler of its projected replica (seed: only the InferenceService
            # controller creates one): applied when its inputs move, mirrored while it is live.
            scaler = await workflow.execute_activity_method(
                AutoscalerActivities.ensure, EnsureAutoscalerInput(isvc=ref, component=seen.component),
                **options.KUBE)
            view.autoscaler = scaler.status
            view.autoscaler_applied = seen.autoscaler_digest
        carrying = [w.revision for w in view.traffic if w.weight > 0] or [view.stable]
        view.serving_ready = any(revisions[r].ready_replicas > 0 for r in carrying if r in revisions)
        if view.latest_ready is None and stable is not None and stable.ready_replicas > 0:
            view.latest_ready = view.stable

    async def _reattach(self, seen: ComponentObservation) -> None:
        """The ingress configuration changed since the component's route was programmed (a Gateway
        set or removed, another domain, the entrypoint moved): apply the route again with the split
        it carries, so existing services follow the operator's configuration. Only while no run moves
        the component (a run's own set_traffic renders the new attachment, and two writers of one
        split could undo each other). A drift is new data (older histories decode it as False), so
        replaying them schedules no such call."""
        weights = [w for w in seen.traffic if w.weight > 0]
        if not weights or sum(w.weight for w in weights) != 100:
            return  # not a split this workflow programmed: leave it to the next run
        try:
            await workflow.execute_activity_method(
                ServingActivities.set_traffic,
                SetTrafficInput(isvc=self._require_ref(), component=seen.component, weights=weights), **options.KUBE)
        except ActivityError as error:
            # The live split cannot be programmed again (a backend's Service deleted behind our
            # back): housekeeping, not the user's spec, so no refusal. The route keeps serving as it
            # is, IngressReady keeps saying it is not attached, and the next look tries again.
            if error_type_of(error) is not ErrorType.INVALID_TRAFFIC:
                raise
            workflow.logger.warning("%s route not re-attached: %s", seen.component.value, error_message(error))
            return
        self._ingress_settling = True

    @staticmethod
    def _scaler_due(seen: ComponentObservation, view: ComponentView) -> bool:
        live = (view.autoscaler or {}).get("managedBy") == AutoscalerManagedBy.OME.value
        changed = seen.autoscaler_digest is None or seen.autoscaler_digest != view.autoscaler_applied
        return live or changed or not workflow.patched(AUTOSCALER_WHEN_NEEDED)

    async def _plan(self, spec: RolloutSpec | None, observation: ServiceObservation) -> None:
        """Steer the runs that are open, then open the units plan.admit lets start."""
        state = self._state
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
        state = self._state
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
        await self._signal(run, Signal.RETARGET, RetargetRequest(run_id=run.run_id, targets=run.targets, pinned=pinned))

    async def _open(self, unit: Unit, targets: list[ComponentTarget]) -> None:
        """Pin the unit's progression and start its run; park (fail-closed) when a policyRef
        does not resolve or contradicts its declared progression."""
        ref = self._require_ref()
        state = self._state
        group = unit.group or RolloutGroup(components=list(unit.components))
        resolution = policy_pinning.resolve(group, await self._read_policy(group))
        if resolution.group is None:
            self._park(unit.key, f"{resolution.park_reason}: {resolution.park_message}")
            return
        # The operator's defaults are read now and pinned for the run, like its policy. A history
        # recorded before this read existed (no patch marker) keeps opening runs as it did then:
        # with its start settings and no operator parks (docs/durability.md).
        operator = self._settings.operator
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
            settings=self._settings.model_copy(update={"operator": operator}),
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
        self._tasks[unit.key] = asyncio.create_task(self._await(unit.key, handle))

    async def _await(self, key: str, handle: ChildWorkflowHandle[object, RolloutResult]) -> None:
        error_type: ErrorType | None = None
        try:
            result: RolloutResult | None = await handle
            message = ""
        except ChildWorkflowError as error:
            error_type = error_type_of(error)
            result = None
            message = error_message(error) if error_type is not None else str(error.cause or error)
        self._results.append((key, result, message, error_type))

    def _park(self, key: str, why: str) -> None:
        if self._state.parked.get(key) != why:
            self._note(status.park_note(key, why))
        self._state.parked[key] = why
        self._dirty = True

    async def _read_policy(self, group: RolloutGroup) -> dict[str, object] | None:
        if group.policy_ref is None:
            return None
        ref = self._require_ref()
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
                ref = self._require_ref()
                wid = contract.rollout_policy_workflow_id(ref.namespace or "", group.policy_ref.name, policy_uid)
                attachments[wid] = attachments.get(wid, 0) + 1
            resolution = policy_pinning.resolve(group, live)
            view = RolloutGroupResolution(index=index, source=resolution.source, policy_ref=group.policy_ref,
                                          observed_digest=resolution.digest)
            if resolution.source == RolloutPlanSource.INLINE and group.policy_ref is not None:
                view.shadowed_policy_ref = ShadowedRolloutPolicyRef(name=group.policy_ref.name,
                                                                    would_pin_digest=resolution.shadowed_digest)
            views.append(view.to_api())
        await self._announce_attachments(attachments)
        return views

    async def _announce_attachments(self, attachments: dict[str, int]) -> None:
        """Nudge every RolloutPolicy whose count of this service's referencing groups changed to
        recount (its attachedGroups spans the namespace, so it counts; we only say when). A
        policy whose workflow is not running misses nothing: it counts when it starts, and
        re-counts periodically as a safety net."""
        before = self._state.policy_attachments
        changed = sorted(wid for wid in before.keys() | attachments.keys() if before.get(wid) != attachments.get(wid))
        self._state.policy_attachments = attachments
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

    def _take_reports(self) -> None:
        reports, self._reports = self._reports, []
        for report in sorted(reports, key=lambda r: r.seq):
            run = self._state.active.get(report.key)
            if run is None or report.seq <= run.seq:
                continue  # late or duplicate
            run.seq = report.seq
            self._apply(run, report)
            self._dirty = True

    def _apply(self, run: ActiveRun, report: RolloutReport) -> None:
        components = self._state.components
        for component, weights in report.traffic.items():
            if component in components:
                self._note(status.traffic_note(component, components[component].traffic, list(weights)))
                components[component].traffic = list(weights)
        for component, revision in report.ready.items():
            if component in components:
                components[component].latest_ready = revision
        if report.progression == Progression.CANARY:
            entry = entrypoint([t.component for t in report.targets]) if report.targets else None
            if entry is not None and entry in components:
                steps = run.pinned.group.canary.steps if run.pinned.group.canary else None
                self._note(status.step_note(components[entry].canary, report.canary, len(steps or [])))
                self._note(status.stopped_note(run.key, components[entry].canary, report.canary))
                components[entry].canary = report.canary
                components[entry].rollout_phase = report.phase
            failed = report.canary.failed if report.canary is not None else None
            if run.key in self._rollback_forwarded and failed is not None \
                    and failed.reason == CanaryFailureReason.STABLE_REVISION_MISSING:
                # The run refused the rollback it was handed: nothing to revert to.
                self._rollback_forwarded.discard(run.key)
                self._rollback_refused = True
        elif report.coordination is not None:
            self._state.coordination[report.key] = report.coordination

    def _take_results(self) -> None:
        results, self._results = self._results, []
        for key, result, message, error_type in results:
            self._tasks.pop(key, None)
            self._rollback_forwarded.discard(key)
            run = self._state.active.pop(key, None)
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
                self._state.parked[key] = f"{note.reason}: {message}"
                self._note(note)
                self._state.last_run = status.run_record(run, RolloutRunOutcome.ROLLED_BACK, workflow.now())
            self._changed = True  # the next group may start, or a newer target may be waiting
            self._dirty = True

    def _close(self, run: ActiveRun, result: RolloutResult) -> None:
        state = self._state
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
        self._note(status.closed_note(run.key, outcome, result.targets, why))
        state.last_run = status.run_record(run, outcome or RolloutRunOutcome.ROLLED_BACK, now)

    def _hold(self, run: ActiveRun, targets: list[ComponentTarget] | None = None) -> None:
        """A rolled-back (or failed) target set is held on stable until a different one appears."""
        state = self._state
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

    async def _take_annotations(self) -> None:
        events, self._annotations = self._annotations, []
        for event in events:
            if event.value is None:
                self._state.annotations.pop(event.name, None)
            else:
                self._state.annotations[event.name] = event.value
            # A new value is a new request: once consumed, it is removed again.
            self._removals_done = {done for done in self._removals_done if done[0] != event.name}
            if event.name == contract.ROLLOUT_ROLLBACK:
                self._rollback_refused = False
                self._rollback_forwarded = {run.key for run in self._state.active.values()} \
                    if event.value == "true" else set()
            name = contract.ROLLOUT_SIGNALS.get(event.name)
            if name is None:
                continue
            if event.name == contract.ROLLOUT_RESUME and event.value:
                # Resume names a rejected revision: release the hold so the next plan re-opens the
                # run at step 0.
                for key, primary in list(self._state.held_primary.items()):
                    if primary == event.value and key not in self._state.active:
                        self._state.held.pop(key, None)
                        self._state.held_primary.pop(key, None)
                        self._changed = True
            # The event itself, with its resourceVersion: the bridge sends it to the runs too, and
            # a run acts on each change once. Histories from before the patch forwarded the value.
            events_to_runs = workflow.patched(ANNOTATION_EVENTS_TO_RUNS)
            for run in list(self._state.active.values()):
                if events_to_runs:
                    await self._signal(run, Signal.RUN_ANNOTATION, event)
                else:
                    await self._signal(run, name, event.value)

    async def _signal(self, run: ActiveRun, name: str, value: object) -> None:
        try:
            await workflow.get_external_workflow_handle(run.workflow_id).signal(name, value)
        except Exception:
            pass  # its result is on its way through _await

    # -- consumed annotations ------------------------------------------------------------------

    def _consumed_annotations(self) -> list[tuple[str, str]]:
        """Annotations whose request has been carried out, or refused for good, and written to
        status: a promote whose value a canary records in promotedThrough, and a rollback a run
        refused because its stable revision is missing (seed 004)."""
        annotations = self._state.annotations
        consumed = []
        promote = annotations.get(contract.ROLLOUT_PROMOTE)
        if promote and any(view.canary is not None and view.canary.promoted_through == promote
                           for view in self._state.components.values()):
            consumed.append((contract.ROLLOUT_PROMOTE, promote))
        if self._rollback_refused and annotations.get(contract.ROLLOUT_ROLLBACK) == "true":
            consumed.append((contract.ROLLOUT_ROLLBACK, "true"))
        return [item for item in consumed if item not in self._removals_done]

    async def _remove_consumed_annotations(self) -> None:
        """Best effort, after the status that records the outcome has landed: remove each consumed
        annotation if it still holds the consumed value (a user's newer value stays). The removal
        comes back from the bridge as the annotation's removal, which re-arms promotion. A failed
        attempt is retried on a later pass; a history from before this existed removes nothing."""
        self._removal_failed = False
        consumed = self._consumed_annotations()
        if not consumed or not workflow.patched(REMOVE_CONSUMED_ANNOTATIONS):
            return
        for name, value in consumed:
            removal = AnnotationRemoval(ref=self._require_ref(), name=name, value=value)
            try:
                removed = await workflow.execute_activity_method(KubernetesActivities.remove_annotation, removal,
                                                                 **options.CLEANUP)
            except ActivityError as error:
                workflow.logger.warning("could not remove %s=%s (will retry): %s", name, value, error_message(error))
                self._removal_failed = True
                continue
            self._removals_done.add((name, value))
            if removed and self._state.annotations.get(name) == value:
                self._state.annotations.pop(name)
            if name == contract.ROLLOUT_ROLLBACK:
                self._rollback_refused = False

    # -- status ------------------------------------------------------------------------------

    def _note(self, note: EventNote | None) -> None:
        if note is not None:
            self._notes.append(note)

    async def _write_status(self) -> None:
        ref = self._require_ref()
        written = status.service_status(ref.name, self._state, workflow.now())
        mounted, skipped = self._overlays
        conditions = status.conditions(self._state, self._refusal, self._held)
        if self._placed:
            # Seed 004: Ready on a control-plane source is placement serving readiness (written by the
            # placement workflow); the components' aggregate here would say "not ready" for ever.
            conditions = [c for c in conditions if c.type != "Ready"]
        if mounted or skipped:
            written.mounted_overlays = [MountedOverlay.model_validate(m) for m in mounted] or None
            conditions.append(status.overlays_condition(mounted, skipped))
        if self._by_reference:
            written.model_status = status.model_status(self._state, refusal=self._refusal, held=self._held,
                                                       copies=self._model_copies, now=workflow.now())
        if self._pin != (None, None) or self._pin_dropped:
            written.pinned_revision_name, written.last_runtime_sync_token = self._pin
            self._pin_dropped = False
        if self._state.migration_history:
            written.migration_history = self._state.migration_history
        ingress = status.ingress_condition(self._state.ingress, self._state.components)
        self._note(status.ingress_note(ingress, self._state.ingress_verdict))
        self._state.ingress_verdict = status.ingress_verdict(ingress, self._state.ingress_verdict)
        notes, self._notes = self._notes, []
        patch = StatusPatch(ref=ref, status=status.merge_patch(written), conditions=conditions,
                            observed_generation=self._state.generation, events=notes)
        alive = await workflow.execute_activity_method(KubernetesActivities.patch_status, patch, **options.KUBE)
        if not alive:
            self._deleting = True

    # -- helpers -------------------------------------------------------------------------------

    def _require_ref(self) -> ObjectRef:
        assert self._ref is not None
        return self._ref

    def _run_id(self) -> str:
        uid = (self._require_ref().uid or "")[:8]
        return f"{uid}-{self._state.run_counter}"

