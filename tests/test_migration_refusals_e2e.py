"""Migration's refusal, cap and expiry paths end to end: worker and bridge as processes under the
chart's identities, the real apiserver, kwok playing the kubelets. Each behaviour
tests/test_migration_workflow.py proves on the fake cluster is shown here once, with what
docs/migration.md says is written for it: the record on the InferenceReplica's status.migrations
(phase Failed, the reason token leading the message), the Warning Events, and the
InferenceService's status.migrationHistory entry.

The caps are operator defaults read once when a replica's workflow opens, so the tests that need
them write the operator ConfigMap's lifecycle block before creating their service and put the
ConfigMap back as it was afterwards (other modules of the session share the cluster)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from servingops.api_models.ome import InferenceService
from tests.crd_helpers import create, manifest
from tests.support.migration_stack import GROUP, VERSION, Sampler, Service, ledger_entry, tolerate_unready
from tests.support.rollout_stack import worker_and_bridge

pytestmark = pytest.mark.e2e

EXECUTING = {"SurgePending", "SurgeReady", "Draining"}


@pytest.fixture(scope="module")
def refusal_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                  oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "migref", "InferenceService,InferenceReplica",
                           identities=chart_identities) as stack:
        yield stack
        # Its services go with it: a later module's bridge follows every namespace.
        client.CoreV1Api(kube_api).delete_namespace(stack[0])


def annotate(svc: Service, instance: int, from_node: str, to: list[str] | None = None) -> str:
    """A request annotation with exactly the given from_node (Service.request reads the real one)."""
    request_uuid = str(uuid.uuid4())
    svc.custom.patch_namespaced_custom_object(GROUP, VERSION, svc.ns, "inferenceservices", svc.name, {
        "metadata": {"annotations": {f"ome.io/migration-request-v1-{request_uuid}": request_value(
            instance, from_node, to or [])}}})
    return request_uuid


def request_value(instance: int, from_node: str, to: list[str]) -> str:
    return json.dumps({"schemaVersion": "v1", "component": "engine", "instance": instance, "from_node": from_node,
                       "hint_target_nodes": to, "reason": "e2e-refusal", "requested_at": "2026-11-30T00:00:00Z",
                       "requested_by": "e2e"})


def history(svc: Service) -> dict[str, dict[str, Any]]:
    """status.migrationHistory of the InferenceService, by request id."""
    obj = svc.custom.get_namespaced_custom_object(GROUP, VERSION, svc.ns, "inferenceservices", svc.name)
    return {e["id"]: e for e in (obj.get("status") or {}).get("migrationHistory") or []}


def warnings(svc: Service, involved: str, request_uuid: str) -> set[str]:
    """Reasons of the Warning Events on `involved` that name the request."""
    events = svc.core.list_namespaced_event(svc.ns, field_selector=f"involvedObject.name={involved}").items
    return {str(e.reason) for e in events if e.type == "Warning" and request_uuid in (e.message or "")}


def failed(svc: Service, request_uuid: str, timeout: float = 120) -> dict[str, Any]:
    """The request's record once Failed."""
    record: dict[str, Any] = svc.wait(f"{request_uuid} Failed", lambda: (
        r := svc.record(request_uuid)).get("phase") == "Failed" and r, timeout)
    return record


def assert_refused(svc: Service, request_uuid: str, token: str) -> dict[str, Any]:
    """A refusal judged by the replica: the Failed record never allocated, the Warnings on the replica
    and the service, the history entry, and the annotation consumed."""
    record = failed(svc, request_uuid)
    assert record["message"].startswith(f"{token}: "), record
    assert "allocatedAt" not in record and "surgeInstance" not in record and "deadline" not in record, record
    svc.wait(f"Warning {token} on the replica", lambda: token in warnings(svc, svc.replica, request_uuid))
    svc.wait("Warning MigrationRefused on the service",
             lambda: "MigrationRefused" in warnings(svc, svc.name, request_uuid))
    entry = svc.wait("the history entry", lambda: history(svc).get(request_uuid))
    assert entry["phase"] == "Failed" and entry["outcomeReason"] == token, entry
    assert "replacementInstance" not in entry, entry
    svc.wait("the annotation removed", lambda: f"ome.io/migration-request-v1-{request_uuid}" not in svc.annotations())
    return record


def test_migration_policy_never_refuses_with_no_surge(
        kube_api: client.ApiClient, chart_identities: Identities,
        refusal_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = refusal_stack
    svc = Service(kube_api, ns, worker, 1, engine={"lifecycle": {"migrationPolicy": {"mode": "Never"}}})
    svc.wait("one Instance Ready", lambda: svc.settled([0]))
    with Sampler(svc, {f"{svc.replica}-0"}) as sampler:
        request_uuid = annotate(svc, 0, svc.node_of(0))
        record = assert_refused(svc, request_uuid, "MigrationPolicyNever")
        time.sleep(2)  # a surge created after the record would show in these samples
    assert record["sourceInstance"] == 0 and record["trigger"] == "Manual"
    assert set(sampler.uids) == {f"{svc.replica}-0"}, f"a pod other than the source appeared: {sampler.uids}"
    assert svc.settled([0])
    entry = svc.wait("the ledger entry", lambda: ledger_entry(kube_api, chart_identities, ns, svc.replica,
                                                              request_uuid))
    assert entry["phase"] == "Failed" and entry["message"].startswith("MigrationPolicyNever: ")


def test_an_unknown_instance_and_a_wrong_from_node_are_refused(
        kube_api: client.ApiClient, kube_cluster: LocalKubeCluster,
        refusal_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = refusal_stack
    svc = Service(kube_api, ns, worker, 1)
    svc.wait("one Instance Ready", lambda: svc.settled([0]))
    node = svc.node_of(0)
    other = next(n for n in kube_cluster.node_names if n != node)
    missing = annotate(svc, 7, node)
    mismatch = annotate(svc, 0, other)
    assert_refused(svc, missing, "InstanceNotFound")
    assert "Instance 7 does not exist" in svc.record(missing)["message"]
    record = assert_refused(svc, mismatch, "FromNodeMismatch")
    assert record["message"] == f"FromNodeMismatch: Instance 0 runs on {node}, not on {other}", record
    assert svc.settled([0]) and svc.node_of(0) == node
    assert [p.metadata.name for p in svc.pods()] == [f"{svc.replica}-0"]


def test_a_raw_deployment_component_is_refused_before_any_replica(
        kube_api: client.ApiClient, refusal_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = refusal_stack
    custom = client.CustomObjectsApi(kube_api)
    name = f"raw-{uuid.uuid4().hex[:5]}"
    spec = {"deploymentMode": "RawDeployment", "engine": {
        "minReplicas": 1, "runner": {"name": "engine", "image": "vllm/vllm-openai:v0.9",
                                     "ports": [{"containerPort": 8000}]}}}
    create(kube_api, InferenceService, manifest(InferenceService, spec, name=name), ns)
    # A Service view of it for the helpers (no InferenceReplica exists: its record lookups read {}).
    svc = Service.__new__(Service)
    svc.api, svc.ns, svc.worker, svc.name, svc.replica = kube_api, ns, worker, name, f"{name}-engine"
    svc.custom, svc.core = custom, client.CoreV1Api(kube_api)
    request_uuid = annotate(svc, 0, "kwok-node-0")
    svc.wait("Warning NotOMENative on the service", lambda: "NotOMENative" in warnings(svc, name, request_uuid))
    entry = svc.wait("the history entry", lambda: history(svc).get(request_uuid))
    assert entry["phase"] == "Failed" and entry["outcomeReason"] == "NotOMENative", entry
    assert entry["instance"] == 0 and "replacementInstance" not in entry, entry
    svc.wait("the annotation removed", lambda: f"ome.io/migration-request-v1-{request_uuid}" not in svc.annotations())
    assert svc.status() == {}, "a RawDeployment component has no InferenceReplica"


@contextlib.contextmanager
def operator_lifecycle(api: client.ApiClient, identities: Identities, block: dict[str, Any]) -> Iterator[None]:
    """The operator ConfigMap with `block` as its lifecycle (other blocks kept), put back as it was
    on exit: deleted if it did not exist, its data restored otherwise."""
    core = client.CoreV1Api(api)
    name, namespace = identities.operator_config, identities.namespace
    try:
        before: dict[str, str] | None = dict(core.read_namespaced_config_map(name, namespace).data or {})
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise
        before = None
    data = {**(before or {}), "lifecycle": yaml.safe_dump(block)}
    if before is None:
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name), data=data))
    else:
        core.patch_namespaced_config_map(name, namespace, {"data": {"lifecycle": data["lifecycle"]}})
    try:
        yield
    finally:
        if before is None:
            core.delete_namespaced_config_map(name, namespace)
        else:
            current = core.read_namespaced_config_map(name, namespace)
            current.data = before
            core.replace_namespaced_config_map(name, namespace, current)


def operator_data(api: client.ApiClient, identities: Identities) -> dict[str, str] | None:
    try:
        cm = client.CoreV1Api(api).read_namespaced_config_map(identities.operator_config, identities.namespace)
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return dict(cm.data or {})


def test_max_migrations_per_window_refuses_the_second_request(
        kube_api: client.ApiClient, chart_identities: Identities,
        refusal_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = refusal_stack
    before = operator_data(kube_api, chart_identities)
    with operator_lifecycle(kube_api, chart_identities, {"maxMigrationsPerWindow": 1}):
        svc = Service(kube_api, ns, worker, 2)
        svc.wait("two Instances Ready", lambda: svc.settled([0, 1]))
        first = svc.request(0, [])
        svc.wait("the first Completed", lambda: svc.record(first).get("phase") == "Completed", timeout=180)
        second = annotate(svc, 1, svc.node_of(1))
        record = assert_refused(svc, second, "MigrationRateLimited")
    assert record["message"].startswith("MigrationRateLimited: maxMigrationsPerWindow 1 reached: 1 migration(s) "
                                         "accepted within 1h"), record
    svc.wait("Instances 1 and 2", lambda: svc.settled([1, 2]))
    assert operator_data(kube_api, chart_identities) == before, "the operator ConfigMap was not put back"


def test_max_in_flight_migrations_queues_the_second_until_the_first_completes(
        kube_api: client.ApiClient, chart_identities: Identities,
        refusal_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = refusal_stack
    with operator_lifecycle(kube_api, chart_identities, {"maxInFlightMigrations": 1}):
        svc = Service(kube_api, ns, worker, 2)
        svc.wait("two Instances Ready", lambda: svc.settled([0, 1]))
        uuids = [str(uuid.uuid4()), str(uuid.uuid4())]
        samples: list[list[dict[str, Any]]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append([svc.record(u) for u in uuids])
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            # Both asks in one patch: they reach the replica together.
            svc.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", svc.name, {
                "metadata": {"annotations": {
                    f"ome.io/migration-request-v1-{u}": request_value(i, svc.node_of(i), []) for i, u in
                    enumerate(uuids)}}})
            records = svc.wait("both Completed", lambda: (r := [svc.record(u) for u in uuids]) and all(
                x.get("phase") == "Completed" for x in r) and r, timeout=240)
        finally:
            stop.set()
            sampler.join(timeout=5)
    both_executing = [s for s in samples if all(r.get("phase") in EXECUTING for r in s)]
    assert not both_executing, f"two migrations executed at once: {both_executing[0]}"
    # The one allocated second waited, Accepted and unallocated, with the cap as its message, while
    # the other executed.
    first, second = sorted(range(2), key=lambda i: records[i]["allocatedAt"])
    queued = [s for s in samples if s[first].get("phase") in EXECUTING and s[second].get("phase") == "Accepted"]
    assert queued, "the second request was never seen queued while the first executed"
    assert all("allocatedAt" not in s[second] for s in queued), queued[-1]
    assert any(s[second].get("message", "").startswith("queued: maxInFlightMigrations 1 reached") for s in queued), (
        [s[second].get("message") for s in queued])
    assert records[second]["allocatedAt"] >= records[first]["completedAt"], records
    # The second surge takes the lowest free index, the one the first migration's source left.
    assert records[first]["surgeInstance"] == 2, records
    assert records[second]["surgeInstance"] == records[first]["sourceInstance"], records
    final = sorted([2, records[first]["sourceInstance"]])
    svc.wait(f"Instances {final}", lambda: svc.settled(final))
    entries = svc.wait("both history entries", lambda: (h := history(svc)) and all(u in h for u in uuids) and h)
    assert all(entries[u]["outcomeReason"] == "Completed" for u in uuids), entries


def test_a_surge_not_ready_by_the_deadline_expires_and_the_source_keeps_serving(
        kube_api: client.ApiClient, kube_cluster: LocalKubeCluster, chart_identities: Identities,
        refusal_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = refusal_stack
    # The pods tolerate the unready node's taint; it is added once both Instances run elsewhere.
    svc = Service(kube_api, ns, worker, 2, engine={"tolerations": tolerate_unready("")["tolerations"],
                                                   "lifecycle": {"instanceReadyTimeout": "25s"}})
    svc.wait("two Instances Ready", lambda: svc.settled([0, 1]))
    unready = kube_cluster.add_unready_node(f"expire-{uuid.uuid4().hex[:4]}")
    try:
        source = f"{svc.replica}-1"
        with Sampler(svc, {source}) as sampler:
            request_uuid = annotate(svc, 1, svc.node_of(1), [unready])
            accepted = svc.wait("Accepted", lambda: (r := svc.record(request_uuid)).get("deadline") and r)
            svc.wait("SurgePending", lambda: svc.record(request_uuid).get("phase") == "SurgePending")
            surge = f"{svc.replica}-{svc.record(request_uuid)['surgeInstance']}"
            svc.wait("the surge pod running on the unready node", lambda: any(
                p.metadata.name == surge and p.spec.node_name == unready and p.status.phase == "Running"
                for p in svc.pods()))
            record = failed(svc, request_uuid, timeout=120)
            svc.wait("the surge removed", lambda: all(p.metadata.name != surge for p in svc.pods()))
            svc.wait("Instances 0 and 1", lambda: svc.settled([0, 1]))
        assert record["message"].startswith("MigrationExpired: "), record
        assert record["deadline"] == accepted["deadline"] and record["completedAt"] >= record["deadline"], record
        assert record["surgeInstance"] == 2 and record["allocatedAt"], record
        assert len(sampler.uids.get(source, set())) == 1, "the source pod was never replaced"
        assert min(sampler.serving) >= 2, f"the source left rotation: {sorted(set(sampler.serving))}"
        assert surge in sampler.uids, "the surge pod was never seen"
        svc.wait("Warning MigrationExpired on the replica",
                 lambda: "MigrationExpired" in warnings(svc, svc.replica, request_uuid))
        svc.wait("Warning MigrationExpired on the service",
                 lambda: "MigrationExpired" in warnings(svc, svc.name, request_uuid))
        entry = svc.wait("the history entry", lambda: history(svc).get(request_uuid))
        assert entry["phase"] == "Failed" and entry["outcomeReason"] == "MigrationExpired", entry
        assert entry["replacementInstance"] == 2 and entry["instance"] == 1, entry
        ledger = svc.wait("the ledger entry", lambda: ledger_entry(kube_api, chart_identities, ns, svc.replica,
                                                                   request_uuid))
        assert ledger["phase"] == "Failed" and ledger["message"].startswith("MigrationExpired: ")
    finally:
        kube_cluster.remove_node(unready)
