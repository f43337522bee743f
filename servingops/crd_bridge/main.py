"""The bridge process: `servingops bridge` (flags or env).

Starts following only once it holds the Lease (with --leader-elect), lists and watches every
routed kind, and dispatches until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes.client import ApiClient
from temporalio.client import Client

from servingops.crd_bridge.dispatcher import Dispatcher
from servingops.crd_bridge.leader import start_election
from servingops.crd_bridge.metrics import BridgeMetrics
from servingops.crd_bridge.pod_signals import PODS, SCALERS, WakeSignaller, temporal_sender
from servingops.crd_bridge.pod_watch import PodWatcher
from servingops.crd_bridge.queue import CoalescingQueue
from servingops.crd_bridge.routes import DEFAULT_KINDS, ROUTES
from servingops.crd_bridge.scaler_watch import ScalerWatcher
from servingops.crd_bridge.watcher import KindWatcher, Observed
from servingops.runtime.kube import load_api_client
from servingops.runtime.process import Flags, Process, run_async, temporal_settings
from servingops.runtime.telemetry import configure_tracing
from servingops.runtime.temporal import TemporalSettings, connect

log = logging.getLogger("servingops.bridge")


@dataclass(frozen=True)
class BridgeSettings:
    temporal: TemporalSettings
    kubeconfig: str | None
    kinds: list[str]
    """The kinds followed; InferenceReplica brings the pods of replicas with it, InferenceService the
    HorizontalPodAutoscalers of its components."""
    leader_elect: bool
    lease_name: str
    lease_namespace: str
    lease_seconds: int
    identity: str
    metrics_address: str
    """host:port of /metrics and /healthz."""
    queue_size: int
    concurrency: int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags = Flags(parser)
    flags.temporal()
    flags.kubeconfig()
    flags.value("--kinds", "SERVINGOPS_BRIDGE_KINDS", ",".join(DEFAULT_KINDS),
                help="comma-separated kinds to follow; InferenceReplica brings the pods of replicas with it "
                     f"(default: every kind whose workflow the worker serves: {', '.join(DEFAULT_KINDS)})")
    flags.switch("--leader-elect", "SERVINGOPS_LEADER_ELECT", True, help="follow only while holding the Lease")
    flags.value("--lease-name", "SERVINGOPS_LEASE_NAME", "servingops-bridge", help="the Lease's name")
    flags.value("--lease-namespace", "POD_NAMESPACE", "default", help="the Lease's namespace")
    flags.value("--lease-seconds", "SERVINGOPS_LEASE_SECONDS", 15, kind=int, help="how long a lease lasts")
    flags.value("--identity", "POD_NAME", f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}",
                help="this bridge's name in the Lease")
    flags.value("--metrics-address", "SERVINGOPS_BRIDGE_METRICS", "127.0.0.1:0",
                help="host:port of /metrics and /healthz")
    parser.add_argument("--queue-size", type=int, default=10_000, help="objects waiting at most (backpressure)")
    parser.add_argument("--concurrency", type=int, default=64, help="dispatches in flight at most")


def from_arguments(args: argparse.Namespace) -> BridgeSettings:
    return BridgeSettings(
        temporal=temporal_settings(args), kubeconfig=args.kubeconfig,
        kinds=[k.strip() for k in args.kinds.split(",") if k.strip()], leader_elect=args.leader_elect,
        lease_name=args.lease_name, lease_namespace=args.lease_namespace, lease_seconds=args.lease_seconds,
        identity=args.identity, metrics_address=args.metrics_address, queue_size=args.queue_size,
        concurrency=args.concurrency)


async def run(settings: BridgeSettings, stop: asyncio.Event) -> None:
    configure_tracing("servingops-bridge")
    loop = asyncio.get_running_loop()
    stopping = threading.Event()
    metrics = BridgeMetrics()
    host, port = settings.metrics_address.rsplit(":", 1)
    server = metrics.serve(host, int(port))
    log.info("metrics on http://%s:%d/metrics", *server.server_address[:2])

    api_client = load_api_client(settings.kubeconfig)
    # Lazy: the bridge starts (and queues) while Temporal is still down; dispatches retry.
    temporal = await connect(settings.temporal, lazy=True)

    leading = asyncio.Event()
    if settings.leader_elect:
        renew = max(2, settings.lease_seconds * 2 // 3)
        start_election(api_client, name=settings.lease_name, namespace=settings.lease_namespace,
                       identity=settings.identity, on_leading=lambda: _call_soon(loop, leading.set), stopping=stopping,
                       lease_seconds=settings.lease_seconds, renew_seconds=renew, retry_seconds=1)
        log.info("%s waiting for the lease %s/%s", settings.identity, settings.lease_namespace, settings.lease_name)
        waiter = asyncio.ensure_future(leading.wait())
        await asyncio.wait([waiter, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            stopping.set()
            return
    metrics.is_leader = 1

    queue: CoalescingQueue[Observed] = CoalescingQueue(loop, maxsize=settings.queue_size)
    kinds = settings.kinds

    def enqueue(observed: Observed) -> None:
        queue.put(observed.key, observed)  # blocks the watch thread while the queue is full

    watchers = [KindWatcher(api_client, ROUTES[kind], enqueue, stopping, on_event=_counter(metrics, kind))
                for kind in kinds]
    for watcher in watchers:
        watcher.start()
    dispatcher = Dispatcher(temporal, settings.temporal.task_queue, queue, api_client, metrics,
                            settings.concurrency)
    dispatching = asyncio.ensure_future(dispatcher.run())
    # Owns(&Pod{}): the replica engine learns of its pods' changes at once, in a lane of its own.
    lanes = []
    if "InferenceReplica" in kinds:
        lanes.append(asyncio.ensure_future(_follow_pods(api_client, temporal, metrics, stopping)))
    if "InferenceService" in kinds:
        # Owns(&HorizontalPodAutoscaler{}): the service mirrors its scalers' counts as the HPA controller
        # moves them, which no event of the InferenceService says (docs/autoscaling.md).
        lanes.append(asyncio.ensure_future(_follow_scalers(api_client, temporal, metrics, stopping)))
    log.info("bridge %s following %s", settings.identity, ", ".join(kinds))
    await stop.wait()
    stopping.set()
    dispatching.cancel()
    for lane in lanes:
        lane.cancel()
    server.shutdown()
    log.info("bridge stopped")


async def _follow_pods(api_client: ApiClient, temporal: Client, metrics: BridgeMetrics,
                       stopping: threading.Event) -> None:
    pods = WakeSignaller(temporal_sender(temporal, PODS), metrics, asyncio.get_running_loop(), lane=PODS)
    PodWatcher(api_client, pods.mark, stopping, on_event=_counter(metrics, "Pod")).start()
    await pods.run()


async def _follow_scalers(api_client: ApiClient, temporal: Client, metrics: BridgeMetrics,
                          stopping: threading.Event) -> None:
    scalers = WakeSignaller(temporal_sender(temporal, SCALERS), metrics, asyncio.get_running_loop(), lane=SCALERS)
    ScalerWatcher(api_client, scalers.mark, stopping, on_event=_counter(metrics, "HorizontalPodAutoscaler")).start()
    await scalers.run()


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
    loop.call_soon_threadsafe(callback)


def _counter(metrics: BridgeMetrics, kind: str) -> Callable[[str], None]:
    return lambda event_type: metrics.event(kind, event_type)


PROCESS = Process("bridge", __doc__ or "", add_arguments, from_arguments)


def main(argv: list[str] | None = None) -> None:
    run_async(PROCESS, argv, run)


if __name__ == "__main__":
    main()
