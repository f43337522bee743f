"""The model admission webhook on the local stack: a process of the project serving HTTPS on loopback, and its
registration with the local apiserver.

In a cluster the chart runs the webhook as a Deployment behind a Service and registers it with a
MutatingWebhookConfiguration naming that Service (deploy/chart/templates/webhook.yaml). Here the webhook is a
local process under the chart's `webhook` ServiceAccount (devstack/identities.py), its serving certificate is
made here (a CA of its own and a certificate for 127.0.0.1), and the configuration registered is the chart's
own, rendered with helm, with each `clientConfig` pointing at `https://127.0.0.1:<port>/mutate` instead of the
Service: the rules, matchConditions and failure policy the apiserver applies are exactly what an operator
installs.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import ssl
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack import identities
from devstack.kube import REPO_ROOT
from devstack.process import ManagedProcess, free_port, http_ok
from servingops.ingress.model_webhook import HEALTH_PATH, MUTATE_PATH


@dataclass(frozen=True)
class ServingCert:
    ca_pem: bytes
    cert_file: Path
    key_file: Path

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()

    def client_context(self) -> ssl.SSLContext:
        """What a client that trusts only this CA uses (the readiness probe)."""
        return ssl.create_default_context(cadata=self.ca_pem.decode())


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None,
                 issuer_key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (x509.CertificateBuilder().subject_name(name)
               .issuer_name(issuer.subject if issuer else name).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=365))
               .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True))
    if issuer is not None:
        builder = (builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                               x509.DNSName("localhost")]), critical=False))
    return builder.sign(issuer_key, hashes.SHA256())


def write_serving_cert(directory: Path) -> ServingCert:
    """A CA and a serving certificate for 127.0.0.1 signed by it (ECDSA P-256), the key readable by us only."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("servingops-webhook-local-ca", ca_key, None, ca_key)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate("servingops-webhook", key, ca, ca_key)
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    return ServingCert(ca.public_bytes(serialization.Encoding.PEM), cert_file, key_file)


def configuration(name: str, url: str, ca_bundle: str,
                  namespace_selector: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration, named `name`, calling `url` (…/mutate) with `ca_bundle`; a
    `namespace_selector` narrows it further (a test keeps it to its own namespaces)."""
    values = identities.local_values(webhook={"enabled": True, "tls": {"secretName": "unused", "caBundle": ca_bundle}})
    [config] = [d for d in identities.render(values=values) if d["kind"] == "MutatingWebhookConfiguration"]
    config["metadata"] = {"name": name, "labels": config["metadata"].get("labels", {})}
    for webhook in config["webhooks"]:
        webhook["clientConfig"] = {"url": url, "caBundle": ca_bundle}
        if namespace_selector is not None:
            webhook["namespaceSelector"] = dict(namespace_selector)
    return config


def register(api: client.ApiClient, config: Mapping[str, Any]) -> None:
    """Create the configuration, or replace one of the same name."""
    admission = client.AdmissionregistrationV1Api(api)
    name = config["metadata"]["name"]
    try:
        admission.create_mutating_webhook_configuration(dict(config))
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = admission.read_mutating_webhook_configuration(name)
        body = {**config, "metadata": {**config["metadata"], "resourceVersion": current.metadata.resource_version}}
        admission.replace_mutating_webhook_configuration(name, body)


def unregister(api: client.ApiClient, name: str) -> None:
    with contextlib.suppress(ApiException):
        client.AdmissionregistrationV1Api(api).delete_mutating_webhook_configuration(name)


class WebhookProcess:
    """`servingops webhook` on 127.0.0.1 under the given identity, with a serving certificate of its own."""

    def __init__(self, kubeconfig: Path, workdir: Path, log_dir: Path, *, registry: str,
                 repository: str = "servingops/models", port: int | None = None) -> None:
        self.cert = write_serving_cert(workdir / "webhook-tls")
        self.port = port or free_port()
        self.process = ManagedProcess(
            "webhook",
            [sys.executable, "-m", "servingops.ingress.model_webhook", "--listen", f"127.0.0.1:{self.port}",
             "--tls-cert", str(self.cert.cert_file), "--tls-key", str(self.cert.key_file),
             "--registry", registry, "--registry-repository", repository],
            log_dir, env={"KUBECONFIG": str(kubeconfig)}, cwd=REPO_ROOT)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{MUTATE_PATH}"

    def start(self, timeout: float = 60) -> WebhookProcess:
        self.process.start()
        context = self.cert.client_context()
        self.process.wait_ready(lambda: http_ok(f"https://127.0.0.1:{self.port}{HEALTH_PATH}", ssl_context=context),
                                timeout)
        return self

    def stop(self) -> None:
        self.process.stop()

    def configuration(self, name: str, namespace_selector: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return configuration(name, self.url, self.cert.ca_bundle, namespace_selector)


@contextlib.contextmanager
def running(api: client.ApiClient, kubeconfig: Path, workdir: Path, log_dir: Path, *, registry: str,
            name: str = "servingops-webhook-local",
            namespace_selector: Mapping[str, Any] | None = None) -> Iterator[WebhookProcess]:
    """The webhook process, registered with the apiserver for as long as the block runs."""
    webhook = WebhookProcess(kubeconfig, workdir, log_dir, registry=registry).start()
    try:
        register(api, webhook.configuration(name, namespace_selector))
        yield webhook
    finally:
        unregister(api, name)
        webhook.stop()
