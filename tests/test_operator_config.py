"""The operator ConfigMap: its schema (typos and bad durations are errors, not "unset"), the shipped
manifest, and the operator.config activity against the real apiserver."""

from __future__ import annotations

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from devstack import identities
from servingops.activities.operator_config import OperatorConfigActivities
from servingops.api_models.operator_config import (
    DEFAULT_CONFIGMAP,
    OperatorConfig,
    OperatorConfigError,
    OperatorDefaults,
    PrometheusSource,
    parse_configmap_data,
    resolve,
)
from servingops.api_models.refs import ObjectRef
from tests.crd_helpers import new_namespace

PROVIDERS = """
tenant-a:
  serverAddress: http://mimir.monitoring.svc/prometheus
  authSecretRef: {name: mimir-reader, key: reader-token}
  headers: {X-Scope-OrgID: tenant-a}
bundled:
  serverAddress: http://prometheus.monitoring.svc:9090
"""


@pytest.mark.unit
def test_the_shipped_configmap_parses_to_the_built_in_defaults() -> None:
    # The chart's ConfigMap as `helm template` renders it with the chart's default values.
    [body] = [d for d in identities.render() if d["kind"] == "ConfigMap" and d["metadata"]["name"] == DEFAULT_CONFIGMAP]
    config = parse_configmap_data(body["data"])
    assert config.rollout == OperatorConfig().rollout
    assert config.canary_analysis.bundled_prometheus_address == "http://prometheus.monitoring.svc:9090"
    assert config.metric_providers == {}


@pytest.mark.unit
def test_blocks_parse_and_resolve() -> None:
    config = parse_configmap_data({"rollout": "stallTimeout: 90s\nreadyTimeout: 1h30m\n",
                                   "metricProviders": PROVIDERS})
    defaults = resolve(config, "servingops-system", source="servingops-system/servingops-config")
    assert (defaults.stall_timeout, defaults.ready_timeout, defaults.scale_down_delay_seconds) == ("90s", "1h30m", 30)
    assert defaults.default_source is None  # no bundled address: a canary without a source reads inconclusive
    tenant = defaults.metric_providers["tenant-a"]
    assert tenant == PrometheusSource(
        address="http://mimir.monitoring.svc/prometheus", headers={"X-Scope-OrgID": "tenant-a"},
        auth_key="reader-token",
        auth_secret=ObjectRef(group="", version="v1", plural="secrets", kind="Secret", name="mimir-reader",
                              namespace="servingops-system"))
    assert defaults.metric_providers["bundled"].auth_secret is None


@pytest.mark.unit
@pytest.mark.parametrize(("data", "expected"), [
    ({"rolout": "stallTimeout: 1m"}, "unknown key 'rolout'"),
    ({"rollout": "stalTimeout: 1m"}, "rollout.stalTimeout: Extra inputs are not permitted"),
    ({"rollout": "stallTimeout: soon"}, "rollout.stallTimeout: Value error, invalid duration 'soon'"),
    ({"rollout": "readyTimeout: 0s"}, "must be a positive duration"),
    ({"rollout": "scaleDownDelaySeconds: -1"}, "rollout.scaleDownDelaySeconds: Input should be greater than"),
    ({"rollout": "stallTimeout: [1m"}, "rollout: not YAML"),
    ({"metricProviders": "tenant-a: {headers: {}}"}, "metricProviders.tenant-a.serverAddress: Field required"),
    ({"metricProviders": "tenant-a: {serverAddress: http://x, authSecretRef: {key: k}}"},
     "metricProviders.tenant-a.authSecretRef.name: Field required"),
    # Credentials belong in authSecretRef: the same rule as admission applies to a canary's headers.
    ({"metricProviders": "tenant-a: {serverAddress: http://x, headers: {X-Scope-OrgID: a, Authorization: Bearer t}}"},
     "metricProviders.tenant-a.headers: Value error, headers Authorization carry credentials: put the token in a "
     "Secret and name it in authSecretRef"),
    ({"metricProviders": "tenant-a: {serverAddress: http://x, headers: {Cookie: s=1, X-Api-Key: k}}"},
     "headers Cookie, X-Api-Key carry credentials"),
    ({"metricProviders": "tenant-a: {serverAddress: http://x, headers: {X-Forwarded: Basic dTpw}}"},
     "headers X-Forwarded carry credentials"),
    ({"metricProviders": "tenant-a: {serverAddress: 'https://reader:pw@mimir'}"},
     "metricProviders.tenant-a.serverAddress: Value error, serverAddress must not carry credentials"),
    ({"canaryAnalysis": "bundledPrometheusAddress: 'http://u:p@prometheus:9090'"},
     "bundledPrometheusAddress must not carry credentials"),
])
def test_bad_configuration_is_named(data: dict[str, str], expected: str) -> None:
    with pytest.raises(OperatorConfigError) as info:
        parse_configmap_data(data)
    assert expected in str(info.value)


@pytest.mark.integration
def test_activity_reads_the_configmap(kube_api: client.ApiClient) -> None:
    ns = new_namespace(kube_api, "operator-config")
    core = client.CoreV1Api(kube_api)
    acts = OperatorConfigActivities(kube_api, ns, "servingops-config")
    environment = ActivityEnvironment()

    missing = environment.run(acts.read)
    assert missing == resolve(OperatorConfig(), ns) and missing.error is None

    core.create_namespaced_config_map(ns, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="servingops-config"),
        data={"rollout": "stallTimeout: 8s\n", "canaryAnalysis": "bundledPrometheusAddress: http://p:9090\n",
              "metricProviders": PROVIDERS}))
    read = environment.run(acts.read)
    assert isinstance(read, OperatorDefaults) and read.error is None
    assert read.stall_timeout == "8s" and read.source == f"{ns}/servingops-config"
    assert read.default_source == PrometheusSource(address="http://p:9090")
    provider_secret = read.metric_providers["tenant-a"].auth_secret
    assert provider_secret is not None and provider_secret.namespace == ns  # the controller namespace

    core.patch_namespaced_config_map("servingops-config", ns, {"data": {"rollout": "stallTimeout: whenever\n"}})
    broken = environment.run(acts.read)
    assert broken.error is not None and f"ConfigMap {ns}/servingops-config" in broken.error
    assert "stallTimeout" in broken.error
