"""Enumerations of the ome.io/v1beta1 API, one per named enum type of the seed."""

from enum import StrEnum


class AcceleratorQuotaDistributionPolicy(StrEnum):
    """AcceleratorQuotaDistributionPolicy selects how a leaf's fleet-wide nominal is split into
    per-cluster shares."""

    EXPLICIT = "Explicit"
    PROPORTIONAL = "Proportional"


class AcceleratorQuotaRole(StrEnum):
    """AcceleratorQuotaRole declares what a node is, rather than leaving it inferred from whether
    children happen to exist. A grouping created before its first child is still a Cohort, and adding a
    child can never silently convert a leaf."""

    COHORT = "Cohort"
    CLUSTER_QUEUE = "ClusterQueue"


class AcceleratorSelectionPolicy(StrEnum):
    """AcceleratorSelectionPolicy defines how to select among matching accelerators"""

    BEST_FIT = "BestFit"
    CHEAPEST = "Cheapest"
    MOST_CAPABLE = "MostCapable"
    FIRST_AVAILABLE = "FirstAvailable"


class AutoscalerClass(StrEnum):
    """AutoscalerClass identifies the autoscaler implementation for a Component. Alpha. The API may
    change without notice."""

    HPA = "HPA"
    KEDA = "KEDA"
    EXTERNAL = "External"
    NONE = "None"


class AutoscalerManagedBy(StrEnum):
    """AutoscalerManagedBy identifies who owns the active autoscaler for a Component."""

    OME = "ome"
    EXTERNAL = "external"
    NONE = "none"


class ComponentBoundsField(StrEnum):
    """ComponentBoundsField names a replica bound on the consuming component's ComponentExtensionSpec
    that a ReplicaValueSource resolves against."""

    MAX_REPLICAS = "MaxReplicas"
    MIN_REPLICAS = "MinReplicas"


class PolicyEnforcement(StrEnum):
    """PolicyEnforcement is the enforcement tier of an AutoscalerPolicy. Alpha. The API may change
    without notice."""

    DEFAULT = "Default"
    REQUIRED = "Required"


class BenchmarkApiFormat(StrEnum):
    """The API a BenchmarkJob's direct endpoint speaks (Endpoint.apiFormat)."""

    OPENAI = "openai"
    OCI_COHERE = "oci-cohere"
    COHERE = "cohere"


class BenchmarkGpuType(StrEnum):
    """The GPU of the model server a BenchmarkJob measures (ServiceMetadata.gpuType)."""

    H100 = "H100"
    A100 = "A100"
    MI300 = "MI300"
    A10 = "A10"


class BenchmarkJobState(StrEnum):
    """The state of a BenchmarkJob (BenchmarkJobStatus.state)."""

    PENDING = "Pending"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"


class BenchmarkServerEngine(StrEnum):
    """The engine of the model server a BenchmarkJob measures (ServiceMetadata.engine)."""

    VLLM = "vLLM"
    SGLANG = "SGLang"
    TGI = "TGI"


class BenchmarkTask(StrEnum):
    """What a BenchmarkJob measures, <input-modality>-to-<output-modality> (BenchmarkJobSpec.task)."""

    TEXT_TO_TEXT = "text-to-text"
    IMAGE_TO_TEXT = "image-to-text"
    TEXT_TO_EMBEDDINGS = "text-to-embeddings"
    IMAGE_TO_EMBEDDINGS = "image-to-embeddings"


class CanaryFailureReason(StrEnum):
    """CanaryFailureReason enumerates why a canary parked Failed."""

    CAPACITY_TIMEOUT = "CapacityTimeout"
    ANALYSIS_STALLED = "AnalysisStalled"
    STABLE_REVISION_MISSING = "StableRevisionMissing"


class CandidatePlacementPhase(StrEnum):
    """CandidatePlacementPhase is the per-cluster state of a fan-out candidate."""

    ADMITTING = "Admitting"
    PLACED = "Placed"
    ADMITTED = "Admitted"


class CapacitySource(StrEnum):
    """CapacitySource names which input produced an entry's Allocated count."""

    CONTROL_PLANE = "ControlPlane"
    ENDPOINT = "Endpoint"


class ComparisonOperator(StrEnum):
    """ComparisonOperator is how an AnalysisMetric result is compared to its Threshold. "result <op>
    threshold" being true means the metric is healthy."""

    LT = "LT"
    LTE = "LTE"
    GT = "GT"
    GTE = "GTE"


class ComponentType(StrEnum):
    """ComponentType contains the different types of components of the service"""

    ENGINE = "engine"
    DECODER = "decoder"
    ROUTER = "router"


class CoordinationPhase(StrEnum):
    """CoordinationPhase is the metric-stable enum for a coordination group's base reconcile phase."""

    IDLE = "Idle"
    SURGING = "Surging"
    WAITING = "Waiting"
    SHIFTING = "Shifting"
    DRAINING = "Draining"
    SCALING_DOWN = "ScalingDown"
    STAGED = "Staged"
    FAILED = "Failed"
    ROLLING_BACK = "RollingBack"
    PAUSED = "Paused"


class CoordinationPolicy(StrEnum):
    """CoordinationPolicy selects the cross-Component coordination semantic applied to a
    RolloutCoordinationGroup."""

    BLUE_GREEN = "BlueGreen"
    ROLLING_UPDATE = "RollingUpdate"
    INDEPENDENT = "Independent"
    SEQUENTIAL = "Sequential"


class Distribution(StrEnum):
    """Distribution selects how a BaseModel's weights are laid out across the cluster: a full copy on
    each selected node (PerNode), or chunks held by an external cache (Sharded, in development:
    a Sharded model cannot be served yet)."""

    PER_NODE = "PerNode"
    SHARDED = "Sharded"


class DownloadPolicy(StrEnum):
    """DownloadPolicy decides whether a node keeps a separate copy of a model's files:
    AlwaysDownload (the default) keeps one per model, ReuseIfExists lets the agent share Hugging Face
    files another model already put on the node."""

    ALWAYS_DOWNLOAD = "AlwaysDownload"
    REUSE_IF_EXISTS = "ReuseIfExists"


class EndpointOverrideType(StrEnum):
    """EndpointOverrideType selects how the override endpoint reference is extracted from the
    request."""

    HEADER = "Header"
    METADATA = "Metadata"


class FailureReason(StrEnum):
    """FailureReason enum"""

    BASE_MODEL_NOT_READY = "BaseModelNotReady"
    BASE_MODEL_NOT_FOUND = "BaseModelNotFound"
    MODEL_LOAD_FAILED = "ModelLoadFailed"
    RUNTIME_UNHEALTHY = "RuntimeUnhealthy"
    RUNTIME_DISABLED = "RuntimeDisabled"
    NO_SUPPORTING_RUNTIME = "NoSupportingRuntime"
    RUNTIME_NOT_RECOGNIZED = "RuntimeNotRecognized"


class HashType(StrEnum):
    """HashType selects what request attribute is hashed for ConsistentHash load balancing."""

    HEADER = "Header"
    COOKIE = "Cookie"
    SOURCE_IP = "SourceIP"


class InstanceOperationType(StrEnum):
    """InstanceOperationType is the kind of destructive action recorded in InstanceOperation."""

    CREATE = "Create"
    UPDATE = "Update"
    RESTART = "Restart"
    MIGRATE = "Migrate"
    DELETE = "Delete"


class InstanceReadyPolicy(StrEnum):
    """InstanceReadyPolicy controls how Instance-level readiness is aggregated from the underlying
    pods."""

    ALL_POD_READY = "AllPodReady"
    NONE = "None"


class InstanceRestartPolicy(StrEnum):
    """InstanceRestartPolicy controls what OMENative does when a managed pod fails. Applies only
    when the Component is annotated ome.io/deploymentMode=OMENative."""

    NONE = "None"
    RECREATE_INSTANCE_ON_POD_RESTART = "RecreateInstanceOnPodRestart"


class InstanceStatusEncoding(StrEnum):
    """InstanceStatusEncoding names a stored representation of the per-Instance rows. The wire
    carries only ColumnarV2; an absent marker means DenseV1."""

    COLUMNAR_V2 = "ColumnarV2"


class LifeCycleState(StrEnum):
    """LifeCycleState is where a model's weights are in their life: being created, imported, moved or
    trained, ready to serve, or failed."""

    CREATING = "Creating"
    IMPORTING = "Importing"
    IN_TRANSIT = "In_Transit"
    IN_TRAINING = "In_Training"
    READY = "Ready"
    FAILED = "Failed"


class LoadBalancingType(StrEnum):
    """LoadBalancingType selects the load-balancing algorithm applied to a Component's backend
    Service(s)."""

    ROUND_ROBIN = "RoundRobin"
    LEAST_REQUEST = "LeastRequest"
    RANDOM = "Random"
    CONSISTENT_HASH = "ConsistentHash"


class MigrationMode(StrEnum):
    """MigrationMode is the migration mechanism selected."""

    SURGE = "Surge"


class MigrationPhase(StrEnum):
    """MigrationPhase is the lifecycle phase of a migration. Manual migrations walk Accepted ->
    SurgePending -> SurgeReady -> Draining -> Completed | Failed. Auto relocations are born terminal
    (Relocated)."""

    ACCEPTED = "Accepted"
    SURGE_PENDING = "SurgePending"
    SURGE_READY = "SurgeReady"
    DRAINING = "Draining"
    COMPLETED = "Completed"
    FAILED = "Failed"
    RELOCATED = "Relocated"
    PENDING = "Pending"
    IN_PROGRESS = "InProgress"


class MigrationPolicyMode(StrEnum):
    """MigrationPolicyMode gates migration mechanisms for a Component."""

    AUTO = "Auto"
    SURGE = "Surge"
    NEVER = "Never"


class MigrationTrigger(StrEnum):
    """MigrationTrigger identifies who initiated a migration entry."""

    MANUAL = "Manual"
    AUTO = "Auto"


class ModelState(StrEnum):
    """ModelState enum"""

    EMPTY = ""
    PENDING = "Pending"
    STANDBY = "Standby"
    LOADING = "Loading"
    LOADED = "Loaded"
    FAILED_TO_LOAD = "FailedToLoad"


class OMENativeInstancePhase(StrEnum):
    """OMENativeInstancePhase is the lifecycle phase of an OMENative Instance."""

    PENDING = "Pending"
    CREATING = "Creating"
    READY = "Ready"
    UPDATING = "Updating"
    RESTARTING = "Restarting"
    MIGRATING = "Migrating"
    FAILED = "Failed"
    DELETING = "Deleting"


class OnInconclusive(StrEnum):
    """OnInconclusive selects the behavior when analysis cannot read health past the stall timeout
    (NOT a metric breach)."""

    HOLD = "Hold"
    ROLLBACK = "Rollback"
    ROLLBACK_ON_STALL = "RollbackOnStall"


class PauseMode(StrEnum):
    """PauseMode is the enum of pause depths for InferenceReplicaSpec.Paused."""

    RECOVER = "Recover"
    FREEZE = "Freeze"


class PlacementMode(StrEnum):
    """PlacementMode is the cardinality of a multi-cluster placement: how many workload clusters end
    up serving the InferenceService."""

    SINGLE = "Single"
    ALL = "All"
    SPLIT = "Split"
    SPLIT_BY_CAPACITY = "SplitByCapacity"


class PlacementPhase(StrEnum):
    """PlacementPhase is the coarse state of an InferenceService's multi-cluster placement."""

    PENDING = "Pending"
    ADMITTING = "Admitting"
    RACING = "Racing"
    PLACED = "Placed"
    FAILED = "Failed"


class PlacementPolicy(StrEnum):
    """PlacementPolicy selects the matching and allocation contract."""

    CLUSTER_AFFINITY = "ClusterAffinity"
    COMPONENT_AFFINITY = "ComponentAffinity"


class ProbeResult(StrEnum):
    """ProbeResult is the outcome of the most recent end-to-end health probe."""

    PASSING = "Passing"
    FAILING = "Failing"
    UNKNOWN = "Unknown"


class RetryBlockState(StrEnum):
    """RetryBlockState is the retry authority state for one target revision."""

    BACKOFF = "Backoff"
    HELD = "Held"
    RETRY_IN_PROGRESS = "RetryInProgress"


class RolloutGroupOrdering(StrEnum):
    """RolloutGroupOrdering declares what, if anything, groups[] list order promises."""

    SEQUENTIAL = "Sequential"
    CONCURRENT = "Concurrent"


class RolloutHoldGate(StrEnum):
    """RolloutHoldGate names the layer that most recently denied a per-Instance Update for a
    Component."""

    PAIRING = "Pairing"
    RATIO = "Ratio"
    SEQUENTIAL = "Sequential"
    BUDGET = "Budget"
    RETRY_BLOCK = "RetryBlock"
    HELD = "Held"
    PLAN = "Plan"


class RolloutPhase(StrEnum):
    """RolloutPhase is the canary step machine's projected state for a Component that a spec.rollout
    canary group governs. The canary executor writes it on the Component it drives (the unit's
    entrypoint) and nothing clears it, so it persists between runs. Lives on
    ComponentStatusSpec.RolloutPhase."""

    STABLE = "Stable"
    CANARYING = "Canarying"
    PENDING = "Pending"
    PAUSED = "Paused"
    PROMOTING = "Promoting"
    ROLLING_BACK = "RollingBack"
    ROLLED_BACK = "RolledBack"
    FAILED = "Failed"


class RolloutPlanSource(StrEnum):
    """RolloutPlanSource records where a pinned group's progression came from."""

    INLINE = "Inline"
    POLICY = "Policy"


class RolloutProgressionKind(StrEnum):
    """RolloutProgressionKind names which progression a RolloutPolicy carries."""

    CANARY = "canary"
    BLUE_GREEN = "blueGreen"
    ROLLING_UPDATE = "rollingUpdate"


class RolloutRunOutcome(StrEnum):
    """RolloutRunOutcome is how a closed run ended."""

    COMPLETED = "Completed"
    ROLLED_BACK = "RolledBack"
    SUPERSEDED = "Superseded"


class RoutingAllFailedPolicy(StrEnum):
    """RoutingAllFailedPolicy controls whether a complete, conclusive probe failure may remove every
    route arm."""

    PRESERVE_TRAFFIC = "PreserveTraffic"
    DRAIN = "Drain"


class RunnerName(StrEnum):
    """RunnerName is the enum of recognized Runner roles within an Instance. Matches the established
    Runner vocabulary so existing ome.io/runner label semantics carry through."""

    DEFAULT = "default"
    LEADER = "leader"
    WORKER = "worker"


class ScalingMode(StrEnum):
    """ScalingMode declares how Components of an InferenceService scale relative to each other.
    Alpha. The API may change without notice."""

    INDEPENDENT = "Independent"
    PROPORTIONAL = "Proportional"
    PINNED = "Pinned"


class TopologySpreadPolicy(StrEnum):
    """TopologySpreadPolicy selects how a component's instances spread across fault domains,
    expressed through a rendered topologySpreadConstraint on each instance's anchor pod."""

    PREFERRED = "Preferred"
    REQUIRED = "Required"


class TransitionStatus(StrEnum):
    """TransitionStatus enum"""

    EMPTY = ""
    UP_TO_DATE = "UpToDate"
    IN_PROGRESS = "InProgress"
    BLOCKED_BY_FAILED_LOAD = "BlockedByFailedLoad"
    INVALID_SPEC = "InvalidSpec"


class UpdateStrategyType(StrEnum):
    """UpdateStrategyType selects the rollout mechanism."""

    SURGE_THEN_DRAIN = "SurgeThenDrain"
    RECREATE_POD = "RecreatePod"
    IN_PLACE_IF_POSSIBLE = "InPlaceIfPossible"
    IN_PLACE_ONLY = "InPlaceOnly"
