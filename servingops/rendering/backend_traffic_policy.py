"""spec.traffic and the ome.io/* traffic annotations of an InferenceService as Envoy Gateway's
`gateway.envoyproxy.io/v1alpha1` BackendTrafficPolicy, and what status.traffic says of it. Pure.

Where seed 004 is silent, upstream OME (v1.3) is the reference: one policy named after the
InferenceService, a controller ownerReference to it, `targetRefs` naming every HTTPRoute the product
emits for it (here one per component, `<isvc>-<component>`: rendering/ingress.py), the annotations'
fields (circuitBreaker, retry, timeout), `ome.io/btp.<path>` pass-throughs applied last, and the
BackendPolicyReady reasons. A policy that is not ours and has our name or targets one of our routes
wins: ours is not written (upstream defers to the same-named one; the seed's per-component override is
a hand-authored policy on a component's route, which would otherwise conflict with ours on it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from servingops.api_models.conditions import merge_conditions
from servingops.api_models.ome.enums import HashType, LoadBalancingType
from servingops.api_models.ome.traffic import (
    DEFAULT_ALGORITHM,
    TrafficCondition,
    TrafficReason,
    TrafficSpec,
    TrafficStatus,
)
from servingops.api_models.ome.traffic_annotations import (
    ENVOY_GATEWAY_PASSTHROUGH,
    ISTIO_PASSTHROUGH,
    RETRY_TRIGGERS,
    TrafficAnnotation,
    traffic_annotations,
)
from servingops.api_models.refs import ConditionUpdate
from servingops.rendering.ingress import GATEWAY_GROUP
from servingops.rendering.names import route_name
from servingops.rendering.render import LABEL_MANAGED_BY, MANAGED_BY, Owner

GROUP, VERSION, KIND, PLURAL = "gateway.envoyproxy.io", "v1alpha1", "BackendTrafficPolicy", "backendtrafficpolicies"
API_VERSION = f"{GROUP}/{VERSION}"
ENVOY_GATEWAY_CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"
"""The controllerName Envoy Gateway's GatewayClass carries, and writes into a route's status.parents[]."""
LABEL_ISVC = "ome.io/inferenceservice"

_CIRCUIT_BREAKER = {
    TrafficAnnotation.CB_MAX_CONNECTIONS: ("maxConnections",),
    TrafficAnnotation.CB_MAX_PARALLEL_REQUESTS: ("maxParallelRequests",),
    TrafficAnnotation.CB_MAX_PENDING_REQUESTS: ("maxPendingRequests",),
    TrafficAnnotation.CB_MAX_PARALLEL_RETRIES: ("maxParallelRetries",),
    TrafficAnnotation.CB_PER_ENDPOINT_MAX_CONNECTIONS: ("perEndpoint", "maxConnections"),
}
_DURATIONS = {
    TrafficAnnotation.RETRY_PER_TRY_TIMEOUT: ("retry", "perRetry", "timeout"),
    TrafficAnnotation.TIMEOUT_IDLE: ("timeout", "http", "connectionIdleTimeout"),
    TrafficAnnotation.TIMEOUT_MAX_CONNECTION_DURATION: ("timeout", "http", "maxConnectionDuration"),
    TrafficAnnotation.TIMEOUT_TCP_CONNECT: ("timeout", "tcp", "connectTimeout"),
}
_UINT32_MAX = 4294967295  # the schema's bound on every circuit-breaker count
_GO_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_NANOS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


class TranslationError(ValueError):
    """The intent cannot be rendered (an annotation's value does not parse): BackendPolicyReady False,
    TranslationFailed, with this message; upstream's admission reason is its first word."""


@dataclass(frozen=True)
class Intent:
    """What the service declares: spec.traffic and its ome.io/* traffic annotations."""

    traffic: TrafficSpec | None = None
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def algorithm(self) -> str:
        """status.traffic.algorithm: the declared algorithm, or Default (the Gateway's own)."""
        algorithm = self.traffic.algorithm if self.traffic is not None else None
        return algorithm.value if algorithm is not None else DEFAULT_ALGORITHM


def intent(traffic: TrafficSpec | None, annotations: dict[str, str] | None) -> Intent | None:
    """The declared intent, or None when there is none (then no policy and no status.traffic). An empty
    `traffic: {}` declares nothing, as upstream's check of its three fields has it."""
    typed = traffic if traffic is not None and traffic.model_dump(exclude_none=True) else None
    declared = traffic_annotations(annotations)
    if typed is None and not declared:
        return None
    return Intent(traffic=typed, annotations=declared)


def declares_traffic(traffic: object, annotations: dict[str, str] | None) -> bool:
    """Whether the object as stored (spec.traffic unparsed) declares intent: what the observation
    tells the workflow, so a service without any pays no policy call."""
    typed = isinstance(traffic, dict) and any(v is not None for v in traffic.values())
    return typed or bool(traffic_annotations(annotations))


def policy_name(isvc: str) -> str:
    return isvc


def target_routes(isvc: str, components: Iterable[str]) -> list[str]:
    """Every HTTPRoute the product emits for the service: one per served component."""
    return [route_name(isvc, c) for c in components]


# -- values of the annotations ------------------------------------------------------------------------


def parse_count(key: str, value: str) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise TranslationError(f"InvalidIntValue: {key}={value!r} is not a whole number") from None
    if not 0 <= number <= _UINT32_MAX:
        raise TranslationError(f"InvalidIntValue: {key}={value!r} is outside 0-{_UINT32_MAX}")
    return number


def parse_duration(key: str, value: str) -> str:
    """A Go duration (`10s`, `1m30s`, `250ms`) in the form Envoy Gateway's schema takes: Go's normal form
    for whole seconds (`5m` becomes `5m0s`, as upstream writes it), `<s>s<ms>ms` with milliseconds (the
    schema has no decimals). Finer than a millisecond does not fit the schema and is refused."""
    text = value.strip()
    if text == "0":
        return "0s"
    if not text or _GO_DURATION.sub("", text):
        raise TranslationError(f"InvalidDuration: {key}={value!r} is not a duration (units ns, us, ms, s, m, h)")
    nanos = sum(round(float(number) * _NANOS[unit]) for number, unit in _GO_DURATION.findall(text))
    if nanos % 1_000_000:
        raise TranslationError(f"InvalidDuration: {key}={value!r}: Envoy Gateway takes whole milliseconds")
    millis = nanos // 1_000_000
    seconds, ms = divmod(millis, 1000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if seconds == 0:
        return f"{ms}ms" if ms else "0s"
    out = f"{hours}h" if hours else ""
    out += f"{minutes}m" if hours or minutes else ""
    return out + f"{secs}s" + (f"{ms}ms" if ms else "")


def parse_retry_on(key: str, value: str) -> list[str]:
    items = [item.strip() for item in value.split(",")]
    bad = [item for item in items if item not in RETRY_TRIGGERS]
    if not value.strip() or bad:
        raise TranslationError(f"InvalidRetryOn: {key}={value!r}: each item must be one of "
                               f"{', '.join(RETRY_TRIGGERS)}")
    return items


def passthrough_value(value: str) -> int | bool | float | str:
    """A pass-through's value as upstream converts it: a whole number, a boolean, a decimal, in that
    order, else the string."""
    text = value.strip()
    try:
        return int(text)
    except ValueError:
        pass
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    try:
        return float(text)
    except ValueError:
        return value


def _put(spec: dict[str, Any], path: Iterable[str], value: object) -> None:
    *parents, leaf = list(path)
    node = spec
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value


# -- the policy -----------------------------------------------------------------------------------------


def load_balancer(traffic: TrafficSpec) -> dict[str, Any] | None:
    """spec.loadBalancer from spec.traffic (None: nothing to say, the Gateway's default applies)."""
    algorithm, override = traffic.algorithm, traffic.endpoint_override
    if algorithm is None and override is None:
        return None
    # Envoy Gateway requires a type beside endpointOverride; with none declared its own default is
    # written, which is what "Default" means there.
    body: dict[str, Any] = {"type": (algorithm or LoadBalancingType.LEAST_REQUEST).value}
    chash = traffic.consistent_hash
    if algorithm is LoadBalancingType.CONSISTENT_HASH and chash is not None:
        if chash.type is HashType.HEADER:
            headers = [{"name": h.name} for h in chash.headers or []]
            # One header is EG's `Header` type; several are `Headers` (hashed together).
            body["consistentHash"] = ({"type": "Header", "header": headers[0]} if len(headers) == 1
                                      else {"type": "Headers", "headers": headers})
        elif chash.type is HashType.COOKIE and chash.cookie is not None:
            cookie: dict[str, Any] = {"name": chash.cookie.name}
            if chash.cookie.ttl_seconds:
                cookie["ttl"] = parse_duration("spec.traffic.consistentHash.cookie.ttlSeconds",
                                               f"{chash.cookie.ttl_seconds}s")
            body["consistentHash"] = {"type": "Cookie", "cookie": cookie}
        else:
            body["consistentHash"] = {"type": "SourceIP"}
    if override is not None:
        body["endpointOverride"] = {"extractFrom": [{"header": h.name} for h in override.headers or []]}
    return body


def annotation_fields(annotations: dict[str, str]) -> dict[str, Any]:
    """circuitBreaker, retry and timeout from the typed annotations. Raises TranslationError."""
    spec: dict[str, Any] = {}
    for key, path in _CIRCUIT_BREAKER.items():
        if key.value in annotations:
            _put(spec, ("circuitBreaker", *path), parse_count(key.value, annotations[key.value]))
    attempts = annotations.get(TrafficAnnotation.RETRY_ATTEMPTS.value)
    retry_on = annotations.get(TrafficAnnotation.RETRY_ON.value)
    if attempts is not None:
        count = parse_count(TrafficAnnotation.RETRY_ATTEMPTS.value, attempts)
        if count > 0 and retry_on is None:
            raise TranslationError(f"MissingRetryOn: {TrafficAnnotation.RETRY_ATTEMPTS.value} set to {count} "
                                   f"requires {TrafficAnnotation.RETRY_ON.value}")
        _put(spec, ("retry", "numRetries"), count)
    if retry_on is not None:
        _put(spec, ("retry", "retryOn", "triggers"), parse_retry_on(TrafficAnnotation.RETRY_ON.value, retry_on))
    for key, path in _DURATIONS.items():
        if key.value in annotations:
            _put(spec, path, parse_duration(key.value, annotations[key.value]))
    return spec


def unsupported(annotations: dict[str, str]) -> list[str]:
    """Declared keys the Envoy Gateway translation leaves out: Istio's pass-throughs."""
    return sorted(k for k in annotations if k.startswith(ISTIO_PASSTHROUGH))


def render_policy(owner: Owner, routes: list[str], declared: Intent) -> dict[str, Any]:
    """The BackendTrafficPolicy of the service, targeting `routes`. Raises TranslationError."""
    spec: dict[str, Any] = {"targetRefs": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": r} for r in routes]}
    if declared.traffic is not None:
        balancer = load_balancer(declared.traffic)
        if balancer is not None:
            spec["loadBalancer"] = balancer
    spec.update(annotation_fields(declared.annotations))
    for key in sorted(declared.annotations):
        if key.startswith(ENVOY_GATEWAY_PASSTHROUGH):
            path = key[len(ENVOY_GATEWAY_PASSTHROUGH):].split(".")
            if not all(path):
                raise TranslationError(f"InvalidPassthrough: {key} names no field path")
            _put(spec, path, passthrough_value(declared.annotations[key]))
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {
            "name": policy_name(owner.name), "namespace": owner.namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ISVC: owner.name},
            "ownerReferences": [owner.reference()],
        },
        "spec": spec,
    }


# -- what is live ---------------------------------------------------------------------------------------


def ours(policy: dict[str, Any], owner: Owner) -> bool:
    """Written by us for this service: a controller ownerReference to its uid."""
    refs = (policy.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == owner.uid and r.get("controller") for r in refs)


def claimed_routes(policy: dict[str, Any], routes: Iterable[str]) -> list[str]:
    """Those of `routes` the policy targets (targetRef or targetRefs naming an HTTPRoute)."""
    spec = policy.get("spec") or {}
    refs = [*(spec.get("targetRefs") or []), *([spec["targetRef"]] if spec.get("targetRef") else [])]
    names = {str(r.get("name")) for r in refs
             if r.get("kind") == "HTTPRoute" and (r.get("group") or GATEWAY_GROUP) == GATEWAY_GROUP}
    return [r for r in routes if r in names]


@dataclass(frozen=True)
class Conflict:
    """A policy that is not ours and wins over ours."""

    name: str
    routes: tuple[str, ...]
    """Our routes it targets (empty: it only has our policy's name)."""

    def message(self, namespace: str) -> str:
        what = (f"targets HTTPRoute {', '.join(self.routes)}" if self.routes else "has the name OME's policy takes")
        return (f"{KIND} {namespace}/{self.name} is not this InferenceService's and {what}: it wins, "
                f"OME's policy is not written")


def conflicts(policies: Iterable[dict[str, Any]], owner: Owner, routes: list[str]) -> list[Conflict]:
    """Policies in the namespace that are not ours and have our name or target one of our routes."""
    found = []
    for policy in policies:
        if ours(policy, owner):
            continue
        name = str((policy.get("metadata") or {}).get("name") or "")
        claimed = claimed_routes(policy, routes)
        if claimed or name == policy_name(owner.name):
            found.append(Conflict(name=name, routes=tuple(claimed)))
    return sorted(found, key=lambda c: c.name)


def acceptance(policy: dict[str, Any]) -> ConditionUpdate:
    """BackendPolicyReady of a policy we applied, from status.ancestors[] (Envoy Gateway writes an
    Accepted condition per Gateway it attached to)."""
    ready = TrafficCondition.BACKEND_POLICY_READY.value
    verdicts = [c for a in (policy.get("status") or {}).get("ancestors") or []
                for c in a.get("conditions") or [] if c.get("type") == "Accepted"]
    refused = next((c for c in verdicts if c.get("status") == "False"), None)
    if refused is not None:
        return ConditionUpdate(type=ready, status="False", reason=TrafficReason.GATEWAY_REJECTED.value,
                               message=f"{refused.get('reason', '')}: {refused.get('message', '')}")
    if verdicts and all(c.get("status") == "True" for c in verdicts):
        return ConditionUpdate(type=ready, status="True", reason=TrafficReason.ACCEPTED_BY_GATEWAY.value,
                               message=f"accepted by {len(verdicts)} Gateway(s)")
    return ConditionUpdate(type=ready, status="Unknown", reason=TrafficReason.PENDING.value,
                           message="applied; no Gateway controller has accepted it yet")


def data_plane(routes: Iterable[dict[str, Any] | None]) -> ConditionUpdate:
    """Whether the controllers serving our routes (their status.parents[].controllerName) read a
    BackendTrafficPolicy: only Envoy Gateway's does."""
    controllers = sorted({str(p.get("controllerName")) for r in routes if r
                          for p in (r.get("status") or {}).get("parents") or [] if p.get("controllerName")})
    kind = TrafficCondition.DATA_PLANE.value
    if not controllers:
        return ConditionUpdate(type=kind, status="Unknown", reason=TrafficReason.NOT_REPORTED.value,
                               message="no Gateway controller has reported on the routes yet")
    others = [c for c in controllers if c != ENVOY_GATEWAY_CONTROLLER]
    if others:
        return ConditionUpdate(type=kind, status="False", reason=TrafficReason.NOT_HONORED.value, message=(
            f"the routes are served by {', '.join(others)}, which does not read a {KIND}: requests through it "
            f"are balanced by its own defaults, not by spec.traffic or the ome.io/* traffic annotations"))
    return ConditionUpdate(type=kind, status="True", reason=TrafficReason.HONORED.value,
                           message=f"the routes are served by {ENVOY_GATEWAY_CONTROLLER}")


def not_served(message: str) -> ConditionUpdate:
    return ConditionUpdate(type=TrafficCondition.BACKEND_POLICY_READY.value, status="False",
                           reason=TrafficReason.NO_TRANSLATOR_AVAILABLE.value, message=message)


def waiting(message: str) -> ConditionUpdate:
    return ConditionUpdate(type=TrafficCondition.BACKEND_POLICY_READY.value, status="Unknown",
                           reason=TrafficReason.PENDING.value, message=message)


def failed(reason: TrafficReason, message: str) -> ConditionUpdate:
    return ConditionUpdate(type=TrafficCondition.BACKEND_POLICY_READY.value, status="False", reason=reason.value,
                           message=message)


def unsupported_condition(keys: list[str]) -> ConditionUpdate:
    return ConditionUpdate(type=TrafficCondition.UNSUPPORTED_FIELDS.value, status="True",
                           reason=TrafficReason.UNSUPPORTED_FIELD.value,
                           message=f"the Envoy Gateway translation does not honor {len(keys)} declared "
                                   f"annotation(s): {' '.join(keys)}")


def traffic_status(declared: Intent, emitted: str | None, routes: list[str], updates: list[ConditionUpdate],
                   previous: dict[str, Any] | None, generation: int, now: datetime) -> dict[str, Any]:
    """status.traffic (API form): the resolved algorithm, the emitted policy (None: none written) and
    the routes it targets, and the conditions, each keeping its lastTransitionTime while its status
    holds. A condition type not in `updates` leaves (it no longer applies)."""
    kept = [c for c in (previous or {}).get("conditions") or [] if c.get("type") in {u.type for u in updates}]
    body: dict[str, Any] = {"algorithm": declared.algorithm,
                            "conditions": merge_conditions(kept, updates, generation=generation, now=now)}
    if emitted is not None:
        body["backendPolicyResource"] = {"apiVersion": API_VERSION, "kind": KIND, "name": emitted}
        body["targetedHTTPRoutes"] = list(routes)
    return TrafficStatus.model_validate(body).model_dump(by_alias=True, exclude_none=True, mode="json")
