"""The entity-workflow skeleton: what every per-object ("entity") workflow shares.

An entity workflow lives as long as its object (id <kind>/<ns or _cluster>/<name>/<uid>). The bridge
starts it and sends `object-changed` and `delete` (a reference and a version, never the object);
the `state` query answers what it is doing. Signals may arrive before run() (signal-with-start), so a
workflow sets its state in __init__.

- EntitySignals: those two signals and the query, over a state derived from EntityState.
- EntityWorkflow: the loop most entity workflows run, one reconcile pass at a time:

      begin        the state a continued run carries, the phase shown in the Temporal UI
      first pass
      while the last pass says to go on:
          pause    continue as new when the server suggests it or the run has done its share
                   of passes (carrying the state), then rest until a delete, a newer generation,
                   one of the kind's own signals or its timer wakes it
          a delete ends the loop
          next pass
      closing      the kind's last steps, then phase Deleted

  A kind fills in the hooks below the loop: its passes (each says whether to go on: not when the
  object is gone, nor after a delete where the kind looks at one), its timer, its own wake-ups,
  its share of passes per run. Every step makes the Temporal calls the hand-written loops made,
  in their order, so moving a workflow onto the skeleton changes no command (tests/test_replay.py).

ModelWorkflow (an import, then a wait for deletion), PlacementWorkflow (its pass reads the source
before it looks at a delete) and InferenceServiceWorkflow (its own signals: uid-checked, several
kinds of news) run their own loops.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import timedelta
from typing import ClassVar, Generic, TypeVar

from pydantic import BaseModel
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract import ObjectEvent, Query, Signal, StartObject
    from servingops.api_models.refs import ObjectRef
    from servingops.workflows.visibility import Visibility


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


class ReconcileState(EntityState):
    """The state of a workflow that runs EntityWorkflow's loop."""

    phase: str = "Pending"
    """What the Temporal UI shows (the phase search attribute); Deleted at the end."""
    acted_generation: int = 0
    """The generation the last pass acted on: a higher announced one wakes the workflow."""


R = TypeVar("R", bound=ReconcileState)


class EntityWorkflow(EntitySignals[R], ABC):
    """The loop of an entity workflow; a kind subclasses it with its state and fills in the hooks.

    Its run() is `self.begin(start, start.carried)` then `return await self.live()`, with whatever
    the kind does once between the two (a finalizer, a setting read). The run's input is a
    StartObject with a `carried` field (the state a continued run starts with)."""

    deleted_phase: ClassVar[str] = "Deleted"
    """The phase shown once the object is gone."""

    def __init__(self, state: R) -> None:
        self.state = state
        self.ref: ObjectRef | None = None
        self.visibility: Visibility | None = None
        self.continued = False
        """This run continues an earlier one (it was started with the state that one carried)."""
        self.start: StartObject | None = None
        """This run's input; the next run's is the same, carrying the state."""

    # -- the loop ---------------------------------------------------------------------------------

    def begin(self, start: StartObject, carried: R | None) -> None:
        """Take the run's input and a continued run's state; show the phase."""
        self.start = start
        ref = self.ref = start.ref
        self.visibility = Visibility(ref.kind, ref.namespace, ref.name)
        if carried is not None:
            self.adopt(carried)
            self.continued = True
            self.reset_run_counts()
        self.visibility.publish(self.state.phase)

    async def live(self) -> R:
        """Passes until the object is deleted or gone, then the closing steps; the final state."""
        go_on = await self.first_pass()
        while go_on:
            timed_out = await self.pause()
            if self.state.deleting:
                break
            go_on = await self.next_pass(timed_out)
        await self.closing()
        return self.gone()

    async def pause(self) -> bool:
        """Between two passes: continue as new when due, else rest. True when the rest timed out."""
        self.continue_if_due()
        timed_out = await self.rest()
        self.rested(timed_out)
        return timed_out

    def continue_if_due(self) -> None:
        """History stays bounded: a new run, carrying the state, when the server suggests it or this
        run has done its share of passes."""
        if workflow.info().is_continue_as_new_suggested() or self.run_is_full():
            assert self.start is not None
            workflow.continue_as_new(self.start.model_copy(update={"carried": self.state}))

    async def rest(self) -> bool:
        """Wait for a delete, a newer generation, one of the kind's own wake-ups or its timer (a
        durable timer: a signal ends the wait at once). True when the timer ran out."""
        try:
            await workflow.wait_condition(lambda: self.state.deleting or self.behind() or self.woken(),
                                          timeout=self.rest_time())
        except TimeoutError:
            return True
        return False

    def behind(self) -> bool:
        """A newer generation than the one the last pass acted on was announced."""
        return self.state.generation > self.state.acted_generation

    def gone(self) -> R:
        assert self.visibility is not None
        self.state.deleting = True
        self.state.phase = self.deleted_phase
        self.visibility.publish(self.state.phase)
        return self.state

    # -- what a kind fills in ---------------------------------------------------------------------

    async def first_pass(self) -> bool:
        """The pass after begin(); False to stop (the object is gone, or being deleted). Unless a
        delete came before run(), the same pass as every other."""
        if self.state.deleting:
            return False
        return await self.next_pass(False)

    @abstractmethod
    async def next_pass(self, timed_out: bool) -> bool:
        """The pass after a rest (`timed_out`: its timer ended it); False to stop."""

    @abstractmethod
    def run_is_full(self) -> bool:
        """This run has done its share of passes (continue as new even before the server says so)."""

    @abstractmethod
    def reset_run_counts(self) -> None:
        """A continued run counts its passes from zero."""

    def rest_time(self) -> timedelta | None:
        """How long a rest lasts at most; None: until a signal."""
        return None

    def woken(self) -> bool:
        """One of the kind's own signals asks for a pass now."""
        return False

    def rested(self, timed_out: bool) -> None:
        """Bookkeeping once a rest is over, before a delete is looked at."""

    async def closing(self) -> None:
        """The kind's last steps once the object is deleted or gone (before phase Deleted)."""


__all__ = ["EntitySignals", "EntityState", "EntityWorkflow", "ReconcileState"]
