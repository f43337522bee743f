"""The Temporal Schedule that drives a ModelCatalogSource's refreshes.

One schedule per source, id `catalog_schedule_id(name, uid)`, every `spec.refreshInterval`. Its action
starts `CatalogRefreshTickWorkflow` (a tiny workflow that only signals `refresh-now` to the source's
workflow), with overlap SKIP: a tick whose previous one still runs is dropped. The source workflow owns
the schedule: it ensures it (create, or update when it exists), pauses it while the source is blocked
(the note says why, in the Temporal UI), and deletes it when the source is deleted.

Async activities: they use the worker's own Temporal client (`activity.client()`), so the worker needs no
other connection. Idempotent: ensure = create-or-update, delete of a gone schedule answers False.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from servingops.api_models.contract import WorkflowType

ENSURE_SCHEDULE_ACTIVITY = "catalog.ensure_schedule"
DELETE_SCHEDULE_ACTIVITY = "catalog.delete_schedule"


class EnsureScheduleInput(BaseModel):
    schedule_id: str
    source_workflow_id: str
    """The source's workflow: what each tick signals `refresh-now`."""
    task_queue: str
    """Where the tick workflow runs (the source workflow's own queue)."""
    interval_seconds: float = Field(gt=0)
    paused: bool = False
    note: str = ""


class DeleteScheduleInput(BaseModel):
    schedule_id: str


def schedule_of(req: EnsureScheduleInput) -> Schedule:
    return Schedule(
        action=ScheduleActionStartWorkflow(
            WorkflowType.CATALOG_REFRESH_TICK.value, req.source_workflow_id,
            id=f"{req.schedule_id}/tick", task_queue=req.task_queue,
            execution_timeout=timedelta(minutes=5),
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=req.interval_seconds))]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        state=ScheduleState(paused=req.paused, note=req.note or None),
    )


class CatalogScheduleActivities:
    """`client`: for tests; the worker leaves it None and each call uses the activity's own client."""

    def __init__(self, client: Client | None = None) -> None:
        self._client = client

    def all(self) -> list[Callable[..., Any]]:
        return [self.ensure_schedule, self.delete_schedule]

    def _temporal(self) -> Client:
        return self._client if self._client is not None else activity.client()

    @activity.defn(name=ENSURE_SCHEDULE_ACTIVITY)
    async def ensure_schedule(self, req: EnsureScheduleInput) -> bool:
        """Create the schedule, or bring an existing one to this interval and pause state; True when created."""
        temporal = self._temporal()
        wanted = schedule_of(req)
        try:
            await temporal.create_schedule(req.schedule_id, wanted)
            return True
        except ScheduleAlreadyRunningError:
            pass

        def update(_: ScheduleUpdateInput) -> ScheduleUpdate:
            return ScheduleUpdate(schedule=wanted)

        await temporal.get_schedule_handle(req.schedule_id).update(update)
        return False

    @activity.defn(name=DELETE_SCHEDULE_ACTIVITY)
    async def delete_schedule(self, req: DeleteScheduleInput) -> bool:
        """Delete the schedule; False when it was already gone."""
        try:
            await self._temporal().get_schedule_handle(req.schedule_id).delete()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True


__all__ = ["DELETE_SCHEDULE_ACTIVITY", "ENSURE_SCHEDULE_ACTIVITY", "CatalogScheduleActivities", "DeleteScheduleInput",
           "EnsureScheduleInput", "schedule_of"]
