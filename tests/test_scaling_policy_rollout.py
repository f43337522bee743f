"""spec.scalingPolicy while a rollout run moves the anchor, on the time-skipping server (testkit/scaling_fakes.py).

A RawDeployment engine of 4 (the anchor) and a decoder following it by 0.5 (2). A rolling update of the engine
(maxSurge 1, maxUnavailable 0) moves pods from revision a to revision b one at a time: the engine's serving
capacity stays 4 (5 while the surge pod serves), so the decoder stays 2 (3 at the surge). Before patch
`scaling-during-run` the anchor's count was its stable revision's Deployment alone, which the run scales
4 -> 3 -> 2 -> 1 -> 0, and the decoder followed it down to 1 mid-run; now it is the replicas of every revision
of the anchor carrying traffic.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models import contract
from servingops.api_models.ome.enums import ComponentType
from servingops.workers.sandbox import workflow_runner
from servingops.workflows.inference_service.workflow import ServiceInput
from servingops.workflows.rollout.models import RolloutSettings
from testkit.rollout_fakes import NAME, NAMESPACE, until
from testkit.rollout_harness import WORKFLOWS, start_env
from testkit.scaling_fakes import ScalingWorld, rolling_world

pytestmark = pytest.mark.timeskip

ENGINE, DECODER = ComponentType.ENGINE, ComponentType.DECODER


@contextlib.asynccontextmanager
async def rolling_pd() -> AsyncIterator[tuple[ScalingWorld, WorkflowEnvironment]]:
    env = await start_env()
    world = rolling_world(env)
    queue = f"spr-{uuid.uuid4().hex[:8]}"
    try:
        async with Worker(env.client, task_queue=queue, workflows=list(WORKFLOWS), activities=world.activities(),
                          workflow_runner=workflow_runner()):
            cluster = world.cluster
            handle = await env.client.start_workflow(
                "InferenceServiceWorkflow", ServiceInput(ref=cluster.ref, settings=RolloutSettings()),
                id=contract.inference_service_workflow_id(NAMESPACE, NAME, cluster.uid), task_queue=queue)
            try:
                await until(env, lambda: world.count(DECODER) == 2 and cluster.conditions.get("Ready", {})
                            .get("status") == "True", what="decoder 2 = ceil(4 x 0.5), Ready")
                cluster.set_desired(ENGINE, "b", 4)
                await handle.signal(contract.Signal.OBJECT_CHANGED, {
                    "uid": cluster.uid, "generation": cluster.generation,
                    "resource_version": str(cluster.generation)})
                yield world, env
            finally:
                with contextlib.suppress(RPCError):
                    await handle.terminate()
    finally:
        await env.shutdown()


@pytest.mark.asyncio
async def test_a_rolling_update_of_the_anchor_leaves_the_follower_at_its_count() -> None:
    async with rolling_pd() as (world, env):
        cluster = world.cluster
        decoder_counts: list[int] = []
        engine_points: list[dict[str, int]] = []

        def rolled() -> bool:
            decoder_counts.append(world.count(DECODER))
            revisions = cluster.revisions[ENGINE]
            engine_points.append({r: rev.replicas for r, rev in revisions.items()})
            return cluster.weights(ENGINE) == {"b": 100} and "a" not in revisions

        await until(env, rolled, what="engine rolled to b")
        assert any(p.get("a") and p.get("b") for p in engine_points), "the run mixed a and b: it moved the anchor"
        assert any(0 < p.get("a", 0) < 4 for p in engine_points), "the run scaled the stable revision down"
        # Never below 2 (the stable revision alone went 3, 2, 1); at most 3 = ceil(5 x 0.5) while the surge pod
        # serves beside the 4.
        assert min(decoder_counts) == 2, f"the decoder never followed the run's scale-down: {decoder_counts}"
        assert max(decoder_counts) <= 3, decoder_counts
        await env.sleep(30)
        assert world.count(DECODER) == 2, "and after it, from revision b's 4"
        moves = [e.message for e in cluster.events if e.reason == "FollowerScaled"]
        assert all("engine 5 (anchor)" in m or "engine 4 (anchor)" in m for m in moves), moves
