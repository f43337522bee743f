"""serving.ensure_autoscaler against the real apiserver (autoscaling/v2 and KEDA's own ScaledObject CRD,
copied from its pinned Go module), and the projection's replicas-vs-autoscaler rule
(activities/serving/omenative.py), plus the pure rules both rest on."""

from __future__ import annotations

import uuid
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from servingops.activities.serving.activities import ServingActivities
from servingops.activities.serving.autoscaler import (
    AutoscalerActivities,
    AutoscalerObservation,
    EnsureAutoscalerInput,
    autoscaler_status,
    scaled_object_name,
)
from servingops.activities.serving.omenative import replica_name
from servingops.activities.serving.types import EnsureRevisionInput, ObserveInput, RevisionKey, ServiceObservation
from servingops.api_models.errors import ErrorType
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome.autoscaling import ComponentAutoscaler
from servingops.api_models.ome.components import EngineSpec
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.refs import ObjectRef
from servingops.rendering.scaling import bounds, owns_replicas, projected_count
from tests.crd_helpers import create, manifest, new_namespace

ENGINE = ComponentType.ENGINE
PROMETHEUS_TRIGGER = {"type": "prometheus", "metadata": {
    "serverAddress": "http://prometheus.monitoring:9090", "query": "sum(rate(requests_total[1m]))",
    "threshold": "10"}}
EXTERNAL_METRIC = {"type": "External", "external": {
    "metric": {"name": "queue_depth", "selector": {"matchLabels": {"queue": "llama"}}},
    "target": {"type": "AverageValue", "averageValue": "2"}}}


def _engine(autoscaler: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    engine: dict[str, Any] = {"runner": {"name": "engine", "image": "registry.invalid/engine:v1",
                                         "ports": [{"containerPort": 8000}]}, "minReplicas": 2, "maxReplicas": 5}
    if autoscaler is not None:
        engine["autoscaler"] = autoscaler
    return {**engine, **extra}


def _run(fn: Any, *args: Any) -> Any:
    return ActivityEnvironment().run(fn, *args)


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "autoscale")


@pytest.fixture
def acts(kube_api: client.ApiClient) -> AutoscalerActivities:
    return AutoscalerActivities(kube_api)


def _isvc(kube_api: client.ApiClient, ns: str, engine: dict[str, Any], mode: str = "OMENative") -> ObjectRef:
    body = manifest(InferenceService, {"deploymentMode": mode, "engine": engine}, name=f"as-{uuid.uuid4().hex[:6]}")
    obj = create(kube_api, InferenceService, body, ns)
    return ObjectRef.of(InferenceService, obj["metadata"]["name"], ns, obj["metadata"]["uid"])


def _set_engine(kube_api: client.ApiClient, ref: ObjectRef, engine: dict[str, Any]) -> None:
    assert ref.namespace
    custom = client.CustomObjectsApi(kube_api)
    live = custom.get_namespaced_custom_object(ref.group, ref.version, ref.namespace, ref.plural, ref.name)
    live["spec"]["engine"] = engine
    custom.replace_namespaced_custom_object(ref.group, ref.version, ref.namespace, ref.plural, ref.name, live)


def _get(kube_api: client.ApiClient, ns: str, group: str, version: str, plural: str,
         name: str) -> dict[str, Any] | None:
    try:
        return cast(dict[str, Any], client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
            group, version, ns, plural, name))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _hpa(kube_api: client.ApiClient, ref: ObjectRef) -> dict[str, Any] | None:
    assert ref.namespace
    return _get(kube_api, ref.namespace, "autoscaling", "v2", "horizontalpodautoscalers",
                replica_name(ref.name, ENGINE))


def _scaled_object(kube_api: client.ApiClient, ref: ObjectRef) -> dict[str, Any] | None:
    assert ref.namespace
    return _get(kube_api, ref.namespace, "keda.sh", "v1alpha1", "scaledobjects",
                scaled_object_name(replica_name(ref.name, ENGINE)))


def _ensure(acts: AutoscalerActivities, ref: ObjectRef) -> dict[str, object] | None:
    seen: AutoscalerObservation = _run(acts.ensure, EnsureAutoscalerInput(isvc=ref, component=ENGINE))
    return seen.status


@pytest.mark.integration
def test_hpa_then_keda_then_external_then_none(kube_api: client.ApiClient, ns: str,
                                               acts: AutoscalerActivities) -> None:
    ref = _isvc(kube_api, ns, _engine({"class": "HPA"}))
    status = _ensure(acts, ref)
    assert status == {"class": "HPA", "managedBy": "ome", "specSource": "isvc", "currentReplicas": 0,
                      "desiredReplicas": 0}
    hpa = _hpa(kube_api, ref)
    assert hpa is not None
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                                             "name": f"{ref.name}-engine"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)
    assert hpa["spec"]["metrics"] == [{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 80}}}], "upstream's default: CPU 80%"
    [owner] = hpa["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("InferenceService", ref.uid, True)
    assert hpa["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "servingops"
    assert hpa["metadata"]["labels"]["app.kubernetes.io/component"] == "engine"
    # Idempotent: a second apply of the same object changes nothing.
    _ensure(acts, ref)
    assert (_hpa(kube_api, ref) or {})["metadata"]["resourceVersion"] == hpa["metadata"]["resourceVersion"]

    behavior = {"scaleDown": {"stabilizationWindowSeconds": 0}}
    _set_engine(kube_api, ref, _engine({"class": "HPA", "hpa": {"metrics": [EXTERNAL_METRIC], "behavior": behavior}}))
    _ensure(acts, ref)
    hpa = _hpa(kube_api, ref) or {}
    assert hpa["spec"]["metrics"] == [EXTERNAL_METRIC], "metrics verbatim"
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 0

    keda = {"class": "KEDA", "keda": {"triggers": [PROMETHEUS_TRIGGER], "pollingInterval": 5, "cooldownPeriod": 30}}
    _set_engine(kube_api, ref, _engine(keda))
    status = _ensure(acts, ref)
    assert status is not None and (status["class"], status["managedBy"]) == ("KEDA", "ome")
    assert _hpa(kube_api, ref) is None, "HPA and KEDA never drive one target together"
    scaled = _scaled_object(kube_api, ref)
    assert scaled is not None, "accepted by KEDA's own CRD schema"
    assert scaled["metadata"]["name"] == f"scaledobject-{ref.name}-engine"
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                                                "name": f"{ref.name}-engine"}
    assert scaled["spec"]["triggers"] == [PROMETHEUS_TRIGGER], "triggers verbatim"
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (2, 5)
    assert (scaled["spec"]["pollingInterval"], scaled["spec"]["cooldownPeriod"]) == (5, 30)
    assert scaled["metadata"]["ownerReferences"][0]["uid"] == ref.uid

    _set_engine(kube_api, ref, _engine({"class": "External"}))
    assert _ensure(acts, ref) == {"class": "External", "managedBy": "external", "specSource": "isvc"}
    assert _scaled_object(kube_api, ref) is None and _hpa(kube_api, ref) is None

    _set_engine(kube_api, ref, _engine({"class": "HPA"}))
    _ensure(acts, ref)
    assert _hpa(kube_api, ref) is not None
    _set_engine(kube_api, ref, _engine(None))
    assert _ensure(acts, ref) == {"managedBy": "none"}
    assert _hpa(kube_api, ref) is None, "removing the autoscaler deletes ours"


@pytest.mark.integration
def test_a_scaler_that_is_not_ours_is_never_touched(kube_api: client.ApiClient, ns: str,
                                                    acts: AutoscalerActivities) -> None:
    ref = _isvc(kube_api, ns, _engine({"class": "External"}))
    foreign = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": replica_name(ref.name, ENGINE)},
               "spec": {"scaleTargetRef": {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                                           "name": replica_name(ref.name, ENGINE)},
                        "minReplicas": 1, "maxReplicas": 9, "metrics": [EXTERNAL_METRIC]}}
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        "autoscaling", "v2", ns, "horizontalpodautoscalers", foreign)
    assert _ensure(acts, ref) == {"class": "External", "managedBy": "external", "specSource": "isvc"}
    assert (_hpa(kube_api, ref) or {})["spec"]["maxReplicas"] == 9, "an External scaler is someone else's"
    _set_engine(kube_api, ref, _engine({"class": "HPA"}))
    with pytest.raises(ApplicationError) as refused:
        _ensure(acts, ref)
    assert refused.value.type == ErrorType.NAME_IN_USE.value and refused.value.non_retryable
    assert (_hpa(kube_api, ref) or {})["spec"]["maxReplicas"] == 9, "never applied over"


@pytest.mark.integration
def test_a_raw_deployment_component_gets_no_scaler(kube_api: client.ApiClient, ns: str,
                                                   acts: AutoscalerActivities) -> None:
    ref = _isvc(kube_api, ns, _engine({"class": "HPA"}), mode="RawDeployment")
    assert _ensure(acts, ref) is None
    assert _hpa(kube_api, ref) is None


def _replica(kube_api: client.ApiClient, ref: ObjectRef) -> dict[str, Any]:
    assert ref.namespace
    found = _get(kube_api, ref.namespace, "ome.io", "v1beta1", "inferencereplicas", replica_name(ref.name, ENGINE))
    assert found is not None
    return found


def _native(kube_api: client.ApiClient, ref: ObjectRef, replicas: int) -> None:
    serving = ServingActivities(kube_api)
    seen: ServiceObservation = _run(serving.observe, ObserveInput(isvc=ref))
    [engine] = seen.components
    _run(serving.ensure_revision, EnsureRevisionInput(
        key=RevisionKey(isvc=ref, component=ENGINE, revision=engine.desired_revision), replicas=replicas))


def _scale(kube_api: client.ApiClient, ref: ObjectRef, replicas: int) -> None:
    assert ref.namespace
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object_scale(
        "ome.io", "v1beta1", ref.namespace, "inferencereplicas", replica_name(ref.name, ENGINE),
        {"spec": {"replicas": replicas}})


@pytest.mark.integration
def test_the_projection_leaves_replicas_to_the_autoscaler(kube_api: client.ApiClient, ns: str) -> None:
    block = {"class": "HPA", "hpa": {"metrics": [EXTERNAL_METRIC],
                                     "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}}
    ref = _isvc(kube_api, ns, _engine(block))
    _native(kube_api, ref, 2)
    replica = _replica(kube_api, ref)
    assert replica["spec"]["replicas"] == 2, "minReplicas at create"
    assert replica["spec"]["autoscaler"] == block, "the resolved block, as the seed has the service write it"
    _scale(kube_api, ref, 4)  # what the HPA does through /scale
    _native(kube_api, ref, 2)
    replica = _replica(kube_api, ref)
    assert replica["spec"]["replicas"] == 4, "the autoscaler owns the count"
    assert replica["spec"]["pacing"]["partition"] == 0, "the whole planned count is the whole scaled count"
    _native(kube_api, ref, 1)  # a canary step: half the planned count
    assert _replica(kube_api, ref)["spec"]["pacing"]["partition"] == 2, "the same share of the scaled count"

    _set_engine(kube_api, ref, _engine({"class": "HPA"}))
    _native(kube_api, ref, 2)
    assert _replica(kube_api, ref)["spec"]["autoscaler"] == {"class": "HPA"}, "the block is replaced whole"

    _set_engine(kube_api, ref, _engine(None))
    _native(kube_api, ref, 2)
    replica = _replica(kube_api, ref)
    assert replica["spec"]["replicas"] == 2, "no autoscaler: the service writes minReplicas again"
    assert "autoscaler" not in replica["spec"]


@pytest.mark.integration
def test_the_scaler_keeps_the_replicas_block_and_gives_the_count_back(kube_api: client.ApiClient, ns: str,
                                                                       acts: AutoscalerActivities) -> None:
    """An autoscaler edit moves no revision's capacity, so the projection does not write the replica:
    ensure_autoscaler (every pass) keeps its block, and hands the count back once none owns it."""
    ref = _isvc(kube_api, ns, _engine({"class": "HPA"}))
    _native(kube_api, ref, 2)
    _scale(kube_api, ref, 4)
    _set_engine(kube_api, ref, _engine({"class": "External"}))
    _ensure(acts, ref)
    replica = _replica(kube_api, ref)
    assert replica["spec"]["autoscaler"] == {"class": "External"}
    assert replica["spec"]["replicas"] == 4, "an External scaler still owns the count"
    _set_engine(kube_api, ref, _engine(None))
    _ensure(acts, ref)
    replica = _replica(kube_api, ref)
    assert "autoscaler" not in replica["spec"]
    assert replica["spec"]["replicas"] == 2, "no autoscaler any more: minReplicas"
    _scale(kube_api, ref, 3)  # kubectl scale without an autoscaler: not undone by a pass
    _ensure(acts, ref)
    assert _replica(kube_api, ref)["spec"]["replicas"] == 3


@pytest.mark.unit
def test_rules() -> None:
    assert bounds(EngineSpec(min_replicas=None, max_replicas=None)) == (1, 1)
    assert bounds(EngineSpec(min_replicas=0, max_replicas=3)) == (1, 3)
    assert bounds(EngineSpec(min_replicas=4, max_replicas=2)) == (4, 4), "max is at least min"
    hpa, external, none = (ComponentAutoscaler.model_validate({"class": c}) for c in ("HPA", "External", "None"))
    assert owns_replicas(hpa) and owns_replicas(external)
    assert not owns_replicas(none) and not owns_replicas(None)
    assert projected_count(None, 2, 2) == (2, 2), "nothing stored: the planned count"
    assert projected_count(6, 2, 2) == (6, 6)
    assert projected_count(6, 4, 1) == (6, 2), "a quarter of 6, rounded up"
    assert projected_count(5, 2, 0) == (5, 0)
    assert scaled_object_name("x" * 60) == "scaledobject-" + "x" * 50
    live = {"status": {"currentReplicas": 3, "desiredReplicas": 4, "lastScaleTime": "2026-01-01T00:00:00Z",
                       "conditions": [{"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale",
                                       "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    assert autoscaler_status(hpa, live) == {
        "class": "HPA", "managedBy": "ome", "specSource": "isvc", "currentReplicas": 3, "desiredReplicas": 4,
        "lastScaleTime": "2026-01-01T00:00:00Z",
        "conditions": [{"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale", "message": "ok",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    bad = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "not a reason!",
                                      "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    assert "conditions" not in autoscaler_status(hpa, bad), "a condition metav1 cannot carry is left out"
