"""TrafficMapWorkflow's capacity poll on Temporal's time-skipping server (the fake world of
testkit/routing_fakes.py; tests/test_routing_conformance.py holds `routing.check_homes` to the real one).

What is held: with `spec.routing.capacity`, each home's report is polled every period; once `quorum` fresh
readings are in, the quorum-th lowest lowers `capacity.allocated` (source Endpoint, `reported` recorded) and
the weight follows; a home whose report fails keeps the control plane's count with the failure as its
fallbackReason and CapacityFallback True; a report grown stale falls back the same way; a report higher than
the admitted count changes nothing but `reported`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.testing import WorkflowEnvironment

from servingops.api_models.ome.routing import RoutingCapacitySpec, RoutingSpec
from testkit.rollout_fakes import until
from testkit.routing_fakes import FakeRoutingWorld, HomeAnswer
from tests.histories.record import start_env
from tests.test_traffic_map_workflow import placement, start

pytestmark = [pytest.mark.timeskip, pytest.mark.asyncio]

PERIOD_S = 10


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


def _report(servable: int, at: datetime) -> HomeAnswer:
    return HomeAnswer(status=200, body=json.dumps({"servable": servable,
                                                   "observedAt": at.isoformat().replace("+00:00", "Z")}).encode())


async def test_a_reported_ceiling_lowers_allocated_and_a_failing_report_falls_back(env: WorkflowEnvironment) -> None:
    capacity = RoutingCapacitySpec(path="/capacity", method="GET", format="Report", period=f"{PERIOD_S}s",
                                   timeout="2s", samples=3, quorum=2, max_age="60s")
    world = FakeRoutingWorld(env=env, placement=placement({"member-a": (4, 4), "member-b": (4, 4)}),
                             routing=RoutingSpec(capacity=capacity))

    async def now() -> datetime:
        return (await env.get_current_time()).astimezone(UTC)

    # member-a reports it can serve 1 (fresh at every poll), member-b 8 (more than admitted).
    class Fresh(dict[str, HomeAnswer]):
        def get(self, key: str, default: HomeAnswer | None = None) -> HomeAnswer:  # type: ignore[override]
            at = world_clock[0]
            servable = {"member-a": 1, "member-b": 8}.get(key)
            if key in failing or servable is None:
                return HomeAnswer(status=503)
            return _report(servable, at)

    world_clock: list[datetime] = [await now()]
    failing: set[str] = set()
    world.answers = Fresh()
    async for _routing in start(env, world):
        await until(env, lambda: world.weights() == {"member-a": 1, "member-b": 4}, what="member-a lowered to 1")
        a, b = world.entries()["member-a"]["capacity"], world.entries()["member-b"]["capacity"]
        assert (a["allocated"], a["source"], a["reported"]) == (1, "Endpoint", 1), a
        assert (b["allocated"], b["source"], b["reported"]) == (4, "ControlPlane", 8), b
        assert world.condition("CapacityFallback")["reason"] == "EndpointCapacityAvailable"
        # Quorum 2: the ceiling needed two readings, so two polls at least before it applied.
        assert len(world.checks) >= 2, world.checks
        failing.add("member-a")
        await until(env, lambda: world.weights() == {"member-a": 1, "member-b": 1}, what="member-a back to 4")
        a = world.entries()["member-a"]["capacity"]
        assert a["allocated"] == 4 and a["source"] == "ControlPlane" and "HTTP 503" in a["fallbackReason"], a
        fallback = world.condition("CapacityFallback")
        assert (fallback["status"], fallback["reason"]) == ("True", "EndpointCapacityUnavailable")
        assert "member-a" in fallback["message"]
        # Reports that stop moving their observedAt grow stale after maxAge.
        failing.clear()
        world_clock[0] = await now()
        await until(env, lambda: world.entries()["member-a"]["capacity"].get("allocated") == 1, what="lowered again")
        await env.sleep(timedelta(seconds=90))
        await until(env, lambda: "stale" in (world.entries()["member-a"]["capacity"].get("fallbackReason") or ""),
                    what="the report stale")
        assert world.entries()["member-a"]["capacity"]["allocated"] == 4
