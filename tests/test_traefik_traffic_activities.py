"""spec.traffic's Traefik translation against a real apiserver, as the chart's worker identity (so each step
also proves its RBAC), with Traefik's own CRDs (devstack/traefik.py crd_dir(): the TraefikService schema the
kubernetesCRD provider serves, whose strategy enum and sticky block the rendered objects must meet):

- set_traffic with ingress.trafficTranslator traefik applies the component's weighted TraefikService (one
  child per revision's Service, weights as given, spec.traffic's settings per child), then the route naming
  it (one backendRef; Gateway API's schema takes a TraefikService backendRef without a port); a promote
  writes the TraefikService only; observe reads the weights back from it;
- observe says nothing drifted while the route names what the translation says, and drift once the operator
  selects Envoy Gateway's translation alone; set_traffic then names the Services again;
- the backend-policy activity: while Traefik reports on the routes (its status written here as Traefik writes
  it), BackendPolicyDataPlane HonoredByDataPlane and BackendPolicyReady follow it; header hashing is named in
  BackendPolicyUnsupportedFields; a TraefikService no route names is deleted;
- delete_revision refuses while the TraefikService gives the revision weight, and takes its child out of
  the TraefikService before its Service goes.

What Traefik does with the objects (requests pinned by cookie or source address) is end to end:
tests/test_traffic_policy_e2e.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.traefik import crd_dir
from servingops.activities.serving.activities import ServingActivities
from servingops.activities.serving.traffic_policy import BackendPolicyActivities, TrafficPolicyObservation
from servingops.activities.serving.types import ObserveInput, RevisionKey, SetTrafficInput
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.operator_config import IngressConfig
from servingops.api_models.refs import ObjectRef
from servingops.api_models.serving import TrafficWeight
from servingops.rendering import traefik_traffic as tt
from servingops.rendering.names import revision_name, route_name
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as

pytestmark = pytest.mark.integration

ENGINE = ComponentType.ENGINE
TRAEFIK = IngressConfig(traffic_translator="traefik")
ROUTE = ("gateway.networking.k8s.io", "v1")
SOURCE_IP: dict[str, Any] = {"algorithm": "ConsistentHash", "consistentHash": {"type": "SourceIP"}}
HEADER: dict[str, Any] = {"algorithm": "ConsistentHash",
                          "consistentHash": {"type": "Header", "headers": [{"name": "x-session"}]}}


def _run(fn: Any, *args: Any) -> Any:
    return ActivityEnvironment().run(fn, *args)


@pytest.fixture(scope="module")
def ns(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient) -> str:
    kube_cluster.apply_crds([crd_dir()])
    return new_namespace(kube_api, "traefik")


@pytest.fixture
def worker(chart_identities: Identities) -> Iterator[client.ApiClient]:
    with api_as(chart_identities.worker) as api:
        yield api


def _service(kube_api: client.ApiClient, ns: str, traffic: dict[str, Any], revisions: list[str]) -> ObjectRef:
    spec = {"engine": {"runner": {"name": "engine", "image": "registry.invalid/e:1"}}, "traffic": traffic}
    obj = create(kube_api, InferenceService, manifest(InferenceService, spec), ns)
    name = obj["metadata"]["name"]
    for revision in revisions:  # what ensure_revision leaves: the revision's Service (set_traffic checks it)
        client.CoreV1Api(kube_api).create_namespaced_service(ns, cast(Any, {
            "metadata": {"name": revision_name(name, "engine", revision)},
            "spec": {"selector": {"revision": revision}, "ports": [{"port": 8080}]}}))
    return ObjectRef.of(InferenceService, name, ns, obj["metadata"]["uid"])


def _custom(kube_api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_api)


def _route(kube_api: client.ApiClient, ref: ObjectRef) -> dict[str, Any]:
    return cast(dict[str, Any], _custom(kube_api).get_namespaced_custom_object(
        *ROUTE, str(ref.namespace), "httproutes", route_name(ref.name, "engine")))


def _traefik_services(kube_api: client.ApiClient, ref: ObjectRef) -> dict[str, dict[str, Any]]:
    listed: Any = _custom(kube_api).list_namespaced_custom_object(tt.GROUP, tt.VERSION, str(ref.namespace), tt.PLURAL)
    return {s["metadata"]["name"]: s for s in listed["items"] if s["metadata"]["name"].startswith(f"{ref.name}-")}


def _report_as_traefik(kube_api: client.ApiClient, ref: ObjectRef) -> None:
    """The route's status as Traefik's Gateway provider writes it: accepted, backendRefs resolved."""
    route = _route(kube_api, ref)
    generation = route["metadata"]["generation"]
    conditions = [{"type": kind, "status": "True", "reason": kind, "message": "", "observedGeneration": generation,
                   "lastTransitionTime": "2026-01-01T00:00:00Z"} for kind in ("Accepted", "ResolvedRefs")]
    _custom(kube_api).patch_namespaced_custom_object_status(
        *ROUTE, str(ref.namespace), "httproutes", route["metadata"]["name"], {"status": {"parents": [
            {"parentRef": {"name": "inference"}, "controllerName": tt.TRAEFIK_CONTROLLER, "conditions": conditions}]}},
        _content_type="application/merge-patch+json")


def _conditions(answer: TrafficPolicyObservation) -> dict[str, dict[str, Any]]:
    assert answer.status is not None
    return {c["type"]: c for c in answer.status["conditions"]}


def _edit(kube_api: client.ApiClient, ref: ObjectRef, traffic: dict[str, Any] | None) -> None:
    info = InferenceService.crd
    _custom(kube_api).patch_namespaced_custom_object(
        info.group, info.version, str(ref.namespace), info.plural, ref.name, {"spec": {"traffic": traffic}},
        _content_type="application/merge-patch+json")


def _children(kube_api: client.ApiClient, ref: ObjectRef) -> list[dict[str, Any]]:
    """The component's weighted TraefikService's children (Services and weights)."""
    return cast(list[dict[str, Any]], _traefik_services(kube_api, ref)[route_name(ref.name, "engine")]
                ["spec"]["weighted"]["services"])


def test_the_weights_go_into_the_components_weighted_traefik_service_the_route_names(
        kube_api: client.ApiClient, worker: client.ApiClient, ns: str) -> None:
    ref = _service(kube_api, ns, SOURCE_IP, ["a", "b"])
    serving = ServingActivities(worker, ingress=TRAEFIK)
    weights = [TrafficWeight(revision="a", weight=90), TrafficWeight(revision="b", weight=10)]
    _run(serving.set_traffic, SetTrafficInput(isvc=ref, component=ENGINE, weights=weights))

    names = [revision_name(ref.name, "engine", r) for r in ("a", "b")]
    component = route_name(ref.name, "engine")
    route = _route(kube_api, ref)
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"group": "traefik.io", "kind": "TraefikService", "name": component, "weight": 1}]
    services = _traefik_services(kube_api, ref)
    assert sorted(services) == [component]
    assert services[component]["spec"]["weighted"]["services"] == [
        {"name": names[0], "kind": "Service", "port": 8080, "strategy": "hrw", "weight": 90},
        {"name": names[1], "kind": "Service", "port": 8080, "strategy": "hrw", "weight": 10}]
    assert services[component]["metadata"]["ownerReferences"][0]["uid"] == ref.uid
    seen = _run(serving.observe, ObserveInput(isvc=ref)).components[0]
    assert seen.traffic == weights and not seen.ingress_drift

    # A promote writes the TraefikService only: the route is not written (same generation).
    promoted = [TrafficWeight(revision="a", weight=50), TrafficWeight(revision="b", weight=50)]
    _run(serving.set_traffic, SetTrafficInput(isvc=ref, component=ENGINE, weights=promoted))
    after = _route(kube_api, ref)
    assert after["metadata"]["generation"] == route["metadata"]["generation"]
    assert after["metadata"]["resourceVersion"] == route["metadata"]["resourceVersion"]
    assert [c["weight"] for c in _children(kube_api, ref)] == [50, 50]
    assert _run(serving.observe, ObserveInput(isvc=ref)).components[0].traffic == promoted

    # No spec.traffic: still one weighted TraefikService, children with Traefik's defaults.
    _edit(kube_api, ref, None)
    _run(serving.set_traffic, SetTrafficInput(isvc=ref, component=ENGINE, weights=promoted))
    assert _children(kube_api, ref) == [{"name": n, "kind": "Service", "port": 8080, "weight": 50} for n in names]
    assert not _run(serving.observe, ObserveInput(isvc=ref)).components[0].ingress_drift

    # Envoy Gateway's translation alone: the route naming the TraefikService is drift, and set_traffic puts the
    # Services back. The TraefikService no route names then stays (nothing sends to it) until the Traefik
    # translation's backend-policy call deletes it as stale, or the service goes (its owner reference).
    envoy = ServingActivities(worker)
    seen = _run(envoy.observe, ObserveInput(isvc=ref)).components[0]
    assert seen.ingress_drift and seen.traffic == promoted
    _run(envoy.set_traffic, SetTrafficInput(isvc=ref, component=ENGINE, weights=weights))
    refs = _route(kube_api, ref)["spec"]["rules"][0]["backendRefs"]
    assert [(r["kind"], r["name"], r["weight"]) for r in refs] == [("Service", names[0], 90), ("Service", names[1], 10)]
    assert not _run(envoy.observe, ObserveInput(isvc=ref)).components[0].ingress_drift
    # Under the Traefik translation again, the same route on Services is drift the other way.
    assert _run(serving.observe, ObserveInput(isvc=ref)).components[0].ingress_drift


def test_status_says_what_traefik_honours_and_stale_services_go(
        kube_api: client.ApiClient, worker: client.ApiClient, ns: str) -> None:
    ref = _service(kube_api, ns, SOURCE_IP, ["a", "b"])
    serving = ServingActivities(worker, ingress=TRAEFIK)
    policy = BackendPolicyActivities(worker, ingress=TRAEFIK)
    # The decoder's TraefikService, left from a component the service no longer has: stale.
    leftover = tt.weighted_service(ServingActivities._owner(_custom(kube_api).get_namespaced_custom_object(
        InferenceService.crd.group, InferenceService.crd.version, ns, InferenceService.crd.plural, ref.name)),
        ComponentType.DECODER, [TrafficWeight(revision="a", weight=100)], tt.Balancing(strategy="hrw"))
    _custom(kube_api).create_namespaced_custom_object(tt.GROUP, tt.VERSION, ns, tt.PLURAL, leftover)
    _run(serving.set_traffic, SetTrafficInput(isvc=ref, component=ENGINE, weights=[
        TrafficWeight(revision="a", weight=100)]))
    # Before Traefik reports on the route, nothing says it serves it: the Envoy translation's view.
    plane = _conditions(_run(policy.ensure, ObserveInput(isvc=ref)))["BackendPolicyDataPlane"]
    assert (plane["status"], plane["reason"]) == ("Unknown", "NoRouteReport")

    _report_as_traefik(kube_api, ref)
    conditions = _conditions(_run(policy.ensure, ObserveInput(isvc=ref)))
    plane, ready = conditions["BackendPolicyDataPlane"], conditions["BackendPolicyReady"]
    component = route_name(ref.name, "engine")
    assert (plane["status"], plane["reason"]) == ("True", "HonoredByDataPlane") and component in plane["message"]
    assert (ready["status"], ready["reason"]) == ("True", "AcceptedByGateway")
    assert "BackendPolicyUnsupportedFields" not in conditions
    assert sorted(_traefik_services(kube_api, ref)) == [component]  # the leftover went

    # A cookie instead: the component's TraefikService's children follow spec.traffic on the next call.
    _edit(kube_api, ref, {"consistentHash": {"type": "Cookie", "cookie": {"name": "s", "ttlSeconds": 30}}})
    _run(policy.ensure, ObserveInput(isvc=ref))
    [child] = _children(kube_api, ref)
    assert child["strategy"] == "wrr" and child["sticky"] == {"cookie": {"name": "s", "maxAge": 30}}
    assert child["weight"] == 100

    # Header hashing: none in Traefik. Named unsupported; the children fall back to Traefik's defaults.
    _edit(kube_api, ref, {**HEADER, "consistentHash": {**HEADER["consistentHash"], "cookie": None}})
    conditions = _conditions(_run(policy.ensure, ObserveInput(isvc=ref)))
    assert "spec.traffic.consistentHash.headers" in conditions["BackendPolicyUnsupportedFields"]["message"]
    assert conditions["BackendPolicyDataPlane"]["reason"] == "NotHonoredByDataPlane"
    assert _children(kube_api, ref) == [{"name": revision_name(ref.name, "engine", "a"), "kind": "Service",
                                         "port": 8080, "weight": 100}]
    assert not _run(serving.observe, ObserveInput(isvc=ref)).components[0].ingress_drift


def test_delete_revision_takes_its_child_out_of_the_weighted_traefik_service(
        kube_api: client.ApiClient, worker: client.ApiClient, ns: str) -> None:
    ref = _service(kube_api, ns, SOURCE_IP, ["a", "b"])
    serving = ServingActivities(worker, ingress=TRAEFIK)
    _run(serving.set_traffic, SetTrafficInput(isvc=ref, component=ENGINE, weights=[
        TrafficWeight(revision="a", weight=90), TrafficWeight(revision="b", weight=10)]))
    with pytest.raises(Exception, match="still has weight 10"):  # read back from the TraefikService
        _run(serving.delete_revision, RevisionKey(isvc=ref, component=ENGINE, revision="b"))
    _run(serving.set_traffic, SetTrafficInput(isvc=ref, component=ENGINE, weights=[
        TrafficWeight(revision="a", weight=100), TrafficWeight(revision="b", weight=0)]))
    _run(serving.delete_revision, RevisionKey(isvc=ref, component=ENGINE, revision="b"))
    # Traefik drops a TraefikService naming a missing Service: the child went before the Service.
    assert [c["name"] for c in _children(kube_api, ref)] == [revision_name(ref.name, "engine", "a")]
    assert list(_traefik_services(kube_api, ref)) == [route_name(ref.name, "engine")]
