"""Fakes for the autoscaler's workflows on the time-skipping server (the wire contract: the real
activity names and payloads), shared by tests/test_autoscaler_policy_workflow.py and the history
recorder (tests/histories/autoscaler_scenarios.py).

- ScalerWorld wraps a FakeCluster (testkit/rollout_fakes.py): observe gives each component the scaler
  digest the test sets, and `serving.ensure_autoscaler` answers what the test scripts per component
  (a policy-rendered status, or a problem that leaves the last good scaler), records every ask, and, as
  the real one, deletes the scaler of a component that left the spec.
  A component may instead be given its spec block (`specs`: autoscaler / autoscalerPolicyRef) and the
  namespace its policies (`policies`): the answer is then derived as the real activity derives it (the
  inline block outranks the ref; an absent policy is PolicyNotFound, a broken one PolicyInvalid, both
  leaving the last good scaler).
- PolicyWorld is one AutoscalerPolicy for AutoscalerPolicyWorkflow: what `autoscaler_policy.observe`
  finds (digest, problem, consumers) and what `kube.patch_status` wrote. Scripted (`digest`, `problem`,
  `attached`, `consumers`), or derived from a body (`set_spec`) and the services naming it (`services`).
Both are held to the real activities on the apiserver, case for case, by tests/test_autoscaler_conformance.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity

from servingops.activities.autoscaler_policy import PolicyConsumer, PolicyObservation, references
from servingops.activities.kubernetes import EventNote, StatusPatch
from servingops.activities.serving.autoscaler import (
    AutoscalerObservation,
    EnsureAutoscalerInput,
    ScalerProblem,
    autoscaler_status,
)
from servingops.activities.serving.types import ObserveInput, ServiceObservation
from servingops.api_models.ome.autoscaler_policy import AutoscalerPolicySpec
from servingops.api_models.ome.autoscaling import AutoscalerPolicyProvenance, ComponentAutoscaler
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.refs import ObjectRef
from servingops.rendering import autoscaler_policy
from testkit.rollout_fakes import NAMESPACE, FakeCluster

POLICY = "gpu-scaler"


def policy_answer(policy_uid: str, generation: int = 1, block: dict[str, Any] | None = None,
                  live: dict[str, Any] | None = None, *, name: str = POLICY,
                  digest: str | None = None) -> AutoscalerObservation:
    """What the real activity answers for a component whose scaler the policy rendered."""
    rendered = ComponentAutoscaler.model_validate(block or {"class": "HPA"})
    provenance = AutoscalerPolicyProvenance(name=name, observed_generation=generation,
                                            portable_digest=digest or f"ap1:{generation:064d}",
                                            resolved_digest=f"r{generation}")
    return AutoscalerObservation(status=autoscaler_status(rendered, {"status": live or {}}, "policy", provenance),
                                 policy_name=name, policy_uid=policy_uid)


def problem_answer(policy_uid: str | None, reason: str = "PolicyInvalid",
                   message: str = "engine: AutoscalerPolicy 'gpu-scaler': keda.triggers[0]: a prometheus trigger "
                                  "must set ignoreNullValues explicitly; the last good scaler stays",
                   *, name: str = POLICY) -> AutoscalerObservation:
    return AutoscalerObservation(problem=ScalerProblem(reason=reason, message=message),
                                 policy_name=name if policy_uid else None, policy_uid=policy_uid)


class ScalerWorld:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.digests: dict[ComponentType, str | None] = {}
        """serving.observe's autoscaler_digest per component (None: nothing to scale)."""
        self.answers: dict[ComponentType, AutoscalerObservation] = {}
        self.asked: list[EnsureAutoscalerInput] = []
        self.deleted: list[ComponentType] = []
        """Components whose scaler went because they left the spec."""
        self.specs: dict[ComponentType, dict[str, Any]] = {}
        """A component's spec block (API form) when its answer is derived rather than scripted."""
        self.policies: dict[str, PolicyWorld] = {}
        """The namespace's AutoscalerPolicies by name, for derived answers."""
        self.scalers: dict[ComponentType, str] = {}
        """The scaler of ours each component has: its class (HPA or KEDA)."""

    def derived(self, component: ComponentType) -> AutoscalerObservation:
        """What the real serving.ensure_autoscaler answers for the component's spec block."""
        block = self.specs[component]
        inline, ref = block.get("autoscaler"), (block.get("autoscalerPolicyRef") or {}).get("name")
        if inline is None and ref is not None:
            policy = self.policies.get(ref)
            if policy is None or not policy.exists:
                return problem_answer(None, "PolicyNotFound", f"{component.value}: AutoscalerPolicy {ref!r}: "
                                      f"AutoscalerPolicy {ref!r} not found; the last good scaler stays", name=ref)
            if policy.problem is not None:
                return problem_answer(policy.uid, "PolicyInvalid", f"{component.value}: AutoscalerPolicy {ref!r}: "
                                      f"{policy.problem}; the last good scaler stays", name=ref)
            cls = str((policy.spec or {}).get("class", "HPA"))
            self.scalers[component] = cls
            return policy_answer(policy.uid, policy.generation, {"class": cls}, name=ref,
                                 digest=policy.digest)
        rendered = ComponentAutoscaler.model_validate(inline) if inline is not None else None
        cls = rendered.class_.value if rendered is not None else None
        if cls in ("HPA", "KEDA"):
            self.scalers[component] = str(cls)
        else:
            self.scalers.pop(component, None)
        return AutoscalerObservation(status=autoscaler_status(rendered, {"status": {}} if cls else None))

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
                world.scalers.pop(request.component, None)
                return AutoscalerObservation()
            if request.component not in world.answers and request.component in world.specs:
                return world.derived(request.component)
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
    spec: dict[str, Any] | None = None
    """The body as written (set_spec), for derived answers; None when digest and problem are scripted."""
    services: list[tuple[str, str, dict[str, Any], bool]] | None = None
    """(name, uid, spec, deleting) of the namespace's InferenceServices: when set, attached and consumers
    are counted from them as the real activity counts, else the scripted `attached` / `consumers`."""

    def set_spec(self, spec: dict[str, Any], *, edit: bool = False) -> None:
        """The body the policy holds (an edit is a new generation); digest and problem as the real
        activity derives them from it."""
        if edit:
            self.generation += 1
        self.spec = spec
        try:
            self.digest, self.problem = autoscaler_policy.portable_digest(autoscaler_policy.parse(spec)), None
        except autoscaler_policy.PolicyProblem as problem:
            self.problem = problem.message
            try:
                self.digest = autoscaler_policy.portable_digest(AutoscalerPolicySpec.model_validate(spec))
            except ValueError:
                self.digest = None

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
            if not world.exists or (ref.uid and ref.uid != world.uid):
                return None
            attached, consumers = world.attached, list(world.consumers)
            if world.services is not None:
                attached, consumers = 0, []
                for name, uid, spec, deleting in world.services:
                    count = 0 if deleting else references(spec, world.name)
                    if count:
                        attached += count
                        consumers.append(PolicyConsumer(name=name, uid=uid))
            return PolicyObservation(generation=world.generation, portable_digest=world.digest, problem=world.problem,
                                     attached_components=attached, consumers=consumers)

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
