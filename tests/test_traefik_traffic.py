"""spec.traffic as Traefik's own load balancing (rendering/traefik_traffic.py), pure: what each declared field
becomes, the component's weighted TraefikService, the route's backendRefs, and status.traffic's conditions."""

from __future__ import annotations

from typing import Any

import pytest

from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.traffic import TrafficSpec
from servingops.api_models.operator_config import IngressConfig, parse_ingress
from servingops.api_models.serving import TrafficWeight
from servingops.rendering import render
from servingops.rendering import traefik_traffic as tt

pytestmark = pytest.mark.unit

OWNER = render.Owner(name="llama", namespace="team-a", uid="uid-1")


def _spec(body: dict[str, Any]) -> TrafficSpec:
    return TrafficSpec.model_validate(body)


@pytest.mark.parametrize(("traffic", "balancing", "unsupported"), [
    ({"algorithm": "RoundRobin"}, tt.Balancing("wrr"), ()),
    ({"algorithm": "LeastRequest"}, tt.Balancing("p2c"), ()),
    ({"algorithm": "ConsistentHash", "consistentHash": {"type": "SourceIP"}}, tt.Balancing("hrw"), ()),
    ({"algorithm": "ConsistentHash", "consistentHash": {"type": "Cookie", "cookie": {"name": "s"}}},
     tt.Balancing("wrr", cookie="s"), ()),
    ({"algorithm": "ConsistentHash", "consistentHash": {"type": "Cookie", "cookie": {"name": "s", "ttlSeconds": 60}}},
     tt.Balancing("wrr", cookie="s", max_age=60), ()),
    ({"algorithm": "ConsistentHash", "consistentHash": {"type": "Header", "headers": [{"name": "x-session"}]}},
     None, ("spec.traffic.consistentHash.headers",)),
    ({"algorithm": "Random"}, None, ("spec.traffic.algorithm=Random",)),
    ({"algorithm": "LeastRequest", "endpointOverride": {"type": "Header", "headers": [{"name": "x-ep"}]}},
     tt.Balancing("p2c"), ("spec.traffic.endpointOverride",)),
])
def test_each_declared_field_has_its_traefik_equivalent_or_is_named_unsupported(
        traffic: dict[str, Any], balancing: tt.Balancing | None, unsupported: tuple[str, ...]) -> None:
    translation = tt.translate(_spec(traffic), None)
    assert translation.balancing == balancing
    assert translation.unsupported == unsupported


def test_the_traffic_annotations_are_not_carried_by_the_traefik_translation() -> None:
    translation = tt.translate(_spec({"algorithm": "LeastRequest"}),
                               {"ome.io/retry-attempts": "3", "ome.io/circuit-breaker-max-connections": "9",
                                "unrelated": "x"})
    assert translation.unsupported == ("ome.io/circuit-breaker-max-connections", "ome.io/retry-attempts")
    assert tt.translate(None, None) == tt.Translation(balancing=None)


def test_the_route_names_the_revisions_services_with_their_weights_or_the_components_traefik_service() -> None:
    weights = [TrafficWeight(revision="old", weight=80), TrafficWeight(revision="new", weight=20)]
    plain = render.http_route(OWNER, ComponentType.ENGINE, weights)
    assert plain["spec"]["rules"][0]["backendRefs"] == [
        {"group": "", "kind": "Service", "port": 8080, "name": "llama-engine-rev-old", "weight": 80},
        {"group": "", "kind": "Service", "port": 8080, "name": "llama-engine-rev-new", "weight": 20}]
    assert render.route_weights(plain, "llama", ComponentType.ENGINE) == weights
    assert tt.referenced(plain) == [] and not tt.names_component(plain, "llama", ComponentType.ENGINE)
    route = render.http_route(OWNER, ComponentType.ENGINE, weights, weighted="llama-engine")
    assert tt.referenced(route) == ["llama-engine"]


def test_stale_are_ours_that_no_route_names() -> None:
    weights = [TrafficWeight(revision="a", weight=100)]
    engine = render.http_route(OWNER, ComponentType.ENGINE, weights, weighted="llama-engine")
    mine = [tt.weighted_service(OWNER, c, weights, tt.Balancing("p2c")) for c in (ComponentType.ENGINE,
                                                                                    ComponentType.DECODER)]
    other = {"metadata": {"name": "llama-router", "ownerReferences": [{"uid": "someone", "controller": True}]}}
    # The decoder's route went (or names its Services again): its TraefikService is stale; another's never is.
    assert tt.stale([*mine, other], OWNER, [engine, None]) == ["llama-decoder"]
    assert tt.stale([*mine, other], OWNER, [render.http_route(OWNER, ComponentType.ENGINE, weights)]) == [
        "llama-decoder", "llama-engine"]


def _served(route: dict[str, Any], resolved: str = "True") -> dict[str, Any]:
    route = dict(route, metadata=dict(route["metadata"], generation=2))
    route["status"] = {"parents": [{"controllerName": tt.TRAEFIK_CONTROLLER, "conditions": [
        {"type": "Accepted", "status": "True", "observedGeneration": 2},
        {"type": "ResolvedRefs", "status": resolved, "observedGeneration": 2}]}]}
    return route


def test_the_data_plane_condition_follows_what_traefik_serves() -> None:
    weights = [TrafficWeight(revision="a", weight=100)]
    switched = _served(render.http_route(OWNER, ComponentType.ENGINE, weights, weighted="llama-engine"))
    plain = _served(render.http_route(OWNER, ComponentType.ENGINE, weights))
    hrw = tt.translate(_spec({"algorithm": "ConsistentHash", "consistentHash": {"type": "SourceIP"}}), None)
    assert tt.served_by_traefik([switched]) and not tt.served_by_traefik([{"status": {}}])

    honored = tt.data_plane(hrw, [switched], available=True)
    assert (honored.status, honored.reason) == ("True", "HonoredByDataPlane")
    assert "llama-engine" in honored.message and "hrw" in honored.message
    ready = tt.ready(hrw, honored)
    assert (ready.type, ready.status, ready.reason) == ("BackendPolicyReady", "True", "AcceptedByGateway")

    moving = tt.data_plane(hrw, [plain], available=True)
    assert (moving.status, moving.reason) == ("Unknown", "Pending")
    assert tt.ready(hrw, moving).status == "Unknown"
    unresolved = tt.data_plane(hrw, [_served(switched, resolved="False")], available=True)
    assert unresolved.status == "Unknown"
    no_crd = tt.data_plane(hrw, [plain], available=False)
    assert (no_crd.status, no_crd.reason) == ("False", "NotHonoredByDataPlane")
    assert tt.ready(hrw, no_crd).reason == "NoTranslatorAvailable"

    header = tt.translate(_spec({"algorithm": "ConsistentHash",
                                 "consistentHash": {"type": "Header", "headers": [{"name": "x"}]}}), None)
    refused = tt.data_plane(header, [plain], available=True)
    assert (refused.status, refused.reason) == ("False", "NotHonoredByDataPlane")
    unsupported = tt.unsupported_condition(header)
    assert unsupported is not None and unsupported.type == "BackendPolicyUnsupportedFields"
    assert "spec.traffic.consistentHash.headers" in unsupported.message
    assert tt.unsupported_condition(hrw) is None


def test_the_translator_is_an_ingress_setting_defaulting_to_envoy_gateway() -> None:
    assert IngressConfig().traffic_translator == "envoyGateway"
    assert parse_ingress({"ingress": "trafficTranslator: traefik\n"}).traffic_translator == "traefik"
    with pytest.raises(Exception, match="trafficTranslator"):
        parse_ingress({"ingress": "trafficTranslator: istio\n"})


def test_the_components_weighted_traefik_service_carries_the_weights_and_the_route_names_it_alone() -> None:
    weights = [TrafficWeight(revision="old", weight=90), TrafficWeight(revision="new", weight=10)]
    body = tt.weighted_service(OWNER, ComponentType.ENGINE, weights, tt.Balancing("wrr", cookie="s"))
    assert body["metadata"]["name"] == tt.component_name("llama", ComponentType.ENGINE) == "llama-engine"
    assert body["metadata"]["ownerReferences"] == [OWNER.reference()]
    assert body["metadata"]["labels"][tt.LABEL_ISVC] == "llama"
    assert body["spec"] == {"weighted": {"services": [
        {"name": "llama-engine-rev-old", "kind": "Service", "port": 8080, "strategy": "wrr",
         "sticky": {"cookie": {"name": "s"}}, "weight": 90},
        {"name": "llama-engine-rev-new", "kind": "Service", "port": 8080, "strategy": "wrr",
         "sticky": {"cookie": {"name": "s"}}, "weight": 10}]}}
    plain = tt.weighted_service(OWNER, ComponentType.ENGINE, weights, None)
    assert plain["spec"]["weighted"]["services"][0] == {"name": "llama-engine-rev-old", "kind": "Service",
                                                         "port": 8080, "weight": 90}
    assert tt.service_weights(body, "llama", ComponentType.ENGINE) == weights
    assert tt.service_weights(None, "llama", ComponentType.ENGINE) == []

    route = render.http_route(OWNER, ComponentType.ENGINE, weights, weighted="llama-engine")
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"group": "traefik.io", "kind": "TraefikService", "name": "llama-engine"}]
    # The route is the same whatever the weights: a promote does not write it.
    assert route == render.http_route(OWNER, ComponentType.ENGINE, weights[::-1], weighted="llama-engine")
    assert render.route_weights(route, "llama", ComponentType.ENGINE) == []  # the weights are not on the route
    assert tt.names_component(route, "llama", ComponentType.ENGINE)
    assert not tt.names_component(render.http_route(OWNER, ComponentType.ENGINE, weights, weighted="other"), "llama",
                                  ComponentType.ENGINE)
    assert not tt.names_component(None, "llama", ComponentType.ENGINE)
    assert tt.split(route, body, "llama", ComponentType.ENGINE) == weights
    assert tt.split(render.http_route(OWNER, ComponentType.ENGINE, weights), None, "llama", ComponentType.ENGINE) \
        == weights
    assert tt.split(None, body, "llama", ComponentType.ENGINE) == []
