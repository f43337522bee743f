"""The pure rules of a component's HTTPRoute and its Gateway (rendering/ingress.py and
render.http_route): parentRefs and hostnames from the operator's ingress block, the entrypoint's
top-level host, weights exactly as given, the Gateway's verdict read from status.parents, and
whether a live route drifted from what the configuration renders now."""

from __future__ import annotations

from typing import Any

import pytest

from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.operator_config import IngressConfig, OperatorConfigError
from servingops.api_models.serving import IngressObservation, RouteStatus, TrafficWeight
from servingops.rendering import ingress, render

pytestmark = pytest.mark.unit

ENGINE, DECODER, ROUTER = ComponentType.ENGINE, ComponentType.DECODER, ComponentType.ROUTER
OWNER = render.Owner(name="llama", namespace="team-a", uid="u-1")
GATEWAY = IngressConfig(ome_ingress_gateway="servingops-gateway/inference", ingress_domain="example.test")
PARENT = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "servingops-gateway",
          "name": "inference"}


def _condition(kind: str, status: str, reason: str, generation: int | None, message: str = "") -> dict[str, Any]:
    body = {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}
    if generation is not None:
        body["observedGeneration"] = generation
    return body


def _route(generation: int = 2, parents: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "llama-engine", "namespace": "team-a", "generation": generation},
            "spec": {"rules": [], **spec}, "status": {"parents": parents or []}}


def _entry(accepted: tuple[str, str, int | None], resolved: tuple[str, str, int | None] | None = None,
           parent: dict[str, Any] | None = None, message: str = "") -> dict[str, Any]:
    conditions = [_condition("Accepted", *accepted, message=message)]
    if resolved is not None:
        conditions.append(_condition("ResolvedRefs", *resolved, message=message))
    return {"parentRef": parent or {"name": "inference", "namespace": "servingops-gateway"},
            "controllerName": "traefik.io/gateway-controller", "conditions": conditions}


def test_without_a_gateway_routes_are_rendered_as_before() -> None:
    weights = [TrafficWeight(revision="a", weight=70), TrafficWeight(revision="b", weight=30)]
    attached = ingress.attachment(IngressConfig(), "llama", "team-a", ENGINE, entry=True)
    assert attached == ingress.DETACHED
    body = render.http_route(OWNER, ENGINE, weights, attached)
    assert body == render.http_route(OWNER, ENGINE, weights)
    assert "parentRefs" not in body["spec"] and "hostnames" not in body["spec"]


def test_with_a_gateway_every_route_gets_its_parent_and_host_and_the_entrypoint_the_services() -> None:
    served = [ENGINE, DECODER, ROUTER]
    routing = ingress.routing(GATEWAY, "llama", "team-a", served)
    assert routing.problem is None and routing.url == "http://llama.team-a.example.test"
    assert routing.observation() == IngressObservation(gateway="servingops-gateway/inference",
                                                       url="http://llama.team-a.example.test")
    attachments = routing.attachments or {}
    assert {c: a.hostnames for c, a in attachments.items()} == {
        ENGINE: ("llama-engine.team-a.example.test",),
        DECODER: ("llama-decoder.team-a.example.test",),
        # The router is the entrypoint: it also answers on the service's own host (upstream's top-level route).
        ROUTER: ("llama-router.team-a.example.test", "llama.team-a.example.test"),
    }
    weights = [TrafficWeight(revision="a", weight=90), TrafficWeight(revision="b", weight=10)]
    body = render.http_route(OWNER, ROUTER, weights, attachments[ROUTER])
    assert body["spec"]["parentRefs"] == [PARENT]
    assert body["spec"]["hostnames"] == ["llama-router.team-a.example.test", "llama.team-a.example.test"]
    # Weights exactly as given, as without a Gateway.
    assert body["spec"]["rules"] == render.http_route(OWNER, ROUTER, weights)["spec"]["rules"]
    assert [(b["name"], b["weight"]) for b in body["spec"]["rules"][0]["backendRefs"]] == [
        ("llama-router-rev-a", 90), ("llama-router-rev-b", 10)]


def test_the_engine_is_the_entrypoint_without_a_router() -> None:
    assert ingress.entrypoint([DECODER, ENGINE]) is ENGINE
    assert ingress.entrypoint([ROUTER, ENGINE]) is ROUTER
    attachments = ingress.routing(GATEWAY, "llama", "team-a", [ENGINE, DECODER]).attachments or {}
    assert attachments[ENGINE].hostnames == ("llama-engine.team-a.example.test", "llama.team-a.example.test")
    assert attachments[DECODER].hostnames == ("llama-decoder.team-a.example.test",)


def test_what_cannot_be_rendered_is_the_problem_and_attaches_nothing() -> None:
    broken = ingress.routing(OperatorConfigError("ConfigMap ns/c: ingress.urlSheme: Extra inputs"), "llama",
                             "team-a", [ENGINE])
    assert broken.attachments is None and broken.observation().problem_reason == "IngressConfigInvalid"
    assert "urlSheme" in (broken.observation().problem or "")
    long_name = "x" * 60
    too_long = ingress.routing(GATEWAY, long_name, "team-a", [ENGINE])
    assert too_long.problem is not None and too_long.problem[0] == "InvalidHost"
    # Without a Gateway no host is formed, so no name is too long.
    assert ingress.routing(IngressConfig(), long_name, "team-a", [ENGINE]).problem is None
    # The route keeps the attachment it carries.
    live = _route(parentRefs=[PARENT], hostnames=["a.example.test"])
    assert ingress.live_attachment(live) == ingress.Attachment((PARENT,), ("a.example.test",))
    assert ingress.live_attachment(None) == ingress.DETACHED


@pytest.mark.parametrize(("parents", "expected"), [
    # Nothing reported for our parent yet (an entry for another Gateway is not ours).
    ([], RouteStatus(route="llama-engine", generation=2)),
    ([_entry(("False", "NoMatchingParent", 2), parent={"name": "other", "namespace": "servingops-gateway"})],
     RouteStatus(route="llama-engine", generation=2)),
    # Accepted and resolved, for the current generation (group, kind and namespace defaulted as Gateway API does).
    ([_entry(("True", "Accepted", 2), ("True", "ResolvedRefs", 2))],
     RouteStatus(route="llama-engine", generation=2, reported=True, accepted=True, resolved_refs=True,
                 reason="Accepted", observed_generation=2, current=True)),
    # The Gateway's own reason and message for what is not True.
    ([_entry(("True", "Accepted", 2), ("False", "BackendNotFound", 2), message="service llama-engine-rev-b not found")],
     RouteStatus(route="llama-engine", generation=2, reported=True, accepted=True, resolved_refs=False,
                 reason="BackendNotFound", message="service llama-engine-rev-b not found", observed_generation=2,
                 current=True)),
    ([_entry(("False", "NoMatchingListenerHostname", 2), ("True", "ResolvedRefs", 2))],
     RouteStatus(route="llama-engine", generation=2, reported=True, accepted=False, resolved_refs=True,
                 reason="NoMatchingListenerHostname", observed_generation=2, current=True)),
    # A verdict on an older spec: not current (the oldest of the two conditions counts).
    ([_entry(("True", "Accepted", 2), ("True", "ResolvedRefs", 1))],
     RouteStatus(route="llama-engine", generation=2, reported=True, accepted=True, resolved_refs=True,
                 reason="Accepted", observed_generation=1, current=False)),
    # Unknown and absent conditions decide nothing; no observedGeneration: not known current.
    ([_entry(("Unknown", "Pending", None))],
     RouteStatus(route="llama-engine", generation=2, reported=True, reason="Pending")),
])
def test_the_gateways_verdict_is_read_from_our_parents_entry(parents: list[dict[str, Any]],
                                                             expected: RouteStatus) -> None:
    gateway = GATEWAY.gateway
    assert gateway is not None
    assert ingress.route_status(_route(parents=parents), gateway) == expected


def _applied(route: dict[str, Any], *fields: str, manager: str = "servingops") -> dict[str, Any]:
    route["metadata"]["managedFields"] = [{"manager": manager, "operation": "Apply", "fieldsV1": {
        "f:spec": {f"f:{f}": {} for f in fields}}}]
    return route


def test_a_route_drifts_when_it_does_not_carry_the_attachment_rendered_now() -> None:
    wanted = ingress.Attachment((PARENT,), ("llama-engine.team-a.example.test", "llama.team-a.example.test"))
    same = _route(parentRefs=[{"name": "inference", "namespace": "servingops-gateway"}],
                  hostnames=["llama.team-a.example.test", "llama-engine.team-a.example.test"])
    assert not ingress.drifted(same, wanted, "servingops")
    assert ingress.drifted(_route(), wanted, "servingops"), "attached to nothing yet"
    assert ingress.drifted(_route(parentRefs=[PARENT], hostnames=["llama-engine.team-a.example.test"]), wanted,
                           "servingops"), "the top-level host moved to this route"
    assert ingress.drifted(_route(parentRefs=[{**PARENT, "name": "old"}], hostnames=list(wanted.hostnames)),
                           wanted, "servingops"), "another Gateway"
    # No Gateway configured: only an attachment we applied is ours to take back.
    assert ingress.drifted(_applied(_route(parentRefs=[PARENT]), "rules", "parentRefs"), ingress.DETACHED,
                           "servingops")
    assert not ingress.drifted(_applied(_route(parentRefs=[PARENT]), "parentRefs", manager="someone-else"),
                               ingress.DETACHED, "servingops")
    assert not ingress.drifted(_applied(_route(), "rules"), ingress.DETACHED, "servingops")


def test_observe_gives_the_components_url_verdict_and_drift() -> None:
    routing = ingress.routing(GATEWAY, "llama", "team-a", [ENGINE])
    address = render.component_url(OWNER, ENGINE)
    assert routing.observe(ENGINE, None, None, "servingops") == (None, None, False), "no route yet"
    route = _route(parents=[_entry(("True", "Accepted", 2), ("True", "ResolvedRefs", 2))])
    url, verdict, drift = routing.observe(ENGINE, route, address, "servingops")
    assert url == "http://llama-engine.team-a.example.test" and drift
    assert verdict is not None and verdict.current and verdict.accepted
    # Without a Gateway: the cluster-local address, no verdict.
    plain = ingress.routing(IngressConfig(), "llama", "team-a", [ENGINE])
    assert plain.observe(ENGINE, route, address, "servingops") == (address, None, False)
    assert address == "http://llama-engine.team-a.svc.cluster.local"
