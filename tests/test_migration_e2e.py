"""Surge migration end to end: worker and bridge as processes under the chart's identities, kwok
playing the kubelets of 3 nodes, an OMENative InferenceService whose engine is served by its
projected InferenceReplica. A request annotation on the InferenceService becomes a MigrationWorkflow
(the bridge), which has the replica's workflow record and execute it.

A sampler thread reads the replica's pods and the namespace's EndpointSlices every 100 ms: the
serving Instance count is checked against every sample (never below N), and so is the drain: no
sample may show a source pod being deleted while an EndpointSlice still lists it Ready."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from tests.support.migration_stack import GROUP, VERSION, Sampler, Service, ledger_entry, tolerate_unready
from tests.support.replica_stack import restart
from tests.support.rollout_stack import worker_and_bridge

pytestmark = pytest.mark.e2e



@pytest.fixture(scope="module")
def migration_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                    oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "migration", "InferenceService,InferenceReplica",
                           identities=chart_identities) as stack:
        yield stack
        client.CoreV1Api(kube_api).delete_namespace(stack[0])






def test_an_annotation_request_moves_an_instance_with_no_traffic_gap(
        kube_api: client.ApiClient, kube_cluster: LocalKubeCluster,
        migration_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = migration_stack
    svc = Service(kube_api, ns, worker, 2)
    svc.wait("two Instances Ready", lambda: svc.settled([0, 1]))
    source_node = svc.node_of(1)
    target = next(n for n in kube_cluster.node_names if n not in (source_node, svc.node_of(0)))
    with Sampler(svc, {f"{svc.replica}-1"}) as sampler:
        request_uuid = svc.request(1, [target])
        svc.wait("the annotation consumed", lambda: not any(
            k.startswith("ome.io/migration-request-v1-") for k in svc.annotations()))
        record = svc.wait("Completed", lambda: (r := svc.record(request_uuid)).get("phase") == "Completed" and r)
        svc.wait("Instances 0 and 2", lambda: svc.settled([0, 2]))
    assert record["surgeInstance"] == 2 and record["sourceInstance"] == 1 and record["fromNode"] == source_node
    assert svc.node_of(2) == target, "the hint is preferred"
    assert min(sampler.serving) >= 2, f"serving dipped below N: {sorted(set(sampler.serving))}"
    assert not sampler.leaks, f"a source pod was deleted while still a Ready endpoint: {sampler.leaks}"
    events = client.CoreV1Api(kube_api).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={svc.replica}").items
    reasons = {e.reason for e in events}
    assert {"MigrationAccepted", "MigrationSurgePending", "MigrationSurgeReady", "MigrationDraining",
            "MigrationCompleted"} <= reasons, reasons


def test_a_worker_killed_at_every_phase_resumes_with_no_second_surge(
        kube_api: client.ApiClient, migration_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = migration_stack
    svc = Service(kube_api, ns, worker, 2)
    svc.wait("two Instances Ready", lambda: svc.settled([0, 1]))
    with Sampler(svc, {f"{svc.replica}-0"}) as sampler:
        request_uuid = svc.request(0, [])
        killed: list[str] = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            phase = svc.record(request_uuid).get("phase")
            if phase == "Completed":
                break
            if phase and phase not in killed:
                killed.append(phase)
                restart(worker)  # a crash right after the phase was recorded
            time.sleep(0.2)
        svc.wait("Completed despite the kills", lambda: svc.record(request_uuid).get("phase") == "Completed")
        svc.wait("Instances 1 and 2", lambda: svc.settled([1, 2]))
    print(f"worker killed after phases: {killed}")
    assert len(killed) >= 2, f"the worker was killed at too few phases to prove anything: {killed}"
    surge = f"{svc.replica}-2"
    assert len(sampler.uids.get(surge, set())) == 1, f"the surge pod was created more than once: {sampler.uids}"
    assert not any(name.startswith(f"{svc.replica}-3") for name in sampler.uids), "a second surge index"
    assert min(sampler.serving) >= 2
    assert not sampler.leaks


def test_the_cli_requests_lists_and_the_service_keeps_the_history(
        kube_api: client.ApiClient, kube_cluster: LocalKubeCluster, temporal_server: TemporalDevServer,
        migration_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = migration_stack
    svc = Service(kube_api, ns, worker, 2)
    svc.wait("two Instances Ready", lambda: svc.settled([0, 1]))
    servingops = str(Path(sys.executable).parent / "servingops")
    common = ["-n", ns, "--temporal-address", temporal_server.address, "--kubeconfig",
              str(kube_cluster.kubeconfig_path)]
    env = {**os.environ, "SERVINGOPS_TASK_QUEUE": worker.env["SERVINGOPS_TASK_QUEUE"]}
    made = subprocess.run([servingops, "migrate", svc.name, "--component", "engine", "--instance", "1",
                           "--reason", "defrag", *common], capture_output=True, text=True, env=env, timeout=60)
    assert made.returncode == 0, made.stderr
    request_uuid = made.stdout.strip()
    assert re.fullmatch(r"[0-9a-f-]{36}", request_uuid), made.stdout
    svc.wait("Completed", lambda: svc.record(request_uuid).get("phase") == "Completed")
    listed = subprocess.run([servingops, "migrate", "status", svc.name, "-o", "json", *common],
                            capture_output=True, text=True, env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    [record] = [r for r in json.loads(listed.stdout) if r["requestUUID"] == request_uuid]
    assert record["phase"] == "Completed" and record["surgeInstance"] == 2 and record["reason"] == "defrag"

    def history() -> list[dict[str, Any]]:
        obj = svc.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", svc.name)
        return list((obj.get("status") or {}).get("migrationHistory") or [])

    [entry] = svc.wait("status.migrationHistory", history)
    assert entry["id"] == request_uuid and entry["phase"] == "Completed" and entry["outcomeReason"] == "Completed"
    assert entry["instance"] == 1 and entry["replacementInstance"] == 2 and entry["component"] == "engine"






def test_a_completed_migration_is_in_the_audit_ledger(
        kube_api: client.ApiClient, chart_identities: Identities,
        migration_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = migration_stack
    svc = Service(kube_api, ns, worker, 1)
    svc.wait("one Instance Ready", lambda: svc.settled([0]))
    source = svc.node_of(0)
    request_uuid = svc.request(0, [])
    svc.wait("Completed", lambda: svc.record(request_uuid).get("phase") == "Completed")
    entry = svc.wait("the ledger entry", lambda: ledger_entry(kube_api, chart_identities, ns, svc.replica,
                                                              request_uuid))
    assert entry["phase"] == "Completed" and entry["trigger"] == "Manual" and entry["fromNode"] == source
    assert entry["sourceInstance"] == 0 and entry["surgeInstance"] == 1 and entry["completedAt"]
    assert entry["namespace"] == ns and entry["inferenceReplica"] == svc.replica


def test_the_cli_cancels_a_surging_migration_and_the_source_keeps_serving(
        kube_api: client.ApiClient, kube_cluster: LocalKubeCluster, temporal_server: TemporalDevServer,
        chart_identities: Identities, migration_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = migration_stack
    # The pods tolerate the unready node's taint; it is added once both Instances run elsewhere.
    node_name = f"cancel-{uuid.uuid4().hex[:4]}"
    svc = Service(kube_api, ns, worker, 2, engine={"tolerations": tolerate_unready("")["tolerations"]})
    svc.wait("two Instances Ready", lambda: svc.settled([0, 1]))
    unready = kube_cluster.add_unready_node(node_name)
    try:
        # The surge is sent to the unready node, where it never turns Ready: the migration stays
        # SurgePending until it is cancelled.
        servingops = str(Path(sys.executable).parent / "servingops")
        common = ["-n", ns, "--temporal-address", temporal_server.address, "--kubeconfig",
                  str(kube_cluster.kubeconfig_path)]
        env = {**os.environ, "SERVINGOPS_TASK_QUEUE": worker.env["SERVINGOPS_TASK_QUEUE"]}
        source = f"{svc.replica}-1"
        with Sampler(svc, {source}) as sampler:
            made = subprocess.run([servingops, "migrate", svc.name, "--component", "engine", "--instance", "1",
                                   "--to", unready, *common], capture_output=True, text=True, env=env, timeout=60)
            assert made.returncode == 0, made.stderr
            request_uuid = made.stdout.strip()
            svc.wait("SurgePending", lambda: svc.record(request_uuid).get("phase") == "SurgePending")
            surge = f"{svc.replica}-{svc.record(request_uuid)['surgeInstance']}"
            svc.wait("the surge pod running on the unready node", lambda: any(
                p.metadata.name == surge and p.spec.node_name == unready and p.status.phase == "Running"
                for p in svc.pods()))
            cancelled = subprocess.run([servingops, "migrate", "cancel", svc.name, request_uuid, *common],
                                       capture_output=True, text=True, env=env, timeout=60)
            assert cancelled.returncode == 0, cancelled.stderr
            record = svc.wait("Failed", lambda: (r := svc.record(request_uuid)).get("phase") == "Failed" and r)
            svc.wait("the surge removed", lambda: all(p.metadata.name != surge for p in svc.pods()))
            svc.wait("Instances 0 and 1", lambda: svc.settled([0, 1]))
        assert record["message"].startswith("MigrationCancelled"), record
        assert len(sampler.uids.get(source, set())) == 1, "the source pod was never replaced"
        assert min(sampler.serving) >= 2, f"the source left rotation: {sorted(set(sampler.serving))}"
        entry = svc.wait("the ledger entry", lambda: ledger_entry(kube_api, chart_identities, ns, svc.replica,
                                                                  request_uuid))
        assert entry["phase"] == "Failed" and entry["message"].startswith("MigrationCancelled")
    finally:
        kube_cluster.remove_node(unready)


def test_an_instance_on_an_unready_node_is_relocated_off_it(
        kube_api: client.ApiClient, kube_cluster: LocalKubeCluster, chart_identities: Identities,
        migration_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = migration_stack
    unready = kube_cluster.add_unready_node(f"auto-{uuid.uuid4().hex[:4]}")
    try:
        # The Instance prefers the unready node, so it is created there and misses its deadline.
        svc = Service(kube_api, ns, worker, 1, engine={**tolerate_unready(unready),
                                                       "lifecycle": {"instanceReadyTimeout": "15s"}})
        svc.wait("the Instance's pod on the unready node", lambda: any(
            p.spec.node_name == unready for p in svc.pods()), timeout=120)
        svc.wait("Instance 0 Ready after a relocation", lambda: svc.settled([0]), timeout=240)
        assert svc.node_of(0) != unready
        [record] = svc.status().get("migrations") or []
        assert record["trigger"] == "Auto" and record["phase"] == "Relocated" and record["fromNode"] == unready
        assert record["attempt"] == 1 and record["sourceInstance"] == 0 and record["reason"] == "InstanceReadyTimeout"
        stamped = svc.wait("succeeded stamped", lambda: (r := (svc.status().get("migrations") or [{}])[0]).get(
            "succeeded") is True and r)
        pod = next(p for p in svc.pods() if p.metadata.deletion_timestamp is None)
        terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
        assert all(any(e.key == "kubernetes.io/hostname" and e.operator == "NotIn" and e.values == [unready]
                       for e in term.match_expressions or []) for term in terms)
        events = client.CoreV1Api(kube_api).list_namespaced_event(
            ns, field_selector=f"involvedObject.name={svc.replica}").items
        assert "InstanceRelocated" in {e.reason for e in events}
        entry = svc.wait("the ledger entry stamped", lambda: (e := ledger_entry(
            kube_api, chart_identities, ns, svc.replica, stamped["requestUUID"])).get("succeeded") is True and e)
        assert entry["phase"] == "Relocated" and entry["fromNode"] == unready
    finally:
        kube_cluster.remove_node(unready)
