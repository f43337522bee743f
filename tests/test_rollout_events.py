"""What an operator reads on the InferenceService: the Events that travel with the rollout status
writes, and a spec the serving activities refuse (permanent error) surfacing as a condition and
a Warning Event instead of an endless retry. Time-skipping, with the fake cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.testing import WorkflowEnvironment

from servingops.activities.kubernetes import EventNote
from servingops.api_models import contract
from servingops.api_models.errors import ErrorType
from servingops.workflows.rollout.status import EventReason
from testkit.rollout_harness import ENGINE, Isvc, canary_group, roll_to, rolled_out, served, start_env

pytestmark = pytest.mark.timeskip

UNSERVABLE = ("spec.engine has no runner and no containers, and rendering pods from spec.model "
              "(ClusterBaseModel qwen) and spec.runtime (ClusterServingRuntime srt) by reference is not "
              "supported yet")


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


def notes(isvc: Isvc, reason: str) -> list[EventNote]:
    return [e for e in isvc.cluster.events if e.reason == reason]


def condition(isvc: Isvc, kind: str) -> dict[str, object]:
    return isvc.cluster.conditions.get(kind, {})


async def test_refused_spec_is_reported_once_and_waits_for_a_new_generation(env: WorkflowEnvironment) -> None:
    async with served(env, unservable={ENGINE: UNSERVABLE}) as isvc:
        await isvc.until(lambda: condition(isvc, "Ready").get("reason") == ErrorType.INVALID_SPEC,
                         what="Ready False / InvalidSpec")
        ready = condition(isvc, "Ready")
        assert ready["status"] == "False" and ready["message"] == UNSERVABLE
        (warning,) = notes(isvc, ErrorType.INVALID_SPEC)
        assert warning.type == "Warning" and UNSERVABLE in warning.message
        # No retry loop: an hour later the spec was tried once, and said once.
        await env.sleep(3600)
        assert isvc.cluster.refusals == [(ENGINE, "a")]
        assert len(notes(isvc, ErrorType.INVALID_SPEC)) == 1
        assert isvc.weights() == {}
        # The bridge resending the same generation changes nothing.
        await isvc.changed()
        await env.sleep(60)
        assert isvc.cluster.refusals == [(ENGINE, "a")]
        # A new generation that can be served is served.
        isvc.cluster.unservable.clear()
        await roll_to(isvc, "b")
        await isvc.until(lambda: condition(isvc, "Ready").get("status") == "True", what="served after the fix")
        assert isvc.weights() == {"b": 100}
        assert condition(isvc, "Ready")["reason"] == "ComponentsReady"


async def test_refused_new_revision_parks_the_group_while_stable_serves(env: WorkflowEnvironment) -> None:
    async with served(env) as isvc:
        isvc.cluster.unservable[ENGINE] = UNSERVABLE
        await roll_to(isvc, "b")
        await isvc.until(lambda: condition(isvc, "RolloutReady").get("reason") == ErrorType.INVALID_SPEC,
                         what="RolloutReady False / InvalidSpec")
        assert UNSERVABLE in str(condition(isvc, "RolloutReady")["message"])
        assert condition(isvc, "Ready")["status"] == "True" and isvc.weights() == {"a": 100}
        (warning,) = notes(isvc, ErrorType.INVALID_SPEC)
        assert warning.type == "Warning" and UNSERVABLE in warning.message
        await env.sleep(600)
        assert isvc.cluster.refusals == [(ENGINE, "b")]


async def test_canary_steps_traffic_and_completion_are_events(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 20, "pause": {"duration": "1m"}},
             {"capacity": "100%", "traffic": 60, "pause": {"duration": "1m"}}]
    async with served(env, rollout=canary_group(steps, scaleDownDelaySeconds=0)) as isvc:
        await roll_to(isvc, "b")
        await rolled_out(isvc, "b")
        assert [e.message for e in notes(isvc, EventReason.STEP_PROMOTED)] == [
            "canary b: step 0 promoted; on to step 1 of 2", "canary b: step 1 promoted; on to completion"]
        assert [e.message for e in notes(isvc, EventReason.TRAFFIC_SHIFTED)] == [
            "engine traffic: a 80% / b 20% (was a 100%)",
            "engine traffic: a 40% / b 60% (was a 80% / b 20%)",
            "engine traffic: b 100% (was a 40% / b 60%)"]
        (completed,) = notes(isvc, EventReason.COMPLETED)
        assert completed.message == "group 0: all traffic on engine b"
        assert all(e.type == "Normal" for e in isvc.cluster.events)


async def test_rollback_is_an_event(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 25, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps, scaleDownDelaySeconds=0)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: isvc.weights() == {"a": 75, "b": 25}, what="step 0")
        await isvc.annotate(contract.ROLLOUT_ROLLBACK, "true")
        await isvc.until(lambda: bool(notes(isvc, EventReason.ROLLED_BACK)), what="RolledBack event")
        (rolled_back,) = notes(isvc, EventReason.ROLLED_BACK)
        assert rolled_back.type == "Normal"
        assert rolled_back.message == "group 0: rolled back from engine b; all traffic on engine a"
        assert notes(isvc, EventReason.TRAFFIC_SHIFTED)[-1].message == "engine traffic: a 100% (was a 75% / b 25%)"
        assert not notes(isvc, EventReason.STEP_PROMOTED) and not notes(isvc, EventReason.COMPLETED)


async def test_a_parked_group_says_why_in_a_warning_event(env: WorkflowEnvironment) -> None:
    rollout = {"groups": [{"components": ["engine"], "policyRef": {"name": "safe", "progression": "canary"}}]}
    async with served(env, rollout=rollout) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: condition(isvc, "RolloutReady").get("reason") == "PolicyNotFound", what="park")
        (warning,) = notes(isvc, "PolicyNotFound")
        assert warning.type == "Warning" and warning.message.startswith("group ")
        # Still parked for the same reason after several re-resolves: said once, not once a minute.
        await env.sleep(600)
        assert len(notes(isvc, "PolicyNotFound")) == 1
        # Parked again for another reason: a new Warning with that reason.
        isvc.cluster.policies["safe"] = {"apiVersion": "ome.io/v1beta1", "kind": "RolloutPolicy",
                                         "metadata": {"name": "safe", "generation": 3},
                                         "spec": {"rollingUpdate": {"maxSurge": 1}}}
        await isvc.until(lambda: condition(isvc, "RolloutReady").get("reason") == "ProgressionMismatch",
                         step=30, what="mismatch")
        (mismatch,) = notes(isvc, "ProgressionMismatch")
        assert mismatch.type == "Warning"


async def test_a_stopped_canary_says_why_in_a_warning_event_once(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 30}, {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps, readyTimeout="5m")) as isvc:
        isvc.cluster.delay_for[(ENGINE, "b")] = float("inf")
        await roll_to(isvc, "b")
        await isvc.until(lambda: bool(isvc.canary().get("failed")), step=30, what="CapacityTimeout park")
        (warning,) = notes(isvc, "CapacityTimeout")
        assert warning.type == "Warning"
        assert warning.message.startswith("group 0: canary b: step 0 capacity not Ready within the ready timeout")
        # Still parked after a while (the run keeps reporting): said once.
        await env.sleep(3600)
        assert len(notes(isvc, "CapacityTimeout")) == 1
