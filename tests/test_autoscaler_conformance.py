"""The autoscaler fakes (testkit/autoscaler_fakes.py: ScalerWorld's `serving.ensure_autoscaler`,
PolicyWorld's `autoscaler_policy.observe`) against the real activities (activities/serving/autoscaler.py,
activities/autoscaler_policy.py): the same cases on both, the real side on the session's kube-apiserver as
the chart's worker identity (so its RBAC is proven too), each call by the activity's wire name with its
payloads through the data converter.

The fake derives its answer from the component's spec block and the namespace's policies (the mode these
cases use); the time-skipping tests mostly script answers with the same helpers (`policy_answer`,
`problem_answer`), so what those helpers build is held here too. Compared: what the service's workflow
reads of an answer (the mirrored status' class, managedBy, specSource, the policy's provenance; the
problem's reason and message; the policy named for nudges) and of an observation (generation, digest,
problem, the count and the consumers).

What differed when the suite was written (the fake changed to match the real activities):
- The fakes could only answer what a test scripted (ScalerWorld.answers, PolicyWorld's fields): nothing
  tied a scripted answer to a spec. They now derive answers from the spec and the policies, as here.
- observe with a policy ref whose uid is another object's: the fake answered the policy it held; the real
  one answers None (the name was reused).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from devstack.identities import Identities
from servingops.activities.autoscaler_policy import AutoscalerPolicyActivities, PolicyObservation
from servingops.activities.serving.autoscaler import (
    AutoscalerActivities,
    AutoscalerObservation,
    EnsureAutoscalerInput,
    scaled_object_name,
)
from servingops.api_models.ome import AutoscalerPolicy, InferenceService
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.refs import ObjectRef
from servingops.clients.kube.calls import get_or_none
from servingops.rendering.autoscaler_policy import ProviderBinding
from testkit.autoscaler_fakes import PolicyWorld, ScalerWorld
from testkit.rollout_fakes import FakeCluster
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as
from tests.support.autoscaler_policies import keda_policy
from tests.support.cleanup import ignore_404
from tests.support.conformance import FAKE_UNIT_AND_REAL, activity_name, chosen_backend, wire

ENGINE, ROUTER = ComponentType.ENGINE, ComponentType.ROUTER
PROM = "http://prometheus.monitoring:9090"
HPA_POLICY: dict[str, Any] = {"class": "HPA", "hpa": {"metrics": [{"type": "Resource", "resource": {
    "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]}}


class Backend(Protocol):
    def add_policy(self, name: str, spec: dict[str, Any]) -> ObjectRef: ...
    def edit_policy(self, name: str, spec: dict[str, Any]) -> None: ...
    def delete_policy(self, name: str) -> None: ...
    def add_service(self, components: dict[ComponentType, dict[str, Any]]) -> ObjectRef: ...
    def drop_component(self, isvc: ObjectRef, component: ComponentType) -> None: ...
    def start_deleting(self, isvc: ObjectRef) -> None: ...
    def has_scaler(self, isvc: ObjectRef, component: ComponentType) -> bool: ...
    def ensure(self, request: EnsureAutoscalerInput) -> AutoscalerObservation: ...
    def observe(self, policy: ObjectRef) -> PolicyObservation | None: ...


class _Clock:
    async def get_current_time(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)


class Fake:
    def __init__(self) -> None:
        self.policies: dict[str, PolicyWorld] = {}
        self.services: list[tuple[str, str, dict[str, Any], bool]] = []
        self.worlds: dict[str, ScalerWorld] = {}

    def add_policy(self, name: str, spec: dict[str, Any]) -> ObjectRef:
        world = PolicyWorld(name=name, services=self.services)
        world.set_spec(spec)
        self.policies[name] = world
        for scalers in self.worlds.values():
            scalers.policies[name] = world
        return world.ref

    def edit_policy(self, name: str, spec: dict[str, Any]) -> None:
        self.policies[name].set_spec(spec, edit=True)

    def delete_policy(self, name: str) -> None:
        self.policies[name].exists = False

    def add_service(self, components: dict[ComponentType, dict[str, Any]]) -> ObjectRef:
        world = ScalerWorld(FakeCluster(_Clock()))  # type: ignore[arg-type]
        name = f"as-{uuid.uuid4().hex[:5]}"
        world.policies = self.policies
        for component, block in components.items():
            world.cluster.set_desired(component, "a", 1)
            world.specs[component] = block
        self.worlds[name] = world
        ref = world.cluster.ref.model_copy(update={"name": name})
        self.services.append((name, ref.uid or "", {c.value: b for c, b in components.items()}, False))
        return ref

    def drop_component(self, isvc: ObjectRef, component: ComponentType) -> None:
        world = self.worlds[isvc.name]
        del world.cluster.desired[component]
        del world.specs[component]
        self.services[:] = [(n, u, {k: v for k, v in s.items() if k != component.value} if n == isvc.name else s, d)
                            for n, u, s, d in self.services]

    def start_deleting(self, isvc: ObjectRef) -> None:
        self.services[:] = [(n, u, s, d or n == isvc.name) for n, u, s, d in self.services]

    def has_scaler(self, isvc: ObjectRef, component: ComponentType) -> bool:
        return component in self.worlds[isvc.name].scalers

    def ensure(self, request: EnsureAutoscalerInput) -> AutoscalerObservation:
        world = self.worlds[request.isvc.name]
        fn = next(a for a in world.activities() if activity_name(a) == "serving.ensure_autoscaler")
        answer = asyncio.run(ActivityEnvironment().run(fn, wire(request, EnsureAutoscalerInput)))
        return wire(answer, AutoscalerObservation)

    def observe(self, policy: ObjectRef) -> PolicyObservation | None:
        world = self.policies.get(policy.name)
        if world is None:
            return None
        fn = next(a for a in world.activities() if activity_name(a) == "autoscaler_policy.observe")
        answer = asyncio.run(ActivityEnvironment().run(fn, wire(policy, ObjectRef)))
        return wire(answer, PolicyObservation | None)


class Real:
    def __init__(self, admin: client.ApiClient, worker: client.ApiClient, namespace: str) -> None:
        self.admin, self.ns = admin, namespace
        self.custom = client.CustomObjectsApi(admin)
        self.scalers = AutoscalerActivities(worker, lambda: {"prom": ProviderBinding(server_address=PROM)})
        self.policies = AutoscalerPolicyActivities(worker)

    def add_policy(self, name: str, spec: dict[str, Any]) -> ObjectRef:
        made = create(self.admin, AutoscalerPolicy, manifest(AutoscalerPolicy, spec, name=name), self.ns)
        return ObjectRef.of(AutoscalerPolicy, name, self.ns, made["metadata"]["uid"])

    def edit_policy(self, name: str, spec: dict[str, Any]) -> None:
        live = self.custom.get_namespaced_custom_object("ome.io", "v1beta1", self.ns, "autoscalerpolicies", name)
        live["spec"] = spec
        self.custom.replace_namespaced_custom_object("ome.io", "v1beta1", self.ns, "autoscalerpolicies", name, live)

    def delete_policy(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object("ome.io", "v1beta1", self.ns, "autoscalerpolicies", name)

    def add_service(self, components: dict[ComponentType, dict[str, Any]]) -> ObjectRef:
        spec: dict[str, Any] = {"deploymentMode": "RawDeployment"}
        for component, block in components.items():
            spec[component.value] = {"runner": {"name": component.value, "image": "registry.invalid/c:v1"},
                                     "minReplicas": 2, "maxReplicas": 5, **block}
        made = create(self.admin, InferenceService,
                      manifest(InferenceService, spec, name=f"as-{uuid.uuid4().hex[:5]}"), self.ns)
        return ObjectRef.of(InferenceService, made["metadata"]["name"], self.ns, made["metadata"]["uid"])

    def _patch(self, isvc: ObjectRef, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object("ome.io", "v1beta1", self.ns, "inferenceservices", isvc.name, body,
                                                   _content_type="application/merge-patch+json")

    def drop_component(self, isvc: ObjectRef, component: ComponentType) -> None:
        self._patch(isvc, {"spec": {component.value: None}})

    def start_deleting(self, isvc: ObjectRef) -> None:
        self._patch(isvc, {"metadata": {"finalizers": ["test.servingops.io/hold"]}})
        self.custom.delete_namespaced_custom_object("ome.io", "v1beta1", self.ns, "inferenceservices", isvc.name)

    def has_scaler(self, isvc: ObjectRef, component: ComponentType) -> bool:
        name = f"{isvc.name}-{component.value}"
        found = [get_or_none(self.custom.get_namespaced_custom_object,
                             "autoscaling", "v2", self.ns, "horizontalpodautoscalers", name),
                 get_or_none(self.custom.get_namespaced_custom_object,
                             "keda.sh", "v1alpha1", self.ns, "scaledobjects", scaled_object_name(name))]
        return any(found)

    def ensure(self, request: EnsureAutoscalerInput) -> AutoscalerObservation:
        answer = ActivityEnvironment().run(self.scalers.ensure, wire(request, EnsureAutoscalerInput))
        return wire(answer, AutoscalerObservation)

    def observe(self, policy: ObjectRef) -> PolicyObservation | None:
        answer = ActivityEnvironment().run(self.policies.observe, wire(policy, ObjectRef))
        return wire(answer, PolicyObservation | None)

    def close(self) -> None:
        items = self.custom.list_namespaced_custom_object("ome.io", "v1beta1", self.ns, "inferenceservices")["items"]
        for item in items:
            if item["metadata"].get("finalizers"):
                ignore_404(lambda i=item: self._patch(ObjectRef.of(InferenceService, i["metadata"]["name"], self.ns),
                                                      {"metadata": {"finalizers": None}}))


@pytest.fixture(scope="module")
def conformance_ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "as-conf")


@pytest.fixture
def real_backend(kube_api: client.ApiClient, chart_identities: Identities, conformance_ns: str) -> Iterator[Real]:
    with api_as(chart_identities.worker) as worker:
        real = Real(kube_api, worker, conformance_ns)
        try:
            yield real
        finally:
            real.close()


@pytest.fixture(params=FAKE_UNIT_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, Fake)


def _read(answer: AutoscalerObservation) -> dict[str, Any]:
    """What the service's workflow reads of an answer (status' resolvedDigest and counts are the real
    scaler's own and not compared)."""
    status = answer.status or {}
    policy = status.get("policy") if isinstance(status.get("policy"), dict) else None
    return {
        "class": status.get("class"), "managedBy": status.get("managedBy"), "specSource": status.get("specSource"),
        "policy": None if policy is None else {k: policy.get(k) for k in ("name", "observedGeneration",
                                                                           "portableDigest")},
        "problem": None if answer.problem is None else answer.problem.reason,
        "policy_name": answer.policy_name, "policy_uid": answer.policy_uid,
    }


def _policy_name() -> str:
    return f"p-{uuid.uuid4().hex[:5]}"


def test_a_component_renders_from_its_policy_and_follows_an_edit(backend: Backend) -> None:
    name = _policy_name()
    policy = backend.add_policy(name, keda_policy())
    isvc = backend.add_service({ENGINE: {"autoscalerPolicyRef": {"name": name}}})
    observed = backend.observe(policy)
    assert observed is not None and observed.problem is None and observed.portable_digest is not None
    answer = backend.ensure(EnsureAutoscalerInput(isvc=isvc, component=ENGINE, revision="abc"))
    assert _read(answer) == {"class": "KEDA", "managedBy": "ome", "specSource": "policy",
                             "policy": {"name": name, "observedGeneration": 1,
                                        "portableDigest": observed.portable_digest},
                             "problem": None, "policy_name": name, "policy_uid": policy.uid}
    assert backend.has_scaler(isvc, ENGINE)

    backend.edit_policy(name, HPA_POLICY)
    edited = backend.observe(policy)
    assert edited is not None and edited.generation == 2 and edited.portable_digest != observed.portable_digest
    again = backend.ensure(EnsureAutoscalerInput(isvc=isvc, component=ENGINE, revision="abc"))
    assert _read(again)["class"] == "HPA" and _read(again)["policy"] == {
        "name": name, "observedGeneration": 2, "portableDigest": edited.portable_digest}


def test_a_missing_policy_fails_closed_and_an_inline_block_outranks_a_ref(backend: Backend) -> None:
    name = _policy_name()
    isvc = backend.add_service({ENGINE: {"autoscalerPolicyRef": {"name": name}},
                                ROUTER: {"autoscalerPolicyRef": {"name": name}, "autoscaler": {"class": "HPA"}}})
    missing = backend.ensure(EnsureAutoscalerInput(isvc=isvc, component=ENGINE, revision="abc"))
    assert _read(missing) == {"class": None, "managedBy": None, "specSource": None, "policy": None,
                              "problem": "PolicyNotFound", "policy_name": None, "policy_uid": None}
    assert missing.problem is not None
    assert missing.problem.message.startswith(f"engine: AutoscalerPolicy {name!r}: ")
    assert missing.problem.message.endswith("; the last good scaler stays")
    assert not backend.has_scaler(isvc, ENGINE)

    inline = backend.ensure(EnsureAutoscalerInput(isvc=isvc, component=ROUTER, revision="abc"))
    assert _read(inline) == {"class": "HPA", "managedBy": "ome", "specSource": "isvc", "policy": None,
                             "problem": None, "policy_name": None, "policy_uid": None}
    assert backend.has_scaler(isvc, ROUTER)


def test_a_component_without_a_block_has_no_scaler_and_one_that_left_loses_it(backend: Backend) -> None:
    isvc = backend.add_service({ENGINE: {}, ROUTER: {"autoscaler": {"class": "HPA"}}})
    plain = backend.ensure(EnsureAutoscalerInput(isvc=isvc, component=ENGINE, revision="abc"))
    assert _read(plain) == {"class": None, "managedBy": "none", "specSource": None, "policy": None,
                            "problem": None, "policy_name": None, "policy_uid": None}
    assert not backend.has_scaler(isvc, ENGINE)
    backend.ensure(EnsureAutoscalerInput(isvc=isvc, component=ROUTER, revision="abc"))
    assert backend.has_scaler(isvc, ROUTER)
    backend.drop_component(isvc, ROUTER)
    gone = backend.ensure(EnsureAutoscalerInput(isvc=isvc, component=ROUTER))
    assert gone.status is None and gone.problem is None and gone.policy_uid is None
    assert not backend.has_scaler(isvc, ROUTER)


def test_observe_counts_referencing_components_not_deleting_services_and_no_reused_name(backend: Backend) -> None:
    name = _policy_name()
    policy = backend.add_policy(name, keda_policy())
    both = backend.add_service({ENGINE: {"autoscalerPolicyRef": {"name": name}},
                                ROUTER: {"autoscalerPolicyRef": {"name": name}, "autoscaler": {"class": "HPA"}}})
    other = backend.add_service({ENGINE: {"autoscalerPolicyRef": {"name": name}}})
    backend.add_service({ENGINE: {"autoscalerPolicyRef": {"name": "someone-else"}}})
    seen = backend.observe(policy)
    assert seen is not None and seen.generation == 1 and seen.deleting is False
    assert seen.attached_components == 3
    assert sorted((c.name, c.uid) for c in seen.consumers) == sorted([(both.name, both.uid), (other.name, other.uid)])

    backend.start_deleting(other)
    backend.drop_component(both, ROUTER)
    recount = backend.observe(policy)
    assert recount is not None and recount.attached_components == 1
    assert [(c.name, c.uid) for c in recount.consumers] == [(both.name, both.uid)]

    assert backend.observe(policy.model_copy(update={"uid": str(uuid.uuid4())})) is None
    backend.delete_policy(name)
    assert backend.observe(policy) is None
