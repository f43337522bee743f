"""spec.rollout: ordered rollout groups, each with one progression (canary steps with analysis,
blue-green, rolling update) or a RolloutPolicy reference."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, field_validator

from servingops.api_models import credential_headers as credentials
from servingops.api_models.base import ApiModel, Duration, IntOrString, KubeObject, cel, validations
from servingops.api_models.ome.enums import (
    ComparisonOperator,
    ComponentType,
    OnInconclusive,
    RolloutGroupOrdering,
    RolloutProgressionKind,
)


class MetricProviderRef(ApiModel):
    """MetricProviderRef names a logical metric provider. The name is bound to a cluster-local
    endpoint (and optional credentials) by the operator's autoscalerPolicy configuration block;
    endpoints are not representable in the policy itself, so one policy object serves every cluster
    and a policy author can never point a scaler at an arbitrary endpoint."""

    name: str = Field(min_length=1)
    """Name of the metric provider in the operator's metricProviders configuration."""


class AnalysisPrometheus(ApiModel):
    """AnalysisPrometheus locates and authenticates to the Prometheus the analysis queries."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!(has(self.providerRef) && has(self.serverAddress))",
                "at most one of providerRef and serverAddress may be set",
            ),
        )
    )

    provider_ref: MetricProviderRef | None = None
    """ProviderRef names a logical metric provider bound per cluster in the operator's
    metricProviders configuration (shared with AutoscalerPolicy triggers), which supplies the server
    address, auth secret, and default headers."""
    server_address: str | None = Field(
        default=None, max_length=credentials.MAX_ADDRESS,
        json_schema_extra=validations(cel(credentials.ADDRESS_RULE, credentials.ADDRESS_REFUSAL)))
    """ServerAddress is the base URL of the Prometheus HTTP API (e.g.
    http://prometheus.monitoring.svc:9090). User information (user:password@) is rejected: use
    AuthRef."""
    auth_ref: KubeObject | None = None
    """AuthRef points at a Secret key (in the InferenceService's namespace) holding a bearer token
    sent as "Authorization: Bearer <token>". Omit for an unauthenticated Prometheus (the bundled
    one). TLS/mTLS is not supported."""
    headers: dict[str, Annotated[str, Field(max_length=credentials.MAX_HEADER_VALUE)]] | None = Field(
        default=None, max_length=credentials.MAX_HEADERS,
        json_schema_extra=validations(cel(credentials.HEADERS_RULE, credentials.REFUSAL)))
    """Headers are extra HTTP headers sent on every Prometheus query — e.g. "X-Scope-OrgID" for a
    multi-tenant Cortex/Thanos/Mimir front-end that scopes queries by tenant. Headers that carry
    credentials (Authorization, Proxy-Authorization, Cookie, a name with auth, token, key, secret,
    password, session or signature in it, or a value starting with an auth scheme such as "Bearer
    ") are rejected: the token goes in a Secret named by AuthRef."""

    @field_validator("headers")
    @classmethod
    def _drop_credentials(cls, headers: dict[str, str] | None) -> dict[str, str] | None:
        """Admission refuses credential headers; an object stored before that rule existed still
        has them, and they must not travel on into the run's plan and every sample's payload."""
        if headers is None:
            return None
        return credentials.without_credentials(headers)


class AnalysisMetric(ApiModel):
    """AnalysisMetric is one success condition: a PromQL query whose scalar result is compared
    against Threshold with Operator. A multi-series result is reduced to the worst series for the
    operator before comparison — the maximum for LT/LTE, the minimum for GT/GTE — so the metric
    passes only when every series passes."""

    name: str
    """Name identifies the metric in status and events; unique within Metrics."""
    query: str
    """Query is a PromQL expression, templated with the rollout's revision context before execution.
    Available variables: {{.Namespace}}, {{.ISVCName}}, {{.Component}}, {{.CanaryService}},
    {{.StableService}}, {{.CanaryRevision}}, {{.StableRevision}}."""
    operator: ComparisonOperator
    """Operator is the comparison applied as "result <Operator> Threshold" to decide whether this
    metric passes."""
    threshold: str = Field(pattern=r"^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$")
    """Threshold is the bound the query result is compared against. Parsed as a float (e.g. "0.05",
    "200", "1.5"); admission rejects a non-numeric value."""


class RolloutAnalysis(ApiModel):
    """RolloutAnalysis is a step's metric gate: the checks (metrics) and policy (interval,
    failureLimit, onInconclusive, initialDelay) that decide advance, hold, or rollback for the step
    it is set on. It does NOT carry the metrics source — that is GroupCanary.Prometheus, shared by
    all analysis steps."""

    interval: Duration
    """Interval is the sampling cadence — how often the controller re-evaluates the metrics while a
    step bakes. It also bounds the requeue while holding."""
    initial_delay: Duration | None = None
    """InitialDelay is a warm-up after a step's pods become Ready and traffic is applied, before the
    first sample. New pods need a moment before their metrics mean anything; sampling immediately
    would read cold-start noise."""
    failure_limit: int = Field(ge=1)
    """FailureLimit is the number of failing samples, counted PER STEP (reset on advance), that
    triggers auto-rollback. FailureLimit=1 rolls back on the first bad sample."""
    on_inconclusive: OnInconclusive | None = None
    """OnInconclusive selects what to do when a sample cannot be completed (Prometheus unreachable,
    query error, or empty result) past the stall timeout — distinct from a metric breach."""
    metrics: list[AnalysisMetric] = Field(
        min_length=1,
        max_length=10,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Metrics are the success conditions. A sample passes only when EVERY metric passes (AND). At
    least one is required; an analysis with no metrics could never fail and would gate nothing."""


class RolloutPause(ApiModel):
    """RolloutPause holds a rollout at a step boundary; its meaning depends on the step's gate (see
    RolloutGroupStep): - manual step (Pause, no Duration): wait for the ome.io/rollout-promote
    annotation. - timed step (Pause with Duration, no Analysis): advance after Duration. - analysis
    step (Analysis set): Duration is the minimum bake time before a passing sample may advance."""

    duration: Duration | None = None
    """Duration to pause at this step; see the type doc for how each gate uses it."""


class RolloutGroupStep(ApiModel):
    """RolloutGroupStep is one stage of a canary progression. Capacity and traffic are INDEPENDENT:
    capacity is the per-Component new-revision pod count; traffic is the service-level percentage of
    requests on the new revision. The independence allows "capacity ahead of traffic" (run 50% pods,
    send 10% traffic) for warm-up."""

    capacity: IntOrString
    """Capacity is the fraction of desired replicas to run on the new revision at this step.
    Percentage ("25%") or absolute ("3"). Per-Component."""
    traffic: int = Field(ge=0, le=100)
    """Traffic is the service-level percentage of requests routed to the new revision at this step
    (0-100). Not per-Component."""
    pause: RolloutPause | None = None
    """Pause holds the step: with a Duration it is a timed advance (or, when Analysis is set, the
    bake window); without one it is a manual hold for the ome.io/rollout-promote annotation. Absent
    (and no Analysis) advances immediately."""
    analysis: RolloutAnalysis | None = None
    """Analysis opts this step into metric-gated promotion: it carries the checks (metrics) and
    policy (interval, failureLimit, onInconclusive) for THIS step. The metrics source is
    GroupCanary.Prometheus, shared by all analysis steps."""


class GroupCanary(ApiModel):
    """GroupCanary is the stepped progression: bring up new-revision capacity and shift service-
    level traffic through an ordered list of steps. How the canary advances is a PER-STEP property
    (see RolloutGroupStep): each step is metric-gated (analysis), timed, manual, or immediate.
    Prometheus here is the shared metrics SOURCE every analysis step queries — declared once, not on
    each step."""

    steps: list[RolloutGroupStep] | None = Field(default=None, max_length=20)
    """Steps is the ordered progression of capacity + service-level traffic. The final step must
    reach 100% traffic for the rollout to complete."""
    prometheus: AnalysisPrometheus | None = None
    """Prometheus is the metrics source (connection) shared by every analysis step in this canary:
    where to query and how to authenticate."""
    scale_down_delay_seconds: int | None = None
    """ScaleDownDelaySeconds is the wait between shifting traffic off the old revision and scaling
    its pods down, to drain in-flight requests."""
    ready_timeout: Duration | None = None
    """ReadyTimeout bounds how long a step's capacity gate may stay unsatisfied before the canary is
    marked Failed (stable keeps serving — no traffic has shifted)."""


class GroupBlueGreen(ApiModel):
    """GroupBlueGreen surges the full new set alongside the old, waits for Ready, then flips traffic
    atomically. It is also the default progression a group falls back to when none of
    canary/blueGreen/rollingUpdate is set. It carries no traffic steps (the flip is all-or-nothing);
    surge sequencing across Components is the group-level Order field, not a blue-green-specific
    knob."""


class GroupRollingUpdate(ApiModel):
    """GroupRollingUpdate replaces pods gradually, paced by the surge/unavailable budget. Mixed
    revisions are tolerated during the window."""

    max_surge: IntOrString | None = None
    """MaxSurge is the maximum pods (fraction or absolute) above desired during the roll. Default
    25%."""
    max_unavailable: IntOrString | None = None
    """MaxUnavailable is the maximum pods (fraction or absolute) that may be not-Ready at once
    during the roll. Default 25% (matches the Kubernetes Deployment convention; a default of 0 would
    deadlock single-replica rolls)."""


class RolloutPolicyRef(ApiModel):
    """RolloutPolicyRef names a same-namespace RolloutPolicy that supplies a rollout group's
    progression. Deliberately a sibling of the inline progression one-of, not an arm of it: a ref
    and one inline progression may coexist, and the inline block wins — the preview/rollback
    mechanism."""

    name: str = Field(min_length=1)
    """Name of the RolloutPolicy in the InferenceService's namespace."""
    progression: RolloutProgressionKind
    """Progression declares the referenced policy's kind so shape-dependent admission rules evaluate
    without dereferencing the policy. A mismatch with the policy's actual body parks the rollout at
    run open (ProgressionMismatch); it cannot mis-execute."""
    kind: str = Field(
        default="RolloutPolicy",
        json_schema_extra=validations(
            cel("self == 'RolloutPolicy'", "only kind RolloutPolicy is accepted; ClusterRolloutPolicy is reserved")
        ),
    )
    """Kind is reserved: v1 admission accepts only "RolloutPolicy"; "ClusterRolloutPolicy" is the
    reserved cluster-scoped twin."""


class MaintainRatio(ApiModel):
    """MaintainRatio bounds how far a multi-Component group may drift from the cross-Component
    replica ratio observed at rollout start (e.g. prefill:decode)."""

    tolerance: int | None = Field(default=None, ge=0, le=100)
    """Tolerance is the maximum percentage drift from the starting ratio. A roll step that would
    exceed it is paused until the pools rebalance. An explicit 0 means zero drift."""


class RolloutGroup(ApiModel):
    """RolloutGroup is a set of Components that roll together, advancing through at most one
    progression. The progression is a presence-based one-of: set Canary, BlueGreen, or RollingUpdate
    — or none, which defaults to BlueGreen."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(has(self.canary) ? 1 : 0) + (has(self.blueGreen) ? 1 : 0) + (has(self.rollingUpdate) ? 1 : 0) <= 1",
                "at most one of canary, blueGreen, or rollingUpdate may be set on a rollout group",
            ),
            cel(
                "!has(self.order) || self.order.all(c, c in self.components)",
                "order must reference only Components listed in this group",
            ),
            cel(
                "!has(self.maintainRatio) || !has(self.canary)",
                "maintainRatio is rejected on canary groups",
            ),
            cel(
                "!has(self.soak) || (size(self.components) == 1 && !has(self.canary) && !has(self.rollingUpdate))",
                "soak is honored only on single-Component blueGreen groups",
            ),
        )
    )

    components: list[ComponentType] = Field(min_length=1, max_length=3)
    """Components lists the Component names in this group (they roll together). Valid values:
    "router", "engine", "decoder"."""
    order: list[ComponentType] | None = Field(default=None, max_length=3)
    """Order optionally pins the sequence in which this group's Components roll."""
    canary: GroupCanary | None = None
    """Canary advances the group through explicit capacity + service-level-traffic steps with
    optional gates. One-of progression."""
    blue_green: GroupBlueGreen | None = None
    """BlueGreen surges the full new set, then flips traffic atomically. One-of progression."""
    rolling_update: GroupRollingUpdate | None = None
    """RollingUpdate replaces pods gradually within the surge/unavailable budget, tolerating mixed
    revisions during the window. One-of progression."""
    policy_ref: RolloutPolicyRef | None = None
    """PolicyRef names a same-namespace RolloutPolicy that supplies this group's progression."""
    soak: Duration | None = None
    """Soak is the wait AFTER this group completes, before the next group begins. It is honored only
    when the rollout is a sequence of single-Component blueGreen groups (the run that collapses to
    the internal Sequential state machine); ignored on the last group."""
    maintain_ratio: MaintainRatio | None = None
    """MaintainRatio guards the cross-Component replica ratio while this group rolls."""


class RolloutSpec(ApiModel):
    """RolloutSpec is the single rollout surface for an InferenceService: a list of rollout groups.
    There is no coordination-vs-canary fork — canary is one progression a group may choose, and
    whether list order sequences the groups is GroupOrdering."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.groups) || size(self.groups) <= 1 || (has(self.groupOrdering) && "
                "self.groupOrdering == 'Concurrent') || self.groups.all(g, size(g.components) == 1 && "
                "!has(g.canary) && !has(g.rollingUpdate))",
                "under groupOrdering Sequential a multi-group rollout must be single-Component "
                "blueGreen groups; set groupOrdering: Concurrent for independent groups",
            ),
        )
    )

    groups: list[RolloutGroup] | None = Field(default=None, max_length=3)
    """Groups is the ORDERED list of rollout groups. Sequence is the list position: group N reaches
    completion before group N+1 begins."""
    group_ordering: RolloutGroupOrdering | None = None
    """GroupOrdering declares what groups[] list order means. Sequential (the default) promises
    group N completes before group N+1 begins, and is admitted only for the shape that actually
    enforces it."""
    pairing_protocol: str | None = Field(
        default=None, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
    )
    """PairingProtocol declares the engine↔decoder wire-compatibility contract for prefill-decode
    pairing (e.g. a KV-transfer protocol generation, such as "nixl-v2")."""
