"""The Event a BenchmarkJob's status write tells (pure): a run starting, completing or failing, said where
operators look (`kubectl describe benchmarkjob`, `kubectl get events`), never only in logs.

Decided from the state before the write and the status written, so a write that repeats a state (a retried
activity, a Pending run's waiting message changing) tells nothing again."""

from __future__ import annotations

import json

from pydantic import BaseModel

from servingops.api_models.ome.benchmark_job import BenchmarkJobStatus
from servingops.api_models.ome.enums import BenchmarkJobState

NORMAL, WARNING = "Normal", "Warning"
STARTED, COMPLETED, FAILED = "BenchmarkStarted", "BenchmarkCompleted", "BenchmarkFailed"


class BenchEvent(BaseModel):
    type: str
    reason: str
    message: str


def _details(status: BenchmarkJobStatus) -> dict[str, object]:
    try:
        body = json.loads(status.details or "{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def transition_event(before: BenchmarkJobState | None, status: BenchmarkJobStatus) -> BenchEvent | None:
    """The Event for moving from `before` to `status.state`; None when the state did not move or moves to
    Pending (a new run's start is told once its Job's pod runs)."""
    after = status.state
    if after is None or after == before or after == BenchmarkJobState.PENDING:
        return None
    body = _details(status)
    job, endpoint = body.get("job"), body.get("endpoint")
    if after == BenchmarkJobState.RUNNING:
        generation = body.get("generation")
        return BenchEvent(type=NORMAL, reason=STARTED,
                          message=f"Job {job} runs genai-bench against {endpoint} (generation {generation})")
    if after == BenchmarkJobState.COMPLETED:
        where = f"; results at {body['results']}" if body.get("results") else ""
        return BenchEvent(type=NORMAL, reason=COMPLETED, message=f"Job {job} completed{where}")
    return BenchEvent(type=WARNING, reason=FAILED, message=status.failure_message or "the benchmark run failed")


__all__ = ["COMPLETED", "FAILED", "NORMAL", "STARTED", "WARNING", "BenchEvent", "transition_event"]
