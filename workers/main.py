"""The worker process: `servingops worker` (flags or env), one task queue."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from concurrent.futures import ThreadPoolExecutor

from temporalio.worker import Worker

from runtime.kube import load_api_client
from runtime.telemetry import configure_tracing
from runtime.temporal import TemporalSettings, connect
from workers import registry

log = logging.getLogger("servingops.worker")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = TemporalSettings.from_env()
    parser.add_argument("--temporal-address", default=defaults.address, help="env TEMPORAL_ADDRESS")
    parser.add_argument("--namespace", default=defaults.namespace, help="env TEMPORAL_NAMESPACE")
    parser.add_argument("--task-queue", default=defaults.task_queue, help="env SERVINGOPS_TASK_QUEUE")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="env KUBECONFIG")
    parser.add_argument("--max-activity-threads", type=int, default=32,
                        help="threads for the blocking (Kubernetes, registry, Hub) activities")


async def run(args: argparse.Namespace) -> None:
    configure_tracing("servingops-worker")
    settings = TemporalSettings(args.temporal_address, args.namespace, args.task_queue)
    temporal = await connect(settings)
    api_client = load_api_client(args.kubeconfig)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with ThreadPoolExecutor(max_workers=args.max_activity_threads) as executor:
        worker = Worker(
            temporal,
            task_queue=settings.task_queue,
            workflows=registry.workflows(),
            activities=registry.activities(api_client),
            activity_executor=executor,
        )
        async with worker:
            log.info("worker ready on %s queue %s", settings.address, settings.task_queue)
            await stop.wait()
    log.info("worker stopped")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="servingops worker")
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
