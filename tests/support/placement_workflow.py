"""Running a PlacementWorkflow on the time-skipping server against a fake fleet."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models import contract
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.placement_fakes import FakeFleet
from testkit.rollout_fakes import until


@asynccontextmanager
async def placing(env: WorkflowEnvironment, fleet: FakeFleet,
                  carried: dict[str, Any] | None = None) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    """The registry's workflows on a worker of their own, against `fleet`; the workflow started (with
    `carried`: as a continued run, from that state)."""
    queue = f"placement-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=fleet.activities(),
                      workflow_runner=workflow_runner()):
        start: dict[str, Any] = {"ref": fleet.ref(), **({"carried": carried} if carried is not None else {})}
        handle = await env.client.start_workflow(
            contract.WorkflowType.PLACEMENT.value, start,
            id=contract.placement_workflow_id("team-a", "chat", fleet.source_uid), task_queue=queue)
        yield handle


async def wait(env: WorkflowEnvironment, predicate: Any, what: str, step: float = 1.0) -> None:
    # A generous real-time bound (not a timing): a loaded 2-core CI machine is slow to skip time.
    await until(env, predicate, step=step, what=what, real_seconds=240)


def phase(fleet: FakeFleet) -> str | None:
    return fleet.placed().get("phase")
