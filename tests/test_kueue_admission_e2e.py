"""Kueue admission of InferenceReplica Instances end to end: the real Kueue controller (built from its
Go module, its webhooks served over loopback TLS: devstack/kueue.py), the worker and the bridge as
processes under the chart's identities, kwok playing the kubelets.

A ClusterQueue with cpu quota for two Instances: a replica of three whose pods name the LocalQueue gets
two Ready and the third held at Kueue's gate, with Kueue's own reason on the replica (FailedScale
condition, a Warning Event) and only the KueuePending token in its row, its clock parked past
instanceReadyTimeout; more quota and it comes up. A gang is one Kueue pod group, admitted whole."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.kueue import KueueProcess, label_namespace
from devstack.process import ManagedProcess
from tests.support.replica_stack import Replica, replica_stack

__all__ = ["replica_stack"]  # the fixture, reused
pytestmark = pytest.mark.e2e

KUEUE = ("kueue.x-k8s.io", "v1beta2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GATE = "kueue.x-k8s.io/admission"


@pytest.fixture(scope="module")
def kueue_namespace(kueue: KueueProcess, kube_api: client.ApiClient,
                    replica_stack: tuple[str, ManagedProcess]) -> tuple[str, ManagedProcess]:
    """The replica stack's namespace, managed by Kueue from now on."""
    label_namespace(kube_api, replica_stack[0])
    return replica_stack


@pytest.fixture
def cluster_queue(kube_api: client.ApiClient,
                  kueue_namespace: tuple[str, ManagedProcess]) -> Iterator[tuple[str, str]]:
    """A ResourceFlavor, a ClusterQueue with cpu quota 2 and a LocalQueue in the stack's namespace:
    (ClusterQueue name, LocalQueue name). Removed afterwards."""
    custom = client.CustomObjectsApi(kube_api)
    suffix = uuid.uuid4().hex[:5]
    flavor, queue, local = f"flavor-{suffix}", f"cq-{suffix}", f"serving-{suffix}"
    custom.create_cluster_custom_object(*KUEUE, "resourceflavors", {
        "apiVersion": "/".join(KUEUE), "kind": "ResourceFlavor", "metadata": {"name": flavor}})
    custom.create_cluster_custom_object(*KUEUE, "clusterqueues", {
        "apiVersion": "/".join(KUEUE), "kind": "ClusterQueue", "metadata": {"name": queue},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "2"}]}]}]}})
    custom.create_namespaced_custom_object(*KUEUE, kueue_namespace[0], "localqueues", {
        "apiVersion": "/".join(KUEUE), "kind": "LocalQueue", "metadata": {"name": local},
        "spec": {"clusterQueue": queue}})
    try:
        yield queue, local
    finally:
        for delete in (lambda: custom.delete_namespaced_custom_object(*KUEUE, kueue_namespace[0], "localqueues",
                                                                      local),
                       lambda: custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", queue),
                       lambda: custom.delete_cluster_custom_object(*KUEUE, "resourceflavors", flavor)):
            try:
                delete()
            except ApiException as exc:
                if exc.status != 404:
                    raise


def set_quota(api: client.ApiClient, queue: str, cpu: str) -> None:
    custom = client.CustomObjectsApi(api)
    current = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", queue)
    groups = current["spec"]["resourceGroups"]
    groups[0]["flavors"][0]["resources"][0]["nominalQuota"] = cpu
    custom.patch_cluster_custom_object(*KUEUE, "clusterqueues", queue, {"spec": {"resourceGroups": groups}})


def queued_runner(queue: str, name: str = "default", size: int = 1) -> dict[str, Any]:
    """A runner whose pods name the LocalQueue and ask for one cpu (what the ClusterQueue counts)."""
    return {"name": name, "size": size, "template": {
        "metadata": {"labels": {"ome.io/runner": name, QUEUE_LABEL: queue}},
        "spec": {"containers": [{"name": "main", "image": "vllm/vllm-openai:v0.9",
                                 "ports": [{"containerPort": 8000}],
                                 "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}


def conditions(r: Replica) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in r.status.get("conditions") or []}


def held_rows(r: Replica) -> list[dict[str, Any]]:
    return [row for row in r.rows() if (row.get("operation") or {}).get("waiting") == "KueuePending"]


def gated(pod: client.V1Pod) -> bool:
    return any(g.name == GATE for g in pod.spec.scheduling_gates or [])


def test_kueue_holds_the_instance_past_its_quota_then_admits_it(
        kube_api: client.ApiClient, kueue_namespace: tuple[str, ManagedProcess],
        cluster_queue: tuple[str, str]) -> None:
    ns, worker = kueue_namespace
    queue, local = cluster_queue
    r = Replica(kube_api, ns, worker, f"kq-{uuid.uuid4().hex[:5]}")
    r.create(replicas=3, runners=[queued_runner(local)], lifecycle={"instanceReadyTimeout": "8s"})

    r.wait("two Instances Ready, the third held by Kueue", lambda: len(held_rows(r)) == 1 and sum(
        1 for row in r.rows() if row.get("phase") == "Ready") == 2
        and conditions(r).get("FailedScale", {}).get("reason") == "KueuePending", timeout=180)
    [held] = held_rows(r)
    index = held["index"]
    assert all(gated(p) for p in r.pods() if p.metadata.labels["ome.io/instance"] == str(index))
    message = r.wait("Kueue's reason on the replica", lambda: (
        conditions(r)["FailedScale"]["message"] if "insufficient" in conditions(r)["FailedScale"]["message"]
        else None))
    assert f"Instance(s) {index} wait for Kueue admission" in message and "couldn't assign flavors" in message
    events = r.wait("a Warning Event with Kueue's reason", lambda: [
        e for e in r.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={r.name}").items
        if e.reason == "KueuePending"])
    assert len(events) == 1 and events[0].type == "Warning" and f"Instance {index}" in events[0].message
    assert "insufficient" in events[0].message

    time.sleep(12)  # past instanceReadyTimeout (8 s): a parked clock neither fails nor blocks the Instance
    status = r.status
    [held] = held_rows(r)
    assert held["operation"]["type"] == "Create" and "deadline" not in held["operation"]
    assert not held.get("admitted")  # false is the default: the status leaves it out
    assert not status.get("retryBlocks"), status.get("retryBlocks")
    assert conditions(r)["OperationStuck"]["status"] == "False"
    assert conditions(r)["FailedUpdate"]["status"] == "False"
    assert all(row["admitted"] is True for row in r.rows() if row["index"] != index)

    set_quota(kube_api, queue, "3")
    r.settle(3, "admitted once the ClusterQueue has room", timeout=120)
    assert all(row["admitted"] is True and "announced" not in row for row in r.rows())
    assert conditions(r)["FailedScale"]["status"] == "False"
    assert not any(gated(p) for p in r.pods())

    # Kueue's finalizer on its pods does not keep a scale-down from completing.
    r.patch({"replicas": 2})
    r.settle(2, "scaled down with Kueue managing the pods")


def test_kueue_admits_a_gang_as_a_whole(kube_api: client.ApiClient, kueue_namespace: tuple[str, ManagedProcess],
                                        cluster_queue: tuple[str, str]) -> None:
    ns, worker = kueue_namespace
    queue, local = cluster_queue
    set_quota(kube_api, queue, "1")  # one cpu: the gang of two pods cannot have it in part
    g = Replica(kube_api, ns, worker, f"kg-{uuid.uuid4().hex[:5]}")
    g.create(replicas=1, runners=[queued_runner(local, "leader"), queued_runner(local, "worker", size=1)],
             lifecycle={"instanceReadyTimeout": "8s"})
    g.wait("the gang held by Kueue", lambda: len(held_rows(g)) == 1 and len(g.pods()) == 2, timeout=180)
    group = f"{g.name}-0-i0"
    pods = g.pods()
    assert {p.metadata.labels["kueue.x-k8s.io/pod-group-name"] for p in pods} == {group}
    assert {p.metadata.annotations["kueue.x-k8s.io/pod-group-total-count"] for p in pods} == {"2"}
    workload = g.wait("the group's one Workload", lambda: next((
        w for w in client.CustomObjectsApi(kube_api).list_namespaced_custom_object(*KUEUE, ns, "workloads")["items"]
        if w["metadata"]["name"] == group), None))
    assert {o["name"] for o in workload["metadata"]["ownerReferences"]} == {p.metadata.name for p in pods}
    time.sleep(5)
    assert all(gated(p) for p in g.pods()), "no pod of the gang is admitted on its own"

    set_quota(kube_api, queue, "2")
    g.settle(1, "the gang admitted whole", timeout=120)
    assert not any(gated(p) for p in g.pods()) and g.rows()[0]["admitted"] is True


def test_a_leafs_priority_tier_is_stamped_on_its_workloads_unless_they_declare_one(
        kube_api: client.ApiClient, kueue_namespace: tuple[str, ManagedProcess],
        cluster_queue: tuple[str, str]) -> None:
    """The namespace bound to an AcceleratorQuota leaf (label ome.io/accelerator-quota) whose LocalQueue the
    pods name: Kueue's Workload of a plain Instance carries the leaf's priorityTier (its WorkloadPriorityClass
    and that class's value); an Instance whose runner names its own class keeps it (seed 004: a default, not a
    partition). The leaf is only read here (no quota workflow runs in this module): the LocalQueue the fixture
    made is the one a leaf of that name materializes in a bound namespace."""
    ns, worker = kueue_namespace
    _, local = cluster_queue
    custom, core = client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api)
    sfx = uuid.uuid4().hex[:5]
    tier, own = f"tier-high-{sfx}", f"tier-own-{sfx}"
    for name, value in ((tier, 1000), (own, 10)):
        custom.create_cluster_custom_object(*KUEUE, "workloadpriorityclasses", {
            "apiVersion": "/".join(KUEUE), "kind": "WorkloadPriorityClass", "metadata": {"name": name},
            "value": value})
    custom.create_cluster_custom_object("ome.io", "v1beta1", "acceleratorquotas", {
        "apiVersion": "ome.io/v1beta1", "kind": "AcceleratorQuota", "metadata": {"name": local},
        "spec": {"role": "ClusterQueue", "parentRef": {"name": f"grp-{sfx}"}, "priorityTier": tier,
                 "budgets": [{"resourceName": "nvidia.com/gpu", "resourceFlavor": f"gpu-{sfx}", "nominal": 1}]}})
    core.patch_namespace(ns, {"metadata": {"labels": {"ome.io/accelerator-quota": local}}})
    try:
        plain = Replica(kube_api, ns, worker, f"kt-{sfx}")
        plain.create(replicas=1, runners=[queued_runner(local)])
        declared_runner = queued_runner(local)
        declared_runner["template"]["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = own
        declared = Replica(kube_api, ns, worker, f"ko-{sfx}")
        declared.create(replicas=1, runners=[declared_runner])

        def workload_of(r: Replica) -> dict[str, Any] | None:
            pods = r.pods()
            if not pods:
                return None
            uid = pods[0].metadata.uid
            return next((w for w in custom.list_namespaced_custom_object(*KUEUE, ns, "workloads")["items"]
                         if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences") or [])
                         and w["spec"].get("priority") is not None), None)

        stamped = plain.wait("the plain Instance's Workload", lambda: workload_of(plain), timeout=120)
        kept = declared.wait("the declaring Instance's Workload", lambda: workload_of(declared), timeout=120)
        print("stamped:", plain.pods()[0].metadata.labels.get("kueue.x-k8s.io/priority-class"),
              stamped["spec"].get("priorityClassRef"), stamped["spec"].get("priority"))
        print("kept:   ", declared.pods()[0].metadata.labels.get("kueue.x-k8s.io/priority-class"),
              kept["spec"].get("priorityClassRef"), kept["spec"].get("priority"))
        assert stamped["spec"]["priorityClassRef"]["name"] == tier and stamped["spec"]["priority"] == 1000
        assert stamped["spec"]["priorityClassRef"]["kind"] == "WorkloadPriorityClass"
        assert kept["spec"]["priorityClassRef"]["name"] == own and kept["spec"]["priority"] == 10
        plain.settle(1, "the stamped Instance admitted and Ready", timeout=120)
        for r in (plain, declared):  # their pods go with them (garbage collection), the queue's cpu with them
            custom.delete_namespaced_custom_object("ome.io", "v1beta1", ns, "inferencereplicas", r.name)
        for r in (plain, declared):
            r.wait("its pods gone", lambda r=r: not r.pods(), timeout=120)
    finally:
        core.patch_namespace(ns, {"metadata": {"labels": {"ome.io/accelerator-quota": None}}})
        for delete in (lambda: custom.delete_cluster_custom_object("ome.io", "v1beta1", "acceleratorquotas", local),
                       lambda: custom.delete_cluster_custom_object(*KUEUE, "workloadpriorityclasses", tier),
                       lambda: custom.delete_cluster_custom_object(*KUEUE, "workloadpriorityclasses", own)):
            try:
                delete()
            except ApiException as exc:
                if exc.status != 404:
                    raise
