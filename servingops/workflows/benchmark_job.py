"""BenchmarkJobWorkflow: one per BenchmarkJob (id benchmarkjob/<ns>/<name>/<uid>), the sole writer of its status.

A run per generation. The rule: every generation of the spec is benchmarked once. A finished BenchmarkJob whose
spec is edited (a new generation) runs again as a new run, with its own Job (`<name>-g<generation>`) and its own
status (state back to Pending, startTime and completionTime of the new run); a spec edited while a run is going
stops that run's Job (its pod with it) and starts the new generation's. A status change (no new generation) runs
nothing. The generation a terminal status describes is in `status.details` (`generation`): a workflow started
anew for an object already benchmarked at its generation (a bridge restart, a history reset) runs nothing.

One run: `benchmark.start` resolves the endpoint, renders and creates the Job unless it exists (its name is the
generation's, so a worker killed after the create and restarted finds the Job and never makes a second one);
while the InferenceService is not Ready the run stays Pending and tries again every `wait_seconds` (a durable
timer). Then `benchmark.job_state` every `poll_seconds` (a durable timer; a newer generation or the deletion
ends the wait at once): Running with startTime once the pod runs, then Completed or Failed with completionTime;
Failed carries the Job's reason and the pod's exit in failureMessage. A Completed run's summary goes into
details: a pvc:// run's from its pod's summarize step (in the same job_state answer), an oci:// run's read from
the registry (`benchmark.summarize`). A Job that disappears (deleted by hand)
is a Failed run saying so; a pod killed mid-run fails its Job (backoffLimit 0): Failed, honestly. Deleting the
BenchmarkJob stops its Job (`benchmark.stop`, foreground: the pod goes too) before the workflow ends.
Every status write sets lastReconcileTime.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ActivityError

from servingops.workflows import options
from servingops.workflows.entity import EntityWorkflow, ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.benchmark.activities import BenchmarkActivities
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
    from servingops.api_models.contract import StartObject, WorkflowType
    from servingops.api_models.errors import error_message, is_permanent
    from servingops.api_models.ome.benchmark_job import BenchmarkJobStatus
    from servingops.api_models.ome.enums import BenchmarkJobState
    from servingops.rendering.benchmark_results import IterationSummary

SUMMARY_PATCH = "benchmark-summary"
"""A Completed oci:// run reads its results' summary before it writes Completed (histories recorded before it
wrote Completed at once)."""


class BenchSettings(BaseModel):
    poll_seconds: float = 10.0
    """Between two reads of a running Job."""
    wait_seconds: float = 30.0
    """Between two tries while the InferenceService is not Ready."""
    runs_per_run: int = 20
    """A workflow run continues as new after this many benchmark runs."""


class BenchRun(BaseModel):
    """The run of one generation, as the workflow knows it."""

    generation: int
    job_name: str = ""
    namespace: str = ""
    results: str = ""
    endpoint: str = ""
    state: BenchmarkJobState = BenchmarkJobState.PENDING
    start_time: datetime | None = None
    completion_time: datetime | None = None
    failure_message: str = ""
    summary: list[IterationSummary] | None = None
    summary_problem: str = ""


class BenchState(ReconcileState):
    run: BenchRun | None = None
    """The current or last run."""
    runs: int = 0


class BenchStart(StartObject):
    settings: BenchSettings = BenchSettings()
    carried: BenchState | None = None


def details(run: BenchRun) -> str:
    """status.details: the run it describes (generation, Job, endpoint, where the results are), as JSON."""
    body: dict[str, object] = {"generation": run.generation}
    if run.job_name:
        body["job"] = run.job_name
    if run.endpoint:
        body["endpoint"] = run.endpoint
    if run.results:
        body["results"] = run.results
    if run.summary is not None:
        body["summary"] = [s.model_dump(mode="json", exclude_none=True) for s in run.summary]
    if run.summary_problem:
        body["summaryProblem"] = run.summary_problem
    return json.dumps(body, sort_keys=True)


def described_generation(status: BenchmarkJobStatus | None) -> int:
    """The generation a terminal status describes (0: none)."""
    if status is None or status.state not in (BenchmarkJobState.COMPLETED, BenchmarkJobState.FAILED):
        return 0
    try:
        body = json.loads(status.details or "{}")
    except ValueError:
        return 0
    value = body.get("generation") if isinstance(body, dict) else None
    return value if isinstance(value, int) else 0


def run_status(run: BenchRun, now: datetime) -> BenchmarkJobStatus:
    return BenchmarkJobStatus(state=run.state, start_time=run.start_time, completion_time=run.completion_time,
                              last_reconcile_time=now, failure_message=run.failure_message or None,
                              details=details(run))


@workflow.defn(name=WorkflowType.BENCHMARK_JOB)
class BenchmarkJobWorkflow(EntityWorkflow[BenchState]):
    def __init__(self) -> None:
        super().__init__(BenchState())
        self.settings = BenchSettings()

    @workflow.run
    async def run(self, start: BenchStart) -> BenchState:
        self.settings = start.settings
        self.begin(start, start.carried)
        return await self.live()

    def run_is_full(self) -> bool:
        return self.state.runs >= self.settings.runs_per_run

    def reset_run_counts(self) -> None:
        self.state.runs = 0

    async def next_pass(self, timed_out: bool) -> bool:
        assert self.ref is not None
        observed: BenchObserveOutput = await workflow.execute_activity_method(
            BenchmarkActivities.observe, BenchObserveInput(job=self.ref), **options.KUBE)
        if not observed.present:
            return False
        self.state.generation = max(self.state.generation, observed.generation)
        done = described_generation(observed.status)
        if self.state.run is None and done >= observed.generation:
            self.state.acted_generation = max(self.state.acted_generation, observed.generation)
            self._publish(observed.status.state.value if observed.status and observed.status.state else "Idle")
            return True
        while self.state.acted_generation < self.state.generation and not self.state.deleting:
            generation = self.state.generation
            self.state.acted_generation = generation
            self.state.runs += 1
            if not await self._benchmark(generation):
                return False
        return not self.state.deleting

    async def closing(self) -> None:
        run = self.state.run
        if run is not None and run.job_name and run.state in (BenchmarkJobState.PENDING, BenchmarkJobState.RUNNING):
            await self._stop(run)

    def _interrupted(self) -> bool:
        return self.state.deleting or self.state.generation > self.state.acted_generation

    async def _pause(self, seconds: float) -> None:
        """A durable timer that a delete or a newer generation ends at once."""
        try:
            await workflow.wait_condition(self._interrupted, timeout=timedelta(seconds=seconds))
        except TimeoutError:
            pass

    async def _benchmark(self, generation: int) -> bool:
        """One generation's run to its end (or until deleted or superseded); False when the object is gone."""
        assert self.ref is not None
        run = self.state.run = BenchRun(generation=generation, namespace=self.ref.namespace or "")
        self._publish("Pending")
        if not await self._write(run):
            return False
        while True:
            try:
                started: BenchStartOutput = await workflow.execute_activity_method(
                    BenchmarkActivities.start, BenchStartInput(job=self.ref, generation=generation), **options.KUBE)
            except ActivityError as exc:
                if not is_permanent(exc):
                    raise
                # A refusal no retry changes (the worker may not create Jobs there, the apiserver refused the
                # Job): the run ends Failed saying so, instead of the workflow failing with the object Pending.
                return await self._end(run, BenchmarkJobState.FAILED, None,
                                       f"the benchmark Job could not be created: {error_message(exc)}")
            if started.outcome == StartOutcome.STALE:
                return True  # a newer generation (its own run follows) or the object is gone (observe says)
            if started.outcome == StartOutcome.INVALID:
                return await self._end(run, BenchmarkJobState.FAILED, None, started.message)
            if started.outcome == StartOutcome.STARTED:
                break
            if run.failure_message != started.message:
                # Still Pending: what it waits for is said in failureMessage until the run starts.
                run.failure_message = started.message
                if not await self._write(run):
                    return False
            await self._pause(self.settings.wait_seconds)
            if self._interrupted():
                return True
        run.job_name, run.results, run.endpoint, run.failure_message = (started.job_name, started.results,
                                                                        started.endpoint, "")
        await self._write(run)
        while True:
            seen: BenchJobOutput = await workflow.execute_activity_method(
                BenchmarkActivities.job_state, BenchJobInput(namespace=run.namespace, job_name=run.job_name),
                **options.KUBE)
            if seen.phase == JobPhase.SUCCEEDED:
                if workflow.patched(SUMMARY_PATCH):
                    await self._summarize(run, seen)
                return await self._end(run, BenchmarkJobState.COMPLETED, seen, "")
            if seen.phase in (JobPhase.FAILED, JobPhase.MISSING):
                return await self._end(run, BenchmarkJobState.FAILED, seen, seen.message)
            if seen.phase == JobPhase.RUNNING and run.state != BenchmarkJobState.RUNNING:
                run.state, run.start_time = BenchmarkJobState.RUNNING, seen.start_time or self._now()
                self._publish("Running")
                if not await self._write(run):
                    return False
            await self._pause(self.settings.poll_seconds)
            if self.state.deleting:
                return True  # closing() stops the Job
            if self.state.generation > generation:
                await self._stop(run)
                return await self._end(run, BenchmarkJobState.FAILED, None,
                                       f"superseded by generation {self.state.generation}: the Job {run.job_name} "
                                       "was stopped", write=False)

    async def _end(self, run: BenchRun, state: BenchmarkJobState, seen: BenchJobOutput | None, message: str,
                   *, write: bool = True) -> bool:
        run.state = state
        if seen is not None and seen.start_time is not None and run.start_time is None:
            run.start_time = seen.start_time
        run.completion_time = (seen.completion_time if seen is not None and seen.completion_time else self._now())
        run.failure_message = message
        self._publish(state.value)
        return await self._write(run) if write else True

    async def _summarize(self, run: BenchRun, seen: BenchJobOutput) -> None:
        """The results' summary into details: for pvc:// what the Job's pod reported (its summarize step's
        termination message, read by the same job_state call: no command of its own, so no patch); for oci://
        read from the registry."""
        if not run.results or run.results.startswith("pvc://"):
            # A job_state answer recorded before the step existed carries neither (a pod without the step).
            run.summary = seen.summary
            run.summary_problem = seen.summary_problem or (
                "" if seen.summary is not None else "the Job's pod reported no summary: see the claim")
            return
        try:
            read: BenchSummarizeOutput = await workflow.execute_activity_method(
                BenchmarkActivities.summarize, BenchSummarizeInput(results=run.results), **options.CLEANUP)
        except ActivityError as exc:
            run.summary_problem = f"the summary could not be read: {exc.cause or exc}"
            return
        run.summary, run.summary_problem = read.summary, read.problem

    async def _stop(self, run: BenchRun) -> None:
        stopped: BenchStopOutput = await workflow.execute_activity_method(
            BenchmarkActivities.stop, BenchJobInput(namespace=run.namespace, job_name=run.job_name), **options.KUBE)
        del stopped

    async def _write(self, run: BenchRun) -> bool:
        assert self.ref is not None
        written: BenchWriteOutput = await workflow.execute_activity_method(
            BenchmarkActivities.write_status, BenchWriteInput(job=self.ref, status=run_status(run, self._now())),
            **options.KUBE)
        return written.present

    @staticmethod
    def _now() -> datetime:
        return workflow.now().replace(microsecond=0)

    def _publish(self, phase: str) -> None:
        assert self.visibility is not None
        if phase != self.state.phase:
            self.state.phase = phase
            self.visibility.publish(phase)


__all__ = ["BenchRun", "BenchSettings", "BenchStart", "BenchState", "BenchmarkJobWorkflow", "described_generation",
           "details", "run_status"]
