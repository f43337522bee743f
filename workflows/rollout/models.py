"""Payloads of the rollout workflows: what the InferenceService workflow hands a rollout run,
what a run reports back, the signals between them, and the state carried across
continue-as-new. Pure pydantic, no workflow code."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel

from api_models.ome.enums import ComponentType, RolloutPlanSource, RolloutRunOutcome
from api_models.ome.rollout import RolloutGroup, RolloutPolicyRef
from api_models.ome.rollout_status import CanaryStatus, RolloutCoordinationGroupStatus
from api_models.operator_config import OperatorDefaults
from api_models.refs import ObjectRef
from api_models.serving_io import TrafficWeight

# Signal / update / query names of the RolloutWorkflow (the SDK and the InferenceService workflow
# address them by these strings).
PROMOTE = "promote"
PROMOTE_FORCE = "promote-force"
ROLLBACK = "rollback"
RESUME = "resume"
PAUSED = "paused"
RETARGET = "retarget"
READY_TIMEOUT = "ready-timeout"
STATE = "state"
# The InferenceService workflow's signal carrying a run's progress.
ROLLOUT_REPORT = "rollout-report"


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


class ComponentTarget(BaseModel):
    component: ComponentType
    revision: str
    """The revision this run rolls toward."""
    stable_revision: str
    """The revision that fully owned traffic when the run opened: the rollback target."""
    desired_replicas: int


class PinnedGroup(BaseModel):
    """A group with its progression resolved (inline, policy or default blueGreen)."""

    key: str
    """`<index>` for spec groups, the component name for a component in no group."""
    index: int | None
    group: RolloutGroup
    source: RolloutPlanSource
    policy_ref: RolloutPolicyRef | None = None
    policy_generation: int | None = None
    portable_digest: str


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


class Progression(StrEnum):
    CANARY = "canary"
    BLUE_GREEN = "blueGreen"
    ROLLING_UPDATE = "rollingUpdate"


def progression_of(pinned: PinnedGroup) -> Progression:
    if pinned.group.canary is not None:
        return Progression.CANARY
    if pinned.group.rolling_update is not None:
        return Progression.ROLLING_UPDATE
    return Progression.BLUE_GREEN


class RolloutReport(BaseModel):
    """One consistent picture of a run, sent to the InferenceService workflow after every
    transition; the parent writes it to status."""

    key: str
    seq: int
    """Monotonic per run: the parent ignores a report older than one it has applied."""
    run_id: str
    progression: Progression
    phase: str
    """RolloutPhase for canary groups, CoordinationPhase otherwise."""
    canary: CanaryStatus | None = None
    coordination: RolloutCoordinationGroupStatus | None = None
    traffic: dict[ComponentType, list[TrafficWeight]] = {}
    """What the run last programmed on each component's HTTPRoute."""
    ready: dict[ComponentType, str] = {}
    """Per component, the newest revision of this run whose pods reached Ready."""
    targets: list[ComponentTarget] = []


class RolloutResult(BaseModel):
    key: str
    run_id: str
    outcome: RolloutRunOutcome | None
    """None when the run ended Failed (blue-green / rolling readiness timeout): held like a rollback."""
    targets: list[ComponentTarget]
    last: RolloutReport


class RetargetRequest(BaseModel):
    """A new target set (re-arm) and/or a new pinned plan (repin) for a running group."""

    run_id: str
    targets: list[ComponentTarget]
    pinned: PinnedGroup | None = None


class PromoteRequest(BaseModel):
    revision: str


class RolloutState(BaseModel):
    """The answer of the `state` query."""

    key: str
    run_id: str
    progression: Progression
    phase: str
    gate: str | None = None
    """What the current step waits for: capacity, analysis, timed, manual, immediate, hold."""
    paused: bool = False
    canary: CanaryStatus | None = None
    coordination: RolloutCoordinationGroupStatus | None = None
    targets: list[ComponentTarget] = []
    traffic: dict[ComponentType, list[TrafficWeight]] = {}
    last_message: str = ""


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


RolloutInput.model_rebuild()


class ComponentView(BaseModel):
    """What the InferenceService workflow knows of one component; status is rendered from it."""

    url: str | None = None
    stable: str | None = None
    """Hash of the revision that fully owns traffic (latestRolledoutRevision)."""
    previous: str | None = None
    latest_ready: str | None = None
    traffic: list[TrafficWeight] = []
    canary: CanaryStatus | None = None
    """Only on a canary unit's entrypoint component."""
    rollout_phase: str | None = None
    serving_ready: bool = False
    desired: str | None = None


class ActiveRun(BaseModel):
    key: str
    workflow_id: str
    run_id: str
    targets: list[ComponentTarget]
    pinned: PinnedGroup
    seq: int = 0
    opened_at: datetime


class ServiceState(BaseModel):
    """The InferenceService workflow's memory, carried across continue-as-new."""

    generation: int = 0
    annotations: dict[str, str] = {}
    components: dict[ComponentType, ComponentView] = {}
    active: dict[str, ActiveRun] = {}
    held: dict[str, dict[ComponentType, str]] = {}
    """Unit key -> the rejected target set a rollback (or failed run) left; not retried."""
    held_primary: dict[str, str] = {}
    """Unit key -> the rejected primary revision hash (what ome.io/rollout-resume names)."""
    coordination: dict[str, RolloutCoordinationGroupStatus] = {}
    parked: dict[str, str] = {}
    """Unit key -> why its run could not open (policy unresolvable or mismatched)."""
    resolutions: list[dict[str, object]] = []
    last_run: dict[str, object] | None = None
    run_counter: int = 0
    soak_until: datetime | None = None
    entry_unit: str | None = None
    policy_attachments: dict[str, int] = {}
    """RolloutPolicy workflow id -> how many of this service's groups reference that policy, as
    last announced to it (a change is pushed so its status.attachedGroups moves at once)."""
