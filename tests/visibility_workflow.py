"""A minimal workflow that walks through phases, used to test what the Temporal UI sees.

Defined in an importable module: the workflow sandbox refuses classes from __main__.
"""

from __future__ import annotations

from pydantic import BaseModel
from temporalio import workflow

from servingops.workflows.visibility import Visibility


class WalkInput(BaseModel):
    kind: str
    namespace: str
    name: str
    phases: list[str]


class WalkState(BaseModel):
    phase: str
    visited: list[str]


@workflow.defn
class PhaseWalk:
    def __init__(self) -> None:
        self._visited: list[str] = []
        self._advance = 0

    @workflow.run
    async def run(self, params: WalkInput) -> WalkState:
        visibility = Visibility(params.kind, params.namespace, params.name)
        for index, phase in enumerate(params.phases):
            visibility.publish(phase)
            self._visited.append(phase)
            await workflow.wait_condition(lambda i=index: self._advance > i)  # type: ignore[misc]
        return self.state()

    @workflow.signal
    def advance(self) -> None:
        self._advance += 1

    @workflow.query
    def state(self) -> WalkState:
        return WalkState(phase=self._visited[-1] if self._visited else "", visited=list(self._visited))
