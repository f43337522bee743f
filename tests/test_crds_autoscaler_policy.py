"""The real kube-apiserver enforces every admission rule of the AutoscalerPolicy CRD (seed 004) at apply
time, answering with the rule's own message; a good policy is accepted and its status is writable."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from servingops.api_models.ome import AutoscalerPolicy
from tests.crd_helpers import create, manifest, new_namespace, rejection, replace
from tests.support.autoscaler_policies import REJECTED, REJECTED_BY_SCHEMA, keda_policy

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "asp-crds")


def test_good_policies_are_accepted_defaulted_and_status_is_writable(kube_api: client.ApiClient, ns: str) -> None:
    created = create(kube_api, AutoscalerPolicy, manifest(AutoscalerPolicy, keda_policy()), ns)
    assert created["spec"]["enforcement"] == "Default"  # the CRD's default
    hpa = create(kube_api, AutoscalerPolicy, manifest(AutoscalerPolicy, {"class": "HPA"}), ns)
    assert hpa["spec"] == {"class": "HPA", "enforcement": "Default"}
    cron = {"class": "KEDA", "keda": {"triggers": [{"type": "cron", "metadata": {
        "timezone": "UTC", "start": "0 8 * * *", "end": "0 20 * * *", "desiredReplicas": "{{.MaxReplicas}}"}}]}}
    create(kube_api, AutoscalerPolicy, manifest(AutoscalerPolicy, cron), ns)
    created["status"] = {"observedGeneration": 1, "portableDigest": "ap1:" + "0" * 64, "attachedComponents": 2}
    written = replace(kube_api, AutoscalerPolicy, created, ns, status=True)
    assert written["status"]["attachedComponents"] == 2


@pytest.mark.parametrize(("case", "spec", "message"), REJECTED + REJECTED_BY_SCHEMA,
                         ids=[c[0] for c in REJECTED + REJECTED_BY_SCHEMA])
def test_bad_policies_are_rejected_with_the_rules_message(kube_api: client.ApiClient, ns: str, case: str,
                                                           spec: dict[str, Any], message: str) -> None:
    answer = rejection(lambda: create(kube_api, AutoscalerPolicy, manifest(AutoscalerPolicy, spec), ns))
    # Schema bounds name the field path under spec (the pydantic path with dots for indexes).
    expected = message if (case, spec, message) in REJECTED else "spec." + message.replace(".0.", "[0].")
    assert expected in answer, f"{case}: {answer}"


def test_an_edit_that_breaks_a_rule_is_rejected_and_the_stored_policy_stays(kube_api: client.ApiClient,
                                                                           ns: str) -> None:
    created = create(kube_api, AutoscalerPolicy, manifest(AutoscalerPolicy, keda_policy()), ns)
    created["spec"]["keda"]["triggers"][0]["metadata"]["serverAddress"] = "http://elsewhere:9090"
    assert "owned by the provider binding" in rejection(lambda: replace(kube_api, AutoscalerPolicy, created, ns))
    stored = client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
        "ome.io", "v1beta1", ns, "autoscalerpolicies", created["metadata"]["name"])
    assert "serverAddress" not in stored["spec"]["keda"]["triggers"][0]["metadata"]
