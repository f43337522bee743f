"""kwok plays the kubelets of the local cluster with stages of its own and ours (devstack/kube.py):
pods marked NotReady by the node lifecycle controller turn Ready again, as a kubelet re-reports
them; pods annotated unready run but never turn Ready, until the annotation goes.

The outage itself (apiserver down, nodes NotReady, pods marked) is in
tests/test_control_plane_outage_e2e.py; here each stage is driven directly."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from devstack.kube import POD_UNREADY_ANNOTATION
from tests.crd_helpers import new_namespace

DEADLINE = 60.0


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "kwok-stages")


def _wait(what: str, probe: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"never happened: {what}")


def _deployment(api: client.ApiClient, ns: str, replicas: int, annotations: dict[str, str] | None = None) -> str:
    name = f"d-{uuid.uuid4().hex[:6]}"
    labels = {"app": name}
    client.AppsV1Api(api).create_namespaced_deployment(ns, {
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "main", "image": "registry.invalid/app:v1"}]}}}})
    return name


def _pods(api: client.ApiClient, ns: str, app: str) -> list[client.V1Pod]:
    return list(client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"app={app}").items)


def _condition(pod: client.V1Pod, kind: str) -> str | None:
    return next((c.status for c in pod.status.conditions or [] if c.type == kind), None)


def _ready(api: client.ApiClient, ns: str, app: str) -> int:
    return sum(1 for pod in _pods(api, ns, app) if _condition(pod, "Ready") == "True")


def test_a_pod_marked_not_ready_by_the_node_controller_turns_ready_again(kube_api: client.ApiClient,
                                                                         ns: str) -> None:
    app = _deployment(kube_api, ns, 2)
    _wait("two Ready pods", lambda: _ready(kube_api, ns, app) == 2)
    pod = _pods(kube_api, ns, app)[0]
    # What MarkPodsNotReady writes when a node's lease went stale: Ready False, containers untouched.
    for condition in pod.status.conditions:
        if condition.type == "Ready":
            condition.status = "False"
    client.CoreV1Api(kube_api).replace_namespaced_pod_status(pod.metadata.name, ns, pod)
    assert _condition(client.CoreV1Api(kube_api).read_namespaced_pod(pod.metadata.name, ns), "Ready") == "False"
    _wait("the marked pod Ready again", lambda: _condition(
        client.CoreV1Api(kube_api).read_namespaced_pod(pod.metadata.name, ns), "Ready") == "True")
    assert [p.metadata.name for p in _pods(kube_api, ns, app)].count(pod.metadata.name) == 1, "the same pod"


def test_an_unready_annotation_holds_pods_until_it_goes(kube_api: client.ApiClient, ns: str) -> None:
    app = _deployment(kube_api, ns, 2, {POD_UNREADY_ANNOTATION: "true"})
    _wait("two running pods", lambda: [p.status.phase for p in _pods(kube_api, ns, app)] == ["Running"] * 2)
    time.sleep(3)  # kwok's pod-ready stage would have made them Ready by now
    pods = _pods(kube_api, ns, app)
    assert [(_condition(p, "Ready"), _condition(p, "ContainersReady")) for p in pods] == [("False", "False")] * 2
    core = client.CoreV1Api(kube_api)
    core.patch_namespaced_pod(pods[0].metadata.name, ns, {"metadata": {"annotations": {POD_UNREADY_ANNOTATION: None}}})
    _wait("the released pod Ready", lambda: _ready(kube_api, ns, app) == 1)
    time.sleep(2)
    assert _ready(kube_api, ns, app) == 1, "the other pod is still held"
