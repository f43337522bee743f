"""benchmark.observe, benchmark.start, benchmark.job_state, benchmark.stop and benchmark.write_status: one
BenchmarkJob's run, as the workflow (workflows/benchmark_job.py) asks for it.

start reads the BenchmarkJob (by uid) at the generation the workflow names, resolves spec.endpoint (an
InferenceService: Ready, its status.url through the gateway, the model it serves named by spec.model.name and
its tokenizer from that model's source; or the direct URL, apiFormat and modelName), reads the operator
ConfigMap's benchmark block, renders the Job (rendering/benchmark_job.py) and creates it unless a Job of that
name exists: the name is per generation, so a retried or restarted start never makes a second Job. A Job of
that name owned by another BenchmarkJob uid is a refusal (INVALID), never adopted.

Retries: apiserver failures raise and are retried (KUBE policy); what the spec or the cluster says (no such
InferenceService, a scheme with no writer) is an answer, not an error.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from kubernetes import client
from pydantic import ValidationError
from temporalio import activity

from servingops.activities.benchmark.types import (
    BenchJobInput,
    BenchJobOutput,
    BenchObserveInput,
    BenchObserveOutput,
    BenchStartInput,
    BenchStartOutput,
    BenchStopOutput,
    BenchSummarizeInput,
    BenchSummarizeOutput,
    BenchWriteInput,
    BenchWriteOutput,
    JobPhase,
    StartOutcome,
)
from servingops.api_models.ome.benchmark_job import BenchmarkJobSpec, BenchmarkJobStatus
from servingops.api_models.ome.enums import BenchmarkJobState
from servingops.api_models.operator_config import (
    DEFAULT_CONFIGMAP,
    BenchmarkDefaults,
    OperatorConfigError,
    parse_configmap_data,
)
from servingops.clients.kube.calls import MERGE_PATCH, call, create_unless_exists, delete_if_present, get_or_none
from servingops.clients.kube.custom_objects import CustomObjects, update_optimistically
from servingops.clients.kube.events import record_event
from servingops.clients.oci.registry_client import ModelRegistry, RegistryError
from servingops.rendering.benchmark_events import transition_event
from servingops.rendering.benchmark_failure import ContainerExit, failure_message
from servingops.rendering.benchmark_job import (
    LAYER_MEDIA_TYPE,
    SUMMARIZER,
    BenchmarkRenderError,
    ResolvedEndpoint,
    job_name,
    render_job,
    tokenizer_from_source,
)
from servingops.rendering.benchmark_results import IterationSummary, ResultsError, summarize_archive
from servingops.rendering.benchmark_summary_step import read_summary_message
from servingops.rendering.model_claim import ModelClaim, claim_namespace, claim_refusal

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "benchmarkjobs"
MAX_RESULTS = 256 * 1024 * 1024
"""The largest results layer summarize reads (genai-bench's folder with its plots: a few MB per iteration)."""
STATUS_FIELDS = ("state", "startTime", "completionTime", "lastReconcileTime", "failureMessage", "details")


def _problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"spec.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


def _state(value: Any) -> BenchmarkJobState | None:
    try:
        return BenchmarkJobState(value) if value else None
    except ValueError:
        return None


def _time(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


def _terminations(pods: list[client.V1Pod]) -> list[tuple[str, client.V1ContainerStateTerminated]]:
    """Every ended container of the pods (init containers first), by name."""
    out = []
    for pod in pods:
        statuses = [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])] \
            if pod.status else []
        out += [(cs.name, cs.state.terminated) for cs in statuses if cs.state and cs.state.terminated]
    return out


def _summary(job: client.V1Job, pods: list[client.V1Pod]) -> tuple[list[IterationSummary] | None, str]:
    """A completed Job's summary from its pod's summarize container: (None, "") when its pod has no such step."""
    template = ((job.spec.template.spec if job.spec and job.spec.template else None) or client.V1PodSpec(
        containers=[]))
    if not any(c.name == SUMMARIZER for c in template.containers or []):
        return None, ""
    ended = [term for pod in pods if pod.status and pod.status.phase == "Succeeded"
             for name, term in _terminations([pod]) if name == SUMMARIZER]
    if not ended:
        return None, "the Job's pod is gone or did not report its summarize step"
    reading = read_summary_message(ended[0].message)
    return reading.summary, reading.problem


def job_phase(job: client.V1Job, pods: list[client.V1Pod]) -> BenchJobOutput:
    """A Job's phase and, when it failed, why (its Failed condition and its pod's termination:
    rendering/benchmark_failure.py); when it completed with a summarize step, the summary its pod reported."""
    status = job.status or client.V1JobStatus()
    for cond in status.conditions or []:
        if cond.type == "Failed" and cond.status == "True":
            name = str((job.metadata or client.V1ObjectMeta()).name)
            exits = [ContainerExit(cname, int(term.exit_code or 0), term.reason or "", term.message or "")
                     for cname, term in _terminations(pods)]
            return BenchJobOutput(phase=JobPhase.FAILED, start_time=_time(status.start_time),
                                  completion_time=_time(cond.last_transition_time),
                                  message=failure_message(name, cond.reason or "", cond.message or "", exits))
    for cond in status.conditions or []:
        if cond.type == "Complete" and cond.status == "True":
            summary, problem = _summary(job, pods)
            return BenchJobOutput(phase=JobPhase.SUCCEEDED, start_time=_time(status.start_time),
                                  completion_time=_time(status.completion_time or cond.last_transition_time),
                                  summary=summary, summary_problem=problem)
    # A pod whose init container runs is Pending (PodInitializing) to Kubernetes, but for an oci:// output that
    # init container is genai-bench itself: the benchmark runs.
    running = any(p.status and (p.status.phase == "Running" or any(
        cs.state is not None and cs.state.running is not None for cs in p.status.init_container_statuses or []))
        for p in pods) or bool(status.active and any(p.status and p.status.phase in ("Running", "Succeeded")
                                                     for p in pods))
    return BenchJobOutput(phase=JobPhase.RUNNING if running else JobPhase.PENDING,
                          start_time=_time(status.start_time) if running else None)


class BenchmarkActivities:
    """Bound to the worker's ApiClient and the operator ConfigMap (namespace, name)."""

    def __init__(self, api_client: client.ApiClient, config_namespace: str, config_name: str = DEFAULT_CONFIGMAP
                 ) -> None:
        self._api = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._objects = CustomObjects(self._custom)
        self._core = client.CoreV1Api(api_client)
        self._batch = client.BatchV1Api(api_client)
        self._config_namespace = config_namespace
        self._config_name = config_name

    @activity.defn(name="benchmark.observe")
    def observe(self, request: BenchObserveInput) -> BenchObserveOutput:
        obj = self._objects.get(request.job)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return BenchObserveOutput(present=False)
        try:
            status = BenchmarkJobStatus.model_validate(obj.get("status") or {}) if obj.get("status") else None
        except ValidationError:
            status = None
        return BenchObserveOutput(present=True, generation=int(obj["metadata"].get("generation", 0)), status=status)

    def _defaults(self) -> BenchmarkDefaults:
        configmap = get_or_none(self._core.read_namespaced_config_map, self._config_name, self._config_namespace)
        if configmap is None:
            return BenchmarkDefaults()
        return parse_configmap_data(configmap.data).benchmark

    def _resolve(self, spec: BenchmarkJobSpec, job_namespace: str) -> ResolvedEndpoint | BenchStartOutput:
        if spec.endpoint.endpoint is not None:
            direct = spec.endpoint.endpoint
            if not direct.model_name:
                return BenchStartOutput(outcome=StartOutcome.INVALID,
                                        message="endpoint.endpoint.modelName is needed: genai-bench sends it in every "
                                                "request and loads its tokenizer by it")
            return ResolvedEndpoint(api_base=direct.url, api_backend=direct.api_format.value,
                                    model_name=direct.model_name, tokenizer=direct.model_name)
        ref = spec.endpoint.inference_service
        assert ref is not None  # the CRD's rule: exactly one
        isvc = get_or_none(self._custom.get_namespaced_custom_object, "ome.io", "v1beta1", ref.namespace,
                           "inferenceservices", ref.name)
        if isvc is None:
            return BenchStartOutput(outcome=StartOutcome.WAITING,
                                    message=f"InferenceService {ref.namespace}/{ref.name} does not exist")
        isvc = cast(dict[str, Any], isvc)
        status = isvc.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        url = status.get("url")
        if not ready or not url:
            return BenchStartOutput(outcome=StartOutcome.WAITING,
                                    message=f"InferenceService {ref.namespace}/{ref.name} is not Ready with a URL")
        model = (isvc.get("spec") or {}).get("model") or {}
        model_name = str(model.get("name") or ref.name)
        found = self._model_source(model, ref.namespace)
        if found is None:
            return BenchStartOutput(outcome=StartOutcome.INVALID,
                                    message=f"the model {model_name} of InferenceService {ref.namespace}/{ref.name} "
                                            "was not found")
        source, claim_ns = found
        try:
            tokenizer, claim, claim_path = tokenizer_from_source(source)
        except BenchmarkRenderError as exc:
            return BenchStartOutput(outcome=StartOutcome.INVALID, message=str(exc))
        if claim is not None:
            # The benchmark pod mounts the model's claim to read its tokenizer: only a claim of the job's own
            # namespace mounts (elsewhere the pod would wait on FailedMount for ever, and the job read Pending).
            refusal = claim_refusal(f"the model {model_name} of InferenceService {ref.namespace}/{ref.name}",
                                    ModelClaim(claim=claim, sub_path=claim_path), claim_ns, job_namespace,
                                    consumer="this BenchmarkJob")
            if refusal is not None:
                return BenchStartOutput(outcome=StartOutcome.INVALID, message=refusal)
        return ResolvedEndpoint(api_base=str(url), api_backend="openai", model_name=model_name, tokenizer=tokenizer,
                                tokenizer_claim=claim, tokenizer_claim_path=claim_path)

    def _model_source(self, model: dict[str, Any], namespace: str) -> tuple[str, str | None] | None:
        """The served model's source URI and the namespace a claim it names is in (models.md: a namespaced model's
        own; a cluster-scoped one's storage.parameters.namespace, else the controller namespace); None when the
        model or its source is missing."""
        name, kind = str(model.get("name") or ""), str(model.get("kind") or "BaseModel")
        group = str(model.get("apiGroup") or "ome.io")
        if group == "ai.deckhouse.io":
            if kind == "ClusterModel":
                found = get_or_none(self._custom.get_cluster_custom_object, group, "v1alpha1", "clustermodels", name)
            else:
                found = get_or_none(self._custom.get_namespaced_custom_object, group, "v1alpha1", namespace,
                                    "models", name)
            url = None if found is None else ((found.get("spec") or {}).get("source") or {}).get("url")
            owner_ns = namespace if kind != "ClusterModel" else self._config_namespace
            return None if not url else (str(url), owner_ns)
        if kind == "ClusterBaseModel":
            found = get_or_none(self._custom.get_cluster_custom_object, "ome.io", "v1beta1", "clusterbasemodels", name)
        else:
            found = get_or_none(self._custom.get_namespaced_custom_object, "ome.io", "v1beta1", namespace,
                                "basemodels", name)
        storage = {} if found is None else ((found.get("spec") or {}).get("storage") or {})
        uri = storage.get("storageUri")
        if not uri:
            return None
        claim_ns = claim_namespace(namespace if kind != "ClusterBaseModel" else None, storage.get("parameters"),
                                   self._config_namespace)
        return str(uri), claim_ns

    @activity.defn(name="benchmark.start")
    def start(self, request: BenchStartInput) -> BenchStartOutput:
        obj = self._objects.get(request.job)
        if obj is None or obj["metadata"].get("deletionTimestamp") or \
                int(obj["metadata"].get("generation", 0)) != request.generation:
            return BenchStartOutput(outcome=StartOutcome.STALE)
        meta = obj["metadata"]
        name, namespace, uid = str(meta["name"]), str(meta["namespace"]), str(meta["uid"])
        jname = job_name(name, request.generation)
        existing = get_or_none(self._batch.read_namespaced_job, jname, namespace)
        if existing is not None:
            return self._existing(existing, uid, jname)
        try:
            spec = BenchmarkJobSpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            return BenchStartOutput(outcome=StartOutcome.INVALID, message=_problem(exc))
        resolved = self._resolve(spec, namespace)
        if isinstance(resolved, BenchStartOutput):
            return resolved
        try:
            defaults = self._defaults()
            rendered = render_job(name=name, namespace=namespace, uid=uid, generation=request.generation, spec=spec,
                                  endpoint=resolved, defaults=defaults)
        except (BenchmarkRenderError, OperatorConfigError) as exc:
            return BenchStartOutput(outcome=StartOutcome.INVALID, message=str(exc))
        created = create_unless_exists(self._batch.create_namespaced_job, namespace, rendered.job)
        if created is None:
            raced = get_or_none(self._batch.read_namespaced_job, jname, namespace)
            if raced is not None:
                return self._existing(raced, uid, jname)
        return BenchStartOutput(outcome=StartOutcome.STARTED, job_name=jname, results=rendered.results,
                                endpoint=resolved.api_base)

    @staticmethod
    def _existing(job: client.V1Job, uid: str, jname: str) -> BenchStartOutput:
        meta = job.metadata or client.V1ObjectMeta()
        owners = [o.uid for o in (meta.owner_references or [])]
        if uid not in owners:
            return BenchStartOutput(outcome=StartOutcome.INVALID,
                                    message=f"a Job named {jname} exists and is not this BenchmarkJob's")
        annotations = meta.annotations or {}
        return BenchStartOutput(outcome=StartOutcome.STARTED, job_name=jname,
                                results=annotations.get("ome.io/benchmark-results", ""))

    @activity.defn(name="benchmark.job_state")
    def job_state(self, request: BenchJobInput) -> BenchJobOutput:
        job = get_or_none(self._batch.read_namespaced_job, request.job_name, request.namespace)
        if job is None:
            return BenchJobOutput(phase=JobPhase.MISSING, message=f"the Job {request.job_name} is gone")
        if job.metadata is not None and job.metadata.deletion_timestamp is not None:
            return BenchJobOutput(phase=JobPhase.MISSING, message=f"the Job {request.job_name} is being deleted")
        pods = call(self._core.list_namespaced_pod, request.namespace,
                    label_selector=f"job-name={request.job_name}").items or []
        return job_phase(job, list(pods))

    @activity.defn(name="benchmark.stop")
    def stop(self, request: BenchJobInput) -> BenchStopOutput:
        """Delete the Job and, in the foreground, its pod (the pod stops running the benchmark)."""
        deleted = delete_if_present(self._batch.delete_namespaced_job, request.job_name, request.namespace,
                                    body=client.V1DeleteOptions(propagation_policy="Foreground"))
        return BenchStopOutput(deleted=deleted)

    @activity.defn(name="benchmark.summarize")
    def summarize(self, request: BenchSummarizeInput) -> BenchSummarizeOutput:
        """The summary of an oci:// run's results, read from its artifact's layer (at most MAX_RESULTS bytes).
        The registry is read anonymously (a registry that needs credentials answers a problem, said in details)."""
        registry, _, rest = request.results.partition("/")
        repository, _, tag = rest.rpartition(":")
        if not registry or not repository or not tag:
            return BenchSummarizeOutput(problem=f"{request.results!r} is not an OCI reference")
        insecure = registry in self._defaults().insecure_registries
        try:
            with ModelRegistry(registry, insecure=insecure) as reg:
                manifest = reg.fetch_manifest(repository, tag)
                if manifest is None:
                    return BenchSummarizeOutput(problem=f"no artifact at {request.results}")
                layers = [layer for layer in manifest.json.get("layers") or []
                          if layer.get("mediaType") == LAYER_MEDIA_TYPE]
                if not layers:
                    return BenchSummarizeOutput(problem=f"{request.results} has no {LAYER_MEDIA_TYPE} layer")
                data = reg.read_blob_bytes(repository, str(layers[0]["digest"]), max_bytes=MAX_RESULTS)
        except RegistryError as exc:
            if exc.retryable:
                raise
            return BenchSummarizeOutput(problem=f"{request.results}: {exc}")
        if data is None:
            return BenchSummarizeOutput(problem=f"{request.results}: its layer is missing")
        try:
            return BenchSummarizeOutput(summary=summarize_archive(data))
        except ResultsError as exc:
            return BenchSummarizeOutput(problem=f"{request.results}: {exc}")

    @activity.defn(name="benchmark.write_status")
    def write_status(self, request: BenchWriteInput) -> BenchWriteOutput:
        ref = request.job
        body_status: dict[str, Any] = dict.fromkeys(STATUS_FIELDS)
        body_status.update(request.status.to_api())

        before: list[BenchmarkJobState | None] = []

        def patch(obj: dict[str, Any]) -> dict[str, Any]:
            before[:] = [_state((obj.get("status") or {}).get("state"))]
            body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": body_status}
            return cast(dict[str, Any], call(self._custom.patch_namespaced_custom_object_status, GROUP, VERSION,
                                             ref.namespace, PLURAL, ref.name, body, _content_type=MERGE_PATCH))

        written = update_optimistically(ref, lambda: self._objects.get(ref), patch, lambda _: True)
        if written is not None and before:
            # After the write, from the state it replaced: a retried write (the state already there) tells
            # nothing twice.
            event = transition_event(before[0], request.status)
            if event is not None:
                record_event(self._core, api_version=f"{GROUP}/{VERSION}", kind="BenchmarkJob", name=ref.name,
                             namespace=ref.namespace, uid=ref.uid, event_type=event.type, reason=event.reason,
                             message=event.message)
        return BenchWriteOutput(present=written is not None)

    def all(self) -> list[object]:
        return [self.observe, self.start, self.job_state, self.stop, self.write_status, self.summarize]


__all__ = ["BenchmarkActivities", "job_phase"]
