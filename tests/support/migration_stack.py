"""Migration end-to-end helpers: a traffic sampler, the Service under test, the audit ledger's entries."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

from kubernetes import client

from devstack.identities import Identities
from devstack.kube import UNREADY_NODE_TAINT
from devstack.process import ManagedProcess
from servingops.activities.migration import ledger
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome.instance_keys import INSTANCE_LABEL, REPLICA_LABEL
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest
from tests.support.replica_stack import serving_instances

GROUP, VERSION = "ome.io", "v1beta1"


class Service:
    """An OMENative InferenceService with N engine Instances and what the test reads of it."""

    def __init__(self, api: client.ApiClient, ns: str, worker: ManagedProcess, instances: int,
                 engine: dict[str, Any] | None = None) -> None:
        self.api, self.ns, self.worker = api, ns, worker
        self.name = f"mig-{uuid.uuid4().hex[:5]}"
        self.replica = f"{self.name}-engine"
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        spec = {"deploymentMode": "OMENative", "engine": {
            "minReplicas": instances, "runner": {"name": "engine", "image": "vllm/vllm-openai:v0.9",
                                                 "ports": [{"containerPort": 8000}]}, **(engine or {})}}
        create(api, InferenceService, manifest(InferenceService, spec, name=self.name), ns)

    def status(self) -> dict[str, Any]:
        try:
            obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "inferencereplicas", self.replica)
        except client.exceptions.ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        return dict(obj.get("status") or {})

    def pods(self) -> list[client.V1Pod]:
        return list(self.core.list_namespaced_pod(self.ns, label_selector=f"{REPLICA_LABEL}={self.replica}").items)

    def settled(self, indexes: list[int]) -> bool:
        status = self.status()
        rows = status.get("instanceStatuses") or []
        return ([r["index"] for r in rows] == indexes and status.get("availableReplicas") == len(indexes)
                and all("operation" not in r and r.get("phase") == "Ready" for r in rows)
                and len([p for p in self.pods() if p.metadata.deletion_timestamp is None]) == len(indexes))

    def node_of(self, index: int) -> str:
        return next(str(p.spec.node_name) for p in self.pods()
                    if p.metadata.labels[INSTANCE_LABEL] == str(index) and p.metadata.deletion_timestamp is None)

    def request(self, instance: int, to: list[str]) -> str:
        request_uuid = str(uuid.uuid4())
        value = json.dumps({"schemaVersion": "v1", "component": "engine", "instance": instance,
                            "from_node": self.node_of(instance), "hint_target_nodes": to, "reason": "maintenance",
                            "requested_at": "2026-11-30T00:00:00Z", "requested_by": "e2e"})
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, "inferenceservices", self.name, {
            "metadata": {"annotations": {f"ome.io/migration-request-v1-{request_uuid}": value}}})
        return request_uuid

    def record(self, request_uuid: str) -> dict[str, Any]:
        return next((m for m in self.status().get("migrations") or [] if m.get("requestUUID") == request_uuid), {})

    def annotations(self) -> dict[str, str]:
        obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "inferenceservices", self.name)
        return dict(obj["metadata"].get("annotations") or {})

    def wait(self, what: str, probe: Any, timeout: float = 180) -> Any:
        return wait_until(f"{self.name}: {what}", probe, self.worker, timeout)


class Sampler:
    """Every 100 ms: the serving Instance count, and any source pod seen terminating while an
    EndpointSlice still has it Ready."""

    def __init__(self, service: Service, sources: set[str]) -> None:
        self.service, self.sources = service, sources
        self.serving: list[int] = []
        self.leaks: list[str] = []
        self.uids: dict[str, set[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        discovery = client.DiscoveryV1Api(self.service.api)
        while not self._stop.is_set():
            pods = self.service.pods()
            slices = discovery.list_namespaced_endpoint_slice(self.service.ns).items
            ready = {e.target_ref.name for s in slices for e in s.endpoints or []
                     if e.target_ref is not None and e.conditions is not None and e.conditions.ready}
            live = [p for p in pods if p.metadata.deletion_timestamp is None]
            self.serving.append(serving_instances(live))
            for pod in pods:
                self.uids.setdefault(pod.metadata.name, set()).add(pod.metadata.uid)
                if pod.metadata.name in self.sources and pod.metadata.deletion_timestamp and (
                        pod.metadata.name in ready):
                    self.leaks.append(pod.metadata.name)
            time.sleep(0.1)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def ledger_entry(api: client.ApiClient, identities: Identities, ns: str, replica: str,
                 request_id: str) -> dict[str, Any]:
    """The audit ledger's entry for one migration (activities/migration/ledger.py), {} when absent."""
    try:
        cm = client.CoreV1Api(api).read_namespaced_config_map(ledger.NAME, identities.namespace)
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    value = (cm.data or {}).get(ledger.key_of(ns, replica, request_id))
    return dict(json.loads(value)) if value else {}


def tolerate_unready(node: str) -> dict[str, Any]:
    """Engine fields that let its pods onto `node` (an unready kwok node) and prefer it."""
    return {"tolerations": [{"key": UNREADY_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100, "preference": {"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}}]}}}
