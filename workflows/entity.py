"""The bridge-facing surface shared by per-object ("entity") workflows: the `object-changed` and
`delete` signals the bridge sends, and the `state` query. A workflow mixes EntitySignals in and
keeps its own state model, derived from EntityState."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract import ObjectEvent, Query, Signal


class EntityState(BaseModel):
    generation: int = 0
    """The highest generation announced."""
    deleting: bool = False


S = TypeVar("S", bound=EntityState)


class EntitySignals(Generic[S]):
    """Signal handlers may run before the workflow's run(): set `state` in __init__."""

    state: S

    def adopt(self, carried: S) -> None:
        """Take the state a continued run was started with. Signals that reached this run before
        run() began landed on the fresh state of __init__: a delete or a newer generation among them
        is kept."""
        carried.deleting = carried.deleting or self.state.deleting
        carried.generation = max(carried.generation, self.state.generation)
        self.state = carried

    @workflow.signal(name=Signal.OBJECT_CHANGED)
    def object_changed(self, event: ObjectEvent) -> None:
        if event.deleting:
            self.state.deleting = True
        self.state.generation = max(self.state.generation, event.generation)

    @workflow.signal(name=Signal.DELETE)
    def delete(self, event: ObjectEvent) -> None:
        self.state.deleting = True

    @workflow.query(name=Query.STATE)
    def current_state(self) -> S:
        return self.state
