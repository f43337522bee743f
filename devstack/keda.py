"""KEDA on a running local cluster: its operator and its metrics adapter, built from KEDA's Go module
(github.com/kedacore/keda/v2, pinned as KEDA_VERSION in deploy/local/kube/build-binaries.sh: `keda` is
cmd/operator, `keda-adapter` is cmd/adapter), started as local processes. A ScaledObject then really
scales: the operator turns it into an HPA (`keda-hpa-<name>`) on an External metric, kube-controller-
manager's HPA controller asks external.metrics.k8s.io for it, the aggregator proxies that to the
adapter, the adapter asks the operator over gRPC, and the operator runs the trigger (a Prometheus query).

In a cluster KEDA runs as two Deployments with certificates it generates and rotates itself
(--enable-cert-rotation). Here:
- all of KEDA's CRDs (config/crd/bases: ScaledObject, ScaledJob, TriggerAuthentication,
  ClusterTriggerAuthentication and the eventing CloudEventSources, whose controllers the operator
  starts too) are applied when KEDA starts; a cluster without KEDA keeps only the ScaledObject CRD
  (devstack/kube.py's UPSTREAM_CRDS);
- both processes talk to the apiserver as KEDA's ServiceAccount (`keda-operator` in namespace `keda`,
  as upstream's config/ runs both) bound to KEDA's own roles (config/rbac, config/metrics-server), with
  a TokenRequest token, so a call its RBAC does not allow fails here as in production;
- certificate rotation is off: one certificate signed by the local cluster's CA, for both server and
  client use (SANs 127.0.0.1, the adapter Service's names and the stack namespace's address), is the
  operator's gRPC server certificate, the adapter's gRPC client certificate (mutual TLS, ca.crt / tls.crt /
  tls.key in one --cert-dir, KEDA's own layout) and the adapter's serving certificate;
- the operator's gRPC metrics service, metrics and health ports are on free loopback ports; leader
  election is off;
- the adapter is reached by the aggregator as prometheus-adapter is (devstack/metrics_adapter.py: a
  relay on a network namespace's address, a selectorless Service and its Endpoints, an APIService whose
  caBundle is the cluster CA).

Who owns external.metrics.k8s.io: KEDA, wherever it runs. An APIService names one backend per group and
version, and KEDA's HPAs only work when `v1beta1.external.metrics.k8s.io` is KEDA's. prometheus-adapter
(devstack/metrics_adapter.py) registers custom.metrics.k8s.io and external.metrics.k8s.io; in a cluster
where KEDA runs prometheus-adapter must not serve the external group (it may keep custom.metrics.k8s.io).
KedaProcess.start refuses a cluster whose external.metrics.k8s.io another backend already serves, rather
than silently taking it away from the test that registered it.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack import identities
from devstack.kube import (
    BIN_DIR_ENV,
    BUILD_SCRIPT,
    REPO_ROOT,
    LocalKubeCluster,
    _pem_key,
    apply_objects,
    go_module_dir,
    module_crds,
    pinned_versions,
)
from devstack.netns import NetworkNamespace
from devstack.process import ManagedProcess, built_binary, free_port, http_ok, tcp_open

log = logging.getLogger(__name__)

MODULE = "github.com/kedacore/keda/v2"
NAMESPACE = "keda"
SERVICE_ACCOUNT = "keda-operator"
ADAPTER_SERVICE = "keda-metrics-apiserver"
API_GROUP = "external.metrics.k8s.io"
API_SERVICE = f"v1beta1.{API_GROUP}"
OPERATOR_STARTED_LOG = "Starting workers"
"""controller-runtime logs this once per controller when it runs (ScaledObject among them)."""


def operator_binary() -> str:
    """The pinned KEDA operator (build-binaries.sh builds it with the adapter when missing)."""
    return built_binary("keda", BUILD_SCRIPT, BIN_DIR_ENV)


def adapter_binary() -> str:
    return built_binary("keda-adapter", BUILD_SCRIPT, BIN_DIR_ENV)


def version() -> str:
    return pinned_versions()["KEDA_VERSION"]


def module_dir() -> Path:
    return go_module_dir(MODULE, version())


def crd_dir() -> Path:
    """`<cache>/crds/keda-all/`: every CRD of KEDA's module (the operator watches them all)."""
    return module_crds("keda-all", MODULE, version(), "config/crd/bases", "*.yaml")


# --- certificates -------------------------------------------------------------------------------


def write_certs(cluster: LocalKubeCluster, directory: Path, ips: list[str]) -> Path:
    """ca.crt, tls.crt, tls.key in `directory`: a certificate of the cluster CA for server and client
    use (KEDA's gRPC link is mutual TLS with one certificate on both ends, as its own rotation makes)."""
    ca = x509.load_pem_x509_certificate((cluster.pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((cluster.pki / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    names = [f"{ADAPTER_SERVICE}.{NAMESPACE}.svc", f"{ADAPTER_SERVICE}.{NAMESPACE}.svc.cluster.local",
             f"{SERVICE_ACCOUNT}.{NAMESPACE}.svc", "localhost"]
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ["127.0.0.1", *ips]]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "keda"),
                                 x509.NameAttribute(NameOID.ORGANIZATION_NAME, "KEDAORG")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes((cluster.pki / "ca.crt").read_bytes())
    (directory / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file = directory / "tls.key"
    key_file.write_bytes(_pem_key(key))
    key_file.chmod(0o600)
    return directory


# --- what is registered with the apiserver --------------------------------------------------------


def identity_objects(module: Path) -> list[dict[str, Any]]:
    """KEDA's namespace and ServiceAccount with its own roles and bindings: the operator's
    (config/rbac/role.yaml, role_binding.yaml) and the metrics server's (config/metrics-server/role.yaml,
    role_binding.yaml: auth delegation, the extension-apiserver-authentication reader, and the HPA
    controller's right to read external metrics)."""
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}},
    ]
    for path in ("config/rbac/role.yaml", "config/rbac/role_binding.yaml",
                 "config/metrics-server/role.yaml", "config/metrics-server/role_binding.yaml"):
        docs += [doc for doc in yaml.safe_load_all((module / path).read_text()) if doc]
    for doc in docs:
        if doc["kind"] in ("Role", "RoleBinding") and "namespace" not in doc["metadata"]:
            doc["metadata"]["namespace"] = NAMESPACE
    return docs


def external_metrics_owner(api: client.ApiClient) -> str | None:
    """`<namespace>/<service>` behind v1beta1.external.metrics.k8s.io, or None when it is not registered."""
    try:
        found = client.ApiregistrationV1Api(api).read_api_service(API_SERVICE)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    service = found.spec.service if found.spec is not None else None
    return f"{service.namespace}/{service.name}" if service is not None else "(local)"


# --- the processes --------------------------------------------------------------------------------


class KedaProcess:
    """KEDA's operator and metrics adapter against `cluster`; files under `workdir`, logs in `log_dir`
    (keda-operator.log, keda-adapter.log, keda-adapter-relay.log)."""

    def __init__(self, cluster: LocalKubeCluster, workdir: Path, log_dir: Path, *,
                 log_level: str = "info") -> None:
        self.cluster = cluster
        self.workdir = Path(workdir)
        self.log_dir = Path(log_dir)
        self.log_level = log_level
        self.grpc_port = free_port()
        self.health_port = free_port()
        self.metrics_port = free_port()
        self.adapter_port = free_port()
        """The adapter's secure port on loopback, and the relay's on the namespace's address."""
        self.adapter_metrics_port = free_port()
        self.netns: NetworkNamespace | None = None
        self.operator: ManagedProcess | None = None
        self.adapter: ManagedProcess | None = None
        self.relay: ManagedProcess | None = None
        self._registered = False

    @property
    def address(self) -> str:
        if self.netns is None:
            raise RuntimeError("KEDA has not been started")
        return self.netns.address

    def start(self, timeout: float = 180.0) -> KedaProcess:
        operator, adapter = operator_binary(), adapter_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        api = self.cluster.api_client()
        try:
            owner = external_metrics_owner(api)
            if owner not in (None, f"{NAMESPACE}/{ADAPTER_SERVICE}"):
                raise RuntimeError(f"{API_SERVICE} is served by {owner}; KEDA must own it in a cluster where it runs "
                                   "(devstack/keda.py): stop that backend first")
            self.cluster.apply_crds([crd_dir()])
            apply_objects(api, identity_objects(module_dir()))
            token = identities.request_token(api, NAMESPACE, SERVICE_ACCOUNT)
            kubeconfig = identities.write_kubeconfig(self.workdir / "keda.kubeconfig", self.cluster,
                                                     SERVICE_ACCOUNT, token, NAMESPACE)
            self.netns = NetworkNamespace.create()
            certs = write_certs(self.cluster, self.workdir / "certs", [self.address])
            # CAs the scalers trust (--ca-dir reads every file in it as PEM certificates): the cluster CA alone.
            cas = self.workdir / "ca"
            cas.mkdir(exist_ok=True)
            (cas / "ca.crt").write_bytes((self.cluster.pki / "ca.crt").read_bytes())
            env = {"KUBECONFIG": str(kubeconfig), "WATCH_NAMESPACE": "", "POD_NAMESPACE": NAMESPACE,
                   "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE}
            self.operator = ManagedProcess("keda-operator", [
                operator,
                f"--metrics-service-bind-address=127.0.0.1:{self.grpc_port}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                f"--cert-dir={certs}",
                f"--ca-dir={cas}",
                "--enable-cert-rotation=false",
                "--leader-elect=false",
                f"--zap-log-level={self.log_level}", "--zap-encoder=console",
            ], self.log_dir, env=env).start()
            self.operator.wait_ready(lambda: http_ok(f"http://127.0.0.1:{self.health_port}/readyz")
                                     and tcp_open("127.0.0.1", self.grpc_port), timeout)
            self.adapter = ManagedProcess("keda-adapter", [
                adapter,
                f"--metrics-service-address=127.0.0.1:{self.grpc_port}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.adapter_port}",
                f"--port={self.adapter_metrics_port}",
                f"--cert-dir={certs}",
                f"--tls-cert-file={certs / 'tls.crt'}",
                f"--tls-private-key-file={certs / 'tls.key'}",
                f"--client-ca-file={certs / 'ca.crt'}",
                f"--requestheader-client-ca-file={self.cluster.pki / 'front-proxy-ca.crt'}",
                f"--lister-kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--zap-log-level={self.log_level}", "--zap-encoder=console",
            ], self.log_dir, env=env).start()
            self.adapter.wait_ready(lambda: tcp_open("127.0.0.1", self.adapter_port), timeout)
            self.relay = ManagedProcess("keda-adapter-relay", [
                sys.executable, "-m", "devstack.relay", "--netns", self.netns.name,
                "--listen", f"{self.address}:{self.adapter_port}", "--to", f"127.0.0.1:{self.adapter_port}",
            ], self.log_dir, cwd=REPO_ROOT).start()
            self.relay.wait_ready(lambda: tcp_open(self.address, self.adapter_port), timeout=30)
            self._register(api)
            self._wait_available(api, timeout)
        except BaseException:
            self.stop()
            raise
        finally:
            api.close()  # type: ignore[no-untyped-call]
        return self

    def _register(self, api: client.ApiClient) -> None:
        """The adapter's Service (no selector) and Endpoints (the namespace's address), and the
        external.metrics.k8s.io APIService; applied, so an earlier KEDA's (another port) is replaced."""
        ca_bundle = base64.b64encode((self.cluster.pki / "ca.crt").read_bytes()).decode()
        apply_objects(api, [
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE},
             "spec": {"ports": [{"name": "https", "port": 443, "targetPort": self.adapter_port}]}},
            {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE},
             "subsets": [{"addresses": [{"ip": self.address}],
                          "ports": [{"name": "https", "port": self.adapter_port}]}]},
            {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": API_SERVICE},
             "spec": {"group": API_GROUP, "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100,
                      "caBundle": ca_bundle,
                      "service": {"namespace": NAMESPACE, "name": ADAPTER_SERVICE, "port": 443}}},
        ])
        self._registered = True

    def _wait_available(self, api: client.ApiClient, timeout: float) -> None:
        registration = client.ApiregistrationV1Api(api)
        deadline = time.monotonic() + timeout
        state = "unknown"
        while True:
            found = registration.read_api_service(API_SERVICE)
            conditions = (found.status.conditions if found.status else None) or []
            state = next((f"{c.status} {c.reason}: {c.message}" for c in conditions if c.type == "Available"),
                         "unknown")
            if state.startswith("True"):
                return
            for process in (self.operator, self.adapter, self.relay):
                if process is not None and not process.alive:
                    raise RuntimeError(f"{process.name} exited:\n{process.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{API_SERVICE} never became Available: {json.dumps(state)}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Unregister the APIService first (a registered, unanswering APIService makes discovery of the
        whole cluster report errors), then stop the processes and remove the namespace."""
        if self._registered:
            api = self.cluster.api_client()
            try:
                client.ApiregistrationV1Api(api).delete_api_service(API_SERVICE)
            except Exception:  # the cluster may be gone already; the processes still stop
                log.warning("could not remove %s", API_SERVICE, exc_info=True)
            finally:
                api.close()  # type: ignore[no-untyped-call]
            self._registered = False
        for process in (self.relay, self.adapter, self.operator):
            if process is not None:
                process.stop()
        if self.netns is not None:
            self.netns.delete()
            self.netns = None
