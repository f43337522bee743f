"""The node agent process: `servingops agent --node <name> --root <dir>` (flags or env).

Threads: one watch per model kind and one on the agent's Node feed the reconciler's queue; `workers`
threads reconcile keys; the main thread resyncs every `resync_seconds` (and verifies copies every
`verify_seconds`) until SIGTERM or SIGINT.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

from servingops.agents.agent import Agent, AgentConfig
from servingops.agents.registry import AgentRegistry
from servingops.agents.report import Reporter
from servingops.agents.settings import AgentSettings, add_arguments, from_arguments
from servingops.agents.watch import KindWatcher, NodeWatcher
from servingops.api_models.ome.model_keys import ModelKind
from servingops.runtime.kube import load_api_client
from servingops.runtime.process import Process, run_threaded

log = logging.getLogger("servingops.agent")

MiB = 1024 * 1024


def run(settings: AgentSettings, stop: threading.Event | None = None) -> Agent:
    """Run until `stop` is set; returns the agent (its stats) once every thread has been told to stop."""
    stop = stop or threading.Event()
    api_client = load_api_client(settings.kubeconfig)

    @contextlib.contextmanager
    def registry() -> Iterator[AgentRegistry]:
        client = AgentRegistry(settings.registry, insecure=settings.registry_insecure,
                               credentials=settings.registry_credentials())
        try:
            yield client
        finally:
            client.close()

    config = AgentConfig(node_name=settings.node, root=settings.root, state_dir=settings.state_dir,
                         registry=settings.registry, workers=settings.workers,
                         resync_seconds=settings.resync_seconds, verify_seconds=settings.verify_seconds,
                         bandwidth_bytes_per_second=settings.bandwidth_mb_per_second * MiB,
                         layers_in_flight=settings.layers_in_flight)
    agent = Agent(config, Reporter(api_client, settings.node, settings.namespace), registry, stop)
    watchers = [NodeWatcher(api_client, settings.node, agent.on_node, stop),
                *(KindWatcher(api_client, kind, agent.on_object, stop) for kind in ModelKind)]
    for watcher in watchers:
        watcher.start()
    # Decisions need the Node; until the first read of it the workers would remove every copy.
    while not stop.is_set() and not all(w.synced.is_set() for w in watchers):
        stop.wait(0.2)
    workers = [threading.Thread(target=agent.work, name=f"reconcile-{i}", daemon=True)
               for i in range(max(1, settings.workers))]
    for worker in workers:
        worker.start()
    log.info("agent for node %s ready: root %s, registry %s", settings.node, settings.root, settings.registry)
    last_verify = time.monotonic()
    first = True
    while not stop.wait(0 if first else settings.resync_seconds):
        verify = time.monotonic() - last_verify >= settings.verify_seconds
        if verify:
            last_verify = time.monotonic()
        try:
            agent.resync(verify=verify)
        except Exception:
            log.exception("resync failed")
        first = False
    for worker in workers:
        worker.join(timeout=10)
    api_client.close()  # type: ignore[no-untyped-call]
    log.info("agent stopped; %d bytes read from the registry", agent.stats.fetched_bytes)
    return agent


PROCESS = Process("agent", __doc__ or "", add_arguments, from_arguments)


def main(argv: list[str] | None = None) -> None:
    run_threaded(PROCESS, argv, run)


if __name__ == "__main__":
    main()
