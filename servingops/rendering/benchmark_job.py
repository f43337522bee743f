"""A BenchmarkJob's Kubernetes Job, rendered from its spec, its resolved endpoint and the operator's benchmark
defaults (pure: no I/O). docs/benchmarks.md says what each part becomes.

The pod: genai-bench (`genai-bench benchmark ...`, image from the operator ConfigMap's `benchmark.image`)
writes its results under /results/<resultFolderName>, as the pod's first init container; the second, `redact`
(REDACT_SCRIPT), takes the credentials genai-bench wrote there out. Then, by scheme: for pvc:// /results is the
claim's sub-path and the container is `summarize` (rendering/benchmark_summary_step.py: the run's summary as
its termination message, which the worker reads from the pod's status); for oci:// /results is an emptyDir
and the container is `oras push` (image `benchmark.uploaderImage`), which pushes the folder as one OCI
artifact (ARTIFACT_TYPE, its layer LAYER_MEDIA_TYPE). Init containers run one after the other and only after
the one before succeeded, so neither step runs after a failed benchmark. Any other scheme has no writer here
and is refused (BenchmarkRenderError names it).

The Job fails at its pod's first failure (backoffLimit 0) through a podFailurePolicy rule (FailJob on any
non-zero exit): the Job controller then waits for a deleted pod's containers to end before it judges it, and
its Failed condition names the container and its exit code (`Container genai-bench for pod ... failed with
exit code 143`), which outlives the pod.

Credentials are Secret references only: the Hugging Face token (spec.huggingFaceSecretReference, key
HUGGINGFACE_API_KEY) reaches the pod as env HF_TOKEN and HUGGINGFACE_API_KEY through secretKeyRef, an API key
as podOverride.env MODEL_API_KEY (genai-bench's own variable) through secretKeyRef; a podOverride env entry of a
credential name with a literal value is refused. The command line never carries one: genai-bench 0.0.5 insists
on `--api-key` for the openai backend, so it gets the placeholder API_KEY_PLACEHOLDER and takes the real key,
when there is one, from MODEL_API_KEY (its `--model-api-key` variable, which wins).

podOverride is merged as upstream OME merges it (a strategic merge into the default pod): image and resources
replace; env by name, volumeMounts by mountPath, volumes by name (an override entry replaces the default of
the same key, new ones are appended); envFrom and tolerations are appended; nodeSelector keys are added;
affinity replaces.

Beyond upstream: additionalRequestParams and the dataset reach genai-bench (upstream drops both); a
string that reads as a JSON boolean or number is sent as one (genai-bench puts the values into each request
body, where "0.2" as a string is not a temperature); the Job has a deadline from the spec's bounds
(`deadline_seconds`), so a benchmark that hangs ends Failed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

from pydantic import BaseModel

from servingops.api_models.ome.benchmark_job import BenchmarkJobSpec, PodOverride
from servingops.api_models.ome.enums import BenchmarkTask
from servingops.api_models.operator_config import BenchmarkDefaults
from servingops.rendering.benchmark_summary_step import MESSAGE_LIMIT, SUMMARIZE_SCRIPT, TERMINATION_LOG

ARTIFACT_TYPE = "application/vnd.servingops.benchmark.results.v1"
"""The artifactType of an oci:// result's manifest."""
LAYER_MEDIA_TYPE = "application/vnd.servingops.benchmark.results.v1.tar+gzip"
"""The media type of its one layer: the result folder, as oras packs a directory (tar+gzip)."""
API_KEY_PLACEHOLDER = "unused"
"""What `--api-key` says (a required flag of genai-bench 0.0.5 for openai): never a credential."""
HF_SECRET_KEY = "HUGGINGFACE_API_KEY"
"""The key of spec.huggingFaceSecretReference's Secret that holds the token (upstream's)."""
CREDENTIAL_ENV = frozenset({"HF_TOKEN", "HUGGINGFACE_API_KEY", "HUGGING_FACE_HUB_TOKEN", "MODEL_API_KEY",
                            "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "AZURE_STORAGE_ACCOUNT_KEY"})
"""Env names that carry a credential: only as a Secret reference."""

CONTAINER = "genai-bench"
REDACTOR = "redact"
UPLOADER = "upload"
SUMMARIZER = "summarize"
RESULTS_DIR = "/results"
DATASET_DIR = "/dataset"
MODEL_DIR = "/model"
LABEL_JOB = "ome.io/benchmarkjob"
LABEL_UID = "ome.io/benchmarkjob-uid"
LABEL_GENERATION = "ome.io/benchmarkjob-generation"
ANNOTATION_RESULTS = "ome.io/benchmark-results"
"""On the Job: where its results go (a pvc:// path or an OCI reference)."""
WRITERS = ("pvc", "oci")
"""outputLocation schemes with a writer here."""
DEFAULT_SCENARIOS = 10
DEFAULT_CONCURRENCIES = 9
"""How many iterations genai-bench runs for an unset list (its defaults, 0.0.5), for the deadline."""
START_SLACK_SECONDS = 600
"""Added to the iterations' bound: image pull, tokenizer download, the push."""

REDACT_SCRIPT = """\
import os, pathlib, sys, zipfile
# genai-bench 0.0.5 writes its command line, rebuilt from its options (--model-api-key among them, from
# MODEL_API_KEY), into experiment_metadata.json and the summary workbook: every credential of this container's
# env is replaced there before the results leave the pod.
secrets = [v.encode() for k, v in os.environ.items() if k in sys.argv[2].split(",") and len(v) >= 4]
mark = b"REDACTED"  # no markup characters: the workbook is XML inside
for path in pathlib.Path(sys.argv[1]).rglob("*"):
    if not path.is_file() or not secrets:
        continue
    if path.suffix == ".xlsx":
        with zipfile.ZipFile(path) as old:
            entries = [(i, old.read(i)) for i in old.infolist()]
        if any(s in data for _, data in entries for s in secrets):
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as new:
                for info, data in entries:
                    for s in secrets:
                        data = data.replace(s, mark)
                    new.writestr(info, data)
    elif path.suffix in (".json", ".txt", ".csv", ".log"):
        data = path.read_bytes()
        for s in secrets:
            data = data.replace(s, mark)
        path.write_bytes(data)
"""
"""The redact step (python of the benchmark image): the credentials of its env, wherever genai-bench wrote them
into the result folder (argv: the folder, the credential env names)."""
POD_FAILURE_POLICY: dict[str, Any] = {"rules": [{"action": "FailJob",
                                                 "onExitCodes": {"operator": "NotIn", "values": [0]}}]}
"""Any container's non-zero exit fails the Job, named in its Failed condition (module doc)."""

TASK_FLAG = {BenchmarkTask.TEXT_TO_TEXT: "text-to-text", BenchmarkTask.IMAGE_TO_TEXT: "image-text-to-text",
             BenchmarkTask.TEXT_TO_EMBEDDINGS: "text-to-embeddings",
             BenchmarkTask.IMAGE_TO_EMBEDDINGS: "image-to-embeddings"}
"""The seed's task as genai-bench 0.0.5 names it (image-to-text is its image-text-to-text)."""


class BenchmarkRenderError(ValueError):
    """The spec asks for something this renderer cannot give (the message says what): the run ends Failed."""


class ResolvedEndpoint(BaseModel):
    """What the benchmark talks to, resolved by the activity from spec.endpoint."""

    api_base: str
    """The URL genai-bench sends to (an InferenceService's URL through the gateway, or endpoint.url)."""
    api_backend: str
    """genai-bench's --api-backend (the seed's apiFormat)."""
    model_name: str
    """The model name sent in each request."""
    tokenizer: str
    """A Hub repository id, or a path inside the pod (under MODEL_DIR for a model on a claim)."""
    tokenizer_claim: str | None = None
    """The PersistentVolumeClaim the model's files are on (a model served from pvc://), mounted at MODEL_DIR."""
    tokenizer_claim_path: str = ""
    """The model's directory inside that claim (mounted as the subPath)."""


class Output(BaseModel):
    scheme: str
    claim: str = ""
    sub_path: str = ""
    reference: str = ""
    registry: str = ""


class RenderedJob(BaseModel):
    name: str
    job: dict[str, Any]
    results: str
    """Where the results go: pvc://<claim>/<sub-path>/<folder> or <registry>/<repository>:<tag>."""
    result_folder: str
    deadline_seconds: int


def _scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


def _pvc(uri: str, what: str) -> tuple[str, str]:
    rest = uri.split("://", 1)[1]
    claim, _, sub = rest.partition("/")
    if not claim:
        raise BenchmarkRenderError(f"{what} {uri!r}: pvc:// needs a claim name (pvc://<claim>/<sub-path>)")
    sub = sub.strip("/")
    if ".." in sub.split("/"):
        raise BenchmarkRenderError(f"{what} {uri!r}: the sub-path may not leave the claim")
    return claim, sub


_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_REPO = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$")


def parse_output(uri: str, default_tag: str) -> Output:
    """outputLocation.storageUri as a writer target; a scheme with no writer here is refused by name."""
    scheme = _scheme(uri)
    if scheme == "pvc":
        claim, sub = _pvc(uri, "outputLocation")
        return Output(scheme=scheme, claim=claim, sub_path=sub)
    if scheme == "oci":
        rest = uri.split("://", 1)[1]
        registry, _, path = rest.partition("/")
        if rest.startswith("n/") and "/b/" in rest:
            raise BenchmarkRenderError(f"outputLocation {uri!r}: OCI Object Storage (oci://n/.../b/...) has no writer "
                                       "here; oci:// is an OCI registry reference (oci://<registry>/<repository>[:tag])")
        tag = default_tag
        last = path.rsplit("/", 1)[-1]
        if ":" in last:
            path, tag = path.rsplit(":", 1)
        if not registry or not _REPO.match(path) or not _TAG.match(tag):
            raise BenchmarkRenderError(f"outputLocation {uri!r}: not an OCI reference "
                                       "(oci://<registry>/<repository>[:tag])")
        return Output(scheme=scheme, reference=f"{registry}/{path}:{tag}", registry=registry)
    named = scheme or "(none)"
    raise BenchmarkRenderError(f"outputLocation scheme {named}:// has no writer here (supported: "
                               f"{', '.join(s + '://' for s in WRITERS)})")


def tokenizer_from_source(uri: str) -> tuple[str, str | None, str]:
    """Where genai-bench loads the served model's tokenizer from, given the model's source: a Hub repository
    id (hf://org/repo[@rev] or https://huggingface.co/org/repo, any Hub host: HF_ENDPOINT says which), or the
    model's directory on a claim (pvc://claim/path: mounted at MODEL_DIR). (tokenizer, claim, claim path)."""
    scheme = _scheme(uri)
    if scheme == "hf":
        return uri.split("://", 1)[1].split("@", 1)[0].strip("/"), None, ""
    if scheme == "pvc":
        claim, sub = _pvc(uri, "model storage")
        return MODEL_DIR, claim, sub
    if scheme in ("http", "https"):
        parts = [p for p in uri.split("://", 1)[1].split("/")[1:] if p]
        if len(parts) >= 2:
            return f"{parts[0]}/{parts[1]}", None, ""
    raise BenchmarkRenderError(f"the served model's source {uri!r} gives no tokenizer here (hf://, a Hub URL or "
                               "pvc://)")


def request_params(params: dict[str, str] | None) -> dict[str, Any]:
    """additionalRequestParams as genai-bench's JSON: a value that reads as a JSON boolean or number becomes
    one; anything else stays a string."""
    out: dict[str, Any] = {}
    for key, value in sorted((params or {}).items()):
        try:
            parsed = json.loads(value)
        except ValueError:
            out[key] = value
            continue
        out[key] = parsed if isinstance(parsed, (bool, int, float)) else value
    return out


def job_name(name: str, generation: int) -> str:
    """The Job of one generation: `<name>-g<generation>`, shortened with a hash to a DNS label (63)."""
    suffix = f"-g{generation}"
    full = name + suffix
    if len(full) <= 63:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:63 - len(suffix) - 9].rstrip('-')}-{digest}{suffix}"


def label_value(value: str) -> str:
    if len(value) <= 63:
        return value
    return value[:54].rstrip("-_.") + "-" + hashlib.sha256(value.encode()).hexdigest()[:8]


def deadline_seconds(spec: BenchmarkJobSpec) -> int:
    """The iterations' bound (each at most maxTimePerIteration minutes) plus START_SLACK_SECONDS."""
    scenarios = len(spec.traffic_scenarios) if spec.traffic_scenarios else DEFAULT_SCENARIOS
    levels = len(spec.num_concurrency) if spec.num_concurrency else DEFAULT_CONCURRENCIES
    return scenarios * levels * spec.max_time_per_iteration * 60 + START_SLACK_SECONDS


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _check_credentials(override: PodOverride | None) -> None:
    for entry in (override.env or []) if override else []:
        if str(entry.get("name", "")).upper() in CREDENTIAL_ENV and "value" in entry:
            raise BenchmarkRenderError(f"podOverride.env {entry.get('name')}: a credential must come from a Secret "
                                       "(valueFrom.secretKeyRef), never a literal value")


def _by_key(base: list[dict[str, Any]], extra: list[dict[str, Any]] | None, key: str) -> list[dict[str, Any]]:
    merged = list(base)
    for item in extra or []:
        at = next((i for i, b in enumerate(merged) if b.get(key) == item.get(key)), None)
        if at is None:
            merged.append(dict(item))
        else:
            merged[at] = dict(item)
    return merged


def _merge_resources(base: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    """requests and limits merged per resource name (a strategic merge of two maps); other keys replace."""
    merged = {key: dict(value) for key, value in base.items()}
    for key, value in (extra or {}).items():
        if key in ("requests", "limits") and isinstance(value, dict):
            merged[key] = {**merged.get(key, {}), **value}
        else:
            merged[key] = value
    return merged


def _dataset_args(spec: BenchmarkJobSpec, volumes: list[dict[str, Any]],
                  mounts: list[dict[str, Any]]) -> list[str]:
    if spec.dataset is None:
        return []
    uri = spec.dataset.storage_uri
    scheme = _scheme(uri)
    if scheme == "hf":
        repo = uri.split("://", 1)[1].split("@", 1)[0].strip("/")
        if not repo:
            raise BenchmarkRenderError(f"dataset {uri!r}: hf:// needs a repository (hf://<org>/<repo>)")
        args = ["--dataset-path", repo]
    elif scheme == "pvc":
        claim, sub = _pvc(uri, "dataset")
        volumes.append({"name": "dataset", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        mounts.append({"name": "dataset", "mountPath": DATASET_DIR, "readOnly": True})
        args = ["--dataset-path", f"{DATASET_DIR}/{sub}" if sub else DATASET_DIR]
    else:
        raise BenchmarkRenderError(f"dataset scheme {scheme or '(none)'}:// has no reader here (supported: hf://, "
                                   "pvc://)")
    params = spec.dataset.parameters or {}
    if "promptColumn" in params:
        args += ["--dataset-prompt-column", params["promptColumn"]]
    if "imageColumn" in params:
        args += ["--dataset-image-column", params["imageColumn"]]
    return args


def benchmark_args(spec: BenchmarkJobSpec, endpoint: ResolvedEndpoint, result_folder: str) -> list[str]:
    """genai-bench's arguments after `genai-bench` (no credential among them)."""
    args = ["benchmark", "--api-backend", endpoint.api_backend, "--api-base", endpoint.api_base,
            "--api-key", API_KEY_PLACEHOLDER, "--api-model-name", endpoint.model_name,
            "--model-tokenizer", endpoint.tokenizer, "--task", TASK_FLAG[spec.task],
            "--max-time-per-run", str(spec.max_time_per_iteration),
            "--max-requests-per-run", str(spec.max_requests_per_iteration),
            "--experiment-base-dir", RESULTS_DIR, "--experiment-folder-name", result_folder]
    for scenario in spec.traffic_scenarios or []:
        args += ["--traffic-scenario", scenario]
    for level in spec.num_concurrency or []:
        args += ["--num-concurrency", str(level)]
    params = request_params(spec.additional_request_params)
    if params:
        args += ["--additional-request-params", json.dumps(params, separators=(",", ":"), sort_keys=True)]
    if spec.service_metadata is not None:
        meta = spec.service_metadata
        args += ["--server-engine", meta.engine.value, "--server-version", meta.version,
                 "--server-gpu-type", meta.gpu_type.value, "--server-gpu-count", str(meta.gpu_count)]
    return args


def render_job(*, name: str, namespace: str, uid: str, generation: int, spec: BenchmarkJobSpec,
               endpoint: ResolvedEndpoint, defaults: BenchmarkDefaults) -> RenderedJob:
    """The Job of one generation of a BenchmarkJob, owned by it (deleting the BenchmarkJob collects it)."""
    _check_credentials(spec.pod_override)
    jname = job_name(name, generation)
    folder = spec.result_folder_name or jname
    output = parse_output(spec.output_location.storage_uri, default_tag=jname)
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    results_mount: dict[str, Any] = {"name": "results", "mountPath": RESULTS_DIR}
    if output.scheme == "pvc":
        volumes.append({"name": "results", "persistentVolumeClaim": {"claimName": output.claim}})
        if output.sub_path:
            results_mount["subPath"] = output.sub_path
        results = f"pvc://{output.claim}/{output.sub_path + '/' if output.sub_path else ''}{folder}"
    else:
        volumes.append({"name": "results", "emptyDir": {}})
        results = output.reference
    mounts.append(dict(results_mount))
    if endpoint.tokenizer_claim:
        volumes.append({"name": "model", "persistentVolumeClaim": {"claimName": endpoint.tokenizer_claim,
                                                                   "readOnly": True}})
        model_mount: dict[str, Any] = {"name": "model", "mountPath": MODEL_DIR, "readOnly": True}
        if endpoint.tokenizer_claim_path:
            model_mount["subPath"] = endpoint.tokenizer_claim_path
        mounts.append(model_mount)
    args = benchmark_args(spec, endpoint, folder) + _dataset_args(spec, volumes, mounts)

    env: list[dict[str, Any]] = [{"name": "ENABLE_UI", "value": "false"}]
    if defaults.hub_endpoint:
        env.append({"name": "HF_ENDPOINT", "value": defaults.hub_endpoint})
    if spec.hugging_face_secret_reference is not None:
        secret = spec.hugging_face_secret_reference.name
        env += [_secret_env("HF_TOKEN", secret, HF_SECRET_KEY), _secret_env(HF_SECRET_KEY, secret, HF_SECRET_KEY)]
    resources: dict[str, Any] = {"requests": {"cpu": defaults.cpu_request, "memory": defaults.memory_request},
                                 "limits": {"cpu": defaults.cpu_limit, "memory": defaults.memory_limit}}
    override = spec.pod_override or PodOverride()
    bench: dict[str, Any] = {
        "name": CONTAINER, "image": override.image or defaults.image, "command": ["genai-bench"], "args": args,
        "env": _by_key(env, override.env, "name"),
        "volumeMounts": _by_key(mounts, override.volume_mounts, "mountPath"),
        "resources": _merge_resources(resources, override.resources),
        "terminationMessagePolicy": "FallbackToLogsOnError"}
    if override.env_from:
        bench["envFrom"] = [dict(e) for e in override.env_from]
    pod: dict[str, Any] = {"restartPolicy": "Never",
                           "volumes": _by_key(volumes, override.volumes, "name"),
                           "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                           *[dict(t) for t in override.tolerations or []]]}
    if override.node_selector:
        pod["nodeSelector"] = dict(override.node_selector)
    if override.affinity:
        pod["affinity"] = dict(override.affinity)
    # Before the results leave the pod (oci://) or are left in the claim (pvc://): the credentials genai-bench
    # wrote into them go (REDACT_SCRIPT), with the same env (so the same Secret references) as the benchmark.
    redact: dict[str, Any] = {
        "name": REDACTOR, "image": bench["image"], "command": ["python"],
        "args": ["-c", REDACT_SCRIPT, f"{RESULTS_DIR}/{folder}", ",".join(sorted(CREDENTIAL_ENV))],
        "env": bench["env"], "volumeMounts": [dict(results_mount)],
        "terminationMessagePolicy": "FallbackToLogsOnError"}
    if "envFrom" in bench:
        redact["envFrom"] = bench["envFrom"]
    pod["initContainers"] = [bench, redact]
    if output.scheme == "oci":
        push = ["push", "--artifact-type", ARTIFACT_TYPE]
        if output.registry in defaults.insecure_registries:
            push.append("--plain-http")
        upload: dict[str, Any] = {
            "name": UPLOADER, "image": defaults.uploader_image, "command": ["oras"],
            "args": [*push, output.reference, f"{folder}/:{LAYER_MEDIA_TYPE}"],
            "workingDir": RESULTS_DIR, "volumeMounts": [{"name": "results", "mountPath": RESULTS_DIR}],
            "terminationMessagePolicy": "FallbackToLogsOnError"}
        if spec.output_location.key:
            # A docker config Secret (kubernetes.io/dockerconfigjson) for the push, mounted as oras reads it.
            pod["volumes"].append({"name": "registry-auth", "secret": {
                "secretName": spec.output_location.key,
                "items": [{"key": ".dockerconfigjson", "path": "config.json"}]}})
            upload["volumeMounts"].append({"name": "registry-auth", "mountPath": "/registry-auth", "readOnly": True})
            upload["env"] = [{"name": "DOCKER_CONFIG", "value": "/registry-auth"}]
        pod["containers"] = [upload]
    else:
        # No env: the summary needs no credential. A failure of the step itself (its log's end) is its message.
        pod["containers"] = [{
            "name": SUMMARIZER, "image": bench["image"], "command": ["python"],
            "args": ["-c", SUMMARIZE_SCRIPT, f"{RESULTS_DIR}/{folder}", TERMINATION_LOG, str(MESSAGE_LIMIT)],
            "volumeMounts": [dict(results_mount)], "terminationMessagePath": TERMINATION_LOG,
            "terminationMessagePolicy": "FallbackToLogsOnError"}]
    labels = {LABEL_JOB: label_value(name), LABEL_UID: uid, LABEL_GENERATION: str(generation)}
    deadline = deadline_seconds(spec)
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": jname, "namespace": namespace, "labels": labels,
                     "annotations": {ANNOTATION_RESULTS: results},
                     "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "BenchmarkJob", "name": name,
                                          "uid": uid, "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": deadline,
                 "podFailurePolicy": copy.deepcopy(POD_FAILURE_POLICY),
                 "template": {"metadata": {"labels": dict(labels)}, "spec": pod}}}
    return RenderedJob(name=jname, job=job, results=results, result_folder=folder, deadline_seconds=deadline)


__all__ = ["ANNOTATION_RESULTS", "API_KEY_PLACEHOLDER", "ARTIFACT_TYPE", "CREDENTIAL_ENV", "LABEL_GENERATION",
           "LABEL_JOB", "LABEL_UID", "LAYER_MEDIA_TYPE", "POD_FAILURE_POLICY", "SUMMARIZER", "BenchmarkRenderError",
           "RenderedJob", "ResolvedEndpoint",
           "benchmark_args", "deadline_seconds", "job_name", "parse_output", "render_job", "request_params",
           "tokenizer_from_source"]
