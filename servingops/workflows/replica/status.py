"""InferenceReplicaStatus from one pass: the per-Instance rows with their pod counts, every replica
count the seed defines, the conditions (Available, Progressing, FailedScale, FailedUpdate,
GangSchedulingUnavailable, OperationStuck), rolloutHold, retryBlocks and traffic. Pure.

The rows are written DenseV1 (instanceStatuses) while they fit the budget of
api_models/ome/instance_columns.py, ColumnarV2 beyond; both decode to the same rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from servingops.api_models.ome.enums import InstanceOperationType, OMENativeInstancePhase
from servingops.api_models.ome.instance_columns import with_rows
from servingops.api_models.ome.instance_keys import KUEUE_PENDING, QUOTA_EXCEEDED
from servingops.api_models.ome.instance_status import OMENativeInstanceStatus, RetryBlock
from servingops.api_models.ome.lifecycle import RolloutHold
from servingops.api_models.refs import ConditionUpdate
from servingops.workflows.replica.instances import InstanceView, available, serving
from servingops.workflows.replica.planner import Hold
from servingops.workflows.replica.settings import Lifecycle

STUCK_AFTER = timedelta(minutes=10)
"""A step other than WaitReady (which has its own deadline) that has not moved for this long, e.g. a
pod a finalizer keeps from going, is reported as OperationStuck."""


@dataclass(frozen=True)
class Revisions:
    update: str
    """The spec's own revision (status.updateRevision, also under a rollback)."""
    target: str
    """What Instances converge to: `update`, or the rollbackToRevision template."""
    current: str
    collision_count: int
    pairing_protocol: str | None = None


@dataclass(frozen=True)
class Problems:
    """What the pass met that the conditions report."""

    refused: str | None = None
    """The last pod create refused for capacity (the apiserver's message)."""
    invalid: tuple[str, str] | None = None
    """(reason, message) when the spec cannot be rendered."""


def counted_rows(rows: dict[int, OMENativeInstanceStatus], views: dict[int, InstanceView], life: Lifecycle,
                 now: datetime) -> list[OMENativeInstanceStatus]:
    """The rows with the pod counts of this moment, in index order. readyPodCount,
    scheduledPodCount and nodesOccupied stay unset (seed: not persisted)."""
    out = []
    for index in sorted(rows):
        view = views.get(index) or InstanceView(index=index)
        live = view.live
        row = rows[index].model_copy(update={
            "pod_count": len(live),
            "serving_pod_count": sum(1 for pod in live if serving(pod)),
            "available_pod_count": sum(1 for pod in live if available(pod, now, life.min_ready)),
            "admitted": view.admitted,
            "ready_pod_count": None, "scheduled_pod_count": None, "nodes_occupied": None,
        })
        out.append(row)
    return out


def current_revision(rows: list[OMENativeInstanceStatus], revisions: Revisions, previous: str) -> str:
    """CurrentRevision moves to the target once every Instance runs it with no operation left (the
    StatefulSet rule); before the first rollout completes it is the first revision."""
    done = rows and all(r.running_revision == revisions.target and r.operation is None for r in rows)
    if done:
        return revisions.update if revisions.target == revisions.update else revisions.target
    return previous or revisions.update


def rollout_hold(hold: Hold | None, previous: RolloutHold | None, now: datetime, *,
                 complete: bool) -> RolloutHold | None:
    """Since is kept while the same gate and target keep reporting (seed)."""
    if hold is None or complete:
        return None
    since = previous.since if previous and previous.gate == hold.gate and previous.target == hold.target else now
    return RolloutHold(gate=hold.gate, reason=hold.reason, target=hold.target, since=since)


def traffic(rows: list[OMENativeInstanceStatus], revisions: Revisions) -> list[dict[str, Any]]:
    """Per-revision weights as the headless Service spreads them: each revision's share of the
    serving Instances (largest remainder, summing to 100)."""
    serving_by: dict[str, int] = {}
    for row in rows:
        if (row.serving_pod_count or 0) > 0 and row.running_revision:
            serving_by[row.running_revision] = serving_by.get(row.running_revision, 0) + 1
    total = sum(serving_by.values())
    if not total:
        return []
    shares = {rev: n * 100 / total for rev, n in serving_by.items()}
    percents = {rev: int(share) for rev, share in shares.items()}
    for rev in sorted(shares, key=lambda r: (-(shares[r] - percents[r]), r))[:100 - sum(percents.values())]:
        percents[rev] += 1
    out = []
    for rev in sorted(percents):
        entry: dict[str, Any] = {"revisionName": rev, "percent": percents[rev],
                                 "latestRevision": rev == revisions.update}
        if revisions.pairing_protocol:
            entry["pairingProtocol"] = revisions.pairing_protocol
        out.append(entry)
    return out


def build(rows: dict[int, OMENativeInstanceStatus], views: dict[int, InstanceView], life: Lifecycle, *,
          generation: int, revisions: Revisions, label_selector: str, blocks: dict[str, RetryBlock],
          hold: Hold | None, previous_hold: RolloutHold | None, problems: Problems,
          now: datetime) -> tuple[dict[str, Any], list[ConditionUpdate], RolloutHold | None]:
    """The status merge patch, the conditions, and the rollout hold to remember."""
    listed = counted_rows(rows, views, life, now)
    per = life.pods_per_instance
    ready = [r for r in listed if _ready_count(views.get(r.index or 0)) >= per]
    serving_n = sum(1 for r in listed if (r.serving_pod_count or 0) >= per)
    available_n = sum(1 for r in listed if (r.available_pod_count or 0) >= per)
    updated = [r for r in listed if r.running_revision == revisions.update]
    updated_ready = [r for r in updated if r in ready]
    in_flight = [r for r in listed if r.operation is not None]
    complete = not in_flight and len(listed) == life.desired and all(
        r.running_revision == revisions.target for r in listed)
    held = rollout_hold(hold, previous_hold, now, complete=complete)

    status: dict[str, Any] = {
        "observedGeneration": generation,
        "replicas": len(listed),
        "readyReplicas": len(ready),
        "servingReplicas": serving_n,
        "availableReplicas": available_n,
        "updatedReplicas": len(updated),
        "updatedReadyReplicas": len(updated_ready),
        "currentRevision": revisions.current,
        "updateRevision": revisions.update,
        "collisionCount": revisions.collision_count,
        "labelSelector": label_selector,
        "retryBlocks": [b.model_dump(by_alias=True, exclude_none=True, mode="json")
                        for _, b in sorted(blocks.items())] or None,
        "rolloutHold": held.model_dump(by_alias=True, exclude_none=True, mode="json") if held else None,
        "traffic": traffic(listed, revisions) or None,
    }
    status.update(with_rows(listed))

    floor = life.desired - (life.max_unavailable or 0)
    conditions = [
        ConditionUpdate(type="Available", status="True" if available_n >= floor else "False",
                        reason="MinimumReplicasAvailable" if available_n >= floor else "MinimumReplicasUnavailable",
                        message=f"{available_n} of {life.desired} Instance(s) available (at least {floor} wanted)"),
        _progressing(listed, life, revisions, problems, complete=complete, in_flight=len(in_flight)),
        _failed_scale(problems, kueue_holds(listed, views)),
        _failed_update(blocks, revisions),
        _gang(views, life),
        _stuck(listed, life, now),
    ]
    return status, conditions, held


def kueue_holds(rows: list[OMENativeInstanceStatus], views: dict[int, InstanceView]) -> dict[int, str]:
    """Index -> why Kueue holds the Instance's pods (Kueue's own message when it gave one), for every
    Instance whose operation waits on Kueue."""
    out: dict[int, str] = {}
    for row in rows:
        if row.operation is None or row.operation.waiting != KUEUE_PENDING:
            continue
        view = views.get(row.index or 0)
        said = view.admission_message if view else None
        queues = sorted({pod.queue for pod in view.live if pod.queue}) if view else []
        out[row.index or 0] = said or f"queued in LocalQueue {', '.join(queues) or '?'}, not admitted yet"
    return out


def _failed_scale(problems: Problems, holds: dict[int, str]) -> ConditionUpdate:
    """A create refused by a ResourceQuota (QuotaExceeded), else pods Kueue has not admitted
    (KueuePending: which Instances, and Kueue's reason for the first), so `kubectl describe` says why
    an Instance is held."""
    if problems.refused:
        return ConditionUpdate(type="FailedScale", status="True", reason=QUOTA_EXCEEDED, message=problems.refused)
    if holds:
        first = min(holds)
        indexes = ", ".join(map(str, sorted(holds)))
        return ConditionUpdate(type="FailedScale", status="True", reason=KUEUE_PENDING,
                               message=f"Instance(s) {indexes} wait for Kueue admission; "
                                       f"Instance {first}: {holds[first]}"[:1024])
    return ConditionUpdate(type="FailedScale", status="False", reason="ScaleSucceeded", message="")


def _ready_count(view: InstanceView | None) -> int:
    return 0 if view is None else sum(1 for pod in view.live if pod.containers_ready)


def _progressing(rows: list[OMENativeInstanceStatus], life: Lifecycle, revisions: Revisions, problems: Problems, *,
                 complete: bool, in_flight: int) -> ConditionUpdate:
    if problems.invalid is not None:
        reason, message = problems.invalid
        return ConditionUpdate(type="Progressing", status="False", reason=reason, message=message)
    if life.paused:
        return ConditionUpdate(type="Progressing", status="Unknown", reason="Paused",
                               message=f"paused ({life.pause_mode.value}): no Instance is created or updated")
    if complete:
        return ConditionUpdate(type="Progressing", status="True", reason="RevisionAvailable",
                               message=f"{len(rows)} Instance(s) run revision {revisions.target}")
    behind = sum(1 for r in rows if r.running_revision != revisions.target)
    return ConditionUpdate(type="Progressing", status="True", reason="RolloutInProgress",
                           message=f"{in_flight} operation(s) in flight; {behind} of {life.desired} Instance(s) "
                                   f"not yet on {revisions.target}")


def _failed_update(blocks: dict[str, RetryBlock], revisions: Revisions) -> ConditionUpdate:
    block = blocks.get(revisions.target)
    if block is None:
        return ConditionUpdate(type="FailedUpdate", status="False", reason="NoFailure", message="")
    return ConditionUpdate(type="FailedUpdate", status="True", reason=f"RetryBlock{(block.state or '')}",
                           message=block.reason or "")


def _gang(views: dict[int, InstanceView], life: Lifecycle) -> ConditionUpdate:
    if not life.gang:
        return ConditionUpdate(type="GangSchedulingUnavailable", status="False", reason="SinglePodInstances")
    stuck = sorted(view.index for view in views.values() if any(pod.unschedulable for pod in view.live))
    if stuck:
        return ConditionUpdate(type="GangSchedulingUnavailable", status="True", reason="Unschedulable",
                               message=f"Instance(s) {', '.join(map(str, stuck))} have pods no node can take")
    return ConditionUpdate(type="GangSchedulingUnavailable", status="False", reason="GangsScheduled")


def _stuck(rows: list[OMENativeInstanceStatus], life: Lifecycle, now: datetime) -> ConditionUpdate:
    limit = max(life.ready_timeout or STUCK_AFTER, STUCK_AFTER)
    stuck = [r for r in rows if r.operation is not None and r.operation.step != "WaitReady"
             and r.operation.last_progress_at is not None and now - r.operation.last_progress_at > limit
             and r.operation.type is not InstanceOperationType.CREATE]
    if not stuck:
        return ConditionUpdate(type="OperationStuck", status="False", reason="OperationsProgressing")
    described = ", ".join(f"{r.index} ({r.operation.type} at {r.operation.step})" for r in stuck  # type: ignore[union-attr]
                          )
    return ConditionUpdate(type="OperationStuck", status="True", reason="StepStalled",
                           message=f"no progress for over {limit}: Instance(s) {described}")


def failed_rows(rows: dict[int, OMENativeInstanceStatus]) -> list[int]:
    return sorted(i for i, r in rows.items() if r.phase is OMENativeInstancePhase.FAILED)
