"""The AcceleratorQuota tree on the real Kueue, end to end: the worker and the bridge as processes under the
chart's identities, the Kueue controller built from its Go module (devstack/kueue.py) with its webhooks,
kwok for the kubelets.

A tree of five nodes: the root Cohort `fleet` (a guardrail budget of 8 GPUs), two groupings `grp-a` (4) and
`grp-b` under it, and two leaves under `grp-a`: `team-a` (2 GPUs, borrowingLimit 2, priorityTier naming a
WorkloadPriorityClass that exists) and `team-b` (2 GPUs, no borrowing). Namespaces are bound to a leaf by the
label `ome.io/accelerator-quota: <leaf>` (Kueue manages them too). What is shown, in this order:

- materialized: a Kueue Cohort per grouping (parentName = its parent), a ClusterQueue per leaf (cohortName =
  its parent, nominalQuota = its budget, borrowingLimit explicit), a LocalQueue per bound namespace, each
  labelled with its node; every node Ready True Admitted, Degraded False, Materialized True;
- a workload over its leaf's budget waits: three 1-GPU pods in team-b's namespace, two admitted, the third
  held at Kueue's admission gate although team-a's share is idle (the explicit borrowingLimit 0);
  status.budgets of team-b admitted 2;
- borrowing within a cohort: with team-b's pods gone, three 1-GPU pods of team-a are all admitted (one
  borrowed from team-b's idle share); status.budgets of team-a admitted 3, borrowed 1; grp-a rolls it up;
- re-parenting in place: team-a's parentRef moves to grp-b; its ClusterQueue keeps its uid with cohortName
  grp-b, its LocalQueue keeps its uid, its admitted Workloads stay admitted;
- the drained-leaf guard: team-a, holding admitted work, switched to role Cohort is Degraded
  RoleChangeBlocked and frozen (its ClusterQueue and pods untouched, no Cohort made); switched back, it thaws;
- a containment violation freezes: team-b's nominal raised above grp-a's guardrail makes grp-a and team-b
  Degraded ContainmentViolated, team-b's materialization frozen with its ClusterQueue still at 2 and a
  Warning Event; lowered again, it thaws (Unfrozen Event) and the queue follows;
- deletion reaps: deleting team-b removes its ClusterQueue and LocalQueue, then the object.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.kueue import MANAGED_LABEL, KueueProcess
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from testkit.waiting import wait_until
from tests.support.cleanup import ignore_404
from tests.support.rollout_stack import worker_and_bridge

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "acceleratorquotas"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
GPU = "nvidia.com/gpu"
NODE_LABEL = "ome.io/accelerator-quota"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GATE = "kueue.x-k8s.io/admission"
DEADLINE = 120.0


@pytest.fixture(scope="module")
def quota_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                kueue: KueueProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "quota", "AcceleratorQuota",
                           identities=chart_identities) as stack:
        yield stack


def _table(api: client.ApiClient, names: list[str]) -> str:
    """What `kubectl get acceleratorquotas -o wide` shows for these nodes (the apiserver's Table of the CRD's
    printer columns)."""
    method, url, headers, _, _ = api.param_serialize(
        "GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}, auth_settings=["BearerToken"])
    response = api.call_api(method, url, headers)
    response.read()
    table = json.loads(response.data)
    columns = [c["name"] for c in table["columnDefinitions"] if c["name"] != "Age"]
    lines = ["  ".join(f"{c:<16}" for c in ["NAME", *columns[1:]])]
    for row in table["rows"]:
        cells = dict(zip([c["name"] for c in table["columnDefinitions"]], row["cells"], strict=True))
        if cells["Name"] in names:
            lines.append("  ".join(f"{cells[c]!s:<16}" for c in columns))
    return "\n".join(lines)


def _quota(name: str, role: str, parent: str | None, budgets: list[dict[str, Any]],
           **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"role": role, "budgets": budgets, **extra}
    if parent:
        spec["parentRef"] = {"name": parent}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AcceleratorQuota", "metadata": {"name": name}, "spec": spec}


def test_the_tree_materializes_into_kueue_and_kueue_enforces_it(
        kube_api: client.ApiClient, quota_stack: tuple[str, ManagedProcess]) -> None:
    _, worker = quota_stack
    custom, core = client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api)
    sfx = uuid.uuid4().hex[:5]
    flavor, tier = f"gpu-{sfx}", f"serving-high-{sfx}"
    fleet, grp_a, grp_b, team_a, team_b = (f"{n}-{sfx}" for n in ("fleet", "grp-a", "grp-b", "team-a", "team-b"))
    ns_a, ns_b = f"qa-{sfx}", f"qb-{sfx}"
    nodes = [fleet, grp_a, grp_b, team_a, team_b]

    def status(name: str) -> dict[str, Any]:
        return dict(custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name).get("status") or {})

    def condition(name: str, kind: str) -> dict[str, Any]:
        return next((c for c in status(name).get("conditions") or [] if c["type"] == kind), {})

    def budget(name: str) -> dict[str, Any]:
        return next((b for b in status(name).get("budgets") or [] if b.get("resourceFlavor") == flavor), {})

    def queue(name: str) -> dict[str, Any]:
        return dict(custom.get_cluster_custom_object(*KUEUE, "clusterqueues", name))

    def gpu_quota(name: str) -> tuple[str, str]:
        [group] = queue(name)["spec"]["resourceGroups"]
        [entry] = [r for f in group["flavors"] if f["name"] == flavor for r in f["resources"] if r["name"] == GPU]
        return str(entry["nominalQuota"]), str(entry.get("borrowingLimit"))

    def pod(ns: str, name: str, leaf: str) -> None:
        core.create_namespaced_pod(ns, client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, labels={QUEUE_LABEL: leaf}),
            spec=client.V1PodSpec(containers=[client.V1Container(
                name="c", image="example.invalid/none", resources=client.V1ResourceRequirements(
                    limits={GPU: "1"}, requests={GPU: "1"}))])))

    def admitted(ns: str) -> list[str]:
        return sorted(p.metadata.name for p in core.list_namespaced_pod(ns).items
                      if not any(g.name == GATE for g in p.spec.scheduling_gates or []))

    def gated(ns: str) -> list[str]:
        return sorted(p.metadata.name for p in core.list_namespaced_pod(ns).items
                      if any(g.name == GATE for g in p.spec.scheduling_gates or []))

    try:
        for ns, leaf in ((ns_a, team_a), (ns_b, team_b)):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
                name=ns, labels={MANAGED_LABEL: "true", NODE_LABEL: leaf})))
        # Referenced, never created by the controller (seed 004): the flavor and the priority class.
        custom.create_cluster_custom_object(*KUEUE, "resourceflavors", {
            "apiVersion": "/".join(KUEUE), "kind": "ResourceFlavor", "metadata": {"name": flavor}})
        custom.create_cluster_custom_object(*KUEUE, "workloadpriorityclasses", {
            "apiVersion": "/".join(KUEUE), "kind": "WorkloadPriorityClass", "metadata": {"name": tier},
            "value": 1000})
        gpus = {"resourceName": GPU, "resourceFlavor": flavor}
        for body in (
                _quota(fleet, "Cohort", None, [{**gpus, "nominal": 8}]),
                _quota(grp_a, "Cohort", fleet, [{**gpus, "nominal": 4}]),
                _quota(grp_b, "Cohort", fleet, []),
                _quota(team_a, "ClusterQueue", grp_a, [{**gpus, "nominal": 2, "borrowingLimit": 2}],
                       priorityTier=tier, distribution={"policy": "Proportional"}),
                _quota(team_b, "ClusterQueue", grp_a, [{**gpus, "nominal": 2}],
                       distribution={"policy": "Proportional"})):
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)

        for name in nodes:
            wait_until(f"{name} Ready", lambda n=name: condition(n, "Ready").get("status") == "True",
                       worker, DEADLINE)
        for name in nodes:
            print(f"status of {name}: {json.dumps(status(name), sort_keys=True)}")
            assert condition(name, "Degraded")["status"] == "False"
            assert condition(name, "Materialized")["status"] == "True"
            assert status(name)["materialization"]["lastAppliedGeneration"] == 1
        print(f"kubectl get acceleratorquotas -o wide, materialized:\n{_table(kube_api, nodes)}")
        cohort_a = custom.get_cluster_custom_object(*KUEUE, "cohorts", grp_a)
        assert cohort_a["spec"] == {"parentName": fleet}
        assert cohort_a["metadata"]["labels"][NODE_LABEL] == grp_a
        assert "parentName" not in custom.get_cluster_custom_object(*KUEUE, "cohorts", fleet).get("spec", {})
        assert queue(team_a)["spec"]["cohortName"] == grp_a and gpu_quota(team_a) == ("2", "2")
        assert gpu_quota(team_b) == ("2", "0")  # no borrowingLimit: an explicit zero
        assert queue(team_a)["metadata"]["labels"]["ome.io/priority-tier"] == tier
        local_a = custom.get_namespaced_custom_object(*KUEUE, ns_a, "localqueues", team_a)
        assert local_a["spec"]["clusterQueue"] == team_a
        assert status(team_a)["parent"] == grp_a

        # Over its budget, a workload waits (team-a's idle share is not borrowable by team-b).
        for i in range(3):
            pod(ns_b, f"b{i}", team_b)
        wait_until("two of team-b's pods admitted", lambda: len(admitted(ns_b)) == 2, worker, DEADLINE)
        wait_until("team-b's status counts them", lambda: str(budget(team_b).get("admitted")) == "2",
                   worker, DEADLINE)
        assert len(gated(ns_b)) == 1
        print(f"team-b over budget: admitted {admitted(ns_b)}, waiting {gated(ns_b)}; budgets {budget(team_b)}")
        assert str(budget(team_b)["borrowed"]) == "0" and str(budget(team_b)["reserved"]) == "2"
        for i in range(3):
            ignore_404(lambda i=i: core.delete_namespaced_pod(f"b{i}", ns_b, grace_period_seconds=0))
        wait_until("team-b's pods gone", lambda: not core.list_namespaced_pod(ns_b).items, worker, DEADLINE)

        # Borrowing within the cohort: team-a takes a third GPU from team-b's idle share.
        for i in range(3):
            pod(ns_a, f"a{i}", team_a)
        wait_until("all three of team-a's pods admitted", lambda: len(admitted(ns_a)) == 3, worker, DEADLINE)
        wait_until("team-a's status shows the borrowed GPU", lambda: (
            str(budget(team_a).get("admitted")), str(budget(team_a).get("borrowed"))) == ("3", "1"), worker, DEADLINE)
        wait_until("grp-a rolls its leaves up", lambda: str(budget(grp_a).get("admitted")) == "3", worker, DEADLINE)
        print(f"team-a borrowing: {budget(team_a)}; grp-a: {budget(grp_a)}; fleet: {budget(fleet)}")
        print(f"kubectl get acceleratorquotas -o wide, team-a borrowing:\n{_table(kube_api, nodes)}")

        # Re-parenting moves the ClusterQueue's cohort in place.
        before_queue, before_local = queue(team_a)["metadata"]["uid"], local_a["metadata"]["uid"]
        workloads = {w["metadata"]["uid"] for w in custom.list_namespaced_custom_object(
            *KUEUE, ns_a, "workloads")["items"]}
        custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, team_a, {"spec": {"parentRef": {"name": grp_b}}})
        wait_until("team-a's ClusterQueue in cohort grp-b", lambda: queue(team_a)["spec"].get("cohortName") == grp_b,
                   worker, DEADLINE)
        assert queue(team_a)["metadata"]["uid"] == before_queue
        assert custom.get_namespaced_custom_object(*KUEUE, ns_a, "localqueues", team_a)["metadata"]["uid"] \
            == before_local
        after = custom.list_namespaced_custom_object(*KUEUE, ns_a, "workloads")["items"]
        assert {w["metadata"]["uid"] for w in after} == workloads
        assert all(any(c["type"] == "Admitted" and c["status"] == "True" for c in w["status"]["conditions"])
                   for w in after)
        assert len(admitted(ns_a)) == 3
        wait_until("team-a's status echoes the new parent", lambda: status(team_a).get("parent") == grp_b,
                   worker, DEADLINE)
        print(f"re-parented: team-a {json.dumps(status(team_a), sort_keys=True)}")

        # The drained-leaf guard: a leaf holding admitted work cannot turn grouping (its queue would go).
        leaf_spec = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, team_a)["spec"]
        custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, team_a, {"spec": {
            "role": "Cohort", "priorityTier": None, "distribution": None, "budgets": [{**gpus, "nominal": 2}]}})
        wait_until("team-a's role change refused", lambda: condition(team_a, "Degraded").get("reason")
                   == "RoleChangeBlocked", worker, DEADLINE)
        print(f"role change refused: {condition(team_a, 'Degraded')['message']}")
        assert status(team_a)["materialization"]["frozen"] is True
        assert queue(team_a)["metadata"]["uid"] == before_queue and len(admitted(ns_a)) == 3
        with pytest.raises(ApiException) as no_cohort:
            custom.get_cluster_custom_object(*KUEUE, "cohorts", team_a)
        assert no_cohort.value.status == 404
        custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, team_a, {"spec": leaf_spec})
        wait_until("team-a a leaf again, thawed", lambda: condition(team_a, "Ready").get("status") == "True"
                   and not status(team_a)["materialization"].get("frozen"), worker, DEADLINE)

        # A containment violation freezes the family at its last-good output.
        custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, team_b,
                                           {"spec": {"budgets": [{**gpus, "nominal": 5}]}})
        wait_until("team-b frozen", lambda: (status(team_b).get("materialization") or {}).get("frozen") is True,
                   worker, DEADLINE)
        wait_until("grp-a Degraded", lambda: condition(grp_a, "Degraded").get("status") == "True", worker, DEADLINE)
        frozen = status(team_b)
        print(f"frozen: team-b {json.dumps(frozen, sort_keys=True)}")
        print(f"kubectl get acceleratorquotas -o wide, frozen:\n{_table(kube_api, nodes)}")
        assert condition(team_b, "Degraded")["reason"] == "ContainmentViolated"
        assert condition(team_b, "Ready")["status"] == "False"
        assert condition(team_b, "Materialized")["reason"] == "Frozen"
        assert frozen["materialization"]["reason"] == "ContainmentViolated"
        assert frozen["materialization"]["lastAppliedGeneration"] == 1 and frozen["materialization"]["frozenAt"]
        assert gpu_quota(team_b) == ("2", "0")  # last-good kept
        assert str(budget(team_b)["nominal"]) == "2"  # status reports what Kueue still enforces
        warnings = [e for e in core.list_namespaced_event("default",
                                                          field_selector=f"involvedObject.name={team_b}").items
                    if e.reason == "ContainmentViolated" and e.type == "Warning"]
        assert warnings, "a Warning Event for the freeze"
        print(f"event: {warnings[0].reason}: {warnings[0].message}")
        custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, team_b,
                                           {"spec": {"budgets": [{**gpus, "nominal": 3}]}})

        def thawed() -> bool:
            return not (status(team_b).get("materialization") or {}).get("frozen") and gpu_quota(team_b) == ("3", "0")

        wait_until("team-b thawed and its queue at 3", thawed, worker, DEADLINE)
        wait_until("team-b Ready again", lambda: condition(team_b, "Ready").get("status") == "True", worker, DEADLINE)
        assert status(team_b)["materialization"]["lastAppliedGeneration"] == 3
        assert "frozenAt" not in status(team_b)["materialization"]
        print(f"thawed: team-b {json.dumps(status(team_b), sort_keys=True)}")

        # Deletion reaps the node's Kueue objects, then lets the object go.
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, team_b)

        def reaped() -> bool:
            try:
                custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, team_b)
                return False
            except ApiException as exc:
                return exc.status == 404

        wait_until("team-b reaped", reaped, worker, DEADLINE)
        for call in (lambda: custom.get_cluster_custom_object(*KUEUE, "clusterqueues", team_b),
                     lambda: custom.get_namespaced_custom_object(*KUEUE, ns_b, "localqueues", team_b)):
            with pytest.raises(ApiException) as gone:
                call()
            assert gone.value.status == 404
    finally:
        for ns in (ns_a, ns_b):
            for p in core.list_namespaced_pod(ns).items if _exists(core, ns) else []:
                ignore_404(lambda p=p, ns=ns: core.delete_namespaced_pod(p.metadata.name, ns, grace_period_seconds=0))
        for name in reversed(nodes):
            ignore_404(lambda n=name: custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, n))
        for name in reversed(nodes):
            wait_until(f"{name} reaped", lambda n=name: _gone(custom, n), worker, DEADLINE)
        for ns in (ns_a, ns_b):
            ignore_404(lambda ns=ns: core.delete_namespace(ns))
        ignore_404(lambda: custom.delete_cluster_custom_object(*KUEUE, "workloadpriorityclasses", tier))
        ignore_404(lambda: custom.delete_cluster_custom_object(*KUEUE, "resourceflavors", flavor))


def _exists(core: client.CoreV1Api, ns: str) -> bool:
    try:
        core.read_namespace(ns)
        return True
    except ApiException:
        return False


def _gone(custom: client.CustomObjectsApi, name: str) -> bool:
    try:
        custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        return False
    except ApiException as exc:
        return exc.status == 404
