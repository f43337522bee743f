"""What an AutoscalerPolicy's workflow needs to know of the world: the policy itself (checked against its
admission rules, digested) and the InferenceServices of its namespace whose components reference it.

The count is taken, never kept: a component "currently references" the policy when its
spec.<component>.autoscalerPolicyRef names it (kind AutoscalerPolicy), whatever outranks it, in a service
not being deleted. The consumers (services, by name and uid) go back to the workflow so it can tell each
one to render its scaler again when the policy's spec moves.
"""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client
from pydantic import BaseModel
from temporalio import activity

from servingops.api_models.ome.autoscaler_policy import AutoscalerPolicySpec
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.refs import ObjectRef
from servingops.clients.kube.calls import get_or_none, list_items
from servingops.rendering import autoscaler_policy


class PolicyConsumer(BaseModel):
    name: str
    uid: str


class PolicyObservation(BaseModel):
    generation: int
    deleting: bool = False
    portable_digest: str | None = None
    """None when the body does not parse at all."""
    problem: str | None = None
    """The admission rule the stored body breaks (it renders for no component), else None."""
    attached_components: int = 0
    consumers: list[PolicyConsumer] = []


def references(spec: dict[str, Any], policy: str) -> int:
    """How many of a service spec's components name the policy in autoscalerPolicyRef."""
    count = 0
    for component in ComponentType:
        block = spec.get(component.value)
        ref = (block.get("autoscalerPolicyRef") if isinstance(block, dict) else None) or {}
        if ref.get("name") == policy and ref.get("kind", "AutoscalerPolicy") == "AutoscalerPolicy":
            count += 1
    return count


class AutoscalerPolicyActivities:
    """Bound to one ApiClient for the life of the worker."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api_client)

    @activity.defn(name="autoscaler_policy.observe")
    def observe(self, ref: ObjectRef) -> PolicyObservation | None:
        """The policy as it is now and its consumers; None when it is gone (or the name is another's)."""
        namespace = ref.namespace or ""
        obj = cast(dict[str, Any] | None, get_or_none(self.custom.get_namespaced_custom_object,
                                                      "ome.io", "v1beta1", namespace, "autoscalerpolicies", ref.name))
        if obj is None or (ref.uid and obj["metadata"].get("uid") != ref.uid):
            return None
        meta = obj["metadata"]
        seen = PolicyObservation(generation=int(meta.get("generation", 0)),
                                 deleting=bool(meta.get("deletionTimestamp")))
        try:
            body = autoscaler_policy.parse(obj.get("spec"))
            seen.portable_digest = autoscaler_policy.portable_digest(body)
        except autoscaler_policy.PolicyProblem as problem:
            seen.problem = problem.message
            parsed = _parsed_or_none(obj.get("spec"))
            seen.portable_digest = autoscaler_policy.portable_digest(parsed) if parsed is not None else None
        for item in list_items(self.custom.list_namespaced_custom_object,
                               "ome.io", "v1beta1", namespace, "inferenceservices"):
            if item["metadata"].get("deletionTimestamp"):
                continue
            count = references(item.get("spec") or {}, ref.name)
            if count:
                seen.attached_components += count
                seen.consumers.append(PolicyConsumer(name=item["metadata"]["name"], uid=item["metadata"]["uid"]))
        return seen

    def all(self) -> list[Any]:
        return [self.observe]


def _parsed_or_none(spec: Any) -> AutoscalerPolicySpec | None:
    """The body when it parses (it may still break a rule): its digest is reported either way."""
    try:
        return AutoscalerPolicySpec.model_validate(spec or {})
    except ValueError:
        return None


__all__ = ["AutoscalerPolicyActivities", "PolicyConsumer", "PolicyObservation", "references"]
