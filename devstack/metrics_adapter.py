"""prometheus-adapter in front of the stack's Prometheus, serving custom.metrics.k8s.io and
external.metrics.k8s.io through the apiserver's aggregation layer, so kube-controller-manager's real
HPA controller scales on metrics a test feeds (tests/metrics_exporter.py -> Prometheus -> adapter).

How it is wired on a machine without kube-proxy (facts, checked here):
- kube-apiserver runs with the front-proxy flags and --enable-aggregator-routing
  (devstack/kube.py), so it proxies to an APIService's *endpoint* address, not its ClusterIP;
- Endpoints validation rejects loopback addresses, and tests never dial the machine's own address: the
  adapter listens on loopback, and a relay (devstack/relay.py) listens on the address of a network
  namespace the stack makes (devstack/netns.py) and passes each connection on to it; a selectorless
  Service plus an Endpoints object (mirrored into an EndpointSlice by the controller-manager) point at
  the namespace's address, which the apiserver reaches over the namespace's veth pair;
- its serving certificate is issued by the cluster CA for `<service>.<namespace>.svc` (the name the
  aggregator verifies) and the APIServices carry that CA as caBundle;
- it authenticates the proxied requests with the front-proxy CA and asks the apiserver (admin
  kubeconfig) to authorize them: the HPA controller's bootstrap role may read both metrics APIs.

The metric rules: every Prometheus series with a `namespace` label is an external metric of that
namespace under its own name (its other labels are the selector); every series with `namespace` and
`pod` labels is also a per-pod custom metric. Built by deploy/local/kube/build-binaries.sh.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.kube import BUILD_SCRIPT, REPO_ROOT, LocalKubeCluster, apply_objects, issue_serving_cert
from devstack.netns import NetworkNamespace
from devstack.process import ManagedProcess, built_binary, free_port, tcp_open

log = logging.getLogger(__name__)

BINARY = "prometheus-adapter"
NAMESPACE = "servingops-metrics"
SERVICE = "prometheus-adapter"
API_GROUPS = ("custom.metrics.k8s.io", "external.metrics.k8s.io")

_MAX = "max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"
RULES: dict[str, Any] = {
    "rules": [{
        "seriesQuery": '{namespace!="",pod!=""}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": "^(.*)$", "as": "$1"},
        "metricsQuery": _MAX,
    }],
    "externalRules": [{
        "seriesQuery": '{namespace!=""}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
        "name": {"matches": "^(.*)$", "as": "$1"},
        "metricsQuery": _MAX,
    }],
}


def ensure_binary() -> str:
    return built_binary(BINARY, BUILD_SCRIPT, "SERVINGOPS_KUBE_BIN_DIR")


class MetricsAdapter:
    """One prometheus-adapter for one LocalKubeCluster; files under `workdir`, logs in `log_dir`."""

    def __init__(self, cluster: LocalKubeCluster, prometheus_url: str, workdir: Path, log_dir: Path) -> None:
        self.cluster = cluster
        self.prometheus_url = prometheus_url
        self.workdir = Path(workdir)
        self.log_dir = Path(log_dir)
        self.port = free_port()
        """The adapter's port on loopback, and the relay's in the namespace."""
        self.netns: NetworkNamespace | None = None
        self.process: ManagedProcess | None = None
        self.relay: ManagedProcess | None = None

    @property
    def address(self) -> str:
        """Where the apiserver dials the adapter: the stack namespace's address (set once started)."""
        if self.netns is None:
            raise RuntimeError("the adapter has not been started")
        return self.netns.address

    def start(self, timeout: float = 120.0) -> MetricsAdapter:
        binary = ensure_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.netns = NetworkNamespace.create()
        pki = self.cluster.pki
        cert, key = issue_serving_cert(pki, SERVICE, [f"{SERVICE}.{NAMESPACE}.svc", "localhost"],
                                       [self.address, "127.0.0.1"])
        (self.workdir / "tls.crt").write_bytes(cert)
        (self.workdir / "tls.key").write_bytes(key)
        (self.workdir / "tls.key").chmod(0o600)
        (self.workdir / "config.yaml").write_text(yaml.safe_dump(RULES))
        kubeconfig = str(self.cluster.kubeconfig_path)
        self.process = ManagedProcess("prometheus-adapter", [
            binary,
            f"--prometheus-url={self.prometheus_url}",
            f"--config={self.workdir / 'config.yaml'}",
            "--metrics-relist-interval=2s",  # a series fed by a test is listed within 2 s
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--tls-cert-file={self.workdir / 'tls.crt'}",
            f"--tls-private-key-file={self.workdir / 'tls.key'}",
            f"--lister-kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--v=1",
        ], self.log_dir).start()
        self.relay = ManagedProcess("prometheus-adapter-relay", [
            sys.executable, "-m", "devstack.relay", "--netns", self.netns.name,
            "--listen", f"{self.address}:{self.port}", "--to", f"127.0.0.1:{self.port}",
        ], self.log_dir, cwd=REPO_ROOT).start()
        self.relay.wait_ready(lambda: tcp_open(self.address, self.port), timeout=30)
        self._register()
        self._wait_available(timeout)
        return self

    def _register(self) -> None:
        """The adapter's Service (no selector) and Endpoints (this machine's address: nothing runs
        kube-proxy, so the aggregator dials the endpoint), and both APIServices; applied, so what an
        earlier adapter (another port) registered is replaced."""
        ca_bundle = base64.b64encode((self.cluster.pki / "ca.crt").read_bytes()).decode()
        docs: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": NAMESPACE},
             "spec": {"ports": [{"name": "https", "port": 443, "targetPort": self.port}]}},
            {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": SERVICE, "namespace": NAMESPACE},
             "subsets": [{"addresses": [{"ip": self.address}], "ports": [{"name": "https", "port": self.port}]}]},
            *({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
               "metadata": {"name": f"v1beta1.{group}"},
               "spec": {"group": group, "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100,
                        "caBundle": ca_bundle, "service": {"namespace": NAMESPACE, "name": SERVICE, "port": 443}}}
              for group in API_GROUPS),
        ]
        api = self.cluster.api_client()
        try:
            apply_objects(api, docs)
        finally:
            api.close()  # type: ignore[no-untyped-call]

    def _wait_available(self, timeout: float) -> None:
        api = self.cluster.api_client()
        registration = client.ApiregistrationV1Api(api)
        deadline = time.monotonic() + timeout
        try:
            while True:
                states = {}
                for group in API_GROUPS:
                    service = registration.read_api_service(f"v1beta1.{group}")
                    conditions = (service.status.conditions if service.status else None) or []
                    states[group] = next((f"{c.status} {c.reason}: {c.message}" for c in conditions
                                          if c.type == "Available"), "unknown")
                if all(state.startswith("True") for state in states.values()):
                    return
                if self.process is not None and not self.process.alive:
                    raise RuntimeError(f"prometheus-adapter exited:\n{self.process.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the metrics APIServices never became Available: {json.dumps(states)}")
                time.sleep(0.5)
        finally:
            api.close()  # type: ignore[no-untyped-call]

    def stop(self) -> None:
        api = self.cluster.api_client()
        try:
            registration = client.ApiregistrationV1Api(api)
            for group in API_GROUPS:
                try:
                    registration.delete_api_service(f"v1beta1.{group}")
                except ApiException as exc:
                    if exc.status != 404:
                        raise
        except Exception:  # the cluster may be gone already; the process still stops
            log.warning("could not remove the metrics APIServices", exc_info=True)
        finally:
            api.close()  # type: ignore[no-untyped-call]
        for process in (self.relay, self.process):
            if process is not None:
                process.stop()
        if self.netns is not None:
            self.netns.delete()
