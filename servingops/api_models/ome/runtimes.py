"""The runtime kinds: ServingRuntime (namespaced) and ClusterServingRuntime (cluster-scoped), which say
which models they can serve (formats, frameworks, sizes) and how to render the engine, decoder and
router pods that serve them.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from servingops.api_models.base import (
    ApiModel,
    Condition,
    CrdInfo,
    KubeObject,
    KubeObjectList,
    KubeResource,
    PrinterColumn,
    condition_list_schema,
)
from servingops.api_models.ome.autoscaling import ScalingPolicy
from servingops.api_models.ome.components import DecoderSpec, EngineSpec, RouterSpec
from servingops.api_models.ome.constants import GROUP, VERSION
from servingops.api_models.ome.models import (
    DiffusionPipelineSpec,
    ModelCacheProvider,
    ModelFormat,
    ModelFrameworkSpec,
    ModelQuantization,
)

# openAI, openInference-v1 or openInference-v2; the seed fixes no enum and selection ignores it.
InferenceServiceProtocol = str


class TensorParallelismConfig(ApiModel):
    """TensorParallelismConfig sets the tensor, pipeline and data parallelism sizes."""

    tensor_parallel_size: int | None = Field(default=None, ge=0)
    """Tensor parallelism size."""
    pipeline_parallel_size: int | None = Field(default=None, ge=0)
    """Pipeline parallelism size."""
    data_parallel_size: int | None = Field(default=None, ge=0)
    """Data parallelism size."""


class AcceleratorModelConfig(ApiModel):
    """AcceleratorModelConfig overrides, for one accelerator class, how a runtime serves a model
    format."""

    min_memory_per_billion_params: int | None = Field(default=None, ge=0)
    """Memory needed per billion parameters (informational: not read by the controller)."""
    tensor_parallelism_override: TensorParallelismConfig | None = None
    """Parallelism sizes to use instead of the defaults on this accelerator."""
    runtime_args_override: list[str] | None = None
    """Runtime arguments specific to this accelerator."""
    environment_override: dict[str, str] | None = None
    """Environment variables specific to this accelerator."""


class SupportedModelFormat(ApiModel):
    """SupportedModelFormat is one kind of model a runtime can serve, matched against a model's spec
    when no runtime is named."""

    name: str | None = None
    """Format name matched against the model's format during selection; prefer modelFormat.name in new
    runtimes."""
    model_format: ModelFormat
    """Format (and version range) of the models served, such as "SafeTensors", "PyTorch" or "ONNX"."""
    model_type: str | None = None
    """Deprecated: selection does not consult it."""
    version: str | None = None
    """Format version, not read by selection (set modelFormat.version to match on a version)."""
    model_framework: ModelFrameworkSpec
    """Framework (and version range) of the models served, such as "Transformers" or "PyTorch"."""
    model_architecture: str | None = None
    """Architecture served, such as "LlamaForCausalLM" or "MixtralForCausalLM"."""
    quantization: ModelQuantization | None = None
    """Quantization served, such as "fp8", "fbgemm_fp8" or "int4"."""
    diffusion_pipeline: DiffusionPipelineSpec | None = None
    """Diffusion pipeline served, for diffusion models."""
    model_cache_providers: list[ModelCacheProvider] | None = None
    """External caches a Sharded model can be loaded from (Sharded is in development: no effect yet)."""
    auto_select: bool | None = None
    """True lets selection pick this runtime for a model of this format when the InferenceService names
    no runtime."""
    priority: int | None = Field(default=None, ge=1)
    """Rank among auto-selectable runtimes supporting the same format, higher first; ignored unless
    autoSelect is true, and overridden by naming a runtime on the InferenceService."""
    accelerator_config: dict[str, AcceleratorModelConfig] | None = None
    """Per-accelerator-class overrides for this format."""


class ModelSizeRangeSpec(ApiModel):
    """ModelSizeRangeSpec bounds the parameter counts a runtime serves. Each bound is a number with an
    optional M, B or T suffix ("1B", "70B", "1T"); anything else counts as 0."""

    min: str | None = None
    """Smallest parameter count served."""
    max: str | None = None
    """Largest parameter count served."""


class AcceleratorRequirements(ApiModel):
    """AcceleratorRequirements states what accelerators a runtime needs."""

    accelerator_classes: list[str] | None = None
    """AcceleratorClasses the runtime supports."""
    min_memory: int | None = Field(default=None, ge=0)
    """Least accelerator memory needed, in GB."""
    min_compute_performance_tflops: int | None = Field(default=None, ge=0, alias="minComputePerformanceTFLOPS")
    """Least compute performance needed, in TFLOPS."""
    min_architecture_version: str | None = None
    """Least compute capability (NVIDIA) or equivalent."""
    required_features: list[str] | None = None
    """Hardware features that must be present, such as "tensor-cores", "fp8" or "nvlink"."""
    preferred_precisions: list[str] | None = None
    """Numeric precisions in order of preference, such as "fp8", "fp16", "fp32"."""


class ServingRuntimePodSpec(ApiModel):
    """ServingRuntimePodSpec is the runtime-wide pod template; its fields appear directly in the spec.
    Core Kubernetes types stay opaque: the apiserver checks them when pods are created."""

    containers: KubeObjectList | None = None
    """Containers of the pod."""
    volumes: KubeObjectList | None = None
    """Volumes the containers can mount."""
    node_selector: dict[str, str] | None = None
    """Labels a node must carry for the pod to be scheduled on it."""
    affinity: KubeObject | None = None
    """The pod's scheduling constraints."""
    tolerations: KubeObjectList | None = None
    """The pod's tolerations."""
    labels: dict[str, str] | None = None
    """Labels added to the pod."""
    annotations: dict[str, str] | None = None
    """Annotations added to the pod."""
    image_pull_secrets: KubeObjectList | None = None
    """Secrets in the same namespace used to pull the pod's images."""
    scheduler_name: str | None = None
    """Scheduler that places the pod; the default scheduler when unset."""
    host_ipc: bool | None = Field(default=None, alias="hostIPC")
    """Use the host's ipc namespace (false when unset)."""
    dns_policy: str | None = None
    """DNS policy: ClusterFirst (when unset), ClusterFirstWithHostNet, Default or None; with hostNetwork
    it must be ClusterFirstWithHostNet to keep cluster DNS."""
    host_network: bool | None = None
    """Use the host's network namespace (false when unset); the ports used must then be declared."""


class ServingRuntimeSpec(ServingRuntimePodSpec):
    """ServingRuntimeSpec says which models a runtime serves and how to render its engine, decoder and
    router pods."""

    supported_model_formats: list[SupportedModelFormat] | None = None
    """Model formats (with versions, frameworks, architectures) the runtime serves."""
    model_size_range: ModelSizeRangeSpec | None = None
    """Range of model sizes the runtime serves."""
    disabled: bool | None = None
    """True takes the runtime out of use."""
    router_config: RouterSpec | None = None
    """How to render the router component."""
    engine_config: EngineSpec | None = None
    """How to render the engine component."""
    decoder_config: DecoderSpec | None = None
    """How to render the decoder component (prefill-decode disaggregation)."""
    protocol_versions: list[InferenceServiceProtocol] | None = None
    """Inference protocols served: openAI, openInference-v1 or openInference-v2. Selection ignores it."""
    scaling_policy: ScalingPolicy | None = None
    """Default coordination of the components of InferenceServices using this runtime; an
    InferenceService's own scalingPolicy replaces it whole. Alpha."""
    accelerator_requirements: AcceleratorRequirements | None = None
    """Accelerators the runtime needs."""


class ServingRuntimeStatus(ApiModel):
    """ServingRuntimeStatus is the observed state of a runtime: how its ome.io/inherit-from chain
    resolved."""

    inheritance_chain: list[str] | None = None
    """Runtime names walked resolving ome.io/inherit-from, root first; just [self] without inheritance.
    For operators: consumers walk the chain again when they use it."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """The controller's view of inheritance resolution; only InheritanceReady (True/False) for now."""


def _runtime_columns() -> list[PrinterColumn]:
    """Upstream OME's columns for both runtime kinds, plus whether the inheritance chain resolved
    (wide output only)."""
    return [
        PrinterColumn(name="Disabled", type="boolean", json_path=".spec.disabled"),
        PrinterColumn(name="ModelFormat", type="string", json_path=".spec.supportedModelFormats[*].modelFormat.name"),
        PrinterColumn(
            name="ModelFramework", type="string", json_path=".spec.supportedModelFormats[*].modelFramework.name"
        ),
        PrinterColumn(
            name="ModelFrameworkVersion",
            type="string",
            json_path=".spec.supportedModelFormats[*].modelFramework.version",
        ),
        PrinterColumn(
            name="ModelArchitecture", type="string", json_path=".spec.supportedModelFormats[*].modelArchitecture"
        ),
        PrinterColumn(name="ModelSizeMin", type="string", json_path=".spec.modelSizeRange.min"),
        PrinterColumn(name="ModelSizeMax", type="string", json_path=".spec.modelSizeRange.max"),
        PrinterColumn(name="Images", type="string", json_path=".spec.containers[*].image"),
        PrinterColumn(
            name="InheritanceReady",
            type="string",
            json_path='.status.conditions[?(@.type=="InheritanceReady")].status',
            priority=1,
        ),
        PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
    ]


class ServingRuntime(KubeResource):
    """ServingRuntime defines, within one namespace, the pods that serve a model and the model formats
    and sizes it supports, so a runtime can be selected automatically."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="ServingRuntime",
        plural="servingruntimes",
        scope="Namespaced",
        categories=["ome"],
        printer_columns=_runtime_columns(),
    )

    spec: ServingRuntimeSpec | None = None
    """The desired state of the ServingRuntime."""
    status: ServingRuntimeStatus | None = None
    """The observed state of the ServingRuntime."""


class ClusterServingRuntime(KubeResource):
    """ClusterServingRuntime is a ServingRuntime for the whole cluster: the same spec, cluster-scoped."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="ClusterServingRuntime",
        plural="clusterservingruntimes",
        scope="Cluster",
        categories=["ome"],
        printer_columns=_runtime_columns(),
    )

    spec: ServingRuntimeSpec | None = None
    """The desired state of the ClusterServingRuntime."""
    status: ServingRuntimeStatus | None = None
    """The observed state of the ClusterServingRuntime."""
