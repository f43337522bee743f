"""The InferenceReplica kind: one pod set of N Instances, with the scale subresource."""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, Field

from servingops.api_models.base import (
    ApiModel,
    Condition,
    CrdInfo,
    IntOrString,
    KubeObject,
    KubeResource,
    PrinterColumn,
    ScaleSubresource,
    cel,
    condition_list_schema,
    validations,
)
from servingops.api_models.ome.autoscaling import ComponentAutoscaler
from servingops.api_models.ome.constants import GROUP, VERSION
from servingops.api_models.ome.enums import (
    ComponentType,
    InstanceStatusEncoding,
    PauseMode,
    RunnerName,
    TopologySpreadPolicy,
)
from servingops.api_models.ome.instance_status import InstanceStatusColumns, OMENativeInstanceStatus, RetryBlock
from servingops.api_models.ome.lifecycle import LifecycleSpec, RolloutHold
from servingops.api_models.ome.migration import MigrationStatus
from servingops.api_models.ome.placement import PlacementExecutionPolicy
from servingops.api_models.ome.refs import ModelRef, ParentReference, ServingRuntimeRef
from servingops.api_models.ome.traffic import ComponentTrafficTarget


class Runner(ApiModel):
    """Runner is one logical pod role within an Instance. Single-pod Instances declare one Runner
    named "default" with Size=1. Multi-node Instances declare "leader" (Size=1) + "worker"
    (Size>=1)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("self.name == 'worker' || self.size == 1", "the default and leader runners have size 1"),
        )
    )

    name: RunnerName
    """Name is the Runner role within the Instance."""
    size: int = Field(ge=1)
    """Size is the pod count for this Runner per Instance. Constraints: - "default" Size MUST equal
    1 - "leader" Size MUST equal 1 - "worker" Size MUST be >= 1"""
    template: KubeObject
    """Template is the fully-rendered pod template for this Runner. Labels include
    ome.io/runner=<name>."""


class InferenceReplicaPacing(ApiModel):
    """InferenceReplicaPacing is the rollout control written onto one replica: the partition that
    holds Instances back, a reserved disruption budget, and the revision to roll back to."""

    partition: int | None = Field(default=None, ge=0)
    """Partition holds back updates: the Partition lowest-indexed Instances not yet on the target
    revision, skipping any already updating to it, keep their current revision."""
    max_unavailable: IntOrString | None = None
    """MaxUnavailable is reserved; setting it has no effect. Disruption during a rollout is paced by
    lifecycle.updateStrategy.rollingUpdate.maxUnavailable."""
    rollback_to_revision: str | None = None
    """RollbackToRevision, when set, names a ControllerRevision the replica rolls every Instance
    back to: that revision's stored pod template becomes the update target while UpdateRevision
    keeps reporting the spec's own revision."""


class InferenceReplicaSpec(ApiModel):
    """InferenceReplicaSpec is the desired state of one pod set. User fields describe the pod set
    (component, template source, replicas, topology, lifecycle, autoscaler); rollout-control fields
    (pacing, paused, pauseMode, pairingProtocol) steer a rollout across pod sets; controller-only
    fields (parentRef, placementExecution, placementReplicaLimit) carry what only the
    InferenceService controller knows. Exactly one template source: runners, or modelRef and/or
    runtimeRef."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.runners) != (has(self.modelRef) || has(self.runtimeRef))",
                "exactly one template source: runners, or modelRef and/or runtimeRef",
            ),
            cel(
                "has(self.parentRef) == has(oldSelf.parentRef) && (!has(self.parentRef) || "
                "self.parentRef == oldSelf.parentRef)",
                "parentRef is set at create and immutable",
            ),
            cel(
                "!has(self.runtimeRef) || ((!has(self.runtimeRef.autoSync) || "
                "self.runtimeRef.autoSync) && !has(self.runtimeRef.revision))",
                "runtimeRef cannot pin a revision on an InferenceReplica",
            ),
            cel(
                "has(self.parentRef) || !has(self.lifecycle) || !has(self.lifecycle.minReadySeconds)",
                "lifecycle.minReadySeconds is rejected on a standalone replica; set spec.minReadySeconds",
            ),
            cel(
                "has(self.parentRef) || !has(self.autoscaler) || !(self.autoscaler.class in ['HPA', 'KEDA'])",
                "a standalone replica rejects the HPA and KEDA autoscaler classes",
            ),
        )
    )

    placement_execution: PlacementExecutionPolicy | None = None
    """PlacementExecution is allocation authority projected from a derived service. Its generation
    must be observed before the control plane uses member evidence. Controller-only."""
    placement_replica_limit: int | None = Field(default=None, ge=1)
    """PlacementReplicaLimit reserves the largest replica count this component may request while
    placement pauses growth. Only a raised placement floor can increase this limit; autoscaler
    requests remain in Replicas. Controller-only."""
    parent_ref: ParentReference | None = None
    """ParentRef names the InferenceService that projects this replica. The InferenceService
    controller sets it at create time and it is immutable thereafter; a standalone replica omits it."""
    component: ComponentType = Field(json_schema_extra=validations(cel("self == oldSelf", "component is immutable")))
    """Component is the role this pod set fills: engine | decoder | router. Immutable; moving a
    workload between roles requires recreating the InferenceReplica."""
    model_ref: ModelRef | None = None
    """ModelRef names the BaseModel (in the replica's namespace) or ClusterBaseModel this replica
    serves."""
    runtime_ref: ServingRuntimeRef | None = None
    """RuntimeRef names the ServingRuntime (in the replica's namespace) or ClusterServingRuntime
    whose piece for Component this replica renders. The runtime must declare that piece. Without
    ModelRef the piece renders as-is, with no model mounted."""
    replicas: int | None = Field(default=None, ge=0)
    """Replicas is the desired Instance count; nil or 0 runs one Instance. Whatever targets the
    scale subresource (HPA, KEDA or an external scaler) writes this field."""
    min_ready_seconds: int | None = Field(default=None, ge=0)
    """MinReadySeconds is the minimum time a newly Ready pod must stay Ready before it counts as
    Available."""
    topology_key: str | None = None
    """TopologyKey is the gang co-location node-label key for this Component."""
    topology_spread: TopologySpreadPolicy | None = None
    """TopologySpread is the spreading policy for this Component. The InferenceReplica controller
    renders it as a topologySpreadConstraint on each Instance's anchor pod; nil keeps pure
    bin-packing."""
    topology_spread_key: str | None = None
    """TopologySpreadKey is the fault-domain node-label key TopologySpread spreads across; nil
    defaults to TopologyKey. On a projected replica the value is the effective InferenceService or
    runtime component setting."""
    pairing_protocol: str | None = Field(
        default=None, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
    )
    """PairingProtocol is the engine/decoder wire-compatibility token. It is folded into the
    revision hash (a change mints a new revision) and stamped as the ome.io/pairing-protocol label
    on rendered pods; nil pairs with anything."""
    runners: list[Runner] | None = None
    """Runners is the fully-rendered set of pod templates per Instance. A single-pod Instance has
    one Runner named "default" with Size=1; a multi-node Instance has "leader" (Size=1) and "worker"
    (Size=N)."""
    lifecycle: LifecycleSpec | None = None
    """Lifecycle holds the OMENative lifecycle policies (RestartPolicy, UpdateStrategy, ReadyPolicy,
    InstanceReadyTimeout, MigrationPolicy)."""
    pacing: InferenceReplicaPacing | None = None
    """Pacing is rollout control written onto this replica: the canary partition, the rollback
    target and a reserved disruption budget. The InferenceService controller writes it on the
    replicas it orchestrates; on a standalone replica its owner sets it."""
    autoscaler: ComponentAutoscaler | None = None
    """Autoscaler is the autoscaler configuration downstream scalers (HPA / KEDA / External) target."""
    paused: bool | None = None
    """Paused, when true, stops the InferenceReplica controller from initiating fleet changes:
    Update, Create, and Migration operations are neither started nor advanced."""
    pause_mode: PauseMode | None = None
    """PauseMode selects how much of the lifecycle Paused suspends. Only meaningful while Paused is
    true. - "Recover" (default when empty): fleet changes are suspended; the RestartPolicy continues
    to repair existing Instances at the revision they already run."""
    revision_history_limit: int | None = Field(default=None, ge=1)
    """RevisionHistoryLimit caps how many non-live ControllerRevisions the InferenceReplica
    controller retains. Live revisions (CurrentRevision / UpdateRevision and every per-Instance
    running/target revision) are never deleted regardless of the limit."""


class InferenceReplicaStatus(ApiModel):
    """InferenceReplicaStatus is the observed state of one InferenceReplica. The InferenceReplica
    controller is the sole writer. Fields mirror the LifecycleStatus shape so the ISVC's aggregated
    per-Component status is a verbatim projection of this block. The per-Instance rows have exactly
    one representation on a committed object."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.instanceStatusColumns) || has(self.instanceStatusEncoding)",
                "instanceStatusColumns requires instanceStatusEncoding; an unmarked status carries "
                "only instanceStatuses",
            ),
            cel(
                "!has(self.instanceStatusEncoding) || (has(self.instanceStatusColumns) && !has(self.instanceStatuses))",
                "instanceStatusEncoding: ColumnarV2 requires instanceStatusColumns and forbids instanceStatuses",
            ),
        )
    )

    observed_generation: int | None = None
    """ObservedGeneration is the InferenceReplica.metadata.generation the most recent status flush
    reflects."""
    placement_observed_generation: int | None = Field(default=None, ge=1)
    """PlacementObservedGeneration identifies the generation reconciled with placement rollout and
    replica-growth guards. The control plane requires this acknowledgement before sharing surge
    allowance with the member."""
    replicas: int | None = None
    """Replicas is the total Instance count (any phase)."""
    ready_replicas: int | None = None
    """ReadyReplicas is the number of Instances whose every pod is Ready."""
    serving_replicas: int | None = None
    """ServingReplicas is the number of Instances whose every pod is both ContainersReady AND has
    serving=True on the controller-managed readiness gate (i.e., actually in the load balancer
    rotation)."""
    available_replicas: int | None = None
    """AvailableReplicas is the number of Instances whose desired pod count is Available: in
    rotation on the Component's headless Service and, when spec.minReadySeconds is set, Ready for at
    least that long."""
    updated_replicas: int | None = None
    """UpdatedReplicas is the number of Instances on UpdateRevision."""
    updated_ready_replicas: int | None = None
    """UpdatedReadyReplicas is the number of Instances on UpdateRevision that are fully Ready.
    UpdatedReadyReplicas / Replicas drives MaxUnavailable rollout pacing."""
    current_revision: str | None = None
    """CurrentRevision names the ControllerRevision currently serving traffic. Set by the
    InferenceReplica controller."""
    update_revision: str | None = None
    """UpdateRevision names the ControllerRevision being rolled out."""
    collision_count: int | None = None
    """CollisionCount is the salt folded into ControllerRevision hash input after a name collision
    is observed, so retries produce a different revision name. Same pattern as StatefulSet."""
    label_selector: str | None = None
    """LabelSelector identifies pods of this InferenceReplica for the HPA scale subresource. Uses
    the same selector formula as the Component's pod labels, so HPAs targeting either the ISVC or
    the InferenceReplica resolve to the same pod set."""
    instance_statuses: list[OMENativeInstanceStatus] | None = None
    """InstanceStatuses is the DenseV1 representation of the per-Instance status, one row per
    Instance. Absent when instanceStatusEncoding is ColumnarV2, in which case instanceStatusColumns
    carries the same rows."""
    instance_status_encoding: InstanceStatusEncoding | None = None
    """InstanceStatusEncoding names the representation that carries the per-Instance rows. Absent
    means DenseV1 (instanceStatuses). The only accepted value is ColumnarV2, which requires
    instanceStatusColumns and forbids instanceStatuses."""
    instance_status_columns: InstanceStatusColumns | None = None
    """InstanceStatusColumns is the ColumnarV2 representation of the per-Instance rows. Present
    exactly when instanceStatusEncoding is ColumnarV2; it decodes to the same rows, in the same
    order, that instanceStatuses would carry."""
    retry_blocks: list[RetryBlock] | None = None
    """RetryBlocks records per-target-revision retry authority for update attempts. Revision-scoped:
    one block per failed target revision, shared by every Instance attempting it — allocating a new
    Instance cannot evade the block."""
    migrations: list[MigrationStatus] | None = None
    """Migrations is the authoritative set of migration records for this InferenceReplica — one
    entry per request UUID. Manual entries are resumable processes born Accepted; Auto entries are
    born-terminal Relocated records."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions reports InferenceReplica-level conditions. Defined types include Available,
    Progressing, FailedScale, FailedUpdate, GangSchedulingUnavailable, OperationStuck."""
    traffic: list[ComponentTrafficTarget] | None = None
    """Traffic reports per-revision traffic weights for this InferenceReplica. Each entry
    corresponds to one revision currently receiving traffic. The ISVC controller mirrors this onto
    ISVC.status.components[c].traffic[] for the HTTPRoute builder."""
    coordination_group_ref: str | None = None
    """CoordinationGroupRef back-references the RolloutCoordinationGroup this replica is currently
    bound into (if any). Lets operators find the owning coord group from the child without parsing
    the ISVC spec."""
    rollout_hold: RolloutHold | None = None
    """RolloutHold records the most recent reason a per-Instance Update was denied for this
    Component — cross-Component coordination (Ratio, Sequential), a surge/unavailability budget, or
    a same-target retry hold (RetryBlock, Held)."""


class InferenceReplica(KubeResource):
    """InferenceReplica is one pod set: N Instances of the same rendered pod templates with one
    revision history and one rollout. A projected replica exists per (InferenceService, Component)
    and is named <inferenceservice>-<component>; a standalone replica is named by its creator. The
    scale subresource lets HPA/KEDA target the InferenceReplica directly."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="InferenceReplica",
        plural="inferencereplicas",
        scope="Namespaced",
        short_names=["ir"],
        categories=["ome"],
        scale=ScaleSubresource(
            spec_replicas_path=".spec.replicas",
            status_replicas_path=".status.replicas",
            label_selector_path=".status.labelSelector",
        ),
        printer_columns=[
            PrinterColumn(name="Component", type="string", json_path=".spec.component"),
            PrinterColumn(name="Desired", type="integer", json_path=".spec.replicas"),
            PrinterColumn(name="Ready", type="integer", json_path=".status.readyReplicas"),
            PrinterColumn(name="Available", type="integer", json_path=".status.availableReplicas"),
            PrinterColumn(name="Updated", type="integer", json_path=".status.updatedReplicas"),
            PrinterColumn(name="Paused", type="boolean", json_path=".spec.paused", priority=1),
            PrinterColumn(name="Revision", type="string", json_path=".status.updateRevision", priority=1),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )

    spec: InferenceReplicaSpec | None = None
    """The desired state of the InferenceReplica."""
    status: InferenceReplicaStatus | None = None
    """The observed state of the InferenceReplica."""
