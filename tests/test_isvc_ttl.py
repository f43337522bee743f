"""spec.ttlSecondsAfterCreation (seed 004) on the InferenceService workflow, with the fake cluster on the
time-skipping test server: the service is deleted when the deadline passes, counted from creation on every
observation, so an edit moves or cancels it. (The activity's own rules: tests/test_serving_conformance.py;
with the worker and bridge as processes: tests/test_isvc_ttl_e2e.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from temporalio.testing import WorkflowEnvironment

from testkit.rollout_harness import Isvc, served, start_env

pytestmark = pytest.mark.timeskip


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    try:
        yield environment
    finally:
        await environment.shutdown()


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
