"""The bridge process: `servingops bridge` (flags or env).

Starts following only once it holds the Lease (with --leader-elect), lists and watches every
routed kind, and dispatches until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable

from kubernetes.client import ApiClient
from temporalio.client import Client

from servingops.crd_bridge.dispatcher import Dispatcher
from servingops.crd_bridge.leader import start_election
from servingops.crd_bridge.metrics import BridgeMetrics
from servingops.crd_bridge.pod_signals import PodSignaller, temporal_sender
from servingops.crd_bridge.pod_watch import PodWatcher
from servingops.crd_bridge.queue import CoalescingQueue
from servingops.crd_bridge.routes import DEFAULT_KINDS, ROUTES
from servingops.crd_bridge.watcher import KindWatcher, Observed
from servingops.runtime.kube import load_api_client
from servingops.runtime.telemetry import configure_tracing
from servingops.runtime.temporal import TemporalSettings, connect

log = logging.getLogger("servingops.bridge")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = TemporalSettings.from_env()
    env = os.environ.get
    parser.add_argument("--temporal-address", default=defaults.address, help="env TEMPORAL_ADDRESS")
    parser.add_argument("--namespace", default=defaults.namespace, help="env TEMPORAL_NAMESPACE")
    parser.add_argument("--task-queue", default=defaults.task_queue, help="env SERVINGOPS_TASK_QUEUE")
    parser.add_argument("--kubeconfig", default=env("KUBECONFIG"), help="env KUBECONFIG")
    parser.add_argument("--kinds", default=env("SERVINGOPS_BRIDGE_KINDS", ",".join(DEFAULT_KINDS)),
                        help="comma-separated kinds to follow; InferenceReplica brings the pods of replicas "
                             "with it (default: every kind whose workflow the worker "
                             f"serves: {', '.join(DEFAULT_KINDS)})")
    parser.add_argument("--leader-elect", action=argparse.BooleanOptionalAction,
                        default=env("SERVINGOPS_LEADER_ELECT", "true") == "true")
    parser.add_argument("--lease-name", default=env("SERVINGOPS_LEASE_NAME", "servingops-bridge"))
    parser.add_argument("--lease-namespace", default=env("POD_NAMESPACE", "default"))
    parser.add_argument("--lease-seconds", type=int, default=int(env("SERVINGOPS_LEASE_SECONDS", "15")))
    parser.add_argument("--identity", default=env("POD_NAME", f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"))
    parser.add_argument("--metrics-address", default=env("SERVINGOPS_BRIDGE_METRICS", "127.0.0.1:0"),
                        help="host:port of /metrics and /healthz")
    parser.add_argument("--queue-size", type=int, default=10_000, help="objects waiting at most (backpressure)")
    parser.add_argument("--concurrency", type=int, default=64, help="dispatches in flight at most")


async def run(args: argparse.Namespace) -> None:
    configure_tracing("servingops-bridge")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stopping = threading.Event()
    metrics = BridgeMetrics()
    host, port = args.metrics_address.rsplit(":", 1)
    server = metrics.serve(host, int(port))
    log.info("metrics on http://%s:%d/metrics", *server.server_address[:2])

    api_client = load_api_client(args.kubeconfig)
    settings = TemporalSettings(args.temporal_address, args.namespace, args.task_queue)
    # Lazy: the bridge starts (and queues) while Temporal is still down; dispatches retry.
    temporal = await connect(settings, lazy=True)

    leading = asyncio.Event()
    if args.leader_elect:
        renew = max(2, args.lease_seconds * 2 // 3)
        start_election(api_client, name=args.lease_name, namespace=args.lease_namespace, identity=args.identity,
                       on_leading=lambda: _call_soon(loop, leading.set), stopping=stopping,
                       lease_seconds=args.lease_seconds, renew_seconds=renew, retry_seconds=1)
        log.info("%s waiting for the lease %s/%s", args.identity, args.lease_namespace, args.lease_name)
        waiter = asyncio.ensure_future(leading.wait())
        await asyncio.wait([waiter, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            stopping.set()
            return
    metrics.is_leader = 1

    queue: CoalescingQueue[Observed] = CoalescingQueue(loop, maxsize=args.queue_size)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]

    def enqueue(observed: Observed) -> None:
        queue.put(observed.key, observed)  # blocks the watch thread while the queue is full

    watchers = [KindWatcher(api_client, ROUTES[kind], enqueue, stopping, on_event=_counter(metrics, kind))
                for kind in kinds]
    for watcher in watchers:
        watcher.start()
    dispatcher = Dispatcher(temporal, settings.task_queue, queue, api_client, metrics, args.concurrency)
    dispatching = asyncio.ensure_future(dispatcher.run())
    # Owns(&Pod{}): the replica engine learns of its pods' changes at once, in a lane of its own.
    signalling = asyncio.ensure_future(_follow_pods(api_client, temporal, metrics, stopping)) \
        if "InferenceReplica" in kinds else None
    log.info("bridge %s following %s", args.identity, ", ".join(kinds))
    await stop.wait()
    stopping.set()
    dispatching.cancel()
    if signalling is not None:
        signalling.cancel()
    server.shutdown()
    log.info("bridge stopped")


async def _follow_pods(api_client: ApiClient, temporal: Client, metrics: BridgeMetrics,
                       stopping: threading.Event) -> None:
    pods = PodSignaller(temporal_sender(temporal), metrics, asyncio.get_running_loop())
    PodWatcher(api_client, pods.mark, stopping, on_event=_counter(metrics, "Pod")).start()
    await pods.run()


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
    loop.call_soon_threadsafe(callback)


def _counter(metrics: BridgeMetrics, kind: str) -> Callable[[str], None]:
    return lambda event_type: metrics.event(kind, event_type)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="servingops bridge")
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
