"""A stand-in for the routing workflow (TrafficMapWorkflow) that only records the `routing-changed`
signals it is sent: run under a service's trafficmap/<ns>/<isvc>/<uid> id, it shows what another
workflow (placement) told routing, without the routing workflow's own activities."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from temporalio import workflow
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models.contract import Signal
from servingops.workers.sandbox import workflow_runner

SEEN_QUERY = "seen"


@workflow.defn(name="RoutingChangedRecorder")
class RoutingChangedRecorder:
    def __init__(self) -> None:
        self.seen: list[str | None] = []

    @workflow.signal(name=Signal.ROUTING_CHANGED)
    def routing_changed(self, what: str | None = None) -> None:
        self.seen.append(what)

    @workflow.query(name=SEEN_QUERY)
    def seen_signals(self) -> list[str | None]:
        return list(self.seen)

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


@asynccontextmanager
async def recording(env: WorkflowEnvironment, workflow_id: str) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    """A RoutingChangedRecorder running as `workflow_id` on a task queue of its own; terminated after."""
    queue = f"routing-recorder-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=[RoutingChangedRecorder],
                      workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(RoutingChangedRecorder.run, id=workflow_id, task_queue=queue)
        try:
            yield handle
        finally:
            # A test that awaits another workflow's result lets the time-skipping server skip to this
            # recorder's ten-year default execution timeout: it may already be closed.
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate("the test is over")


async def seen(handle: WorkflowHandle[Any, Any]) -> list[str | None]:
    """The signals the recorder received so far, in order (their arguments)."""
    return list(await handle.query(SEEN_QUERY, result_type=list))
