"""Per-Instance state of an InferenceReplica: the DenseV1 rows, the ColumnarV2 columns, operations,
terminations and retry blocks."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from servingops.api_models.base import ApiModel, Condition, Time, cel, condition_list_schema, validations
from servingops.api_models.ome.enums import InstanceOperationType, OMENativeInstancePhase, RetryBlockState


class InstanceTermination(ApiModel):
    """InstanceTermination captures the container-termination diagnostics of a pod that failed or
    was escalated, preserved on OMENativeInstanceStatus so the trace survives the recreate that
    deletes the pod."""

    pod_name: str | None = None
    """PodName is the name of the pod that failed or was escalated."""
    container_name: str | None = None
    """ContainerName is the container the diagnostics were read from. Empty when the signal is
    pod-level (e.g. a pod-phase Failed with no per-container terminated state available)."""
    reason: str | None = None
    """Reason is the kubelet reason for the termination or wedge — a terminated-state reason
    (OOMKilled, Error, ContainerCannotRun) or a terminal waiting-state reason (CrashLoopBackOff,
    ImagePullBackOff, CreateContainerError)."""
    exit_code: int | None = None
    """ExitCode is the container's exit code when the diagnostics came from a terminated state. Nil
    when the pod was stuck in a waiting state (no process ever ran to produce an exit code)."""
    message: str | None = None
    """Message is the kubelet-supplied detail message, if any."""
    time: Time | None = None
    """Time is when OMENative recorded this termination (reconcile time, not the kubelet transition
    time, which isn't always exposed)."""


class InstanceOperation(ApiModel):
    """InstanceOperation is the recovery anchor written before any destructive action against an
    Instance and cleared on completion."""

    id: str | None = None
    """ID is the idempotency key for this operation. Retries with the same ID are a no-op."""
    type: InstanceOperationType | None = None
    """Type identifies the operation kind: Create, Update, Restart, Migrate, Delete."""
    step: str | None = None
    """Step is the fine-grained resume point within the operation (e.g., Drain, DeletePods,
    WaitZero, Recreate, WaitReady)."""
    started_at: Time | None = None
    """StartedAt is when this operation began."""
    last_progress_at: Time | None = None
    """LastProgressAt is when the operation last advanced. Used for stall detection."""
    deadline: Time | None = None
    """Deadline is the hard timeout for the current Step. Zero (null) means the step clock is parked
    (e.g. while the instance's pods are admission-gated); optional + nullable so the parked null is
    accepted by the apiserver."""
    retry_count: int | None = None
    """RetryCount is the per-step escalation counter."""
    target_revision: str | None = None
    """TargetRevision is the ControllerRevision the operation is converging toward."""
    reason: str | None = None
    """Reason is a short cause string for the operation. Set once, when the operation starts, by
    whichever state machine owns it (the restart trigger, the revision-roll cause): it names WHY the
    operation exists and must survive for the operation's lifetime."""
    waiting: str | None = None
    """Waiting is a short token naming an EXTERNAL condition currently holding the operation back —
    e.g. "QuotaExceeded" when admission refuses the operation's pods for lack of quota."""
    capacity_refused_at: Time | None = None
    """CapacityRefusedAt is when admission last refused one of the operation's pod creates for lack
    of quota."""
    strategy: str | None = None
    """Strategy is the update strategy the operation runs under, pinned when the operation opens."""
    surge_index: int | None = None
    """SurgeIndex is the Instance index allocated for a surge replacement. Set only when
    Type=Migrate."""
    from_node: str | None = None
    """FromNode is the node the migrating Instance is being moved off. Set only when Type=Migrate."""
    hint_target_nodes: list[str] | None = None
    """HintTargetNodes is the caller-supplied preferred-node list for a migration. Set only when
    Type=Migrate."""
    request_uuid: str | None = Field(default=None, alias="requestUUID")
    """RequestUUID is the migration request UUID. Set only when Type=Migrate."""


class OMENativeInstanceStatus(ApiModel):
    """OMENativeInstanceStatus reports state for one OMENative Instance."""

    index: int | None = None
    """Index is the stable Instance ordinal. Values may be sparse after surge migration."""
    incarnation: int | None = None
    """Incarnation increments each time the Instance is recreated (full recreate update,
    restart-on-loss). In-place updates do not increment. Stamped on pods via the
    `ome.io/instance-incarnation` label."""
    phase: OMENativeInstancePhase | None = None
    """Phase is the lifecycle phase of the Instance."""
    running_revision: str | None = None
    """RunningRevision is the ControllerRevision the live pods are running."""
    target_revision: str | None = None
    """TargetRevision is the ControllerRevision the live pods are converging toward."""
    pod_count: int | None = None
    """PodCount is the total number of pods owned by this Instance."""
    ready_pod_count: int | None = None
    """ReadyPodCount is retained for API compatibility. OMENative derives readiness from Pods and
    does not persist this field."""
    serving_pod_count: int | None = None
    """ServingPodCount is the number of pods that are BOTH ContainersReady AND have serving=True on
    the controller-managed readiness gate — i.e., pods actually in the load balancer rotation."""
    available_pod_count: int | None = None
    """AvailablePodCount is the number of pods that are Available: in rotation on the Component's
    headless Service and, when lifecycle.minReadySeconds is set, Ready for at least that long."""
    scheduled_pod_count: int | None = None
    """ScheduledPodCount is retained for API compatibility. OMENative derives scheduling state from
    Pods and does not persist this field."""
    admitted: bool | None = None
    """Admitted is true when this Instance's pods have left the Kueue admission scheduling gate
    (quota granted): the Instance has pods and none are admission-gated. False while gated/queued or
    before pods exist."""
    nodes_occupied: list[str] | None = None
    """NodesOccupied is retained for API compatibility. OMENative reads current placement from Pods
    and does not persist this field."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions reports Instance-level conditions. Defined types include AllPodsScheduled,
    AllPodsReady, AllPodsAvailable, Drained, Failed, ProgressDeadlineExceeded."""
    ready_since: Time | None = None
    """ReadySince is when the Instance last entered Ready. Anchors post-Ready failure detection:
    container restarts that finished before this time belong to boot and never trigger a recreate."""
    operation: InstanceOperation | None = None
    """Operation is the durable record of an in-flight destructive action against this Instance. Set
    before the action starts, cleared after it completes. Lets a crashed controller resume work
    without diffing pod state."""
    active_ordinal: int | None = Field(default=None, ge=0, le=1)
    """ActiveOrdinal identifies which of two pod-naming slots (0 or 1) currently holds the canonical
    pod for this single-pod Instance."""
    last_failure: InstanceTermination | None = None
    """LastFailure preserves the diagnostics of the pod whose failure (or stuck-pod escalation) last
    triggered a recreate of this Instance."""
    announced: list[str] | None = None
    """Announced records the once-only messages this Instance has already emitted, one entry per
    message: the event reason it was emitted under and the episode it was emitted in, joined by "@"."""


class InstanceStatusPhaseGroup(ApiModel):
    """InstanceStatusPhaseGroup is one phase and the Instances that carry it."""

    value: OMENativeInstancePhase | None = None
    """Value is the shared lifecycle phase."""
    indexes: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?(,(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?)*$",
    )
    """Indexes is the canonical index set of the Instances with this value."""


class InstanceStatusRevisionGroup(ApiModel):
    """InstanceStatusRevisionGroup is one full ControllerRevision name and the Instances that carry
    it."""

    value: str | None = Field(default=None, min_length=1)
    """Value is the shared revision name; the empty revision is never grouped."""
    indexes: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?(,(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?)*$",
    )
    """Indexes is the canonical index set of the Instances with this value."""


class InstanceStatusIncarnationGroup(ApiModel):
    """InstanceStatusIncarnationGroup is one incarnation and the Instances that carry it. The value
    keeps the int64 domain of the dense row, including negative values; zero is the absent default
    and is never grouped."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.value) && self.value != 0",
                "an incarnation group value must be nonzero; zero is the absent default",
            ),
        )
    )

    value: int | None = None
    """Value is the shared nonzero incarnation."""
    indexes: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?(,(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?)*$",
    )
    """Indexes is the canonical index set of the Instances with this value."""


class InstanceStatusCountGroup(ApiModel):
    """InstanceStatusCountGroup is one positive pod count and the Instances that carry it. Zero is
    the absent default and is never grouped."""

    value: int | None = Field(default=None, ge=1)
    """Value is the shared positive count."""
    indexes: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?(,(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?)*$",
    )
    """Indexes is the canonical index set of the Instances with this value."""


class InstanceStatusEntry(ApiModel):
    """InstanceStatusEntry carries the records of one Instance that are not grouped into columns.
    Each record is the dense row's value, unchanged."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.conditions) || has(self.readySince) || has(self.operation) || "
                "has(self.lastFailure) || has(self.announced)",
                "an entry must carry at least one of conditions, readySince, operation, lastFailure, or announced",
            ),
        )
    )

    index: int | None = Field(default=None, ge=0)
    """Index is the Instance this entry belongs to; it is a member."""
    conditions: list[Condition] | None = Field(default=None, min_length=1, json_schema_extra=condition_list_schema())
    """Conditions is the Instance's conditions."""
    ready_since: Time | None = None
    """ReadySince is the Instance's readySince."""
    operation: InstanceOperation | None = None
    """Operation is the Instance's in-flight operation record."""
    last_failure: InstanceTermination | None = None
    """LastFailure is the Instance's preserved failure diagnostics."""
    announced: list[str] | None = Field(default=None, min_length=1)
    """Announced is the Instance's record of once-only messages already delivered."""


class InstanceStatusColumns(ApiModel):
    """InstanceStatusColumns is the ColumnarV2 representation of the per-Instance rows. A value
    shared by many Instances is stored once against the index set of the Instances that carry it;
    records that are rare or unique per Instance stay keyed by index in entries."""

    members: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?(,(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?)*$",
    )
    """Members is the index set of every Instance that has a row."""
    row_order: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=1)
    """RowOrder is the dense row order when it is not the ascending Members order: every member
    exactly once, in the order the DenseV1 list would carry. Absent means ascending Members order."""
    phases: list[InstanceStatusPhaseGroup] | None = Field(default=None, min_length=1)
    """Phases groups Instances by lifecycle phase. Every member appears in exactly one group; there
    is no default phase."""
    running_revisions: list[InstanceStatusRevisionGroup] | None = Field(default=None, min_length=1)
    """RunningRevisions groups Instances by nonempty running revision. A member absent from every
    group has an empty running revision."""
    target_revisions: list[InstanceStatusRevisionGroup] | None = Field(default=None, min_length=1)
    """TargetRevisions groups Instances by nonempty target revision. A member absent from every
    group has an empty target revision."""
    incarnations: list[InstanceStatusIncarnationGroup] | None = Field(default=None, min_length=1)
    """Incarnations groups Instances by nonzero incarnation. A member absent from every group has
    incarnation 0."""
    pod_counts: list[InstanceStatusCountGroup] | None = Field(default=None, min_length=1)
    """PodCounts groups Instances by positive podCount. A member absent from every group has
    podCount 0."""
    serving_pod_counts: list[InstanceStatusCountGroup] | None = Field(default=None, min_length=1)
    """ServingPodCounts groups Instances by positive servingPodCount. A member absent from every
    group has servingPodCount 0."""
    available_pod_counts: list[InstanceStatusCountGroup] | None = Field(default=None, min_length=1)
    """AvailablePodCounts groups Instances by positive availablePodCount. A member absent from every
    group has availablePodCount 0."""
    admitted: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?(,(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?)*$",
    )
    """Admitted is the index set of Instances whose admitted is true. Absent means no Instance is
    admitted."""
    active_ordinal_one: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?(,(0|[1-9][0-9]*)(-(0|[1-9][0-9]*))?)*$",
    )
    """ActiveOrdinalOne is the index set of Instances whose activeOrdinal is 1. Absent means every
    activeOrdinal is 0."""
    entries: list[InstanceStatusEntry] | None = Field(default=None, min_length=1)
    """Entries carries the per-Instance records that are not grouped: conditions, readySince,
    operation, and lastFailure. At most one entry per member, in ascending index order, each
    carrying at least one of those records. A member without an entry has none of them."""


class RetryBlock(ApiModel):
    """RetryBlock is the persisted per-revision retry authority. The subject is the owning IR plus
    TargetRevision."""

    target_revision: str | None = None
    """TargetRevision is the ControllerRevision name this block scopes."""
    state: RetryBlockState | None = None
    """State is the retry authority state."""
    attempts_started: int | None = None
    """AttemptsStarted counts lifecycle attempts at this revision. Kubelet container restarts are
    diagnostic and not counted here."""
    next_retry_at: Time | None = None
    """NextRetryAt is the persisted resume time while State=Backoff. Never recomputed from
    process-local history (restart-safe)."""
    first_failure_at: Time | None = None
    """FirstFailureAt is when the first failure at this revision was recorded."""
    last_failure_at: Time | None = None
    """LastFailureAt is when the last failure at this revision was recorded."""
    reason: str | None = None
    """Reason is the operator-facing last-failure summary."""
