"""The backend-policy side of the fake cluster (testkit/rollout_fakes.py FakeCluster): what
serving.ensure_backend_policy does to the namespace's BackendTrafficPolicies, in memory, held to the
real activity (activities/serving/traffic_policy.py) by tests/test_traffic_policy_conformance.py.

It renders with the same pure rules (rendering/backend_traffic_policy.py); what it plays itself is the
apiserver: whether the kind is served, the policies in the namespace (a hand-authored one is a test's
`author`), the apply and the delete, and the Gateway's verdict (`accept`).
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from temporalio import activity

from servingops.activities.serving.traffic_policy import TrafficPolicyObservation
from servingops.activities.serving.types import ObserveInput
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.ome.traffic import TrafficReason, TrafficSpec
from servingops.api_models.refs import ConditionUpdate
from servingops.rendering import backend_traffic_policy as btp

if TYPE_CHECKING:
    from testkit.rollout_fakes import FakeCluster


class FakeBackendPolicies:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.served = True
        """Whether the apiserver serves gateway.envoyproxy.io/v1alpha1 BackendTrafficPolicy."""
        self.traffic: dict[str, Any] | None = None
        """spec.traffic of the service (API form)."""
        self.policies: dict[str, dict[str, Any]] = {}
        """The namespace's BackendTrafficPolicies by name (ours and hand-authored)."""
        self.calls = 0

    def author(self, name: str, routes: list[str]) -> dict[str, Any]:
        """A hand-authored policy (no ownerReference) targeting `routes`, as `kubectl apply` leaves it."""
        policy = {"apiVersion": btp.API_VERSION, "kind": btp.KIND,
                  "metadata": {"name": name, "namespace": self.cluster.owner.namespace, "uid": str(uuid.uuid4())},
                  "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": r}
                                          for r in routes], "loadBalancer": {"type": "Random"}}}
        self.policies[name] = policy
        return copy.deepcopy(policy)

    def accept(self, name: str, accepted: bool = True) -> None:
        """Play Envoy Gateway: its verdict on the policy, in status.ancestors[]."""
        self.policies[name]["status"] = {"ancestors": [{"ancestorRef": {"name": "eg"}, "conditions": [
            {"type": "Accepted", "status": "True" if accepted else "False",
             "reason": "Accepted" if accepted else "Invalid", "message": ""}]}]}

    def declared(self) -> bool:
        return btp.declares_traffic(self.traffic, self.cluster.annotations)

    def ensure(self, inp: ObserveInput) -> TrafficPolicyObservation:
        self.calls += 1
        cluster = self.cluster
        if cluster.gone or (inp.isvc.uid and inp.isvc.uid != cluster.uid):
            raise application_error(ErrorType.OBJECT_GONE, f"{inp.isvc.describe()} is gone")
        owner = cluster.owner
        try:
            traffic = TrafficSpec.model_validate(self.traffic) if self.traffic else None
        except ValidationError as exc:
            raise application_error(ErrorType.INVALID_SPEC, f"spec.traffic: {exc}") from exc
        declared = btp.intent(traffic, cluster.annotations)
        mine = [p for p in self.policies.values() if btp.ours(p, owner)]
        if declared is None:
            for policy in mine:
                del self.policies[policy["metadata"]["name"]]
            return TrafficPolicyObservation()
        previous = cluster.status.get("traffic")

        def status(emitted: str | None, routes: list[str], updates: list[ConditionUpdate]) -> TrafficPolicyObservation:
            return TrafficPolicyObservation(status=btp.traffic_status(
                declared, emitted, routes, updates, previous, cluster.generation, datetime.now(UTC)))

        if not self.served:
            return status(None, [], [btp.not_served(f"this cluster serves no {btp.API_VERSION} {btp.KIND}")])
        live_routes = [cluster.route_objects[c] for c in cluster.route_objects]
        routes = [str(r["metadata"]["name"]) for r in live_routes]
        plane = btp.data_plane(live_routes)
        extra = [btp.unsupported_condition(keys)] if (keys := btp.unsupported(declared.annotations)) else []
        found = btp.conflicts(list(self.policies.values()), owner, routes)
        if found:
            for policy in mine:
                del self.policies[policy["metadata"]["name"]]
            return status(None, [], [btp.failed(TrafficReason.CONFLICTING_POLICY,
                                                "; ".join(c.message(owner.namespace) for c in found)), plane])
        if not routes:
            return status(None, [], [btp.waiting("no HTTPRoute of the service exists yet")])
        try:
            body = btp.render_policy(owner, routes, declared)
        except btp.TranslationError as exc:
            return status(None, [], [btp.failed(TrafficReason.TRANSLATION_FAILED, str(exc)), plane, *extra])
        name = body["metadata"]["name"]
        before = self.policies.get(name)
        body["metadata"]["uid"] = before["metadata"]["uid"] if before else str(uuid.uuid4())
        if before is not None and "status" in before and before["spec"] == body["spec"]:
            body["status"] = before["status"]  # a new spec is a new generation: the verdict is to come again
        self.policies[name] = body
        return status(name, routes, [btp.acceptance(body), plane, *extra])

    def activity(self) -> Any:
        @activity.defn(name="serving.ensure_backend_policy")
        async def ensure_backend_policy(inp: ObserveInput) -> TrafficPolicyObservation:
            return self.ensure(inp)

        return ensure_backend_policy
