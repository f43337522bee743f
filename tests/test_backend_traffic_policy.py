"""rendering/backend_traffic_policy.py: spec.traffic and the ome.io/* traffic annotations as Envoy
Gateway's BackendTrafficPolicy, field by field, and what status.traffic says (the apiserver's side of
the same policies: tests/test_traffic_policy_conformance.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from servingops.api_models.ome.traffic import TrafficSpec
from servingops.api_models.refs import ConditionUpdate
from servingops.rendering import backend_traffic_policy as btp
from servingops.rendering.render import Owner

pytestmark = pytest.mark.unit

OWNER = Owner(name="chat", namespace="team", uid="u-1")
ROUTES = ["chat-engine", "chat-router"]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def spec_of(traffic: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    declared = btp.intent(TrafficSpec.model_validate(traffic) if traffic else None, annotations)
    assert declared is not None
    return dict(btp.render_policy(OWNER, ROUTES, declared)["spec"])


def balancer(traffic: dict[str, Any]) -> dict[str, Any]:
    return dict(spec_of(traffic)["loadBalancer"])


# -- intent ---------------------------------------------------------------------------------------------


def test_no_spec_traffic_and_no_traffic_annotation_is_no_intent() -> None:
    assert btp.intent(None, {"ome.io/rollout-paused": "true", "other.io/retry-attempts": "3"}) is None
    assert btp.intent(TrafficSpec(), None) is None  # `traffic: {}` declares nothing
    assert not btp.declares_traffic({}, {}) and not btp.declares_traffic({"algorithm": None}, None)


@pytest.mark.parametrize("key", ["ome.io/timeout-idle", "ome.io/btp.retry.numRetries", "ome.io/dr.outlierDetection.x"])
def test_any_traffic_annotation_declares_intent_and_the_algorithm_is_default(key: str) -> None:
    declared = btp.intent(None, {key: "1s", "ome.io/rollout-paused": "true"})
    assert declared is not None and declared.annotations == {key: "1s"}
    assert declared.algorithm == "Default"
    assert btp.declares_traffic(None, {key: "1s"})


# -- spec.traffic -----------------------------------------------------------------------------------------


def test_the_policy_is_named_after_the_service_owned_by_it_and_targets_every_route() -> None:
    declared = btp.intent(TrafficSpec.model_validate({"algorithm": "Random"}), None)
    assert declared is not None
    body = btp.render_policy(OWNER, ROUTES, declared)
    assert body["apiVersion"] == "gateway.envoyproxy.io/v1alpha1" and body["kind"] == "BackendTrafficPolicy"
    meta = body["metadata"]
    assert (meta["name"], meta["namespace"]) == ("chat", "team")
    assert meta["labels"] == {"app.kubernetes.io/managed-by": "servingops", "ome.io/inferenceservice": "chat"}
    assert meta["ownerReferences"] == [OWNER.reference()]
    assert body["spec"]["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": r}
                                          for r in ROUTES]
    assert btp.ours(body, OWNER) and not btp.ours(body, Owner(name="chat", namespace="team", uid="other"))


@pytest.mark.parametrize("algorithm", ["RoundRobin", "LeastRequest", "Random"])
def test_each_algorithm_is_the_load_balancer_type(algorithm: str) -> None:
    assert balancer({"algorithm": algorithm}) == {"type": algorithm}


def test_consistent_hash_on_one_header_is_envoy_gateways_header_type() -> None:
    assert balancer({"algorithm": "ConsistentHash", "consistentHash": {"type": "Header", "headers": [
        {"name": "x-session"}]}}) == {"type": "ConsistentHash", "consistentHash": {
            "type": "Header", "header": {"name": "x-session"}}}


def test_consistent_hash_on_several_headers_is_the_headers_type_hashing_them_together() -> None:
    assert balancer({"algorithm": "ConsistentHash", "consistentHash": {"type": "Header", "headers": [
        {"name": "x-tenant"}, {"name": "x-session"}]}})["consistentHash"] == {
            "type": "Headers", "headers": [{"name": "x-tenant"}, {"name": "x-session"}]}


def test_a_cookie_with_a_ttl_is_issued_by_the_gateway_and_without_one_is_the_clients() -> None:
    issued = balancer({"algorithm": "ConsistentHash", "consistentHash": {"type": "Cookie", "cookie": {
        "name": "affinity", "ttlSeconds": 3600}}})
    assert issued["consistentHash"] == {"type": "Cookie", "cookie": {"name": "affinity", "ttl": "1h0m0s"}}
    for cookie in ({"name": "affinity"}, {"name": "affinity", "ttlSeconds": 0}):
        client = balancer({"algorithm": "ConsistentHash", "consistentHash": {"type": "Cookie", "cookie": cookie}})
        assert client["consistentHash"] == {"type": "Cookie", "cookie": {"name": "affinity"}}


def test_source_ip_hashing() -> None:
    assert balancer({"algorithm": "ConsistentHash", "consistentHash": {"type": "SourceIP"}})["consistentHash"] == {
        "type": "SourceIP"}


def test_endpoint_override_reads_each_header_and_keeps_the_gateway_default_without_an_algorithm() -> None:
    override = {"type": "Header", "headers": [{"name": "x-endpoint-hostport"}, {"name": "x-alt"}]}
    assert balancer({"endpointOverride": override}) == {
        "type": "LeastRequest", "endpointOverride": {"extractFrom": [{"header": "x-endpoint-hostport"},
                                                                     {"header": "x-alt"}]}}
    assert balancer({"algorithm": "Random", "endpointOverride": override})["type"] == "Random"


def test_without_algorithm_or_override_no_load_balancer_is_written() -> None:
    assert "loadBalancer" not in spec_of(annotations={"ome.io/circuit-breaker-max-connections": "10"})


# -- the annotations --------------------------------------------------------------------------------------


def test_circuit_breaker_annotations_map_to_their_fields() -> None:
    spec = spec_of(annotations={
        "ome.io/circuit-breaker-max-connections": "1024", "ome.io/circuit-breaker-max-parallel-requests": "64",
        "ome.io/circuit-breaker-max-pending-requests": "256", "ome.io/circuit-breaker-max-parallel-retries": "3",
        "ome.io/circuit-breaker-per-endpoint-max-connections": "1"})
    assert spec["circuitBreaker"] == {"maxConnections": 1024, "maxParallelRequests": 64, "maxPendingRequests": 256,
                                      "maxParallelRetries": 3, "perEndpoint": {"maxConnections": 1}}


def test_retry_annotations_map_to_their_fields() -> None:
    spec = spec_of(annotations={"ome.io/retry-attempts": "3", "ome.io/retry-on": "connect-failure,reset,5xx",
                                "ome.io/retry-per-try-timeout": "30s"})
    assert spec["retry"] == {"numRetries": 3, "retryOn": {"triggers": ["connect-failure", "reset", "5xx"]},
                             "perRetry": {"timeout": "30s"}}


def test_timeout_annotations_map_to_their_fields_in_normal_form() -> None:
    spec = spec_of(annotations={"ome.io/timeout-idle": "5m", "ome.io/timeout-max-connection-duration": "1h30m",
                                "ome.io/timeout-tcp-connect": "1.5s"})
    assert spec["timeout"] == {"http": {"connectionIdleTimeout": "5m0s", "maxConnectionDuration": "1h30m0s"},
                               "tcp": {"connectTimeout": "1s500ms"}}


@pytest.mark.parametrize(("value", "written"), [("10s", "10s"), ("250ms", "250ms"), ("0", "0s"), ("90s", "1m30s"),
                                                ("1h", "1h0m0s"), ("2m3s4ms", "2m3s4ms"), ("1500us", "1ms500us")])
def test_durations(value: str, written: str) -> None:
    if written.endswith("us"):
        with pytest.raises(btp.TranslationError, match=r"InvalidDuration.*whole milliseconds"):
            btp.parse_duration("k", value)
    else:
        assert btp.parse_duration("k", value) == written


@pytest.mark.parametrize(("annotations", "reason"), [
    ({"ome.io/circuit-breaker-max-connections": "many"}, "InvalidIntValue"),
    ({"ome.io/circuit-breaker-max-connections": "-1"}, "InvalidIntValue"),
    ({"ome.io/retry-attempts": "3"}, "MissingRetryOn"),
    ({"ome.io/retry-attempts": "1", "ome.io/retry-on": "5xx,,reset"}, "InvalidRetryOn"),
    ({"ome.io/retry-on": "503"}, "InvalidRetryOn"),
    ({"ome.io/timeout-idle": "30"}, "InvalidDuration"),
    ({"ome.io/btp.": "1"}, "InvalidPassthrough"),
])
def test_a_bad_annotation_value_is_a_translation_error_naming_upstreams_reason(
        annotations: dict[str, str], reason: str) -> None:
    with pytest.raises(btp.TranslationError, match=f"^{reason}"):
        spec_of(annotations=annotations)


def test_zero_retry_attempts_need_no_retry_on() -> None:
    assert spec_of(annotations={"ome.io/retry-attempts": "0"})["retry"] == {"numRetries": 0}


def test_pass_throughs_are_typed_as_upstream_and_win_over_everything_else() -> None:
    spec = spec_of({"algorithm": "RoundRobin"}, {
        "ome.io/retry-attempts": "3", "ome.io/retry-on": "connect-failure", "ome.io/btp.retry.numRetries": "5",
        "ome.io/btp.loadBalancer.type": "Random", "ome.io/btp.useClientProtocol": "true",
        "ome.io/btp.loadBalancer.slowStart.window": "30s", "ome.io/btp.x.ratio": "0.5"})
    assert spec["retry"]["numRetries"] == 5 and spec["loadBalancer"]["type"] == "Random"
    assert spec["useClientProtocol"] is True and spec["loadBalancer"]["slowStart"] == {"window": "30s"}
    assert spec["x"] == {"ratio": 0.5}


def test_istio_pass_throughs_are_intent_but_reported_as_not_honored() -> None:
    annotations = {"ome.io/dr.outlierDetection.consecutive5xxErrors": "5", "ome.io/timeout-idle": "1m"}
    assert "outlierDetection" not in spec_of(annotations=annotations)
    assert btp.unsupported(annotations) == ["ome.io/dr.outlierDetection.consecutive5xxErrors"]
    condition = btp.unsupported_condition(btp.unsupported(annotations))
    assert (condition.type, condition.status, condition.reason) == (
        "BackendPolicyUnsupportedFields", "True", "UnsupportedField")


# -- what is live -----------------------------------------------------------------------------------------


def policy(name: str, *, refs: list[dict[str, Any]] | None = None, ref: dict[str, Any] | None = None,
           uid: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if uid:
        meta["ownerReferences"] = [{"uid": uid, "controller": True}]
    spec: dict[str, Any] = {}
    if refs is not None:
        spec["targetRefs"] = refs
    if ref is not None:
        spec["targetRef"] = ref
    return {"metadata": meta, "spec": spec}


def test_a_policy_not_ours_that_targets_one_of_our_routes_or_has_our_name_conflicts() -> None:
    route = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "chat-router"}
    found = btp.conflicts([
        policy("team-router", refs=[route]),
        policy("single", ref={"kind": "HTTPRoute", "name": "chat-engine"}),  # group defaulted
        policy("chat"),  # our name, hand-authored
        policy("elsewhere", refs=[{**route, "name": "other-engine"}]),
        policy("gateway-wide", refs=[{**route, "kind": "Gateway", "name": "chat-engine"}]),
        policy("chat-mine", refs=[route], uid=OWNER.uid),  # ours: never a conflict
    ], OWNER, ROUTES)
    assert found == [btp.Conflict("chat", ()), btp.Conflict("single", ("chat-engine",)),
                     btp.Conflict("team-router", ("chat-router",))]
    assert "targets HTTPRoute chat-router" in found[2].message("team")
    assert "has the name" in found[0].message("team")


@pytest.mark.parametrize(("ancestors", "status", "reason"), [
    ([], "Unknown", "Pending"),
    ([{"conditions": [{"type": "Accepted", "status": "True"}]}], "True", "AcceptedByGateway"),
    ([{"conditions": [{"type": "Accepted", "status": "True"}]},
      {"conditions": [{"type": "Accepted", "status": "False", "reason": "Invalid", "message": "bad"}]}],
     "False", "GatewayRejected"),
])
def test_the_gateways_verdict_is_backend_policy_ready(ancestors: list[dict[str, Any]], status: str,
                                                      reason: str) -> None:
    condition = btp.acceptance({"status": {"ancestors": ancestors}})
    assert (condition.type, condition.status, condition.reason) == ("BackendPolicyReady", status, reason)


def route(*controllers: str) -> dict[str, Any]:
    return {"status": {"parents": [{"controllerName": c} for c in controllers]}}


def test_the_data_plane_condition_says_who_serves_the_routes() -> None:
    assert btp.data_plane([None, {}]).status == "Unknown"
    traefik = btp.data_plane([route("traefik.io/gateway-controller")])
    assert (traefik.status, traefik.reason) == ("False", "NotHonoredByDataPlane")
    assert "traefik.io/gateway-controller" in traefik.message
    envoy = btp.data_plane([route(btp.ENVOY_GATEWAY_CONTROLLER), route(btp.ENVOY_GATEWAY_CONTROLLER)])
    assert (envoy.status, envoy.reason) == ("True", "HonoredByDataPlane")
    assert btp.data_plane([route(btp.ENVOY_GATEWAY_CONTROLLER, "traefik.io/gateway-controller")]).status == "False"


def test_status_traffic_reports_the_policy_and_keeps_transition_times_while_a_status_holds() -> None:
    declared = btp.intent(TrafficSpec.model_validate({"algorithm": "LeastRequest"}), None)
    assert declared is not None
    pending = ConditionUpdate(type="BackendPolicyReady", status="Unknown", reason="Pending", message="m")
    first = btp.traffic_status(declared, "chat", ROUTES, [pending], None, 3, NOW)
    assert first["algorithm"] == "LeastRequest"
    assert first["backendPolicyResource"] == {"apiVersion": "gateway.envoyproxy.io/v1alpha1",
                                              "kind": "BackendTrafficPolicy", "name": "chat"}
    assert first["targetedHTTPRoutes"] == ROUTES
    assert first["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    later = NOW + timedelta(minutes=5)
    same = btp.traffic_status(declared, "chat", ROUTES, [pending], first, 4, later)
    assert same["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert same["conditions"][0]["observedGeneration"] == 4
    plane = btp.data_plane([])
    moved = btp.traffic_status(declared, None, ROUTES, [btp.failed(btp.TrafficReason.CONFLICTING_POLICY, "x"),
                                                        plane], same, 4, later)
    assert "backendPolicyResource" not in moved and "targetedHTTPRoutes" not in moved
    assert [c["type"] for c in moved["conditions"]] == ["BackendPolicyReady", "BackendPolicyDataPlane"]
    assert moved["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:05:00Z"


def test_status_traffic_drops_a_condition_that_no_longer_applies() -> None:
    declared = btp.intent(None, {"ome.io/dr.a": "1"})
    assert declared is not None
    with_unsupported = btp.traffic_status(declared, "chat", ROUTES, [btp.unsupported_condition(["ome.io/dr.a"])],
                                          None, 1, NOW)
    after = btp.traffic_status(declared, "chat", ROUTES, [btp.waiting("w")], with_unsupported, 1, NOW)
    assert [c["type"] for c in after["conditions"]] == ["BackendPolicyReady"]
