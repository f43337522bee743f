"""The Gateway API publisher's objects for a TrafficMap (rendering/global_route.py): upstream OME's
`<isvc>-global` HTTPRoute with one weighted backend per entry (weight 0 kept), ExternalName backend
Services, the Host rewrite, and the InvalidPlan cases; with EndpointSlices, selectorless backend Services and
the slices of the member gateways' addresses (what Traefik routes to: tests/support/global_route_dataplane.py,
run by tests/test_routing_e2e.py)."""

from __future__ import annotations

import pytest

from servingops.api_models.ome.traffic_map import TrafficMapEntry
from servingops.api_models.operator_config import EndpointConfig, GatewayBackend
from servingops.rendering.global_route import (
    CLUSTER_LABEL,
    ISVC_LABEL,
    MAX_BACKENDS,
    InvalidPlan,
    backend_service_name,
    gateway_ref,
    global_host,
    plan_compatibility_digest,
    render_backend_endpoint_slices,
    render_global_route,
    route_placement,
    withdrawn_because,
)

pytestmark = pytest.mark.unit

SETTINGS = EndpointConfig(global_gateway="gateway-system/global", backend_port=80,
                          global_host_template="{{ .Name }}.{{ .Namespace }}.global.example.com",
                          gateway_backend=GatewayBackend(rewrite_hostname=True))


def entry(cluster: str, weight: int) -> TrafficMapEntry:
    return TrafficMapEntry(cluster=cluster, endpoint=f"http://chat.prod.{cluster}.example.com", weight=weight)


def test_one_weighted_backend_per_entry_weight_zero_included() -> None:
    published = render_global_route(SETTINGS, "chat", "prod", "chat.prod.global.example.com",
                                    [entry("worker-b", 0), entry("worker-a", 2)])
    route = published.route
    assert route["metadata"] == {"name": "chat-global", "namespace": "prod", "labels": {ISVC_LABEL: "chat"}}
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "namespace": "gateway-system", "name": "global"}]
    assert route["spec"]["hostnames"] == ["chat.prod.global.example.com"]
    [rule] = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert [(b["name"], b["weight"], b["filters"][0]["urlRewrite"]["hostname"]) for b in rule["backendRefs"]] == [
        (backend_service_name("prod", "chat", "worker-a"), 2, "chat.prod.worker-a.example.com"),
        (backend_service_name("prod", "chat", "worker-b"), 0, "chat.prod.worker-b.example.com")]
    a, b = published.services
    assert a["spec"] == {"type": "ExternalName", "externalName": "chat.prod.worker-a.example.com",
                         "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    assert b["metadata"]["labels"] == {ISVC_LABEL: "chat", CLUSTER_LABEL: "worker-b"}
    assert published.claims == ("HTTPRoute/prod/chat-global", f"Service/prod/{a['metadata']['name']}",
                                f"Service/prod/{b['metadata']['name']}")
    assert [w for _, w in published.targets] == [2, 0]


def test_backend_names_are_stable_per_home_and_distinct_across_homes_and_services() -> None:
    names = {backend_service_name("prod", "chat", "worker-a"), backend_service_name("prod", "chat", "worker-b"),
             backend_service_name("dev", "chat", "worker-a"), backend_service_name("prod", "chat2", "worker-a")}
    assert len(names) == 4 and all(n.startswith("tmb-") and len(n) == 20 for n in names)
    assert backend_service_name("prod", "chat", "worker-a") == backend_service_name("prod", "chat", "worker-a")


def test_without_rewrite_the_backend_has_no_filter() -> None:
    settings = EndpointConfig(global_gateway="global", backend_port=8080)
    published = render_global_route(settings, "chat", "prod", "chat.example.com", [entry("worker-a", 1)])
    [backend] = published.route["spec"]["rules"][0]["backendRefs"]
    assert "filters" not in backend and backend["port"] == 8080
    assert published.route["spec"]["parentRefs"][0]["namespace"] == "prod"  # `name` alone: the route's namespace


def test_more_entries_than_a_rule_takes_is_an_invalid_plan() -> None:
    entries = [entry(f"worker-{i}", 1) for i in range(MAX_BACKENDS + 1)]
    with pytest.raises(InvalidPlan, match="at most 16 backendRefs"):
        render_global_route(SETTINGS, "chat", "prod", "chat.example.com", entries)
    render_global_route(SETTINGS, "chat", "prod", "chat.example.com", entries[:MAX_BACKENDS])


def test_an_endpoint_without_a_host_is_an_invalid_plan() -> None:
    with pytest.raises(InvalidPlan, match="has no host"):
        render_global_route(SETTINGS, "chat", "prod", "chat.example.com",
                            [TrafficMapEntry(cluster="worker-a", endpoint="not a url", weight=1)])


def test_the_global_host_annotation_wins_over_the_template_and_is_checked() -> None:
    assert global_host(SETTINGS, "chat", "prod", {}) == "chat.prod.global.example.com"
    assert global_host(SETTINGS, "chat", "prod", {"ome.io/global-host": "chat.global.example.com"}) == (
        "chat.global.example.com")
    assert global_host(EndpointConfig(global_gateway="g", backend_port=80), "chat", "prod", {}) is None
    for bad, says in [("Chat.example.com", "DNS subdomain"), ("10.0.0.1", "IP address"), ("a..b", "DNS subdomain")]:
        with pytest.raises(InvalidPlan, match=says):
            global_host(SETTINGS, "chat", "prod", {"ome.io/global-host": bad})
    # A template that renders no DNS name for this service is the publisher's InvalidPlan, not the ConfigMap's.
    with pytest.raises(InvalidPlan, match="DNS subdomain"):
        global_host(EndpointConfig(global_gateway="g", backend_port=80, global_host_template="{{ .Name }}_x.example"),
                    "chat", "prod", {})
    assert global_host(SETTINGS, "chat", "prod", {"ome.io/global-host": "*.global.example.com"}) == (
        "*.global.example.com")


def test_gateway_references_and_what_withdraws_publication() -> None:
    assert gateway_ref(EndpointConfig(global_gateway="ns/gw", backend_port=80), "prod")["namespace"] == "ns"
    for bad in ("a/b/c", "/gw", "ns/"):
        with pytest.raises(InvalidPlan, match="global gateway"):
            gateway_ref(EndpointConfig(global_gateway=bad, backend_port=80), "prod")
    assert withdrawn_because(EndpointConfig()) == "endpoint.globalGateway is not set"
    assert withdrawn_because(SETTINGS) is None


def test_a_shared_route_namespace_hashes_the_source_namespace_into_the_name() -> None:
    shared = EndpointConfig(global_gateway="g", backend_port=80, route_namespace="routes")
    ns, name = route_placement(shared, "chat", "prod")
    assert ns == "routes" and name.startswith("chat-") and name.endswith("-global")
    assert len(name) == len("chat--global") + 8
    assert route_placement(shared, "chat", "dev") != (ns, name)
    assert route_placement(shared, "chat", "routes") == ("routes", "chat-global")
    assert plan_compatibility_digest(shared) != plan_compatibility_digest(SETTINGS)
    assert plan_compatibility_digest(SETTINGS).startswith("sha256:") and len(plan_compatibility_digest(SETTINGS)) == 71


def test_with_endpoint_slices_the_backends_are_selectorless_services_and_the_route_is_the_same() -> None:
    entries = [entry("worker-a", 3), entry("worker-b", 1)]
    plain = render_global_route(SETTINGS, "chat", "prod", "chat.example.com", entries)
    sliced = render_global_route(SETTINGS, "chat", "prod", "chat.example.com", entries, endpoint_slices=True)
    assert sliced.route == plain.route and sliced.claims == plain.claims and sliced.targets == plain.targets
    for service in sliced.services:
        # No selector (the endpoint controller makes no slice of its own) and no externalName.
        assert service["spec"] == {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    assert [s["metadata"] for s in sliced.services] == [s["metadata"] for s in plain.services]


def test_each_homes_gateway_addresses_become_a_ready_slice_of_its_backend_service() -> None:
    slices = render_backend_endpoint_slices(SETTINGS, "chat", "prod", {
        "worker-b": ["10.250.7.2"], "worker-a": ["10.250.3.2", "fd00::2", "10.250.3.2", "10.250.3.9"]})
    service_a, service_b = (backend_service_name("prod", "chat", c) for c in ("worker-a", "worker-b"))
    assert [(s["metadata"]["name"], s["addressType"]) for s in slices] == [
        (f"{service_a}-ipv4", "IPv4"), (f"{service_a}-ipv6", "IPv6"), (f"{service_b}-ipv4", "IPv4")]
    a4 = slices[0]
    assert a4["metadata"]["namespace"] == "prod"
    assert a4["metadata"]["labels"] == {
        "kubernetes.io/service-name": service_a, ISVC_LABEL: "chat", CLUSTER_LABEL: "worker-a",
        "endpointslice.kubernetes.io/managed-by": "trafficmap-publisher.ome.io"}
    # The port's name is the Service port's: a Gateway matches the two by name.
    assert a4["ports"] == [{"name": "http", "port": 80, "protocol": "TCP"}]
    assert a4["endpoints"] == [{"addresses": ["10.250.3.2"], "conditions": {"ready": True}},
                               {"addresses": ["10.250.3.9"], "conditions": {"ready": True}}]  # the repeat dropped
    assert slices[1]["endpoints"] == [{"addresses": ["fd00::2"], "conditions": {"ready": True}}]


def test_slices_follow_the_route_namespace_and_a_home_without_addresses_gets_none() -> None:
    shared = EndpointConfig(global_gateway="g", backend_port=8443, route_namespace="routes")
    [only] = render_backend_endpoint_slices(shared, "chat", "prod", {"worker-a": ["10.250.3.2"], "worker-b": []})
    assert only["metadata"]["namespace"] == "routes" and only["ports"][0]["port"] == 8443
    assert only["metadata"]["labels"][CLUSTER_LABEL] == "worker-a"
    assert render_global_route(shared, "chat", "prod", "chat.example.com", [entry("worker-a", 1)],
                               endpoint_slices=True).services[0]["metadata"]["namespace"] == "routes"


def test_a_gateway_address_that_is_not_an_ip_is_an_invalid_plan() -> None:
    with pytest.raises(InvalidPlan, match=r"worker-a: gateway address 'gw\.example\.com' is not an IP"):
        render_backend_endpoint_slices(SETTINGS, "chat", "prod", {"worker-a": ["gw.example.com"]})
