"""The in-memory world behind the time-skipping routing tests (testkit/routing_fakes.py) answers as the real
routing and publisher activities (activities/routing/) do against the session's real kube-apiserver (with the
Gateway API CRDs and ours), as the chart's worker identity: one suite, run against both.

What each case covers:
- read_source: the routing annotations only, spec.placement's mode, spec.routing, status.placement, the map;
  a gone source is `present` False.
- write_map: the first write creates the map named after the service, controlled by it, with the publisher's
  finalizer, status.sourceUID and the three controller conditions; the same spec again moves no generation;
  a new spec moves it; a map another InferenceService controls is InvalidOwner, untouched.
- publish: the route `<isvc>-global` and one Service per entry, weights verbatim (0 included), each marked as
  the map's; the map's status published, gatewayRef, observedTrafficMapGeneration and the claims exactly what
  exists; an entry gone from the table loses its Service and its claim; an object of a claimed name that is not
  the map's is ClaimRejected and left alone; no global Gateway withdraws every object (Withdrawn).
- unpublish: every claimed object deleted, the finalizer released and the map deleted when asked.
- check_homes: each home's answer (status, or a transport error), connecting where `connect` says with the
  endpoint's host in the Host header.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest
from kubernetes import client
from pydantic import BaseModel
from temporalio.testing import ActivityEnvironment

from devstack.identities import Identities
from servingops.activities.routing.activities import RoutingActivities
from servingops.activities.routing.publisher import PublisherActivities
from servingops.activities.routing.types import (
    CheckTarget,
    DeleteMapInput,
    MapWritten,
    ProbeAnswer,
    ProbeRequest,
    PublishInput,
    PublishOutcome,
    RoutingSource,
    SourceInput,
    Unpublished,
    UnpublishInput,
    WriteMapInput,
)
from servingops.api_models.contract.routing import DRAIN_ANNOTATION, TRAFFIC_MAP_FINALIZER
from servingops.api_models.ome.enums import PlacementMode, PlacementPhase
from servingops.api_models.ome.placement_status import CandidatePlacement, PlacementPlanStatus, PlacementStatus
from servingops.api_models.ome.traffic_map import TrafficMapEntry, TrafficMapSpec
from servingops.api_models.operator_config import EndpointConfig
from servingops.api_models.refs import ConditionUpdate, ObjectRef
from testkit.routing_fakes import OWNER, FakeRoutingWorld, HomeAnswer
from tests.fixtures.kube import api_as
from tests.support.conformance import FAKE_UNIT_AND_REAL, activity_name, chosen_backend, wire

GROUP, VERSION = "ome.io", "v1beta1"
ENDPOINT = EndpointConfig(global_gateway="gateway-system/global", backend_port=80,
                          global_host_template="{{ .Name }}.{{ .Namespace }}.global.example.com")
CONDITIONS = [ConditionUpdate(type="Routable", status="True", reason="Routable", message="routes to a, b"),
              ConditionUpdate(type="OverrideActive", status="False", reason="NoOverrides", message="none"),
              ConditionUpdate(type="CapacityFallback", status="False", reason="CapacityPollingDisabled",
                              message="capacity polling is off")]


def _entries(**weights: int) -> list[TrafficMapEntry]:
    return [TrafficMapEntry(cluster=c.replace("_", "-"), endpoint=f"http://chat.x.{c.replace('_', '-')}.example.com",
                            weight=w) for c, w in weights.items()]


def _spec(name: str, **weights: int) -> TrafficMapSpec:
    return TrafficMapSpec(service=name, mode=PlacementMode.SPLIT, entries=_entries(**weights),
                          observed_isvc_generation=1, placement_plan_id="plan-1")


def _placement() -> PlacementStatus:
    return PlacementStatus(phase=PlacementPhase.PLACED, plan=PlacementPlanStatus(id="plan-1"), candidates=[
        CandidatePlacement(cluster="member-a", endpoint="http://chat.x.member-a.example.com", admitted_replicas=2,
                           ready_replicas=2)])


class Backend(Protocol):
    namespace: str

    def source(self, annotations: dict[str, str]) -> ObjectRef: ...
    def call(self, fn: Callable[..., Any], request: BaseModel, answer: type[Any]) -> Any: ...
    def map(self, isvc: ObjectRef) -> dict[str, Any] | None: ...
    def objects(self, isvc: ObjectRef) -> dict[str, dict[str, Any]]: ...
    def foreign_route(self, isvc: ObjectRef) -> None: ...
    def foreign_map(self, isvc: ObjectRef) -> None: ...
    def delete_source(self, isvc: ObjectRef) -> None: ...


class FakeBackend:
    namespace = "team-a"

    def __init__(self) -> None:
        self.worlds: dict[str, FakeRoutingWorld] = {}

    def source(self, annotations: dict[str, str]) -> ObjectRef:
        world = FakeRoutingWorld(name=f"chat-{uuid.uuid4().hex[:5]}", namespace=self.namespace,
                                 annotations=dict(annotations), placement=_placement())
        self.worlds[world.name] = world
        return world.ref()

    def call(self, fn: Callable[..., Any], request: BaseModel, answer: type[Any]) -> Any:
        isvc = getattr(request, "isvc", None)
        world = self.worlds[isvc.name] if isvc is not None else next(iter(self.worlds.values()), FakeRoutingWorld())
        named = {activity_name(a): a for a in world.activities()}
        result = asyncio.run(named[activity_name(fn)](wire(request, type(request))))
        return wire(result, answer)

    def map(self, isvc: ObjectRef) -> dict[str, Any] | None:
        found = self.worlds[isvc.name].traffic_map
        if found is None:
            return None
        return {"uid": found.uid, "generation": found.generation, "spec": found.spec, "status": found.status,
                "finalizers": found.finalizers, "controller": found.controller_uid}

    def objects(self, isvc: ObjectRef) -> dict[str, dict[str, Any]]:
        return dict(self.worlds[isvc.name].objects)

    def foreign_route(self, isvc: ObjectRef) -> None:
        self.worlds[isvc.name].objects[f"HTTPRoute/{self.namespace}/{isvc.name}-global"] = {
            "kind": "HTTPRoute", "metadata": {"name": f"{isvc.name}-global", "namespace": self.namespace,
                                              "annotations": {}}}

    def foreign_map(self, isvc: ObjectRef) -> None:
        from testkit.routing_fakes import FakeMap

        self.worlds[isvc.name].traffic_map = FakeMap(uid=str(uuid.uuid4()), controller_uid=str(uuid.uuid4()))

    def delete_source(self, isvc: ObjectRef) -> None:
        self.worlds[isvc.name].present = False


class RealBackend:
    namespace = "default"

    def __init__(self, api: client.ApiClient, worker: client.ApiClient, controller_namespace: str) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.routing = RoutingActivities(worker, controller_namespace)
        self.publisher = PublisherActivities(worker)
        self.made: list[ObjectRef] = []

    def source(self, annotations: dict[str, str]) -> ObjectRef:
        name = f"chat-{uuid.uuid4().hex[:5]}"
        spec = {"deploymentMode": "OMENative", "engine": {"minReplicas": 1, "runner": {
            "name": "engine", "image": "vllm/vllm-openai:v0.9", "ports": [{"containerPort": 8000}]}},
            "placement": {"mode": "Split", "policy": "ClusterAffinity"}}
        made = self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "inferenceservices", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": self.namespace, "annotations": annotations}, "spec": spec})
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, self.namespace, "inferenceservices", name, {
            "status": {"placement": _placement().to_api()}})
        ref = ObjectRef(group=GROUP, version=VERSION, plural="inferenceservices", kind="InferenceService", name=name,
                        namespace=self.namespace, uid=made["metadata"]["uid"])
        self.made.append(ref)
        return ref

    def call(self, fn: Callable[..., Any], request: BaseModel, answer: type[Any]) -> Any:
        name = activity_name(fn)
        bound = {activity_name(a): a for a in [*self.routing.all(), *self.publisher.all()]}[name]
        result = ActivityEnvironment().run(bound, wire(request, type(request)))  # type: ignore[arg-type]
        return wire(result, answer)

    def map(self, isvc: ObjectRef) -> dict[str, Any] | None:
        try:
            found = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "trafficmaps", isvc.name)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        meta = found["metadata"]
        controller = next((o["uid"] for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
        return {"uid": meta["uid"], "generation": meta["generation"], "spec": found.get("spec"),
                "status": found.get("status") or {}, "finalizers": meta.get("finalizers") or [],
                "controller": controller}

    def objects(self, isvc: ObjectRef) -> dict[str, dict[str, Any]]:
        selector = f"ome.io/placement-endpoint-isvc={isvc.name}"
        found: dict[str, dict[str, Any]] = {}
        for route in self.custom.list_namespaced_custom_object("gateway.networking.k8s.io", "v1", self.namespace,
                                                               "httproutes", label_selector=selector)["items"]:
            found[f"HTTPRoute/{self.namespace}/{route['metadata']['name']}"] = route
        for service in client.CoreV1Api(self.api).list_namespaced_service(self.namespace,
                                                                          label_selector=selector).items:
            found[f"Service/{self.namespace}/{service.metadata.name}"] = client.ApiClient().sanitize_for_serialization(
                service)
        for piece in client.DiscoveryV1Api(self.api).list_namespaced_endpoint_slice(self.namespace,
                                                                                    label_selector=selector).items:
            found[f"EndpointSlice/{self.namespace}/{piece.metadata.name}"] = (
                client.ApiClient().sanitize_for_serialization(piece))
        return found

    def foreign_route(self, isvc: ObjectRef) -> None:
        self.custom.create_namespaced_custom_object("gateway.networking.k8s.io", "v1", self.namespace, "httproutes", {
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": f"{isvc.name}-global", "namespace": self.namespace},
            "spec": {"parentRefs": [{"name": "someone-elses"}], "hostnames": ["other.example.com"]}})

    def foreign_map(self, isvc: ObjectRef) -> None:
        # Controlled by another InferenceService that exists (an owner that does not is garbage-collected away).
        other = self.source({})
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "trafficmaps", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrafficMap",
            "metadata": {"name": isvc.name, "namespace": self.namespace, "ownerReferences": [{
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "name": other.name,
                "uid": other.uid, "controller": True}]},
            "spec": {"service": isvc.name}})

    def delete_source(self, isvc: ObjectRef) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, "inferenceservices", isvc.name)

    def close(self) -> None:
        for ref in self.made:
            for plural in ("trafficmaps", "inferenceservices"):
                try:
                    if plural == "trafficmaps":
                        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, ref.name,
                                                                   {"metadata": {"finalizers": None}})
                    self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, ref.name)
                except client.ApiException as exc:
                    if exc.status != 404:
                        raise
            for route in self.objects(ref):
                kind, namespace, name = route.split("/")
                if kind == "HTTPRoute":
                    self.custom.delete_namespaced_custom_object("gateway.networking.k8s.io", "v1", namespace,
                                                                "httproutes", name)
                elif kind == "EndpointSlice":
                    client.DiscoveryV1Api(self.api).delete_namespaced_endpoint_slice(name, namespace)
                else:
                    client.CoreV1Api(self.api).delete_namespaced_service(name, namespace)


@pytest.fixture
def real_backend(kube_api: client.ApiClient, chart_identities: Identities) -> Iterator[RealBackend]:
    from devstack import identities

    with api_as(chart_identities.worker) as worker:
        backend = RealBackend(kube_api, worker, identities.NAMESPACE)
        yield backend
        backend.close()


@pytest.fixture(params=FAKE_UNIT_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, FakeBackend)


def _write(backend: Backend, isvc: ObjectRef, spec: TrafficMapSpec) -> MapWritten:
    written: MapWritten = backend.call(RoutingActivities.write_map,
                                       WriteMapInput(isvc=isvc, spec=spec, conditions=CONDITIONS), MapWritten)
    return written


def _publish(backend: Backend, isvc: ObjectRef, written: MapWritten, entries: list[TrafficMapEntry],
             endpoint: EndpointConfig = ENDPOINT) -> PublishOutcome:
    outcome: PublishOutcome = backend.call(PublisherActivities.publish, PublishInput(
        isvc=isvc, map_uid=written.uid, generation=written.generation, observed_isvc_generation=1, entries=entries,
        endpoint=endpoint), PublishOutcome)
    return outcome


def _conditions(found: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in found["status"].get("conditions") or []}


def test_read_source_gives_the_routing_inputs(backend: Backend) -> None:
    isvc = backend.source({DRAIN_ANNOTATION: "{}", "unrelated.example.com/x": "y"})
    source: RoutingSource = backend.call(RoutingActivities.read_source, SourceInput(isvc=isvc), RoutingSource)
    assert source.present and source.uid == isvc.uid and source.placed_spec and source.mode == PlacementMode.SPLIT
    assert source.annotations == {DRAIN_ANNOTATION: "{}"}
    assert source.placement is not None and source.placement.plan is not None
    assert source.placement.plan.id == "plan-1" and [c.cluster for c in source.placement.candidates or []] == [
        "member-a"]
    assert source.traffic_map is None
    backend.delete_source(isvc)
    gone: RoutingSource = backend.call(RoutingActivities.read_source, SourceInput(isvc=isvc), RoutingSource)
    assert gone.present is False


def test_write_map_creates_it_owned_and_moves_its_generation_only_on_a_new_spec(backend: Backend) -> None:
    isvc = backend.source({})
    first = _write(backend, isvc, _spec(isvc.name, member_a=3, member_b=1))
    assert first.written and first.spec_changed and first.generation == 1
    found = backend.map(isvc)
    assert found is not None and found["controller"] == isvc.uid and TRAFFIC_MAP_FINALIZER in found["finalizers"]
    assert found["status"]["sourceUID"] == isvc.uid
    assert _conditions(found) == {"Routable": ("True", "Routable"), "OverrideActive": ("False", "NoOverrides"),
                                  "CapacityFallback": ("False", "CapacityPollingDisabled")}
    assert [(e["cluster"], e["weight"]) for e in found["spec"]["entries"]] == [("member-a", 3), ("member-b", 1)]
    again = _write(backend, isvc, _spec(isvc.name, member_a=3, member_b=1))
    assert again.written and not again.spec_changed and again.generation == 1 and again.uid == first.uid
    moved = _write(backend, isvc, _spec(isvc.name, member_a=1, member_b=1))
    assert moved.spec_changed and moved.generation == 2


def test_a_map_another_service_controls_is_invalid_owner_and_untouched(backend: Backend) -> None:
    isvc = backend.source({})
    backend.foreign_map(isvc)
    before = backend.map(isvc)
    refused = _write(backend, isvc, _spec(isvc.name, member_a=1))
    assert not refused.written and refused.reason == "InvalidOwner" and isvc.uid in (refused.message or "")
    after = backend.map(isvc)
    assert before is not None and after is not None and after["generation"] == before["generation"]


def test_publish_writes_the_route_and_backends_and_claims_exactly_them(backend: Backend) -> None:
    isvc = backend.source({})
    written = _write(backend, isvc, _spec(isvc.name, member_a=3, member_b=0))
    outcome = _publish(backend, isvc, written, _entries(member_a=3, member_b=0))
    assert outcome.published and outcome.routed == ["member-a"], outcome
    assert outcome.gateway_ref == {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                   "name": f"{isvc.name}-global", "namespace": backend.namespace}
    objects = backend.objects(isvc)
    route = objects[f"HTTPRoute/{backend.namespace}/{isvc.name}-global"]
    assert route["spec"]["hostnames"] == [f"{isvc.name}.{backend.namespace}.global.example.com"]
    assert sorted(b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]) == [0, 3]
    assert all(o["metadata"]["annotations"][OWNER] == written.uid for o in objects.values())
    found = backend.map(isvc)
    assert found is not None
    status = found["status"]
    assert status["published"] is True and status["observedTrafficMapGeneration"] == written.generation
    assert sorted(status["publisher"]["claimedTargets"]) == sorted(objects), (status["publisher"], list(objects))
    assert status["publisher"]["lastPositive"]["trafficMapGeneration"] == written.generation
    assert _conditions(found)["Published"] == ("True", "Published")
    assert _conditions(found)["PublicationFallback"] == ("False", "Unsupported")
    # member-b leaves the table: its Service and its claim go.
    smaller = _write(backend, isvc, _spec(isvc.name, member_a=3))
    again = _publish(backend, isvc, smaller, _entries(member_a=3))
    assert again.published
    left = backend.objects(isvc)
    assert len(left) == 2 and not any("member-b" in str(o["metadata"].get("labels")) for o in left.values())
    found = backend.map(isvc)
    assert found is not None and sorted(found["status"]["publisher"]["claimedTargets"]) == sorted(left)


def test_an_object_of_a_claimed_name_that_is_not_ours_is_claim_rejected_and_left_alone(backend: Backend) -> None:
    isvc = backend.source({})
    backend.foreign_route(isvc)
    written = _write(backend, isvc, _spec(isvc.name, member_a=1))
    outcome = _publish(backend, isvc, written, _entries(member_a=1))
    assert not outcome.published and outcome.reason == "ClaimRejected" and not outcome.partial
    found = backend.map(isvc)
    assert found is not None and _conditions(found)["Published"] == ("False", "ClaimRejected")
    assert "publisher" not in found["status"]  # nothing claimed, nothing written
    routes = [o for c, o in backend.objects(isvc).items() if c.startswith("HTTPRoute/")]
    assert all(OWNER not in (o["metadata"].get("annotations") or {}) for o in routes)


def test_no_global_gateway_withdraws_every_object(backend: Backend) -> None:
    isvc = backend.source({})
    written = _write(backend, isvc, _spec(isvc.name, member_a=1))
    assert _publish(backend, isvc, written, _entries(member_a=1)).published
    outcome = _publish(backend, isvc, written, _entries(member_a=1), endpoint=EndpointConfig())
    assert outcome.withdrawn and outcome.reason == "Withdrawn" and "globalGateway" in outcome.message
    assert backend.objects(isvc) == {}
    found = backend.map(isvc)
    assert found is not None and found["status"].get("published") is False and "publisher" not in found["status"]


def test_unpublish_removes_the_objects_releases_and_deletes_the_map(backend: Backend) -> None:
    isvc = backend.source({})
    written = _write(backend, isvc, _spec(isvc.name, member_a=1, member_b=1))
    assert _publish(backend, isvc, written, _entries(member_a=1, member_b=1)).published
    done: Unpublished = backend.call(PublisherActivities.unpublish, UnpublishInput(
        isvc=isvc, map_uid=written.uid, reason="Unpublished", message="not routed", release=True, delete_map=True),
        Unpublished)
    assert done.done and "3" in done.message
    assert backend.objects(isvc) == {} and backend.map(isvc) is None
    # Nothing left to do is done too.
    assert backend.call(RoutingActivities.delete_map, DeleteMapInput(isvc=isvc), bool) is False


class _Answering(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = 200 if self.headers["Host"].startswith("chat.x.member-a.") else 503
        self.send_response(code)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def answering() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answering)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def test_check_homes_answers_each_homes_status_or_transport_error(backend: Backend, answering: int) -> None:
    isvc = backend.source({})
    if isinstance(backend, FakeBackend):
        world = backend.worlds[isvc.name]
        world.answers = {"member-b": HomeAnswer(status=503), "member-c": HomeAnswer(status=None,
                                                                                    error="ConnectionRefusedError")}
    targets = [CheckTarget(cluster=c, endpoint=f"http://chat.x.{c}.example.com",
                           connect=f"127.0.0.1:{answering if c != 'member-c' else 1}")
               for c in ("member-a", "member-b", "member-c")]
    answers: list[ProbeAnswer] = backend.call(RoutingActivities.check_homes, ProbeRequest(
        targets=targets, path="/health", method="GET", timeout_s=2), list[ProbeAnswer])
    by = {a.cluster: a for a in answers}
    assert [a.cluster for a in answers] == ["member-a", "member-b", "member-c"]
    assert by["member-a"].status == 200 and by["member-b"].status == 503
    assert by["member-c"].status is None and "ConnectionRefused" in (by["member-c"].error or "")


def test_publisher_options_are_refused_by_the_built_in_publisher(backend: Backend) -> None:
    isvc = backend.source({})
    written = _write(backend, isvc, _spec(isvc.name, member_a=1))
    outcome: PublishOutcome = backend.call(PublisherActivities.publish, PublishInput(
        isvc=isvc, map_uid=written.uid, generation=written.generation, observed_isvc_generation=1,
        entries=_entries(member_a=1), endpoint=ENDPOINT, options={"weightScale": "10"}), PublishOutcome)
    assert not outcome.published and outcome.reason == "InvalidOptions" and "weightScale" in outcome.message
    assert backend.objects(isvc) == {}
    found = backend.map(isvc)
    assert found is not None and _conditions(found)["Published"] == ("False", "InvalidOptions")


def test_the_endpoint_slice_fallback_writes_selectorless_backends_and_claims_their_slices(backend: Backend) -> None:
    from servingops.api_models.operator_config import EndpointSlicesFallback, GatewayBackend

    isvc = backend.source({})
    fallback = ENDPOINT.model_copy(update={"gateway_backend": GatewayBackend(
        rewrite_hostname=True, endpoint_slices=EndpointSlicesFallback(enabled=True, address_refresh_interval="1m"))})
    written = _write(backend, isvc, _spec(isvc.name, member_a=3, member_b=1))
    outcome: PublishOutcome = backend.call(PublisherActivities.publish, PublishInput(
        isvc=isvc, map_uid=written.uid, generation=written.generation, observed_isvc_generation=1,
        entries=_entries(member_a=3, member_b=1), endpoint=fallback,
        addresses={"member-a": ["10.250.7.2"], "member-b": ["10.250.8.2"]}), PublishOutcome)
    assert outcome.published, outcome
    objects = backend.objects(isvc)
    slices = {c: o for c, o in objects.items() if c.startswith("EndpointSlice/")}
    services = {c: o for c, o in objects.items() if c.startswith("Service/")}
    assert len(slices) == 2 and len(services) == 2
    assert all(o["spec"].get("type", "ClusterIP") == "ClusterIP" and not o["spec"].get("selector")
               for o in services.values())
    assert sorted(o["endpoints"][0]["addresses"][0] for o in slices.values()) == ["10.250.7.2", "10.250.8.2"]
    found = backend.map(isvc)
    assert found is not None and sorted(found["status"]["publisher"]["claimedTargets"]) == sorted(objects)
    # A home whose Gateway addresses cannot be read holds the whole publication (upstream's rule).
    held: PublishOutcome = backend.call(PublisherActivities.publish, PublishInput(
        isvc=isvc, map_uid=written.uid, generation=written.generation, observed_isvc_generation=1,
        entries=_entries(member_a=1, member_b=1), endpoint=fallback, addresses={"member-a": ["10.250.7.2"]},
        address_failures={"member-b": "member-b cannot be reached"}), PublishOutcome)
    assert not held.published and held.reason == "ApplyFailed" and "member-b cannot be reached" in held.message
    assert backend.objects(isvc) == objects
