"""The capacity report end to end: the worker and the bridge as processes under the chart's identities,
the session's local cluster as the workload cluster. A root AcceleratorQuota gets status.capacity from
the cluster's Nodes and Kueue ResourceFlavors; a leaf gets nothing; a cordon shows at the next sample
while the high-water mark holds; deleting the root ends its workflow.

The nodes are kwok's (it plays their kubelet, so they stay Ready), tainted NoSchedule so no other
test's pod lands on them, with a resource of their own that the root's budget names (so it is
reported, and the session's other nodes do not enter the numbers)."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.kube import KWOK_NODE_ANNOTATION, REPO_ROOT, LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.product import WORKER_READY_SECONDS, BridgeLauncher
from devstack.services import TemporalDevServer
from servingops.api_models.contract import capacity_workflow_id
from testkit.waiting import wait_until
from tests.fixtures.kube import own_identities
from tests.support.cleanup import ignore_404

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "acceleratorquotas"
KUEUE = ("kueue.x-k8s.io", "v1beta2")


@dataclass
class Stack:
    api: client.ApiClient
    worker: ManagedProcess
    temporal: str
    suffix: str
    resource: str
    flavor: dict[str, Any]
    nodes: list[str]

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name))

    def mine(self, name: str) -> dict[str, Any] | None:
        capacity = (self.get(name).get("status") or {}).get("capacity") or []
        return next((c for c in capacity if c["resourceName"] == self.resource
                     and c["resourceFlavor"] == self.flavor["metadata"]["name"]), None)


def _kwok_node(name: str, labels: dict[str, str], resource: str) -> client.V1Node:
    allocatable = {"cpu": "4", "memory": "16Gi", "pods": "10", resource: "8"}
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels=labels, annotations={KWOK_NODE_ANNOTATION: "fake"}),
        spec=client.V1NodeSpec(taints=[client.V1Taint(key="servingops.test/capacity", value="true",
                                                      effect="NoSchedule")]),
        status=client.V1NodeStatus(capacity=allocatable, allocatable=allocatable))


@pytest.fixture(scope="module")
def stack(kube_cluster: LocalKubeCluster, temporal_server: TemporalDevServer, stack_logs: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    suffix = uuid.uuid4().hex[:6]
    namespace, task_queue = f"cap-{suffix}", f"cap-{suffix}"
    resource = f"example.com/accel-{suffix}"
    labels = {"test.servingops.io/tier": f"capacity-e2e-{suffix}"}
    api = kube_cluster.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    nodes = [f"cap-{suffix}-{i}" for i in range(2)]
    flavor_body = {"apiVersion": "/".join(KUEUE), "kind": "ResourceFlavor", "metadata": {"name": f"cap-{suffix}"},
                   "spec": {"nodeLabels": labels}}
    with own_identities(kube_cluster, namespace, tmp_path_factory.mktemp("identities")) as ids:
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=ids.operator_config), data={}))
        env = {**ids.worker_env(), "TEMPORAL_ADDRESS": temporal_server.address, "SERVINGOPS_TASK_QUEUE": task_queue,
               "SERVINGOPS_HOST_ID": f"host-{task_queue}",
               "SERVINGOPS_SPOOL_DIR": str(tmp_path_factory.mktemp("spool"))}
        worker = ManagedProcess(f"worker-{task_queue}", [sys.executable, "-m", "servingops.workers.main"], stack_logs,
                                env=env, cwd=REPO_ROOT).start()
        launcher = BridgeLauncher(ids, temporal_server.address, stack_logs)
        try:
            for name in nodes:
                core.create_node(_kwok_node(name, labels, resource))
            flavor = custom.create_cluster_custom_object(*KUEUE, "resourceflavors", flavor_body)
            worker.wait_ready(lambda: "ready on" in worker.log_tail(20), timeout=WORKER_READY_SECONDS)
            launcher.start(task_queue=task_queue, kinds="AcceleratorQuota")
            wait_until("kwok makes the nodes Ready", lambda: all(
                any(c.type == "Ready" and c.status == "True" for c in (core.read_node(n).status.conditions or []))
                for n in nodes), worker, 60)
            yield Stack(api, worker, temporal_server.address, suffix, resource, flavor, nodes)
        finally:
            launcher.stop_all()
            worker.stop()
            for name in (f"cap-{suffix}-leaf", f"cap-{suffix}-root"):
                ignore_404(lambda n=name: custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, n))
            for name in nodes:
                ignore_404(lambda n=name: core.delete_node(n))
            ignore_404(lambda: custom.delete_cluster_custom_object(*KUEUE, "resourceflavors",
                                                                    flavor_body["metadata"]["name"]))
            core.delete_namespace(namespace)
            api.close()  # type: ignore[no-untyped-call]


async def _result(address: str, workflow_id: str) -> dict[str, Any]:
    temporal = await Client.connect(address, data_converter=pydantic_data_converter)
    return dict(await asyncio.wait_for(temporal.get_workflow_handle(workflow_id).result(), 60))


def test_the_root_reports_its_clusters_capacity_and_a_leaf_nothing(stack: Stack) -> None:
    root_name, leaf_name = f"cap-{stack.suffix}-root", f"cap-{stack.suffix}-leaf"
    flavor = stack.flavor["metadata"]["name"]
    budget = {"resourceName": stack.resource, "resourceFlavor": flavor, "nominal": 16}
    root = stack.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "AcceleratorQuota", "metadata": {"name": root_name},
        "spec": {"role": "Cohort", "budgets": [budget]}})
    stack.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "AcceleratorQuota", "metadata": {"name": leaf_name},
        "spec": {"role": "ClusterQueue", "parentRef": {"name": root_name}, "budgets": [budget]}})

    entry = wait_until("the root's capacity report", lambda: stack.mine(root_name), stack.worker)
    assert entry["allocatable"] == 16 and entry["highWaterMark"] == 16
    assert entry["attribution"]["complete"] is True
    assert entry["attribution"]["flavorUID"] == stack.flavor["metadata"]["uid"]
    assert entry["attribution"]["nodeLabels"] == stack.flavor["spec"]["nodeLabels"]
    assert len(entry["attribution"]["flavorSetHash"]) == 64 and entry["observedAt"]
    # The default resource is reported too (the session's kwok nodes may match no flavor: then incomplete).
    assert any(c["resourceName"] == "nvidia.com/gpu" for c in stack.get(root_name)["status"]["capacity"])
    assert "capacity" not in (stack.get(leaf_name).get("status") or {})

    # A cordon, and a spec edit so the report samples now rather than in 30 s.
    client.CoreV1Api(stack.api).patch_node(stack.nodes[0], {"spec": {"unschedulable": True}})
    stack.custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, root_name,
                                             {"spec": {"budgets": [{**budget, "nominal": 12}]}})
    entry = wait_until("the cordon reported", lambda: (e := stack.mine(root_name)) and e["allocatable"] == 8 and e,
                  stack.worker, 60)
    assert entry["highWaterMark"] == 16  # held: one sample is not a lasting drop

    stack.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, root_name)
    state = asyncio.run(_result(stack.temporal, capacity_workflow_id(root_name, root["metadata"]["uid"])))
    assert state["phase"] == "Deleted"
