"""The model webhook against the session's real apiserver: `servingops webhook` as a process under the chart's
`webhook` ServiceAccount, on loopback TLS, registered with the chart's own MutatingWebhookConfiguration
(rules, matchConditions, failure policy) pointed at it (devstack/webhook.py). The registration is narrowed to
namespaces labelled for this module, so no other test's objects reach it.

The Models are made Ready by the test itself, as the admin, through the status subresource (phase, Ready
condition, artifact digest as the import writes them): the webhook reads only that, and an import would add
minutes and nothing the webhook looks at. kwok runs no kubelet, so what is proven is the stored spec (the
image volume, the mounts, MODEL_PATH), not a mount on a node.
"""

from __future__ import annotations

import copy
import datetime as dt
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack import webhook as local_webhook
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from servingops.api_models.deckhouse import ClusterModel, Model
from servingops.ingress.model_mount import CLUSTER_MODEL_ANNOTATION, MODEL_ANNOTATION, VOLUME_NAME
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest, new_namespace

pytestmark = pytest.mark.e2e

REGISTRY = "registry.local:5000"
DIGEST = "sha256:" + "5e" * 32
TEST_LABEL = "servingops.io/model-webhook-test"


def _ready_status(digest: str = DIGEST) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"phase": "Ready", "artifact": {"digest": digest, "kind": "OCI", "sizeBytes": 1024,
                                           "mediaType": "application/vnd.oci.image.manifest.v1+json"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Published", "message": "published",
                            "lastTransitionTime": now}]}


def _failed_status() -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"phase": "Failed", "conditions": [{"type": "Ready", "status": "False", "reason": "SourceNotFound",
                                               "message": "repository org/gone not found",
                                               "lastTransitionTime": now}]}


def _set_status(api: client.ApiClient, kind: type[Model] | type[ClusterModel], obj: dict[str, Any],
                status: dict[str, Any], namespace: str | None = None) -> None:
    custom, info, name = client.CustomObjectsApi(api), kind.crd, obj["metadata"]["name"]
    body = {"status": status}
    if namespace:
        custom.patch_namespaced_custom_object_status(info.group, info.version, namespace, info.plural, name, body)
    else:
        custom.patch_cluster_custom_object_status(info.group, info.version, info.plural, name, body)


@pytest.fixture(scope="module")
def world(kube_api: client.ApiClient) -> Iterator[dict[str, Any]]:
    """Two labelled namespaces; in `ns` a Ready Model, one never prepared and a Failed one; in `other` a Ready
    Model; a Ready ClusterModel. Removed afterwards, before a later test's bridge finds them."""
    token = uuid.uuid4().hex[:8]
    core = client.CoreV1Api(kube_api)
    spaces = {}
    for key in ("ns", "other"):
        name = new_namespace(kube_api, f"webhook-{key}")
        core.patch_namespace(name, {"metadata": {"labels": {TEST_LABEL: token}}})
        spaces[key] = name
    ns, other = spaces["ns"], spaces["other"]
    source = {"source": {"url": "https://huggingface.co/org/tiny"}}
    ready = create(kube_api, Model, manifest(Model, source, "tiny"), ns)
    _set_status(kube_api, Model, ready, _ready_status(), ns)
    create(kube_api, Model, manifest(Model, source, "unprepared"), ns)
    failed = create(kube_api, Model, manifest(Model, source, "failed"), ns)
    _set_status(kube_api, Model, failed, _failed_status(), ns)
    elsewhere = create(kube_api, Model, manifest(Model, source, "elsewhere"), other)
    _set_status(kube_api, Model, elsewhere, _ready_status(), other)
    cluster = create(kube_api, ClusterModel, manifest(ClusterModel, source, f"shared-{token}"))
    _set_status(kube_api, ClusterModel, cluster, _ready_status("sha256:" + "c1" * 32))
    yield {"ns": ns, "other": other, "token": token, "cluster_model": cluster["metadata"]["name"]}
    info = ClusterModel.crd
    client.CustomObjectsApi(kube_api).delete_cluster_custom_object(info.group, info.version, info.plural,
                                                                   cluster["metadata"]["name"])
    for name in (ns, other):
        core.delete_namespace(name)


@pytest.fixture(scope="module")
def webhook(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, chart_identities: Identities,
            world: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[local_webhook.WebhookProcess]:
    assert chart_identities.webhook is not None
    workdir = tmp_path_factory.mktemp("webhook")
    with local_webhook.running(kube_api, chart_identities.webhook, workdir, kube_cluster.log_dir, registry=REGISTRY,
                               name=f"model-webhook-test-{world['token']}",
                               namespace_selector={"matchLabels": {TEST_LABEL: world["token"]}}) as process:
        yield process


def _pod(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}


def _deployment(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels, "annotations": annotations},
                                  "spec": {"containers": [{"name": "engine", "image": "engine:1"},
                                                          {"name": "metrics", "image": "exporter:1"}]}}}}


def _refused(call: Callable[[], Any]) -> str:
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status in (403, 500), refused.value.body
    return str(refused.value.body)


def _wait(what: str, probe: Callable[[], Any], process: ManagedProcess | None = None, timeout: float = 60) -> Any:
    return wait_until(what, probe, process, timeout=timeout, interval=0.3)


def _assert_mounted(spec: Any, name: str, digest: str = DIGEST) -> None:
    volumes = [v for v in spec.volumes or [] if v.name == VOLUME_NAME]
    assert len(volumes) == 1
    assert (volumes[0].image.reference, volumes[0].image.pull_policy) == (
        f"{REGISTRY}/servingops/models@{digest}", "IfNotPresent")
    for container in spec.containers:
        mounts = [(m.name, m.mount_path, m.read_only) for m in container.volume_mounts or []]
        assert mounts.count((VOLUME_NAME, f"/models/{name}", True)) == 1, mounts
        assert [(e.name, e.value) for e in container.env or [] if e.name == "MODEL_PATH"] == [
            ("MODEL_PATH", f"/models/{name}")]


def _replace(apps: client.AppsV1Api, ns: str, body: dict[str, Any]) -> Any:
    """PUT `body` over the stored Deployment (as `kubectl replace` does), again if its controller wrote the
    status in between."""
    for _ in range(10):
        again = copy.deepcopy(body)
        name = body["metadata"]["name"]
        again["metadata"]["resourceVersion"] = apps.read_namespaced_deployment(name, ns).metadata.resource_version
        try:
            return apps.replace_namespaced_deployment(name, ns, again)
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise AssertionError("the Deployment kept changing")


def test_an_annotated_deployment_is_stored_with_the_weights_and_its_pods_keep_them(
        kube_api: client.ApiClient, webhook: local_webhook.WebhookProcess, world: dict[str, Any]) -> None:
    ns, apps = world["ns"], client.AppsV1Api(kube_api)
    body = _deployment("engine", {MODEL_ANNOTATION: "tiny"})
    apps.create_namespaced_deployment(ns, copy.deepcopy(body))
    stored = apps.read_namespaced_deployment("engine", ns)
    _assert_mounted(stored.spec.template.spec, "tiny")
    # The ReplicaSet's pod comes through the webhook again (its template carries the annotation): unchanged.
    pod = _wait("the deployment's pod", lambda: next(iter(client.CoreV1Api(kube_api).list_namespaced_pod(
        ns, label_selector="app=engine").items), None), webhook.process)
    _assert_mounted(pod.spec, "tiny")

    # Applying the user's manifest again (without our volume) is mutated back to the same template: no
    # new revision. A scale leaves the template alone.
    # (The controller's revision annotation is kept: a Deployment's generation counts annotation changes too.)
    current = apps.read_namespaced_deployment("engine", ns)
    replaced = _replace(apps, ns, {**body, "metadata": {**body["metadata"],
                                                        "annotations": current.metadata.annotations}})
    assert replaced.spec.template == stored.spec.template
    assert replaced.metadata.generation == current.metadata.generation
    _assert_mounted(replaced.spec.template.spec, "tiny")
    apps.patch_namespaced_deployment("engine", ns, {"spec": {"replicas": 2}})
    scaled = apps.read_namespaced_deployment("engine", ns)
    assert scaled.spec.template == replaced.spec.template


def test_an_annotated_pod_and_a_job_using_a_cluster_model(kube_api: client.ApiClient,
                                                          webhook: local_webhook.WebhookProcess,
                                                          world: dict[str, Any]) -> None:
    ns, name = world["ns"], world["cluster_model"]
    pod = client.CoreV1Api(kube_api).create_namespaced_pod(ns, _pod("direct", {CLUSTER_MODEL_ANNOTATION: name}))
    _assert_mounted(pod.spec, name, "sha256:" + "c1" * 32)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "eval", "annotations": {
        MODEL_ANNOTATION: "tiny"}}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "eval", "image": "eval:1"}]}}}}
    stored = client.BatchV1Api(kube_api).create_namespaced_job(ns, job)
    _assert_mounted(stored.spec.template.spec, "tiny")


@pytest.mark.parametrize(("annotations", "expected"), [
    ({MODEL_ANNOTATION: "missing"}, "Model {ns}/missing does not exist in namespace {ns}"),
    ({MODEL_ANNOTATION: "unprepared"}, "Model {ns}/unprepared is not Ready (phase none yet, reason none)"),
    ({MODEL_ANNOTATION: "failed"},
     "Model {ns}/failed is not Ready (phase Failed, reason SourceNotFound: repository org/gone not found)"),
    ({MODEL_ANNOTATION: "{other}/elsewhere"}, "names another namespace"),
    ({MODEL_ANNOTATION: "elsewhere"}, "Model {ns}/elsewhere does not exist in namespace {ns}"),
    ({MODEL_ANNOTATION: "tiny", CLUSTER_MODEL_ANNOTATION: "x"}, "are both set"),
    ({MODEL_ANNOTATION: ""}, "ai.deckhouse.io/model is empty"),
])
def test_a_pod_naming_a_model_it_cannot_use_is_refused_with_the_reason(
        kube_api: client.ApiClient, webhook: local_webhook.WebhookProcess, world: dict[str, Any],
        annotations: dict[str, str], expected: str) -> None:
    ns = world["ns"]
    annotations = {k: v.format(other=world["other"]) for k, v in annotations.items()}
    body = _refused(lambda: client.CoreV1Api(kube_api).create_namespaced_pod(ns, _pod("refused", annotations)))
    assert 'admission webhook \\"pods.model-mount.servingops.io\\" denied the request' in body, body
    assert expected.format(ns=ns) in body, body


def test_a_webhook_outage_blocks_only_annotated_objects(kube_api: client.ApiClient,
                                                        webhook: local_webhook.WebhookProcess,
                                                        world: dict[str, Any]) -> None:
    ns, core, apps = world["ns"], client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    apps.create_namespaced_deployment(ns, _deployment("mutated", {MODEL_ANNOTATION: "tiny"}))
    webhook.stop()
    try:
        # Unannotated: the matchConditions keep it from the webhook, so the failure policy never applies.
        assert core.create_namespaced_pod(ns, _pod("plain")).metadata.uid
        apps.create_namespaced_deployment(ns, _deployment("plain", {"team": "a"}))
        # Annotated: refused, never admitted without its weights (failurePolicy Fail).
        body = _refused(lambda: core.create_namespaced_pod(ns, _pod("annotated", {MODEL_ANNOTATION: "tiny"})))
        assert "failed calling webhook" in body, body
        # A workload mutated before the outage keeps working: its scale skips the webhook, and so do the
        # pods its ReplicaSet makes (they carry the mount already), and so does its deletion.
        apps.patch_namespaced_deployment("mutated", ns, {"spec": {"replicas": 3}})
        _wait("3 pods of the mutated Deployment", lambda: len(core.list_namespaced_pod(
            ns, label_selector="app=mutated").items) == 3)
        apps.delete_namespaced_deployment("mutated", ns, propagation_policy="Foreground")
        _wait("the Deployment deleted", lambda: not [d for d in apps.list_namespaced_deployment(ns).items
                                                     if d.metadata.name == "mutated"])
    finally:
        webhook.start()
    assert core.create_namespaced_pod(ns, _pod("annotated", {MODEL_ANNOTATION: "tiny"})).metadata.uid

