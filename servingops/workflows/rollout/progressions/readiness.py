"""The serving calls every progression makes the same way: scale one revision, program a
component's weights, and read whether a set of revisions is Ready."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.activities.serving.activities import ServingActivities
    from servingops.activities.serving.types import (
        EnsureRevisionInput,
        RevisionKey,
        RevisionObservation,
        ScaleThenRouteInput,
        ScaleThenRouteResult,
        SetTrafficInput,
    )
    from servingops.api_models.contract.rollout import ComponentTarget
    from servingops.api_models.ome.enums import ComponentType
    from servingops.api_models.refs import ObjectRef
    from servingops.api_models.serving import TrafficWeight
    from servingops.workflows import options

LOCAL_SERVING_WRITES = "local-serving-writes"
"""The patch after which a run's scale (`serving.ensure_revision`) and weights (`serving.set_traffic`)
are local activities (docs/durability.md): run inside the workflow task that decides them, a
promote's scale and weights cost no server round trip each."""

SCALE_THEN_ROUTE = "scale-then-route"
"""The patch after which a canary step's scale and weights are one local activity
(`serving.scale_then_route`): the weights are written in the same call when the scale finds the step's
capacity Ready (a promote between steps of equal capacity), one workflow task hop fewer."""

NO_TIMER_FOR_ZERO_DELAY = "no-timer-for-zero-delay"
"""The patch after which a zero scale-down delay starts no timer (docs/durability.md)."""


async def all_ready(isvc: ObjectRef, targets: list[ComponentTarget], *, stable: bool = False) -> bool:
    """Whether every target's revision (its stable one with `stable`) has its desired replicas Ready.
    Every target is read, even after one falls short, so the activity sequence does not depend on
    which one did."""
    ready = True
    for target in targets:
        revision = target.stable_revision if stable else target.revision
        seen = await workflow.execute_activity_method(
            ServingActivities.revision_status,
            RevisionKey(isvc=isvc, component=target.component, revision=revision), **options.KUBE)
        ready = ready and seen.ready_replicas >= target.desired_replicas
    return ready


async def scale_revision(isvc: ObjectRef, component: ComponentType, revision: str,
                         replicas: int) -> RevisionObservation:
    """Ensure the revision's Deployment and Service exist with `replicas` (RevisionSuperseded when the
    spec no longer renders a revision that does not exist yet); the Deployment as the write left it."""
    request = EnsureRevisionInput(key=RevisionKey(isvc=isvc, component=component, revision=revision),
                                  replicas=replicas)
    if workflow.patched(LOCAL_SERVING_WRITES):
        return await workflow.execute_local_activity_method(ServingActivities.ensure_revision, request,
                                                            **options.KUBE_LOCAL)
    return await workflow.execute_activity_method(ServingActivities.ensure_revision, request, **options.KUBE)


async def scale_then_route(isvc: ObjectRef, revisions: list[tuple[ComponentType, str, int]],
                           routes: list[tuple[ComponentType, list[TrafficWeight]]]) -> ScaleThenRouteResult:
    """Scale each (component, revision, replicas) as scale_revision does and, only when all of them have
    their replicas Ready, program each (component, weights) route as set_weights does; one local
    activity. The result says whether the routes were written."""
    request = ScaleThenRouteInput(
        revisions=[EnsureRevisionInput(key=RevisionKey(isvc=isvc, component=component, revision=revision),
                                       replicas=replicas) for component, revision, replicas in revisions],
        routes=[SetTrafficInput(isvc=isvc, component=component, weights=weights) for component, weights in routes])
    return await workflow.execute_local_activity_method(ServingActivities.scale_then_route, request,
                                                        **options.KUBE_LOCAL)


async def set_weights(isvc: ObjectRef, component: ComponentType, weights: list[TrafficWeight]) -> None:
    """Program the component's HTTPRoute with exactly these weights."""
    request = SetTrafficInput(isvc=isvc, component=component, weights=weights)
    if workflow.patched(LOCAL_SERVING_WRITES):
        await workflow.execute_local_activity_method(ServingActivities.set_traffic, request, **options.KUBE_LOCAL)
        return
    await workflow.execute_activity_method(ServingActivities.set_traffic, request, **options.KUBE)


async def scale_down_delay(delay: timedelta) -> None:
    """Wait `delay` before the revision that lost its traffic is scaled away. A zero delay waits
    for nothing: a zero-length timer is fired by the server only about a second later, which every
    `scaleDownDelaySeconds: 0` rollout paid before it completed. A history from before the patch
    started the timer."""
    if delay <= timedelta(0) and workflow.patched(NO_TIMER_FOR_ZERO_DELAY):
        return
    await workflow.sleep(delay)
