"""Fakes for the autoscaler's workflows on the time-skipping server (the wire contract: the real
activity names and payloads), shared by tests/test_autoscaler_policy_workflow.py and the history
recorder (tests/histories/autoscaler_scenarios.py).

- ScalerWorld wraps a FakeCluster (testkit/rollout_fakes.py): observe gives each component the scaler
  digest the test sets, and `serving.ensure_autoscaler` answers what the test scripts per component
  (a policy-rendered status, or a problem that leaves the last good scaler), records every ask, and, as
  the real one, deletes the scaler of a component that left the spec.
- PolicyWorld is one AutoscalerPolicy for AutoscalerPolicyWorkflow: what `autoscaler_policy.observe`
  finds (digest, problem, consumers) and what `kube.patch_status` wrote.
The real activities are held to the same answers on the apiserver by tests/test_autoscaler_activities.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity

from servingops.activities.autoscaler_policy import PolicyConsumer, PolicyObservation
from servingops.activities.kubernetes import EventNote, StatusPatch
from servingops.activities.serving.autoscaler import (
    AutoscalerObservation,
    EnsureAutoscalerInput,
    ScalerProblem,
    autoscaler_status,
)
from servingops.activities.serving.types import ObserveInput, ServiceObservation
from servingops.api_models.ome.autoscaling import AutoscalerPolicyProvenance, ComponentAutoscaler
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.refs import ObjectRef
from testkit.rollout_fakes import NAMESPACE, FakeCluster

POLICY = "gpu-scaler"


def policy_answer(policy_uid: str, generation: int = 1, block: dict[str, Any] | None = None,
                  live: dict[str, Any] | None = None) -> AutoscalerObservation:
    """What the real activity answers for a component whose scaler the policy rendered."""
    rendered = ComponentAutoscaler.model_validate(block or {"class": "HPA"})
    provenance = AutoscalerPolicyProvenance(name=POLICY, observed_generation=generation,
                                            portable_digest=f"ap1:{generation:064d}", resolved_digest=f"r{generation}")
    return AutoscalerObservation(status=autoscaler_status(rendered, {"status": live or {}}, "policy", provenance),
                                 policy_name=POLICY, policy_uid=policy_uid)


def problem_answer(policy_uid: str | None, reason: str = "PolicyInvalid",
                   message: str = "engine: AutoscalerPolicy 'gpu-scaler': keda.triggers[0]: a prometheus trigger "
                                  "must set ignoreNullValues explicitly; the last good scaler stays"
                   ) -> AutoscalerObservation:
    return AutoscalerObservation(problem=ScalerProblem(reason=reason, message=message),
                                 policy_name=POLICY if policy_uid else None, policy_uid=policy_uid)


class ScalerWorld:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.digests: dict[ComponentType, str | None] = {}
        """serving.observe's autoscaler_digest per component (None: nothing to scale)."""
        self.answers: dict[ComponentType, AutoscalerObservation] = {}
        self.asked: list[EnsureAutoscalerInput] = []
        self.deleted: list[ComponentType] = []
        """Components whose scaler went because they left the spec."""

    def activities(self) -> list[Callable[..., Any]]:
        world = self
        base = self.cluster.activities()
        observe_fake = next(a for a in base if getattr(a, "__temporal_activity_definition").name == "serving.observe")

        @activity.defn(name="serving.observe")
        async def observe(request: ObserveInput) -> ServiceObservation | None:
            seen: ServiceObservation | None = await observe_fake(request)
            if seen is not None:
                for component in seen.components:
                    component.autoscaler_digest = world.digests.get(component.component)
            return seen

        @activity.defn(name="serving.ensure_autoscaler")
        async def ensure_autoscaler(request: EnsureAutoscalerInput) -> AutoscalerObservation:
            world.asked.append(request)
            if request.component not in world.cluster.desired:
                world.deleted.append(request.component)
                return AutoscalerObservation()
            return world.answers.get(request.component) or AutoscalerObservation(
                status=autoscaler_status(None, None))

        return [observe if a is observe_fake else a for a in base] + [ensure_autoscaler]


@dataclass
class PolicyWorld:
    """One AutoscalerPolicy as AutoscalerPolicyWorkflow's activities see it."""

    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    name: str = POLICY
    generation: int = 1
    digest: str | None = "ap1:" + "1" * 64
    problem: str | None = None
    attached: int = 0
    consumers: list[PolicyConsumer] = field(default_factory=list)
    exists: bool = True
    status: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[EventNote] = field(default_factory=list)
    observes: int = 0
    patches: int = 0

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(group="ome.io", version="v1beta1", plural="autoscalerpolicies", kind="AutoscalerPolicy",
                         name=self.name, namespace=NAMESPACE, uid=self.uid)

    def workflow_id(self) -> str:
        return f"autoscalerpolicy/{NAMESPACE}/{self.name}/{self.uid}"

    def bump(self, *, digest: str | None = None, problem: str | None = None) -> dict[str, Any]:
        """A new spec: the event the bridge sends (the wire form of ObjectEvent)."""
        self.generation += 1
        self.digest, self.problem = digest or f"ap1:{self.generation:064d}", problem
        return {"uid": self.uid, "generation": self.generation, "resource_version": str(self.generation)}

    def activities(self) -> list[Callable[..., Any]]:
        world = self

        @activity.defn(name="autoscaler_policy.observe")
        async def observe(ref: ObjectRef) -> PolicyObservation | None:
            world.observes += 1
            if not world.exists:
                return None
            return PolicyObservation(generation=world.generation, portable_digest=world.digest, problem=world.problem,
                                     attached_components=world.attached, consumers=list(world.consumers))

        @activity.defn(name="kube.patch_status")
        async def patch_status(patch: StatusPatch) -> bool:
            world.patches += 1
            world.status.update(patch.status)
            if patch.observed_generation is not None:
                world.status["observedGeneration"] = patch.observed_generation
            for condition in patch.conditions:
                world.conditions[condition.type] = condition.model_dump()
            world.events.extend(patch.events)
            return world.exists

        return [observe, patch_status]
