"""Load balancing of the routes OME emits (spec.traffic), and per-revision traffic targets in status."""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field

from servingops.api_models.base import ApiModel, Condition, cel, condition_list_schema, validations
from servingops.api_models.ome.enums import EndpointOverrideType, HashType, LoadBalancingType

DEFAULT_ALGORITHM = "Default"
"""status.traffic.algorithm when spec.traffic names no algorithm: the Gateway implementation's default."""


class TrafficCondition(StrEnum):
    """Condition types of status.traffic (the seed names BackendPolicyReady; the other two are
    upstream OME's and this project's: what the policy leaves out, and whether the data plane
    serving the routes reads the policy at all)."""

    BACKEND_POLICY_READY = "BackendPolicyReady"
    UNSUPPORTED_FIELDS = "BackendPolicyUnsupportedFields"
    DATA_PLANE = "BackendPolicyDataPlane"


class TrafficReason(StrEnum):
    """Reasons of the status.traffic conditions."""

    ACCEPTED_BY_GATEWAY = "AcceptedByGateway"
    """BackendPolicyReady True: every Gateway the policy attached to accepted it."""
    PENDING = "Pending"
    """BackendPolicyReady Unknown: applied; no Gateway controller has said anything of it yet."""
    GATEWAY_REJECTED = "GatewayRejected"
    """BackendPolicyReady False: a Gateway controller did not accept it (its message follows)."""
    CONFLICTING_POLICY = "ConflictingPolicy"
    """BackendPolicyReady False: a policy that is not ours has our name or targets one of our routes:
    it wins, ours is not written (and removed if it was)."""
    TRANSLATION_FAILED = "TranslationFailed"
    """BackendPolicyReady False: an ome.io/* traffic annotation does not parse, or the apiserver
    refused the rendered policy (a pass-through of the wrong type)."""
    NO_TRANSLATOR_AVAILABLE = "NoTranslatorAvailable"
    """BackendPolicyReady False: the cluster serves no gateway.envoyproxy.io/v1alpha1
    BackendTrafficPolicy (Envoy Gateway is not installed); the intent is not applied."""
    UNSUPPORTED_FIELD = "UnsupportedField"
    """BackendPolicyUnsupportedFields True: declared keys the Envoy Gateway translation leaves out."""
    HONORED = "HonoredByDataPlane"
    """BackendPolicyDataPlane True: every controller reporting on the routes is Envoy Gateway's."""
    NOT_HONORED = "NotHonoredByDataPlane"
    """BackendPolicyDataPlane False: a controller serving the routes (Traefik locally) does not read a
    BackendTrafficPolicy, so requests through it are balanced by its own defaults."""
    NOT_REPORTED = "NoRouteReport"
    """BackendPolicyDataPlane Unknown: no Gateway controller has reported on the routes yet."""


class HashHeader(ApiModel):
    """HashHeader names a single request header to include in the consistent-hash input."""

    name: str = Field(min_length=1)
    """Name is the header name (case-insensitive per HTTP)."""


class HashCookie(ApiModel):
    """HashCookie names a cookie and an optional TTL for auto-issuance."""

    name: str = Field(min_length=1)
    """Name is the cookie name."""
    ttl_seconds: int | None = Field(default=None, ge=0)
    """TTLSeconds, when greater than zero, makes the gateway auto-issue the cookie if absent on the
    request. When zero or unset, the client is responsible for sending the cookie."""


class ConsistentHashSpec(ApiModel):
    """ConsistentHashSpec selects what request attribute to hash on when
    LoadBalancingType=ConsistentHash. Exactly one of Headers or Cookie must be set when Type is
    Header or Cookie respectively; both forbidden when Type is SourceIP."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.type == 'Header' ? (has(self.headers) && size(self.headers) > 0 && "
                "!has(self.cookie)) : self.type == 'Cookie' ? (has(self.cookie) && !has(self.headers)) "
                ": (!has(self.headers) && !has(self.cookie))",
                "headers are required with type Header and cookie with type Cookie; each is forbidden otherwise",
            ),
        )
    )

    type: HashType
    """Type selects the hash source."""
    headers: list[HashHeader] | None = None
    """Headers to hash on. Required when Type=Header (one or more). Translators that support
    multi-header hashing concatenate the headers before hashing; when the active translator supports
    only single-header hashing, multi-header specs are rejected at admission."""
    cookie: HashCookie | None = None
    """Cookie configuration. Required when Type=Cookie. Forbidden when Type is not Cookie."""


class EndpointOverrideSpec(ApiModel):
    """EndpointOverrideSpec configures Envoy Gateway's loadBalancer endpoint-override feature. When
    a request carries an endpoint reference (typically a header), the gateway routes the request to
    that exact endpoint if healthy, otherwise falls back to the configured LoadBalancer Algorithm."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.type != 'Header' || (has(self.headers) && size(self.headers) > 0)",
                "headers are required when type is Header",
            ),
            # Upstream OME reserves Metadata (its webhook's ReservedEndpointOverrideType) until a
            # translator implements it: admitting it would be a field that silently does nothing.
            cel(
                "self.type != 'Metadata'",
                "type Metadata is reserved: no translator implements it yet (use Header)",
            ),
            cel(
                "self.type == 'Header' || !has(self.headers)",
                "headers are only read with type Header",
            ),
        )
    )

    type: EndpointOverrideType
    """Type selects where to read the endpoint override from."""
    headers: list[HashHeader] | None = None
    """Headers to read the endpoint reference from. Required when Type=Header. Each header value
    must be "<host>:<port>" or "<ip>:<port>"."""


class TrafficSpec(ApiModel):
    """TrafficSpec configures the load-balancing policy applied to all HTTPRoutes OME emits for the
    InferenceService. The translated backend policy resource (e.g. Envoy Gateway
    BackendTrafficPolicy) targets every OME-managed HTTPRoute via targetRefs, so behavior is
    consistent whether clients address the top-level URL or a per-Component subdomain."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.consistentHash) == (has(self.algorithm) && self.algorithm == 'ConsistentHash')",
                "consistentHash is required with algorithm ConsistentHash and rejected otherwise",
            ),
        )
    )

    algorithm: LoadBalancingType | None = None
    """Algorithm selects the load-balancing algorithm. Absent = the Gateway implementation's default
    (LeastRequest for Envoy Gateway)."""
    consistent_hash: ConsistentHashSpec | None = None
    """ConsistentHash configures the hash key. Required when Algorithm=ConsistentHash; rejected
    otherwise (webhook)."""
    endpoint_override: EndpointOverrideSpec | None = None
    """EndpointOverride routes requests to a specific pod when a request header (e.g.
    "X-Endpoint-HostPort: 10.0.0.5:30000") is present and the endpoint is healthy; falls back to the
    configured Algorithm when the endpoint is unhealthy or the header is absent."""


class BackendPolicyRef(ApiModel):
    """BackendPolicyRef identifies the OME-emitted backend policy resource sibling to the
    InferenceService."""

    api_version: str | None = None
    """APIVersion of the resource (e.g. "gateway.envoyproxy.io/v1alpha1")."""
    kind: str | None = None
    """Kind of the resource (e.g. "BackendTrafficPolicy")."""
    name: str | None = None
    """Name of the resource, in the same namespace as the InferenceService."""


class TrafficStatus(ApiModel):
    """TrafficStatus reflects the resolved backend traffic policy and the emitted policy resource
    (e.g. Envoy Gateway BackendTrafficPolicy) for an InferenceService. Lives at
    InferenceServiceStatus.Traffic. Populated only when traffic intent is declared via spec.traffic
    or any ome.io/* traffic annotation; otherwise nil so older clients see nothing."""

    algorithm: str | None = None
    """Algorithm reflects the resolved load-balancing algorithm. One of RoundRobin | LeastRequest |
    Random | ConsistentHash | Default. "Default" means no Algorithm was set on spec.traffic and the
    Gateway implementation default applies."""
    backend_policy_resource: BackendPolicyRef | None = None
    """BackendPolicyResource references the OME-emitted backend policy (typically a
    gateway.envoyproxy.io/v1alpha1.BackendTrafficPolicy). Empty when no policy was emitted (e.g.
    translator deferred to a conflicting hand-authored policy)."""
    targeted_http_routes: list[str] | None = Field(default=None, alias="targetedHTTPRoutes")
    """TargetedHTTPRoutes lists the HTTPRoute names the emitted policy targets. Operators read this
    to understand which routes the policy applies to without inspecting the emitted resource. Empty
    when no policy was emitted."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions surface translation, conflict, and gateway-acceptance state. The well-known
    condition type is BackendPolicyReady."""


class ComponentTrafficTarget(ApiModel):
    """ComponentTrafficTarget describes the percentage of traffic routed to one revision of one
    Component. RevisionName is the per-revision Service name produced by OMENative's coordination
    layer (e.g. `llama-engine-rev-abc123`), which the HTTPRoute builder consumes directly as a
    backend reference."""

    revision_name: str | None = None
    """RevisionName is the per-revision Service name for this target."""
    percent: int | None = Field(default=None, ge=0, le=100)
    """Percent is the percentage of traffic the consumer should route to RevisionName. Sum across
    all entries for one Component is 100."""
    tag: str | None = None
    """Tag is an optional short identifier for the target (e.g. "latest", "prev"). Cosmetic; not
    used by the consumer."""
    latest_revision: bool | None = None
    """LatestRevision is true when this entry corresponds to the LatestRolledoutRevision for the
    Component."""
    pairing_protocol: str | None = None
    """PairingProtocol is the engine↔decoder wire-compatibility token the target's revision was
    minted under (spec.rollout.pairingProtocol at mint time)."""
