"""Inputs and outputs of the placement activities. Nothing secret: a member is named by its
WorkloadCluster, and the activity reads the kubeconfig Secret that registration names."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from servingops.api_models.ome.autoscaling import CandidateAutoscalingStatus
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.placement_status import PlacementCapacitySample
from servingops.api_models.ome.rollout_status import CandidateRolloutStatus
from servingops.api_models.refs import ObjectRef


class SourceInput(BaseModel):
    isvc: ObjectRef


class ClusterRegistration(BaseModel):
    """One WorkloadCluster as matching sees it."""

    name: str
    uid: str
    labels: dict[str, str] = {}
    ready: bool = False
    """Its Ready condition (connection health, the WorkloadCluster workflow's verdict) is True."""


class PlacementSource(BaseModel):
    """One read of the source InferenceService and of the fleet."""

    uid: str
    generation: int
    deleting: bool
    placement: dict[str, Any] | None
    """spec.placement as the apiserver holds it (parse with PlacementSpec); None: not placed."""
    components: list[str]
    """The components the source declares (engine, decoder, router), in that order."""
    min_replicas: dict[str, int] = {}
    """Each declared component's minReplicas, where declared (allocation's floors)."""
    registrations: list[ClusterRegistration]
    status_placement: dict[str, Any] | None = None
    """status.placement as last written: the durable plan a new workflow run resumes from."""
    finalizers: list[str] = []
    """metadata.finalizers: whether placement's own finalizer is on the source yet."""
    rollout_policies: bool = False
    """A spec.rollout group names a RolloutPolicy: each home's rollout provenance is mirrored."""
    autoscaler_policy_components: list[str] = []
    """The components whose spec names an autoscalerPolicyRef: each home's autoscaling is mirrored."""
    adopt: bool = False
    """The source carries servingops.io/placement-adopt: "true": standing copies in matched members are
    inventoried and adopted (api_models/contract/placement.py)."""


class MemberTarget(BaseModel):
    """The derived InferenceService of one source in one member cluster."""

    cluster: str
    """The WorkloadCluster's name."""
    namespace: str
    name: str
    source_uid: str
    adopt_uid: str | None = None
    """The uid of a standing copy this member's inventory identified for adoption: that object (and no
    other of the name) is written, observed and deleted as if derived from the source."""


class ApplyMemberInput(BaseModel):
    target: MemberTarget
    source: ObjectRef
    """The source InferenceService: its spec (placement removed) is what the member gets."""
    execution: dict[str, Any]
    """PlacementExecutionPolicy JSON, written to the ome.io/placement-execution annotation."""
    queue: str
    """The Kueue LocalQueue the derived service's pods name."""
    replica_floors: dict[str, int] | None = None
    """All / Split: each component's floor in this home, run as its minReplicas (None: the source's)."""


class MemberWrite(BaseModel):
    """What a write to a member did. A member that cannot be written is an answer, not an error:
    the other candidates race on."""

    done: bool
    reason: str | None = None
    """Why not, as a CamelCase token: Unreachable, NamespaceMissing, NameInUse, AccessRefused,
    KubeConfigInvalid, SecretNotFound."""
    message: str | None = None


class ComponentAdmission(BaseModel):
    component: str
    admitted: int
    """Instances Kueue admitted (instanceStatuses[].admitted) whose live pods confirm it (none
    carries the admission scheduling gate)."""
    ready: int
    desired: int


class MemberObservation(BaseModel):
    reachable: bool
    reason: str | None = None
    message: str | None = None
    exists: bool = False
    components: list[ComponentAdmission] = []
    url: str | None = None
    """The derived service's status.url, once it has one."""
    rollout: CandidateRolloutStatus | None = None
    autoscaling: CandidateAutoscalingStatus | None = None
    """Lifted off the derived service's status (mirrors.py) for the row's rollout / autoscaling."""

    @property
    def admitted(self) -> bool:
        """Every component has at least one confirmed admitted Instance."""
        return self.exists and bool(self.components) and all(c.admitted > 0 for c in self.components)

    @property
    def counted(self) -> ComponentAdmission | None:
        """The component whose Instances a home's replica counts report: the engine, else the first one."""
        engine = next((c for c in self.components if c.component == ComponentType.ENGINE.value), None)
        return engine or (self.components[0] if self.components else None)


class MemberInventory(BaseModel):
    """What stands in a member under the source's name before placement plans a home there. An answer,
    not an error: an unreachable member's inventory is pending (`identified` False)."""

    identified: bool
    reason: str | None = None
    message: str | None = None
    standing_uid: str | None = None
    """The uid of a same-named InferenceService not derived from this source (none: nothing stands)."""
    standing_origin: str | None = None
    """Its ome.io/placement-origin label (an earlier source of that name), when it has one."""
    ours: bool = False
    """The object there is already derived from this source."""
    replicas: int = 0
    """The engine (else first component) Instances its Kueue admitted, confirmed by live pods: the
    standing resources the home holds now (its originalReplicas)."""
    admitted: bool = False
    """Every component has an admitted Instance: it serves already."""


class CapacityInput(BaseModel):
    """SplitByCapacity: how many whole replicas of the source one member can hold."""

    target: MemberTarget
    source: ObjectRef
    queue: str
    """The Kueue LocalQueue the derived service's pods would name (part of their rendering)."""


class CapacityReading(BaseModel):
    """A member's nominal whole-replica capacity for the source, or why it is not known. Unknown is an
    answer (SplitByCapacity keeps its last plan), not an error."""

    sample: PlacementCapacitySample | None = None
    """The accepted evidence (replicas, pools citing the member's report, the demand contract)."""
    reason: str | None = None
    """Why unknown, as a CamelCase token: NoCapacityReport, AmbiguousCapacityReport, CapacityIncomplete,
    CapacityStale, NoAcceleratorDemand, DemandUnresolvable, SourceGone, or the member's trouble
    (Unreachable, AccessRefused, ...)."""
    message: str | None = None
