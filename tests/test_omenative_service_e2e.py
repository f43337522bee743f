"""An InferenceService in OMENative mode end to end: worker and bridge as processes, following both
InferenceServices and InferenceReplicas, kwok playing the kubelets.

The component is served by the projected InferenceReplica `<isvc>-engine` (parentRef, owned by the
service), never by a Deployment; each revision's Service selects the replica's pods of that revision,
so the HTTPRoute carries the split as for every component. A canary step's capacity is the replica's
`pacing.partition`: at 50% of 2 Instances one Instance runs the new template while the stable one
serves, and a promote rolls the rest (activities/serving/omenative.py)."""

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
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome.instance_keys import REPLICA_LABEL
from tests.crd_helpers import create, manifest
from tests.test_rollout_e2e import _route_weights, _wait, worker_and_bridge

GROUP, VERSION = "ome.io", "v1beta1"


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


def _engine(image: str) -> dict[str, Any]:
    return {"minReplicas": 2, "runner": {"name": "engine", "image": image, "ports": [{"containerPort": 8000}]}}


def _replica(api: client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, ns, "inferencereplicas", f"{name}-engine")
        return obj
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _images(api: client.ApiClient, ns: str, name: str) -> list[str]:
    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"{REPLICA_LABEL}={name}-engine").items
    return sorted(p.spec.containers[0].image for p in pods if p.metadata.deletion_timestamp is None)


def _endpoints(api: client.ApiClient, ns: str, service: str) -> int:
    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        ns, label_selector=f"kubernetes.io/service-name={service}").items
    return sum(1 for s in slices for e in s.endpoints or [] if e.conditions and e.conditions.ready)


def test_an_omenative_service_is_served_by_its_projected_replica(kube_api: client.ApiClient,
                                                                 native_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = native_stack
    name = f"native-{uuid.uuid4().hex[:5]}"
    spec = {"deploymentMode": "OMENative", "engine": _engine("vllm/vllm-openai:v0.9"),
            "rollout": {"groups": [{"components": ["engine"], "canary": {
                "steps": [{"capacity": "50%", "traffic": 50, "pause": {}}, {"capacity": "100%", "traffic": 100}],
                "scaleDownDelaySeconds": 1}}]}}
    create(kube_api, InferenceService, manifest(InferenceService, spec, name=name), ns)
    first = _wait("the first revision serving 100%", lambda: (
        (w := _route_weights(kube_api, ns, f"{name}-engine")) and list(w.values()) == [100] and w), worker, 180)
    [stable] = first
    replica = _wait("the projected replica", lambda: _replica(kube_api, ns, name), worker)
    assert replica["spec"]["parentRef"]["name"] == name and replica["spec"]["component"] == "engine"
    owner = replica["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "InferenceService" and owner["name"] == name and owner["controller"] is True
    assert replica["spec"]["replicas"] == 2
    _wait("two Instances of the first revision", lambda: _images(kube_api, ns, name) == ["vllm/vllm-openai:v0.9"] * 2,
          worker)
    assert not client.AppsV1Api(kube_api).list_namespaced_deployment(ns).items, "OMENative renders no Deployment"
    _wait("the revision Service selects the replica's pods", lambda: _endpoints(kube_api, ns, stable) == 2, worker)

    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {
        "spec": {"engine": _engine("vllm/vllm-openai:v0.10")}})
    weights = _wait("the canary at 50%", lambda: (
        (w := _route_weights(kube_api, ns, f"{name}-engine")).get(stable) == 50 and len(w) == 2 and w), worker, 180)
    [canary] = [backend for backend in weights if backend != stable]
    replica = _replica(kube_api, ns, name) or {}
    assert replica["spec"]["pacing"]["partition"] == 1, replica["spec"].get("pacing")
    _wait("one Instance moved, one held", lambda: _images(kube_api, ns, name)
          == ["vllm/vllm-openai:v0.10", "vllm/vllm-openai:v0.9"], worker)
    _wait("each revision Service has its Instance", lambda: _endpoints(kube_api, ns, canary) == 1
          and _endpoints(kube_api, ns, stable) == 1, worker)

    status = (client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
        GROUP, VERSION, ns, "inferenceservices", name).get("status") or {})
    revision = status["components"]["engine"]["canary"]["canaryRevisionHash"]
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {
        "metadata": {"annotations": {"ome.io/rollout-promote": revision}}})
    _wait("promoted: 100% on the new revision", lambda: _route_weights(kube_api, ns, f"{name}-engine") == {canary: 100},
          worker, 180)
    _wait("every Instance on the new template", lambda: _images(kube_api, ns, name) == ["vllm/vllm-openai:v0.10"] * 2,
          worker)
    assert not client.AppsV1Api(kube_api).list_namespaced_deployment(ns).items
    engine = _wait("status.components.engine projects the replica", lambda: (
        (e := ((client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
            GROUP, VERSION, ns, "inferenceservices", name).get("status") or {}).get("components") or {})
         .get("engine") or {}).get("lifecycle", {}).get("updatedReplicas") == 2 and e), worker)
    assert engine["scaleTargetRef"] == {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                                        "name": f"{name}-engine"}
    replica_status = (_replica(kube_api, ns, name) or {}).get("status") or {}
    assert engine["lifecycle"]["labelSelector"] == replica_status["labelSelector"]
    assert engine["lifecycle"]["currentRevision"] == replica_status["currentRevision"]


def test_an_omenative_canary_rolls_back_through_rollback_to_revision(
        kube_api: client.ApiClient, native_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = native_stack
    name = f"back-{uuid.uuid4().hex[:5]}"
    spec = {"deploymentMode": "OMENative", "engine": _engine("vllm/vllm-openai:v0.9"),
            "rollout": {"groups": [{"components": ["engine"], "canary": {
                "steps": [{"capacity": "50%", "traffic": 50, "pause": {}}, {"capacity": "100%", "traffic": 100}],
                "scaleDownDelaySeconds": 1}}]}}
    create(kube_api, InferenceService, manifest(InferenceService, spec, name=name), ns)
    first = _wait("the first revision serving 100%", lambda: (
        (w := _route_weights(kube_api, ns, f"{name}-engine")) and list(w.values()) == [100] and w), worker, 180)
    [stable] = first
    _wait("two Instances", lambda: _images(kube_api, ns, name) == ["vllm/vllm-openai:v0.9"] * 2, worker)
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {
        "spec": {"engine": _engine("vllm/vllm-openai:v0.10")}})
    _wait("the canary at 50% with one Instance moved", lambda: (
        _route_weights(kube_api, ns, f"{name}-engine").get(stable) == 50
        and _images(kube_api, ns, name) == ["vllm/vllm-openai:v0.10", "vllm/vllm-openai:v0.9"]), worker, 180)
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {
        "metadata": {"annotations": {"ome.io/rollout-rollback": "true"}}})
    _wait("traffic back on the stable revision", lambda: _route_weights(kube_api, ns, f"{name}-engine")
          == {stable: 100}, worker, 180)
    _wait("every Instance back on the stable template", lambda: _images(kube_api, ns, name)
          == ["vllm/vllm-openai:v0.9"] * 2, worker, 180)
    replica = _replica(kube_api, ns, name) or {}
    assert replica["spec"]["pacing"].get("rollbackToRevision"), replica["spec"]["pacing"]
    assert replica["status"]["updateRevision"] != replica["status"]["currentRevision"]
