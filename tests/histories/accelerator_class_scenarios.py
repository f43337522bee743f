"""Recorded scenarios of AcceleratorClassWorkflow (tests/histories/record.py runs them), against the fake
cluster of testkit/accelerator_class_fakes.py (the activities' wire names and payloads)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from temporalio.worker import Worker

from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.accelerator_class_fakes import FakeAcceleratorWorld
from testkit.rollout_fakes import until

if TYPE_CHECKING:
    from tests.histories.record import Recording

GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"


async def accelerator_class(rec: Recording) -> None:
    """A class's inventory: its Kueue ResourceFlavor created, the first sample written; a pod taking
    accelerators written at the next sample; the 300 s refresh; a spec change sampled at once (no node
    matches: Ready False); continued as new after its bounded samples; the class gone."""
    env = rec.env
    world = FakeAcceleratorWorld()
    world.add_node("g1", {PRODUCT: "A100"}, 8)
    world.add_node("g2", {PRODUCT: "A100"}, 4)
    stored = world.add_class("a100", {"discovery": {"nodeSelector": {PRODUCT: "A100"}}, "capabilities": {},
                                      "resources": [{"name": GPU}],
                                      "integration": {"kueueResourceFlavor": "a100"}})
    queue = f"ac-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(env.get_current_time), workflow_runner=workflow_runner()):
        settings = {"samples_per_run": 10, "interval_seconds": 60}
        handle = await env.client.start_workflow(
            "AcceleratorClassWorkflow", {"ref": stored.ref().model_dump(), "settings": settings},
            id=f"acceleratorclass/{stored.name}/{stored.uid}", task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: len(world.writes) == 1, step=1, what="the first write")
        world.run_pod("p", "g1", {GPU: "6"})
        await until(env, lambda: world.writes[-1][1]["availableAccelerators"] == 6, step=1, what="the pod counted")
        await until(env, lambda: len(world.writes) >= 3, step=10, what="the refresh")
        stored.spec = {**stored.spec, "discovery": {"nodeSelector": {PRODUCT: "B200"}}}
        stored.generation = 2
        await handle.signal("object-changed", {"uid": stored.uid, "generation": 2, "resource_version": "2"})
        await until(env, lambda: world.writes[-1][1]["nodes"] == [], step=1, what="no node matches")
        await until(env, lambda: world.observes >= 12, step=10, what="continued as new")
        del world.classes[stored.name]
        latest = env.client.get_workflow_handle(handle.id)
        await latest.signal("object-changed", {"uid": stored.uid, "generation": 3, "resource_version": "3"})
        await latest.result()
        await rec.save()


SCENARIOS = {"accelerator-class": accelerator_class}
