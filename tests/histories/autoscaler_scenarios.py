"""Recorded scenarios of AutoscalerPolicyWorkflow and of the InferenceService workflow's AutoscalerPolicy
branches (tests/histories/record.py runs them), against testkit/autoscaler_fakes.py under the real
activity names."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from temporalio.worker import Worker

from servingops.activities.autoscaler_policy import PolicyConsumer
from servingops.api_models.ome.enums import ComponentType
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.autoscaler_fakes import PolicyWorld, ScalerWorld, policy_answer, problem_answer
from testkit.rollout_fakes import NAME, NAMESPACE, FakeCluster, until
from testkit.scaling_fakes import ScalingWorld, hpa_answer, rolling_world

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from tests.histories.record import Recording

ENGINE, DECODER, ROUTER = ComponentType.ENGINE, ComponentType.DECODER, ComponentType.ROUTER


async def autoscaler_policy_lifecycle(rec: Recording) -> None:
    """An AutoscalerPolicy's first status, a new spec told to a consumer (whose workflow is not running:
    best effort), a refresh-now recount, a stored body that breaks a rule (PolicyInvalid), deletion."""
    world = PolicyWorld(attached=1, consumers=[PolicyConsumer(name=NAME, uid=str(uuid.uuid4()))])
    env = rec.env
    queue = f"asp-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow("AutoscalerPolicyWorkflow", {"ref": world.ref.model_dump()},
                                                 id=world.workflow_id(), task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: "portableDigest" in world.status, what="first status")
        await handle.signal("object-changed", world.bump())
        await until(env, lambda: world.status.get("observedGeneration") == 2, what="generation 2")
        world.attached = 2
        await handle.signal("refresh-now")
        await until(env, lambda: world.status.get("attachedComponents") == 2, what="recount")
        await handle.signal("object-changed", world.bump(problem="a prometheus trigger must set ignoreNullValues"))
        await until(env, lambda: world.conditions.get("Ready", {}).get("status") == "False", what="invalid")
        await handle.signal("delete", {"uid": world.uid, "generation": world.generation, "resource_version": "9",
                                       "deleting": True})
        await handle.result()
        await rec.save()


async def isvc_autoscaler_policy(rec: Recording) -> None:
    """A RawDeployment service whose engine and router scale from an AutoscalerPolicy (patches
    rawdeployment-autoscaler, autoscaler-policy-nudges): rendered, the policy edited into one that does
    not render (fail closed), fixed, then the router removed (removed-component-scaler)."""
    env = rec.env
    cluster = FakeCluster(env)
    world = ScalerWorld(cluster)
    policy_uid = str(uuid.uuid4())
    for component in (ENGINE, ROUTER):
        cluster.set_desired(component, "a", 2)
        world.answers[component] = policy_answer(policy_uid)
        world.digests[component] = "d1"
    queue = f"isvc-asp-{uuid.uuid4().hex[:8]}"

    def resolved() -> Any:
        return cluster.conditions.get("AutoscalerResolved", {}).get("status")

    async def changed(edit: Callable[[], None], what: str, check: Callable[[], bool],
                      signal: str = "autoscaler-policy-changed") -> None:
        edit()
        if signal == "object-changed":
            cluster.generation += 1
            await handle.signal(signal, {"uid": cluster.uid, "generation": cluster.generation,
                                         "resource_version": str(cluster.generation)})
        else:
            await handle.signal(signal)
        await until(env, check, what=what)

    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "InferenceServiceWorkflow", {"ref": cluster.ref.model_dump(), "settings": {}},
            id=f"isvc/{NAMESPACE}/{NAME}/{cluster.uid}", task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: resolved() == "True", what="rendered")

        def broken() -> None:
            world.answers[ENGINE] = problem_answer(policy_uid)
            world.digests[ENGINE] = "d2"

        def fixed() -> None:
            world.answers[ENGINE] = policy_answer(policy_uid, generation=3)
            world.digests[ENGINE] = "d3"

        steps: list[tuple[Callable[[], None], str, Callable[[], bool], str]] = [
            (broken, "fail closed", lambda: resolved() == "False", "autoscaler-policy-changed"),
            (fixed, "resolved again", lambda: resolved() == "True", "autoscaler-policy-changed"),
            (lambda: cluster.desired.pop(ROUTER), "router's scaler deleted", lambda: ROUTER in world.deleted,
             "object-changed"),
        ]
        for edit, what, check, signal in steps:
            await changed(edit, what, check, signal)
        await env.sleep(30)
        await rec.save()


async def isvc_scaling_policy(rec: Recording) -> None:
    """A RawDeployment engine under an HPA and a decoder following it by spec.scalingPolicy Proportional 0.5
    (patch scaling-policy): the engine 1 -> 4 -> 1 (the HPA, played by the test), the decoder 1 -> 2 -> 1,
    found by the coordination poll; then the policy removed (ScalingCoordinated False)."""
    env = rec.env
    cluster = FakeCluster(env)
    world = ScalingWorld(cluster)
    world.answers[ENGINE] = hpa_answer()
    world.digests.update({ENGINE: "hpa", DECODER: None})
    world.own_scalers.add(ENGINE)
    for component in (ENGINE, DECODER):
        cluster.set_desired(component, "a", 1)
    world.policy = {"mode": "Proportional", "proportional": {"ratios": {"decoder": "0.5"}}}
    queue = f"isvc-scp-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "InferenceServiceWorkflow", {"ref": cluster.ref.model_dump(), "settings": {}},
            id=f"isvc/{NAMESPACE}/{NAME}/{cluster.uid}", task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: cluster.conditions.get("ScalingCoordinated", {}).get("status") == "True",
                    what="coordinated")
        world.scale(ENGINE, 4)
        await until(env, lambda: world.count(DECODER) == 2, what="decoder 2")
        world.scale(ENGINE, 1)
        await until(env, lambda: world.count(DECODER) == 1, what="decoder 1")
        world.set_policy(None)
        await handle.signal("object-changed", {"uid": cluster.uid, "generation": cluster.generation,
                                               "resource_version": str(cluster.generation)})
        await until(env, lambda: cluster.conditions.get("ScalingCoordinated", {}).get("status") == "False",
                    what="independent again")
        await env.sleep(30)
        await rec.save()


async def isvc_keda_verdict(rec: Recording) -> None:
    """A RawDeployment engine scaled by a KEDA ScaledObject its policy renders, which KEDA has not judged yet:
    the service looks again by itself (patch scaler-readiness-poll) and writes KEDA's Ready once it comes
    (patch scaler-mirror-writes), though no event of the service says so; then it rests."""
    env = rec.env
    cluster = FakeCluster(env)
    world = ScalerWorld(cluster)
    policy_uid = str(uuid.uuid4())
    keda = {"class": "KEDA", "keda": {"triggers": [{"type": "prometheus", "metadata": {
        "serverAddress": "http://prometheus:9090", "query": "up", "threshold": "1"}}]}}
    cluster.set_desired(ENGINE, "a", 1)
    world.answers[ENGINE] = policy_answer(policy_uid, block=keda, live={})
    world.digests[ENGINE] = "d1"
    queue = f"isvc-keda-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "InferenceServiceWorkflow", {"ref": cluster.ref.model_dump(), "settings": {}},
            id=f"isvc/{NAMESPACE}/{NAME}/{cluster.uid}", task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: (cluster.component(ENGINE).get("autoscaler") or {}).get("class") == "KEDA",
                    what="the KEDA mirror")
        await env.sleep(5)
        ready = {"type": "Ready", "status": "True", "reason": "ScaledObjectReady", "message": "ready",
                 "lastTransitionTime": "2026-12-07T15:00:00Z"}
        world.answers[ENGINE] = policy_answer(policy_uid, block=keda, live={"conditions": [ready]})
        await until(env, lambda: (cluster.component(ENGINE)["autoscaler"].get("conditions") or [{}])[0]
                    .get("status") == "True", what="KEDA's Ready written")
        await env.sleep(120)
        await rec.save()


async def isvc_scaling_during_run(rec: Recording) -> None:
    """A RawDeployment engine of 4 (the anchor) rolled a -> b by rollingUpdate (maxSurge 1) while a decoder
    follows it by 0.5 (patch scaling-during-run: the anchor's count is every revision carrying its traffic, so
    the decoder stays 2, 3 at the surge, instead of following the stable revision down to 1)."""
    env = rec.env
    world = rolling_world(env)
    cluster = world.cluster
    queue = f"isvc-spr-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "InferenceServiceWorkflow", {"ref": cluster.ref.model_dump(), "settings": {}},
            id=f"isvc/{NAMESPACE}/{NAME}/{cluster.uid}", task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: world.count(DECODER) == 2 and cluster.conditions.get("Ready", {})
                    .get("status") == "True", what="decoder 2, Ready")
        cluster.set_desired(ENGINE, "b", 4)
        await handle.signal("object-changed", {"uid": cluster.uid, "generation": cluster.generation,
                                               "resource_version": str(cluster.generation)})
        await until(env, lambda: cluster.weights(ENGINE) == {"b": 100} and "a" not in cluster.revisions[ENGINE],
                    what="engine rolled to b")
        await env.sleep(30)
        await rec.save()


SCENARIOS: dict[str, Callable[[Recording], Awaitable[None]]] = {
    "isvc-scaling-during-run": isvc_scaling_during_run,
    "isvc-keda-verdict": isvc_keda_verdict,
    "isvc-scaling-policy": isvc_scaling_policy,
    "autoscaler-policy-lifecycle": autoscaler_policy_lifecycle,
    "isvc-autoscaler-policy": isvc_autoscaler_policy,
}
