"""The product's processes started against a local stack, as the chart runs them: the worker and the CRD
bridge, each as its own identity (a ServiceAccount bound to the chart's roles), so a call the chart does not
allow fails where it is made. The tests and the benchmarks both start them from here."""

from __future__ import annotations

import sys
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.process import ManagedProcess, free_port
from devstack.services import OciRegistry, TemporalDevServer


def start_worker(cluster: LocalKubeCluster, temporal: TemporalDevServer, registry: OciRegistry, hub: HubServer,
                 task_queue: str, spool: Path, logs: Path, host_id: str,
                 extra_env: dict[str, str] | None = None, *, identities: Identities) -> ManagedProcess:
    """A worker process talking to the apiserver as `identities` (the chart's worker, its upload
    endpoint as the chart's uploads identity); returns once it says it polls its task queue."""
    del cluster  # the identities' kubeconfigs already name it; kept so callers say which stack they mean
    env = {**identities.worker_env(), **(extra_env or {}), "TEMPORAL_ADDRESS": temporal.address,
           "HF_ENDPOINT": hub.url, "SERVINGOPS_REGISTRY": registry.address, "SERVINGOPS_OLLAMA_REGISTRY": registry.url,
           "SERVINGOPS_SPOOL_DIR": str(spool), "SERVINGOPS_TASK_QUEUE": task_queue, "SERVINGOPS_HOST_ID": host_id,
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    worker = ManagedProcess(f"worker-{host_id}", [sys.executable, "-m", "servingops.workers.main"], logs, env=env,
                            cwd=REPO_ROOT)
    return start_worker_process(worker)


WORKER_READY_SECONDS = 180.0
"""How long a worker process may take to say it polls its queues. A deadline, not a speed claim: it
usually says so within 4 s, but on a 2-core CI machine with three stacks busy a restarted worker once
took more than 60 s (the old deadline), and the test failed for it."""

_READY_MARK = b"ready on"


def _log_size(worker: ManagedProcess) -> int:
    return worker.log_path.stat().st_size if worker.log_path.exists() else 0


def start_worker_process(worker: ManagedProcess) -> ManagedProcess:
    """Start (or start again) a worker process and return once it says it polls its task queues.
    Its log is appended to across restarts, so only what this start wrote counts."""
    offset = _log_size(worker)
    worker.start()
    worker.wait_ready(lambda: _READY_MARK in worker.log_path.read_bytes()[offset:], timeout=WORKER_READY_SECONDS)
    return worker


def restart_worker(worker: ManagedProcess) -> ManagedProcess:
    """Kill a worker (SIGKILL: a crash, nothing finishes or heartbeats) and start it again, ready."""
    worker.kill()
    return start_worker_process(worker)


@dataclass
class BridgeProcess:
    process: ManagedProcess
    identity: str
    metrics_port: int

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as response:
            return str(response.read().decode())

    def is_leader(self) -> bool:
        try:
            return "servingops_bridge_leader 1" in self.metrics().splitlines()  # a sample, not the HELP text
        except OSError:
            return False


@dataclass
class BridgeLauncher:
    """Starts CRD bridges as the chart's bridge ServiceAccount, each with a Lease in the identity's namespace."""

    identities: Identities
    """Whom the bridge talks to the apiserver as (Identities.admin only in benchmarks)."""
    temporal_address: str
    log_dir: Path
    started: list[BridgeProcess] = field(default_factory=list)

    def start(self, *, task_queue: str, lease_name: str | None = None, kinds: str | None = None,
              lease_seconds: int = 5, temporal_address: str | None = None, identity: str | None = None,
              wait_leader: bool = True) -> BridgeProcess:
        identity = identity or f"bridge-{uuid.uuid4().hex[:6]}"
        port = free_port()
        argv = [sys.executable, "-m", "servingops.crd_bridge.main",
                "--temporal-address", temporal_address or self.temporal_address,
                "--kubeconfig", str(self.identities.bridge), "--task-queue", task_queue,
                "--lease-namespace", self.identities.namespace,
                "--identity", identity, "--metrics-address", f"127.0.0.1:{port}",
                "--lease-name", lease_name or f"bridge-{uuid.uuid4().hex[:8]}",
                "--lease-seconds", str(lease_seconds)]
        if kinds:
            argv += ["--kinds", kinds]
        bridge = BridgeProcess(ManagedProcess(identity, argv, self.log_dir, cwd=REPO_ROOT).start(), identity, port)
        self.started.append(bridge)
        if wait_leader:
            bridge.process.wait_ready(bridge.is_leader, timeout=60)
        return bridge

    def stop_all(self) -> None:
        for bridge in self.started:
            bridge.process.stop()
