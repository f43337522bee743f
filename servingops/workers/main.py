"""The worker process: `servingops worker` (flags or env).

One process polls two task queues with the same workflows and activities: the shared queue,
and its host's own queue (`<queue>@<host id>`), to which imports route the activities that need
this host's spool. It also serves the upload endpoint, so uploaded bytes land in that spool.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio.worker import Worker

from servingops.ingress.uploads import UploadServer
from servingops.runtime.kube import load_api_client
from servingops.runtime.metrics import install_worker_metrics, prometheus_runtime, worker_metrics
from servingops.runtime.process import Process, run_async
from servingops.runtime.telemetry import configure_tracing
from servingops.runtime.temporal import connect
from servingops.workers import registry
from servingops.workers.kubernetes_errors import KubernetesErrors
from servingops.workers.observability import MetricsInterceptor, poll_visibility
from servingops.workers.sandbox import workflow_runner
from servingops.workers.settings import WorkerSettings, add_arguments, from_arguments

log = logging.getLogger("servingops.worker")

# On SIGTERM running activities get this long to finish a chunk and heartbeat their resume point.
_GRACE = timedelta(seconds=20)


def _listen_address(listen: str) -> tuple[str, int]:
    """host:port; port 0 picks a free one now, because the public URL must name it up front."""
    host, port = listen.rsplit(":", 1)
    if int(port) == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return host, int(sock.getsockname()[1])
    return host, int(port)


async def run(settings: WorkerSettings, stop: asyncio.Event) -> None:
    configure_tracing("servingops-worker")
    runtime, metrics = None, worker_metrics()
    if settings.metrics_address:
        runtime, bound = prometheus_runtime(settings.metrics_address)
        metrics = install_worker_metrics(runtime.metric_meter)
        log.info("metrics on http://%s/metrics", bound)
    temporal = await connect(settings.temporal, runtime=runtime)
    api_client = load_api_client(settings.kubeconfig)
    host, port = _listen_address(settings.upload_listen)
    public_url = settings.upload_public_url or f"http://{host}:{port}"
    # The endpoint that answers requests from outside talks to the apiserver as its own identity.
    upload_api = load_api_client(settings.upload_kubeconfig) if settings.upload_kubeconfig else api_client
    uploads = UploadServer(settings.spool_dir, host, port, public_url, upload_api,
                           lambda: connect(settings.temporal, runtime=runtime),
                           controller_namespace=settings.controller_namespace,
                           worker_task_queue=settings.host_task_queue).start()
    try:
        with ThreadPoolExecutor(max_workers=settings.max_activity_threads) as executor:
            # Building the workers validates every workflow in the sandbox (a few seconds); logged so a slow
            # start says where its time went.
            building = time.monotonic()
            activities = registry.activities(settings, api_client, public_url)
            workers = [
                Worker(temporal, task_queue=queue, workflows=registry.workflows(), activities=activities,
                       workflow_runner=workflow_runner(),
                       activity_executor=executor, graceful_shutdown_timeout=_GRACE,
                       # Outermost first: metrics count the error types the classifier gives.
                       interceptors=[MetricsInterceptor(metrics), KubernetesErrors()])
                for queue in (settings.temporal.task_queue, settings.host_task_queue)
            ]
            log.info("workers built in %.1f s", time.monotonic() - building)
            async with workers[0], workers[1]:
                log.info("worker %s ready on %s, queues %s and %s; uploads at %s", settings.host_id,
                         settings.temporal.address, settings.temporal.task_queue, settings.host_task_queue,
                         public_url)
                gauges = (asyncio.create_task(poll_visibility(temporal, settings.temporal.task_queue, metrics,
                                                              settings.metrics_poll_seconds, stop))
                          if settings.metrics_address else None)
                await stop.wait()
                if gauges is not None:
                    await gauges
    finally:
        uploads.stop()
    log.info("worker stopped")


PROCESS = Process("worker", __doc__ or "", add_arguments, from_arguments)


def main(argv: list[str] | None = None) -> None:
    run_async(PROCESS, argv, run)


if __name__ == "__main__":
    main()
