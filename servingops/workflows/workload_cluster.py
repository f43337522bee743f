"""WorkloadClusterWorkflow: one per WorkloadCluster (id workloadcluster/<name>/<uid>).

Keeps the Ready condition true to the member's connection health, and nothing else (the seed:
"Conditions report connection health ONLY"): True with reason Connected while the member's
apiserver answers and accepts the kubeconfig's credentials, else False with the reason of
api_models.contract.workload_cluster.ConnectionReason.

It probes (`workloadcluster.check`) when it starts, on every newer generation (object-changed),
on every change of the `servingops.io/recheck` annotation, and every health-check interval in
between (a durable timer: `wait_condition` with a timeout, so a signal wakes it at once). The
interval is the operator ConfigMap's `workloadClusters.healthCheckInterval` (30 s by default),
read when a run opens and when a signal wakes it. The condition is written only when the verdict
moved (status, reason or message); lastTransitionTime moves only with its status
(api_models/conditions.py). An Event goes with a change of status or reason: Normal when it
becomes Ready, Warning with the reason when it is not (the first verdict included) - never one
per probe. Deletion ends it: the WorkloadCluster owns nothing and holds no finalizer.
History stays bounded with continue-as-new, carrying the state.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.entity import EntityWorkflow, ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote, KubernetesActivities, StatusPatch
    from servingops.activities.operator_config import OperatorConfigActivities
    from servingops.activities.workload_cluster.activities import WorkloadClusterActivities
    from servingops.activities.workload_cluster.types import CheckInput, CheckOutput
    from servingops.api_models.contract import AnnotationEvent, Signal, StartObject, WorkflowType
    from servingops.api_models.contract.workload_cluster import ConnectionVerdict
    from servingops.api_models.durations import parse_duration
    from servingops.api_models.refs import ConditionUpdate

DEFAULT_INTERVAL = timedelta(seconds=30)
"""The health-check interval when the operator ConfigMap cannot be used (it does not parse)."""
MAX_CHECKS_PER_RUN = 500
"""A run continues as new after this many probes even if Temporal has not suggested it yet
(each probe is about ten events: 500 keep a run near 5k events, far below the 50k limit)."""
CONDITION = "Ready"


class ClusterHealthState(ReconcileState):
    """What the `state` query answers."""

    phase: str = "Pending"
    """Pending (no verdict yet), Ready, NotReady, or Deleted."""
    verdict: ConnectionVerdict | None = None
    """The last probe's verdict."""
    interval_seconds: float = DEFAULT_INTERVAL.total_seconds()
    checks: int = 0
    """Probes in this run."""


class WorkloadClusterRun(StartObject):
    """The bridge starts the workflow with a StartObject; a continued run also carries its state."""

    carried: ClusterHealthState | None = None


def transition_event(before: ConnectionVerdict | None, after: ConnectionVerdict) -> EventNote | None:
    """The Event a new verdict is worth: on a change of Ready's status or reason only."""
    if before is not None and (before.connected, before.reason) == (after.connected, after.reason):
        return None
    if after.connected:
        return EventNote(type="Normal", reason=after.reason.value, message=after.message)
    return EventNote(type="Warning", reason=after.reason.value, message=after.message)


@workflow.defn(name=WorkflowType.WORKLOAD_CLUSTER)
class WorkloadClusterWorkflow(EntityWorkflow[ClusterHealthState]):
    def __init__(self) -> None:
        super().__init__(ClusterHealthState())
        self._woken = False
        """A signal asked for a probe now (also re-read the interval)."""

    # object-changed, delete and the state query come from EntitySignals.

    @workflow.signal(name=Signal.ANNOTATION)
    def annotation(self, event: AnnotationEvent) -> None:
        self._woken = True

    @workflow.run
    async def run(self, start: WorkloadClusterRun) -> ClusterHealthState:
        self.begin(start, start.carried)
        return await self.live()

    # -- the entity loop's hooks (workflows/entity.py) ----------------------------------------------

    async def first_pass(self) -> bool:
        await self._read_interval()
        if self.state.deleting:
            return False
        return await self._check()

    async def next_pass(self, timed_out: bool) -> bool:
        """A signal (not the interval) ended the rest: the interval is read again before the probe."""
        if not timed_out:
            self._woken = False
            await self._read_interval()
            if self.state.deleting:
                return False
        return await self._check()

    def rest_time(self) -> timedelta:
        return timedelta(seconds=self.state.interval_seconds)

    def woken(self) -> bool:
        return self._woken

    def run_is_full(self) -> bool:
        return self.state.checks >= MAX_CHECKS_PER_RUN

    def reset_run_counts(self) -> None:
        self.state.checks = 0

    # -- a probe ------------------------------------------------------------------------------------

    async def _read_interval(self) -> None:
        defaults = await workflow.execute_activity_method(OperatorConfigActivities.read, **options.KUBE)
        if defaults.error is not None:
            workflow.logger.warning("operator config unusable, health-check interval %s: %s",
                                    DEFAULT_INTERVAL, defaults.error)
            self.state.interval_seconds = DEFAULT_INTERVAL.total_seconds()
            return
        interval = parse_duration(defaults.workload_clusters.health_check_interval)
        self.state.interval_seconds = interval.total_seconds()

    async def _check(self) -> bool:
        """Probe and write what moved; False when the WorkloadCluster is gone or going."""
        assert self.ref is not None and self.visibility is not None
        self.state.checks += 1
        found: CheckOutput = await workflow.execute_activity_method(
            # MEMBER: the probe's requests take up to 3 x 8 s; only a control-plane failure is retried.
            WorkloadClusterActivities.check, CheckInput(cluster=self.ref), **options.MEMBER)
        if not found.present or found.verdict is None:
            return False
        verdict, before = found.verdict, self.state.verdict
        self.state.generation = max(self.state.generation, verdict.generation)
        self.state.acted_generation = max(self.state.acted_generation, verdict.generation)
        if before is None or (before.connected, before.reason, before.message) != (
                verdict.connected, verdict.reason, verdict.message):
            note = transition_event(before, verdict)
            written = await workflow.execute_activity_method(
                KubernetesActivities.patch_status,
                StatusPatch(
                    ref=self.ref,
                    conditions=[ConditionUpdate(type=CONDITION, status="True" if verdict.connected else "False",
                                                reason=verdict.reason.value, message=verdict.message)],
                    events=[note] if note is not None else [],
                ),
                **options.KUBE,
            )
            if not written:
                return False
        self.state.verdict = verdict
        self.state.phase = "Ready" if verdict.connected else "NotReady"
        self.visibility.publish(self.state.phase)
        return True


__all__ = ["DEFAULT_INTERVAL", "ClusterHealthState", "WorkloadClusterRun", "WorkloadClusterWorkflow",
           "transition_event"]
