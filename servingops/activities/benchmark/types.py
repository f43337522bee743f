"""Inputs and outputs of the benchmark.* activities (BenchmarkActivities, and the fake of
testkit/benchmark_fakes.py)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel

from servingops.api_models.ome.benchmark_job import BenchmarkJobStatus
from servingops.api_models.refs import ObjectRef
from servingops.rendering.benchmark_results import IterationSummary


class BenchObserveInput(BaseModel):
    job: ObjectRef
    """The BenchmarkJob (its uid set: a reused name reads as gone)."""


class BenchObserveOutput(BaseModel):
    present: bool
    """False when the BenchmarkJob is gone or being deleted."""
    generation: int = 0
    status: BenchmarkJobStatus | None = None
    """status as read (a new workflow run takes the generation a terminal status describes as done)."""


class StartOutcome(StrEnum):
    STARTED = "Started"
    """The generation's Job exists (created now, or by an earlier attempt: never a second one)."""
    WAITING = "Waiting"
    """The InferenceService is not Ready or has no URL yet: try again later (message says which)."""
    INVALID = "Invalid"
    """The run cannot start (message says why): the generation ends Failed."""
    STALE = "Stale"
    """The object moved to another generation (or is gone): nothing was created."""


class BenchStartInput(BaseModel):
    job: ObjectRef
    generation: int
    """The generation to run; the activity reads the object and refuses another (STALE)."""


class BenchStartOutput(BaseModel):
    outcome: StartOutcome
    job_name: str = ""
    results: str = ""
    """Where the results go (pvc://... or an OCI reference)."""
    endpoint: str = ""
    """The URL benchmarked."""
    message: str = ""


class JobPhase(StrEnum):
    MISSING = "Missing"
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class BenchJobInput(BaseModel):
    namespace: str
    job_name: str


class BenchJobOutput(BaseModel):
    phase: JobPhase
    start_time: datetime | None = None
    """When the Job's pod began (the Job's status.startTime)."""
    completion_time: datetime | None = None
    message: str = ""
    """Why it failed: the Job's Failed condition and the pod's termination, in words."""
    summary: list[IterationSummary] | None = None
    """A Succeeded pvc:// Job's summary, from its pod's summarize container (rendering/benchmark_summary_step.py);
    None for a Job without that step (oci://: the workflow reads the registry) or before it ended."""
    summary_problem: str = ""
    """Why a Job with that step gave no (whole) summary."""


class BenchStopOutput(BaseModel):
    deleted: bool
    """False when the Job was already gone."""


class BenchWriteInput(BaseModel):
    job: ObjectRef
    status: BenchmarkJobStatus
    """The whole status (every field is replaced)."""


class BenchWriteOutput(BaseModel):
    present: bool


class BenchSummarizeInput(BaseModel):
    results: str
    """Where the run's results went: an OCI reference (<registry>/<repository>:<tag>)."""


class BenchSummarizeOutput(BaseModel):
    summary: list[IterationSummary] | None = None
    problem: str = ""
    """Why there is no summary (no artifact, not genai-bench's output, a registry refusing)."""


__all__ = [
    "BenchJobInput",
    "BenchJobOutput",
    "BenchObserveInput",
    "BenchObserveOutput",
    "BenchStartInput",
    "BenchStartOutput",
    "BenchStopOutput",
    "BenchSummarizeInput",
    "BenchSummarizeOutput",
    "BenchWriteInput",
    "BenchWriteOutput",
    "JobPhase",
    "StartOutcome",
]
