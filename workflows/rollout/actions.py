"""Every side effect of the rollout workflows, as activity calls by name with explicit timeouts
and retry policies. The serving activities are idempotent (ensure, set, delete), so retrying
them forever on transient errors is safe; a refusal that cannot heal is non-retryable."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from api_models.ome.enums import ComponentType
    from api_models.operator_config import OperatorDefaults
    from api_models.refs import ConditionUpdate, ObjectRef
    from api_models.serving_io import (
        EnsureRevisionInput,
        EvaluateInput,
        Evaluation,
        ObserveInput,
        RevisionKey,
        RevisionObservation,
        ServiceObservation,
        SetTrafficInput,
        TrafficWeight,
    )
    from workflows.rollout.models import ComponentTarget

# Errors retrying cannot fix: the activity says so by type.
NON_RETRYABLE = ["RevisionSuperseded", "Invalid", "ObjectGone"]
SUPERSEDED = "RevisionSuperseded"

_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                     maximum_interval=timedelta(seconds=30), non_retryable_error_types=NON_RETRYABLE)
# A sample that cannot be taken is an inconclusive sample, not a reason to block the step: a few
# quick attempts, then the gate decides what "no answer" means.
_SAMPLE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                            maximum_interval=timedelta(seconds=5), maximum_attempts=3)
_KUBE = timedelta(seconds=30)
_PROMETHEUS = timedelta(seconds=60)


async def observe(isvc: ObjectRef) -> ServiceObservation | None:
    """The InferenceService and what serves it; None when it is gone."""
    result: ServiceObservation | None = await workflow.execute_activity(
        "serving.observe", ObserveInput(isvc=isvc), result_type=ServiceObservation | None,  # type: ignore[arg-type]
        start_to_close_timeout=_KUBE, retry_policy=_RETRY)
    return result


async def ensure_revision(isvc: ObjectRef, component: ComponentType, revision: str, replicas: int) -> None:
    await workflow.execute_activity(
        "serving.ensure_revision",
        EnsureRevisionInput(key=RevisionKey(isvc=isvc, component=component, revision=revision), replicas=replicas),
        start_to_close_timeout=_KUBE, retry_policy=_RETRY)


async def revision_status(isvc: ObjectRef, component: ComponentType, revision: str) -> RevisionObservation:
    """Replicas of the revision's Deployment; 0/0 when it does not exist (use observe to tell an
    absent revision from one scaled to zero)."""
    result: RevisionObservation = await workflow.execute_activity(
        "serving.revision_status", RevisionKey(isvc=isvc, component=component, revision=revision),
        result_type=RevisionObservation, start_to_close_timeout=_KUBE, retry_policy=_RETRY)
    return result


async def all_ready(isvc: ObjectRef, targets: list[ComponentTarget], *, stable: bool = False) -> bool:
    """Whether every target's revision (its stable one with `stable`) has its desired replicas Ready.
    Every target is read, even after one falls short, so the activity sequence does not depend on
    which one did."""
    ready = True
    for target in targets:
        revision = target.stable_revision if stable else target.revision
        seen = await revision_status(isvc, target.component, revision)
        ready = ready and seen.ready_replicas >= target.desired_replicas
    return ready


async def set_traffic(isvc: ObjectRef, component: ComponentType, weights: list[TrafficWeight]) -> None:
    await workflow.execute_activity(
        "serving.set_traffic", SetTrafficInput(isvc=isvc, component=component, weights=weights),
        start_to_close_timeout=_KUBE, retry_policy=_RETRY)


async def delete_revision(isvc: ObjectRef, component: ComponentType, revision: str) -> None:
    await workflow.execute_activity(
        "serving.delete_revision", RevisionKey(isvc=isvc, component=component, revision=revision),
        start_to_close_timeout=_KUBE, retry_policy=_RETRY)


async def evaluate(request: EvaluateInput) -> Evaluation:
    result: Evaluation = await workflow.execute_activity(
        "prometheus.evaluate", request, result_type=Evaluation,
        start_to_close_timeout=_PROMETHEUS, retry_policy=_SAMPLE_RETRY)
    return result


async def operator_config() -> OperatorDefaults:
    """The operator ConfigMap's defaults, as the worker's activity read them just now."""
    result: OperatorDefaults = await workflow.execute_activity(
        "operator.config", result_type=OperatorDefaults, start_to_close_timeout=_KUBE, retry_policy=_RETRY)
    return result


async def read_object(ref: ObjectRef) -> dict[str, Any] | None:
    result: dict[str, Any] | None = await workflow.execute_activity(
        "kube.read_object", ref, result_type=dict[str, Any] | None,  # type: ignore[arg-type]
        start_to_close_timeout=_KUBE, retry_policy=_RETRY)
    return result


async def patch_status(ref: ObjectRef, status: dict[str, Any], conditions: list[ConditionUpdate],
                       observed_generation: int | None) -> bool:
    # The StatusPatch model lives with the activity (activities/ may not be imported here); this
    # dict is its wire form.
    patch = {"ref": ref.model_dump(mode="json"), "status": status,
             "conditions": [c.model_dump(mode="json") for c in conditions],
             "observed_generation": observed_generation}
    result: bool = await workflow.execute_activity(
        "kube.patch_status", patch, result_type=bool, start_to_close_timeout=_KUBE, retry_policy=_RETRY)
    return result


def is_superseded(error: BaseException) -> bool:
    """An ensure_revision refused because the spec no longer renders that revision."""
    cause = getattr(error, "cause", None)
    return getattr(cause, "type", None) == SUPERSEDED
