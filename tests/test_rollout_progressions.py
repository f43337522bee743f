"""Blue-green, rolling update, rollout groups (sequential with soak, concurrent, ungrouped) and
RolloutPolicy resolution, end to end on the time-skipping test server with a fake cluster."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models import contract
from servingops.api_models.contract import ObjectEvent
from servingops.workflows.rollout.models import RolloutSettings
from testkit.rollout_fakes import NAMESPACE
from testkit.rollout_harness import DECODER, ENGINE, ROUTER, Isvc, canary_group, roll_to, rolled_out, served, start_env

pytestmark = pytest.mark.timeskip


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    # A test server per test: a workflow closed mid-timer can leave the time-skipping server's
    # clock locked, and one test's leftovers must not stall the next.
    environment = await start_env()
    async with environment:
        yield environment


def coordination(isvc: Isvc, key: str) -> dict[str, object]:
    groups = isvc.cluster.status.get("rolloutCoordination", {}).get("groups", [])
    return next((g for g in groups if g.get("name") == key), {})


async def test_blue_green_flips_at_once_after_full_ready(env: WorkflowEnvironment) -> None:
    async with served(env, desired={ENGINE: ("a", 3)}, ready_delay=60) as isvc:
        await roll_to(isvc, "b")  # no spec.rollout: the component rolls alone, blue-green
        await isvc.until(lambda: isvc.cluster.replicas(ENGINE, "b") == 3, step=1, what="full surge")
        assert isvc.weights() == {"a": 100}
        await isvc.until(lambda: isvc.weights() == {"b": 100}, step=5, what="flip")
        flip_at, _, weights = isvc.cluster.route_log[-1]
        assert [(w.revision, w.weight) for w in weights] == [("b", 100)]
        # Only two programs of the route ever: all on a, then all on b; b was fully Ready first.
        assert [[(w.revision, w.weight) for w in ws] for _, _, ws in isvc.cluster.route_log] == \
            [[("a", 100)], [("b", 100)]]
        surge_points = [p for p in isvc.cluster.points if p.revisions.get("b") == 3]
        assert surge_points and flip_at - surge_points[0].at >= 60
        await isvc.until(lambda: coordination(isvc, "engine").get("phase") == "Idle", what="drained")
        ((_, revision, deleted_at),) = isvc.cluster.deleted
        assert revision == "a" and deleted_at - flip_at >= 30  # default scale-down delay
        await rolled_out(isvc, "b")
        engine = isvc.cluster.component(ENGINE)
        assert engine["latestRolledoutRevision"] == "llama-engine-rev-b"
        assert engine["previousRolledoutRevision"] == "llama-engine-rev-a"
        assert "rolloutPhase" not in engine and "canary" not in engine  # blue-green reports coordination
        assert coordination(isvc, "engine")["policy"] == "BlueGreen"


async def test_blue_green_never_ready_keeps_old_serving(env: WorkflowEnvironment) -> None:
    async with served(env, desired={ENGINE: ("a", 2)}) as isvc:
        isvc.cluster.delay_for[(ENGINE, "b")] = float("inf")
        await roll_to(isvc, "b")
        await isvc.until(lambda: coordination(isvc, "engine").get("phase") == "Failed", step=30, what="failed")
        assert isvc.weights() == {"a": 100} and isvc.cluster.replicas(ENGINE, "b") is None
        assert isvc.cluster.conditions["Ready"]["status"] == "True"


# With one pod moving at a time the route is necessarily split for a while; with 50%/25% the new
# pods may all turn Ready between two readiness reads, and then the old revision is released and
# traffic moves in one go (the split follows Ready pods), so only the pool must be mixed.
@pytest.mark.parametrize(("surge", "unavailable", "replicas", "route_split"),
                         [(1, 0, 4, True), ("50%", "25%", 4, False), (0, 1, 3, True)])
async def test_rolling_respects_surge_and_unavailable(env: WorkflowEnvironment, surge: int | str,
                                                      unavailable: int | str, replicas: int,
                                                      route_split: bool) -> None:
    rollout = {"groups": [{"components": ["engine"],
                           "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}]}
    async with served(env, desired={ENGINE: ("a", replicas)}, rollout=rollout, ready_delay=20) as isvc:
        start = len(isvc.cluster.points)
        await roll_to(isvc, "b")
        await isvc.until(lambda: coordination(isvc, "0").get("phase") == "Idle", step=5, what="rolled")
        max_surge = -(-replicas * int(str(surge).rstrip("%")) // 100) if str(surge).endswith("%") else int(surge)
        max_unavailable = replicas * int(str(unavailable).rstrip("%")) // 100 if str(unavailable).endswith("%") \
            else int(unavailable)
        points = [p for p in isvc.cluster.points[start:] if p.component == ENGINE]
        assert points
        for point in points:
            assert point.total <= replicas + max_surge, point
            if point.revisions.get("b") != replicas or "a" in point.revisions:
                assert point.ready >= replicas - max_unavailable, point
        assert any(p.revisions.get("a") and p.revisions.get("b") for p in points), "mixed revisions in the pool"
        mixed = [ws for _, _, ws in isvc.cluster.route_log if len([w for w in ws if w.weight > 0]) == 2]
        assert mixed or not route_split, "both revisions served during the window"
        assert isvc.weights() == {"b": 100} and isvc.cluster.replicas(ENGINE, "a") is None
        await rolled_out(isvc, "b")


async def test_sequential_groups_with_soak(env: WorkflowEnvironment) -> None:
    rollout = {"groups": [{"components": ["engine"], "soak": "10m"}, {"components": ["decoder"]}]}
    async with served(env, desired={ENGINE: ("e1", 2), DECODER: ("d1", 2)}, rollout=rollout) as isvc:
        isvc.cluster.set_desired(ENGINE, "e2", 2)
        isvc.cluster.set_desired(DECODER, "d2", 2)
        await isvc.changed()
        await isvc.until(lambda: isvc.weights(ENGINE) == {"e2": 100}, step=5, what="engine group")
        assert isvc.cluster.replicas(DECODER, "d2") is None  # group 1 waits for group 0
        await isvc.until(lambda: coordination(isvc, "0").get("phase") == "Idle", step=5, what="engine done")
        done_at = isvc.cluster.deleted[-1][2]
        await isvc.until(lambda: isvc.cluster.replicas(DECODER, "d2") is not None, step=30, what="decoder starts")
        started = next(p.at for p in isvc.cluster.points if p.component == DECODER and "d2" in p.revisions)
        assert started - done_at >= 600
        await isvc.until(lambda: isvc.weights(DECODER) == {"d2": 100}, step=5, what="decoder group")


async def test_concurrent_canary_groups_advance_independently(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 30, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    rollout = {"groupOrdering": "Concurrent",
               "groups": [{"components": ["router"], "canary": {"steps": steps}},
                          {"components": ["engine", "decoder"], "canary": {"steps": steps}}]}
    async with served(env, desired={ROUTER: ("r1", 2), ENGINE: ("e1", 2), DECODER: ("d1", 2)},
                      rollout=rollout) as isvc:
        isvc.cluster.set_desired(ROUTER, "r2", 2)
        isvc.cluster.set_desired(ENGINE, "e2", 2)
        isvc.cluster.set_desired(DECODER, "d2", 2)
        await isvc.changed()
        await isvc.until(lambda: isvc.weights(ROUTER) == {"r1": 70, "r2": 30}
                         and isvc.weights(ENGINE) == {"e1": 70, "e2": 30}
                         and isvc.weights(DECODER) == {"d1": 70, "d2": 30}, what="both units at step 0")
        # One CanaryStatus per unit, on its entrypoint; status.canary mirrors the router's unit.
        assert isvc.canary(ROUTER)["canaryRevisionHash"] == "r2"
        assert isvc.canary(ENGINE)["canaryRevisionHash"] == "e2"
        assert "canary" not in isvc.cluster.component(DECODER)
        assert isvc.cluster.status["canary"]["canaryRevisionHash"] == "r2"
        await isvc.annotate(contract.ROLLOUT_PROMOTE, "e2")  # promotes only the engine+decoder unit
        await isvc.until(lambda: isvc.weights(ENGINE) == {"e2": 100} and isvc.weights(DECODER) == {"d2": 100},
                         what="engine unit completes")
        assert isvc.weights(ROUTER) == {"r1": 70, "r2": 30} and isvc.canary(ROUTER)["currentStep"] == 0


async def test_policy_ref_resolution(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 40, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    rollout = {"groups": [{"components": ["engine"], "policyRef": {"name": "safe", "progression": "canary"}}]}
    async with served(env, rollout=rollout) as isvc:
        await roll_to(isvc, "b")
        # Unresolvable ref: fail-closed park, never the default blue-green.
        await isvc.until(lambda: isvc.cluster.conditions.get("RolloutReady", {}).get("status") == "False",
                         what="park")
        assert isvc.cluster.conditions["RolloutReady"]["reason"] == "PolicyNotFound"
        assert isvc.weights() == {"a": 100} and isvc.cluster.replicas(ENGINE, "b") is None
        # A policy of the wrong kind: ProgressionMismatch.
        isvc.cluster.policies["safe"] = {"apiVersion": "ome.io/v1beta1", "kind": "RolloutPolicy",
                                         "metadata": {"name": "safe", "generation": 3},
                                         "spec": {"rollingUpdate": {"maxSurge": 1}}}
        await isvc.until(lambda: isvc.cluster.conditions["RolloutReady"]["reason"] == "ProgressionMismatch",
                         step=30, what="mismatch")
        # The right policy: the run opens from it and records its provenance.
        isvc.cluster.policies["safe"]["spec"] = {"canary": {"steps": steps}}
        await isvc.until(lambda: isvc.weights() == {"a": 60, "b": 40}, step=30, what="policy canary")
        active = isvc.cluster.status["rollout"]["activeRun"]
        pinned = active["plan"]["groups"][0]
        assert pinned["source"] == "Policy" and pinned["policyRef"]["name"] == "safe"
        assert pinned["policyGeneration"] == 3 and pinned["portableDigest"].startswith("rp1:")
        assert active["targetRevisions"] == [{"component": "engine", "revision": "b", "stableRevision": "a"}]
        assert isvc.cluster.status["rollout"]["groups"][0]["observedDigest"] == pinned["portableDigest"]


async def test_inline_progression_outranks_policy_ref(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "100%", "traffic": 100}]
    group = canary_group(steps)
    group["groups"][0]["policyRef"] = {"name": "shadowed", "progression": "blueGreen"}
    async with served(env, rollout=group) as isvc:
        isvc.cluster.policies["shadowed"] = {"apiVersion": "ome.io/v1beta1", "kind": "RolloutPolicy",
                                             "metadata": {"name": "shadowed"}, "spec": {"blueGreen": {}}}
        await roll_to(isvc, "b")
        await isvc.until(lambda: isvc.phase() == "Stable", what="inline canary ran")
        view = isvc.cluster.status["rollout"]["groups"][0]
        assert view["source"] == "Inline" and view["shadowedPolicyRef"]["name"] == "shadowed"
        assert view["shadowedPolicyRef"]["wouldPinDigest"].startswith("rp1:")
        assert view["shadowedPolicyRef"]["wouldPinDigest"] != view["observedDigest"]


async def test_service_continues_as_new_and_keeps_state(env: WorkflowEnvironment) -> None:
    settings = RolloutSettings(history_budget=60)
    async with served(env, settings=settings) as isvc:
        first = (await isvc.handle.describe()).run_id
        for _ in range(20):
            if (await isvc.handle.describe()).run_id != first:
                break
            isvc.cluster.generation += 1
            await isvc.changed()
            await isvc.env.sleep(5)
        assert (await isvc.handle.describe()).run_id != first, "the entity workflow continued-as-new"
        state = await isvc.handle.query("state", result_type=dict)
        assert state["components"]["engine"]["stable"] == "a" and state["phase"] == "Ready"
        await roll_to(isvc, "b")
        await isvc.until(lambda: isvc.weights() == {"b": 100}, what="rolls after continue-as-new")
        await isvc.until(lambda: isvc.cluster.component(ENGINE).get("previousRolledoutRevision")
                         == "llama-engine-rev-a", what="previous recorded")


async def test_delete_ends_the_service_workflow(env: WorkflowEnvironment) -> None:
    async with served(env) as isvc:
        # Signals about another object of the same name (deleted, then created again: another uid)
        # are ignored: this one keeps being served and still follows its own spec.
        other = ObjectEvent(uid=str(uuid.uuid4()), generation=9, resource_version="9", deleting=True)
        await isvc.handle.signal(contract.Signal.DELETE, other)
        await isvc.handle.signal(contract.Signal.OBJECT_CHANGED, other)
        await roll_to(isvc, "b")
        await isvc.until(lambda: isvc.weights() == {"b": 100}, what="rolls on after another object's delete")
        assert (await isvc.handle.describe()).status == WorkflowExecutionStatus.RUNNING
        await isvc.handle.signal(contract.Signal.DELETE, ObjectEvent(uid=isvc.cluster.uid, generation=2,
                                                                      resource_version="9", deleting=True))
        await isvc.handle.result()


async def test_rollback_holds_until_a_different_target(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 20, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: isvc.weights() == {"a": 80, "b": 20}, what="step 0")
        state = await isvc.rollout("0").query("state", result_type=dict)
        assert state["gate"] == "manual" and state["phase"] == "Paused" and state["canary"]["currentStep"] == 0
        await isvc.annotate(contract.ROLLOUT_ROLLBACK, "true")
        await isvc.until(lambda: isvc.phase() == "RolledBack", what="rolled back")
        isvc.cluster.generation += 1
        await isvc.changed()
        await isvc.env.sleep(600)
        assert isvc.cluster.replicas(ENGINE, "b") is None  # held: the rejected target is not retried
        await roll_to(isvc, "c")
        await isvc.until(lambda: isvc.weights() == {"a": 80, "c": 20}, what="a different target re-arms")
        assert isvc.canary()["canaryRevisionHash"] == "c" and "rolledBackRevisionHash" not in isvc.canary()


async def test_service_ends_when_the_object_is_gone(env: WorkflowEnvironment) -> None:
    async with served(env) as isvc:
        isvc.cluster.gone = True  # serving.observe answers None: the object no longer exists
        isvc.cluster.generation += 1
        await isvc.changed()
        await isvc.handle.result()


# Unsandboxed: the sandbox would re-import this whole test module, which pulls in non-workflow code.
@workflow.defn(name="PolicyNudgeRecorder", sandboxed=False)
class PolicyNudgeRecorder:
    """Stands at a RolloutPolicy workflow's id and counts the `refresh-now` nudges it receives."""

    def __init__(self) -> None:
        self.nudges = 0

    @workflow.signal(name="refresh-now")
    def refresh_now(self) -> None:
        self.nudges += 1

    @workflow.query(name="nudges")
    def count(self) -> int:
        return self.nudges

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


async def test_policy_references_are_pushed_to_the_policy(env: WorkflowEnvironment) -> None:
    policy_uid = "0d6c3c1e-policy"
    queue = f"recorder-{uuid.uuid4().hex[:6]}"
    rollout = {"groups": [{"components": ["engine"], "policyRef": {"name": "safe", "progression": "canary"}},
                          {"components": ["decoder"], "policyRef": {"name": "safe", "progression": "canary"}},
                          # A policy no workflow stands for (its kind not bridged): nudging it fails
                          # quietly and nothing else is disturbed.
                          {"components": ["router"], "policyRef": {"name": "unbridged", "progression": "canary"}}]}
    async with Worker(env.client, task_queue=queue, workflows=[PolicyNudgeRecorder]):
        recorder = await env.client.start_workflow(
            "PolicyNudgeRecorder", id=contract.rollout_policy_workflow_id(NAMESPACE, "safe", policy_uid),
            task_queue=queue)

        async def nudges() -> int:
            return int(await recorder.query("nudges", result_type=int))

        async with served(env, desired={ENGINE: ("e1", 2), DECODER: ("d1", 2), ROUTER: ("r1", 1)},
                          rollout=rollout) as isvc:
            for name, uid in (("safe", policy_uid), ("unbridged", "no-workflow-uid")):
                isvc.cluster.policies[name] = {
                    "apiVersion": "ome.io/v1beta1", "kind": "RolloutPolicy",
                    "metadata": {"name": name, "uid": uid, "generation": 1},
                    "spec": {"canary": {"steps": [{"capacity": "100%", "traffic": 100}]}}}
            isvc.cluster.generation += 1
            await isvc.changed()  # the policy now exists: two groups reference it
            await _until_value(env, nudges, 1)
            isvc.cluster.generation += 1
            await isvc.changed()  # re-planned, but nothing about the references changed: no nudge
            await env.sleep(5)
            assert await nudges() == 1
            isvc.cluster.spec_rollout = {"groups": rollout["groups"][:1]}  # one group of "safe" left

            isvc.cluster.generation += 1
            await isvc.changed()
            await _until_value(env, nudges, 2)
            assert isvc.cluster.conditions["Ready"]["status"] == "True"
            await isvc.handle.signal(contract.Signal.DELETE, ObjectEvent(
                uid=isvc.cluster.uid, generation=isvc.cluster.generation, resource_version="9", deleting=True))
            await isvc.handle.result()
            await _until_value(env, nudges, 3)
        with contextlib.suppress(RPCError):  # already closed on a loaded server: nothing to end
            await recorder.terminate()


async def _until_value(env: WorkflowEnvironment, probe: Any, expected: int) -> None:
    """Skip test time a second at a time until `probe()` answers `expected` (bounded in real time:
    on a loaded machine the workflow may need more real time than a fixed count of skips gives)."""
    deadline = time.monotonic() + 60
    while (value := await probe()) != expected and time.monotonic() < deadline:
        await env.sleep(1)
    assert value == expected
