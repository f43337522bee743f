"""spec.scalingPolicy in the InferenceService workflow, on the time-skipping server
(testkit/scaling_fakes.py): the test plays the HPA by writing the anchor's count, and the service derives
each follower's count from it (Proportional: rounded up; Pinned: the same), writes it (RawDeployment: the
revision's Deployment; OMENative: the replica's whole count), records FollowerScaled Events and the
ScalingCoordinated condition, refuses a policy that breaks a rule (Ready False, InvalidScalingPolicy) and
leaves Independent services as they were.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models import contract
from servingops.api_models.ome.enums import ComponentType
from servingops.workers.sandbox import workflow_runner
from servingops.workflows.inference_service.workflow import ServiceInput
from servingops.workflows.rollout.models import RolloutSettings
from testkit.rollout_fakes import NAME, NAMESPACE, FakeCluster, until
from testkit.rollout_harness import WORKFLOWS, start_env
from testkit.scaling_fakes import ScalingWorld, hpa_answer

pytestmark = pytest.mark.timeskip

ENGINE, DECODER, ROUTER = ComponentType.ENGINE, ComponentType.DECODER, ComponentType.ROUTER
HALF = {"mode": "Proportional", "proportional": {"anchor": "engine", "ratios": {"decoder": "0.5"}}}


@contextlib.asynccontextmanager
async def pd_service(policy: dict[str, Any] | None, *, native: bool = False, wait_ready: bool = True,
                     components: tuple[ComponentType, ...] = (ENGINE, DECODER),
                     ) -> AsyncIterator[tuple[Any, ScalingWorld, WorkflowEnvironment]]:
    """An engine under an HPA (its count the test's to write) and a decoder without a scaler, minReplicas 1."""
    env = await start_env()
    cluster = FakeCluster(env)
    world = ScalingWorld(cluster)
    world.answers[ENGINE] = hpa_answer()
    world.digests[ENGINE] = "hpa"
    world.own_scalers.add(ENGINE)
    for component in components:
        cluster.set_desired(component, "a", 1)
        world.digests.setdefault(component, None)
        if native:
            world.native[component] = 0
    world.policy = policy
    queue = f"scp-{uuid.uuid4().hex[:8]}"
    try:
        async with Worker(env.client, task_queue=queue, workflows=list(WORKFLOWS), activities=world.activities(),
                          workflow_runner=workflow_runner()):
            handle = await env.client.start_workflow(
                "InferenceServiceWorkflow", ServiceInput(ref=cluster.ref, settings=RolloutSettings()),
                id=contract.inference_service_workflow_id(NAMESPACE, NAME, cluster.uid), task_queue=queue)
            try:
                if wait_ready:
                    await until(env, lambda: cluster.conditions.get("Ready", {}).get("status") == "True",
                                what="first Ready")
                yield handle, world, env
            finally:
                with contextlib.suppress(RPCError):
                    await handle.terminate()
    finally:
        await env.shutdown()


def _coordinated(world: ScalingWorld) -> dict[str, Any]:
    return world.cluster.conditions.get("ScalingCoordinated", {})


def _followed(world: ScalingWorld) -> list[str]:
    return [e.message for e in world.cluster.events if e.reason == "FollowerScaled"]


@pytest.mark.asyncio
async def test_a_raw_deployment_decoder_follows_the_engines_hpa_by_the_ratio_rounded_up() -> None:
    async with pd_service(HALF) as (_handle, world, env):
        assert world.count(DECODER) == 1
        assert _coordinated(world)["reason"] == "Proportional"
        assert _coordinated(world)["message"] == "engine 1 (anchor); decoder 1 (x 1/2)"
        # The HPA takes the engine to 4: with no event of the object, the service's poll finds it.
        world.scale(ENGINE, 4)
        await until(env, lambda: world.count(DECODER) == 2, what="decoder 2 = ceil(4 x 0.5)")
        assert world.count(ENGINE) == 4, "the engine's count stays the HPA's"
        assert _coordinated(world)["message"] == "engine 4 (anchor); decoder 2 (x 1/2)"
        assert _followed(world) == ["decoder 1 -> 2 replicas: engine 4 (anchor); decoder 2 (x 1/2)"]
        world.scale(ENGINE, 3)
        await env.sleep(30)
        assert world.count(DECODER) == 2, "ceil(3 x 0.5) is still 2: nothing written"
        world.scale(ENGINE, 1)
        await until(env, lambda: world.count(DECODER) == 1, what="back down to 1")
        assert _followed(world)[-1] == "decoder 2 -> 1 replicas: engine 1 (anchor); decoder 1 (x 1/2)"
        assert len(_followed(world)) == 2


@pytest.mark.asyncio
async def test_an_omenative_follower_gets_its_whole_count_when_the_replica_reports() -> None:
    async with pd_service({"mode": "Proportional", "proportional": {"ratios": {"decoder": "0.25"}}},
                          native=True) as (handle, world, env):
        world.scale(ENGINE, 5)
        await handle.signal(contract.Signal.REPLICA_CHANGED)  # the engine's replica reports its new count
        await until(env, lambda: world.count(DECODER) == 2, what="decoder 2 = ceil(5 x 0.25)")
        asked = [r for r in world.ensured if r.key.component is DECODER and r.component_replicas == 2]
        assert asked and asked[-1].replicas == 2
        assert not any(r.component_replicas is not None for r in world.ensured if r.key.component is ENGINE)
        assert "FollowerScaled" in {e.reason for e in world.cluster.events}


@pytest.mark.asyncio
async def test_pinned_holds_the_decoder_and_the_router_at_the_engines_count_within_no_bounds() -> None:
    async with pd_service({"mode": "Pinned"}, components=(ENGINE, DECODER, ROUTER)) as (_handle, world, env):
        world.max_replicas[DECODER] = 2  # pinned means equal: the follower's maxReplicas does not cap it
        world.scale(ENGINE, 3)
        await until(env, lambda: world.count(DECODER) == 3 and world.count(ROUTER) == 3, what="both pinned at 3")
        assert _coordinated(world)["reason"] == "Pinned"
        assert _coordinated(world)["message"] == "engine 3 (anchor); decoder 3 (pinned); router 3 (pinned)"


@pytest.mark.asyncio
async def test_a_followers_max_replicas_caps_a_proportional_count() -> None:
    async with pd_service({"mode": "Proportional", "proportional": {"ratios": {"decoder": "1"}}}) as (
            _handle, world, env):
        world.max_replicas[DECODER] = 3
        world.scale(ENGINE, 5)
        await until(env, lambda: world.count(DECODER) == 3, what="parity capped at maxReplicas 3")
        await env.sleep(30)
        assert world.count(DECODER) == 3


@pytest.mark.asyncio
async def test_independent_leaves_every_component_on_its_own() -> None:
    async with pd_service(None) as (_handle, world, env):
        world.scale(ENGINE, 4)
        await env.sleep(60)
        assert (world.count(ENGINE), world.count(DECODER)) == (4, 1)
        assert "ScalingCoordinated" not in world.cluster.conditions
        assert _followed(world) == []
        assert all(r.component_replicas is None for r in world.ensured)


@pytest.mark.asyncio
async def test_a_policy_that_breaks_a_rule_is_refused_and_a_fix_coordinates() -> None:
    bad = {"mode": "Proportional", "proportional": {"ratios": {"decoder": "0"}}}
    async with pd_service(bad, wait_ready=False) as (handle, world, env):
        cluster = world.cluster
        await until(env, lambda: cluster.conditions.get("Ready", {}).get("reason") == "InvalidScalingPolicy",
                    what="refused")
        ready = cluster.conditions["Ready"]
        assert ready["status"] == "False"
        assert "scalingPolicy: the ratio of decoder must be greater than 0 (got '0')" in ready["message"]
        assert any(e.type == "Warning" and e.reason == "InvalidScalingPolicy" for e in cluster.events)
        world.set_policy(HALF)
        await handle.signal(contract.Signal.OBJECT_CHANGED, {"uid": cluster.uid, "generation": cluster.generation,
                                                             "resource_version": str(cluster.generation)})
        await until(env, lambda: _coordinated(world).get("status") == "True", what="coordinated once fixed")
        world.scale(ENGINE, 4)
        await until(env, lambda: world.count(DECODER) == 2, what="the decoder follows")


@pytest.mark.asyncio
async def test_dropping_the_policy_says_so_and_leaves_the_decoder_to_its_spec() -> None:
    async with pd_service(HALF) as (handle, world, env):
        world.scale(ENGINE, 4)
        await until(env, lambda: world.count(DECODER) == 2, what="following")
        world.set_policy(None)
        await handle.signal(contract.Signal.OBJECT_CHANGED, {"uid": world.cluster.uid,
                                                             "generation": world.cluster.generation,
                                                             "resource_version": str(world.cluster.generation)})
        await until(env, lambda: _coordinated(world).get("status") == "False", what="ScalingCoordinated False")
        assert _coordinated(world)["reason"] == "Independent"
        await until(env, lambda: world.count(DECODER) == 1, what="the decoder back at its minReplicas")
