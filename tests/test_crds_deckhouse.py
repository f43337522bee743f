"""The real kube-apiserver enforces every rule of the ai.deckhouse.io CRDs (seed 000)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from servingops.api_models.base import KubeResource
from servingops.api_models.deckhouse import ClusterModel, Model, ModelCatalogSource
from tests.crd_helpers import create, manifest, new_namespace, rejection, replace

pytestmark = pytest.mark.integration

HF = "https://huggingface.co/acme/tiny-llama"
OLLAMA = "https://ollama.com/library/qwen2:0.5b"


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "deckhouse-crds")


def _model_ns(kind: type[KubeResource], ns: str) -> str | None:
    return ns if kind is Model else None


@pytest.mark.parametrize("kind", [Model, ClusterModel])
@pytest.mark.parametrize(
    "source",
    [
        {"url": HF},
        {"url": "https://hf.co/acme/tiny-llama/tree/v1.0"},
        {"url": "https://www.huggingface.co/acme/tiny"},
        {"url": OLLAMA},
        {"url": "https://ollama.com/library/llama3"},
        {"upload": {}},
        {"catalog": {"name": "llama-3.1-8b", "sourceName": "corp", "version": "2024.1"}},
    ],
)
def test_valid_sources_are_accepted(kube_api: client.ApiClient, ns: str, kind: type[KubeResource],
                                    source: dict[str, Any]) -> None:
    created = create(kube_api, kind, manifest(kind, {"source": source}), _model_ns(kind, ns))
    assert created["spec"]["source"] == source


def test_auth_secret_ref_is_accepted_for_hugging_face(kube_api: client.ApiClient, ns: str) -> None:
    source = {"url": HF, "authSecretRef": {"name": "hf-token"}}
    created = create(kube_api, Model, manifest(Model, {"source": source}), ns)
    assert created["spec"]["source"]["authSecretRef"] == {"name": "hf-token"}


@pytest.mark.parametrize("kind", [Model, ClusterModel])
@pytest.mark.parametrize(
    ("source", "complaint"),
    [
        ({}, "exactly one of url, upload or catalog must be set"),
        ({"url": HF, "upload": {}}, "exactly one of url, upload or catalog must be set"),
        ({"url": HF, "catalog": {"name": "x"}}, "exactly one of url, upload or catalog must be set"),
        ({"upload": {}, "catalog": {"name": "x"}}, "exactly one of url, upload or catalog must be set"),
        ({"url": "http://huggingface.co/acme/x"}, "spec.source.url"),
        ({"url": "https://github.com/acme/x"}, "spec.source.url"),
        ({"url": "https://ollama.com/library/"}, "spec.source.url"),
        ({"url": ""}, "spec.source.url"),
        ({"catalog": {"name": "Upper_Case"}}, "spec.source.catalog.name"),
        ({"catalog": {"name": "a" * 254}}, "spec.source.catalog.name"),
        ({"catalog": {"name": "ok", "sourceName": "-bad-"}}, "spec.source.catalog.sourceName"),
        ({"catalog": {"name": "ok", "version": "v" * 129}}, "spec.source.catalog.version"),
        ({"catalog": {"name": "ok", "version": ""}}, "spec.source.catalog.version"),
        ({"catalog": {"version": "1"}}, "spec.source.catalog.name: Required value"),
    ],
)
def test_invalid_sources_are_rejected(kube_api: client.ApiClient, ns: str, kind: type[KubeResource],
                                      source: dict[str, Any], complaint: str) -> None:
    body = manifest(kind, {"source": source})
    message = rejection(lambda: create(kube_api, kind, body, _model_ns(kind, ns)))
    assert complaint in message


def test_spec_is_required(kube_api: client.ApiClient, ns: str) -> None:
    body = manifest(Model, {})
    del body["spec"]
    assert "spec: Required value" in rejection(lambda: create(kube_api, Model, body, ns))


@pytest.mark.parametrize(
    ("source", "complaint"),
    [
        ({"url": OLLAMA, "authSecretRef": {"name": "tok"}}, "authSecretRef is supported only for Hugging Face"),
        ({"upload": {}, "authSecretRef": {"name": "tok"}}, "authSecretRef is supported only for Hugging Face"),
        ({"url": HF, "authSecretRef": {"name": ""}}, "spec.source.authSecretRef.name"),
    ],
)
def test_auth_secret_ref_rules(kube_api: client.ApiClient, ns: str, source: dict[str, Any], complaint: str) -> None:
    body = manifest(Model, {"source": source})
    assert complaint in rejection(lambda: create(kube_api, Model, body, ns))


def test_cluster_model_has_no_auth_secret_ref(kube_api: client.ApiClient) -> None:
    body = manifest(ClusterModel, {"source": {"url": HF, "authSecretRef": {"name": "tok"}}})
    message = rejection(lambda: create(kube_api, ClusterModel, body))
    assert "unknown field" in message and "spec.source.authSecretRef" in message


@pytest.mark.parametrize("kind", [Model, ClusterModel])
def test_source_is_immutable(kube_api: client.ApiClient, ns: str, kind: type[KubeResource]) -> None:
    created = create(kube_api, kind, manifest(kind, {"source": {"url": HF}}), _model_ns(kind, ns))
    created["spec"]["source"] = {"url": OLLAMA}
    message = rejection(lambda: replace(kube_api, kind, created, _model_ns(kind, ns)))
    assert "spec.source is immutable after create" in message


def _status(**fields: Any) -> dict[str, Any]:
    return {
        "phase": "Ready",
        "observedGeneration": 1,
        "progress": "100%",
        "artifact": {"kind": "OCI", "digest": "sha256:" + "a" * 64,
                     "mediaType": "application/vnd.cncf.model.manifest.v1+json", "sizeBytes": 1024},
        "resolved": {"format": "Safetensors", "architecture": "LlamaForCausalLM", "family": "llama",
                     "parameterCount": 1_100_000_000, "contextWindowTokens": 2048, "quantization": "bf16",
                     "supportedEndpointTypes": ["Chat", "TextGeneration"], "supportedFeatures": ["ToolCalling"],
                     "sourceCapabilities": {"provider": "HuggingFace", "tasks": ["text-generation"],
                                            "features": ["conversational"]}},
        "source": {"resolvedType": "HuggingFace", "resolvedRevision": "0123abcd"},
        "upload": {"secretName": "up", "secretNamespace": "ns", "expiresAt": "2026-11-30T00:00:00Z"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Published", "message": "ok",
                        "lastTransitionTime": "2026-11-29T00:00:00Z", "observedGeneration": 1}],
        **fields,
    }


@pytest.mark.parametrize("kind", [Model, ClusterModel])
def test_status_subresource_accepts_a_full_status(kube_api: client.ApiClient, ns: str,
                                                  kind: type[KubeResource]) -> None:
    created = create(kube_api, kind, manifest(kind, {"source": {"url": HF}}), _model_ns(kind, ns))
    created["status"] = _status()
    written = replace(kube_api, kind, created, _model_ns(kind, ns), status=True)
    assert written["status"] == _status()


@pytest.mark.parametrize(
    ("status", "complaint"),
    [
        (_status(phase="Done"), "status.phase"),
        (_status(artifact={"kind": "Tarball"}), "status.artifact.kind"),
        (_status(artifact={"sizeBytes": 0}), "status.artifact.sizeBytes"),
        (_status(resolved={"format": "ONNX"}), "status.resolved.format"),
        (_status(resolved={"parameterCount": 0}), "status.resolved.parameterCount"),
        (_status(resolved={"contextWindowTokens": 0}), "status.resolved.contextWindowTokens"),
        (_status(resolved={"supportedEndpointTypes": ["Chitchat"]}), "status.resolved.supportedEndpointTypes"),
        (_status(resolved={"supportedFeatures": ["Telepathy"]}), "status.resolved.supportedFeatures"),
        (_status(resolved={"sourceCapabilities": {"provider": "GitHub"}}), "provider"),
        (_status(resolved={"sourceCapabilities": {"tasks": [""]}}), "tasks"),
        (_status(resolved={"sourceCapabilities": {"features": ["f" * 129]}}), "features"),
        (_status(source={"resolvedType": "Git"}), "status.source.resolvedType"),
        (_status(source={"catalog": {"name": ""}}), "status.source.catalog.name"),
        (_status(upload={"secretName": ""}), "status.upload.secretName"),
        (_status(conditions=[{"type": "Ready", "status": "Maybe", "reason": "X", "message": "",
                              "lastTransitionTime": "2026-11-29T00:00:00Z"}]), "status.conditions[0].status"),
        (_status(conditions=[{"type": "Ready", "status": "True", "reason": "not camel case", "message": "",
                              "lastTransitionTime": "2026-11-29T00:00:00Z"}]), "status.conditions[0].reason"),
        (_status(conditions=[{"type": "Ready", "status": "True", "reason": "Ok", "message": "",
                              "lastTransitionTime": "2026-11-29T00:00:00Z", "observedGeneration": -1}]),
         "status.conditions[0].observedGeneration"),
    ],
)
def test_status_rules(kube_api: client.ApiClient, ns: str, status: dict[str, Any], complaint: str) -> None:
    created = create(kube_api, Model, manifest(Model, {"source": {"url": HF}}), ns)
    created["status"] = status
    assert complaint in rejection(lambda: replace(kube_api, Model, created, ns, status=True))


CATALOG_URL = "https://catalog.example.internal:8443/v1"


def test_catalog_source_defaults_to_catalog_type(kube_api: client.ApiClient) -> None:
    created = create(kube_api, ModelCatalogSource, manifest(ModelCatalogSource, {"url": CATALOG_URL}))
    assert created["spec"]["type"] == "Catalog"


@pytest.mark.parametrize(
    "spec",
    [
        {"url": CATALOG_URL, "credentialsSecretName": "catalog-creds", "caSecretName": "catalog-ca",
         "refreshInterval": "30m"},
        {"type": "HuggingFace", "huggingFace": {"tokenSecretName": "hf-token"},
         "policy": {"allowedOrganizations": ["meta-llama"], "allowedTags": ["gguf"], "maxIndexedEntries": 10000,
                    "maxMetadataBytes": 1024, "refreshBudget": "5m", "allowedRepositories": ["a/b"],
                    "allowedCollections": ["c"]}},
        {"type": "HuggingFace"},
    ],
)
def test_valid_catalog_sources(kube_api: client.ApiClient, spec: dict[str, Any]) -> None:
    created = create(kube_api, ModelCatalogSource, manifest(ModelCatalogSource, spec))
    assert created["spec"]["type"] == spec.get("type", "Catalog")


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({}, "url is required when type is Catalog"),
        ({"type": "Catalog"}, "url is required when type is Catalog"),
        ({"type": "HuggingFace", "url": CATALOG_URL}, "url is allowed only when type is Catalog"),
        ({"type": "HuggingFace", "credentialsSecretName": "c"}, "credentialsSecretName is used only by the Catalog"),
        ({"url": CATALOG_URL, "huggingFace": {}}, "huggingFace is allowed only when type is HuggingFace"),
        ({"type": "S3"}, "spec.type"),
        ({"url": "http://catalog.example/v1"}, "spec.url"),
        ({"url": "https://user@catalog/v1"}, "spec.url"),
        ({"url": "https://"}, "spec.url"),
        ({"url": CATALOG_URL, "caSecretName": "Bad_Name"}, "spec.caSecretName"),
        ({"url": CATALOG_URL, "credentialsSecretName": "x" * 254}, "spec.credentialsSecretName"),
        ({"type": "HuggingFace", "huggingFace": {"tokenSecretName": "UP"}}, "spec.huggingFace.tokenSecretName"),
        ({"type": "HuggingFace", "policy": {"maxIndexedEntries": 0}}, "spec.policy.maxIndexedEntries"),
        ({"type": "HuggingFace", "policy": {"maxIndexedEntries": 10001}}, "spec.policy.maxIndexedEntries"),
        ({"type": "HuggingFace", "policy": {"maxMetadataBytes": 1023}}, "spec.policy.maxMetadataBytes"),
        ({"type": "HuggingFace", "policy": {"maxMetadataBytes": 1048577}}, "spec.policy.maxMetadataBytes"),
        ({"type": "HuggingFace", "policy": {"allowedTags": ["t" * 65]}}, "spec.policy.allowedTags[0]"),
        ({"type": "HuggingFace", "policy": {"allowedRepositories": ["r" * 257]}}, "spec.policy.allowedRepositories[0]"),
        ({"type": "HuggingFace", "policy": {"allowedOrganizations": [""]}}, "spec.policy.allowedOrganizations[0]"),
        ({"type": "HuggingFace", "policy": {"allowedCollections": ["c" * 129]}}, "spec.policy.allowedCollections[0]"),
    ],
)
def test_invalid_catalog_sources(kube_api: client.ApiClient, spec: dict[str, Any], complaint: str) -> None:
    body = manifest(ModelCatalogSource, spec)
    assert complaint in rejection(lambda: create(kube_api, ModelCatalogSource, body))


def test_catalog_source_status(kube_api: client.ApiClient) -> None:
    created = create(kube_api, ModelCatalogSource, manifest(ModelCatalogSource, {"url": CATALOG_URL}))
    created["status"] = {"catalogRevision": "r1", "entryCount": 3, "observedGeneration": 1,
                         "lastSuccessfulRefreshTime": "2026-11-29T00:00:00Z",
                         "nextRetryTime": "2026-11-29T01:00:00Z"}
    assert replace(kube_api, ModelCatalogSource, created, status=True)["status"]["entryCount"] == 3
    created = create(kube_api, ModelCatalogSource, manifest(ModelCatalogSource, {"url": CATALOG_URL}))
    created["status"] = {"entryCount": -1}
    assert "status.entryCount" in rejection(lambda: replace(kube_api, ModelCatalogSource, created, status=True))
