"""The operator ConfigMap: its schema (typos and bad durations are errors, not "unset"), the shipped
manifest, the ingress block (upstream OME's names, the domain template) and its cached reader, and
the operator.config activity against the real apiserver."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.testing import ActivityEnvironment

from devstack import identities
from servingops.activities.operator_config import IngressConfigReader, OperatorConfigActivities, QuotaConfigReader
from servingops.api_models.operator_config import (
    DEFAULT_CONFIGMAP,
    HostError,
    IngressConfig,
    OperatorConfig,
    OperatorConfigError,
    OperatorDefaults,
    PrometheusSource,
    parse_configmap_data,
    parse_ingress,
    parse_quota,
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
    assert config.ingress == IngressConfig(), "the chart's ingress values are the model's defaults"


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


# -- the ingress block -----------------------------------------------------------------------------


@pytest.mark.unit
def test_ingress_defaults_attach_to_no_gateway_and_render_upstreams_hosts() -> None:
    config = parse_configmap_data({}).ingress
    assert config == IngressConfig() and config.gateway is None
    assert (config.ome_ingress_gateway, config.ingress_domain, config.url_scheme) == ("", "svc.cluster.local", "http")
    assert config.domain_template == "{{ .Name }}.{{ .Namespace }}.{{ .IngressDomain }}"
    assert config.host("llama-engine", "team-a") == "llama-engine.team-a.svc.cluster.local"


@pytest.mark.unit
def test_ingress_block_as_a_user_writes_it() -> None:
    text = ("omeIngressGateway: servingops-gateway/inference\n"
            "ingressDomain: models.example.com\n"
            "domainTemplate: '{{.Name}}-{{ .Namespace }}.{{   .IngressDomain }}'\n"
            "urlScheme: https\n")
    config = parse_configmap_data({"ingress": text}).ingress
    assert config.gateway == ("servingops-gateway", "inference")
    host = config.host("llama-router", "team-a")
    assert host == "llama-router-team-a.models.example.com"
    assert config.url(host) == "https://llama-router-team-a.models.example.com"
    # The serving activities read the block alone, with the same rules.
    assert parse_ingress({"ingress": text, "rollout": "not: [parsed"}) == config
    assert parse_ingress({}) == parse_ingress(None) == IngressConfig()


@pytest.mark.unit
@pytest.mark.parametrize(("text", "expected"), [
    ("omeIngressGatway: a/b", "ingress.omeIngressGatway: Extra inputs are not permitted"),
    # Upstream's Istio / Knative keys configure objects this product does not render: refused, not ignored.
    ("ingressGateway: knative-serving/knative-ingress-gateway", "ingress.ingressGateway: Extra inputs"),
    ("omeIngressGateway: inference", "'inference' is not <namespace>/<name> of a Gateway"),
    ("omeIngressGateway: Gateways/Public", "is not <namespace>/<name> of a Gateway"),
    ("ingressDomain: ''", "'' is not a DNS domain"),
    ("urlScheme: ftp", "ingress.urlScheme: Input should be 'http' or 'https'"),
    ("domainTemplate: '{{ .Name }}.{{ .Annotations.team }}.{{ .IngressDomain }}'",
     "{{ .Annotations.team }} is not supported: a domainTemplate may use only {{ .Name }}, {{ .Namespace }} and "
     "{{ .IngressDomain }}"),
    ("domainTemplate: '{{ .Labels.app }}.{{ .Name }}.example.com'", "{{ .Labels.app }} is not supported"),
    ("domainTemplate: '{{ .Name | lower }}.example.com'", "{{ .Name | lower }} is not supported"),
    ("domainTemplate: '{{- .Name }}.example.com'", "is not supported"),
    ("domainTemplate: '{{ .Name }.example.com'", "an unbalanced {{ or }}"),
    ("domainTemplate: '{{ .Namespace }}.{{ .IngressDomain }}'",
     "must use {{ .Name }}: without it every InferenceService would claim the same host"),
    ("domainTemplate: '{{ .Name }}_{{ .Namespace }}.{{ .IngressDomain }}'", "not a DNS name"),
    ("domainTemplate: '{{ .Name }}'", "not a DNS name"),
    ("omeIngressGateway: [a, b]", "ingress.omeIngressGateway: Input should be a valid string"),
    ("omeIngressGateway: {", "ingress: not YAML"),
])
def test_bad_ingress_blocks_are_named(text: str, expected: str) -> None:
    for parse in (parse_configmap_data, parse_ingress):
        with pytest.raises(OperatorConfigError) as info:
            parse({"ingress": text})
        assert expected in str(info.value), parse


@pytest.mark.unit
def test_a_host_the_template_cannot_form_for_one_service_is_a_host_error() -> None:
    config = IngressConfig(ome_ingress_gateway="gw/inference")
    with pytest.raises(HostError, match="not a DNS name"):
        config.host("x" * 60 + "-engine", "team-a")  # a label over 63 characters


class _ConfigMaps:
    """CoreV1Api.read_namespaced_config_map, counting calls."""

    def __init__(self) -> None:
        self.data: dict[str, str] | None = None
        self.status = 0
        self.reads = 0

    def read_namespaced_config_map(self, name: str, namespace: str, **_: Any) -> client.V1ConfigMap:
        self.reads += 1
        if self.status:
            raise ApiException(status=self.status)
        return client.V1ConfigMap(data=self.data)


@pytest.mark.unit
def test_the_ingress_reader_caches_reports_and_recovers() -> None:
    now = [0.0]
    reader = IngressConfigReader(client.ApiClient(), "servingops-system", ttl=10, clock=lambda: now[0])
    maps = _ConfigMaps()
    reader.core = maps  # type: ignore[assignment]
    maps.status = 404
    assert reader() == IngressConfig(), "no ConfigMap: the defaults"
    maps.status, maps.data = 0, {"ingress": "omeIngressGateway: gw/inference\n"}
    assert reader() == IngressConfig() and maps.reads == 1, "read at most once per ttl"
    now[0] = 10
    assert reader().gateway == ("gw", "inference") and maps.reads == 2
    now[0] = 20
    maps.data = {"ingress": "omeIngressGateway: gw/inference\nurlSheme: https\n"}
    for _ in range(2):  # a bad block is remembered like a good one: raised on every call until it changes
        with pytest.raises(OperatorConfigError, match=re.escape("ConfigMap servingops-system/servingops-config: "
                                                                "ingress.urlSheme: Extra inputs")):
            reader()
    assert maps.reads == 3
    now[0] = 30
    maps.status = 503  # the apiserver away: raised for the activity to retry, not remembered
    with pytest.raises(ApiException):
        reader()
    maps.status, maps.data = 0, {"rollout": "stallTimeout: 1m\n"}
    assert reader() == IngressConfig() and maps.reads == 5


ROUTING_BLOCK = """\
enabled: true
probe:
  path: /v1/models
  method: GET
  acceptStatuses: [200]
  gateStatuses: [404, 500, 502, 503, 504]
  period: 10s
  timeout: 3s
  failureThreshold: 3
  successThreshold: 2
  allFailedPolicy: PreserveTraffic
capacity:
  path: /capacity
  method: GET
  format: Report
  samples: 10
  quorum: 2
  period: 10s
  timeout: 3s
  maxAge: 30s
"""
ENDPOINT_BLOCK = """\
globalGateway: gateway-system/global
backendPort: 80
globalHostTemplate: "{{ .Name }}.{{ .Namespace }}.global.example.com"
gatewayBackend:
  rewriteHostname: true
"""


@pytest.mark.unit
def test_routing_and_endpoint_blocks_as_upstreams_values_write_them() -> None:
    # The values of upstream OME's "Configure routing health probes", "Tune routing capacity polling" and
    # "Publish a global endpoint" guides, unchanged.
    config = parse_configmap_data({"routing": ROUTING_BLOCK, "endpoint": ENDPOINT_BLOCK})
    assert config.routing.enabled and config.routing.publisher.name == "gatewayapi"
    assert config.routing.probe is not None and config.routing.probe.gate_statuses == [404, 500, 502, 503, 504]
    assert config.routing.capacity is not None and config.routing.capacity.quorum == 2
    assert config.endpoint.global_host("chat", "prod") == "chat.prod.global.example.com"
    assert config.endpoint.gateway_backend.rewrite_hostname and config.endpoint.backend_port == 80
    defaults = parse_configmap_data({})
    assert not defaults.routing.enabled and defaults.routing.probe is None
    assert defaults.endpoint.global_host("chat", "prod") is None and not defaults.endpoint.global_gateway


@pytest.mark.unit
@pytest.mark.parametrize(("data", "expected"), [
    ({"routing": "probe: {path: /v1/models, method: GET}"}, "an enabled probe needs accept_statuses"),
    ({"routing": "capacity: {disabled: true}\nprobe: {disabled: true}"}, None),
    ({"routing": "probe: {disabled: true, colour: red}"}, "routing.probe.colour: Extra inputs are not permitted"),
    ({"routing": "publisher: {name: istio}"}, "routing.publisher.name: Input should be 'gatewayapi'"),
    ({"routing": "publisher: {resyncInterval: 0s}"}, "must be a positive duration"),
    ({"endpoint": "globalGateway: global"}, "backendPort: set it, from 1 to 65535, whenever globalGateway is set"),
    ({"endpoint": "globalHostTemplate: '{{ .Name }}.{{ .IngressDomain }}'"},
     "{{ .IngressDomain }} is not supported: globalHostTemplate may use only {{ .Name }} and {{ .Namespace }}"),
    ({"endpoint": "gatewayBackend: {tls: {enabled: true}}"}, "endpoint.gatewayBackend.tls: Extra inputs"),
    ({"endpoint": "routeNamespace: Routes"}, "'Routes' is not a namespace name"),
])  # fmt: skip
def test_bad_routing_and_endpoint_blocks_are_named(data: dict[str, str], expected: str | None) -> None:
    if expected is None:
        parse_configmap_data(data)
        return
    with pytest.raises(OperatorConfigError) as info:
        parse_configmap_data(data)
    assert expected in str(info.value)


@pytest.mark.unit
def test_the_quota_block_gives_the_default_distribution_and_the_reader_reports_a_bad_one() -> None:
    assert parse_quota(None).default_distribution is None
    assert parse_quota({"quota": "defaultDistribution: Proportional\n"}).default_distribution == "Proportional"
    assert parse_configmap_data({"quota": "defaultDistribution: Explicit\n"}).quota.default_distribution == "Explicit"
    with pytest.raises(OperatorConfigError, match=r"quota\.defaultDistribution"):
        parse_quota({"quota": "defaultDistribution: Evenly\n"})
    now = [0.0]
    reader = QuotaConfigReader(client.ApiClient(), "servingops-system", ttl=10, clock=lambda: now[0])
    maps = _ConfigMaps()
    reader.core = maps  # type: ignore[assignment]
    maps.status = 404
    assert reader().default_distribution is None, "no ConfigMap: unset"
    now[0], maps.status, maps.data = 10, 0, {"quota": "defaultDistribution: Proportional\n"}
    assert reader().default_distribution == "Proportional" and maps.reads == 2
    now[0], maps.data = 20, {"quota": "defaultDistribution: Evenly\n"}
    with pytest.raises(OperatorConfigError, match="ConfigMap servingops-system/servingops-config: quota"):
        reader()
