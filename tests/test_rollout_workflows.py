"""The canary step machine, end to end through the InferenceService workflow, on Temporal's
time-skipping test server with a fake cluster: every gate, every failure reason, every phase.

After each transition the HTTPRoute weights the fake saw and the CanaryStatus the workflow wrote
are checked against the step."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from servingops.api_models import contract
from servingops.api_models.contract import AnnotationEvent
from servingops.api_models.contract.rollout import PromoteRequest
from servingops.workflows.rollout.models import RolloutSettings
from testkit.rollout_harness import ENGINE, Isvc, analysis, canary_group, roll_to, rolled_out, served, start_env
from tests.support.histories import local_activity_types

pytestmark = pytest.mark.timeskip


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    # A test server per test: a workflow closed mid-timer can leave the time-skipping server's
    # clock locked, and one test's leftovers must not stall the next.
    environment = await start_env()
    async with environment:
        yield environment


def at_step(isvc: Isvc, step: int, traffic: int, canary: str = "b", stable: str = "a") -> bool:
    """The route and the recorded CanaryStatus agree with `step` programming `traffic`."""
    status = isvc.canary()
    expected = {stable: 100 - traffic, canary: traffic} if 0 < traffic < 100 else \
        ({canary: 100} if traffic == 100 else {stable: 100})
    return (status.get("currentStep") == step and status.get("observedTrafficWeight") == traffic
            and status.get("canaryRevisionHash") == canary and isvc.weights() == expected)


async def test_first_revision_served_at_full_weight(env: WorkflowEnvironment) -> None:
    async with served(env) as isvc:
        engine = isvc.cluster.component(ENGINE)
        assert isvc.weights() == {"a": 100}
        assert engine["latestRolledoutRevision"] == "llama-engine-rev-a"
        assert engine["latestReadyRevision"] == "llama-engine-rev-a"
        assert engine["url"] == isvc.cluster.status["url"]
        assert engine["traffic"] == [{"revisionName": "llama-engine-rev-a", "percent": 100, "tag": "latest",
                                      "latestRevision": True}]
        assert isvc.cluster.replicas(ENGINE, "a") == 4
        assert "canary" not in isvc.cluster.status  # absent until a canary first arms


async def test_twenty_step_canary_with_hour_pauses_finishes_in_seconds(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": f"{5 * (i + 1)}%", "traffic": 5 * (i + 1), "pause": {"duration": "1h"}} for i in range(20)]
    settings = RolloutSettings(history_budget=400)
    started = time.monotonic()
    async with served(env, rollout=canary_group(steps, scaleDownDelaySeconds=120), settings=settings) as isvc:
        await roll_to(isvc, "b")
        first_run = None
        for index in range(20):
            traffic = 5 * (index + 1)
            await isvc.until(lambda i=index, t=traffic: at_step(isvc, i, t), step=300, what=f"step {index}")
            assert isvc.phase() == "Canarying"
            if first_run is None:
                first_run = (await isvc.rollout("0").describe()).run_id
            # Capacity per step: ceil(5%·k of 4 replicas), the stable keeps its full set.
            assert isvc.cluster.replicas(ENGINE, "b") == -(-4 * traffic // 100)
            assert isvc.cluster.replicas(ENGINE, "a") == 4
        await isvc.until(lambda: isvc.phase() == "Stable", step=60, what="completion")
        status = isvc.canary()
        assert status["currentStep"] == 20 and status["observedTrafficWeight"] == 100
        assert "stableRevisionHash" not in status
        assert isvc.weights() == {"b": 100}
        flipped = next(t for t, _, w in isvc.cluster.route_log if [x.revision for x in w] == ["b"])
        (component, revision, deleted_at), = isvc.cluster.deleted
        assert (component, revision) == (ENGINE, "a") and deleted_at - flipped >= 120
        await rolled_out(isvc, "b")
        engine = isvc.cluster.component(ENGINE)
        assert engine["latestRolledoutRevision"] == "llama-engine-rev-b"
        assert engine["previousRolledoutRevision"] == "llama-engine-rev-a"
        assert engine["latestReadyRevision"] == "llama-engine-rev-b"
        assert isvc.cluster.status["canary"] == status  # status.canary mirrors the entrypoint unit
        assert isvc.cluster.status["rollout"]["lastRun"]["outcome"] == "Completed"
        # The week-long-bake guard: the run continued-as-new and kept its state.
        assert (await isvc.rollout("0").describe()).run_id != first_run
    assert time.monotonic() - started < 120


async def test_analysis_pass_advances_and_failures_roll_back(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "25%", "traffic": 10, "pause": {"duration": "3m"}, "analysis": analysis(failure_limit=2)},
             {"capacity": "50%", "traffic": 50, "analysis": analysis(failure_limit=2, initial_delay="2m")},
             {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps, scaleDownDelaySeconds=30)) as isvc:
        prometheus = isvc.cluster.prometheus
        # step 0: a failure below the limit, then passes; advances only after the 3m bake.
        prometheus.script = ["fail", "pass", "pass", "pass"]
        prometheus.default = "fail"
        await roll_to(isvc, "b")
        await isvc.until(lambda: at_step(isvc, 0, 10) and isvc.canary().get("analysisFailedChecks") == 1,
                         step=10, what="first failing sample counted")
        assert isvc.canary()["metricResults"][0]["passed"] is False
        await isvc.until(lambda: at_step(isvc, 1, 50), step=10, what="advance after bake")
        assert isvc.canary()["analysisFailedChecks"] == 0  # reset on advance
        advanced = isvc.canary()["stepEnteredTime"]
        query = prometheus.samples[0].metrics[0].query
        assert 'service="llama-engine-rev-b"' in query and 'ns="team-a"' in query
        assert len(prometheus.samples) >= 4  # bake: passing samples before 3m did not advance
        # step 1: two failures reach failureLimit=2 → automatic rollback.
        await isvc.until(lambda: isvc.canary().get("rolledBackRevisionHash") == "b", step=10, what="auto rollback")
        assert isvc.weights() == {"a": 100} and isvc.canary()["observedTrafficWeight"] == 0
        assert isvc.canary()["currentStep"] == 1 and isvc.canary()["stepEnteredTime"] == advanced
        await isvc.until(lambda: isvc.phase() == "RolledBack", step=10, what="drained")
        assert isvc.cluster.replicas(ENGINE, "b") is None
        assert isvc.cluster.status["rollout"]["lastRun"]["outcome"] == "RolledBack"
        # The rejected target is not retried by a later reconcile of the same spec.
        isvc.cluster.generation += 1
        await isvc.changed()
        await isvc.env.sleep(600)
        assert isvc.weights() == {"a": 100} and isvc.cluster.replicas(ENGINE, "b") is None
        assert isvc.phase() == "RolledBack"


@pytest.mark.parametrize("mode", ["Hold", "Rollback", "RollbackOnStall"])
async def test_inconclusive_samples(env: WorkflowEnvironment, mode: str) -> None:
    steps = [{"capacity": "50%", "traffic": 30, "pause": {"duration": "2h"},
              "analysis": analysis(failure_limit=3, on_inconclusive=mode)},
             {"capacity": "100%", "traffic": 100}]
    settings = RolloutSettings()
    async with served(env, rollout=canary_group(steps, scaleDownDelaySeconds=10), settings=settings) as isvc:
        prometheus = isvc.cluster.prometheus
        prometheus.script = ["pass"]
        prometheus.default = "down"
        await roll_to(isvc, "b")
        await isvc.until(lambda: bool(isvc.canary().get("lastConclusiveEvaluationTime")), step=10, what="sample")
        conclusive = isvc.canary()["lastConclusiveEvaluationTime"]
        if mode == "Rollback":
            # Fail-safe: the first inconclusive sample rolls back, no stall wait.
            await isvc.until(lambda: isvc.canary().get("rolledBackRevisionHash") == "b", step=10, what="rollback")
            assert len(prometheus.samples) == 2
            return
        await isvc.until(lambda: len(prometheus.samples) >= 5, step=30, what="inconclusive samples")
        assert at_step(isvc, 0, 30) and not isvc.canary().get("failed")  # within the stall: keep riding
        results = isvc.canary()["metricResults"]
        assert results[0]["passed"] is False and results[0]["message"] == "connection refused"
        assert isvc.canary()["lastConclusiveEvaluationTime"] == conclusive
        if mode == "Hold":
            await isvc.until(lambda: bool(isvc.canary().get("failed")), step=30, what="stall park")
            assert isvc.canary()["failed"]["reason"] == "AnalysisStalled"
            assert isvc.phase() == "Failed" and at_step(isvc, 0, 30)  # traffic held at the step
            # A rollback request clears an analysis park.
            await isvc.annotate(contract.ROLLOUT_ROLLBACK, "true")
            await isvc.until(lambda: isvc.canary().get("rolledBackRevisionHash") == "b", step=5, what="rollback")
            assert not isvc.canary().get("failed") and isvc.weights() == {"a": 100}
        else:
            await isvc.until(lambda: isvc.canary().get("rolledBackRevisionHash") == "b", step=30, what="stall rb")
            assert not isvc.canary().get("failed") and isvc.weights() == {"a": 100}


async def test_manual_step_waits_for_the_right_promote(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "25%", "traffic": 10, "pause": {}}, {"capacity": "50%", "traffic": 40, "pause": {}},
             {"capacity": "75%", "traffic": 70, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: at_step(isvc, 0, 10) and isvc.phase() == "Paused", what="manual hold")
        await isvc.annotate(contract.ROLLOUT_PROMOTE, "not-the-hash")
        await isvc.env.sleep(3600)
        assert at_step(isvc, 0, 10), "a promote with the wrong hash is ignored"
        isvc.cluster.metadata_writes_fail = True  # the consumed annotation cannot be removed: it lingers
        await isvc.annotate(contract.ROLLOUT_PROMOTE, "b")
        await isvc.until(lambda: at_step(isvc, 1, 40), what="one promote, one step")
        assert isvc.canary()["promotedThrough"] == "b"
        await isvc.annotate(contract.ROLLOUT_PROMOTE, "b")  # a duplicate of the same promote
        await isvc.env.sleep(600)
        assert at_step(isvc, 1, 40), "a lingering / duplicate promote is inert"
        isvc.cluster.metadata_writes_fail = False  # the workflow's retry removes it (tests/test_rollout_annotations.py)
        await isvc.until(lambda: "promotedThrough" not in isvc.canary(), what="removal re-arms promotion")
        assert contract.ROLLOUT_PROMOTE not in isvc.cluster.annotations
        await isvc.annotate(contract.ROLLOUT_PROMOTE, "b")
        await isvc.until(lambda: at_step(isvc, 2, 70), what="second promote")
        # The SDK path: an Update, validated against the canary hash.
        handle = isvc.rollout("0")
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("promote", PromoteRequest(revision="a"))
        assert at_step(isvc, 2, 70)
        answer: dict[str, Any] = await handle.execute_update("promote", PromoteRequest(revision="b"), result_type=dict)
        assert answer["currentStep"] == 3 and answer["promotedThrough"] == "b"
        await isvc.until(lambda: isvc.phase() == "Stable", what="complete")
        assert isvc.weights() == {"b": 100}


async def test_an_annotation_change_reaches_the_run_twice_and_acts_once(env: WorkflowEnvironment) -> None:
    """The bridge sends a rollout annotation's change straight to the run (an update) and the service
    forwards it too (a signal): the run acts on it once, and a copy that arrives after a newer change
    (the promote's removal) is dropped by its resourceVersion instead of promoting a second step; as an
    update it is rejected."""
    steps = [{"capacity": "25%", "traffic": 10, "pause": {}}, {"capacity": "50%", "traffic": 40, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: at_step(isvc, 0, 10) and isvc.phase() == "Paused", what="manual hold")
        promote = AnnotationEvent(uid=isvc.cluster.uid, generation=isvc.cluster.generation,
                                  resource_version=str(isvc.cluster.annotation_writes + 1),
                                  name=contract.ROLLOUT_PROMOTE, value="b")
        await isvc.rollout("0").execute_update(contract.Update.RUN_ANNOTATION, promote)  # the bridge's shortcut
        await isvc.until(lambda: at_step(isvc, 1, 40), what="promoted by the shortcut")
        await isvc.annotate(contract.ROLLOUT_PROMOTE, "b")  # the same change through the service
        assert isvc.cluster.annotation_writes == int(promote.resource_version)
        await isvc.until(lambda: "promotedThrough" not in isvc.canary() and
                         contract.ROLLOUT_PROMOTE not in isvc.cluster.annotations, what="consumed, removed, re-armed")
        assert at_step(isvc, 1, 40), "the forwarded copy of the change is not a second promote"
        await isvc.rollout("0").signal(contract.Signal.RUN_ANNOTATION, promote)  # late, after the removal
        with pytest.raises(WorkflowUpdateFailedError):
            await isvc.rollout("0").execute_update(contract.Update.RUN_ANNOTATION, promote)
        await isvc.env.sleep(600)
        assert at_step(isvc, 1, 40), "a copy older than the removal does not promote again"
        await isvc.annotate(contract.ROLLOUT_PROMOTE, "b")
        await isvc.until(lambda: isvc.phase() == "Stable", what="a new promote completes the canary")


async def test_a_promote_between_steps_of_equal_capacity_writes_its_weights_with_the_scale(
        env: WorkflowEnvironment) -> None:
    """The canary revision already carries the next step's capacity: the promote's scale and weights
    are one local activity (patch scale-then-route), no set_traffic after it. A first step whose
    capacity is not Ready at its scale routes after the capacity polls, as before."""
    steps = [{"capacity": "100%", "traffic": 10, "pause": {}}, {"capacity": "100%", "traffic": 50, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: at_step(isvc, 0, 10) and isvc.phase() == "Paused", what="manual hold")
        first = await local_activity_types(isvc.rollout("0"))
        assert first == ["serving.scale_then_route", "serving.set_traffic"], \
            "a step whose capacity is not Ready yet routes after its polls"
        await isvc.annotate(contract.ROLLOUT_PROMOTE, "b")
        await isvc.until(lambda: at_step(isvc, 1, 50), what="promoted")
        assert (await local_activity_types(isvc.rollout("0")))[len(first):] == ["serving.scale_then_route"]
        await isvc.annotate(contract.ROLLOUT_PROMOTE, None)
        await isvc.until(lambda: "promotedThrough" not in isvc.canary(), what="re-armed")
        await isvc.annotate(contract.ROLLOUT_PROMOTE, "b")
        await isvc.until(lambda: isvc.phase() == "Stable", what="complete")
        assert isvc.weights() == {"b": 100}


async def test_promote_force_skips_a_timed_gate(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 20, "pause": {"duration": "24h"}}, {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: at_step(isvc, 0, 20), what="timed step")
        await isvc.annotate(contract.ROLLOUT_PROMOTE_FORCE, "b")
        await isvc.until(lambda: at_step(isvc, 1, 100) or isvc.phase() == "Stable", step=1, what="forced")
        await isvc.until(lambda: isvc.phase() == "Stable", what="complete")


async def test_rollback_annotation_and_resume_at_step_zero(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "25%", "traffic": 10}, {"capacity": "50%", "traffic": 50, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps, scaleDownDelaySeconds=45)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: at_step(isvc, 1, 50), what="manual step 1")
        await isvc.annotate(contract.ROLLOUT_ROLLBACK, "yes")  # only "true" means rollback
        await isvc.env.sleep(300)
        assert at_step(isvc, 1, 50)
        await isvc.annotate(contract.ROLLOUT_ROLLBACK, "true")
        await isvc.until(lambda: isvc.phase() == "RollingBack", step=1, what="rolling back")
        assert isvc.weights() == {"a": 100} and isvc.canary()["rolledBackRevisionHash"] == "b"
        traffic_back = isvc.cluster.route_log[-1][0]
        await isvc.until(lambda: isvc.phase() == "RolledBack", what="drained")
        ((_, revision, deleted_at),) = isvc.cluster.deleted
        assert revision == "b" and deleted_at - traffic_back >= 45
        await isvc.annotate(contract.ROLLOUT_ROLLBACK, None)  # clearing it does not retry the target
        await isvc.env.sleep(600)
        assert isvc.cluster.replicas(ENGINE, "b") is None
        # ome.io/rollout-resume=<hash> re-enters the rejected target at step 0.
        await isvc.annotate(contract.ROLLOUT_RESUME, "b")
        await isvc.until(lambda: at_step(isvc, 1, 50) and not isvc.canary().get("rolledBackRevisionHash"),
                         what="resumed from step 0")
        assert any(w == [("a", 90), ("b", 10)] for w in
                   [[(x.revision, x.weight) for x in ws] for t, _, ws in isvc.cluster.route_log if t > deleted_at])


async def test_sdk_rollback_update(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 25, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: at_step(isvc, 0, 25), what="step 0")
        answer = await isvc.rollout("0").execute_update("rollback", result_type=dict)
        assert answer["rolledBackRevisionHash"] == "b" and answer["observedTrafficWeight"] == 0
        assert isvc.weights() == {"a": 100}
        await isvc.until(lambda: isvc.phase() == "RolledBack", what="drained")


async def test_ready_timeout_parks_with_stable_serving(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 30}, {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps, readyTimeout="20m")) as isvc:
        isvc.cluster.delay_for[(ENGINE, "b")] = float("inf")
        await isvc.annotate(contract.ROLLOUT_READY_TIMEOUT, "5m")  # the annotation overrides the group
        await roll_to(isvc, "b")
        await isvc.until(lambda: bool(isvc.canary().get("capacityWaitSince")), what="capacity wait")
        assert isvc.phase() == "Pending"
        await isvc.until(lambda: bool(isvc.canary().get("failed")), step=30, what="park")
        status = isvc.canary()
        assert status["failed"]["reason"] == "CapacityTimeout" and isvc.phase() == "Failed"
        assert isvc.weights() == {"a": 100} and status["observedTrafficWeight"] == 0 and status["currentStep"] == 0
        assert isvc.cluster.conditions["Ready"]["status"] == "True"  # stable keeps serving
        waited = status["capacityWaitSince"]
        assert waited < status["failed"]["time"]


async def test_stable_revision_missing_parks_and_refuses_rollback(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 30, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: at_step(isvc, 0, 30), what="step 0")
        del isvc.cluster.revisions[ENGINE]["a"]  # someone deleted the stable Deployment
        await isvc.annotate(contract.ROLLOUT_ROLLBACK, "true")
        await isvc.until(lambda: bool(isvc.canary().get("failed")), step=1, what="park")
        assert isvc.canary()["failed"]["reason"] == "StableRevisionMissing" and isvc.phase() == "Failed"
        assert isvc.weights() == {"a": 70, "b": 30}  # nothing to revert to: the canary keeps serving
        with pytest.raises(WorkflowUpdateFailedError):
            await isvc.rollout("0").execute_update("rollback", result_type=dict)


async def test_new_target_mid_canary_rearms_and_keeps_stable(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "25%", "traffic": 10}, {"capacity": "50%", "traffic": 40, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps, scaleDownDelaySeconds=20)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: at_step(isvc, 1, 40), what="b at step 1")
        target = isvc.canary()["targetID"]
        await roll_to(isvc, "c")
        await isvc.until(lambda: at_step(isvc, 1, 40, canary="c"), what="c re-armed")
        status = isvc.canary()
        assert status["stableRevisionHash"] == "a" and status["targetID"] != target
        assert (ENGINE, "b") in [(c, r) for c, r, _ in isvc.cluster.deleted]
        # The intermediate never regained traffic after the retarget, and c started from step 0.
        after = [ws for t, _, ws in isvc.cluster.route_log if any(w.revision == "c" for w in ws)]
        assert [(w.revision, w.weight) for w in after[0]] == [("a", 90), ("c", 10)]
        assert isvc.cluster.status["rollout"]["lastRun"]["outcome"] == "Superseded"
        await isvc.annotate(contract.ROLLOUT_PROMOTE, "c")
        await isvc.until(lambda: isvc.phase() == "Stable", what="c complete")
        await rolled_out(isvc, "c")
        engine = isvc.cluster.component(ENGINE)
        assert engine["latestRolledoutRevision"] == "llama-engine-rev-c"
        assert engine["previousRolledoutRevision"] == "llama-engine-rev-a"


async def test_repin_that_raises_exposure_holds_until_promote(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "25%", "traffic": 10}, {"capacity": "50%", "traffic": 20, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: at_step(isvc, 1, 20), what="step 1")
        raised = [steps[0], {"capacity": "75%", "traffic": 60, "pause": {}}, steps[2]]
        isvc.cluster.set_rollout(canary_group(raised))
        await isvc.changed()
        await isvc.until(lambda: isvc.canary().get("preStepHold") is True, what="hold")
        await isvc.env.sleep(600)
        assert at_step(isvc, 1, 20)  # traffic holds; capacity converges to the clamped step
        assert isvc.cluster.replicas(ENGINE, "b") == 3
        await isvc.annotate(contract.ROLLOUT_PROMOTE, "b")
        await isvc.until(lambda: at_step(isvc, 1, 60) and isvc.canary().get("preStepHold") is False, what="raise")


async def test_paused_annotation_holds_a_timed_step(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 20, "pause": {"duration": "10m"}}, {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        await isvc.annotate(contract.ROLLOUT_PAUSED, "true")
        await roll_to(isvc, "b")
        await isvc.until(lambda: at_step(isvc, 0, 20) and isvc.phase() == "Paused", what="paused")
        await isvc.env.sleep(3600)
        assert at_step(isvc, 0, 20) and isvc.phase() == "Paused"
        await isvc.annotate(contract.ROLLOUT_PAUSED, None)
        await isvc.until(lambda: isvc.phase() == "Stable", what="unpaused")


# -- spec.ttlSecondsAfterCreation (the activity's rules: test_serving_conformance.py; end to end: test_rollout_e2e.py)


async def edit_ttl(isvc: Isvc, seconds: int | None) -> None:
    """A spec edit (a new generation) and the bridge's signal for it."""
    isvc.cluster.ttl_seconds = seconds
    isvc.cluster.generation += 1
    await isvc.changed()


async def test_the_service_is_deleted_when_its_ttl_passes_and_an_edit_moves_the_deadline(
        env: WorkflowEnvironment) -> None:
    async with served(env) as isvc:
        created = isvc.cluster.created_at
        assert created is not None
        await edit_ttl(isvc, 3600)
        await env.sleep(1800)
        assert not isvc.cluster.expired
        await edit_ttl(isvc, 7200)  # moved: two hours from creation, not from the edit
        await isvc.until(lambda: bool(isvc.cluster.expired), step=600, what="deleted by its ttl")
        lateness = isvc.cluster.expired[0] - (created + timedelta(seconds=7200))
        assert timedelta(0) <= lateness < timedelta(seconds=10), lateness
        await isvc.handle.result()  # the observation finds it gone: the workflow ends


async def test_removing_the_ttl_cancels_the_deletion(env: WorkflowEnvironment) -> None:
    async with served(env) as isvc:
        await edit_ttl(isvc, 600)
        await env.sleep(300)
        await edit_ttl(isvc, None)
        await env.sleep(3600)
        assert not isvc.cluster.expired and not isvc.cluster.gone
