"""Payloads of the rollout workflows that stay inside the workflow package: what the
InferenceService workflow hands a rollout run, what a run returns, and the state carried across
continue-as-new. The message payloads and `state` query answers the SDK also reads live in
api_models.contract.rollout. Pure pydantic, no
workflow code."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from servingops.api_models.contract.rollout import ComponentTarget, PinnedGroup, RolloutReport
from servingops.api_models.errors import ErrorType
from servingops.api_models.ome.enums import ComponentType, RolloutRunOutcome
from servingops.api_models.ome.rollout_status import CanaryStatus, RolloutCoordinationGroupStatus
from servingops.api_models.operator_config import OperatorDefaults
from servingops.api_models.refs import ObjectRef
from servingops.api_models.serving import TrafficWeight


class RolloutSettings(BaseModel):
    """What a rollout run is configured with besides its spec: the operator's defaults (read
    from the operator ConfigMap when the run opens, then kept for the run) and the worker's own
    pacing knobs."""

    operator: OperatorDefaults = OperatorDefaults()
    poll_seconds: float = 5
    """The longest gap between readiness reads while a capacity gate is unmet; the first reads
    come sooner (see steps.poll_interval), since kwok and warm nodes are Ready in about a second."""
    sample_report_seconds: float = 600
    """A sample that changes no outcome is published to status at most this often (bounds the
    parent's history during a week-long bake; the `state` query always has the latest)."""
    history_budget: int = 10_000
    """Continue-as-new past this many history events even if the server has not suggested it."""


class AnnotationState(BaseModel):
    """The level-triggered rollout annotations as last seen."""

    promote: str | None = None
    promote_force: str | None = None
    paused: bool = False
    ready_timeout: str | None = None


class RolloutInput(BaseModel):
    isvc: ObjectRef
    pinned: PinnedGroup
    targets: list[ComponentTarget]
    run_id: str
    annotations: AnnotationState = AnnotationState()
    settings: RolloutSettings = RolloutSettings()
    carried: CarriedRun | None = None
    """Set only by continue-as-new."""


class RolloutResult(BaseModel):
    key: str
    run_id: str
    outcome: RolloutRunOutcome | None
    """None when the run ended Failed (blue-green / rolling readiness timeout): held like a rollback."""
    targets: list[ComponentTarget]
    last: RolloutReport


class CarriedRun(BaseModel):
    """Everything a run needs after continue-as-new."""

    canary: CanaryStatus | None = None
    coordination: RolloutCoordinationGroupStatus | None = None
    phase: str = ""
    seq: int = 0
    programmed_weight: int | None = None
    traffic: dict[ComponentType, list[TrafficWeight]] = {}
    ready: dict[ComponentType, str] = {}
    analysis_start: datetime | None = None
    last_sample: datetime | None = None
    last_published_sample: datetime | None = None
    last_outcome_key: str = ""
    forced_through: str | None = None
    pending_force: bool = False
    annotation_versions: dict[str, int] = {}
    """Per rollout annotation, the resourceVersion of the last change acted on (Signal.RUN_ANNOTATION):
    the same change from the second path, or an older one arriving late, is not acted on again."""


RolloutInput.model_rebuild()


class Refusal(BaseModel):
    """Why the InferenceService workflow stopped serving a generation of the spec: a serving
    activity refused it with a permanent error. Written to status as the Ready condition's reason
    and message; cleared when a new generation is observed. Carried across continue-as-new."""

    generation: int
    """The metadata.generation that was refused (the last one observed when the refusal came)."""
    reason: ErrorType
    message: str
