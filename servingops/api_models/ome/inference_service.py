"""The InferenceService kind: its spec (engine, decoder, router, model, runtime, rollout, placement,
routing) and its status (per-component state, canary, rollout runs, placement, migrations)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import ConfigDict, Field

from servingops.api_models.base import (
    ApiModel,
    Condition,
    CrdInfo,
    KubeObject,
    KubeObjectList,
    KubeResource,
    PrinterColumn,
    cel,
    condition_list_schema,
    validations,
)
from servingops.api_models.ome.accelerator import AcceleratorSelection, AcceleratorSelector
from servingops.api_models.ome.autoscaling import ComponentAutoscalerStatus, ScalingPolicy
from servingops.api_models.ome.components import DecoderSpec, EngineSpec, ReplicaRefs, RouterSpec
from servingops.api_models.ome.constants import GROUP, VERSION
from servingops.api_models.ome.enums import ComponentType, RolloutPhase
from servingops.api_models.ome.lifecycle import LifecycleStatus
from servingops.api_models.ome.migration import MigrationHistoryEntry
from servingops.api_models.ome.model_status import ModelStatus, MountedOverlay
from servingops.api_models.ome.placement import PlacementSpec
from servingops.api_models.ome.placement_status import PlacementStatus
from servingops.api_models.ome.refs import ModelRef, ScaleTargetRef, ServingRuntimeRef
from servingops.api_models.ome.rollout import RolloutSpec
from servingops.api_models.ome.rollout_status import CanaryStatus, RolloutCoordinationStatus, RolloutStatus
from servingops.api_models.ome.routing import RoutingSpec
from servingops.api_models.ome.traffic import ComponentTrafficTarget, TrafficSpec, TrafficStatus


class ComponentStatusSpec(ApiModel):
    """ComponentStatusSpec describes the state of the component"""

    url: str | None = None
    """URL holds the primary url for this component. It generally has the form
    http[s]://{name}.{namespace}.{cluster-level-suffix}"""
    rest_url: str | None = Field(default=None, alias="restURL")
    """REST endpoint of the component if available."""
    address: KubeObject | None = None
    """Addressable endpoint for the InferenceService"""
    selected_accelerator: AcceleratorSelection | None = None
    """SelectedAccelerator shows which AcceleratorClass was selected"""
    lifecycle: LifecycleStatus | None = None
    """Lifecycle reports OMENative-managed lifecycle state for this Component when the Component
    resolves to deploymentMode OMENative (spec.deploymentMode or the per-Component
    ome.io/deploymentMode annotation)."""
    rollout_phase: RolloutPhase | None = None
    """RolloutPhase is the canary step machine's state for this Component when a spec.rollout canary
    group governs it. One of Stable, Canarying, Pending, Paused, Promoting, RollingBack, RolledBack,
    Failed."""
    latest_ready_revision: str | None = None
    """LatestReadyRevision is the per-revision Service name (`<isvc>-<component>-rev-<hash>`)
    fronting the most recent revision whose pods reached Ready. Equal to LatestRolledoutRevision
    once the rollout completes; set ahead of it during in-flight rollouts."""
    latest_rolledout_revision: str | None = None
    """LatestRolledoutRevision is the per-revision Service name (`<isvc>-<component>-rev-<hash>`) of
    the most recent revision that fully owns this Component's traffic (i.e., the rollout has
    completed). Drives the consumer-side HTTPRoute backendRef."""
    previous_rolledout_revision: str | None = None
    """PreviousRolledoutRevision is the per-revision Service name (`<isvc>-<component>-rev-<hash>`)
    of the revision that fully owned this Component's traffic immediately before
    LatestRolledoutRevision; recorded when LatestRolledoutRevision advances."""
    traffic: list[ComponentTrafficTarget] | None = None
    """Traffic reports per-revision traffic weights for this Component. Each entry corresponds to
    one revision currently receiving traffic. The HTTPRoute builder reads this to emit weighted
    backendRefs."""
    canary: CanaryStatus | None = None
    """Canary tracks the canary step machine for the unit this Component belongs to — the router
    alone, or engine+decoder together."""
    autoscaler: ComponentAutoscalerStatus | None = None
    """Autoscaler reports the per-Component autoscaler state — resolved Class / ManagedBy /
    SpecSource and (when ManagedBy == "ome") live CurrentReplicas / DesiredReplicas / LastScaleTime
    / Conditions mirrored from the underlying HPA or ScaledObject."""
    scale_target_ref: ScaleTargetRef | None = None
    """ScaleTargetRef is the canonical scale target for this Component. For OMENative-managed
    Components this points at the InferenceReplica's /scale subresource; for RawDeployment-managed
    Components it points at the underlying Deployment."""


class InferenceServiceSpec(ApiModel):
    """InferenceServiceSpec is the desired state of an InferenceService."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.placement) || !has(oldSelf.placement)",
                "the placement policy cannot be removed; drain and recreate the service to change placement ownership",
            ),
            cel(
                "!has(self.placement) || !has(self.placement.componentAffinity) || "
                "(has(self.placement.componentAffinity.engine) == (has(self.engine) || "
                "(has(self.replicaRefs) && has(self.replicaRefs.engine))) && "
                "has(self.placement.componentAffinity.decoder) == (has(self.decoder) || "
                "(has(self.replicaRefs) && has(self.replicaRefs.decoder))))",
                "componentAffinity needs an entry for each declared engine and decoder, and none for undeclared ones",
            ),
            cel(
                "!has(self.placement) || !has(self.placement.componentAffinity) || "
                "!has(self.placement.componentAffinity.router) || has(self.router) || "
                "(has(self.replicaRefs) && has(self.replicaRefs.router))",
                "componentAffinity.router requires a declared router",
            ),
            cel(
                "!has(self.replicaRefs) || !(has(self.engine) || has(self.decoder) || has(self.router) "
                "|| has(self.model) || has(self.runtime))",
                "replicaRefs excludes engine, decoder, router, model and runtime",
            ),
            cel(
                "has(self.replicaRefs) == has(oldSelf.replicaRefs) && (!has(self.replicaRefs) || "
                "self.replicaRefs == oldSelf.replicaRefs)",
                "replicaRefs is fixed at create",
            ),
        )
    )

    deployment_mode: Literal["OMENative", "RawDeployment"] | None = None
    """DeploymentMode selects the dispatch backend that drives every Component on this
    InferenceService. When set, it propagates to the Engine, Decoder, and Router resolver at
    read-time without mutating per-Component annotations — `kubectl get -o yaml` stays clean."""
    engine: EngineSpec | None = None
    """Engine defines the serving engine spec. This provides detailed container and pod
    specifications for model serving."""
    decoder: DecoderSpec | None = None
    """Decoder defines the decoder spec. This is specifically used for PD (Prefill-Decode)
    disaggregated serving deployments."""
    model: ModelRef | None = None
    """Model defines the model to be used for inference, referencing either a BaseModel or a custom
    model. This allows models to be managed independently of the serving configuration."""
    runtime: ServingRuntimeRef | None = None
    """Runtime defines the serving runtime environment that will be used to execute the model. It is
    an inference service spec template that determines how the service should be deployed."""
    router: RouterSpec | None = None
    """Router defines the router spec"""
    replica_refs: ReplicaRefs | None = None
    """ReplicaRefs names, per role, the standalone InferenceReplicas this service fronts instead of
    rendering the role itself."""
    accelerator_selector: AcceleratorSelector | None = None
    """AcceleratorSelector specifies accelerator selection preferences"""
    traffic: TrafficSpec | None = None
    """Traffic configures the load-balancing policy applied to all HTTPRoutes OME emits for this
    InferenceService. See the TrafficSpec doc for details."""
    rollout: RolloutSpec | None = None
    """Rollout is the single home for rollout configuration on this InferenceService: an ordered
    list of rollout groups, each polymorphic in its progression (canary | blueGreen |
    rollingUpdate). Sequencing is the group list order; a group's Components roll together."""
    scaling_policy: ScalingPolicy | None = None
    """ScalingPolicy coordinates replica counts across Components when more than one autoscaler
    would otherwise drift (e.g., engine + decoder in a PD-disaggregated service that requires 1:1
    sharding). When nil, every Component autoscales independently. Alpha."""
    placement: PlacementSpec | None = None
    """Placement declares how the multi-cluster control plane selects workload clusters and
    allocates replicas. An absent block declares no placement intent. Derived member services carry
    allocation authority in metadata."""
    routing: RoutingSpec | None = None
    """Routing configures cross-cluster traffic distribution for this InferenceService. Unset fields
    inherit the operator-level routing configuration. Only consulted on the control-plane cluster;
    ignored in single-cluster deployments."""
    ttl_seconds_after_creation: int | None = Field(default=None, ge=1)
    """TTLSecondsAfterCreation limits how long this InferenceService lives. Once that many seconds
    have passed since its creationTimestamp, the controller deletes it, and garbage collection
    removes everything it owns. Unset means it lives until deleted."""


class InferenceServiceStatus(ApiModel):
    """InferenceServiceStatus defines the observed state of InferenceService. Conditions: EngineReady,
    DecoderReady, RouterReady, IngressReady and Ready (component aggregate on workload clusters, or
    placement serving readiness on a multi-cluster control-plane source)."""

    observed_generation: int | None = None
    """ObservedGeneration is the metadata.generation this status was written for."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions for the InferenceService: EngineReady, DecoderReady, RouterReady, IngressReady,
    Ready."""
    annotations: dict[str, str] | None = None
    """Annotations is additional status information the controller records."""
    address: KubeObject | None = None
    """Addressable endpoint for the InferenceService"""
    url: str | None = None
    """URL holds the url that will distribute traffic over the provided traffic targets. It
    generally has the form http[s]://{route-name}.{route-namespace}.{cluster-level-suffix}"""
    addresses: KubeObjectList | None = None
    """Addresses lists every reachable endpoint for this service — one per gateway its route
    attaches to, plus the cluster-local address."""
    components: dict[ComponentType, ComponentStatusSpec] | None = None
    """Statuses for the components of the InferenceService"""
    model_status: ModelStatus | None = None
    """Model related statuses"""
    migration_history: list[MigrationHistoryEntry] | None = None
    """MigrationHistory is a rolling window of OMENative migration requests processed against this
    InferenceService. Bounded to the most recent entries; older entries are dropped (and optionally
    archived to a controller-owned ConfigMap)."""
    mounted_overlays: list[MountedOverlay] | None = None
    """MountedOverlays lists overlays the controller attached to the pod spec. Skipped overlays
    (disabled, NotReady, NotFound) surface via the OverlaysReady condition."""
    traffic: TrafficStatus | None = None
    """Traffic reflects the resolved backend traffic policy and the emitted policy resource.
    Populated only when traffic intent is declared via spec.traffic or any ome.io/* traffic
    annotation; otherwise nil so older clients see nothing."""
    canary: CanaryStatus | None = None
    """Canary mirrors the canary run of the unit that owns the ISVC entrypoint (the router's when it
    has one, else the engine's); the per-unit copy on ComponentStatusSpec.Canary is authoritative."""
    placement: PlacementStatus | None = None
    """Placement reports multi-cluster placement of this ISVC, set by the control-plane fan-out
    controller. Empty on workload clusters and on single-cluster deployments."""
    pinned_revision_name: str | None = None
    """PinnedRevisionName is the ControllerRevision (OME ns) driving pod specs. Empty when autoSync
    is true."""
    last_runtime_sync_token: str | None = None
    """LastRuntimeSyncToken is the ome.io/runtime-sync annotation value at last pin advance; the
    controller advances the pin when the live annotation differs from this."""
    rollout: RolloutStatus | None = None
    """Rollout is the run-model surface: the pinned active-run plan the executors consume, the
    previous run's bounded record, and the always-current per-group source resolution (including
    shadowed-policy previews)."""
    rollout_coordination: RolloutCoordinationStatus | None = None
    """RolloutCoordination reports per-group cross-Component coordination state for the
    InferenceService. Populated only when spec.rollout declares blueGreen/rollingUpdate groups
    (canary groups report under status.canary instead)."""


class InferenceService(KubeResource):
    """InferenceService ties a model to a serving runtime and declares the engine, decoder and router
    components that OME turns into workloads."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="InferenceService",
        plural="inferenceservices",
        scope="Namespaced",
        short_names=["isvc"],
        categories=["ome"],
        printer_columns=[
            PrinterColumn(name="Ready", type="string", json_path='.status.conditions[?(@.type=="Ready")].status'),
            PrinterColumn(name="URL", type="string", json_path=".status.url"),
            PrinterColumn(
                name="Rollout",
                type="string",
                json_path=".status.components.engine.rolloutPhase",
                description="Rollout phase of the engine's canary step machine.",
            ),
            PrinterColumn(
                name="Step",
                type="integer",
                json_path=".status.canary.currentStep",
                description="Zero-based canary step of the entrypoint unit.",
            ),
            PrinterColumn(
                name="Canary%",
                type="integer",
                json_path=".status.canary.observedTrafficWeight",
                description="Traffic weight programmed for the canary revision.",
            ),
            PrinterColumn(name="Placement", type="string", json_path=".status.placement.phase", priority=1),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )

    spec: InferenceServiceSpec | None = None
    """The desired state of the InferenceService."""
    status: InferenceServiceStatus | None = None
    """The observed state of the InferenceService."""
