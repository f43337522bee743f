"""The serving kinds of seed 004 (BaseModel, ClusterBaseModel, FineTunedWeight, ServingRuntime,
ClusterServingRuntime) on the real apiserver, and upstream OME's own manifests applied unchanged.

Hand-written full objects are created, read back, given a status through /status and listed as a
Table (the printer columns as kubectl shows them). Upstream samples (tests/fixtures/ome_samples/, each
a byte-for-byte copy whose header names the upstream commit, path and git blob) are server-side
applied as they are, and every field sent must come back: a field our CRDs lack would be pruned.

The samples are applied as dry runs: the apiserver answers with the object exactly as it would store
it (decoded, pruned, defaulted, validated), but nothing is persisted, so their real hf:// models and
InferenceServices never reach a worker or bridge other tests in the session run.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.api_models.base import KubeResource
from servingops.api_models.crdgen import crd_manifest
from servingops.api_models.ome import (
    BaseModel,
    ClusterBaseModel,
    ClusterServingRuntime,
    FineTunedWeight,
    InferenceService,
    ServingRuntime,
)
from tests.crd_helpers import create, manifest, new_namespace, rejection, replace
from tests.support.ome_objects import T0, condition, engine_spec

Spec = dict[str, Any]
SAMPLES = Path(__file__).resolve().parent / "fixtures" / "ome_samples"
FIELD_MANAGER = "servingops-sample-test"
SERVING_KINDS: list[type[KubeResource]] = [BaseModel, ClusterBaseModel, FineTunedWeight, ServingRuntime,
                                           ClusterServingRuntime]
BY_KIND: dict[str, type[KubeResource]] = {k.crd.kind: k for k in [*SERVING_KINDS, InferenceService]}


# --- full objects: every field of the seed, every default spelled out ------------------------------


def storage(uri: str = "hf://meta-llama/Llama-3.2-1B-Instruct@main") -> Spec:
    return {
        "path": "/raid/models/llama-3-2-1b-instruct",
        "schemaPath": "config.json",
        "parameters": {"secretKey": "hf-token-value"},
        "key": "hf-token",
        "storageUri": uri,
        "nodeSelector": {"gpu": "h100"},
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}},
        "downloadPolicy": "ReuseIfExists",
    }


def extension() -> Spec:
    return {"displayName": "meta.llama-3.2-1b-instruct", "version": "1.0.0", "disabled": False,
            "vendor": "meta", "compartmentID": "ocid1.compartment.oc1..a"}


def diffusion_pipeline() -> Spec:
    part = {"library": "diffusers", "type": "AutoencoderKLQwenImage"}
    return {"className": "QwenImagePipeline", "scheduler": part, "textEncoder": part, "tokenizer": part,
            "transformer": part, "vae": part, "additionalComponents": {"processor": part}}


def base_model_spec() -> Spec:
    return {
        **extension(),
        "modelFormat": {"name": "safetensors", "version": "1.0.0", "operator": "Equal", "weight": 1},
        "modelType": "llama",
        "modelFramework": {"name": "transformers", "version": "4.45.0", "operator": "GreaterThan", "weight": 2},
        "modelArchitecture": "LlamaForCausalLM",
        "quantization": "fp8",
        "modelParameterSize": "1.24B",
        "modelCapabilities": ["TEXT_TO_TEXT", "CHAT"],
        "apiCapabilities": ["OPENAI_V1_CHAT_COMPLETIONS"],
        "modelConfiguration": {"hidden_size": 2048, "rope_scaling": {"factor": 32.0, "type": "llama3"}},
        "storage": storage(),
        "distribution": "PerNode",
        "servingMode": ["On-demand", "Dedicated"],
        "maxTokens": 131072,
        "diffusionPipeline": diffusion_pipeline(),
        "additionalMetadata": {"license": "llama3.2"},
    }


def model_status() -> Spec:
    return {
        "lifecycle": "Public",
        "state": "Ready",
        "observedGeneration": 1,
        "lastReconcileTime": T0,
        "nodesReady": ["kwok-node-0", "kwok-node-1"],
        "nodesFailed": ["kwok-node-2"],
        "conditions": [condition("Ready"), condition("SourceReachable", reason="Reachable")],
        "cache": {"backend": "example-cache", "sourceUri": "hf://meta-llama/Llama-3.2-1B-Instruct"},
    }


def fine_tuned_weight_spec() -> Spec:
    return {
        **extension(),
        "baseModelRef": {"name": "llama-3-2-1b-instruct", "namespace": "models"},
        "modelType": "Adapter",
        "hyperParameters": {"r": 16, "alpha": 32, "targetModules": ["q_proj", "v_proj"]},
        "configuration": {"adapter": "lora"},
        "storage": storage("hf://org/llama-lora@v1"),
        "trainingJobRef": {"name": "train-lora-1", "namespace": "training"},
    }


def _container(name: str) -> Spec:
    return {"name": name, "image": "docker.io/lmsysorg/sglang:v0.5.5", "args": ["--model-path", "$(MODEL_PATH)"],
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}


def runtime_spec() -> Spec:
    return {
        "containers": [_container("ome-container")],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        "nodeSelector": {"gpu": "h100"},
        "affinity": {"nodeAffinity": {}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "labels": {"team": "a"},
        "annotations": {"note": "x"},
        "imagePullSecrets": [{"name": "regcred"}],
        "schedulerName": "default-scheduler",
        "hostIPC": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "hostNetwork": True,
        "supportedModelFormats": [{
            "name": "safetensors",
            "modelFormat": {"name": "safetensors", "version": "1.0.0", "operator": "GreaterThan", "weight": 1},
            "modelType": "llama",
            "version": "1.0.0",
            "modelFramework": {"name": "transformers", "version": "4.45.0", "operator": "Equal", "weight": 1},
            "modelArchitecture": "LlamaForCausalLM",
            "quantization": "fp8",
            "diffusionPipeline": diffusion_pipeline(),
            "modelCacheProviders": ["example-cache"],
            "autoSelect": True,
            "priority": 2,
            "acceleratorConfig": {"h100-80g": {
                "minMemoryPerBillionParams": 2,
                "tensorParallelismOverride": {"tensorParallelSize": 8, "pipelineParallelSize": 1,
                                              "dataParallelSize": 0},
                "runtimeArgsOverride": ["--enable-fp8"],
                "environmentOverride": {"NCCL_DEBUG": "INFO"}}},
        }],
        "modelSizeRange": {"min": "1B", "max": "70B"},
        "disabled": False,
        "routerConfig": {"runner": _container("router"), "config": {"policy": "cache-aware"}, "minReplicas": 1},
        "engineConfig": engine_spec(),
        "decoderConfig": {"runner": _container("decoder"),
                          "leader": {"runner": _container("leader")},
                          "worker": {"size": 1, "runner": _container("worker")},
                          "minReplicas": 1, "maxReplicas": 2},
        "protocolVersions": ["openAI", "openInference-v2"],
        "scalingPolicy": {"mode": "Independent"},
        "acceleratorRequirements": {"acceleratorClasses": ["h100-80g"], "minMemory": 80,
                                    "minComputePerformanceTFLOPS": 900, "minArchitectureVersion": "9.0",
                                    "requiredFeatures": ["fp8", "nvlink"], "preferredPrecisions": ["fp8", "fp16"]},
    }


def runtime_status() -> Spec:
    return {"inheritanceChain": ["base-sglang", "srt-llama"],
            "conditions": [condition("InheritanceReady", reason="Resolved")]}


FULL: dict[str, tuple[Spec, Spec]] = {
    "BaseModel": (base_model_spec(), model_status()),
    "ClusterBaseModel": (base_model_spec(), model_status()),
    "FineTunedWeight": (fine_tuned_weight_spec(), model_status()),
    "ServingRuntime": (runtime_spec(), runtime_status()),
    "ClusterServingRuntime": (runtime_spec(), runtime_status()),
}


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "serving-kinds")


def _ns(kind: type[KubeResource], ns: str) -> str | None:
    return None if kind.crd.scope == "Cluster" else ns


def _delete(api: client.ApiClient, kind: type[KubeResource], name: str, ns: str | None) -> None:
    custom, info = client.CustomObjectsApi(api), kind.crd
    if ns:
        custom.delete_namespaced_custom_object(info.group, info.version, ns, info.plural, name)
    else:
        custom.delete_cluster_custom_object(info.group, info.version, info.plural, name)


def _get(api: client.ApiClient, kind: type[KubeResource], name: str, ns: str | None) -> Spec:
    custom, info = client.CustomObjectsApi(api), kind.crd
    if ns:
        return dict(custom.get_namespaced_custom_object(info.group, info.version, ns, info.plural, name))
    return dict(custom.get_cluster_custom_object(info.group, info.version, info.plural, name))


@pytest.fixture
def created(kube_api: client.ApiClient, ns: str) -> Iterator[list[tuple[type[KubeResource], str, str | None]]]:
    """Objects a test created, deleted when it ends (cluster-scoped ones outlive the namespace)."""
    made: list[tuple[type[KubeResource], str, str | None]] = []
    yield made
    for kind, name, where in made:
        try:
            _delete(kube_api, kind, name, where)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _create(api: client.ApiClient, made: list[tuple[type[KubeResource], str, str | None]],
            kind: type[KubeResource], spec: Spec, ns: str) -> Spec:
    where = _ns(kind, ns)
    body = manifest(kind, spec)
    made.append((kind, body["metadata"]["name"], where))
    return create(api, kind, body, where)


@pytest.mark.integration
@pytest.mark.parametrize("kind", SERVING_KINDS, ids=lambda k: k.crd.kind)
def test_full_object_round_trips_and_status_goes_through_its_subresource(
        kube_api: client.ApiClient, ns: str, created: list[Any], kind: type[KubeResource]) -> None:
    spec, status = FULL[kind.crd.kind]
    made = _create(kube_api, created, kind, spec, ns)
    assert made["spec"] == spec
    where = _ns(kind, ns)
    assert _get(kube_api, kind, made["metadata"]["name"], where)["spec"] == spec

    # The main resource ignores status (it is a subresource) ...
    ignored = copy.deepcopy(made)
    ignored["status"] = status
    assert "status" not in replace(kube_api, kind, ignored, where)
    # ... and /status writes it without touching spec.
    current = _get(kube_api, kind, made["metadata"]["name"], where)
    current["status"] = status
    current["spec"] = {**spec, "disabled": True}
    written = replace(kube_api, kind, current, where, status=True)
    assert written["status"] == status
    assert written["spec"] == spec
    # What the apiserver stores reads back through the model unchanged.
    parsed = kind.model_validate(written).to_api()
    assert parsed["spec"] == spec and parsed["status"] == status


def _table(api: client.ApiClient, kind: type[KubeResource], name: str, ns: str | None) -> dict[str, Any]:
    """The object as `kubectl get -o wide` sees it: the apiserver's Table, one cell per column."""
    info = kind.crd
    path = f"/apis/{info.group}/{info.version}" + (f"/namespaces/{ns}" if ns else "") + f"/{info.plural}/{name}"
    method, url, headers, _, _ = api.param_serialize(
        "GET", path, header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"])
    response = api.call_api(method, url, headers)
    response.read()
    table = json.loads(response.data)
    names = [column["name"] for column in table["columnDefinitions"]]
    return dict(zip(names, table["rows"][0]["cells"], strict=True))


EXPECTED_CELLS: dict[str, dict[str, Any]] = {
    "BaseModel": {"Disabled": False, "Vendor": "meta", "Framework": "transformers", "FrameworkVersion": "4.45.0",
                  "ModelFormat": "safetensors", "Architecture": "LlamaForCausalLM", "Size": "1.24B",
                  "Capabilities": "TEXT_TO_TEXT", "Ready": "Ready", "NodesReady": '["kwok-node-0","kwok-node-1"]'},
    "FineTunedWeight": {"Disabled": False, "ModelType": "Adapter", "Ready": "Ready",
                        "NodesReady": '["kwok-node-0","kwok-node-1"]'},
    "ServingRuntime": {"Disabled": False, "ModelFormat": "safetensors", "ModelFramework": "transformers",
                       "ModelFrameworkVersion": "4.45.0", "ModelArchitecture": "LlamaForCausalLM",
                       "ModelSizeMin": "1B", "ModelSizeMax": "70B", "Images": "docker.io/lmsysorg/sglang:v0.5.5",
                       "InheritanceReady": "True"},
}
EXPECTED_CELLS["ClusterBaseModel"] = EXPECTED_CELLS["BaseModel"]
EXPECTED_CELLS["ClusterServingRuntime"] = EXPECTED_CELLS["ServingRuntime"]


@pytest.mark.integration
@pytest.mark.parametrize("kind", SERVING_KINDS, ids=lambda k: k.crd.kind)
def test_printer_columns_are_served(kube_api: client.ApiClient, ns: str, created: list[Any],
                                    kind: type[KubeResource]) -> None:
    live = client.ApiextensionsV1Api(kube_api).read_custom_resource_definition(kind.crd.crd_name)
    served = kube_api.sanitize_for_serialization(live)["spec"]["versions"][0]["additionalPrinterColumns"]
    generated = crd_manifest(kind)["spec"]["versions"][0]["additionalPrinterColumns"]
    assert served == generated

    spec, status = FULL[kind.crd.kind]
    made = _create(kube_api, created, kind, spec, ns)
    where = _ns(kind, ns)
    made["status"] = status
    replace(kube_api, kind, made, where, status=True)
    cells = _table(kube_api, kind, made["metadata"]["name"], where)
    assert {name: cells[name] for name in EXPECTED_CELLS[kind.crd.kind]} == EXPECTED_CELLS[kind.crd.kind]


# --- the one CEL rule the seed states for these kinds ----------------------------------------------

SHARDED_PVC = "pvc:// models can't use Sharded distribution"


def _model(uri: str, distribution: str | None) -> Spec:
    spec: Spec = {"storage": {"storageUri": uri}}
    if distribution:
        spec["distribution"] = distribution
    return spec


@pytest.mark.integration
@pytest.mark.parametrize("kind", [BaseModel, ClusterBaseModel], ids=lambda k: k.crd.kind)
def test_sharded_distribution_is_refused_for_pvc_models(kube_api: client.ApiClient, ns: str, created: list[Any],
                                                        kind: type[KubeResource]) -> None:
    """Seed 004, BaseModelSpec.distribution: "pvc:// models can't use Sharded."."""
    where = _ns(kind, ns)
    message = rejection(lambda: create(kube_api, kind, manifest(kind, _model("pvc://weights/llama", "Sharded")),
                                       where))
    assert SHARDED_PVC in message and "spec.distribution" in message
    # Sharded from any other source, and PerNode (or unset) from a PVC, are accepted.
    for uri, distribution in (("hf://org/repo", "Sharded"), ("pvc://weights/llama", "PerNode"),
                              ("pvc://weights/llama", None)):
        _create(kube_api, created, kind, _model(uri, distribution), ns)
    # The rule holds on update too.
    made = _create(kube_api, created, kind, _model("pvc://weights/llama", "PerNode"), ns)
    made["spec"]["distribution"] = "Sharded"
    assert SHARDED_PVC in rejection(lambda: replace(kube_api, kind, made, where))


@pytest.mark.integration
@pytest.mark.parametrize(
    ("kind", "spec", "complaint"),
    [
        (ClusterBaseModel, {"modelFormat": {"name": "safetensors"}}, "spec.storage: Required value"),
        (ClusterBaseModel, {"storage": {"path": "/raid/m"}}, "spec.storage.storageUri: Required value"),
        (ClusterBaseModel, {"storage": {"storageUri": "hf://o/r", "downloadPolicy": "Sometimes"}},
         "spec.storage.downloadPolicy: Unsupported value"),
        (ClusterBaseModel, {"storage": {"storageUri": "hf://o/r"}, "distribution": "Replicated"},
         "spec.distribution: Unsupported value"),
        (ClusterBaseModel, {"storage": {"storageUri": "hf://o/r"}, "modelFormat": {"version": "1"}},
         "spec.modelFormat.name: Required value"),
        (FineTunedWeight, {"baseModelRef": {"name": "m"}, "modelType": "Adapter", "storage": {"storageUri": "hf://o/r"}},
         "spec.hyperParameters: Required value"),
        (ClusterServingRuntime, {"supportedModelFormats": [{"modelFormat": {"name": "safetensors"}}]},
         "spec.supportedModelFormats[0].modelFramework: Required value"),
        (ClusterServingRuntime, {"supportedModelFormats": [{"modelFormat": {"name": "safetensors"},
                                                            "modelFramework": {"name": "transformers"},
                                                            "priority": 0}]},
         "spec.supportedModelFormats[0].priority: Invalid value"),
        (ClusterServingRuntime, {"supportedModelFormats": [{
            "modelFormat": {"name": "safetensors"}, "modelFramework": {"name": "transformers"},
            "acceleratorConfig": {"a10": {"minMemoryPerBillionParams": -1}}}]},
         "minMemoryPerBillionParams: Invalid value"),
    ],
    ids=["no-storage", "no-uri", "download-policy", "distribution", "format-name", "hyper-parameters",
         "framework", "priority", "min-memory"],
)
def test_schema_refuses_what_the_seed_forbids(kube_api: client.ApiClient, kind: type[KubeResource], spec: Spec,
                                              complaint: str) -> None:
    assert complaint in rejection(lambda: create(kube_api, kind, manifest(kind, spec), None))


@pytest.mark.integration
def test_status_state_is_an_enum(kube_api: client.ApiClient, ns: str, created: list[Any]) -> None:
    made = _create(kube_api, created, ClusterBaseModel, _model("hf://o/r", None), ns)
    made["status"] = {"state": "Downloading"}
    assert "status.state: Unsupported value" in rejection(
        lambda: replace(kube_api, ClusterBaseModel, made, None, status=True))


# --- upstream OME samples ------------------------------------------------------------------------


def _sample_paths(folder: str) -> list[Path]:
    return sorted((SAMPLES / folder).rglob("*.yaml"))


def _header(path: Path) -> tuple[dict[str, str], bytes]:
    """The header's fields (source, git-blob) and the upstream bytes that follow it."""
    raw = path.read_bytes()
    fields: dict[str, str] = {}
    lines = raw.split(b"\n")
    for index, line in enumerate(lines[:3]):
        assert line.startswith(b"# "), f"{path}: header line {index + 1} missing"
        key, _, value = line[2:].decode().partition(": ")
        fields[key] = value
    return fields, b"\n".join(lines[3:])


def _docs(path: Path) -> list[Spec]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.mark.unit
@pytest.mark.parametrize("path", _sample_paths(""), ids=lambda p: str(p.relative_to(SAMPLES)))
def test_samples_are_upstream_bytes(path: Path) -> None:
    """Each fixture is upstream's file unchanged: the body's git blob id is the one the header names."""
    fields, body = _header(path)
    assert fields["source"].startswith("sgl-project/ome commit ")
    blob = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()  # git's object id, not a security use
    assert blob == fields["git-blob"]


@pytest.mark.unit
def test_samples_cover_the_representative_set() -> None:
    models = [d for p in _sample_paths("models") for d in _docs(p)]
    runtimes = [d for p in _sample_paths("runtimes") for d in _docs(p)]
    assert sum(d["kind"] == "ClusterBaseModel" for d in models) >= 6
    assert len({d["spec"]["vendor"] for d in models}) >= 6
    assert any(d["spec"]["storage"]["storageUri"].startswith("hf://") for d in models)
    assert {"safetensors", "pytorch"} <= {d["spec"].get("modelFormat", {}).get("name") for d in models}
    assert sum(d["kind"] == "ClusterServingRuntime" for d in runtimes) >= 6
    assert any({"engineConfig", "decoderConfig", "routerConfig"} <= d["spec"].keys()
               and "worker" in d["spec"]["engineConfig"] and "leader" in d["spec"]["engineConfig"]
               for d in runtimes)


def _lost(sent: Any, kept: Any, where: str = "") -> list[str]:
    """Paths of what was sent that did not come back as sent (pruned or rewritten)."""
    if isinstance(sent, dict):
        if not isinstance(kept, dict):
            return [where or "."]
        return [p for key, value in sent.items()
                for p in ([f"{where}.{key}"] if key not in kept else _lost(value, kept[key], f"{where}.{key}"))]
    if isinstance(sent, list):
        if not isinstance(kept, list) or len(kept) != len(sent):
            return [where]
        return [p for i, (s, k) in enumerate(zip(sent, kept, strict=True)) for p in _lost(s, k, f"{where}[{i}]")]
    return [] if sent == kept else [where]


def _apply(api: client.ApiClient, doc: Spec, ns: str | None, *, strict: bool = True) -> Spec:
    """Server-side apply of `doc` as it is, as a dry run; the object the apiserver would store."""
    kind, custom = BY_KIND[doc["kind"]], client.CustomObjectsApi(api)
    info, name = kind.crd, doc["metadata"]["name"]
    # Read the body ourselves: the generated client decodes only a 200, and creating by apply is a 201.
    options = {"field_manager": FIELD_MANAGER, "force": True, "dry_run": "All", "_preload_content": False,
               "field_validation": "Strict" if strict else "Ignore", "_content_type": "application/apply-patch+yaml"}
    if info.scope == "Namespaced":
        assert ns
        response = custom.patch_namespaced_custom_object(info.group, info.version, ns, info.plural, name, doc,
                                                         **options)
    else:
        response = custom.patch_cluster_custom_object(info.group, info.version, info.plural, name, doc, **options)
    return dict(json.loads(response.data))


def _ensure_namespace(api: client.ApiClient, name: str, made: list[str]) -> None:
    try:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        made.append(name)
    except ApiException as exc:
        if exc.status != 409:
            raise


@pytest.fixture(scope="module")
def sample_namespaces(kube_api: client.ApiClient) -> Iterator[list[str]]:
    """Namespaces the InferenceService samples name (upstream puts each in its own), removed after."""
    made: list[str] = []
    yield made
    for name in made:
        client.CoreV1Api(kube_api).delete_namespace(name)


def _keeps_every_field(api: client.ApiClient, path: Path, fallback_ns: str, namespaces: list[str]) -> None:
    applied = 0
    for doc in _docs(path):
        if doc["kind"] == "Namespace":
            _ensure_namespace(api, doc["metadata"]["name"], namespaces)
            continue
        kind = BY_KIND[doc["kind"]]
        where = None
        if kind.crd.scope == "Namespaced":
            where = doc["metadata"].get("namespace") or fallback_ns
            _ensure_namespace(api, where, namespaces)
        kept = _apply(api, doc, where)
        assert _lost(doc, kept) == [], f"{path.name}: the apiserver dropped or changed these fields"
        kind.model_validate(kept)  # and the SDK reads what was stored
        applied += 1
    assert applied == 1


MODEL_AND_RUNTIME_SAMPLES = _sample_paths("models") + _sample_paths("runtimes")
ISVC_SAMPLES = [p for p in _sample_paths("isvc") if all(
    d["kind"] == "Namespace" or ("model" in d["spec"] and "runtime" in d["spec"]) for d in _docs(p))]


@pytest.mark.integration
@pytest.mark.parametrize("path", MODEL_AND_RUNTIME_SAMPLES, ids=lambda p: str(p.relative_to(SAMPLES)))
def test_upstream_models_and_runtimes_apply_unchanged(kube_api: client.ApiClient, ns: str,
                                                      sample_namespaces: list[str], path: Path) -> None:
    _keeps_every_field(kube_api, path, ns, sample_namespaces)


@pytest.mark.integration
@pytest.mark.parametrize("path", ISVC_SAMPLES, ids=lambda p: str(p.relative_to(SAMPLES)))
def test_upstream_inference_services_with_model_and_runtime_apply_unchanged(
        kube_api: client.ApiClient, ns: str, sample_namespaces: list[str], path: Path) -> None:
    _keeps_every_field(kube_api, path, ns, sample_namespaces)


@pytest.mark.unit
def test_isvc_samples_name_models_and_runtimes_the_fixtures_hold() -> None:
    """The InferenceService samples come with the model and runtime they use, as upstream ships them."""
    names = {(d["kind"], d["metadata"]["name"]) for p in MODEL_AND_RUNTIME_SAMPLES for d in _docs(p)}
    assert len(ISVC_SAMPLES) >= 6
    for path in ISVC_SAMPLES:
        isvc = next(d for d in _docs(path) if d["kind"] == "InferenceService")
        assert ("ClusterBaseModel", isvc["spec"]["model"]["name"]) in names, path.name
        assert ("ClusterServingRuntime", isvc["spec"]["runtime"]["name"]) in names, path.name


def _create_dry(api: client.ApiClient, doc: Spec, ns: str, validation: str) -> Spec:
    """A dry-run create of an InferenceService (what `kubectl create` and client-side apply send)."""
    info = InferenceService.crd
    return dict(client.CustomObjectsApi(api).create_namespaced_custom_object(
        info.group, info.version, ns, info.plural, doc, dry_run="All", field_validation=validation))


def _apply_refusal(api: client.ApiClient, doc: Spec, ns: str) -> str:
    """Server-side apply builds a typed patch from the schema, so a field the schema lacks fails the
    whole apply (500, "field not declared in schema") whatever the field validation asks."""
    try:
        _apply(api, doc, ns, strict=False)
    except ApiException as exc:
        return str(exc.body)
    raise AssertionError("server-side apply accepted fields the schema lacks")


@pytest.mark.integration
def test_stale_upstream_sample_loses_the_fields_seed_004_lacks(kube_api: client.ApiClient,
                                                               sample_namespaces: list[str]) -> None:
    """isvc/zai-org/glm-4-5v.yaml still writes a pre-v1beta1 spec (modelRef, replicas and scaleTarget at
    the top): seed 004 has none of them, nor has upstream's own CRD. Server-side apply refuses it;
    strict validation names all four; otherwise the apiserver prunes exactly those four."""
    path = SAMPLES / "isvc" / "zai-org" / "glm-4-5v.yaml"
    doc = next(d for d in _docs(path) if d["kind"] == "InferenceService")
    where = doc["metadata"]["namespace"]
    _ensure_namespace(kube_api, where, sample_namespaces)
    assert "field not declared in schema" in _apply_refusal(kube_api, doc, where)
    message = rejection(lambda: _create_dry(kube_api, doc, where, "Strict"))
    for field in ("spec.modelRef", "spec.minReplicas", "spec.maxReplicas", "spec.scaleTarget"):
        assert f'unknown field \\"{field}\\"' in message, message
    kept = _create_dry(kube_api, doc, where, "Ignore")
    assert sorted(_lost(doc, kept)) == [".spec.maxReplicas", ".spec.minReplicas", ".spec.modelRef",
                                        ".spec.scaleTarget"]


@pytest.mark.integration
def test_stale_upstream_sample_without_model_name_is_refused(kube_api: client.ApiClient, ns: str) -> None:
    """isvc/LGAI-EXAONE/exaone-3-5-7-8b-instruct-isvc.yaml spells the model as model.modelName (and the
    runtime inside it) and replicas under `deployment`: seed 004 has none of these and requires
    model.name, so the apiserver refuses it however it is sent."""
    doc = _docs(SAMPLES / "isvc" / "LGAI-EXAONE" / "exaone-3-5-7-8b-instruct-isvc.yaml")[0]
    assert "field not declared in schema" in _apply_refusal(kube_api, doc, ns)
    assert "spec.model.name: Required value" in rejection(lambda: _create_dry(kube_api, doc, ns, "Ignore"))


@pytest.mark.unit
def test_upstream_samples_validate_in_the_sdk() -> None:
    """Offline twin of the apply tests: the pydantic models accept every sample the apiserver keeps."""
    for path in MODEL_AND_RUNTIME_SAMPLES + ISVC_SAMPLES:
        for doc in _docs(path):
            if doc["kind"] != "Namespace":
                parsed = BY_KIND[doc["kind"]].model_validate(doc).to_api()
                assert _lost(doc, parsed) == [], path.name
