"""deploy/chart: `helm lint`, rendered with every value that changes what it writes, and installed,
upgraded and uninstalled on the local cluster with the pinned helm (kwok makes the pods Ready).

The session's cluster already has the chart installed (tests/fixtures/kube.py); the processes
of the end-to-end tests run as its identities."""

from __future__ import annotations

import argparse
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack import identities
from devstack.kube import LocalKubeCluster
from servingops.api_models.crdgen import render as render_crd
from servingops.api_models.operator_config import DEFAULT_CONFIGMAP, parse_configmap_data
from servingops.api_models.registry import served_kinds
from servingops.crd_bridge.main import add_arguments as bridge_arguments
from servingops.ingress.catalog_endpoint import add_arguments as catalog_endpoint_arguments
from servingops.ingress.catalog_endpoint import from_arguments as catalog_endpoint_settings
from servingops.workers.settings import add_arguments as worker_arguments
from servingops.workers.settings import from_arguments as worker_settings
from testkit.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parent.parent
PRODUCT_SOURCES = [REPO_ROOT / "servingops" / d for d in ("workers", "crd_bridge", "runtime", "ingress", "activities")]

LIBRARY_VARIABLES = {"OTEL_EXPORTER_OTLP_INSECURE", "HOME"}
"""Read by opentelemetry's OTLP exporter, and by every library that keeps a cache under $HOME."""

IMAGE = {"repository": "registry.example/servingops/servingops", "tag": "0.1.0-0123456789ab",
         "digest": "sha256:" + "0" * 64}
USER_DEFAULTS: dict[str, Any] = {"image": {"repository": IMAGE["repository"]}}
"""The defaults as a user installs them: the one value without a default, where the image was pushed."""

FULL_VALUES: dict[str, Any] = {
    "image": IMAGE,
    "namespace": {"create": True},
    "temporal": {"address": "temporal.example:7233", "namespace": "prod", "taskQueue": "q",
                 "tls": {"enabled": True, "secretName": "temporal-client", "serverName": "temporal.example"}},
    "registry": {"address": "registry.example:5000", "repository": "models", "insecure": False,
                 "credentials": {"create": True, "username": "pusher", "password": "s3cret"}},
    "otlp": {"endpoint": "http://otel-collector.observability:4317"},
    "operatorConfig": {"rollout": {"readyTimeout": "5m", "stallTimeout": "15m", "scaleDownDelaySeconds": 10},
                       "canaryAnalysis": {"bundledPrometheusAddress": "http://prom:9090"},
                       "metricProviders": {"tenant-a": {"serverAddress": "http://mimir/prometheus",
                                                        "authSecretRef": {"name": "mimir", "key": "token"}}},
                       "ingress": {"omeIngressGateway": "gateways/public", "ingressDomain": "models.example.com",
                                   "domainTemplate": "{{ .Name }}-{{ .Namespace }}.{{ .IngressDomain }}",
                                   "urlScheme": "https"}},
    "rbac": {"secretNamespaces": ["team-a", "team-b"]},
}
"""A value for every switch the templates have."""

CATALOG_VALUES: dict[str, Any] = {
    "image": IMAGE,
    "registry": {"address": "registry.example:5000", "repository": "models"},
    "catalogEndpoint": {"enabled": True, "tls": {"secretName": "catalog-tls"}, "signingKeySecretName": "catalog-key",
                        "labelSelector": "catalog=public", "clientsSecretName": "peers", "grantTTLSeconds": 600},
}
"""The catalog endpoint on (it is off by default), with every switch of its own."""


def _by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    [container] = workload["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "<from field>") for e in container.get("env") or []}


# -- lint and render ---------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("values", [USER_DEFAULTS, FULL_VALUES, CATALOG_VALUES],
                         ids=["defaults", "every-switch", "catalog"])
def test_helm_lint_strict(values: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    out = identities.helm("lint", "--strict", str(identities.CHART), "--values", str(path))
    assert "1 chart(s) linted, 0 chart(s) failed" in out, out


@pytest.mark.unit
def test_the_image_is_where_the_user_pushed_it_and_has_no_default() -> None:
    """No registry of ours is a default a user's cluster would try to pull from: an install that names no
    repository is refused with what to set; one that does runs exactly the pushed image (by digest when given)."""
    with pytest.raises(RuntimeError, match=r"image.repository: the registry and repository you pushed"):
        identities.helm("template", "servingops", str(identities.CHART))
    defaults = yaml.safe_load((identities.CHART / "values.yaml").read_text())["image"]
    assert defaults == {"repository": "", "tag": "", "digest": "", "pullPolicy": "IfNotPresent"}
    chart = yaml.safe_load((identities.CHART / "Chart.yaml").read_text())
    worker = _container(_one(identities.render(values=USER_DEFAULTS), "StatefulSet", "servingops-worker"))
    assert worker["image"] == f"{IMAGE['repository']}:{chart['appVersion']}"
    for doc in identities.render(values=FULL_VALUES):
        if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            assert _container(doc)["image"] == f"{IMAGE['repository']}:{IMAGE['tag']}@{IMAGE['digest']}"


@pytest.mark.unit
def test_the_chart_ships_the_generated_crds_and_no_other() -> None:
    """crds/ is deploy/crds (a link): what helm installs is what `servingops crds` generates."""
    rendered = identities.render(values=USER_DEFAULTS, extra_args=["--include-crds"])
    shipped = {doc["metadata"]["name"]: doc for doc in rendered if doc["kind"] == "CustomResourceDefinition"}
    generated = {doc["metadata"]["name"]: doc for doc in (yaml.safe_load(render_crd(kind)) for kind in served_kinds())}
    assert shipped == generated


@pytest.mark.unit
def test_every_flag_and_variable_the_chart_sets_is_read_by_its_process() -> None:
    docs = identities.render("servingops", "servingops-system", FULL_VALUES)
    worker = _container(_one(docs, "StatefulSet", "servingops-worker"))
    bridge = _container(_one(docs, "Deployment", "servingops-bridge"))
    assert worker["args"][0] == "worker" and bridge["args"][0] == "bridge"
    for container, add in ((worker, worker_arguments), (bridge, bridge_arguments)):
        parser = argparse.ArgumentParser(exit_on_error=False)
        add(parser)
        parser.parse_args(container["args"][1:])  # an unknown flag raises
    # Each variable is named in the code that reads it, or is one a library reads by itself.
    code = "\n".join(p.read_text() for d in PRODUCT_SOURCES for p in d.rglob("*.py"))
    for name in (set(_env(worker)) | set(_env(bridge))) - LIBRARY_VARIABLES:
        assert re.search(rf"[\"']{name}[\"']", code), f"nothing reads {name}"


@pytest.mark.unit
def test_the_catalog_endpoint_is_off_by_default_and_reads_what_the_chart_means() -> None:
    assert not [d for d in identities.render(values=USER_DEFAULTS) if "catalog-endpoint" in d["metadata"]["name"]]
    docs = identities.render("servingops", "ops", CATALOG_VALUES)
    deployment = _one(docs, "Deployment", "servingops-catalog-endpoint")
    container = _container(deployment)
    assert container["args"][0] == "catalog-endpoint"
    parser = argparse.ArgumentParser(exit_on_error=False)
    catalog_endpoint_arguments(parser)
    settings = catalog_endpoint_settings(parser.parse_args(container["args"][1:]))  # an unknown flag raises
    assert (settings.namespace, settings.clients_secret, settings.registry, settings.repository) == (
        "ops", "peers", "registry.example:5000", "models")
    assert settings.label_selector == "catalog=public" and settings.grant_ttl.total_seconds() == 600
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes == {"tls": "catalog-tls", "signing": "catalog-key"}
    assert str(settings.cert_file).startswith(mounts["tls"]) and str(settings.signing_key_file).startswith(
        mounts["signing"])
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "servingops-catalog-endpoint"
    service = _one(docs, "Service", "servingops-catalog-endpoint")
    assert service["spec"]["ports"][0]["targetPort"] == "https"
    role = _one(docs, "Role", "servingops-catalog-endpoint")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["peers"],
                              "verbs": ["get"]}]


@pytest.mark.unit
def test_the_worker_reads_what_the_chart_means(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = identities.render("servingops", "ops", FULL_VALUES)
    worker = _container(_one(docs, "StatefulSet", "servingops-worker"))
    for name, value in _env(worker).items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    worker_arguments(parser)
    settings = worker_settings(parser.parse_args(worker["args"][1:]))
    assert settings.controller_namespace == "ops"
    assert settings.operator_config == DEFAULT_CONFIGMAP
    _one(docs, "ConfigMap", settings.operator_config)
    assert settings.registry == "registry.example:5000" and not settings.registry_insecure
    registry_secret = _one(docs, "Secret", str(settings.registry_credentials_secret))
    assert registry_secret["type"] == "kubernetes.io/basic-auth"
    assert registry_secret["stringData"] == {"username": "pusher", "password": "s3cret"}
    assert (settings.temporal.address, settings.temporal.namespace, settings.temporal.task_queue) == (
        "temporal.example:7233", "prod", "q")
    # The upload endpoint's kubeconfig names the token of the uploads ServiceAccount, mounted from its Secret.
    assert settings.upload_kubeconfig == "/etc/servingops/uploads-kubeconfig/config"
    kubeconfig = yaml.safe_load(_one(docs, "ConfigMap", "servingops-uploads-kubeconfig")["data"]["config"])
    token_file = kubeconfig["users"][0]["user"]["tokenFile"]
    mounts = {m["name"]: m["mountPath"] for m in worker["volumeMounts"]}
    pod = _one(docs, "StatefulSet", "servingops-worker")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert token_file == f"{mounts['uploads-token']}/token"
    token_secret = _one(docs, "Secret", volumes["uploads-token"]["secret"]["secretName"])
    assert token_secret["type"] == "kubernetes.io/service-account-token"
    assert token_secret["metadata"]["annotations"]["kubernetes.io/service-account.name"] == "servingops-uploads"


@pytest.mark.unit
def test_values_reach_every_object() -> None:
    docs = identities.render("servingops", "ops", FULL_VALUES)
    assert _one(docs, "Namespace", "ops")
    for kind, name in (("StatefulSet", "servingops-worker"), ("Deployment", "servingops-bridge")):
        workload = _one(docs, kind, name)
        env = _env(_container(workload))
        assert env["TEMPORAL_TLS_CERT"].startswith("/etc/servingops/temporal-tls/")
        assert env["TEMPORAL_TLS_SERVER_NAME"] == "temporal.example"
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4317"
        secrets = {v["secret"]["secretName"] for v in workload["spec"]["template"]["spec"]["volumes"] if "secret" in v}
        assert "temporal-client" in secrets
    bridge = _container(_one(docs, "Deployment", "servingops-bridge"))
    assert "--leader-elect" in bridge["args"] and "--lease-name=servingops-bridge" in bridge["args"]
    assert _one(docs, "Deployment", "servingops-bridge")["spec"]["replicas"] == 2
    config = parse_configmap_data(_one(docs, "ConfigMap", DEFAULT_CONFIGMAP)["data"])
    assert config.rollout.ready_timeout == "5m" and config.metric_providers["tenant-a"].auth_secret_ref is not None
    # The ingress block reaches the ConfigMap as written (a Go template in a value is not templated).
    assert config.ingress.gateway == ("gateways", "public")
    assert config.ingress.url(config.ingress.host("llama", "team-a")) == "https://llama-team-a.models.example.com"
    # secretNamespaces: the worker's Secret rights only there (and in the release namespace).
    secret_bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
                       and d["roleRef"]["name"] == "servingops-worker-secrets"]
    assert sorted((d["kind"], d["metadata"].get("namespace")) for d in secret_bindings) == [
        ("RoleBinding", "ops"), ("RoleBinding", "team-a"), ("RoleBinding", "team-b")]
    services = {d["metadata"]["name"]: d for d in _by_kind(docs, "Service")}
    assert set(services) == {"servingops-worker", "servingops-worker-metrics", "servingops-bridge-metrics",
                             "servingops-webhook", "servingops-admission"}
    assert services["servingops-worker"]["spec"]["clusterIP"] == "None"


@pytest.mark.unit
def test_defaults_render_no_namespace_and_a_cluster_wide_secret_binding() -> None:
    docs = identities.render(values=USER_DEFAULTS)
    assert not _by_kind(docs, "Namespace")  # helm install --create-namespace makes it
    assert _one(docs, "ClusterRoleBinding", "servingops-worker-secrets")
    # (The model webhook's serving certificate is generated: tests/test_model_webhook.py.)
    assert not [d for d in _by_kind(docs, "Secret")
                if d["type"] not in ("kubernetes.io/service-account-token", "kubernetes.io/tls")]


# -- installed ---------------------------------------------------------------------------------------


def _ready(api: client.ApiClient, namespace: str) -> dict[str, tuple[int, int]]:
    apps = client.AppsV1Api(api)
    workloads: list[Any] = [*apps.list_namespaced_stateful_set(namespace).items,
                            *apps.list_namespaced_deployment(namespace).items]
    return {w.metadata.name: (w.spec.replicas, w.status.ready_replicas or 0) for w in workloads}


@pytest.mark.integration
def test_the_session_release_is_deployed_and_ready(kube_cluster: LocalKubeCluster,
                                                   kube_api: client.ApiClient) -> None:
    status = json.loads(identities.helm("status", identities.RELEASE, "--namespace", identities.NAMESPACE,
                                        "--output", "json", kubeconfig=kube_cluster.kubeconfig_path))
    assert status["info"]["status"] == "deployed"
    assert _ready(kube_api, identities.NAMESPACE) == {"servingops-worker": (2, 2), "servingops-bridge": (2, 2)}


@pytest.mark.integration
def test_install_upgrade_and_uninstall_a_second_release(kube_cluster: LocalKubeCluster,
                                                        kube_api: client.ApiClient) -> None:
    release = f"so-{uuid.uuid4().hex[:6]}"
    namespace = release
    values = identities.local_values(worker={"replicas": 1, "spool": {"size": "1Gi"}},
                                     bridge={"replicas": 1}, rbac={"secretNamespaces": ["default"]})
    identities.install(kube_cluster, values, release=release, namespace=namespace)
    assert _ready(kube_api, namespace) == {f"{release}-worker": (1, 1), f"{release}-bridge": (1, 1)}
    rbac = client.RbacAuthorizationV1Api(kube_api)
    assert rbac.read_namespaced_role_binding(f"{release}-worker-secrets", "default").role_ref.name == \
        f"{release}-worker-secrets"

    values["bridge"] = {"replicas": 2}
    identities.install(kube_cluster, values, release=release, namespace=namespace)
    assert _ready(kube_api, namespace)[f"{release}-bridge"] == (2, 2)
    history = json.loads(identities.helm("history", release, "--namespace", namespace, "--output", "json",
                                         kubeconfig=kube_cluster.kubeconfig_path))
    assert [h["revision"] for h in history] == [1, 2] and history[-1]["status"] == "deployed"

    identities.helm("uninstall", release, "--namespace", namespace, "--wait", kubeconfig=kube_cluster.kubeconfig_path)

    def left() -> list[str]:
        return [name for r in rbac.list_cluster_role().items
                if (name := str(r.metadata.name if r.metadata else "")).startswith(release)]

    wait_until("the release's cluster-scoped roles removed", lambda: not left(), timeout=30,
               detail=lambda: f"cluster-scoped roles outlive the release: {left()}")
    with pytest.raises(ApiException) as gone:
        rbac.read_namespaced_role_binding(f"{release}-worker-secrets", "default")
    assert gone.value.status == 404
