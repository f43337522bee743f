"""Base model delivery end to end, every part a process under the chart's identities: worker, bridge and
two node agents (one per kwok node of the test's own, each with a directory as its disk).

An hf:// ClusterBaseModel selecting one node by label is imported from the Hub stand-in into the real
registry by the import steps ModelWorkflow uses, its empty spec fields are filled from the inspection,
it is annotated with the artifact, the agent of the selected node copies it (the other does not), and
status.nodesReady / state follow the agent's report. A ClusterBaseModel with an unsupported scheme ends
Failed with its condition and Warning Event. Deleting the model removes the artifact from the registry
and the finalizer; the agent removes the copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from servingops.api_models.ome.model_keys import ARTIFACT_ANNOTATION, ModelKey, ModelKind
from servingops.clients.oci.registry_client import ModelRegistry
from testkit.node_agent import (
    agent_process,
    delete_model,
    delete_node,
    make_node,
    model_crds,
    node_labels,
    unique,
)
from testkit.waiting import wait_until
from tests.fixtures.hub import HubRepos
from tests.support.rollout_stack import worker_and_bridge

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]
GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "clusterbasemodels"


@pytest.fixture(scope="module")
def crds(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient) -> Iterator[list[str]]:
    with model_crds(kube_api) as made:
        yield made


@pytest.fixture(scope="module")
def delivery_stack(crds: list[str], kube_cluster: LocalKubeCluster, kube_api: client.ApiClient,
                   temporal_server: TemporalDevServer, oci_registry: OciRegistry, hub_server: HubServer,
                   stack_logs: Path, chart_identities: Identities,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "basemodel",
                           "BaseModel,ClusterBaseModel,FineTunedWeight", identities=chart_identities) as stack:
        yield stack


@pytest.fixture
def agents(kube_api: client.ApiClient, chart_identities: Identities, oci_registry: OciRegistry, stack_logs: Path,
           tmp_path: Path) -> Iterator[dict[str, tuple[str, Path, ManagedProcess]]]:
    assert chart_identities.agent is not None
    made: dict[str, tuple[str, Path, ManagedProcess]] = {}
    try:
        for which, pool in (("a", "gpu-a"), ("b", "gpu-b")):
            node = unique(f"bm-{which}")
            make_node(kube_api, node, {"pool": pool})
            root = tmp_path / f"node-{which}"
            made[which] = (node, root, agent_process(f"agent-{node}", node, root, chart_identities.namespace,
                                                     chart_identities.agent, oci_registry.address, stack_logs))
        yield made
    finally:
        for node, _, proc in made.values():
            proc.stop()
            delete_node(kube_api, node)


def _get(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    try:
        return dict(client.CustomObjectsApi(api).get_cluster_custom_object(GROUP, VERSION, PLURAL, name))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _create(api: client.ApiClient, name: str, storage: dict[str, Any], **spec: Any) -> None:
    client.CustomObjectsApi(api).create_cluster_custom_object(GROUP, VERSION, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterBaseModel", "metadata": {"name": name},
        "spec": {"storage": storage, **spec}})


def test_hf_cluster_base_model_is_imported_annotated_and_copied_to_the_selected_node(
        kube_api: client.ApiClient, delivery_stack: tuple[str, ManagedProcess], hub_repos: HubRepos,
        oci_registry: OciRegistry, agents: dict[str, tuple[str, Path, ManagedProcess]]) -> None:
    _, worker = delivery_stack
    repo = hub_repos.safetensors("bm-llama")
    name = unique("llama")
    path = f"/mnt/models/{name}"
    (node_a, root_a, agent_a), (_, root_b, agent_b) = agents["a"], agents["b"]
    _create(kube_api, name, {"storageUri": f"hf://{repo.repo_id}", "path": path, "nodeSelector": {"pool": "gpu-a"}},
            modelArchitecture="UserSaysSo")
    key = ModelKey(ModelKind.CLUSTER_BASE_MODEL, "", name)
    try:
        annotated = wait_until("the artifact annotation",
                          lambda: ((_get(kube_api, name) or {}).get("metadata", {}).get("annotations") or {}).get(
                              ARTIFACT_ANNOTATION), worker, timeout=180)
        registry, _, digest = annotated.rpartition("@")
        assert registry.startswith(oci_registry.address + "/") and digest.startswith("sha256:")
        with ModelRegistry(oci_registry.address, insecure=True) as reg:
            assert reg.fetch_manifest(registry.removeprefix(oci_registry.address + "/"), digest) is not None

        obj = wait_until("Ready with node a", lambda: (lambda o: o if (o.get("status") or {}).get("state") == "Ready"
                                                  else None)(_get(kube_api, name) or {}), worker, timeout=120)
        status, spec = obj["status"], obj["spec"]
        assert status["nodesReady"] == [node_a] and status.get("nodesFailed") == []
        assert status["observedGeneration"] == obj["metadata"]["generation"] == 2  # our one spec write
        assert status["lastReconcileTime"]
        assert spec["modelArchitecture"] == "UserSaysSo"  # the user's value kept
        assert spec["modelType"] and spec["modelFormat"]["name"] == "safetensors"
        assert spec["modelFramework"]["name"] == "transformers" and spec["modelParameterSize"]
        assert (root_a / path.lstrip("/") / "config.json").is_file()
        assert not (root_b / path.lstrip("/")).exists()
        assert node_labels(kube_api, node_a).get(key.label_key) == "Ready"
        assert obj["metadata"]["finalizers"] == ["servingops.io/basemodel-cleanup"]

        client.CustomObjectsApi(kube_api).delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        wait_until("the object gone (finalizer removed)", lambda: _get(kube_api, name) is None, worker)
        with ModelRegistry(oci_registry.address, insecure=True) as reg:
            assert reg.fetch_manifest(registry.removeprefix(oci_registry.address + "/"), digest) is None
        wait_until("node a's copy removed", lambda: not (root_a / path.lstrip("/") / "config.json").exists(), agent_a)
        assert agent_a.alive and agent_b.alive
    finally:
        delete_model(kube_api, ModelKind.CLUSTER_BASE_MODEL, name)


def test_an_unsupported_scheme_is_failed_with_a_condition_and_an_event(
        kube_api: client.ApiClient, delivery_stack: tuple[str, ManagedProcess]) -> None:
    _, worker = delivery_stack
    name = unique("s3-model")
    _create(kube_api, name, {"storageUri": "s3://bucket/llama"})
    try:
        obj = wait_until("Failed", lambda: (lambda o: o if (o.get("status") or {}).get("state") == "Failed" else None)(
            _get(kube_api, name) or {}), worker)
        ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "UnsupportedStorage")
        assert "s3://" in ready["message"] and "hf://" in ready["message"]
        events = wait_until("the Warning Event", lambda: [
            e for e in client.CoreV1Api(kube_api).list_event_for_all_namespaces(
                field_selector=f"involvedObject.name={name},reason=UnsupportedStorage").items], worker)
        assert events[0].type == "Warning"
    finally:
        delete_model(kube_api, ModelKind.CLUSTER_BASE_MODEL, name)
        wait_until("deleted", lambda: _get(kube_api, name) is None, worker)


def test_a_private_repo_is_imported_with_the_token_of_the_controller_namespace(
        kube_api: client.ApiClient, delivery_stack: tuple[str, ManagedProcess], hub_repos: HubRepos,
        chart_identities: Identities) -> None:
    """storage.key names a Secret of the controller namespace (a ClusterBaseModel has no namespace of its
    own) and storage.parameters.secretKey the key in it; without the key the same repo is refused."""
    _, worker = delivery_stack
    token = f"hf_{unique('tok').replace('-', '')}"
    repo = hub_repos.safetensors("bm-private", private=True, tokens=[token])
    secret = unique("hf-token")
    client.CoreV1Api(kube_api).create_namespaced_secret(chart_identities.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=secret), string_data={"my-token": token}))
    with_key, without = unique("private"), unique("private-anon")
    _create(kube_api, with_key, {"storageUri": f"hf://{repo.repo_id}", "key": secret,
                                 "parameters": {"secretKey": "my-token"}})
    _create(kube_api, without, {"storageUri": f"hf://{repo.repo_id}"})
    try:
        wait_until("the private repo imported and annotated",
              lambda: ((_get(kube_api, with_key) or {}).get("metadata", {}).get("annotations") or {}).get(
                  ARTIFACT_ANNOTATION), worker, timeout=180)
        refused = wait_until("the anonymous import Failed", lambda: (lambda o: o if (o.get("status") or {}).get(
            "state") == "Failed" else None)(_get(kube_api, without) or {}), worker, timeout=180)
        ready = next(c for c in refused["status"]["conditions"] if c["type"] == "Ready")
        assert ready["reason"] in ("SourceNotFound", "SourceAccessDenied"), ready
        assert token not in worker.log_path.read_text()
    finally:
        for name in (with_key, without):
            delete_model(kube_api, ModelKind.CLUSTER_BASE_MODEL, name)
        for name in (with_key, without):
            wait_until(f"{name} deleted", lambda name=name: _get(kube_api, name) is None, worker)
        client.CoreV1Api(kube_api).delete_namespaced_secret(secret, chart_identities.namespace)
