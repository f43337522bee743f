"""spec.scalingPolicy on the time-skipping server: a ScalerWorld (testkit/autoscaler_fakes.py) whose
`serving.observe` also carries the policy as the real activity does (the effective policy in API form when
it coordinates; refused, InvalidScalingPolicy, when rendering/scaling_policy.py says it breaks a rule) and,
for components the test marks OMENative, the projected replica's name and its /scale count. The test plays
the HPA by writing the anchor's count (`scale`); `serving.ensure_revision` is recorded, and for an OMENative
component its `component_replicas` becomes the replica's count, as the projection writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity

from servingops.activities.serving.autoscaler import AutoscalerObservation, autoscaler_status
from servingops.activities.serving.types import (
    EnsureRevisionInput,
    ObserveInput,
    RevisionObservation,
    ServiceObservation,
)
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.ome.autoscaling import ComponentAutoscaler, ScalingPolicy
from servingops.api_models.ome.enums import ComponentType
from servingops.rendering import scaling_policy
from testkit.autoscaler_fakes import ScalerWorld
from testkit.rollout_fakes import FakeCluster


def hpa_answer(current: int = 1) -> AutoscalerObservation:
    """What the real serving.ensure_autoscaler answers for a component with an inline HPA block."""
    block = ComponentAutoscaler.model_validate({"class": "HPA"})
    return AutoscalerObservation(status=autoscaler_status(
        block, {"status": {"currentReplicas": current, "desiredReplicas": current}}))


class ScalingWorld(ScalerWorld):
    def __init__(self, cluster: FakeCluster) -> None:
        super().__init__(cluster)
        self.policy: dict[str, Any] | None = None
        """spec.scalingPolicy as written (API form); None: unset."""
        self.native: dict[ComponentType, int | None] = {}
        """OMENative components -> their projected replica's spec.replicas (None: not projected yet, as the
        real observe reads no replica before the first ensure_revision)."""
        self.max_replicas: dict[ComponentType, int] = {}
        self.own_scalers: set[ComponentType] = set()
        """Components whose spec has an autoscaler that owns the count (the rule refuses them as followers)."""
        self.ensured: list[EnsureRevisionInput] = []

    def set_policy(self, policy: dict[str, Any] | None) -> None:
        self.policy = policy
        self.cluster.generation += 1

    def scale(self, component: ComponentType, count: int) -> None:
        """The HPA writes the component's count: the replica's /scale (OMENative) or the Deployment of its
        revision carrying the traffic (RawDeployment: the only revision here, "a")."""
        if component in self.native:
            self.native[component] = count
        else:
            revision = self.cluster.revisions[component]["a"]
            revision.replicas = count
            revision.pods = revision.pods[:count] + [0.0] * max(0, count - len(revision.pods))

    def count(self, component: ComponentType) -> int:
        if component in self.native:
            return self.native[component] or 0
        revision = self.cluster.revisions.get(component, {}).get("a")
        return revision.replicas if revision is not None else 0

    def activities(self) -> list[Callable[..., Any]]:
        world = self
        base = super().activities()
        named = {getattr(a, "__temporal_activity_definition").name: a for a in base}
        observe_fake, ensure_fake = named["serving.observe"], named["serving.ensure_revision"]

        @activity.defn(name="serving.observe")
        async def observe(request: ObserveInput) -> ServiceObservation | None:
            seen: ServiceObservation | None = await observe_fake(request)
            if seen is None:
                return None
            for component in seen.components:
                component.max_replicas = world.max_replicas.get(component.component)
                if component.component in world.native:
                    component.replica = f"{world.cluster.owner.name}-{component.component.value}"
                    component.scale_replicas = world.native[component.component]
            policy = ScalingPolicy.model_validate(world.policy) if world.policy is not None else None
            try:
                plan = scaling_policy.plan(policy, [c.component for c in seen.components], world.own_scalers)
            except scaling_policy.ScalingPolicyError as exc:
                raise application_error(ErrorType.INVALID_SCALING_POLICY,
                                        f"{world.cluster.ref.describe()}: {exc}") from exc
            seen.scaling_policy = world.policy if plan is not None else None
            return seen

        @activity.defn(name="serving.ensure_revision")
        async def ensure_revision(request: EnsureRevisionInput) -> RevisionObservation:
            world.ensured.append(request)
            answer: RevisionObservation = await ensure_fake(request)
            if request.key.component in world.native:
                # The projection: the replica's count is the given whole count; else, while the component's own
                # scaler owns the count of a replica already projected, the scaler's count stays; else minReplicas.
                component = request.key.component
                desired = world.cluster.desired[component][1]
                if request.component_replicas is not None:
                    world.native[component] = request.component_replicas
                elif component not in world.own_scalers or world.native.get(component) is None:
                    world.native[component] = desired
            return answer

        replaced = {"serving.observe": observe, "serving.ensure_revision": ensure_revision}
        return [replaced.get(getattr(a, "__temporal_activity_definition").name, a) for a in base]





def rolling_world(env: Any) -> ScalingWorld:
    """A RawDeployment engine of 4 without a scaler (the anchor: only the service and rollout runs set its
    count) rolling by rollingUpdate (maxSurge 1, maxUnavailable 0), and a decoder following it by 0.5:
    tests/test_scaling_policy_rollout.py and the history recorder (tests/histories/autoscaler_scenarios.py)."""
    cluster = FakeCluster(env)
    world = ScalingWorld(cluster)
    cluster.set_desired(ComponentType.ENGINE, "a", 4)
    cluster.set_desired(ComponentType.DECODER, "a", 1)
    world.digests.update({ComponentType.ENGINE: None, ComponentType.DECODER: None})
    cluster.spec_rollout = {"groups": [{"components": ["engine"], "rollingUpdate": {"maxSurge": 1,
                                                                                     "maxUnavailable": 0}}]}
    world.policy = {"mode": "Proportional", "proportional": {"anchor": "engine", "ratios": {"decoder": "0.5"}}}
    return world
__all__ = ["ScalingWorld", "hpa_answer", "rolling_world"]
