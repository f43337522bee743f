"""A stack whose InferenceService pods answer, behind a real Gateway: the traffic tests' world.

Per test module: a pod runtime (devstack/pod_runtime.py: its network namespace, the pod server, the
kubelet's readiness), a cluster of its own whose kwok hands out addresses in that runtime's range and
leaves the pods' readiness to it, the chart installed, Traefik with the Gateway, and a worker and a
bridge whose operator ConfigMap attaches every HTTPRoute to that Gateway. The session's Temporal,
registry, Hub stand-in and Prometheus are shared (Prometheus scrapes every answering pod's /metrics).

A separate cluster because the session's is not answering: there kwok says every pod is Ready at once,
which the other end-to-end tests rely on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from devstack import identities
from devstack.hub_server import HubServer
from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.pod_runtime import PodRuntimeProcess
from devstack.product import BridgeLauncher, start_worker
from devstack.services import OciRegistry, Prometheus, TemporalDevServer
from devstack.traefik import Traefik, crd_dir
from testkit.load import LoadReport
from tests.fixtures.kube import own_identities
from tests.rollout_live import LiveStack

INGRESS_DOMAIN = "example.com"
DEFAULT_BRIDGE_KINDS = "InferenceService,RolloutPolicy,InferenceReplica,WorkloadCluster"
"""InferenceReplica: OMENative services and their migrations; WorkloadCluster: placement."""


@dataclass(frozen=True)
class TrafficStack:
    """What a traffic test drives (live: the LiveIsvc helpers work on it) and measures through."""

    live: LiveStack
    cluster: LocalKubeCluster
    traefik: Traefik
    prometheus: Prometheus
    runtime: PodRuntimeProcess
    operator_config: str
    """The name of the worker's operator ConfigMap, in `namespace`."""

    @property
    def namespace(self) -> str:
        return self.live.namespace

    def host(self, isvc: str) -> str:
        """The InferenceService's top-level host: what a client puts in Host to reach it."""
        return f"{isvc}.{self.namespace}.{INGRESS_DOMAIN}"


def operator_config(prometheus: Prometheus, gateway: str) -> dict[str, str]:
    """Old revisions drain a second after the flip; canary analysis samples the stack's Prometheus;
    every route attaches to the stack's Gateway under example.com."""
    return {
        "rollout": "scaleDownDelaySeconds: 1\n",
        "canaryAnalysis": yaml.safe_dump({"bundledPrometheusAddress": prometheus.url}),
        "ingress": yaml.safe_dump({"omeIngressGateway": gateway, "ingressDomain": INGRESS_DOMAIN}),
    }


@pytest.fixture(scope="module")
def traffic_stack(temporal_server: TemporalDevServer, oci_registry: OciRegistry, hub_server: HubServer,
                  prometheus: Prometheus, stack_logs: Path, tmp_path_factory: pytest.TempPathFactory,
                  request: pytest.FixtureRequest) -> Iterator[TrafficStack]:
    """A module may name more kinds for its bridge in `BRIDGE_KINDS` (the routing tests add TrafficMap), and
    set `TRAEFIK_KUBERNETES_CRD = True` for Traefik's kubernetesCRD provider beside its Gateway provider (its
    CRDs applied first): TraefikServices, spec.traffic's Traefik translation."""
    workdir = tmp_path_factory.mktemp("traffic")
    logs = stack_logs / workdir.name
    cluster = LocalKubeCluster(workdir / "kube", logs, answering=True)
    runtime = PodRuntimeProcess(cluster.kubeconfig_path, workdir / "runtime", logs,
                                prometheus.pod_targets_file).start()
    traefik: Traefik | None = None
    try:
        cluster.pod_cidr = runtime.pod_cidr
        cluster.start()
        identities.install(cluster, identities.local_values())
        cluster.apply_crds([REPO_ROOT / "deploy" / "crds"])
        api = cluster.api_client()
        kubernetes_crd = bool(getattr(request.module, "TRAEFIK_KUBERNETES_CRD", False))
        if kubernetes_crd:
            cluster.apply_crds([crd_dir()])
        # Its API on: a test reads the weights the router runs (global_route_stack.running_weights).
        traefik = Traefik(workdir / "traefik", logs, cluster.kubeconfig_path, api=True,
                          kubernetes_crd=kubernetes_crd).start(api)
        task_queue = f"traffic-{uuid.uuid4().hex[:6]}"
        namespace = f"traffic-{uuid.uuid4().hex[:6]}"
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        with own_identities(cluster, namespace, workdir / "identities") as ids:
            core.create_namespaced_config_map(namespace, client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=ids.operator_config),
                data=operator_config(prometheus, traefik.gateway)))
            worker = start_worker(cluster, temporal_server, oci_registry, hub_server, task_queue,
                                  workdir / "spool", logs, host_id=f"host-{task_queue}", identities=ids)
            launcher = BridgeLauncher(ids, temporal_server.address, logs)
            try:
                kinds = getattr(request.module, "BRIDGE_KINDS", DEFAULT_BRIDGE_KINDS)
                launcher.start(task_queue=task_queue, kinds=kinds)
                yield TrafficStack(LiveStack(api, namespace, worker, temporal_server.address), cluster, traefik,
                                   prometheus, runtime, ids.operator_config)
            finally:
                launcher.stop_all()
                worker.stop()
    finally:
        if traefik is not None:
            traefik.stop()
        cluster.stop()
        runtime.stop()


def failures(report: LoadReport) -> str:
    """Where in the run requests failed: what an assertion on `report.failed == 0` says when it does not hold
    (each failure's start, reason, revision and pod, and the run's marks)."""
    failed = [(round(r.start_s, 2), r.reason, r.revision, r.pod) for r in report.records if not r.ok]
    marks = [(m.label, round(m.at_s, 2)) for m in report.marks]
    return f"{len(failed)} failed: {failed[:30]}; marks {marks}"
