"""spec.traffic end to end, with the worker and the bridge as processes, Traefik as the Gateway and pods
that answer (tests/support/traffic_stack.py), Envoy Gateway's BackendTrafficPolicy CRD in the cluster:

- a service declaring spec.traffic (consistent hashing on a header) and an ome.io/* traffic annotation
  gets its BackendTrafficPolicy, written by the worker (field manager servingops-traffic) and targeting
  its HTTPRoute, and status.traffic says so: the algorithm, the policy, the route, BackendPolicyReady
  Pending (no Envoy Gateway runs to accept it) and BackendPolicyDataPlane False, Traefik named;
- measured by requests, what that condition says: Traefik does not read the policy, so requests with
  one and the same hash header are spread over the pods, not pinned to one;
- a hand-authored policy on the same route wins: ours is removed, status.traffic reports the conflict
  by name, and the hand-authored one is left exactly as written;
- with the hand-authored one gone and the intent removed, status.traffic leaves and no policy is left;
- with the operator's ingress.trafficTranslator traefik (Traefik's kubernetesCRD provider runs beside its
  Gateway provider here), the route names per-revision TraefikServices, weights unchanged, and Traefik
  honours spec.traffic: requests carrying the sticky cookie Traefik issued (ConsistentHash on a Cookie) are
  all answered by one pod, as are requests all from loopback under ConsistentHash on SourceIP (hrw); header
  hashing, which Traefik cannot do, is named unsupported and the route goes back to the Services; without
  spec.traffic requests spread over the pods again and no TraefikService is left.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.rendering import backend_traffic_policy as btp
from servingops.rendering import traefik_traffic as tt
from testkit.load import LoadSpec, run_load
from tests.rollout_live import OLD_IMAGE, LiveIsvc, component
from tests.support.traffic_stack import INGRESS_DOMAIN, TrafficStack, failures, traffic_stack

pytestmark = pytest.mark.e2e

__all__ = ["traffic_stack"]  # the fixture, reused

TRAEFIK_KUBERNETES_CRD = True
"""Traefik serves TraefikServices beside the Gateway's routes (tests/support/traffic_stack.py)."""
HASH_HEADER = "x-session"
COOKIE = "ome-session"
TRAFFIC = {"algorithm": "ConsistentHash", "consistentHash": {"type": "Header", "headers": [{"name": HASH_HEADER}]}}
REQUESTS = 300


def _traffic(isvc: LiveIsvc) -> dict[str, Any]:
    return dict(isvc.status().get("traffic") or {})


def _condition(isvc: LiveIsvc, kind: str) -> dict[str, Any]:
    return next((c for c in _traffic(isvc).get("conditions") or [] if c["type"] == kind), {})


def _policies(stack: TrafficStack) -> dict[str, dict[str, Any]]:
    custom = client.CustomObjectsApi(stack.live.api)
    listed = custom.list_namespaced_custom_object(btp.GROUP, btp.VERSION, stack.namespace, btp.PLURAL)
    return {p["metadata"]["name"]: p for p in listed["items"]}


def test_spec_traffic_is_applied_reported_deferred_to_a_hand_authored_policy_and_cleaned_up(
        traffic_stack: TrafficStack) -> None:
    stack = traffic_stack
    name = f"hash-{uuid.uuid4().hex[:5]}"
    route = f"{name}-engine"
    isvc = stack.live.isvc(name)
    isvc.create({"engine": component(OLD_IMAGE, 3), "traffic": TRAFFIC},
                annotations={"ome.io/circuit-breaker-max-connections": "1024"})

    isvc.wait("status.traffic naming the policy", lambda: _traffic(isvc).get("backendPolicyResource"))
    isvc.wait("the data plane reported", lambda: _condition(isvc, "BackendPolicyDataPlane").get("status") == "False")
    traffic = _traffic(isvc)
    assert traffic["algorithm"] == "ConsistentHash"
    assert traffic["backendPolicyResource"] == {"apiVersion": btp.API_VERSION, "kind": btp.KIND, "name": name}
    assert traffic["targetedHTTPRoutes"] == [route]
    ready = _condition(isvc, "BackendPolicyReady")
    assert (ready["status"], ready["reason"]) == ("Unknown", "Pending"), ready
    plane = _condition(isvc, "BackendPolicyDataPlane")
    assert plane["reason"] == "NotHonoredByDataPlane" and "traefik.io/gateway-controller" in plane["message"]
    policy = _policies(stack)[name]
    assert policy["spec"]["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                             "name": route}]
    assert policy["spec"]["loadBalancer"]["consistentHash"]["header"] == {"name": HASH_HEADER}
    assert policy["spec"]["circuitBreaker"]["maxConnections"] == 1024
    assert {m["manager"] for m in policy["metadata"]["managedFields"]} == {"servingops-traffic"}
    assert policy["metadata"]["ownerReferences"][0]["uid"] == isvc.uid()

    # What BackendPolicyDataPlane says, by requests: one hash key through Traefik reaches every pod.
    isvc.wait("three pods Ready", lambda: sum(ready for _, ready in isvc.pods().values()) == 3)
    report = asyncio.run(run_load(LoadSpec(url=stack.traefik.url, host=stack.host(name), rate=100.0,
                                           max_requests=REQUESTS, max_seconds=30, max_tokens=4,
                                           headers={HASH_HEADER: "one-session"})))
    assert report.failed == 0, failures(report)
    assert report.succeeded == REQUESTS
    shares = sorted(report.by_pod.values(), reverse=True)
    print(f"{REQUESTS} requests with one {HASH_HEADER} through Traefik, by answering pod: {shares}")
    assert len(report.by_pod) == 3 and shares[0] < REQUESTS * 0.6, shares

    # A hand-authored policy on the same route wins: ours goes, the conflict is reported by name.
    custom = client.CustomObjectsApi(stack.live.api)
    hand = custom.create_namespaced_custom_object(btp.GROUP, btp.VERSION, stack.namespace, btp.PLURAL, {
        "apiVersion": btp.API_VERSION, "kind": btp.KIND, "metadata": {"name": f"team-{name}"},
        "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route}],
                 "loadBalancer": {"type": "Random"}}})
    isvc.patch({"spec": {"traffic": {"algorithm": "RoundRobin", "consistentHash": None}}})  # looked at now
    isvc.wait("the conflict reported",
              lambda: _condition(isvc, "BackendPolicyReady").get("reason") == "ConflictingPolicy")
    ready = _condition(isvc, "BackendPolicyReady")
    assert ready["status"] == "False" and f"team-{name}" in ready["message"] and route in ready["message"]
    assert "backendPolicyResource" not in _traffic(isvc)
    policies = _policies(stack)
    assert name not in policies
    assert policies[f"team-{name}"]["metadata"]["resourceVersion"] == hand["metadata"]["resourceVersion"]

    # Intent removed (the hand-authored policy gone too): status.traffic leaves, no policy is left.
    custom.delete_namespaced_custom_object(btp.GROUP, btp.VERSION, stack.namespace, btp.PLURAL, f"team-{name}")
    isvc.patch({"metadata": {"annotations": {"ome.io/circuit-breaker-max-connections": None}},
                "spec": {"traffic": None}})
    isvc.wait("status.traffic removed", lambda: "traffic" not in isvc.status())
    assert not [p for p in _policies(stack) if p in (name, f"team-{name}")]
    try:
        isvc.delete()
    except ApiException as exc:
        assert exc.status == 404


def _traefik_services(stack: TrafficStack, isvc: str) -> dict[str, dict[str, Any]]:
    custom = client.CustomObjectsApi(stack.live.api)
    listed: Any = custom.list_namespaced_custom_object(tt.GROUP, tt.VERSION, stack.namespace, tt.PLURAL,
                                                       label_selector=f"{tt.LABEL_ISVC}={isvc}")
    return {s["metadata"]["name"]: s for s in listed["items"]}


def _route(stack: TrafficStack, name: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(stack.live.api)
    route: Any = custom.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", stack.namespace,
                                                     "httproutes", name)
    return dict(route)


def _translator(stack: TrafficStack, translator: str | None) -> None:
    """The operator's ingress block with (or without) trafficTranslator; the worker reads it within 10 s."""
    core = client.CoreV1Api(stack.live.api)
    config = core.read_namespaced_config_map(stack.operator_config, stack.namespace)
    ingress = yaml.safe_load((config.data or {})["ingress"])
    ingress.pop("trafficTranslator", None)
    if translator is not None:
        ingress["trafficTranslator"] = translator
    core.patch_namespaced_config_map(stack.operator_config, stack.namespace,
                                     {"data": {"ingress": yaml.safe_dump(ingress)}})


def _by_pod(stack: TrafficStack, name: str, headers: dict[str, str], what: str) -> list[int]:
    report = asyncio.run(run_load(LoadSpec(url=stack.traefik.url, host=stack.host(name), rate=100.0,
                                           max_requests=REQUESTS, max_seconds=30, max_tokens=4, headers=headers)))
    assert report.failed == 0, failures(report)
    assert report.succeeded == REQUESTS
    shares = sorted(report.by_pod.values(), reverse=True)
    print(f"{REQUESTS} requests {what} through Traefik, by answering pod: {shares}")
    return shares


def test_the_traefik_translation_pins_requests_as_spec_traffic_says(traffic_stack: TrafficStack) -> None:
    stack = traffic_stack
    _translator(stack, tt.TRAEFIK)
    time.sleep(11)  # the worker's ingress block read is cached 10 s
    try:
        _traefik_translation(stack)
    finally:
        _translator(stack, None)


def _children(stack: TrafficStack, name: str, route: str) -> list[dict[str, Any]]:
    found = _traefik_services(stack, name).get(route) or {}
    return cast(list[dict[str, Any]], found.get("spec", {}).get("weighted", {}).get("services") or [{}])


def _traefik_translation(stack: TrafficStack) -> None:
    name = f"sticky-{uuid.uuid4().hex[:5]}"
    route = f"{name}-engine"
    isvc = stack.live.isvc(name)
    cookie = {"algorithm": "ConsistentHash", "consistentHash": {"type": "Cookie", "cookie": {"name": COOKIE}}}
    isvc.create({"engine": component(OLD_IMAGE, 3), "traffic": cookie})
    isvc.wait("three pods Ready", lambda: sum(ready for _, ready in isvc.pods().values()) == 3)
    isvc.wait("Traefik honouring the translation",
              lambda: _condition(isvc, "BackendPolicyDataPlane").get("reason") == "HonoredByDataPlane")
    plane = _condition(isvc, "BackendPolicyDataPlane")
    assert plane["status"] == "True" and f"sticky cookie {COOKIE}" in plane["message"], plane
    ready = _condition(isvc, "BackendPolicyReady")
    assert (ready["status"], ready["reason"]) == ("True", "AcceptedByGateway"), ready
    assert not _condition(isvc, "BackendPolicyUnsupportedFields")
    refs = _route(stack, route)["spec"]["rules"][0]["backendRefs"]
    # The route's one backendRef is the component's weighted TraefikService, which carries the weights.
    assert [(r["group"], r["kind"], r["name"]) for r in refs] == [("traefik.io", "TraefikService", route)], refs
    services = _traefik_services(stack, name)
    assert list(services) == [route]
    [child] = services[route]["spec"]["weighted"]["services"]
    assert child["name"].startswith(f"{route}-rev-") and child["weight"] == 100, child
    assert child["sticky"] == {"cookie": {"name": COOKIE}}, child
    assert {m["manager"] for m in services[refs[0]["name"]]["metadata"]["managedFields"]} == {"servingops-traffic"}

    # The cookie Traefik issues on a first response pins every request that carries it to one pod.
    _, headers, _ = stack.traefik.get("/", stack.host(name))
    issued = headers.get("set-cookie", "")
    assert issued.startswith(f"{COOKIE}="), headers
    shares = _by_pod(stack, name, {"cookie": issued.split(";")[0]}, f"with the {COOKIE} cookie Traefik issued")
    assert shares == [REQUESTS], shares
    shares = _by_pod(stack, name, {}, "without the cookie")
    assert len(shares) == 3 and shares[0] < REQUESTS * 0.6, shares

    # ConsistentHash on SourceIP is hrw: every request here comes from loopback, so one pod answers them all.
    isvc.patch({"spec": {"traffic": {"consistentHash": {"type": "SourceIP", "cookie": None}}}})
    isvc.wait("the TraefikService on hrw", lambda: _children(stack, name, route)[0].get("strategy") == "hrw")
    isvc.wait("Traefik honouring hrw", lambda: "strategy hrw" in _condition(isvc, "BackendPolicyDataPlane")
              .get("message", ""))
    time.sleep(2)  # Traefik's providers' throttle, and its reload
    shares = _by_pod(stack, name, {}, "all from loopback under SourceIP hashing")
    assert shares == [REQUESTS], shares

    # Header hashing has no Traefik equivalent: named unsupported, the child back on Traefik's defaults (the
    # weights stay in the TraefikService the route names).
    isvc.patch({"spec": {"traffic": {"consistentHash": {"type": "Header", "headers": [{"name": HASH_HEADER}]}}}})
    isvc.wait("header hashing named unsupported", lambda: "spec.traffic.consistentHash.headers" in _condition(
        isvc, "BackendPolicyUnsupportedFields").get("message", ""))
    isvc.wait("the child on Traefik's defaults", lambda: set(_children(stack, name, route)[0]) ==
              {"name", "kind", "port", "weight"})
    plane = _condition(isvc, "BackendPolicyDataPlane")
    assert (plane["status"], plane["reason"]) == ("False", "NotHonoredByDataPlane"), plane

    # Without spec.traffic: spread again, status.traffic gone; the TraefikService stays (it has the weights).
    isvc.patch({"spec": {"traffic": None}})
    isvc.wait("status.traffic removed", lambda: "traffic" not in isvc.status())
    assert list(_traefik_services(stack, name)) == [route]
    assert [r["kind"] for r in _route(stack, route)["spec"]["rules"][0]["backendRefs"]] == ["TraefikService"]
    time.sleep(2)
    shares = _by_pod(stack, name, {"cookie": issued.split(";")[0]}, "without spec.traffic (the old cookie sent)")
    assert len(shares) == 3 and shares[0] < REQUESTS * 0.6, shares
    assert INGRESS_DOMAIN in stack.host(name)
    isvc.delete()
