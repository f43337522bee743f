"""Member (workload) clusters for multi-cluster placement, each a whole cluster of its own.

A member is what a platform team registers as a WorkloadCluster: its own etcd, kube-apiserver,
controllers and kwok nodes (devstack/kube.py LocalKubeCluster, the same binaries as the control
plane's), the servingops chart installed in it (so its own worker and bridge reconcile the derived
InferenceServices the control plane writes there, as the chart's identities), and the real Kueue
(devstack/kueue.py) with one ClusterQueue whose cpu quota decides admission: pods of a namespace
prepared by `prepare_namespace` that name the LocalQueue PLACEMENT_QUEUE are gated until Kueue
admits them.

`register` writes, in the control-plane cluster, a kubeconfig Secret holding a token of the
member's `<release>-placement-member` ServiceAccount (the chart's placementMember identity: only
what placement does in a member) and a WorkloadCluster naming it, with the member's labels for
clusterAffinity to match.

The members share the control plane's Temporal server (each worker on a task queue of its own),
registry and Hub, which a real fleet would not; nothing a member's worker does reaches another
cluster's apiserver.

An *answering* member (`answering=True`) also has pods that answer and a Gateway of its own: a pod runtime
(devstack/pod_runtime.py) in a network namespace of its own, kwok handing out addresses in its range, and
Traefik (devstack/traefik.py) whose Gateway the member's operator ConfigMap attaches every route to under
INGRESS_DOMAIN (or the member's own `ingress_domain`), so a placed InferenceService answers through its
member's gateway as it would in a fleet.

With `gateway_port` an answering member's Gateway is also reachable from other clusters, as a member's load
balancer would be: a relay (devstack/relay.py) listens on the member's namespace address (not loopback, so an
EndpointSlice may name it) at that port and forwards to its Traefik, and the Gateway's status.addresses
report that address. Every member of a fleet can use the same port (each listens in its own namespace),
which is what a control-plane publisher's one `endpoint.backendPort` expects (tests/support/global_route_stack.py).

A *lean* member (`servingops=False, controllers=False`, optionally `etcd_url` of a SharedEtcd) is
an apiserver, its CRDs (ours and Kueue's), the chart's identities (no workloads) and Kueue, nothing
else: it takes the placement-member identity's writes and Kueue's decisions, but nothing turns a
derived InferenceService into an InferenceReplica or pods, so it never admits one. bench/placement_race.py
uses such members as losers, for fleets bigger than full members fit on one machine.
"""

from __future__ import annotations

import base64
import contextlib
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack import identities
from devstack.identities import Identities
from devstack.kube import REPO_ROOT, LocalKubeCluster, apply_objects, upstream_crd_dirs
from devstack.kueue import DEFAULT_FRAMEWORKS, KueueProcess, label_namespace
from devstack.pod_runtime import PodRuntimeProcess
from devstack.process import ManagedProcess
from devstack.product import WORKER_READY_SECONDS
from devstack.relay import start_relay
from devstack.traefik import Traefik

KUEUE = ("kueue.x-k8s.io", "v1beta2")
FLAVOR = "placement-flavor"
CLUSTER_QUEUE = "placement"
PLACEMENT_QUEUE = "ome-placement"
"""The LocalQueue a prepared namespace holds in every member; the derived InferenceServices' pods
name it (kueue.x-k8s.io/queue-name)."""
MEMBER_IDENTITY = f"{identities.RELEASE}-placement-member"
PROJECT_CRDS = REPO_ROOT / "deploy" / "crds"
INGRESS_DOMAIN = "example.com"
"""An answering member's routes' domain: `<isvc>.<namespace>.example.com` in the Host header."""


def _kueue_doc(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "/".join(KUEUE), "kind": kind, "metadata": metadata, "spec": spec}


def _quota_spec(cpu: str, gpu: str | None = None) -> dict[str, Any]:
    """cpu quota, and nvidia.com/gpu quota when `gpu` is given (Kueue refuses a pod asking for a
    resource its ClusterQueue does not cover)."""
    resources = [("cpu", cpu)] + ([("nvidia.com/gpu", gpu)] if gpu is not None else [])
    return {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": [name for name, _ in resources],
                                                         "flavors": [{"name": FLAVOR, "resources": [
                                                             {"name": name, "nominalQuota": quota}
                                                             for name, quota in resources]}]}]}


class MemberCluster:
    """One member: files under `workdir`, every process's log under `log_dir` (its own folder, so
    the member's kube-apiserver.log or kueue.log does not mix with another cluster's)."""

    def __init__(self, name: str, workdir: Path, log_dir: Path, *, labels: dict[str, str] | None = None,
                 cpu_quota: str = "4", nodes: int = 2, servingops: bool = True, controllers: bool = True,
                 etcd_url: str | None = None, kueue_frameworks: Sequence[str] = DEFAULT_FRAMEWORKS,
                 answering: bool = False, gateway_port: int | None = None,
                 ingress_domain: str = INGRESS_DOMAIN) -> None:
        if gateway_port is not None and not answering:
            raise ValueError("gateway_port: only an answering member has a Gateway")
        self.name = name
        self.labels = dict(labels or {})
        self.cpu_quota = cpu_quota
        self.workdir = Path(workdir)
        self.log_dir = Path(log_dir) / name
        self.servingops = servingops
        """False: no worker nor bridge of its own (the derived services it is given stay objects)."""
        self.kueue_frameworks = tuple(kueue_frameworks)
        # A cluster sharing an etcd stores under a prefix of its own (names are unique in a fleet).
        # Of the upstream CRDs a lean member gets Kueue's only: Gateway API's and KEDA's cost each
        # apiserver memory and nothing in such a member uses them.
        self.cluster = LocalKubeCluster(self.workdir / "kube", self.log_dir, nodes=nodes if controllers else 0,
                                        controllers=controllers, etcd_url=etcd_url,
                                        etcd_prefix=f"/registry-{name}" if etcd_url else None,
                                        install_upstream_crds=controllers, answering=answering)
        self.runtime: PodRuntimeProcess | None = None
        self.traefik: Traefik | None = None
        self.gateway_port = gateway_port
        """Where other clusters reach the member's Gateway (at gateway_address); None: loopback only."""
        self.ingress_domain = ingress_domain
        """The domain of the member's routes' hostnames (`<isvc>.<namespace>.<domain>`)."""
        self.gateway_relay: ManagedProcess | None = None
        self.kueue: KueueProcess | None = None
        self.identities: Identities | None = None
        self.worker: ManagedProcess | None = None
        self.bridge: ManagedProcess | None = None
        self.task_queue = f"member-{name}-{uuid.uuid4().hex[:6]}"
        self._api: client.ApiClient | None = None

    @property
    def api(self) -> client.ApiClient:
        """An admin client of the member: the tests' and the operator's hands, never placement's."""
        if self._api is None:
            self._api = self.cluster.api_client()
        return self._api

    # -- lifecycle --

    def start(self, temporal_address: str, worker_env: dict[str, str] | None = None) -> MemberCluster:
        """The cluster, the chart (with the placement-member identity), Kueue and its ClusterQueue,
        then the member's own worker and bridge."""
        try:
            if self.cluster.answering:  # the runtime first: kwok needs its pod range
                self.runtime = PodRuntimeProcess(self.cluster.kubeconfig_path, self.workdir / "runtime",
                                                 self.log_dir).start()
                self.cluster.pod_cidr = self.runtime.pod_cidr
            self.cluster.start()
            if not self.cluster.install_upstream_crds:
                self.cluster.apply_crds([d for d in upstream_crd_dirs() if d.name == "kueue"])
            values = identities.local_values(placementMember={"enabled": True})
            if self.cluster.controllers:
                identities.install(self.cluster, values)
            else:  # nothing would run the chart's workloads: its ServiceAccounts and RBAC only
                identities.apply_identities(self.api, identities.RELEASE, identities.NAMESPACE, values)
            self.cluster.apply_crds([PROJECT_CRDS])
            self.kueue = KueueProcess(self.cluster, self.workdir / "kueue", self.log_dir,
                                      frameworks=self.kueue_frameworks).start()
            apply_objects(self.api, [_kueue_doc("ResourceFlavor", FLAVOR, {}),
                                     _kueue_doc("ClusterQueue", CLUSTER_QUEUE, _quota_spec(self.cpu_quota))])
            if self.cluster.answering:
                self._start_gateway()
            if self.servingops:
                self.identities = identities.issue(self.cluster, self.workdir / "identities")
                self._start_servingops(temporal_address, worker_env or {})
        except BaseException:
            self.stop()
            raise
        return self

    def _start_gateway(self) -> None:
        """Traefik and its Gateway; with gateway_port, the relay other clusters reach it through, whose
        address the Gateway's status reports."""
        assert self.runtime is not None
        self.traefik = Traefik(self.workdir / "traefik", self.log_dir, self.cluster.kubeconfig_path)
        if self.gateway_port is not None:
            self.traefik.status_address = self.runtime.address
        self.traefik.start(self.api)
        if self.gateway_port is not None:
            self.gateway_relay = start_relay(f"gateway-relay-{self.name}", self.runtime.netns,
                                             (self.runtime.address, self.gateway_port), self.traefik.port,
                                             self.log_dir)
        self._attach_routes(self.traefik.gateway)

    @property
    def gateway_address(self) -> str:
        """The IP other clusters reach the member's Gateway at (port gateway_port); what its status.addresses
        report. Only for a started member with gateway_port."""
        if self.gateway_port is None or self.runtime is None or self.gateway_relay is None:
            raise RuntimeError(f"member {self.name}: no reachable gateway (started with gateway_port?)")
        return self.runtime.address

    def _start_servingops(self, temporal_address: str, worker_env: dict[str, str]) -> None:
        assert self.identities is not None
        ids = self.identities
        spool = self.workdir / "spool"
        spool.mkdir(parents=True, exist_ok=True)
        env = {**worker_env, **ids.worker_env(), "TEMPORAL_ADDRESS": temporal_address,
               "SERVINGOPS_TASK_QUEUE": self.task_queue, "SERVINGOPS_SPOOL_DIR": str(spool),
               "SERVINGOPS_HOST_ID": f"host-{self.task_queue}", "PYTHONUNBUFFERED": "1"}
        worker = ManagedProcess(f"worker-{self.name}", [sys.executable, "-m", "servingops.workers.main"],
                                self.log_dir, env=env, cwd=REPO_ROOT).start()
        self.worker = worker
        worker.wait_ready(lambda: "ready on" in worker.log_tail(20), timeout=WORKER_READY_SECONDS)
        self.bridge = ManagedProcess(f"bridge-{self.name}", [
            sys.executable, "-m", "servingops.crd_bridge.main", "--temporal-address", temporal_address,
            "--kubeconfig", str(ids.bridge), "--task-queue", self.task_queue,
            "--lease-namespace", ids.namespace, "--lease-name", f"bridge-{self.task_queue}",
            # AcceleratorQuota: the member's own capacity report (its root's status.capacity), which
            # placement's SplitByCapacity reads.
            "--kinds", "InferenceService,InferenceReplica,AcceleratorQuota"], self.log_dir, cwd=REPO_ROOT).start()

    def _attach_routes(self, gateway: str) -> None:
        """The chart's operator ConfigMap names the member's Gateway (before its worker starts, which
        reads it): the ingress block in upstream OME's names."""
        ingress = yaml.safe_dump({"omeIngressGateway": gateway, "ingressDomain": self.ingress_domain})
        client.CoreV1Api(self.api).patch_namespaced_config_map(
            identities.operator_config_name(), identities.NAMESPACE, {"data": {"ingress": ingress}})

    def host(self, namespace: str, isvc: str) -> str:
        """What a client puts in Host to reach `isvc` through an answering member's Gateway."""
        return f"{isvc}.{namespace}.{self.ingress_domain}"

    def processes(self) -> list[ManagedProcess]:
        """Every process of the member (`./dev down` stops them by pid)."""
        kueue = [self.kueue.process] if self.kueue is not None and self.kueue.process is not None else []
        plane = [p.process for p in (self.runtime, self.traefik) if p is not None and p.process is not None]
        own = (p for p in (self.gateway_relay, self.worker, self.bridge) if p is not None)
        return [*self.cluster._processes, *kueue, *plane, *own]

    def stop(self) -> None:
        for proc in (self.bridge, self.worker):
            if proc is not None:
                proc.stop()
        if self.kueue is not None:
            with contextlib.suppress(Exception):  # the apiserver may be the thing a test stopped
                self.kueue.stop()
            self.kueue = None
        if self.gateway_relay is not None:
            self.gateway_relay.stop()
            self.gateway_relay = None
        if self.traefik is not None:
            self.traefik.stop()
        if self._api is not None:
            self._api.close()  # type: ignore[no-untyped-call]
            self._api = None
        self.cluster.stop()
        if self.runtime is not None:
            self.runtime.stop()

    # -- what tests and `./dev up --members` do with a member --

    def set_quota(self, cpu: str, gpu: str | None = None) -> None:
        """The ClusterQueue's cpu (and nvidia.com/gpu) quota: what Kueue admits from now on."""
        client.CustomObjectsApi(self.api).patch_cluster_custom_object(
            *KUEUE, "clusterqueues", CLUSTER_QUEUE, {"spec": _quota_spec(cpu, gpu)})

    def prepare_namespace(self, namespace: str) -> None:
        """`namespace` in the member, managed by Kueue, with the LocalQueue PLACEMENT_QUEUE."""
        label_namespace(self.api, namespace)
        apply_objects(self.api, [_kueue_doc("LocalQueue", PLACEMENT_QUEUE, {"clusterQueue": CLUSTER_QUEUE},
                                            namespace)])

    def member_kubeconfig(self) -> str:
        """A kubeconfig for the placement-member ServiceAccount (what the control plane gets)."""
        token = identities.request_token(self.api, identities.NAMESPACE, MEMBER_IDENTITY)
        path = identities.write_kubeconfig(self.workdir / "placement-member.kubeconfig", self.cluster,
                                           MEMBER_IDENTITY, token, "default")
        return path.read_text()

    def register(self, control_api: client.ApiClient, secret_namespace: str) -> None:
        """The kubeconfig Secret `member-<name>` in `secret_namespace` of the control plane and the
        WorkloadCluster `<name>` naming it, labelled with the member's labels."""
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                  "metadata": {"name": f"member-{self.name}", "namespace": secret_namespace},
                  "data": {"kubeconfig": base64.b64encode(self.member_kubeconfig().encode()).decode()}}
        registration = {"apiVersion": "ome.io/v1beta1", "kind": "WorkloadCluster",
                        "metadata": {"name": self.name, "labels": self.labels},
                        "spec": {"clusterSource": {"kubeConfig": {"secretRef": {
                            "name": f"member-{self.name}", "namespace": secret_namespace}}}}}
        apply_objects(control_api, [secret, registration])

    def unregister(self, control_api: client.ApiClient, secret_namespace: str) -> None:
        with contextlib.suppress(ApiException):
            client.CustomObjectsApi(control_api).delete_cluster_custom_object(
                "ome.io", "v1beta1", "workloadclusters", self.name)
        # As an administrator tearing down: the quota projection's hold (a finalizer the management plane removes
        # once it has deleted its copies there) is dropped, so a torn-down stack leaves no registration behind.
        with contextlib.suppress(ApiException):
            client.CustomObjectsApi(control_api).patch_cluster_custom_object(
                "ome.io", "v1beta1", "workloadclusters", self.name, {"metadata": {"finalizers": None}})
        with contextlib.suppress(ApiException):
            client.CoreV1Api(control_api).delete_namespaced_secret(f"member-{self.name}", secret_namespace)


def registration_ready(control_api: client.ApiClient, name: str) -> bool:
    """The control plane's WorkloadCluster `name` says Ready (its health probe reached the member)."""
    try:
        obj = client.CustomObjectsApi(control_api).get_cluster_custom_object("ome.io", "v1beta1", "workloadclusters",
                                                                             name)
    except ApiException:
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])
