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

import contextlib
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack import identities
from devstack.certs import write_serving_cert
from devstack.kube import REPO_ROOT
from devstack.process import ManagedProcess, free_port, http_ok
from servingops.ingress.model_webhook import MUTATE_PATH
from servingops.runtime.review_server import HEALTH_PATH


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


def apply_configuration(api: client.ApiClient, config: Mapping[str, Any], kind: str) -> None:
    """Create a `kind` ("mutating" or "validating") webhook configuration, or replace one of the same name."""
    admission = client.AdmissionregistrationV1Api(api)
    name = config["metadata"]["name"]
    try:
        getattr(admission, f"create_{kind}_webhook_configuration")(dict(config))
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = getattr(admission, f"read_{kind}_webhook_configuration")(name)
        body = {**config, "metadata": {**config["metadata"], "resourceVersion": current.metadata.resource_version}}
        getattr(admission, f"replace_{kind}_webhook_configuration")(name, body)


def delete_configuration(api: client.ApiClient, name: str, kind: str) -> None:
    with contextlib.suppress(ApiException):
        getattr(client.AdmissionregistrationV1Api(api), f"delete_{kind}_webhook_configuration")(name)


def register(api: client.ApiClient, config: Mapping[str, Any]) -> None:
    """Create the configuration, or replace one of the same name."""
    apply_configuration(api, config, "mutating")


def unregister(api: client.ApiClient, name: str) -> None:
    delete_configuration(api, name, "mutating")


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
