"""The OMENative InferenceService stack fixture and readers of its projected replica and endpoints."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from tests.support.rollout_stack import worker_and_bridge

GROUP, VERSION = "ome.io", "v1beta1"


def native_replica(api: client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, ns, "inferencereplicas", f"{name}-engine")
        return obj
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def native_endpoints(api: client.ApiClient, ns: str, service: str) -> int:
    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        ns, label_selector=f"kubernetes.io/service-name={service}").items
    return sum(1 for s in slices for e in s.endpoints or [] if e.conditions and e.conditions.ready)


@pytest.fixture(scope="module")
def native_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                 oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "native", "InferenceService,InferenceReplica",
                           identities=chart_identities) as stack:
        yield stack
        # Its replicas go with it: a later module's bridge (bridges follow every namespace) would
        # otherwise start their workflows on its own worker.
        client.CoreV1Api(kube_api).delete_namespace(stack[0])
