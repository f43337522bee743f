"""Single placement end to end: a control plane (the session's cluster, its worker and bridge as
processes under the chart's identities) and three member clusters (devstack/members.py: each its own
apiserver, kwok nodes, the real Kueue with a ClusterQueue, and its own servingops worker and bridge),
registered as WorkloadClusters through kubeconfig Secrets of the chart's placement-member identity.

Admission is Kueue's decision in each member: the derived InferenceService's pods name the member's
LocalQueue and ask for one cpu, and a member whose ClusterQueue has no cpu quota keeps them gated.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack import identities
from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.members import PLACEMENT_QUEUE, MemberCluster, registration_ready
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from servingops.api_models.contract import Query, placement_workflow_id
from servingops.api_models.contract.placement import ADOPT_ANNOTATION
from servingops.api_models.ome.placement import EXECUTION_ANNOTATION, ORIGIN_LABEL
from servingops.rendering.kueue import ADMISSION_GATE, QUEUE_LABEL
from servingops.runtime.temporal import TemporalSettings, connect
from testkit.waiting import wait_until
from tests.support.replica_stack import restart
from tests.support.rollout_stack import worker_and_bridge

pytestmark = pytest.mark.e2e

GROUP, VERSION = "ome.io", "v1beta1"


@dataclass
class Fleet:
    namespace: str
    worker: ManagedProcess
    members: dict[str, MemberCluster]
    """By role: a, b, c (their WorkloadCluster names sort in that order)."""
    tier: str
    """The label key this module's members carry (other modules' WorkloadClusters never match)."""
    temporal: str


@pytest.fixture(scope="module")
def fleet(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
          oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    suffix = uuid.uuid4().hex[:5]
    tier = f"tier-{suffix}.placement.test/gpu"
    # The control plane's own operator config: a short observation grace (a lost winner) and a quick
    # WorkloadCluster health interval, read by this module's worker only.
    config = f"placement-e2e-{suffix}"
    client.CoreV1Api(kube_api).create_namespaced_config_map(identities.NAMESPACE, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=config), data={"placement": "observationGrace: 10s\n",
                                                         "workloadClusters": "healthCheckInterval: 5s\n"}))
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "place", "InferenceService,WorkloadCluster",
                           identities=chart_identities,
                           extra_env={"SERVINGOPS_OPERATOR_CONFIG": config}) as (namespace, worker):
        work = tmp_path_factory.mktemp("members")
        members = {role: MemberCluster(f"pl-{suffix}-{role}", work / role, stack_logs,
                                       labels={tier: "yes" if role in "ab" else "no"}, cpu_quota="0")
                   for role in "abc"}
        env = {"HF_ENDPOINT": hub_server.url, "SERVINGOPS_REGISTRY": oci_registry.address,
               "SERVINGOPS_OLLAMA_REGISTRY": oci_registry.url, "HF_HUB_DISABLE_TELEMETRY": "1"}
        try:
            with ThreadPoolExecutor(len(members)) as pool:
                for started in [pool.submit(m.start, temporal_server.address, env) for m in members.values()]:
                    started.result()
            for member in members.values():
                member.prepare_namespace(namespace)
                member.register(kube_api, identities.NAMESPACE)
            for member in members.values():
                wait_until(f"WorkloadCluster {member.name} Ready",
                           lambda m=member: registration_ready(kube_api, m.name),
                      worker, 120)
            yield Fleet(namespace, worker, members, tier, temporal_server.address)
        finally:
            for member in members.values():
                member.unregister(kube_api, identities.NAMESPACE)
                member.stop()
            client.CoreV1Api(kube_api).delete_namespaced_config_map(config, identities.NAMESPACE)


# -- reading the world ------------------------------------------------------------------------------


def _source(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, ns, "inferenceservices", name)
    return obj


def _placement(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return dict((_source(api, ns, name).get("status") or {}).get("placement") or {})


def _derived(member: MemberCluster, ns: str, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = client.CustomObjectsApi(member.api).get_namespaced_custom_object(
            GROUP, VERSION, ns, "inferenceservices", name)
        return obj
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _pods(member: MemberCluster, ns: str) -> list[client.V1Pod]:
    return [p for p in client.CoreV1Api(member.api).list_namespaced_pod(ns).items
            if p.metadata.deletion_timestamp is None]


def _condition(member: MemberCluster, ns: str, name: str, kind: str) -> tuple[str | None, str]:
    """The reason and message of a condition of the derived copy in the member."""
    conditions = ((_derived(member, ns, name) or {}).get("status") or {}).get("conditions") or []
    found = next((c for c in conditions if c.get("type") == kind), {})
    return found.get("reason"), found.get("message") or ""


def _events(api: client.ApiClient, ns: str, name: str) -> list[tuple[str, str, str]]:
    items = client.CoreV1Api(api).list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [(e.type, e.reason, e.message) for e in items]


def _spec(fleet: Fleet) -> dict[str, Any]:
    return {
        "deploymentMode": "OMENative",
        "engine": {"minReplicas": 1, "runner": {
            "name": "engine", "image": "vllm/vllm-openai:v0.9", "ports": [{"containerPort": 8000}],
            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}},
        "placement": {"policy": "ClusterAffinity", "mode": "Single", "clusterAffinity": [
            {"matchExpressions": [{"key": fleet.tier, "operator": "In", "values": ["yes"]}]}]},
    }


def _create(api: client.ApiClient, fleet: Fleet, name: str) -> str:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": fleet.namespace}, "spec": _spec(fleet)}
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, fleet.namespace, "inferenceservices", body)
    return str(created["metadata"]["uid"])


async def _query_state(fleet: Fleet, name: str, uid: str) -> dict[str, Any]:
    temporal = await connect(TemporalSettings(address=fleet.temporal))
    handle = temporal.get_workflow_handle(placement_workflow_id(fleet.namespace, name, uid))
    state: dict[str, Any] = await handle.query(Query.STATE, result_type=dict)
    return state


def _quotas(fleet: Fleet, **cpu: str) -> None:
    for role, quota in cpu.items():
        fleet.members[role].set_quota(quota)


# -- the race ---------------------------------------------------------------------------------------


def test_the_second_listed_member_admits_first_and_wins(kube_api: client.ApiClient, fleet: Fleet) -> None:
    ns, worker = fleet.namespace, fleet.worker
    a, b, c = (fleet.members[r] for r in "abc")
    _quotas(fleet, a="0", b="4", c="4")
    name = f"race-{uuid.uuid4().hex[:5]}"
    uid = _create(kube_api, fleet, name)

    placed = wait_until("Placed in b", lambda: (p := _placement(kube_api, ns, name)).get("phase") == "Placed" and p,
                   worker, 180)
    plan = placed["plan"]
    assert (plan["winner"], placed["cluster"], plan["mode"], plan["revision"], plan["sourceUID"]) == (
        b.name, b.name, "Single", 1, uid)
    assert len(plan["inputDigest"]) == 64 and plan["id"]
    [row] = placed["candidates"]
    assert (row["cluster"], row["phase"], row["admittedReplicas"], row["appliedPlanID"]) == (
        b.name, "Placed", 1, plan["id"])
    assert row["allocation"]["raceCandidate"] is False and row["allocation"]["matched"] is True

    # b serves the derived copy: same name and namespace, origin label, the plan's execution policy,
    # its pods in b's LocalQueue and out of Kueue's gate.
    derived = _derived(b, ns, name)
    assert derived is not None and derived["metadata"]["labels"][ORIGIN_LABEL] == uid
    execution = json.loads(derived["metadata"]["annotations"][EXECUTION_ANNOTATION])
    assert (execution["planID"], execution["revision"], execution["sourceUID"]) == (plan["id"], 1, uid)
    assert "placement" not in derived["spec"]
    pods = wait_until("b's Instance running", lambda: [p for p in _pods(b, ns) if p.metadata.labels.get(
        "ome.io/inferencereplica") == f"{name}-engine"], worker)
    assert all(p.metadata.labels[QUEUE_LABEL] == PLACEMENT_QUEUE for p in pods)
    assert not any(g.name == ADMISSION_GATE for p in pods for g in p.spec.scheduling_gates or [])
    # a raced and lost: its copy is gone, and with it (the member's garbage collector) its gated pods.
    assert _derived(a, ns, name) is None
    wait_until("a's race pods gone", lambda: not [p for p in _pods(a, ns) if p.metadata.labels.get(
        "ome.io/inferencereplica") == f"{name}-engine"], worker)
    # c never matched: it never had a copy. The control plane renders nothing of a placed service.
    assert _derived(c, ns, name) is None
    assert not [r for r in client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
        GROUP, VERSION, ns, "inferencereplicas")["items"] if r["metadata"]["name"].startswith(name)]
    assert not client.CoreV1Api(kube_api).list_namespaced_pod(
        ns, label_selector=f"ome.io/inferencereplica={name}-engine").items

    # Ready is placement serving readiness (seed 004), written by the placement workflow alone.
    ready = wait_until("the source Ready", lambda: [c for c in (_source(kube_api, ns, name).get("status") or {}).get(
        "conditions") or [] if c["type"] == "Ready" and c["status"] == "True"], worker, 120)
    assert ready[0]["reason"] == "PlacementServing" and ready[0]["message"].startswith(f"served from {b.name}")

    reasons = [reason for _, reason, _ in _events(kube_api, ns, name)]
    for expected in ("PlacementRacing", "PlacementWinner", "PlacementLoserRemoved", "Placed"):
        assert expected in reasons, reasons
    racing = next(m for _, r, m in _events(kube_api, ns, name) if r == "PlacementRacing")
    assert a.name in racing and b.name in racing and c.name not in racing
    state = asyncio.run(_query_state(fleet, name, uid))
    assert state["why"][a.name] == f"lost the race: {b.name} admitted first"
    assert state["why"][b.name] == "won the race: admitted first"

    # Quota freed on a afterwards changes nothing: the winner is committed.
    _quotas(fleet, a="4")
    time.sleep(8)
    after = _placement(kube_api, ns, name)
    assert after["plan"] == plan and after["cluster"] == b.name
    assert _derived(a, ns, name) is None


def test_a_worker_killed_between_the_winner_commit_and_the_loser_deletion_resumes(
        kube_api: client.ApiClient, fleet: Fleet) -> None:
    """Both members hold the race copies at zero quota; a's apiserver goes away, b gets quota and
    wins. The commit lands, a's copy cannot be deleted yet; the worker is killed there. The new
    worker keeps the same plan and winner, never touches b's copy, and removes a's once a is back."""
    ns, worker = fleet.namespace, fleet.worker
    a, b = fleet.members["a"], fleet.members["b"]
    _quotas(fleet, a="0", b="0")
    name = f"crash-{uuid.uuid4().hex[:5]}"
    uid = _create(kube_api, fleet, name)
    wait_until("both race copies applied", lambda: _derived(a, ns, name) and _derived(b, ns, name), worker)
    b_uid = (_derived(b, ns, name) or {})["metadata"]["uid"]
    plan_id = _placement(kube_api, ns, name)["plan"]["id"]

    a.cluster.kill_apiserver()
    try:
        _quotas(fleet, b="4")
        committed = wait_until("the winner committed, a's copy still listed", lambda: (
            (p := _placement(kube_api, ns, name)).get("plan", {}).get("winner") == b.name
            and a.name in [r["cluster"] for r in p.get("candidates") or []] and p), worker, 180)
        assert committed["phase"] == "Racing" and committed["plan"]["id"] == plan_id
        restart(worker)
        time.sleep(3)  # the new worker replays and looks again: a is still unreachable
        again = _placement(kube_api, ns, name)
        assert again["plan"]["id"] == plan_id and again["plan"]["winner"] == b.name
    finally:
        a.cluster.start_apiserver()
    wait_until("a's copy removed once a is back", lambda: _derived(a, ns, name) is None, worker, 120)
    placed = wait_until("Placed in b", lambda: (p := _placement(kube_api, ns, name)).get("phase") == "Placed" and p,
                   worker, 120)
    assert placed["plan"]["id"] == plan_id and [r["cluster"] for r in placed["candidates"]] == [b.name]
    assert (_derived(b, ns, name) or {})["metadata"]["uid"] == b_uid, "the winner's copy was never replaced"
    warnings = [(r, m) for t, r, m in _events(kube_api, ns, name) if t == "Warning"]
    assert any(r == "MemberUnreachable" and a.name in m for r, m in warnings), warnings
    assert uid


def test_a_winner_whose_member_goes_away_is_lost_after_the_grace_and_the_service_races_again(
        kube_api: client.ApiClient, fleet: Fleet) -> None:
    ns, worker = fleet.namespace, fleet.worker
    a, b = fleet.members["a"], fleet.members["b"]
    _quotas(fleet, a="0", b="4")
    name = f"lost-{uuid.uuid4().hex[:5]}"
    _create(kube_api, fleet, name)
    first = wait_until("Placed in b", lambda: (p := _placement(kube_api, ns, name)).get("phase") == "Placed" and p,
                  worker, 180)
    assert first["plan"]["winner"] == b.name

    _quotas(fleet, a="4")
    b.cluster.kill_apiserver()
    try:
        wait_until("b's registration no longer Ready", lambda: not registration_ready(kube_api, b.name), worker, 60)
        second = wait_until("a new race placed it in a", lambda: (
            (p := _placement(kube_api, ns, name)).get("plan", {}).get("winner") == a.name and p), worker, 180)
        assert second["plan"]["revision"] == 2 and second["plan"]["id"] != first["plan"]["id"]
        rows = {r["cluster"]: r for r in second["candidates"]}
        # b's copy is still to be deleted, and b serves nothing: its row is drained, or, when the new race began
        # before the health workflow had marked b not Ready (its interval against the 10 s grace), b raced
        # again (a copy it could not take) and is the race's loser: deleted as such once b answers.
        b_row = rows[b.name]
        assert "endpoint" not in b_row, b_row
        assert b_row["allocation"].get("drainRequested") is True or (
            b_row["allocation"].get("raceCandidate") is True and b_row.get("phase") != "Placed"), b_row
        lost = [m for t, r, m in _events(kube_api, ns, name) if t == "Warning" and r == "PlacementWinnerLost"]
        assert lost and lost[0].startswith(f"{b.name} lost: it cannot be read (Unreachable")
        assert "observation grace of 10s" in lost[0]
        derived = _derived(a, ns, name)
        assert derived is not None and json.loads(derived["metadata"]["annotations"][EXECUTION_ANNOTATION])[
            "revision"] == 2
    finally:
        b.cluster.start_apiserver()
    wait_until("b's stale copy deleted once b is back", lambda: _derived(b, ns, name) is None, worker, 180)
    placed = wait_until("Placed in a alone", lambda: (p := _placement(kube_api, ns, name)).get("phase") == "Placed"
                   and [r["cluster"] for r in p["candidates"]] == [a.name] and p, worker, 120)
    assert placed["plan"]["winner"] == a.name and placed["cluster"] == a.name
    wait_until("b Ready again", lambda: registration_ready(kube_api, b.name), worker, 60)


def test_a_source_deleted_while_its_home_is_down_stays_until_the_copy_is_withdrawn(
        kube_api: client.ApiClient, fleet: Fleet) -> None:
    """The finalizer keeps a deleted source (Terminating) while its home's apiserver is down, said in a
    Warning; once the member is back its copy is deleted and only then does the source go."""
    ns, worker = fleet.namespace, fleet.worker
    b = fleet.members["b"]
    _quotas(fleet, a="0", b="4")
    name = f"gone-{uuid.uuid4().hex[:5]}"
    _create(kube_api, fleet, name)
    wait_until("Placed in b", lambda: _placement(kube_api, ns, name).get("phase") == "Placed", worker, 180)
    assert "servingops.io/placement" in _source(kube_api, ns, name)["metadata"]["finalizers"]

    b.cluster.kill_apiserver()
    try:
        client.CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices",
                                                                          name)
        wait_until("the pending withdrawal said", lambda: [m for t, r, m in _events(kube_api, ns, name)
                                                       if t == "Warning" and r == "PlacementWithdrawalPending"],
              worker, 120)
        held = _source(kube_api, ns, name)
        assert held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"] == ["servingops.io/placement"]
        assert [r["cluster"] for r in held["status"]["placement"]["candidates"]] == [b.name]
    finally:
        b.cluster.start_apiserver()

    def source_gone() -> bool:
        try:
            _source(kube_api, ns, name)
            return False
        except ApiException as exc:
            return exc.status == 404
    wait_until("the source gone once b's copy is", source_gone, worker, 180)
    assert _derived(b, ns, name) is None
    wait_until("b Ready again", lambda: registration_ready(kube_api, b.name), worker, 60)


def test_a_single_move_rotates_a_probe_that_never_admits_and_hands_over_once_the_replacement_serves(
        kube_api: client.ApiClient, fleet: Fleet) -> None:
    """Placed in b; spec.placement is changed to exclude b (replacementTimeout 20s). a (no quota) is
    probed first and never admits: withdrawn after the timeout; c (quota) is probed, admits, serves, and
    takes over; only then is b's copy deleted."""
    ns, worker = fleet.namespace, fleet.worker
    a, b, c = (fleet.members[r] for r in "abc")
    _quotas(fleet, a="0", b="4", c="4")
    name = f"move-{uuid.uuid4().hex[:5]}"
    _create(kube_api, fleet, name)
    first = wait_until("Placed in b", lambda: (p := _placement(kube_api, ns, name)).get("phase") == "Placed" and p,
                  worker, 180)
    assert first["plan"]["winner"] == b.name
    b_uid = (_derived(b, ns, name) or {})["metadata"]["uid"]

    placement = {"policy": "ClusterAffinity", "mode": "Single", "replacementTimeout": "20s", "clusterAffinity": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [a.name, c.name]}]}]}
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        GROUP, VERSION, ns, "inferenceservices", name, {"spec": {"placement": placement}})
    wait_until("a probed", lambda: _derived(a, ns, name), worker, 60)
    probing = _placement(kube_api, ns, name)
    assert probing["plan"]["winner"] == b.name and probing["plan"]["singleMove"]["cursor"] == a.name
    assert _derived(c, ns, name) is None, "one extra copy at a time"
    assert (_derived(b, ns, name) or {})["metadata"]["uid"] == b_uid, "b keeps serving during the move"

    wait_until("a withdrawn after replacementTimeout", lambda: _derived(a, ns, name) is None, worker, 120)
    moved = wait_until("moved to c", lambda: (p := _placement(kube_api, ns, name)).get("plan", {}).get("winner")
                  == c.name and p, worker, 180)
    assert moved["cluster"] == c.name
    wait_until("b's copy deleted after the handoff", lambda: _derived(b, ns, name) is None, worker, 120)
    done = wait_until("the move record cleared", lambda: "singleMove" not in (p := _placement(kube_api, ns, name))[
        "plan"] and p, worker, 60)
    assert [r["cluster"] for r in done["candidates"]] == [c.name] and done["phase"] == "Placed"
    reasons = [r for _, r, _ in _events(kube_api, ns, name)]
    for expected in ("PlacementMoveStarted", "PlacementProbe", "PlacementProbeRotated",
                     "PlacementReplacementSelected", "PlacementMoved"):
        assert expected in reasons, reasons


def test_split_three_to_one_over_two_members_and_a_ceiling_that_holds_the_plan(
        kube_api: client.ApiClient, fleet: Fleet) -> None:
    ns, worker = fleet.namespace, fleet.worker
    a, b, c = (fleet.members[r] for r in "abc")
    # Room for this test's 3 + 1 beside what earlier tests left admitted in each member's queue.
    _quotas(fleet, a="16", b="16", c="16")
    name = f"split-{uuid.uuid4().hex[:5]}"

    def split(ceiling: int | None = None) -> dict[str, Any]:
        return {"policy": "ClusterAffinity", "mode": "Split",
                "split": {"replicas": 4, **({"maxReplicasPerCluster": ceiling} if ceiling else {})},
                "clusterAffinity": [
                    {"weight": weight, "matchFields": [{"key": "metadata.name", "operator": "In", "values": [m.name]}]}
                    for m, weight in ((a, 3), (b, 1))]}

    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": ns}, "spec": {**_spec(fleet), "placement": split()}}
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", body)
    placed = wait_until("Placed: 3 in a, 1 in b", lambda: (p := _placement(kube_api, ns, name)).get("phase") == "Placed"
                   and p, worker, 240)
    plan = placed["plan"]
    assert (plan["mode"], plan["revision"], plan["assignedReplicas"], plan["unassignedReplicas"]) == ("Split", 1, 4, 0)
    rows = {r["cluster"]: r for r in placed["candidates"]}
    assert {n: (r["allocation"]["desiredReplicas"], r["admittedReplicas"]) for n, r in rows.items()} == {
        a.name: (3, 3), b.name: (1, 1)}
    for member, floor in ((a, 3), (b, 1)):
        derived = _derived(member, ns, name)
        assert derived is not None and derived["spec"]["engine"]["minReplicas"] == floor
        instances = [p for p in _pods(member, ns)
                     if p.metadata.labels.get("ome.io/inferencereplica") == f"{name}-engine"]
        assert len(instances) == floor and not any(g.name == ADMISSION_GATE for p in instances
                                                   for g in p.spec.scheduling_gates or [])
    assert _derived(c, ns, name) is None
    assert "cluster" not in placed and "endpoint" not in placed

    # maxReplicasPerCluster 2: a plan needing 3 in a is held with the reason; the accepted one stays.
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        GROUP, VERSION, ns, "inferenceservices", name, {"spec": {"placement": split(ceiling=2)}})
    held = wait_until("held with the reason", lambda: [m for t, r, m in _events(kube_api, ns, name)
                                                 if t == "Warning" and r == "MaxReplicasPerClusterExceeded"], worker)
    assert held[0].startswith(f"maxReplicasPerCluster is 2; the plan needs {a.name}=3")
    assert _placement(kube_api, ns, name)["plan"] == plan
    assert (_derived(a, ns, name) or {})["spec"]["engine"]["minReplicas"] == 3


def test_all_runs_the_full_policy_in_every_matching_member(kube_api: client.ApiClient, fleet: Fleet) -> None:
    """Mode All: every matching member (a and b, not c) runs the source's whole policy (its minReplicas),
    each admitted by its own Kueue; the source is Ready once both serve."""
    ns, worker = fleet.namespace, fleet.worker
    a, b, c = (fleet.members[r] for r in "abc")
    _quotas(fleet, a="16", b="16", c="16")
    name = f"all-{uuid.uuid4().hex[:5]}"
    spec = _spec(fleet)
    spec["placement"] = {**spec["placement"], "mode": "All"}
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", body)
    placed = wait_until("Placed in a and b", lambda: (p := _placement(kube_api, ns, name)).get("phase") == "Placed"
                   and p, worker, 240)
    assert placed["plan"]["mode"] == "All" and placed["plan"]["assignedReplicas"] == 2
    rows = {r["cluster"]: r for r in placed["candidates"]}
    assert {n: (r["allocation"]["desiredReplicas"], r["admittedReplicas"]) for n, r in rows.items()} == {
        a.name: (1, 1), b.name: (1, 1)}
    for member in (a, b):
        derived = _derived(member, ns, name)
        assert derived is not None and derived["spec"]["engine"]["minReplicas"] == 1
    assert _derived(c, ns, name) is None
    ready = wait_until("the source Ready",
                       lambda: [cond for cond in (_source(kube_api, ns, name).get("status") or {}).get(
        "conditions") or [] if cond["type"] == "Ready" and cond["status"] == "True"], worker, 120)
    assert ready[0]["reason"] == "PlacementServing" and a.name in ready[0]["message"] and b.name in ready[0][
        "message"]


def test_no_matching_member_holds_with_a_reason_and_nothing_is_written(
        kube_api: client.ApiClient, fleet: Fleet) -> None:
    ns, worker = fleet.namespace, fleet.worker
    name = f"none-{uuid.uuid4().hex[:5]}"
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": ns}, "spec": {
                **_spec(fleet), "placement": {"policy": "ClusterAffinity", "mode": "Single", "clusterAffinity": [
                    {"matchExpressions": [{"key": fleet.tier, "operator": "In", "values": ["nowhere"]}]}]}}}
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", body)
    warning = wait_until("a Warning saying why", lambda: [m for t, r, m in _events(kube_api, ns, name)
                                                    if t == "Warning" and r == "NoReadyCandidate"], worker)
    assert warning == ["no WorkloadCluster matches spec.placement"]
    assert not _placement(kube_api, ns, name).get("plan")
    assert all(_derived(m, ns, name) is None for m in fleet.members.values())


# -- adoption of standing homes ----------------------------------------------------------------------


def _engine_pods(member: MemberCluster, ns: str, name: str) -> list[client.V1Pod]:
    return [p for p in _pods(member, ns) if p.metadata.labels.get("ome.io/inferencereplica") == f"{name}-engine"]


def _register_unreachable(kube_api: client.ApiClient, fleet: Fleet, member: MemberCluster) -> str:
    """A WorkloadCluster matching the module's tier whose apiserver refuses every connection (member's
    credentials, a loopback port nothing listens on): its inventory can never be read."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = member.member_kubeconfig()
    server = next(line.split("server:", 1)[1].strip() for line in config.splitlines() if "server:" in line)
    config = config.replace(server, f"https://127.0.0.1:{port}")
    name = f"{member.name}-dead"
    secret = client.V1Secret(metadata=client.V1ObjectMeta(name=name), type="Opaque",
                             data={"kubeconfig": base64.b64encode(config.encode()).decode()})
    client.CoreV1Api(kube_api).create_namespaced_secret(identities.NAMESPACE, secret)
    client.CustomObjectsApi(kube_api).create_cluster_custom_object(GROUP, VERSION, "workloadclusters", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadCluster",
        "metadata": {"name": name, "labels": {fleet.tier: "yes"}},
        "spec": {"clusterSource": {"kubeConfig": {"secretRef": {"name": name, "namespace": identities.NAMESPACE}}}}})
    return name


def test_a_standing_copy_is_adopted_as_the_home_without_a_race(kube_api: client.ApiClient, fleet: Fleet) -> None:
    """Copies made by hand in a and b before placement existed (b's serves, a's is held by a's Kueue) and a
    matched member that cannot be read: the source annotated servingops.io/placement-adopt is placed in b at
    once, b's object adopted in place (same uid, same pods), a's standing copy withdrawn once b serves, the
    unreadable member inventoryPending with the plan's adoptionDigest until its registration is deleted."""
    ns, worker = fleet.namespace, fleet.worker
    a, b = fleet.members["a"], fleet.members["b"]
    _quotas(fleet, a="0", b="4")
    name = f"adopt-{uuid.uuid4().hex[:5]}"
    standing = {k: v for k, v in _spec(fleet).items() if k != "placement"}
    standing["engine"] = {**standing["engine"], "labels": {QUEUE_LABEL: PLACEMENT_QUEUE}}
    for member in (a, b):
        client.CustomObjectsApi(member.api).create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": ns}, "spec": standing})
    serving = wait_until("b's standing copy admitted", lambda: [p.metadata.uid for p in _engine_pods(b, ns, name)
                                                          if not any(g.name == ADMISSION_GATE for g in
                                                                     p.spec.scheduling_gates or [])], worker, 180)
    standing_uid = (_derived(b, ns, name) or {})["metadata"]["uid"]
    dead = _register_unreachable(kube_api, fleet, b)
    try:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
                "metadata": {"name": name, "namespace": ns, "annotations": {ADOPT_ANNOTATION: "true"}},
                "spec": _spec(fleet)}
        uid = client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
            GROUP, VERSION, ns, "inferenceservices", body)["metadata"]["uid"]
        placed = wait_until("Placed in b, a's standing copy withdrawn", lambda: (
            p := _placement(kube_api, ns, name)).get("phase") == "Placed" and _derived(a, ns, name) is None and p,
            worker, 180)
        plan = placed["plan"]
        assert (plan["winner"], plan["revision"]) == (b.name, 1)
        assert plan["adoptionDigest"] == plan["inputDigest"], "the unreadable member's inventory is pending"
        rows = {r["cluster"]: r for r in placed["candidates"]}
        assert set(rows) == {b.name, dead}
        home = rows[b.name]["allocation"]
        assert (home["originalReplicas"], home["currentReplicas"], home["raceCandidate"]) == (1, 1, False)
        assert rows[dead]["allocation"]["inventoryPending"] is True
        # Adopted in place: the same object and the same serving pods, now labelled as the source's copy.
        adopted = _derived(b, ns, name)
        assert adopted is not None and adopted["metadata"]["uid"] == standing_uid
        assert adopted["metadata"]["labels"][ORIGIN_LABEL] == uid
        assert json.loads(adopted["metadata"]["annotations"][EXECUTION_ANNOTATION])["planID"] == plan["id"]
        assert sorted(p.metadata.uid for p in _engine_pods(b, ns, name)) == sorted(serving)
        reasons = [r for _, r, _ in _events(kube_api, ns, name)]
        assert "PlacementRacing" not in reasons
        for expected in ("PlacementInventoried", "PlacementAdopted", "Placed", "PlacementStandingDrained"):
            assert expected in reasons, reasons
        said = [m for _, r, m in _events(kube_api, ns, name) if r == "PlacementInventoried"]
        assert any(a.name in m for m in said) and any(b.name in m and "1 admitted Instances" in m for m in said)

        client.CustomObjectsApi(kube_api).delete_cluster_custom_object(GROUP, VERSION, "workloadclusters", dead)
        after = wait_until("the pending member given up", lambda: (p := _placement(kube_api, ns, name)) and not p[
            "plan"].get("adoptionDigest") and [r["cluster"] for r in p["candidates"]] == [b.name] and p, worker, 120)
        assert after["plan"]["id"] == plan["id"] and after["plan"]["winner"] == b.name
    finally:
        with contextlib.suppress(ApiException):
            client.CustomObjectsApi(kube_api).delete_cluster_custom_object(GROUP, VERSION, "workloadclusters", dead)
        with contextlib.suppress(ApiException):
            client.CoreV1Api(kube_api).delete_namespaced_secret(dead, identities.NAMESPACE)


# -- SplitByCapacity ---------------------------------------------------------------------------------


def _root_quota(member: MemberCluster, name: str) -> None:
    """The member's reserved root AcceleratorQuota: its own servingops reports the member's capacity on it."""
    client.CustomObjectsApi(member.api).create_cluster_custom_object(GROUP, VERSION, "acceleratorquotas", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "AcceleratorQuota", "metadata": {"name": name},
        "spec": {"role": "Cohort"}})


def _cordon(member: MemberCluster, node: str, unschedulable: bool) -> None:
    client.CoreV1Api(member.api).patch_node(node, {"spec": {"unschedulable": unschedulable}})


def _reported_gpus(member: MemberCluster, name: str) -> int | None:
    obj = client.CustomObjectsApi(member.api).get_cluster_custom_object(GROUP, VERSION, "acceleratorquotas", name)
    found = [int(e["allocatable"]) for e in (obj.get("status") or {}).get("capacity") or []
             if e.get("resourceName") == "nvidia.com/gpu"]
    return sum(found) if found else None


def test_split_by_capacity_divides_by_what_each_member_reports(kube_api: client.ApiClient, fleet: Fleet) -> None:
    """Each member's own servingops reports its capacity on its root AcceleratorQuota (kwok nodes of 8
    GPUs; one of a's two nodes cordoned: a 8, b 16). A replica asks for 4 GPUs, so a holds 2 whole
    replicas and b 4: a floor of 3 is 1 in a, 2 in b, each admitted by its Kueue. b's root deleted:
    CapacityUnknown names b, the plan stays. a's node uncordoned and b's report back: a new revision."""
    ns, worker = fleet.namespace, fleet.worker
    a, b = fleet.members["a"], fleet.members["b"]
    for member in (a, b):
        member.set_quota("16", gpu="64")
    root = f"fleet-{uuid.uuid4().hex[:5]}"
    cordoned = a.cluster.node_names[0]
    _cordon(a, cordoned, True)
    name = f"cap-{uuid.uuid4().hex[:5]}"
    try:
        for member in (a, b):
            _root_quota(member, root)
        wait_until("a reports 8 GPUs, b 16", lambda: (_reported_gpus(a, root), _reported_gpus(b, root)) == (8, 16),
              worker, 120)
        spec = _spec(fleet)
        spec["engine"]["runner"]["resources"] = {"requests": {"cpu": "1", "nvidia.com/gpu": "4"},
                                                 "limits": {"cpu": "1", "nvidia.com/gpu": "4"}}
        spec["placement"] = {"policy": "ClusterAffinity", "mode": "SplitByCapacity", "split": {"replicas": 3},
                             "clusterAffinity": [{"matchFields": [
                                 {"key": "metadata.name", "operator": "In", "values": [a.name, b.name]}]}]}
        client.CustomObjectsApi(kube_api).create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": name, "namespace": ns},
            "spec": spec})
        placed = wait_until("Placed: 1 in a, 2 in b",
                            lambda: (p := _placement(kube_api, ns, name)).get("phase") == "Placed"
                       and p, worker, 240)
        plan = placed["plan"]
        assert (plan["mode"], plan["revision"], plan["assignedReplicas"]) == ("SplitByCapacity", 1, 3)
        rows = {r["cluster"]: r for r in placed["candidates"]}
        assert {n: (r["allocation"]["weight"], r["allocation"]["desiredReplicas"], r["admittedReplicas"])
                for n, r in rows.items()} == {a.name: (2, 1, 1), b.name: (4, 2, 2)}
        sample = rows[b.name]["allocation"]["capacity"]
        quota = client.CustomObjectsApi(b.api).get_cluster_custom_object(GROUP, VERSION, "acceleratorquotas", root)
        assert sample["replicas"] == 4 and [(p["resourceName"], p["demand"], p["allocatable"], p["reportUID"])
                                            for p in sample["pools"]] == [
            ("nvidia.com/gpu", 4, 16, quota["metadata"]["uid"])]
        assert sample["demandContract"]["fingerprint"] == sample["demandFingerprint"]
        derived = _derived(b, ns, name) or {}
        execution = json.loads(derived["metadata"]["annotations"][EXECUTION_ANNOTATION])
        assert execution["demand"] == sample["demandContract"] and derived["spec"]["engine"]["minReplicas"] == 2

        # b stops reporting: the accepted plan stays, and the source says which member and why.
        client.CustomObjectsApi(b.api).delete_cluster_custom_object(GROUP, VERSION, "acceleratorquotas", root)
        client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(  # a spec change: looked at now
            GROUP, VERSION, ns, "inferenceservices", name, {"metadata": {"labels": {"nudge": "1"}}})
        held = wait_until("CapacityUnknown naming b", lambda: [m for t, r, m in _events(kube_api, ns, name)
                                                         if t == "Warning" and r == "CapacityUnknown"], worker, 120)
        assert held[0].startswith(f"no verified capacity from {b.name}: NoCapacityReport"), held
        assert _placement(kube_api, ns, name)["plan"] == plan

        # a's second node back, b's report back: 16 and 16 -> a new revision, 2 and 1 (ties by name).
        _cordon(a, cordoned, False)
        _root_quota(b, root)
        replanned = wait_until("revision 2", lambda: (p := _placement(kube_api, ns, name))["plan"]["revision"] == 2
                          and p.get("phase") == "Placed" and p, worker, 240)
        assert {r["cluster"]: r["allocation"]["desiredReplicas"] for r in replanned["candidates"]} == {
            a.name: 2, b.name: 1}

        # The demand contract, enforced by the member: b's copy edited in b renders pods the plan did not
        # count, so b's own servingops holds it (RolloutReady False and a Warning there; nothing new is
        # projected, the pods already serving keep serving: Ready stays True).
        client.CustomObjectsApi(b.api).patch_namespaced_custom_object(
            GROUP, VERSION, ns, "inferenceservices", name, {"spec": {"engine": {"runner": {"image": "edited:v1"}}}})
        wait_until("b holds its edited copy",
              lambda: _condition(b, ns, name, "RolloutReady")[0] == "PlacementDemandMismatch", worker, 120)
        _, message = _condition(b, ns, name, "RolloutReady")
        assert f"plan {replanned['plan']['id']} revision 2 accepted rendering" in message, message
        assert _condition(b, ns, name, "Ready")[0] == "ComponentsReady"
        assert any(t == "Warning" and r == "PlacementDemandMismatch" for t, r, _ in _events(b.api, ns, name))
        pods = client.CoreV1Api(b.api).list_namespaced_pod(ns, label_selector=QUEUE_LABEL).items
        assert pods and all(c.image != "edited:v1" for p in pods for c in p.spec.containers), "nothing projected"
        # A spec change of the source renders otherwise at the same capacity: a new revision carries the new
        # contract to both homes, b's copy is the source's again and projects (admitted) under it.
        client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(
            GROUP, VERSION, ns, "inferenceservices", name, {"spec": {"engine": {"runner": {"image": "vllm:v2"}}}})
        renewed = wait_until("revision 3 placed", lambda: (p := _placement(kube_api, ns, name))["plan"]["revision"] == 3
                        and p.get("phase") == "Placed" and p, worker, 240)
        rows = {r["cluster"]: r for r in renewed["candidates"]}
        assert {n: r["allocation"]["desiredReplicas"] for n, r in rows.items()} == {a.name: 2, b.name: 1}
        assert rows[b.name]["allocation"]["capacity"]["demandFingerprint"] != sample["demandFingerprint"]
        wait_until("b's hold is over", lambda: _condition(b, ns, name, "RolloutReady")[0] != "PlacementDemandMismatch",
              worker, 120)
        derived = _derived(b, ns, name) or {}
        assert derived["spec"]["engine"]["runner"]["image"] == "vllm:v2"
        assert json.loads(derived["metadata"]["annotations"][EXECUTION_ANNOTATION])["demand"] == rows[b.name][
            "allocation"]["capacity"]["demandContract"]
    finally:
        _cordon(a, cordoned, False)
        with contextlib.suppress(ApiException):
            client.CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices",
                                                                               name)
        wait_until("its copies withdrawn", lambda: all(_derived(m, ns, name) is None for m in (a, b)), worker, 120)
        for member in (a, b):
            with contextlib.suppress(ApiException):
                client.CustomObjectsApi(member.api).delete_cluster_custom_object(GROUP, VERSION, "acceleratorquotas",
                                                                                 root)
            member.set_quota("16")
