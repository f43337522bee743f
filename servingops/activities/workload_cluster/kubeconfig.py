"""A member cluster's kubeconfig, read from its Secret, turned into an ApiClient in memory.

Why not `kubernetes.config.load_kube_config_from_dict`: it runs `exec` plugins and auth-provider
refreshes named by the kubeconfig (a command chosen by whoever can write the Secret, run inside
the worker), reads files from the worker's disk, and writes inline certificates and keys to
temporary files. A member's kubeconfig is data from a Secret, so only inline credentials are
accepted: a bearer token, or a client certificate and key. The client key reaches the TLS
library through an anonymous in-memory file (memfd), never a path on disk.

Every error message names the field that is wrong, never its value, and never echoes the text:
the message lands in status, Events and workflow history.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
from dataclasses import dataclass
from typing import Any

import urllib3
import yaml
from kubernetes import client

UNSUPPORTED_USER_FIELDS = {
    "exec": "exec plugins (a command the worker would run)",
    "auth-provider": "auth-provider plugins",
    "tokenFile": "tokenFile (a path on the worker's disk)",
    "client-certificate": "client-certificate as a path (use client-certificate-data)",
    "client-key": "client-key as a path (use client-key-data)",
    "username": "username/password (basic auth, removed from Kubernetes in 1.19)",
    "password": "username/password (basic auth, removed from Kubernetes in 1.19)",
}


DEFAULT_KEY = "kubeconfig"


@dataclass(frozen=True)
class SecretLocation:
    """Where a WorkloadCluster's kubeconfig is: Secret `namespace`/`name`, data key `key`."""

    namespace: str
    name: str
    key: str


def secret_location(spec: dict[str, Any], controller_namespace: str) -> SecretLocation | None:
    """From a WorkloadCluster's spec: None when it names no kubeconfig Secret. A secretRef without
    a namespace means the controller namespace (as Kueue's MultiKueue reads kubeconfig Secrets from
    its own namespace); the key defaults to "kubeconfig" (the seed's default)."""
    kube_config = (spec.get("clusterSource") or {}).get("kubeConfig") or {}
    secret_ref = kube_config.get("secretRef") or {}
    if not secret_ref.get("name"):
        return None
    return SecretLocation(namespace=secret_ref.get("namespace") or controller_namespace, name=secret_ref["name"],
                          key=kube_config.get("key") or DEFAULT_KEY)


class KubeConfigError(ValueError):
    """The kubeconfig cannot be used; the message is safe to show (no value from the text)."""


@dataclass(frozen=True, repr=False)
class MemberAccess:
    """How to reach one member's apiserver and who to be there. Holds credentials: lives only in
    the activity's memory (repr=False keeps it out of logs and tracebacks)."""

    server: str
    ca_pem: str | None
    insecure: bool
    tls_server_name: str | None
    token: str | None
    client_cert_pem: bytes | None
    client_key_pem: bytes | None


def _named(entries: Any, name: str, what: str) -> dict[str, Any]:
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get(what), dict):
            return dict(entry[what])
    raise KubeConfigError(f"the kubeconfig has no {what} named by its current context")


def _pem(field: str, value: Any) -> bytes:
    if not isinstance(value, str):
        raise KubeConfigError(f"{field} must be a base64 string")
    try:
        data = base64.b64decode(value, validate=False)
    except (binascii.Error, ValueError):
        raise KubeConfigError(f"{field} is not base64") from None
    if b"-----BEGIN" not in data:
        raise KubeConfigError(f"{field} is not PEM once base64-decoded")
    return data


def parse_kubeconfig(text: str) -> MemberAccess:
    """The current context's cluster and user, inline credentials only."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # yaml's own message quotes the offending line: keep only where it is.
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise KubeConfigError(f"the kubeconfig is not YAML{where}") from None
    if not isinstance(config, dict):
        raise KubeConfigError("the kubeconfig is not a YAML mapping")
    contexts = config.get("contexts") or []
    current = config.get("current-context")
    if not current:
        if len(contexts) != 1 or not isinstance(contexts[0], dict):
            raise KubeConfigError("the kubeconfig has no current-context (and not exactly one context)")
        current = contexts[0].get("name")
    context = _named(contexts, str(current), "context")
    cluster = _named(config.get("clusters"), str(context.get("cluster", "")), "cluster")
    user = _named(config.get("users"), str(context.get("user", "")), "user") if context.get("user") else {}

    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise KubeConfigError("cluster.server must be an http(s) URL")
    if cluster.get("certificate-authority"):
        raise KubeConfigError("cluster.certificate-authority is a path on the worker's disk: "
                              "use certificate-authority-data")
    if cluster.get("proxy-url"):
        raise KubeConfigError("cluster.proxy-url is not supported")
    ca = cluster.get("certificate-authority-data")
    for field, why in UNSUPPORTED_USER_FIELDS.items():
        if user.get(field):
            raise KubeConfigError(f"user.{field}: {why} is not supported; put a token or "
                                  "client-certificate-data and client-key-data in the kubeconfig")
    token = user.get("token")
    if token is not None and not isinstance(token, str):
        raise KubeConfigError("user.token must be a string")
    cert, key = user.get("client-certificate-data"), user.get("client-key-data")
    if bool(cert) != bool(key):
        raise KubeConfigError("user.client-certificate-data and user.client-key-data go together")
    if not token and not cert:
        raise KubeConfigError("the kubeconfig's user has no credentials (token, or client-certificate-data "
                              "and client-key-data)")
    return MemberAccess(
        server=server.rstrip("/"),
        ca_pem=_pem("cluster.certificate-authority-data", ca).decode() if ca else None,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name") or None,
        token=token or None,
        client_cert_pem=_pem("user.client-certificate-data", cert) if cert else None,
        client_key_pem=_pem("user.client-key-data", key) if key else None,
    )


def _client_cert_context(access: MemberAccess) -> ssl.SSLContext:
    """An SSLContext holding the client certificate and key, loaded from an anonymous memory file
    (the ssl module takes a chain from a path only; a memfd has no place on any filesystem)."""
    assert access.client_cert_pem is not None and access.client_key_pem is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # urllib3 sets verify_mode from cert_reqs and matches the hostname itself.
    context.check_hostname = False
    if access.ca_pem is None and not access.insecure:
        context.load_default_certs()  # as the client does without certificate-authority-data
    fd = os.memfd_create("member-client-credentials", os.MFD_CLOEXEC)
    try:
        os.write(fd, access.client_cert_pem + b"\n" + access.client_key_pem)
        try:
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        except ssl.SSLError:
            raise KubeConfigError("user.client-certificate-data and client-key-data do not load as a "
                                  "certificate and its (unencrypted) key") from None
    finally:
        os.close(fd)
    return context


def api_client(access: MemberAccess) -> client.ApiClient:
    """An ApiClient for the member. No retries: a probe that fails is an answer, and the workflow
    probes again on its interval."""
    configuration = client.Configuration(host=access.server)
    configuration.verify_ssl = not access.insecure
    configuration.ca_cert_data = access.ca_pem
    configuration.tls_server_name = access.tls_server_name
    configuration.retries = False
    if access.token:
        configuration.api_key = {"authorization": access.token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    api = client.ApiClient(configuration)
    if access.client_cert_pem is not None:
        pool: dict[str, Any] = {
            "ssl_context": _client_cert_context(access),
            "cert_reqs": ssl.CERT_NONE if access.insecure else ssl.CERT_REQUIRED,
            "ca_cert_data": access.ca_pem,
            "retries": False,
        }
        if access.tls_server_name:
            pool["server_hostname"] = access.tls_server_name
        api.rest_client.pool_manager = urllib3.PoolManager(**pool)
    return api


__all__ = ["DEFAULT_KEY", "KubeConfigError", "MemberAccess", "SecretLocation", "api_client", "parse_kubeconfig",
           "secret_location"]
