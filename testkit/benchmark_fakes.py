"""A fake cluster for BenchmarkJobWorkflow: BenchmarkJobs, InferenceServices (ready or not, with a URL) and
batch Jobs in memory, serving the benchmark.* activities under their wire names and payloads. Jobs are
rendered by the same pure renderer as the real activity (rendering/benchmark_job.py); what kube-controller-
manager does to a Job (its pod running, succeeding, failing) a test does by hand (`run`, `succeed`, `fail`).

What the fake does not model: models and their sources (an InferenceService's tokenizer is its model name),
the operator ConfigMap (BenchmarkDefaults() unless set), owner garbage collection (stop removes the Job at once),
pods (a Job's failure message is what `fail` says; a pvc:// Job's summarize step's termination message is what
`succeed` says, read by the real activity's pure reader)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from temporalio import activity

from servingops.activities.benchmark.types import (
    BenchJobInput,
    BenchJobOutput,
    BenchObserveInput,
    BenchObserveOutput,
    BenchStartInput,
    BenchStartOutput,
    BenchStopOutput,
    BenchSummarizeInput,
    BenchSummarizeOutput,
    BenchWriteInput,
    BenchWriteOutput,
    JobPhase,
    StartOutcome,
)
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.ome.benchmark_job import BenchmarkJob, BenchmarkJobSpec, BenchmarkJobStatus
from servingops.api_models.operator_config import BenchmarkDefaults
from servingops.api_models.refs import ObjectRef
from servingops.rendering.benchmark_events import BenchEvent, transition_event
from servingops.rendering.benchmark_job import (
    SUMMARIZER,
    BenchmarkRenderError,
    ResolvedEndpoint,
    job_name,
    render_job,
)
from servingops.rendering.benchmark_results import ResultsError, summarize_archive
from servingops.rendering.benchmark_summary_step import read_summary_message


@dataclass
class StoredBench:
    name: str
    namespace: str
    spec: dict[str, Any]
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    generation: int = 1
    status: dict[str, Any] | None = None
    deleting: bool = False

    def ref(self) -> ObjectRef:
        return ObjectRef.of(BenchmarkJob, self.name, self.namespace, uid=self.uid)


@dataclass
class FakeJob:
    name: str
    namespace: str
    owner_uid: str
    manifest: dict[str, Any]
    results: str
    phase: JobPhase = JobPhase.PENDING
    start_time: datetime | None = None
    completion_time: datetime | None = None
    message: str = ""
    termination_message: str | None = None
    """What its pod's summarize container (a pvc:// Job's) left as its termination message."""


@dataclass
class FakeBenchWorld:
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    defaults: BenchmarkDefaults = field(default_factory=BenchmarkDefaults)
    benches: dict[tuple[str, str], StoredBench] = field(default_factory=dict)
    services: dict[tuple[str, str], tuple[bool, str]] = field(default_factory=dict)
    """(namespace, name) -> (Ready, status.url)."""
    jobs: dict[tuple[str, str], FakeJob] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    """Every Job created, by name, in order (a second create of one name would show twice)."""
    stopped: list[str] = field(default_factory=list)
    writes: list[dict[str, Any]] = field(default_factory=list)
    events: list[BenchEvent] = field(default_factory=list)
    """The Events write_status recorded, in order (the real activity's rule: rendering/benchmark_events.py)."""
    artifacts: dict[str, bytes] = field(default_factory=dict)
    """OCI reference -> the results layer's bytes (what the Job's push would have left in the registry)."""
    fail_after_create: int = 0
    """The next N creates raise after storing the Job (a worker killed between the create and its answer)."""
    refuse_create: str | None = None
    """Every create is refused as the worker's interceptor words a 403 (ErrorType.FORBIDDEN, non-retryable)."""

    # -- the test's hands -----------------------------------------------------------------------------

    def add(self, name: str, spec: dict[str, Any], namespace: str = "ns") -> StoredBench:
        stored = self.benches[(namespace, name)] = StoredBench(name=name, namespace=namespace, spec=spec)
        return stored

    def job(self, name: str, namespace: str = "ns") -> FakeJob:
        return self.jobs[(namespace, name)]

    def run(self, name: str, namespace: str = "ns") -> None:
        job = self.job(name, namespace)
        job.phase, job.start_time = JobPhase.RUNNING, self.clock()

    def succeed(self, name: str, namespace: str = "ns", termination_message: str | None = None) -> None:
        """The Job Complete; `termination_message`: what a pvc:// Job's summarize container reported (None: its
        pod said nothing)."""
        job = self.job(name, namespace)
        job.phase, job.completion_time = JobPhase.SUCCEEDED, self.clock()
        job.termination_message = termination_message

    def fail(self, name: str, message: str, namespace: str = "ns") -> None:
        job = self.job(name, namespace)
        job.phase, job.completion_time, job.message = JobPhase.FAILED, self.clock(), message

    # -- the activities -------------------------------------------------------------------------------

    def _live(self, ref: ObjectRef) -> StoredBench | None:
        found = self.benches.get((ref.namespace or "", ref.name))
        return found if found is not None and found.uid == ref.uid else None

    def observe(self, request: BenchObserveInput) -> BenchObserveOutput:
        found = self._live(request.job)
        if found is None or found.deleting:
            return BenchObserveOutput(present=False)
        try:
            status = BenchmarkJobStatus.model_validate(found.status) if found.status else None
        except ValidationError:
            status = None
        return BenchObserveOutput(present=True, generation=found.generation, status=status)

    def _resolve(self, spec: BenchmarkJobSpec) -> ResolvedEndpoint | BenchStartOutput:
        if spec.endpoint.endpoint is not None:
            direct = spec.endpoint.endpoint
            if not direct.model_name:
                return BenchStartOutput(outcome=StartOutcome.INVALID,
                                        message="endpoint.endpoint.modelName is needed: genai-bench sends it in every "
                                                "request and loads its tokenizer by it")
            return ResolvedEndpoint(api_base=direct.url, api_backend=direct.api_format.value,
                                    model_name=direct.model_name, tokenizer=direct.model_name)
        ref = spec.endpoint.inference_service
        assert ref is not None
        known = self.services.get((ref.namespace, ref.name))
        if known is None:
            return BenchStartOutput(outcome=StartOutcome.WAITING,
                                    message=f"InferenceService {ref.namespace}/{ref.name} does not exist")
        ready, url = known
        if not ready or not url:
            return BenchStartOutput(outcome=StartOutcome.WAITING,
                                    message=f"InferenceService {ref.namespace}/{ref.name} is not Ready with a URL")
        return ResolvedEndpoint(api_base=url, api_backend="openai", model_name=ref.name, tokenizer=ref.name)

    def start(self, request: BenchStartInput) -> BenchStartOutput:
        found = self._live(request.job)
        if found is None or found.deleting or found.generation != request.generation:
            return BenchStartOutput(outcome=StartOutcome.STALE)
        jname = job_name(found.name, request.generation)
        existing = self.jobs.get((found.namespace, jname))
        if existing is not None:
            if existing.owner_uid != found.uid:
                return BenchStartOutput(outcome=StartOutcome.INVALID,
                                        message=f"a Job named {jname} exists and is not this BenchmarkJob's")
            return BenchStartOutput(outcome=StartOutcome.STARTED, job_name=jname, results=existing.results)
        try:
            spec = BenchmarkJobSpec.model_validate(found.spec)
        except ValidationError as exc:
            first = exc.errors()[0]
            return BenchStartOutput(outcome=StartOutcome.INVALID,
                                    message=f"spec.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
        resolved = self._resolve(spec)
        if isinstance(resolved, BenchStartOutput):
            return resolved
        try:
            rendered = render_job(name=found.name, namespace=found.namespace, uid=found.uid,
                                  generation=request.generation, spec=spec, endpoint=resolved, defaults=self.defaults)
        except BenchmarkRenderError as exc:
            return BenchStartOutput(outcome=StartOutcome.INVALID, message=str(exc))
        if self.refuse_create is not None:
            raise application_error(ErrorType.FORBIDDEN, self.refuse_create)
        self.jobs[(found.namespace, jname)] = FakeJob(name=jname, namespace=found.namespace, owner_uid=found.uid,
                                                      manifest=rendered.job, results=rendered.results)
        self.created.append(jname)
        if self.fail_after_create > 0:
            self.fail_after_create -= 1
            raise RuntimeError("connection reset after the create (the fake's injected failure)")
        return BenchStartOutput(outcome=StartOutcome.STARTED, job_name=jname, results=rendered.results,
                                endpoint=resolved.api_base)

    def job_state(self, request: BenchJobInput) -> BenchJobOutput:
        job = self.jobs.get((request.namespace, request.job_name))
        if job is None:
            return BenchJobOutput(phase=JobPhase.MISSING, message=f"the Job {request.job_name} is gone")
        summary, problem = None, ""
        pod = job.manifest["spec"]["template"]["spec"]
        if job.phase == JobPhase.SUCCEEDED and any(c["name"] == SUMMARIZER for c in pod["containers"]):
            if job.termination_message is None:
                problem = "the Job's pod is gone or did not report its summarize step"
            else:
                reading = read_summary_message(job.termination_message)
                summary, problem = reading.summary, reading.problem
        return BenchJobOutput(phase=job.phase, start_time=job.start_time, completion_time=job.completion_time,
                              message=job.message, summary=summary, summary_problem=problem)

    def stop(self, request: BenchJobInput) -> BenchStopOutput:
        gone = self.jobs.pop((request.namespace, request.job_name), None)
        if gone is not None:
            self.stopped.append(request.job_name)
        return BenchStopOutput(deleted=gone is not None)

    def summarize(self, request: BenchSummarizeInput) -> BenchSummarizeOutput:
        data = self.artifacts.get(request.results)
        if data is None:
            return BenchSummarizeOutput(problem=f"no artifact at {request.results}")
        try:
            return BenchSummarizeOutput(summary=summarize_archive(data))
        except ResultsError as exc:
            return BenchSummarizeOutput(problem=f"{request.results}: {exc}")

    def write_status(self, request: BenchWriteInput) -> BenchWriteOutput:
        found = self._live(request.job)
        if found is None:
            return BenchWriteOutput(present=False)
        before = BenchmarkJobStatus.model_validate(found.status).state if found.status else None
        found.status = request.status.to_api()
        self.writes.append(found.status)
        event = transition_event(before, request.status)
        if event is not None:
            self.events.append(event)
        return BenchWriteOutput(present=True)

    def activities(self, now: Callable[[], Awaitable[datetime]] | None = None) -> list[Callable[..., Any]]:
        """The six activities, async; `now`: the clock to stamp with (a time-skipping server's time)."""

        async def tick() -> None:
            if now is not None:
                current = await now()
                self.clock = lambda: current

        @activity.defn(name="benchmark.observe")
        async def observe(request: BenchObserveInput) -> BenchObserveOutput:
            return self.observe(request)

        @activity.defn(name="benchmark.start")
        async def start(request: BenchStartInput) -> BenchStartOutput:
            await tick()
            return self.start(request)

        @activity.defn(name="benchmark.job_state")
        async def job_state(request: BenchJobInput) -> BenchJobOutput:
            await tick()
            return self.job_state(request)

        @activity.defn(name="benchmark.stop")
        async def stop(request: BenchJobInput) -> BenchStopOutput:
            return self.stop(request)

        @activity.defn(name="benchmark.write_status")
        async def write_status(request: BenchWriteInput) -> BenchWriteOutput:
            await tick()
            return self.write_status(request)

        @activity.defn(name="benchmark.summarize")
        async def summarize(request: BenchSummarizeInput) -> BenchSummarizeOutput:
            return self.summarize(request)

        return [observe, start, job_state, stop, write_status, summarize]


__all__ = ["FakeBenchWorld", "FakeJob", "StoredBench"]
