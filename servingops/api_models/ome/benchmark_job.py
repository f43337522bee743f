"""The BenchmarkJob kind (seed 004): genai-bench run against an InferenceService or a URL, its results kept
at `spec.outputLocation`. Its status is written by BenchmarkJobWorkflow (workflows/benchmark_job.py), one
run per generation of the spec (docs/benchmarks.md).

Admission rules (CEL, checked by the apiserver): exactly one of `endpoint.inferenceService` and
`endpoint.endpoint` (upstream OME's webhook rule); every traffic scenario has the shape genai-bench accepts
for the task (upstream's webhook patterns, anchored as a whole); `additionalRequestParams.ignore_eos` is
"true" or "false"; a task whose input is not text names a dataset (the seed: "only required for tasks other
than text-to-<output-modality>"). Beyond upstream: both per-iteration bounds and every concurrency are at
least 1 (genai-bench cannot run an iteration of zero requests, minutes or users).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, Field

from servingops.api_models.base import (
    ApiModel,
    CrdInfo,
    KubeObject,
    KubeObjectList,
    KubeResource,
    PrinterColumn,
    Time,
    cel,
    validations,
)
from servingops.api_models.ome.constants import GROUP, VERSION
from servingops.api_models.ome.enums import (
    BenchmarkApiFormat,
    BenchmarkGpuType,
    BenchmarkJobState,
    BenchmarkServerEngine,
    BenchmarkTask,
)
from servingops.api_models.ome.models import StorageSpec

SCENARIO_PATTERNS: dict[BenchmarkTask, str] = {
    BenchmarkTask.TEXT_TO_TEXT: r"^(N\(\d+,\d+\)/\(\d+,\d+\)|U\(\d+,\d+\)(/\(\d+,\d+\))?|D\(\d+,\d+\))$",
    BenchmarkTask.TEXT_TO_EMBEDDINGS: r"^E\(\d+(,\d+)?\)$",
    BenchmarkTask.IMAGE_TO_TEXT: r"^I\(\d+,\d+(,\d+)?\)$",
    BenchmarkTask.IMAGE_TO_EMBEDDINGS: r"^I\(\d+,\d+(,\d+)?\)$",
}
"""The traffic-scenario shapes genai-bench accepts per task (N normal, U uniform, D deterministic token
counts; E embedding tokens; I image size)."""

MAX_SCENARIOS = 64
MAX_SCENARIO_LENGTH = 64
"""Bounds that keep the scenario rule's CEL cost within the apiserver's budget (beyond upstream, which has
no such rule in its schema)."""

ENDPOINT_RULE = "exactly one of endpoint.inferenceService and endpoint.endpoint must be set"
SCENARIO_RULE = "every trafficScenarios entry must have the shape genai-bench accepts for the task"
IGNORE_EOS_RULE = "additionalRequestParams.ignore_eos must be 'true' or 'false'"
DATASET_RULE = "a task whose input is not text (image-to-*) needs spec.dataset"


def _scenario_rule() -> str:
    parts = [f"(self.task == '{task.value}' && self.trafficScenarios.all(s, s.matches(r'{pattern}')))"
             for task, pattern in SCENARIO_PATTERNS.items()]
    return "!has(self.trafficScenarios) || " + " || ".join(parts)


class HuggingFaceSecretReference(ApiModel):
    """A Secret in the BenchmarkJob's namespace holding the Hugging Face token (key HUGGINGFACE_API_KEY)."""

    name: str = Field(min_length=1)
    """Name of the secret containing the Hugging Face API key. The secret must reside in the same namespace as
    the BenchmarkJob."""


class InferenceServiceReference(ApiModel):
    name: str = Field(min_length=1)
    """Name specifies the name of the inference service to benchmark."""
    namespace: str = Field(min_length=1)
    """Namespace where the inference service is deployed (cross-namespace references need the worker's RBAC
    there)."""


class Endpoint(ApiModel):
    """A direct URL-based inference service with its API configuration."""

    url: str = Field(pattern=r"^(http|https)://")
    """URL of the inference service."""
    api_format: BenchmarkApiFormat
    """The type of API: openai, oci-cohere or cohere."""
    model_name: str | None = None
    """Name of the model served at the endpoint (the openai API needs it in the payload)."""


class EndpointSpec(ApiModel):
    """Either an InferenceService (its URL through the gateway, the model it serves) or a direct URL."""

    model_config = ConfigDict(json_schema_extra=validations(
        cel("has(self.inferenceService) != has(self.endpoint)", ENDPOINT_RULE)))

    inference_service: InferenceServiceReference | None = None
    """A Kubernetes reference to an internal inference service."""
    endpoint: Endpoint | None = None
    """A direct endpoint for an external inference service."""


class ServiceMetadata(ApiModel):
    """The benchmarked server's configuration, recorded with the results for filtering experiments."""

    engine: BenchmarkServerEngine
    """The backend model server engine: vLLM, SGLang or TGI."""
    version: str
    """The version of the model server (e.g. "0.5.3")."""
    gpu_type: BenchmarkGpuType
    """The GPU used by the model server: H100, A100, MI300 or A10."""
    gpu_count: int
    """The number of GPU cards available on the model server."""


class PodOverride(ApiModel):
    """Merged into the benchmark pod built by default: unset fields keep their defaults."""

    image: str | None = None
    """The container image to use for the benchmark job."""
    env: KubeObjectList | None = None
    """Environment variables (core EnvVar) of the container; an entry replaces the default of its name."""
    env_from: KubeObjectList | None = None
    """Sources of environment variables (core EnvFromSource)."""
    volume_mounts: KubeObjectList | None = None
    """Volume mounts (core VolumeMount); an entry replaces the default at its mountPath."""
    resources: KubeObject | None = None
    """Compute resources (core ResourceRequirements) of the container."""
    tolerations: KubeObjectList | None = None
    """The pod's tolerations (core Toleration)."""
    node_selector: dict[str, str] | None = None
    """Labels a node must carry for the pod."""
    affinity: KubeObject | None = None
    """The pod's scheduling constraints (core Affinity)."""
    volumes: KubeObjectList | None = None
    """Volumes of the pod (core Volume); an entry replaces the default of its name."""


class BenchmarkJobSpec(ApiModel):
    model_config = ConfigDict(json_schema_extra=validations(
        cel(_scenario_rule(), SCENARIO_RULE, field_path=".trafficScenarios"),
        cel("!has(self.additionalRequestParams) || !('ignore_eos' in self.additionalRequestParams) || "
            "self.additionalRequestParams['ignore_eos'] in ['true', 'false']", IGNORE_EOS_RULE,
            field_path=".additionalRequestParams"),
        cel("self.task.startsWith('text-to-') || has(self.dataset)", DATASET_RULE),
    ))

    hugging_face_secret_reference: HuggingFaceSecretReference | None = None
    """A Secret in the same namespace holding the Hugging Face API key (the tokenizer download's token)."""
    endpoint: EndpointSpec
    """The inference service to benchmark."""
    service_metadata: ServiceMetadata | None = None
    """Metadata about the benchmarked server (engine, version, GPUs), recorded with the results."""
    task: BenchmarkTask
    """The task to benchmark: text-to-text, image-to-text, text-to-embeddings or image-to-embeddings."""
    traffic_scenarios: list[str] | None = Field(default=None, max_length=MAX_SCENARIOS, json_schema_extra={
        "items": {"type": "string", "maxLength": MAX_SCENARIO_LENGTH}})
    """Traffic scenarios to simulate; genai-bench's defaults when unset."""
    num_concurrency: list[int] | None = Field(default=None, json_schema_extra={"items": {"type": "integer",
                                                                                         "minimum": 1}})
    """Concurrency levels to test; genai-bench's defaults when unset."""
    max_time_per_iteration: int = Field(ge=1)
    """The maximum time (in minutes) of one iteration (one scenario at one concurrency)."""
    max_requests_per_iteration: int = Field(ge=1)
    """The maximum number of requests of one iteration."""
    additional_request_params: dict[str, str] | None = None
    """Additional request parameters (sent in every request's payload)."""
    dataset: StorageSpec | None = None
    """The dataset used for benchmarking; required for tasks other than text-to-<output-modality>."""
    output_location: StorageSpec
    """Where the benchmark results are stored."""
    result_folder_name: str | None = None
    """The name of the folder holding the results; a default name is assigned when unset."""
    pod_override: PodOverride | None = None
    """Customizes the benchmark pod, merged into the pod built by default."""


class BenchmarkJobStatus(ApiModel):
    state: BenchmarkJobState | None = None
    """The current state of the benchmark job: Pending, Running, Completed or Failed."""
    start_time: Time | None = None
    """When the benchmark job started (its Job's pod began running the benchmark)."""
    completion_time: Time | None = None
    """When the benchmark job completed, either successfully or unsuccessfully."""
    last_reconcile_time: Time | None = None
    """The last time the job was reconciled by the controller."""
    failure_message: str | None = None
    """The error message if the benchmark job failed."""
    details: str | None = None
    """Additional information about the benchmark job: the run it describes and, once Completed, a summary of
    the results (JSON, docs/benchmarks.md)."""


class BenchmarkJob(KubeResource):
    """BenchmarkJob runs genai-bench against an InferenceService or a URL and stores the results in the output
    location you choose."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="BenchmarkJob",
        plural="benchmarkjobs",
        scope="Namespaced",
        short_names=["bj"],
        categories=["ome"],
        printer_columns=[
            PrinterColumn(name="State", type="string", json_path=".status.state"),
            PrinterColumn(name="Service", type="string", json_path=".spec.endpoint.inferenceService.name",
                          description="the InferenceService benchmarked (empty for a URL endpoint)"),
            PrinterColumn(name="URL", type="string", json_path=".spec.endpoint.endpoint.url",
                          description="the URL benchmarked (empty for an InferenceService endpoint)"),
            PrinterColumn(name="Started", type="date", json_path=".status.startTime"),
            PrinterColumn(name="Completed", type="date", json_path=".status.completionTime"),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )

    spec: BenchmarkJobSpec | None = None
    """The desired state of the `BenchmarkJob`."""
    status: BenchmarkJobStatus | None = None
    """The observed state of the `BenchmarkJob`."""


__all__ = [
    "DATASET_RULE",
    "ENDPOINT_RULE",
    "IGNORE_EOS_RULE",
    "SCENARIO_PATTERNS",
    "SCENARIO_RULE",
    "BenchmarkJob",
    "BenchmarkJobSpec",
    "BenchmarkJobStatus",
    "Endpoint",
    "EndpointSpec",
    "HuggingFaceSecretReference",
    "InferenceServiceReference",
    "PodOverride",
    "ServiceMetadata",
]
