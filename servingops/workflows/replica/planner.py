"""The replica engine's fleet decisions for one pass. Pure: the workflow hands it the recorded rows,
the observed pods and the effective lifecycle, and gets back the rows to record, the commands to
run, the retry blocks and the rollout hold.

Order of a pass:
1. advance every recorded operation (Create, Update and Migrate are neither started nor advanced
   while paused; Restart stops too under Freeze; Delete always runs);
2. repair: an Instance whose pods are gone or Failed, or (RecreateInstanceOnPodRestart) whose
   container restarted after readySince, is recreated by a Restart at the revision it runs; under
   Freeze a Ready Instance whose pods are all gone is demoted to Pending instead;
3. scale: missing Instances get the lowest free indexes (Create), extra ones go highest index first
   (Delete, which overrides any operation the Instance had);
4. update: Instances not on the target revision, minus the partition's lowest-indexed ones, highest
   index first, admitted under the budget (SurgeThenDrain: maxSurge concurrent surges; the others:
   maxUnavailable against the serving count) and the RetryBlock of the target;
5. the ome.io/serving gate: every Ready pod not being drained is put in rotation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from servingops.api_models.ome.enums import (
    InstanceOperationType,
    InstanceRestartPolicy,
    OMENativeInstancePhase,
    RetryBlockState,
    RolloutHoldGate,
    UpdateStrategyType,
)
from servingops.api_models.ome.instance_keys import KUEUE_PENDING
from servingops.api_models.ome.instance_status import OMENativeInstanceStatus, RetryBlock
from servingops.api_models.ome.migration import MigrationStatus
from servingops.workflows.replica import migrate
from servingops.workflows.replica.commands import Command, CreatePods, SetServing
from servingops.workflows.replica.instances import InstanceView, all_ready, available_at, health, serving
from servingops.workflows.replica.operations import (
    PHASE_OF,
    SURGE,
    Failure,
    announce_admission,
    backoff,
    canonical_pods,
    mechanism,
    open_operation,
)
from servingops.workflows.replica.operations import (
    advance as advance_operation,
)
from servingops.workflows.replica.settings import Lifecycle

GATED_WHEN_PAUSED = (InstanceOperationType.CREATE, InstanceOperationType.UPDATE, InstanceOperationType.MIGRATE)


@dataclass(frozen=True)
class Hold:
    gate: RolloutHoldGate
    reason: str
    target: str


@dataclass
class Note:
    """An Event to record with the pass's status write."""

    type: str
    reason: str
    message: str


@dataclass
class Pass:
    rows: dict[int, OMENativeInstanceStatus]
    commands: list[Command] = field(default_factory=list)
    blocks: dict[str, RetryBlock] = field(default_factory=dict)
    hold: Hold | None = None
    notes: list[Note] = field(default_factory=list)
    opened: int = 0
    """Operations opened this pass (the workflow writes status before running the commands)."""
    wake_at: datetime | None = None
    """The earliest moment something changes without a signal (a deadline, a backoff, minReadySeconds)."""
    migrations: list[MigrationStatus] = field(default_factory=list)
    """status.migrations after this pass (workflows/replica/migrate.py)."""
    relocated: int = 0
    """Instances relocated this pass (Trigger Auto) instead of failing."""
    rejoined: int = 0
    """In-place updates whose pods were let back into rotation on the pass that found them patched
    (Inputs.in_place_rejoin; operations.Outcome.rejoining)."""


@dataclass(frozen=True)
class Inputs:
    rows: dict[int, OMENativeInstanceStatus]
    views: dict[int, InstanceView]
    life: Lifecycle
    target: str
    """The revision Instances converge to: the update revision, or the rollback target's."""
    blocks: dict[str, RetryBlock]
    now: datetime
    op_prefix: str
    """Operation ids are `<op_prefix>-<index>-<n>`: unique per replica and pass, stable on replay."""
    in_place_held: str | None = None
    """Why the target cannot be applied in place (InPlaceOnly), when known."""
    migrations: tuple[MigrationStatus, ...] = ()
    """status.migrations as recorded (requests already judged by migrate.accept)."""
    caps: migrate.Caps = migrate.DEFAULT_CAPS
    ready_endpoints: frozenset[str] | None = None
    """Pods with a Ready endpoint, read while a migration drains (None: not read this pass)."""
    cancel: frozenset[str] = frozenset()
    """Request UUIDs asked to be cancelled."""
    migration_never: bool = False
    """lifecycle.migrationPolicy.mode is Never: no automatic relocation either."""
    auto_relocate: bool = False
    """An Instance not Ready on its node by its deadline is recreated away from it (migrate.relocation)
    instead of failing; off for histories recorded before it (the workflow's patch)."""
    in_place_rejoin: bool = False
    """The pods of an in-place update found all patched rejoin rotation on that same pass; off, they
    stay draining for it (as before the workflow's `in-place-rejoin` patch)."""


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)


def plan(inputs: Inputs) -> Pass:
    life, now = inputs.life, inputs.now
    out = Pass(rows={i: row.model_copy(deep=True) for i, row in inputs.rows.items()},
               blocks={name: block.model_copy() for name, block in inputs.blocks.items()})
    draining: set[str] = set()
    relocations: list[MigrationStatus] = []
    sequence = 0

    def op_id(index: int) -> str:
        nonlocal sequence
        sequence += 1
        return f"{inputs.op_prefix}-{index}-{sequence}"

    def view(index: int) -> InstanceView:
        return inputs.views.get(index) or InstanceView(index=index)

    # 0. adopt: pods whose Instance has no row (a status lost or written by another controller) get
    # one, so they are counted, repaired or scaled away instead of duplicated; a migration's surge
    # pods are not an Instance of their own until the migration completes
    surges = migrate.reserved(list(inputs.migrations), inputs.views)
    for index, seen in inputs.views.items():
        if index in out.rows or not seen.live or index in surges:
            continue
        first = seen.live[0]
        out.rows[index] = OMENativeInstanceStatus(
            index=index, incarnation=first.incarnation, active_ordinal=0 if life.gang else first.slot,
            running_revision=first.revision, target_revision=first.revision, phase=OMENativeInstancePhase.PENDING)

    # 1. recorded operations
    for index in sorted(out.rows):
        row = out.rows[index]
        op = row.operation
        if op is None or op.type is None or op.type is InstanceOperationType.MIGRATE:
            continue  # (Migrate: below, with its record)
        if life.paused and (op.type in GATED_WHEN_PAUSED or (life.frozen and op.type is InstanceOperationType.RESTART)):
            draining |= _held_draining(row, view(index))
            continue
        result = advance_operation(row, view(index), life, now)
        draining |= result.draining
        if result.rejoining:
            out.rejoined += 1
            if not inputs.in_place_rejoin:
                draining |= result.rejoining
        out.commands.extend(result.commands)
        relocated = None
        if result.failure is not None and inputs.auto_relocate and op.type in (
                InstanceOperationType.CREATE, InstanceOperationType.RESTART):
            relocated = migrate.relocation(result.row, view(index), life, [*inputs.migrations, *relocations],
                                           inputs.caps, never=inputs.migration_never,
                                           op_id=f"{inputs.op_prefix}-{index}", now=now)
        if relocated is not None:
            relocations.append(relocated)
            result.row.operation = open_operation(InstanceOperationType.RESTART, op_id=op_id(index),
                                                  target=result.failure.revision if result.failure else "", now=now,
                                                  reason=migrate.RELOCATE, strategy=None, life=life)
            result = advance_operation(result.row, view(index), life, now)
            draining |= result.draining
            out.commands.extend(result.commands)
            out.opened += 1
            out.relocated += 1
            out.notes.append(Note("Warning", "InstanceRelocated", relocated.message or ""))
        elif result.failure is not None:
            _fail(out, result.row, result.failure, now)
        if result.remove:
            del out.rows[index]
            continue
        out.rows[index] = result.row
        if result.row.operation is not None:
            out.wake_at = _earliest(out.wake_at, result.row.operation.deadline)
        elif result.done and op.type is not InstanceOperationType.DELETE:
            block = out.blocks.get(op.target_revision or "")
            if block is not None:  # an attempt at the revision succeeded: its block lifts
                del out.blocks[op.target_revision or ""]

    # 1b. migrations (their own step machine; they also add and remove rows)
    out.migrations = [*inputs.migrations, *relocations]
    if inputs.migrations:
        moved = migrate.run(migrate.Inputs(
            rows=out.rows, views=inputs.views, life=life, records=list(inputs.migrations), now=now,
            caps=inputs.caps, op_id=f"{inputs.op_prefix}-mig", ready_endpoints=inputs.ready_endpoints,
            cancel=inputs.cancel))
        out.migrations = [*moved.records, *relocations]
        out.commands.extend(moved.commands)
        out.notes.extend(Note(n.type, n.reason, n.message) for n in moved.notes)
        draining |= moved.draining
        surges |= moved.reserved
        out.opened += moved.opened
        out.wake_at = _earliest(out.wake_at, moved.wake_at)

    # 2. repair
    for index in sorted(out.rows):
        row = out.rows[index]
        if row.operation is not None:
            continue
        pods = canonical_pods(row, view(index), life)
        problem = health(pods, life.pods_per_instance, row.ready_since,
                         repair_restarts=life.restart_policy is InstanceRestartPolicy.RECREATE_INSTANCE_ON_POD_RESTART)
        if row.phase is OMENativeInstancePhase.FAILED:
            block = out.blocks.get(inputs.target)
            if block is not None and block.next_retry_at is not None and now < block.next_retry_at:
                out.wake_at = _earliest(out.wake_at, block.next_retry_at)
                continue
            if problem is None and all_ready(pods, life.pods_per_instance):
                row.phase = OMENativeInstancePhase.READY
                continue
            if problem is None:
                problem_reason, message = "RetryAfterBackoff", f"Instance {index} failed; trying again"
            else:
                problem_reason, message = problem.reason, problem.message
        elif problem is None:
            continue
        else:
            problem_reason, message = problem.reason, problem.message
        if life.frozen:
            if not pods and row.phase is OMENativeInstancePhase.READY:
                row.phase = OMENativeInstancePhase.PENDING
            continue
        # A failed Instance tries the current target again; a repair keeps the revision it runs.
        revision = inputs.target if row.phase is OMENativeInstancePhase.FAILED else (
            row.running_revision or row.target_revision or inputs.target)
        row.operation = open_operation(InstanceOperationType.RESTART, op_id=op_id(index), target=revision, now=now,
                                       reason=problem_reason, strategy=None, life=life)
        if row.phase is OMENativeInstancePhase.FAILED:
            _count_attempt(out.blocks, revision, now)  # another attempt at the revision that failed
        if problem is not None and problem.failure is not None:
            row.last_failure = problem.failure
        row.phase = OMENativeInstancePhase.RESTARTING
        out.opened += 1
        out.notes.append(Note("Warning", problem_reason, f"recreating Instance {index}: {message}"))
        result = advance_operation(row, view(index), life, now)
        out.rows[index] = result.row
        out.commands.extend(result.commands)
        draining |= result.draining

    # 3. scale
    keep = sorted(i for i, r in out.rows.items()
                  if not (r.operation and r.operation.type is InstanceOperationType.DELETE))
    extra = len(keep) - life.desired
    for index in sorted(keep, reverse=True)[:max(0, extra)]:
        row = out.rows[index]
        row.operation = open_operation(InstanceOperationType.DELETE, op_id=op_id(index),
                                       target=row.running_revision or "", now=now, reason="ScaleDown",
                                       strategy=None, life=life)
        out.opened += 1
        result = advance_operation(row, view(index), life, now)
        out.rows[index] = result.row
        out.commands.extend(result.commands)
        draining |= result.draining
    missing = life.desired - len(keep)
    if missing > 0:
        blocked = _blocked(out.blocks.get(inputs.target), now)
        if life.paused:
            out.hold = Hold(RolloutHoldGate.HELD, "the replica is paused: no Instance is created", inputs.target)
        elif blocked is not None:
            out.hold = Hold(blocked[0], blocked[1], inputs.target)
        else:
            taken = set(out.rows) | set(inputs.views) | surges
            candidate = 0
            for _ in range(missing):
                while candidate in taken:
                    candidate += 1
                taken.add(candidate)
                row = OMENativeInstanceStatus(index=candidate, incarnation=0, active_ordinal=0,
                                              target_revision=inputs.target, phase=OMENativeInstancePhase.CREATING)
                row.operation = open_operation(InstanceOperationType.CREATE, op_id=op_id(candidate),
                                               target=inputs.target, now=now, reason="ScaleUp", strategy=None,
                                               life=life)
                _count_attempt(out.blocks, inputs.target, now)
                out.opened += 1
                result = advance_operation(row, view(candidate), life, now)
                out.rows[candidate] = result.row
                out.commands.extend(result.commands)

    # 4. update
    _update(out, inputs, op_id)

    # phases and the serving gate
    for index, row in out.rows.items():
        if row.operation is not None and row.operation.type is not None:
            row.phase = PHASE_OF[row.operation.type]
            row.target_revision = row.operation.target_revision
            if row.operation.type is InstanceOperationType.UPDATE:
                out.wake_at = _earliest(out.wake_at, row.operation.deadline)
        elif row.phase is not OMENativeInstancePhase.FAILED:
            pods = canonical_pods(row, view(index), life)
            row.phase = OMENativeInstancePhase.READY if all_ready(pods, life.pods_per_instance) else (
                OMENativeInstancePhase.PENDING)
            if row.phase is OMENativeInstancePhase.READY and row.ready_since is None:
                since = [pod.ready_since for pod in pods if pod.ready_since is not None]
                row.ready_since = max(since) if since else now
            if row.phase is OMENativeInstancePhase.PENDING:
                row.ready_since = None
        held = announce_admission(row, view(index))
        if held is not None:
            out.notes.append(Note("Warning", KUEUE_PENDING, held))
    # A block scopes a revision some Instance still aims at or runs; once none does (the spec moved
    # on), it is history, and the Events and the failed rows' lastFailure keep the trace.
    live = {inputs.target} | {r.running_revision or "" for r in out.rows.values()} | {
        r.target_revision or "" for r in out.rows.values()}
    out.blocks = {name: block for name, block in out.blocks.items() if name in live}
    _gate(out, inputs, draining)
    if out.migrations:
        migrate.stamp_relocations(out.migrations, out.rows)
        out.commands = [_steered(c, out.rows, out.migrations) for c in out.commands]
    out.commands = _batched(out.commands)
    for seen in inputs.views.values():
        for pod in seen.live:
            out.wake_at = _earliest(out.wake_at, available_at(pod, life.min_ready))
    if out.wake_at is not None and out.wake_at <= now:
        out.wake_at = None
    return out


def _steered(command: Command, rows: dict[int, OMENativeInstanceStatus],
             records: list[MigrationStatus]) -> Command:
    """A relocating Instance's pods are created away from the node it could not become Ready on."""
    if not isinstance(command, CreatePods) or command.index not in rows:
        return command
    node = migrate.avoided_node(rows[command.index], records)
    return replace(command, avoid_node=node) if node else command


def _held_draining(row: OMENativeInstanceStatus, view: InstanceView) -> set[str]:
    """A paused operation keeps out of rotation whatever its step already took out."""
    op = row.operation
    if op is None or op.step in ("Surge", "CreatePods", "Recreate", "WaitReady"):
        return set()
    return {pod.name for pod in view.live if pod.serving is False}


def _blocked(block: RetryBlock | None, now: datetime) -> tuple[RolloutHoldGate, str] | None:
    """The gate and reason when the target's RetryBlock denies an attempt now: Held until the spec
    changes, Backoff until nextRetryAt."""
    if block is None:
        return None
    if block.state is RetryBlockState.HELD:
        return RolloutHoldGate.HELD, block.reason or f"updates to {block.target_revision} are held"
    if block.state is RetryBlockState.BACKOFF and block.next_retry_at is not None and now < block.next_retry_at:
        return RolloutHoldGate.RETRY_BLOCK, (
            f"revision {block.target_revision} failed {block.attempts_started or 0} attempt(s); next retry at "
            f"{block.next_retry_at.strftime('%Y-%m-%dT%H:%M:%SZ')}: {block.reason or ''}").strip()
    return None


def _count_attempt(blocks: dict[str, RetryBlock], revision: str, now: datetime) -> None:
    block = blocks.get(revision)
    if block is not None:
        blocks[revision] = block.model_copy(update={
            "attempts_started": (block.attempts_started or 0) + 1, "state": RetryBlockState.RETRY_IN_PROGRESS})


def _fail(out: Pass, row: OMENativeInstanceStatus, failure: Failure, now: datetime) -> None:
    """A WaitReady past its deadline: the attempt ends, the revision is blocked with backoff (persisted
    nextRetryAt), and the Instance is Failed unless a surge left its old pod serving."""
    op = row.operation
    surge = op is not None and op.type is InstanceOperationType.UPDATE and op.step == "WaitReady" and (
        mechanism(op.strategy, False) == SURGE)
    row.operation = None
    if failure.termination is not None:
        row.last_failure = failure.termination
    if surge:
        row.target_revision = row.running_revision
        row.phase = OMENativeInstancePhase.READY
    else:
        row.phase = OMENativeInstancePhase.FAILED
        row.target_revision = failure.revision
    previous = out.blocks.get(failure.revision)
    attempts = max(1, previous.attempts_started or 1) if previous else 1
    out.blocks[failure.revision] = RetryBlock(
        target_revision=failure.revision, state=RetryBlockState.BACKOFF, attempts_started=attempts,
        next_retry_at=now + backoff(attempts), first_failure_at=previous.first_failure_at if previous else now,
        last_failure_at=now, reason=failure.reason[:512])
    out.notes.append(Note("Warning", "InstanceNotReady", failure.reason))
    out.wake_at = _earliest(out.wake_at, now + backoff(attempts))


def _update(out: Pass, inputs: Inputs, op_id: object) -> None:
    life, now, target = inputs.life, inputs.now, inputs.target
    assert callable(op_id)
    rows = out.rows
    behind = [i for i in sorted(rows) if rows[i].running_revision != target
              and not (rows[i].operation and rows[i].operation.target_revision == target)  # type: ignore[union-attr]
              and rows[i].phase is not OMENativeInstancePhase.FAILED]
    held_by_partition = behind[:life.partition]
    eligible = [i for i in reversed(behind[life.partition:]) if rows[i].operation is None]
    if not eligible:
        if held_by_partition and not any(r.operation for r in rows.values()):
            out.hold = out.hold or Hold(RolloutHoldGate.HELD, f"partition {life.partition} holds Instances "
                                        f"{', '.join(map(str, held_by_partition))} at their revision", target)
        return
    if life.paused:
        out.hold = Hold(RolloutHoldGate.HELD, "the replica is paused", target)
        return
    blocked = _blocked(out.blocks.get(target), now)
    if blocked is not None:
        out.hold = Hold(blocked[0], blocked[1], target)
        block = out.blocks.get(target)
        if block is not None and block.next_retry_at is not None:
            out.wake_at = _earliest(out.wake_at, block.next_retry_at)
        return
    if inputs.in_place_held and life.strategy is UpdateStrategyType.IN_PLACE_ONLY:
        out.hold = Hold(RolloutHoldGate.HELD, inputs.in_place_held, target)
        return
    surge = mechanism(life.strategy, life.gang) == SURGE
    if surge:
        in_flight = sum(1 for r in rows.values() if r.operation and r.operation.type is InstanceOperationType.UPDATE)
        room = None if life.max_surge is None else max(0, life.max_surge - in_flight)
        budget_text = f"maxSurge {life.max_surge}: {in_flight} surge(s) in flight"
    else:
        serving_now = sum(1 for i, r in rows.items() if _instance_serving(r, inputs.views.get(i), life)
                          and r.operation is None)
        unavailable = max(0, life.desired - serving_now)
        room = None if life.max_unavailable is None else max(0, life.max_unavailable - unavailable)
        budget_text = (f"maxUnavailable {life.max_unavailable}: {unavailable} of {life.desired} Instance(s) "
                       "out of rotation")
    admitted = eligible if room is None else eligible[:room]
    for index in admitted:
        row = rows[index]
        row.operation = open_operation(InstanceOperationType.UPDATE, op_id=op_id(index), target=target, now=now,
                                       reason="RevisionUpdate", strategy=life.strategy.value, life=life)
        _count_attempt(out.blocks, target, now)
        out.opened += 1
        result = advance_operation(row, inputs.views.get(index) or InstanceView(index=index), life, now)
        rows[index] = result.row
        out.commands.extend(result.commands)
    if len(admitted) < len(eligible):
        out.hold = Hold(RolloutHoldGate.BUDGET, budget_text, target)


def _instance_serving(row: OMENativeInstanceStatus, view: InstanceView | None, life: Lifecycle) -> bool:
    if view is None:
        return False
    return sum(1 for pod in view.live if serving(pod)) >= life.pods_per_instance


def _gate(out: Pass, inputs: Inputs, draining: set[str]) -> None:
    """Put in rotation every pod whose containers are ready and that no operation is draining; a pod
    of an in-place update joins only once it runs the target."""
    on: list[str] = []
    off: list[str] = []
    for index, view in inputs.views.items():
        row = out.rows.get(index)
        for pod in view.live:
            if pod.name in draining:
                if pod.serving is True:
                    off.append(pod.name)
                continue
            if row is None:
                continue
            op = row.operation
            if op is not None and op.step in ("Drain", "Patch") and mechanism(op.strategy, inputs.life.gang) != SURGE:
                continue
            if pod.containers_ready and pod.serving is not True and (
                    op is None or pod.revision == op.target_revision or op.type is not InstanceOperationType.UPDATE
                    or mechanism(op.strategy, inputs.life.gang) == SURGE):
                on.append(pod.name)
    already = {name for c in out.commands if isinstance(c, SetServing) for name in c.pods}
    off = [name for name in off if name not in already]
    if on:
        out.commands.append(SetServing(pods=tuple(sorted(on)), serving=True, reason="Ready"))
    if off:
        out.commands.append(SetServing(pods=tuple(sorted(off)), serving=False, reason="Draining"))


def _batched(commands: list[Command]) -> list[Command]:
    """One set_serving call per (serving, reason) for the whole pass instead of one per Instance:
    a rollout drains many Instances in the same pass."""
    merged: dict[tuple[bool, str], list[str]] = {}
    others: list[Command] = []
    for command in commands:
        if isinstance(command, SetServing):
            merged.setdefault((command.serving, command.reason), []).extend(command.pods)
        else:
            others.append(command)
    return others + [SetServing(pods=tuple(sorted(set(pods))), serving=serving, reason=reason)
                     for (serving, reason), pods in sorted(merged.items())]
