"""What the benchmarks share about the local stack they start."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack import identities
from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.pod_runtime import PodRuntimeProcess
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer


@dataclass(frozen=True)
class Servers:
    temporal: TemporalDevServer
    cluster: LocalKubeCluster
    registry: OciRegistry
    hub: HubServer
    api: client.ApiClient
    runtime: PodRuntimeProcess | None = None
    """The pod runtime of an answering cluster (start_servers(answering=True)), else None."""


def start_servers(cleanup: contextlib.ExitStack, work: Path, *, nodes: int, feature_gates: str | None = None,
                  extra_crds: tuple[Path, ...] = (), answering: bool = False) -> Servers:
    """The real servers a benchmark's worker and bridge talk to: the Temporal dev server, the local
    cluster (`nodes` kwok nodes, upstream CRDs, ours and `extra_crds` applied), the registry and the
    Hub stand-in; each stopped by `cleanup`, logs under `work/logs`. answering: the InferenceService
    pods answer (devstack/pod_runtime.py, started first: kwok hands pod addresses out of its range)."""
    logs = work / "logs"
    temporal = TemporalDevServer(work / "temporal", logs, headless=True).start()
    cleanup.callback(temporal.stop)
    cluster = LocalKubeCluster(work / "kube", logs, nodes=nodes, install_upstream_crds=True,
                               feature_gates=feature_gates, answering=answering)
    runtime = None
    if answering:
        runtime = PodRuntimeProcess(cluster.kubeconfig_path, work / "runtime", logs).start()
        cleanup.callback(runtime.stop)  # after the cluster's stop (callbacks run last first)
        cluster.pod_cidr = runtime.pod_cidr
    cluster.start()
    cleanup.callback(cluster.stop)
    cluster.apply_crds(sorted((REPO_ROOT / "deploy" / "crds").glob("*.yaml")))
    if extra_crds:
        cluster.apply_crds(list(extra_crds))
    registry = OciRegistry(work / "registry", logs).start()
    cleanup.callback(registry.stop)
    hub = HubServer(work / "hub").start()
    cleanup.callback(hub.stop)
    api = cluster.api_client()
    cleanup.callback(api.close)
    return Servers(temporal=temporal, cluster=cluster, registry=registry, hub=hub, api=api, runtime=runtime)


def admin_identities(cluster: LocalKubeCluster, api: client.ApiClient) -> Identities:
    """Every process as the cluster admin (benchmarks measure; the tests check the chart's roles), with
    the controller namespace (the bridge's Lease lives there) created."""
    identities = Identities.admin(cluster.kubeconfig_path)
    try:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=identities.namespace)))
    except ApiException as exc:
        if exc.status != 409:
            raise
    return identities


def chart_identities(cluster: LocalKubeCluster, directory: Path, operator_config: dict[str, Any]) -> Identities:
    """The chart installed as an operator installs it, its operator ConfigMap holding `operator_config`'s
    blocks, and a token per ServiceAccount: for a benchmark whose processes run as the chart's identities,
    as in the tests and `./dev up`, because the calls they make are what is measured."""
    identities.install(cluster, identities.local_values(operatorConfig=operator_config))
    return identities.issue(cluster, directory)


def wait_for(what: str, probe: Callable[[], Any], timeout: float, interval: float = 0.05,
             worker: ManagedProcess | None = None) -> Any:
    """`probe()` once it is truthy, polled every `interval` s; a TimeoutError saying `what` (and the worker's
    log tail, when given) past `timeout` s."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    tail = f"\nworker log:\n{worker.log_tail(40)}" if worker else ""
    raise TimeoutError(f"{what}: not within {timeout:.0f} s (last: {value}){tail}")
