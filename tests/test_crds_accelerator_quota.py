"""The real kube-apiserver enforces the AcceleratorQuota CRD (seed 004): its field bounds and patterns,
and the seed's same-object "Validation:" rules as CEL. Each case applies an object to the apiserver of
the `kube_api` fixture and asserts it is accepted, or refused with the rule's message."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.api_models.ome import AcceleratorQuota
from tests.crd_helpers import create, manifest, rejection, replace

pytestmark = pytest.mark.integration

Spec = dict[str, Any]
GPU_BUDGET = {"resourceName": "nvidia.com/gpu", "resourceFlavor": "a100", "nominal": 8}


CREATED: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _remove_created(kube_api: client.ApiClient) -> Iterator[None]:
    """Cluster-scoped, and the roots among them would start capacity reports in any later module whose
    bridge follows AcceleratorQuota: removed when the module ends."""
    yield
    custom = client.CustomObjectsApi(kube_api)
    info = AcceleratorQuota.crd
    for name in CREATED:
        try:
            custom.delete_cluster_custom_object(info.group, info.version, info.plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _create(api: client.ApiClient, spec: Spec, name: str | None = None) -> dict[str, Any]:
    body = manifest(AcceleratorQuota, spec, name=name or f"aq-{uuid.uuid4().hex[:10]}")
    created = create(api, AcceleratorQuota, body)
    CREATED.append(body["metadata"]["name"])
    return created


def _refused(api: client.ApiClient, spec: Spec, name: str | None = None) -> str:
    return rejection(lambda: _create(api, spec, name))


VALID = {
    "root-cohort": {"role": "Cohort"},
    "cohort-guardrail": {"role": "Cohort", "parentRef": {"name": "root"},
                         "budgets": [{"resourceName": "nvidia.com/gpu", "resourceFlavor": "a100", "nominal": "64"}]},
    "leaf-default-policy": {"role": "ClusterQueue", "parentRef": {"name": "team-a"}, "budgets": [GPU_BUDGET]},
    "leaf-proportional": {"role": "ClusterQueue", "parentRef": {"name": "team-a"}, "priorityTier": "high",
                          "distribution": {"policy": "Proportional"},
                          "budgets": [{**GPU_BUDGET, "borrowingLimit": 4, "lendingLimit": "2"}]},
    "leaf-explicit": {"role": "ClusterQueue", "parentRef": {"name": "team-a"},
                      "distribution": {"policy": "Explicit"},
                      "budgets": [{**GPU_BUDGET, "perCluster": [{"cluster": "east", "nominal": 5},
                                                                {"cluster": "west", "nominal": 3}]}]},
    "budget-overrides-node-policy": {
        "role": "ClusterQueue", "parentRef": {"name": "team-a"}, "distribution": {"policy": "Proportional"},
        "budgets": [{**GPU_BUDGET, "policy": "Explicit", "perCluster": [{"cluster": "east", "nominal": 8}]},
                    {"resourceName": "google.com/tpu", "resourceFlavor": "v5e", "nominal": 16}]},
}


@pytest.mark.parametrize("spec", VALID.values(), ids=VALID.keys())
def test_valid_accelerator_quotas(kube_api: client.ApiClient, spec: Spec) -> None:
    assert _create(kube_api, spec)["spec"] == spec


def test_capacity_status_is_writable_and_reads_back_through_the_model(kube_api: client.ApiClient) -> None:
    created = _create(kube_api, {"role": "Cohort"})
    status = {"capacity": [{
        "resourceName": "nvidia.com/gpu", "resourceFlavor": "a100", "allocatable": 16, "highWaterMark": 24,
        "observedAt": "2026-12-01T07:00:00Z",
        "attribution": {"flavorUID": "0f6c3a0e-1", "nodeLabels": {"gpu": "a100"}, "flavorSetHash": "ab" * 32,
                        "complete": True},
        "perCluster": [{"cluster": "east", "clusterUID": "u1", "reportUID": "r1", "reportResourceVersion": "7",
                        "reportAvailable": True, "allocatable": 16, "highWaterMark": 24,
                        "observedAt": "2026-12-01T07:00:00Z"}]}],
        "budgets": [{"resourceName": "nvidia.com/gpu", "resourceFlavor": "a100", "nominal": 8, "admitted": 2,
                     "reserved": 3, "borrowed": 0, "perCluster": [{"cluster": "east", "nominal": 8}]}],
        "clusters": [{"cluster": "east", "appliedGeneration": 2, "materializedGeneration": 1, "message": "behind"}],
        "materialization": {"frozen": False, "lastAppliedGeneration": 1},
        "observedGeneration": 1, "parent": "", "sourceGeneration": 1}
    created["status"] = status
    written = replace(kube_api, AcceleratorQuota, created, status=True)
    assert written["status"] == status
    assert AcceleratorQuota.model_validate(written).to_api()["status"] == status


def test_printer_columns_show_role_parent_the_first_budget_ready_degraded_age() -> None:
    assert [c.name for c in AcceleratorQuota.crd.printer_columns if not c.priority] == [
        "Role", "Parent", "Flavor", "Nominal", "Admitted", "Ready", "Degraded", "Age"]
    assert [c.name for c in AcceleratorQuota.crd.printer_columns if c.priority] == ["Borrowed", "Resource", "Frozen"]
    assert AcceleratorQuota.crd.scope == "Cluster" and AcceleratorQuota.crd.plural == "acceleratorquotas"


INVALID: dict[str, tuple[Spec, str]] = {
    "cluster-queue-without-parent": (
        {"role": "ClusterQueue", "budgets": [GPU_BUDGET]}, "a ClusterQueue node must set parentRef"),
    "cohort-with-priority-tier": (
        {"role": "Cohort", "priorityTier": "high"}, "a Cohort node must not set priorityTier or distribution"),
    "cohort-with-distribution": (
        {"role": "Cohort", "distribution": {"policy": "Proportional"}},
        "a Cohort node must not set priorityTier or distribution"),
    "cohort-budget-with-borrowing": (
        {"role": "Cohort", "budgets": [{**GPU_BUDGET, "borrowingLimit": 1}]},
        "a Cohort node's budgets carry only resourceName, resourceFlavor, and nominal"),
    "cohort-budget-with-policy": (
        {"role": "Cohort", "budgets": [{**GPU_BUDGET, "policy": "Proportional"}]},
        "a Cohort node's budgets carry only resourceName, resourceFlavor, and nominal"),
    "cluster-queue-without-budget": (
        {"role": "ClusterQueue", "parentRef": {"name": "p"}}, "a ClusterQueue node must carry at least one budget"),
    "cluster-queue-empty-budgets": (
        {"role": "ClusterQueue", "parentRef": {"name": "p"}, "budgets": []},
        "a ClusterQueue node must carry at least one budget"),
    "explicit-node-policy-without-split": (
        {"role": "ClusterQueue", "parentRef": {"name": "p"}, "distribution": {"policy": "Explicit"},
         "budgets": [GPU_BUDGET]},
        "a budget whose effective distribution policy is Explicit must set perCluster"),
    "explicit-budget-policy-without-split": (
        {"role": "ClusterQueue", "parentRef": {"name": "p"}, "distribution": {"policy": "Proportional"},
         "budgets": [{**GPU_BUDGET, "policy": "Explicit"}]},
        "a budget whose effective distribution policy is Explicit must set perCluster"),
    "proportional-with-split": (
        {"role": "ClusterQueue", "parentRef": {"name": "p"}, "distribution": {"policy": "Proportional"},
         "budgets": [{**GPU_BUDGET, "perCluster": [{"cluster": "east", "nominal": 8}]}]},
        "a budget whose effective distribution policy is Proportional must not set perCluster"),
    "proportional-budget-override-with-split": (
        {"role": "ClusterQueue", "parentRef": {"name": "p"}, "distribution": {"policy": "Explicit"},
         "budgets": [{**GPU_BUDGET, "policy": "Proportional", "perCluster": [{"cluster": "e", "nominal": 8}]}]},
        "a budget whose effective distribution policy is Proportional must not set perCluster"),
    "unknown-role": ({"role": "Leaf"}, "spec.role"),
    "missing-role": ({}, "spec.role"),
    "bad-resource-name": (
        {"role": "Cohort", "budgets": [{**GPU_BUDGET, "resourceName": "Nvidia GPU"}]}, "resourceName"),
    "bad-flavor-name": ({"role": "Cohort", "budgets": [{**GPU_BUDGET, "resourceFlavor": "A100"}]}, "resourceFlavor"),
    "budget-without-nominal": (
        {"role": "Cohort", "budgets": [{"resourceName": "nvidia.com/gpu", "resourceFlavor": "a100"}]}, "nominal"),
    "bad-nominal": ({"role": "Cohort", "budgets": [{**GPU_BUDGET, "nominal": "eight"}]}, "nominal"),
    "too-many-budgets": (
        {"role": "Cohort", "budgets": [{**GPU_BUDGET, "resourceFlavor": f"f{i}"} for i in range(17)]}, "budgets"),
    "long-priority-tier": (
        {"role": "ClusterQueue", "parentRef": {"name": "p"}, "priorityTier": "p" * 64, "budgets": [GPU_BUDGET]},
        "priorityTier"),
    "bad-parent-name": ({"role": "ClusterQueue", "parentRef": {"name": "Root"}, "budgets": [GPU_BUDGET]},
                        "parentRef.name"),
    "long-cluster-share": (
        {"role": "ClusterQueue", "parentRef": {"name": "p"}, "distribution": {"policy": "Explicit"},
         "budgets": [{**GPU_BUDGET, "perCluster": [{"cluster": "c" * 254, "nominal": 8}]}]}, "cluster"),
    "bad-policy": ({"role": "ClusterQueue", "parentRef": {"name": "p"}, "distribution": {"policy": "Even"},
                    "budgets": [GPU_BUDGET]}, "policy"),
}


@pytest.mark.parametrize(("spec", "message"), INVALID.values(), ids=INVALID.keys())
def test_invalid_accelerator_quotas_are_refused(kube_api: client.ApiClient, spec: Spec, message: str) -> None:
    assert message in _refused(kube_api, spec)


def test_a_name_longer_than_63_characters_is_refused(kube_api: client.ApiClient) -> None:
    assert _create(kube_api, {"role": "Cohort"}, name="a" * 63)["metadata"]["name"] == "a" * 63
    refused = _refused(kube_api, {"role": "Cohort"}, name="a" * 64)
    assert "an AcceleratorQuota name may not exceed 63 characters" in refused


def test_rules_hold_on_update_too(kube_api: client.ApiClient) -> None:
    created = _create(kube_api, {"role": "ClusterQueue", "parentRef": {"name": "p"}, "budgets": [GPU_BUDGET]})
    del created["spec"]["parentRef"]
    assert "a ClusterQueue node must set parentRef" in rejection(
        lambda: replace(kube_api, AcceleratorQuota, created))
