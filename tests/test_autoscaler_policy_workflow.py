"""AutoscalerPolicy on the time-skipping server (testkit/autoscaler_fakes.py):

- the InferenceService workflow keeps a RawDeployment component's scaler (targeting the Deployment of
  the revision carrying its traffic, the Deployment's count left to the scaler), reports
  AutoscalerResolved from what serving.ensure_autoscaler answers, fails closed on a policy that does not
  render (the last good scaler and its status stay; AutoscalerResolved False with the reason, a Warning
  Event), follows `autoscaler-policy-changed`, deletes a removed component's scaler and tells the
  policy's workflow (refresh-now) when its references move;
- AutoscalerPolicyWorkflow writes portableDigest, attachedComponents and Ready, re-counts on
  refresh-now, and tells every consuming service when the spec moves.
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

from servingops.activities.autoscaler_policy import PolicyConsumer
from servingops.api_models import contract
from servingops.api_models.ome.enums import ComponentType
from servingops.workers.sandbox import workflow_runner
from servingops.workflows.autoscaler_policy import AutoscalerPolicyRun, AutoscalerPolicyWorkflow
from servingops.workflows.inference_service.workflow import ServiceInput
from servingops.workflows.rollout.models import RolloutSettings
from testkit.autoscaler_fakes import POLICY, PolicyWorld, ScalerWorld, policy_answer, problem_answer
from testkit.nudge_recorder import NudgeRecorder
from testkit.rollout_fakes import NAME, NAMESPACE, FakeCluster, until
from testkit.rollout_harness import WORKFLOWS, start_env

pytestmark = pytest.mark.timeskip

ENGINE, ROUTER = ComponentType.ENGINE, ComponentType.ROUTER


@contextlib.asynccontextmanager
async def raw_service(answers: dict[ComponentType, Any], digests: dict[ComponentType, str | None]
                      ) -> AsyncIterator[tuple[Any, ScalerWorld, WorkflowEnvironment, str]]:
    env = await start_env()
    cluster = FakeCluster(env)
    world = ScalerWorld(cluster)
    world.answers.update(answers)
    world.digests.update(digests)
    for component in answers:
        cluster.set_desired(component, "a", 2)
    queue = f"asp-{uuid.uuid4().hex[:8]}"
    try:
        async with Worker(env.client, task_queue=queue, workflows=[*WORKFLOWS, NudgeRecorder],
                          activities=world.activities(), workflow_runner=workflow_runner()):
            handle = await env.client.start_workflow(
                "InferenceServiceWorkflow", ServiceInput(ref=cluster.ref, settings=RolloutSettings()),
                id=contract.inference_service_workflow_id(NAMESPACE, NAME, cluster.uid), task_queue=queue)
            try:
                await until(env, lambda: cluster.conditions.get("Ready", {}).get("status") == "True",
                            what="first Ready")
                yield handle, world, env, queue
            finally:
                with contextlib.suppress(RPCError):
                    await handle.terminate()
    finally:
        await env.shutdown()


def _resolved(world: ScalerWorld) -> dict[str, Any]:
    return world.cluster.conditions.get("AutoscalerResolved", {})


@pytest.mark.asyncio
async def test_a_raw_deployment_scaler_follows_its_policy_and_fails_closed() -> None:
    policy_uid = str(uuid.uuid4())
    good = policy_answer(policy_uid, generation=1, live={"currentReplicas": 2, "desiredReplicas": 2})
    async with raw_service({ENGINE: good}, {ENGINE: "d1"}) as (handle, world, env, _queue):
        cluster = world.cluster
        await until(env, lambda: _resolved(world).get("status") == "True", what="AutoscalerResolved True")
        assert _resolved(world)["reason"] == "PolicyRendered"
        assert world.asked[0].revision == "a", "the scaler targets the revision carrying the traffic"
        engine = cluster.component(ENGINE)
        assert engine["autoscaler"]["specSource"] == "policy"
        assert engine["autoscaler"]["policy"]["name"] == POLICY
        assert engine["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                            "name": f"{NAME}-engine-rev-a"}

        # The HPA scales the Deployment: the service no longer puts it back to minReplicas.
        cluster.revisions[ENGINE]["a"].replicas = 5
        await handle.signal(contract.Signal.REPLICA_CHANGED)
        await env.sleep(30)
        assert cluster.replicas(ENGINE, "a") == 5

        # The policy is edited into one that does not render: nothing is applied, status keeps the last
        # good scaler, AutoscalerResolved is False with the reason, and a Warning Event says why.
        world.answers[ENGINE] = problem_answer(policy_uid)
        world.digests[ENGINE] = "d2"
        asked = len(world.asked)
        await handle.signal(contract.Signal.AUTOSCALER_POLICY_CHANGED)
        await until(env, lambda: _resolved(world).get("status") == "False", what="AutoscalerResolved False")
        assert len(world.asked) > asked
        assert _resolved(world)["reason"] == "PolicyInvalid"
        assert "last good scaler stays" in _resolved(world)["message"]
        assert cluster.component(ENGINE)["autoscaler"] == engine["autoscaler"], "the last good status stays"
        assert any(e.type == "Warning" and e.reason == "PolicyInvalid" for e in cluster.events)

        # Fixed again: True, and a Normal Event.
        world.answers[ENGINE] = policy_answer(policy_uid, generation=3)
        world.digests[ENGINE] = "d3"
        await handle.signal(contract.Signal.AUTOSCALER_POLICY_CHANGED)
        await until(env, lambda: _resolved(world).get("status") == "True", what="resolved again")
        assert cluster.component(ENGINE)["autoscaler"]["policy"]["observedGeneration"] == 3
        assert any(e.type == "Normal" and e.reason == "PolicyRendered" for e in cluster.events)


@pytest.mark.asyncio
async def test_a_component_without_a_scaler_keeps_its_count_and_is_never_asked() -> None:
    async with raw_service({ENGINE: None}, {ENGINE: None}) as (handle, world, env, _):
        cluster = world.cluster
        cluster.revisions[ENGINE]["a"].replicas = 5
        await handle.signal(contract.Signal.REPLICA_CHANGED)
        await until(env, lambda: cluster.replicas(ENGINE, "a") == 2, what="the count put back to the spec's")
        assert world.asked == [], "a RawDeployment component with no block and no ref has no scaler"
        assert "AutoscalerResolved" not in cluster.conditions


@pytest.mark.asyncio
async def test_a_removed_components_scaler_goes_and_its_policy_is_told() -> None:
    policy_uid = str(uuid.uuid4())
    answers = {ENGINE: policy_answer(policy_uid), ROUTER: policy_answer(policy_uid)}
    async with raw_service(answers, {ENGINE: "e", ROUTER: "r"}) as (handle, world, env, queue):
        cluster = world.cluster
        recorder = await env.client.start_workflow(
            "NudgeRecorder", id=f"autoscalerpolicy/{NAMESPACE}/{POLICY}/{policy_uid}", task_queue=queue)
        await until(env, lambda: _resolved(world).get("status") == "True", what="both rendered")
        before = (await recorder.query("counts"))[0]

        del cluster.desired[ROUTER]
        cluster.generation += 1
        await handle.signal(contract.Signal.OBJECT_CHANGED, contract.ObjectEvent(
            uid=cluster.uid, generation=cluster.generation, resource_version=str(cluster.generation)))
        await until(env, lambda: ROUTER in world.deleted, what="the router's scaler deleted")
        removal = [a for a in world.asked if a.component is ROUTER][-1]
        assert removal.revision is None
        await until(env, lambda: "router" not in cluster.status.get("components", {}), what="router gone from status")

        async def refreshed() -> bool:
            return bool((await recorder.query("counts"))[0] > before)
        for _ in range(30):
            if await refreshed():
                break
            await env.sleep(1)
        assert await refreshed(), "the policy's workflow was told to recount"


# -- AutoscalerPolicyWorkflow --------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def policy_served(world: PolicyWorld) -> AsyncIterator[tuple[Any, WorkflowEnvironment, str]]:
    env = await start_env()
    queue = f"aspw-{uuid.uuid4().hex[:8]}"
    try:
        async with Worker(env.client, task_queue=queue,
                          workflows=[AutoscalerPolicyWorkflow, NudgeRecorder],
                          activities=world.activities(), workflow_runner=workflow_runner()):
            handle = await env.client.start_workflow(
                "AutoscalerPolicyWorkflow", AutoscalerPolicyRun(ref=world.ref), id=world.workflow_id(),
                task_queue=queue)
            try:
                yield handle, env, queue
            finally:
                with contextlib.suppress(RPCError):
                    await handle.terminate()
    finally:
        await env.shutdown()


@pytest.mark.asyncio
async def test_policy_status_counts_and_consumers_told() -> None:
    consumer_uid = str(uuid.uuid4())
    world = PolicyWorld(attached=2, consumers=[PolicyConsumer(name="llama", uid=consumer_uid)])
    async with policy_served(world) as (handle, env, queue):
        consumer = await env.client.start_workflow(
            "NudgeRecorder", id=contract.inference_service_workflow_id(NAMESPACE, "llama", consumer_uid),
            task_queue=queue)
        await until(env, lambda: world.status.get("portableDigest") == world.digest, what="first status")
        assert world.status["attachedComponents"] == 2 and world.status["observedGeneration"] == 1
        assert world.conditions["Ready"]["status"] == "True"

        # A new spec: status follows, the consuming service is told.
        changes = (await consumer.query("counts"))[1]
        await handle.signal(contract.Signal.OBJECT_CHANGED, world.bump())
        await until(env, lambda: world.status.get("observedGeneration") == 2, what="generation 2")
        assert world.status["portableDigest"] == world.digest
        for _ in range(30):
            if (await consumer.query("counts"))[1] > changes:
                break
            await env.sleep(1)
        assert (await consumer.query("counts"))[1] > changes, "the consumer was told the policy changed"

        # A service stops referencing it: refresh-now recounts at once.
        world.attached = 1
        await handle.signal(contract.Signal.REFRESH_NOW)
        await until(env, lambda: world.status.get("attachedComponents") == 1, what="recount")

        # A stored body that breaks a rule: Ready False, PolicyInvalid, a Warning Event.
        await handle.signal(contract.Signal.OBJECT_CHANGED, world.bump(problem="a prometheus trigger must set "
                                                                               "ignoreNullValues explicitly"))
        await until(env, lambda: world.conditions["Ready"]["status"] == "False", what="invalid")
        assert world.conditions["Ready"]["reason"] == "PolicyInvalid"
        assert any(e.type == "Warning" and e.reason == "PolicyInvalid" for e in world.events)

        # Periodic recount without any nudge.
        world.attached = 4
        await until(env, lambda: world.status.get("attachedComponents") == 4, step=60, what="periodic recount")

        await handle.signal(contract.Signal.DELETE, {"uid": world.uid, "generation": world.generation,
                                                     "resource_version": "99", "deleting": True})
        await handle.result()


@pytest.mark.asyncio
async def test_kedas_verdict_reaches_the_status_with_no_other_news() -> None:
    """A ScaledObject KEDA has not judged yet: the service looks again by itself (patch
    scaler-readiness-poll) and writes KEDA's Ready once it comes (patch scaler-mirror-writes), though no
    event of the service says so; once Ready it stops polling for it."""
    policy_uid = str(uuid.uuid4())
    keda = {"class": "KEDA", "keda": {"triggers": [{"type": "prometheus", "metadata": {
        "serverAddress": "http://prometheus:9090", "query": "up", "threshold": "1"}}]}}
    async with raw_service({ENGINE: policy_answer(policy_uid, block=keda, live={})}, {ENGINE: "d1"}) as (
            _handle, world, env, _queue):
        cluster = world.cluster
        await until(env, lambda: (cluster.component(ENGINE).get("autoscaler") or {}).get("class") == "KEDA",
                    what="the KEDA mirror")
        assert not (cluster.component(ENGINE)["autoscaler"].get("conditions"))
        ready = {"type": "Ready", "status": "True", "reason": "ScaledObjectReady", "message": "ready",
                 "lastTransitionTime": "2026-12-07T15:00:00Z"}
        world.answers[ENGINE] = policy_answer(policy_uid, block=keda, live={"conditions": [ready]})
        since = await env.get_current_time()
        await until(env, lambda: (cluster.component(ENGINE)["autoscaler"].get("conditions") or [{}])[0]
                    .get("status") == "True", what="KEDA's Ready written")
        waited = (await env.get_current_time() - since).total_seconds()
        assert waited <= 60, f"{waited} s: the poll backs off to a minute (before it: the next resync, ~5 min)"
        asked = len(world.asked)
        await env.sleep(600)
        assert len(world.asked) - asked <= 3, "no poll once KEDA said Ready (only the service's own resyncs)"
