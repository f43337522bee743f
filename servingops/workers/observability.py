"""Where the worker counts what its metrics say (instruments in `runtime/metrics.py`).

- Activities count their own bytes as they move them (`oci.push_file` per chunk).
- An activity interceptor sees every attempt: failures by ErrorType, transfers in flight, bytes a
  fetch moved (from its result), and the facts a landed InferenceService status write records —
  a group parking and a run closing. Those are workflow decisions, but the workflow only decides:
  the write that publishes them is the moment they become true for an operator, happens once per
  decision (the notes travel with one write) and is never replayed, unlike workflow code.
- A poller reads Temporal visibility for what is a state rather than an event: the open rollout
  runs by their published phase, and the model imports not yet finished.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from servingops.activities.kubernetes import StatusPatch
from servingops.activities.sources.types import FetchedFile
from servingops.api_models.contract import WorkflowType, search_attributes
from servingops.api_models.deckhouse.enums import ModelPhase
from servingops.api_models.ome.enums import CoordinationPhase, RolloutPhase
from servingops.runtime.metrics import WorkerMetrics
from servingops.workflows.rollout.status import EventReason

log = logging.getLogger(__name__)

FETCH = "source.fetch_file"
PUSH = "oci.push_file"
PATCH_STATUS = "kube.patch_status"
TRANSFERS = frozenset({FETCH, PUSH})
"""Activity names are the wire (they never change once shipped); a test holds these to the worker's."""

_INFERENCE_SERVICE = "InferenceService"
_RUN_CLOSED = {EventReason.COMPLETED.value, EventReason.ROLLED_BACK.value, EventReason.ROLLOUT_FAILED.value}
_IMPORTING = (ModelPhase.PENDING, ModelPhase.PUBLISHING)
RUN_PHASES = tuple(dict.fromkeys([*(p.value for p in RolloutPhase), *(p.value for p in CoordinationPhase)]))
"""Every phase a rollout run publishes; each is reported (0 when none), so a phase that empties
drops to 0 instead of keeping its last value."""


def error_label(exc: BaseException) -> str:
    """The ErrorType an activity raised on purpose, else the class of what escaped it."""
    if isinstance(exc, ApplicationError) and exc.type:
        return exc.type
    if isinstance(exc, asyncio.CancelledError):
        return "Cancelled"
    return type(exc).__name__


def _group_of(message: str) -> str | None:
    """`group <key>: ...` -> key (the form of every per-group rollout note and park entry)."""
    if not message.startswith("group "):
        return None
    key, sep, _ = message[len("group "):].partition(": ")
    return key if sep else None


def _parked(patch: StatusPatch) -> dict[str, str]:
    """group -> park reason, from the RolloutReady condition the same write carries
    (`group <k>: <Reason>: <message>; group <j>: ...`, see workflows/rollout/status.py)."""
    condition = next((c for c in patch.conditions if c.type == "RolloutReady" and c.status == "False"), None)
    if condition is None:
        return {}
    parked = {}
    for entry in re.split(r"; (?=group )", condition.message):
        key = _group_of(entry)
        if key is None:
            continue
        why = entry[len("group ") + len(key) + 2:]
        parked[key] = why.split(":", 1)[0] if ":" in why else "RolloutParked"
    return parked


def count_status_write(metrics: WorkerMetrics, patch: StatusPatch) -> None:
    """Parks and run closes a landed InferenceService status write records.

    A park is a Warning note for a group the same write lists as parked with that reason (the
    workflow emits it once, when the group parks or its reason changes); a run close is a
    Completed, RolledBack or RolloutFailed note."""
    if patch.ref.kind != _INFERENCE_SERVICE:
        return
    parked = _parked(patch)
    for note in patch.events:
        group = _group_of(note.message)
        if group is None:
            continue
        if note.type == "Warning" and parked.get(group) == note.reason:
            metrics.parks.add(1, {"reason": note.reason})
        if note.reason in _RUN_CLOSED:
            metrics.runs_closed.add(1, {"outcome": note.reason})


class _ActivityMetrics(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, metrics: WorkerMetrics) -> None:
        super().__init__(next)
        self._metrics = metrics

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        name = activity.info().activity_type
        transfer = name in TRANSFERS
        if transfer:
            self._metrics.transfers.add(name, 1)
        try:
            result = await self.next.execute_activity(input)
        except BaseException as exc:
            self._metrics.failure(name, error_label(exc))
            raise
        finally:
            if transfer:
                self._metrics.transfers.add(name, -1)
        try:
            self._observe(name, input.args, result)
        except Exception:  # a metric must never fail the activity it describes
            log.exception("counting the result of %s", name)
        return result

    def _observe(self, name: str, args: Sequence[Any], result: Any) -> None:
        if name == FETCH and isinstance(result, FetchedFile) and result.transferred_bytes > 0:
            self._metrics.bytes_fetched.add(result.transferred_bytes)
        elif name == PATCH_STATUS and result is True and args and isinstance(args[0], StatusPatch):
            count_status_write(self._metrics, args[0])


class MetricsInterceptor(Interceptor):
    """Counts every activity attempt of the worker it is given to."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityMetrics(next, self.metrics)


# -- state read from Temporal visibility -----------------------------------------------------------


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


async def observe_visibility(client: Client, task_queue: str, metrics: WorkerMetrics,
                             reported: frozenset[str] = frozenset()) -> frozenset[str]:
    """Set the state gauges from the installation's workflows (those started on `task_queue`);
    `reported` are the phases set last time (one that emptied is set to 0). Returns this time's."""
    scope = f"ExecutionStatus = 'Running' AND TaskQueue = {_quote(task_queue)}"
    importing = ", ".join(_quote(p.value) for p in _IMPORTING)
    imports = await client.count_workflows(
        f"WorkflowType = {_quote(WorkflowType.MODEL.value)} AND {scope} AND "
        f"{search_attributes.PHASE.name} IN ({importing})")
    metrics.imports_in_flight.set(imports.count)
    # Visibility cannot GROUP BY a custom attribute: list the open runs and count their phases.
    phases = dict.fromkeys((*RUN_PHASES, *sorted(reported)), 0)
    async for run in client.list_workflows(f"WorkflowType = {_quote(WorkflowType.ROLLOUT.value)} AND {scope}"):
        phase = run.typed_search_attributes.get(search_attributes.PHASE) or "Unknown"
        phases[phase] = phases.get(phase, 0) + 1
    for phase, count in phases.items():
        metrics.runs_by_phase.set(count, {"phase": phase})
    return frozenset(phases)


async def poll_visibility(client: Client, task_queue: str, metrics: WorkerMetrics, interval: float,
                          stop: asyncio.Event) -> None:
    """Refresh the state gauges every `interval` seconds until `stop` is set."""
    failing = False
    reported: frozenset[str] = frozenset()
    while not stop.is_set():
        try:
            reported = await observe_visibility(client, task_queue, metrics, reported)
            failing = False
        except Exception as exc:  # Temporal down: keep the last values, say so once
            if not failing:
                log.warning("cannot read Temporal visibility for metrics: %s", exc)
            failing = True
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval)
        except TimeoutError:
            pass
