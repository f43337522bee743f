"""An inline InferenceService (no model, no runtime) that selects an AcceleratorClass re-renders when the class
is edited, on the time-skipping server (testkit/rollout_fakes.py). The class edit is no event of the service:
the fake's spec starts rendering another revision without a new generation and without a signal, as a class's
new nodeSelector or resources would; the service's workflow finds it at its by-reference timer
(pacing.RESYNC_BY_REFERENCE, 30 s) because serving.observe says the spec selects accelerators, and rolls to
it. A service that selects none keeps no such timer (it is looked at only at the ingress block's resync,
pacing.RESYNC_INGRESS, about 5 minutes, when an ingress is configured)."""

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
from servingops.workflows.inference_service.pacing import RESYNC_BY_REFERENCE
from servingops.workflows.inference_service.workflow import ServiceInput
from servingops.workflows.rollout.models import RolloutSettings
from testkit.rollout_fakes import NAME, NAMESPACE, FakeCluster, until
from testkit.rollout_harness import WORKFLOWS, start_env

pytestmark = pytest.mark.timeskip

ENGINE = ComponentType.ENGINE


@contextlib.asynccontextmanager
async def service(selects: bool) -> AsyncIterator[tuple[FakeCluster, WorkflowEnvironment]]:
    env = await start_env()
    cluster = FakeCluster(env)
    cluster.selects_accelerators = selects
    cluster.set_desired(ENGINE, "a", 1)
    queue = f"acr-{uuid.uuid4().hex[:8]}"
    try:
        async with Worker(env.client, task_queue=queue, workflows=list(WORKFLOWS), activities=cluster.activities(),
                          workflow_runner=workflow_runner()):
            handle: Any = await env.client.start_workflow(
                "InferenceServiceWorkflow", ServiceInput(ref=cluster.ref, settings=RolloutSettings()),
                id=contract.inference_service_workflow_id(NAMESPACE, NAME, cluster.uid), task_queue=queue)
            try:
                await until(env, lambda: cluster.conditions.get("Ready", {}).get("status") == "True",
                            what="first Ready")
                yield cluster, env
            finally:
                with contextlib.suppress(RPCError):
                    await handle.terminate()
    finally:
        await env.shutdown()


def _class_edited(cluster: FakeCluster) -> None:
    """The class's edit: the same spec now renders revision b (no new generation, no signal)."""
    cluster.desired[ENGINE] = ("b", cluster.desired[ENGINE][1])


@pytest.mark.asyncio
async def test_a_class_edit_rolls_an_inline_service_that_selects_a_class_at_its_timer() -> None:
    async with service(selects=True) as (cluster, env):
        _class_edited(cluster)
        await env.sleep(RESYNC_BY_REFERENCE + 1)
        assert "b" in cluster.revisions[ENGINE], "the timer's observe found revision b and started it"
        await until(env, lambda: cluster.weights(ENGINE) == {"b": 100}, what="revision b serves all traffic")


@pytest.mark.asyncio
async def test_an_inline_service_selecting_no_class_keeps_no_timer() -> None:
    async with service(selects=False) as (cluster, env):
        _class_edited(cluster)
        # Below the ingress block's resync (RESYNC_INGRESS, 293 s), the only other look without news.
        await env.sleep(RESYNC_BY_REFERENCE * 5)
        assert "b" not in cluster.revisions[ENGINE], "nothing woke the service: it still renders a"
