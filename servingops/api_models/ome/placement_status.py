"""Multi-cluster placement status: the durable plan and the per-cluster candidates."""

from __future__ import annotations

from pydantic import Field

from servingops.api_models.base import ApiModel, Time
from servingops.api_models.ome.accelerator import AcceleratorCapacityAttribution
from servingops.api_models.ome.autoscaling import CandidateAutoscalingStatus
from servingops.api_models.ome.enums import CandidatePlacementPhase, ComponentType, PlacementMode, PlacementPhase
from servingops.api_models.ome.placement import PlacementComponentFloor, PlacementDemandContract
from servingops.api_models.ome.rollout_status import CandidateRolloutStatus


class PlacementHomePolicy(ApiModel):
    """PlacementHomePolicy records the full component floors of one retained home."""

    input_digest: str | None = None
    """InputDigest binds these resolved floors to the accepted source intent."""
    replica_floors: list[PlacementComponentFloor] | None = Field(default=None, min_length=1, max_length=3)
    """ReplicaFloors are the resolved per-component floors of this home."""


class ComponentAffinityMatch(ApiModel):
    """ComponentAffinityMatch records how one component's own affinity terms matched a cluster."""

    component: ComponentType | None = None
    """Component whose terms matched."""
    matching_terms: list[int] | None = None
    """MatchingTerms contains zero-based indexes into the component's terms."""
    weight: int | None = Field(default=None, ge=0)
    """Weight is the component's effective static weight, when applicable."""


class PlacementCapacityPool(ApiModel):
    """PlacementCapacityPool is the evidence for one resource/flavor ratio."""

    resource_name: str | None = None
    """ResourceName is the resource of this pool."""
    resource_flavor: str | None = None
    """ResourceFlavor is the flavor of this pool."""
    demand: int | None = Field(default=None, ge=1)
    """Demand is the quantity one replica needs."""
    allocatable: int | None = Field(default=None, ge=0)
    """Allocatable is the observed schedulable quantity."""
    observed_at: Time | None = None
    """ObservedAt is when Allocatable was sampled."""
    report_uid: str | None = Field(default=None, alias="reportUID")
    """ReportUID identifies the capacity report read."""
    report_resource_version: str | None = None
    """ReportResourceVersion identifies the report version read."""
    attribution: AcceleratorCapacityAttribution | None = None
    """Attribution is the hardware mapping of the observation."""


class PlacementCapacitySample(ApiModel):
    """PlacementCapacitySample records the identified hardware and resolved demand used to normalize
    one member into nominal whole-replica capacity."""

    demand_fingerprint: str | None = None
    """DemandFingerprint identifies the resolved resource/flavor demand used."""
    demand_contract: PlacementDemandContract | None = None
    """DemandContract binds normalization to the member rendering authorized by this allocation. Its
    fingerprint must equal DemandFingerprint."""
    replicas: int | None = Field(default=None, ge=0)
    """Replicas is the nominal whole-replica capacity of the member."""
    pools: list[PlacementCapacityPool] | None = None
    """Pools is the evidence of each resource/flavor ratio."""


class CandidateAllocationStatus(ApiModel):
    """CandidateAllocationStatus separates original, currently authorized, and desired floors. A
    zero current floor does not authorize deletion before traffic drains."""

    cluster_uid: str | None = Field(default=None, alias="clusterUID")
    """ClusterUID identifies the WorkloadCluster registration of this member."""
    inventory_pending: bool | None = None
    """InventoryPending prevents unknown standing resources from becoming free migration capacity.
    It is cleared only by an identified member inventory."""
    home_inputs_pending: bool | None = None
    """HomeInputsPending holds movement when current full-policy inputs cannot be verified, while
    retaining the last accepted desired floors."""
    race_candidate: bool | None = None
    """RaceCandidate authorizes cleanup of a Single race copy after another candidate wins. A
    retained winner does not carry this permission."""
    replacement_started_at: Time | None = None
    """ReplacementStartedAt persists the start of an authorized bounded probe. The configured
    replacement timeout is evaluated against this instant."""
    matched: bool | None = None
    """Matched distinguishes a desired full-policy home from an outgoing home, including an affinity
    that matches every registration without terms."""
    current_home: PlacementHomePolicy | None = None
    """CurrentHome retains the full policy authorized at a home through draining."""
    desired_home: PlacementHomePolicy | None = None
    """DesiredHome is present for every intended full-policy home."""
    matching_terms: list[int] | None = None
    """MatchingTerms contains zero-based indexes into the source's affinity terms."""
    weight: int | None = Field(default=None, ge=0)
    """Weight is the effective static allocation weight, when applicable."""
    component_matches: list[ComponentAffinityMatch] | None = Field(default=None, max_length=2)
    """ComponentMatches records, under the ComponentAffinity policy, how each component other than
    the primary one matched this cluster. MatchingTerms and Weight hold the primary component's
    match."""
    capacity: PlacementCapacitySample | None = None
    """Capacity is the accepted hardware sample, when capacity determines weight."""
    original_replicas: int | None = Field(default=None, ge=0)
    """OriginalReplicas is the floor this member held when the transition began."""
    current_replicas: int | None = Field(default=None, ge=0)
    """CurrentReplicas is the floor currently authorized at this member."""
    desired_replicas: int | None = Field(default=None, ge=0)
    """DesiredReplicas is the floor this member is moving to."""
    drain_requested: bool | None = None
    """DrainRequested withdraws this home from routing before physical removal."""


class CandidatePlacement(ApiModel):
    """CandidatePlacement is the per-cluster state of a fan-out candidate."""

    allocation: CandidateAllocationStatus | None = None
    """Allocation is the persisted floor and identity of this member."""
    applied_plan_id: str | None = Field(default=None, alias="appliedPlanID")
    """AppliedPlanID identifies the allocation acknowledged by this member."""
    observation_known: bool | None = None
    """ObservationKnown distinguishes a current observation from retained evidence."""
    observation_failing_since: Time | None = None
    """ObservationFailingSince is when the control plane's reads of this home started failing. It is
    unset while reads succeed. While the configured observation grace lasts from this time, the home
    keeps the ready count from its last successful read."""
    cluster: str | None = None
    """Cluster is the WorkloadCluster name."""
    phase: CandidatePlacementPhase | None = None
    """Phase is the candidate's state."""
    endpoint: str | None = None
    """Endpoint is this candidate's own externally-addressable URL, mirrored from its derived
    InferenceService's status.url once admitted AND addressable."""
    admitted_replicas: int | None = None
    """AdmittedReplicas is how many replicas this home's Kueue has admitted. In Split it also drives
    global accounting: the control plane sums it across homes to decide whether the desired count is
    met."""
    ready_replicas: int | None = None
    """ReadyReplicas is how many of this home's replicas are serving traffic. It is the live count
    basis and health gate for routing across homes."""
    autoscaling: CandidateAutoscalingStatus | None = None
    """Autoscaling mirrors this home's AutoscalerPolicy state so digest skew between homes is
    visible from the source InferenceService. Set only when the source references at least one
    policy."""
    rollout: CandidateRolloutStatus | None = None
    """Rollout mirrors this home's rollout-run provenance (run identity plus per-group plan digests,
    never the plan bodies) so plan drift between homes is visible from the source InferenceService.
    Set only when the source's rollout groups reference a RolloutPolicy."""


class PlacementSingleMoveStatus(ApiModel):
    """PlacementSingleMoveStatus separates replacement admission from serving handoff."""

    selected: str | None = None
    """Selected records the admitted replacement while it becomes ready and routable."""
    cursor: str | None = None
    """Cursor identifies the last nominated replacement for fair bounded retries."""


class PlacementPlanStatus(ApiModel):
    """PlacementPlanStatus identifies the allocation persisted before member writes. Original
    assignments remain fixed throughout a transition, including retargets."""

    id: str | None = None
    """ID identifies this accepted plan."""
    mode: PlacementMode | None = None
    """Mode identifies the execution semantics of this accepted plan."""
    winner: str | None = None
    """Winner commits the admitted Single home before race losers are removed. Empty means the
    persisted Single admission race has not selected a home."""
    single_move: PlacementSingleMoveStatus | None = None
    """SingleMove retains bounded replacement-race state until the old home and losing probes have
    been removed. Winner remains the serving home."""
    adoption_digest: str | None = None
    """AdoptionDigest fixes the initial intent while standing homes are being inventoried. A changed
    intent cannot expand an incomplete inventory."""
    revision: int | None = Field(default=None, ge=1)
    """Revision increases for every accepted allocation or drain instruction."""
    source_uid: str | None = Field(default=None, alias="sourceUID")
    """SourceUID is the uid of the source InferenceService the plan belongs to."""
    observed_generation: int | None = Field(default=None, ge=1)
    """ObservedGeneration is the source generation the plan was accepted for."""
    input_digest: str | None = None
    """InputDigest identifies resolved source intent and accepted allocation inputs. Heartbeat
    timestamps and report resource versions do not change this digest."""
    pause_surge: bool | None = None
    """PauseSurge keeps new member rollout reservations stopped while placement owns the shared
    transition allowance. Releasing it creates a new revision."""
    requested_replicas: int | None = Field(default=None, ge=0)
    """RequestedReplicas includes the assigned and unassigned desired floor."""
    assigned_replicas: int | None = Field(default=None, ge=0)
    """AssignedReplicas is the part of the floor assigned to homes."""
    unassigned_replicas: int | None = Field(default=None, ge=0)
    """UnassignedReplicas is the part of the floor no home holds yet."""
    original_unassigned_replicas: int | None = Field(default=None, ge=0)
    """OriginalUnassignedReplicas retains the unassigned part of the original floor."""


class PlacementStatus(ApiModel):
    """PlacementStatus is the multi-cluster placement status: its coarse phase and the candidate
    clusters participating in placement."""

    plan: PlacementPlanStatus | None = None
    """Plan is the durable authority for member allocation writes."""
    cluster: str | None = None
    """Cluster is the winning WorkloadCluster in Single mode. It is empty before admission and in
    All/Split modes, where Candidates is authoritative."""
    phase: PlacementPhase | None = None
    """Phase is a coarse placement state."""
    endpoint: str | None = None
    """Endpoint is the externally-addressable URL of the winning cluster in Single mode, mirrored
    from the derived InferenceService's status.url once it is admitted AND addressable."""
    candidates: list[CandidatePlacement] | None = None
    """Candidates are the clusters this ISVC has been fanned out to during placement. Populated by
    the control plane."""
