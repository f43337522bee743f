"""Rollouts judged by requests: a load through the real Gateway (Traefik) to pods that answer
(devstack/pod_runtime.py), counted by the revision that answered and by what failed.

Shown here, with the worker and the bridge as processes:

- a canary's steps at 10, 25 and 50 percent: over at least 2,000 requests per step, the share the new
  revision answered is within 3 points of the step's weight (each step is a manual pause the test
  promotes once its window holds 2,000 answers, so a slower machine holds a step longer instead of
  counting fewer requests);
- a blue-green flip, its old revision's retirement, and a scale-down lose no request;
- a rolling update under load loses no request either;
- the InferenceService's URL answers through the Gateway, and its status says the Gateway accepted
  the route; a route the Gateway refuses shows on the InferenceService (IngressReady with the Gateway's
  own reason, a Warning, Ready held) until the Gateway takes it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml
from kubernetes import client

from devstack.kube import apply_objects
from devstack.traefik import GATEWAY_API, GATEWAY_CLASS, GATEWAY_NAMESPACE, LISTENER
from servingops.activities.operator_config import INGRESS_TTL
from servingops.workflows.rollout.status import IngressReason
from testkit.load import BackgroundLoad, LoadReport, LoadSpec
from tests.rollout_live import NEW_IMAGE, OLD_IMAGE, LiveIsvc, canary, component
from tests.support.traffic_stack import TrafficStack, failures, traffic_stack

pytestmark = pytest.mark.e2e

__all__ = ["traffic_stack"]  # the fixture, reused

RATE = 200.0
"""Requests started per second: 2,000 per canary step in 10 s, and room on two cores beside the stack. A
busy machine sends fewer (CI's sent 82 a second beside the other workers' stacks): the steps wait."""
STEP_REQUESTS = 2000
"""Answered requests each canary step's window holds before the test promotes it."""
PROMOTE = "ome.io/rollout-promote"
SETTLE_S = 1.0
"""Cut from the start of each step's window: the route changed, and Traefik applies it within its
200 ms throttle; requests started before that saw the previous weights."""


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def _load(stack: TrafficStack, isvc: str, seconds: float, rate: float = RATE) -> BackgroundLoad:
    return BackgroundLoad(LoadSpec(url=stack.traefik.url, host=stack.host(isvc), rate=rate,
                                   max_requests=int(rate * seconds) + 1, max_seconds=seconds, max_tokens=4))


@contextmanager
def _route_marks(isvc: LiveIsvc, load: BackgroundLoad) -> Iterator[list[tuple[float, dict[str, int]]]]:
    """Marks the load's clock each time the engine route's weights change (sampled every 100 ms), so
    a report can be cut into the windows each program of the route held."""
    changes: list[tuple[float, dict[str, int]]] = []
    stop = threading.Event()

    def sample() -> None:
        last: dict[str, int] | None = None
        while not stop.wait(0.1):
            weights = isvc.serving()
            if weights != last:
                changes.append((load.mark(repr(sorted(weights.items()))), weights))
                last = weights

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield changes
    finally:
        stop.set()
        thread.join()


def _serving_through_gateway(stack: TrafficStack, isvc: LiveIsvc) -> dict[str, Any]:
    """Wait until a request for the service's host is answered through the Gateway; its headers."""
    def answered() -> dict[str, str] | None:
        code, headers, _ = stack.traefik.get("/v1/models", stack.host(isvc.name))
        return headers if code == 200 else None
    return dict(isvc.wait("answered through the Gateway", answered))


def test_canary_steps_split_requests_in_their_weights(traffic_stack: TrafficStack) -> None:
    stack = traffic_stack
    isvc = stack.live.isvc(_unique("split"))
    steps = [{"capacity": "100%", "traffic": w, "pause": {}} for w in (10, 25, 50)]
    steps.append({"capacity": "100%", "traffic": 100})
    isvc.create({"engine": component(OLD_IMAGE, 2), "rollout": canary(steps)})
    stable = isvc.first_revision()
    headers = _serving_through_gateway(stack, isvc)
    assert headers["x-servingops-revision"] == isvc.revision(stable), headers

    with _load(stack, isvc.name, seconds=300) as load, _route_marks(isvc, load) as changes:
        isvc.set_component("engine", component(NEW_IMAGE, 2))
        canary_backend = isvc.wait("a canary backend", lambda: next(
            (b for b in isvc.deployments() if b != stable), None))
        canary_hash = isvc.revision(canary_backend)
        for weight in (10, 25, 50):
            entered = isvc.wait(f"the route at {weight}%", lambda w=weight: next(
                (t for t, seen in changes if seen.get(canary_backend) == w), None))
            isvc.wait(f"{STEP_REQUESTS} answers at {weight}%", lambda t=entered: load.snapshot().window(
                t + SETTLE_S).succeeded >= STEP_REQUESTS, timeout=240)
            # The previous promote is consumed (the workflow removes the annotation): the same value promotes again.
            isvc.wait("no promote pending", lambda: PROMOTE not in (
                ((isvc.get() or {}).get("metadata") or {}).get("annotations") or {}))
            isvc.annotate(PROMOTE, canary_hash)
        isvc.rolled_out(canary_backend)
        report = load.stop()
    assert report.failed == 0, failures(report)

    programs = [(t, w) for t, w in changes if len(w) == 2]
    seen_weights = [w.get(canary_backend) for _, w in programs]
    assert seen_weights == [10, 25, 50], changes
    shares = []
    for i, (start, weights) in enumerate(programs):
        end = programs[i + 1][0] if i + 1 < len(programs) else next(t for t, w in changes if t > start and len(w) == 1)
        window: LoadReport = report.window(start + SETTLE_S, end)
        share = window.share(canary_hash)
        shares.append((weights[canary_backend], window.succeeded, round(share * 100, 2)))
        assert window.succeeded >= STEP_REQUESTS, shares
        assert abs(share * 100 - weights[canary_backend]) <= 3, shares
    print(f"canary shares (weight, requests, percent answered by the canary): {shares}")


def test_a_blue_green_flip_retirement_and_scale_down_lose_no_request(traffic_stack: TrafficStack) -> None:
    stack = traffic_stack
    isvc = stack.live.isvc(_unique("flip"))
    isvc.create({"engine": component(OLD_IMAGE, 3)})  # no spec.rollout: blue-green
    blue = isvc.first_revision()
    _serving_through_gateway(stack, isvc)

    with _load(stack, isvc.name, seconds=120) as load:
        isvc.set_component("engine", component(NEW_IMAGE, 3))
        green = isvc.wait("the green revision", lambda: next((b for b in isvc.deployments() if b != blue), None))
        isvc.rolled_out(green)
        load.mark("flipped")
        isvc.wait("blue retired", lambda: blue not in isvc.deployments())
        isvc.wait("blue's pods gone", lambda: isvc.revision(blue) not in isvc.pods())
        load.mark("retired")
        isvc.set_component("engine", component(NEW_IMAGE, 1))
        isvc.wait("scaled down to one Ready pod", lambda: isvc.pods().get(isvc.revision(green)) == (1, 1))
        isvc.hold("one pod serving", lambda: isvc.pods().get(isvc.revision(green)) == (1, 1), 3)
        report = load.stop()

    assert report.failed == 0, failures(report)
    after_flip = report.window("flipped")
    assert set(after_flip.window(after_flip.start_s + SETTLE_S).by_revision) == {isvc.revision(green)}
    assert len(report.window("retired").by_pod) == 3, "every green pod answered before the scale-down"
    assert report.window(None, "flipped").by_revision[isvc.revision(blue)] > 0, "blue answered before the flip"
    assert report.window("retired").succeeded >= 600, "the scale-down was under load"
    print(f"blue-green under load: {report.succeeded} answered, 0 failed; by revision {dict(report.by_revision)}")


def test_a_rolling_update_loses_no_request(traffic_stack: TrafficStack) -> None:
    stack = traffic_stack
    isvc = stack.live.isvc(_unique("rolling"))
    rollout = {"groups": [{"components": ["engine"], "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}]}
    isvc.create({"engine": component(OLD_IMAGE, 3), "rollout": rollout})
    old = isvc.first_revision()
    _serving_through_gateway(stack, isvc)

    with _load(stack, isvc.name, seconds=120) as load, _route_marks(isvc, load) as changes:
        load.mark("updated")
        isvc.set_component("engine", component(NEW_IMAGE, 3))
        new = isvc.wait("the new revision", lambda: next((b for b in isvc.deployments() if b != old), None))
        isvc.rolled_out(new)
        isvc.wait("the old revision's pods gone", lambda: isvc.revision(old) not in isvc.pods())
        load.mark("old gone")
        isvc.hold("the new revision alone serving", lambda: isvc.serving() == {new: 100}, 3)
        report = load.stop()

    assert report.failed == 0, failures(report)
    # The answers moved over: both revisions answered while the pods were replaced, the new one alone after.
    moving = report.window("updated", "old gone")
    assert set(moving.by_revision) == {isvc.revision(old), isvc.revision(new)}, dict(moving.by_revision)
    assert set(report.window("old gone").by_revision) == {isvc.revision(new)}
    print(f"rolling update under load: {report.succeeded} answered, 0 failed; routes seen {[w for _, w in changes]}; "
          f"by revision {dict(report.by_revision)}")


WAITS = {IngressReason.ROUTE_NOT_CREATED.value, IngressReason.PARENT_STATUS_NOT_AVAILABLE.value,
         IngressReason.ROUTE_GENERATION_NOT_OBSERVED.value}


def _private_gateway(stack: TrafficStack, name: str, admits: str) -> dict[str, Any]:
    """A second Gateway on the same listener port, admitting routes from `admits` ("Same": its own
    namespace only, so every InferenceService's route is refused; "All")."""
    group, version = GATEWAY_API
    return {"apiVersion": f"{group}/{version}", "kind": "Gateway",
            "metadata": {"name": name, "namespace": GATEWAY_NAMESPACE},
            "spec": {"gatewayClassName": GATEWAY_CLASS, "listeners": [
                {"name": LISTENER, "protocol": "HTTP", "port": stack.traefik.port,
                 "allowedRoutes": {"namespaces": {"from": admits}}}]}}


@contextmanager
def _routes_attach_to(stack: TrafficStack, gateway: str) -> Iterator[None]:
    """The operator ConfigMap names `gateway` for new routes, then the stack's own again. The worker
    reads the ingress block at most every INGRESS_TTL seconds: waited out after each change."""
    core = client.CoreV1Api(stack.live.api)

    def attach(to: str) -> None:
        ingress = yaml.safe_dump({"omeIngressGateway": to, "ingressDomain": "example.com"})
        core.patch_namespaced_config_map(stack.operator_config, stack.namespace, {"data": {"ingress": ingress}})
        time.sleep(INGRESS_TTL + 0.5)

    attach(gateway)
    try:
        yield
    finally:
        attach(stack.traefik.gateway)


def _route_verdict(stack: TrafficStack, route: str, gateway: str) -> dict[str, Any]:
    """The Accepted condition the Gateway wrote for `gateway` on the HTTPRoute."""
    group, version = GATEWAY_API
    obj = client.CustomObjectsApi(stack.live.api).get_namespaced_custom_object(
        group, version, stack.namespace, "httproutes", route)
    namespace, name = gateway.split("/")
    for parent in (obj.get("status") or {}).get("parents") or []:
        ref = parent.get("parentRef") or {}
        if ref.get("name") == name and ref.get("namespace", stack.namespace) == namespace:
            return next((c for c in parent.get("conditions") or [] if c.get("type") == "Accepted"), {})
    return {}


def test_a_route_the_gateway_refuses_holds_ready_until_the_gateway_takes_it(traffic_stack: TrafficStack) -> None:
    stack = traffic_stack
    gateway_name = _unique("private")
    gateway = f"{GATEWAY_NAMESPACE}/{gateway_name}"
    api = stack.live.api
    apply_objects(api, [_private_gateway(stack, gateway_name, admits="Same")])
    isvc = stack.live.isvc(_unique("refused"))
    with _routes_attach_to(stack, gateway):
        isvc.create({"engine": component(OLD_IMAGE, 1)})
        refused = isvc.wait("IngressReady False with the Gateway's verdict", lambda: (
            (c := isvc.condition("IngressReady")).get("status") == "False" and c.get("reason") not in WAITS and c))
        verdict = _route_verdict(stack, f"{isvc.name}-engine", gateway)
        # The Gateway's own words, not ours: Traefik's reason and message for the refusal.
        assert verdict.get("status") == "False", verdict
        assert refused["reason"] == verdict["reason"], (refused, verdict)
        said = f": {verdict['message']}" if verdict.get("message") else ""
        assert refused["message"] == f"HTTPRoute {isvc.name}-engine: Accepted False{said}", refused
        assert isvc.condition("EngineReady")["status"] == "True", "the pods serve: only the route is refused"
        ready = isvc.condition("Ready")
        assert (ready["status"], ready["reason"]) == ("False", IngressReason.INGRESS_NOT_READY.value), ready
        warnings = [e.message for e in isvc.events(verdict["reason"]) if e.type == "Warning"]
        assert warnings == [refused["message"]], [(e.type, e.reason, e.message) for e in isvc.events()]
        code, _, _ = stack.traefik.get("/v1/models", stack.host(isvc.name))
        assert code == 404, "a refused route must not route"

        # The platform team opens the Gateway to every namespace: the route is taken, the service Ready.
        apply_objects(api, [_private_gateway(stack, gateway_name, admits="All")])
        isvc.wait("IngressReady True once the Gateway accepts", lambda: (
            (c := isvc.condition("IngressReady")).get("status") == "True" and c))
        isvc.wait("Ready", lambda: isvc.condition("Ready").get("status") == "True")
        headers = _serving_through_gateway(stack, isvc)
    print(f"refused: {refused['reason']}: {refused['message']}; then answered by {headers['x-servingops-pod']}")
