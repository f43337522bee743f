"""Bridge benchmark: the rate at which the bridge turns existing objects into workflow starts, beside the
rate a plain Temporal client process starts the same workflows at, both measured the same way in the
same run; and the event-to-signal latency.

    .venv/bin/python -m bench.bridge_throughput [--objects 2000] [--latency-objects 300]

1. Baseline: a client process (its own Python, like the bridge) that connects and signal-with-starts N
   workflows (64 in flight), the very request the bridge makes, then exits.
2. Bridge: N Models created while no bridge runs, then one bridge process started: it starts up, lists
   the Models (relist) and dispatches them.
   Both are timed alike: from the moment the process is spawned (wall clock) to the server-side start
   time of the last workflow (the first event of its history), so the bridge's start-up and relist
   count, as the baseline's start-up and connection do. Rate = N / that time. The steady rate, from the
   first workflow's start to the last's (server-side for both), is printed beside.
   Goal: bridge rate / baseline rate >= 0.90.
3. Latency: Models created at a steady pace with the bridge running; per object, the time from
   the apiserver's answer to the create until Temporal recorded the workflow's start.

Exits 1 when the goal is missed (bench/goals.py).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client
from temporalio.client import Client
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)

from bench.goals import Goals
from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.process import ManagedProcess, free_port
from devstack.services import TemporalDevServer
from servingops.api_models.contract import ObjectEvent, Signal, StartObject, WorkflowType, search_attributes
from servingops.api_models.deckhouse import Model
from servingops.api_models.refs import ObjectRef
from servingops.runtime.temporal import TemporalSettings, connect

GOAL_RATIO = 0.90
DIRECT_NAMESPACE = "bench-direct"  # the ServingopsNamespace search attribute of the baseline's workflows


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# -- 1. the baseline client, run as its own process -------------------------------------------------------


async def direct_starts(address: str, count: int, concurrency: int = 64) -> None:
    temporal = await connect(TemporalSettings(address=address))
    queue = f"bench-direct-{uuid.uuid4().hex[:6]}"
    semaphore = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        ref = ObjectRef.of(Model, f"m{i}", DIRECT_NAMESPACE, str(uuid.uuid4()))
        async with semaphore:
            # The very request the bridge makes (same policies, search attributes and payloads),
            # so the ratio measures the bridge, not a cheaper request.
            await temporal.start_workflow(
                WorkflowType.MODEL, StartObject(ref=ref), id=f"bench/{queue}/{ref.name}", task_queue=queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=TypedSearchAttributes([
                    SearchAttributePair(search_attributes.KIND, "Model"),
                    SearchAttributePair(search_attributes.NAMESPACE, DIRECT_NAMESPACE),
                    SearchAttributePair(search_attributes.NAME, ref.name),
                ]),
                start_signal=Signal.OBJECT_CHANGED,
                start_signal_args=[ObjectEvent(uid=ref.uid or "", generation=1, resource_version="1")])

    await asyncio.gather(*(one(i) for i in range(count)))


def run_baseline(address: str, count: int, logs: Path) -> float:
    """Spawn the baseline client process; returns when it was spawned (epoch seconds)."""
    spawned = time.time()
    argv = [sys.executable, "-m", "bench.bridge_throughput", "--baseline-child", address, str(count)]
    with (logs / "baseline-client.log").open("w") as out:
        subprocess.run(argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, check=True)
    return spawned


# -- 2, 3. the bridge ----------------------------------------------------------------------------------------


def create_models(api: client.ApiClient, ns: str, names: list[str], pace: float | None = None) -> dict[str, float]:
    """Create Models; returns name -> wall time (epoch seconds) the apiserver answered."""
    custom = client.CustomObjectsApi(api)
    done: dict[str, float] = {}

    def one(name: str) -> None:
        body = {"apiVersion": "ai.deckhouse.io/v1alpha1", "kind": "Model", "metadata": {"name": name},
                "spec": {"source": {"url": f"https://huggingface.co/bench/{name}"}}}
        custom.create_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models", body)
        done[name] = time.time()

    if pace is None:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, names))
    else:
        next_at = time.monotonic()
        for name in names:
            one(name)
            next_at += 1 / pace
            time.sleep(max(0.0, next_at - time.monotonic()))
    return done


async def start_times(temporal: Client, ns: str) -> dict[str, datetime]:
    """Object name -> the time of the first event of its workflow's history (WorkflowExecutionStarted)."""
    query = f'ServingopsNamespace = "{ns}"'
    ids = [w.id async for w in temporal.list_workflows(query)]
    semaphore = asyncio.Semaphore(32)

    async def first_event(workflow_id: str) -> tuple[str, datetime]:
        async with semaphore:
            history = await temporal.get_workflow_handle(workflow_id).fetch_history()
        return workflow_id.split("/")[2], history.events[0].event_time.ToDatetime(tzinfo=UTC)

    return dict(await asyncio.gather(*(first_event(i) for i in ids)))


async def wait_for(temporal: Client, ns: str, count: int, wait_seconds: float = 600) -> None:
    deadline = time.monotonic() + wait_seconds
    while (await temporal.count_workflows(f'ServingopsNamespace = "{ns}"')).count < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only some of {count} workflows appeared")
        await asyncio.sleep(0.5)


def start_bridge(cluster: LocalKubeCluster, temporal: TemporalDevServer, logs: Path) -> ManagedProcess:
    argv = [sys.executable, "-m", "servingops.crd_bridge.main", "--temporal-address", temporal.address,
            "--kubeconfig", str(cluster.kubeconfig_path), "--task-queue", "bench", "--kinds", "Model",
            "--no-leader-elect", "--metrics-address", f"127.0.0.1:{free_port()}"]
    return ManagedProcess(f"bridge-{uuid.uuid4().hex[:4]}", argv, logs, cwd=REPO_ROOT).start()


@dataclass(frozen=True)
class Rates:
    """One side's N workflow starts: spawned (epoch s), first and last start (server side, epoch s)."""

    count: int
    spawned: float
    first: float
    last: float

    @classmethod
    def of(cls, spawned: float, starts: dict[str, datetime]) -> Rates:
        times = sorted(t.timestamp() for t in starts.values())
        return cls(len(times), spawned, times[0], times[-1])

    @property
    def end_to_end(self) -> float:
        """Starts per second from the process's spawn to the last start."""
        return self.count / (self.last - self.spawned)

    @property
    def steady(self) -> float:
        """Starts per second from the first start to the last."""
        return (self.count - 1) / (self.last - self.first)

    def line(self, label: str) -> str:
        return (f"{label}: {self.end_to_end:8.1f}/s end to end ({self.count} starts in "
                f"{self.last - self.spawned:.2f} s from spawn; first start "
                f"{self.first - self.spawned:.2f} s after spawn), steady {self.steady:8.1f}/s")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--latency-objects", type=int, default=300)
    parser.add_argument("--pace", type=float, default=50.0, help="creates per second in the latency phase")
    parser.add_argument("--baseline-child", nargs=2, metavar=("ADDRESS", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_child:
        await direct_starts(args.baseline_child[0], int(args.baseline_child[1]))
        return
    goals = Goals("bench.bridge_throughput")
    work = Path(tempfile.mkdtemp(prefix="bench-bridge-"))
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    temporal_server = TemporalDevServer(work / "temporal", logs, headless=True).start()
    cluster = LocalKubeCluster(work / "kube", logs, install_upstream_crds=False).start()
    bridge: ManagedProcess | None = None
    try:
        cluster.apply_crds([REPO_ROOT / "deploy" / "crds" / "ai.deckhouse.io_models.yaml"])
        api = cluster.api_client()
        temporal = await connect(TemporalSettings(address=temporal_server.address))

        spawned = await asyncio.to_thread(run_baseline, temporal_server.address, args.objects, logs)
        await wait_for(temporal, DIRECT_NAMESPACE, args.objects)
        direct = Rates.of(spawned, await start_times(temporal, DIRECT_NAMESPACE))

        ns = "bench-sustained"
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        await asyncio.to_thread(create_models, api, ns, [f"m{i}" for i in range(args.objects)])
        spawned = time.time()
        bridge = start_bridge(cluster, temporal_server, logs)
        await wait_for(temporal, ns, args.objects)
        bridged = Rates.of(spawned, await start_times(temporal, ns))

        ns = "bench-latency"
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        created = await asyncio.to_thread(create_models, api, ns, [f"l{i}" for i in range(args.latency_objects)],
                                          args.pace)
        await wait_for(temporal, ns, args.latency_objects)
        started_at = await start_times(temporal, ns)
        latencies = [(started_at[name] - datetime.fromtimestamp(at, UTC)).total_seconds() * 1000
                     for name, at in created.items()]

        print("signal-with-start of N workflows, each side timed from its process's spawn to the last workflow's "
              "first history event:")
        print(f"  {direct.line('direct client process (baseline)')}")
        print(f"  {bridged.line(f'bridge (start-up and relist of {args.objects})')}")
        ratio = bridged.end_to_end / direct.end_to_end
        print(f"ratio bridge / direct: {ratio:.3f} end to end (goal >= {GOAL_RATIO:.2f}); "
              f"steady {bridged.steady / direct.steady:.2f}")
        print(f"event-to-signal latency at {args.pace:.0f} creates/s over {len(latencies)} objects: "
              f"p50 {statistics.median(latencies):.1f} ms, p99 {percentile(latencies, 99):.1f} ms", flush=True)
        goals.check("bridge / direct signal-with-start rate, end to end", ratio, ">=", GOAL_RATIO)
    finally:
        if bridge:
            bridge.stop()
        cluster.stop()
        temporal_server.stop()
    goals.finish()


if __name__ == "__main__":
    asyncio.run(main())
