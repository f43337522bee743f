"""The bridge as its own process, against the real apiserver and the real Temporal server.

No worker serves these task queues: what is checked is exactly what the bridge did, i.e. which
workflows exist, how many runs each has, and which signals their histories hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError

from devstack.process import free_port
from devstack.product import BridgeLauncher, BridgeProcess
from devstack.services import TemporalDevServer
from servingops.api_models.deckhouse import Model
from servingops.runtime.temporal import TemporalSettings, connect
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest, new_namespace

pytestmark = pytest.mark.e2e

# How long "eventually" may take. A bridge started by a test follows every namespace, so it first
# relists (and re-signals) the thousand-odd objects earlier tests left behind; on a loaded 2-core
# machine that alone has taken over 30 s. A bound for a wait, not a claim about speed (bench/ measures that).
EVENTUALLY = 120.0


@pytest.fixture
async def temporal(temporal_server: TemporalDevServer) -> Client:
    return await connect(TemporalSettings(address=temporal_server.address))


def _create_models(api: client.ApiClient, ns: str, count: int, start: int = 0, threads: int = 8) -> None:
    def one(i: int) -> None:
        create(api, Model, manifest(Model, {"source": {"url": f"https://huggingface.co/org/m{i}"}}, name=f"m{i}"), ns)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(start, start + count)))


VISIBILITY_RPC_TIMEOUT = timedelta(seconds=60)
"""Visibility calls against a dev server that a relist has just handed a thousand starts answer slowly on a
loaded machine (its default RPC timeout expired in a parallel run)."""


async def _executions(temporal: Client, query: str) -> list[tuple[str, str]]:
    return [(w.id, w.run_id) async for w in temporal.list_workflows(query, rpc_timeout=VISIBILITY_RPC_TIMEOUT)]


async def _wait_for_count(temporal: Client, query: str, expected: int, wait_seconds: float = 120) -> None:
    deadline = time.monotonic() + wait_seconds
    count = -1
    while time.monotonic() < deadline:
        count = (await temporal.count_workflows(query, rpc_timeout=VISIBILITY_RPC_TIMEOUT)).count
        if count >= expected:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{query}: {count} workflows, expected {expected}")


def _metric(bridge: BridgeProcess, sample: str) -> int:
    """One sample of the bridge's /metrics (0 when absent), e.g. servingops_bridge_queue_depth."""
    for line in bridge.metrics().splitlines():
        if line.startswith(sample + " "):
            return int(float(line.removeprefix(sample + " ")))
    return 0


def _started_by_metrics(bridge: BridgeProcess, workflow_type: str = "ModelWorkflow") -> int:
    """What the bridge says it started: its servingops_bridge_workflows_started_total."""
    return _metric(bridge, f'servingops_bridge_workflows_started_total{{workflow_type="{workflow_type}"}}')


async def _settled_starts(bridge: BridgeProcess) -> int:
    """The bridge's start count once it has dispatched everything it saw (its relist of every
    Model in the cluster included): nothing queued and the metrics unchanged for a second."""
    before = ""
    for _ in range(120):
        now = bridge.metrics()
        quiet = "\nservingops_bridge_queue_depth 0\n" in now and now == before
        if quiet:
            return _started_by_metrics(bridge)
        before = now
        await asyncio.sleep(1)
    raise AssertionError(f"{bridge.identity} never settled")


def _client_identity(bridge: BridgeProcess) -> str:
    """The Temporal client identity of a bridge process (the SDK's default, pid@host), which the
    server records in the first event of every run the bridge starts."""
    return f"{bridge.process.pid}@{socket.gethostname()}"


async def _starters(temporal: Client, executions: list[tuple[str, str]]) -> Counter[str]:
    """Runs by the client identity their first history event names (each must be the start)."""
    async def starter(workflow_id: str, run_id: str) -> str:
        history = await temporal.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        first = history.events[0]
        assert first.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, first
        return str(first.workflow_execution_started_event_attributes.identity)

    identities: Counter[str] = Counter()
    for chunk in range(0, len(executions), 50):
        identities.update(await asyncio.gather(*(starter(w, r) for w, r in executions[chunk:chunk + 50])))
    return identities


async def _assert_each_started_once(temporal: Client, query: str, expected: int, *, bridges: list[BridgeProcess],
                                    counted: dict[str, int] | None = None) -> Counter[str]:
    """One workflow per object, each started once, counted outside Temporal's own bookkeeping:
    every run's first history event names the bridge process that started it, and the starts add
    up to one per object. With `counted` (bridge identity -> the starts its own metric counted
    for these objects, where they can be told apart from its starts elsewhere in the cluster),
    the bridge's count must equal what the histories say it started. A bridge that started an
    object's workflow twice (a new run instead of signalling the running one) shows more starts
    than objects in either count. Answers the starts by bridge identity."""
    executions = await _executions(temporal, query)
    assert len({workflow_id for workflow_id, _ in executions}) == expected, \
        f"{len({w for w, _ in executions})} workflows for {expected} objects"
    starters = await _starters(temporal, executions)
    by_bridge = Counter({b.identity: starters[_client_identity(b)] for b in bridges})
    assert sum(by_bridge.values()) == sum(starters.values()), f"runs started by someone else: {starters}"
    assert sum(by_bridge.values()) == expected, f"{sum(by_bridge.values())} starts for {expected} objects"
    for identity, count in (counted or {}).items():
        assert count == by_bridge[identity], f"{identity} counted {count} starts, the histories say {by_bridge}"
    return by_bridge


async def _signals(temporal: Client, workflow_id: str) -> list[tuple[str, dict[str, Any]]]:
    history = await temporal.get_workflow_handle(workflow_id).fetch_history()
    out = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = event.workflow_execution_signaled_event_attributes
            payload = json.loads(attrs.input.payloads[0].data) if attrs.input.payloads else {}
            out.append((attrs.signal_name, payload))
    return out


async def test_a_thousand_models_make_a_thousand_workflows(kube_api: client.ApiClient, bridges: BridgeLauncher,
                                                           temporal: Client) -> None:
    ns = new_namespace(kube_api, "burst")
    bridge = bridges.start(task_queue=f"q-{ns}", kinds="Model")
    baseline = await _settled_starts(bridge)  # what its relist of the cluster's other Models started
    await asyncio.to_thread(_create_models, kube_api, ns, 1000)
    query = f'ServingopsKind = "Model" AND ServingopsNamespace = "{ns}"'
    await _wait_for_count(temporal, query, 1000)
    # Dispatches that reach a running workflow are not starts: twenty deletes, a `delete` signal each.
    custom = client.CustomObjectsApi(kube_api)
    for i in range(980, 1000):
        custom.delete_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models", f"m{i}")
    await asyncio.sleep(2)  # anything duplicated would show up by now
    await _assert_each_started_once(temporal, query, 1000, bridges=[bridge],
                                    counted={bridge.identity: await _settled_starts(bridge) - baseline})
    sample = sorted(await _executions(temporal, query))[0][0]
    uid = sample.rsplit("/", 1)[1]
    [(name, payload)] = await _signals(temporal, sample)
    assert name == "object-changed"
    assert (payload["uid"], payload["generation"], payload["deleting"]) == (uid, 1, False)
    # The thousand Models go with the test: every later bridge in this stack relists the cluster and would
    # start a workflow for each of them again.
    client.CoreV1Api(kube_api).delete_namespace(ns)


async def test_killed_mid_burst_loses_nothing_and_starts_nothing_twice(
        kube_api: client.ApiClient, bridges: BridgeLauncher, temporal: Client) -> None:
    ns = new_namespace(kube_api, "crash")
    lease = f"lease-{ns}"
    first = bridges.start(task_queue=f"q-{ns}", kinds="Model", lease_name=lease)
    creating = asyncio.ensure_future(asyncio.to_thread(_create_models, kube_api, ns, 400))
    query = f'ServingopsKind = "Model" AND ServingopsNamespace = "{ns}"'
    await _wait_for_count(temporal, query, 50)
    first.process.kill()  # mid-burst: creates are still going on
    await creating
    # A restarted replica takes the same (now stale) lease once it expires.
    second = bridges.start(task_queue=f"q-{ns}", kinds="Model", lease_name=lease)
    await _wait_for_count(temporal, query, 400)
    await asyncio.sleep(2)
    # The killed replica's counter died with it: the histories say what each one started, and the
    # survivor counted at least the starts the histories give it (its relist may start others).
    by_bridge = await _assert_each_started_once(temporal, query, 400, bridges=[first, second])
    assert await _settled_starts(second) >= by_bridge[second.identity]


async def test_one_leader_and_failover(kube_api: client.ApiClient, bridges: BridgeLauncher, temporal: Client) -> None:
    ns = new_namespace(kube_api, "ha")
    lease = f"lease-{ns}"
    a = bridges.start(task_queue=f"q-{ns}", kinds="Model", lease_name=lease, lease_seconds=5)
    b = bridges.start(task_queue=f"q-{ns}", kinds="Model", lease_name=lease, lease_seconds=5, wait_leader=False)
    await asyncio.sleep(3)
    assert a.is_leader() and not b.is_leader(), "exactly one replica leads"
    leases = client.CoordinationV1Api(kube_api)
    holder = leases.read_namespaced_lease(lease, bridges.identities.namespace).spec.holder_identity
    assert holder == a.identity
    await asyncio.to_thread(_create_models, kube_api, ns, 20)
    query = f'ServingopsKind = "Model" AND ServingopsNamespace = "{ns}"'
    await _wait_for_count(temporal, query, 20)
    a.process.kill()
    killed = time.monotonic()
    await asyncio.to_thread(_create_models, kube_api, ns, 20, 20)  # events while nobody leads
    b.process.wait_ready(b.is_leader, timeout=30)
    takeover = time.monotonic() - killed
    print(f"\nfailover: replica B led {takeover:.1f}s after A was killed (lease 5s)")
    await _wait_for_count(temporal, query, 40)
    by_bridge = await _assert_each_started_once(temporal, query, 40, bridges=[a, b])
    assert by_bridge[a.identity] >= 20, "A started the first twenty before it was killed"


async def test_temporal_down_then_up_drains_the_backlog(kube_api: client.ApiClient, bridges: BridgeLauncher,
                                                        tmp_path: Path, stack_logs: Path) -> None:
    server = TemporalDevServer(tmp_path / "temporal", stack_logs, port=free_port(), headless=True).start()
    try:
        ns = new_namespace(kube_api, "outage")
        bridge = bridges.start(task_queue=f"q-{ns}", kinds="Model", temporal_address=server.address)
        server.stop()
        await asyncio.to_thread(_create_models, kube_api, ns, 60)
        await asyncio.sleep(5)  # the bridge retries meanwhile
        server.start()
        temporal = await connect(TemporalSettings(address=server.address))
        query = f'ServingopsKind = "Model" AND ServingopsNamespace = "{ns}"'
        await _wait_for_count(temporal, query, 60)
        # Everything on this server was started by this bridge (its relist started the cluster's
        # other Models there too): its own count is every run the server has.
        await _assert_each_started_once(temporal, query, 60, bridges=[bridge])
        started = await _settled_starts(bridge)
        # Visibility trails the starts a little on a loaded machine: wait for it, then the two agree.
        await _wait_for_count(temporal, 'ServingopsKind = "Model"', started)
        assert started == (await temporal.count_workflows('ServingopsKind = "Model"',
                                                          rpc_timeout=VISIBILITY_RPC_TIMEOUT)).count
    finally:
        server.stop()


async def test_generation_changes_and_deletion_are_signalled(kube_api: client.ApiClient, bridges: BridgeLauncher,
                                                             temporal: Client) -> None:
    ns = new_namespace(kube_api, "lifecycle")
    bridges.start(task_queue=f"q-{ns}", kinds="Model")
    body = manifest(Model, {"source": {"url": "https://huggingface.co/org/x"}}, name="lifecycle")
    body["metadata"]["finalizers"] = ["test.servingops.io/hold"]
    obj = create(kube_api, Model, body, ns)
    workflow_id = f"model/{ns}/lifecycle/{obj['metadata']['uid']}"
    custom = client.CustomObjectsApi(kube_api)

    async def signals_until(last: str) -> list[str]:
        deadline = time.monotonic() + EVENTUALLY
        names: list[str] = []
        while time.monotonic() < deadline and names[-1:] != [last]:
            await asyncio.sleep(0.3)
            with contextlib.suppress(RPCError):
                names = [name for name, _ in await _signals(temporal, workflow_id)]
        return names

    assert await signals_until("object-changed") == ["object-changed"]
    # A label change moves neither generation nor a watched annotation: no signal.
    custom.patch_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models", "lifecycle",
                                          {"metadata": {"labels": {"team": "a"}}})
    custom.delete_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models", "lifecycle")
    assert await signals_until("delete") == ["object-changed", "delete"]
    # The object goes away for good: the workflow was already told, nothing more is sent.
    custom.patch_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models", "lifecycle",
                                          {"metadata": {"finalizers": None}})
    await asyncio.sleep(2)
    assert [name for name, _ in await _signals(temporal, workflow_id)] == ["object-changed", "delete"]


ISVC_SPEC: dict[str, Any] = {"engine": {"runner": {"name": "engine", "image": "vllm/vllm-openai:v0.9"}}}
REQUEST_UUID = "6f1c2a4e-9d2b-4c1e-8f00-0123456789ab"


def _patch_annotations(api: client.ApiClient, ns: str, name: str, annotations: dict[str, str | None]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "ome.io", "v1beta1", ns, "inferenceservices", name, {"metadata": {"annotations": annotations}})


async def _wait_signals(temporal: Client, workflow_id: str, count: int) -> list[tuple[str, dict[str, Any]]]:
    deadline = time.monotonic() + EVENTUALLY
    signals: list[tuple[str, dict[str, Any]]] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(RPCError):
            signals = await _signals(temporal, workflow_id)
        if len(signals) >= count:
            return signals
        await asyncio.sleep(0.3)
    raise AssertionError(f"{workflow_id}: {len(signals)} signals, expected {count}: {signals}")


async def test_rollout_annotations_reach_the_service_workflow(
        kube_api: client.ApiClient, bridges: BridgeLauncher, temporal: Client) -> None:
    from servingops.api_models.ome import InferenceService

    ns = new_namespace(kube_api, "annotations")
    bridges.start(task_queue=f"q-{ns}", kinds="InferenceService")
    obj = create(kube_api, InferenceService, manifest(InferenceService, ISVC_SPEC, name="svc"), ns)
    workflow_id = f"isvc/{ns}/svc/{obj['metadata']['uid']}"
    await _wait_signals(temporal, workflow_id, 1)
    steps: list[tuple[str, str | None]] = [
        ("ome.io/rollout-promote", "abc123"),
        ("ome.io/rollout-promote-force", "true"),
        ("ome.io/rollout-rollback", "true"),
        ("ome.io/rollout-resume", "def456"),
        ("ome.io/rollout-paused", "true"),
        ("ome.io/rollout-ready-timeout", "15m"),
        ("ome.io/rollout-paused", None),
    ]
    for number, (name, value) in enumerate(steps, start=2):
        _patch_annotations(kube_api, ns, "svc", {name: value})
        signals = await _wait_signals(temporal, workflow_id, number)  # one at a time: order is checked
        signal, payload = signals[-1]
        assert (signal, payload["name"], payload["value"]) == ("annotation", name, value)
    # An unwatched annotation sends nothing.
    _patch_annotations(kube_api, ns, "svc", {"example.com/note": "x"})
    await asyncio.sleep(2)
    assert len(await _signals(temporal, workflow_id)) == len(steps) + 1

    # The trace context of the bridge's dispatch travels in the signal's header, linking the
    # span to the workflow that received it.
    history = await temporal.get_workflow_handle(workflow_id).fetch_history()
    signaled = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    assert all("_tracer-data" in e.workflow_execution_signaled_event_attributes.header.fields for e in signaled)


async def test_a_migration_request_starts_its_workflow_and_bad_ones_warn(
        kube_api: client.ApiClient, bridges: BridgeLauncher, temporal: Client) -> None:
    """A valid request starts its MigrationWorkflow (served since issue 13); bad requests get a
    Warning Event each and start nothing."""
    from servingops.api_models.ome import InferenceService

    ns = new_namespace(kube_api, "migrations")
    bridge = bridges.start(task_queue=f"q-{ns}", kinds="InferenceService")
    obj = create(kube_api, InferenceService, manifest(InferenceService, ISVC_SPEC, name="svc"), ns)
    request = {"schemaVersion": "v1", "component": "engine", "instance": 0, "from_node": "kwok-node-0",
               "hint_target_nodes": ["kwok-node-1"], "reason": "maintenance",
               "requested_at": "2026-11-29T00:00:00Z", "requested_by": "ops@example.com"}
    _patch_annotations(kube_api, ns, "svc", {
        f"ome.io/migration-request-v1-{REQUEST_UUID}": json.dumps(request),
        "ome.io/migration-request-v1-11111111-2222-4333-8444-555555555555": json.dumps({"schemaVersion": "v2"}),
        "ome.io/migration-request-v1-11111111-2222-4333-8444-666666666666": "{not json",
    })
    migration_id = f"migration/{ns}/svc-engine/{REQUEST_UUID}"

    def warnings() -> list[Any]:
        return list(client.CoreV1Api(kube_api).list_namespaced_event(
            ns, field_selector="involvedObject.name=svc,type=Warning").items)

    def two_warnings() -> list[Any] | None:
        return found if len(found := warnings()) >= 2 else None

    events: list[Any] = await asyncio.to_thread(lambda: wait_until(
        "two Warning Events on svc", two_warnings, bridge.process, timeout=EVENTUALLY, interval=0.3,
        detail=lambda: [(e.reason, e.message) for e in warnings()]))
    by_reason: dict[str, list[str]] = {}
    for event in events:
        by_reason.setdefault(event.reason, []).append(event.message)
    assert sorted(by_reason) == ["InvalidMigrationRequest"], by_reason
    invalid = " | ".join(by_reason["InvalidMigrationRequest"])
    assert len(by_reason["InvalidMigrationRequest"]) == 2
    assert 'schemaVersion must be "v1"' in invalid and "value is not JSON" in invalid
    assert [e.involved_object.uid for e in events] == [obj["metadata"]["uid"]] * 2

    # The Events are recorded after the dispatches, so the valid request's start is visible.
    started = await temporal.get_workflow_handle(migration_id).describe()
    assert started.workflow_type == "MigrationWorkflow"
    service = await temporal.get_workflow_handle(f"isvc/{ns}/svc/{obj['metadata']['uid']}").describe()
    assert service.workflow_type == "InferenceServiceWorkflow"
