"""AutoscalerPolicyWorkflow: one per AutoscalerPolicy (id autoscalerpolicy/<ns>/<name>/<uid>).

Keeps the bounded status of AutoscalerPolicyStatus true: observedGeneration, portableDigest ("ap1:" +
canonical hash, rendering/autoscaler_policy.py), attachedComponents (the components of the namespace's
InferenceServices whose autoscalerPolicyRef names it) and a Ready condition (False, reason PolicyInvalid,
when the stored body breaks an admission rule, which the CRD normally refuses at apply time).

A spec change also signals every service referencing the policy with `autoscaler-policy-changed`, so
each renders its components' scalers from the new spec (a service also re-reads the policy on its own
passes; the signal makes it prompt). Each InferenceServiceWorkflow sends `refresh-now` when its
references change. The loop (spec changes, nudges, the resync, continue-as-new) is the policies' shared
one: workflows/policy_entity.py. Deletion ends the workflow; consumers then report PolicyNotFound and
keep their last good scaler.
"""

from __future__ import annotations

from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.policy_entity import ATTACH_RESYNC, MAX_REFRESHES_PER_RUN, PolicyEntityWorkflow, PolicyState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.autoscaler_policy import AutoscalerPolicyActivities, PolicyObservation
    from servingops.api_models import contract
    from servingops.api_models.contract import Signal, StartObject, WorkflowType
    from servingops.api_models.ome.autoscaler_policy import AutoscalerPolicyStatus


class AutoscalerPolicyState(PolicyState):
    """What the `state` query answers."""

    attached_components: int | None = None


class AutoscalerPolicyRun(StartObject):
    """The bridge starts the workflow with a StartObject; a continued run also carries its state."""

    carried: AutoscalerPolicyState | None = None


@workflow.defn(name=WorkflowType.AUTOSCALER_POLICY)
class AutoscalerPolicyWorkflow(PolicyEntityWorkflow[AutoscalerPolicyState]):
    def __init__(self) -> None:
        super().__init__(AutoscalerPolicyState())

    @workflow.run
    async def run(self, start: AutoscalerPolicyRun) -> AutoscalerPolicyState:
        self.begin(start, start.carried)
        return await self.live()

    async def _observe(self) -> PolicyObservation | None:
        assert self.ref is not None
        return await workflow.execute_activity_method(AutoscalerPolicyActivities.observe, self.ref, **options.KUBE)

    async def _recount(self) -> bool:
        seen = await self._observe()
        if seen is None or seen.deleting:
            return False
        if seen.attached_components != self.state.attached_components:
            self.state.attached_components = seen.attached_components
            count = AutoscalerPolicyStatus(attached_components=seen.attached_components)
            await self._write_count(count.to_merge_patch())
        return True

    async def _reconcile(self) -> bool:
        """Re-read the policy, write its whole status and tell its consumers."""
        assert self.ref is not None and self.visibility is not None
        seen = await self._observe()
        if seen is None or seen.deleting:
            return False
        self.state.generation = max(self.state.generation, seen.generation)
        before = self.state.reason
        self.state.portable_digest = seen.portable_digest
        self.state.attached_components = seen.attached_components
        self._judge(seen.problem,
                    f"renders for {seen.attached_components} component(s): {seen.portable_digest}")
        self.visibility.publish(self.state.phase)
        status = AutoscalerPolicyStatus(portable_digest=seen.portable_digest,
                                        attached_components=seen.attached_components)
        await self._write_status(status.to_merge_patch(), seen.generation, announce=self.state.reason != before)
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


__all__ = [
    "ATTACH_RESYNC",
    "MAX_REFRESHES_PER_RUN",
    "AutoscalerPolicyRun",
    "AutoscalerPolicyState",
    "AutoscalerPolicyWorkflow",
]
