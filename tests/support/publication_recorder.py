"""A stand-in for the placement workflow that records the routing workflow's `publication` signals, run
under the placement workflow's id on a task queue of its own (a signal finds a workflow by id, whatever its
type). Importable: the workflow sandbox refuses classes from __main__.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract import Query, Signal
    from servingops.api_models.contract.routing import Publication

TYPE = "PublicationRecorder"


@workflow.defn(name=TYPE)
class PublicationRecorder:
    def __init__(self) -> None:
        self._received: list[Publication] = []
        self._done = False

    @workflow.run
    async def run(self) -> list[Publication]:
        await workflow.wait_condition(lambda: self._done)
        return self._received

    @workflow.signal(name=Signal.PUBLICATION)
    def publication(self, publication: Publication) -> None:
        self._received.append(publication)

    @workflow.signal(name="stop")
    def stop(self) -> None:
        self._done = True

    @workflow.query(name=Query.STATE)
    def received(self) -> list[Publication]:
        return self._received


async def stop_recorder(handle: WorkflowHandle[Any, Any]) -> None:
    """End the recorder if it still runs. The time-skipping server gives a workflow started without an
    execution timeout one of ten years, and while a test awaits another workflow's result with nothing
    else pending it may skip straight to that deadline: the recorder is then already closed (timed out)."""
    if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        await handle.signal("stop")
