"""InferenceReplica benchmark: N single-pod Instances created and rolled SurgeThenDrain, beside a
StatefulSet of the same size and pod template rolled by the real kube-controller-manager, in the
same run on the same cluster.

    .venv/bin/python -m bench.replica_scale [--replicas 200] [--max-surge 25%] [--no-ordered-ready]
                                            [--sts-max-unavailable] [--keep]

(1) Create: an InferenceReplica of `--replicas` Instances (one "default" runner, one small container),
    timed from the create request until status says availableReplicas == N with every row Ready and
    no operation open (observedGeneration current). Beside it a StatefulSet of the same pod template,
    podManagementPolicy Parallel, until readyReplicas == N; then (unless --no-ordered-ready) another
    with OrderedReady, deleted again before the update.
(2) Update: the image changes. The replica rolls SurgeThenDrain with rollingUpdate.maxSurge
    `--max-surge`, timed until currentRevision == updateRevision (the new one) with every row Ready.
    The StatefulSet rolls RollingUpdate: rollingUpdate.maxUnavailable is requested at 25%, and what
    the apiserver kept of it is printed. The MaxUnavailableStatefulSet feature gate is Beta but off
    by default in Kubernetes 1.35 and the local cluster sets no feature gates, so by default the
    field is dropped and the roll is the default one pod at a time; --sts-max-unavailable starts
    kube-apiserver and kube-controller-manager with the gate on, and the roll goes 25% at a time.
    Timed until currentRevision == updateRevision with N pods updated and Ready. During each roll a
    pod watch counts, at every event, the serving units (ours: Instances with a pod ContainersReady
    and ome.io/serving True; the StatefulSet: Ready pods) and the pods alive; the fewest serving and
    the most alive are printed.
(3) The worker process's peak RSS (VmHWM) over the run, and the replica workflow's history (every
    continue-as-new run, followed back from the latest through continuedExecutionRunId;
    bench/workflow_history.py): events per Instance for the create and for the update, bytes per run,
    workflow-task time, and per activity type the calls, their latency and payload bytes.

Order: for each part, servingops first, then the StatefulSet (the worker idles while the StatefulSet
is timed). Both sides are timed through watches of the same kind (bench/watches.py). Nothing here is
asserted on time: exits 1 only when a stated rollout budget was broken (bench/goals.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from bench import workflow_history
from bench.goals import Goals
from bench.serving_watch import ServingWatch, conditions
from bench.stack import admin_identities, start_servers
from bench.watches import ObjectWatch
from devstack.process import ManagedProcess
from devstack.product import BridgeLauncher, start_worker
from servingops.api_models import contract
from servingops.api_models.ome.instance_columns import ENCODING_FIELD, json_size, status_rows
from servingops.api_models.ome.instance_keys import INSTANCE_LABEL, REPLICA_LABEL, SERVING_GATE
from servingops.api_models.ome.replica import InferenceReplicaStatus
from servingops.runtime.temporal import TemporalSettings, connect

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "inferencereplicas"
OLD_IMAGE, NEW_IMAGE = "vllm/vllm-openai:v0.9", "vllm/vllm-openai:v0.10"
STS_MAX_UNAVAILABLE = "25%"
NAME = "scale"
PODS_PER_NODE = 100
"""kwok nodes offer 110 pods (devstack/kube.py NODE_CAPACITY); leave slack for the scheduler's spread."""


# -- the two workloads ------------------------------------------------------------------------------------


def container(image: str) -> dict[str, Any]:
    """The one container of both sides' pods."""
    return {"name": "main", "image": image, "env": [{"name": "MODE", "value": "a"}],
            "ports": [{"containerPort": 8000}]}  # fmt: skip


def replica_body(replicas: int, image: str, max_surge: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceReplica", "metadata": {"name": NAME},
            "spec": {"component": "engine", "replicas": replicas, "runners": [runner(image)],
                     "lifecycle": {"updateStrategy": {"type": "SurgeThenDrain",
                                                      "rollingUpdate": {"maxSurge": max_surge}}}}}  # fmt: skip


def runner(image: str) -> dict[str, Any]:
    return {"name": "default", "size": 1, "template": {"metadata": {"labels": {"ome.io/runner": "default"}},
                                                       "spec": {"containers": [container(image)]}}}


def statefulset_body(name: str, replicas: int, image: str, policy: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": policy,
                     "selector": {"matchLabels": {"app": name}},
                     "updateStrategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": STS_MAX_UNAVAILABLE}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [container(image)]}}}}  # fmt: skip


def headless_service(name: str) -> client.V1Service:
    """What the StatefulSet's serviceName names (the replica makes its own headless Service)."""
    return client.V1Service(metadata=client.V1ObjectMeta(name=name), spec=client.V1ServiceSpec(
        cluster_ip="None", selector={"app": name}, ports=[client.V1ServicePort(port=8000)]))


# -- what the watches keep of each object --------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaView:
    generation: int
    observed: int | None
    available: int | None
    rows: int
    settled_rows: bool
    """Every row Ready with no operation open."""
    current: str | None
    update: str | None
    encoding: str | None
    status_bytes: int


def replica_view(obj: dict[str, Any]) -> ReplicaView:
    raw = obj.get("status") or {}
    status = InferenceReplicaStatus.model_validate(raw)
    rows = status_rows(status)
    return ReplicaView(
        generation=obj["metadata"]["generation"], observed=status.observed_generation,
        available=status.available_replicas, rows=len(rows),
        settled_rows=all(row.operation is None and row.phase == "Ready" for row in rows),
        current=status.current_revision, update=status.update_revision,
        encoding=raw.get(ENCODING_FIELD) or "DenseV1", status_bytes=json_size(raw))  # fmt: skip


def replica_settled(replicas: int, old_revision: str | None = None) -> Callable[[ReplicaView | None], bool]:
    """Settled at N; with `old_revision`, rolled off it: current == update != old."""
    def done(view: ReplicaView | None) -> bool:
        return (view is not None and view.observed == view.generation and view.available == replicas
                and view.rows == replicas and view.settled_rows
                and (old_revision is None or (view.current == view.update and view.update not in (None, old_revision))))
    return done


@dataclass(frozen=True)
class SetView:
    generation: int
    observed: int | None
    ready: int
    updated: int
    current: str | None
    update: str | None


def set_view(obj: dict[str, Any]) -> SetView:
    status = obj.get("status") or {}
    return SetView(obj["metadata"]["generation"], status.get("observedGeneration"), status.get("readyReplicas") or 0,
                   status.get("updatedReplicas") or 0, status.get("currentRevision"), status.get("updateRevision"))


def set_settled(replicas: int, old_revision: str | None = None) -> Callable[[SetView | None], bool]:
    def done(view: SetView | None) -> bool:
        return (view is not None and view.observed == view.generation and view.ready == replicas
                and (old_revision is None or (view.updated == replicas and view.current == view.update
                                              and view.update not in (None, old_revision))))
    return done


def instance_of(pod: dict[str, Any]) -> str:
    return str(pod["metadata"].get("labels", {}).get(INSTANCE_LABEL, pod["metadata"]["name"]))


def instance_serving(pod: dict[str, Any]) -> bool:
    seen = conditions(pod)
    return seen.get("ContainersReady") == "True" and seen.get(SERVING_GATE) == "True"


def pod_name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])


def pod_ready(pod: dict[str, Any]) -> bool:
    return conditions(pod).get("Ready") == "True"


def history_now(address: str, workflow_id: str) -> workflow_history.History:
    async def fetch() -> workflow_history.History:
        return await workflow_history.read(await connect(TemporalSettings(address=address)), workflow_id)
    return asyncio.run(fetch())


# -- the run ------------------------------------------------------------------------------------------------


def proc_kb(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {name}")


@dataclass
class Figures:
    seconds: float
    min_serving: int | None = None
    peak_pods: int | None = None
    pods_exist: float | None = None
    """Seconds until N pods existed (create)."""
    pods_serve: float | None = None
    """Seconds until N units served (create)."""


def milestones(figures: Figures, pods: ServingWatch, since: float, n: int) -> Figures:
    """Where the create's time went: N pods there, N units serving, then (figures.seconds) status."""
    exist, serve = pods.first(since, alive=n), pods.first(since, serving=n)
    figures.pods_exist = None if exist is None else exist - since
    figures.pods_serve = None if serve is None else serve - since
    return figures


def time_until(watch: ObjectWatch, name: str, done: Callable[[Any], bool], since: float, timeout: float,
               worker: ManagedProcess | None = None) -> float:  # fmt: skip
    try:
        return watch.first(name, done, since, timeout)[0] - since
    except TimeoutError as exc:
        tail = f"\nworker log:\n{worker.log_tail(60)}" if worker else ""
        raise TimeoutError(f"{exc}{tail}") from exc


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}" if theirs else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=200, help="Instances, and StatefulSet replicas")
    parser.add_argument("--max-surge", default="25%", help="the replica's rollingUpdate.maxSurge")
    parser.add_argument("--no-ordered-ready", action="store_true", help="skip the OrderedReady StatefulSet create")
    parser.add_argument("--sts-max-unavailable", action="store_true",
                        help="start the cluster with MaxUnavailableStatefulSet=true, so the StatefulSet rolls "
                             f"{STS_MAX_UNAVAILABLE.replace('%', '%%')} at a time")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the processes' logs)")
    args = parser.parse_args()
    n: int = args.replicas
    surge = math.ceil(n * float(args.max_surge[:-1]) / 100) if args.max_surge.endswith("%") else int(args.max_surge)
    goals = Goals("bench.replica_scale")
    create_timeout, roll_timeout = 120 + 3.0 * n, 180 + 6.0 * n

    work = Path(tempfile.mkdtemp(prefix="bench-replica-"))
    logs = work / "logs"
    with contextlib.ExitStack() as cleanup:
        if args.keep:
            print(f"work directory (kept): {work}", flush=True)
        else:
            cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        began = time.monotonic()
        # At most: ours with its surge and the Parallel StatefulSet, or ours, it and the OrderedReady one.
        peak = max(2 * n + surge, 3 * n) + 20
        nodes = max(3, -(-peak // PODS_PER_NODE))
        servers = start_servers(cleanup, work, nodes=nodes,
                                feature_gates="MaxUnavailableStatefulSet=true" if args.sts_max_unavailable else None)
        temporal_server, cluster, registry, hub, api = (servers.temporal, servers.cluster, servers.registry,
                                                        servers.hub, servers.api)
        core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
        ours_ns, sts_ns = "bench-replica", "bench-sts"
        for ns in (ours_ns, sts_ns):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        identities = admin_identities(cluster, api)
        task_queue = f"bench-{uuid.uuid4().hex[:6]}"
        worker = start_worker(cluster, temporal_server, registry, hub, task_queue, work / "spool", logs,
                              host_id="bench-replica", identities=identities)
        cleanup.callback(worker.stop)
        launcher = BridgeLauncher(identities, temporal_server.address, logs)
        cleanup.callback(launcher.stop_all)
        launcher.start(task_queue=task_queue, kinds="InferenceReplica")
        replicas = ObjectWatch(api, GROUP, VERSION, ours_ns, PLURAL, replica_view)
        cleanup.callback(replicas.stop)
        sets = ObjectWatch(api, "apps", "v1", sts_ns, "statefulsets", set_view)
        cleanup.callback(sets.stop)
        ours_pods = ServingWatch(api, ours_ns, f"{REPLICA_LABEL}={NAME}", instance_of, instance_serving)
        cleanup.callback(ours_pods.stop)
        sts_pods = ServingWatch(api, sts_ns, f"app={NAME}", pod_name, pod_ready)
        cleanup.callback(sts_pods.stop)
        assert worker.pid is not None
        idle_rss = proc_kb(worker.pid, "VmRSS")
        print(f"stack up in {time.monotonic() - began:.1f} s: Temporal dev server, local cluster ({nodes} kwok "
              f"nodes), worker (RSS {idle_rss / 1024:.0f} MB idle) and bridge processes; N = {n}, "
              f"maxSurge {args.max_surge} ({surge})", flush=True)

        # (1) create
        started = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, ours_ns, PLURAL, replica_body(n, OLD_IMAGE,
                                                                                             args.max_surge))
        ours_create = milestones(Figures(time_until(replicas, NAME, replica_settled(n), started, create_timeout,
                                                    worker)), ours_pods, started, n)
        created = replicas.latest(NAME)
        uid = cast(dict[str, Any], custom.get_namespaced_custom_object(GROUP, VERSION, ours_ns, PLURAL, NAME))[
            "metadata"]["uid"]
        workflow_id = contract.replica_workflow_id(ours_ns, NAME, uid)
        after_create = history_now(temporal_server.address, workflow_id)
        print(f"servingops: {n} Instances Ready in {ours_create.seconds:.1f} s", flush=True)

        core.create_namespaced_service(sts_ns, headless_service(NAME))
        started = time.monotonic()
        apps.create_namespaced_stateful_set(sts_ns, cast(Any, statefulset_body(NAME, n, OLD_IMAGE, "Parallel")))
        sts_create = milestones(Figures(time_until(sets, NAME, set_settled(n), started, create_timeout)), sts_pods,
                                started, n)
        print(f"StatefulSet (Parallel): {n} pods Ready in {sts_create.seconds:.1f} s", flush=True)
        stored = cast(dict[str, Any], apps.api_client.sanitize_for_serialization(
            apps.read_namespaced_stateful_set(NAME, sts_ns)))
        kept = ((stored["spec"].get("updateStrategy") or {}).get("rollingUpdate") or {}).get("maxUnavailable")
        print(f"StatefulSet rollingUpdate.maxUnavailable: asked {STS_MAX_UNAVAILABLE}, the apiserver kept {kept!r}"
              + ("" if kept else " (MaxUnavailableStatefulSet off: the roll goes one pod at a time)"), flush=True)

        ordered: Figures | None = None
        if not args.no_ordered_ready:
            ordered_name = f"{NAME}-ordered"
            core.create_namespaced_service(sts_ns, headless_service(ordered_name))
            started = time.monotonic()
            apps.create_namespaced_stateful_set(sts_ns, cast(Any, statefulset_body(ordered_name, n, OLD_IMAGE,
                                                                                    "OrderedReady")))
            ordered = Figures(time_until(sets, ordered_name, set_settled(n), started, create_timeout * 4))
            print(f"StatefulSet (OrderedReady): {n} pods Ready in {ordered.seconds:.1f} s", flush=True)
            apps.delete_namespaced_stateful_set(ordered_name, sts_ns, propagation_policy="Foreground")
            deadline = time.monotonic() + create_timeout
            while core.list_namespaced_pod(sts_ns, label_selector=f"app={ordered_name}", limit=1).items:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the pods of {ordered_name} are still there")
                time.sleep(1)

        # (2) update
        old = created.update if created else None
        started = time.monotonic()
        custom.patch_namespaced_custom_object(GROUP, VERSION, ours_ns, PLURAL, NAME,
                                              {"spec": {"runners": [runner(NEW_IMAGE)]}})
        ours_update = Figures(time_until(replicas, NAME, replica_settled(n, old), started, roll_timeout, worker))
        ours_update.min_serving, ours_update.peak_pods = ours_pods.window(started, started + ours_update.seconds)
        after_update = history_now(temporal_server.address, workflow_id)
        print(f"servingops: rolled SurgeThenDrain in {ours_update.seconds:.1f} s", flush=True)

        old_sts = (sets.latest(NAME) or SetView(0, None, 0, 0, None, None)).update
        started = time.monotonic()
        apps.patch_namespaced_stateful_set(NAME, sts_ns, {"spec": {"template": {"spec": {
            "containers": [container(NEW_IMAGE)]}}}})
        sts_update = Figures(time_until(sets, NAME, set_settled(n, old_sts), started, roll_timeout * 4))
        sts_update.min_serving, sts_update.peak_pods = sts_pods.window(started, started + sts_update.seconds)
        print(f"StatefulSet: rolled in {sts_update.seconds:.1f} s", flush=True)

        # (3) the worker and the history
        hwm, rss = proc_kb(worker.pid, "VmHWM"), proc_kb(worker.pid, "VmRSS")
        statuses = [view for _, view in replicas.changes.get(NAME, []) if view is not None]
        report(n, surge, args.max_surge, kept, ours_create, sts_create, ordered, ours_update, sts_update)
        print(f"\nworker: peak RSS (VmHWM) {hwm / 1024:.0f} MB, RSS now {rss / 1024:.0f} MB, idle at start "
              f"{idle_rss / 1024:.0f} MB", flush=True)
        print(f"replica status: largest {max(v.status_bytes for v in statuses)} bytes; encodings seen "
              f"{sorted({v.encoding or 'DenseV1' for v in statuses})}", flush=True)
        for label, part in (("create", after_create), ("update", after_update.since(after_create))):
            print(f"replica workflow history, {label}: " + "\n".join(part.lines(n, "Instance")), flush=True)

        goals.check("servingops serving Instances during the roll, fewest", ours_update.min_serving or 0, ">=", n)
        goals.check("servingops pods alive during the roll, most", ours_update.peak_pods or 0, "<=", n + surge)
    goals.finish()


def report(n: int, surge: int, max_surge: str, kept: object, ours_create: Figures, sts_create: Figures,
           ordered: Figures | None, ours_update: Figures, sts_update: Figures) -> None:
    sts_roll = f"RollingUpdate, maxUnavailable {kept}" if kept else "RollingUpdate, one pod at a time"

    def seconds(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}"

    rows = [
        ("create -> status: all Ready (s)", f"{ours_create.seconds:.1f}", f"{sts_create.seconds:.1f} (Parallel)",
         ratio(ours_create.seconds, sts_create.seconds)),
        ("  create -> N pods exist (s)", seconds(ours_create.pods_exist), seconds(sts_create.pods_exist),
         ratio(ours_create.pods_exist or 0, sts_create.pods_exist or 0)),
        ("  create -> N serving (s)", seconds(ours_create.pods_serve), seconds(sts_create.pods_serve),
         ratio(ours_create.pods_serve or 0, sts_create.pods_serve or 0)),
    ]
    if ordered is not None:
        rows.append(("  StatefulSet OrderedReady (s)", "", f"{ordered.seconds:.1f}",
                     ratio(ours_create.seconds, ordered.seconds)))
    rows += [
        ("update -> rolled, all Ready (s)", f"{ours_update.seconds:.1f}", f"{sts_update.seconds:.1f}",
         ratio(ours_update.seconds, sts_update.seconds)),
        ("  fewest serving during the roll", str(ours_update.min_serving), str(sts_update.min_serving), ""),
        ("  most pods alive during the roll", str(ours_update.peak_pods), str(sts_update.peak_pods), ""),
    ]
    print(f"\n== N = {n}: servingops InferenceReplica (SurgeThenDrain, maxSurge {max_surge} = {surge}) vs "
          f"StatefulSet ({sts_roll}) ==", flush=True)
    print(f"{'':34}{'servingops':>14}{'StatefulSet':>22}{'ratio':>8}", flush=True)
    for what, ours, theirs, r in rows:
        print(f"{what:34}{ours:>14}{theirs:>22}{r:>8}", flush=True)


if __name__ == "__main__":
    main()
