"""An InferenceService in OMENative mode end to end: worker and bridge as processes, following both
InferenceServices and InferenceReplicas, kwok playing the kubelets.

The component is served by the projected InferenceReplica `<isvc>-engine` (parentRef, owned by the
service), never by a Deployment; each revision's Service selects the replica's pods of that revision,
so the HTTPRoute carries the split as for every component. A canary step's capacity is the replica's
`pacing.partition`: at 50% of 2 Instances one Instance runs the new template while the stable one
serves, and a promote rolls the rest (activities/serving/omenative.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client

from devstack.process import ManagedProcess
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome.instance_keys import REPLICA_LABEL
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest
from tests.support.native_stack import GROUP, VERSION, native_endpoints, native_replica, native_stack
from tests.support.rollout_stack import route_weights

__all__ = ["native_stack"]  # the fixture, reused
pytestmark = pytest.mark.e2e





def _engine(image: str) -> dict[str, Any]:
    return {"minReplicas": 2, "runner": {"name": "engine", "image": image, "ports": [{"containerPort": 8000}]}}




def _images(api: client.ApiClient, ns: str, name: str) -> list[str]:
    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"{REPLICA_LABEL}={name}-engine").items
    return sorted(p.spec.containers[0].image for p in pods if p.metadata.deletion_timestamp is None)




def test_an_omenative_service_is_served_by_its_projected_replica(kube_api: client.ApiClient,
                                                                 native_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = native_stack
    name = f"native-{uuid.uuid4().hex[:5]}"
    spec = {"deploymentMode": "OMENative", "engine": _engine("vllm/vllm-openai:v0.9"),
            "rollout": {"groups": [{"components": ["engine"], "canary": {
                "steps": [{"capacity": "50%", "traffic": 50, "pause": {}}, {"capacity": "100%", "traffic": 100}],
                "scaleDownDelaySeconds": 1}}]}}
    create(kube_api, InferenceService, manifest(InferenceService, spec, name=name), ns)
    first = wait_until("the first revision serving 100%", lambda: (
        (w := route_weights(kube_api, ns, f"{name}-engine")) and list(w.values()) == [100] and w), worker, 180)
    [stable] = first
    replica = wait_until("the projected replica", lambda: native_replica(kube_api, ns, name), worker)
    assert replica["spec"]["parentRef"]["name"] == name and replica["spec"]["component"] == "engine"
    owner = replica["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "InferenceService" and owner["name"] == name and owner["controller"] is True
    assert replica["spec"]["replicas"] == 2
    wait_until("two Instances of the first revision",
               lambda: _images(kube_api, ns, name) == ["vllm/vllm-openai:v0.9"] * 2,
          worker)
    assert not client.AppsV1Api(kube_api).list_namespaced_deployment(ns).items, "OMENative renders no Deployment"
    wait_until("the revision Service selects the replica's pods",
               lambda: native_endpoints(kube_api, ns, stable) == 2, worker)

    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {
        "spec": {"engine": _engine("vllm/vllm-openai:v0.10")}})
    weights = wait_until("the canary at 50%", lambda: (
        (w := route_weights(kube_api, ns, f"{name}-engine")).get(stable) == 50 and len(w) == 2 and w), worker, 180)
    [canary] = [backend for backend in weights if backend != stable]
    replica = native_replica(kube_api, ns, name) or {}
    assert replica["spec"]["pacing"]["partition"] == 1, replica["spec"].get("pacing")
    wait_until("one Instance moved, one held", lambda: _images(kube_api, ns, name)
          == ["vllm/vllm-openai:v0.10", "vllm/vllm-openai:v0.9"], worker)
    wait_until("each revision Service has its Instance", lambda: native_endpoints(kube_api, ns, canary) == 1
          and native_endpoints(kube_api, ns, stable) == 1, worker)

    status = (client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
        GROUP, VERSION, ns, "inferenceservices", name).get("status") or {})
    revision = status["components"]["engine"]["canary"]["canaryRevisionHash"]
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {
        "metadata": {"annotations": {"ome.io/rollout-promote": revision}}})
    wait_until("promoted: 100% on the new revision",
               lambda: route_weights(kube_api, ns, f"{name}-engine") == {canary: 100},
          worker, 180)
    wait_until("every Instance on the new template",
               lambda: _images(kube_api, ns, name) == ["vllm/vllm-openai:v0.10"] * 2,
          worker)
    assert not client.AppsV1Api(kube_api).list_namespaced_deployment(ns).items
    engine = wait_until("status.components.engine projects the replica", lambda: (
        (e := ((client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
            GROUP, VERSION, ns, "inferenceservices", name).get("status") or {}).get("components") or {})
         .get("engine") or {}).get("lifecycle", {}).get("updatedReplicas") == 2 and e), worker)
    assert engine["scaleTargetRef"] == {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                                        "name": f"{name}-engine"}
    replica_status = (native_replica(kube_api, ns, name) or {}).get("status") or {}
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
    first = wait_until("the first revision serving 100%", lambda: (
        (w := route_weights(kube_api, ns, f"{name}-engine")) and list(w.values()) == [100] and w), worker, 180)
    [stable] = first
    wait_until("two Instances", lambda: _images(kube_api, ns, name) == ["vllm/vllm-openai:v0.9"] * 2, worker)
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {
        "spec": {"engine": _engine("vllm/vllm-openai:v0.10")}})
    wait_until("the canary at 50% with one Instance moved", lambda: (
        route_weights(kube_api, ns, f"{name}-engine").get(stable) == 50
        and _images(kube_api, ns, name) == ["vllm/vllm-openai:v0.10", "vllm/vllm-openai:v0.9"]), worker, 180)
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {
        "metadata": {"annotations": {"ome.io/rollout-rollback": "true"}}})
    wait_until("traffic back on the stable revision", lambda: route_weights(kube_api, ns, f"{name}-engine")
          == {stable: 100}, worker, 180)
    wait_until("every Instance back on the stable template", lambda: _images(kube_api, ns, name)
          == ["vllm/vllm-openai:v0.9"] * 2, worker, 180)
    replica = native_replica(kube_api, ns, name) or {}
    assert replica["spec"]["pacing"].get("rollbackToRevision"), replica["spec"]["pacing"]
    assert replica["status"]["updateRevision"] != replica["status"]["currentRevision"]
