"""The serving calls every progression makes the same way: scale one revision, and read whether a
set of revisions is Ready."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.activities.serving.activities import ServingActivities
    from servingops.activities.serving.types import EnsureRevisionInput, RevisionKey
    from servingops.api_models.contract.rollout import ComponentTarget
    from servingops.api_models.ome.enums import ComponentType
    from servingops.api_models.refs import ObjectRef
    from servingops.workflows import options


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


async def scale_revision(isvc: ObjectRef, component: ComponentType, revision: str, replicas: int) -> None:
    """Ensure the revision's Deployment and Service exist with `replicas` (RevisionSuperseded when the
    spec no longer renders a revision that does not exist yet)."""
    await workflow.execute_activity_method(
        ServingActivities.ensure_revision,
        EnsureRevisionInput(key=RevisionKey(isvc=isvc, component=component, revision=revision), replicas=replicas),
        **options.KUBE)
