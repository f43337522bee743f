"""ServingRuntimeWorkflow: one per ServingRuntime / ClusterServingRuntime
(id runtime/<ns or _cluster>/<name>/<uid>).

Keeps status.inheritanceChain (root first; [self] without inheritance) and the InheritanceReady
condition true. The chain depends on other objects: a parent can appear, change its own parent or
go without this runtime's generation moving, so besides `object-changed` (spec edits) and the
`annotation` signal (the bridge watches ome.io/inherit-from, which moves no generation) the chain is
walked again every RESYNC, and written only when it changed. The runtime holds no finalizer:
nothing is owned, so deletion only ends the workflow.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from servingops.workflows import options
from servingops.workflows.entity import EntityWorkflow, ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote, KubernetesActivities, StatusPatch
    from servingops.activities.serving.runtimes import RuntimeActivities, RuntimeResolution
    from servingops.api_models.contract import AnnotationEvent, Signal, StartObject, WorkflowType
    from servingops.api_models.errors import error_message, error_type_of
    from servingops.api_models.ome.runtimes import ServingRuntimeStatus
    from servingops.api_models.refs import ConditionUpdate

RESYNC = timedelta(minutes=2)
"""How often the chain is walked again without a signal (parents change without telling us)."""
MAX_RESYNCS_PER_RUN = 500
CONDITION = "InheritanceReady"


class RuntimeState(ReconcileState):
    phase: str = "Pending"
    """Pending, Ready (chain resolved), Unresolved, or Deleted."""
    chain: list[str] = []
    reason: str = ""
    message: str = ""
    resyncs: int = 0


class RuntimeRun(StartObject):
    carried: RuntimeState | None = None


@workflow.defn(name=WorkflowType.SERVING_RUNTIME)
class ServingRuntimeWorkflow(EntityWorkflow[RuntimeState]):
    def __init__(self) -> None:
        super().__init__(RuntimeState())
        self._recheck = False

    @workflow.signal(name=Signal.ANNOTATION)
    def annotation(self, event: AnnotationEvent) -> None:
        self._recheck = True

    @workflow.run
    async def run(self, start: RuntimeRun) -> RuntimeState:
        self.begin(start, start.carried)
        return await self.live()

    # -- the entity loop's hooks (workflows/entity.py) ----------------------------------------------

    async def first_pass(self) -> bool:
        """A new run walks the chain at once; a continued one only when a newer generation came."""
        if not self.continued or self.behind():
            return await self.next_pass(False)
        return not self.state.deleting

    async def next_pass(self, timed_out: bool) -> bool:
        return await self._reconcile() and not self.state.deleting

    def rest_time(self) -> timedelta:
        return RESYNC

    def woken(self) -> bool:
        return self._recheck

    def rested(self, timed_out: bool) -> None:
        if timed_out:
            self.state.resyncs += 1

    def run_is_full(self) -> bool:
        return self.state.resyncs >= MAX_RESYNCS_PER_RUN

    def reset_run_counts(self) -> None:
        self.state.resyncs = 0

    # -- a pass -------------------------------------------------------------------------------------

    async def _reconcile(self) -> bool:
        """Walk the chain; write status when it changed. False when the runtime is gone or going."""
        assert self.ref is not None and self.visibility is not None
        self._recheck = False
        try:
            found: RuntimeResolution | None = await workflow.execute_activity_method(
                RuntimeActivities.resolve_runtime, self.ref, **options.KUBE
            )
        except ActivityError as exc:
            # A permanent refusal (a role without a rule: Forbidden) would otherwise fail the
            # workflow with nothing on the object; it becomes the condition, and the next resync
            # or change tries again.
            error = error_type_of(exc)
            if error is None or not error.permanent:
                raise
            found = RuntimeResolution(generation=self.state.generation, chain=self.state.chain or [self.ref.name],
                                      ready=False, reason=error.value, message=error_message(exc))
        if found is None:
            return False
        self.state.generation = max(self.state.generation, found.generation)
        changed = (found.chain, found.reason, found.message) != (self.state.chain, self.state.reason,
                                                                  self.state.message)
        first = self.state.acted_generation == 0
        if changed or found.generation > self.state.acted_generation:
            announce = changed and (not first or not found.ready)
            await self._write(found, announce=announce)
        self.state.chain, self.state.reason, self.state.message = found.chain, found.reason, found.message
        self.state.phase = "Ready" if found.ready else "Unresolved"
        self.state.acted_generation = max(self.state.acted_generation, found.generation)
        self.visibility.publish(self.state.phase)
        return True

    async def _write(self, found: RuntimeResolution, *, announce: bool) -> None:
        assert self.ref is not None
        ready = "True" if found.ready else "False"
        note = EventNote(type="Normal" if found.ready else "Warning", reason=found.reason, message=found.message)
        await workflow.execute_activity_method(
            KubernetesActivities.patch_status,
            StatusPatch(
                ref=self.ref,
                status=ServingRuntimeStatus(inheritance_chain=found.chain).to_merge_patch(),
                conditions=[ConditionUpdate(type=CONDITION, status=ready, reason=found.reason, message=found.message)],
                events=[note] if announce else [],
            ),
            **options.KUBE,
        )


__all__ = ["RESYNC", "RuntimeRun", "RuntimeState", "ServingRuntimeWorkflow"]
