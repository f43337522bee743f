"""Shared pieces of the end-to-end rollout tests that drive an InferenceService on the local
cluster (kwok pods) with the worker and the bridge as processes:

- `live_stack`, one worker-and-bridge stack per test module (like test_rollout_e2e's, here also
  bridging RolloutPolicy), in its own namespace, with an operator ConfigMap there;
- `LiveIsvc`, an InferenceService as an operator sees it: its spec and annotations, status,
  conditions, Events, HTTPRoute weights, Deployments and pods;
- `Recorder`, which samples what the cluster looked like while a rollout ran;
- the Temporal view of the rollout workflows (status, run, history length, `state` query).

Deadlines are generous upper bounds (the suite may run on a loaded machine); nothing is timed.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel
from temporalio.client import WorkflowExecutionStatus

from devstack.hub_server import HubServer
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.product import BridgeLauncher, start_worker
from devstack.services import OciRegistry, TemporalDevServer
from servingops.api_models import contract
from servingops.api_models.contract.rollout import RolloutState, ServiceView
from servingops.api_models.ome import InferenceService
from servingops.rendering.render import LABEL_COMPONENT, LABEL_NAME, LABEL_REVISION
from servingops.runtime.temporal import TemporalSettings, connect
from testkit.waiting import hold, wait_until
from tests.crd_helpers import create, manifest
from tests.fixtures.kube import own_identities
from tests.support.rollout_stack import route_weights

DEADLINE = 240.0
OLD_IMAGE = "vllm/vllm-openai:v0.9"
NEW_IMAGE = "vllm/vllm-openai:v0.10"
ISVC = ("ome.io", "v1beta1")
M = TypeVar("M", bound=BaseModel)


def component(image: str, replicas: int = 2, **extra: Any) -> dict[str, Any]:
    """A component spec that renders one container: `minReplicas` pods of `image`."""
    return {"minReplicas": replicas, "runner": {"name": "main", "image": image, "ports": [{"containerPort": 8000}]},
            **extra}


def canary(steps: list[dict[str, Any]], components: list[str] | None = None, **settings: Any) -> dict[str, Any]:
    """spec.rollout with one canary group (the engine unless told), scale-down after 1 s."""
    return {"groups": [{"components": components or ["engine"],
                        "canary": {"steps": steps, "scaleDownDelaySeconds": 1, **settings}}]}


@dataclass(frozen=True)
class LiveStack:
    api: client.ApiClient
    namespace: str
    worker: ManagedProcess
    temporal_address: str

    def isvc(self, name: str) -> LiveIsvc:
        return LiveIsvc(self, name)


OPERATOR_CONFIG = {"rollout": "scaleDownDelaySeconds: 1\n"}
"""The operator ConfigMap of a live stack: old revisions drain a second after the flip (blue-green
and rolling take their delay from here), every other default as shipped."""


@pytest.fixture(scope="module")
def live_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
               oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """A namespace that is also the worker's controller namespace (its operator ConfigMap lives
    there), a worker and a bridge (InferenceService and RolloutPolicy) on their own task queue."""
    task_queue = f"live-{uuid.uuid4().hex[:6]}"
    namespace = f"live-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(kube_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    # The chart's identities for this controller namespace: worker and bridge run as them.
    with own_identities(kube_cluster, namespace, tmp_path_factory.mktemp("identities")) as identities:
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=identities.operator_config), data=OPERATOR_CONFIG))
        worker = start_worker(kube_cluster, temporal_server, oci_registry, hub_server, task_queue,
                              tmp_path_factory.mktemp("spool"), stack_logs, host_id=f"host-{task_queue}",
                              identities=identities)
        launcher = BridgeLauncher(identities, temporal_server.address, stack_logs)
        try:
            launcher.start(task_queue=task_queue, kinds="InferenceService,RolloutPolicy")
            yield LiveStack(kube_api, namespace, worker, temporal_server.address)
        finally:
            launcher.stop_all()
            worker.stop()


@dataclass(frozen=True)
class Revision:
    """One revision's Deployment as `kubectl get deploy` shows it."""

    replicas: int
    ready: int


class LiveIsvc:
    """One InferenceService of a live stack, read and written through the apiserver."""

    def __init__(self, stack: LiveStack, name: str) -> None:
        self.stack = stack
        self.name = name
        self.ns = stack.namespace
        self.custom = client.CustomObjectsApi(stack.api)
        self.core = client.CoreV1Api(stack.api)
        self.apps = client.AppsV1Api(stack.api)

    # -- writes -----------------------------------------------------------------------------------

    def create(self, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> None:
        body = manifest(InferenceService, spec, name=self.name)
        if annotations:
            body["metadata"]["annotations"] = dict(annotations)
        create(self.stack.api, InferenceService, body, self.ns)

    def patch(self, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(*ISVC, self.ns, "inferenceservices", self.name, body)

    def set_component(self, name: str, spec: dict[str, Any]) -> None:
        """Replace one component's spec whole (a merge patch would keep fields the test dropped)."""
        self.custom.patch_namespaced_custom_object(
            *ISVC, self.ns, "inferenceservices", self.name, [{"op": "replace", "path": f"/spec/{name}", "value": spec}],
            _content_type="application/json-patch+json")

    def annotate(self, key: str, value: str | None) -> None:
        self.patch({"metadata": {"annotations": {key: value}}})

    def delete(self) -> None:
        self.custom.delete_namespaced_custom_object(*ISVC, self.ns, "inferenceservices", self.name)

    # -- reads ------------------------------------------------------------------------------------

    def get(self) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(*ISVC, self.ns, "inferenceservices",
                                                                            self.name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    def uid(self) -> str:
        obj = self.get()
        assert obj is not None, f"{self.name} is gone"
        return str(obj["metadata"]["uid"])

    def status(self) -> dict[str, Any]:
        return dict(((self.get() or {}).get("status")) or {})

    def component(self, name: str = "engine") -> dict[str, Any]:
        return dict((self.status().get("components") or {}).get(name) or {})

    def canary(self, name: str = "engine") -> dict[str, Any]:
        return dict(self.component(name).get("canary") or {})

    def phase(self, name: str = "engine") -> str | None:
        value = self.component(name).get("rolloutPhase")
        return str(value) if value is not None else None

    def coordination(self, key: str) -> dict[str, Any]:
        groups = (self.status().get("rolloutCoordination") or {}).get("groups") or []
        return dict(next((g for g in groups if g.get("name") == key), {}))

    def condition(self, kind: str) -> dict[str, Any]:
        conditions = self.status().get("conditions") or []
        return dict(next((c for c in conditions if c.get("type") == kind), {}))

    def events(self, reason: str | None = None) -> list[client.CoreV1Event]:
        items = self.core.list_namespaced_event(
            self.ns, field_selector=f"involvedObject.kind=InferenceService,involvedObject.name={self.name}").items
        # Creation order: timestamps have whole seconds, resourceVersions break the ties (an Event
        # seen again is patched, so a repeated one sorts by its last occurrence).
        return sorted((e for e in items if reason is None or e.reason == reason),
                      key=lambda e: (e.first_timestamp, int(e.metadata.resource_version)))

    def weights(self, name: str = "engine") -> dict[str, int]:
        """The HTTPRoute's backendRefs: backend Service -> weight ({} without a route)."""
        return route_weights(self.stack.api, self.ns, f"{self.name}-{name}")

    def serving(self, name: str = "engine") -> dict[str, int]:
        """The backends the route actually sends traffic to (weight > 0)."""
        return {backend: weight for backend, weight in self.weights(name).items() if weight > 0}

    def backend(self, revision: str, name: str = "engine") -> str:
        """The Deployment / Service / backendRef name of a revision hash."""
        return f"{self.name}-{name}-rev-{revision}"

    def revision(self, backend: str, name: str = "engine") -> str:
        """The revision hash of a Deployment / Service / backendRef name."""
        prefix = f"{self.name}-{name}-rev-"
        assert backend.startswith(prefix), backend
        return backend[len(prefix):]

    def deployments(self, name: str = "engine") -> dict[str, Revision]:
        items = self.apps.list_namespaced_deployment(
            self.ns, label_selector=f"{LABEL_NAME}={self.name},{LABEL_COMPONENT}={name}").items
        return {d.metadata.name: Revision(d.spec.replicas or 0, (d.status.ready_replicas or 0) if d.status else 0)
                for d in items}

    def services(self, name: str = "engine") -> set[str]:
        items = self.core.list_namespaced_service(
            self.ns, label_selector=f"{LABEL_NAME}={self.name},{LABEL_COMPONENT}={name}").items
        return {s.metadata.name for s in items}

    def pods(self, name: str = "engine") -> dict[str, tuple[int, int]]:
        """Revision hash -> (pods not being deleted, of which Ready)."""
        items = self.core.list_namespaced_pod(
            self.ns, label_selector=f"{LABEL_NAME}={self.name},{LABEL_COMPONENT}={name}").items
        counts: dict[str, tuple[int, int]] = {}
        for pod in items:
            if pod.metadata.deletion_timestamp is not None:
                continue
            revision = (pod.metadata.labels or {}).get(LABEL_REVISION, "")
            ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
            alive, ready_count = counts.get(revision, (0, 0))
            counts[revision] = (alive + 1, ready_count + int(ready))
        return counts

    # -- waiting ----------------------------------------------------------------------------------

    def wait(self, what: str, probe: Callable[[], Any], timeout: float = DEADLINE) -> Any:
        """Poll `probe` until it answers something truthy, and answer that; fail with the worker's
        log tail. (Probes are `cond and value` expressions: typed Any on purpose.)"""
        return wait_until(f"{self.name}: {what}", probe, self.stack.worker, timeout=timeout,
                          detail=lambda: f"status: {self.status()}")

    def hold(self, what: str, probe: Callable[[], bool], seconds: float) -> None:
        """`probe` stays true for `seconds` (what must not change while nothing asks it to)."""
        hold(f"{self.name}: {what}", probe, seconds, self.stack.worker, detail=lambda: f"status: {self.status()}")

    def first_revision(self, name: str = "engine") -> str:
        """Wait until the first revision serves 100% and is recorded as rolled out; its backend."""
        weights = self.wait(f"the first {name} revision serving 100%",
                            lambda: (w := self.weights(name)) and list(w.values()) == [100] and w)
        [backend] = weights
        self.wait(f"the first {name} revision rolled out",
                  lambda: self.component(name).get("latestRolledoutRevision") == backend)
        return backend

    def canary_at(self, stable: str, weight: int, name: str = "engine") -> str:
        """Wait for the route to split `100 - weight` / `weight` between stable and one canary;
        answer the canary backend."""
        weights = self.wait(f"the {name} canary at {weight}%", lambda: (
            (w := self.serving(name)).get(stable) == 100 - weight and len(w) == 2 and w))
        [backend] = [b for b in weights if b != stable]
        return backend

    def rolled_out(self, backend: str, name: str = "engine") -> dict[str, Any]:
        """Wait until `backend` alone carries the route and is recorded as rolled out."""
        self.wait(f"{backend} carrying all {name} traffic", lambda: self.serving(name) == {backend: 100})
        return self.wait(f"{backend} recorded as rolled out", lambda: (
            (c := self.component(name)).get("latestRolledoutRevision") == backend and c))

    # -- Temporal ---------------------------------------------------------------------------------

    def service_workflow_id(self) -> str:
        return contract.inference_service_workflow_id(self.ns, self.name, self.uid())

    def rollout_workflow_id(self, group: str, uid: str | None = None) -> str:
        return contract.rollout_workflow_id(self.ns, self.name, uid or self.uid(), group)

    def describe(self, workflow_id: str, run_id: str | None = None) -> WorkflowView:
        return asyncio.run(describe(self.stack.temporal_address, workflow_id, run_id))

    def rollout_state(self, group: str) -> RolloutState:
        """The `state` query of the group's rollout run."""
        return self._query(self.rollout_workflow_id(group), RolloutState)

    def service_state(self) -> ServiceView:
        """The `state` query of the InferenceService workflow."""
        return self._query(self.service_workflow_id(), ServiceView)

    def _query(self, workflow_id: str, answer: type[M]) -> M:
        async def query() -> M:
            temporal = await connect(TemporalSettings(address=self.stack.temporal_address))
            state: M = await temporal.get_workflow_handle(workflow_id).query(contract.Query.STATE, result_type=answer)
            return state

        return asyncio.run(query())


@dataclass(frozen=True)
class WorkflowView:
    status: WorkflowExecutionStatus | None
    run_id: str
    history_length: int


async def describe(address: str, workflow_id: str, run_id: str | None = None) -> WorkflowView:
    temporal = await connect(TemporalSettings(address=address))
    found = await temporal.get_workflow_handle(workflow_id, run_id=run_id).describe()
    return WorkflowView(found.status, found.run_id, found.raw_description.workflow_execution_info.history_length)


@dataclass
class Sample:
    """What one poll of the cluster saw."""

    weights: dict[str, int]
    replicas: dict[str, Revision]
    pods: dict[str, tuple[int, int]]


@dataclass
class Recorder:
    """Polls an InferenceService component's route, Deployments and pods in a thread, every
    0.2 s, and keeps every sample (a transient apiserver error skips one)."""

    isvc: LiveIsvc
    component: str = "engine"
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Recorder:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        # One last sample of the state the block waited for: the end of a rollout can move between two
        # polls and the block's exit (a loaded CI run once ended with the route at 100% unsampled).
        self._sample()

    def _sample(self) -> None:
        try:
            self.samples.append(Sample(self.isvc.weights(self.component), self.isvc.deployments(self.component),
                                       self.isvc.pods(self.component)))
        except ApiException:
            pass

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.2)

    def distinct_routes(self) -> list[dict[str, int]]:
        seen: list[dict[str, int]] = []
        for sample in self.samples:
            serving = {b: w for b, w in sample.weights.items() if w > 0}
            if serving and (not seen or seen[-1] != serving):
                seen.append(serving)
        return seen
