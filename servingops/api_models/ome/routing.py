"""Cross-cluster routing of an InferenceService: health probe, capacity poll and publisher options."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, WithJsonSchema

from servingops.api_models.base import QUANTITY_PATTERN, ApiModel, Duration, cel, validations
from servingops.api_models.ome.enums import RoutingAllFailedPolicy

# A Quantity with a bounded string form, so the CEL rule that parses each capacity factor stays
# within the apiserver's cost budget.
BoundedQuantity = Annotated[
    int | str,
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "maxLength": 64,
            "x-kubernetes-int-or-string": True,
        }
    ),
]


class RoutingProbeSpec(ApiModel):
    """RoutingProbeSpec configures an active end-to-end health probe for each serving home's
    externally addressable endpoint."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.disabled) || !self.disabled || !(has(self.path) || has(self.method) || "
                "has(self.acceptStatuses) || has(self.gateStatuses) || has(self.period) || "
                "has(self.timeout) || has(self.failureThreshold) || has(self.successThreshold) || "
                "has(self.allFailedPolicy))",
                "disabled must not be combined with probe configuration fields",
            ),
            cel(
                "(has(self.disabled) && self.disabled) || (has(self.path) && has(self.method) && "
                "has(self.acceptStatuses) && has(self.gateStatuses) && has(self.period) && "
                "has(self.timeout) && has(self.failureThreshold) && has(self.successThreshold) && "
                "has(self.allFailedPolicy))",
                "an enabled probe must specify path, method, acceptStatuses, gateStatuses, period, "
                "timeout, failureThreshold, successThreshold, and allFailedPolicy",
            ),
            cel("!has(self.period) || duration(self.period) > duration('0s')", "period must be positive"),
            cel(
                "!has(self.timeout) || duration(self.timeout) > duration('0s')",
                "timeout must be positive",
            ),
            cel(
                "!has(self.period) || !has(self.timeout) || duration(self.timeout) < duration(self.period)",
                "timeout must be shorter than period",
            ),
            cel(
                "!has(self.gateStatuses) || !self.gateStatuses.exists(s, s in [401, 403, 429])",
                "gateStatuses must not contain 401, 403, or 429",
            ),
        )
    )

    disabled: bool | None = None
    """Disabled explicitly disables probing. No other field may be set when true."""
    path: str | None = Field(default=None, min_length=1, pattern=r"^/")
    """Path is appended to each serving home's endpoint and must start with "/"."""
    method: Literal["GET", "HEAD", "POST"] | None = None
    """Method is the HTTP method used by the probe."""
    accept_statuses: list[Annotated[int, Field(ge=100, le=599)]] | None = Field(default=None, min_length=1)
    """AcceptStatuses are response codes counted as a successful probe."""
    gate_statuses: list[Annotated[int, Field(ge=100, le=599)]] | None = Field(
        default=None, min_length=1, max_length=500
    )
    """GateStatuses are response codes counted as a failed probe. A code in neither status list is
    inconclusive."""
    period: Duration | None = None
    """Period is how often each serving home is probed."""
    timeout: Duration | None = None
    """Timeout bounds one probe request and must be shorter than Period."""
    failure_threshold: int | None = Field(default=None, ge=1)
    """FailureThreshold is the number of consecutive failures required to gate a serving home."""
    success_threshold: int | None = Field(default=None, ge=1)
    """SuccessThreshold is the number of consecutive successes required to restore a gated serving
    home."""
    all_failed_policy: RoutingAllFailedPolicy | None = None
    """AllFailedPolicy controls the result when every serving home has crossed the failure
    threshold."""

    def missing(self) -> list[str]:
        """The fields an enabled probe leaves out (its CEL rule, for where no apiserver checks it: the
        operator ConfigMap, and a spec stored before the rule)."""
        if self.disabled:
            return []
        return [name for name in ("path", "method", "accept_statuses", "gate_statuses", "period", "timeout",
                                  "failure_threshold", "success_threshold", "all_failed_policy")
                if getattr(self, name) is None]  # fmt: skip


class RoutingCapacitySpec(ApiModel):
    """RoutingCapacitySpec configures polling each serving home for its current servable capacity."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.disabled) || !self.disabled || !(has(self.path) || has(self.method) || "
                "has(self.format) || has(self.options) || has(self.period) || has(self.timeout) || "
                "has(self.samples) || has(self.quorum) || has(self.maxAge))",
                "disabled must not be combined with capacity configuration fields",
            ),
            cel(
                "(has(self.disabled) && self.disabled) || (has(self.path) && has(self.method) && "
                "has(self.format) && has(self.period) && has(self.timeout) && has(self.samples) && "
                "has(self.quorum) && has(self.maxAge))",
                "an enabled capacity poll must specify path, method, format, period, timeout, samples, "
                "quorum, and maxAge",
            ),
            cel("!has(self.period) || duration(self.period) > duration('0s')", "period must be positive"),
            cel(
                "!has(self.timeout) || duration(self.timeout) > duration('0s')",
                "timeout must be positive",
            ),
            cel(
                "!has(self.period) || !has(self.timeout) || duration(self.timeout) < duration(self.period)",
                "timeout must be shorter than period",
            ),
            cel(
                "!has(self.period) || !has(self.maxAge) || duration(self.maxAge) >= duration(self.period)",
                "maxAge must be at least period",
            ),
            cel(
                "!has(self.samples) || !has(self.quorum) || self.quorum <= self.samples",
                "quorum must not exceed samples",
            ),
        )
    )

    disabled: bool | None = None
    """Disabled explicitly disables capacity polling. No other field may be set when true."""
    path: str | None = Field(default=None, min_length=1, pattern=r"^/")
    """Path is appended to each serving home's endpoint and must start with "/"."""
    method: Literal["GET", "HEAD", "POST"] | None = None
    """Method is the HTTP method used by the capacity request."""
    format: str | None = Field(default=None, min_length=1)
    """Format names the response shape returned by the capacity endpoint."""
    options: dict[str, str] | None = None
    """Options contains format-specific settings interpreted by the configured capacity format."""
    period: Duration | None = None
    """Period is how often each serving home is polled."""
    timeout: Duration | None = None
    """Timeout bounds one capacity request and must be shorter than Period."""
    samples: int | None = Field(default=None, ge=1)
    """Samples is the number of recent readings in the capacity window."""
    quorum: int | None = Field(default=None, ge=1)
    """Quorum is the number of readings required to corroborate a lower capacity."""
    max_age: Duration | None = None
    """MaxAge is the maximum accepted age of a capacity report."""

    def missing(self) -> list[str]:
        """The fields an enabled poll leaves out (its CEL rule, for where no apiserver checks it)."""
        if self.disabled:
            return []
        return [name for name in ("path", "method", "format", "period", "timeout", "samples", "quorum", "max_age")
                if getattr(self, name) is None]  # fmt: skip


class RoutingPublisherSpec(ApiModel):
    """RoutingPublisherSpec provides per-InferenceService behavior options to the single publisher
    selected by the operator."""

    options: dict[str, Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None,
        max_length=32,
        json_schema_extra=validations(
            cel(
                "self.all(k, size(k) >= 1 && size(k) <= 128 && size(self[k]) >= 1 && size(self[k]) <= 4096)",
                "publisher option keys must contain 1-128 characters and values must contain 1-4096 characters",
            )
        ),
    )
    """Options are interpreted and validated by the operator-selected publisher."""


class RoutingSpec(ApiModel):
    """RoutingSpec configures cross-cluster traffic distribution for an InferenceService. Fields
    that are unset inherit the operator-level routing configuration."""

    enabled: bool | None = None
    """Enabled overrides routing for this InferenceService. Nil inherits the operator-level setting;
    false opts this InferenceService out. True opts in only when routing is enabled for the
    installation and cannot bypass a disabled installation gate."""
    capacity_factors: dict[str, BoundedQuantity] | None = Field(
        default=None,
        max_length=256,
        json_schema_extra=validations(
            cel(
                "self.all(k, quantity(string(self[k])).isGreaterThan(quantity('0')))",
                "every capacity factor must be greater than zero",
            )
        ),
    )
    """CapacityFactors overrides the per-replica relative serving capacity of named workload
    clusters. Every quantity must be greater than zero. A cluster absent from the map uses the
    identity factor 1."""
    probe: RoutingProbeSpec | None = None
    """Probe overrides the operator-level endpoint health probe. The block is a complete
    replacement; set disabled to explicitly turn probing off."""
    capacity: RoutingCapacitySpec | None = None
    """Capacity overrides the operator-level endpoint capacity poll. The block is a complete
    replacement; set disabled to explicitly turn polling off."""
    publisher: RoutingPublisherSpec | None = None
    """Publisher supplies behavior options to the operator-selected publisher. Publisher identity,
    transport, and credentials remain operator-level configuration."""
