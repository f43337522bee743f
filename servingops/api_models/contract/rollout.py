"""The rollout workflows' messages: the payloads of the rollout signals and updates, and the
answers of the `state` queries the SDK and CLI read, with every type they contain.

They live with the message names (api_models.contract) rather than in the workflow package so
the SDK, the CLI and the workflows share one definition and the SDK returns typed models
without importing workflow code. Pure pydantic; the JSON they serialise to is what stored
histories hold, so field names and meanings only ever grow.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel

from servingops.api_models.ome.enums import ComponentType, RolloutPlanSource
from servingops.api_models.ome.migration import MigrationHistoryEntry
from servingops.api_models.ome.rollout import RolloutGroup, RolloutPolicyRef
from servingops.api_models.ome.rollout_status import CanaryStatus, RolloutCoordinationGroupStatus
from servingops.api_models.serving import IngressObservation, RouteStatus, TrafficWeight


class Progression(StrEnum):
    CANARY = "canary"
    BLUE_GREEN = "blueGreen"
    ROLLING_UPDATE = "rollingUpdate"


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


def progression_of(pinned: PinnedGroup) -> Progression:
    if pinned.group.canary is not None:
        return Progression.CANARY
    if pinned.group.rolling_update is not None:
        return Progression.ROLLING_UPDATE
    return Progression.BLUE_GREEN


# -- message payloads -----------------------------------------------------------------------------


class RolloutReport(BaseModel):
    """Payload of Signal.ROLLOUT_REPORT: one consistent picture of a run, sent to the
    InferenceService workflow after every transition; the parent writes it to status."""

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


class RetargetRequest(BaseModel):
    """Payload of Signal.RETARGET: a new target set (re-arm) and/or a new pinned plan (repin) for
    a running group."""

    run_id: str
    targets: list[ComponentTarget]
    pinned: PinnedGroup | None = None


class PromoteRequest(BaseModel):
    """Argument of Update.PROMOTE: the canary revision hash the caller means to promote."""

    revision: str


# -- query results --------------------------------------------------------------------------------


class RolloutState(BaseModel):
    """The answer of the RolloutWorkflow's Query.STATE."""

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


class ComponentView(BaseModel):
    """What the InferenceService workflow knows of one component; status is rendered from it."""

    url: str | None = None
    """status.components[c].url: the component's host behind the Gateway, else its cluster-local address."""
    address: str | None = None
    """The component's cluster-local address (the entrypoint's is status.address)."""
    route_status: RouteStatus | None = None
    """What the Gateway last said of the component's HTTPRoute (None without a Gateway)."""
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
    replica: str | None = None
    """OMENative: the projected InferenceReplica (status.components[c].scaleTargetRef)."""
    lifecycle: dict[str, object] | None = None
    """OMENative: the replica's status, projected onto status.components[c].lifecycle."""
    autoscaler: dict[str, object] | None = None
    """OMENative: status.components[c].autoscaler (ComponentAutoscalerStatus, API form)."""
    autoscaler_applied: str | None = None
    """The scaler digest serving.ensure_autoscaler last applied (not written to status); for a
    RawDeployment component with the target revision after an "@"."""
    autoscaler_policy: str | None = None
    """The AutoscalerPolicy the component's scaler is rendered from, as last resolved (a ref no inline
    block outranks): the service reports AutoscalerResolved while any component has one or a problem."""
    autoscaler_problem: tuple[str, str] | None = None
    """(reason, message) while the component's autoscaler does not resolve (its policy does not
    render): its last good scaler stays, AutoscalerResolved is False."""
    autoscaler_target: str | None = None
    """RawDeployment: the Deployment the component's scaler targets (status scaleTargetRef)."""
    autoscaler_policy_workflow: str | None = None
    """The workflow of the AutoscalerPolicy the component references, as last announced to it."""
    selected_accelerator: dict[str, object] | None = None
    """status.components[c].selectedAccelerator (AcceleratorSelection, API form)."""


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
    autoscaler_policy_attachments: dict[str, int] = {}
    """AutoscalerPolicy workflow id -> how many of this service's components reference that policy, as
    last announced to it (a change is pushed so its status.attachedComponents moves at once)."""
    policy_attachments: dict[str, int] = {}
    """RolloutPolicy workflow id -> how many of this service's groups reference that policy, as
    last announced to it (a change is pushed so its status.attachedGroups moves at once)."""
    migration_history: list[MigrationHistoryEntry] = []
    """status.migrationHistory: the most recent migrations of this service's Instances, newest last
    (workflows/migration/history.py)."""
    ingress: IngressObservation | None = None
    """Where the service answers, as last observed (None: never observed with the ingress block,
    and no IngressReady is written)."""
    ingress_verdict: str | None = None
    """The last IngressReady verdict that was not a wait (`<status>:<reason>`): a Warning Event is
    recorded when a new one is False, not again for the same one after a wait in between."""


class ServiceView(ServiceState):
    """The answer of the InferenceService workflow's Query.STATE: its memory plus its phase."""

    phase: str = ""
