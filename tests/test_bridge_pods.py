"""The bridge wakes the InferenceReplica engine when one of its pods changes (Owns(&Pod{})).

- the mapping (crd_bridge/pod_events.py): which replica workflow a pod event wakes, and which
  events are no news;
- the coalescing (crd_bridge/pod_coalescer.py) on a fake clock, and the pod lane
  (crd_bridge/pod_signals.py) with a fake sender;
- end to end: the bridge as its own process (the chart's bridge identity) against the session's
  apiserver (kwok makes pods Ready) and Temporal, signalling a stand-in replica workflow
  (tests/pods_changed_workflow.py) run by a test worker on its own task queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from devstack.identities import Identities
from devstack.product import BridgeLauncher, BridgeProcess
from devstack.services import TemporalDevServer
from servingops.api_models import contract
from servingops.api_models.contract import StartObject
from servingops.api_models.ome import InferenceReplica, instance_keys
from servingops.api_models.refs import ObjectRef
from servingops.crd_bridge.metrics import BridgeMetrics
from servingops.crd_bridge.pod_coalescer import Coalescer, Due
from servingops.crd_bridge.pod_events import (
    LABEL_SELECTOR,
    PodChange,
    PodState,
    fingerprint,
    pod_change,
    replica_workflow_of,
)
from servingops.crd_bridge.pod_signals import WakeSignaller
from servingops.runtime.temporal import TemporalSettings, connect
from testkit.waiting import wait_until
from tests import rbac_calls
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as
from tests.pods_changed_workflow import COUNT, PodsChangedCounter
from tests.support.ome_objects import replica_spec

REPLICA_UID = "7d0c1c7e-0000-4000-8000-000000000001"
WORKFLOW_ID = f"replica/team/engine/{REPLICA_UID}"


def _pod(**over: Any) -> dict[str, Any]:
    """A Running, Ready pod of replica `engine` in namespace `team`, as the apiserver serves it."""
    pod: dict[str, Any] = {
        "metadata": {
            "name": "engine-0", "namespace": "team", "uid": "pod-1", "resourceVersion": "10",
            "labels": {instance_keys.REPLICA_LABEL: "engine", instance_keys.INSTANCE_LABEL: "0"},
            "annotations": {"note": "a"},
            "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "name": "engine",
                                 "uid": REPLICA_UID, "controller": True}],
        },
        "spec": {"nodeName": "kwok-node-0", "containers": [{"name": "main", "image": "x"}]},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": "2026-11-30T10:00:00Z"},
                {"type": "PodScheduled", "status": "True"},
            ],
            "containerStatuses": [{"name": "main", "restartCount": 0, "ready": True,
                                   "state": {"running": {"startedAt": "2026-11-30T10:00:00Z"}}}],
        },
    }
    for path, value in over.items():
        *parents, last = path.split(".")
        node = pod
        for part in parents:
            node = node[part]
        node[last] = value
    return pod


def _seen(pod: dict[str, Any]) -> PodState:
    """What the bridge remembers after a first event of `pod`."""
    change = pod_change(pod, None, gone=False)
    assert change.state is not None
    return change.state


# -- the mapping -----------------------------------------------------------------------------------


@pytest.mark.unit
def test_an_owned_pod_maps_to_its_replica_workflow() -> None:
    assert replica_workflow_of(_pod()) == WORKFLOW_ID == contract.replica_workflow_id("team", "engine", REPLICA_UID)
    change = pod_change(_pod(), None, gone=False)
    assert change.wake == (WORKFLOW_ID,)
    assert change.state == PodState(WORKFLOW_ID, fingerprint(_pod()))


@pytest.mark.unit
@pytest.mark.parametrize("owners", [
    None,
    [],
    [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "engine", "uid": REPLICA_UID, "controller": True}],
    [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "name": "engine", "uid": REPLICA_UID}],
    [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "name": "engine", "uid": REPLICA_UID,
      "controller": False}],
    [{"apiVersion": "example.com/v1", "kind": "InferenceReplica", "name": "engine", "uid": REPLICA_UID,
      "controller": True}],
], ids=["no-owners", "empty", "replicaset", "not-controller", "controller-false", "other-group"])
def test_a_pod_without_an_inference_replica_controller_wakes_nobody(owners: Any) -> None:
    pod = _pod(**{"metadata.ownerReferences": owners})
    assert replica_workflow_of(pod) is None
    assert pod_change(pod, None, gone=False) == PodChange(None, ())
    assert pod_change(pod, None, gone=True).wake == ()


NO_NEWS: dict[str, Callable[[dict[str, Any]], None]] = {
    "annotation": lambda p: p["metadata"]["annotations"].update(note="b"),
    "resourceVersion": lambda p: p["metadata"].update(resourceVersion="11"),
    "managedFields": lambda p: p["metadata"].update(managedFields=[{"manager": "kwok"}]),
    "probe-time": lambda p: p["status"]["conditions"][0].update(lastProbeTime="2026-11-30T10:05:00Z"),
    "transition-time": lambda p: p["status"]["conditions"][0].update(lastTransitionTime="2026-11-30T10:05:00Z"),
    "started-at": lambda p: p["status"]["containerStatuses"][0]["state"]["running"].update(startedAt="later"),
    "condition-order": lambda p: p["status"]["conditions"].reverse(),
    "spec-image": lambda p: p["spec"]["containers"][0].update(image="y"),
}
NEWS: dict[str, Callable[[dict[str, Any]], None]] = {
    "phase": lambda p: p["status"].update(phase="Failed"),
    "ready": lambda p: p["status"]["conditions"][0].update(status="False"),
    "serving-gate": lambda p: p["status"]["conditions"].append({"type": instance_keys.SERVING_GATE,
                                                                "status": "True"}),
    "deleting": lambda p: p["metadata"].update(deletionTimestamp="2026-11-30T10:06:00Z"),
    "restart": lambda p: p["status"]["containerStatuses"][0].update(restartCount=1),
    "state-kind": lambda p: p["status"]["containerStatuses"][0].update(state={"terminated": {"exitCode": 1}}),
    "init-container": lambda p: p["status"].update(initContainerStatuses=[
        {"name": "sidecar", "restartCount": 2, "state": {"running": {}}}]),
    "node": lambda p: p["spec"].update(nodeName="kwok-node-1"),
    "label": lambda p: p["metadata"]["labels"].update({instance_keys.INCARNATION_LABEL: "2"}),
    "gates": lambda p: p["spec"].update(schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]),
    "recreated": lambda p: p["metadata"].update(uid="pod-2"),
}


@pytest.mark.unit
@pytest.mark.parametrize("edit", NO_NEWS.values(), ids=NO_NEWS.keys())
def test_what_the_engine_does_not_read_is_no_news(edit: Callable[[dict[str, Any]], None]) -> None:
    before = _seen(_pod())
    after = _pod()
    edit(after)
    change = pod_change(after, before, gone=False)
    assert change.wake == ()
    assert change.state == before


@pytest.mark.unit
@pytest.mark.parametrize("edit", NEWS.values(), ids=NEWS.keys())
def test_what_the_engine_reads_wakes_it(edit: Callable[[dict[str, Any]], None]) -> None:
    before = _seen(_pod())
    after = _pod()
    edit(after)
    change = pod_change(after, before, gone=False)
    assert change.wake == (WORKFLOW_ID,)
    assert change.state is not None and change.state.fingerprint != before.fingerprint
    # The new state is remembered: the same event again is no news.
    assert pod_change(copy.deepcopy(after), change.state, gone=False).wake == ()


@pytest.mark.unit
def test_a_deletion_always_counts() -> None:
    before = _seen(_pod())
    assert pod_change(_pod(), before, gone=True) == PodChange(None, (WORKFLOW_ID,))
    # Never seen before (the watch started after the pod's last change): still news.
    assert pod_change(_pod(), None, gone=True).wake == (WORKFLOW_ID,)
    # Vanished while the watch was down: the relist has only the remembered state.
    stand_in = {"metadata": {"namespace": "team", "name": "engine-0", "uid": "pod-1"}}
    assert pod_change(stand_in, before, gone=True).wake == (WORKFLOW_ID,)


@pytest.mark.unit
def test_a_pod_that_changes_hands_wakes_the_replica_it_left() -> None:
    before = _seen(_pod())
    orphaned = pod_change(_pod(**{"metadata.ownerReferences": []}), before, gone=False)
    assert orphaned.wake == (WORKFLOW_ID,) and orphaned.state is None
    other = [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "name": "engine-b", "uid": "u-2",
              "controller": True}]
    adopted = pod_change(_pod(**{"metadata.ownerReferences": other}), before, gone=False)
    assert adopted.wake == (WORKFLOW_ID, "replica/team/engine-b/u-2")


# -- coalescing on a fake clock --------------------------------------------------------------------


@pytest.mark.unit
def test_a_burst_of_marks_becomes_one_signal_and_one_more_after_it() -> None:
    coalescer = Coalescer(interval=0.2)
    assert coalescer.take(0.0) is None
    joined = [coalescer.mark("r", 0.0) for _ in range(200)]
    assert joined.count(True) == 1 and joined.count(False) == 199
    due = coalescer.take(0.0)
    assert due == Due("r", 0.0)
    assert coalescer.take(0.0) is None, "one in flight per workflow"
    assert coalescer.mark("r", 0.01) is True  # a change while in flight: one more send, later
    assert coalescer.mark("r", 0.02) is False
    assert coalescer.take(0.03) is None, "nothing while the first is in flight"
    coalescer.finish(due, 0.05)
    assert coalescer.take(0.05) == pytest.approx(0.15), "paced: 200 ms after the last send began"
    assert coalescer.take(0.2) == Due("r", 0.01)


@pytest.mark.unit
def test_replicas_do_not_pace_each_other() -> None:
    coalescer = Coalescer(interval=0.2)
    coalescer.mark("a", 0.0)
    coalescer.mark("b", 0.0)
    taken = {coalescer.take(0.0), coalescer.take(0.0)}
    assert taken == {Due("a", 0.0), Due("b", 0.0)}


@pytest.mark.unit
def test_two_hundred_pods_turning_ready_over_a_second_make_a_handful_of_signals() -> None:
    """200 Ready events 5 ms apart, each send taking 30 ms: every change is covered by a send
    that began after it, and no two sends begin less than 200 ms apart."""
    coalescer = Coalescer(interval=0.2)
    marks = [i * 0.005 for i in range(200)]
    starts: list[float] = []
    in_flight: list[tuple[Due, float]] = []
    now, step = 0.0, 0.001
    while now < 3.0:
        while marks and marks[0] <= now:
            coalescer.mark("r", marks.pop(0))
        for due, ends in list(in_flight):
            if ends <= now:
                coalescer.finish(due, now)
                in_flight.remove((due, ends))
        got = coalescer.take(now)
        if isinstance(got, Due):
            starts.append(now)
            in_flight.append((got, now + 0.03))
        now = round(now + step, 6)
    assert 5 <= len(starts) <= 7, starts
    assert all(b - a >= 0.2 - 1e-9 for a, b in itertools.pairwise(starts)), starts
    assert starts[-1] >= 199 * 0.005, "the last change was sent"
    assert coalescer.tracked() == 0, "an idle replica is forgotten"


@pytest.mark.unit
def test_a_failed_send_is_retried_with_backoff_and_keeps_its_changes() -> None:
    coalescer = Coalescer(interval=0.2, max_backoff=1.0)
    coalescer.mark("r", 1.0)
    first = coalescer.take(1.0)
    assert isinstance(first, Due)
    assert coalescer.mark("r", 1.1) is True
    coalescer.finish(first, 1.2, failed=True)
    assert coalescer.mark("r", 1.25) is False, "joined the retry"
    assert coalescer.take(1.25) == pytest.approx(0.15)
    second = coalescer.take(1.4)
    assert second == Due("r", 1.0), "the retry covers the oldest change"
    coalescer.finish(second, 1.4, failed=True)
    assert coalescer.take(1.4) == pytest.approx(0.4)
    third = coalescer.take(1.8)
    assert isinstance(third, Due)
    coalescer.finish(third, 1.8, failed=True)
    assert coalescer.take(1.8) == pytest.approx(0.8)
    fourth = coalescer.take(2.6)
    assert isinstance(fourth, Due)
    coalescer.finish(fourth, 2.6, failed=True)
    assert coalescer.take(2.6) == pytest.approx(1.0), "capped"
    last = coalescer.take(3.6)
    assert isinstance(last, Due)
    coalescer.finish(last, 3.6)
    assert coalescer.take(3.6) == pytest.approx(0.2)  # the entry waits out its interval...
    assert coalescer.take(3.9) is None and coalescer.tracked() == 0  # ...and is forgotten


# -- the pod lane, with a fake sender --------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _sample(metrics: BridgeMetrics, name: str) -> float:
    for line in metrics.render().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


SENT = 'servingops_bridge_signals_sent_total{workflow_type="InferenceReplicaWorkflow",signal="pods-changed"}'


@pytest.mark.unit
async def test_the_lane_sends_drops_when_no_workflow_and_retries_failures() -> None:
    clock = FakeClock()
    metrics = BridgeMetrics()
    answers: dict[str, list[bool | Exception]] = {"running": [True], "gone": [False],
                                                  "flaky": [RuntimeError("unavailable"), True]}
    sent: list[str] = []

    async def send(workflow_id: str) -> bool:
        sent.append(workflow_id)
        answer = answers[workflow_id].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    lane = WakeSignaller(send, metrics, asyncio.get_running_loop(), clock=clock)
    for workflow_id in ("running", "gone", "flaky", "running"):
        lane.mark(workflow_id)
    await asyncio.sleep(0)  # the marks arrive through call_soon_threadsafe
    while len(sent) < 3 or lane._sending:
        await lane.step()
    assert sorted(sent) == ["flaky", "gone", "running"], "one send per workflow, the second mark joined"
    assert _sample(metrics, "servingops_bridge_pod_signals_coalesced_total") == 1
    assert _sample(metrics, "servingops_bridge_pod_signals_dropped_total") == 1
    assert _sample(metrics, SENT) == 1
    assert _sample(metrics, 'servingops_bridge_dispatch_errors_total{error="RuntimeError"}') == 1
    clock.now += 0.2  # the retry's backoff, on the fake clock
    while len(sent) < 4 or lane._sending:
        await lane.step()
    assert sent[-1] == "flaky"
    assert _sample(metrics, SENT) == 2


@pytest.mark.unit
async def test_a_slow_send_holds_its_own_replica_only() -> None:
    clock = FakeClock()
    release = asyncio.Event()
    sent: list[str] = []

    async def send(workflow_id: str) -> bool:
        sent.append(workflow_id)
        if workflow_id == "slow":
            await release.wait()
        return True

    lane = WakeSignaller(send, BridgeMetrics(), asyncio.get_running_loop(), clock=clock)
    running = asyncio.ensure_future(lane.run())
    try:
        lane.mark("slow")
        await _until(lambda: sent == ["slow"])
        clock.now += 1.0
        lane.mark("slow")  # waits for the one in flight
        lane.mark("other")
        await _until(lambda: sent == ["slow", "other"])
        release.set()
        await _until(lambda: sent == ["slow", "other", "slow"])
    finally:
        running.cancel()


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("never happened")


@pytest.mark.unit
def test_the_bridge_asks_only_to_list_and_watch_pods() -> None:
    """The pod watch is reached from the bridge's entry point, and needs nothing on pods but
    list and watch (the chart grants exactly what the code calls: tests/test_identities.py)."""
    pods = {triple for triple in rbac_calls.used("bridge") if triple[1].startswith("pods")}
    assert pods == {("", "pods", "list"), ("", "pods", "watch")}


# -- end to end ------------------------------------------------------------------------------------

EVENTUALLY = 120.0
"""A bound for a wait (the bridge first relists every replica pod of the cluster), not a claim about speed."""


@pytest.fixture
async def temporal(temporal_server: TemporalDevServer) -> Client:
    return await connect(TemporalSettings(address=temporal_server.address))


def _metric(bridge: BridgeProcess, sample: str) -> float:
    for line in bridge.metrics().splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def _eventually(what: str, probe: Callable[[], Any], bridge: BridgeProcess) -> None:
    """Wait for `probe` (blocking: the wait runs in a thread) to answer true; fail at once if the bridge died."""
    await asyncio.to_thread(wait_until, what, probe, bridge.process, EVENTUALLY, 0.2)


async def _count_above(handle: WorkflowHandle[Any, Any], floor: int) -> int:
    deadline = time.monotonic() + EVENTUALLY
    while time.monotonic() < deadline:
        if (count := await _count(handle)) > floor:
            return count
        await asyncio.sleep(0.2)
    raise AssertionError(f"{handle.id}: no pods-changed signal beyond {floor}")


def _replica_pod(name: str, replica: str, replica_uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": instance_keys.selector_labels(replica, "engine"),
            "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "name": replica,
                                 "uid": replica_uid, "controller": True}],
        },
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/engine:v1"}]},
    }


def _ready(core: client.CoreV1Api, ns: str, name: str) -> bool:
    pod = core.read_namespaced_pod(name, ns)
    conditions = pod.status.conditions if pod.status else None
    return any(c.type == "Ready" and c.status == "True" for c in conditions or [])


async def _count(handle: WorkflowHandle[Any, Any]) -> int:
    return int(await handle.query(COUNT))


async def _settled(handle: WorkflowHandle[Any, Any]) -> int:
    """The signal count once the bridge has nothing of this replica pending: unchanged over a
    second (five times the lane's pacing)."""
    last = -1
    for _ in range(int(EVENTUALLY)):
        now = await _count(handle)
        if now == last:
            return now
        last = now
        await asyncio.sleep(1)
    raise AssertionError("the count never settled")


@dataclass
class Engine:
    """A replica object, the stand-in engine under its workflow id, and a bridge following it."""

    ns: str
    uid: str
    handle: WorkflowHandle[Any, Any]
    bridge: BridgeProcess


@contextlib.asynccontextmanager
async def _engine(kube_api: client.ApiClient, bridges: BridgeLauncher, temporal: Client,
                  prefix: str) -> AsyncIterator[Engine]:
    ns = new_namespace(kube_api, prefix)
    queue = f"q-{ns}"
    replica = create(kube_api, InferenceReplica, manifest(InferenceReplica, replica_spec(), name="engine"), ns)
    uid = replica["metadata"]["uid"]
    async with Worker(temporal, task_queue=queue, workflows=[PodsChangedCounter]):
        ref = ObjectRef.of(InferenceReplica, "engine", ns, uid)
        # Use-existing: a bridge that serves the type may have started it first, on this same queue.
        handle = await temporal.start_workflow(PodsChangedCounter.run, StartObject(ref=ref),
                                               id=contract.replica_workflow_id(ns, "engine", uid), task_queue=queue,
                                               id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        bridge = bridges.start(task_queue=queue, kinds="InferenceReplica")
        try:
            yield Engine(ns, uid, handle, bridge)
        finally:
            with contextlib.suppress(RPCError):
                await handle.terminate()


@pytest.mark.e2e
async def test_pod_changes_wake_the_replica_workflow(kube_api: client.ApiClient, bridges: BridgeLauncher,
                                                     temporal: Client) -> None:
    core = client.CoreV1Api(kube_api)
    async with _engine(kube_api, bridges, temporal, "replica-pods") as engine:
        ns, handle, bridge = engine.ns, engine.handle, engine.bridge
        assert await _count(handle) == 0

        # A pod of the replica appears and kwok makes it Ready: the engine hears of it.
        core.create_namespaced_pod(ns, _replica_pod("engine-0", "engine", engine.uid))
        await _eventually("engine-0 Ready", lambda: _ready(core, ns, "engine-0"), bridge)
        await _count_above(handle, 0)
        before = await _settled(handle)

        # An annotation the engine does not read: seen by the bridge, no signal.
        modified = 'servingops_bridge_events_seen_total{kind="Pod",type="MODIFIED"}'
        seen = _metric(bridge, modified)
        core.patch_namespaced_pod("engine-0", ns, {"metadata": {"annotations": {"example.com/note": "x"}}})
        await _eventually("the annotation's event reached the bridge", lambda: _metric(bridge, modified) > seen,
                          bridge)
        await asyncio.sleep(1)  # five times the lane's pacing: a signal would have been sent by now
        assert await _count(handle) == before

        # A label the engine reads (the control for the step above): one more signal.
        core.patch_namespaced_pod("engine-0", ns, {"metadata": {"labels": {instance_keys.INCARNATION_LABEL: "2"}}})
        await _count_above(handle, before)
        after_label = await _settled(handle)

        # The pod goes away: deletion always counts.
        core.delete_namespaced_pod("engine-0", ns, grace_period_seconds=0)
        await _count_above(handle, after_label)

        # A pod whose replica has no workflow: nothing is started for it (a pod never starts a
        # workflow), the signal is dropped and counted.
        dropped = _metric(bridge, "servingops_bridge_pod_signals_dropped_total")
        ghost_uid = str(uuid.uuid4())
        core.create_namespaced_pod(ns, _replica_pod("ghost-0", "ghost", ghost_uid))
        await _eventually("a dropped signal",
                          lambda: _metric(bridge, "servingops_bridge_pod_signals_dropped_total") > dropped, bridge)
        with pytest.raises(RPCError) as missing:
            await temporal.get_workflow_handle(contract.replica_workflow_id(ns, "ghost", ghost_uid)).describe()
        assert missing.value.status == RPCStatusCode.NOT_FOUND
        # Every signal the engine counted is one the bridge counted as sent (its relist may also
        # have signalled replicas that earlier tests left running, hence not equality).
        counted = await _settled(handle)
        assert _metric(bridge, SENT) >= counted


@pytest.mark.e2e
async def test_a_burst_of_pods_is_paced_per_replica(kube_api: client.ApiClient, bridges: BridgeLauncher,
                                                    temporal: Client) -> None:
    """Twenty pods created at once, each seen several times on its way to Ready: the sends to
    the one replica start at least 200 ms apart, so however long the burst took, at most
    (its duration / 0.2 s) + 1 signals arrive. Figures are printed, not asserted."""
    core = client.CoreV1Api(kube_api)
    pods = 20
    async with _engine(kube_api, bridges, temporal, "replica-burst") as engine:
        ns, handle, bridge = engine.ns, engine.handle, engine.bridge
        # A first pod, heard of: the bridge's pod watch is past its first list, so the burst below
        # arrives as watch events (a bridge that starts late would see it as one relist).
        core.create_namespaced_pod(ns, _replica_pod("engine-0", "engine", engine.uid))
        await _count_above(handle, 0)
        first = await _settled(handle)
        events_before, coalesced_before = _pod_events(bridge), _metric(bridge, COALESCED)

        began = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: core.create_namespaced_pod(ns, _replica_pod(f"engine-{i}", "engine", engine.uid)),
                          range(1, pods + 1)))
        await _eventually("every pod Ready", lambda: all(_ready(core, ns, f"engine-{i}") for i in range(1, pods + 1)),
                          bridge)
        signals = await _settled(handle) - first
        took = time.monotonic() - began
        events = _pod_events(bridge) - events_before
        coalesced = _metric(bridge, COALESCED) - coalesced_before
        print(f"\n{pods} pods: {events:.0f} pod watch events, {signals} pods-changed signals, {coalesced:.0f} "
              f"changes coalesced, over {took:.1f}s")
        assert 1 <= signals <= took / 0.2 + 1


COALESCED = "servingops_bridge_pod_signals_coalesced_total"


def _pod_events(bridge: BridgeProcess) -> float:
    return sum(_metric(bridge, f'servingops_bridge_events_seen_total{{kind="Pod",type="{t}"}}')
               for t in ("ADDED", "MODIFIED"))


@pytest.mark.integration
def test_the_bridge_identity_lists_pods_and_does_nothing_else_with_them(kube_api: client.ApiClient,
                                                                        chart_identities: Identities) -> None:
    """The chart's bridge role on the real apiserver: list and watch pods, nothing more."""
    ns = new_namespace(kube_api, "bridge-pod-rights")
    pod = _replica_pod("engine-0", "engine", "")
    del pod["metadata"]["ownerReferences"]  # an owner that does not exist would have the pod collected
    client.CoreV1Api(kube_api).create_namespaced_pod(ns, pod)
    with api_as(chart_identities.bridge) as bridge:
        core = client.CoreV1Api(bridge)
        listed = core.list_pod_for_all_namespaces(label_selector=LABEL_SELECTOR)
        assert any(p.metadata and p.metadata.namespace == ns for p in listed.items)
        refusals: dict[str, Callable[[], Any]] = {
            "get": lambda: core.read_namespaced_pod("engine-0", ns),
            "create": lambda: core.create_namespaced_pod(ns, _replica_pod("engine-1", "engine", "u")),
            "patch": lambda: core.patch_namespaced_pod("engine-0", ns, {"metadata": {"labels": {"x": "y"}}}),
            "status": lambda: core.patch_namespaced_pod_status("engine-0", ns, {"status": {"phase": "Failed"}}),
            "delete": lambda: core.delete_namespaced_pod("engine-0", ns),
            "evict": lambda: core.create_namespaced_pod_eviction("engine-0", ns, client.V1Eviction(
                metadata=client.V1ObjectMeta(name="engine-0", namespace=ns))),
            "logs": lambda: core.read_namespaced_pod_log("engine-0", ns),
        }
        for verb, call in refusals.items():
            with pytest.raises(ApiException) as refused:
                call()
            assert refused.value.status == 403, (verb, refused.value.body)
