"""The Kueue controller on a running local cluster: built from its Go module (sigs.k8s.io/kueue, pinned
as KUEUE_VERSION in deploy/local/kube/build-binaries.sh), started as a local process, its admission
webhooks served on a free loopback port over TLS and registered with the apiserver by URL.

In a cluster Kueue runs as a Deployment behind the `kueue-webhook-service` Service with certificates
it rotates itself. Here:
- the serving certificate (SAN 127.0.0.1) is signed by the local cluster's own CA, and Kueue's
  internal certificate management is off;
- the Mutating/ValidatingWebhookConfigurations are Kueue's own (config/components/webhook in its
  module): the webhooks of Kueue's API group and of Pods (the `pod` integration; KueueProcess's
  `frameworks` may add `batch/job` and its Job webhooks, for MultiKueue in bench/placement_race.py),
  each `clientConfig` pointing at `https://127.0.0.1:<port><path>` instead of the Service;
- the Pod webhooks and `managedJobsNamespaceSelector` only select namespaces labelled
  MANAGED_LABEL=true, so pods of every other test are never gated nor even sent to Kueue;
- Kueue talks to the apiserver as its own ServiceAccount (`kueue-controller-manager`) bound to its
  module's manager roles (config/components/rbac: role.yaml, manager_secrets_role.yaml), through a
  TokenRequest token, so a call its RBAC does not allow fails here as in production;
- metrics, health probes, the visibility API server and leader election are off.

Kueue v0.17 reads a metrics certificate from the fixed path /etc/kueue/metrics/certs whenever its
internal certificate management is off, even with metrics disabled (cmd/kueue/main.go): a
certificate signed by the local CA is written there once when none is (never served).
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import logging
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack import identities
from devstack.kube import (
    BIN_DIR_ENV,
    BUILD_SCRIPT,
    LocalKubeCluster,
    _issue,
    _name,
    _pem_key,
    apply_objects,
    go_module_dir,
    pinned_versions,
)
from devstack.process import ManagedProcess, built_binary, free_port

log = logging.getLogger(__name__)

MODULE = "sigs.k8s.io/kueue"
NAMESPACE = "kueue-system"
SERVICE_ACCOUNT = "kueue-controller-manager"
CLUSTER_ROLE = "servingops-kueue-manager-role"
MANAGED_LABEL = "servingops.dev/kueue-managed"
"""A namespace labelled `<MANAGED_LABEL>: "true"` is managed by Kueue (its pods with a queue name are
gated until admitted); no other namespace is."""
MUTATING = "servingops-kueue-mutating"
VALIDATING = "servingops-kueue-validating"
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
DEFAULT_FRAMEWORKS = ("pod",)
"""The integrations enabled unless a caller names others (bench/placement_race.py adds "batch/job",
the Jobs MultiKueue dispatches)."""
STARTED_LOG = '"Starting workers"'
"""controller-runtime logs this once per controller when it runs (here: pods, workloads, queues)."""


def kueue_binary() -> str:
    """The pinned Kueue controller (build-binaries.sh builds it when missing: ~3.5 min cold)."""
    return built_binary("kueue", BUILD_SCRIPT, BIN_DIR_ENV)


def module_dir() -> Path:
    return go_module_dir(MODULE, pinned_versions()["KUEUE_VERSION"])


# --- certificates -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServingCert:
    directory: Path
    """Holds tls.crt and tls.key (controller-runtime's webhook server reads them by these names)."""
    ca_pem: bytes


def _load_ca(cluster: LocalKubeCluster) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca = x509.load_pem_x509_certificate((cluster.pki / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((cluster.pki / "ca.key").read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return ca, key


def _write_pair(directory: Path, cluster: LocalKubeCluster, common_name: str) -> None:
    ca = _load_ca(cluster)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(_name(common_name), key, ca, usage=ExtendedKeyUsageOID.SERVER_AUTH,
                  sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file = directory / "tls.key"
    key_file.write_bytes(_pem_key(key))
    key_file.chmod(0o600)


def write_serving_cert(cluster: LocalKubeCluster, directory: Path) -> ServingCert:
    _write_pair(directory, cluster, "kueue-webhook")
    return ServingCert(directory, (cluster.pki / "ca.crt").read_bytes())


def ensure_metrics_cert(cluster: LocalKubeCluster) -> None:
    """Kueue refuses to start without a readable pair at METRICS_CERT_DIR (module docstring)."""
    if (METRICS_CERT_DIR / "tls.crt").is_file() and (METRICS_CERT_DIR / "tls.key").is_file():
        return
    try:
        _write_pair(METRICS_CERT_DIR, cluster, "kueue-metrics-unused")
    except OSError as exc:
        raise RuntimeError(f"Kueue {pinned_versions()['KUEUE_VERSION']} reads a certificate from "
                           f"{METRICS_CERT_DIR} and it cannot be written here ({exc}); create that folder "
                           "writable for this user") from exc


# --- what is registered with the apiserver --------------------------------------------------------


def _kueue_group(webhook: dict[str, Any]) -> bool:
    return any(group.endswith("kueue.x-k8s.io") for rule in webhook.get("rules") or []
               for group in rule.get("apiGroups") or [])


def _pods(webhook: dict[str, Any]) -> bool:
    return any("pods" in (rule.get("resources") or []) and "" in (rule.get("apiGroups") or [])
               for rule in webhook.get("rules") or [])


def _jobs(webhook: dict[str, Any]) -> bool:
    return any("jobs" in (rule.get("resources") or []) and "batch" in (rule.get("apiGroups") or [])
               for rule in webhook.get("rules") or [])


def webhook_configurations(manifests: Path, port: int, ca_pem: bytes,
                           frameworks: Sequence[str] = DEFAULT_FRAMEWORKS) -> list[dict[str, Any]]:
    """Kueue's own Mutating and ValidatingWebhookConfigurations, kept to its API group's webhooks and
    those of the integrations in `frameworks` ("pod", "batch/job"), calling 127.0.0.1:<port> with our
    CA; the Pod and Job webhooks only for MANAGED_LABEL namespaces."""
    bundle = base64.b64encode(ca_pem).decode()
    framework_of = {"pod": _pods, "batch/job": _jobs}
    wanted = [framework_of[f] for f in frameworks if f in framework_of]
    out = []
    for doc in yaml.safe_load_all(manifests.read_text()):
        if not doc or doc.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        kept = []
        for webhook in doc.get("webhooks") or []:
            integration = any(kind(webhook) for kind in wanted)
            if not (_kueue_group(webhook) or integration):
                continue
            path = webhook["clientConfig"]["service"]["path"]
            webhook = {**webhook, "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}}
            if integration:
                webhook["namespaceSelector"] = {"matchLabels": {MANAGED_LABEL: "true"}}
            kept.append(webhook)
        name = MUTATING if doc["kind"] == "MutatingWebhookConfiguration" else VALIDATING
        out.append({"apiVersion": doc["apiVersion"], "kind": doc["kind"], "metadata": {"name": name},
                    "webhooks": kept})
    return out


def _unregister(api: client.ApiClient) -> None:
    admission = client.AdmissionregistrationV1Api(api)
    with contextlib.suppress(ApiException):
        admission.delete_mutating_webhook_configuration(MUTATING)
    with contextlib.suppress(ApiException):
        admission.delete_validating_webhook_configuration(VALIDATING)


def configuration(webhook_port: int, cert_dir: Path,
                  frameworks: Sequence[str] = DEFAULT_FRAMEWORKS) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for the local stack."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": "0"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "managedJobsNamespaceSelector": {"matchLabels": {MANAGED_LABEL: "true"}},
        "integrations": {"frameworks": list(frameworks)},
        "clientConnection": {"qps": 50, "burst": 100},
    }


def apply_identity(api: client.ApiClient) -> None:
    """Kueue's namespace and ServiceAccount, bound to its module's manager roles: the ClusterRole
    (config/components/rbac/role.yaml) and the Role on Secrets in its own namespace
    (manager_secrets_role.yaml: its cache watches them even with internal certificates off)."""
    rbac_dir = module_dir() / "config/components/rbac"
    role = yaml.safe_load((rbac_dir / "role.yaml").read_text())
    role["metadata"] = {"name": CLUSTER_ROLE}
    secrets = yaml.safe_load((rbac_dir / "manager_secrets_role.yaml").read_text())
    secrets["metadata"] = {"name": CLUSTER_ROLE, "namespace": NAMESPACE}
    subjects = [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]
    rbac_v1 = "rbac.authorization.k8s.io/v1"
    binding = {"apiVersion": rbac_v1, "kind": "ClusterRoleBinding", "metadata": {"name": CLUSTER_ROLE},
               "subjects": subjects,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE}}
    role_binding = {"apiVersion": rbac_v1, "kind": "RoleBinding",
                    "metadata": {"name": CLUSTER_ROLE, "namespace": NAMESPACE}, "subjects": subjects,
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CLUSTER_ROLE}}
    # Applied: a cluster kept from an older pin gets this pin's rules.
    apply_objects(api, [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}},
        role, binding, secrets, role_binding])


# --- the process --------------------------------------------------------------------------------


def _webhook_answers(port: int, ca_pem: bytes) -> bool:
    """Any HTTP answer over TLS verified against our CA (an empty POST gets a 4xx or an AdmissionReview)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    request = urllib.request.Request(f"https://127.0.0.1:{port}/mutate--v1-pod", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=2, context=context):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False


class KueueProcess:
    """The Kueue controller against `cluster`, files under `workdir`, its log in `log_dir/kueue.log`."""

    def __init__(self, cluster: LocalKubeCluster, workdir: Path, log_dir: Path, *,
                 frameworks: Sequence[str] = DEFAULT_FRAMEWORKS) -> None:
        self.cluster = cluster
        self.frameworks = tuple(frameworks)
        self.workdir = Path(workdir)
        self.log_dir = Path(log_dir)
        self.port = free_port()
        self.cert: ServingCert | None = None
        self.process: ManagedProcess | None = None

    def start(self, timeout: float = 120.0) -> KueueProcess:
        api = self.cluster.api_client()
        try:
            apply_identity(api)
            token = identities.request_token(api, NAMESPACE, SERVICE_ACCOUNT)
            ensure_metrics_cert(self.cluster)
            self.cert = write_serving_cert(self.cluster, self.workdir / "webhook-certs")
            config_file = self.workdir / "kueue-config.yaml"
            config_file.write_text(yaml.safe_dump(configuration(self.port, self.cert.directory, self.frameworks)))
            kubeconfig = identities.write_kubeconfig(self.workdir / "kueue.kubeconfig", self.cluster,
                                                     SERVICE_ACCOUNT, token, NAMESPACE)
            self.process = ManagedProcess(
                "kueue", [kueue_binary(), f"--config={config_file}", "--feature-gates=VisibilityOnDemand=false",
                          "--zap-log-level=2"],
                self.log_dir, env={"KUBECONFIG": str(kubeconfig)})
            self.process.start()
            self.process.wait_ready(lambda: _webhook_answers(self.port, self.cert.ca_pem)  # type: ignore[union-attr]
                                    and STARTED_LOG in self._log(), timeout)
            apply_objects(api, webhook_configurations(module_dir() / "config/components/webhook/manifests.yaml",
                                                      self.port, self.cert.ca_pem, self.frameworks))
        except BaseException:
            self.stop()
            raise
        finally:
            api.close()  # type: ignore[no-untyped-call]
        return self

    def _log(self) -> str:
        try:
            return (self.log_dir / "kueue.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Unregister the webhooks first: with Kueue gone a registered failurePolicy=Fail webhook would
        refuse every create it selects."""
        api = self.cluster.api_client()
        try:
            _unregister(api)
        finally:
            api.close()  # type: ignore[no-untyped-call]
        if self.process is not None:
            self.process.stop()


def label_namespace(api: client.ApiClient, namespace: str) -> None:
    """Create `namespace` (if missing) labelled so Kueue manages it."""
    apply_objects(api, [{"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": namespace, "labels": {MANAGED_LABEL: "true"}}}])
