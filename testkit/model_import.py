"""The model-import stack the end-to-end tests and bench/model_import.py drive: a worker as the chart's
identity and a bridge for Model / ClusterModel, a namespace of its own (tests/support/model_import.py's
module fixture `stack` starts one), and how a user applies and reads Models on it."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client

from devstack.hub_server import HubServer
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess, find_binary
from devstack.product import BridgeProcess
from devstack.services import OciRegistry
from servingops.api_models.contract import Query, model_workflow_id
from testkit.waiting import wait_until

REPOSITORY = "servingops/models"

GROUP, VERSION = "ai.deckhouse.io", "v1alpha1"


@dataclass
class Stack:
    cluster: LocalKubeCluster
    api: client.ApiClient
    registry: OciRegistry
    hub: HubServer
    temporal: Client
    worker: ManagedProcess
    bridge: BridgeProcess
    task_queue: str
    namespace: str

    def apply(self, manifest: dict[str, Any]) -> None:
        """Like a user: kubectl apply."""
        kubectl = find_binary("kubectl", "SERVINGOPS_KUBE_BIN_DIR")
        assert kubectl, "kubectl is built by deploy/local/kube/build-binaries.sh"
        subprocess.run([kubectl, "--kubeconfig", str(self.cluster.kubeconfig_path), "apply", "-f", "-"],
                       input=yaml.safe_dump(manifest).encode(), check=True, capture_output=True)

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        custom = client.CustomObjectsApi(self.api)
        try:
            if plural == "models":
                return dict(custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name))
            return dict(custom.get_cluster_custom_object(GROUP, VERSION, plural, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def wait_phase(self, plural: str, name: str, phases: tuple[str, ...], timeout: float = 240) -> dict[str, Any]:
        return wait_until(f"{plural}/{name} reaching {phases}",
                          lambda: (obj := self.get(plural, name)) and (obj.get("status") or {}).get("phase") in phases
                          and obj, self.worker, timeout=timeout,
                          detail=lambda: f"status: {(self.get(plural, name) or {}).get('status')}")

    def model(self, name: str, source: dict[str, Any], cluster_scoped: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if not cluster_scoped:
            meta["namespace"] = self.namespace
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterModel" if cluster_scoped else "Model",
                "metadata": meta, "spec": {"source": source}}

    def events(self, name: str, *, expect: tuple[str, str] | None = None, timeout: float = 30) -> list[tuple[str, str]]:
        """(type, reason) of the Events on the namespace's object `name`, sorted; with `expect`,
        once that one is among them (an Event is recorded just after the status write it goes
        with, so a reader who saw the status may be a moment early)."""
        deadline = time.monotonic() + timeout
        while True:
            items = client.CoreV1Api(self.api).list_namespaced_event(
                self.namespace, field_selector=f"involvedObject.name={name}").items
            seen = sorted((e.type, e.reason) for e in items)
            if expect is None or expect in seen or time.monotonic() > deadline:
                return seen
            time.sleep(0.5)

    async def workflow_state(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        handle = self.temporal.get_workflow_handle(model_workflow_id(meta.get("namespace"), meta["name"], meta["uid"]))
        state: dict[str, Any] = await handle.query(Query.STATE, result_type=dict)
        return state
