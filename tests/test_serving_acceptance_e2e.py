"""Issue 11's acceptance, end to end with every part a process under the chart's identities (worker,
bridge, two node agents): an hf:// ClusterBaseModel is imported into the registry, its empty spec
fields filled, its copy made Ready on the node it selects; an InferenceService naming that model and
no runtime gets the runtime selected for it, its pods land on that node with the model mounted, and a
runtime change rolls out as a canary of the new revision."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devstack import webhook as local_webhook
from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from servingops.api_models.ome.model_keys import ModelKey, ModelKind
from testkit.node_agent import (
    TEST_TAINT,
    agent_process,
    delete_model,
    delete_node,
    make_node,
    model_crds,
    unique,
)
from testkit.waiting import wait_until
from tests.fixtures.hub import HubRepos
from tests.support.rollout_stack import route_weights, worker_and_bridge

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
GROUP, VERSION = "ome.io", "v1beta1"
KINDS = "Model,BaseModel,ClusterBaseModel,FineTunedWeight,InferenceService,ServingRuntime,ClusterServingRuntime"


@pytest.fixture(scope="module")
def serving_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                  oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with model_crds(kube_api), worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server,
                                                 stack_logs, tmp_path_factory.mktemp("spool"), "accept", KINDS,
                                                 identities=chart_identities) as stack:
        yield stack


def test_hf_model_to_selected_runtime_to_pods_on_its_node_to_a_canary(
        kube_api: client.ApiClient, serving_stack: tuple[str, ManagedProcess], hub_repos: HubRepos,
        chart_identities: Identities, oci_registry: OciRegistry, stack_logs: Path, tmp_path: Path) -> None:
    ns, worker = serving_stack
    custom, core, apps = client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    assert chart_identities.agent is not None
    nodes = {which: unique(f"acc-{which}") for which in ("a", "b")}
    agents = []
    model, runtime = unique("llama"), unique("srt")
    path = f"/mnt/models/{model}"
    try:
        for which, node in nodes.items():
            make_node(kube_api, node, {"pool": f"acc-{which}"})
            agents.append(agent_process(f"agent-{node}", node, tmp_path / node, chart_identities.namespace,
                                        chart_identities.agent, oci_registry.address, stack_logs))
        repo = hub_repos.safetensors("acc-llama")
        custom.create_cluster_custom_object(GROUP, VERSION, "clusterbasemodels", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterBaseModel", "metadata": {"name": model},
            "spec": {"storage": {"storageUri": f"hf://{repo.repo_id}", "path": path,
                                 "nodeSelector": {"pool": "acc-a"}}}})

        def base() -> dict[str, Any]:
            return dict(custom.get_cluster_custom_object(GROUP, VERSION, "clusterbasemodels", model))

        ready = wait_until("the model imported and its copy Ready on node a",
                      lambda: (b := base()).get("status", {}).get("state") == "Ready" and b, worker, timeout=240)
        assert ready["status"]["nodesReady"] == [nodes["a"]]
        filled = ready["spec"]
        assert (tmp_path / nodes["a"] / path.lstrip("/") / "config.json").is_file()

        # A runtime written for the model as the import described it (its filled spec fields), that
        # tolerates the test nodes' taint; plus one that cannot fit, so selection has a choice to make.
        fmt = {"modelFormat": filled["modelFormat"], "modelFramework": filled["modelFramework"],
               "modelArchitecture": filled["modelArchitecture"], "autoSelect": True, "priority": 2}

        def runtime_body(name: str, image: str, **extra: Any) -> dict[str, Any]:
            return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterServingRuntime", "metadata": {"name": name},
                    "spec": {"supportedModelFormats": [{**fmt, **extra}],
                             "engineConfig": {"tolerations": [{"key": TEST_TAINT["key"], "operator": "Exists"}],
                                              "runner": {"name": "ome-container", "image": image,
                                                         "args": ["--model-path", "$(MODEL_PATH)"],
                                                         "ports": [{"containerPort": 8080}]}}}}

        custom.create_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes",
                                            runtime_body(runtime, "lmsysorg/sglang:v0.5.5"))
        custom.create_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", runtime_body(
            f"{runtime}-gemma", "other:1", modelArchitecture="GemmaForCausalLM"))
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": "chat"},
            "spec": {"model": {"name": model}, "engine": {"minReplicas": 2, "maxReplicas": 2},
                     "rollout": {"groups": [{"components": ["engine"], "canary": {
                         "steps": [{"capacity": "50%", "traffic": 50, "pause": {"duration": "20s"}},
                                   {"capacity": "100%", "traffic": 100}], "scaleDownDelaySeconds": 1}}]}}})

        first = wait_until("served at 100%", lambda: (w := route_weights(kube_api, ns, "chat-engine")) and
                      list(w.values()) == [100] and w, worker, timeout=180)
        [first_rev] = first
        template = apps.read_namespaced_deployment(first_rev, ns).spec.template.spec
        assert template.containers[0].image == "lmsysorg/sglang:v0.5.5"  # the runtime that fits was selected
        assert {(e.name, e.value) for e in template.containers[0].env} >= {("MODEL_PATH", path)}
        label = ModelKey(ModelKind.CLUSTER_BASE_MODEL, "", model).label_key
        assert template.node_selector == {label: "Ready"}
        pods = wait_until("two Ready pods", lambda: (p := [x for x in core.list_namespaced_pod(ns).items
                                                       if x.metadata.name.startswith(first_rev)
                                                       and x.status.phase == "Running"]) and len(p) == 2 and p,
                     worker, timeout=120)
        assert {p.spec.node_name for p in pods} == {nodes["a"]}, "a pod ran where the model has no copy"

        # The runtime changes: a new revision, rolled out as the group's canary.
        custom.patch_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", runtime, {
            "spec": {"engineConfig": {"runner": {"image": "lmsysorg/sglang:v0.5.6"}}}})
        split = wait_until("the canary at 50%", lambda: (w := route_weights(kube_api, ns, "chat-engine")) and
                      sorted(w.values()) == [50, 50] and w, worker, timeout=120)
        [canary] = [r for r in split if r != first_rev]
        assert apps.read_namespaced_deployment(canary, ns).spec.template.spec.containers[0].image == \
            "lmsysorg/sglang:v0.5.6"
        wait_until("the canary completed", lambda: route_weights(kube_api, ns, "chat-engine") == {canary: 100},
              worker, timeout=120)
    finally:
        try:
            custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "chat")
        except client.exceptions.ApiException:
            pass
        for name in (runtime, f"{runtime}-gemma"):
            try:
                custom.delete_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", name)
            except client.exceptions.ApiException:
                pass
        delete_model(kube_api, ModelKind.CLUSTER_BASE_MODEL, model)

        def model_gone() -> bool:
            try:
                custom.get_cluster_custom_object(GROUP, VERSION, "clusterbasemodels", model)
            except client.exceptions.ApiException:
                return True
            return False

        # Best effort (cleanup): the agents are stopped after at most a minute, the model gone or not.
        with contextlib.suppress(AssertionError):
            wait_until("the ClusterBaseModel deleted", model_gone, worker, timeout=60)
        for agent in agents:
            agent.stop()
        for node in nodes.values():
            delete_node(kube_api, node)


def test_an_imported_deckhouse_model_is_served_by_reference_and_mounted_by_the_webhook(
        kube_api: client.ApiClient, kube_cluster: LocalKubeCluster, serving_stack: tuple[str, ManagedProcess],
        hub_repos: HubRepos, chart_identities: Identities, oci_registry: OciRegistry, tmp_path: Path) -> None:
    """The same stack plus the model webhook as a process: a Deckhouse Model imported for real (the
    import workflow, the Hub stand-in, the registry) serves an InferenceService by reference with its
    artifact as an image volume, and an annotated Deployment gets the same artifact from the webhook."""
    ns, worker = serving_stack
    custom, apps = client.CustomObjectsApi(kube_api), client.AppsV1Api(kube_api)
    assert chart_identities.webhook is not None
    label = {"servingops.io/acceptance": unique("ns")}
    client.CoreV1Api(kube_api).patch_namespace(ns, {"metadata": {"labels": label}})
    repo = hub_repos.safetensors("acc-dh")
    runtime = unique("srt-dh")
    custom.create_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models", {
        "apiVersion": "ai.deckhouse.io/v1alpha1", "kind": "Model", "metadata": {"name": "tiny"},
        "spec": {"source": {"url": f"https://huggingface.co/{repo.repo_id}"}}})
    with local_webhook.running(kube_api, chart_identities.webhook, tmp_path / "webhook", kube_cluster.log_dir,
                               registry=oci_registry.address, name=f"acceptance-{label['servingops.io/acceptance']}",
                               namespace_selector={"matchLabels": label}):
        try:
            model = wait_until("the Deckhouse Model imported", lambda: (m := custom.get_namespaced_custom_object(
                "ai.deckhouse.io", "v1alpha1", ns, "models", "tiny")).get("status", {}).get("phase") == "Ready"
                and m, worker, timeout=240)
            digest = model["status"]["artifact"]["digest"]
            resolved = model["status"]["resolved"]
            artifact = f"{oci_registry.address}/servingops/models@{digest}"
            custom.create_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterServingRuntime", "metadata": {"name": runtime},
                "spec": {"supportedModelFormats": [{
                    "modelFormat": {"name": "safetensors"}, "modelFramework": {"name": "transformers"},
                    "modelArchitecture": resolved["architecture"], "autoSelect": True}],
                    "engineConfig": {"runner": {"name": "ome-container", "image": "vllm/vllm-openai:v0.10",
                                                "ports": [{"containerPort": 8000}]}}}})
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": "dh"},
                "spec": {"model": {"name": "tiny", "kind": "Model", "apiGroup": "ai.deckhouse.io"},
                         "engine": {"minReplicas": 1, "maxReplicas": 1}}})
            served = wait_until("served by reference", lambda: (w := route_weights(kube_api, ns, "dh-engine")) and
                           list(w.values()) == [100] and w, worker, timeout=180)
            [revision] = served
            pod = apps.read_namespaced_deployment(revision, ns).spec.template.spec
            assert [v.image.reference for v in pod.volumes if v.image is not None] == [artifact]
            assert pod.containers[0].image == "vllm/vllm-openai:v0.10"  # the runtime selected for it

            labels = {"app": "annotated"}
            apps.create_namespaced_deployment(ns, {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "annotated"},
                "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                    "metadata": {"labels": labels, "annotations": {"ai.deckhouse.io/model": "tiny"}},
                    "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}})
            template = apps.read_namespaced_deployment("annotated", ns).spec.template.spec
            assert [v.image.reference for v in template.volumes if v.image is not None] == [artifact]
            assert {(e.name, e.value) for e in template.containers[0].env} >= {("MODEL_PATH", "/models/tiny")}
        finally:
            for delete in (
                lambda: custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "dh"),
                lambda: custom.delete_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", runtime),
                lambda: apps.delete_namespaced_deployment("annotated", ns),
                lambda: custom.delete_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models", "tiny"),
            ):
                try:
                    delete()
                except client.exceptions.ApiException:
                    pass
