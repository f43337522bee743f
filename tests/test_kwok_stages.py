"""kwok plays the kubelets of the local cluster with stages of its own and ours (devstack/kube.py):
pods marked NotReady by the node lifecycle controller turn Ready again, as a kubelet re-reports
them; pods annotated unready run but never turn Ready, until the annotation goes.

The outage itself (apiserver down, nodes NotReady, pods marked) is in
tests/test_control_plane_outage_e2e.py; here each stage is driven directly."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, watch

from devstack.kube import (
    POD_FAIL_ANNOTATION,
    POD_RESTART_ANNOTATION,
    POD_UNREADY_ANNOTATION,
    UNREADY_NODE_TAINT,
    LocalKubeCluster,
)
from testkit.waiting import wait_until
from tests.crd_helpers import new_namespace

pytestmark = pytest.mark.integration

DEADLINE = 60.0


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "kwok-stages")


def _wait(what: str, probe: Callable[[], Any]) -> Any:
    return wait_until(what, probe, timeout=DEADLINE, interval=0.3)


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


def _bare_pod(api: client.ApiClient, ns: str, annotations: dict[str, str] | None = None,
              containers: int = 1) -> str:
    name = f"p-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespaced_pod(ns, {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": f"c{i}", "image": "registry.invalid/app:v1"} for i in range(containers)]}})
    return name


def _read(api: client.ApiClient, ns: str, name: str) -> client.V1Pod:
    return client.CoreV1Api(api).read_namespaced_pod(name, ns)


def test_a_pod_annotated_to_fail_ends_failed_with_its_containers_terminated(kube_api: client.ApiClient,
                                                                           ns: str) -> None:
    name = _bare_pod(kube_api, ns, {POD_FAIL_ANNOTATION: "true"}, containers=2)
    pod = _wait("the annotated pod Failed", lambda: (p := _read(kube_api, ns, name)).status.phase == "Failed" and p)
    assert _condition(pod, "Ready") == "False" and _condition(pod, "ContainersReady") == "False"
    terminated = [(s.name, s.state.terminated.exit_code, s.state.terminated.reason)
                  for s in pod.status.container_statuses]
    assert sorted(terminated) == [("c0", 1, "Error"), ("c1", 1, "Error")]
    time.sleep(2)
    assert _read(kube_api, ns, name).status.phase == "Failed", "no other stage brings it back"

    # On a running pod: Ready first, then failed by the annotation.
    running = _bare_pod(kube_api, ns)
    _wait("the plain pod Ready", lambda: _condition(_read(kube_api, ns, running), "Ready") == "True")
    client.CoreV1Api(kube_api).patch_namespaced_pod(
        running, ns, {"metadata": {"annotations": {POD_FAIL_ANNOTATION: "true"}}})
    _wait("the running pod Failed", lambda: _read(kube_api, ns, running).status.phase == "Failed")


def test_a_pod_annotated_with_restarts_reports_them_and_stays_ready(kube_api: client.ApiClient, ns: str) -> None:
    name = _bare_pod(kube_api, ns, {POD_RESTART_ANNOTATION: "2"}, containers=2)

    def restarted(count: int) -> client.V1Pod | None:
        pod = _read(kube_api, ns, name)
        statuses = pod.status.container_statuses or []
        return pod if statuses and statuses[0].restart_count == count else None

    pod = _wait("two restarts reported", lambda: restarted(2))
    first, second = pod.status.container_statuses
    assert (first.last_state.terminated.exit_code, first.last_state.terminated.reason) == (137, "OOMKilled")
    assert first.state.running is not None and first.ready
    assert second.restart_count == 0 and second.last_state.terminated is None
    assert pod.status.phase == "Running" and _condition(pod, "Ready") == "True"
    time.sleep(2)
    steady = _read(kube_api, ns, name)
    assert steady.status.container_statuses[0].restart_count == 2, "reported once, not counted up"
    assert _condition(steady, "Ready") == "True"

    client.CoreV1Api(kube_api).patch_namespaced_pod(
        name, ns, {"metadata": {"annotations": {POD_RESTART_ANNOTATION: "5"}}})
    _wait("five restarts reported", lambda: restarted(5))
    assert _condition(_read(kube_api, ns, name), "Ready") == "True"


def test_a_readiness_gate_is_left_to_its_owner_and_holds_ready_as_a_kubelet_would(kube_api: client.ApiClient,
                                                                                   ns: str) -> None:
    """kwok's own pod-ready stage would set every readiness gate True; a kubelet never writes a
    gate, and reports the pod Ready only while every gate is True: not even for a moment at start
    (an EndpointSlice would list it as a ready endpoint then)."""
    core = client.CoreV1Api(kube_api)
    name = f"p-{uuid.uuid4().hex[:6]}"
    seen: list[str | None] = []  # every Ready status the pod was written with, in order
    stream = watch.Watch()
    since = core.list_namespaced_pod(ns, field_selector=f"metadata.name={name}").metadata.resource_version

    def record() -> None:
        for event in stream.stream(core.list_namespaced_pod, ns, field_selector=f"metadata.name={name}",
                                   resource_version=since, timeout_seconds=int(DEADLINE)):
            seen.append(_condition(event["object"], "Ready"))

    watcher = threading.Thread(target=record, daemon=True)
    watcher.start()
    core.create_namespaced_pod(ns, {
        "metadata": {"name": name},
        "spec": {"readinessGates": [{"conditionType": "example.com/gate"}],
                 "containers": [{"name": "main", "image": "registry.invalid/app:v1"}]}})

    def ready_is(status: str) -> client.V1Pod | None:
        pod = _read(kube_api, ns, name)
        return pod if pod.status.phase == "Running" and _condition(pod, "Ready") == status else None

    pod = _wait("the pod running, not Ready", lambda: ready_is("False"))
    assert _condition(pod, "ContainersReady") == "True" and _condition(pod, "example.com/gate") is None
    assert next(c.reason for c in pod.status.conditions if c.type == "Ready") == "ReadinessGatesNotReady"
    time.sleep(2)
    assert ready_is("False") is not None, "held while the gate is not set"
    stream.stop()
    watcher.join(timeout=DEADLINE)
    assert "True" not in seen and "False" in seen, f"Ready as written before the gate opened: {seen}"

    def gate(status: str) -> None:
        core.patch_namespaced_pod_status(name, ns, {"status": {"conditions": [
            {"type": "example.com/gate", "status": status}]}})

    gate("True")
    _wait("Ready once the gate opens", lambda: ready_is("True"))
    gate("False")
    _wait("not Ready once it closes", lambda: ready_is("False"))
    assert _condition(_read(kube_api, ns, name), "ContainersReady") == "True"


def test_pods_on_an_unready_node_run_but_never_turn_ready(kube_api: client.ApiClient,
                                                          kube_cluster: LocalKubeCluster, ns: str) -> None:
    node = kube_cluster.add_unready_node(f"stage-{uuid.uuid4().hex[:4]}")
    try:
        name = f"p-{uuid.uuid4().hex[:6]}"
        core = client.CoreV1Api(kube_api)
        core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": UNREADY_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "registry.invalid/app:v1"}]}})
        _wait("the pod running on the unready node",
              lambda: core.read_namespaced_pod(name, ns).status.phase == "Running")
        app = _deployment(kube_api, ns, 1)  # the same moment on a healthy node: Ready
        _wait("the healthy node's pod Ready", lambda: _ready(kube_api, ns, app) == 1)
        time.sleep(3)  # kwok's stages have had many rounds
        pod = core.read_namespaced_pod(name, ns)
        assert pod.spec.node_name == node
        assert _condition(pod, "Ready") == "False" and _condition(pod, "ContainersReady") == "False"
        assert all(p.spec.node_name != node for p in _pods(kube_api, ns, app)), "untolerating pods stay off it"
    finally:
        kube_cluster.remove_node(node)
