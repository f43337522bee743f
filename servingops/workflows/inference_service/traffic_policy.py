"""The InferenceService's backend traffic policy (spec.traffic and the ome.io/* traffic annotations as
Envoy Gateway's BackendTrafficPolicy): kept by serving.ensure_backend_policy on each look at the
object while intent is declared or status.traffic still reports a policy, and what status.traffic is
to read. The activity decides everything from the object as it is; this part only calls it and keeps
its answer for the status write.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.activities.serving.traffic_policy import BackendPolicyActivities
    from servingops.activities.serving.types import ObserveInput
    from servingops.api_models.ome.traffic import TrafficCondition, TrafficReason
    from servingops.workflows import options
    from servingops.workflows.inference_service.context import ServiceContext

BACKEND_TRAFFIC_POLICY = "backend-traffic-policy"
"""The patch that added serving.ensure_backend_policy (docs/routing.md)."""


class TrafficPolicy:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.status: dict[str, Any] | None = None
        """status.traffic as the last call said it should read (None: no intent)."""
        self.clear = False
        """status.traffic is on the object and no intent is left: the next status write removes it."""

    async def keep(self, declared: bool, reported: bool) -> None:
        """Keep the policy what the intent says. Histories recorded before the patch observed neither flag
        (decoded False) and so never reach the patch check: they replay without the new command."""
        if not (declared or reported) or not workflow.patched(BACKEND_TRAFFIC_POLICY):
            return
        answer = await workflow.execute_activity_method(
            BackendPolicyActivities.ensure, ObserveInput(isvc=self.ctx.require_ref()), **options.KUBE)
        if answer.status != self.status:
            self.status = answer.status
            self.ctx.dirty = True
        if answer.status is None and reported:
            self.clear = True
            self.ctx.dirty = True

    def awaiting_verdict(self) -> bool:
        """The policy is applied and Envoy Gateway's verdict may still come: BackendPolicyReady Pending
        while the routes' data plane is not known to ignore the policy (on Traefik none ever comes, and
        no poll is spent on it). The verdict is written on the policy: no event of the service says so."""
        conditions = {c.get("type"): c for c in (self.status or {}).get("conditions") or []}
        ready = conditions.get(TrafficCondition.BACKEND_POLICY_READY.value) or {}
        plane = conditions.get(TrafficCondition.DATA_PLANE.value) or {}
        return (ready.get("reason") == TrafficReason.PENDING.value
                and plane.get("reason") != TrafficReason.NOT_HONORED.value)
