"""Where one placement race's time goes: the control plane's PlacementWorkflow and, in the winning member,
the InferenceService and InferenceReplica workflows its derived service started, on one clock.

Every workflow of the fleet talks to the same Temporal dev server on this machine (the members' own
workers included), so the server's event timestamps line up with the benchmark's `time.time()` at the
create. Printed per event kept: seconds since the create, which workflow, what happened: the start, and
each activity's completion (with the member a placement activity spoke to, and whether an observation
found the copy admitted). The first admitted observation against the winner's own replica events says
how much of a race is the member turning the copy into admitted pods, and how much is the control plane.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

MEMBER_ACTIVITIES = ("placement.apply_member", "placement.observe_member", "placement.delete_member")


@dataclass(frozen=True)
class Line:
    at: float
    """Wall-clock seconds (time.time())."""
    workflow: str
    what: str


def _json(payloads: Any) -> Any:
    try:
        return json.loads(payloads.payloads[0].data)
    except (IndexError, ValueError):
        return None


def _scheduled_label(attributes: Any) -> str:
    kind = attributes.activity_type.name
    if kind in MEMBER_ACTIVITIES:
        body = _json(attributes.input) or {}
        target = body.get("target", body)
        return f"{kind} {target.get('cluster', '?')}"
    return str(kind)


def _completed_label(kind: str, result: Any) -> str:
    if kind.startswith("placement.observe_member") and isinstance(result, dict):
        components = result.get("components") or []
        admitted = bool(result.get("exists")) and bool(components) and all(c.get("admitted", 0) > 0
                                                                             for c in components)
        return f"{kind}: {'ADMITTED' if admitted else 'not admitted'}"
    return kind


async def workflow_lines(temporal: Client, workflow_id: str, short: str) -> list[Line]:
    """The kept events of one workflow (all its runs are one id: the latest run's history is read)."""
    scheduled: dict[int, str] = {}
    lines = []
    async for event in temporal.get_workflow_handle(workflow_id).fetch_history_events():
        at = event.event_time.ToDatetime(tzinfo=UTC).timestamp()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            lines.append(Line(at, short, "started"))
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = _scheduled_label(event.activity_task_scheduled_event_attributes)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            kind = scheduled.get(attributes.scheduled_event_id, "?")
            lines.append(Line(at, short, _completed_label(kind, _json(attributes.result))))
    return lines


def print_timeline(began: float, lines: list[Line], until: float | None = None) -> None:
    """Every line since `began`, in time order (up to `until`, when given), as offsets in seconds."""
    for line in sorted(lines, key=lambda item: item.at):
        if until is not None and line.at > until:
            break
        print(f"    {line.at - began:7.3f} s  {line.workflow:<10} {line.what}", flush=True)
