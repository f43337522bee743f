"""AutoscalerPolicy rendering (rendering/autoscaler_policy.py): the template and a component's variables
in, a verbatim ComponentAutoscaler out; the portable digest; every admission rule checked again before
rendering, with the CRD's own message."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from servingops.api_models.ome import autoscaler_policy as api
from servingops.api_models.ome.autoscaler_policy import AutoscalerPolicySpec
from servingops.api_models.ome.autoscaling import AutoscalerPolicyRef, ComponentAutoscaler, ShadowedAutoscalerPolicy
from servingops.rendering import autoscaler_policy as ap
from tests.support.autoscaler_policies import REJECTED, REJECTED_BY_SCHEMA, keda_policy, metadata_with, with_trigger

pytestmark = pytest.mark.unit

VARS = ap.TemplateVariables(namespace="team-a", isvc_name="llama", component="engine", min_replicas=2,
                            max_replicas=6, target_name="llama-engine")
PROVIDERS = {"prom": ap.ProviderBinding(server_address="http://prometheus.monitoring:9090")}


def test_keda_template_renders_variables_provider_and_fallback() -> None:
    block = ap.render(ap.parse(keda_policy()), VARS, PROVIDERS)
    out = block.to_api()
    trigger = out["keda"]["triggers"][0]
    assert trigger == {"type": "prometheus", "metricType": "AverageValue", "metadata": {
        "query": 'sum(vllm:num_requests_waiting{namespace="team-a",pod=~"llama-engine-.*"})', "threshold": "5",
        "ignoreNullValues": "false", "serverAddress": "http://prometheus.monitoring:9090"}}
    assert out["class"] == "KEDA"
    assert out["keda"]["fallback"] == {"failureThreshold": 3, "replicas": 6}
    assert (out["keda"]["pollingInterval"], out["keda"]["cooldownPeriod"]) == (15, 120)


def test_every_variable_substitutes() -> None:
    text = " ".join("{{ ." + name + " }}" for name in api.TEMPLATE_VARIABLES)
    assert ap.substitute(text, VARS) == "team-a llama engine 2 6 llama-engine"


def test_fallback_literal_and_min_replicas() -> None:
    spec = keda_policy()
    spec["keda"]["fallback"]["replicas"] = {"value": 0}
    assert ap.render(ap.parse(spec), VARS, PROVIDERS).to_api()["keda"]["fallback"]["replicas"] == 0
    spec["keda"]["fallback"]["replicas"] = {"fromComponent": "MinReplicas"}
    assert ap.render(ap.parse(spec), VARS, PROVIDERS).to_api()["keda"]["fallback"]["replicas"] == 2


def test_hpa_is_verbatim_and_absent_hpa_renders_the_bare_class() -> None:
    metrics = [{"type": "Pods", "pods": {"metric": {"name": "vllm_waiting"},
                                         "target": {"type": "AverageValue", "averageValue": "5"}}}]
    block = ap.render(ap.parse({"class": "HPA", "hpa": {"metrics": metrics}}), VARS, PROVIDERS)
    assert block.to_api() == {"class": "HPA", "hpa": {"metrics": metrics}}
    assert ap.render(ap.parse({"class": "HPA"}), VARS, PROVIDERS).to_api() == {"class": "HPA"}


def test_provider_headers_become_custom_headers() -> None:
    providers = {"prom": ap.ProviderBinding(server_address="http://p:9090", headers=(("X-Scope-OrgID", "t1"),))}
    trigger = ap.render(ap.parse(keda_policy()), VARS, providers).to_api()["keda"]["triggers"][0]
    assert trigger["metadata"]["customHeaders"] == "X-Scope-OrgID=t1"


@pytest.mark.parametrize(("providers", "reason"), [
    ({}, ap.PROVIDER_UNBOUND),
    ({"prom": ap.ProviderBinding(server_address="http://p", has_credentials=True)}, ap.PROVIDER_UNSUPPORTED),
])
def test_provider_binding_problems(providers: dict[str, ap.ProviderBinding], reason: str) -> None:
    with pytest.raises(ap.PolicyProblem) as caught:
        ap.render(ap.parse(keda_policy()), VARS, providers)
    assert caught.value.reason == reason and "prom" in caught.value.message


def test_idle_replica_count_must_be_below_the_components_min() -> None:
    spec = keda_policy()
    spec["keda"]["idleReplicaCount"] = 2
    with pytest.raises(ap.PolicyProblem) as caught:
        ap.render(ap.parse(spec), VARS, PROVIDERS)
    assert caught.value.reason == ap.BOUNDS_CONFLICT
    spec["keda"]["idleReplicaCount"] = 1
    assert ap.render(ap.parse(spec), VARS, PROVIDERS).to_api()["keda"]["idleReplicaCount"] == 1


def test_portable_digest_is_canonical_and_applies_defaults() -> None:
    spec = keda_policy()
    reordered = {"keda": copy.deepcopy(spec["keda"]), "class": "KEDA"}
    explicit = {**spec, "enforcement": "Default"}
    digests = {ap.portable_digest(AutoscalerPolicySpec.model_validate(s)) for s in (spec, reordered, explicit)}
    assert len(digests) == 1
    digest = digests.pop()
    assert re.fullmatch(r"ap1:[0-9a-f]{64}", digest)
    spec["keda"]["pollingInterval"] = 30
    assert ap.portable_digest(AutoscalerPolicySpec.model_validate(spec)) != digest


def test_resolved_digest_moves_with_bounds_and_endpoint() -> None:
    block = ap.render(ap.parse(keda_policy()), VARS, PROVIDERS)
    other = ap.render(ap.parse(keda_policy()), VARS, {"prom": ap.ProviderBinding(server_address="http://other")})
    assert ap.resolved_digest(block, 2, 6) != ap.resolved_digest(block, 1, 6)
    assert ap.resolved_digest(block, 2, 6) != ap.resolved_digest(other, 2, 6)


@pytest.mark.parametrize(("case", "spec", "message"), REJECTED, ids=[c[0] for c in REJECTED])
def test_admission_rules_refuse_before_rendering(case: str, spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ap.PolicyProblem) as caught:
        ap.parse(spec)
    assert caught.value.reason == ap.POLICY_INVALID
    assert message in caught.value.message, case


@pytest.mark.parametrize(("case", "spec", "where"), REJECTED_BY_SCHEMA, ids=[c[0] for c in REJECTED_BY_SCHEMA])
def test_schema_bounds_refuse(case: str, spec: dict[str, Any], where: str) -> None:
    with pytest.raises(ap.PolicyProblem) as caught:
        ap.parse(spec)
    assert where in caught.value.message, case


def test_non_network_trigger_needs_no_provider_and_templates_may_be_absent() -> None:
    spec = {"class": "KEDA", "keda": {"triggers": [{"type": "cron", "metadata": {
        "timezone": "UTC", "start": "0 8 * * *", "end": "0 20 * * *", "desiredReplicas": "{{.MaxReplicas}}"}}]}}
    trigger = ap.render(ap.parse(spec), VARS, {}).to_api()["keda"]["triggers"][0]
    assert trigger == {"type": "cron", "metadata": {"timezone": "UTC", "start": "0 8 * * *", "end": "0 20 * * *",
                                                    "desiredReplicas": "6"}}


def test_single_braces_are_plain_text() -> None:
    spec = with_trigger(metadata=metadata_with(query='sum(rate(x{a="b"}[1m])) {'))
    assert ap.render(ap.parse(spec), VARS, PROVIDERS).to_api()["keda"]["triggers"][0]["metadata"]["query"] == (
        'sum(rate(x{a="b"}[1m])) {')


def test_the_crd_carries_the_same_rules_and_pattern() -> None:
    """The CEL the apiserver runs is built from the same constants the renderer checks."""
    from servingops.api_models import crdgen
    text = str(crdgen.crd_manifest(api.AutoscalerPolicy))
    for message in (api.CLASS_RULE, api.ENFORCEMENT_RULE, api.PROVIDER_RULE, api.DESIRED_REPLICAS_RULE,
                    api.OWNED_KEYS_RULE, api.IGNORE_NULL_RULE, api.TEMPLATE_RULE, api.FALLBACK_RULE):
        assert message in text


def test_a_shadowed_ref_previews_what_the_policy_would_render() -> None:
    inline = ComponentAutoscaler.model_validate({"class": "HPA"})
    ref = AutoscalerPolicyRef(name="queue-keda")
    policy = {"metadata": {"generation": 3}, "spec": keda_policy()}
    preview = ap.shadow(inline, ref, policy, VARS, PROVIDERS)
    rendered = ap.resolve(None, ref, policy, VARS, PROVIDERS)
    assert rendered.policy is not None and preview is not None
    assert (preview.name, preview.portable_digest, preview.would_render_digest) == (
        "queue-keda", rendered.policy.portable_digest, rendered.policy.resolved_digest)
    # Nothing shadowed: no inline block (the ref renders) or no ref.
    assert ap.shadow(None, ref, policy, VARS, PROVIDERS) is None
    assert ap.shadow(inline, None, policy, VARS, PROVIDERS) is None
    # What cannot be previewed is left out, never raised: the inline block's scaler does not depend on it.
    assert ap.shadow(inline, ref, None, VARS, PROVIDERS) == ShadowedAutoscalerPolicy(name="queue-keda")
    unbound = ap.shadow(inline, ref, policy, VARS, {})
    assert unbound is not None and unbound.portable_digest == preview.portable_digest
    assert unbound.would_render_digest is None
    broken = {"spec": with_trigger(providerRef=None)}  # a prometheus trigger without providerRef: invalid
    assert ap.shadow(inline, ref, broken, VARS, PROVIDERS) == ShadowedAutoscalerPolicy(name="queue-keda")


def test_a_credentialed_provider_renders_bearer_auth_by_reference_only() -> None:
    providers = {"prom": ap.ProviderBinding(server_address="http://p:9090", has_credentials=True,
                                            auth_secret="mimir-reader", auth_key="token")}
    rendered = ap.render(ap.parse(keda_policy()), VARS, providers)
    trigger = rendered.to_api()["keda"]["triggers"][0]
    name = ap.trigger_authentication_name("prom")
    assert trigger["metadata"]["authModes"] == "bearer" and trigger["metadata"]["serverAddress"] == "http://p:9090"
    assert trigger["authenticationRef"] == {"name": name, "kind": "ClusterTriggerAuthentication"}
    [auth] = ap.trigger_authentications(rendered, providers)
    assert auth["kind"] == "ClusterTriggerAuthentication" and auth["metadata"]["name"] == name
    assert auth["spec"] == {"secretTargetRef": [{"parameter": "bearerToken", "name": "mimir-reader", "key": "token"}]}
    # A provider without credentials needs none; names differ per provider and are DNS names.
    assert ap.trigger_authentications(ap.render(ap.parse(keda_policy()), VARS, {
        "prom": ap.ProviderBinding(server_address="http://p")}), providers) == []
    assert ap.trigger_authentication_name("Prom_A") != ap.trigger_authentication_name("prom-a")
    assert all(len(ap.trigger_authentication_name(p)) <= 63 and ap.trigger_authentication_name(p).islower()
               for p in ("Prom_A", "x" * 200))


def test_a_credentialed_provider_on_a_trigger_without_bearer_support_is_unsupported() -> None:
    providers = {"prom": ap.ProviderBinding(server_address="http://p", has_credentials=True, auth_secret="s")}
    with pytest.raises(ap.PolicyProblem) as caught:
        ap.render(ap.parse(keda_policy(type="metrics-api")), VARS, providers)
    assert caught.value.reason == ap.PROVIDER_UNSUPPORTED and "metrics-api" in caught.value.message
