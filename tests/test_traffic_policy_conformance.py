"""The fake backend-policy world (testkit/traffic_policy_fakes.py, behind the time-skipping tests of
tests/test_traffic_policy_workflow.py) answers serving.ensure_backend_policy as the real activity
(activities/serving/traffic_policy.py) does on the local cluster: one suite, run against both. The real
side runs as the chart's worker identity, so each case also proves its RBAC; the apiserver holds Envoy
Gateway's own BackendTrafficPolicy CRD (devstack/kube.py UPSTREAM_CRDS), so an applied policy met its
real schema and CEL rules, and a pass-through of the wrong type is refused by them.

Where they differed when this suite was first run: nothing in the fake, but the real activity itself
was wrong twice: it read the Gateway's verdict from the apply's answer (which the client gave back
empty; it now reads the live policy), and it took only 400/422 for a refused apply, where the apiserver
answers a field of the wrong type with a 500 "failed to create typed patch object" (now TranslationFailed,
clients/kube/errors.py apply_refused).

Not held here, and why: a cluster without the CRD (the session's apiserver has it; the real discovery
read is checked against a version the cluster does not serve, and the fake's `served` flag plays the
rest); a pass-through of the wrong type (the fake has no schema: the apiserver's refusal, reported as
TranslationFailed, is a real-only case); the Gateway's verdict (no Envoy Gateway runs: the test writes
the policy's status as Envoy Gateway would).
Admission of spec.traffic (the CEL rules of seed 004 and upstream) is checked on the real apiserver
at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.identities import Identities
from servingops.activities.serving.traffic_policy import BackendPolicyActivities, TrafficPolicyObservation
from servingops.activities.serving.types import ObserveInput
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.refs import ObjectRef
from servingops.api_models.serving import TrafficWeight
from servingops.rendering import backend_traffic_policy as btp
from servingops.rendering import ingress, render
from testkit.rollout_fakes import NAME, FakeCluster
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as
from tests.support.conformance import FAKE_UNIT_AND_REAL, chosen_backend, wire

BTP = (btp.GROUP, btp.VERSION)
HASH = {"algorithm": "ConsistentHash", "consistentHash": {"type": "Header", "headers": [{"name": "x-session"}]}}
ANNOTATED = {"ome.io/circuit-breaker-max-connections": "1024", "ome.io/retry-attempts": "3",
             "ome.io/retry-on": "connect-failure,5xx", "ome.io/timeout-idle": "5m"}


class Backend(Protocol):
    route: str
    """The service's one HTTPRoute (its engine's)."""

    async def new_service(self, traffic: dict[str, Any] | None, annotations: dict[str, str]) -> ObjectRef: ...

    async def edit(self, ref: ObjectRef, traffic: dict[str, Any] | None, annotations: dict[str, str]) -> None:
        """Replace spec.traffic and the ome.io/* traffic annotations."""
        ...

    async def author(self, name: str, routes: list[str]) -> dict[str, Any]:
        """A hand-authored policy (no ownerReference) targeting `routes`; its spec as written."""
        ...

    async def policies(self) -> dict[str, dict[str, Any]]:
        """The namespace's BackendTrafficPolicies by name."""
        ...

    async def accept(self, name: str) -> None:
        """Play Envoy Gateway: Accepted on the policy's status.ancestors."""
        ...

    async def ensure(self, ref: ObjectRef) -> TrafficPolicyObservation:
        """The activity; what it answers is then written to status.traffic, as the workflow does."""
        ...


class FakeBackend:
    def __init__(self) -> None:
        self.cluster = FakeCluster(cast(Any, None))
        self.cluster._apply_route(ComponentType.ENGINE, [TrafficWeight(revision="a", weight=100)])
        self.route = f"{NAME}-engine"

    async def new_service(self, traffic: dict[str, Any] | None, annotations: dict[str, str]) -> ObjectRef:
        await self.edit(self.cluster.ref, traffic, annotations)
        return self.cluster.ref

    async def edit(self, ref: ObjectRef, traffic: dict[str, Any] | None, annotations: dict[str, str]) -> None:
        self.cluster.backend_policies.traffic = traffic
        self.cluster.annotations = dict(annotations)
        self.cluster.generation += 1

    async def author(self, name: str, routes: list[str]) -> dict[str, Any]:
        return dict(self.cluster.backend_policies.author(name, routes)["spec"])

    async def policies(self) -> dict[str, dict[str, Any]]:
        return dict(self.cluster.backend_policies.policies)

    async def accept(self, name: str) -> None:
        self.cluster.backend_policies.accept(name)

    async def ensure(self, ref: ObjectRef) -> TrafficPolicyObservation:
        answer = wire(self.cluster.backend_policies.ensure(wire(ObserveInput(isvc=ref), ObserveInput)),
                      TrafficPolicyObservation)
        if answer.status is None:
            self.cluster.status.pop("traffic", None)
        else:
            self.cluster.status["traffic"] = answer.status
        return cast(TrafficPolicyObservation, answer)


class RealBackend:
    def __init__(self, admin: client.ApiClient, worker: client.ApiClient, namespace: str) -> None:
        self.admin, self.namespace = admin, namespace
        self.custom = client.CustomObjectsApi(admin)
        self.activity = BackendPolicyActivities(worker)
        self.route = ""

    async def new_service(self, traffic: dict[str, Any] | None, annotations: dict[str, str]) -> ObjectRef:
        spec: dict[str, Any] = {"engine": {"runner": {"name": "engine", "image": "registry.invalid/e:1"}}}
        if traffic:
            spec["traffic"] = traffic
        body = manifest(InferenceService, spec)
        body["metadata"]["annotations"] = dict(annotations)
        obj = create(self.admin, InferenceService, body, self.namespace)
        meta = obj["metadata"]
        owner = render.Owner(name=meta["name"], namespace=self.namespace, uid=meta["uid"])
        # The route as serving.set_traffic leaves it (the policy targets what the product emitted).
        route = render.http_route(owner, ComponentType.ENGINE, [TrafficWeight(revision="a", weight=100)],
                                  ingress.DETACHED)
        self.custom.create_namespaced_custom_object("gateway.networking.k8s.io", "v1", self.namespace, "httproutes",
                                                    route)
        self.route = route["metadata"]["name"]
        return ObjectRef.of(InferenceService, meta["name"], self.namespace, meta["uid"])

    async def edit(self, ref: ObjectRef, traffic: dict[str, Any] | None, annotations: dict[str, str]) -> None:
        info = InferenceService.crd
        live = self.custom.get_namespaced_custom_object(info.group, info.version, self.namespace, info.plural, ref.name)
        before = live["metadata"].get("annotations") or {}
        gone = {k: None for k in before if k.startswith("ome.io/") and k not in annotations}
        self.custom.patch_namespaced_custom_object(info.group, info.version, self.namespace, info.plural, ref.name, {
            "metadata": {"annotations": {**gone, **annotations}}, "spec": {"traffic": traffic}},
            _content_type="application/merge-patch+json")

    async def author(self, name: str, routes: list[str]) -> dict[str, Any]:
        body = {"apiVersion": btp.API_VERSION, "kind": btp.KIND, "metadata": {"name": name},
                "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": r}
                                        for r in routes], "loadBalancer": {"type": "Random"}}}
        created = self.custom.create_namespaced_custom_object(*BTP, self.namespace, btp.PLURAL, body)
        return dict(created["spec"])

    async def policies(self) -> dict[str, dict[str, Any]]:
        listed = self.custom.list_namespaced_custom_object(*BTP, self.namespace, btp.PLURAL)
        return {p["metadata"]["name"]: p for p in listed["items"]}

    async def accept(self, name: str) -> None:
        self.custom.patch_namespaced_custom_object_status(*BTP, self.namespace, btp.PLURAL, name, {"status": {
            "ancestors": [{"ancestorRef": {"name": "eg"}, "controllerName": btp.ENVOY_GATEWAY_CONTROLLER,
                           "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                                           "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}},
            _content_type="application/merge-patch+json")

    async def ensure(self, ref: ObjectRef) -> TrafficPolicyObservation:
        answer = self.activity.ensure(wire(ObserveInput(isvc=ref), ObserveInput))
        info = InferenceService.crd
        self.custom.patch_namespaced_custom_object_status(
            info.group, info.version, self.namespace, info.plural, ref.name, {"status": {"traffic": answer.status}},
            _content_type="application/merge-patch+json")
        return cast(TrafficPolicyObservation, wire(answer, TrafficPolicyObservation))


@pytest.fixture(scope="module")
def conformance_ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "traffic")


@pytest.fixture
def real_backend(kube_api: client.ApiClient, chart_identities: Identities, conformance_ns: str) -> Iterator[Backend]:
    with api_as(chart_identities.worker) as worker:
        yield RealBackend(kube_api, worker, conformance_ns)


@pytest.fixture(params=FAKE_UNIT_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, FakeBackend)


def ready(answer: TrafficPolicyObservation) -> dict[str, Any]:
    assert answer.status is not None
    return next(c for c in answer.status["conditions"] if c["type"] == "BackendPolicyReady")


async def test_no_intent_writes_nothing_and_reports_nothing(backend: Backend) -> None:
    ref = await backend.new_service(None, {"ome.io/rollout-paused": "true"})
    assert (await backend.ensure(ref)).status is None
    assert ref.name not in await backend.policies()


async def test_spec_traffic_is_applied_targeting_the_route_and_reported_pending_then_accepted(backend: Backend) -> None:
    ref = await backend.new_service(HASH, ANNOTATED)
    answer = await backend.ensure(ref)
    assert ready(answer)["status"] == "Unknown" and ready(answer)["reason"] == "Pending"
    assert answer.status is not None
    assert answer.status["algorithm"] == "ConsistentHash"
    assert answer.status["backendPolicyResource"] == {"apiVersion": btp.API_VERSION, "kind": btp.KIND,
                                                      "name": ref.name}
    assert answer.status["targetedHTTPRoutes"] == [backend.route]
    policy = (await backend.policies())[ref.name]
    assert policy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "servingops"
    assert policy["spec"]["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                             "name": backend.route}]
    chash = policy["spec"]["loadBalancer"]["consistentHash"]  # the apiserver adds the schema's tableSize default
    assert (chash["type"], chash["header"]) == ("Header", {"name": "x-session"})
    assert policy["spec"]["circuitBreaker"]["maxConnections"] == 1024
    assert policy["spec"]["retry"]["numRetries"] == 3
    assert policy["spec"]["timeout"]["http"]["connectionIdleTimeout"] == "5m0s"
    first = ready(answer)["lastTransitionTime"]

    again = await backend.ensure(ref)  # a repeat changes nothing, the transition time included
    assert again.status == answer.status and ready(again)["lastTransitionTime"] == first
    await backend.accept(ref.name)
    accepted = await backend.ensure(ref)
    assert (ready(accepted)["status"], ready(accepted)["reason"]) == ("True", "AcceptedByGateway")


async def test_an_edit_is_applied_and_removing_every_intent_deletes_the_policy(backend: Backend) -> None:
    ref = await backend.new_service({"algorithm": "RoundRobin"}, {})
    await backend.ensure(ref)
    await backend.edit(ref, None, {"ome.io/timeout-tcp-connect": "10s"})
    answer = await backend.ensure(ref)
    assert answer.status is not None and answer.status["algorithm"] == "Default"
    policy = (await backend.policies())[ref.name]
    assert "loadBalancer" not in policy["spec"] and policy["spec"]["timeout"] == {"tcp": {"connectTimeout": "10s"}}
    await backend.edit(ref, None, {})
    assert (await backend.ensure(ref)).status is None
    assert ref.name not in await backend.policies()


async def test_a_hand_authored_policy_on_the_route_wins_is_reported_and_left_untouched(backend: Backend) -> None:
    ref = await backend.new_service({"algorithm": "LeastRequest"}, {})
    await backend.ensure(ref)
    assert ref.name in await backend.policies()  # ours, until the team's own appears
    name = f"team-{ref.name}"
    written = await backend.author(name, [backend.route])
    answer = await backend.ensure(ref)
    condition = ready(answer)
    assert (condition["status"], condition["reason"]) == ("False", "ConflictingPolicy")
    assert name in condition["message"] and backend.route in condition["message"]
    assert answer.status is not None and "backendPolicyResource" not in answer.status
    policies = await backend.policies()
    assert ref.name not in policies  # ours removed: the two never fight over the route
    assert policies[name]["spec"] == written and not policies[name]["metadata"].get("ownerReferences")


async def test_a_hand_authored_policy_with_our_name_is_never_written_over(backend: Backend) -> None:
    ref = await backend.new_service({"algorithm": "Random"}, {})
    written = await backend.author(ref.name, [])
    condition = ready(await backend.ensure(ref))
    assert condition["reason"] == "ConflictingPolicy" and "has the name" in condition["message"]
    assert (await backend.policies())[ref.name]["spec"] == written


async def test_a_bad_annotation_value_is_translation_failed_and_nothing_is_written(backend: Backend) -> None:
    ref = await backend.new_service(None, {"ome.io/retry-attempts": "3"})
    condition = ready(await backend.ensure(ref))
    assert (condition["status"], condition["reason"]) == ("False", "TranslationFailed")
    assert condition["message"].startswith("MissingRetryOn")
    assert ref.name not in await backend.policies()


@pytest.mark.integration
def test_the_real_discovery_read_tells_a_served_kind_from_an_absent_one(chart_identities: Identities) -> None:
    with api_as(chart_identities.worker) as worker:
        activities = BackendPolicyActivities(worker)
        assert activities.served(btp.GROUP, btp.VERSION, btp.PLURAL)
        assert not activities.served(btp.GROUP, "v1alpha9", btp.PLURAL)
        assert not activities.served("gateway.example.invalid", "v1", btp.PLURAL)


@pytest.mark.integration
async def test_the_apiserver_refuses_a_pass_through_of_the_wrong_type_and_the_activity_says_so(
        real_backend: Backend) -> None:
    ref = await real_backend.new_service({"algorithm": "Random"}, {"ome.io/btp.retry.numRetries": "many"})
    condition = ready(await real_backend.ensure(ref))
    assert (condition["status"], condition["reason"]) == ("False", "TranslationFailed")
    assert "numRetries" in condition["message"]
    assert ref.name not in await real_backend.policies()


@pytest.mark.integration
@pytest.mark.parametrize(("traffic", "message"), [
    ({"algorithm": "ConsistentHash"}, "consistentHash is required"),
    ({"algorithm": "RoundRobin", "consistentHash": {"type": "SourceIP"}}, "consistentHash is required"),
    ({"algorithm": "ConsistentHash", "consistentHash": {"type": "Header"}}, "headers are required with type Header"),
    ({"algorithm": "ConsistentHash", "consistentHash": {"type": "SourceIP", "cookie": {"name": "c"}}},
     "each is forbidden otherwise"),
    ({"algorithm": "ConsistentHash", "consistentHash": {"type": "Cookie", "cookie": {"name": "c", "ttlSeconds": -1}}},
     "ttlSeconds"),
    ({"endpointOverride": {"type": "Header"}}, "headers are required when type is Header"),
    ({"endpointOverride": {"type": "Metadata"}}, "type Metadata is reserved"),
    ({"algorithm": "Fastest"}, "Unsupported value"),
])
def test_admission_refuses_what_the_seed_and_upstream_refuse(kube_api: client.ApiClient, conformance_ns: str,
                                                             traffic: dict[str, Any], message: str) -> None:
    spec = {"engine": {"runner": {"name": "engine", "image": "registry.invalid/e:1"}}, "traffic": traffic}
    with pytest.raises(ApiException) as refused:
        create(kube_api, InferenceService, manifest(InferenceService, spec), conformance_ns)
    assert refused.value.status == 422 and message in str(refused.value.body)


@pytest.mark.integration
def test_admission_takes_every_valid_shape(kube_api: client.ApiClient, conformance_ns: str) -> None:
    for traffic in (HASH, {"algorithm": "ConsistentHash", "consistentHash": {"type": "Cookie", "cookie": {
            "name": "c", "ttlSeconds": 60}}}, {"algorithm": "ConsistentHash", "consistentHash": {"type": "SourceIP"}},
                    {"endpointOverride": {"type": "Header", "headers": [{"name": "x-endpoint"}]}}, {}):
        spec = {"engine": {"runner": {"name": "engine", "image": "registry.invalid/e:1"}}, "traffic": traffic}
        create(kube_api, InferenceService, manifest(InferenceService, spec), conformance_ns)
