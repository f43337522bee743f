"""Rollout benchmark: promote latency beside a real peer, Argo Rollouts, in the same run on the same
cluster; then many concurrent canaries on one worker.

    .venv/bin/python -m bench.rollout_promote [--steps 20] [--concurrent 200] [--concurrent-promotes 2]

(a) Promote latency, servingops and Argo Rollouts (bench/argo_rollouts.py: built from its Go module on
    demand, its controller a process against the same apiserver), each with a canary of N manual-pause
    steps whose canary pods are at full size before the first traffic step, so only traffic moves and no
    pod start sits in the measured path. Step by step, alternating between the two, once status says
    the canary waits at that step's manual gate with its weight written: promote it, the way each is
    promoted (servingops: the `ome.io/rollout-promote` annotation set to the canary revision hash;
    Argo: what `kubectl argo rollouts promote` sends), and time, from just before the promote's first
    request, through watches of the same kind on both sides:
      - until the controller wrote the next step's traffic weights into its routing object (servingops:
        the HTTPRoute's backendRef weights; Argo: its canary Ingress's canary-weight), and
      - until status showed the next manual pause (or, after the last step, the rollout complete).
    Goals: servingops' p99 to the weight change < 1 s, and servingops / Argo Rollouts <= 1.0 at p50 and
    at p99, to the weights and to the status (issue #34).
(b) `--concurrent` InferenceServices, each canarying on one worker: all rolled to a new revision,
    each promoted `--concurrent-promotes` times. The worker's RSS (VmRSS, VmHWM), and the history
    length (event count, fetch_history) of every workflow run.

Everything runs on loopback: Temporal dev server, the local Kubernetes cluster (kwok pods, the
upstream Gateway API CRDs and the project's, Argo Rollouts' CRDs), a worker process, a bridge process
and the Argo Rollouts controller. Exits 1 when a goal is missed (bench/goals.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import tempfile
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, cast

from kubernetes import client

from bench import argo_rollouts, promote_timeline
from bench.goals import Goals
from bench.stack import admin_identities, start_servers, wait_for
from bench.watches import ObjectWatch
from devstack.process import ManagedProcess, free_port
from devstack.product import BridgeLauncher, start_worker
from servingops.api_models import contract
from servingops.runtime.temporal import TemporalSettings, connect

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "inferenceservices"
PROMOTE = "ome.io/rollout-promote"
OLD_IMAGE, NEW_IMAGE = "vllm/vllm-openai:v0.9", "vllm/vllm-openai:v0.10"
GOAL_P99_S = 1.0
PROMOTE_PATH_ACTIVITIES = ("serving.ensure_revision", "serving.revision_status", "serving.set_traffic",
                           "serving.scale_then_route", "kube.patch_status", "kube.remove_annotation")
MB = 2**20


def step_weights(steps: int) -> list[int]:
    """Canary traffic (percent) at each step, the same for both controllers."""
    return [max(1, (i + 1) * 90 // steps) for i in range(steps)]


def isvc_body(name: str, image: str, steps: int) -> dict[str, Any]:
    canary_steps = [{"capacity": "100%", "traffic": weight, "pause": {}} for weight in step_weights(steps)]
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": name},
        "spec": {
            "engine": {"minReplicas": 1, "runner": {"name": "engine", "image": image,
                                                     "ports": [{"containerPort": 8000}]}},
            "rollout": {"groups": [{"components": ["engine"], "canary": {"steps": canary_steps,
                                                                         "scaleDownDelaySeconds": 0}}]},
        },
    }


def route_weights(obj: dict[str, Any]) -> dict[str, int]:
    refs = ((obj.get("spec") or {}).get("rules") or [{}])[0].get("backendRefs") or []
    return {ref["name"]: ref.get("weight", 1) for ref in refs}


def engine_state(obj: dict[str, Any]) -> tuple[str | None, int | None, bool, bool]:
    """(rolloutPhase, canary step, a canary revision exists, promotedThrough set) of the engine."""
    engine = ((obj.get("status") or {}).get("components") or {}).get("engine") or {}
    canary = engine.get("canary") or {}
    return (engine.get("rolloutPhase"), canary.get("currentStep"), bool(canary.get("canaryRevisionHash")),
            bool(canary.get("promotedThrough")))  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


class Bench:
    """servingops' InferenceServices in one namespace: create, roll, promote (polling; part b)."""

    def __init__(self, api: client.ApiClient, namespace: str, worker: ManagedProcess) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.worker = worker

    def get(self, name: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL,
                                                                             name))  # fmt: skip

    def canary(self, name: str) -> dict[str, Any]:
        return dict((self.get(name).get("status") or {}).get("canary") or {})

    def annotate(self, name: str, value: str | None) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name,
                                                   {"metadata": {"annotations": {PROMOTE: value}}})

    def create(self, name: str, steps: int) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL,
                                                    isvc_body(name, OLD_IMAGE, steps))

    def roll(self, name: str) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name, {
            "spec": {"engine": {"runner": {"name": "engine", "image": NEW_IMAGE,
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

    def promote_once(self, name: str, step: int, timeout: float = 120) -> None:
        """Promote the canary paused at `step`, wait until it moved on, re-arm manual promotion."""
        canary = wait_for(f"{name} paused at step {step}", lambda: self.paused_at(name, step), timeout,
                          worker=self.worker)
        self.annotate(name, canary["canaryRevisionHash"])
        wait_for(f"{name} past step {step}", lambda: (
            (c := self.canary(name)).get("currentStep", 0) > step or c.get("promotedThrough")), timeout,
            worker=self.worker)
        self.annotate(name, None)


class Peer(Protocol):
    """One controller's canary, promoted step by step; every time is `time.monotonic()`."""

    label: str

    def wait_paused(self, step: int, timeout: float = ...) -> None: ...
    def routing(self) -> Any: ...
    def promote(self, step: int) -> float: ...
    def routing_changed(self, since: float, before: Any, timeout: float = ...) -> float: ...
    def status_past(self, step: int, since: float, timeout: float = ...) -> float: ...
    def after(self, step: int) -> None: ...


class ServingopsCanary:
    """The InferenceService canary, timed through watches like the peer's."""

    label = "servingops"

    def __init__(self, bench: Bench, routes: ObjectWatch, services: ObjectWatch, name: str,
                 weights: list[int]) -> None:  # fmt: skip
        self.bench, self.routes, self.services, self.name, self.weights = bench, routes, services, name, weights
        self.route = f"{name}-engine"
        self.revision = ""

    def wait_paused(self, step: int, timeout: float = 180) -> None:
        self.services.wait(self.name, lambda s: s is not None and s[0] == "Paused" and s[1] == step and s[2]
                           and not s[3], timeout)  # fmt: skip
        self.routes.wait(self.route, lambda w: w is not None and self.weights[step] in w.values(), timeout)
        canary = self.bench.paused_at(self.name, step)
        assert canary is not None, f"{self.name} left step {step} by itself"
        self.revision = canary["canaryRevisionHash"]

    def routing(self) -> Any:
        return self.routes.latest(self.route)

    def promote(self, step: int) -> float:
        started = time.monotonic()
        self.bench.annotate(self.name, self.revision)
        return started

    def routing_changed(self, since: float, before: Any, timeout: float = 120) -> float:
        return self.routes.first(self.route, lambda w: w != before, since, timeout)[0]

    def status_past(self, step: int, since: float, timeout: float = 120) -> float:
        if step + 1 < len(self.weights):
            return self.services.first(self.name, lambda s: s[0] == "Paused" and s[1] == step + 1 and s[2]
                                       and not s[3], since, timeout)[0]  # fmt: skip
        return self.services.first(self.name, lambda s: s[0] == "Stable", since, timeout)[0]

    def after(self, step: int) -> None:
        self.bench.annotate(self.name, None)  # re-arms manual promotion for the next step


def measure_promotes(peers: list[Peer], steps: int,
                     marks: dict[str, list[tuple[float, float, float]]] | None = None,
                     ) -> dict[str, tuple[list[float], list[float]]]:
    """Per peer, (promote -> routing weights written, promote -> status past the step), step 0 first.
    The peers take turns at every step, so a slow moment of the machine falls on both alike; what a
    peer does between steps (servingops removes its promote annotation) waits until both were timed.
    `marks` collects, per peer, (promote sent, routing changed, status past) as time.monotonic() for
    the timeline."""
    results: dict[str, tuple[list[float], list[float]]] = {peer.label: ([], []) for peer in peers}
    for step in range(steps):
        for peer in peers:
            peer.wait_paused(step)
            before = peer.routing()
            started = peer.promote(step)
            routed = peer.routing_changed(started, before)
            past = peer.status_past(step, started)
            results[peer.label][0].append(routed - started)
            if marks is not None:
                marks.setdefault(peer.label, []).append((started, routed, past))
            results[peer.label][1].append(past - started)
        for peer in peers:
            peer.after(step)
    return results


def summary(values: list[float]) -> str:
    return (f"p50 {statistics.median(values) * 1000:7.0f} ms, p99 {percentile(values, 99) * 1000:7.0f} ms, "
            f"max {max(values) * 1000:7.0f} ms")  # fmt: skip


def report_promotes(results: dict[str, tuple[list[float], list[float]]], ours: str, peer: str,
                    goals: Goals) -> float:
    """Print both peers' figures and the ratios, each ratio a goal (<= 1.0: issue #34's promote goal);
    returns servingops' p99 to the weight change (s)."""
    titles = ("promote -> next step's weights written (servingops: HTTPRoute backendRef weights; "
              "Argo Rollouts: canary Ingress canary-weight)",
              "promote -> status shows the next manual pause (after the last step: rollout complete)")  # fmt: skip
    width = max(len(ours), len(peer))
    for index, title in enumerate(titles):
        print(f"{title}, {len(results[ours][index])} promotes each:", flush=True)
        for label in (ours, peer):
            print(f"  {label:<{width}}  {summary(results[label][index])}", flush=True)
        mine, theirs = results[ours][index], results[peer][index]
        p50 = statistics.median(mine) / statistics.median(theirs)
        p99 = percentile(mine, 99) / percentile(theirs, 99)
        print(f"  ratio {ours} / {peer}: p50 {p50:.2f}, p99 {p99:.2f}", flush=True)
        to = ("weights", "status")[index]
        goals.check(f"promote -> {to}, {ours} / {peer}, p50", p50, "<=", 1.0)
        goals.check(f"promote -> {to}, {ours} / {peer}, p99", p99, "<=", 1.0)
    for index, what in enumerate(("weights", "status")):
        for label in (ours, peer):
            print(f"per promote, {label} (ms to {what}, step 0 first): "
                  + " ".join(f"{x * 1000:.0f}" for x in results[label][index]), flush=True)
    return percentile(results[ours][0], 99)


def proc_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


async def timeline(address: str, workflows: dict[str, str], promotes: list[promote_timeline.Promote]) -> None:
    temporal = await connect(TemporalSettings(address=address))
    promote_timeline.print_timeline(promotes, await promote_timeline.history_stamps(temporal, workflows))


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
    parser.add_argument("--concurrent-promotes", type=int, default=2,
                        help="promotes each concurrent canary takes before it is left paused; fewer than --steps")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the processes' logs)")
    args = parser.parse_args()
    if args.concurrent and not 0 < args.concurrent_promotes < min(20, args.steps):
        # The last step's promote completes the canary, so "all paused at step N" would never hold.
        parser.error("--concurrent-promotes must be at least 1 and fewer than --steps")
    steps = max(1, min(20, args.steps))
    weights = step_weights(steps)
    goals = Goals("bench.rollout_promote")

    began = time.monotonic()
    argo_binary, argo_crds = argo_rollouts.ensure_built()
    print(f"Argo Rollouts {argo_rollouts.pinned_version()}: {argo_binary} (ready in {time.monotonic() - began:.0f} s)",
          flush=True)

    work = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    logs = work / "logs"
    with contextlib.ExitStack() as cleanup:
        if args.keep:
            print(f"work directory (kept): {work}", flush=True)
        else:
            cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        began = time.monotonic()
        # kwok nodes hold 110 pods each: room for two revisions of every concurrent canary.
        servers = start_servers(cleanup, work, nodes=max(3, -(-(2 * args.concurrent + 40) // 100)),
                                extra_crds=(argo_crds,))
        temporal_server, cluster, registry, hub, api = (servers.temporal, servers.cluster, servers.registry,
                                                        servers.hub, servers.api)
        task_queue = f"bench-{uuid.uuid4().hex[:6]}"
        namespace, argo_namespace = "bench", "bench-argo"
        for ns in (namespace, argo_namespace):
            client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        identities = admin_identities(cluster, api)
        worker_metrics = free_port()
        worker = start_worker(cluster, temporal_server, registry, hub, task_queue, work / "spool", logs,
                              host_id="bench-rollout", identities=identities,
                              extra_env={"SERVINGOPS_WORKER_METRICS": f"127.0.0.1:{worker_metrics}"})
        cleanup.callback(worker.stop)
        launcher = BridgeLauncher(identities, temporal_server.address, logs)
        cleanup.callback(launcher.stop_all)
        launcher.start(task_queue=task_queue, kinds="InferenceService")
        argo = argo_rollouts.start_controller(cluster, argo_binary, logs)
        cleanup.callback(argo.stop)
        routes = ObjectWatch(api, "gateway.networking.k8s.io", "v1", namespace, "httproutes", route_weights)
        cleanup.callback(routes.stop)
        services = ObjectWatch(api, GROUP, VERSION, namespace, PLURAL, engine_state)
        cleanup.callback(services.stop)
        bench = Bench(api, namespace, worker)
        print(f"stack up in {time.monotonic() - began:.1f} s (Temporal dev server, local cluster with kwok, "
              f"worker and bridge processes, Argo Rollouts controller)", flush=True)

        # (a) promote latency, servingops and Argo Rollouts side by side
        name = "promote"
        ours = ServingopsCanary(bench, routes, services, name, weights)
        peer = argo_rollouts.ArgoCanary(api, argo_namespace, name, weights)
        cleanup.callback(peer.stop)
        bench.create(name, steps)
        peer.create(OLD_IMAGE)
        routes.wait(ours.route, lambda w: w is not None and list(w.values()) == [100], 180)
        peer.wait_stable()
        bench.roll(name)
        peer.roll(NEW_IMAGE)
        marks: dict[str, list[tuple[float, float, float]]] = {}
        results = measure_promotes([ours, peer], steps, marks)
        services.wait(name, lambda s: s is not None and s[0] == "Stable", 120)
        p99 = report_promotes(results, ours.label, peer.label, goals)
        # Where servingops' time went: the histories' server stamps between each promote and its route.
        wall = time.time() - time.monotonic()
        uid = bench.get(name)["metadata"]["uid"]
        workflows = {contract.inference_service_workflow_id(namespace, name, uid): "isvc",
                     contract.rollout_workflow_id(namespace, name, uid, ""): "rollout"}
        asyncio.run(timeline(temporal_server.address, workflows, [
            promote_timeline.Promote(sent + wall, routed + wall, past + wall)
            for sent, routed, past in marks[ours.label]]))
        with urllib.request.urlopen(f"http://127.0.0.1:{worker_metrics}/metrics", timeout=5) as response:
            promote_timeline.print_worker_latencies(response.read().decode(), PROMOTE_PATH_ACTIVITIES)
        goals.check("servingops promote -> HTTPRoute weights, p99", p99 * 1000, "<", GOAL_P99_S * 1000, "ms")

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
                list((routes.latest(f"{n}-engine") or {}).values()) == [100] for n in names), 900, interval=1,
                worker=worker)
            print(f"{count} InferenceServices serving in {time.monotonic() - started:.1f} s", flush=True)
            for n in names:
                bench.roll(n)
            rolled = time.monotonic()
            with ThreadPoolExecutor(max_workers=16) as pool:
                for step in range(args.concurrent_promotes):
                    list(pool.map(lambda n, s=step: bench.promote_once(n, s, timeout=900), names))
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
    goals.finish()


if __name__ == "__main__":
    main()
