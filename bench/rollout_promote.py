"""Rollout benchmark: promote-annotation to HTTPRoute-weight-change latency, and many concurrent
canaries on one worker.

    .venv/bin/python -m bench.rollout_promote [--steps 20] [--concurrent 200] [--concurrent-promotes 2]

(a) One InferenceService with a canary of N manual-pause steps (every step at capacity 100%, so
    only traffic moves and no pod start sits in the measured path). For each step, once status
    says the canary is Paused at that step's manual gate: set
    `ome.io/rollout-promote` to the canary revision hash, and time until a watch on the HTTPRoute
    sees its backendRef weights change; then remove the annotation (re-arming manual promotion).
    p50 / p99 beside the baseline: the 10-30 s requeue period of reconcile-loop controllers.
(b) `--concurrent` InferenceServices, each canarying on one worker: all rolled to a new revision,
    each promoted `--concurrent-promotes` times. The worker's RSS (VmRSS, VmHWM), and the history
    length (event count, fetch_history) of every workflow run.

Everything runs on loopback: Temporal dev server, the local Kubernetes cluster (kwok pods, the
upstream Gateway API CRDs and the project's), a worker process and a bridge process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from devstack.hub_server import HubServer
from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from servingops.runtime.temporal import TemporalSettings, connect
from tests.fixtures.bridge import BridgeLauncher
from tests.test_model_import_e2e import start_worker

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "inferenceservices"
PROMOTE = "ome.io/rollout-promote"
BASELINE_REQUEUE_S = (10.0, 30.0)
MB = 2**20


def isvc_body(name: str, image: str, steps: int) -> dict[str, Any]:
    canary_steps = [{"capacity": "100%", "traffic": max(1, (i + 1) * 90 // steps), "pause": {}}
                    for i in range(steps)]
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": name},
        "spec": {
            "engine": {"minReplicas": 1, "runner": {"name": "engine", "image": image,
                                                     "ports": [{"containerPort": 8000}]}},
            "rollout": {"groups": [{"components": ["engine"], "canary": {"steps": canary_steps,
                                                                         "scaleDownDelaySeconds": 0}}]},
        },
    }


class RouteWatch:
    """A watch on the namespace's HTTPRoutes: every change of backendRef weights, timestamped."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.changes: dict[str, list[tuple[float, dict[str, int]]]] = {}
        self.lock = threading.Condition()
        self._stop = False
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        version = ""
        while not self._stop:
            try:
                for event in self._watch.stream(self.custom.list_namespaced_custom_object,
                                                "gateway.networking.k8s.io", "v1", self.namespace, "httproutes",
                                                resource_version=version, timeout_seconds=30):
                    now = time.monotonic()
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    refs = ((obj.get("spec") or {}).get("rules") or [{}])[0].get("backendRefs") or []
                    weights = {ref["name"]: ref.get("weight", 1) for ref in refs}
                    name = obj["metadata"]["name"]
                    with self.lock:
                        log = self.changes.setdefault(name, [])
                        if not log or log[-1][1] != weights:
                            log.append((now, weights))
                            self.lock.notify_all()
            except Exception:
                if self._stop:
                    return
                version = ""
                time.sleep(0.2)

    def latest(self, route: str) -> dict[str, int]:
        with self.lock:
            log = self.changes.get(route) or []
            return dict(log[-1][1]) if log else {}

    def change_after(self, route: str, since: float, before: dict[str, int], timeout: float) -> float:
        """When the route's weights first differed from `before` at or after `since`."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                for at, weights in self.changes.get(route) or []:
                    if at >= since and weights != before:
                        return at
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{route}: no weight change within {timeout} s")
                self.lock.wait(remaining)

    def stop(self) -> None:
        self._stop = True
        self._watch.stop()


def wait_for(what: str, probe: Callable[[], Any], timeout: float, interval: float = 0.05,
             worker: ManagedProcess | None = None) -> Any:
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    tail = f"\nworker log:\n{worker.log_tail(40)}" if worker else ""
    raise TimeoutError(f"{what} never happened (last: {value}){tail}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


class Bench:
    def __init__(self, api: client.ApiClient, namespace: str, worker: ManagedProcess) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.worker = worker

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name))

    def canary(self, name: str) -> dict[str, Any]:
        return dict((self.get(name).get("status") or {}).get("canary") or {})

    def annotate(self, name: str, value: str | None) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name,
                                                   {"metadata": {"annotations": {PROMOTE: value}}})

    def create(self, name: str, steps: int) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL,
                                                    isvc_body(name, "vllm/vllm-openai:v0.9", steps))

    def roll(self, name: str) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name, {
            "spec": {"engine": {"runner": {"name": "engine", "image": "vllm/vllm-openai:v0.10",
                                           "ports": [{"containerPort": 8000}]}}}})

    def paused_at(self, name: str, step: int) -> dict[str, Any] | None:
        """The canary when it waits at `step`'s manual gate (phase Paused): capacity is met and the
        promote is all it waits for, so the measured latency is the promote's alone. A promote
        sent earlier, during the capacity wait, would also time the pods' start."""
        engine = ((self.get(name).get("status") or {}).get("components") or {}).get("engine") or {}
        canary = engine.get("canary") or {}
        if engine.get("rolloutPhase") == "Paused" and canary.get("currentStep") == step and canary.get(
                "canaryRevisionHash") and not canary.get("promotedThrough"):
            return dict(canary)
        return None

    def promote_once(self, name: str, step: int, routes: RouteWatch | None, timeout: float = 120) -> float | None:
        """Promote the canary paused at `step`; the latency to the route change when watched."""
        canary = wait_for(f"{name} paused at step {step}", lambda: self.paused_at(name, step), timeout,
                          worker=self.worker)
        route = f"{name}-engine"
        before = routes.latest(route) if routes else {}
        started = time.monotonic()
        self.annotate(name, canary["canaryRevisionHash"])
        latency = None
        if routes is not None:
            latency = routes.change_after(route, started, before, timeout) - started
        wait_for(f"{name} past step {step}", lambda: (
            (c := self.canary(name)).get("currentStep", 0) > step or c.get("promotedThrough")), timeout,
            worker=self.worker)
        self.annotate(name, None)
        return latency


def proc_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


async def history_lengths(address: str) -> dict[str, list[int]]:
    temporal = await connect(TemporalSettings(address=address))
    lengths: dict[str, list[int]] = {}
    async for execution in temporal.list_workflows():
        handle = temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        history = await handle.fetch_history()
        lengths.setdefault(execution.workflow_type, []).append(len(history.events))
    return lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="manual-pause canary steps (promotes), at most 20")
    parser.add_argument("--concurrent", type=int, default=200, help="concurrent canaries (0 skips part b)")
    parser.add_argument("--concurrent-promotes", type=int, default=2)
    args = parser.parse_args()
    steps = max(1, min(20, args.steps))

    work = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    logs = work / "logs"
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        began = time.monotonic()
        temporal_server = TemporalDevServer(work / "temporal", logs, headless=True).start()
        cleanup.callback(temporal_server.stop)
        # kwok nodes hold 110 pods each: room for two revisions of every concurrent canary.
        nodes = max(3, -(-(2 * args.concurrent + 40) // 100))
        cluster = LocalKubeCluster(work / "kube", logs, nodes=nodes, install_upstream_crds=True).start()
        cleanup.callback(cluster.stop)
        cluster.apply_crds(sorted((REPO_ROOT / "deploy" / "crds").glob("*.yaml")))
        registry = OciRegistry(work / "registry", logs).start()
        cleanup.callback(registry.stop)
        hub = HubServer(work / "hub").start()
        cleanup.callback(hub.stop)
        api = cluster.api_client()
        cleanup.callback(api.close)
        task_queue = f"bench-{uuid.uuid4().hex[:6]}"
        namespace = "bench"
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        worker = start_worker(cluster, temporal_server, registry, hub, task_queue, work / "spool", logs,
                              host_id="bench-rollout")
        cleanup.callback(worker.stop)
        launcher = BridgeLauncher(cluster.kubeconfig_path, temporal_server.address, logs)
        cleanup.callback(launcher.stop_all)
        launcher.start(task_queue=task_queue, kinds="InferenceService")
        routes = RouteWatch(api, namespace)
        cleanup.callback(routes.stop)
        bench = Bench(api, namespace, worker)
        print(f"stack up in {time.monotonic() - began:.1f} s (Temporal dev server, local cluster with kwok, "
              f"worker and bridge processes)", flush=True)

        # (a) promote latency
        name = "promote"
        bench.create(name, steps)
        wait_for("the first revision serving 100%", lambda: list(routes.latest(f"{name}-engine").values()) == [100],
                 180, worker=worker)
        bench.roll(name)
        latencies: list[float] = []
        for step in range(steps):
            latency = bench.promote_once(name, step, routes)
            assert latency is not None
            latencies.append(latency)
        wait_for("the canary completed", lambda: (bench.get(name).get("status") or {}).get("components", {})
                 .get("engine", {}).get("rolloutPhase") == "Stable", 120, worker=worker)
        p50, p99 = statistics.median(latencies), percentile(latencies, 99)
        print(f"promote annotation -> HTTPRoute weight change, {len(latencies)} promotes: "
              f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms "
              f"(goal p99 < 1 s)", flush=True)
        print("per promote (ms, step 0 first): " + " ".join(f"{x * 1000:.0f}" for x in latencies), flush=True)
        low, high = BASELINE_REQUEUE_S
        print(f"baseline: reconcile-loop requeue period {low:.0f}-{high:.0f} s (mean wait half of it); "
              f"p50 is {p50 / low:.3f} x 10 s, p99 is {p99 / low:.3f} x 10 s "
              f"({low / p99:.0f}x faster at p99)", flush=True)

        # (b) concurrent canaries on one worker
        if args.concurrent > 0:
            assert worker.pid is not None
            idle_rss = proc_kb(worker.pid, "VmRSS")
            count = args.concurrent
            names = [f"c{i:03d}" for i in range(count)]
            started = time.monotonic()
            for n in names:
                bench.create(n, steps)
            wait_for(f"{count} first revisions at 100%", lambda: all(
                list(routes.latest(f"{n}-engine").values()) == [100] for n in names), 900, interval=1,
                worker=worker)
            print(f"{count} InferenceServices serving in {time.monotonic() - started:.1f} s", flush=True)
            for n in names:
                bench.roll(n)
            rolled = time.monotonic()
            with ThreadPoolExecutor(max_workers=16) as pool:
                for step in range(args.concurrent_promotes):
                    list(pool.map(lambda n, s=step: bench.promote_once(n, s, None, timeout=900), names))
            print(f"{count} canaries rolled and promoted {args.concurrent_promotes} step(s) each in "
                  f"{time.monotonic() - rolled:.1f} s; all now paused at step {args.concurrent_promotes}",
                  flush=True)
            wait_for("all paused", lambda: all(bench.paused_at(n, args.concurrent_promotes) for n in names), 300,
                     interval=1, worker=worker)
            rss, hwm = proc_kb(worker.pid, "VmRSS"), proc_kb(worker.pid, "VmHWM")
            print(f"worker with {count} canaries in flight: RSS {rss / 1024:.0f} MB (idle {idle_rss / 1024:.0f} MB, "
                  f"{(rss - idle_rss) / count:.0f} kB per canary), peak RSS {hwm / 1024:.0f} MB", flush=True)
            lengths = asyncio.run(history_lengths(temporal_server.address))
            for workflow_type, values in sorted(lengths.items()):
                print(f"history length per run, {workflow_type}: {len(values)} runs, mean "
                      f"{statistics.mean(values):.0f}, p50 {statistics.median(values):.0f}, max {max(values)} events",
                      flush=True)


if __name__ == "__main__":
    main()
