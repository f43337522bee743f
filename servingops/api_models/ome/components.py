"""The engine, decoder and router components of an InferenceService: inline pod fields (OME's PodSpec
with core Kubernetes types kept opaque), deployment extension fields, and multi-node leader/worker."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from servingops.api_models.base import ApiModel, IntOrString, KubeObject, KubeObjectList, Quantity, cel, validations
from servingops.api_models.ome.accelerator import AcceleratorSelector
from servingops.api_models.ome.autoscaling import AutoscalerPolicyRef, ComponentAutoscaler
from servingops.api_models.ome.enums import TopologySpreadPolicy
from servingops.api_models.ome.lifecycle import LifecycleSpec


class PodSpec(ApiModel):
    """The fields of a core Kubernetes PodSpec, inlined into a component. Core types stay opaque here:
    the apiserver validates them when the rendered pods are created. ephemeralContainers is dropped, as
    in OME's own CRD: pod templates cannot carry ephemeral containers."""

    volumes: KubeObjectList | None = None
    """Volumes that can be mounted by containers belonging to the pod."""
    init_containers: KubeObjectList | None = None
    """Initialization containers, run in order before the containers start."""
    containers: KubeObjectList | None = None
    """Containers belonging to the pod."""
    restart_policy: str | None = None
    """Restart policy for all containers within the pod: Always, OnFailure or Never."""
    termination_grace_period_seconds: int | None = None
    """Seconds the pod needs to terminate gracefully."""
    active_deadline_seconds: int | None = None
    """Seconds the pod may be active on the node before it is marked failed."""
    dns_policy: str | None = None
    """DNS policy for the pod: ClusterFirstWithHostNet, ClusterFirst, Default or None."""
    node_selector: dict[str, str] | None = None
    """Labels a node must carry for the pod to be scheduled on it."""
    service_account_name: str | None = None
    """Name of the ServiceAccount the pod runs as."""
    service_account: str | None = None
    """Deprecated alias for serviceAccountName."""
    automount_service_account_token: bool | None = None
    """Whether a service account token is mounted automatically."""
    node_name: str | None = None
    """Node the pod is bound to, bypassing the scheduler."""
    host_network: bool | None = None
    """Use the host's network namespace."""
    host_pid: bool | None = Field(default=None, alias="hostPID")
    """Use the host's pid namespace."""
    host_ipc: bool | None = Field(default=None, alias="hostIPC")
    """Use the host's ipc namespace."""
    share_process_namespace: bool | None = None
    """Share a single process namespace between all of the containers in the pod."""
    security_context: KubeObject | None = None
    """Pod-level security attributes and common container settings."""
    image_pull_secrets: KubeObjectList | None = None
    """References to secrets in the same namespace used to pull the pod's images."""
    hostname: str | None = None
    """Hostname of the pod."""
    subdomain: str | None = None
    """Subdomain of the pod's fully qualified hostname."""
    affinity: KubeObject | None = None
    """The pod's scheduling constraints."""
    scheduler_name: str | None = None
    """Scheduler that dispatches the pod."""
    tolerations: KubeObjectList | None = None
    """The pod's tolerations."""
    host_aliases: KubeObjectList | None = None
    """Hosts and IPs injected into the pod's hosts file."""
    priority_class_name: str | None = None
    """PriorityClass of the pod."""
    priority: int | None = None
    """Priority value of the pod, populated from priorityClassName by admission."""
    dns_config: KubeObject | None = None
    """DNS parameters of the pod, merged with those generated from dnsPolicy."""
    readiness_gates: KubeObjectList | None = None
    """Extra conditions that must be True for the pod to be ready."""
    runtime_class_name: str | None = None
    """RuntimeClass used to run the pod."""
    enable_service_links: bool | None = None
    """Whether information about services is injected into the pod's environment."""
    preemption_policy: str | None = None
    """Policy for preempting pods with lower priority: Never or PreemptLowerPriority."""
    overhead: dict[str, Quantity] | None = None
    """Resource overhead of running the pod for its RuntimeClass."""
    topology_spread_constraints: KubeObjectList | None = None
    """How the pods spread across topology domains."""
    set_hostname_as_fqdn: bool | None = Field(default=None, alias="setHostnameAsFQDN")
    """Configure the pod's hostname as its FQDN."""
    os: KubeObject | None = None
    """OS of the pod's containers."""
    host_users: bool | None = None
    """Use the host's user namespace."""
    scheduling_gates: KubeObjectList | None = None
    """Gates that block scheduling the pod while present."""
    resource_claims: KubeObjectList | None = None
    """ResourceClaims allocated and reserved before the pod starts."""


class ComponentExtensionSpec(ApiModel):
    """ComponentExtensionSpec defines the deployment configuration for a given InferenceService
    component"""

    min_replicas: int | None = None
    """Minimum number of replicas, defaults to 1 but can be set to 0 to enable scale-to-zero."""
    max_replicas: int | None = None
    """Maximum number of replicas for autoscaling."""
    timeout_seconds: int | None = None
    """TimeoutSeconds specifies the number of seconds to wait before timing out a request to the
    component."""
    labels: dict[str, str] | None = None
    """Labels that will be added to the component pod. More info:
    http://kubernetes.io/docs/user-guide/labels"""
    annotations: dict[str, str] | None = None
    """Annotations that will be added to the component pod. More info:
    http://kubernetes.io/docs/user-guide/annotations"""
    service_port_app_protocols: dict[str, str] | None = None
    """ServicePortAppProtocols maps generated Service port names to their Kubernetes appProtocol
    values. Declared ports use their container port name."""
    min_available: IntOrString | None = None
    """MinAvailable specifies how many component pods must still be available after the eviction"""
    max_unavailable: IntOrString | None = None
    """MaxUnavailable specifies how many component pods can be unavailable"""
    deployment_strategy: KubeObject | None = None
    """The deployment strategy to use to replace existing pods with new ones. Only applicable for
    raw deployment mode."""
    lifecycle: LifecycleSpec | None = None
    """Lifecycle groups OMENative-specific lifecycle policies for this Component. Applies only when
    the Component resolves to deploymentMode OMENative (spec.deploymentMode or the per-Component
    ome.io/deploymentMode annotation); ignored otherwise."""
    autoscaler: ComponentAutoscaler | None = None
    """Autoscaler configures the per-Component autoscaler dispatch and the underlying KEDA / HPA
    configuration."""
    autoscaler_policy_ref: AutoscalerPolicyRef | None = None
    """AutoscalerPolicyRef names a same-namespace AutoscalerPolicy whose template renders this
    Component's autoscaler. An inline Autoscaler block above always outranks the ref; the two may
    coexist, which is the documented preview/rollback mechanism. Alpha."""


class LeaderSpec(PodSpec):
    """LeaderSpec defines the configuration for a leader node in a multi-node component. The leader
    node coordinates the activities of worker nodes in distributed inference or token generation
    setups, handling task distribution and result aggregation."""

    runner: KubeObject | None = None
    """Runner container override for customizing the main container. This is essentially a container
    spec that can override the default container. Provides fine-grained control over the container
    that executes the leader node's coordination logic."""


class WorkerSpec(PodSpec):
    """WorkerSpec defines the configuration for worker nodes in a multi-node component. Worker nodes
    perform the distributed processing tasks assigned by the leader node, enabling horizontal
    scaling for compute-intensive workloads."""

    size: int | None = None
    """Size of the worker, this is the number of pods in the worker. Controls how many worker pod
    instances will be deployed for horizontal scaling. Unset inherits the ServingRuntime's value;
    when neither sets it, a declared leader gets one worker."""
    runner: KubeObject | None = None
    """Runner container override for customizing the main container. This is essentially a container
    spec that can override the default container. Provides fine-grained control over the container
    that executes the worker node's processing logic."""


class EngineSpec(PodSpec, ComponentExtensionSpec):
    """EngineSpec defines the configuration for the Engine component (can be used for both single-
    node and multi-node deployments). Provides a comprehensive specification for deploying model
    serving containers and pods. It allows for complete Kubernetes pod configuration including main
    containers, init containers, sidecars, volumes, and other pod-level settings."""

    runner: KubeObject | None = None
    """Runner container override for customizing the engine container. This is essentially a
    container spec that can override the default container."""
    leader: LeaderSpec | None = None
    """Leader node configuration (only used for multi-node deployment). Defines the pod and
    container spec for the leader node that coordinates distributed inference in multi-node
    deployments."""
    worker: WorkerSpec | None = None
    """Worker nodes configuration (only used for multi-node deployment). Defines the pod and
    container spec for worker nodes that perform distributed processing tasks as directed by the
    leader."""
    topology_key: str | None = None
    """TopologyKey is the node-label key (e.g. an NVLink/RDMA fabric-domain label) used to co-locate
    all pods of one multi-node (leader+worker) gang into a single network / NVLink topology domain."""
    topology_spread: TopologySpreadPolicy | None = None
    """TopologySpread spreads this component's instances across fault domains so losing one domain
    (rack / fabric slice / cube) cannot take out every instance at once."""
    topology_spread_key: str | None = None
    """TopologySpreadKey is the node-label key naming the fault domains TopologySpread spreads
    across. Defaults to TopologyKey — right for fabrics where the co-location domain IS the failure
    zone (an NVLink rack)."""
    accelerator_override: AcceleratorSelector | None = None
    """AcceleratorOverride allows overriding the global accelerator selection for this component"""


class DecoderSpec(PodSpec, ComponentExtensionSpec):
    """DecoderSpec defines the configuration for the Decoder component (token generation in PD-
    disaggregated deployment). Used specifically for prefill-decode disaggregated deployments to
    handle the token generation phase. Similar to EngineSpec in structure, it allows for detailed
    pod and container configuration, but is specifically used for the decode phase when separating
    prefill and decode processes."""

    runner: KubeObject | None = None
    """Runner container override for customizing the main container. This is essentially a container
    spec that can override the default container."""
    leader: LeaderSpec | None = None
    """Leader node configuration (only used for multi-node deployment). Defines the pod and
    container spec for the leader node that coordinates distributed token generation in multi-node
    deployments."""
    worker: WorkerSpec | None = None
    """Worker nodes configuration (only used for multi-node deployment). Defines the pod and
    container spec for worker nodes that perform distributed token generation tasks as directed by
    the leader."""
    topology_key: str | None = None
    """TopologyKey is the node-label key (e.g. an NVLink/RDMA fabric-domain label) used to co-locate
    all pods of one multi-node (leader+worker) gang into a single network / NVLink topology domain."""
    topology_spread: TopologySpreadPolicy | None = None
    """TopologySpread spreads this component's instances across fault domains so losing one domain
    (rack / fabric slice / cube) cannot take out every instance at once."""
    topology_spread_key: str | None = None
    """TopologySpreadKey is the node-label key naming the fault domains TopologySpread spreads
    across. Defaults to TopologyKey — right for fabrics where the co-location domain IS the failure
    zone (an NVLink rack)."""
    accelerator_override: AcceleratorSelector | None = None
    """AcceleratorOverride allows overriding the global accelerator selection for this component"""


class RouterSpec(PodSpec, ComponentExtensionSpec):
    """RouterSpec defines the configuration for the Router component, which handles request routing"""

    runner: KubeObject | None = None
    """This is essentially a container spec that can override the default container"""
    config: dict[str, str] | None = None
    """Additional configuration parameters for the runner. This can include framework-specific
    settings."""


class ReplicaRefs(ApiModel):
    """ReplicaRefs names the standalone InferenceReplicas an InferenceService fronts, per role. Each
    list names one replica of that component in the service's namespace."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("has(self.engine) && size(self.engine) > 0", "replicaRefs.engine is required"),
        )
    )

    engine: list[str] | None = None
    """Engine names the replicas that serve the engine role."""
    decoder: list[str] | None = None
    """Decoder names the replicas that serve the decoder role."""
    router: list[str] | None = None
    """Router names the replicas that serve the router role."""
