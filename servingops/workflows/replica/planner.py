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

`plan` runs these steps as methods of `_Planner`, one pass's state: what a step hands the next (the
pods kept draining, the operation-id sequence, the indexes a migration's surge holds) lives there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from servingops.activities.replica.types import PodView
from servingops.api_models.ome.enums import (
    InstanceOperationType,
    InstanceRestartPolicy,
    OMENativeInstancePhase,
    RetryBlockState,
    RolloutHoldGate,
    UpdateStrategyType,
)
from servingops.api_models.ome.instance_keys import KUEUE_PENDING
from servingops.api_models.ome.instance_status import InstanceOperation, OMENativeInstanceStatus, RetryBlock
from servingops.api_models.ome.migration import MigrationStatus
from servingops.workflows.replica import migrate
from servingops.workflows.replica.commands import Command, CreatePods, SetServing
from servingops.workflows.replica.instances import (
    Health,
    InstanceView,
    all_ready,
    available_at,
    health,
    serving,
)
from servingops.workflows.replica.operations import (
    PHASE_OF,
    SURGE,
    Failure,
    Outcome,
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
    """The pass's decisions, in the order of the module docstring. The order is part of the result:
    each step sees the rows, operations and drains the steps before it left, and the operation ids
    count up across the steps (so a replayed pass names its operations the same)."""
    planner = _Planner(inputs)
    planner.adopt_unrecorded_pods()
    planner.advance_recorded_operations()
    planner.run_migrations()
    planner.repair_broken_instances()
    planner.scale()
    planner.update_behind_instances()
    planner.settle_phases()
    planner.drop_stale_blocks()
    _gate(planner.out, inputs, planner.draining)
    planner.finish_commands()
    planner.settle_wake()
    return planner.out


class _Planner:
    """One pass under way: the Pass it builds and what its steps hand each other (the pods kept out of
    rotation, this pass's relocations, the indexes a migration's surge holds, the operation ids)."""

    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.life, self.now = inputs.life, inputs.now
        # Copies: the workflow may plan the same inputs again (an unpatched history's branch).
        self.out = Pass(rows={i: row.model_copy(deep=True) for i, row in inputs.rows.items()},
                        blocks={name: block.model_copy() for name, block in inputs.blocks.items()})
        self.draining: set[str] = set()
        """Pods the serving gate keeps out of rotation this pass (what an operation drains)."""
        self.relocations: list[MigrationStatus] = []
        """Relocation records (Trigger Auto) opened this pass."""
        self.surges = migrate.reserved(list(inputs.migrations), inputs.views)
        """Indexes a migration's surge pods hold: no Instance of their own, and never given to a new one."""
        self._sequence = 0

    def op_id(self, index: int) -> str:
        """`<op_prefix>-<index>-<n>`, n counting the operations this pass opened, whatever step opened
        them: unique per replica and pass, and the same when the pass is replayed."""
        self._sequence += 1
        return f"{self.inputs.op_prefix}-{index}-{self._sequence}"

    def view(self, index: int) -> InstanceView:
        """The Instance's observed pods; none seen is an empty view, not a missing one."""
        return self.inputs.views.get(index) or InstanceView(index=index)

    def _first_step(self, index: int, row: OMENativeInstanceStatus) -> Outcome:
        """Take the first step of the operation just opened on `row`, in this same pass (its commands
        go out now), and record the stepped row."""
        result = advance_operation(row, self.view(index), self.life, self.now)
        self.out.rows[index] = result.row
        self.out.commands.extend(result.commands)
        return result

    # 0. adopt

    def adopt_unrecorded_pods(self) -> None:
        """Pods whose Instance has no row (a status lost, or written by another controller) get one, so
        they are counted, repaired or scaled away instead of duplicated. A migration's surge pods are not
        an Instance of their own until the migration completes."""
        for index, seen in self.inputs.views.items():
            if index in self.out.rows or not seen.live or index in self.surges:
                continue
            first = seen.live[0]
            self.out.rows[index] = OMENativeInstanceStatus(
                index=index, incarnation=first.incarnation, active_ordinal=0 if self.life.gang else first.slot,
                running_revision=first.revision, target_revision=first.revision,
                phase=OMENativeInstancePhase.PENDING)

    # 1. recorded operations

    def advance_recorded_operations(self) -> None:
        """Step every operation the rows record, lowest index first. A Migrate is stepped with its record
        (run_migrations); an operation that pause stops keeps out of rotation what its step took out."""
        for index in sorted(self.out.rows):
            row = self.out.rows[index]
            op = row.operation
            if op is None or op.type is None or op.type is InstanceOperationType.MIGRATE:
                continue
            if self._stopped_by_pause(op.type):
                self.draining |= _held_draining(row, self.view(index))
                continue
            self._advance_recorded(index, row, op)

    def _stopped_by_pause(self, kind: InstanceOperationType) -> bool:
        """Paused: Create, Update and Migrate stand still; a Restart (repair) only under Freeze, since
        Recover keeps repairing. A Delete (scale-down) always runs."""
        life = self.life
        return life.paused and (kind in GATED_WHEN_PAUSED or (life.frozen and kind is InstanceOperationType.RESTART))

    def _advance_recorded(self, index: int, row: OMENativeInstanceStatus, op: InstanceOperation) -> None:
        """One step of a recorded operation. Pods an in-place update found all patched rejoin rotation
        now, unless the workflow plans for a history recorded before that (Inputs.in_place_rejoin)."""
        result = advance_operation(row, self.view(index), self.life, self.now)
        self.draining |= result.draining
        if result.rejoining:
            self.out.rejoined += 1
            if not self.inputs.in_place_rejoin:
                self.draining |= result.rejoining
        self.out.commands.extend(result.commands)
        if result.failure is not None:
            result = self._relocate_or_fail(index, op, result, result.failure)
        self._record_stepped(index, op, result)

    def _relocate_or_fail(self, index: int, op: InstanceOperation, result: Outcome, failure: Failure) -> Outcome:
        """A WaitReady past its deadline. A Create or Restart whose pods sit on a node is first recreated
        away from that node (a Relocated record, migrate.relocation: the policy and caps decide) when
        Inputs.auto_relocate; otherwise the attempt fails (_fail: RetryBlock, Failed). Returns the
        Instance's outcome for the pass: the relocating Restart's first step, or the failed one."""
        relocated = None
        if self.inputs.auto_relocate and op.type in (InstanceOperationType.CREATE, InstanceOperationType.RESTART):
            relocated = migrate.relocation(result.row, self.view(index), self.life,
                                           [*self.inputs.migrations, *self.relocations], self.inputs.caps,
                                           never=self.inputs.migration_never,
                                           op_id=f"{self.inputs.op_prefix}-{index}", now=self.now)
        if relocated is None:
            _fail(self.out, result.row, failure, self.now)
            return result
        self.relocations.append(relocated)
        result.row.operation = open_operation(InstanceOperationType.RESTART, op_id=self.op_id(index),
                                              target=failure.revision, now=self.now, reason=migrate.RELOCATE,
                                              strategy=None, life=self.life)
        result = advance_operation(result.row, self.view(index), self.life, self.now)
        self.draining |= result.draining
        self.out.commands.extend(result.commands)
        self.out.opened += 1
        self.out.relocated += 1
        self.out.notes.append(Note("Warning", "InstanceRelocated", relocated.message or ""))
        return result

    def _record_stepped(self, index: int, op: InstanceOperation, result: Outcome) -> None:
        """The row after its step: gone once a Delete finished; else recorded, the pass waking at its
        deadline. An attempt that finished at a revision (any but a Delete) lifts that revision's
        RetryBlock."""
        out = self.out
        if result.remove:
            del out.rows[index]
            return
        out.rows[index] = result.row
        if result.row.operation is not None:
            out.wake_at = _earliest(out.wake_at, result.row.operation.deadline)
        elif result.done and op.type is not InstanceOperationType.DELETE:
            out.blocks.pop(op.target_revision or "", None)

    # 1b. migrations

    def run_migrations(self) -> None:
        """Migrations have their own step machine (migrate.run) over the rows the operations left: they
        add and remove rows, drain pods and hold surge indexes. status.migrations is its records, then
        this pass's relocations."""
        inputs, out = self.inputs, self.out
        out.migrations = [*inputs.migrations, *self.relocations]
        if not inputs.migrations:
            return
        moved = migrate.run(migrate.Inputs(
            rows=out.rows, views=inputs.views, life=self.life, records=list(inputs.migrations), now=self.now,
            caps=inputs.caps, op_id=f"{inputs.op_prefix}-mig", ready_endpoints=inputs.ready_endpoints,
            cancel=inputs.cancel))
        out.migrations = [*moved.records, *self.relocations]
        out.commands.extend(moved.commands)
        out.notes.extend(Note(n.type, n.reason, n.message) for n in moved.notes)
        self.draining |= moved.draining
        self.surges |= moved.reserved
        out.opened += moved.opened
        out.wake_at = _earliest(out.wake_at, moved.wake_at)

    # 2. repair

    def repair_broken_instances(self) -> None:
        """An Instance with no operation whose pods are gone, Failed or (RecreateInstanceOnPodRestart)
        restarted after readySince, or a Failed one due another try, is recreated by a Restart. Under
        Freeze nothing is repaired; a Ready Instance whose pods are all gone is only demoted to Pending
        (its row would say Ready with no pods)."""
        for index in sorted(self.out.rows):
            row = self.out.rows[index]
            if row.operation is not None:
                continue
            pods = canonical_pods(row, self.view(index), self.life)
            problem = health(pods, self.life.pods_per_instance, row.ready_since, repair_restarts=(
                self.life.restart_policy is InstanceRestartPolicy.RECREATE_INSTANCE_ON_POD_RESTART))
            why = self._repair_reason(index, row, pods, problem)
            if why is None:
                continue
            if self.life.frozen:
                if not pods and row.phase is OMENativeInstancePhase.READY:
                    row.phase = OMENativeInstancePhase.PENDING
                continue
            self._open_repair(index, row, problem, *why)

    def _repair_reason(self, index: int, row: OMENativeInstanceStatus, pods: list[PodView],
                       problem: Health | None) -> tuple[str, str] | None:
        """The Event reason and message of the Restart the Instance needs, or None. A Failed Instance
        waits out its target's backoff (the pass wakes at nextRetryAt), is Ready again when its pods
        recovered meanwhile, and else tries again; any other Instance only when its health has a problem."""
        if row.phase is OMENativeInstancePhase.FAILED:
            block = self.out.blocks.get(self.inputs.target)
            if block is not None and block.next_retry_at is not None and self.now < block.next_retry_at:
                self.out.wake_at = _earliest(self.out.wake_at, block.next_retry_at)
                return None
            if problem is None and all_ready(pods, self.life.pods_per_instance):
                row.phase = OMENativeInstancePhase.READY
                return None
            if problem is None:
                return "RetryAfterBackoff", f"Instance {index} failed; trying again"
        elif problem is None:
            return None
        return problem.reason, problem.message

    def _open_repair(self, index: int, row: OMENativeInstanceStatus, problem: Health | None, reason: str,
                     message: str) -> None:
        """Open the Restart and take its first step. A Failed Instance tries the current target again (one
        more attempt on its RetryBlock); a repair keeps the revision the Instance runs."""
        failed = row.phase is OMENativeInstancePhase.FAILED
        revision = self.inputs.target if failed else (row.running_revision or row.target_revision or self.inputs.target)
        row.operation = open_operation(InstanceOperationType.RESTART, op_id=self.op_id(index), target=revision,
                                       now=self.now, reason=reason, strategy=None, life=self.life)
        if failed:
            _count_attempt(self.out.blocks, revision, self.now)
        if problem is not None and problem.failure is not None:
            row.last_failure = problem.failure
        row.phase = OMENativeInstancePhase.RESTARTING
        self.out.opened += 1
        self.out.notes.append(Note("Warning", reason, f"recreating Instance {index}: {message}"))
        self.draining |= self._first_step(index, row).draining

    # 3. scale

    def scale(self) -> None:
        """Bring the Instances not already being deleted to life.desired: the extra ones go highest index
        first, the missing ones take the lowest free indexes."""
        keep = sorted(i for i, r in self.out.rows.items()
                      if not (r.operation and r.operation.type is InstanceOperationType.DELETE))
        self._scale_down(keep)
        self._scale_up(self.life.desired - len(keep))

    def _scale_down(self, keep: list[int]) -> None:
        """A Delete for each extra Instance, highest index first; it replaces whatever operation the
        Instance had, and runs paused or not."""
        extra = len(keep) - self.life.desired
        for index in sorted(keep, reverse=True)[:max(0, extra)]:
            row = self.out.rows[index]
            row.operation = open_operation(InstanceOperationType.DELETE, op_id=self.op_id(index),
                                           target=row.running_revision or "", now=self.now, reason="ScaleDown",
                                           strategy=None, life=self.life)
            self.out.opened += 1
            self.draining |= self._first_step(index, row).draining

    def _scale_up(self, missing: int) -> None:
        """A Create at the target for each missing Instance, unless pause or the target's RetryBlock holds
        new Instances too (then the rollout hold says which)."""
        if missing <= 0:
            return
        blocked = _blocked(self.out.blocks.get(self.inputs.target), self.now)
        if self.life.paused:
            self.out.hold = Hold(RolloutHoldGate.HELD, "the replica is paused: no Instance is created",
                                 self.inputs.target)
        elif blocked is not None:
            self.out.hold = Hold(blocked[0], blocked[1], self.inputs.target)
        else:
            for index in self._free_indexes(missing):
                self._create(index)

    def _free_indexes(self, count: int) -> list[int]:
        """The `count` lowest indexes that no row, no observed pod and no migration's surge holds: a new
        Instance never takes over pods or a name that is still in use."""
        taken = set(self.out.rows) | set(self.inputs.views) | self.surges
        free: list[int] = []
        candidate = 0
        while len(free) < count:
            if candidate not in taken:
                free.append(candidate)
            candidate += 1
        return free

    def _create(self, index: int) -> None:
        """A new Instance at the target: its Create counts as an attempt on the target's RetryBlock."""
        target = self.inputs.target
        row = OMENativeInstanceStatus(index=index, incarnation=0, active_ordinal=0, target_revision=target,
                                      phase=OMENativeInstancePhase.CREATING)
        row.operation = open_operation(InstanceOperationType.CREATE, op_id=self.op_id(index), target=target,
                                       now=self.now, reason="ScaleUp", strategy=None, life=self.life)
        _count_attempt(self.out.blocks, target, self.now)
        self.out.opened += 1
        self._first_step(index, row)

    # 4. update

    def update_behind_instances(self) -> None:
        """Update the Instances behind the target, highest index first, as many as the budget admits;
        the partition keeps its lowest-indexed ones where they are. What holds the rest is the rollout
        hold."""
        target, out = self.inputs.target, self.out
        behind = self._behind_target()
        held_by_partition = behind[:self.life.partition]
        eligible = [i for i in reversed(behind[self.life.partition:]) if out.rows[i].operation is None]
        if not eligible:
            if held_by_partition and not any(r.operation for r in out.rows.values()):
                out.hold = out.hold or Hold(RolloutHoldGate.HELD, f"partition {self.life.partition} holds "
                                            f"Instances {', '.join(map(str, held_by_partition))} at their revision",
                                            target)
            return
        hold = self._update_hold()
        if hold is not None:
            out.hold = hold
            return
        room, budget_text = self._update_room()
        admitted = eligible if room is None else eligible[:room]
        for index in admitted:
            self._open_update(index)
        if len(admitted) < len(eligible):
            out.hold = Hold(RolloutHoldGate.BUDGET, budget_text, target)

    def _behind_target(self) -> list[int]:
        """Indexes, lowest first, neither on the target nor headed there. Failed Instances are repair's
        (they retry the target after their backoff), not the update's."""
        target = self.inputs.target
        return [i for i, r in sorted(self.out.rows.items()) if r.running_revision != target
                and not (r.operation and r.operation.target_revision == target)
                and r.phase is not OMENativeInstancePhase.FAILED]

    def _update_hold(self) -> Hold | None:
        """What holds every update this pass: pause; the target's RetryBlock (the pass wakes at its
        nextRetryAt); or, under InPlaceOnly, a target that cannot be applied in place."""
        life, target, out = self.life, self.inputs.target, self.out
        if life.paused:
            return Hold(RolloutHoldGate.HELD, "the replica is paused", target)
        blocked = _blocked(out.blocks.get(target), self.now)
        if blocked is not None:
            block = out.blocks.get(target)
            if block is not None and block.next_retry_at is not None:
                out.wake_at = _earliest(out.wake_at, block.next_retry_at)
            return Hold(blocked[0], blocked[1], target)
        if self.inputs.in_place_held and life.strategy is UpdateStrategyType.IN_PLACE_ONLY:
            return Hold(RolloutHoldGate.HELD, self.inputs.in_place_held, target)
        return None

    def _update_room(self) -> tuple[int | None, str]:
        """How many more updates the budget admits now (None: no cap), and how the Budget gate says so.
        SurgeThenDrain counts the surges in flight against maxSurge (the old pods keep serving); the
        others count the Instances out of rotation against maxUnavailable, since each update takes one
        out."""
        life, rows = self.life, self.out.rows
        if mechanism(life.strategy, life.gang) == SURGE:
            in_flight = sum(1 for r in rows.values()
                            if r.operation and r.operation.type is InstanceOperationType.UPDATE)
            room = None if life.max_surge is None else max(0, life.max_surge - in_flight)
            return room, f"maxSurge {life.max_surge}: {in_flight} surge(s) in flight"
        serving_now = sum(1 for i, r in rows.items() if _instance_serving(r, self.inputs.views.get(i), life)
                          and r.operation is None)
        unavailable = max(0, life.desired - serving_now)
        room = None if life.max_unavailable is None else max(0, life.max_unavailable - unavailable)
        return room, (f"maxUnavailable {life.max_unavailable}: {unavailable} of {life.desired} Instance(s) "
                      "out of rotation")

    def _open_update(self, index: int) -> None:
        """Open the Update with the strategy pinned on it (a later spec change does not switch an update
        under way), count the attempt on the target's RetryBlock and take the first step."""
        target = self.inputs.target
        row = self.out.rows[index]
        row.operation = open_operation(InstanceOperationType.UPDATE, op_id=self.op_id(index), target=target,
                                       now=self.now, reason="RevisionUpdate", strategy=self.life.strategy.value,
                                       life=self.life)
        _count_attempt(self.out.blocks, target, self.now)
        self.out.opened += 1
        self._first_step(index, row)

    # phases, blocks, commands, wake

    def settle_phases(self) -> None:
        """Each row's phase from what the pass left it, and Kueue's reason for holding an Instance said
        once per operation."""
        for index, row in self.out.rows.items():
            if row.operation is not None and row.operation.type is not None:
                self._phase_from_operation(row, row.operation)
            elif row.phase is not OMENativeInstancePhase.FAILED:
                self._phase_from_pods(index, row)
            held = announce_admission(row, self.view(index))
            if held is not None:
                self.out.notes.append(Note("Warning", KUEUE_PENDING, held))

    def _phase_from_operation(self, row: OMENativeInstanceStatus, op: InstanceOperation) -> None:
        """An Instance under an operation shows its phase and aims at its revision; an Update in flight
        also wakes the pass at its deadline."""
        assert op.type is not None
        row.phase = PHASE_OF[op.type]
        row.target_revision = op.target_revision
        if op.type is InstanceOperationType.UPDATE:
            self.out.wake_at = _earliest(self.out.wake_at, op.deadline)

    def _phase_from_pods(self, index: int, row: OMENativeInstanceStatus) -> None:
        """Without an operation (and not Failed, which only a retry ends): Ready while all its pods are,
        readySince the latest pod's (kept once set), else Pending with no readySince."""
        pods = canonical_pods(row, self.view(index), self.life)
        row.phase = OMENativeInstancePhase.READY if all_ready(pods, self.life.pods_per_instance) else (
            OMENativeInstancePhase.PENDING)
        if row.phase is OMENativeInstancePhase.READY and row.ready_since is None:
            since = [pod.ready_since for pod in pods if pod.ready_since is not None]
            row.ready_since = max(since) if since else self.now
        if row.phase is OMENativeInstancePhase.PENDING:
            row.ready_since = None

    def drop_stale_blocks(self) -> None:
        """A block scopes a revision some Instance still aims at or runs; once none does (the spec moved
        on), it is history, and the Events and the failed rows' lastFailure keep the trace."""
        out = self.out
        live = {self.inputs.target} | {r.running_revision or "" for r in out.rows.values()} | {
            r.target_revision or "" for r in out.rows.values()}
        out.blocks = {name: block for name, block in out.blocks.items() if name in live}

    def finish_commands(self) -> None:
        """A relocating Instance's creates are steered off the node it failed on; the serving flips go out
        as one call per direction and reason."""
        out = self.out
        if out.migrations:
            migrate.stamp_relocations(out.migrations, out.rows)
            out.commands = [_steered(c, out.rows, out.migrations) for c in out.commands]
        out.commands = _batched(out.commands)

    def settle_wake(self) -> None:
        """The pass also wakes when a live pod reaches minReadySeconds (it becomes available without any
        event); a moment not in the future is no wake at all."""
        out = self.out
        for seen in self.inputs.views.values():
            for pod in seen.live:
                out.wake_at = _earliest(out.wake_at, available_at(pod, self.life.min_ready))
        if out.wake_at is not None and out.wake_at <= self.now:
            out.wake_at = None


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
