"""One pass's pod commands (workflows/replica/commands.py: create, delete, set serving, patch in place),
run side by side, and what they answer folded back into the rows: a quota refusal waits, an in-place
update InPlaceOnly cannot apply holds the rollout on that revision, a command refused for good becomes
Progressing False with one Warning (tried again after the workflow's INVALID_RETRY).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from servingops.workflows import options

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote
    from servingops.activities.replica.activities import ReplicaActivities
    from servingops.activities.replica.types import (
        CreatePodsInput,
        CreatePodsResult,
        DeletePodsInput,
        InPlaceInput,
        InPlaceResult,
        ReplicaRef,
        SetServingInput,
    )
    from servingops.api_models.errors import error_message, error_type_of
    from servingops.api_models.ome.enums import OMENativeInstancePhase, RetryBlockState, UpdateStrategyType
    from servingops.api_models.ome.instance_keys import QUOTA_EXCEEDED
    from servingops.api_models.ome.instance_status import OMENativeInstanceStatus, RetryBlock
    from servingops.workflows.replica.commands import Command, CreatePods, DeletePods, PatchInPlace, SetServing
    from servingops.workflows.replica.operations import to_recreate
    from servingops.workflows.replica.state import ReplicaState


async def run(replica: ReplicaRef, commands: list[Command], now: datetime, state: ReplicaState,
              notes: list[EventNote]) -> bool:
    """Run the pass's commands side by side; fold what they answer back into the rows. A command
    refused for good (the revision renders a pod the apiserver rejects, InvalidSpec, ...) does not
    fail the workflow: it becomes Progressing False with the reason and one Warning, and is tried
    again after INVALID_RETRY. True when one was refused."""
    async def one(command: Command) -> tuple[Command, Any]:
        try:
            return await _command(replica, command)
        except ActivityError as exc:
            error = error_type_of(exc)
            if error is None or not error.permanent:
                raise
            return command, (error.value, error_message(exc))

    answers = await asyncio.gather(*(one(command) for command in commands))
    rejections = [answer for _, answer in answers if isinstance(answer, tuple)]
    if rejections:
        if rejections[0] != state.rejected:
            notes.append(EventNote(type="Warning", reason=rejections[0][0], message=rejections[0][1]))
        state.rejected = rejections[0]
    else:
        state.rejected = None
    _fold([(c, a) for c, a in answers if not isinstance(a, tuple)], now, state, notes)
    return bool(rejections)

async def _command(replica: ReplicaRef, command: Command) -> tuple[Command, Any]:
    namespace = replica.ref.namespace or ""
    if isinstance(command, CreatePods):
        return command, await workflow.execute_activity_method(
            ReplicaActivities.create_pods,
            CreatePodsInput(replica=replica, index=command.index, revision=command.revision,
                            incarnation=command.incarnation, slot=command.slot,
                            preferred_nodes=list(command.preferred_nodes), avoid_node=command.avoid_node),
            **options.KUBE)
    if isinstance(command, DeletePods):
        return command, await workflow.execute_activity_method(
            ReplicaActivities.delete_pods,
            DeletePodsInput(namespace=namespace, pods=list(command.pods), uids=command.uids), **options.KUBE)
    if isinstance(command, SetServing):
        return command, await workflow.execute_activity_method(
            ReplicaActivities.set_serving,
            SetServingInput(namespace=namespace, pods=list(command.pods), serving=command.serving,
                            reason=command.reason), **options.KUBE)
    assert isinstance(command, PatchInPlace)
    return command, await workflow.execute_activity_method(
        ReplicaActivities.update_in_place,
        InPlaceInput(replica=replica, pod=command.pod, revision=command.revision), **options.KUBE)

def _fold(answers: list[tuple[Command, Any]], now: datetime, state: ReplicaState, notes: list[EventNote]) -> None:
    rows = {row.index or 0: row for row in state.rows}
    refused = None
    created_any = False
    for command, answer in answers:
        if isinstance(command, CreatePods):
            _after_create(rows, command, answer, now)
            created_any = created_any or not answer.refused
            refused = refused or answer.refused
        elif isinstance(command, PatchInPlace):
            _after_in_place(rows, command, answer, now, state, notes)
    if refused is not None:
        if refused != state.refused:
            notes.append(EventNote(type="Warning", reason="FailedCreate", message=refused))
        state.refused = refused
    elif created_any:
        state.refused = None
    state.rows = [rows[i] for i in sorted(rows)]

def _after_create(rows: dict[int, OMENativeInstanceStatus], command: CreatePods, answer: CreatePodsResult,
                  now: datetime) -> None:
    row = rows.get(command.index)
    if row is None or row.operation is None:
        return
    if answer.refused:
        row.operation = row.operation.model_copy(update={
            "waiting": answer.refused_reason or QUOTA_EXCEEDED, "capacity_refused_at": now, "deadline": None})
    elif row.operation.capacity_refused_at is not None:
        row.operation = row.operation.model_copy(update={"waiting": None, "capacity_refused_at": None})

def _after_in_place(rows: dict[int, OMENativeInstanceStatus], command: PatchInPlace, answer: InPlaceResult,
                    now: datetime, state: ReplicaState, notes: list[EventNote]) -> None:
    row = rows.get(command.index)
    if answer.applied or row is None or row.operation is None:
        return
    op = row.operation
    if op.strategy == UpdateStrategyType.IN_PLACE_ONLY:
        # InPlaceOnly cannot apply this revision: the attempt ends, the pods go back in rotation
        # at the revision they run, and the rollout is held on it until the spec changes.
        row.operation = None
        row.phase = OMENativeInstancePhase.READY
        row.target_revision = row.running_revision
        target = op.target_revision or ""
        state.in_place_held[target] = f"InPlaceOnly cannot apply {target}: {answer.reason}"
        blocks = {b.target_revision or "": b for b in state.blocks}
        blocks[target] = RetryBlock(target_revision=target, state=RetryBlockState.HELD,
                                    attempts_started=(blocks[target].attempts_started or 0) + 1
                                    if target in blocks else 1,
                                    first_failure_at=now, last_failure_at=now,
                                    reason=state.in_place_held[target][:512])
        state.blocks = [blocks[name] for name in sorted(blocks)]
        notes.append(EventNote(type="Warning", reason="InPlaceUpdateImpossible",
                                     message=state.in_place_held[target]))
    else:
        row.operation = to_recreate(op, now, answer.reason)
