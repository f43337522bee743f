"""A namespace, a worker and a bridge on their own task queue (worker_and_bridge), the rollout module
fixture, and a reader of an HTTPRoute's weights."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.product import BridgeLauncher, start_worker
from devstack.services import OciRegistry, TemporalDevServer


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


def route_weights(api: client.ApiClient, ns: str, name: str) -> dict[str, int]:
    try:
        route = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", ns, "httproutes", name)
    except client.exceptions.ApiException:
        return {}
    refs = route["spec"]["rules"][0]["backendRefs"]
    return {ref["name"]: ref.get("weight", 1) for ref in refs}



@pytest.fixture(scope="module")
def rollout_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                  oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "rollout", "InferenceService",
                           identities=chart_identities) as stack:
        yield stack
