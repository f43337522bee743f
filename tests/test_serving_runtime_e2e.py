"""ServingRuntimeWorkflow on the local cluster, worker and bridge as processes under the chart's
identities: status.inheritanceChain and InheritanceReady follow ome.io/inherit-from (rules:
tests/test_runtime_inheritance.py)."""

from __future__ import annotations

import uuid
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
from testkit.waiting import wait_until
from tests.support.rollout_stack import worker_and_bridge

pytestmark = pytest.mark.e2e

GROUP, VERSION = "ome.io", "v1beta1"
ENGINE = {"containers": [{"name": "ome-container", "image": "lmsysorg/sglang:v0.4.6",
                          "env": [{"name": "A", "value": "1"}]}]}


@pytest.fixture(scope="module")
def runtime_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                  oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "runtime", "ServingRuntime,ClusterServingRuntime",
                           identities=chart_identities) as stack:
        yield stack


def body(kind: str, name: str, parent: str | None = None, **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if parent:
        metadata["annotations"] = {"ome.io/inherit-from": parent}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": metadata,
            "spec": spec or {"engineConfig": ENGINE}}


def test_inheritance_chain_and_condition_follow_the_objects(kube_api: client.ApiClient,
                                                            runtime_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = runtime_stack
    custom = client.CustomObjectsApi(kube_api)
    suffix = uuid.uuid4().hex[:6]
    root = f"srt-base-{suffix}"

    def local(name: str) -> dict[str, Any]:
        return dict(custom.get_namespaced_custom_object(GROUP, VERSION, ns, "servingruntimes", name))

    def state(name: str) -> tuple[list[str] | None, str | None, str | None]:
        status = local(name).get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "InheritanceReady"), {})
        return status.get("inheritanceChain"), ready.get("status"), ready.get("reason")

    custom.create_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes",
                                        body("ClusterServingRuntime", root))
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "servingruntimes",
                                               body("ServingRuntime", "team-llama", root,
                                                    engineConfig={"minReplicas": 2}))
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "servingruntimes",
                                               body("ServingRuntime", "orphan", "nowhere"))
        wait_until("the chain of team-llama", lambda: state("team-llama") == ([root, "team-llama"], "True", "Resolved"),
              worker)
        wait_until("orphan unresolved", lambda: state("orphan") == (["orphan"], "False", "ParentNotFound"), worker)
        # The cluster-scoped root's status is written by its own run, which may finish after the
        # namespaced child's (the child resolves its chain from the root's spec, not its status).
        wait_until("the root's own chain", lambda: (custom.get_cluster_custom_object(
            GROUP, VERSION, "clusterservingruntimes", root).get("status") or {}).get("inheritanceChain") == [root],
            worker)

        # The parent appears later (no generation of orphan moves): the annotation-free resync is
        # two minutes, so the test nudges through the watched annotation instead, as a user would.
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "servingruntimes",
                                               body("ServingRuntime", "nowhere"))
        custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "servingruntimes", "orphan",
                                              {"metadata": {"annotations": {"ome.io/inherit-from": "nowhere "}}})
        wait_until("orphan resolved", lambda: state("orphan") == (["nowhere", "orphan"], "True", "Resolved"), worker)

        # A cycle through the annotation alone.
        custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "servingruntimes", "nowhere",
                                              {"metadata": {"annotations": {"ome.io/inherit-from": "orphan"}}})
        wait_until("the cycle reported", lambda: state("nowhere")[1:] == ("False", "InheritanceCycle"), worker)
        events = client.CoreV1Api(kube_api).list_namespaced_event(
            ns, field_selector="involvedObject.name=nowhere,reason=InheritanceCycle").items
        assert events and events[0].type == "Warning" and "orphan -> nowhere" in events[0].message
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", root)
