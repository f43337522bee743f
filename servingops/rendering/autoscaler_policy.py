"""An AutoscalerPolicy rendered for one component (pure: no I/O, no Temporal).

The policy's template plus the consuming component's variables and the operator's metric-provider
bindings give a verbatim ComponentAutoscaler, which the existing scaler dispatch applies
(activities/serving/autoscaler.py). What comes out, and where the seed is silent what was chosen:

- which block wins: the component's inline `autoscaler` always outranks its `autoscalerPolicyRef`
  (seed: the coexistence is the preview/rollback mechanism); no inline block and no ref: no scaler;
- portableDigest: "ap1:" + sha256 of the canonical JSON of the spec after defaulting (RolloutPolicy's
  "rp1:" recipe), so equal specs digest equally on every cluster;
- a trigger's metadata: each `{{ .Var }}` replaced by its value; the provider binding adds
  `serverAddress` and, for headers, prometheus' `customHeaders` (`k=v,k2=v2`);
- fallback replicas: the literal, or the component's effective MinReplicas / MaxReplicas (at least 1,
  max at least min: scaling.bounds);
- every admission rule is checked again before rendering (a policy stored before a rule existed, or
  written around the CRD, renders nothing); what only the component can decide fails here too:
  an unbound provider name, a provider with credentials (a KEDA TriggerAuthentication is not rendered
  in this release), idleReplicaCount not below the component's min.
A failure is a PolicyProblem (reason, message): the caller keeps the last good scaler (fail closed).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from servingops.api_models.canonical import canonical_json
from servingops.api_models.ome import autoscaler_policy as policy_api
from servingops.api_models.ome.autoscaler_policy import AutoscalerPolicySpec, KedaTriggerTemplate
from servingops.api_models.ome.autoscaling import (
    AutoscalerPolicyProvenance,
    AutoscalerPolicyRef,
    ComponentAutoscaler,
    ShadowedAutoscalerPolicy,
)
from servingops.api_models.ome.enums import AutoscalerClass, ComponentBoundsField, PolicyEnforcement

DIGEST_PREFIX = "ap1:"
SPEC_SOURCE_POLICY, SPEC_SOURCE_ISVC = "policy", "isvc"

# Reasons of the service's AutoscalerResolved condition when a policy does not render.
POLICY_NOT_FOUND = "PolicyNotFound"
POLICY_INVALID = "PolicyInvalid"
PROVIDER_UNBOUND = "ProviderUnbound"
PROVIDER_UNSUPPORTED = "ProviderUnsupported"
BOUNDS_CONFLICT = "BoundsConflict"

_REFERENCE = re.compile(policy_api.TEMPLATE_REFERENCE)
_VALUE = re.compile(policy_api.TEMPLATED_VALUE)


class PolicyProblem(Exception):
    """The policy does not render for this component; `reason` is a CamelCase condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class ProviderBinding:
    """What the operator's metricProviders entry binds a provider name to (operator_config.MetricProvider)."""

    server_address: str
    headers: tuple[tuple[str, str], ...] = ()
    has_credentials: bool = False
    auth_secret: str | None = None
    """The Secret (in the controller namespace) holding the provider's bearer token: its name only. The
    value is never read here; KEDA reads it through a ClusterTriggerAuthentication (trigger_authentication)."""
    auth_key: str = "token"


@dataclass(frozen=True)
class TemplateVariables:
    """The closed, controller-derived variable set (policy_api.TEMPLATE_VARIABLES), for one component."""

    namespace: str
    isvc_name: str
    component: str
    min_replicas: int
    max_replicas: int
    target_name: str

    def as_template(self) -> dict[str, str]:
        values = {"Namespace": self.namespace, "ISVCName": self.isvc_name, "Component": self.component,
                  "MinReplicas": str(self.min_replicas), "MaxReplicas": str(self.max_replicas),
                  "TargetName": self.target_name}
        assert tuple(values) == policy_api.TEMPLATE_VARIABLES  # one list of names, here and in the CRD
        return values


def portable_digest(spec: AutoscalerPolicySpec) -> str:
    return DIGEST_PREFIX + hashlib.sha256(canonical_json(spec.to_api())).hexdigest()


def parse(spec: Mapping[str, Any] | None) -> AutoscalerPolicySpec:
    """The policy body, checked against every admission rule of the CRD; PolicyProblem(PolicyInvalid)
    naming the first rule it breaks."""
    if not spec:
        raise PolicyProblem(POLICY_INVALID, "the policy has no spec")
    try:
        body = AutoscalerPolicySpec.model_validate(spec)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise PolicyProblem(POLICY_INVALID, f"spec does not parse: {problems}") from exc
    broken = admission_problem(body)
    if broken is not None:
        raise PolicyProblem(POLICY_INVALID, broken)
    return body


def admission_problem(body: AutoscalerPolicySpec) -> str | None:
    """The message of the first CEL rule (api_models/ome/autoscaler_policy.py) the body breaks."""
    if body.enforcement is not PolicyEnforcement.DEFAULT:
        return policy_api.ENFORCEMENT_RULE
    if (body.class_ == "KEDA" and (body.keda is None or body.hpa is not None)) or (
            body.class_ == "HPA" and body.keda is not None):
        return policy_api.CLASS_RULE
    keda = body.keda
    if keda is None:
        return None
    if keda.fallback is not None and (keda.fallback.replicas.value is None) == (
            keda.fallback.replicas.from_component is None):
        return policy_api.FALLBACK_RULE
    for index, trigger in enumerate(keda.triggers):
        broken = _trigger_problem(trigger)
        if broken is not None:
            return f"keda.triggers[{index}]: {broken}"
    return None


def _trigger_problem(trigger: KedaTriggerTemplate) -> str | None:
    if trigger.type in policy_api.NETWORK_TRIGGER_TYPES and trigger.provider_ref is None:
        return policy_api.PROVIDER_RULE
    if trigger.query_returns_desired_replicas and trigger.metric_type != "AverageValue":
        return policy_api.DESIRED_REPLICAS_RULE
    if any(key in trigger.metadata for key in policy_api.PROVIDER_OWNED_KEYS):
        return policy_api.OWNED_KEYS_RULE
    if trigger.type == "prometheus" and "ignoreNullValues" not in trigger.metadata:
        return policy_api.IGNORE_NULL_RULE
    if not all(_VALUE.match(value) for value in trigger.metadata.values()):
        return policy_api.TEMPLATE_RULE
    return None


def substitute(value: str, variables: TemplateVariables) -> str:
    """Each admitted `{{ .Var }}` replaced by its value (the value was checked by admission_problem)."""
    values = variables.as_template()
    return _REFERENCE.sub(lambda m: values[m.group(1)], value)


def render(body: AutoscalerPolicySpec, variables: TemplateVariables,
           providers: Mapping[str, ProviderBinding]) -> ComponentAutoscaler:
    """The verbatim ComponentAutoscaler the policy gives this component (PolicyProblem when none)."""
    if body.class_ == "HPA":
        return ComponentAutoscaler.model_validate(
            {"class": AutoscalerClass.HPA.value, **({"hpa": body.hpa.to_api()} if body.hpa is not None else {})})
    keda = body.keda
    assert keda is not None  # parse() held the class rule
    triggers = [_render_trigger(t, variables, providers) for t in keda.triggers]
    block: dict[str, Any] = {"triggers": triggers}
    for key, value in (("advanced", keda.advanced), ("pollingInterval", keda.polling_interval),
                       ("cooldownPeriod", keda.cooldown_period), ("idleReplicaCount", keda.idle_replica_count)):
        if value is not None:
            block[key] = value
    if keda.idle_replica_count is not None and keda.idle_replica_count >= variables.min_replicas:
        raise PolicyProblem(BOUNDS_CONFLICT, (
            f"idleReplicaCount {keda.idle_replica_count} must be below the component's minReplicas "
            f"{variables.min_replicas}"))
    if keda.fallback is not None:
        source = keda.fallback.replicas
        replicas = source.value if source.value is not None else (
            variables.min_replicas if source.from_component is ComponentBoundsField.MIN_REPLICAS
            else variables.max_replicas)
        block["fallback"] = {"failureThreshold": keda.fallback.failure_threshold, "replicas": replicas}
    return ComponentAutoscaler.model_validate({"class": AutoscalerClass.KEDA.value, "keda": block})


def _render_trigger(trigger: KedaTriggerTemplate, variables: TemplateVariables,
                    providers: Mapping[str, ProviderBinding]) -> dict[str, Any]:
    metadata = {key: substitute(value, variables) for key, value in trigger.metadata.items()}
    if trigger.provider_ref is not None:
        name = trigger.provider_ref.name
        binding = providers.get(name)
        if binding is None:
            raise PolicyProblem(PROVIDER_UNBOUND, (
                f"metric provider {name!r} is not bound in the operator's metricProviders configuration"))
        authenticated = binding.has_credentials or binding.auth_secret is not None
        if authenticated and (binding.auth_secret is None or trigger.type not in AUTHENTICATED_TRIGGER_TYPES):
            raise PolicyProblem(PROVIDER_UNSUPPORTED, (
                f"metric provider {name!r} carries credentials; a {trigger.type} trigger cannot use them "
                f"(bearer authentication is rendered for {', '.join(AUTHENTICATED_TRIGGER_TYPES)} triggers only)"))
        metadata["serverAddress"] = binding.server_address
        if binding.headers and trigger.type == "prometheus":
            metadata["customHeaders"] = ",".join(f"{k}={v}" for k, v in sorted(binding.headers))
        if authenticated:
            metadata["authModes"] = "bearer"
    out: dict[str, Any] = {"type": trigger.type, "metadata": metadata}
    if trigger.metric_type is not None:
        out["metricType"] = trigger.metric_type
    if trigger.provider_ref is not None and "authModes" in metadata:
        out["authenticationRef"] = {"name": trigger_authentication_name(trigger.provider_ref.name),
                                    "kind": CLUSTER_TRIGGER_AUTHENTICATION}
    return out


AUTHENTICATED_TRIGGER_TYPES = ("prometheus",)
"""Trigger types whose KEDA scaler takes a bearer token from a TriggerAuthentication (parameter bearerToken,
metadata authModes: bearer) as this release renders it."""
CLUSTER_TRIGGER_AUTHENTICATION = "ClusterTriggerAuthentication"
_AUTH_PREFIX = "servingops-metric-provider-"


def trigger_authentication_name(provider: str) -> str:
    """One ClusterTriggerAuthentication per credentialed provider, shared by every ScaledObject using it: a
    DNS name from the provider's (lowercased, other characters as '-') with a short digest of the exact
    name so two providers never share one."""
    slug = re.sub(r"[^a-z0-9-]+", "-", provider.lower()).strip("-")[:24].strip("-") or "p"
    return f"{_AUTH_PREFIX}{slug}-{hashlib.sha256(provider.encode()).hexdigest()[:8]}"


def trigger_authentications(autoscaler: ComponentAutoscaler | None,
                            providers: Mapping[str, ProviderBinding]) -> list[dict[str, Any]]:
    """The ClusterTriggerAuthentications a rendered KEDA block's triggers name (each a provider's bearer token
    by Secret name and key: KEDA reads the Secret in its cluster-object namespace, which is to be the
    controller namespace holding the providers' Secrets). Names only: no credential is ever in a manifest."""
    if autoscaler is None or autoscaler.keda is None:
        return []
    wanted = {(t.get("authenticationRef") or {}).get("name") for t in autoscaler.keda.triggers
              if isinstance(t, Mapping) and (t.get("authenticationRef") or {}).get("kind")
              == CLUSTER_TRIGGER_AUTHENTICATION}
    out = []
    for provider, binding in sorted(providers.items()):
        name = trigger_authentication_name(provider)
        if name in wanted and binding.auth_secret is not None:
            out.append({"apiVersion": "keda.sh/v1alpha1", "kind": CLUSTER_TRIGGER_AUTHENTICATION,
                        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "servingops"},
                                     "annotations": {"ome.io/metric-provider": provider}},
                        "spec": {"secretTargetRef": [{"parameter": "bearerToken", "name": binding.auth_secret,
                                                      "key": binding.auth_key}]}})
    return out


def resolved_digest(autoscaler: ComponentAutoscaler, low: int, high: int) -> str:
    """Seed: a digest of the rendered block plus the effective bounds and bound provider endpoint (the
    endpoint is inside the rendered triggers' serverAddress), so it differs per cluster by design."""
    return hashlib.sha256(canonical_json([autoscaler.to_api(), low, high])).hexdigest()[:16]


@dataclass(frozen=True)
class Resolution:
    """The block a component's scaler is made from, and where it came from."""

    autoscaler: ComponentAutoscaler | None
    source: str | None = None
    """status.components[c].autoscaler.specSource: "isvc", "policy", or None (no block, no ref)."""
    policy: AutoscalerPolicyProvenance | None = None


def needs_policy(inline: ComponentAutoscaler | None, ref: AutoscalerPolicyRef | None) -> bool:
    """Whether the component's scaler comes from a policy (a ref, and no inline block outranking it)."""
    return inline is None and ref is not None


def resolve(inline: ComponentAutoscaler | None, ref: AutoscalerPolicyRef | None, policy: Mapping[str, Any] | None,
            variables: TemplateVariables, providers: Mapping[str, ProviderBinding]) -> Resolution:
    """The component's effective autoscaler: the inline block, else the referenced policy rendered for it
    (`policy`: the live object, None when absent); PolicyProblem when the policy does not render."""
    if inline is not None:
        return Resolution(inline, SPEC_SOURCE_ISVC)
    if ref is None:
        return Resolution(None)
    if policy is None or (policy.get("metadata") or {}).get("deletionTimestamp"):
        raise PolicyProblem(POLICY_NOT_FOUND, f"AutoscalerPolicy {ref.name!r} does not exist in this namespace")
    body = parse(policy.get("spec"))
    block = render(body, variables, providers)
    generation = (policy.get("metadata") or {}).get("generation")
    provenance = AutoscalerPolicyProvenance(
        name=ref.name, observed_generation=int(generation) if generation is not None else None,
        portable_digest=portable_digest(body),
        resolved_digest=resolved_digest(block, variables.min_replicas, variables.max_replicas))
    return Resolution(block, SPEC_SOURCE_POLICY, provenance)


def shadow(inline: ComponentAutoscaler | None, ref: AutoscalerPolicyRef | None, policy: Mapping[str, Any] | None,
           variables: TemplateVariables, providers: Mapping[str, ProviderBinding]) -> ShadowedAutoscalerPolicy | None:
    """status.components[c].autoscaler.shadowedPolicyRef: a ref an inline block outranks, with what the policy
    would render for this component were the block removed. A preview only: a policy that is absent or does
    not render says so by leaving out the digest it cannot give (portableDigest when the body does not parse,
    wouldRenderDigest when it does not render here), never by failing the component, whose scaler is the
    inline block's either way."""
    if inline is None or ref is None:
        return None
    shadowed = ShadowedAutoscalerPolicy(name=ref.name)
    if policy is None or (policy.get("metadata") or {}).get("deletionTimestamp"):
        return shadowed
    try:
        body = parse(policy.get("spec"))
    except PolicyProblem:
        return shadowed
    shadowed.portable_digest = portable_digest(body)
    try:
        block = render(body, variables, providers)
    except PolicyProblem:
        return shadowed
    shadowed.would_render_digest = resolved_digest(block, variables.min_replicas, variables.max_replicas)
    return shadowed


__all__ = [
    "BOUNDS_CONFLICT",
    "DIGEST_PREFIX",
    "POLICY_INVALID",
    "POLICY_NOT_FOUND",
    "PROVIDER_UNBOUND",
    "PROVIDER_UNSUPPORTED",
    "PolicyProblem",
    "ProviderBinding",
    "Resolution",
    "TemplateVariables",
    "admission_problem",
    "needs_policy",
    "parse",
    "portable_digest",
    "render",
    "resolve",
    "resolved_digest",
    "shadow",
    "substitute",
    "trigger_authentication_name",
    "trigger_authentications",
]
