"""The local cluster is a real one: it schedules, runs (fake) pods, allocates ClusterIPs and
serves the upstream CRDs the project depends on."""

from __future__ import annotations

import ipaddress
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.kube import KWOK_NODE_ANNOTATION, SERVICE_CIDR, LocalKubeCluster, condition_true

pytestmark = pytest.mark.integration

# Generous: the suite may run on a loaded 2-core machine. Only an upper bound, never asserted.
DEADLINE = 120.0


def eventually(probe: Callable[[], bool], what: str, deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not probe():
        if time.monotonic() > end:
            raise AssertionError(f"not reached within {deadline}s: {what}")
        time.sleep(0.5)


@pytest.fixture
def namespace(kube_api: client.ApiClient) -> str:
    """A fresh namespace per test, so tests share the cluster without seeing each other."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(kube_api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def test_apiserver_answers(kube_api: client.ApiClient, kube_cluster: LocalKubeCluster) -> None:
    version = client.VersionApi(kube_api).get_code()
    assert version.major == "1"
    assert kube_cluster.api_url.startswith("https://127.0.0.1:")


def test_three_kwok_nodes_ready_with_gpus(kube_api: client.ApiClient) -> None:
    nodes = client.CoreV1Api(kube_api).list_node().items
    assert len(nodes) == 3
    for node in nodes:
        assert node.metadata and node.metadata.annotations
        assert node.metadata.annotations[KWOK_NODE_ANNOTATION] == "fake"
        assert node.status and node.status.allocatable
        assert condition_true(node.status.conditions, "Ready")
        assert node.status.allocatable["nvidia.com/gpu"] == "8"


def test_deployment_gets_ready_pods_on_kwok_nodes(kube_api: client.ApiClient, namespace: str) -> None:
    labels = {"app": "fake-model"}
    gpu = {"nvidia.com/gpu": "1"}
    container = client.V1Container(
        name="server",
        image="registry.invalid/fake-model:1",  # never pulled: kwok fakes the pod
        resources=client.V1ResourceRequirements(requests={"cpu": "1", **gpu}, limits=gpu),
    )
    deployment = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="fake-model"),
        spec=client.V1DeploymentSpec(
            replicas=2,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[container]),
            ),
        ),
    )
    apps = client.AppsV1Api(kube_api)
    apps.create_namespaced_deployment(namespace, deployment)

    def two_ready() -> bool:
        status = apps.read_namespaced_deployment_status("fake-model", namespace).status
        return status is not None and status.ready_replicas == 2

    eventually(two_ready, "deployment has 2 ready replicas")

    pods = client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector="app=fake-model").items
    ready = [p for p in pods if p.status and condition_true(p.status.conditions, "Ready")]
    assert len(ready) == 2
    for pod in ready:
        assert pod.spec and pod.spec.node_name and pod.spec.node_name.startswith("kwok-node-")
        assert pod.status and pod.status.phase == "Running"
        assert pod.status.pod_ip


def test_service_gets_a_cluster_ip(kube_api: client.ApiClient, namespace: str) -> None:
    service = client.V1Service(
        metadata=client.V1ObjectMeta(name="fake-model"),
        spec=client.V1ServiceSpec(selector={"app": "fake-model"}, ports=[client.V1ServicePort(port=8080)]),
    )
    created = client.CoreV1Api(kube_api).create_namespaced_service(namespace, service)
    assert created.spec and created.spec.cluster_ip
    assert ipaddress.ip_address(created.spec.cluster_ip) in ipaddress.ip_network(SERVICE_CIDR)


@pytest.mark.parametrize(
    "crd",
    [
        "httproutes.gateway.networking.k8s.io",
        "gateways.gateway.networking.k8s.io",
        "clusterqueues.kueue.x-k8s.io",
        "workloads.kueue.x-k8s.io",
        "scaledobjects.keda.sh",
    ],
)
def test_upstream_crd_established(kube_api: client.ApiClient, crd: str) -> None:
    status = client.ApiextensionsV1Api(kube_api).read_custom_resource_definition(crd).status
    assert status and condition_true(status.conditions, "Established")


def _route(name: str, weights: tuple[int, int]) -> dict[str, Any]:
    refs = [{"name": f"fake-model-rev-{rev}", "port": 8080, "weight": w} for rev, w in zip("ab", weights, strict=True)]
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {"rules": [{"backendRefs": refs}]},
    }


def test_httproute_can_be_created(kube_api: client.ApiClient, namespace: str) -> None:
    custom = client.CustomObjectsApi(kube_api)
    group, version, plural = "gateway.networking.k8s.io", "v1", "httproutes"
    custom.create_namespaced_custom_object(group, version, namespace, plural, _route("fake-model", (90, 10)))
    stored = custom.get_namespaced_custom_object(group, version, namespace, plural, "fake-model")
    assert isinstance(stored, dict)
    assert [ref["weight"] for ref in stored["spec"]["rules"][0]["backendRefs"]] == [90, 10]

    # The CRD's schema is enforced: a weight above its maximum (1,000,000) is rejected.
    with pytest.raises(ApiException) as rejected:
        custom.create_namespaced_custom_object(group, version, namespace, plural, _route("bad", (1_000_001, 0)))
    assert rejected.value.status == 422
