"""Routing across homes judged by requests: the traffic stack (its cluster, Traefik, worker and bridge, the
bridge following TrafficMaps too) as the control plane, two answering members with Gateways it reaches
(tests/support/global_route_stack.py: a relay at each member's namespace address, the Gateway's status.addresses
saying so), routing on and the Gateway API publisher writing each TrafficMap's global route with the
EndpointSlice fallback (Traefik routes to no ExternalName Service). Every request goes to the control plane's
Traefik with the service's global hostname.

First a Single service placed on one member answers through that member's own Gateway (placement alone, no
global route needed); then the data plane alone (tests/support/global_route_dataplane.py): a rendered route
written by hand splits 3:1 and a zero-weight home gets nothing, so a publisher fault and a data-plane fault
tell themselves apart. One fleet serves them all: members are the suite's dearest fixture.

Then, in order, on one Split service placed 3:1 over the two members (the tests share it), its capacity poll on
from the start (the answering pods report at `/capacity` only when annotated, so the table starts in fallback):
1. the TrafficMap weights the homes 3:1, the route carries it, and 2,000 requests split within 3 points of
   75/25 with none failed;
2. the capacity poll: the 3-replica home reports 1 servable, and once quorum readings agree the table (and the
   requests) go 1:1; reporting 3 again restores 3:1;
3. a hand edit of the TrafficMap's spec is undone and the route keeps the computed weights;
4. a drain annotation on one home: once the map is published, no request reaches that home;
5. a home whose Gateway stops answering (its relay stopped) is probed unhealthy and weighted 0: client requests
   fail only inside the probe's detection window (failureThreshold x period, then the publication);
6. placement lowers that home's share to zero while requests flow: its copy is deleted only after the route
   stopped sending to it, its row stays (seed 004: a zero share keeps its row), no request fails; the share
   back brings a copy and 3:1 back;
7. placement drops that home while requests flow, the worker SIGKILLed right after the change: the home's copy is
   deleted only after the route stopped sending to it, and no request fails;
8. spec.routing.enabled false withdraws the global route and deletes the map (the global host answers 404);
   true again routes it back.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.hub_server import HubServer
from devstack.members import registration_ready
from devstack.product import start_worker_process
from devstack.relay import start_relay
from devstack.services import OciRegistry
from testkit.load import BackgroundLoad, LoadReport, LoadSpec, run_load
from testkit.waiting import wait_until
from tests.support.global_route_dataplane import check_split_and_zero_weight
from tests.support.global_route_stack import GlobalRouteFleet, answering_members
from tests.support.traffic_stack import TrafficStack, failures, traffic_stack

pytestmark = pytest.mark.e2e

__all__ = ["traffic_stack"]  # the fixture, reused

BRIDGE_KINDS = "InferenceService,RolloutPolicy,InferenceReplica,WorkloadCluster,TrafficMap"
GROUP, VERSION = "ome.io", "v1beta1"
PROBE_PERIOD_S, FAILURE_THRESHOLD = 2, 2
POLL_PERIOD_S, POLL_QUORUM = 2, 2
SERVABLE_ANNOTATION = "devstack.servingops.io/capacity-servable"
"""The answering pods' capacity report (devstack/pod_runtime.py FAULT_KEYS)."""
RATE = 150


@pytest.fixture(scope="module")
def fleet(traffic_stack: TrafficStack, oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[GlobalRouteFleet]:
    stack = traffic_stack
    env = {"HF_ENDPOINT": hub_server.url, "SERVINGOPS_REGISTRY": oci_registry.address,
           "SERVINGOPS_OLLAMA_REGISTRY": oci_registry.url, "HF_HUB_DISABLE_TELEMETRY": "1"}
    with answering_members(2, tmp_path_factory.mktemp("homes"), stack_logs, servingops=True,
                           temporal_address=stack.live.temporal_address, worker_env=env) as homes:
        fleet = GlobalRouteFleet(stack.live.api, stack.traefik, homes)
        try:
            for member in homes:
                member.prepare_namespace(stack.namespace)
                member.register(stack.live.api, stack.namespace)
            for member in homes:
                wait_until(f"WorkloadCluster {member.name} Ready",
                           lambda m=member: registration_ready(stack.live.api, m.name),  # type: ignore[misc]
                           stack.live.worker, 180)
            endpoint = yaml.safe_load(fleet.endpoint_block())
            endpoint["gatewayBackend"]["endpointSlices"] = {"enabled": True, "addressRefreshInterval": "30s"}
            client.CoreV1Api(stack.live.api).patch_namespaced_config_map(stack.operator_config, stack.namespace, {
                "data": {"routing": yaml.safe_dump({"enabled": True}), "endpoint": yaml.safe_dump(endpoint)}})
            yield fleet
        finally:
            for member in homes:
                member.unregister(stack.live.api, stack.namespace)


class Service:
    """The routed service, its TrafficMap and its homes, as the tests read them."""

    def __init__(self, stack: TrafficStack, fleet: GlobalRouteFleet) -> None:
        self.stack, self.fleet = stack, fleet
        self.ns, self.name = stack.namespace, f"routed-{uuid.uuid4().hex[:5]}"
        self.a, self.b = fleet.members
        self.custom = client.CustomObjectsApi(stack.live.api)
        self.host = fleet.global_host(self.ns, self.name)

    def placement(self, weights: dict[str, int], replicas: int = 4) -> dict[str, Any]:
        return {"policy": "ClusterAffinity", "mode": "Split", "split": {"replicas": replicas}, "clusterAffinity": [
            {"weight": w, "matchFields": [{"key": "metadata.name", "operator": "In", "values": [m]}]}
            for m, w in weights.items()]}

    def create(self) -> None:
        probe = {"path": "/health", "method": "GET", "acceptStatuses": [200], "gateStatuses": [500, 502, 503, 504],
                 "period": f"{PROBE_PERIOD_S}s", "timeout": "1s", "failureThreshold": FAILURE_THRESHOLD,
                 "successThreshold": 2, "allFailedPolicy": "Drain"}
        capacity = {"path": "/capacity", "method": "GET", "format": "Report", "period": f"{POLL_PERIOD_S}s",
                    "timeout": "1s", "samples": 3, "quorum": POLL_QUORUM, "maxAge": "10s"}
        spec = {"deploymentMode": "OMENative", "engine": {"minReplicas": 1, "runner": {
            "name": "engine", "image": "vllm/vllm-openai:v0.9", "ports": [{"containerPort": 8000}],
            "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}}},
            "placement": self.placement({self.a.name: 3, self.b.name: 1}),
            "routing": {"probe": probe, "capacity": capacity}}
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "inferenceservices", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
            "metadata": {"name": self.name, "namespace": self.ns}, "spec": spec})

    def traffic_map(self) -> dict[str, Any]:
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "trafficmaps",
                                                                             self.name)
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        return found

    def entry(self, member: Any) -> dict[str, Any]:
        entries = (self.traffic_map().get("spec") or {}).get("entries") or []
        return next((e for e in entries if e["cluster"] == member.name), {})

    def condition(self, kind: str) -> dict[str, Any]:
        conditions = (self.traffic_map().get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == kind), {})

    def report_servable(self, member: Any, servable: int) -> None:
        """Every pod of the service in `member` answers the capacity poll with `servable`."""
        core = client.CoreV1Api(member.api)
        for pod in core.list_namespaced_pod(self.ns, label_selector=f"ome.io/inferenceservice={self.name}").items:
            core.patch_namespaced_pod(pod.metadata.name, self.ns,
                                      {"metadata": {"annotations": {SERVABLE_ANNOTATION: str(servable)}}})

    def map_weights(self) -> dict[str, int]:
        return {e["cluster"]: e.get("weight", 0) for e in (self.traffic_map().get("spec") or {}).get("entries") or []}

    def published(self) -> bool:
        found = self.traffic_map()
        status = found.get("status") or {}
        return bool(status.get("published")) and status.get("observedTrafficMapGeneration") == (
            found.get("metadata") or {}).get("generation")

    def route_weights(self) -> dict[str, int]:
        """The global route's backend weights by home (a backend Service carries its home's label)."""
        try:
            route = self.custom.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", self.ns, "httproutes",
                                                             f"{self.name}-global")
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        services = client.CoreV1Api(self.stack.live.api).list_namespaced_service(
            self.ns, label_selector=f"ome.io/placement-endpoint-isvc={self.name}").items
        home = {s.metadata.name: s.metadata.labels.get("ome.io/placement-cluster") for s in services}
        return {home.get(b["name"], b["name"]): b.get("weight", 1) for b in route["spec"]["rules"][0]["backendRefs"]}

    def pods_of(self, member: Any) -> set[str]:
        """The member's pods of the service by IP (pods of one name run in both members: the IP tells them apart;
        each member's pods get addresses in a range of their own)."""
        return {p.status.pod_ip for p in client.CoreV1Api(member.api).list_namespaced_pod(self.ns).items
                if p.status and p.status.pod_ip}

    def place(self, weights: dict[str, int], replicas: int = 4) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, "inferenceservices", self.name, {
            "spec": {"placement": self.placement(weights, replicas)}})

    def row(self, member: Any) -> dict[str, Any]:
        """The member's row in status.placement.candidates ({} when it has none)."""
        found = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "inferenceservices", self.name)
        rows = ((found.get("status") or {}).get("placement") or {}).get("candidates") or []
        return next((r for r in rows if r.get("cluster") == member.name), {})

    def events(self, reason: str) -> list[str]:
        return [e.message for e in client.CoreV1Api(self.stack.live.api).list_namespaced_event(
            self.ns, field_selector=f"involvedObject.name={self.name},reason={reason}").items]

    def copy_in(self, member: Any) -> bool:
        try:
            client.CustomObjectsApi(member.api).get_namespaced_custom_object(GROUP, VERSION, self.ns,
                                                                            "inferenceservices", self.name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def answers(self) -> bool:
        return self.stack.traefik.get("/v1/models", self.host)[0] == 200

    def load(self, requests: int) -> LoadSpec:
        return LoadSpec(url=self.stack.traefik.url, host=self.host, rate=RATE, max_requests=requests,
                        max_seconds=requests / RATE + 30, max_tokens=4)

    def split(self, requests: int) -> tuple[LoadReport, dict[str, int]]:
        """`requests` sent through the global route, all answered: the report and the answers per home."""
        with BackgroundLoad(self.load(requests)) as load:
            while load.running:
                time.sleep(0.5)
            report = load.stop()
        assert report.failed == 0, failures(report)
        return report, self.shares(report)

    def shares(self, report: LoadReport) -> dict[str, int]:
        a_pods, b_pods = self.pods_of(self.a), self.pods_of(self.b)
        return {"a": sum(n for p, n in report.by_address.items() if p in a_pods),
                "b": sum(n for p, n in report.by_address.items() if p in b_pods)}


@pytest.fixture(scope="module")
def service(traffic_stack: TrafficStack, fleet: GlobalRouteFleet) -> Service:
    svc = Service(traffic_stack, fleet)
    svc.create()
    worker = traffic_stack.live.worker
    wait_until("the TrafficMap at 3:1", lambda: svc.map_weights() == {svc.a.name: 3, svc.b.name: 1}, worker, 300,
               detail=svc.traffic_map)
    wait_until("published", svc.published, worker, 60, detail=svc.traffic_map)
    wait_until("answered through the global route", svc.answers, worker, 60)
    return svc


def test_the_data_plane_alone_splits_a_rendered_route_and_a_zero_weight_home_gets_nothing(
        fleet: GlobalRouteFleet) -> None:  # fmt: skip
    """Before any product process routes: the publisher's rendering written by hand (its own namespace)."""
    check_split_and_zero_weight(fleet)


def test_a_placed_service_answers_through_its_members_gateway(traffic_stack: TrafficStack,
                                                              fleet: GlobalRouteFleet) -> None:  # fmt: skip
    """Placement alone, judged at the member: the control plane places a Single service on a member, the member's
    worker serves the derived copy, and its endpoint answers through the member's Gateway from the member's pods
    with no request failing; the control plane's own cluster runs none of it."""
    stack, ns, member = traffic_stack, traffic_stack.namespace, fleet.members[0]
    name = f"placed-{uuid.uuid4().hex[:5]}"
    spec = {
        "deploymentMode": "OMENative",
        "engine": {"minReplicas": 2, "runner": {
            "name": "engine", "image": "vllm/vllm-openai:v0.9", "ports": [{"containerPort": 8000}],
            "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}}},
        "placement": {"policy": "ClusterAffinity", "mode": "Single", "clusterAffinity": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [member.name]}]}]},
    }  # fmt: skip
    custom = client.CustomObjectsApi(stack.live.api)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": name, "namespace": ns},
        "spec": spec})  # fmt: skip
    worker = stack.live.worker
    placed = wait_until("Placed on the member", lambda: (
        (p := (_get(stack.live.api, ns, name).get("status") or {}).get("placement") or {}).get("phase") == "Placed"
        and p), worker, 180)  # fmt: skip
    assert placed["cluster"] == member.name, placed
    derived = wait_until("the derived copy Ready in the member", lambda: (
        (d := _get(member.api, ns, name)) and _condition(d, "Ready").get("status") == "True" and d),
        member.worker or worker, 180)  # fmt: skip
    ingress = _condition(derived, "IngressReady")
    assert (ingress.get("status"), ingress.get("reason")) == ("True", "RouteAccepted"), ingress
    assert member.traefik is not None
    host, traefik = member.host(ns, name), member.traefik
    # Ready says the pods are Ready and the Gateway accepted the route; the data plane follows within its
    # throttle, once it has seen the endpoints too.
    wait_until("answered through the member's Gateway", lambda: traefik.get("/v1/models", host)[0] == 200,
               member.worker or worker, 60)
    report = asyncio.run(run_load(LoadSpec(url=traefik.url, host=host, rate=100, max_requests=500, max_seconds=10,
                                           max_tokens=4)))  # fmt: skip
    assert report.failed == 0 and report.succeeded == 500, report.failures
    pods = {f"{ns}/{p.metadata.name}" for p in client.CoreV1Api(member.api).list_namespaced_pod(
        ns, label_selector=f"ome.io/inferenceservice={name}").items}  # fmt: skip
    assert set(report.by_pod) <= pods and len(report.by_pod) == 2, (dict(report.by_pod), pods)
    assert not stack.live.isvc(name).pods(), stack.live.isvc(name).pods()
    print(f"\nplaced on {member.name}: {report.succeeded} answered through its Gateway, by pod {dict(report.by_pod)}")
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name)


def _get(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    try:
        found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "inferenceservices", name)
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return found


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def test_a_split_answers_three_to_one_through_the_global_route(service: Service) -> None:
    svc = service
    assert svc.route_weights() == {svc.a.name: 3, svc.b.name: 1}
    found = svc.traffic_map()
    conditions = {c["type"]: (c["status"], c["reason"]) for c in found["status"]["conditions"]}
    assert conditions["Routable"] == ("True", "Routable") and conditions["Published"] == ("True", "Published")
    # No pod reports yet (404): the control plane's count is used, and the condition says so.
    assert conditions["CapacityFallback"] == ("True", "EndpointCapacityUnavailable"), conditions
    assert svc.entry(svc.a)["capacity"]["source"] == "ControlPlane", svc.entry(svc.a)
    # Before the first poll answers, the reason is "no capacity report yet"; once it has, the poll's 404.
    wait_until("the capacity poll's 404 on the map", lambda: "HTTP 404" in (
        svc.entry(svc.a).get("capacity") or {}).get("fallbackReason", ""), svc.stack.live.worker, 30,
        detail=lambda: f"entry {svc.entry(svc.a)}")
    assert found["status"]["sourceUID"] and found["spec"]["observedISVCGeneration"] == 1
    report, shares = svc.split(2000)
    assert report.succeeded >= 2000 and shares["a"] + shares["b"] == report.succeeded, (shares,
                                                                                       dict(report.by_address))
    share_a = shares["a"] / report.succeeded
    assert abs(share_a - 0.75) <= 0.03, shares
    print(f"\nSplit 3:1 through the global route: {shares} of {report.succeeded} ({share_a:.3f} to the 3-weight home), "
          f"{report.failed} failed")


def test_a_reported_capacity_lowers_a_homes_weight_once_its_quorum_agrees(service: Service) -> None:
    svc = service
    worker = svc.stack.live.worker
    svc.report_servable(svc.b, 1)
    started = time.monotonic()
    svc.report_servable(svc.a, 1)  # 3 admitted and ready, 1 servable by its own report
    wait_until("the reported ceiling in the map and on the route",
               lambda: svc.route_weights() == {svc.a.name: 1, svc.b.name: 1} and svc.published(), worker, 60,
               detail=svc.traffic_map)
    lowered = time.monotonic() - started
    capacity = svc.entry(svc.a)["capacity"]
    assert (capacity["allocated"], capacity["ready"], capacity["reported"], capacity["source"]) == (
        1, 3, 1, "Endpoint"), capacity
    fallback = svc.condition("CapacityFallback")
    assert (fallback["status"], fallback["reason"]) == ("False", "EndpointCapacityAvailable"), fallback
    report, shares = svc.split(1000)
    share_a = shares["a"] / report.succeeded
    assert abs(share_a - 0.5) <= 0.04, shares
    svc.report_servable(svc.a, 3)
    wait_until("3:1 again", lambda: svc.route_weights() == {svc.a.name: 3, svc.b.name: 1} and svc.published(),
               worker, 60, detail=svc.traffic_map)
    # The poll's quorum (2 readings of period 2 s) bounds how soon a lower report counts.
    assert lowered <= POLL_QUORUM * POLL_PERIOD_S * 3 + 10, lowered
    print(f"\ncapacity report 1 of 3 -> 1:1 published in {lowered:.1f} s (period {POLL_PERIOD_S} s, quorum "
          f"{POLL_QUORUM}); {shares} of {report.succeeded} ({share_a:.3f}), {report.failed} failed")


def test_a_hand_edit_of_the_map_is_undone(service: Service) -> None:
    svc = service
    found = svc.traffic_map()
    entries = [dict(e, weight=1) for e in found["spec"]["entries"]]
    started = time.monotonic()
    svc.custom.patch_namespaced_custom_object(GROUP, VERSION, svc.ns, "trafficmaps", svc.name,
                                              {"spec": {"entries": entries}})
    wait_until("the computed weights back", lambda: svc.map_weights() == {svc.a.name: 3, svc.b.name: 1}
               and svc.published(), svc.stack.live.worker, 60, detail=svc.traffic_map)
    undone = time.monotonic() - started
    assert svc.traffic_map()["metadata"]["generation"] >= found["metadata"]["generation"] + 2
    assert svc.route_weights() == {svc.a.name: 3, svc.b.name: 1}
    print(f"\na hand edit of the map undone and republished in {undone:.2f} s")


def test_a_drained_home_gets_no_request_once_the_drain_is_published(service: Service) -> None:
    svc = service
    with BackgroundLoad(svc.load(1500)) as load:
        time.sleep(2)
        load.mark("drain")
        svc.custom.patch_namespaced_custom_object(GROUP, VERSION, svc.ns, "inferenceservices", svc.name, {
            "metadata": {"annotations": {"ome.io/traffic-drain": json.dumps(
                {"maint-1": {"cluster": svc.b.name, "reason": "e2e"}})}}})
        wait_until("the drain in the map", lambda: svc.map_weights().get(svc.b.name) == 0, svc.stack.live.worker, 60)
        wait_until("published", svc.published, svc.stack.live.worker, 30)
        load.mark("published")
        while load.running:
            time.sleep(0.5)
        report = load.stop()
    assert report.failed == 0, failures(report)
    b_pods = svc.pods_of(svc.b)
    # Traefik takes a published route within its provider throttle and a reload (well under a second here).
    after = report.window(report.at("published") + 1.0)
    assert after.succeeded > 300 and not (set(after.by_address) & b_pods), dict(after.by_address)
    gap = report.at("published") - report.at("drain")
    print(f"\ndrain annotation -> published in {gap:.2f} s; after it {after.succeeded} requests, none to the drained "
          f"home; {report.failed} failed")
    svc.custom.patch_namespaced_custom_object(GROUP, VERSION, svc.ns, "inferenceservices", svc.name, {
        "metadata": {"annotations": {"ome.io/traffic-drain": None}}})
    wait_until("the drain lifted", lambda: svc.route_weights() == {svc.a.name: 3, svc.b.name: 1},
               svc.stack.live.worker, 60)


def test_a_home_that_stops_answering_is_probed_out_within_the_detection_window(service: Service) -> None:
    svc = service
    member = svc.b
    assert member.gateway_relay is not None and member.runtime is not None
    with BackgroundLoad(svc.load(3000)) as load:
        time.sleep(2)
        load.mark("fault")
        member.gateway_relay.stop()  # the member's Gateway is unreachable from the control plane
        wait_until("gated and published", lambda: svc.route_weights().get(member.name) == 0 and svc.published(),
                   svc.stack.live.worker, 60)
        load.mark("gated")
        time.sleep(3)
        load.mark("after")
        report = load.snapshot()
        # The Gateway answers again: the probe reopens the home after successThreshold passes.
        member.gateway_relay = start_relay(f"gateway-relay-{member.name}", member.runtime.netns,
                                           (member.runtime.address, svc.fleet.backend_port),
                                           member.traefik.port if member.traefik else 0, member.log_dir)
        wait_until("reopened", lambda: svc.route_weights().get(member.name) == 1, svc.stack.live.worker, 60)
        load.stop()
    record = next(e for e in svc.traffic_map()["spec"]["entries"] if e["cluster"] == member.name)
    window = report.at("gated") - report.at("fault")
    late = report.window(report.at("gated") + 1.0, "after")
    failed_in_window = report.window("fault", report.at("gated") + 1.0).failed
    assert late.failed == 0 and late.succeeded > 100, failures(late)
    # A request sent just before the fault may still be in flight through the relay when it stops.
    assert report.window(None, report.at("fault") - 1.0).failed == 0, failures(report)
    assert window <= FAILURE_THRESHOLD * PROBE_PERIOD_S + 8, window
    assert record["healthy"] is True, record
    print(f"\nfault -> weight 0 published in {window:.2f} s (probe period {PROBE_PERIOD_S} s x threshold "
          f"{FAILURE_THRESHOLD}); {failed_in_window} requests failed inside it, 0 after")


def _withdrawn_under_load(svc: Service, change: Callable[[], None]) -> tuple[LoadReport, int | None]:
    """Requests through the global route while `change` makes placement take home b's copy away; sampled every
    50 ms: (the report once the copy is gone, b's weight on the route at the last look before it went)."""
    seen: list[tuple[float, bool, int | None]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                seen.append((time.monotonic(), svc.copy_in(svc.b), svc.route_weights().get(svc.b.name)))
            except (ApiException, OSError):
                pass
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        with BackgroundLoad(svc.load(30000)) as load:  # stopped once the copy is gone
            sampler.start()
            time.sleep(2)
            load.mark("changed")
            change()
            wait_until("the home's copy withdrawn", lambda: not svc.copy_in(svc.b), svc.stack.live.worker, 240)
            load.mark("withdrawn")
            time.sleep(2)
            stop.set()
            load.stop()
            report = load.report
    finally:
        # Also when `change` failed: a sampler left running outlives the module's clusters and fails later tests.
        stop.set()
        sampler.join(timeout=5)
    assert report is not None
    gone_at = next(t for t, present, _ in seen if not present)
    before = [w for t, present, w in seen if t < gone_at]
    # The last look at the route before the copy was gone already sent nothing there.
    assert before and before[-1] in (0, None), seen[-20:]
    assert report.failed == 0, failures(report)
    return report, before[-1]


def test_a_home_whose_share_goes_to_zero_keeps_its_row_and_loses_its_copy_once_off_the_route(service: Service) -> None:
    """Split 3:1 down to 2 replicas: largest remainder gives a 2 and b 0. b's copy serves until the route leaves
    it out, then goes; its row stays (the weight its term gives, 0 replicas, no copy). 4 replicas again: a copy
    in b again, acknowledging the new plan, and b back on the route (its weight as the capacity table says: a's
    new pod does not report the servable count the capacity test annotated on the others)."""
    svc = service
    report, last_weight = _withdrawn_under_load(svc, lambda: svc.place({svc.a.name: 3, svc.b.name: 1}, replicas=2))
    row = svc.row(svc.b)
    assert (row["allocation"]["weight"], row["allocation"]["desiredReplicas"], row.get("appliedPlanID"),
            row.get("endpoint")) == (1, 0, None, None), row
    assert any(svc.b.name in m for m in svc.events("PlacementShareWithdrawn")), svc.events("PlacementShareWithdrawn")
    print(f"\nb's share to zero under load: {report.succeeded} answered, {report.failed} failed; route weight there "
          f"before its copy went: {last_weight}")

    svc.place({svc.a.name: 3, svc.b.name: 1})
    wait_until("b a home again and on the route", lambda: svc.copy_in(svc.b) and svc.route_weights().get(
        svc.b.name, 0) > 0 and svc.row(svc.b).get("appliedPlanID"), svc.stack.live.worker, 240,
        detail=lambda: f"route {svc.route_weights()}, b's row {svc.row(svc.b)}")
    print(f"b's share back: route {svc.route_weights()}")


def test_placement_withdraws_a_home_only_after_the_route_stopped_sending_there(service: Service) -> None:
    svc = service
    worker = svc.stack.live.worker

    def drop_b_and_kill_the_worker() -> None:
        svc.place({svc.a.name: 1})
        time.sleep(0.5)
        worker.kill()  # between the new plan and its publication
        time.sleep(2)
        start_worker_process(worker)

    report, last_weight = _withdrawn_under_load(svc, drop_b_and_kill_the_worker)
    print(f"\nplacement dropped a home under load with the worker SIGKILLed: {report.succeeded} answered, "
          f"{report.failed} failed; route weight there before its copy went: {last_weight}")


def test_routing_turned_off_withdraws_the_global_route_and_on_again_brings_it_back(service: Service) -> None:
    svc = service
    worker = svc.stack.live.worker
    assert svc.answers()
    started = time.monotonic()
    svc.custom.patch_namespaced_custom_object(GROUP, VERSION, svc.ns, "inferenceservices", svc.name,
                                              {"spec": {"routing": {"enabled": False}}})
    wait_until("the map deleted and the route withdrawn", lambda: not svc.traffic_map() and not svc.route_weights(),
               worker, 60)
    off = time.monotonic() - started
    wait_until("the global host unrouted", lambda: svc.stack.traefik.get("/v1/models", svc.host)[0] == 404,
               worker, 30)
    assert svc.copy_in(svc.a), "routing off leaves the service's copies alone"
    svc.custom.patch_namespaced_custom_object(GROUP, VERSION, svc.ns, "inferenceservices", svc.name,
                                              {"spec": {"routing": {"enabled": None}}})
    wait_until("routed again", lambda: svc.route_weights() == {svc.a.name: 1} and svc.published(), worker, 60,
               detail=svc.traffic_map)
    wait_until("answered through the global route", svc.answers, worker, 30)
    print(f"\nrouting off: map deleted and route withdrawn {off:.2f} s after the edit; on again: answered")


def test_a_single_move_hands_the_global_route_over_without_a_failed_request(traffic_stack: TrafficStack,
                                                                           fleet: GlobalRouteFleet) -> None:
    stack = traffic_stack
    svc = Service(stack, fleet)
    worker = stack.live.worker

    def single(member: str) -> dict[str, Any]:
        return {"policy": "ClusterAffinity", "mode": "Single", "clusterAffinity": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [member]}]}]}

    spec = {"deploymentMode": "OMENative", "engine": {"minReplicas": 1, "runner": {
        "name": "engine", "image": "vllm/vllm-openai:v0.9", "ports": [{"containerPort": 8000}],
        "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}}}, "placement": single(svc.a.name)}
    svc.custom.create_namespaced_custom_object(GROUP, VERSION, svc.ns, "inferenceservices", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
        "metadata": {"name": svc.name, "namespace": svc.ns}, "spec": spec})
    wait_until("routed to its first home", lambda: svc.route_weights() == {svc.a.name: 1} and svc.published(),
               worker, 300, detail=svc.traffic_map)
    wait_until("answered through the global route", svc.answers, worker, 60)
    a_pods = svc.pods_of(svc.a)
    with BackgroundLoad(svc.load(30000)) as load:  # stopped once the move is over
        time.sleep(2)
        load.mark("moved")
        svc.custom.patch_namespaced_custom_object(GROUP, VERSION, svc.ns, "inferenceservices", svc.name, {
            "spec": {"placement": single(svc.b.name)}})
        wait_until("the route on the new home", lambda: svc.route_weights().get(svc.b.name, 0) > 0
                   and not svc.route_weights().get(svc.a.name), worker, 300, detail=svc.traffic_map)
        load.mark("handed over")
        wait_until("the old home's copy withdrawn", lambda: not svc.copy_in(svc.a), worker, 240)
        time.sleep(2)
        report = load.stop()
    b_pods = svc.pods_of(svc.b)
    assert report.failed == 0, failures(report)
    before = report.window(None, "moved")
    after = report.window(report.at("handed over") + 1.0)
    assert before.succeeded > 100 and set(before.by_address) <= a_pods, dict(before.by_address)
    assert after.succeeded > 100 and set(after.by_address) <= b_pods, dict(after.by_address)
    print(f"\nSingle move under load: {report.succeeded} answered, {report.failed} failed; "
          f"handed over {report.at('handed over') - report.at('moved'):.1f} s after the edit")
