"""Consumed rollout annotations are removed (seed 004), on the time-skipping server with the fake
cluster: a promote once its step advance is on status, a rollback once a run refused it for a
missing stable revision; only while the annotation still holds the consumed value, best effort
and retried. The removal reaches the workflow back as the bridge would send it (the harness plays
the bridge), which re-arms promotion for the next step."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from servingops.api_models import contract
from testkit.rollout_harness import ENGINE, Isvc, canary_group, roll_to, served, start_env

pytestmark = pytest.mark.timeskip

PROMOTE, ROLLBACK = contract.ROLLOUT_PROMOTE, contract.ROLLOUT_ROLLBACK
MANUAL = [{"capacity": "25%", "traffic": 10, "pause": {}}, {"capacity": "50%", "traffic": 40, "pause": {}},
          {"capacity": "75%", "traffic": 70, "pause": {}}, {"capacity": "100%", "traffic": 100}]


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


def step(isvc: Isvc) -> Any:
    return isvc.canary().get("currentStep")


def removed(isvc: Isvc) -> list[tuple[str, str]]:
    return [(name, value) for _, name, value in isvc.cluster.removed_annotations]


def watch_removals(isvc: Isvc) -> list[dict[str, Any]]:
    """The CanaryStatus on the InferenceService at the moment each removal happened."""
    seen: list[dict[str, Any]] = []
    bridge = isvc.cluster.bridge
    assert bridge is not None

    async def recording(name: str, value: str | None) -> None:
        seen.append(isvc.canary())
        await bridge(name, value)

    isvc.cluster.bridge = recording
    return seen


async def test_a_consumed_promote_is_removed_once_on_status_and_rearms_promotion(env: WorkflowEnvironment) -> None:
    async with served(env, rollout=canary_group(MANUAL)) as isvc:
        at_removal = watch_removals(isvc)
        await roll_to(isvc, "b")
        await isvc.until(lambda: step(isvc) == 0 and isvc.phase() == "Paused", what="manual hold at step 0")
        await isvc.annotate(PROMOTE, "b")
        await isvc.until(lambda: removed(isvc) == [(PROMOTE, "b")], what="the consumed promote removed")
        # The advance and its durable record were on status before the annotation went.
        assert [(c["currentStep"], c.get("promotedThrough")) for c in at_removal] == [(1, "b")]
        await isvc.until(lambda: "promotedThrough" not in isvc.canary(), what="the removal seen: re-armed")
        await isvc.env.sleep(3600)
        assert step(isvc) == 1 and isvc.weights() == {"a": 60, "b": 40}, "a removal is not a promote"
        # The same value again is a new request: it promotes the next step, and goes in turn.
        await isvc.annotate(PROMOTE, "b")
        await isvc.until(lambda: removed(isvc) == [(PROMOTE, "b")] * 2, what="the second promote removed")
        assert step(isvc) == 2 and PROMOTE not in isvc.cluster.annotations


async def test_removal_is_best_effort_retried_and_spares_a_newer_value(env: WorkflowEnvironment) -> None:
    async with served(env, rollout=canary_group(MANUAL)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: step(isvc) == 0 and isvc.phase() == "Paused", what="manual hold")
        isvc.cluster.metadata_writes_fail = True
        await isvc.annotate(PROMOTE, "b")
        # The workflow is not held by a removal that fails: the rollout goes on to the next hold.
        await isvc.until(lambda: step(isvc) == 1 and isvc.phase() == "Paused" and isvc.cluster.failed_removals > 0,
                         what="a failed removal, and the canary paused at step 1")
        assert isvc.canary()["promotedThrough"] == "b" and isvc.cluster.annotations[PROMOTE] == "b"
        isvc.cluster.metadata_writes_fail = False
        await isvc.until(lambda: removed(isvc) == [(PROMOTE, "b")], step=10, what="retried on a later pass")

        # A value the canary did not consume (another revision's hash) is someone's own: it stays.
        await isvc.annotate(PROMOTE, "not-the-hash")
        await isvc.env.sleep(3600)
        assert isvc.cluster.annotations[PROMOTE] == "not-the-hash" and removed(isvc) == [(PROMOTE, "b")]
        assert step(isvc) == 1


async def test_a_refused_rollback_removes_its_annotation(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 30, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: step(isvc) == 0 and isvc.weights() == {"a": 70, "b": 30}, what="step 0")
        del isvc.cluster.revisions[ENGINE]["a"]  # someone deleted the stable Deployment
        await isvc.annotate(ROLLBACK, "true")
        await isvc.until(lambda: removed(isvc) == [(ROLLBACK, "true")], what="the refused rollback removed")
        assert isvc.canary()["failed"]["reason"] == "StableRevisionMissing" and isvc.phase() == "Failed"
        assert isvc.weights() == {"a": 70, "b": 30}
        # Asked again while parked: refused again, removed again.
        await isvc.annotate(ROLLBACK, "true")
        await isvc.until(lambda: removed(isvc) == [(ROLLBACK, "true")] * 2, what="refused again")


async def test_a_rollback_carried_out_keeps_its_annotation(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 30, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: step(isvc) == 0 and isvc.weights() == {"a": 70, "b": 30}, what="step 0")
        await isvc.annotate(ROLLBACK, "true")
        await isvc.until(lambda: isvc.phase() == "RolledBack", what="rolled back")
        await isvc.env.sleep(600)
        # Upstream OME's contract: the operator clears it (the rejected target stays held meanwhile).
        assert isvc.cluster.annotations[ROLLBACK] == "true" and removed(isvc) == []
