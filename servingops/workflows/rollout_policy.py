"""RolloutPolicyWorkflow: one per RolloutPolicy (id rolloutpolicy/<ns>/<name>/<uid>).

Keeps the bounded status of RolloutPolicyStatus true: observedGeneration, portableDigest
("rp1:" + canonical hash, workflows.rollout.policy_pinning.portable_digest), the Ready condition (False
with reason PolicyInvalid when the body breaks a policy admission rule) and attachedGroups, the
count of rollout groups in the namespace whose policyRef names this policy.

A spec change arrives as `object-changed` with a higher generation and is acted on once. Which
InferenceServices reference the policy changes without the policy's generation moving: each
InferenceServiceWorkflow sends `refresh-now` when its references to this policy change (or it is
deleted), and the count is re-taken at once; every ATTACH_RESYNC it is re-taken anyway, as a
safety net for a nudge that had no workflow to reach. It is written only when it moved.
History stays bounded with continue-as-new, carrying the state in the single argument.
The policy holds no finalizer: nothing is owned, so deletion only ends the workflow.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.entity import EntityWorkflow, ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote, KubernetesActivities, PolicyAttachments, StatusPatch
    from servingops.api_models.contract import Signal, StartObject, WorkflowType
    from servingops.api_models.ome.rollout_policy import RolloutPolicySpec, RolloutPolicyStatus
    from servingops.api_models.refs import ConditionUpdate
    from servingops.workflows.rollout.policy_pinning import kind_of, portable_digest

ATTACH_RESYNC = timedelta(minutes=5)
"""How often the attached-groups count is re-taken without a `refresh-now` nudge."""
MAX_REFRESHES_PER_RUN = 500
"""A run continues as new after this many refreshes even if Temporal has not suggested it yet."""


class PolicyState(ReconcileState):
    """What the `state` query answers."""

    phase: str = "Pending"
    """Pending, Ready, Invalid or Deleted."""
    reason: str = "Pending"
    message: str = ""
    portable_digest: str | None = None
    attached_groups: int | None = None
    refreshes: int = 0
    """Attachment recounts in this run."""


class RolloutPolicyRun(StartObject):
    """The bridge starts the workflow with a StartObject; a continued run also carries its state
    (one argument, as in ModelWorkflow, so the object keeps its type)."""

    carried: PolicyState | None = None


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
class RolloutPolicyWorkflow(EntityWorkflow[PolicyState]):
    def __init__(self) -> None:
        super().__init__(PolicyState())
        self._refresh_now = False

    # -- signals, queries ------------------------------------------------------------------------

    # object-changed, delete and the state query come from EntitySignals.

    @workflow.signal(name=Signal.REFRESH_NOW)
    def refresh_now(self) -> None:
        self._refresh_now = True

    # -- main ------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: RolloutPolicyRun) -> PolicyState:
        self.begin(start, start.carried)
        return await self.live()

    # -- the entity loop's hooks (workflows/entity.py) -------------------------------------------

    async def first_pass(self) -> bool:
        """A new run reconciles at once; a continued one only when a newer generation came."""
        if not self.continued or self.behind():
            return await self._reconcile() and not self.state.deleting
        return not self.state.deleting

    async def next_pass(self, timed_out: bool) -> bool:
        """A newer spec is reconciled whole; a nudge or the resync only recounts the attachments."""
        if self.behind():
            return await self._reconcile() and not self.state.deleting
        self._refresh_now = False
        self.state.refreshes += 1
        await self._recount()
        return not self.state.deleting

    def rest_time(self) -> timedelta:
        return ATTACH_RESYNC

    def woken(self) -> bool:
        return self._refresh_now

    def run_is_full(self) -> bool:
        return self.state.refreshes >= MAX_REFRESHES_PER_RUN

    def reset_run_counts(self) -> None:
        self.state.refreshes = 0

    def gone(self) -> PolicyState:
        self.state.reason, self.state.message = "Deleted", "the policy is gone"
        return super().gone()

    # -- a pass ----------------------------------------------------------------------------------

    async def _reconcile(self) -> bool:
        """Re-read the policy and write its whole status; False when it is gone or going."""
        assert self.ref is not None and self.visibility is not None
        self._refresh_now = False
        obj = await workflow.execute_activity_method(KubernetesActivities.read_object, self.ref, **options.KUBE)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return False
        generation = int(obj["metadata"].get("generation", 0))
        self.state.generation = max(self.state.generation, generation)
        body, problem = validate(obj.get("spec"))
        before = self.state.reason
        self.state.portable_digest = portable_digest(body) if body is not None else None
        if problem is None:
            self.state.phase, self.state.reason = "Ready", "Valid"
            kind = kind_of(body) if body is not None else None
            self.state.message = f"{kind.value if kind else 'progression'} policy {self.state.portable_digest}"
        else:
            self.state.phase, self.state.reason, self.state.message = "Invalid", "PolicyInvalid", problem
        self.state.attached_groups = await self._count()
        self.visibility.publish(self.state.phase)
        await self._patch(generation, announce=self.state.reason != before)
        self.state.acted_generation = max(self.state.acted_generation, generation)
        return True

    async def _count(self) -> int:
        assert self.ref is not None
        return await workflow.execute_activity_method(
            KubernetesActivities.list_policy_attachments,
            PolicyAttachments(namespace=self.ref.namespace or "", name=self.ref.name),
            **options.KUBE,
        )

    async def _recount(self) -> None:
        count = await self._count()
        if count != self.state.attached_groups:
            self.state.attached_groups = count
            assert self.ref is not None
            await workflow.execute_activity_method(
                KubernetesActivities.patch_status,
                StatusPatch(ref=self.ref, status=RolloutPolicyStatus(attached_groups=count).to_merge_patch()),
                **options.KUBE,
            )

    async def _patch(self, generation: int, *, announce: bool) -> None:
        """The whole status; with `announce`, the Ready reason moved and an Event says so
        (Warning for an invalid policy)."""
        assert self.ref is not None
        ready = "True" if self.state.phase == "Ready" else "False"
        status = RolloutPolicyStatus(
            portable_digest=self.state.portable_digest, attached_groups=self.state.attached_groups
        )
        kind = "Normal" if ready == "True" else "Warning"
        await workflow.execute_activity_method(
            KubernetesActivities.patch_status,
            StatusPatch(
                ref=self.ref,
                status=status.to_merge_patch(),
                conditions=[
                    ConditionUpdate(type="Ready", status=ready, reason=self.state.reason, message=self.state.message)
                ],
                observed_generation=generation,
                events=[EventNote(type=kind, reason=self.state.reason, message=self.state.message)] if announce else [],
            ),
            **options.KUBE,
        )


__all__ = ["ATTACH_RESYNC", "PolicyState", "RolloutPolicyRun", "RolloutPolicyWorkflow", "validate"]
