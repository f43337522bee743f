"""AutoscalerPolicy bodies shared by the rendering unit tests and the apiserver's admission tests: a good
KEDA policy and every body an admission rule refuses, with the message the CRD answers."""

from __future__ import annotations

from typing import Any

from servingops.api_models.ome import autoscaler_policy as api


def keda_policy(**trigger: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "type": "prometheus", "providerRef": {"name": "prom"}, "metricType": "AverageValue",
        "metadata": {"query": 'sum(vllm:num_requests_waiting{namespace="{{ .Namespace }}",'
                              'pod=~"{{.TargetName}}-.*"})', "threshold": "5", "ignoreNullValues": "false"}}
    base.update(trigger)
    fallback = {"failureThreshold": 3, "replicas": {"fromComponent": "MaxReplicas"}}
    return {"class": "KEDA", "keda": {"triggers": [base], "pollingInterval": 15, "cooldownPeriod": 120,
                                      "fallback": fallback}}


def with_trigger(**changes: Any) -> dict[str, Any]:
    spec = keda_policy()
    trigger = spec["keda"]["triggers"][0]
    for key, value in changes.items():
        if value is None:
            trigger.pop(key, None)
        else:
            trigger[key] = value
    return spec


def metadata_with(**changes: Any) -> dict[str, str]:
    metadata = dict(keda_policy()["keda"]["triggers"][0]["metadata"])
    for key, value in changes.items():
        if value is None:
            metadata.pop(key)
        else:
            metadata[key] = value
    return metadata


# Every admission rule the seed states, with the message the CRD answers (test_autoscaler_policy_rendering.py
# checks them in the renderer, test_crds_autoscaler_policy.py on the real apiserver).
REJECTED: list[tuple[str, dict[str, Any], str]] = [
    ("keda-without-keda", {"class": "KEDA"}, api.CLASS_RULE),
    ("keda-with-hpa", {**keda_policy(), "hpa": {}}, api.CLASS_RULE),
    ("hpa-with-keda", {**keda_policy(), "class": "HPA"}, api.CLASS_RULE),
    ("enforcement-required", {"class": "HPA", "enforcement": "Required"}, api.ENFORCEMENT_RULE),
    ("prometheus-without-provider", with_trigger(providerRef=None), api.PROVIDER_RULE),
    ("desired-replicas-with-value", with_trigger(queryReturnsDesiredReplicas=True, metricType="Value"),
     api.DESIRED_REPLICAS_RULE),
    ("desired-replicas-without-metric-type", with_trigger(queryReturnsDesiredReplicas=True, metricType=None),
     api.DESIRED_REPLICAS_RULE),
    ("server-address-in-metadata", with_trigger(metadata=metadata_with(serverAddress="http://evil")),
     api.OWNED_KEYS_RULE),
    ("auth-modes-in-metadata", with_trigger(metadata=metadata_with(authModes="bearer")), api.OWNED_KEYS_RULE),
    ("prometheus-without-ignore-null-values", with_trigger(metadata=metadata_with(ignoreNullValues=None)),
     api.IGNORE_NULL_RULE),
    ("unknown-variable", with_trigger(metadata=metadata_with(query="up{pod='{{ .PodName }}'}")), api.TEMPLATE_RULE),
    ("template-pipeline", with_trigger(metadata=metadata_with(query="{{ .Namespace | quote }}")), api.TEMPLATE_RULE),
    ("unclosed-template", with_trigger(metadata=metadata_with(query="{{ .Namespace")), api.TEMPLATE_RULE),
    ("fallback-both", {**keda_policy(), "keda": {**keda_policy()["keda"], "fallback": {
        "failureThreshold": 1, "replicas": {"value": 1, "fromComponent": "MinReplicas"}}}}, api.FALLBACK_RULE),
    ("fallback-neither", {**keda_policy(), "keda": {**keda_policy()["keda"], "fallback": {
        "failureThreshold": 1, "replicas": {}}}}, api.FALLBACK_RULE),
]

# Schema bounds (not CEL): the pydantic model refuses them as the CRD's schema does.
REJECTED_BY_SCHEMA: list[tuple[str, dict[str, Any], str]] = [
    ("class-external", {"class": "External"}, "class"),
    ("no-triggers", {"class": "KEDA", "keda": {"triggers": []}}, "keda.triggers"),
    ("empty-trigger-type", with_trigger(type=""), "keda.triggers.0.type"),
    ("empty-provider-name", with_trigger(providerRef={"name": ""}), "keda.triggers.0.providerRef.name"),
    ("fallback-threshold-zero", {**keda_policy(), "keda": {**keda_policy()["keda"], "fallback": {
        "failureThreshold": 0, "replicas": {"value": 1}}}}, "keda.fallback.failureThreshold"),
    ("fallback-negative-value", {**keda_policy(), "keda": {**keda_policy()["keda"], "fallback": {
        "failureThreshold": 1, "replicas": {"value": -1}}}}, "keda.fallback.replicas.value"),
]
