"""Serving by reference on the local cluster, worker and bridge as processes under the chart's
identities: an InferenceService that names a ClusterBaseModel and a ClusterServingRuntime (upstream
OME's usual shape) is held, with a condition and a Warning saying why, until both exist and the
model has a Ready copy; then its pods render from the runtime with the model mounted, and a runtime
change rolls out as a new revision.

The model's node copy is stood in for here (its status and node label written by the test, as the
delivery workflow and the node agent would): tests/test_node_agent_*.py prove the agent, the
delivery workflow its own tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from servingops.api_models.ome.model_keys import ModelKey, ModelKind
from testkit.waiting import wait_until
from tests.support.rollout_stack import route_weights, worker_and_bridge

pytestmark = pytest.mark.e2e

GROUP, VERSION = "ome.io", "v1beta1"


@pytest.fixture(scope="module")
def reference_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                    oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "byref", "InferenceService",
                           identities=chart_identities) as stack:
        yield stack


def model_body(name: str, path: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterBaseModel", "metadata": {"name": name},
            "spec": {"vendor": "meta", "modelFormat": {"name": "safetensors", "version": "1.0.0"},
                     "modelFramework": {"name": "transformers", "version": "4.45.0"},
                     "modelArchitecture": "LlamaForCausalLM", "modelParameterSize": "1.24B",
                     "storage": {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct", "path": path}}}


def runtime_body(name: str, image: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterServingRuntime", "metadata": {"name": name},
            "spec": {"supportedModelFormats": [{"modelFormat": {"name": "safetensors", "version": "1.0.0"},
                                                "modelFramework": {"name": "transformers", "version": "4.45.0"},
                                                "modelArchitecture": "LlamaForCausalLM", "autoSelect": True,
                                                "priority": 1}],
                     "modelSizeRange": {"min": "500M", "max": "2B"},
                     "engineConfig": {"runner": {
                         "name": "ome-container", "image": image,
                         "command": ["python3", "-m", "sglang.launch_server", "--model-path", "$(MODEL_PATH)"],
                         "ports": [{"containerPort": 8080, "name": "http1"}],
                         "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}}}}


def test_held_until_model_and_runtime_exist_then_rendered_then_rolled(
        kube_api: client.ApiClient, reference_stack: tuple[str, ManagedProcess],
        kube_cluster: LocalKubeCluster) -> None:
    ns, worker = reference_stack
    custom, core, apps = client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    suffix = uuid.uuid4().hex[:6]
    model, runtime, path = f"llama-{suffix}", f"srt-{suffix}", f"/raid/models/llama-{suffix}"
    label = ModelKey(ModelKind.CLUSTER_BASE_MODEL, "", model).label_key
    node = kube_cluster.node_names[0]

    def condition(kind: str) -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "chat")
        return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})

    def model_status() -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "chat")
        return dict((obj.get("status") or {}).get("modelStatus") or {})

    def held(reason: str) -> bool:
        return condition("Ready").get("reason") == reason and condition("RolloutReady").get("reason") == reason

    def warned(reason: str) -> bool:
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name=chat,reason={reason}").items
        return any(e.type == "Warning" for e in events)

    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": "chat"},
        "spec": {"model": {"name": model, "overlays": [{"name": f"draft-{suffix}"}]},
                 "engine": {"minReplicas": 1, "maxReplicas": 1}}})
    try:
        wait_until("held: ModelNotFound", lambda: held("ModelNotFound") and warned("ModelNotFound"), worker)
        assert f"ClusterBaseModel {model} does not exist" in condition("Ready")["message"]
        blocked = model_status()
        assert (blocked["transitionStatus"], blocked["lastFailureInfo"]["reason"]) == (
            "BlockedByFailedLoad", "BaseModelNotFound")

        custom.create_cluster_custom_object(GROUP, VERSION, "clusterbasemodels", model_body(model, path))
        wait_until("held: ModelNotReady", lambda: held("ModelNotReady"), worker)

        # The copy is Ready on one node (what the delivery workflow and the agent report).
        custom.patch_cluster_custom_object_status(GROUP, VERSION, "clusterbasemodels", model,
                                                  {"status": {"state": "Ready", "nodesReady": [node]}})
        core.patch_node(node, {"metadata": {"labels": {label: "Ready"}}})
        wait_until("held: NoRuntimeMatches", lambda: held("NoRuntimeMatches"), worker)
        # Runtimes other tests of the session left may be listed, each with why it does not fit.
        assert condition("Ready")["message"].startswith(f"no runtime can serve ClusterBaseModel {model} (format "
                                                        "safetensors 1.0.0, framework transformers")

        custom.create_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes",
                                            runtime_body(runtime, "lmsysorg/sglang:v0.5.5"))
        first = wait_until("served at 100%", lambda: (
            (w := route_weights(kube_api, ns, "chat-engine")) and list(w.values()) == [100] and w), worker,
            timeout=180)
        [first_rev] = first
        pod_template = apps.read_namespaced_deployment(first_rev, ns).spec.template
        # Upstream runtimes' routers discover engines by these labels.
        upstream = {"component": "engine", "ome.io/inferenceservice": "chat"}
        assert upstream.items() <= pod_template.metadata.labels.items()
        template = pod_template.spec
        [container] = template.containers
        assert container.image == "lmsysorg/sglang:v0.5.5"
        assert container.command[:3] == ["python3", "-m", "sglang.launch_server"]
        assert {(e.name, e.value) for e in container.env} >= {("MODEL_PATH", path)}
        assert [(m.mount_path, m.read_only) for m in container.volume_mounts] == [(path, True)]
        assert [v.host_path.path for v in template.volumes if v.host_path] == [path]
        assert template.node_selector == {label: "Ready"}
        wait_until("Ready True", lambda: condition("Ready").get("status") == "True", worker, timeout=180)
        loaded = wait_until("modelStatus UpToDate", lambda: (m := model_status()).get("transitionStatus") == "UpToDate"
                       and m, worker)
        assert loaded["modelRevisionStates"] == {"activeModelState": "Loaded", "targetModelState": "Loaded"}
        assert loaded["modelCopies"]["totalCopies"] == 1 and "lastFailureInfo" not in loaded
        # The declared overlay does not exist: left out (not held for), and the condition says so.
        overlays = condition("OverlaysReady")
        assert (overlays["status"], overlays["reason"]) == ("False", "OverlaysSkipped")
        assert f"draft-{suffix}: ClusterBaseModel draft-{suffix} does not exist" in overlays["message"]
        pods = core.list_namespaced_pod(ns, label_selector=f"serving.ome.io/revision={first_rev.rsplit('-', 1)[-1]}")
        assert all(p.spec.node_name == node for p in pods.items), "a pod ran where the model has no copy"

        # The runtime changes: a new pod template, a new revision, rolled out.
        custom.patch_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", runtime,
                                           {"spec": {"engineConfig": {"runner": {"image": "lmsysorg/sglang:v0.5.6"}}}})
        # No event of the service says so: its workflow re-observes a service served by reference
        # every 30 s (inference_service/pacing.py RESYNC_BY_REFERENCE), re-renders, and the template changed.
        flipped = wait_until("the new runtime revision serving", lambda: (
            (w := route_weights(kube_api, ns, "chat-engine")) and w.get(first_rev, 0) == 0 and
            any(v == 100 for v in w.values()) and w), worker, timeout=240)
        [second_rev] = [name for name, weight in flipped.items() if weight == 100]
        image = apps.read_namespaced_deployment(second_rev, ns).spec.template.spec.containers[0].image
        assert image == "lmsysorg/sglang:v0.5.6"
    finally:
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "chat")
        for plural, name in (("clusterservingruntimes", runtime), ("clusterbasemodels", model)):
            try:
                custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except client.exceptions.ApiException:
                pass
        core.patch_node(node, {"metadata": {"labels": {label: None}}})


def test_auto_sync_false_keeps_its_runtime_snapshot_until_runtime_sync(
        kube_api: client.ApiClient, reference_stack: tuple[str, ManagedProcess],
        kube_cluster: LocalKubeCluster) -> None:
    """spec.runtime.autoSync false: the pods render from a ControllerRevision snapshot of the runtime
    (status.pinnedRevisionName); a runtime edit changes nothing until ome.io/runtime-sync moves."""
    import time

    from devstack.identities import NAMESPACE as CONTROLLER_NAMESPACE

    ns, worker = reference_stack
    custom, core, apps = client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    suffix = uuid.uuid4().hex[:6]
    model, runtime, path = f"pinned-{suffix}", f"srt-pin-{suffix}", f"/raid/models/pinned-{suffix}"
    label = ModelKey(ModelKind.CLUSTER_BASE_MODEL, "", model).label_key
    node = kube_cluster.node_names[1 % len(kube_cluster.node_names)]
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterbasemodels", model_body(model, path))
    custom.patch_cluster_custom_object_status(GROUP, VERSION, "clusterbasemodels", model,
                                              {"status": {"state": "Ready", "nodesReady": [node]}})
    core.patch_node(node, {"metadata": {"labels": {label: "Ready"}}})
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes",
                                        runtime_body(runtime, "lmsysorg/sglang:v0.5.5"))

    def service() -> dict[str, Any]:
        return dict(custom.get_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "pinned"))

    def serving_image() -> str | None:
        weights = route_weights(kube_api, ns, "pinned-engine")
        full = [name for name, weight in weights.items() if weight == 100]
        return apps.read_namespaced_deployment(full[0], ns).spec.template.spec.containers[0].image if full else None

    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": "pinned"},
        "spec": {"model": {"name": model}, "runtime": {"name": runtime, "autoSync": False},
                 "engine": {"minReplicas": 1, "maxReplicas": 1}}})
    try:
        wait_until("served from the snapshot", lambda: serving_image() == "lmsysorg/sglang:v0.5.5", worker, timeout=180)
        pin = wait_until("status.pinnedRevisionName", lambda: service().get("status", {}).get("pinnedRevisionName"),
                    worker)
        snapshot = apps.read_namespaced_controller_revision(pin, CONTROLLER_NAMESPACE)
        assert snapshot.data["name"] == runtime
        assert snapshot.data["spec"]["engineConfig"]["runner"]["image"] == "lmsysorg/sglang:v0.5.5"

        custom.patch_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", runtime,
                                           {"spec": {"engineConfig": {"runner": {"image": "lmsysorg/sglang:v0.5.6"}}}})
        time.sleep(45)  # longer than the 30 s re-render of a service served by reference
        assert serving_image() == "lmsysorg/sglang:v0.5.5", "a pinned service followed a runtime edit"
        assert service()["status"]["pinnedRevisionName"] == pin

        custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "pinned",
                                              {"metadata": {"annotations": {"ome.io/runtime-sync": "1"}}})
        wait_until("the new snapshot rolled out", lambda: serving_image() == "lmsysorg/sglang:v0.5.6", worker,
              timeout=240)
        status = wait_until("a new pin at the sync token", lambda: (
            (s := service().get("status", {})).get("lastRuntimeSyncToken") == "1" and s), worker)
        assert status["pinnedRevisionName"] != pin
    finally:
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "pinned")
        for plural, name in (("clusterservingruntimes", runtime), ("clusterbasemodels", model)):
            try:
                custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            except client.exceptions.ApiException:
                pass
        core.patch_node(node, {"metadata": {"labels": {label: None}}})


def test_a_deckhouse_model_is_served_from_its_artifact(
        kube_api: client.ApiClient, reference_stack: tuple[str, ManagedProcess], oci_registry: OciRegistry) -> None:
    """Beyond upstream: spec.model names a Deckhouse Model of the namespace; the runtime is selected by
    its status.resolved and the pods mount its artifact as an image volume (no node copy)."""
    ns, worker = reference_stack
    custom, apps = client.CustomObjectsApi(kube_api), client.AppsV1Api(kube_api)
    suffix = uuid.uuid4().hex[:6]
    runtime, digest = f"srt-dh-{suffix}", "sha256:" + "cd" * 32
    custom.create_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models", {
        "apiVersion": "ai.deckhouse.io/v1alpha1", "kind": "Model", "metadata": {"name": "tiny"},
        "spec": {"source": {"url": "https://huggingface.co/acme/tiny"}}})
    # What the import workflow writes once the artifact is published (stood in for: the import e2e proves it).
    custom.patch_namespaced_custom_object_status("ai.deckhouse.io", "v1alpha1", ns, "models", "tiny", {"status": {
        "phase": "Ready", "artifact": {"digest": digest, "kind": "OCI"},
        "resolved": {"format": "Safetensors", "architecture": "LlamaForCausalLM", "parameterCount": 1_100_000_000}}})
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes",
                                        runtime_body(runtime, "lmsysorg/sglang:v0.5.5"))
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": "dh"},
        "spec": {"model": {"name": "tiny", "kind": "Model", "apiGroup": "ai.deckhouse.io"},
                 "runtime": {"name": runtime}, "engine": {"minReplicas": 1, "maxReplicas": 1}}})
    try:
        weights = wait_until("served", lambda: (w := route_weights(kube_api, ns, "dh-engine")) and
                        list(w.values()) == [100] and w, worker, timeout=180)
        [revision] = weights
        pod = apps.read_namespaced_deployment(revision, ns).spec.template.spec
        [volume] = [v for v in pod.volumes if v.image is not None]
        assert volume.image.reference.endswith(f"@{digest}") and volume.image.reference.startswith(
            oci_registry.address)
        env = {e.name: e.value for e in pod.containers[0].env}
        assert env["MODEL_PATH"] == "/models/tiny"
        assert not pod.node_selector
    finally:
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "dh")
        custom.delete_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", runtime)
