"""The ome.io/v1beta1 pydantic models: a full object round-trips with exact camelCase names, and the
seed's defaults are applied.

The example objects here are also what tests/test_crds_ome.py applies to the real apiserver.
"""

from __future__ import annotations

import copy
import typing
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from servingops.api_models.base import KubeResource
from servingops.api_models.crdgen import openapi_schema
from servingops.api_models.ome import (
    OME_KINDS,
    InferenceReplica,
    InferenceService,
    RolloutPolicy,
    WorkloadCluster,
)
from servingops.api_models.ome.enums import ComponentType, MigrationPhase, RolloutPhase
from servingops.api_models.ome.placement import ClusterSelectorRequirement
from servingops.api_models.ome.refs import ModelRef, ServingRuntimeRef
from tests.support.ome_objects import (
    columnar_status,
    condition,
    full_isvc_spec,
    full_isvc_status,
    replica_spec,
    replica_status,
    rollout_policy_spec,
    workload_cluster_spec,
)

pytestmark = pytest.mark.unit



















def full_isvc() -> dict[str, Any]:
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "llama", "namespace": "ns"}, "spec": full_isvc_spec(),
            "status": full_isvc_status()}












# ---------------------------------------------------------------------------------------------------


def test_full_inference_service_round_trips_with_exact_names() -> None:
    body = full_isvc()
    isvc = InferenceService.model_validate(body)
    assert isvc.to_api() == body
    assert isvc.spec is not None and isvc.status is not None
    assert isvc.spec.engine is not None and isvc.spec.engine.autoscaler is not None
    assert isvc.spec.engine.autoscaler.class_ == "HPA"
    assert isvc.spec.engine.host_ipc is True
    engine = isvc.status.components[ComponentType.ENGINE] if isvc.status.components else None
    assert engine is not None and engine.rollout_phase is RolloutPhase.CANARYING
    assert engine.canary is not None and engine.canary.observed_traffic_weight == 50
    assert engine.rest_url == "http://llama-engine.ns.example.com/v1"
    assert isvc.status.migration_history and isvc.status.migration_history[0].phase is MigrationPhase.COMPLETED


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        (InferenceReplica, {"spec": replica_spec(), "status": replica_status()}),
        (InferenceReplica, {"spec": replica_spec(), "status": columnar_status()}),
        (RolloutPolicy, {"spec": rollout_policy_spec(),
                         "status": {"observedGeneration": 2, "portableDigest": "rp1:abc", "attachedGroups": 3,
                                    "conditions": [condition()]}}),
        (WorkloadCluster, {"spec": workload_cluster_spec(), "status": {"conditions": [condition()]}}),
        (WorkloadCluster, {"spec": workload_cluster_spec(clusterProfileRef={"name": "gpu-west"})}),
    ],
)
def test_other_kinds_round_trip(kind: Any, body: dict[str, Any]) -> None:
    full = {"apiVersion": "ome.io/v1beta1", "kind": kind.crd.kind, "metadata": {"name": "x"}, **body}
    assert kind.model_validate(full).to_api() == full


def test_seed_defaults_are_applied() -> None:
    spec = {"model": {"name": "m"}, "runtime": {"name": "r"},
            "engine": {"autoscalerPolicyRef": {"name": "p"}},
            "scalingPolicy": {"proportional": {}},
            "rollout": {"groups": [{"components": ["engine"],
                                    "policyRef": {"name": "p", "progression": "blueGreen"}}]}}
    isvc = InferenceService.model_validate({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                                            "spec": spec, "status": {"modelStatus": {
                                                "modelRevisionStates": {}, "modelCopies": {}}}})
    out = isvc.to_api()
    assert out["spec"]["model"] == {"name": "m", "kind": "ClusterBaseModel", "apiGroup": "ome.io"}
    assert out["spec"]["runtime"] == {"name": "r", "kind": "ClusterServingRuntime", "apiGroup": "ome.io",
                                      "autoSync": True}
    assert out["spec"]["engine"]["autoscalerPolicyRef"]["kind"] == "AutoscalerPolicy"
    assert out["spec"]["scalingPolicy"] == {"mode": "Independent", "proportional": {"anchor": "engine"}}
    assert out["spec"]["rollout"]["groups"][0]["policyRef"]["kind"] == "RolloutPolicy"
    assert out["status"]["modelStatus"]["modelRevisionStates"] == {"activeModelState": "Pending",
                                                                    "targetModelState": ""}
    assert out["status"]["modelStatus"]["modelCopies"] == {"failedCopies": 0}
    wc = WorkloadCluster.model_validate({"apiVersion": "ome.io/v1beta1", "kind": "WorkloadCluster",
                                         "spec": {"clusterSource": {"kubeConfig": {"secretRef": {"name": "s"}}}}})
    assert wc.to_api()["spec"]["clusterSource"]["kubeConfig"]["key"] == "kubeconfig"
    assert ModelRef(name="m").kind == "ClusterBaseModel"
    assert ServingRuntimeRef(name="r").auto_sync is True


def test_defaults_are_in_the_crd_schema() -> None:
    spec = openapi_schema(InferenceService)["properties"]["spec"]["properties"]
    assert spec["model"]["properties"]["kind"]["default"] == "ClusterBaseModel"
    assert spec["runtime"]["properties"]["autoSync"]["default"] is True
    assert spec["scalingPolicy"]["properties"]["mode"]["default"] == "Independent"


def _models() -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp in found:
                return
            found.append(tp)
            for field in tp.model_fields.values():
                visit(field.annotation)
        for arg in typing.get_args(tp):
            visit(arg)

    for kind in OME_KINDS:
        visit(kind)
    return found


# Wire names that camel-casing the snake_case attribute would not produce, exactly as the seed spells them.
IRREGULAR_NAMES = {
    "class", "restURL", "hostPID", "hostIPC", "setHostnameAsFQDN", "minComputePerformanceTFLOPS",
    "targetedHTTPRoutes", "flavorUID", "clusterUID", "sourceUID", "reportUID", "planID", "targetID", "runID",
    "activeRunID", "appliedPlanID", "requestUUID", "compartmentID", "placementPlanID", "observedISVCGeneration",
    "pciVendorID", "deviceIDs", "memoryGB", "clockSpeedMHz", "memoryBandwidthGBps", "volcanoGPUType",
}


def test_wire_names_are_camel_case_and_irregular_ones_are_explicit() -> None:
    irregular = set()
    for model in _models():
        for name, field in model.model_fields.items():
            wire = field.alias or to_camel(name)
            assert wire[0].islower() and "_" not in wire, f"{model.__name__}.{name} -> {wire}"
            if wire != to_camel(name):
                irregular.add(wire)
            if name not in KubeResource.model_fields:
                assert field.description, f"{model.__name__}.{name} has no docstring"
    assert irregular == IRREGULAR_NAMES
    assert len(_models()) > 120


def test_python_side_validation_matches_the_schema() -> None:
    with pytest.raises(ValidationError):
        ClusterSelectorRequirement.model_validate({"key": "gpu", "operator": "Near"})
    with pytest.raises(ValidationError):
        InferenceService.model_validate({"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                                         "spec": {"rollout": {"pairingProtocol": "-bad"}}})
    body = copy.deepcopy(full_isvc())
    body["spec"]["rollout"]["groups"][0]["canary"]["steps"][0]["traffic"] = 101
    with pytest.raises(ValidationError):
        InferenceService.model_validate(body)


def test_kinds_scopes_and_subresources() -> None:
    scopes = {kind.crd.kind: kind.crd.scope for kind in OME_KINDS}
    assert scopes == {"InferenceService": "Namespaced", "RolloutPolicy": "Namespaced", "AutoscalerPolicy": "Namespaced",
                      "InferenceReplica": "Namespaced", "WorkloadCluster": "Cluster",
                      "BaseModel": "Namespaced", "ClusterBaseModel": "Cluster", "FineTunedWeight": "Cluster",
                      "ServingRuntime": "Namespaced", "ClusterServingRuntime": "Cluster",
                      "AcceleratorQuota": "Cluster", "AcceleratorClass": "Cluster", "TrafficMap": "Namespaced",
                      "BenchmarkJob": "Namespaced"}
    scale = InferenceReplica.crd.scale
    assert scale is not None and scale.spec_replicas_path == ".spec.replicas"
    assert scale.label_selector_path == ".status.labelSelector"
