"""What one workflow's history holds, across its continue-as-new runs: events, bytes, activities.

A benchmark reads it twice (after one phase and after the next) and prints the difference, so each
phase's share is its own: events, the workflow tasks (WorkflowTaskStarted -> Completed: the workflow
code's time plus the worker's round trip), and per activity type the calls, their schedule -> complete
latency and the bytes of their inputs and results (what makes a history large). Bytes are protobuf
sizes, as the Temporal server counts them for its history-size limits.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

KB = 1000


@dataclass(frozen=True)
class Call:
    activity: str
    input_bytes: int
    result_bytes: int = 0
    latency: float | None = None
    """Scheduled -> completed, seconds; None while open, or when it failed."""


@dataclass(frozen=True)
class Run:
    events: int
    proto_bytes: int
    continued: bool
    """This run ended in continue-as-new."""


@dataclass
class History:
    runs: list[Run] = field(default_factory=list)
    """Oldest first."""
    calls: list[Call] = field(default_factory=list)
    tasks: list[float] = field(default_factory=list)

    @property
    def events(self) -> int:
        return sum(run.events for run in self.runs)

    def since(self, earlier: History) -> History:
        """What was added after `earlier` was read; the run `earlier` ended in counts as spanned."""
        runs = self.runs[max(0, len(earlier.runs) - 1):]
        if runs and earlier.runs:
            first = runs[0]
            runs[0] = Run(first.events - earlier.runs[-1].events, first.proto_bytes - earlier.runs[-1].proto_bytes,
                          first.continued)
        return History(runs, self.calls[len(earlier.calls):], self.tasks[len(earlier.tasks):])

    def lines(self, per: int, unit: str) -> list[str]:
        """The summary, with events per `unit` (there are `per` of them)."""
        tasks = self.tasks or [0.0]
        out = [f"{self.events} events ({self.events / per:.1f} per {unit}) over {len(self.runs)} run(s) "
               f"({', '.join(f'{r.events} events / {r.proto_bytes / 1e6:.2f} MB' for r in self.runs)}); "
               f"{len(self.tasks)} workflow tasks, {sum(self.tasks):.1f} s in all, p50 "
               f"{statistics.median(tasks) * 1000:.0f} ms, longest {max(tasks) * 1000:.0f} ms"]
        for name in sorted({call.activity for call in self.calls}):
            calls = [call for call in self.calls if call.activity == name]
            took = sorted(call.latency for call in calls if call.latency is not None) or [0.0]
            out.append(f"  {name:26} {len(calls):4} calls, scheduled -> completed p50 {statistics.median(took):5.2f} s "
                       f"max {took[-1]:5.2f} s; inputs {sum(c.input_bytes for c in calls) / KB:6.0f} kB, results "
                       f"{sum(c.result_bytes for c in calls) / KB:6.0f} kB (largest "
                       f"{max(c.result_bytes for c in calls) / KB:.1f} kB)")
        return out


async def read(temporal: Client, workflow_id: str) -> History:
    """Every run of the workflow, followed back from the latest through continuedExecutionRunId."""
    runs: list[tuple[Run, list[Call], list[float]]] = []
    run_id: str | None = None
    while True:
        history = await temporal.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        calls: dict[int, Call] = {}
        scheduled_at: dict[int, float] = {}
        tasks: list[float] = []
        started_at: float | None = None
        continued = False
        for event in history.events:
            kind, at = event.event_type, event.event_time.ToDatetime().timestamp()
            if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled = event.activity_task_scheduled_event_attributes
                calls[event.event_id] = Call(scheduled.activity_type.name, scheduled.input.ByteSize())
                scheduled_at[event.event_id] = at
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                done = event.activity_task_completed_event_attributes
                call = calls[done.scheduled_event_id]
                calls[done.scheduled_event_id] = Call(call.activity, call.input_bytes, done.result.ByteSize(),
                                                      at - scheduled_at[done.scheduled_event_id])
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                started_at = at
            elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and started_at is not None:
                tasks.append(at - started_at)
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                continued = True
        ordered = [call for _, call in sorted(calls.items())]
        run = Run(len(history.events), sum(event.ByteSize() for event in history.events), continued)
        runs.append((run, ordered, tasks))
        previous = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not previous:
            break
        run_id = previous
    runs.reverse()
    return History([run for run, _, _ in runs], [c for _, calls_, _ in runs for c in calls_],
                   [t for _, _, tasks_ in runs for t in tasks_])
