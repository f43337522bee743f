"""The ome.io/* traffic annotations of an InferenceService (upstream OME's contract, v1.3): circuit
breakers, retries and connection timeouts of its backends, and pass-through prefixes that set any
field of the emitted policy. Any of them declares traffic intent, as spec.traffic does."""

from __future__ import annotations

from enum import StrEnum


class TrafficAnnotation(StrEnum):
    """The typed keys, each mapped onto one field of Envoy Gateway's BackendTrafficPolicy
    (rendering/backend_traffic_policy.py)."""

    CB_MAX_CONNECTIONS = "ome.io/circuit-breaker-max-connections"
    CB_MAX_PARALLEL_REQUESTS = "ome.io/circuit-breaker-max-parallel-requests"
    CB_MAX_PENDING_REQUESTS = "ome.io/circuit-breaker-max-pending-requests"
    CB_MAX_PARALLEL_RETRIES = "ome.io/circuit-breaker-max-parallel-retries"
    CB_PER_ENDPOINT_MAX_CONNECTIONS = "ome.io/circuit-breaker-per-endpoint-max-connections"
    RETRY_ATTEMPTS = "ome.io/retry-attempts"
    RETRY_ON = "ome.io/retry-on"
    RETRY_PER_TRY_TIMEOUT = "ome.io/retry-per-try-timeout"
    TIMEOUT_IDLE = "ome.io/timeout-idle"
    TIMEOUT_MAX_CONNECTION_DURATION = "ome.io/timeout-max-connection-duration"
    TIMEOUT_TCP_CONNECT = "ome.io/timeout-tcp-connect"


ENVOY_GATEWAY_PASSTHROUGH = "ome.io/btp."
"""`ome.io/btp.<path>`: sets spec.<path> of the BackendTrafficPolicy, after everything else."""
ISTIO_PASSTHROUGH = "ome.io/dr."
"""`ome.io/dr.<path>`: Istio's DestinationRule; intent here too, but reported as not honored."""
PASSTHROUGH_PREFIXES = (ENVOY_GATEWAY_PASSTHROUGH, ISTIO_PASSTHROUGH)

RETRY_TRIGGERS = ("5xx", "reset", "gateway-error", "connect-failure", "retriable-status-codes")
"""What ome.io/retry-on may list (case-sensitive), upstream's five conditions."""


_TYPED_KEYS = frozenset(a.value for a in TrafficAnnotation)


def is_traffic_annotation(name: str) -> bool:
    """Whether an annotation declares traffic intent: a typed key or a pass-through. The one definition of
    the set: the rendering reads these (rendering/backend_traffic_policy.py) and nothing else, and the bridge
    wakes the service's workflow when one of them changes (crd_bridge/routes.py)."""
    return name in _TYPED_KEYS or name.startswith(PASSTHROUGH_PREFIXES)


def traffic_annotations(annotations: dict[str, str] | None) -> dict[str, str]:
    """The annotations that declare traffic intent, out of all of an object's."""
    return {k: v for k, v in (annotations or {}).items() if is_traffic_annotation(k)}
