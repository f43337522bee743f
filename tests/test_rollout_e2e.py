"""InferenceService rollouts end to end: worker and bridge as processes, the local cluster with
kwok pods. The first revision is served at 100%; a new pod template rolls out blue-green (the
default) and the HTTPRoute flips to it once its pods are Ready."""

from __future__ import annotations

import contextlib
import time
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
from servingops.api_models.ome import InferenceService
from tests.crd_helpers import create, manifest
from tests.fixtures.bridge import BridgeLauncher
from tests.test_model_import_e2e import start_worker


@contextlib.contextmanager
def worker_and_bridge(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient,
                      temporal_server: TemporalDevServer, oci_registry: OciRegistry, hub_server: HubServer,
                      stack_logs: Path, spool: Path, prefix: str, kinds: str,
                      *, identities: Identities,
                      extra_env: dict[str, str] | None = None) -> Iterator[tuple[str, ManagedProcess]]:
    """A fresh namespace, a worker process and a bridge process on their own task queue, both
    talking to the apiserver as `identities` (the chart's); `extra_env` for the worker."""
    task_queue = f"{prefix}-{uuid.uuid4().hex[:6]}"
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(kube_api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    worker = start_worker(kube_cluster, temporal_server, oci_registry, hub_server, task_queue, spool, stack_logs,
                          host_id=f"host-{task_queue}", identities=identities, extra_env=extra_env)
    launcher = BridgeLauncher(identities, temporal_server.address, stack_logs)
    try:
        launcher.start(task_queue=task_queue, kinds=kinds)
        yield namespace, worker
    finally:
        launcher.stop_all()
        worker.stop()


@pytest.fixture(scope="module")
def rollout_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                  oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "rollout", "InferenceService",
                           identities=chart_identities) as stack:
        yield stack


def _route_weights(api: client.ApiClient, ns: str, name: str) -> dict[str, int]:
    try:
        route = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", ns, "httproutes", name)
    except client.exceptions.ApiException:
        return {}
    refs = route["spec"]["rules"][0]["backendRefs"]
    return {ref["name"]: ref.get("weight", 1) for ref in refs}


def _wait(what: str, probe: Any, worker: ManagedProcess, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what} never happened (last: {value})\nworker log:\n{worker.log_tail(60)}")


def test_first_revision_serves_then_a_new_template_rolls_out(kube_api: client.ApiClient,
                                                             rollout_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = rollout_stack
    spec = {"engine": {"minReplicas": 2, "runner": {"name": "engine", "image": "vllm/vllm-openai:v0.9",
                                                     "ports": [{"containerPort": 8000}]}}}
    create(kube_api, InferenceService, manifest(InferenceService, spec, name="chat"), ns)
    apps = client.AppsV1Api(kube_api)

    def ready_revisions() -> dict[str, int]:
        deployments = apps.list_namespaced_deployment(ns).items
        return {d.metadata.name: d.status.ready_replicas or 0 for d in deployments}

    first = _wait("the first revision serving 100%", lambda: (
        (w := _route_weights(kube_api, ns, "chat-engine")) and list(w.values()) == [100] and w), worker)
    [first_rev] = first
    _wait("two Ready pods of the first revision", lambda: ready_revisions().get(first_rev) == 2, worker)

    custom = client.CustomObjectsApi(kube_api)
    custom.patch_namespaced_custom_object("ome.io", "v1beta1", ns, "inferenceservices", "chat", {
        "spec": {"engine": {"runner": {"name": "engine", "image": "vllm/vllm-openai:v0.10",
                                       "ports": [{"containerPort": 8000}]}}}})
    flipped = _wait("traffic flipped to the new revision", lambda: (
        (w := _route_weights(kube_api, ns, "chat-engine")) and first_rev not in {k for k, v in w.items() if v}
        and w), worker, timeout=180)
    [new_rev] = [name for name, weight in flipped.items() if weight == 100]
    assert new_rev != first_rev
    assert ready_revisions().get(new_rev) == 2, "traffic moved before the new revision was fully Ready"
    status = _wait("status reports the new revision", lambda: (
        (obj := custom.get_namespaced_custom_object("ome.io", "v1beta1", ns, "inferenceservices", "chat"))
        .get("status", {}).get("components", {}).get("engine", {}).get("latestRolledoutRevision")
        == new_rev and obj["status"]), worker)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert status["components"]["engine"]["previousRolledoutRevision"] == first_rev
    # After the drain the old revision is gone.
    _wait("the old revision drained", lambda: first_rev not in ready_revisions(), worker)


