"""RolloutPolicyWorkflow: one per RolloutPolicy (id rolloutpolicy/<ns>/<name>/<uid>).

Keeps the bounded status of RolloutPolicyStatus true: observedGeneration, portableDigest
("rp1:" + canonical hash, workflows.rollout.policy_pinning.portable_digest), the Ready condition (False
with reason PolicyInvalid when the body breaks a policy admission rule) and attachedGroups, the
count of rollout groups in the namespace whose policyRef names this policy. Each
InferenceServiceWorkflow sends `refresh-now` when its references to this policy change (or it is
deleted). The loop (spec changes, nudges, the resync, continue-as-new) is the policies' shared one:
workflows/policy_entity.py.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.policy_entity import ATTACH_RESYNC, MAX_REFRESHES_PER_RUN, PolicyEntityWorkflow, PolicyState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import KubernetesActivities, PolicyAttachments
    from servingops.api_models.contract import StartObject, WorkflowType
    from servingops.api_models.ome.rollout_policy import RolloutPolicySpec, RolloutPolicyStatus
    from servingops.workflows.rollout.policy_pinning import kind_of, portable_digest


class RolloutPolicyState(PolicyState):
    """What the `state` query answers."""

    attached_groups: int | None = None


class RolloutPolicyRun(StartObject):
    """The bridge starts the workflow with a StartObject; a continued run also carries its state
    (one argument, as in ModelWorkflow, so the object keeps its type)."""

    carried: RolloutPolicyState | None = None


def validate(spec: dict[str, Any] | None) -> tuple[RolloutPolicySpec | None, str | None]:
    """(parsed body, None) when the body passes the policy's admission rules, else (body or
    None, why not). The rules are those the CRD states: exactly one progression, percent-only
    canary capacities, providerRef-only metrics source."""
    if not spec:
        return None, "the policy has no spec"
    try:
        body = RolloutPolicySpec.model_validate(spec)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return None, f"spec does not parse: {problems}"
    if kind_of(body) is None:
        return body, "exactly one of canary, blueGreen, or rollingUpdate must be set"
    if body.canary is not None:
        for index, step in enumerate(body.canary.steps or []):
            if not (isinstance(step.capacity, str) and step.capacity.endswith("%")):
                return body, f"canary step {index}: a RolloutPolicy canary step capacity must be a percentage"
        if body.canary.prometheus is not None and body.canary.prometheus.server_address:
            return body, "a RolloutPolicy names its metrics source by providerRef only; serverAddress is not admitted"
    return body, None


@workflow.defn(name=WorkflowType.ROLLOUT_POLICY)
class RolloutPolicyWorkflow(PolicyEntityWorkflow[RolloutPolicyState]):
    def __init__(self) -> None:
        super().__init__(RolloutPolicyState())

    @workflow.run
    async def run(self, start: RolloutPolicyRun) -> RolloutPolicyState:
        self.begin(start, start.carried)
        return await self.live()

    async def _reconcile(self) -> bool:
        assert self.ref is not None and self.visibility is not None
        obj = await workflow.execute_activity_method(KubernetesActivities.read_object, self.ref, **options.KUBE)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return False
        generation = int(obj["metadata"].get("generation", 0))
        self.state.generation = max(self.state.generation, generation)
        body, problem = validate(obj.get("spec"))
        before = self.state.reason
        self.state.portable_digest = portable_digest(body) if body is not None else None
        kind = kind_of(body) if body is not None else None
        self._judge(problem, f"{kind.value if kind else 'progression'} policy {self.state.portable_digest}")
        self.state.attached_groups = await self._count()
        self.visibility.publish(self.state.phase)
        status = RolloutPolicyStatus(
            portable_digest=self.state.portable_digest, attached_groups=self.state.attached_groups
        )
        await self._write_status(status.to_merge_patch(), generation, announce=self.state.reason != before)
        self.state.acted_generation = max(self.state.acted_generation, generation)
        return True

    async def _recount(self) -> bool:
        count = await self._count()
        if count != self.state.attached_groups:
            self.state.attached_groups = count
            await self._write_count(RolloutPolicyStatus(attached_groups=count).to_merge_patch())
        return True

    async def _count(self) -> int:
        assert self.ref is not None
        return await workflow.execute_activity_method(
            KubernetesActivities.list_policy_attachments,
            PolicyAttachments(namespace=self.ref.namespace or "", name=self.ref.name),
            **options.KUBE,
        )


__all__ = [
    "ATTACH_RESYNC",
    "MAX_REFRESHES_PER_RUN",
    "RolloutPolicyRun",
    "RolloutPolicyState",
    "RolloutPolicyWorkflow",
    "validate",
]
