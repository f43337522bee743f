"""InferenceService rollouts end to end: worker and bridge as processes, the local cluster with
kwok pods. The first revision is served at 100%; a new pod template rolls out blue-green (the
default) and the HTTPRoute flips to it once its pods are Ready."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.process import ManagedProcess
from servingops.api_models.ome import InferenceService
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest
from tests.support.rollout_stack import rollout_stack, route_weights

__all__ = ["rollout_stack"]  # the fixture, reused
pytestmark = pytest.mark.e2e










def test_first_revision_serves_then_a_new_template_rolls_out(kube_api: client.ApiClient,
                                                             rollout_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = rollout_stack
    spec = {"engine": {"minReplicas": 2, "runner": {"name": "engine", "image": "vllm/vllm-openai:v0.9",
                                                     "ports": [{"containerPort": 8000}]}}}
    create(kube_api, InferenceService, manifest(InferenceService, spec, name="chat"), ns)
    apps = client.AppsV1Api(kube_api)

    def ready_revisions() -> dict[str, int]:
        deployments = apps.list_namespaced_deployment(ns).items
        return {d.metadata.name: d.status.ready_replicas or 0 for d in deployments}

    first = wait_until("the first revision serving 100%", lambda: (
        (w := route_weights(kube_api, ns, "chat-engine")) and list(w.values()) == [100] and w), worker)
    [first_rev] = first
    wait_until("two Ready pods of the first revision", lambda: ready_revisions().get(first_rev) == 2, worker)

    custom = client.CustomObjectsApi(kube_api)
    custom.patch_namespaced_custom_object("ome.io", "v1beta1", ns, "inferenceservices", "chat", {
        "spec": {"engine": {"runner": {"name": "engine", "image": "vllm/vllm-openai:v0.10",
                                       "ports": [{"containerPort": 8000}]}}}})
    flipped = wait_until("traffic flipped to the new revision", lambda: (
        (w := route_weights(kube_api, ns, "chat-engine")) and first_rev not in {k for k, v in w.items() if v}
        and w), worker, timeout=180)
    [new_rev] = [name for name, weight in flipped.items() if weight == 100]
    assert new_rev != first_rev
    assert ready_revisions().get(new_rev) == 2, "traffic moved before the new revision was fully Ready"
    status = wait_until("status reports the new revision", lambda: (
        (obj := custom.get_namespaced_custom_object("ome.io", "v1beta1", ns, "inferenceservices", "chat"))
        .get("status", {}).get("components", {}).get("engine", {}).get("latestRolledoutRevision")
        == new_rev and obj["status"]), worker)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert status["components"]["engine"]["previousRolledoutRevision"] == first_rev
    # After the drain the old revision is gone.
    wait_until("the old revision drained", lambda: first_rev not in ready_revisions(), worker)





def test_a_service_is_deleted_when_its_ttl_passes(kube_api: client.ApiClient,
                                                  rollout_stack: tuple[str, ManagedProcess]) -> None:
    """spec.ttlSecondsAfterCreation with the worker and bridge as processes: served, then deleted by the
    worker once the deadline (from creationTimestamp) passes, with an Expired Event saying why."""
    ns, worker = rollout_stack
    spec = {"ttlSecondsAfterCreation": 8,
            "engine": {"minReplicas": 1, "runner": {"name": "engine", "image": "vllm/vllm-openai:v0.9",
                                                    "ports": [{"containerPort": 8000}]}}}
    created = create(kube_api, InferenceService, manifest(InferenceService, spec, name="shortlived"), ns)
    born = datetime.fromisoformat(created["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    wait_until("served before its ttl", lambda: route_weights(kube_api, ns, "shortlived-engine"), worker)
    custom, core = client.CustomObjectsApi(kube_api), client.CoreV1Api(kube_api)

    def gone() -> bool:
        try:
            custom.get_namespaced_custom_object("ome.io", "v1beta1", ns, "inferenceservices", "shortlived")
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_until("deleted once its ttl passed", gone, worker, timeout=60)
    [event] = [e for e in core.list_namespaced_event(ns).items
               if e.involved_object.uid == created["metadata"]["uid"] and e.reason == "Expired"]
    assert event.type == "Normal" and "ttlSecondsAfterCreation is 8s" in event.message
    assert event.first_timestamp >= born + timedelta(seconds=8), "deleted before its ttl"
