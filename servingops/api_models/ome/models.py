"""The model kinds: BaseModel (namespaced), ClusterBaseModel and FineTunedWeight (cluster-scoped), the
spec describing what a model is and where its weights come from, and the status its node copies report.

ModelFormat, ModelFrameworkSpec and DiffusionPipelineSpec live here too: a ServingRuntime declares the
same shapes to say which models it can serve, and runtime selection compares the two.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, Field

from servingops.api_models.base import (
    ApiModel,
    Condition,
    CrdInfo,
    KubeObject,
    KubeResource,
    PrinterColumn,
    RawJson,
    Time,
    cel,
    condition_list_schema,
    validations,
)
from servingops.api_models.ome.constants import GROUP, VERSION
from servingops.api_models.ome.enums import Distribution, DownloadPolicy, LifeCycleState

# The seed names these string types but fixes no values: upstream runtimes already use operators
# beyond the two documented ones (GreaterThanOrEqual), so an enum here would refuse real manifests.
RuntimeSelectorOperator = str
ModelQuantization = str
ModelCacheProvider = str


class ModelFormat(ApiModel):
    """ModelFormat names how a model's weights are stored, and, on a runtime, which versions of that
    format it accepts."""

    name: str
    """Format the weights are stored in, such as "SafeTensors", "PyTorch", "ONNX" or "TensorFlow
    SavedModel"."""
    version: str | None = None
    """Version of the format ("major", "major.minor" or "major.minor.patch"); runtime selection
    checks it against what a runtime supports."""
    operator: RuntimeSelectorOperator = "Equal"
    """How runtime selection compares the version: "Equal" or "GreaterThan"."""
    weight: int = 1
    """How much a match on this format counts when runtime selection ranks candidates."""


class ModelFrameworkSpec(ApiModel):
    """ModelFrameworkSpec names the library a model is written for, and, on a runtime, which versions
    of it the runtime accepts."""

    name: str
    """Library the model is written for, such as "Transformer", "PyTorch", "ONNXRuntime", "TensorFlow"
    or "TensorRTLLM"."""
    version: str | None = None
    """Version of the library ("major", "major.minor" or "major.minor.patch"); runtime selection
    checks it against what a runtime supports."""
    operator: RuntimeSelectorOperator = "Equal"
    """How runtime selection compares the version: "Equal" or "GreaterThan"."""
    weight: int = 1
    """How much a match on this framework counts when runtime selection ranks candidates."""


class DiffusionComponentSpec(ApiModel):
    """DiffusionComponentSpec is one part of a diffusion pipeline, as an entry of a diffusers
    model_index.json names it."""

    library: str | None = None
    """Library implementing the part, such as "diffusers" or "transformers"."""
    type: str | None = None
    """Fully qualified class of the part, such as "FlowMatchEulerDiscreteScheduler"."""


class DiffusionPipelineSpec(ApiModel):
    """DiffusionPipelineSpec describes a diffusers pipeline, mirroring the model's model_index.json, so
    a runtime's compatibility with it can be checked."""

    class_name: str | None = None
    """Pipeline class, such as "StableDiffusionXLPipeline" or "QwenImagePipeline"."""
    scheduler: DiffusionComponentSpec | None = None
    """Scheduler the pipeline uses."""
    text_encoder: DiffusionComponentSpec | None = None
    """Text encoder the pipeline uses."""
    tokenizer: DiffusionComponentSpec | None = None
    """Tokenizer the pipeline uses."""
    transformer: DiffusionComponentSpec | None = None
    """Denoising network (UNet or DiT) the pipeline uses."""
    vae: DiffusionComponentSpec | None = None
    """VAE the pipeline uses."""
    additional_components: dict[str, DiffusionComponentSpec] | None = None
    """Any other parts of the pipeline, keyed by their model_index.json entry."""


class StorageSpec(ApiModel):
    """StorageSpec says where a model's weights come from and where, on which nodes, they are kept."""

    path: str | None = None
    """Absolute directory on the node the weights are downloaded to and kept in."""
    schema_path: str | None = None
    """Path, inside the storage, of a schema or configuration file used to check the model or tune how
    it is loaded."""
    parameters: dict[str, str] | None = None
    """Key-value settings overriding the default storage credentials or configuration (object storage
    access, mount options; secretKey names the token's key in the Secret `key` names)."""
    key: str | None = None
    """Name of a Secret holding a Hugging Face token, read only for hf:// models: from the model's
    namespace, or from the operator's namespace for a ClusterBaseModel. The token is the Secret's
    `token` key, or the key parameters.secretKey names."""
    storage_uri: str
    """Where the weights are: oci://n/{namespace}/b/{bucket}/o/{object_path}, modelpack://{registry}/
    {repository}[:{tag}], pvc://{pvc-name}/{sub-path}, vendor://{vendor-name}/{resource-type}/
    {resource-path}, hf://{org}/{repo}[@{revision}], s3://{bucket}/{object_path},
    az://{account}/{container}/{object_path}, gs://{bucket}/{object_path}, github://{org}/{repo}[@{tag}]
    or local://{path}."""
    node_selector: dict[str, str] | None = None
    """Labels a node must carry to receive and keep a copy of the weights."""
    node_affinity: KubeObject | None = None
    """Node affinity (core NodeAffinity) narrowing further which nodes receive and keep a copy."""
    download_policy: DownloadPolicy | None = None
    """Whether a node keeps its own copy (AlwaysDownload, the default when unset) or reuses Hugging Face
    files another model already downloaded to it (ReuseIfExists)."""


class ModelExtensionSpec(ApiModel):
    """ModelExtensionSpec holds the descriptive fields every model kind shares; they appear directly in
    the spec."""

    display_name: str | None = None
    """Human-friendly name of the model."""
    version: str | None = None
    """Version of the model."""
    disabled: bool | None = None
    """True takes the model out of use."""
    vendor: str | None = None
    """Who publishes the model, such as "Meta", "NVIDIA" or "HuggingFace"."""
    compartment_id: str | None = Field(default=None, alias="compartmentID")
    """Compartment the model belongs to."""


class BaseModelSpec(ModelExtensionSpec):
    """BaseModelSpec describes a model: its format, framework, architecture and size (what runtime
    selection matches on), its capabilities, and the storage its weights come from."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.distribution) || self.distribution != 'Sharded' || "
                "!self.storage.storageUri.startsWith('pvc://')",
                "pvc:// models can't use Sharded distribution",
                field_path=".distribution",
            ),
        )
    )

    model_format: ModelFormat | None = None
    """Format the weights are stored in."""
    model_type: str | None = None
    """Architecture family, such as "llama", "bert" or "gpt2": usually config.json's model_type. Informs
    runtime selection and tokenizer behaviour."""
    model_framework: ModelFrameworkSpec | None = None
    """Framework the model is written for, such as "Transformer", "PyTorch", "ONNX", "TensorFlow" or
    "TensorRTLLM"; helps pick the runtime that serves it."""
    model_architecture: str | None = None
    """Concrete implementation or head, such as "LlamaForCausalLM" or "MixtralForCausalLM": usually
    config.json's architectures."""
    quantization: ModelQuantization | None = None
    """Quantization of the weights, such as "fp8", "fbgemm_fp8", "int4", "nvfp4" or "mxfp4"; matters
    for which runtimes can serve the model."""
    model_parameter_size: str | None = None
    """Total parameter count in human form, such as "7B", "13B" or "175B"; used for scheduling and
    runtime selection."""
    model_capabilities: list[str] | None = None
    """What the model does, such as "TEXT_GENERATION", "TEXT_SUMMARIZATION" or "TEXT_EMBEDDINGS"."""
    api_capabilities: list[str] | None = None
    """API surfaces the model supports, such as "OPENAI_V1_CHAT_COMPLETIONS"."""
    model_configuration: RawJson | None = None
    """The model's configuration, kept as free-form JSON."""
    storage: StorageSpec
    """Where the weights come from and which nodes keep them."""
    distribution: Distribution | None = None
    """How the weights are laid out: PerNode (the default when unset) puts a full copy on each selected
    node; Sharded loads through an external cache holding chunks across the cluster, which is still in
    development and cannot be served. A pvc:// model cannot be Sharded."""
    serving_mode: list[str] | None = None
    """How the model is offered, such as ["On-demand", "Dedicated"]."""
    max_tokens: int | None = None
    """Largest number of tokens the model can process."""
    diffusion_pipeline: DiffusionPipelineSpec | None = None
    """For diffusion models: the pipeline, from model_index.json."""
    additional_metadata: dict[str, str] | None = None
    """Any further metadata about the model."""


class ObjectReference(ApiModel):
    """ObjectReference names an object by name and, optionally, namespace."""

    name: str
    """Name of the object."""
    namespace: str | None = None
    """Namespace of the object."""


class FineTunedWeightSpec(ModelExtensionSpec):
    """FineTunedWeightSpec describes weights trained from a base model (an adapter such as LoRA, a
    distillation) and where they are stored."""

    base_model_ref: ObjectReference
    """The base model these weights were trained from."""
    model_type: str
    """Kind of fine-tuning, such as "Adapter", "Distillation" or "Tfew"."""
    hyper_parameters: RawJson
    """Hyper-parameters of the training, kept as free-form JSON."""
    configuration: RawJson | None = None
    """Configuration of the weights, kept as free-form JSON."""
    storage: StorageSpec
    """Where the weights come from and which nodes keep them."""
    training_job_ref: ObjectReference | None = None
    """The training job that produced the weights."""


class ModelCacheStatus(ApiModel):
    """ModelCacheStatus names the external cache holding a Sharded model (in development: not set
    yet)."""

    backend: str | None = None
    """The cache provider configured."""
    source_uri: str | None = None
    """The model source URI the cache holds."""


class ModelStatusSpec(ApiModel):
    """ModelStatusSpec is the observed state of a model's weights: its overall state and which nodes
    hold a ready copy."""

    lifecycle: str | None = None
    """Lifecycle stage, such as Deprecated, Experiment, Public or Internal; free text, never set by the
    controller."""
    state: LifeCycleState | None = None
    """Where the weights are: Creating, Importing, In_Transit, In_Training, Ready or Failed."""
    observed_generation: int | None = None
    """The metadata.generation last reconciled; behind metadata.generation means a spec edit is not
    seen yet."""
    last_reconcile_time: Time | None = None
    """When the controller last reconciled this object, a liveness signal: unlike a condition's
    lastTransitionTime it moves on every pass."""
    nodes_ready: list[str] | None = None
    """Nodes holding a complete, verified copy."""
    nodes_failed: list[str] | None = None
    """Nodes whose copy failed."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Cluster-wide readiness, set only for pvc:// models (SourceReachable, Ready); other models report
    per node through nodesReady and nodesFailed."""
    cache: ModelCacheStatus | None = None
    """The external cache behind a Sharded model (in development: not set yet)."""


def _model_columns() -> list[PrinterColumn]:
    """Upstream OME's columns for BaseModel and ClusterBaseModel, plus the nodes holding a ready copy
    (wide output only: it lists node names)."""
    return [
        PrinterColumn(name="Disabled", type="boolean", json_path=".spec.disabled"),
        PrinterColumn(name="Version", type="string", json_path=".spec.version"),
        PrinterColumn(name="Vendor", type="string", json_path=".spec.vendor"),
        PrinterColumn(name="Framework", type="string", json_path=".spec.modelFramework.name"),
        PrinterColumn(name="FrameworkVersion", type="string", json_path=".spec.modelFramework.version"),
        PrinterColumn(name="ModelFormat", type="string", json_path=".spec.modelFormat.name"),
        PrinterColumn(name="Architecture", type="string", json_path=".spec.modelArchitecture"),
        PrinterColumn(name="Capabilities", type="string", json_path=".spec.modelCapabilities[*]"),
        PrinterColumn(name="Size", type="string", json_path=".spec.modelParameterSize"),
        PrinterColumn(name="CompartmentID", type="string", json_path=".spec.compartmentID"),
        PrinterColumn(name="Ready", type="string", json_path=".status.state"),
        PrinterColumn(name="NodesReady", type="string", json_path=".status.nodesReady", priority=1),
        PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
    ]


class BaseModel(KubeResource):
    """BaseModel describes a model within one namespace: what it is (architecture, size,
    capabilities), where its weights come from, and which nodes keep a copy."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="BaseModel",
        plural="basemodels",
        scope="Namespaced",
        categories=["ome"],
        printer_columns=_model_columns(),
    )

    spec: BaseModelSpec | None = None
    """The desired state of the BaseModel."""
    status: ModelStatusSpec | None = None
    """The observed state of the BaseModel."""


class ClusterBaseModel(KubeResource):
    """ClusterBaseModel is a BaseModel for the whole cluster: the same spec, cluster-scoped."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="ClusterBaseModel",
        plural="clusterbasemodels",
        scope="Cluster",
        categories=["ome"],
        printer_columns=_model_columns(),
    )

    spec: BaseModelSpec | None = None
    """The desired state of the ClusterBaseModel."""
    status: ModelStatusSpec | None = None
    """The observed state of the ClusterBaseModel."""


class FineTunedWeight(KubeResource):
    """FineTunedWeight describes cluster-scoped weights trained from a base model, such as a LoRA
    adapter, that an InferenceService serves on top of that model."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="FineTunedWeight",
        plural="finetunedweights",
        scope="Cluster",
        categories=["ome"],
        printer_columns=[
            PrinterColumn(name="Disabled", type="boolean", json_path=".spec.disabled"),
            PrinterColumn(name="Version", type="string", json_path=".spec.version"),
            PrinterColumn(name="Vendor", type="string", json_path=".spec.vendor"),
            PrinterColumn(name="CompartmentID", type="string", json_path=".spec.compartmentID"),
            PrinterColumn(name="ModelType", type="string", json_path=".spec.modelType"),
            PrinterColumn(name="Ready", type="string", json_path=".status.state"),
            PrinterColumn(name="NodesReady", type="string", json_path=".status.nodesReady", priority=1),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )

    spec: FineTunedWeightSpec | None = None
    """The desired state of the FineTunedWeight."""
    status: ModelStatusSpec | None = None
    """The observed state of the FineTunedWeight."""
