"""AutoscalerPolicyWorkflow: one per AutoscalerPolicy (id autoscalerpolicy/<ns>/<name>/<uid>).

Keeps the bounded status of AutoscalerPolicyStatus true: observedGeneration, portableDigest ("ap1:" +
canonical hash, rendering/autoscaler_policy.py), attachedComponents (the components of the namespace's
InferenceServices whose autoscalerPolicyRef names it) and a Ready condition (False, reason PolicyInvalid,
when the stored body breaks an admission rule, which the CRD normally refuses at apply time).

A spec change arrives as `object-changed` with a higher generation: the status is written and every
service referencing the policy gets `autoscaler-policy-changed`, so each renders its components' scalers
from the new spec (a service also re-reads the policy on its own passes; the signal makes it prompt).
Which services reference the policy changes without its generation moving: each InferenceServiceWorkflow
sends `refresh-now` when its references change, and every ATTACH_RESYNC the count is taken anyway.
The policy holds no finalizer and owns nothing: deletion ends the workflow (consumers then report
PolicyNotFound and keep their last good scaler).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.entity import EntityWorkflow, ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.autoscaler_policy import AutoscalerPolicyActivities, PolicyObservation
    from servingops.activities.kubernetes import EventNote, KubernetesActivities, StatusPatch
    from servingops.api_models import contract
    from servingops.api_models.contract import Signal, StartObject, WorkflowType
    from servingops.api_models.ome.autoscaler_policy import AutoscalerPolicyStatus
    from servingops.api_models.refs import ConditionUpdate

ATTACH_RESYNC = timedelta(minutes=5)
"""How often attachedComponents is re-taken without a `refresh-now` nudge."""
MAX_REFRESHES_PER_RUN = 500
"""A run continues as new after this many refreshes even if Temporal has not suggested it yet."""


class AutoscalerPolicyState(ReconcileState):
    """What the `state` query answers."""

    phase: str = "Pending"
    """Pending, Ready, Invalid or Deleted."""
    reason: str = "Pending"
    message: str = ""
    portable_digest: str | None = None
    attached_components: int | None = None
    refreshes: int = 0
    """Attachment recounts in this run."""


class AutoscalerPolicyRun(StartObject):
    """The bridge starts the workflow with a StartObject; a continued run also carries its state."""

    carried: AutoscalerPolicyState | None = None


@workflow.defn(name=WorkflowType.AUTOSCALER_POLICY)
class AutoscalerPolicyWorkflow(EntityWorkflow[AutoscalerPolicyState]):
    def __init__(self) -> None:
        super().__init__(AutoscalerPolicyState())
        self._refresh_now = False

    # object-changed, delete and the state query come from EntitySignals.

    @workflow.signal(name=Signal.REFRESH_NOW)
    def refresh_now(self) -> None:
        self._refresh_now = True

    @workflow.run
    async def run(self, start: AutoscalerPolicyRun) -> AutoscalerPolicyState:
        self.begin(start, start.carried)
        return await self.live()

    # -- the entity loop's hooks (workflows/entity.py) -------------------------------------------

    async def first_pass(self) -> bool:
        if not self.continued or self.behind():
            return await self._reconcile()
        return not self.state.deleting

    async def next_pass(self, timed_out: bool) -> bool:
        """A newer spec is reconciled whole; a nudge or the resync only recounts the attachments."""
        if self.behind():
            return await self._reconcile()
        self._refresh_now = False
        self.state.refreshes += 1
        seen = await self._observe()
        if seen is None or seen.deleting:
            return False
        if seen.attached_components != self.state.attached_components:
            self.state.attached_components = seen.attached_components
            assert self.ref is not None
            await workflow.execute_activity_method(
                KubernetesActivities.patch_status,
                StatusPatch(ref=self.ref, status=AutoscalerPolicyStatus(
                    attached_components=seen.attached_components).to_merge_patch()),
                **options.KUBE)
        return not self.state.deleting

    def rest_time(self) -> timedelta:
        return ATTACH_RESYNC

    def woken(self) -> bool:
        return self._refresh_now

    def run_is_full(self) -> bool:
        return self.state.refreshes >= MAX_REFRESHES_PER_RUN

    def reset_run_counts(self) -> None:
        self.state.refreshes = 0

    def gone(self) -> AutoscalerPolicyState:
        self.state.reason, self.state.message = "Deleted", "the policy is gone"
        return super().gone()

    # -- a pass ----------------------------------------------------------------------------------

    async def _observe(self) -> PolicyObservation | None:
        assert self.ref is not None
        return await workflow.execute_activity_method(AutoscalerPolicyActivities.observe, self.ref, **options.KUBE)

    async def _reconcile(self) -> bool:
        """Re-read the policy, write its whole status and tell its consumers; False when it is gone."""
        assert self.ref is not None and self.visibility is not None
        self._refresh_now = False
        seen = await self._observe()
        if seen is None or seen.deleting:
            return False
        self.state.generation = max(self.state.generation, seen.generation)
        before = self.state.reason
        self.state.portable_digest = seen.portable_digest
        self.state.attached_components = seen.attached_components
        if seen.problem is None:
            self.state.phase, self.state.reason = "Ready", "Valid"
            self.state.message = f"renders for {seen.attached_components} component(s): {seen.portable_digest}"
        else:
            self.state.phase, self.state.reason, self.state.message = "Invalid", "PolicyInvalid", seen.problem
        self.visibility.publish(self.state.phase)
        ready = "True" if self.state.phase == "Ready" else "False"
        announce = self.state.reason != before
        await workflow.execute_activity_method(
            KubernetesActivities.patch_status,
            StatusPatch(
                ref=self.ref,
                status=AutoscalerPolicyStatus(portable_digest=seen.portable_digest,
                                              attached_components=seen.attached_components).to_merge_patch(),
                conditions=[ConditionUpdate(type="Ready", status=ready, reason=self.state.reason,
                                            message=self.state.message)],
                observed_generation=seen.generation,
                events=[EventNote(type="Normal" if ready == "True" else "Warning", reason=self.state.reason,
                                  message=self.state.message)] if announce else [],
            ),
            **options.KUBE)
        self.state.acted_generation = max(self.state.acted_generation, seen.generation)
        namespace = self.ref.namespace or ""
        for consumer in seen.consumers:
            # Best effort: a service whose workflow is not running re-reads the policy when it starts.
            wid = contract.inference_service_workflow_id(namespace, consumer.name, consumer.uid)
            try:
                await workflow.get_external_workflow_handle(wid).signal(Signal.AUTOSCALER_POLICY_CHANGED)
            except Exception as error:
                workflow.logger.debug("InferenceService workflow %s not signalled: %s", wid, error)
        return True


__all__ = ["ATTACH_RESYNC", "AutoscalerPolicyRun", "AutoscalerPolicyState", "AutoscalerPolicyWorkflow"]
