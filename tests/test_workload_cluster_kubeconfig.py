"""A member's kubeconfig as the health probe and placement read it (activities/workload_cluster/
kubeconfig.py): inline credentials only, and no message that repeats a value from the text. The
probe against real apiservers is tests/test_workload_cluster_e2e.py (a token, a client certificate)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from servingops.activities.workload_cluster.kubeconfig import (
    KubeConfigError,
    parse_kubeconfig,
    secret_location,
)

pytestmark = pytest.mark.unit

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
SECRET = "s3cr3t-token-value"


def kubeconfig(user: dict[str, Any], cluster: dict[str, Any] | None = None, current: str | None = "m") -> str:
    config: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://10.0.0.1:6443",
                                                           "certificate-authority-data": CA}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "m", "context": {"cluster": "c", "user": "u"}}],
    }
    if current:
        config["current-context"] = current
    return yaml.safe_dump(config)


def test_a_token_kubeconfig_parses_and_a_single_context_needs_no_current_context() -> None:
    access = parse_kubeconfig(kubeconfig({"token": SECRET}, current=None))
    assert access.server == "https://10.0.0.1:6443" and access.token == SECRET
    assert access.ca_pem is not None and access.ca_pem.startswith("-----BEGIN CERTIFICATE-----")
    assert SECRET not in repr(access)


@pytest.mark.parametrize(("user", "cluster", "says"), [
    ({"exec": {"command": "/bin/sh", "args": ["-c", SECRET]}}, None, "user.exec: exec plugins"),
    ({"auth-provider": {"name": "oidc", "config": {"id-token": SECRET}}}, None, "user.auth-provider"),
    ({"tokenFile": f"/var/run/{SECRET}"}, None, "user.tokenFile"),
    ({"client-certificate": f"/etc/{SECRET}.crt", "client-key": "/etc/k"}, None, "user.client-certificate"),
    ({"username": "admin", "password": SECRET}, None, "basic auth"),
    ({}, None, "has no credentials"),
    ({"client-certificate-data": CA}, None, "go together"),
    ({"token": SECRET}, {"server": "https://10.0.0.1", "certificate-authority": f"/etc/{SECRET}"},
     "certificate-authority is a path"),
    ({"token": SECRET}, {"server": f"ftp://{SECRET}"}, "cluster.server must be"),
    ({"token": SECRET}, {"server": "https://10.0.0.1", "certificate-authority-data": base64.b64encode(
        SECRET.encode()).decode()}, "is not PEM"),
])
def test_what_a_worker_will_not_do_is_refused_without_repeating_a_value(
        user: dict[str, Any], cluster: dict[str, Any] | None, says: str) -> None:
    with pytest.raises(KubeConfigError) as refused:
        parse_kubeconfig(kubeconfig(user, cluster))
    assert says in str(refused.value)
    assert SECRET not in str(refused.value)


def test_yaml_errors_say_where_not_what() -> None:
    with pytest.raises(KubeConfigError) as refused:
        parse_kubeconfig(f"users: [{{token: {SECRET}\n")
    assert "not YAML (line" in str(refused.value) and SECRET not in str(refused.value)


def test_a_context_naming_a_missing_cluster_is_refused() -> None:
    with pytest.raises(KubeConfigError, match="no cluster named by its current context"):
        parse_kubeconfig(kubeconfig({"token": SECRET}).replace("cluster: c", "cluster: gone"))


def test_the_secret_location_defaults() -> None:
    spec = {"clusterSource": {"kubeConfig": {"secretRef": {"name": "m"}}}}
    found = secret_location(spec, "servingops-system")
    assert found is not None and (found.namespace, found.name, found.key) == ("servingops-system", "m", "kubeconfig")
    spec = {"clusterSource": {"kubeConfig": {"secretRef": {"name": "m", "namespace": "fleet"}, "key": "k"}}}
    found = secret_location(spec, "servingops-system")
    assert found is not None and (found.namespace, found.key) == ("fleet", "k")
    assert secret_location({"clusterSource": {"clusterProfileRef": {"name": "p"}}}, "x") is None
