"""The bridge process: `servingops bridge` (flags or env)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal

from kubernetes import client

from runtime.kube import load_api_client
from runtime.telemetry import configure_tracing
from runtime.temporal import TemporalSettings, connect

log = logging.getLogger("servingops.bridge")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = TemporalSettings.from_env()
    parser.add_argument("--temporal-address", default=defaults.address, help="env TEMPORAL_ADDRESS")
    parser.add_argument("--namespace", default=defaults.namespace, help="env TEMPORAL_NAMESPACE")
    parser.add_argument("--task-queue", default=defaults.task_queue, help="env SERVINGOPS_TASK_QUEUE")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="env KUBECONFIG")


async def run(args: argparse.Namespace) -> None:
    configure_tracing("servingops-bridge")
    settings = TemporalSettings(args.temporal_address, args.namespace, args.task_queue)
    await connect(settings)
    api_client = load_api_client(args.kubeconfig)
    version = client.VersionApi(api_client).get_code()
    log.info("bridge connected: temporal %s, kubernetes %s", settings.address, version.git_version)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="servingops bridge")
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
