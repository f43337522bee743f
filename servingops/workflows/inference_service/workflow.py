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

This module is the loop, its signals and its query; the parts it drives, each in its own module
beside it: `serving` (observe, keep each component served), `runs` (the rollout runs: plan, steer,
open, and what they report), `annotations` (the OME rollout annotations: forwarded, removed once
consumed), `status_write` (the status write), `pacing` (when to look again with no news), and
`context` (what they share).

It runs its own loop rather than workflows/entity.py's: its signals are checked against the
object's uid, several kinds of news wake it, and it continues as new only when no run is open.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract import AnnotationEvent, ObjectEvent, Query, Signal, StartObject, WorkflowType
    from servingops.api_models.contract.rollout import RolloutReport, ServiceState, ServiceView
    from servingops.api_models.errors import ErrorType, error_message, error_type_of
    from servingops.api_models.ome.migration import MigrationHistoryEntry
    from servingops.workflows.inference_service.annotations import Annotations
    from servingops.workflows.inference_service.context import ServiceContext
    from servingops.workflows.inference_service.pacing import Pacing
    from servingops.workflows.inference_service.runs import RolloutRuns
    from servingops.workflows.inference_service.serving import Serving
    from servingops.workflows.inference_service.status_write import write_status
    from servingops.workflows.inference_service.traffic_policy import TrafficPolicy
    from servingops.workflows.migration import history as migration_history
    from servingops.workflows.rollout import status
    from servingops.workflows.rollout.models import Refusal, RolloutSettings
    from servingops.workflows.visibility import Visibility


class ServiceInput(StartObject):
    """StartObject as the bridge sends it, plus the state continue-as-new carries."""

    carried: ServiceState | None = None
    settings: RolloutSettings = RolloutSettings()
    refusal: Refusal | None = None
    """The refused generation, carried so a continue-as-new does not retry it."""


@workflow.defn(name=WorkflowType.INFERENCE_SERVICE)
class InferenceServiceWorkflow:
    def __init__(self) -> None:
        # Signals may arrive before run(): every part they reach exists from here on.
        self.ctx = ServiceContext()
        self.serving = Serving(self.ctx)
        self.runs = RolloutRuns(self.ctx)
        self.annotations = Annotations(self.ctx, self.runs)
        self.traffic = TrafficPolicy(self.ctx)
        self.pacing = Pacing(self.ctx, self.serving, self.annotations, self.traffic)
        self._phase = "Pending"

    # -- bridge signals ----------------------------------------------------------------------

    @workflow.signal(name=Signal.OBJECT_CHANGED)
    def object_changed(self, event: ObjectEvent) -> None:
        if not self.ctx.same_object(event.uid):
            return
        if event.deleting:
            self.ctx.deleting = True
        elif event.generation > self.ctx.state.generation:
            self.ctx.changed = True

    @workflow.signal(name=Signal.DELETE)
    def delete(self, event: ObjectEvent) -> None:
        if self.ctx.same_object(event.uid):
            self.ctx.deleting = True

    @workflow.signal(name=Signal.ANNOTATION)
    def annotation(self, event: AnnotationEvent) -> None:
        if self.ctx.same_object(event.uid):
            self.annotations.events.append(event)

    @workflow.signal(name=Signal.ROLLOUT_REPORT)
    def rollout_report(self, report: RolloutReport) -> None:
        self.runs.reports.append(report)

    @workflow.query(name=Query.STATE)
    def state(self) -> ServiceView:
        return ServiceView.model_validate({**self.ctx.state.model_dump(), "phase": self._phase})

    @workflow.signal(name=Signal.REPLICA_CHANGED)
    def replica_changed(self) -> None:
        """A projected InferenceReplica's status moved: observe again (its lifecycle is mirrored)."""
        self.ctx.changed = True

    @workflow.signal(name=Signal.AUTOSCALER_POLICY_CHANGED)
    def autoscaler_policy_changed(self) -> None:
        """A policy a component references has a new spec: observe again, so its scaler follows."""
        self.ctx.changed = True

    @workflow.signal(name=Signal.MIGRATION_OUTCOME)
    def migration_outcome(self, entry: MigrationHistoryEntry) -> None:
        """A migration of one of this service's Instances ended: status.migrationHistory keeps it
        (only histories that hold this signal write it, so older ones replay unchanged)."""
        self.ctx.state.migration_history = migration_history.window(self.ctx.state.migration_history, entry)
        self.ctx.changed = self.ctx.dirty = True

    # -- main loop ------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: ServiceInput) -> None:
        ctx = self.ctx
        ctx.ref = start.ref
        ctx.settings = start.settings
        if start.carried is not None:
            ctx.state = start.carried
        ctx.refusal = start.refusal
        visibility = Visibility("InferenceService", start.ref.namespace, start.ref.name)
        while True:
            if ctx.deleting:
                # Children are closed by their ParentClosePolicy when this run ends; the policies
                # this service referenced learn that its groups are gone.
                visibility.publish("Deleting")
                await self.runs.announce_attachments({})
                await self.serving.release_policies()
                return
            self.runs.take_results()
            self.runs.take_reports()
            await self.annotations.take()
            if ctx.changed:
                ctx.changed = False
                await self._reconcile()
                if ctx.deleting:
                    continue
            if ctx.dirty:
                ctx.dirty = False
                await write_status(ctx, self.serving, self.traffic)
                await self.annotations.remove_consumed()
            if await self.serving.delete_if_expired():
                continue  # deleted (or the ttl moved): observe before anything else
            self._phase = self._summary()
            visibility.publish(self._phase)
            if self._idle() and self._history_full():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(ServiceInput(ref=start.ref, carried=ctx.state, settings=ctx.settings,
                                                      refusal=ctx.refusal))
            try:
                await workflow.wait_condition(self._has_work, timeout=self.pacing.next_wake())
            except TimeoutError:
                ctx.changed = True  # a poll: re-observe readiness / retry a parked group / end a soak

    def _has_work(self) -> bool:
        return (self.ctx.deleting or self.ctx.changed or bool(self.runs.reports) or bool(self.runs.results)
                or bool(self.annotations.events))

    def _idle(self) -> bool:
        return not self.ctx.state.active and not self._has_work()

    def _history_full(self) -> bool:
        info = workflow.info()
        budget = self.ctx.settings.history_budget
        return info.is_continue_as_new_suggested() or info.get_current_history_length() > budget

    def _summary(self) -> str:
        state = self.ctx.state
        if self.ctx.refusal is not None:
            return "Failed"
        if self.serving.held is not None:
            return "Held"
        if state.parked:
            return "Parked"
        if state.active:
            return "RollingOut"
        views = state.components.values()
        ingress = status.ingress_condition(state.ingress, state.components)
        serving = bool(views) and all(v.serving_ready for v in views)
        return "Ready" if serving and status.ingress_ready(ingress) else "Pending"

    # -- observing and acting -------------------------------------------------------------------

    async def _reconcile(self) -> None:
        """Observe and act; a permanent refusal from a serving activity ends the attempt."""
        try:
            planned = await self.serving.observe()
            if not self.ctx.deleting:
                await self.traffic.keep(*self.serving.traffic_intent)
            if planned is not None:
                await self.runs.plan_runs(*planned)
                self.ctx.dirty = True
        except ActivityError as error:
            error_type = error_type_of(error)
            if error_type is ErrorType.OBJECT_GONE:
                self.ctx.deleting = True
            elif error_type is ErrorType.REVISION_SUPERSEDED:
                self.ctx.changed = True  # the spec moved on between the read and the write: read it again
            elif error_type is not None and error_type.permanent:
                self._refuse(error_type, error_message(error))
            else:
                raise

    def _refuse(self, error_type: ErrorType, message: str) -> None:
        refusal = Refusal(generation=self.ctx.state.generation, reason=error_type, message=message)
        if refusal != self.ctx.refusal:
            self.ctx.notes.append(status.refusal_note(refusal))
        self.ctx.refusal = refusal
        self.ctx.dirty = True
