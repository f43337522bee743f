"""The fake cluster behind the time-skipping rollout tests (testkit/rollout_fakes.py) answers as the
real activities do on the local cluster: one suite, run against both.

Each case drives a backend through the activities by their names (serving.observe,
serving.ensure_revision, serving.revision_status, serving.set_traffic, serving.scale_then_route,
serving.delete_revision,
kube.patch_status, kube.remove_annotation) and checks what they answer and refuse. The real
backend is ServingActivities and KubernetesActivities on the session's apiserver, with kwok
playing the kubelets; the fake is FakeCluster on a clock the test moves. A case that passes on
one and fails on the other is a difference the time-skipping tests would hide.

Where they differed before this suite (and the fake was changed to match the real activities):
- set_traffic: the fake accepted a backend at weight 0 without a Deployment and asserted the rest
  (an AssertionError, retried forever); the real one refuses, permanently (InvalidTraffic), any
  split naming a revision without a Service, and any split that is empty, repeats a revision,
  or does not add up to 100. That difference hid a workflow bug: rolling with maxSurge 0 programmed
  `[old 100, new 0]` before the new revision existed (progressions/rolling.py now leaves a 0%
  backend out).
- delete_revision of a revision that still has traffic: assert in the fake, RevisionServingTraffic
  (permanent) in the real one.
- ensure_revision with negative replicas: accepted by the fake, InvalidInput in the real one; on a
  deleted object: ObjectGone in the real one.
- patch_status: the fake answered False while the object was being deleted; the real one answers
  False only once it is gone (a finalizer-held object takes status writes).
- observe: the fake gave every component a URL (on a made-up domain) before any HTTPRoute existed
  and passed every annotation through; the real one has no URL until the route exists (then the
  route's cluster address) and passes only the ome.io/rollout-* annotations.

The HTTPRoute's Gateway side (the operator's ingress block: parentRefs, hostnames, the verdict read
back from status.parents, drift after the block changes) is one case here; no Gateway controller
runs beside this suite, so the test writes the route's status subresource itself, as the Gateway
would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devstack.identities import Identities
from devstack.kube import POD_UNREADY_ANNOTATION
from servingops.activities.kubernetes import AnnotationRemoval, KubernetesActivities, StatusPatch
from servingops.activities.serving.activities import ServingActivities
from servingops.activities.serving.types import (
    EnsureRevisionInput,
    ObserveInput,
    RevisionKey,
    RevisionObservation,
    ScaleThenRouteInput,
    ScaleThenRouteResult,
    ServiceObservation,
    SetTrafficInput,
)
from servingops.api_models import contract
from servingops.api_models.errors import ErrorType
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.operator_config import IngressConfig
from servingops.api_models.refs import ConditionUpdate, ObjectRef
from servingops.api_models.serving import IngressObservation, RouteStatus, TrafficWeight
from servingops.rendering import render
from testkit.rollout_fakes import FakeCluster
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as
from tests.support.conformance import FAKE_UNIT_AND_REAL, chosen_backend

ENGINE = ComponentType.ENGINE
HOLD = "test.servingops.io/hold"
ROUTES = ("gateway.networking.k8s.io", "v1")
DEADLINE = 120.0
"""Real seconds a real backend may take to settle (an upper bound on a loaded machine, never asserted)."""


class Backend(Protocol):
    """One cluster the activities run against, and the edits a user or a kubelet would make."""

    async def new_service(self, replicas: int) -> ObjectRef:
        """A new InferenceService whose engine renders one revision at `replicas`."""
        ...

    async def render_new_revision(self, ref: ObjectRef) -> None:
        """Edit the engine's pod template (a new image): the spec renders a new revision."""
        ...

    async def call(self, activity: str, arg: Any) -> Any:
        """Run the activity named by its method name (observe, ensure_revision, patch_status...)."""
        ...

    async def settle(self, probe: Callable[[], Awaitable[bool]], what: str) -> None:
        """Let time pass (real seconds, or the fake's clock) until `probe` holds."""
        ...

    async def hold_unready(self, ref: ObjectRef, revision: str) -> None:
        """One Ready pod of the revision stops being Ready (its readiness probe fails)."""
        ...

    async def annotate(self, ref: ObjectRef, annotations: dict[str, str]) -> None: ...

    async def start_deleting(self, ref: ObjectRef) -> None:
        """Delete the object while a finalizer still holds it."""
        ...

    async def finish_deleting(self, ref: ObjectRef) -> None:
        """Release the finalizer: the object is gone."""
        ...

    async def status(self, ref: ObjectRef) -> dict[str, Any]:
        """status as stored, with conditions as a list under `conditions`."""
        ...

    def use_ingress(self, config: IngressConfig) -> None:
        """The operator's ingress block from now on (what the worker's ConfigMap reader would give)."""
        ...

    async def route(self, ref: ObjectRef) -> dict[str, Any] | None:
        """The engine's HTTPRoute as stored (None before it exists)."""
        ...

    async def gateway_verdict(self, ref: ObjectRef, parents: list[dict[str, Any]]) -> None:
        """Play the Gateway: write the engine's HTTPRoute status.parents."""
        ...

    async def set_ttl(self, ref: ObjectRef, seconds: int | None) -> None:
        """Set (or remove, None) spec.ttlSecondsAfterCreation."""
        ...


# -- the fake ------------------------------------------------------------------------------------


class FakeClock:
    """Stands for the test server's clock, which FakeCluster reads for pod readiness."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    async def get_current_time(self) -> datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class FakeBackend:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.cluster = FakeCluster(self.clock, ready_delay=3.0)  # type: ignore[arg-type]
        self.activities = {fn.__name__: fn for fn in self.cluster.activities()}
        self.revisions = 0

    async def new_service(self, replicas: int) -> ObjectRef:
        self.revisions += 1
        self.cluster.set_desired(ENGINE, f"rev{self.revisions}", replicas)
        return self.cluster.ref

    async def render_new_revision(self, ref: ObjectRef) -> None:
        self.revisions += 1
        self.cluster.set_desired(ENGINE, f"rev{self.revisions}", self.cluster.desired[ENGINE][1])

    async def call(self, activity: str, arg: Any) -> Any:
        return await ActivityEnvironment().run(self.activities[activity], arg)

    async def settle(self, probe: Callable[[], Awaitable[bool]], what: str) -> None:
        for _ in range(600):
            if await probe():
                return
            await self.clock.sleep(1)
        raise AssertionError(f"never happened on the fake's clock: {what}")

    async def hold_unready(self, ref: ObjectRef, revision: str) -> None:
        self.cluster.hold_unready(ENGINE, revision)

    async def annotate(self, ref: ObjectRef, annotations: dict[str, str]) -> None:
        self.cluster.annotations.update(annotations)

    async def start_deleting(self, ref: ObjectRef) -> None:
        self.cluster.deleting = True

    async def finish_deleting(self, ref: ObjectRef) -> None:
        self.cluster.gone = True

    async def status(self, ref: ObjectRef) -> dict[str, Any]:
        return {**self.cluster.status, "conditions": list(self.cluster.conditions.values())}

    def use_ingress(self, config: IngressConfig) -> None:
        self.cluster.ingress = config

    async def route(self, ref: ObjectRef) -> dict[str, Any] | None:
        return self.cluster.route_objects.get(ENGINE)

    async def gateway_verdict(self, ref: ObjectRef, parents: list[dict[str, Any]]) -> None:
        self.cluster.gateway_verdict(ENGINE, parents)

    async def set_ttl(self, ref: ObjectRef, seconds: int | None) -> None:
        self.cluster.ttl_seconds = seconds


# -- the local cluster ------------------------------------------------------------------------------


class RealBackend:
    def __init__(self, api: client.ApiClient, worker: client.ApiClient, namespace: str) -> None:
        """`api` (the admin) plays the user and the Gateway; the activities call as `worker`, the chart's worker
        identity, so a call its RBAC does not allow fails here as it would in a cluster."""
        self.api = api
        self.worker = worker
        self.namespace = namespace
        self.custom = client.CustomObjectsApi(api)
        self.activities: dict[str, Callable[..., Any]] = {
            **{fn.__name__: fn for fn in ServingActivities(worker).all()},
            **{fn.__name__: fn for fn in KubernetesActivities(worker).all()},
        }
        self.images = 0

    def _spec(self, replicas: int) -> dict[str, Any]:
        self.images += 1
        return {"engine": {"minReplicas": replicas, "runner": {
            "name": "engine", "image": f"registry.invalid/engine:v{self.images}", "ports": [{"containerPort": 8000}]}}}

    async def new_service(self, replicas: int) -> ObjectRef:
        obj = create(self.api, InferenceService, manifest(InferenceService, self._spec(replicas)), self.namespace)
        return ObjectRef.of(InferenceService, obj["metadata"]["name"], self.namespace, obj["metadata"]["uid"])

    async def render_new_revision(self, ref: ObjectRef) -> None:
        self.images += 1
        self._patch(ref, {"spec": {"engine": {"runner": {"image": f"registry.invalid/engine:v{self.images}"}}}})

    def _patch(self, ref: ObjectRef, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(ref.group, ref.version, self.namespace, ref.plural, ref.name, body,
                                                   _content_type="application/merge-patch+json")

    async def call(self, activity: str, arg: Any) -> Any:
        return await asyncio.to_thread(ActivityEnvironment().run, self.activities[activity], arg)

    async def settle(self, probe: Callable[[], Awaitable[bool]], what: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while not await probe():
            assert time.monotonic() < deadline, f"never happened on the local cluster: {what}"
            await asyncio.sleep(0.5)

    async def hold_unready(self, ref: ObjectRef, revision: str) -> None:
        selector = ",".join(f"{k}={v}" for k, v in render.selector_labels(ref.name, ENGINE, revision).items())
        core = client.CoreV1Api(self.api)
        pods = core.list_namespaced_pod(self.namespace, label_selector=selector).items
        ready = [p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
        assert ready, f"no Ready pod of {revision}"
        core.patch_namespaced_pod(ready[0].metadata.name, self.namespace,
                                  {"metadata": {"annotations": {POD_UNREADY_ANNOTATION: "true"}}})

    async def annotate(self, ref: ObjectRef, annotations: dict[str, str]) -> None:
        self._patch(ref, {"metadata": {"annotations": annotations}})

    async def set_ttl(self, ref: ObjectRef, seconds: int | None) -> None:
        self._patch(ref, {"spec": {"ttlSecondsAfterCreation": seconds}})

    async def start_deleting(self, ref: ObjectRef) -> None:
        self._patch(ref, {"metadata": {"finalizers": [HOLD]}})
        self.custom.delete_namespaced_custom_object(ref.group, ref.version, self.namespace, ref.plural, ref.name)

    async def finish_deleting(self, ref: ObjectRef) -> None:
        self._patch(ref, {"metadata": {"finalizers": None}})

        async def gone() -> bool:
            try:
                self.custom.get_namespaced_custom_object(ref.group, ref.version, self.namespace, ref.plural, ref.name)
            except ApiException as exc:
                return exc.status == 404
            return False

        await self.settle(gone, "the object gone")

    async def status(self, ref: ObjectRef) -> dict[str, Any]:
        obj = self.custom.get_namespaced_custom_object(ref.group, ref.version, self.namespace, ref.plural, ref.name)
        return dict(obj.get("status") or {})

    def use_ingress(self, config: IngressConfig) -> None:
        self.activities.update({fn.__name__: fn for fn in ServingActivities(self.worker, ingress=config).all()})

    async def route(self, ref: ObjectRef) -> dict[str, Any] | None:
        try:
            obj = self.custom.get_namespaced_custom_object(*ROUTES, self.namespace, "httproutes", f"{ref.name}-engine")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(obj)

    async def gateway_verdict(self, ref: ObjectRef, parents: list[dict[str, Any]]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            *ROUTES, self.namespace, "httproutes", f"{ref.name}-engine", {"status": {"parents": parents}},
            _content_type="application/merge-patch+json")


@pytest.fixture(scope="module")
def conformance_ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "conformance")


@pytest.fixture(scope="module")
def worker_api(chart_identities: Identities) -> Iterator[client.ApiClient]:
    with api_as(chart_identities.worker) as api:
        yield api


@pytest.fixture
def real_backend(kube_api: client.ApiClient, worker_api: client.ApiClient, conformance_ns: str) -> Backend:
    return RealBackend(kube_api, worker_api, conformance_ns)


@pytest.fixture(params=FAKE_UNIT_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, FakeBackend)


# -- helpers ---------------------------------------------------------------------------------------


async def observe(backend: Backend, ref: ObjectRef) -> ServiceObservation | None:
    result: ServiceObservation | None = await backend.call("observe", ObserveInput(isvc=ref))
    return result


async def engine(backend: Backend, ref: ObjectRef) -> Any:
    seen = await observe(backend, ref)
    assert seen is not None
    [component] = seen.components
    assert component.component == ENGINE
    return component


async def ensure(backend: Backend, ref: ObjectRef, revision: str, replicas: int) -> RevisionObservation:
    result: RevisionObservation = await backend.call("ensure_revision", EnsureRevisionInput(
        key=RevisionKey(isvc=ref, component=ENGINE, revision=revision), replicas=replicas))
    return result


async def revision_status(backend: Backend, ref: ObjectRef, revision: str) -> RevisionObservation:
    result: RevisionObservation = await backend.call("revision_status",
                                                     RevisionKey(isvc=ref, component=ENGINE, revision=revision))
    return result


async def set_traffic(backend: Backend, ref: ObjectRef, *weights: tuple[str, int]) -> None:
    await backend.call("set_traffic", SetTrafficInput(isvc=ref, component=ENGINE, weights=[
        TrafficWeight(revision=revision, weight=weight) for revision, weight in weights]))


async def delete(backend: Backend, ref: ObjectRef, revision: str) -> None:
    await backend.call("delete_revision", RevisionKey(isvc=ref, component=ENGINE, revision=revision))


async def refused(call: Awaitable[Any]) -> ErrorType:
    """The permanent error type a call is refused with (never a retryable failure)."""
    with pytest.raises(ApplicationError) as info:
        await call
    assert info.value.non_retryable, f"refused but retryable: {info.value}"
    assert info.value.type is not None
    return ErrorType(info.value.type)


async def ready(backend: Backend, ref: ObjectRef, revision: str, count: int) -> None:
    async def probe() -> bool:
        seen = await revision_status(backend, ref, revision)
        return seen.replicas == count and seen.ready_replicas == count

    await backend.settle(probe, f"{revision}: {count} replicas, all Ready")


def split(weights: list[TrafficWeight]) -> list[tuple[str, int]]:
    return [(w.revision, w.weight) for w in weights]


# -- the cases -------------------------------------------------------------------------------------


async def test_ensure_and_observe_a_first_revision(backend: Backend) -> None:
    ref = await backend.new_service(2)
    first = await engine(backend, ref)
    revision = first.desired_revision
    assert revision and first.desired_replicas == 2
    assert (first.revisions, first.traffic, first.url) == ([], [], None)

    created = await ensure(backend, ref, revision, 2)
    assert (created.revision, created.replicas) == (revision, 2) and 0 <= created.ready_replicas <= 2
    await ready(backend, ref, revision, 2)
    seen = await engine(backend, ref)
    assert [(r.revision, r.replicas, r.ready_replicas) for r in seen.revisions] == [(revision, 2, 2)]
    assert seen.url is None, "no HTTPRoute yet: no address"

    await set_traffic(backend, ref, (revision, 100))
    seen = await engine(backend, ref)
    assert split(seen.traffic) == [(revision, 100)]
    assert seen.url == render.component_url(render.Owner(ref.name, ref.namespace or "", ref.uid or ""), ENGINE)

    assert (await ensure(backend, ref, revision, 2)).replicas == 2  # ensuring again changes nothing
    assert await refused(ensure(backend, ref, revision, -1)) is ErrorType.INVALID_INPUT
    # A revision that does not exist and that the spec does not render cannot be created.
    assert await refused(ensure(backend, ref, "0123456789", 1)) is ErrorType.REVISION_SUPERSEDED
    missing = await revision_status(backend, ref, "0123456789")
    assert (missing.replicas, missing.ready_replicas, missing.updated_replicas) == (0, 0, 0)


async def serving_then_rerendered(backend: Backend) -> tuple[ObjectRef, str, str]:
    """A service whose first revision (`old`, one replica) takes all traffic, then an edit that makes
    the spec render `new` (not created yet): (ref, old, new)."""
    ref = await backend.new_service(1)
    old = (await engine(backend, ref)).desired_revision
    await ensure(backend, ref, old, 1)
    await set_traffic(backend, ref, (old, 100))
    await backend.render_new_revision(ref)
    new = (await engine(backend, ref)).desired_revision
    return ref, old, new


async def test_traffic_moves_then_the_old_revision_is_deleted(backend: Backend) -> None:
    ref, old, new = await serving_then_rerendered(backend)
    assert new != old
    # An existing revision the spec no longer renders still scales.
    assert (await ensure(backend, ref, old, 2)).replicas == 2
    await ensure(backend, ref, new, 1)
    await set_traffic(backend, ref, (old, 80), (new, 20))
    seen = await engine(backend, ref)
    assert split(seen.traffic) == [(old, 80), (new, 20)]
    # Both revisions are listed. Their order is not part of the contract: the apiserver's
    # creationTimestamp has one-second resolution, and the workflows read the list as a set.
    assert sorted(r.revision for r in seen.revisions) == sorted([old, new])

    assert await refused(delete(backend, ref, old)) is ErrorType.REVISION_SERVING_TRAFFIC
    assert sorted(r.revision for r in (await engine(backend, ref)).revisions) == sorted([old, new])

    await set_traffic(backend, ref, (new, 100))
    await delete(backend, ref, old)
    seen = await engine(backend, ref)
    assert [r.revision for r in seen.revisions] == [new] and split(seen.traffic) == [(new, 100)]
    gone = await revision_status(backend, ref, old)
    assert (gone.replicas, gone.ready_replicas) == (0, 0)
    await delete(backend, ref, old)  # already gone: nothing to do


async def test_splits_the_route_cannot_carry_are_refused(backend: Backend) -> None:
    ref = await backend.new_service(1)
    revision = (await engine(backend, ref)).desired_revision
    await ensure(backend, ref, revision, 1)
    await set_traffic(backend, ref, (revision, 100))
    for weights in ([(revision, 90)], [], [(revision, 50), (revision, 50)], [(revision, 101), ("other", -1)]):
        assert await refused(set_traffic(backend, ref, *weights)) is ErrorType.INVALID_TRAFFIC, weights
    # A revision without a Service, at any weight, 0 included: the route would name a missing backend.
    await backend.render_new_revision(ref)
    unborn = (await engine(backend, ref)).desired_revision
    for weights in ([(unborn, 100)], [(revision, 100), (unborn, 0)], [(revision, 50), (unborn, 50)]):
        assert await refused(set_traffic(backend, ref, *weights)) is ErrorType.INVALID_TRAFFIC, weights
    assert split((await engine(backend, ref)).traffic) == [(revision, 100)], "a refused split changes nothing"


async def scale_then_route(backend: Backend, ref: ObjectRef, revision: str, replicas: int,
                           *weights: tuple[str, int], isvc: ObjectRef | None = None) -> ScaleThenRouteResult:
    route = SetTrafficInput(isvc=isvc or ref, component=ENGINE,
                            weights=[TrafficWeight(revision=r, weight=w) for r, w in weights])
    result: ScaleThenRouteResult = await backend.call("scale_then_route", ScaleThenRouteInput(
        revisions=[EnsureRevisionInput(key=RevisionKey(isvc=ref, component=ENGINE, revision=revision),
                                       replicas=replicas)],
        routes=[route] if weights else []))
    return result


async def test_a_step_scales_and_routes_in_one_call_only_once_its_capacity_is_ready(backend: Backend) -> None:
    ref, old, new = await serving_then_rerendered(backend)

    # Created by the call, not Ready yet: scaled, the route left as it was.
    first = await scale_then_route(backend, ref, new, 1, (old, 50), (new, 50))
    assert not first.routed and [(s.revision, s.replicas) for s in first.scaled] == [(new, 1)]
    assert first.scaled[0].ready_replicas == 0
    assert split((await engine(backend, ref)).traffic) == [(old, 100)]
    await ready(backend, ref, new, 1)

    # Ready at the asked replicas: the route is written in the same call.
    second = await scale_then_route(backend, ref, new, 1, (old, 50), (new, 50))
    assert second.routed and [(s.revision, s.replicas, s.ready_replicas) for s in second.scaled] == [(new, 1, 1)]
    assert split((await engine(backend, ref)).traffic) == [(old, 50), (new, 50)]
    # Asked for more than is Ready: scaled up, not routed.
    grown = await scale_then_route(backend, ref, new, 2, (old, 0), (new, 100))
    assert not grown.routed and grown.scaled[0].replicas == 2
    assert split((await engine(backend, ref)).traffic) == [(old, 50), (new, 50)]
    # No route asked: a scale, never "routed".
    assert not (await scale_then_route(backend, ref, new, 1)).routed

    # Refused before anything moves: a split the route cannot carry, a second service named.
    assert await refused(scale_then_route(backend, ref, new, 3, (old, 60), (new, 60))) is ErrorType.INVALID_TRAFFIC
    other = ref.model_copy(update={"name": f"{ref.name}-other"})
    assert await refused(scale_then_route(backend, ref, new, 3, (new, 100), isvc=other)) is ErrorType.INVALID_INPUT
    assert (await revision_status(backend, ref, new)).replicas == 1
    assert await refused(backend.call("scale_then_route", ScaleThenRouteInput(revisions=[]))) \
        is ErrorType.INVALID_INPUT
    # The route's other revisions still need their Service, as set_traffic's do.
    assert await refused(scale_then_route(backend, ref, new, 1, ("0123456789", 50), (new, 50))) \
        is ErrorType.INVALID_TRAFFIC
    assert split((await engine(backend, ref)).traffic) == [(old, 50), (new, 50)]


async def test_scale_down_removes_unready_pods_first(backend: Backend) -> None:
    ref = await backend.new_service(3)
    revision = (await engine(backend, ref)).desired_revision
    await ensure(backend, ref, revision, 3)
    await ready(backend, ref, revision, 3)
    await backend.hold_unready(ref, revision)

    async def two_ready() -> bool:
        return (await revision_status(backend, ref, revision)).ready_replicas == 2

    await backend.settle(two_ready, "one pod held unready")
    # Had a Ready pod gone first, one Ready pod and the held one would be left.
    await ensure(backend, ref, revision, 2)
    await ready(backend, ref, revision, 2)
    await ensure(backend, ref, revision, 1)
    await ready(backend, ref, revision, 1)


async def test_a_service_is_deleted_once_its_ttl_has_passed_by_the_object_as_it_is_now(backend: Backend) -> None:
    ref = await backend.new_service(1)
    assert (await backend.call("observe", ObserveInput(isvc=ref))).expires_at is None
    await backend.set_ttl(ref, 3600)
    later = (await backend.call("observe", ObserveInput(isvc=ref))).expires_at
    assert later is not None
    assert await backend.call("delete_expired", ObserveInput(isvc=ref)) is False  # an hour to go
    await backend.set_ttl(ref, None)  # removing the field cancels it
    assert (await backend.call("observe", ObserveInput(isvc=ref))).expires_at is None
    await backend.set_ttl(ref, 2)  # an edit moves it: both count from creation
    moved = (await backend.call("observe", ObserveInput(isvc=ref))).expires_at
    assert moved == later - timedelta(seconds=3598)

    async def deleted() -> bool:
        return bool(await backend.call("delete_expired", ObserveInput(isvc=ref)))

    await backend.settle(deleted, "the ttl passed and the service was deleted")
    assert await backend.call("observe", ObserveInput(isvc=ref)) is None
    assert await backend.call("delete_expired", ObserveInput(isvc=ref)) is False  # gone: nothing to do


async def test_status_patch_answers_whether_the_object_is_still_there(backend: Backend) -> None:
    ref = await backend.new_service(1)
    patch = StatusPatch(ref=ref, status={"url": "http://first.example"},
                        conditions=[ConditionUpdate(type="Ready", status="False", reason="Pending")])
    assert await backend.call("patch_status", patch) is True
    status = await backend.status(ref)
    assert status["url"] == "http://first.example"
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [("Ready", "False", "Pending")]
    assert await backend.call("patch_status", StatusPatch(ref=ref, status={"url": None})) is True
    assert "url" not in await backend.status(ref), "None deletes the field"

    await backend.start_deleting(ref)
    seen = await observe(backend, ref)
    assert seen is not None and seen.deleting
    # Being deleted is not gone: the status write lands (and its Events are recorded).
    assert await backend.call("patch_status", StatusPatch(ref=ref, status={"url": "http://last.example"})) is True
    assert (await backend.status(ref))["url"] == "http://last.example"

    await backend.finish_deleting(ref)
    assert await backend.call("patch_status", StatusPatch(ref=ref, status={"url": "http://after.example"})) is False
    assert await observe(backend, ref) is None
    assert await refused(set_traffic(backend, ref, ("x", 100))) is ErrorType.OBJECT_GONE
    assert await refused(ensure(backend, ref, "x", 1)) is ErrorType.OBJECT_GONE


async def test_annotations_observed_and_removed_only_at_the_value_consumed(backend: Backend) -> None:
    ref = await backend.new_service(1)
    promote = contract.ROLLOUT_PROMOTE
    await backend.annotate(ref, {promote: "abc", contract.ROLLOUT_PAUSED: "true", "example.com/note": "kept"})
    seen = await observe(backend, ref)
    assert seen is not None and seen.annotations == {promote: "abc", contract.ROLLOUT_PAUSED: "true"}

    # A newer value is someone's new request: it stays.
    stale = AnnotationRemoval(ref=ref, name=promote, value="older")
    assert await backend.call("remove_annotation", stale) is False
    assert (await observe(backend, ref)).annotations[promote] == "abc"  # type: ignore[union-attr]
    consumed = AnnotationRemoval(ref=ref, name=promote, value="abc")
    assert await backend.call("remove_annotation", consumed) is True
    assert (await observe(backend, ref)).annotations == {contract.ROLLOUT_PAUSED: "true"}  # type: ignore[union-attr]
    assert await backend.call("remove_annotation", consumed) is False, "already removed"
    await backend.start_deleting(ref)
    await backend.finish_deleting(ref)
    assert await backend.call("remove_annotation", consumed) is False, "gone"


@pytest.mark.timeskip
async def test_the_fake_records_what_the_real_activities_refuse() -> None:
    """The harness fails a time-skipping test on any refused call (testkit/rollout_harness.py)."""
    fake = FakeBackend()
    ref = await fake.new_service(1)
    with pytest.raises(ApplicationError):
        await set_traffic(fake, ref, ("rev1", 100))
    with pytest.raises(ApplicationError):
        await ensure(fake, ref, "rev1", -2)
    assert len(fake.cluster.violations) == 2 and "InvalidTraffic" in fake.cluster.violations[0]


def _parent_entry(name: str, accepted: tuple[str, str], resolved: tuple[str, str, str],
                  generation: int) -> dict[str, Any]:
    """A status.parents entry as a Gateway writes it (every field the HTTPRoute CRD requires)."""
    def condition(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
        return {"type": kind, "status": status, "reason": reason, "message": message,
                "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"}

    return {"parentRef": {"name": name, "namespace": "conformance-gw"}, "controllerName": "example.com/gateway",
            "conditions": [condition("Accepted", *accepted), condition("ResolvedRefs", *resolved)]}


async def test_routes_attach_to_the_gateway_and_its_verdict_is_read_back(backend: Backend) -> None:
    backend.use_ingress(IngressConfig(ome_ingress_gateway="conformance-gw/inference", ingress_domain="example.test"))
    ref = await backend.new_service(1)
    namespace = ref.namespace or ""
    host, engine_host = f"{ref.name}.{namespace}.example.test", f"{ref.name}-engine.{namespace}.example.test"
    seen_service = await observe(backend, ref)
    assert seen_service is not None
    assert seen_service.ingress == IngressObservation(gateway="conformance-gw/inference", url=f"http://{host}")
    first = await engine(backend, ref)
    assert (first.url, first.address, first.route_status, first.ingress_drift) == (None, None, None, False)
    old = first.desired_revision
    await ensure(backend, ref, old, 1)
    await set_traffic(backend, ref, (old, 100))

    # parentRefs and hostnames; the engine is the entrypoint, so it answers on the service's host too.
    route = await backend.route(ref)
    assert route is not None
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "namespace": "conformance-gw", "name": "inference"}]
    assert route["spec"]["hostnames"] == [engine_host, host]
    generation = int(route["metadata"]["generation"])
    seen = await engine(backend, ref)
    assert seen.url == f"http://{engine_host}" and not seen.ingress_drift
    assert seen.address == render.component_url(render.Owner(ref.name, namespace, ref.uid or ""), ENGINE)
    assert seen.route_status == RouteStatus(route=f"{ref.name}-engine", generation=generation)

    # The Gateway's verdict, its own reason and message; an entry for another parent is not ours.
    await backend.gateway_verdict(ref, [
        _parent_entry("other", ("False", "NoMatchingParent"), ("True", "ResolvedRefs", ""), generation),
        _parent_entry("inference", ("True", "Accepted"), ("False", "BackendNotFound", "no such Service"), generation)])
    assert (await engine(backend, ref)).route_status == RouteStatus(
        route=f"{ref.name}-engine", generation=generation, reported=True, accepted=True, resolved_refs=False,
        reason="BackendNotFound", message="no such Service", observed_generation=generation, current=True)

    # A new split is a new generation: the verdict on the older one is not current.
    await backend.render_new_revision(ref)
    new = (await engine(backend, ref)).desired_revision
    await ensure(backend, ref, new, 1)
    await set_traffic(backend, ref, (old, 50), (new, 50))
    route = await backend.route(ref)
    assert route is not None and int(route["metadata"]["generation"]) > generation
    generation = int(route["metadata"]["generation"])
    stale = (await engine(backend, ref)).route_status
    assert stale is not None and stale.generation == generation and not stale.current
    await backend.gateway_verdict(ref, [
        _parent_entry("inference", ("True", "Accepted"), ("True", "ResolvedRefs", ""), generation)])
    accepted = (await engine(backend, ref)).route_status
    assert accepted is not None and (accepted.accepted, accepted.resolved_refs, accepted.current) == (True, True, True)

    # The Gateway removed from the block: the route drifts until it is applied again, weights as they were.
    backend.use_ingress(IngressConfig())
    seen = await engine(backend, ref)
    assert seen.ingress_drift and seen.route_status is None and seen.url == seen.address
    await set_traffic(backend, ref, (old, 50), (new, 50))
    route = await backend.route(ref)
    assert route is not None and "parentRefs" not in route["spec"] and "hostnames" not in route["spec"]
    seen = await engine(backend, ref)
    assert not seen.ingress_drift and split(seen.traffic) == [(old, 50), (new, 50)]
