"""Rollouts judged by requests: a load through the real Gateway (Traefik) to pods that answer
(devstack/pod_runtime.py), counted by the revision that answered and by what failed.

Shown here, with the worker and the bridge as processes:

- a canary's steps at 10, 25 and 50 percent: over at least 2,000 requests per step, the share the new
  revision answered is within 3 points of the step's weight;
- a blue-green flip, its old revision's retirement, and a scale-down lose no request;
- the InferenceService's URL answers through the Gateway, and its status says the Gateway accepted
  the route.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from testkit.load import BackgroundLoad, LoadReport, LoadSpec
from tests.rollout_live import NEW_IMAGE, OLD_IMAGE, LiveIsvc, canary, component
from tests.support.traffic_stack import TrafficStack, traffic_stack

pytestmark = pytest.mark.e2e

__all__ = ["traffic_stack"]  # the fixture, reused

RATE = 200.0
"""Requests started per second: 2,000 per canary step in 10 s, and room on two cores beside the stack."""
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
    steps = [{"capacity": "100%", "traffic": w, "pause": {"duration": "14s"}} for w in (10, 25, 50)]
    steps.append({"capacity": "100%", "traffic": 100})
    isvc.create({"engine": component(OLD_IMAGE, 2), "rollout": canary(steps)})
    stable = isvc.first_revision()
    headers = _serving_through_gateway(stack, isvc)
    assert headers["x-servingops-revision"] == isvc.revision(stable), headers

    with _load(stack, isvc.name, seconds=120) as load, _route_marks(isvc, load) as changes:
        isvc.set_component("engine", component(NEW_IMAGE, 2))
        canary_backend = isvc.wait("a canary backend", lambda: next(
            (b for b in isvc.deployments() if b != stable), None))
        isvc.rolled_out(canary_backend)
        report = load.stop()
    canary_hash = isvc.revision(canary_backend)
    assert report.failed == 0, report.failures

    programs = [(t, w) for t, w in changes if len(w) == 2]
    seen_weights = [w.get(canary_backend) for _, w in programs]
    assert seen_weights == [10, 25, 50], changes
    shares = []
    for i, (start, weights) in enumerate(programs):
        end = programs[i + 1][0] if i + 1 < len(programs) else next(t for t, w in changes if t > start and len(w) == 1)
        window: LoadReport = report.window(start + SETTLE_S, end)
        share = window.share(canary_hash)
        shares.append((weights[canary_backend], window.succeeded, round(share * 100, 2)))
        assert window.succeeded >= 2000, shares
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

    assert report.failed == 0, report.failures
    after_flip = report.window("flipped")
    assert set(after_flip.window(after_flip.start_s + SETTLE_S).by_revision) == {isvc.revision(green)}
    assert len(report.window("retired").by_pod) == 3, "every green pod answered before the scale-down"
    assert report.window(None, "flipped").by_revision[isvc.revision(blue)] > 0, "blue answered before the flip"
    assert report.window("retired").succeeded >= 600, "the scale-down was under load"
    print(f"blue-green under load: {report.succeeded} answered, 0 failed; by revision {dict(report.by_revision)}")
