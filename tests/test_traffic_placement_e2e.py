"""A placed InferenceService judged by requests: the control plane (the traffic stack's cluster, worker and
bridge) places it on a member cluster whose pods answer and which has a Gateway of its own
(devstack/members.py, an answering member: its own apiserver, kwok nodes, Kueue, chart, worker and bridge,
pod runtime and Traefik); the member's worker serves the derived copy, and its endpoint answers through
the member's Gateway, from the member's pods, with no request failing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.hub_server import HubServer
from devstack.members import MemberCluster
from devstack.services import OciRegistry
from testkit.load import LoadSpec, run_load
from testkit.waiting import wait_until
from tests.support.traffic_stack import TrafficStack, traffic_stack

pytestmark = pytest.mark.e2e

__all__ = ["traffic_stack"]  # the fixture, reused

GROUP, VERSION = "ome.io", "v1beta1"
TIER = "traffic.placement.test/tier"


@pytest.fixture(scope="module")
def member(traffic_stack: TrafficStack, oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemberCluster]:
    """One answering member registered with the traffic stack's control plane."""
    stack = traffic_stack
    member = MemberCluster(f"served-{uuid.uuid4().hex[:5]}", tmp_path_factory.mktemp("member"), stack_logs,
                           labels={TIER: "serving"}, cpu_quota="4", answering=True)
    env = {"HF_ENDPOINT": hub_server.url, "SERVINGOPS_REGISTRY": oci_registry.address,
           "SERVINGOPS_OLLAMA_REGISTRY": oci_registry.url, "HF_HUB_DISABLE_TELEMETRY": "1"}
    try:
        member.start(stack.live.temporal_address, env)
        member.prepare_namespace(stack.namespace)
        member.register(stack.live.api, stack.namespace)
        wait_until(f"WorkloadCluster {member.name} Ready", lambda: _registration_ready(stack, member.name),
                   stack.live.worker, 120)
        yield member
    finally:
        member.unregister(stack.live.api, stack.namespace)
        member.stop()


def _registration_ready(stack: TrafficStack, name: str) -> bool:
    try:
        obj = client.CustomObjectsApi(stack.live.api).get_cluster_custom_object(GROUP, VERSION, "workloadclusters",
                                                                                name)
    except ApiException:
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _get(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    try:
        obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "inferenceservices", name)
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return obj


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def test_a_placed_service_answers_through_its_members_gateway(traffic_stack: TrafficStack,
                                                              member: MemberCluster) -> None:
    stack, ns = traffic_stack, traffic_stack.namespace
    name = f"placed-{uuid.uuid4().hex[:5]}"
    spec = {
        "deploymentMode": "OMENative",
        "engine": {"minReplicas": 2, "runner": {
            "name": "engine", "image": "vllm/vllm-openai:v0.9", "ports": [{"containerPort": 8000}],
            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}},
        "placement": {"policy": "ClusterAffinity", "mode": "Single", "clusterAffinity": [
            {"matchExpressions": [{"key": TIER, "operator": "In", "values": ["serving"]}]}]},
    }
    client.CustomObjectsApi(stack.live.api).create_namespaced_custom_object(
        GROUP, VERSION, ns, "inferenceservices",
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": name, "namespace": ns},
         "spec": spec})
    worker = stack.live.worker
    placed = wait_until("Placed on the member", lambda: (
        (p := (_get(stack.live.api, ns, name).get("status") or {}).get("placement") or {}).get("phase") == "Placed"
        and p), worker, 180)
    assert placed["cluster"] == member.name, placed
    derived = wait_until("the derived copy Ready in the member", lambda: (
        (d := _get(member.api, ns, name)) and _condition(d, "Ready").get("status") == "True" and d),
        member.worker or worker, 180)
    ingress = _condition(derived, "IngressReady")
    assert (ingress.get("status"), ingress.get("reason")) == ("True", "RouteAccepted"), ingress

    assert member.traefik is not None
    host = member.host(ns, name)
    traefik = member.traefik
    # Ready says the pods are Ready and the Gateway accepted the route; the data plane follows within its
    # throttle, once it has seen the endpoints too.
    wait_until("answered through the member's Gateway",
               lambda: traefik.get("/v1/models", host)[0] == 200, member.worker or worker, 60)
    report = asyncio.run(run_load(LoadSpec(url=member.traefik.url, host=host, rate=100, max_requests=500,
                                           max_seconds=10, max_tokens=4)))
    assert report.failed == 0 and report.succeeded == 500, report.failures
    pods = {f"{ns}/{p.metadata.name}" for p in client.CoreV1Api(member.api).list_namespaced_pod(ns).items}
    assert set(report.by_pod) <= pods and len(report.by_pod) == 2, (dict(report.by_pod), pods)
    # The control plane runs none of it: its own cluster has no pod of the service.
    assert not stack.live.isvc(name).pods(), stack.live.isvc(name).pods()
    print(f"placed on {member.name}: {report.succeeded} answered through its Gateway, by pod {dict(report.by_pod)}")
