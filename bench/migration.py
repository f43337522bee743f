"""Migration benchmark on the real local stack (issue 13): etcd + kube-apiserver + controller-manager +
scheduler + kwok nodes, the Temporal dev server, the worker and the bridge as separate processes.

    .venv/bin/python -m bench.migration [--instances 100] [--migrations 50] [--nodes 6] [--keep]
    .venv/bin/python -m bench.migration --fake ...     # the fake cluster, simulated time (bench/migration_fake.py)

Setup: the operator ConfigMap's `lifecycle` block gets maxInFlightMigrations and
maxMigrationsPerWindow = `--migrations` (the defaults, 1 and 10, would queue or refuse most of
them), then an OMENative InferenceService whose engine has `--instances` Instances; timed until its
InferenceReplica's status says every row Ready with no operation open.
(1) Surge migration: one patch adds `--migrations` request annotations (Instances 0..k-1, each with
    its from_node and a hint to another node, the least loaded first) to the InferenceService. Per
    request, timed from that patch until a watch on the replica sees the record Completed (p50,
    max) and overall until the last one is.
(2) The same replacement by the engine: the pods of k other Instances are deleted at once and the
    replica recreates them; timed until the serving count is back at N, and until status settles.
A pod watch (bench/serving_watch.py) counts the serving Instances (containers ready and ome.io/serving
True) at every pod event, i.e. more often than any poll could; the fewest serving and the most pods
alive during each part are printed, with the worker's peak RSS and CPU. Then where (1)'s time went:
patch -> MigrationWorkflow started (the bridge), the histories of the MigrationWorkflows and of the
replica workflow (bench/workflow_history.py), and the replica's migration-record signals, sent between
its status write and its commands (all of a pass's together since patch migration-records-together).
Exits 1 (bench/goals.py) when a surge migration took the replica below N or a request did not complete;
nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client
from temporalio.api.enums.v1 import EventType

from bench import migration_fake, workflow_history
from bench.goals import Goals
from bench.replica_scale import (
    history_now,
    instance_of,
    instance_serving,
    proc_kb,
    ratio,
    replica_settled,
    replica_view,
)
from bench.serving_watch import ServingWatch
from bench.stack import admin_identities, start_servers
from bench.watches import ObjectWatch
from bench.workflow_history import History, Run
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.product import BridgeLauncher, start_worker
from servingops.api_models import contract
from servingops.api_models.contract import Signal
from servingops.api_models.ome.instance_keys import INSTANCE_LABEL, REPLICA_LABEL
from servingops.runtime.temporal import TemporalSettings, connect

GROUP, VERSION = "ome.io", "v1beta1"
NAMESPACE, SERVICE = "bench-migration", "mig"
REPLICA = f"{SERVICE}-engine"
TERMINAL = ("Completed", "Failed")
Phases = frozenset[tuple[str, str]]
"""(requestUUID, phase) of every record in status.migrations."""


def phases(obj: dict[str, Any]) -> Phases:
    return frozenset((str(m.get("requestUUID")), str(m.get("phase")))
                     for m in (obj.get("status") or {}).get("migrations") or [])


@dataclass
class Stack:
    cluster: LocalKubeCluster
    api: client.ApiClient
    worker: ManagedProcess
    nodes: int
    temporal: str
    """The Temporal dev server's address."""


@contextlib.contextmanager
def local_stack(work: Path, nodes: int, max_migrations: int) -> Iterator[Stack]:
    """The processes bench/replica_scale.py starts, with the operator ConfigMap written before the
    worker starts (a replica workflow reads the lifecycle block once, when it opens)."""
    logs = work / "logs"
    with contextlib.ExitStack() as cleanup:
        servers = start_servers(cleanup, work, nodes=nodes)
        temporal, cluster, registry, hub, api = (servers.temporal, servers.cluster, servers.registry, servers.hub,
                                                 servers.api)
        identities = admin_identities(cluster, api)
        write_operator_config(api, identities, max_migrations)
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        task_queue = f"bench-{uuid.uuid4().hex[:6]}"
        worker = start_worker(cluster, temporal, registry, hub, task_queue, work / "spool", logs,
                              host_id="bench-migration", identities=identities)
        cleanup.callback(worker.stop)
        launcher = BridgeLauncher(identities, temporal.address, logs)
        cleanup.callback(launcher.stop_all)
        launcher.start(task_queue=task_queue, kinds="InferenceService,InferenceReplica")
        yield Stack(cluster, api, worker, nodes, temporal.address)


def write_operator_config(api: client.ApiClient, identities: Identities, max_migrations: int) -> None:
    lifecycle = {"maxInFlightMigrations": max_migrations, "maxMigrationsPerWindow": max_migrations}
    client.CoreV1Api(api).create_namespaced_config_map(identities.namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=identities.operator_config),
        data={"lifecycle": yaml.safe_dump(lifecycle)}))


def service_body(instances: int) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": SERVICE},
            "spec": {"deploymentMode": "OMENative", "engine": {
                "minReplicas": instances, "runner": {"name": "engine", "image": "vllm/vllm-openai:v0.9",
                                                     "ports": [{"containerPort": 8000}]}}}}  # fmt: skip


@dataclass(frozen=True)
class Pod:
    name: str
    index: int
    node: str


def live_pods(core: client.CoreV1Api) -> list[Pod]:
    """The replica's pods not being deleted (plain JSON: the client models type every field Optional)."""
    listed = core.list_namespaced_pod(NAMESPACE, label_selector=f"{REPLICA_LABEL}={REPLICA}",
                                      _preload_content=False)
    return [Pod(p["metadata"]["name"], int(p["metadata"]["labels"][INSTANCE_LABEL]), str(p["spec"].get("nodeName")))
            for p in json.loads(cast(Any, listed).data)["items"] if p["metadata"].get("deletionTimestamp") is None]


def requests(pods: list[Pod], instances: list[int], node_names: list[str]) -> dict[str, str]:
    """One annotation per Instance: off its node, hinted to the node with the fewest pods counting the
    hints already given, so the surges spread the way an operator draining nodes would send them."""
    node_of = {p.index: p.node for p in pods}
    load = {name: 0 for name in node_names}
    for node in node_of.values():
        load[node] = load.get(node, 0) + 1
    annotations = {}
    for index in instances:
        source = node_of[index]
        target = min((n for n in node_names if n != source), key=lambda n: (load[n], n))
        load[target] += 1
        annotations[f"ome.io/migration-request-v1-{uuid.uuid4()}"] = json.dumps({
            "schemaVersion": "v1", "component": "engine", "instance": index, "from_node": source,
            "hint_target_nodes": [target], "reason": "maintenance", "requested_at": "2026-11-30T00:00:00Z",
            "requested_by": "bench"})
    return annotations


def first_in_phase(watch: ObjectWatch, since: float) -> dict[tuple[str, str], float]:
    """When each (request, phase) was first seen on the replica, from `since`."""
    seen: dict[tuple[str, str], float] = {}
    for at, value in watch.changes.get(REPLICA) or []:
        for pair in value or ():
            if at >= since:
                seen.setdefault(pair, at)
    return seen


async def request_workflows(address: str, uuids: set[str], asked_at: float) -> tuple[list[float], History]:
    """Per request: wall seconds from the patch until the bridge had started its MigrationWorkflow; and
    the histories of all of them together."""
    temporal = await connect(TemporalSettings(address=address))
    ids = [contract.migration_workflow_id(NAMESPACE, REPLICA, u) for u in sorted(uuids)]
    described = await asyncio.gather(*(temporal.get_workflow_handle(i).describe() for i in ids))
    histories = await asyncio.gather(*(workflow_history.read(temporal, i) for i in ids))
    # One summary over all of them: their runs summed into one line's worth.
    merged = History([Run(sum(h.events for h in histories), sum(r.proto_bytes for h in histories for r in h.runs),
                          False)], [c for h in histories for c in h.calls], [t for h in histories for t in h.tasks])
    return [d.start_time.timestamp() - asked_at for d in described], merged


async def record_signals(address: str, workflow_id: str, since: float, until: float) -> tuple[int, int, float]:
    """The replica's migration-record signals between two wall-clock times: how many, in how many
    uninterrupted runs (no activity scheduled in between: the pass's commands wait behind them), and
    the seconds those runs span in all. The latest run of the workflow only."""
    temporal = await connect(TemporalSettings(address=address))
    history = await temporal.get_workflow_handle(workflow_id).fetch_history()
    sent, runs, span = 0, 0, 0.0
    first: float | None = None
    last = 0.0
    for event in history.events:
        at = event.event_time.ToDatetime(tzinfo=UTC).timestamp()
        if not since <= at <= until:
            continue
        attributes = event.signal_external_workflow_execution_initiated_event_attributes
        if (event.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
                and attributes.signal_name == Signal.MIGRATION_RECORD):
            sent += 1
            first, last = (at if first is None else first), at
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and first is not None:
            runs, span, first = runs + 1, span + last - first, None
    if first is not None:
        runs, span = runs + 1, span + last - first
    return sent, runs, span


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spread(values: list[float]) -> str:
    return f"p50 {statistics.median(values):.1f} s, max {max(values):.1f} s" if values else "n/a"


def real(args: argparse.Namespace) -> None:
    n, k = args.instances, args.migrations
    goals = Goals("bench.migration")
    work = Path(tempfile.mkdtemp(prefix="bench-migration-"))
    with contextlib.ExitStack() as cleanup:
        if args.keep:
            print(f"work directory (kept): {work}", flush=True)
        else:
            cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        began = time.monotonic()
        stack = cleanup.enter_context(local_stack(work, args.nodes, max(1, k)))
        core, custom = client.CoreV1Api(stack.api), client.CustomObjectsApi(stack.api)
        status = ObjectWatch(stack.api, GROUP, VERSION, NAMESPACE, "inferencereplicas", replica_view)
        cleanup.callback(status.stop)
        records = ObjectWatch(stack.api, GROUP, VERSION, NAMESPACE, "inferencereplicas", phases)
        cleanup.callback(records.stop)
        pods = ServingWatch(stack.api, NAMESPACE, f"{REPLICA_LABEL}={REPLICA}", instance_of, instance_serving)
        cleanup.callback(pods.stop)
        worker_pid = stack.worker.pid
        assert worker_pid is not None
        print(f"stack up in {time.monotonic() - began:.1f} s: {stack.nodes} kwok nodes; worker RSS "
              f"{proc_kb(worker_pid, 'VmRSS') / 1024:.0f} MB idle; operator ConfigMap lifecycle "
              f"maxInFlightMigrations = maxMigrationsPerWindow = {max(1, k)}", flush=True)

        started = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "inferenceservices", service_body(n))
        ready = status.first(REPLICA, replica_settled(n), started, timeout=120 + 3.0 * n)[0] - started
        uid = cast(dict[str, Any], custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "inferencereplicas",
                                                                       REPLICA))["metadata"]["uid"]
        replica_id = contract.replica_workflow_id(NAMESPACE, REPLICA, uid)
        after_create = history_now(stack.temporal, replica_id)
        print(f"(0) {n}-Instance replica Ready in {ready:.1f} s", flush=True)

        # (1) k surge migrations asked at once
        annotations = requests(live_pods(core), list(range(k)), stack.cluster.node_names)
        uuids = {key.removeprefix("ome.io/migration-request-v1-") for key in annotations}
        asked, asked_at, cpu_before = time.monotonic(), time.time(), cpu_seconds(worker_pid)
        custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "inferenceservices", SERVICE,
                                              {"metadata": {"annotations": annotations}})

        def all_ended(value: Phases | None) -> bool:
            ended = {u for u, phase in value or () if phase in TERMINAL}
            return uuids <= ended

        try:
            ended = records.first(REPLICA, all_ended, asked, timeout=300 + 20.0 * k)[0]
        except TimeoutError:
            print(f"worker log:\n{stack.worker.log_tail(80)}", flush=True)
            raise
        migrate_cpu, migrate_wall = cpu_seconds(worker_pid) - cpu_before, time.monotonic() - asked
        seen = first_in_phase(records, asked)
        done = {u: seen[(u, "Completed")] - asked for u in uuids if (u, "Completed") in seen}
        failed = sorted({u for u in uuids if (u, "Failed") in seen})
        floor, peak = pods.window(asked, ended)
        settled = status.wait(REPLICA, replica_settled(n), timeout=120 + 3.0 * n)
        after_migrations = history_now(stack.temporal, replica_id)
        signals = asyncio.run(record_signals(stack.temporal, replica_id, asked_at, time.time()))
        bridge_lag, request_histories = asyncio.run(request_workflows(stack.temporal, uuids, asked_at))
        print(f"(1) {k} migrations asked in one patch: {len(done)} Completed, {len(failed)} Failed, "
              f"last ended {ended - asked:.1f} s after the patch", flush=True)
        for phase in ("Accepted", "SurgePending", "SurgeReady", "Draining"):
            reached = [seen[(u, phase)] - asked for u in uuids if (u, phase) in seen]
            print(f"    patch -> first seen {phase}: {spread(reached)} ({len(reached)} seen)", flush=True)
        if failed:
            obj = cast(dict[str, Any], custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE,
                                                                           "inferencereplicas", REPLICA))
            for record in (obj.get("status") or {}).get("migrations") or []:
                if record.get("requestUUID") in failed[:5]:
                    print(f"    failed: {record}", flush=True)

        # (2) the same replacement by deleting pods: k Instances never migrated
        alive = live_pods(core)
        chosen = set(sorted(p.index for p in alive)[:k])
        victims = [p for p in alive if p.index in chosen]
        deleted, cpu_before = time.monotonic(), cpu_seconds(worker_pid)
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(lambda p: core.delete_namespaced_pod(p.name, NAMESPACE), victims))
        unsettled = status.first(REPLICA, lambda v: not replica_settled(n)(v), deleted, timeout=120)[0]
        resettled = status.first(REPLICA, replica_settled(n), unsettled, timeout=120 + 3.0 * n)[0] - deleted
        dipped = next((at for at, serving, _ in pods.log if at >= deleted and serving < n), None)
        back = pods.first(dipped, serving=n) if dipped is not None else None
        recreate_floor, recreate_peak = pods.window(deleted, deleted + resettled)
        recreate_cpu = cpu_seconds(worker_pid) - cpu_before
        hwm = proc_kb(worker_pid, "VmHWM")
        after_recreate = history_now(stack.temporal, replica_id)

    completed = list(done.values())
    wall = max(completed) if completed else 0.0
    serve_back = None if back is None else back - deleted
    print(f"\n== {n} Instances on {stack.nodes} kwok nodes: {k} surge migrations vs {len(victims)} pods deleted "
          f"and recreated by the engine ==", flush=True)
    print(f"replica created -> all Ready: {ready:.1f} s; before (1) status showed {settled.available} available",
          flush=True)
    print(f"(1) request -> Completed, per request: {spread(completed)}; patch -> last Completed {wall:.1f} s "
          f"(wall); {len(done)}/{k} Completed", flush=True)
    print(f"    fewest serving Instances at any pod event: {floor} (N = {n}); most pods alive: {peak}", flush=True)
    print(f"(2) {len(victims)} pods deleted -> serving {n} again: "
          f"{'n/a' if serve_back is None else f'{serve_back:.1f} s'}; -> status settled: {resettled:.1f} s",
          flush=True)
    print(f"    fewest serving Instances at any pod event: {recreate_floor} (N = {n}); most pods alive: "
          f"{recreate_peak}", flush=True)
    print(f"ratio, migration wall / delete-and-recreate to status settled: {ratio(wall, resettled)}; "
          f"to serving again: {ratio(wall, serve_back or 0)}", flush=True)
    print(f"worker peak RSS (VmHWM): {hwm / 1024:.0f} MB; worker CPU: {migrate_cpu:.1f} s during (1) "
          f"({migrate_cpu / max(migrate_wall, 1e-9):.0%} of a core), {recreate_cpu:.1f} s during (2)", flush=True)
    print(f"\nwhere (1)'s time went: patch -> MigrationWorkflow started (the bridge): {spread(bridge_lag)}", flush=True)
    print(f"  the {len(uuids)} MigrationWorkflows together: " + "\n".join(request_histories.lines(k, "request")),
          flush=True)
    print("  replica workflow, migrations: " + "\n".join(after_migrations.since(after_create).lines(k, "request")),
          flush=True)
    print(f"  replica workflow: {signals[0]} migration-record signals in {signals[1]} runs between activities, "
          f"spanning {signals[2]:.1f} s in all (the pass's commands wait behind them)", flush=True)
    print("  replica workflow, (2) recreate: " + "\n".join(after_recreate.since(after_migrations).lines(
        max(1, len(victims)), "pod")), flush=True)
    goals.check("requests Completed", len(done), ">=", k)
    goals.check("serving Instances during the surge migrations, fewest", floor, ">=", n)
    goals.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fake", action="store_true", help="the fake cluster and simulated time instead")
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--migrations", type=int, default=50)
    parser.add_argument("--nodes", type=int, default=None, help="kwok nodes (default 6; --fake: 10)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the processes' logs)")
    parser.add_argument("--ready-delay", type=float, default=5.0, help="--fake only")
    parser.add_argument("--endpoint-lag", type=float, default=1.0, help="--fake only")
    args = parser.parse_args()
    if args.fake:
        sys.exit(asyncio.run(migration_fake.run(args.instances, args.migrations, args.nodes or 10, args.ready_delay,
                                                args.endpoint_lag)))
    args.nodes = args.nodes or 6
    real(args)


if __name__ == "__main__":
    main()
