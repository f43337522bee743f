"""The AcceleratorQuota projection end to end: a management plane (the session's cluster, its worker and bridge as
processes under the chart's identities) with two member clusters registered as WorkloadClusters
(devstack/members.py: each its own apiserver, kwok nodes, the real Kueue, and its own servingops worker and
bridge reconciling AcceleratorQuota), the projection written into each member as its placement-member identity.

The tree `fleet` (root, no budget) -> `grp` (4 GPUs) -> leaf `team`, 3 GPUs on the member's flavor, Explicit:
east 2, west 1. What is shown:
- each member holds the three copies, the leaf's with its share only (no perCluster), annotated with the source
  generation; each member's own workflow materializes them into its own Kueue (Cohorts fleet and grp, a
  ClusterQueue team with nominalQuota = the share) and echoes status.sourceGeneration;
- the management plane's team reports clusters[] (appliedGeneration = materializedGeneration = 1, no message)
  and budgets[].perCluster (east 2, west 1);
- a workload over east's share waits in east: three 1-GPU pods, two admitted, the third at Kueue's gate; the
  management plane's perCluster shows east admitted 2;
- an edit of the split (east 3, west 0) reaches both members as generation 2: the third pod is admitted in east;
- deleting team deletes its copies in both members; west's ClusterQueue goes at once, east's stays terminating
  (Kueue's finalizer) while it holds admitted workloads and goes once they are deleted;
- a Proportional leaf follows the members' real capacity: east gets a node of 30 GPUs, west one of 2; each member's
  own capacity report (its root copy's status.capacity: every node's GPUs) reaches the management root's
  status.capacity[].perCluster (placement.read_member_capacity), and a leaf of 4 GPUs splits by those capacities
  (largest remainder) in the members' ClusterQueues;
- deregistering west (deleting its WorkloadCluster): the projection's finalizer holds it until the management
  plane has deleted the copies still there (fleet's and grp's; west's own workflows then reap its Cohorts), then
  it goes; east keeps its copies.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack import identities
from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.kueue import MANAGED_LABEL
from devstack.members import FLAVOR, MemberCluster
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from testkit.waiting import wait_until
from tests.support.rollout_stack import worker_and_bridge

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "acceleratorquotas"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
GPU = "nvidia.com/gpu"
NODE_LABEL = "ome.io/accelerator-quota"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GATE = "kueue.x-k8s.io/admission"
DEADLINE = 180.0


@dataclass
class Fleet:
    worker: ManagedProcess
    members: dict[str, MemberCluster]


@pytest.fixture(scope="module")
def fleet(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
          oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    suffix = uuid.uuid4().hex[:5]
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "qproj", "AcceleratorQuota",
                           identities=chart_identities) as (_, worker):
        work = tmp_path_factory.mktemp("members")
        members = {role: MemberCluster(f"qp-{suffix}-{role}", work / role, stack_logs, cpu_quota="0")
                   for role in ("east", "west")}
        try:
            with ThreadPoolExecutor(len(members)) as pool:
                for started in [pool.submit(m.start, temporal_server.address) for m in members.values()]:
                    started.result()
            for member in members.values():
                member.register(kube_api, identities.NAMESPACE)
            yield Fleet(worker, members)
        finally:
            for member in members.values():
                member.unregister(kube_api, identities.NAMESPACE)
                member.stop()


def _quota(name: str, role: str, parent: str | None, budgets: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"role": role, **extra}
    if budgets:
        spec["budgets"] = budgets
    if parent:
        spec["parentRef"] = {"name": parent}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AcceleratorQuota", "metadata": {"name": name}, "spec": spec}


def _get(api: client.ApiClient, *path: str) -> dict[str, Any] | None:
    try:
        return dict(client.CustomObjectsApi(api).get_cluster_custom_object(*path))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_the_tree_is_projected_into_each_member_and_enforced_there(kube_api: client.ApiClient, fleet: Fleet) -> None:
    custom = client.CustomObjectsApi(kube_api)
    east, west = fleet.members["east"], fleet.members["west"]
    sfx = uuid.uuid4().hex[:5]
    root, grp, team = f"fleet-{sfx}", f"grp-{sfx}", f"team-{sfx}"
    gpus = {"resourceName": GPU, "resourceFlavor": FLAVOR}
    shares = [{"cluster": east.name, "nominal": 2}, {"cluster": west.name, "nominal": 1}]

    def wait(what: str, probe: Any, timeout: float = DEADLINE, detail: Any = None) -> None:
        wait_until(what, probe, fleet.worker, timeout, detail=detail)

    def status(name: str) -> dict[str, Any]:
        return dict((_get(kube_api, GROUP, VERSION, PLURAL, name) or {}).get("status") or {})

    def rows() -> dict[str, dict[str, Any]]:
        return {r["cluster"]: r for r in status(team).get("clusters") or []}

    def per_cluster() -> dict[str, dict[str, Any]]:
        budget = next((b for b in status(team).get("budgets") or [] if b.get("resourceFlavor") == FLAVOR), {})
        return {r["cluster"]: r for r in budget.get("perCluster") or []}

    def copy(member: MemberCluster, name: str) -> dict[str, Any] | None:
        return _get(member.api, GROUP, VERSION, PLURAL, name)

    def queue_share(member: MemberCluster, leaf: str = team) -> str | None:
        queue = _get(member.api, *KUEUE, "clusterqueues", leaf)
        if queue is None:
            return None
        return next((str(r["nominalQuota"]) for g in queue["spec"]["resourceGroups"] for f in g["flavors"]
                     for r in f["resources"] if r["name"] == GPU), None)

    # Accelerators for the Proportional step, added first: each member samples its capacity every 30 s.
    gpu_nodes = [(east, east.cluster.add_accelerator_node(f"gpu-{sfx}", {GPU: "30"}, {})),
                 (west, west.cluster.add_accelerator_node(f"gpu-{sfx}", {GPU: "2"}, {}))]
    spread = f"spread-{sfx}"
    try:
        for body in (_quota(root, "Cohort", None, []), _quota(grp, "Cohort", root, [{**gpus, "nominal": 4}]),
                     _quota(team, "ClusterQueue", grp, [{**gpus, "nominal": 3, "perCluster": shares}],
                            distribution={"policy": "Explicit"})):
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)

        for member, share in ((east, "2"), (west, "1")):
            wait(f"{member.name}'s ClusterQueue {team} at {share}", lambda m=member, s=share: queue_share(m) == s)
            found = copy(member, team)
            assert found is not None
            print(f"{member.name} copy of {team}: spec={found['spec']} annotations={found['metadata']['annotations']}")
            assert found["spec"]["budgets"] == [{**gpus, "nominal": share}]
            assert found["metadata"]["annotations"]["ome.io/quota-source-generation"] == "1"
            wait(f"{member.name}'s Cohorts {grp} and {root}", lambda m=member: _get(m.api, *KUEUE, "cohorts", grp)
                 is not None and _get(m.api, *KUEUE, "cohorts", root) is not None)
            wait(f"{member.name} echoes sourceGeneration 1",
                 lambda m=member: ((copy(m, team) or {}).get("status") or {}).get("sourceGeneration") == 1)
        wait("the management plane's rows caught up", lambda: len(rows()) == 2 and all(
            r.get("materializedGeneration") == 1 and not r.get("message") for r in rows().values()))
        print("clusters:", rows())
        assert {c: r["appliedGeneration"] for c, r in rows().items()} == {east.name: 1, west.name: 1}
        assert {c: r["nominal"] for c, r in per_cluster().items()} == {east.name: "2", west.name: "1"}

        # a workload over east's share waits in east
        ns = f"qp-{sfx}"
        core = client.CoreV1Api(east.api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
            name=ns, labels={MANAGED_LABEL: "true", NODE_LABEL: team})))
        wait("east's LocalQueue", lambda: any(q["metadata"]["name"] == team for q in client.CustomObjectsApi(
            east.api).list_namespaced_custom_object(*KUEUE, ns, "localqueues")["items"]))
        for i in range(3):
            core.create_namespaced_pod(ns, client.V1Pod(
                metadata=client.V1ObjectMeta(name=f"p{i}", labels={QUEUE_LABEL: team}),
                spec=client.V1PodSpec(containers=[client.V1Container(
                    name="c", image="example.invalid/none", resources=client.V1ResourceRequirements(
                        limits={GPU: "1"}, requests={GPU: "1"}))])))

        def gated() -> list[str]:
            return sorted(p.metadata.name for p in core.list_namespaced_pod(ns).items
                          if any(g.name == GATE for g in p.spec.scheduling_gates or []))

        wait("two of three admitted in east", lambda: len(gated()) == 1 and len(core.list_namespaced_pod(ns).items)
             == 3)
        wait("east's usage on the management plane", lambda: per_cluster().get(east.name, {}).get("admitted") == "2")
        print("perCluster:", per_cluster())

        # the split moves: generation 2 reaches both members, and east's third pod is admitted
        custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, team, {"spec": {"budgets": [
            {**gpus, "nominal": 3, "perCluster": [{"cluster": east.name, "nominal": 3},
                                                  {"cluster": west.name, "nominal": 0}]}]}})
        wait("east at 3, west at 0", lambda: queue_share(east) == "3" and queue_share(west) == "0")
        wait("the third pod admitted in east", lambda: gated() == [])
        wait("generation 2 materialized in both", lambda: all(
            r.get("appliedGeneration") == 2 and r.get("materializedGeneration") == 2 for r in rows().values()))
        print("clusters after the edit:", rows())

        # deletion takes the copies with it
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, team)
        for member in (east, west):
            wait(f"{member.name}'s copy gone", lambda m=member: copy(m, team) is None)
        wait(f"{west.name}'s ClusterQueue gone", lambda: queue_share(west) is None)
        # east's queue still holds three admitted workloads: Kueue keeps it terminating until they finish
        wait(f"{east.name}'s ClusterQueue terminating", lambda: bool(
            ((_get(east.api, *KUEUE, "clusterqueues", team) or {}).get("metadata") or {}).get("deletionTimestamp")))
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        wait(f"{east.name}'s ClusterQueue gone once drained", lambda: queue_share(east) is None)
        wait("the source gone", lambda: _get(kube_api, GROUP, VERSION, PLURAL, team) is None)

        # a Proportional leaf follows each member's own capacity report, read into the root's perCluster
        def capacity_rows() -> dict[str, Any]:
            entry = next((e for e in status(root).get("capacity") or []
                          if (e.get("resourceName"), e.get("resourceFlavor")) == (GPU, FLAVOR)), {})
            return {r["cluster"]: r for r in entry.get("perCluster") or []}

        def member_gpus(member: MemberCluster) -> int:
            """What the member's own report must reach: every node's nvidia.com/gpu (the flavor selects all)."""
            return sum(int((n.status.allocatable or {}).get(GPU, "0"))
                       for n in client.CoreV1Api(member.api).list_node().items)

        wanted = {east.name: member_gpus(east), west.name: member_gpus(west)}
        wait("each member's report on the management root", lambda: {
            c: int(r.get("highWaterMark") or 0) for c, r in capacity_rows().items()} == wanted,
             timeout=240, detail=lambda: {"management root": status(root).get("capacity"), **{
                 f"{m.name}'s root": ((copy(m, root) or {}).get("status") or {}).get("capacity")
                 for m in (east, west)}})
        print("root capacity perCluster:", capacity_rows())
        assert all(r["reportAvailable"] and r["reportUID"] and r["clusterUID"] for r in capacity_rows().values())
        # 4 GPUs by largest remainder over the two capacities (east's added node makes it the larger share)
        total = sum(wanted.values())
        exact = {c: Fraction(4 * v, total) for c, v in wanted.items()}
        shares = {c: int(x) for c, x in exact.items()}
        for c in sorted(exact, key=lambda c: (-(exact[c] - shares[c]), c))[:4 - sum(shares.values())]:
            shares[c] += 1
        print("capacities", wanted, "-> shares", shares)
        assert shares[east.name] > shares[west.name]
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, _quota(
            spread, "ClusterQueue", grp, [{**gpus, "nominal": 4}], distribution={"policy": "Proportional"}))
        wait("the split by capacity in both members", lambda: queue_share(east, spread) == str(shares[east.name])
             and queue_share(west, spread) == str(shares[west.name]))
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, spread)
        for member in (east, west):
            wait(f"{member.name}'s copy of {spread} gone", lambda m=member: copy(m, spread) is None)

        # deregistering west: its registration is held (the projection's finalizer) until the management plane
        # has deleted the copies still there (fleet's and grp's), then it goes; east keeps its copies
        registration = _get(kube_api, GROUP, VERSION, "workloadclusters", west.name) or {}
        assert "ome.io/quota-projection" in (registration.get("metadata") or {}).get("finalizers", [])
        custom.delete_cluster_custom_object(GROUP, VERSION, "workloadclusters", west.name)
        wait(f"{west.name}'s copies deleted", lambda: copy(west, grp) is None and copy(west, root) is None)
        wait(f"{west.name}'s registration gone", lambda: _get(kube_api, GROUP, VERSION, "workloadclusters",
                                                              west.name) is None)
        assert copy(east, grp) is not None and copy(east, root) is not None
        wait(f"{west.name}'s Cohorts reaped by its own workflows", lambda: _get(west.api, *KUEUE, "cohorts", grp)
             is None and _get(west.api, *KUEUE, "cohorts", root) is None)
        wait(f"grp's row for {west.name} gone", lambda: west.name not in {
            r["cluster"] for r in status(grp).get("clusters") or []})
        print("after deregistering west: grp clusters:", status(grp).get("clusters"))
    finally:
        for member, node in gpu_nodes:
            member.cluster.remove_node(node)
        for name in (spread, team, grp, root):
            try:
                custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
