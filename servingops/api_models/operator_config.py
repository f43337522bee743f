"""The operator's configuration: the cluster-level defaults the seed refers to as "the rollout
block of the operator's ConfigMap", "canaryAnalysis.bundledPrometheusAddress" and "the
operator's metricProviders configuration".

It lives in one ConfigMap in the controller namespace (`servingops-config` unless the worker is
told otherwise), one YAML document per block:

    data:
      rollout: |
        readyTimeout: 10m        # a canary step's capacity gate, when neither the group nor
                                 # the ome.io/rollout-ready-timeout annotation sets one
        stallTimeout: 10m        # how long analysis may stay inconclusive
        scaleDownDelaySeconds: 30
      lifecycle: |               # OMENative (InferenceReplica) defaults
        instanceReadyTimeout: 15m
        revisionHistoryLimit: 10
        maxUnavailable: 1        # strategies other than SurgeThenDrain
        maxSurge: 1              # SurgeThenDrain
      canaryAnalysis: |
        bundledPrometheusAddress: http://prometheus.monitoring.svc:9090
      workloadClusters: |
        healthCheckInterval: 30s # how often each WorkloadCluster's connection is probed
      placement: |
        observationGrace: 2m     # a placed home unreadable (or its copy gone) this long: a new race
      metricProviders: |
        tenant-a:
          serverAddress: http://mimir.monitoring.svc/prometheus
          authSecretRef: {name: mimir-reader, key: token}   # in the controller namespace
          headers: {X-Scope-OrgID: tenant-a}                # never credentials (refused):
                                                             # the token is in authSecretRef
      ingress: |                 # upstream OME's `ingress` block, the fields this product implements
        omeIngressGateway: servingops-gateway/inference    # <namespace>/<name> of the Gateway every
                                 # HTTPRoute attaches to; empty (the default): routes attach to none
        ingressDomain: svc.cluster.local
        domainTemplate: "{{ .Name }}.{{ .Namespace }}.{{ .IngressDomain }}"
        urlScheme: http          # of status.url and the components' urls (http or https)
        trafficTranslator: envoyGateway   # spec.traffic's data-plane translation besides Envoy Gateway's
                                 # BackendTrafficPolicy (always written where served): traefik also
                                 # puts the weights in a weighted TraefikService per component
      routing: |                 # upstream OME's multicluster.config.routing: TrafficMaps (docs/routing.md)
        enabled: false           # the installation's gate; spec.routing.enabled can only opt a service out
        probe: {...}             # the default RoutingProbeSpec (all nine fields, or disabled: true)
        capacity: {...}          # the default RoutingCapacitySpec (every field but options)
        publisher: {name: gatewayapi, resyncInterval: 1m}
      quota: |                   # the AcceleratorQuota tree (docs/quota.md)
        defaultDistribution: Proportional   # the split of a leaf budget that names no policy (Explicit or
                                 # Proportional); unset (the default): such a leaf is Degraded ShareUnresolved
      endpoint: |                # upstream OME's multicluster.config.endpoint: the global route's publisher
        globalGateway: gateway-system/global   # <namespace>/<name>, or <name> in the route's namespace
        backendPort: 80          # the members' Gateway port; required with globalGateway
        globalHostTemplate: "{{ .Name }}.{{ .Namespace }}.global.example.com"
        gatewayBackend: {rewriteHostname: true}
        routeNamespace: ""       # every global route in one namespace (names then carry a hash)

The worker reads it when a rollout run opens and the run keeps what it read (the workflow
history records it), so a change applies to the next run, never halfway through one. Unknown
keys are errors, not silently ignored: a typo in an operator default must not look like "unset".

The `quota` block is read the same way by the AcceleratorQuota workflows' observe (every pass, cached a
few seconds): a changed default reaches every leaf on its next pass.

The `ingress` block is the exception to "read when a run opens": the serving activities read it
themselves (activities/operator_config.py IngressConfigReader, cached for a few seconds), because
a route's parentRefs and hostnames are a property of the cluster, not of a run. A component's
host is domainTemplate applied to its HTTPRoute's name (`<isvc>-<component>`); the entrypoint
component's route (router, else engine) also answers on the service's own host (Name = the
InferenceService's name), like upstream's top-level route. The template is Go-template syntax as
OME writes it, restricted to `{{ .Name }}`, `{{ .Namespace }}` and `{{ .IngressDomain }}`
(anything else, `.Annotations.*` and `.Labels.*` included, is a config error), and it must use
`.Name`: without it every service would claim the same host.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from servingops.api_models.credential_headers import address_has_userinfo, credential_headers
from servingops.api_models.durations import parse_duration
from servingops.api_models.ome.enums import AcceleratorQuotaDistributionPolicy
from servingops.api_models.ome.routing import RoutingCapacitySpec, RoutingProbeSpec
from servingops.api_models.refs import ObjectRef

DEFAULT_CONFIGMAP = "servingops-config"
DEFAULT_CONTROLLER_NAMESPACE = "servingops-system"
"""Where the controller's own objects live (the operator ConfigMap, Secrets, upload sessions) unless told."""
BLOCKS = ("rollout", "canaryAnalysis", "metricProviders", "lifecycle", "workloadClusters", "placement", "ingress",
          "routing", "endpoint", "benchmark", "quota")


class PrometheusSource(BaseModel):
    """Where and how to query: a resolved providerRef, serverAddress, or the default source."""

    address: str
    auth_secret: ObjectRef | None = None
    """A Secret holding the bearer token; read by the activity, never carried."""
    auth_key: str = "token"
    """The key of auth_secret that holds the token."""
    headers: dict[str, str] = {}


class _Block(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


def _duration(value: str) -> str:
    if parse_duration(value).total_seconds() <= 0:
        raise ValueError(f"{value!r} must be a positive duration")
    return value


class RolloutDefaults(_Block):
    ready_timeout: str = "10m"
    stall_timeout: str = "10m"
    scale_down_delay_seconds: int = Field(default=30, ge=0)

    _check_durations = field_validator("ready_timeout", "stall_timeout")(_duration)


class LifecycleDefaults(_Block):
    """The OMENative lifecycle defaults the seed names "the operator's lifecycle.*" config: what an
    InferenceReplica uses when neither its spec nor (for a projected replica) its runtime sets one."""

    instance_ready_timeout: str | None = None
    """Upper bound for an Instance to become Ready in an operation; unset: operations open with no deadline."""
    revision_history_limit: int | None = Field(default=None, ge=1)
    """Non-live ControllerRevisions kept per replica; unset: none are pruned."""
    max_unavailable: int | str | None = None
    """The cluster default of rollingUpdate.maxUnavailable for strategies other than SurgeThenDrain."""
    max_surge: int | str | None = None
    """The cluster default of rollingUpdate.maxSurge for SurgeThenDrain."""
    max_in_flight_migrations: int = Field(default=1, ge=1)
    """Surge migrations executing at once per InferenceReplica; further Accepted ones queue."""
    max_migrations_per_window: int = Field(default=10, ge=1)
    """Migrations one InferenceReplica accepts per migrationWindow; beyond it a request is refused."""
    migration_window: str = "1h"
    """The migration-capacity rate window (terminal records older than it are pruned from status)."""
    auto_migrate_max_attempts: int = Field(default=2, ge=0)
    """autoMigrate.maxAttempts: relocations in a row of an Instance not Ready on its node by its
    deadline (0: it fails in place, as without migration)."""

    _check_durations = field_validator("instance_ready_timeout", "migration_window")(
        lambda value: value if value is None else _duration(value))


class WorkloadClusterDefaults(_Block):
    """The WorkloadCluster health process (docs/placement.md)."""

    health_check_interval: str = "30s"
    """How often a member's connection is probed again without a change to its WorkloadCluster."""

    _check_durations = field_validator("health_check_interval")(_duration)


class PlacementDefaults(_Block):
    """Multi-cluster placement (docs/placement.md)."""

    observation_grace: str = "2m"
    """How long a placed Single home may stay unreadable, or without its derived service, before it
    counts as lost and a new race starts. While it lasts, the home keeps the counts of its last
    successful read (CandidatePlacement.observationFailingSince). A durable timer in the workflow."""

    _check_durations = field_validator("observation_grace")(_duration)


class CanaryAnalysisDefaults(_Block):
    bundled_prometheus_address: str = ""
    """The default metrics source: used when a canary names neither providerRef nor serverAddress."""

    @field_validator("bundled_prometheus_address")
    @classmethod
    def _no_userinfo(cls, address: str) -> str:
        if address_has_userinfo(address):
            raise ValueError("bundledPrometheusAddress must not carry credentials (user:password@)")
        return address


class SecretKeyRef(_Block):
    name: str = Field(min_length=1)
    key: str = "token"


class MetricProvider(_Block):
    server_address: str = Field(min_length=1)
    auth_secret_ref: SecretKeyRef | None = None
    headers: dict[str, str] = {}

    @field_validator("server_address")
    @classmethod
    def _no_userinfo(cls, address: str) -> str:
        if address_has_userinfo(address):
            raise ValueError("serverAddress must not carry credentials (user:password@): "
                             "put them in a Secret named by authSecretRef")
        return address

    @field_validator("headers")
    @classmethod
    def _no_credentials(cls, headers: dict[str, str]) -> dict[str, str]:
        """The same rule admission applies to a canary's headers: this ConfigMap's text is copied
        into every run that names the provider (its payloads, its pinned plan)."""
        refused = credential_headers(headers)
        if refused:
            raise ValueError(f"headers {', '.join(refused)} carry credentials: put the token in a Secret "
                             "and name it in authSecretRef")
        return headers


_TEMPLATE_ACTION = re.compile(r"{{(.*?)}}", re.DOTALL)
_TEMPLATE_VARIABLES = {".Name": "name", ".Namespace": "namespace", ".IngressDomain": "domain"}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class HostError(ValueError):
    """domainTemplate renders something that is not a DNS name for this object (a label over 63
    characters, say): the route cannot be given that hostname."""


def template_parts(template: str, variables: tuple[str, ...] = tuple(_TEMPLATE_VARIABLES),
                   what: str = "a domainTemplate") -> list[tuple[str, str]]:
    """The template as (literal, "") and ("", variable) parts; ValueError naming what is not supported.

    Only the variables OME's host templates are normally written with are implemented (`variables`):
    anything else Go's text/template would accept (pipelines, functions, `.Annotations.<key>`,
    trim markers) is refused here rather than rendered differently from upstream."""
    parts: list[tuple[str, str]] = []
    position = 0
    for action in _TEMPLATE_ACTION.finditer(template):
        parts.append((template[position:action.start()], ""))
        variable = action.group(1).strip()
        if variable not in variables:
            named = [f"{{{{ {v} }}}}" for v in variables]
            allowed = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
            raise ValueError(f"{{{{{action.group(1)}}}}} is not supported: {what} may use only {allowed}")
        parts.append(("", variable))
        position = action.end()
    parts.append((template[position:], ""))
    literal = "".join(text for text, _ in parts)
    if "{{" in literal or "}}" in literal:
        raise ValueError("an unbalanced {{ or }}")
    return [part for part in parts if part != ("", "")]


def is_subdomain(name: str) -> bool:
    """A DNS-1123 subdomain, the shape of an object name and of a DNS domain."""
    return 0 < len(name) <= 253 and all(_DNS_LABEL.match(label) for label in name.split("."))


def _is_dns_name(host: str) -> bool:
    """A fully qualified host: a subdomain of at least two labels (as upstream checks its hosts)."""
    return is_subdomain(host) and "." in host


class IngressConfig(_Block):
    """Upstream OME's `ingress` block, the fields that apply to Gateway API routes (docstring above).
    Upstream's other keys (ingressGateway, ingressService, localGateway, ingressClassName,
    pathTemplate, enableGatewayAPI, ...) configure Istio, Knative and Ingress objects this product
    does not render; they are refused as unknown rather than silently ignored."""

    ome_ingress_gateway: str = ""
    """`<namespace>/<name>` of the Gateway every component's HTTPRoute attaches to (parentRefs);
    empty: routes attach to no Gateway and have no hostnames."""
    # Upstream ships "svc.cluster.local" in its ConfigMap and Helm chart and falls back to
    # "example.com" in Go only when the key is missing. We take the shipped value: a cluster moving
    # from OME with its ConfigMap unchanged gets the same hosts, and one default (model and chart)
    # cannot disagree with itself. It only matters once omeIngressGateway is set.
    ingress_domain: str = "svc.cluster.local"
    domain_template: str = "{{ .Name }}.{{ .Namespace }}.{{ .IngressDomain }}"
    url_scheme: Literal["http", "https"] = "http"
    traffic_translator: Literal["envoyGateway", "traefik"] = "envoyGateway"
    """How spec.traffic reaches the data plane. `envoyGateway` (the default): Envoy Gateway's
    BackendTrafficPolicy only (activities/serving/traffic_policy.py). `traefik`: besides that policy,
    when the cluster serves TraefikServices (Traefik's kubernetesCRD provider beside its Gateway
    provider), the weights between a component's revisions go into one weighted TraefikService
    (traefik.io/v1alpha1, named as the route) whose children are the revisions' Services with Traefik's
    own equivalent of spec.traffic (rendering/traefik_traffic.py), and the HTTPRoute's one backendRef
    names it; otherwise the routes keep plain Service backendRefs with the weights."""

    @field_validator("ome_ingress_gateway")
    @classmethod
    def _gateway(cls, value: str) -> str:
        if not value:
            return value
        namespace, _, name = value.partition("/")
        if not (_DNS_LABEL.match(namespace) and is_subdomain(name)):
            raise ValueError(f"{value!r} is not <namespace>/<name> of a Gateway")
        return value

    @field_validator("ingress_domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        if not is_subdomain(value):
            raise ValueError(f"{value!r} is not a DNS domain")
        return value

    @field_validator("domain_template")
    @classmethod
    def _template(cls, value: str) -> str:
        parts = template_parts(value)
        if ("", ".Name") not in parts:
            raise ValueError("must use {{ .Name }}: without it every InferenceService would claim the same host")
        return value

    @model_validator(mode="after")
    def _renders_hosts(self) -> IngressConfig:
        # A literal part that can never be in a host (an underscore, an upper-case letter) is the
        # operator's mistake, reported here once rather than on every service.
        try:
            self.host("name", "namespace")
        except HostError as error:
            raise ValueError(str(error)) from None
        return self

    @property
    def gateway(self) -> tuple[str, str] | None:
        """(namespace, name) of the Gateway, or None when routes attach to none."""
        if not self.ome_ingress_gateway:
            return None
        namespace, _, name = self.ome_ingress_gateway.partition("/")
        return namespace, name

    def host(self, name: str, namespace: str) -> str:
        """domainTemplate applied to an object name; HostError when the result is not a DNS name."""
        values = {".Name": name, ".Namespace": namespace, ".IngressDomain": self.ingress_domain}
        host = "".join(text or values[variable] for text, variable in template_parts(self.domain_template))
        if not _is_dns_name(host):
            raise HostError(f"domainTemplate {self.domain_template!r} gives {host!r} for {namespace}/{name}, "
                            f"not a DNS name (labels of at most 63 lowercase letters, digits and '-')")
        return host

    def url(self, host: str) -> str:
        return f"{self.url_scheme}://{host}"


class _OperatorProbe(RoutingProbeSpec):
    model_config = ConfigDict(extra="forbid")  # a typo in the ConfigMap is an error, not "unset"


class _OperatorCapacity(RoutingCapacitySpec):
    model_config = ConfigDict(extra="forbid")


class RoutingPublisherDefaults(_Block):
    name: Literal["gatewayapi"] = "gatewayapi"
    """The publisher every TrafficMap is realized by: the built-in Gateway API publisher (upstream's name)."""
    resync_interval: str = "1m"
    """How often a published map is published again without news (a route edited by hand is put back)."""

    _resync = field_validator("resync_interval")(_duration)


class RoutingDefaults(_Block):
    """Upstream OME's `multicluster.config.routing`: whether placed InferenceServices get TrafficMaps, and
    the probe and capacity poll a service without its own `spec.routing.probe` / `.capacity` uses."""

    enabled: bool = False
    probe: _OperatorProbe | None = None
    capacity: _OperatorCapacity | None = None
    publisher: RoutingPublisherDefaults = RoutingPublisherDefaults()

    @model_validator(mode="after")
    def _complete(self) -> RoutingDefaults:
        # The same rules the CRD's CEL gives spec.routing, which no apiserver checks here.
        for name, block in (("probe", self.probe), ("capacity", self.capacity)):
            missing = block.missing() if block is not None else []
            if missing:
                raise ValueError(f"{name}: an enabled {name} needs {', '.join(missing)} (or disabled: true)")
        return self


_HOST_VARIABLES = (".Name", ".Namespace")


class EndpointSlicesFallback(_Block):
    """Upstream OME's gatewayBackend.endpointSlices: for a control plane that cannot resolve the members'
    hostnames, each backend gets an EndpointSlice with the IP addresses of the member's serving Gateway
    (its status.addresses), read at least every `addressRefreshInterval`."""

    enabled: bool = False
    address_refresh_interval: str = ""

    @model_validator(mode="after")
    def _both_or_neither(self) -> EndpointSlicesFallback:
        if self.enabled != bool(self.address_refresh_interval):
            raise ValueError("endpointSlices: set both enabled: true and an addressRefreshInterval with a unit "
                             "(such as 1m), or neither")
        if self.address_refresh_interval:
            _duration(self.address_refresh_interval)
        return self


class GatewayBackend(_Block):
    rewrite_hostname: bool = False
    """Each backend gets a URLRewrite filter setting the Host header to its member's hostname (a member's
    routes match only its own hostnames)."""
    endpoint_slices: EndpointSlicesFallback = EndpointSlicesFallback()


class EndpointConfig(_Block):
    """Upstream OME's `multicluster.config.endpoint`: where and how the Gateway API publisher writes each
    TrafficMap's global HTTPRoute. Upstream's gatewayBackend.tls is not implemented yet and is refused as
    unknown rather than ignored."""

    global_gateway: str = ""
    """`<namespace>/<name>` of the Gateway the global routes attach to, or `<name>` in the route's
    namespace; empty: nothing is published (Published False, Withdrawn)."""
    backend_port: int = Field(default=0, ge=0, le=65535)
    """The members' Gateway port the global routes send to; required with globalGateway."""
    global_host_template: str = ""
    """The global hostname, `{{ .Name }}` and `{{ .Namespace }}` only; the `ome.io/global-host` annotation on an
    InferenceService wins over it."""
    gateway_backend: GatewayBackend = GatewayBackend()
    route_namespace: str = ""
    """Every global route and its backend Services in this namespace instead of the service's."""

    @field_validator("global_host_template")
    @classmethod
    def _template(cls, value: str) -> str:
        if value:
            template_parts(value, _HOST_VARIABLES, "globalHostTemplate")
        return value

    @field_validator("route_namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if value and not _DNS_LABEL.match(value):
            raise ValueError(f"{value!r} is not a namespace name")
        return value

    @model_validator(mode="after")
    def _port_with_gateway(self) -> EndpointConfig:
        if self.global_gateway and not self.backend_port:
            raise ValueError("backendPort: set it, from 1 to 65535, whenever globalGateway is set")
        return self

    def global_host(self, name: str, namespace: str) -> str | None:
        """The template applied to a service (None: no template). Whether it is a usable hostname is the
        publisher's check (an InvalidPlan, not a broken ConfigMap)."""
        if not self.global_host_template:
            return None
        values = {".Name": name, ".Namespace": namespace}
        return "".join(text or values[variable]
                       for text, variable in template_parts(self.global_host_template, _HOST_VARIABLES))


class BenchmarkDefaults(_Block):
    """The BenchmarkJob pod's defaults (upstream OME's benchmarkjob ConfigMap entry): the genai-bench image,
    the image that pushes oci:// results, the container's resources, and where tokenizers are downloaded."""

    image: str = "ghcr.io/moirai-internal/genai-bench:0.0.5"
    """The image whose `genai-bench` runs the benchmark (spec.podOverride.image replaces it)."""
    uploader_image: str = "ghcr.io/oras-project/oras:v1.3.0"
    """The image whose `oras` pushes the results of an oci:// outputLocation."""
    cpu_request: str = "2"
    memory_request: str = "4Gi"
    cpu_limit: str = "4"
    memory_limit: str = "8Gi"
    hub_endpoint: str = ""
    """HF_ENDPOINT of the pod (a Hub mirror the tokenizers come from); "": huggingface.co."""
    insecure_registries: list[str] = []
    """Registries (host:port) the uploader pushes to over plain HTTP."""


class QuotaDefaults(_Block):
    """The AcceleratorQuota tree's operator-level defaults (seed 004: a leaf budget's split comes from the
    budget's policy, else the node's distribution, else the operator default)."""

    default_distribution: AcceleratorQuotaDistributionPolicy | None = None


class OperatorConfig(_Block):
    rollout: RolloutDefaults = RolloutDefaults()
    canary_analysis: CanaryAnalysisDefaults = CanaryAnalysisDefaults()
    metric_providers: dict[str, MetricProvider] = {}
    lifecycle: LifecycleDefaults = LifecycleDefaults()
    workload_clusters: WorkloadClusterDefaults = WorkloadClusterDefaults()
    placement: PlacementDefaults = PlacementDefaults()
    ingress: IngressConfig = IngressConfig()
    routing: RoutingDefaults = RoutingDefaults()
    endpoint: EndpointConfig = EndpointConfig()
    benchmark: BenchmarkDefaults = BenchmarkDefaults()
    quota: QuotaDefaults = QuotaDefaults()


class OperatorConfigError(ValueError):
    """The ConfigMap exists but does not parse; the message names the key and the problem."""


def _problems(error: ValidationError, prefix: tuple[str, ...] = ()) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in (*prefix, *e['loc']))}: {e['msg']}" for e in error.errors())


def _block(key: str, text: str) -> Any:
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise OperatorConfigError(f"{key}: not YAML: {error}") from None


def parse_configmap_data(data: dict[str, str] | None) -> OperatorConfig:
    blocks: dict[str, Any] = {}
    for key, text in (data or {}).items():
        if key not in BLOCKS:
            raise OperatorConfigError(f"unknown key {key!r} (expected one of {', '.join(BLOCKS)})")
        blocks[key] = _block(key, text)
    try:
        return OperatorConfig.model_validate(blocks)
    except ValidationError as error:
        raise OperatorConfigError(_problems(error)) from None


def parse_ingress(data: dict[str, str] | None) -> IngressConfig:
    """The `ingress` block alone (the serving activities' read): a typo in another block must not
    take every route off its Gateway, and the other blocks' readers report their own errors."""
    text = (data or {}).get("ingress")
    if text is None:
        return IngressConfig()
    try:
        return IngressConfig.model_validate(_block("ingress", text))
    except ValidationError as error:
        raise OperatorConfigError(_problems(error, ("ingress",))) from None


def parse_quota(data: dict[str, str] | None) -> QuotaDefaults:
    """The `quota` block alone (the AcceleratorQuota observe's read), as parse_ingress reads `ingress`."""
    text = (data or {}).get("quota")
    if text is None:
        return QuotaDefaults()
    try:
        return QuotaDefaults.model_validate(_block("quota", text))
    except ValidationError as error:
        raise OperatorConfigError(_problems(error, ("quota",))) from None


class OperatorDefaults(BaseModel):
    """What a rollout run needs of the operator configuration, resolved by the activity that read
    it: durations as written, providers bound to a source whose auth Secret lives in the
    controller namespace. Only references travel; tokens stay in their Secrets."""

    ready_timeout: str = "10m"
    stall_timeout: str = "10m"
    scale_down_delay_seconds: int = 30
    default_source: PrometheusSource | None = None
    metric_providers: dict[str, PrometheusSource] = {}
    lifecycle: LifecycleDefaults = LifecycleDefaults()
    workload_clusters: WorkloadClusterDefaults = WorkloadClusterDefaults()
    placement: PlacementDefaults = PlacementDefaults()
    routing: RoutingDefaults = RoutingDefaults()
    endpoint: EndpointConfig = EndpointConfig()
    source: str = ""
    """Which ConfigMap this came from (`<namespace>/<name>`), or "" for the built-in defaults."""
    error: str | None = None
    """Set when the ConfigMap does not parse: runs park instead of guessing."""


def resolve(config: OperatorConfig, namespace: str, source: str = "") -> OperatorDefaults:
    def secret(ref: SecretKeyRef) -> ObjectRef:
        return ObjectRef(group="", version="v1", plural="secrets", kind="Secret", name=ref.name, namespace=namespace)

    providers = {
        name: PrometheusSource(address=p.server_address, headers=dict(p.headers),
                               auth_secret=secret(p.auth_secret_ref) if p.auth_secret_ref else None,
                               auth_key=p.auth_secret_ref.key if p.auth_secret_ref else "token")
        for name, p in config.metric_providers.items()}
    address = config.canary_analysis.bundled_prometheus_address
    return OperatorDefaults(
        ready_timeout=config.rollout.ready_timeout, stall_timeout=config.rollout.stall_timeout,
        scale_down_delay_seconds=config.rollout.scale_down_delay_seconds,
        default_source=PrometheusSource(address=address) if address else None,
        metric_providers=providers, lifecycle=config.lifecycle, workload_clusters=config.workload_clusters,
        placement=config.placement, routing=config.routing, endpoint=config.endpoint,
        source=source)
