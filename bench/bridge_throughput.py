"""Bridge benchmark: event-to-signal latency and sustained rate, beside the rate the Temporal dev
server itself accepts signal-with-starts at, measured in the same run on the same machine.

    .venv/bin/python -m bench.bridge_throughput [--objects 2000] [--latency-objects 300]

1. Baseline: signal-with-start of N workflows straight from one client (64 in flight).
2. Sustained: N Models created while no bridge runs, then one bridge started: its relist and
   dispatch rate, from the first workflow start to the last.
3. Latency: Models created at a steady pace with the bridge running; per object, the time from
   the apiserver's answer to the create until Temporal recorded the workflow's start.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
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

from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.process import ManagedProcess, free_port
from devstack.services import TemporalDevServer
from servingops.api_models.contract import ObjectEvent, Signal, StartObject, WorkflowType
from servingops.api_models.deckhouse import Model
from servingops.api_models.refs import ObjectRef
from servingops.runtime.temporal import TemporalSettings, connect
from servingops.workflows import search_attributes


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def baseline(temporal: Client, count: int, concurrency: int = 64) -> float:
    queue = f"bench-direct-{uuid.uuid4().hex[:6]}"
    semaphore = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        ref = ObjectRef.of(Model, f"m{i}", "bench", str(uuid.uuid4()))
        async with semaphore:
            # The very request the bridge makes (same policies, search attributes and payloads),
            # so the ratio measures the bridge, not a cheaper request.
            await temporal.start_workflow(
                WorkflowType.MODEL, StartObject(ref=ref), id=f"bench/{queue}/{i}", task_queue=queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=TypedSearchAttributes([
                    SearchAttributePair(search_attributes.KIND, "Model"),
                    SearchAttributePair(search_attributes.NAMESPACE, "bench"),
                    SearchAttributePair(search_attributes.NAME, ref.name),
                ]),
                start_signal=Signal.OBJECT_CHANGED,
                start_signal_args=[ObjectEvent(uid=ref.uid or "", generation=1, resource_version="1")])

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(count)))
    return count / (time.monotonic() - started)


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
    query = f'ServingopsNamespace = "{ns}"'
    return {w.id.split("/")[2]: w.start_time async for w in temporal.list_workflows(query)}


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


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--latency-objects", type=int, default=300)
    parser.add_argument("--pace", type=float, default=50.0, help="creates per second in the latency phase")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-bridge-"))
    logs = work / "logs"
    temporal_server = TemporalDevServer(work / "temporal", logs, headless=True).start()
    cluster = LocalKubeCluster(work / "kube", logs, install_upstream_crds=False).start()
    bridge: ManagedProcess | None = None
    try:
        cluster.apply_crds([REPO_ROOT / "deploy" / "crds" / "ai.deckhouse.io_models.yaml"])
        api = cluster.api_client()
        temporal = await connect(TemporalSettings(address=temporal_server.address))

        direct_rate = await baseline(temporal, args.objects)

        ns = "bench-sustained"
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        await asyncio.to_thread(create_models, api, ns, [f"m{i}" for i in range(args.objects)])
        bridge = start_bridge(cluster, temporal_server, logs)
        await wait_for(temporal, ns, args.objects)
        starts = sorted((await start_times(temporal, ns)).values())
        bridge_rate = (len(starts) - 1) / (starts[-1] - starts[0]).total_seconds()

        ns = "bench-latency"
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        created = await asyncio.to_thread(create_models, api, ns, [f"l{i}" for i in range(args.latency_objects)],
                                          args.pace)
        await wait_for(temporal, ns, args.latency_objects)
        started_at = await start_times(temporal, ns)
        latencies = [(started_at[name] - datetime.fromtimestamp(at, UTC)).total_seconds() * 1000
                     for name, at in created.items()]

        print(f"signal-with-start rate, Temporal dev server direct (baseline): {direct_rate:8.1f}/s")
        print(f"signal-with-start rate through the bridge (relist of {args.objects}): {bridge_rate:8.1f}/s")
        print(f"ratio bridge / direct: {bridge_rate / direct_rate:.2f}  (goal >= 0.90)")
        print(f"event-to-signal latency at {args.pace:.0f} creates/s over {len(latencies)} objects: "
              f"p50 {statistics.median(latencies):.1f} ms, p99 {percentile(latencies, 99):.1f} ms")
    finally:
        if bridge:
            bridge.stop()
        cluster.stop()
        temporal_server.stop()


if __name__ == "__main__":
    asyncio.run(main())
