"""The spec.scalingPolicy fake (testkit/scaling_fakes.py ScalingWorld: `serving.observe` carrying the policy,
the anchor's /scale count, a follower's bound; `serving.ensure_revision` writing an OMENative component's
whole count) against the real ServingActivities on the session's kube-apiserver as the chart's worker
identity: the same cases on both, each call by the activity's wire name through the data converter.

The HPA is played on both sides: the real side writes the projected InferenceReplica's /scale subresource
(as the HPA controller does), the fake side `ScalingWorld.scale`.

What differed when the suite was written (the fake changed to match the real activities), see the cases
named in each bullet:
- the anchor count before the projection exists: the fake gave the number the test seeded; the real
  observe has no replica to read (`scale_replicas` None) until the first ensure_revision projects it.
- the anchor's own ensure_revision (no whole count given) after its HPA scaled it: the fake reset the
  replica's count to minReplicas; the real projection keeps the count the scaler set
  (test_the_anchor_count_is_read_from_its_scale_and_a_follower_count_is_written, last assertion).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devstack.identities import Identities
from servingops.activities.serving.activities import ServingActivities
from servingops.activities.serving.types import (
    EnsureRevisionInput,
    ObserveInput,
    RevisionKey,
    RevisionObservation,
    ServiceObservation,
)
from servingops.api_models.errors import ErrorType
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.refs import ObjectRef
from testkit.rollout_fakes import FakeCluster
from testkit.scaling_fakes import ScalingWorld
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as
from tests.support.conformance import FAKE_UNIT_AND_REAL, activity_name, chosen_backend, wire

ENGINE, DECODER = ComponentType.ENGINE, ComponentType.DECODER
HPA: dict[str, Any] = {"class": "HPA"}


class Backend(Protocol):
    def add_service(self, components: dict[ComponentType, dict[str, Any]],
                    policy: dict[str, Any] | None) -> ObjectRef: ...
    def scale(self, isvc: ObjectRef, component: ComponentType, count: int) -> None: ...
    def observe(self, isvc: ObjectRef) -> ServiceObservation: ...
    def ensure(self, request: EnsureRevisionInput) -> RevisionObservation: ...


class _Clock:
    async def get_current_time(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)


class Fake:
    def __init__(self) -> None:
        self.world = ScalingWorld(FakeCluster(_Clock()))  # type: ignore[arg-type]
        self.activities = {activity_name(a): a for a in self.world.activities()}

    def add_service(self, components: dict[ComponentType, dict[str, Any]],
                    policy: dict[str, Any] | None) -> ObjectRef:
        for component, block in components.items():
            self.world.cluster.set_desired(component, "a", int(block.get("minReplicas", 1)))
            self.world.native[component] = None
            if "maxReplicas" in block:
                self.world.max_replicas[component] = int(block["maxReplicas"])
            if (block.get("autoscaler") or {}).get("class") in ("HPA", "KEDA", "External"):
                self.world.own_scalers.add(component)
        self.world.set_policy(policy)
        return self.world.cluster.ref

    def scale(self, isvc: ObjectRef, component: ComponentType, count: int) -> None:
        self.world.scale(component, count)

    def _run(self, name: str, arg: Any, kind: Any, answer: Any) -> Any:
        return wire(asyncio.run(ActivityEnvironment().run(self.activities[name], wire(arg, kind))), answer)

    def observe(self, isvc: ObjectRef) -> ServiceObservation:
        seen: ServiceObservation = self._run("serving.observe", ObserveInput(isvc=isvc), ObserveInput,
                                             ServiceObservation)
        return seen

    def ensure(self, request: EnsureRevisionInput) -> RevisionObservation:
        seen: RevisionObservation = self._run("serving.ensure_revision", request, EnsureRevisionInput,
                                              RevisionObservation)
        return seen


class Real:
    def __init__(self, admin: client.ApiClient, worker: client.ApiClient, namespace: str) -> None:
        self.admin, self.ns = admin, namespace
        self.custom = client.CustomObjectsApi(admin)
        self.serving = ServingActivities(worker)

    def add_service(self, components: dict[ComponentType, dict[str, Any]],
                    policy: dict[str, Any] | None) -> ObjectRef:
        spec: dict[str, Any] = {"deploymentMode": "OMENative"}
        for component, block in components.items():
            spec[component.value] = {"runner": {"name": component.value, "image": "registry.invalid/c:v1",
                                                "ports": [{"containerPort": 8000}]}, **block}
        if policy is not None:
            spec["scalingPolicy"] = policy
        made = create(self.admin, InferenceService,
                      manifest(InferenceService, spec, name=f"sp-{uuid.uuid4().hex[:5]}"), self.ns)
        return ObjectRef.of(InferenceService, made["metadata"]["name"], self.ns, made["metadata"]["uid"])

    def scale(self, isvc: ObjectRef, component: ComponentType, count: int) -> None:
        self.custom.patch_namespaced_custom_object_scale("ome.io", "v1beta1", self.ns, "inferencereplicas",
                                                         f"{isvc.name}-{component.value}",
                                                         {"spec": {"replicas": count}})

    def observe(self, isvc: ObjectRef) -> ServiceObservation:
        seen: ServiceObservation = wire(ActivityEnvironment().run(self.serving.observe,
                                                                  wire(ObserveInput(isvc=isvc), ObserveInput)),
                                        ServiceObservation)
        return seen

    def ensure(self, request: EnsureRevisionInput) -> RevisionObservation:
        seen: RevisionObservation = wire(ActivityEnvironment().run(self.serving.ensure_revision,
                                                                   wire(request, EnsureRevisionInput)),
                                         RevisionObservation)
        return seen


@pytest.fixture(scope="module")
def conformance_ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "sp-conf")


@pytest.fixture
def real_backend(kube_api: client.ApiClient, chart_identities: Identities, conformance_ns: str) -> Iterator[Real]:
    with api_as(chart_identities.worker) as worker:
        yield Real(kube_api, worker, conformance_ns)


@pytest.fixture(params=FAKE_UNIT_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, Fake)


def _by(seen: ServiceObservation) -> dict[ComponentType, Any]:
    return {c.component: c for c in seen.components}


PROPORTIONAL: dict[str, Any] = {"mode": "Proportional", "proportional": {"anchor": "engine",
                                                                         "ratios": {"decoder": "0.5"}}}


def test_the_anchor_count_is_read_from_its_scale_and_a_follower_count_is_written(backend: Backend) -> None:
    isvc = backend.add_service({ENGINE: {"minReplicas": 1, "maxReplicas": 4, "autoscaler": HPA},
                                DECODER: {"minReplicas": 1, "maxReplicas": 3}}, PROPORTIONAL)
    first = backend.observe(isvc)
    assert first.scaling_policy == PROPORTIONAL
    parts = _by(first)
    assert parts[ENGINE].replica == f"{isvc.name}-engine" and parts[DECODER].replica == f"{isvc.name}-decoder"
    assert parts[DECODER].max_replicas == 3 and parts[ENGINE].max_replicas == 4
    assert parts[ENGINE].scale_replicas is None, "no replica projected yet: nothing to read"

    backend.ensure(EnsureRevisionInput(key=RevisionKey(isvc=isvc, component=ENGINE,
                                                       revision=parts[ENGINE].desired_revision), replicas=1))
    backend.ensure(EnsureRevisionInput(key=RevisionKey(isvc=isvc, component=DECODER,
                                                       revision=parts[DECODER].desired_revision),
                                       replicas=2, component_replicas=2))
    projected = _by(backend.observe(isvc))
    assert (projected[ENGINE].scale_replicas, projected[DECODER].scale_replicas) == (1, 2)

    backend.scale(isvc, ENGINE, 3)  # the HPA
    assert _by(backend.observe(isvc))[ENGINE].scale_replicas == 3
    backend.ensure(EnsureRevisionInput(key=RevisionKey(isvc=isvc, component=DECODER,
                                                       revision=parts[DECODER].desired_revision),
                                       replicas=2, component_replicas=2))
    assert _by(backend.observe(isvc))[ENGINE].scale_replicas == 3, "a follower's write leaves the anchor's count"
    backend.ensure(EnsureRevisionInput(key=RevisionKey(isvc=isvc, component=ENGINE,
                                                       revision=parts[ENGINE].desired_revision), replicas=1))
    assert _by(backend.observe(isvc))[ENGINE].scale_replicas == 3, "the anchor's own ensure keeps its scaler's count"


def test_pinned_without_a_block_and_independent(backend: Backend) -> None:
    pinned = backend.add_service({ENGINE: {"autoscaler": HPA}, DECODER: {}}, {"mode": "Pinned"})
    assert backend.observe(pinned).scaling_policy == {"mode": "Pinned"}
    independent = backend.add_service({ENGINE: {"autoscaler": HPA}, DECODER: {"autoscaler": HPA}},
                                      {"mode": "Independent"})
    assert backend.observe(independent).scaling_policy is None


def test_a_follower_with_its_own_scaler_is_refused(backend: Backend) -> None:
    isvc = backend.add_service({ENGINE: {"autoscaler": HPA}, DECODER: {"autoscaler": HPA}}, PROPORTIONAL)
    with pytest.raises(ApplicationError) as refused:
        backend.observe(isvc)
    assert refused.value.type == ErrorType.INVALID_SCALING_POLICY.value
    assert refused.value.non_retryable
    assert "decoder follows engine (Proportional), so it cannot have an autoscaler of its own" in str(refused.value)
