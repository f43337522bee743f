"""AcceleratorClassWorkflow on Temporal's time-skipping server against the fake cluster
(testkit/accelerator_class_fakes.py, held to the real activities by
tests/test_accelerator_class_conformance.py).

What is held: the first sample writes nodes, the counts and Ready; an unchanged inventory writes nothing
until the written lastUpdated is 300 s old (then only lastUpdated moves, Ready's lastTransitionTime
stays); a pod taking accelerators shows at the next sample (10 s); a discovery matching nothing is Ready
False NoMatchingNodes; a newer generation samples at once; continue-as-new carries what was written (no
extra write); a gone class ends the workflow."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models.contract import Query, Signal, accelerator_class_workflow_id
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.accelerator_class_fakes import FakeAcceleratorWorld, StoredClass
from testkit.rollout_fakes import until
from tests.histories.record import start_env

pytestmark = [pytest.mark.timeskip, pytest.mark.asyncio]

GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
INTERVAL = 10.0
SLACK = 2
"""Seconds a timeline may run late (each activity's real time is added to the skipped clock)."""
SPEC = {"discovery": {"nodeSelector": {PRODUCT: "A100"}}, "capabilities": {"memoryGB": "80Gi"},
        "resources": [{"name": GPU}]}


@dataclass
class Running:
    env: WorkflowEnvironment
    world: FakeAcceleratorWorld
    stored: StoredClass
    handle: WorkflowHandle[Any, Any]

    def status(self) -> dict[str, Any]:
        return self.world.writes[-1][1]

    async def writes(self, count: int, what: str) -> None:
        await until(self.env, lambda: len(self.world.writes) >= count, step=1, what=what)


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


async def _run(env: WorkflowEnvironment, world: FakeAcceleratorWorld, stored: StoredClass,
               **settings: Any) -> AsyncIterator[Running]:
    queue = f"ac-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(env.get_current_time), workflow_runner=workflow_runner()):
        start: dict[str, Any] = {"ref": stored.ref().model_dump()}
        if settings:
            start["settings"] = settings
        handle = await env.client.start_workflow("AcceleratorClassWorkflow", start,
                                                 id=accelerator_class_workflow_id(stored.name, stored.uid),
                                                 task_queue=queue)
        running = Running(env, world, stored, handle)
        await running.writes(1, "the first sample written")
        yield running
        if stored.name in world.classes:
            del world.classes[stored.name]
            await handle.signal(Signal.OBJECT_CHANGED, {"uid": stored.uid, "generation": stored.generation + 1,
                                                        "resource_version": "99"})
        result = await handle.result()
        assert result["phase"] == "Deleted"


def _world() -> tuple[FakeAcceleratorWorld, StoredClass]:
    world = FakeAcceleratorWorld()
    world.add_node("g1", {PRODUCT: "A100"}, 8)
    world.add_node("g2", {PRODUCT: "A100"}, 4)
    world.add_node("h1", {PRODUCT: "H100"}, 8)
    return world, world.add_class("a100", SPEC)


@pytest.fixture
async def running(env: WorkflowEnvironment) -> AsyncIterator[Running]:
    world, stored = _world()
    async for run in _run(env, world, stored):
        yield run


async def test_first_sample_then_only_a_refresh_every_300_seconds(running: Running) -> None:
    first = running.status()
    assert first["nodes"] == ["g1", "g2"]
    assert (first["totalAccelerators"], first["availableAccelerators"], first["availableNodes"]) == (12, 12, 2)
    [ready] = first["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "NodesDiscovered")
    await until(running.env, lambda: running.world.observes >= 40, step=5, what="forty samples")
    times = [round((t - running.world.writes[0][0]).total_seconds()) for t, _ in running.world.writes]
    assert len(times) >= 2 and all(0 <= t - want <= 3 * SLACK for t, want in zip(times, [0, 300], strict=False)), times
    second = running.world.writes[1][1]
    assert second["lastUpdated"] > first["lastUpdated"]
    assert {k: v for k, v in second.items() if k != "lastUpdated"} == {k: v for k, v in first.items()
                                                                        if k != "lastUpdated"}
    state = await running.handle.query(Query.STATE)
    assert state["phase"] == "Observing"


async def test_a_pod_taking_accelerators_shows_at_the_next_sample(running: Running) -> None:
    started = await running.env.get_current_time()
    running.world.run_pod("big", "g1", {GPU: "8"})
    await until(running.env, lambda: running.status()["availableAccelerators"] == 4, step=1,
                what="the drop written")
    took = (running.world.writes[-1][0] - started).total_seconds()
    assert took <= INTERVAL + SLACK, took
    assert running.status()["availableNodes"] == 1 and running.status()["totalAccelerators"] == 12
    running.world.delete_pod("big")
    await until(running.env, lambda: running.status()["availableAccelerators"] == 12, step=1,
                what="the accelerators back")
    conditions = [w[1]["conditions"][0]["lastTransitionTime"] for w in running.world.writes]
    assert len(set(conditions)) == 1  # Ready stayed True throughout


async def test_a_discovery_matching_nothing_and_a_spec_change(running: Running) -> None:
    stored = running.stored
    stored.spec = {**SPEC, "discovery": {"nodeSelector": {PRODUCT: "B200"}}}
    stored.generation = 2
    before = running.world.observes
    await running.handle.signal(Signal.OBJECT_CHANGED, {"uid": stored.uid, "generation": 2, "resource_version": "2"})
    await until(running.env, lambda: running.status()["nodes"] == [], step=0.2, what="the new discovery written")
    assert running.world.observes == before + 1  # at once, not at the timer
    [ready] = running.status()["conditions"]
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("False", "NoMatchingNodes", 2)
    assert running.status()["totalAccelerators"] == 0


async def test_continue_as_new_carries_what_was_written(env: WorkflowEnvironment) -> None:
    world, stored = _world()
    async for run in _run(env, world, stored, samples_per_run=3):
        await until(env, lambda: world.observes >= 10, step=2, what="ten samples over three runs")
        assert len(world.writes) == 1
        described = await run.handle.describe()
        assert described.run_id != run.handle.result_run_id


async def test_a_run_adopts_the_status_already_written(env: WorkflowEnvironment) -> None:
    world, stored = _world()
    now = datetime.now().astimezone()
    stored.status = {"nodes": ["g1", "g2"], "totalAccelerators": 12, "availableAccelerators": 12,
                     "availableNodes": 2, "lastUpdated": now.isoformat(),
                     "conditions": [{"type": "Ready", "status": "True", "reason": "NodesDiscovered",
                                     "message": "2 node(s) match; 12 of 12 nvidia.com/gpu available",
                                     "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    queue = f"ac-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(env.get_current_time), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "AcceleratorClassWorkflow", {"ref": stored.ref().model_dump()},
            id=accelerator_class_workflow_id(stored.name, stored.uid), task_queue=queue)
        await until(env, lambda: world.observes >= 3, step=1, what="three samples")
        state = await handle.query(Query.STATE)
        assert state["written"]["totalAccelerators"] == 12
        # A worker restarted on an unchanged cluster rewrites nothing (the written lastUpdated is fresh).
        assert [w[1]["conditions"][0]["lastTransitionTime"] for w in world.writes] in ([], ["2026-01-01T00:00:00Z"])
        del world.classes[stored.name]
        await handle.signal(Signal.OBJECT_CHANGED, {"uid": stored.uid, "generation": 2, "resource_version": "9"})
        assert (await handle.result())["phase"] == "Deleted"


async def test_the_named_flavor_is_created_once_and_an_existing_one_only_compared(env: WorkflowEnvironment) -> None:
    world, stored = _world()
    stored.spec = {**SPEC, "integration": {"kueueResourceFlavor": "a100-flavor"}}
    async for _ in _run(env, world, stored):
        await until(env, lambda: any(c["type"] == "KueueResourceFlavorSynced" and c["status"] == "True"
                                     for c in world.writes[-1][1]["conditions"]), step=1, what="the flavor synced")
        assert world.flavors_created == ["a100-flavor"] and world.flavors["a100-flavor"] == {PRODUCT: "A100"}
        await until(env, lambda: world.observes >= 6, step=5, what="more samples")
        assert world.flavors_created == ["a100-flavor"]  # created once
        synced = next(c for c in world.writes[-1][1]["conditions"] if c["type"] == "KueueResourceFlavorSynced")
        assert synced["reason"] == "FlavorMatches"
    theirs, other = _world()
    theirs.flavors["theirs"] = {"zone": "a"}
    other.spec = {**SPEC, "integration": {"kueueResourceFlavor": "theirs"}}
    async for run in _run(env, theirs, other):
        condition = next(c for c in run.status()["conditions"] if c["type"] == "KueueResourceFlavorSynced")
        assert (condition["status"], condition["reason"]) == ("False", "FlavorNodeLabelsDiffer")
        assert theirs.flavors["theirs"] == {"zone": "a"} and theirs.flavors_created == []


async def test_a_refused_flavor_create_is_reported_and_tried_again(env: WorkflowEnvironment) -> None:
    """ensure_flavor answers a 403 as `refused` (before, the worker's interceptor made it a permanent failure of
    the class's workflow): KueueResourceFlavorSynced False FlavorCreateRefused with the apiserver's words, one
    Warning, the inventory still sampled, and the create tried again until the role is mended."""
    world, stored = _world()
    stored.spec = {**SPEC, "integration": {"kueueResourceFlavor": "a100-flavor"}}
    world.refuse_flavor = "403 Forbidden: resourceflavors.kueue.x-k8s.io is forbidden"
    async for _ in _run(env, world, stored):
        def synced() -> dict[str, Any]:
            return next((c for c in world.writes[-1][1]["conditions"] if c["type"] == "KueueResourceFlavorSynced"),
                        {})
        await until(env, lambda: synced().get("reason") == "FlavorCreateRefused", step=1, what="the refusal")
        assert synced()["status"] == "False" and "is forbidden" in synced()["message"]
        due = world.observes + 3
        await until(env, lambda due=due: world.observes >= due, step=5, what="more samples")
        assert [(e.type, e.reason) for e in world.events] == [("Warning", "FlavorCreateRefused")]
        assert world.flavors_created == []
        world.refuse_flavor = ""
        await until(env, lambda: synced().get("reason") == "FlavorMatches", step=5, what="created once allowed")
        assert world.flavors_created == ["a100-flavor"]
