"""Multi-cluster placement intent (policy, mode, cluster affinity, split) and the allocation authority
projected onto member replicas."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from servingops.api_models.base import ApiModel, Duration, cel, validations
from servingops.api_models.ome.enums import ComponentType, PlacementMode, PlacementPolicy

ORIGIN_LABEL = "ome.io/placement-origin"
"""On a derived InferenceService in a member: the uid of the control plane's source it serves."""
EXECUTION_ANNOTATION = "ome.io/placement-execution"
"""On a derived InferenceService in a member: the plan's PlacementExecutionPolicy, as JSON."""


class ClusterSelectorRequirement(ApiModel):
    """ClusterSelectorRequirement tests one label or supported object field."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : "
                "self.operator in ['Exists', 'DoesNotExist'] ? (!has(self.values) || size(self.values) "
                "== 0) : (has(self.values) && size(self.values) == 1 && "
                "self.values[0].matches('^-?[0-9]+$'))",
                "values must be nonempty for In/NotIn, empty for Exists/DoesNotExist, and a single integer for Gt/Lt",
            ),
        )
    )

    key: str = Field(min_length=1)
    """Key is a label key, or metadata.name for a field requirement."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    """Operator follows Kubernetes node-selector semantics for labels."""
    values: list[Annotated[str, Field(max_length=253)]] | None = Field(default=None, max_length=64)
    """Values is nonempty for In/NotIn, empty for Exists/DoesNotExist, and a single integer for
    Gt/Lt."""


class ClusterAffinityTerm(ApiModel):
    """ClusterAffinityTerm selects WorkloadClusters by ANDing its requirements. Multiple terms form
    a union; a weight assigns replica shares to each match."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(has(self.matchExpressions) && size(self.matchExpressions) > 0) || "
                "(has(self.matchFields) && size(self.matchFields) > 0)",
                "a cluster affinity term must contain a requirement",
            ),
            cel(
                "!has(self.matchFields) || self.matchFields.all(r, r.key == 'metadata.name' && "
                "r.operator in ['In', 'NotIn'])",
                "matchFields selects only metadata.name, with In or NotIn",
            ),
        )
    )

    weight: int | None = Field(default=None, ge=1)
    """Weight is permitted only for static Split. If any term has an explicit weight, matching term
    weights add and omitted weights contribute one. Omission must be preserved to distinguish
    unweighted overlapping terms."""
    match_expressions: list[ClusterSelectorRequirement] | None = Field(default=None, max_length=64)
    """MatchExpressions selects the WorkloadCluster's actual labels."""
    match_fields: list[ClusterSelectorRequirement] | None = Field(default=None, max_length=64)
    """MatchFields selects the real metadata.name using In or NotIn. Multiple names are allowed; a
    label named metadata.name does not affect this match."""


class ComponentClusterAffinity(ApiModel):
    """ComponentClusterAffinity holds one affinity term list per component. Every listed component
    must match the same clusters. In Split, each list's weights set that component's shares; in
    Single and All the lists only select."""

    engine: list[ClusterAffinityTerm] | None = Field(default=None, min_length=1, max_length=64)
    """Engine selects clusters for the engine and, in Split, weights its shares. It is required when
    the service declares an engine."""
    decoder: list[ClusterAffinityTerm] | None = Field(default=None, min_length=1, max_length=64)
    """Decoder selects clusters for the decoder and, in Split, weights its shares over the clusters
    that hold engine replicas. It is required when the service declares a decoder."""
    router: list[ClusterAffinityTerm] | None = Field(default=None, min_length=1, max_length=64)
    """Router selects clusters for the router. In Split, it divides router.minReplicas across the
    clusters that hold engine replicas; without it, each such cluster runs the full router policy."""


class SplitSpec(ApiModel):
    """SplitSpec declares the fleet floor and optional local ceiling. The floor falls back only to
    an explicitly declared positive engine.minReplicas."""

    replicas: int | None = Field(default=None, ge=1)
    """Replicas is the fleet-wide desired replica count to distribute across homes. Unset falls back
    to the engine component's minReplicas (the guaranteed floor) — the count OME actually guarantees
    running and thus the one worth spreading."""
    max_replicas_per_cluster: int | None = Field(default=None, ge=0)
    """MaxReplicasPerCluster is an optional local ceiling. Plans exceeding it are held; zero follows
    the assigned allocation without an extra ceiling."""


class PlacementSpec(ApiModel):
    """PlacementSpec declares explicit multi-cluster matching and allocation intent."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.replacementTimeout) || self.mode == 'Single'",
                "replacementTimeout requires Single placement",
            ),
            cel(
                "has(self.componentAffinity) == (self.policy == 'ComponentAffinity')",
                "componentAffinity is required by, and only valid with, the ComponentAffinity policy",
            ),
            cel(
                "self.policy != 'ComponentAffinity' || !has(self.clusterAffinity)",
                "the ComponentAffinity policy reads componentAffinity, not clusterAffinity",
            ),
            cel(
                "self.policy != 'ClusterAffinity' || !has(self.split) || self.mode in ['Split', 'SplitByCapacity']",
                "split is valid only in Split and SplitByCapacity modes",
            ),
            cel(
                "self.mode == 'Split' || ((!has(self.clusterAffinity) || self.clusterAffinity.all(t, "
                "!has(t.weight))) && (!has(self.componentAffinity) || "
                "((!has(self.componentAffinity.engine) || self.componentAffinity.engine.all(t, "
                "!has(t.weight))) && (!has(self.componentAffinity.decoder) || "
                "self.componentAffinity.decoder.all(t, !has(t.weight))) && "
                "(!has(self.componentAffinity.router) || self.componentAffinity.router.all(t, "
                "!has(t.weight))))))",
                "an affinity term weight is permitted only in Split mode",
            ),
        )
    )

    policy: PlacementPolicy
    """Policy selects affinity matching and persisted allocation plans. ComponentAffinity reads
    per-component terms from componentAffinity."""
    mode: PlacementMode
    """Mode selects the placement cardinality and replica allocation strategy."""
    cluster_affinity: list[ClusterAffinityTerm] | None = Field(default=None, min_length=1, max_length=64)
    """ClusterAffinity ORs terms whose requirements are ANDed, for every component. Requires the
    ClusterAffinity policy; omission then matches every registration. An explicit empty or null list
    is invalid."""
    component_affinity: ComponentClusterAffinity | None = None
    """ComponentAffinity holds one affinity term list per component and requires the
    ComponentAffinity policy. Every component must match the same clusters; in Split, each
    component's weights set its own shares. An explicit null is invalid."""
    max_surge: int | None = Field(default=None, ge=0)
    """Deprecated: MaxSurge is ignored. A placement move may hold one extra full copy of the desired
    allocation; admission warns when this is set."""
    replacement_timeout: Duration | None = Field(
        default=None,
        json_schema_extra=validations(
            cel("duration(self) > duration('0s')", "replacementTimeout must be a positive duration")
        ),
    )
    """ReplacementTimeout bounds a non-admitting probe during a healthy Single move. Omission
    retains pending probes; a positive duration allows rotation."""
    split: SplitSpec | None = None
    """Split provides the requested floor and optional per-home ceiling for Split and
    SplitByCapacity. ClusterAffinity rejects it in other modes."""


class PlacementComponentFloor(ApiModel):
    """PlacementComponentFloor records a resolved component's guaranteed count. Engine and Decoder
    use equal whole-replica floors; Router is independent. Zero permits steady scale-to-zero;
    movement requires positive floors."""

    component: ComponentType
    """Component this floor is for."""
    replicas: int = Field(ge=0)
    """Replicas is the component's guaranteed replica count."""


class PlacementComponentDemand(ApiModel):
    """PlacementComponentDemand identifies one component's rendered replica shape."""

    component: Literal[ComponentType.ENGINE, ComponentType.DECODER]
    """Component this demand is for."""
    rendering_hash: str = Field(pattern=r"^[a-f0-9]{64}$")
    """RenderingHash includes pod shapes, worker count, mode and RuntimeClasses."""


class PlacementDemandContract(ApiModel):
    """PlacementDemandContract binds component rendering to normalized unit demand. Router is
    excluded because its replicas follow a per-home policy."""

    fingerprint: str = Field(pattern=r"^[a-f0-9]{64}$")
    """Fingerprint identifies the complete resolved resource/flavor demand."""
    components: list[PlacementComponentDemand] = Field(min_length=1, max_length=2)
    """Components includes exactly the declared Engine/Decoder components."""


class PlacementExecutionPolicy(ApiModel):
    """PlacementExecutionPolicy carries source allocation authority to a member's component
    reconciler. It is absent for locally managed services."""

    plan_id: str = Field(alias="planID")
    """PlanID identifies the accepted source plan."""
    revision: int = Field(ge=1)
    """Revision is the accepted plan revision."""
    source_uid: str = Field(alias="sourceUID")
    """SourceUID is the uid of the source InferenceService."""
    cluster_uid: str = Field(alias="clusterUID")
    """ClusterUID identifies the WorkloadCluster registration of this member."""
    pause_surge: bool
    """PauseSurge prevents new surplus-producing operations while existing operations retain their
    reservations and may finish cleanup."""
    demand: PlacementDemandContract | None = None
    """Demand requires member rendering to match the accepted normalization inputs before a
    component can project workloads. Absent for static plans."""
    replica_floors: list[PlacementComponentFloor] | None = Field(default=None, min_length=1, max_length=3)
    """ReplicaFloors binds the full per-home policy to the floors accepted by placement. Runtime
    changes cannot expand a paused placement reservation."""
