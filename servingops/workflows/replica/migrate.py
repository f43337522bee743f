"""Surge migration of one Instance (seed: MigrationStatus, InstanceOperation type Migrate). Pure.

The replica workflow is the executor: status.migrations holds one record per request UUID, and the
source Instance's row carries the Migrate operation (surgeIndex, fromNode, hintTargetNodes,
requestUUID) while it runs. Like every operation, what a pass decides is written to status before
its commands run, so the surge index is on the object before any surge pod exists.

    Accepted (queued)  -> SurgePending   surge index = lowest index no row, pod or record uses;
                                         step Surge: the surge pods (preferred affinity to the hint
                                         nodes, required anti-affinity to fromNode), put in rotation
                                         once their containers are ready
    SurgePending       -> SurgeReady     every surge pod Available (serving + minReadySeconds);
                                         step Drain: the source's ome.io/serving gate set False
    SurgeReady         -> Draining       the source is out of rotation; wait until no Ready
                                         EndpointSlice endpoint names a source pod
    Draining           -> Completed      DeletePods -> WaitZero; the source row goes and the surge
                                         index gets a Ready row (indexes become sparse)

    deadline passed before the drain     step Abort: surge pods deleted, the source never left
                                         rotation -> Failed (MigrationExpired)
    surge pods still there WEDGE_AFTER   Failed (MigrationSurgeWedged); the index stays reserved and
      after the abort began              the pods are deleted again on every pass until they go

The surge Instance has no row until it completes: the replica's Instance count, the scale step and
the update step never see it, so a scale or a rollout cannot take it for an Instance of theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from servingops.api_models.contract.migration import MigrationAsk
from servingops.api_models.ome.enums import (
    InstanceOperationType,
    MigrationPhase,
    MigrationTrigger,
    OMENativeInstancePhase,
)
from servingops.api_models.ome.instance_status import InstanceOperation, OMENativeInstanceStatus
from servingops.api_models.ome.migration import MigrationStatus
from servingops.workflows.replica.commands import Command, CreatePods, DeletePods, SetServing
from servingops.workflows.replica.instances import InstanceView, available
from servingops.workflows.replica.operations import canonical_pods
from servingops.workflows.replica.settings import Lifecycle

TERMINAL = frozenset({MigrationPhase.COMPLETED, MigrationPhase.FAILED, MigrationPhase.RELOCATED})
DEFAULT_READY_TIMEOUT = timedelta(minutes=30)
"""The deadline of a Manual request when neither the spec nor the operator sets instanceReadyTimeout."""
WEDGE_AFTER = timedelta(minutes=2)
"""How long aborted surge pods may take to go before the record says MigrationSurgeWedged."""
RELOCATE = "Relocate"
"""The reason of a Restart that relocates an Instance (Trigger Auto); its pods avoid the record's fromNode."""
QUEUE_POLL = timedelta(seconds=2)
"""A queued record is looked at again this often (a cap or a busy source may have cleared)."""
EXPIRED = "MigrationExpired"
WEDGED = "MigrationSurgeWedged"
CANCELLED = "MigrationCancelled"
SUPERSEDED = "MigrationSuperseded"


@dataclass(frozen=True)
class Caps:
    max_in_flight: int = 1
    per_window: int = 10
    window: timedelta = timedelta(hours=1)
    auto_max_attempts: int = 2
    """Automatic relocations of one Instance in a row (autoMigrate.maxAttempts; 0: never)."""


DEFAULT_CAPS = Caps()


@dataclass(frozen=True)
class Note:
    type: str
    reason: str
    message: str


def terminal(record: MigrationStatus) -> bool:
    return record.phase in TERMINAL


def instance_node(row: OMENativeInstanceStatus, view: InstanceView | None, life: Lifecycle) -> str | None:
    """The node an Instance runs on: its canonical (anchor) pod's."""
    if view is None:
        return None
    pods = canonical_pods(row, view, life)
    return next((pod.node for pod in pods if pod.node), None)


# -- acceptance ---------------------------------------------------------------------------------

@dataclass
class Judged:
    records: list[MigrationStatus]
    record: MigrationStatus
    note: Note | None = None


def accept(ask: MigrationAsk, records: list[MigrationStatus], rows: dict[int, OMENativeInstanceStatus],
           views: dict[int, InstanceView], life: Lifecycle, *, never: bool, caps: Caps, now: datetime) -> Judged:
    """Judge a Manual request against what the replica owns and record it: Accepted (deadline = now +
    instanceReadyTimeout) or Failed with the precise reason. A UUID already recorded is answered
    with its record and changes nothing."""
    for record in records:
        if record.request_uuid == ask.request_uuid:
            return Judged(records=records, record=record)
    refusal = _refusal(ask, records, rows, views, life, never=never, caps=caps, now=now)
    base = MigrationStatus(request_uuid=ask.request_uuid, trigger=MigrationTrigger.MANUAL,
                           source_instance=ask.source_instance, from_node=ask.from_node,
                           hint_target_nodes=list(ask.hint_target_nodes) or None, reason=ask.reason or None,
                           started_at=now)
    if refusal is not None:
        reason, message = refusal
        record = base.model_copy(update={"phase": MigrationPhase.FAILED, "message": f"{reason}: {message}",
                                         "completed_at": now})
        note = Note("Warning", reason, f"migration {ask.request_uuid} of Instance {ask.source_instance}: {message}")
    else:
        timeout = life.ready_timeout or DEFAULT_READY_TIMEOUT
        record = base.model_copy(update={"phase": MigrationPhase.ACCEPTED, "deadline": now + timeout,
                                         "message": "accepted; waiting to be executed"})
        note = Note("Normal", "MigrationAccepted", f"migration {ask.request_uuid}: Instance {ask.source_instance} "
                    f"off {ask.from_node}, deadline {(now + timeout).strftime('%Y-%m-%dT%H:%M:%SZ')}")
    return Judged(records=[*records, record], record=record, note=note)


def _refusal(ask: MigrationAsk, records: list[MigrationStatus], rows: dict[int, OMENativeInstanceStatus],
             views: dict[int, InstanceView], life: Lifecycle, *, never: bool, caps: Caps,
             now: datetime) -> tuple[str, str] | None:
    if never:
        return "MigrationPolicyNever", "lifecycle.migrationPolicy.mode is Never: migration requests are refused"
    row = rows.get(ask.source_instance)
    if row is None or (row.operation is not None and row.operation.type is InstanceOperationType.DELETE):
        known = ", ".join(str(i) for i in sorted(rows)) or "none"
        return "InstanceNotFound", f"Instance {ask.source_instance} does not exist (Instances: {known})"
    node = instance_node(row, views.get(ask.source_instance), life)
    if node is None:
        return "InstanceNotScheduled", f"Instance {ask.source_instance} has no pod on a node to move it off"
    if node != ask.from_node:
        return "FromNodeMismatch", f"Instance {ask.source_instance} runs on {node}, not on {ask.from_node}"
    recent = [r for r in records if r.trigger is MigrationTrigger.MANUAL and r.started_at is not None
              and r.started_at > now - caps.window and not refused_at_acceptance(r)]
    if len(recent) >= caps.per_window:
        return "MigrationRateLimited", (f"maxMigrationsPerWindow {caps.per_window} reached: {len(recent)} "
                                        f"migration(s) accepted within {_text(caps.window)}")
    return None


def refused_at_acceptance(record: MigrationStatus) -> bool:
    """Failed at acceptance (never allocated, never queued work)."""
    return record.phase is MigrationPhase.FAILED and record.allocated_at is None and record.deadline is None


def _text(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 3600}h" if seconds % 3600 == 0 else f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


# -- execution ----------------------------------------------------------------------------------

@dataclass
class Inputs:
    rows: dict[int, OMENativeInstanceStatus]
    """The pass's rows (the planner's copies: changed in place)."""
    views: dict[int, InstanceView]
    life: Lifecycle
    records: list[MigrationStatus]
    now: datetime
    caps: Caps
    op_id: str
    """The Migrate operation id prefix for this pass."""
    ready_endpoints: frozenset[str] | None = None
    """Pods with a Ready endpoint in the replica's EndpointSlices (read while a migration drains)."""
    cancel: frozenset[str] = frozenset()


@dataclass
class Outcome:
    records: list[MigrationStatus]
    commands: list[Command] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    draining: set[str] = field(default_factory=set)
    reserved: set[int] = field(default_factory=set)
    """Indexes held by a surge: never adopted, never given to a new Instance."""
    opened: int = 0
    wake_at: datetime | None = None


def reserved(records: list[MigrationStatus], views: dict[int, InstanceView]) -> set[int]:
    """Surge indexes a migration holds: every non-terminal record's, and a terminal one's while its
    surge pods are still there (a wedged or superseded surge)."""
    held = set()
    for record in records:
        index = record.surge_instance
        if index is None or record.phase is MigrationPhase.COMPLETED:
            continue
        if not terminal(record) or (views.get(index) and views[index].pods):
            held.add(index)
    return held


def needs_endpoints(rows: dict[int, OMENativeInstanceStatus]) -> bool:
    return any(r.operation is not None and r.operation.type is InstanceOperationType.MIGRATE
               and r.operation.step == "Drain" for r in rows.values())


def run(inputs: Inputs) -> Outcome:
    out = Outcome(records=[r.model_copy(deep=True) for r in inputs.records])
    out.reserved = reserved(out.records, inputs.views)
    in_flight = sum(1 for r in out.records if not terminal(r) and r.allocated_at is not None)
    # First accepted, first executed (records are appended in the order they were judged).
    order = sorted(range(len(out.records)), key=lambda i: (out.records[i].started_at or inputs.now, i))
    for i in order:
        record = out.records[i]
        if terminal(record):
            _sweep(out, inputs, record)
            continue
        if record.allocated_at is None:
            if record.started_at == inputs.now and record.request_uuid not in inputs.cancel:
                # Accepted this pass: the record goes on the object as Accepted before any execution.
                _wake(out, inputs.now + QUEUE_POLL)
            elif _pickup(out, inputs, record, room=in_flight < inputs.caps.max_in_flight):
                in_flight += 1
            elif not terminal(record):
                _wake(out, inputs.now + QUEUE_POLL)
        else:
            _advance(out, inputs, record)
        if not terminal(record) and record.deadline is not None and record.phase in (
                MigrationPhase.ACCEPTED, MigrationPhase.SURGE_PENDING):
            _wake(out, record.deadline)
    window_start = inputs.now - inputs.caps.window
    out.records = [r for r in out.records if not (
        terminal(r) and r.completed_at is not None and r.completed_at < window_start
        and (r.surge_instance is None or r.surge_instance not in out.reserved))]
    return out


def _wake(out: Outcome, at: datetime) -> None:
    out.wake_at = at if out.wake_at is None else min(out.wake_at, at)


def _finish(out: Outcome, inputs: Inputs, record: MigrationStatus, phase: MigrationPhase, reason: str | None,
            message: str, *, warning: bool) -> None:
    record.phase = phase
    record.completed_at = inputs.now
    record.message = f"{reason}: {message}" if reason else message
    out.notes.append(Note("Warning" if warning else "Normal", reason or "MigrationCompleted",
                          f"migration {record.request_uuid}: {message}"))


def _sweep(out: Outcome, inputs: Inputs, record: MigrationStatus) -> None:
    """A terminal record whose surge pods are still there: delete them again (idempotent)."""
    index = record.surge_instance
    if index is None or record.phase is MigrationPhase.COMPLETED:
        return
    view = inputs.views.get(index)
    if view is not None and view.live:
        out.draining |= {pod.name for pod in view.live}
        out.commands.append(DeletePods.of(index, view.live))


def _pickup(out: Outcome, inputs: Inputs, record: MigrationStatus, *, room: bool) -> bool:
    """A queued (Accepted) record: expire, cancel, wait, or allocate its surge index and open the
    Migrate operation on the source. True when it started executing."""
    now, life = inputs.now, inputs.life
    source = record.source_instance if record.source_instance is not None else -1
    if record.request_uuid in inputs.cancel:
        _finish(out, inputs, record, MigrationPhase.FAILED, CANCELLED, "cancelled while queued", warning=True)
        return False
    if record.deadline is not None and now >= record.deadline:
        _finish(out, inputs, record, MigrationPhase.FAILED, EXPIRED,
                f"still queued at its deadline; Instance {source} was not moved", warning=True)
        return False
    row = inputs.rows.get(source)
    if row is None:
        _finish(out, inputs, record, MigrationPhase.FAILED, "InstanceNotFound",
                f"Instance {source} no longer exists", warning=True)
        return False
    if life.paused:
        record.message = "queued: the replica is paused"
        return False
    if row.operation is not None:
        record.message = f"queued: Instance {source} has a {row.operation.type} operation in flight"
        return False
    if not room:
        record.message = (f"queued: maxInFlightMigrations {inputs.caps.max_in_flight} reached "
                          "(another migration of this replica is executing)")
        return False
    taken = set(inputs.rows) | set(inputs.views) | out.reserved
    index = 0
    while index in taken:
        index += 1
    out.reserved.add(index)
    record.surge_instance = index
    record.allocated_at = now
    record.phase = MigrationPhase.SURGE_PENDING
    record.message = f"surge Instance {index} allocated"
    row.operation = InstanceOperation(
        id=f"{inputs.op_id}-{source}-m", type=InstanceOperationType.MIGRATE, step="Surge", started_at=now,
        last_progress_at=now, deadline=record.deadline, target_revision=row.running_revision or row.target_revision,
        reason=(record.reason or "Migration")[:256], retry_count=0, surge_index=index, from_node=record.from_node,
        hint_target_nodes=list(record.hint_target_nodes or []) or None, request_uuid=record.request_uuid)
    row.phase = OMENativeInstancePhase.MIGRATING
    out.opened += 1
    out.notes.append(Note("Normal", "MigrationSurgePending",
                          f"migration {record.request_uuid}: surge Instance {index} for Instance {source}"))
    _advance(out, inputs, record)
    return True


def _advance(out: Outcome, inputs: Inputs, record: MigrationStatus) -> None:
    now, life = inputs.now, inputs.life
    source = record.source_instance if record.source_instance is not None else -1
    index = record.surge_instance if record.surge_instance is not None else -1
    row = inputs.rows.get(source)
    op = row.operation if row is not None else None
    surge_view = inputs.views.get(index) or InstanceView(index=index)
    if row is None or op is None or op.type is not InstanceOperationType.MIGRATE or (
            op.request_uuid != record.request_uuid):
        # The source was taken by another operation (a scale-down) or vanished: give the surge up.
        _finish(out, inputs, record, MigrationPhase.FAILED, SUPERSEDED,
                f"Instance {source} left the migration (scaled away or replaced); surge Instance {index} removed",
                warning=True)
        _sweep(out, inputs, record)
        return
    source_view = inputs.views.get(source) or InstanceView(index=source)
    source_pods = canonical_pods(row, source_view, life)
    if life.paused:
        if op.step not in ("Surge", "Abort"):
            out.draining |= {pod.name for pod in source_pods}
        return
    if op.step == "Surge" and record.request_uuid in inputs.cancel:
        record.message = f"{CANCELLED}: removing surge Instance {index}"
        _step(row, op, "Abort", now)
        op = row.operation
    elif op.step == "Surge" and record.deadline is not None and now >= record.deadline:
        record.message = f"{EXPIRED}: removing surge Instance {index}"
        _step(row, op, "Abort", now)
        op = row.operation
    assert op is not None
    if op.step == "Abort":
        _abort(out, inputs, record, row, op, surge_view)
        return
    if op.step == "Surge":
        surge = surge_view.live
        if len(surge) < life.pods_per_instance:
            out.commands.append(CreatePods(index=index, revision=op.target_revision or "", incarnation=0, slot=0,
                                           preferred_nodes=tuple(record.hint_target_nodes or ()),
                                           avoid_node=record.from_node))
            return
        joining = [pod for pod in surge if pod.containers_ready and pod.serving is not True and not pod.deleting]
        if joining:
            out.commands.append(SetServing(pods=tuple(sorted(p.name for p in joining)), serving=True, reason="Ready"))
            return
        if not all(available(pod, now, life.min_ready) for pod in surge):
            return
        record.phase = MigrationPhase.SURGE_READY
        nodes = sorted({pod.node for pod in surge if pod.node})
        record.message = f"surge Instance {index} is Available on {', '.join(nodes) or 'its node'}"
        out.notes.append(Note("Normal", "MigrationSurgeReady", f"migration {record.request_uuid}: {record.message}"))
        _step(row, op, "Drain", now)
        op = row.operation
    assert op is not None
    out.draining |= {pod.name for pod in source_pods}
    if op.step == "Drain":
        still = [pod for pod in source_pods if pod.serving is True]
        if still:
            out.commands.append(SetServing(pods=tuple(sorted(p.name for p in still)), serving=False,
                                           reason="Migrating"))
            return
        if record.phase is not MigrationPhase.DRAINING:
            record.phase = MigrationPhase.DRAINING
            record.message = f"Instance {source} is out of rotation; waiting for its endpoints to leave"
            out.notes.append(Note("Normal", "MigrationDraining", f"migration {record.request_uuid}: {record.message}"))
        if inputs.ready_endpoints is None:
            return
        lingering = sorted(pod.name for pod in source_pods if pod.name in inputs.ready_endpoints)
        if lingering:
            record.message = f"waiting for the Ready endpoints of {', '.join(lingering)} to leave"
            return
        _step(row, op, "DeletePods", now)
        op = row.operation
    assert op is not None
    if op.step == "DeletePods":
        live = source_view.live
        if live:
            out.commands.append(DeletePods.of(source, live))
            return
        _step(row, op, "WaitZero", now)
        op = row.operation
    assert op is not None
    if op.step == "WaitZero":
        if source_view.pods:
            return
        surge = surge_view.live
        since = [pod.ready_since for pod in surge if pod.ready_since is not None]
        del inputs.rows[source]
        inputs.rows[index] = OMENativeInstanceStatus(
            index=index, incarnation=0, active_ordinal=0, running_revision=op.target_revision,
            target_revision=op.target_revision, phase=OMENativeInstancePhase.READY,
            ready_since=max(since) if since else now, last_failure=None)
        nodes = sorted({pod.node for pod in surge if pod.node})
        out.reserved.discard(index)
        _finish(out, inputs, record, MigrationPhase.COMPLETED, None,
                f"Instance {source} moved off {record.from_node} to {', '.join(nodes) or 'a node'} as Instance "
                f"{index}", warning=False)


def _abort(out: Outcome, inputs: Inputs, record: MigrationStatus, row: OMENativeInstanceStatus,
           op: InstanceOperation, surge_view: InstanceView) -> None:
    """Expired or cancelled before the drain: the surge goes, the source never left rotation."""
    index = record.surge_instance if record.surge_instance is not None else -1
    # Why the abort began is the record's message token, written when it began (status survives a restart).
    why = CANCELLED if (record.message or "").startswith(CANCELLED) else EXPIRED
    if surge_view.live:
        out.draining |= {pod.name for pod in surge_view.live}
        out.commands.append(DeletePods.of(index, surge_view.live))
    if surge_view.pods:
        started = op.last_progress_at or inputs.now
        if inputs.now - started < WEDGE_AFTER:
            return
        row.operation = None
        names = ", ".join(sorted(p.name for p in surge_view.pods))
        _finish(out, inputs, record, MigrationPhase.FAILED, WEDGED,
                f"{why}; surge Instance {index} could not be made Ready and its pods ({names}) did not go within "
                f"{_text(WEDGE_AFTER)}; Instance {record.source_instance} keeps serving", warning=True)
        return
    row.operation = None
    text = "cancelled" if why == CANCELLED else (
        f"surge Instance {index} was not Available by the deadline "
        f"{record.deadline.strftime('%Y-%m-%dT%H:%M:%SZ') if record.deadline else ''}")
    _finish(out, inputs, record, MigrationPhase.FAILED, why,
            f"{text}; surge removed, Instance {record.source_instance} keeps serving", warning=True)


def _step(row: OMENativeInstanceStatus, op: InstanceOperation, step: str, now: datetime) -> None:
    row.operation = op.model_copy(update={"step": step, "last_progress_at": now})


# -- automatic relocation (Trigger Auto) ---------------------------------------------------------

def relocation(row: OMENativeInstanceStatus, view: InstanceView, life: Lifecycle, records: list[MigrationStatus],
               caps: Caps, *, never: bool, op_id: str, now: datetime) -> MigrationStatus | None:
    """Deadline disposition: an Instance whose pods sit on a node and were not Ready by the
    deadline is recreated away from that node, up to caps.auto_max_attempts in a row. The born-
    terminal Relocated record, or None when it is not relocated (the usual failure follows)."""
    index = row.index or 0
    node = instance_node(row, view, life)
    if never or node is None or view.gated or caps.auto_max_attempts <= 0:
        return None
    attempts = len(_relocation_series(records, index))
    if attempts >= caps.auto_max_attempts:
        return None
    return MigrationStatus(
        request_uuid=f"auto-{op_id}", trigger=MigrationTrigger.AUTO, source_instance=index, from_node=node,
        phase=MigrationPhase.RELOCATED, attempt=attempts + 1, reason="InstanceReadyTimeout",
        message=f"Instance {index} was not Ready on {node} by its deadline; recreated away from it "
                f"(attempt {attempts + 1} of {caps.auto_max_attempts})",
        started_at=now, completed_at=now)


def _relocation_series(records: list[MigrationStatus], index: int) -> list[MigrationStatus]:
    """The Instance's relocations since it was last Ready after one (succeeded not True)."""
    series: list[MigrationStatus] = []
    for record in records:
        if record.trigger is MigrationTrigger.AUTO and record.source_instance == index:
            series = [] if record.succeeded else [*series, record]
    return series


def avoided_node(row: OMENativeInstanceStatus, records: list[MigrationStatus]) -> str | None:
    """The node a relocating Instance's new pods must avoid (the latest Relocated record's)."""
    op = row.operation
    if op is None or op.type is not InstanceOperationType.RESTART or op.reason != RELOCATE:
        return None
    series = _relocation_series(records, row.index or 0)
    return series[-1].from_node if series else None


def stamp_relocations(records: list[MigrationStatus], rows: dict[int, OMENativeInstanceStatus]) -> None:
    """succeeded True once the relocated Instance is Ready with no operation; False on an attempt
    that another relocation followed."""
    latest: dict[int, MigrationStatus] = {}
    for record in records:
        if record.trigger is not MigrationTrigger.AUTO or record.succeeded is not None:
            continue
        index = record.source_instance if record.source_instance is not None else -1
        if index in latest:
            latest[index].succeeded = False
        latest[index] = record
    for index, record in latest.items():
        row = rows.get(index)
        if row is not None and row.operation is None and row.phase is OMENativeInstancePhase.READY:
            record.succeeded = True
