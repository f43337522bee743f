"""The global route's data plane without the product's routing workflow (issue 30's groundwork): what the
Gateway API publisher renders (servingops/rendering/global_route.py) written by hand to the control plane, to
answering members that each serve one pod behind an HTTPRoute on their own Gateway for their own hostname
only (`<isvc>.<ns>.<member>.example.com`), reachable from the control plane at a stack-made address on one
shared port (a relay in each member's namespace; the Gateway's status.addresses say where).

It runs on the routing end-to-end test's fleet (tests/test_routing_e2e.py) in a namespace of its own, so a
fault in the publisher and a fault in the data plane tell themselves apart without a second fleet.

Why this shape (tried on Traefik 3.7.15): Traefik's Gateway provider refuses ExternalName backend Services
whatever else exists beside them; see the rendering module's docstring.
"""

from __future__ import annotations

import asyncio
import functools
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from kubernetes import client

from devstack.kube import apply_objects
from devstack.members import MemberCluster
from devstack.traefik import GATEWAY_API, GATEWAY_NAME, GATEWAY_NAMESPACE
from servingops.api_models.ome.traffic_map import TrafficMapEntry
from servingops.rendering.global_route import (
    GlobalRoute,
    backend_service_name,
    render_backend_endpoint_slices,
    render_global_route,
)
from testkit.load import LoadReport, LoadSpec, run_load
from testkit.waiting import wait_until
from tests.support.global_route_stack import GlobalRouteFleet, running_weights

ISVC = "chat"
POD_PORT = 8080
SHARE_TOLERANCE = 0.03


def _serve(member: MemberCluster, namespace: str) -> None:
    """One answering pod of ISVC in the member (the pod runtime answers for pods with the InferenceService
    label), a Service, and an HTTPRoute on the member's Gateway for the member's own hostname only."""
    labels = {"ome.io/inferenceservice": ISVC, "serving.ome.io/revision": f"{ISVC}-{member.name}"}
    group, version = GATEWAY_API
    apply_objects(member.api, [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": ISVC, "namespace": namespace},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.9",
                                      "ports": [{"containerPort": POD_PORT}]}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": ISVC, "namespace": namespace},
         "spec": {"selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": POD_PORT}]}},
        {"apiVersion": f"{group}/{version}", "kind": "HTTPRoute", "metadata": {"name": ISVC, "namespace": namespace},
         "spec": {"parentRefs": [{"group": group, "kind": "Gateway", "namespace": GATEWAY_NAMESPACE,
                                  "name": GATEWAY_NAME}],
                  "hostnames": [member.host(namespace, ISVC)],
                  "rules": [{"backendRefs": [{"name": ISVC, "port": 80}]}]}},
    ])  # fmt: skip


def _answering(member: MemberCluster, host: str) -> bool:
    """Whether the member's Gateway answers for `host` on its own (loopback) listener."""
    assert member.traefik is not None
    return member.traefik.get("/v1/models", host)[0] == 200


def _status_through_relay(member: MemberCluster, port: int, host: str) -> int:
    """One request to the member's Gateway at its reachable address (not loopback), for `host`."""
    request = urllib.request.Request(f"http://{member.gateway_address}:{port}/v1/models", headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _publish(fleet: GlobalRouteFleet, namespace: str, weights: dict[str, int]) -> GlobalRoute:
    """What the publisher would write for these weights: the route, selectorless backends, and the slices of
    the addresses the member Gateways report."""
    config = fleet.endpoint_config()
    entries = [TrafficMapEntry(cluster=m.name, endpoint=f"http://{m.host(namespace, ISVC)}", weight=weights[m.name])
               for m in fleet.members]
    published = render_global_route(config, ISVC, namespace, fleet.global_host(namespace, ISVC), entries,
                                    endpoint_slices=True)
    slices = render_backend_endpoint_slices(config, ISVC, namespace, fleet.gateway_addresses())
    apply_objects(fleet.control_api, [*published.services, *slices, published.route])
    return published


def _route_verdict(fleet: GlobalRouteFleet, namespace: str) -> dict[str, Any]:
    group, version = GATEWAY_API
    route: dict[str, Any] = client.CustomObjectsApi(fleet.control_api).get_namespaced_custom_object(  # type: ignore[assignment]
        group, version, namespace, "httproutes", f"{ISVC}-global")
    generation = route["metadata"]["generation"]
    return {c["type"]: (c["status"], c["reason"], c.get("message", ""))
            for parent in (route.get("status") or {}).get("parents") or [] for c in parent.get("conditions") or []
            if c.get("observedGeneration") == generation}


def _shares(fleet: GlobalRouteFleet, namespace: str, report: LoadReport) -> dict[str, int]:
    """Answers per member, from the pods that gave them (`<namespace>/<pod>` is unique per member here only
    together with the member, so each member's pods are listed in it)."""
    counts = {}
    for member in fleet.members:
        listed = client.CoreV1Api(member.api).list_namespaced_pod(namespace).items
        pods = {f"{namespace}/{p.metadata.name}" for p in listed if p.metadata is not None}
        counts[member.name] = sum(n for pod, n in report.by_pod.items() if pod in pods)
    return counts


def _wait_running(fleet: GlobalRouteFleet, namespace: str, weights: dict[str, int]) -> None:
    """Until the control plane's router runs these weights (Traefik's API), i.e. the data plane took them."""
    want = {backend_service_name(namespace, ISVC, name): w for name, w in weights.items()}
    wait_until(f"the control plane's Traefik running weights {weights}",
               lambda: running_weights(fleet.control_traefik, namespace) == want, fleet.control_traefik.process, 60,
               detail=lambda: running_weights(fleet.control_traefik, namespace))


def check_split_and_zero_weight(fleet: GlobalRouteFleet) -> None:
    """The data plane alone: a rendered 3:1 global route answers 3:1 with none failed, and a home weighted 0
    then gets nothing."""
    namespace = f"global-{uuid.uuid4().hex[:6]}"
    home_a, home_b = fleet.members
    started = time.monotonic()
    for member in fleet.members:
        _serve(member, namespace)
    for member in fleet.members:
        host = member.host(namespace, ISVC)
        assert member.traefik is not None
        wait_until(f"{member.name} answering for {host} on its Gateway",
                   functools.partial(_answering, member, host), member.traefik.process, 120)
        # Reachable from another cluster at the stack-made address and the shared port, and only for its own
        # hostname: the global host gets a 404 there, so the global route must rewrite Host per backend.
        assert _status_through_relay(member, fleet.backend_port, host) == 200
        assert _status_through_relay(member, fleet.backend_port, fleet.global_host(namespace, ISVC)) == 404
    # What the EndpointSlice fallback reads: each member Gateway's status.addresses, the relay's address.
    assert fleet.gateway_addresses() == {m.name: [m.gateway_address] for m in fleet.members}
    print(f"members serving in {time.monotonic() - started:.1f}s")

    client.CoreV1Api(fleet.control_api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    split = {home_a.name: 3, home_b.name: 1}
    published = time.monotonic()
    _publish(fleet, namespace, split)
    verdict = wait_until("the global route Accepted with its references resolved", lambda: (
        (v := _route_verdict(fleet, namespace)).get("Accepted", ("",))[0] == "True"
        and v.get("ResolvedRefs", ("",))[0] == "True" and v), fleet.control_traefik.process, 60,
        detail=lambda: _route_verdict(fleet, namespace))
    _wait_running(fleet, namespace, split)
    print(f"3:1 published to running in {time.monotonic() - published:.2f}s; verdict {verdict}")

    global_host = fleet.global_host(namespace, ISVC)
    report = asyncio.run(run_load(LoadSpec(url=fleet.control_traefik.url, host=global_host, rate=100,
                                           max_requests=2000, max_seconds=40, max_tokens=4)))
    assert report.failed == 0 and report.succeeded == 2000, (report.failures, report.succeeded)
    counts = _shares(fleet, namespace, report)
    assert sum(counts.values()) == report.succeeded, (counts, dict(report.by_pod))
    share_a = counts[home_a.name] / report.succeeded
    print(f"3:1 over {report.succeeded} requests in {report.end_s - report.start_s:.1f}s: {counts} "
          f"({share_a:.3f} / {1 - share_a:.3f}), {report.failed} failed, latency {report.latency}")
    assert abs(share_a - 0.75) <= SHARE_TOLERANCE, counts

    drained = {home_a.name: 3, home_b.name: 0}
    changed = time.monotonic()
    _publish(fleet, namespace, drained)
    _wait_running(fleet, namespace, drained)
    print(f"weight 0 published to running in {time.monotonic() - changed:.2f}s")
    report = asyncio.run(run_load(LoadSpec(url=fleet.control_traefik.url, host=global_host, rate=100,
                                           max_requests=500, max_seconds=15, max_tokens=4)))
    assert report.failed == 0 and report.succeeded == 500, (report.failures, report.succeeded)
    counts = _shares(fleet, namespace, report)
    print(f"3:0 over {report.succeeded} requests: {counts}, {report.failed} failed")
    assert counts == {home_a.name: 500, home_b.name: 0}, (counts, dict(report.by_pod))
