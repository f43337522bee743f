"""The InferenceService's status write: the fields its workflow owns (components, rollout, conditions,
what serving by reference found, overlays, pins, migration history, ingress), built by
workflows/rollout/status.py, with the Events of the pass, through kube.patch_status.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import KubernetesActivities, StatusPatch
    from servingops.api_models.ome.model_status import MountedOverlay
    from servingops.api_models.ome.traffic import TrafficStatus
    from servingops.workflows import options
    from servingops.workflows.inference_service.context import ServiceContext
    from servingops.workflows.inference_service.serving import Serving
    from servingops.workflows.inference_service.traffic_policy import TrafficPolicy
    from servingops.workflows.rollout import status


async def write_status(ctx: ServiceContext, serving: Serving, traffic: TrafficPolicy) -> None:
    """The status the InferenceService workflow owns, with the Events of the pass; an object found gone
    ends the workflow."""
    ref = ctx.require_ref()
    written = status.service_status(ref.name, ctx.state, workflow.now())
    mounted, skipped = serving.overlays
    conditions = status.conditions(ctx.state, ctx.refusal, serving.held)
    if serving.placed:
        # Seed 004: Ready on a control-plane source is placement serving readiness (written by the
        # placement workflow); the components' aggregate here would say "not ready" for ever.
        conditions = [c for c in conditions if c.type != "Ready"]
    if serving.scaling is not None:
        conditions.append(serving.scaling)
    if mounted or skipped:
        written.mounted_overlays = [MountedOverlay.model_validate(m) for m in mounted] or None
        conditions.append(status.overlays_condition(mounted, skipped))
    if serving.by_reference:
        written.model_status = status.model_status(ctx.state, refusal=ctx.refusal, held=serving.held,
                                                   copies=serving.model_copies, now=workflow.now())
    if serving.pin != (None, None) or serving.pin_dropped:
        written.pinned_revision_name, written.last_runtime_sync_token = serving.pin
        serving.pin_dropped = False
    if ctx.state.migration_history:
        written.migration_history = ctx.state.migration_history
    if traffic.status is not None:
        written.traffic = TrafficStatus.model_validate(traffic.status)
    elif traffic.clear:
        written.traffic = None  # no intent left: status.traffic leaves (seed: nil without intent)
        traffic.clear = False
    ingress = status.ingress_condition(ctx.state.ingress, ctx.state.components)
    ctx.note(status.ingress_note(ingress, ctx.state.ingress_verdict))
    ctx.state.ingress_verdict = status.ingress_verdict(ingress, ctx.state.ingress_verdict)
    notes, ctx.notes = ctx.notes, []
    patch = StatusPatch(ref=ref, status=written.to_merge_patch(whole_values=True), conditions=conditions,
                        observed_generation=ctx.state.generation, events=notes)
    alive = await workflow.execute_activity_method(KubernetesActivities.patch_status, patch, **options.KUBE)
    if not alive:
        ctx.deleting = True
