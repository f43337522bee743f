"""devstack/pod_runtime.py's rules (what a pod asks of its server, what a kubelet would report) and the
kwok stages of an answering cluster; the runtime end to end is in tests/test_traffic_e2e.py."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest
from kubernetes import client

from devstack.kube import POD_UNREADY_ANNOTATION, go_module_dir, kwok_stages, pinned_versions
from devstack.pod_runtime import (
    PodRuntime,
    container_ports,
    fault_settings,
    pre_stop_seconds,
    ready_status,
    served_model,
)
from devstack.pod_server import StopResult

pytestmark = pytest.mark.unit


def _pod(containers: list[dict[str, Any]] | None = None, conditions: list[dict[str, Any]] | None = None,
         annotations: dict[str, str] | None = None, gates: list[str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "labels": {"ome.io/inferenceservice": "svc"},
                     "annotations": annotations or {}},
        "spec": {"containers": containers or [{"name": "main", "image": "vllm"}],
                 "readinessGates": [{"conditionType": g} for g in gates or []]},
        "status": {"conditions": conditions or [], "containerStatuses": [{"name": "main", "ready": False}]},
    }


def test_fault_settings_come_from_annotations_before_env() -> None:
    settings = fault_settings({"devstack.servingops.io/ttft-ms": "250", "devstack.servingops.io/tokens": "8"},
                              {"SERVINGOPS_POD_TTFT_MS": "5", "SERVINGOPS_POD_ERROR_RATE": "0.5"})
    assert settings == {"ttft_ms": 250.0, "tokens": 8, "error_rate": 0.5}
    assert fault_settings({"devstack.servingops.io/error-rate": "lots"}, {}) == {}, "a bad value is ignored"
    assert fault_settings({"devstack.servingops.io/capacity-servable": "2"}, {}) == {"servable": 2}


def test_ports_model_and_pre_stop_are_read_as_a_kubelet_and_an_engine_would() -> None:
    runner = {"name": "main", "image": "vllm", "ports": [{"containerPort": 8000}, {"containerPort": 9000,
                                                                                 "protocol": "UDP"}],
              "args": ["--served-model-name", "llama-3"], "lifecycle": {"preStop": {"sleep": {"seconds": 7}}}}
    pod = _pod([runner, {"name": "side", "ports": [{"containerPort": 8001}]}])
    assert container_ports(pod) == [8000, 8001]
    assert container_ports(_pod()) == [8080], "no port declared: what the product's Service targets"
    assert served_model(pod) == "llama-3"
    assert served_model(_pod([{"name": "m", "command": ["sglang", "--served-model-name=qwen"]}])) == "qwen"
    assert served_model(_pod()) == "svc"
    assert pre_stop_seconds(pod) == 7
    assert pre_stop_seconds(_pod([{"name": "m", "lifecycle": {"preStop": {"exec": {"command": [
        "/bin/sh", "-c", "sleep 3"]}}}}])) == 3
    assert pre_stop_seconds(_pod()) == 0


def test_ready_follows_the_probe_the_gates_and_the_hold() -> None:
    patch = ready_status(_pod(), healthy=True)
    assert patch is not None
    conditions = {c["type"]: c["status"] for c in patch["status"]["conditions"]}
    assert conditions == {"ContainersReady": "True", "Ready": "True"}
    assert patch["status"]["containerStatuses"][0]["ready"] is True

    ready = [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]
    assert ready_status(_pod(conditions=ready), healthy=True) is None, "nothing to say"

    down = ready_status(_pod(conditions=ready), healthy=False)
    assert down is not None
    assert {c["type"]: (c["status"], c.get("reason")) for c in down["status"]["conditions"]} == {
        "ContainersReady": ("False", "ContainersNotReady"), "Ready": ("False", "ContainersNotReady")}

    gated = ready_status(_pod(gates=["ome.io/serving"]), healthy=True)
    assert gated is not None
    assert {c["type"]: (c["status"], c.get("reason")) for c in gated["status"]["conditions"]} == {
        "ContainersReady": ("True", None), "Ready": ("False", "ReadinessGatesNotReady")}

    held = ready_status(_pod(annotations={POD_UNREADY_ANNOTATION: "true"}), healthy=True)
    assert held is not None
    assert {c["type"]: c["status"] for c in held["status"]["conditions"]} == {
        "ContainersReady": "False", "Ready": "False"}


def test_an_answering_cluster_leaves_its_services_pods_readiness_to_the_runtime() -> None:
    root = go_module_dir("sigs.k8s.io/kwok", pinned_versions()["KWOK_VERSION"])
    plain = {s["metadata"]["name"]: s for s in kwok_stages(root)}
    answering = {s["metadata"]["name"]: s for s in kwok_stages(root, answering=True)}
    assert "pod-start-answered" not in plain
    assert set(answering) == set(plain) | {"pod-start-answered"}
    answered = {"key": '.metadata.labels["ome.io/inferenceservice"]', "operator": "DoesNotExist"}
    for name in ("pod-ready", "pod-ready-again", "pod-held-unready"):
        assert answered in answering[name]["spec"]["selector"]["matchExpressions"], name
        assert answered not in plain[name]["spec"]["selector"]["matchExpressions"], name
    start = answering["pod-start-answered"]
    template = start["spec"]["next"]["statusTemplate"]
    assert 'status: "False"\n  type: Ready' in template and "ready: false" in template
    assert "podIP:" in template, "the pods get their address from kwok as any other"
    held = {"key": f'.metadata.annotations["{POD_UNREADY_ANNOTATION}"]', "operator": "NotIn", "values": ["true"]}
    assert held not in start["spec"]["selector"]["matchExpressions"], "held pods start too (the runtime holds them)"


class _Server:
    """The pod server's start/stop semantics by name and uid; a stop waits for `release` (a deleted pod's grace
    still running when the new pod of its name starts)."""

    def __init__(self) -> None:
        self.running: dict[str, str] = {}
        self.release = threading.Event()

    def start(self, pod: str, *, uid: str, **_: Any) -> None:
        self.running[pod] = uid

    def stop(self, pod: str, grace_seconds: float = 30, uid: str | None = None) -> StopResult:
        assert self.release.wait(10)
        if pod in self.running and (uid is None or self.running[pod] == uid):
            del self.running[pod]
        return StopResult(finished=0, cut=0)


class _Netns:
    def add_address(self, ip: str) -> None: ...

    def remove_address(self, ip: str) -> None: ...


def test_a_deleted_pods_late_stop_leaves_the_new_pod_of_its_name_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """An InferenceReplica's pods keep their names: a copy deleted and placed again makes a pod of the same name
    while the old one's grace runs. The old one's stop must not take the new one's server down (it did: the
    new pod never got Ready, found by the zero-share test of tests/test_routing_e2e.py)."""
    server = _Server()
    runtime = PodRuntime(client.ApiClient(), cast(Any, _Netns()), cast(Any, server), targets_file=None)
    monkeypatch.setattr(runtime, "_probe", lambda key: None)

    def pod(uid: str, deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": "svc-engine-0", "namespace": "ns", "uid": uid, "labels": {}}
        if deleting:
            meta["deletionTimestamp"] = "2026-12-07T12:00:00Z"
        return {"metadata": meta, "spec": {"containers": [{"name": "main", "ports": [{"containerPort": 8000}]}],
                                           "terminationGracePeriodSeconds": 0},
                "status": {"phase": "Running", "podIP": "10.244.0.5"}}

    runtime._observe(pod("u1"))
    runtime._observe(pod("u1", deleting=True))  # its stop waits, as a grace period would
    runtime._observe(pod("u2"))
    server.release.set()
    for thread in [t for t in threading.enumerate() if t.name.startswith("stop-")]:
        thread.join(10)
    assert server.running == {"ns/svc-engine-0": "u2"}
