"""OMENative lifecycle policies of a component (restart, update strategy, readiness, migration)
and the lifecycle state reported for it."""

from __future__ import annotations

from pydantic import Field

from servingops.api_models.base import ApiModel, Condition, Duration, IntOrString, Time, condition_list_schema
from servingops.api_models.ome.enums import (
    InstanceReadyPolicy,
    InstanceRestartPolicy,
    MigrationPolicyMode,
    RolloutHoldGate,
    UpdateStrategyType,
)


class RollingUpdate(ApiModel):
    """RollingUpdate paces rollout across Instances of one Component."""

    partition: int | None = Field(default=None, ge=0)
    """Partition holds back updates for Instances whose index is < Partition. 0 (the default)
    updates all Instances. Used for canary holds."""
    max_unavailable: IntOrString | None = None
    """MaxUnavailable is the maximum number of Instances (or fraction) allowed to be in a non-Ready
    state during the rollout. Accepts either an absolute integer count (e.g. 2) or a percent string
    (e.g. "25%")."""
    max_surge: IntOrString | None = None
    """MaxSurge is the maximum number of extra Instances (or fraction) the rollout may create above
    the Component's desired replica count during a rolling update. Accepts either an absolute
    integer count (e.g. 1) or a percent string (e.g. "25%")."""


class InPlaceUpdateStrategy(ApiModel):
    """InPlaceUpdateStrategy tunes the per-pod in-place update sequence."""

    grace_period_seconds: int | None = Field(default=None, ge=0)
    """GracePeriodSeconds is accepted so manifests that set it keep validating and has no effect on
    the roll: a drained pod is deleted as soon as it leaves rotation, and its own
    terminationGracePeriodSeconds and preStop hooks cover the in-flight work it still owes."""
    mark_not_ready_during_lifecycle: bool | None = None
    """MarkNotReadyDuringLifecycle, when true, flips ome.io/serving=False on the pod before the
    in-place mutation so EndpointSlice drains traffic first. Unset inherits the ServingRuntime's
    value, then true."""


class UpdateStrategy(ApiModel):
    """UpdateStrategy controls how OMENative rolls template changes across an Instance's pods."""

    type: UpdateStrategyType | None = None
    """Type selects the rollout mechanism. Unset inherits the ServingRuntime's value, then the
    cluster default from the inferenceservice-config ConfigMap, then SurgeThenDrain, which preserves
    serving capacity throughout the rollout."""
    rolling_update: RollingUpdate | None = None
    """RollingUpdate paces the rollout across Instances of the Component."""
    in_place_update_strategy: InPlaceUpdateStrategy | None = None
    """InPlaceUpdateStrategy tunes the per-pod in-place update sequence. Ignored when Type is
    RecreatePod."""


class MigrationPolicy(ApiModel):
    """MigrationPolicy controls whether and how OMENative honors migration requests (both automatic
    deadline-disposition relocation and explicit annotation-triggered migration)."""

    mode: MigrationPolicyMode | None = None
    """Mode gates migration: Auto enables both deadline-disposition relocation and explicit
    migration requests; Never disables both. Unset inherits the ServingRuntime's value, then Auto."""


class LifecycleSpec(ApiModel):
    """LifecycleSpec groups OMENative-specific lifecycle policies on a Component. Embedded via
    ComponentExtensionSpec.Lifecycle; all fields are no-ops unless the Component is annotated
    ome.io/deploymentMode=OMENative. Nested under `lifecycle:` so the fields don't collide with
    corev1.PodSpec fields (notably restartPolicy) that are also inlined into EngineSpec /
    DecoderSpec / RouterSpec."""

    restart_policy: InstanceRestartPolicy | None = None
    """RestartPolicy controls what OMENative does when a managed pod fails."""
    update_strategy: UpdateStrategy | None = None
    """UpdateStrategy controls how OMENative rolls template changes across the Component's
    Instances."""
    ready_policy: InstanceReadyPolicy | None = None
    """ReadyPolicy controls how Instance-level readiness is aggregated from the underlying pods."""
    instance_ready_timeout: Duration | None = None
    """InstanceReadyTimeout is OMENative's upper bound for waiting on a newly-created Instance to
    become Ready (during migration, rollout, or initial creation)."""
    min_ready_seconds: int | None = Field(default=None, ge=0)
    """MinReadySeconds is the minimum time a newly Ready pod must stay Ready before OMENative treats
    it as Available."""
    migration_policy: MigrationPolicy | None = None
    """MigrationPolicy controls whether and how OMENative honors a migration request annotation for
    this Component."""


class RolloutHold(ApiModel):
    """RolloutHold records the most recent reason a per-Instance Update was denied for a Component —
    the detail behind "why has this rollout not moved". Overwritten whenever a reconcile observes a
    fresh denial; cleared once the Component's rollout advances (an Update is admitted) or completes
    (CurrentRevision == UpdateRevision, or no rollout is in flight)."""

    gate: RolloutHoldGate | None = None
    """Gate names the layer that produced Reason."""
    reason: str | None = None
    """Reason is the operator-facing denial string from the gate that produced it (e.g. "Sequential
    waiting on decoder")."""
    target: str | None = None
    """Target is the ControllerRevision name the held Update was aimed at."""
    since: Time | None = None
    """Since is when this Gate+Target combination was first observed without interruption."""


class LifecycleStatus(ApiModel):
    """LifecycleStatus reports OMENative-managed lifecycle state for one Component. Nil when the
    Component does not use OMENative. Counterpart of the LifecycleSpec sub-block on
    ComponentExtensionSpec."""

    observed_generation: int | None = None
    """ObservedGeneration is the InferenceService.metadata.generation reflected by this block."""
    current_revision: str | None = None
    """CurrentRevision names the ControllerRevision currently serving traffic."""
    update_revision: str | None = None
    """UpdateRevision names the ControllerRevision being rolled out."""
    collision_count: int | None = None
    """CollisionCount is the salt folded into ControllerRevision hash input after a name collision
    is observed, so retries produce a different revision name. Same pattern as StatefulSet."""
    label_selector: str | None = None
    """LabelSelector identifies pods of this Component for HPA-style consumers."""
    replicas: int | None = None
    """Replicas is the total Instance count (any phase)."""
    ready_replicas: int | None = None
    """ReadyReplicas is the number of Instances whose every pod is Ready."""
    serving_replicas: int | None = None
    """ServingReplicas is the number of Instances whose every pod is BOTH ContainersReady AND has
    serving=True on the controller-managed readiness gate — i.e., the pod is actually in the load
    balancer's rotation."""
    available_replicas: int | None = None
    """AvailableReplicas is the number of Instances whose desired pod count is Available: in
    rotation on the Component's headless Service and, when lifecycle.minReadySeconds is set, Ready
    for at least that long."""
    updated_replicas: int | None = None
    """UpdatedReplicas is the number of Instances on UpdateRevision."""
    updated_ready_replicas: int | None = None
    """UpdatedReadyReplicas is the number of Instances on UpdateRevision and fully Ready.
    UpdatedReadyReplicas / Replicas drives maxUnavailable rollout pacing."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions reports Component-level conditions. Defined types include Available, Progressing,
    FailedScale, FailedUpdate, GangSchedulingUnavailable, OperationStuck."""
    rollout_hold: RolloutHold | None = None
    """RolloutHold reports the most recent reason this Component's rollout did not advance, mirrored
    verbatim from the owning InferenceReplica's status. Nil while the Component is progressing or
    has no rollout in flight."""
