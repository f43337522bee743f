"""The base model delivery activities against the session's real apiserver and registry, in Temporal's
activity environment: read, fill_spec (only empty fields, the generation it leaves), annotate,
node_reports (report ConfigMaps as the agent writes them, a deleted node's ignored), check_pvc,
resolve_tag, artifact_referenced over the annotated kinds, and the Hugging Face token read from the
controller namespace under storage.parameters.secretKey."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devstack.kube import LocalKubeCluster
from devstack.services import OciRegistry
from servingops.activities.basemodels.activities import BaseModelActivities
from servingops.activities.basemodels.metadata import derive
from servingops.activities.basemodels.types import (
    AnnotateInput,
    FillSpecInput,
    NodeReportsInput,
    PvcInput,
    ResolveTagInput,
)
from servingops.activities.kubernetes import ArtifactReferences, KubernetesActivities
from servingops.activities.oci.activities import RegistryTarget
from servingops.activities.sources.activities import SourceActivities
from servingops.api_models.ome.model_keys import STATUS_CONFIGMAP_LABEL, ModelKey, ModelKind
from servingops.api_models.refs import ObjectRef
from servingops.clients.oci.registry_client import ModelRegistry
from testkit.node_agent import (
    REPOSITORY,
    create_model,
    delete_model,
    delete_node,
    make_node,
    model_crds,
    model_object,
    push_artifact,
    unique,
    write_content,
)
from tests.crd_helpers import new_namespace

pytestmark = pytest.mark.integration


def _run(fn: Any, *args: Any) -> Any:
    return ActivityEnvironment().run(fn, *args)


@pytest.fixture(scope="module")
def crds(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient) -> Iterator[list[str]]:
    with model_crds(kube_api) as made:
        yield made


@pytest.fixture(scope="module")
def controller_ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "bm-controller")


@pytest.fixture
def acts(kube_api: client.ApiClient, controller_ns: str) -> BaseModelActivities:
    return BaseModelActivities(kube_api, controller_ns)


def ref_of(obj: dict[str, Any]) -> ObjectRef:
    kind = ModelKind(obj["kind"])
    return ObjectRef(group="ome.io", version="v1beta1", plural=kind.plural, kind=kind.value,
                     name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"),
                     uid=obj["metadata"]["uid"])


def test_read_fill_and_annotate(kube_api: client.ApiClient, crds: list[str], acts: BaseModelActivities,
                                controller_ns: str) -> None:
    name = unique("cbm")
    body = model_object(ModelKind.CLUSTER_BASE_MODEL, name, "", {"storageUri": "hf://acme/tiny", "key": "hf"})
    body["spec"]["modelArchitecture"] = "Mine"
    ref = ref_of(create_model(kube_api, body))
    try:
        view = _run(acts.read, ref)
        assert (view.generation, view.deleting, view.storage["storageUri"], view.artifact) == (
            1, False, "hf://acme/tiny", None)
        assert view.secret_namespace == controller_ns and view.fills_metadata
        derived = derive("Safetensors", {"architecture": "LlamaForCausalLM", "family": "llama",
                                         "parameterCount": 7_000_000_000, "contextWindowTokens": 4096})
        filled = _run(acts.fill_spec, FillSpecInput(ref=ref, derived=derived))
        assert filled.generation == 2
        assert filled.filled == ["maxTokens", "modelFormat", "modelFramework", "modelParameterSize", "modelType"]
        again = _run(acts.fill_spec, FillSpecInput(ref=ref, derived=derived))
        assert (again.generation, again.filled) == (2, [])  # nothing left to fill: no write, no new generation
        spec = client.CustomObjectsApi(kube_api).get_cluster_custom_object(
            "ome.io", "v1beta1", "clusterbasemodels", name)["spec"]
        assert spec["modelArchitecture"] == "Mine" and spec["modelType"] == "llama"
        assert spec["modelParameterSize"] == "7B" and spec["maxTokens"] == 4096
        # The user's format name kept, the version added (operator and weight are the CRD's defaults).
        assert (spec["modelFormat"]["name"], spec["modelFormat"]["version"]) == ("safetensors", "1.0.0")
        artifact = f"registry.test/models@sha256:{'a' * 64}"
        assert _run(acts.annotate, AnnotateInput(ref=ref, value=artifact))
        assert _run(acts.read, ref).artifact == artifact
        assert _run(acts.read, ref).generation == 2  # an annotation moves no generation
        _run(acts.annotate, AnnotateInput(ref=ref, value=None))
        assert _run(acts.read, ref).artifact is None
    finally:
        delete_model(kube_api, ModelKind.CLUSTER_BASE_MODEL, name)
    assert _run(acts.read, ref) is None


def test_node_reports_as_the_agent_writes_them(kube_api: client.ApiClient, crds: list[str],
                                               controller_ns: str) -> None:
    acts = BaseModelActivities(kube_api, controller_ns)
    core = client.CoreV1Api(kube_api)
    live, gone = unique("bm-node"), unique("bm-gone")
    make_node(kube_api, live, {})
    model = ModelKey(ModelKind.BASE_MODEL, "team-a", "llama")
    other = ModelKey(ModelKind.CLUSTER_BASE_MODEL, "", "llama")

    def report_map(node: str, status: str) -> client.V1ConfigMap:
        entry = {"name": "llama", "kind": "BaseModel", "namespace": "team-a", "status": status,
                 "digest": "sha256:" + "b" * 64, "message": "", "time": "2026-01-01T00:00:00Z"}
        cluster_entry = {**entry, "kind": "ClusterBaseModel", "namespace": "", "status": "Failed"}
        return client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=node, namespace=controller_ns, labels={STATUS_CONFIGMAP_LABEL: "true"}),
            data={model.configmap_key: json.dumps(entry), other.configmap_key: json.dumps(cluster_entry)})

    try:
        core.create_namespaced_config_map(controller_ns, report_map(live, "Ready"))
        core.create_namespaced_config_map(controller_ns, report_map(gone, "Ready"))
        entries = _run(acts.node_reports, NodeReportsInput(kind="BaseModel", namespace="team-a", name="llama"))
        assert [(e.node, e.status, e.digest) for e in entries] == [(live, "Ready", "sha256:" + "b" * 64)]
        cluster = _run(acts.node_reports, NodeReportsInput(kind="ClusterBaseModel", namespace=None, name="llama"))
        assert [(e.node, e.status) for e in cluster] == [(live, "Failed")]
        assert _run(acts.node_reports, NodeReportsInput(kind="FineTunedWeight", namespace=None, name="llama")) == []
    finally:
        delete_node(kube_api, live)
        for node in (live, gone):
            try:
                core.delete_namespaced_config_map(node, controller_ns)
            except ApiException:
                pass


def test_check_pvc(kube_api: client.ApiClient, acts: BaseModelActivities) -> None:
    ns = new_namespace(kube_api, "bm-pvc")
    assert not _run(acts.check_pvc, PvcInput(namespace=ns, name="weights")).found
    client.CoreV1Api(kube_api).create_namespaced_persistent_volume_claim(ns, client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="weights"),
        spec=client.V1PersistentVolumeClaimSpec(access_modes=["ReadOnlyMany"],
                                                resources=client.V1VolumeResourceRequirements(
                                                    requests={"storage": "1Gi"}))))
    found = _run(acts.check_pvc, PvcInput(namespace=ns, name="weights"))
    assert found.found and found.phase == "Pending"  # no provisioner in the local cluster: never Bound


def test_resolve_tag(oci_registry: OciRegistry, acts: BaseModelActivities, tmp_path: Path) -> None:
    reference = push_artifact(oci_registry.address, {"config.json": write_content(tmp_path / "c", 64, 7)},
                              name=unique("bm-tag"))
    digest = reference.rsplit("@", 1)[1]
    tag = unique("v")
    with ModelRegistry(oci_registry.address, insecure=True) as registry:
        document = registry.fetch_manifest(REPOSITORY, digest)
        assert document is not None
        registry.put_manifest(REPOSITORY, tag, document.raw, media_type=document.media_type)
    target = RegistryTarget(address=oci_registry.address, repository=REPOSITORY, insecure=True)
    assert _run(acts.resolve_tag, ResolveTagInput(target=target, tag=tag)) == digest
    with pytest.raises(ApplicationError) as missing:
        _run(acts.resolve_tag, ResolveTagInput(target=target, tag=unique("absent")))
    assert missing.value.type == "SourceNotFound" and missing.value.non_retryable


def test_an_annotated_model_holds_the_artifact(kube_api: client.ApiClient, crds: list[str]) -> None:
    digest = f"sha256:{uuid.uuid4().hex * 2}"
    name = unique("holder")
    obj = create_model(kube_api, model_object(ModelKind.CLUSTER_BASE_MODEL, name, "", {"storageUri": "hf://a/b"},
                                              artifact=f"registry.test/models@{digest}"))
    kube = KubernetesActivities(kube_api)
    try:
        assert _run(kube.artifact_referenced, ArtifactReferences(digest=digest, except_uid="someone-else"))
        assert not _run(kube.artifact_referenced, ArtifactReferences(digest=digest,
                                                                     except_uid=obj["metadata"]["uid"]))
    finally:
        delete_model(kube_api, ModelKind.CLUSTER_BASE_MODEL, name)


def test_a_cluster_models_token_is_read_from_the_controller_namespace(kube_api: client.ApiClient,
                                                                      controller_ns: str) -> None:
    token = f"hf_{uuid.uuid4().hex}"
    secret = unique("hf")
    client.CoreV1Api(kube_api).create_namespaced_secret(controller_ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name=secret), data={"hf": base64.b64encode(token.encode()).decode()}))
    sources = SourceActivities(kube_api)
    cluster_ref = ObjectRef(group="ome.io", version="v1beta1", plural="clusterbasemodels", kind="ClusterBaseModel",
                            name="m", namespace=None, uid="u")
    assert sources._token(cluster_ref, secret, controller_ns, "hf") == token
    with pytest.raises(ApplicationError) as wrong_key:
        sources._token(cluster_ref, secret, controller_ns, "token")
    assert wrong_key.value.type == "AuthSecretInvalid" and token not in str(wrong_key.value)
    with pytest.raises(ApplicationError) as no_namespace:
        sources._token(cluster_ref, secret)  # a ClusterModel's path: no namespace to read from
    assert no_namespace.value.type == "AuthSecretNotFound"
