"""InferenceReplica end-to-end helpers: the replica stack fixture, a reader of a replica, Instances serving,
and restarting the worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.product import restart_worker
from devstack.services import OciRegistry, TemporalDevServer
from servingops.api_models.ome.instance_keys import INSTANCE_LABEL, REPLICA_LABEL, SERVING_GATE
from testkit.waiting import wait_until
from tests.support.rollout_stack import worker_and_bridge

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "inferencereplicas"


def runner(name: str = "default", size: int = 1, image: str = "vllm/vllm-openai:v0.9",
           annotations: dict[str, str] | None = None, env: str = "a") -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": {"ome.io/runner": name}}
    if annotations:
        metadata["annotations"] = annotations
    return {"name": name, "size": size, "template": {"metadata": metadata, "spec": {"containers": [
        {"name": "main", "image": image, "env": [{"name": "MODE", "value": env}],
         "ports": [{"containerPort": 8000}]}]}}}


class Replica:
    def __init__(self, api: client.ApiClient, ns: str, worker: ManagedProcess, name: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.ns, self.worker, self.name = ns, worker, name

    def create(self, **spec: Any) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceReplica", "metadata": {"name": self.name},
                "spec": {"component": "engine", "runners": [runner()], **spec}}
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body)

    def patch(self, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.name, {"spec": spec})

    def get(self) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.name))

    @property
    def status(self) -> dict[str, Any]:
        return self.get().get("status") or {}

    def rows(self) -> list[dict[str, Any]]:
        return list(self.status.get("instanceStatuses") or [])

    def pods(self) -> list[client.V1Pod]:
        return [p for p in self.core.list_namespaced_pod(self.ns, label_selector=f"{REPLICA_LABEL}={self.name}").items
                if p.metadata.deletion_timestamp is None]

    def settled(self, replicas: int, revision: str | None = None) -> bool:
        obj = self.get()
        status = obj.get("status") or {}
        rows = status.get("instanceStatuses") or []
        return (status.get("observedGeneration") == obj["metadata"]["generation"]
                and status.get("availableReplicas") == replicas and len(rows) == replicas
                and all("operation" not in r and r.get("phase") == "Ready" for r in rows)
                and (revision is None or status.get("currentRevision") == revision == status.get("updateRevision")))

    def wait(self, what: str, probe: Any, timeout: float = 120) -> Any:
        return wait_until(f"{self.name}: {what}", probe, self.worker, timeout)

    def settle(self, replicas: int, what: str = "", timeout: float = 120) -> dict[str, Any]:
        self.wait(what or f"{replicas} Instances settled", lambda: self.settled(replicas), timeout)
        return self.status


def serving_instances(pods: list[client.V1Pod], per_instance: int = 1) -> int:
    by_index: dict[str, int] = {}
    for pod in pods:
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        if conditions.get("ContainersReady") == "True" and conditions.get(SERVING_GATE) == "True":
            index = pod.metadata.labels[INSTANCE_LABEL]
            by_index[index] = by_index.get(index, 0) + 1
    return sum(1 for count in by_index.values() if count >= per_instance)


def restart(worker: ManagedProcess) -> None:
    """Kill the worker (a crash) and start it again, ready."""
    restart_worker(worker)


@pytest.fixture(scope="module")
def replica_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                  oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "replica", "InferenceReplica",
                           identities=chart_identities) as stack:
        yield stack
        # Its replicas go with it: a later module's bridge (bridges follow every namespace) would
        # otherwise start their workflows on its own worker.
        client.CoreV1Api(kube_api).delete_namespace(stack[0])
