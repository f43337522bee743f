"""Where a promote's time goes: the wall-clock timeline of each measured promote, hop by hop.

The promote benchmark knows when it sent each promote and when its watch saw the HTTPRoute move
(both turned into wall-clock time here); the Temporal histories of the InferenceService workflow
and of its rollout runs hold a server timestamp for every event between the two: the bridge's
signal arriving, each workflow task scheduled, picked up and completed, the forwarded signal, each
activity scheduled, started and completed. The Temporal dev server, the apiserver and the
benchmark share one machine and one clock, so the stamps line up.

`print_timeline` prints, per hop, the median and the worst offset from the promote over all
promotes, each hop named by its workflow, what it is, and its rank among same-named hops of the
promote (`rollout activity serving.set_traffic completed #1`), and then the per-promote lines of
the slowest promote, so a reader sees both the usual path and the outlier.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

_KEPT = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: "signal",
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED: "task scheduled",
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED: "task started",
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: "task completed",
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "scheduled",
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED: "started",
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "completed",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "failed",
    EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED: "signal-external initiated",
    EventType.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED: "signal-external acknowledged",
    EventType.EVENT_TYPE_TIMER_STARTED: "timer started",
    EventType.EVENT_TYPE_TIMER_FIRED: "timer fired",
}


@dataclass(frozen=True)
class Stamp:
    at: float
    """Wall-clock seconds (time.time())."""
    label: str


@dataclass(frozen=True)
class Promote:
    sent: float
    """Wall-clock seconds just before the promote's first request."""
    routed: float
    """Wall-clock seconds when the benchmark's watch saw the route's weights change."""
    settled: float = 0.0
    """Wall-clock seconds when its watch saw status at the next manual pause (0: not measured)."""


def _describe(workflow: str, event: Any, scheduled: dict[int, str]) -> str | None:
    kind = _KEPT.get(event.event_type)
    if kind is None:
        return None
    if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
        return f"{workflow} signal {event.workflow_execution_signaled_event_attributes.signal_name}"
    if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        name = event.activity_task_scheduled_event_attributes.activity_type.name
        scheduled[event.event_id] = name
        return f"{workflow} activity {name} scheduled"
    if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
        name = scheduled.get(event.activity_task_started_event_attributes.scheduled_event_id, "?")
        return f"{workflow} activity {name} started"
    if event.event_type in (EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED):
        attributes = (event.activity_task_completed_event_attributes
                      if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                      else event.activity_task_failed_event_attributes)
        return f"{workflow} activity {scheduled.get(attributes.scheduled_event_id, '?')} {kind}"
    return f"{workflow} {kind}"


async def history_stamps(temporal: Client, workflows: dict[str, str]) -> list[Stamp]:
    """Every kept event of every run of the workflows whose id starts with a key of `workflows`
    (the value is the short name the timeline prints)."""
    stamps: list[Stamp] = []
    async for execution in temporal.list_workflows():
        short = next((name for prefix, name in workflows.items() if execution.id.startswith(prefix)), None)
        if short is None:
            continue
        history = await temporal.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        scheduled: dict[int, str] = {}
        for event in history.events:
            label = _describe(short, event, scheduled)
            if label is not None:
                stamps.append(Stamp(event.event_time.ToNanoseconds() / 1e9, label))
    return sorted(stamps, key=lambda s: s.at)


def promote_lines(promote: Promote, stamps: list[Stamp], *, to_status: bool = False) -> list[tuple[float, str]]:
    """(offset from the promote in seconds, hop) from the promote until the route moved (with
    `to_status`: until status showed the next pause), each hop ranked among its namesakes (#1, #2
    ...), and the benchmark's own observations in their place."""
    end = promote.settled if to_status else promote.routed
    seen: dict[str, int] = {}
    lines = [(promote.routed - promote.sent, "benchmark watch sees the HTTPRoute weights change")]
    if to_status:
        lines.append((promote.settled - promote.sent, "benchmark watch sees status at the next pause"))
    for stamp in stamps:
        if promote.sent <= stamp.at <= end:
            seen[stamp.label] = seen.get(stamp.label, 0) + 1
            lines.append((stamp.at - promote.sent, f"{stamp.label} #{seen[stamp.label]}"))
    return sorted(lines)


def print_timeline(promotes: list[Promote], stamps: list[Stamp]) -> None:
    per_promote = [promote_lines(p, stamps) for p in promotes]
    offsets: dict[str, list[float]] = {}
    order: dict[str, float] = {}
    for lines in per_promote:
        for offset, hop in lines:
            offsets.setdefault(hop, []).append(offset)
    for hop, values in offsets.items():
        order[hop] = statistics.median(values)
    print(f"promote timeline, {len(promotes)} promotes (ms from the promote; hops seen in fewer promotes are "
          f"counted where seen):", flush=True)
    for hop in sorted(offsets, key=lambda h: order[h]):
        values = offsets[hop]
        print(f"  {order[hop] * 1000:7.0f} median {max(values) * 1000:7.0f} max  ({len(values):2d}x)  {hop}",
              flush=True)
    slowest = max(range(len(promotes)), key=lambda i: promotes[i].routed - promotes[i].sent)
    print(f"slowest promote to its weights (#{slowest}), hop by hop:", flush=True)
    for offset, hop in per_promote[slowest]:
        print(f"  {offset * 1000:7.0f} ms  {hop}", flush=True)
    if all(p.settled for p in promotes):
        slowest = max(range(len(promotes)), key=lambda i: promotes[i].settled - promotes[i].sent)
        print(f"slowest promote to its status (#{slowest}), hop by hop:", flush=True)
        for offset, hop in promote_lines(promotes[slowest], stamps, to_status=True):
            print(f"  {offset * 1000:7.0f} ms  {hop}", flush=True)


_WORKER_SERIES = ("temporal_activity_execution_latency_seconds", "temporal_activity_schedule_to_start_latency_seconds",
                  # The promote's scale and weights run as local activities (patch local-serving-writes).
                  "temporal_local_activity_execution_latency_seconds",
                  "temporal_workflow_task_execution_latency_seconds",
                  "temporal_workflow_task_schedule_to_start_latency_seconds",
                  "temporal_workflow_task_replay_latency_seconds")


def worker_latencies(metrics_text: str) -> dict[str, tuple[float, int]]:
    """(sum in seconds, count) per latency series and label set of the worker's /metrics (the SDK's
    own: activity execution by activity type, workflow task execution by workflow type, the
    schedule-to-start waits), summed over the worker's two task queues."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for line in metrics_text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        series, value = line.rsplit(" ", 1)
        name, _, labels = series.partition("{")
        for base in _WORKER_SERIES:
            if name in (f"{base}_sum", f"{base}_count"):
                kept = [part for part in labels.rstrip("}").split(",")
                        if part.startswith(("activity_type=", "workflow_type="))]
                key = f"{base.removeprefix('temporal_').removesuffix('_seconds')} {','.join(kept)}".strip()
                if name.endswith("_sum"):
                    sums[key] = sums.get(key, 0.0) + float(value)
                else:
                    counts[key] = counts.get(key, 0) + int(float(value))
    return {key: (sums.get(key, 0.0), count) for key, count in counts.items() if count}


def print_worker_latencies(metrics_text: str, activity_types: tuple[str, ...]) -> None:
    print("worker-side latencies over the whole run (the Temporal SDK's metrics; mean, count):", flush=True)
    for key, (total, count) in sorted(worker_latencies(metrics_text).items()):
        if "activity_type=" in key and not any(f'"{name}"' in key for name in activity_types):
            continue
        print(f"  {total / count * 1000:7.1f} ms mean  ({count:5d}x)  {key}", flush=True)
