"""Pure reading of a pod (its JSON as the apiserver returns it) into what the engine needs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from servingops.activities.replica.types import PodView
from servingops.api_models.ome import instance_keys as keys
from servingops.api_models.ome.instance_status import InstanceTermination
from servingops.rendering import kueue


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _conditions(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in (pod.get("status") or {}).get("conditions") or []}


def _true(condition: dict[str, Any] | None) -> bool:
    return condition is not None and condition.get("status") == "True"


def pod_view(pod: dict[str, Any]) -> PodView | None:
    """None for a pod without an Instance index label (not one of ours, or hand-made)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    if not str(labels.get(keys.INSTANCE_LABEL, "")).isdigit():
        return None
    conditions = _conditions(pod)
    scheduled, ready = conditions.get("PodScheduled"), conditions.get("Ready")
    serving = conditions.get(keys.SERVING_GATE)
    # Regular containers only: an init container that ran to completion is boot, not a failure.
    container_statuses = list(status.get("containerStatuses") or [])
    return PodView(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        index=int(labels[keys.INSTANCE_LABEL]),
        slot=_int(labels.get(keys.SLOT_LABEL)),
        runner=labels.get(keys.RUNNER_LABEL, "default"),
        worker=_int(labels.get(keys.WORKER_LABEL)),
        incarnation=_int(labels.get(keys.INCARNATION_LABEL)),
        revision=labels.get(keys.REVISION_LABEL, ""),
        node=spec.get("nodeName") or None,
        phase=status.get("phase") or "Pending",
        scheduled=_true(scheduled),
        unschedulable=(scheduled is not None and scheduled.get("status") == "False"
                       and scheduled.get("reason") == "Unschedulable"),
        gated=bool(spec.get("schedulingGates")),
        queue=labels.get(kueue.QUEUE_LABEL) or None,
        containers_ready=_true(conditions.get("ContainersReady")),
        ready=_true(ready),
        ready_since=parse_time(ready.get("lastTransitionTime")) if _true(ready) and ready else None,
        serving=None if serving is None else serving.get("status") == "True",
        deleting=bool(meta.get("deletionTimestamp")),
        restart_count=sum(_int(s.get("restartCount")) for s in container_statuses),
        last_termination=last_termination(meta.get("name", ""), container_statuses),
        created_at=parse_time(meta.get("creationTimestamp")),
    )


def last_termination(pod_name: str, statuses: list[dict[str, Any]]) -> InstanceTermination | None:
    """The most recent container termination: a current terminated state or the last one before
    a restart, whichever finished last."""
    found: list[tuple[str, str, dict[str, Any]]] = []
    for container in statuses:
        for where in ("state", "lastState"):
            terminated = (container.get(where) or {}).get("terminated")
            if terminated:
                found.append((str(terminated.get("finishedAt") or ""), container.get("name", ""), terminated))
    if not found:
        return None
    _, container_name, terminated = max(found, key=lambda item: item[0])
    return InstanceTermination(
        pod_name=pod_name,
        container_name=container_name,
        reason=terminated.get("reason"),
        exit_code=terminated.get("exitCode"),
        message=terminated.get("message"),
        # The kubelet's time, so the same termination reads the same on every observe.
        time=parse_time(terminated.get("finishedAt")),
    )
