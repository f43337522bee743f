"""The Instance operations as step machines (seed: InstanceOperation). Pure.

Every operation is recorded on its Instance's status row (`operation`: type, step, deadline,
target revision, pinned strategy) before the commands of its step run, and each step is
level-triggered: a pass looks at the pods, finishes the step whose outcome it sees, and issues the
next step's commands, which are idempotent. A worker killed at any step, or an engine started fresh
from the stored record, resumes at the recorded step with no duplicate pod.

    Create            CreatePods -> WaitReady
    Restart           Drain -> DeletePods -> WaitZero -> Recreate -> WaitReady     (incarnation + 1)
    Update Recreate   the same steps as Restart
    Update Surge      Surge -> WaitReady -> Drain -> DeletePods -> WaitZero        (single-pod: the new
                      pod goes in the free naming slot, then activeOrdinal moves to it)
    Update InPlace    Drain (markNotReadyDuringLifecycle) -> Patch -> WaitReady
    Delete            Drain -> DeletePods -> WaitZero                               (the row goes)

WaitReady is the only step with a deadline (instanceReadyTimeout); its clock is parked (deadline
null, `waiting` KueuePending / AdmissionGated / QuotaExceeded) while the Instance's pods are
admission-gated or a create was refused for capacity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from servingops.activities.replica.types import PodView
from servingops.api_models.ome.enums import InstanceOperationType, OMENativeInstancePhase, UpdateStrategyType
from servingops.api_models.ome.instance_keys import ADMISSION_GATED, KUEUE_PENDING, QUOTA_EXCEEDED
from servingops.api_models.ome.instance_status import InstanceOperation, InstanceTermination, OMENativeInstanceStatus
from servingops.workflows.replica.commands import Command, CreatePods, DeletePods, PatchInPlace, SetServing
from servingops.workflows.replica.instances import InstanceView, all_ready, available
from servingops.workflows.replica.settings import Lifecycle

SURGE = "Surge"
INPLACE = "InPlace"
RECREATE = "Recreate"

PHASE_OF = {
    InstanceOperationType.CREATE: OMENativeInstancePhase.CREATING,
    InstanceOperationType.UPDATE: OMENativeInstancePhase.UPDATING,
    InstanceOperationType.RESTART: OMENativeInstancePhase.RESTARTING,
    InstanceOperationType.MIGRATE: OMENativeInstancePhase.MIGRATING,
    InstanceOperationType.DELETE: OMENativeInstancePhase.DELETING,
}


def mechanism(strategy: str | None, gang: bool) -> str:
    """How an Update moves an Instance, from the strategy pinned on the operation. A gang has no
    second naming slot, so SurgeThenDrain recreates it (under the same budget)."""
    if strategy == UpdateStrategyType.SURGE_THEN_DRAIN and not gang:
        return SURGE
    if strategy in (UpdateStrategyType.IN_PLACE_IF_POSSIBLE, UpdateStrategyType.IN_PLACE_ONLY):
        return INPLACE
    return RECREATE


def first_step(kind: InstanceOperationType, strategy: str | None, gang: bool, mark_not_ready: bool) -> str:
    if kind is InstanceOperationType.CREATE:
        return "CreatePods"
    if kind is InstanceOperationType.UPDATE:
        how = mechanism(strategy, gang)
        if how == SURGE:
            return "Surge"
        if how == INPLACE:
            return "Drain" if mark_not_ready else "Patch"
    return "Drain"


def open_operation(kind: InstanceOperationType, *, op_id: str, target: str, now: datetime, reason: str,
                   strategy: str | None, life: Lifecycle) -> InstanceOperation:
    return InstanceOperation(
        id=op_id, type=kind, step=first_step(kind, strategy, life.gang, life.mark_not_ready), started_at=now,
        last_progress_at=now, target_revision=target, reason=reason, retry_count=0,
        strategy=strategy if kind is InstanceOperationType.UPDATE else None)


@dataclass
class Failure:
    """A WaitReady that ran past its deadline: the revision it aimed at earns a RetryBlock."""

    revision: str
    reason: str
    termination: InstanceTermination | None = None


@dataclass
class Outcome:
    row: OMENativeInstanceStatus
    commands: list[Command] = field(default_factory=list)
    done: bool = False
    remove: bool = False
    failure: Failure | None = None
    draining: set[str] = field(default_factory=set)
    """Pods the gate must keep out of rotation this pass."""
    rejoining: set[str] = field(default_factory=set)
    """Pods of an in-place update found all patched at its Patch step (markNotReadyDuringLifecycle):
    free to rejoin rotation this pass. Before the `in-place-rejoin` patch they were kept draining
    (the planner still does so for histories recorded before it)."""


def canonical_pods(row: OMENativeInstanceStatus, view: InstanceView, life: Lifecycle) -> list[PodView]:
    """The Instance's canonical pods: its active slot (single pod) or its current incarnation (gang)."""
    if life.gang:
        return view.incarnation_pods(row.incarnation or 0)
    return view.slot_pods(row.active_ordinal or 0)


def admission_wait(view: InstanceView) -> str:
    """The Waiting token for an Instance with gated pods: KueuePending when Kueue's gate holds them
    (they name a queue), AdmissionGated for any other scheduling gate."""
    return KUEUE_PENDING if any(pod.gated and pod.queue for pod in view.live) else ADMISSION_GATED


def announce_admission(row: OMENativeInstanceStatus, view: InstanceView) -> str | None:
    """Once per operation, the Warning to record when Kueue says why it holds the Instance's pods
    (Kueue's message is volatile: the Event and the FailedScale condition carry it, the row only the
    KueuePending token). Stamped in row.announced as `KueuePending@<operation id>` (seed: once-only
    messages per episode), and stale stamps of earlier operations dropped."""
    op = row.operation
    episode = f"@{op.id}" if op is not None else None
    mine = [e for e in row.announced or [] if e.startswith(f"{KUEUE_PENDING}@")]
    waiting = op is not None and op.waiting == KUEUE_PENDING
    if not mine and not waiting:
        return None  # leaves the row as it is (a replayed pass of an older history writes the same)
    kept = [e for e in row.announced or [] if e not in mine or (episode and e.endswith(episode))]
    row.announced = kept or None
    if op is None or op.waiting != KUEUE_PENDING or f"{KUEUE_PENDING}{episode}" in kept:
        return None
    said = view.admission_message
    if said is None:
        return None  # Kueue has not tried the Workload yet: wait for its reason
    row.announced = [*kept, f"{KUEUE_PENDING}{episode}"]
    return f"Instance {row.index} waits for Kueue admission: {said}"


def _step(row: OMENativeInstanceStatus, op: InstanceOperation, step: str, now: datetime, *,
          deadline: datetime | None = None) -> None:
    row.operation = op.model_copy(update={"step": step, "last_progress_at": now, "deadline": deadline,
                                          "waiting": None})


def _delete(row: OMENativeInstanceStatus, pods: list[PodView]) -> DeletePods:
    return DeletePods.of(row.index or 0, pods)


def _deadline(now: datetime, life: Lifecycle) -> datetime | None:
    return now + life.ready_timeout if life.ready_timeout else None


def _wait_ready(out: Outcome, op: InstanceOperation, pods: list[PodView], view: InstanceView, now: datetime,
                life: Lifecycle, *, ready: bool) -> bool:
    """Common WaitReady bookkeeping; True when the step is over (ready), False while waiting.
    A deadline passed sets out.failure."""
    row = out.row
    if ready:
        return True
    if view.gated or op.capacity_refused_at is not None:
        # Parked: an admission gate (Kueue's, or another) or a quota refusal holds the pods; the step
        # clock stops, however long the queue is.
        waiting = admission_wait(view) if view.gated else (op.waiting or QUOTA_EXCEEDED)
        row.operation = op.model_copy(update={"deadline": None, "waiting": waiting})
        return False
    if op.deadline is None and life.ready_timeout is not None:
        row.operation = op.model_copy(update={"deadline": _deadline(now, life), "waiting": None})
        return False
    if op.deadline is not None and now >= op.deadline:
        termination = next((pod.last_termination for pod in pods if pod.last_termination), None)
        out.failure = Failure(revision=op.target_revision or "", termination=termination, reason=(
            f"Instance {row.index} was not Ready within {life.ready_timeout} at revision {op.target_revision}"))
    return False


def advance(row: OMENativeInstanceStatus, view: InstanceView, life: Lifecycle, now: datetime) -> Outcome:
    """One pass of the Instance's recorded operation."""
    out = Outcome(row=row.model_copy(deep=True))
    op = out.row.operation
    assert op is not None and op.type is not None
    if op.type is InstanceOperationType.CREATE:
        _advance_create(out, op, view, life, now)
    elif op.type is InstanceOperationType.DELETE:
        _advance_teardown(out, op, view, life, now, recreate=False)
    elif op.type is InstanceOperationType.RESTART:
        _advance_teardown(out, op, view, life, now, recreate=True)
    elif op.type is InstanceOperationType.UPDATE:
        how = mechanism(op.strategy, life.gang)
        if how == SURGE:
            _advance_surge(out, op, view, life, now)
        elif how == RECREATE or op.step in ("DeletePods", "WaitZero", "Recreate"):
            # (an in-place update turned recreate by to_recreate() goes on down the recreate path)
            _advance_teardown(out, op, view, life, now, recreate=True)
        else:
            _advance_in_place(out, op, view, life, now)
    if out.done:
        out.row.operation = None
    return out


def _advance_create(out: Outcome, op: InstanceOperation, view: InstanceView, life: Lifecycle, now: datetime) -> None:
    row = out.row
    pods = canonical_pods(row, view, life)
    target = op.target_revision or ""
    if op.step in ("CreatePods", "Recreate"):
        if len(pods) >= life.pods_per_instance:
            _step(row, op, "WaitReady", now, deadline=_deadline(now, life))
            op = row.operation  # type: ignore[assignment]
        else:
            out.commands.append(CreatePods(index=row.index or 0, revision=target, incarnation=row.incarnation or 0,
                                           slot=row.active_ordinal or 0))
            return
    assert op is not None
    ready = all_ready(pods, life.pods_per_instance) and all(pod.revision == target for pod in pods)
    if _wait_ready(out, op, pods, view, now, life, ready=ready):
        _finish_on(row, target, pods, now)
        out.done = True
    elif len(pods) < life.pods_per_instance and out.failure is None:
        # A pod vanished while we waited: create it again (idempotent by name).
        out.commands.append(CreatePods(index=row.index or 0, revision=target, incarnation=row.incarnation or 0,
                                       slot=row.active_ordinal or 0))


def _finish_on(row: OMENativeInstanceStatus, revision: str, pods: list[PodView], now: datetime) -> None:
    row.running_revision = revision
    row.target_revision = revision
    since = [pod.ready_since for pod in pods if pod.ready_since is not None]
    row.ready_since = max(since) if since else now
    row.phase = OMENativeInstancePhase.READY


def _take_down(out: Outcome, op: InstanceOperation, victims: list[PodView], now: datetime, *,
               drain_steps: tuple[str, ...]) -> InstanceOperation | None:
    """Drain (ome.io/serving False) -> DeletePods for `victims`. The operation once it has reached
    WaitZero; None while this pass's command still has to land (the next pass goes on)."""
    row = out.row
    out.draining = {pod.name for pod in victims}
    if op.step in drain_steps:
        still = [pod for pod in victims if pod.serving is True]
        if still:
            out.commands.append(SetServing(pods=tuple(sorted(pod.name for pod in still)), serving=False,
                                           reason="Draining"))
            return None
        _step(row, op, "DeletePods", now)
        op = row.operation  # type: ignore[assignment]
    if op.step == "DeletePods":
        if victims:
            out.commands.append(_delete(row, victims))
            return None
        _step(row, op, "WaitZero", now)
        op = row.operation  # type: ignore[assignment]
    return op


def _advance_teardown(out: Outcome, op: InstanceOperation, view: InstanceView, life: Lifecycle, now: datetime, *,
                      recreate: bool) -> None:
    """Drain -> DeletePods -> WaitZero, then (recreate) Recreate -> WaitReady at the target."""
    row = out.row
    if op.step in ("Recreate", "WaitReady"):
        _advance_create(out, op, view, life, now)
        return
    taken = _take_down(out, op, view.live, now, drain_steps=("Drain", "Patch", "Surge"))
    if taken is None:
        return
    op = taken
    if op.step == "WaitZero":
        if view.pods:  # still terminating
            return
        if not recreate:
            out.done = out.remove = True
            return
        row.incarnation = (row.incarnation or 0) + 1
        row.active_ordinal = row.active_ordinal or 0
        row.running_revision = None
        row.ready_since = None
        _step(row, op, "Recreate", now)
        assert row.operation is not None
        out.commands.append(CreatePods(index=row.index or 0, revision=op.target_revision or "",
                                       incarnation=row.incarnation, slot=row.active_ordinal))


def _advance_surge(out: Outcome, op: InstanceOperation, view: InstanceView, life: Lifecycle, now: datetime) -> None:
    row = out.row
    active = row.active_ordinal or 0
    spare = 1 - active
    target = op.target_revision or ""
    new = view.slot_pods(spare)
    old = view.slot_pods(active)
    if op.step == "Surge":
        stale = [pod for pod in new if pod.revision != target]
        if stale:  # left by an attempt at another revision: clear the slot first
            out.draining = {pod.name for pod in stale}
            out.commands.append(_delete(row, stale))
            return
        if view.pods and any(pod.deleting and pod.slot == spare for pod in view.pods):
            return
        if not new:
            out.commands.append(CreatePods(index=row.index or 0, revision=target, incarnation=row.incarnation or 0,
                                           slot=spare))
            return
        _step(row, op, "WaitReady", now, deadline=_deadline(now, life))
        op = row.operation  # type: ignore[assignment]
    assert op is not None
    if op.step == "WaitReady":
        ready = bool(new) and all(available(pod, now, life.min_ready) for pod in new)
        if not new:
            out.commands.append(CreatePods(index=row.index or 0, revision=target, incarnation=row.incarnation or 0,
                                           slot=spare))
            return
        if not _wait_ready(out, op, new, view, now, life, ready=ready):
            if out.failure is not None:
                # Give the slot back: the old pod never left rotation.
                out.draining = {pod.name for pod in new}
                out.commands.append(_delete(row, new))
            return
        _step(row, op, "Drain", now)
        op = row.operation  # type: ignore[assignment]
    assert op is not None
    taken = _take_down(out, op, old, now, drain_steps=("Drain",))
    if taken is None:
        return
    op = taken
    if op.step == "WaitZero":
        if any(pod.slot == active for pod in view.pods):
            return
        row.active_ordinal = spare
        _finish_on(row, target, new, now)
        out.done = True


def _advance_in_place(out: Outcome, op: InstanceOperation, view: InstanceView, life: Lifecycle,
                      now: datetime) -> None:
    row = out.row
    target = op.target_revision or ""
    pods = canonical_pods(row, view, life)
    behind = [pod for pod in pods if pod.revision != target]
    if op.step == "Drain":
        out.draining = {pod.name for pod in pods}
        still = [pod for pod in pods if pod.serving is True]
        if still:
            out.commands.append(SetServing(pods=tuple(sorted(pod.name for pod in still)), serving=False,
                                           reason="InPlaceUpdate"))
            return
        _step(row, op, "Patch", now)
        op = row.operation  # type: ignore[assignment]
    assert op is not None
    if op.step == "Patch":
        if behind:
            if life.mark_not_ready:
                out.draining = {pod.name for pod in pods}
            out.commands.extend(PatchInPlace(index=row.index or 0, pod=pod.name, revision=target) for pod in behind)
            return
        if life.mark_not_ready:
            # Out of rotation only while a patch is still to land: a pass that finds every pod
            # patched goes on to WaitReady (and may finish) at once, and its pods must then be free
            # to rejoin through the gate. Kept draining here they stayed out until the next resync
            # (5 min) once the update finished in this pass: nothing on the pod changes afterwards,
            # so no pod event wakes another pass (seen end to end: ome.io/serving False on a Ready
            # Instance, the rollout held on Budget). The planner keeps them draining for older
            # histories.
            out.rejoining = {pod.name for pod in pods}
        _step(row, op, "WaitReady", now, deadline=_deadline(now, life))
        op = row.operation  # type: ignore[assignment]
    assert op is not None
    ready = all_ready(pods, life.pods_per_instance) and not behind
    if _wait_ready(out, op, pods, view, now, life, ready=ready):
        _finish_on(row, target, pods, now)
        out.done = True


def to_recreate(op: InstanceOperation, now: datetime, reason: str) -> InstanceOperation:
    """InPlaceIfPossible met a change the apiserver cannot apply in place: the same operation goes
    on as a recreate (the strategy stays pinned; the step path changes)."""
    return op.model_copy(update={"step": "DeletePods", "last_progress_at": now,
                                 "reason": f"{op.reason or 'Update'}; recreating: {reason}"[:256]})


def backoff(attempts: int) -> timedelta:
    """RetryBlock delay after the n-th failed attempt at a revision: 10 s doubling, at most 10 min."""
    delay: timedelta = timedelta(seconds=10) * (2 ** max(0, attempts - 1))
    return min(delay, timedelta(minutes=10))
