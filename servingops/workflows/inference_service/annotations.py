"""The OME rollout annotations of an InferenceService (ome.io/rollout-promote, -rollback, -resume, ...),
as the bridge reports their changes: each change is kept in the state and forwarded to every open
run (as the bridge's event, which the run acts on once), and a request carried out (or refused for
good) and written to status is removed from the object again.

The bridge reports the ome.io/* traffic annotations' changes the same way (they move no generation):
such a change is a look at the object, whose backend traffic policy is kept from the object as it is
(traffic_policy.py).
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import AnnotationRemoval, KubernetesActivities
    from servingops.api_models import contract
    from servingops.api_models.contract import AnnotationEvent, Signal
    from servingops.api_models.errors import error_message
    from servingops.api_models.ome.traffic_annotations import is_traffic_annotation
    from servingops.workflows import options
    from servingops.workflows.inference_service.context import ServiceContext
    from servingops.workflows.inference_service.runs import RolloutRuns

ANNOTATION_EVENTS_TO_RUNS = "annotation-events-to-runs"
"""The patch after which a rollout annotation is forwarded to the runs as the bridge's event
(Signal.RUN_ANNOTATION, ordered by resourceVersion) instead of its value alone (docs/durability.md)."""
REMOVE_CONSUMED_ANNOTATIONS = "remove-consumed-annotations"
"""The patch that added the kube.remove_annotation calls (docs/durability.md)."""
TRAFFIC_ANNOTATION_LOOKS = "traffic-annotation-looks"
"""The patch after which a traffic annotation's change is a look at the object (serving.observe, then
serving.ensure_backend_policy), not left to the next poll or spec edit (docs/durability.md)."""


class Annotations:
    def __init__(self, ctx: ServiceContext, runs: RolloutRuns) -> None:
        self.ctx = ctx
        self.runs = runs
        self.events: list[AnnotationEvent] = []
        """Changes the bridge reported, not yet taken."""
        self.removals_done: set[tuple[str, str]] = set()
        """(annotation, value) already removed or found changed: not tried again until it changes."""
        self.removal_failed = False

    async def take(self) -> None:
        events, self.events = self.events, []
        for event in events:
            if is_traffic_annotation(event.name) and workflow.patched(TRAFFIC_ANNOTATION_LOOKS):
                # Asked only on such an event (the bridge sent none before the patch): a look at the
                # object now, which keeps the policy from the object as it is. The value is kept below as
                # any other's was; the look's observation replaces it with the rollout annotations.
                self.ctx.changed = True
            if event.value is None:
                self.ctx.state.annotations.pop(event.name, None)
            else:
                self.ctx.state.annotations[event.name] = event.value
            # A new value is a new request: once consumed, it is removed again.
            self.removals_done = {done for done in self.removals_done if done[0] != event.name}
            if event.name == contract.ROLLOUT_ROLLBACK:
                self.runs.rollback_refused = False
                self.runs.rollback_forwarded = {run.key for run in self.ctx.state.active.values()} \
                    if event.value == "true" else set()
            name = contract.ROLLOUT_SIGNALS.get(event.name)
            if name is None:
                continue
            if event.name == contract.ROLLOUT_RESUME and event.value:
                # Resume names a rejected revision: release the hold so the next plan re-opens the
                # run at step 0.
                for key, primary in list(self.ctx.state.held_primary.items()):
                    if primary == event.value and key not in self.ctx.state.active:
                        self.ctx.state.held.pop(key, None)
                        self.ctx.state.held_primary.pop(key, None)
                        self.ctx.changed = True
            # The event itself, with its resourceVersion: the bridge sends it to the runs too, and
            # a run acts on each change once. Histories from before the patch forwarded the value.
            events_to_runs = workflow.patched(ANNOTATION_EVENTS_TO_RUNS)
            for run in list(self.ctx.state.active.values()):
                if events_to_runs:
                    await self.runs.signal(run, Signal.RUN_ANNOTATION, event)
                else:
                    await self.runs.signal(run, name, event.value)

    # -- consumed annotations ------------------------------------------------------------------

    def _consumed(self) -> list[tuple[str, str]]:
        """Annotations whose request has been carried out, or refused for good, and written to
        status: a promote whose value a canary records in promotedThrough, and a rollback a run
        refused because its stable revision is missing (seed 004)."""
        annotations = self.ctx.state.annotations
        consumed = []
        promote = annotations.get(contract.ROLLOUT_PROMOTE)
        if promote and any(view.canary is not None and view.canary.promoted_through == promote
                           for view in self.ctx.state.components.values()):
            consumed.append((contract.ROLLOUT_PROMOTE, promote))
        if self.runs.rollback_refused and annotations.get(contract.ROLLOUT_ROLLBACK) == "true":
            consumed.append((contract.ROLLOUT_ROLLBACK, "true"))
        return [item for item in consumed if item not in self.removals_done]

    async def remove_consumed(self) -> None:
        """Best effort, after the status that records the outcome has landed: remove each consumed
        annotation if it still holds the consumed value (a user's newer value stays). The removal
        comes back from the bridge as the annotation's removal, which re-arms promotion. A failed
        attempt is retried on a later pass; a history from before this existed removes nothing."""
        self.removal_failed = False
        consumed = self._consumed()
        if not consumed or not workflow.patched(REMOVE_CONSUMED_ANNOTATIONS):
            return
        for name, value in consumed:
            removal = AnnotationRemoval(ref=self.ctx.require_ref(), name=name, value=value)
            try:
                removed = await workflow.execute_activity_method(KubernetesActivities.remove_annotation, removal,
                                                                 **options.CLEANUP)
            except ActivityError as error:
                workflow.logger.warning("could not remove %s=%s (will retry): %s", name, value, error_message(error))
                self.removal_failed = True
                continue
            self.removals_done.add((name, value))
            if removed and self.ctx.state.annotations.get(name) == value:
                self.ctx.state.annotations.pop(name)
            if name == contract.ROLLOUT_ROLLBACK:
                self.runs.rollback_refused = False
