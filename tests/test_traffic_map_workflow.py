"""TrafficMapWorkflow on Temporal's time-skipping server, its activities replaced by the in-memory world of
testkit/routing_fakes.py (tests/test_routing_conformance.py holds the fake to the real activities), and the
placement workflow played by a recorder of the `publication` signals it is told (tests/support/).

What is held: a Split placement's homes get weights proportional to their ready replicas and the route carries
them; placement is told, before a write that adds a home and after each publication, what the route may send
to; a home placement withdraws keeps its entry at weight 0 until its copy is gone and placement is told it is
off the route; a drain annotation holds its home at 0; the probe gates a failing home after its threshold and
reopens it after its success threshold; a hand edit of the map is undone; routing turned off withdraws the
route and deletes the map; a malformed drain keeps the last table and says why in a Warning Event; a global
Gateway missing from the ConfigMap withdraws the route; deletion removes the route and releases the map.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models.contract import Query, Signal, placement_workflow_id, traffic_map_workflow_id
from servingops.api_models.contract.routing import DRAIN_ANNOTATION, Publication
from servingops.api_models.ome.enums import PlacementPhase
from servingops.api_models.ome.placement_status import (
    CandidateAllocationStatus,
    CandidatePlacement,
    PlacementPlanStatus,
    PlacementStatus,
)
from servingops.api_models.ome.routing import RoutingProbeSpec, RoutingSpec
from servingops.api_models.operator_config import EndpointConfig, RoutingDefaults
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.rollout_fakes import until
from testkit.routing_fakes import FakeRoutingWorld, HomeAnswer
from tests.histories.record import start_env
from tests.support.publication_recorder import TYPE as RECORDER
from tests.support.publication_recorder import PublicationRecorder, stop_recorder

pytestmark = [pytest.mark.timeskip, pytest.mark.asyncio]


def endpoint_of(cluster: str) -> str:
    return f"http://chat.team-a.{cluster}.example.com"


def placement(homes: dict[str, tuple[int, int]], *, withdrawn: tuple[str, ...] = (), plan: str = "plan-1",
              phase: PlacementPhase = PlacementPhase.PLACED) -> PlacementStatus:
    """Rows as placement writes them: (admitted, ready) per home; a withdrawn home is drainRequested and has
    lost its endpoint (workflows/placement/race.py drain)."""
    rows = [CandidatePlacement(
        cluster=cluster, endpoint=None if cluster in withdrawn else endpoint_of(cluster), admitted_replicas=admitted,
        ready_replicas=ready,
        allocation=CandidateAllocationStatus(drain_requested=True if cluster in withdrawn else None))
        for cluster, (admitted, ready) in homes.items()]  # fmt: skip
    return PlacementStatus(phase=phase, plan=PlacementPlanStatus(id=plan), candidates=rows)


@dataclass
class Routing:
    env: WorkflowEnvironment
    world: FakeRoutingWorld
    handle: WorkflowHandle[Any, Any]
    recorder: WorkflowHandle[Any, Any]

    async def changed(self) -> None:
        await self.handle.signal(Signal.ROUTING_CHANGED, "test")

    async def told(self) -> list[Publication]:
        raw = await self.recorder.query(Query.STATE)
        return [Publication.model_validate(p) for p in raw]

    async def last_told(self) -> Publication | None:
        told = await self.told()
        return told[-1] if told else None

    async def until_weights(self, weights: dict[str, int], what: str) -> None:
        await until(self.env, lambda: self.world.weights() == weights, what=what)

    async def until_told(self, routed: list[str], what: str) -> None:
        async def check() -> bool:
            last = await self.last_told()
            return last is not None and last.settled and last.routed == routed

        for _ in range(120):
            if await check():
                return
            await self.env.sleep(1)
        raise AssertionError(f"never told: {what} (told {await self.told()})")


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


async def start(env: WorkflowEnvironment, world: FakeRoutingWorld) -> AsyncIterator[Routing]:
    queue = f"tm-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=[*registry_workflows(), PublicationRecorder],
                      activities=world.activities(), workflow_runner=workflow_runner()):
        recorder = await env.client.start_workflow(
            RECORDER, id=placement_workflow_id(world.namespace, world.name, world.uid), task_queue=queue)
        handle = await env.client.start_workflow(
            "TrafficMapWorkflow", {"ref": world.ref().model_dump(mode="json")},
            id=traffic_map_workflow_id(world.namespace, world.name, world.uid), task_queue=queue)
        yield Routing(env, world, handle, recorder)
        await stop_recorder(recorder)


@pytest.fixture
async def split(env: WorkflowEnvironment) -> AsyncIterator[Routing]:
    world = FakeRoutingWorld(env=env, placement=placement({"member-a": (3, 3), "member-b": (1, 1)}))
    async for routing in start(env, world):
        await routing.until_weights({"member-a": 3, "member-b": 1}, "the Split published 3:1")
        yield routing


async def test_a_split_is_weighted_by_ready_replicas_published_and_told(split: Routing) -> None:
    world = split.world
    entries = world.entries()
    assert {c: (e["weight"], e["capacity"]["allocated"], e["capacity"]["ready"]) for c, e in entries.items()} == {
        "member-a": (3, 3, 3), "member-b": (1, 1, 1)}
    assert entries["member-a"]["endpoint"] == endpoint_of("member-a") and entries["member-a"]["healthy"] is True
    assert world.traffic_map is not None and world.traffic_map.spec is not None
    assert world.traffic_map.spec["placementPlanID"] == "plan-1" and world.traffic_map.spec["mode"] == "Split"
    assert world.traffic_map.status["sourceUID"] == world.uid
    assert (world.condition("Routable")["status"], world.condition("Routable")["reason"]) == ("True", "Routable")
    assert (world.condition("Published")["status"], world.condition("PublicationFallback")["reason"]) == (
        "True", "Unsupported")
    assert world.traffic_map.status["observedTrafficMapGeneration"] == world.traffic_map.generation
    route = next(o for c, o in world.objects.items() if c.startswith("HTTPRoute/"))
    assert route["metadata"]["name"] == "chat-global" and route["spec"]["hostnames"] == [
        "chat.team-a.global.example.com"]
    await split.until_told(["member-a", "member-b"], "both homes routed")
    told = await split.told()
    # Before the write that added the homes, placement heard they may be routed; after it, exactly which are.
    assert told[0].settled is False and told[0].routed == ["member-a", "member-b"], told
    assert told[-1].plan_id == "plan-1" and [p.sequence for p in told] == sorted({p.sequence for p in told})


async def test_a_withdrawn_home_keeps_its_entry_at_zero_and_placement_hears_it_is_off_the_route(
        split: Routing) -> None:
    world = split.world
    world.placement = placement({"member-a": (3, 3), "member-b": (1, 1)}, withdrawn=("member-b",), plan="plan-2")
    await split.changed()
    await split.until_weights({"member-a": 1, "member-b": 0}, "member-b at weight 0")
    entry = world.entries()["member-b"]
    assert entry["weight"] == 0 and entry["endpoint"] == endpoint_of("member-b"), entry
    await split.until_told(["member-a"], "member-b off the route")
    assert (await split.last_told()) == Publication(sequence=(await split.last_told()).sequence,  # type: ignore[union-attr]
                                                   routed=["member-a"], plan_id="plan-2", settled=True)
    # Its copy gone, the row goes and so does its entry.
    world.placement = placement({"member-a": (3, 3)}, plan="plan-2")
    await split.changed()
    await until(split.env, lambda: set(world.entries()) == {"member-a"}, what="member-b's entry gone")
    await split.until_weights({"member-a": 1}, "the route without member-b")


async def test_a_drain_annotation_holds_its_home_at_zero_and_the_others_keep_their_ratio(split: Routing) -> None:
    world = split.world
    world.annotations[DRAIN_ANNOTATION] = '{"maint-1": {"cluster": "member-a", "reason": "kernel upgrade"}}'
    await split.changed()
    await split.until_weights({"member-a": 0, "member-b": 1}, "member-a drained")
    assert world.entries()["member-a"]["drainRefs"] == ["maint-1"]
    override = world.condition("OverrideActive")
    assert (override["status"], override["reason"]) == ("True", "OverridesApplied")
    await split.until_told(["member-b"], "only member-b routed")
    del world.annotations[DRAIN_ANNOTATION]
    await split.changed()
    await split.until_weights({"member-a": 3, "member-b": 1}, "the drain lifted")


async def test_the_probe_gates_a_failing_home_after_its_threshold_and_reopens_it(env: WorkflowEnvironment) -> None:
    probe = RoutingProbeSpec(path="/health", method="GET", accept_statuses=[200], gate_statuses=[503], period="10s",
                             timeout="2s", failure_threshold=2, success_threshold=2, all_failed_policy="Drain")
    world = FakeRoutingWorld(env=env, placement=placement({"member-a": (2, 2), "member-b": (2, 2)}),
                             routing=RoutingSpec(probe=probe))
    async for routing in start(env, world):
        await routing.until_weights({"member-a": 1, "member-b": 1}, "both homes open")
        world.answers["member-b"] = HomeAnswer(status=503)
        probes_before = len(world.checks)
        await routing.until_weights({"member-a": 1, "member-b": 0}, "member-b gated")
        # The gate closes at the second failing probe, not the first (failureThreshold 2).
        assert len(world.checks) - probes_before >= 2, world.checks
        record = world.entries()["member-b"]["probe"]
        assert record["gated"] is True and record["consecutiveFailures"] >= 2 and record["result"] == "Failing"
        assert world.entries()["member-b"]["healthy"] is False
        await routing.until_told(["member-a"], "member-b off the route")
        world.answers["member-b"] = HomeAnswer(status=200)
        reopened_from = len(world.checks)
        await routing.until_weights({"member-a": 1, "member-b": 1}, "member-b reopened")
        assert len(world.checks) - reopened_from >= 2, world.checks
        # A transport error counts as a failure too.
        world.answers["member-a"] = HomeAnswer(status=None, error="ConnectionRefusedError")
        await routing.until_weights({"member-a": 0, "member-b": 1}, "member-a gated on transport errors")
        assert "transport error" in world.entries()["member-a"]["probe"]["message"]


async def test_a_hand_edit_of_the_map_is_undone(split: Routing) -> None:
    world = split.world
    assert world.traffic_map is not None and world.traffic_map.spec is not None
    edited = dict(world.traffic_map.spec, entries=[dict(e, weight=100) for e in world.traffic_map.spec["entries"]])
    world.edit_map_spec(edited)
    await split.changed()  # what the bridge sends for the map's new generation
    await until(split.env, lambda: {c: e["weight"] for c, e in world.entries().items()} == {
        "member-a": 3, "member-b": 1}, what="the computed spec back")
    await until(split.env, lambda: world.traffic_map is not None and world.traffic_map.status.get(
        "observedTrafficMapGeneration") == world.traffic_map.generation, what="republished")
    assert world.weights() == {"member-a": 3, "member-b": 1}


async def test_routing_turned_off_withdraws_the_route_and_deletes_the_map(split: Routing) -> None:
    world = split.world
    world.defaults = RoutingDefaults(enabled=False)
    await split.changed()
    await until(split.env, lambda: world.traffic_map is None, what="the map deleted")
    assert world.objects == {}
    await split.until_told([], "nothing routed")
    state = await split.handle.query(Query.STATE)
    assert state["phase"] == "NotRouted"


async def test_a_malformed_drain_keeps_the_last_table_and_says_why(split: Routing) -> None:
    world = split.world
    writes = world.map_writes
    world.annotations[DRAIN_ANNOTATION] = '{"x": {"cluster": "member-a"'
    await split.changed()
    await until(split.env, lambda: any(r == "RoutingInputInvalid" for _, r, _ in world.events), what="the Warning")
    kind, _, message = next(e for e in world.events if e[1] == "RoutingInputInvalid")
    assert kind == "Warning" and "is not JSON" in message and "keeps its last table" in message
    assert world.map_writes == writes and world.weights() == {"member-a": 3, "member-b": 1}


async def test_no_global_gateway_withdraws_the_route(split: Routing) -> None:
    world = split.world
    world.endpoint = EndpointConfig()
    await split.changed()
    await until(split.env, lambda: world.condition("Published").get("reason") == "Withdrawn", what="Withdrawn")
    assert world.objects == {} and "globalGateway" in world.condition("Published")["message"]
    await split.until_told([], "nothing routed")
    # The table itself stays: routing is on, only publication has nowhere to go.
    assert {c: e["weight"] for c, e in world.entries().items()} == {"member-a": 3, "member-b": 1}


async def test_deletion_removes_the_route_and_releases_the_map_before_placement_withdraws(split: Routing) -> None:
    world = split.world
    world.deleting = True
    await split.handle.signal(Signal.DELETE, {"uid": world.uid, "generation": world.generation,
                                              "resource_version": "9", "deleting": True})
    await split.handle.result()
    assert world.objects == {}
    assert world.traffic_map is not None and world.traffic_map.finalizers == []
    assert world.condition("Published")["reason"] == "Unpublished"
    last = await split.last_told()
    assert last is not None and last.routed == [] and last.settled


async def test_publisher_options_hold_publication_with_invalid_options(env: WorkflowEnvironment) -> None:
    from servingops.api_models.ome.routing import RoutingPublisherSpec

    world = FakeRoutingWorld(env=env, placement=placement({"member-a": (1, 1)}),
                             routing=RoutingSpec(publisher=RoutingPublisherSpec(options={"weightScale": "10"})))
    async for _routing in start(env, world):
        await until(env, lambda: world.condition("Published").get("reason") == "InvalidOptions", what="refused")
        assert world.objects == {} and world.entries()["member-a"]["weight"] == 1
