"""The autoscaler of a component: an autoscaling/v2 HorizontalPodAutoscaler (class HPA) or a
keda.sh/v1alpha1 ScaledObject (class KEDA) whose scale target is, for an OMENative component, the
projected InferenceReplica's /scale subresource (seed 004: "Only the InferenceService controller creates
a scaler from it"; the replica CRD rejects HPA and KEDA on a standalone replica, so the service's workflow
is the one owner) and, for a RawDeployment component, the Deployment of the revision that carries its
traffic (the workflow names it; seed: ScaleTargetRef "points at the underlying Deployment").

The block comes from the component's inline `autoscaler`, else from its `autoscalerPolicyRef`: the
AutoscalerPolicy rendered for it (rendering/autoscaler_policy.py). A policy that does not render (absent,
invalid, an unbound provider) changes nothing: the last good scaler stays (fail closed) and the
observation carries the problem, which the service reports as AutoscalerResolved False.
A component that left the spec loses the scaler of ours it had.

What is rendered, where the seed is silent following upstream OME's hpa / keda reconcilers:
- names: the HPA is named after its target, `<isvc>-<component>`; the ScaledObject
  `scaledobject-<isvc>-<component>` (upstream's GetScaledObjectName: the last 50 characters);
- minReplicas = the component's minReplicas, at least 1; maxReplicas = maxReplicas, at least min;
- HPA metrics and behavior verbatim, a single CPU 80% Utilization metric when none is given;
  KEDA triggers, advanced, pollingInterval, cooldownPeriod, idleReplicaCount, fallback verbatim;
- labels: the component's selector labels, managed-by servingops and the service's uid (KEDA copies them
  onto its HPA, by which the bridge wakes the service when the counts move); a controller ownerReference
  to the InferenceService, so the objects go with it.
HPA and KEDA cannot both drive one target: choosing one deletes ours of the other kind. External and
None render nothing and delete ours; an object of that name that is not ours (no controller
reference to this InferenceService) is never touched: applying over it is refused as NameInUse.

Writes are server-side applies (field manager `servingops`), so a retry is a no-op; deletes carry the
uid as a precondition, so a name reused meanwhile is left alone. The same call keeps the projected
replica's spec.autoscaler the component's block (a merge patch replacing it whole) and hands the count
back to the service when the block stops owning it (rendering/scaling.py says who owns it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ValidationError
from temporalio import activity

from servingops.activities.serving.omenative import OMENATIVE, deployment_mode, replica_name
from servingops.api_models.base import Condition
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.ome.autoscaling import (
    AutoscalerPolicyProvenance,
    ComponentAutoscaler,
    ComponentAutoscalerStatus,
    ShadowedAutoscalerPolicy,
)
from servingops.api_models.ome.enums import AutoscalerClass, AutoscalerManagedBy, ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.api_models.operator_config import OperatorDefaults
from servingops.api_models.refs import ObjectRef
from servingops.clients.kube.calls import apply, call, delete_if_present, get_or_none
from servingops.clients.kube.errors import absent, conflict, invalid
from servingops.rendering import autoscaler_policy, render
from servingops.rendering.autoscaler_policy import PolicyProblem, ProviderBinding, TemplateVariables
from servingops.rendering.names import revision_name
from servingops.rendering.scaling import bounds, owns_replicas, replacing

FIELD_MANAGER = "servingops"
HPA, KEDA = "HorizontalPodAutoscaler", "ScaledObject"
# Each call names its kind's constants (not a variable), so tests/rbac_calls.py reads from the code
# exactly which kinds and verbs the worker asks for.
HPA_GROUP, HPA_VERSION, HPA_PLURAL = "autoscaling", "v2", "horizontalpodautoscalers"
KEDA_GROUP, KEDA_VERSION, KEDA_PLURAL = "keda.sh", "v1alpha1", "scaledobjects"
AUTH_GROUP, AUTH_VERSION, AUTH_PLURAL = "keda.sh", "v1alpha1", "clustertriggerauthentications"
REPLICA_GROUP, REPLICA_VERSION, REPLICA_PLURAL = "ome.io", "v1beta1", "inferencereplicas"
POLICY_GROUP, POLICY_VERSION, POLICY_PLURAL = "ome.io", "v1beta1", "autoscalerpolicies"
DEFAULT_CPU_UTILIZATION = 80
"""Upstream's constants.DefaultCPUUtilization, the metric of an HPA given none."""
_SCALED_OBJECT_PREFIX, _SCALED_OBJECT_NAME_MAX = "scaledobject-", 50


class EnsureAutoscalerInput(BaseModel):
    isvc: ObjectRef
    component: ComponentType
    revision: str | None = None
    """RawDeployment: the revision whose Deployment the scaler targets (the one carrying the traffic).
    Without it a RawDeployment component's scaler is left alone (histories from before it)."""


class ScalerProblem(BaseModel):
    """Why the component's autoscaler did not resolve: its live scaler was left as it was."""

    reason: str
    message: str


class AutoscalerObservation(BaseModel):
    status: dict[str, object] | None = None
    """status.components[c].autoscaler (ComponentAutoscalerStatus, API form); None for a component
    whose scaler is not rendered (RawDeployment without a revision), one that left the spec, or one whose
    policy did not resolve (the last status stays)."""
    problem: ScalerProblem | None = None
    """The referenced AutoscalerPolicy did not render: nothing was applied or deleted."""
    policy_name: str | None = None
    policy_uid: str | None = None
    """The AutoscalerPolicy the component's scaler is rendered from (a ref no inline block outranks), when
    it exists: the service tells that policy's workflow when its references change."""


def provider_bindings(read: Callable[[], OperatorDefaults]) -> Callable[[], dict[str, ProviderBinding]]:
    """The operator's metricProviders as policy rendering binds them, read afresh at each call (an
    operator ConfigMap that does not parse binds none: a policy naming a provider then fails closed)."""
    def current() -> dict[str, ProviderBinding]:
        return {name: ProviderBinding(server_address=source.address, headers=tuple(sorted(source.headers.items())),
                                      has_credentials=source.auth_secret is not None,
                                      auth_secret=source.auth_secret.name if source.auth_secret else None,
                                      auth_key=source.auth_key)
                for name, source in read().metric_providers.items()}
    return current


def read_policy(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any] | None:
    """The AutoscalerPolicy of that name, or None."""
    return cast(dict[str, Any] | None, get_or_none(custom.get_namespaced_custom_object,
                                                   POLICY_GROUP, POLICY_VERSION, namespace, POLICY_PLURAL, name))


# -- pure rules ----------------------------------------------------------------------------------


def scaled_object_name(target: str) -> str:
    return _SCALED_OBJECT_PREFIX + target[-_SCALED_OBJECT_NAME_MAX:]


def _meta(owner: render.Owner, component: ComponentType, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": owner.namespace,
            "labels": {**render.selector_labels(owner.name, component), render.LABEL_MANAGED_BY: render.MANAGED_BY,
                       render.LABEL_ISVC_UID: owner.uid},
            "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "name": owner.name,
                                 "uid": owner.uid, "controller": True, "blockOwnerDeletion": True}]}


def scale_target(owner: render.Owner, component: ComponentType, revision: str | None = None) -> dict[str, str]:
    """The projected InferenceReplica (OMENative), or the revision's Deployment (RawDeployment)."""
    if revision is not None:
        return {"apiVersion": "apps/v1", "kind": "Deployment",
                "name": revision_name(owner.name, component.value, revision)}
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "name": replica_name(owner.name, component)}


def hpa_manifest(owner: render.Owner, component: ComponentType, cspec: render.ComponentSpec,
                 autoscaler: ComponentAutoscaler, target: dict[str, str] | None = None) -> dict[str, Any]:
    low, high = bounds(cspec)
    hpa = autoscaler.hpa
    metrics = list(hpa.metrics) if hpa is not None and hpa.metrics else [
        {"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}]
    spec: dict[str, Any] = {"scaleTargetRef": target or scale_target(owner, component), "minReplicas": low,
                            "maxReplicas": high, "metrics": metrics}
    if hpa is not None and hpa.behavior is not None:
        spec["behavior"] = hpa.behavior
    return {"apiVersion": "autoscaling/v2", "kind": HPA,
            "metadata": _meta(owner, component, replica_name(owner.name, component)), "spec": spec}


def scaled_object_manifest(owner: render.Owner, component: ComponentType, cspec: render.ComponentSpec,
                           autoscaler: ComponentAutoscaler, target: dict[str, str] | None = None) -> dict[str, Any]:
    keda = autoscaler.keda
    if keda is None:  # the CRD's CEL rule makes this unreachable through the apiserver
        raise application_error(ErrorType.INVALID_SPEC, f"{component.value}.autoscaler: class KEDA requires keda")
    low, high = bounds(cspec)
    spec: dict[str, Any] = {"scaleTargetRef": target or scale_target(owner, component), "minReplicaCount": low,
                            "maxReplicaCount": high, "triggers": list(keda.triggers)}
    for key, value in (("advanced", keda.advanced), ("pollingInterval", keda.polling_interval),
                       ("cooldownPeriod", keda.cooldown_period), ("idleReplicaCount", keda.idle_replica_count),
                       ("fallback", keda.fallback)):
        if value is not None:
            spec[key] = value
    name = scaled_object_name(replica_name(owner.name, component))
    return {"apiVersion": "keda.sh/v1alpha1", "kind": KEDA, "metadata": _meta(owner, component, name),
            "spec": spec}


def _conditions(status: dict[str, Any], previous: list[dict[str, Any]] | None = None,
                now: str | None = None) -> list[dict[str, Any]] | None:
    """The scaler's conditions verbatim, those a metav1.Condition can carry (the HPA's have type, status,
    reason, message, lastTransitionTime); one that cannot is left out rather than failing the status
    write. KEDA's ScaledObject conditions carry no transition time: such a condition keeps the time the
    service last mirrored for it while its status is unchanged (`previous`), and takes `now` when it is
    first seen or its status moved (without `now` it is left out, as before)."""
    before = {c.get("type"): c for c in previous or [] if isinstance(c, dict)}
    out = []
    for raw in status.get("conditions") or []:
        item = {k: raw.get(k) for k in ("type", "status", "lastTransitionTime", "reason", "message")}
        item["reason"] = item["reason"] or "Unknown"
        item["message"] = item["message"] or ""
        if not item["lastTransitionTime"]:
            seen = before.get(item["type"]) or {}
            same = seen.get("status") == item["status"] and seen.get("lastTransitionTime")
            item["lastTransitionTime"] = seen["lastTransitionTime"] if same else now
        try:
            Condition.model_validate(item)
        except ValidationError:
            continue
        out.append(item)
    return out or None


def autoscaler_status(autoscaler: ComponentAutoscaler | None, live: dict[str, Any] | None,
                      source: str = autoscaler_policy.SPEC_SOURCE_ISVC,
                      policy: AutoscalerPolicyProvenance | None = None,
                      shadowed: ShadowedAutoscalerPolicy | None = None, *,
                      counts: dict[str, Any] | None = None, previous: list[dict[str, Any]] | None = None,
                      now: str | None = None) -> dict[str, object]:
    """status.components[c].autoscaler: the resolved class, who manages it, which layer gave the block
    (specSource, and the policy's provenance when a policy did, or the ref an inline block shadows), and
    (ours) the live scaler's counters and conditions.

    The counters come from `counts` when given, else from `live`: a ScaledObject's status has none, so
    for class KEDA the caller passes the HPA KEDA keeps for it (status.hpaName); its conditions (Ready,
    Active, Fallback, Paused) are the ScaledObject's, timed as _conditions says (`previous`: the
    conditions mirrored last; `now`: this observation's time)."""
    if autoscaler is None:
        return ComponentAutoscalerStatus(managed_by=AutoscalerManagedBy.NONE).to_api()
    cls = autoscaler.class_
    managed = {AutoscalerClass.HPA: AutoscalerManagedBy.OME, AutoscalerClass.KEDA: AutoscalerManagedBy.OME,
               AutoscalerClass.EXTERNAL: AutoscalerManagedBy.EXTERNAL}.get(cls, AutoscalerManagedBy.NONE)
    body: dict[str, Any] = {"class": cls.value, "managedBy": managed.value, "specSource": source}
    if policy is not None:
        body["policy"] = policy.to_api()
    if shadowed is not None:
        body["shadowedPolicyRef"] = shadowed.to_api()
    if managed is AutoscalerManagedBy.OME:
        status = (live or {}).get("status") or {}
        counters = ((counts if counts is not None else live) or {}).get("status") or {}
        body["currentReplicas"] = int(counters.get("currentReplicas") or 0)
        body["desiredReplicas"] = int(counters.get("desiredReplicas") or 0)
        if counters.get("lastScaleTime"):
            body["lastScaleTime"] = counters["lastScaleTime"]
        conditions = _conditions(status, previous, now)
        if conditions:
            body["conditions"] = conditions
    return ComponentAutoscalerStatus.model_validate(body).to_api()


# -- the activity --------------------------------------------------------------------------------


class AutoscalerActivities:
    """Bound to one ApiClient for the life of the worker."""

    def __init__(self, api_client: client.ApiClient,
                 providers: Callable[[], Mapping[str, ProviderBinding]] | None = None) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.providers = providers or dict
        """The operator's metric-provider bindings as they are now (a policy's providerRef names one)."""

    def _get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        # None: the object, or the kind itself (KEDA's CRD not installed), is absent.
        if kind == HPA:
            found = get_or_none(self.custom.get_namespaced_custom_object,
                                HPA_GROUP, HPA_VERSION, namespace, HPA_PLURAL, name)
        else:
            found = get_or_none(self.custom.get_namespaced_custom_object,
                                KEDA_GROUP, KEDA_VERSION, namespace, KEDA_PLURAL, name)
        return cast(dict[str, Any] | None, found)

    @staticmethod
    def _ours(obj: dict[str, Any], owner: render.Owner) -> bool:
        refs = (obj.get("metadata") or {}).get("ownerReferences") or []
        return any(r.get("uid") == owner.uid and r.get("controller") for r in refs)

    def _apply(self, owner: render.Owner, manifest: dict[str, Any]) -> dict[str, Any]:
        kind, name, namespace = manifest["kind"], manifest["metadata"]["name"], owner.namespace
        live = self._get(kind, namespace, name)
        if live is not None and not self._ours(live, owner):
            raise application_error(ErrorType.NAME_IN_USE,
                                    f"{kind} {namespace}/{name} exists and is not this InferenceService's")
        try:
            if kind == HPA:
                applied = apply(self.custom.patch_namespaced_custom_object,
                                HPA_GROUP, HPA_VERSION, namespace, HPA_PLURAL, name, manifest,
                                field_manager=FIELD_MANAGER)
            else:
                applied = apply(self.custom.patch_namespaced_custom_object,
                                KEDA_GROUP, KEDA_VERSION, namespace, KEDA_PLURAL, name, manifest,
                                field_manager=FIELD_MANAGER)
        except ApiException as exc:
            if absent(exc) and kind == KEDA:
                raise application_error(ErrorType.INVALID_SPEC, (
                    "autoscaler class KEDA: this cluster serves no keda.sh/v1alpha1 ScaledObject "
                    "(install KEDA)")) from exc
            if invalid(exc):
                raise application_error(ErrorType.INVALID_SPEC,
                                        f"{kind} {namespace}/{name} rejected: {exc.body}") from exc
            raise
        return cast(dict[str, Any], applied)

    def _apply_authentication(self, manifest: dict[str, Any]) -> None:
        """A credentialed provider's ClusterTriggerAuthentication (rendering/autoscaler_policy.py): the Secret's
        name and key only, shared by every ScaledObject using the provider, so no service owns it and none
        deletes it. One of that name not labelled ours (an administrator's) is never written over."""
        name = manifest["metadata"]["name"]
        live = cast(dict[str, Any] | None, get_or_none(self.custom.get_cluster_custom_object,
                                                       AUTH_GROUP, AUTH_VERSION, AUTH_PLURAL, name))
        labels = ((live or {}).get("metadata") or {}).get("labels") or {}
        if live is not None and labels.get(render.LABEL_MANAGED_BY) != render.MANAGED_BY:
            raise application_error(ErrorType.NAME_IN_USE,
                                    f"ClusterTriggerAuthentication {name} exists and is not servingops'")
        try:
            apply(self.custom.patch_cluster_custom_object, AUTH_GROUP, AUTH_VERSION, AUTH_PLURAL, name, manifest,
                  field_manager=FIELD_MANAGER)
        except ApiException as exc:
            if absent(exc):
                raise application_error(ErrorType.INVALID_SPEC, (
                    "autoscaler class KEDA: this cluster serves no keda.sh/v1alpha1 ClusterTriggerAuthentication "
                    "(install KEDA)")) from exc
            raise

    def _delete_ours(self, kind: str, owner: render.Owner, name: str) -> None:
        namespace = owner.namespace
        live = self._get(kind, namespace, name)
        if live is None or not self._ours(live, owner):
            return
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=live["metadata"]["uid"]),
                                      propagation_policy="Background")
        try:
            if kind == HPA:
                delete_if_present(self.custom.delete_namespaced_custom_object,
                                  HPA_GROUP, HPA_VERSION, namespace, HPA_PLURAL, name, body=body)
            else:
                delete_if_present(self.custom.delete_namespaced_custom_object,
                                  KEDA_GROUP, KEDA_VERSION, namespace, KEDA_PLURAL, name, body=body)
        except ApiException as exc:
            if not conflict(exc):  # the uid precondition failed: the name now belongs to another object
                raise

    @activity.defn(name="serving.ensure_autoscaler")
    def ensure(self, inp: EnsureAutoscalerInput) -> AutoscalerObservation:
        """Make the component's scaler what its spec says, and report it."""
        ref = inp.isvc
        if not ref.namespace:
            raise application_error(ErrorType.INVALID_INPUT, f"{ref.describe()}: no namespace given")
        try:
            obj = cast(dict[str, Any], call(self.custom.get_namespaced_custom_object,
                                            ref.group, ref.version, ref.namespace, ref.plural, ref.name))
        except ApiException as exc:
            if absent(exc):
                raise application_error(ErrorType.OBJECT_GONE, f"{ref.describe()} is gone") from exc
            raise
        meta = obj["metadata"]
        if ref.uid and meta.get("uid") != ref.uid:
            raise application_error(ErrorType.OBJECT_GONE, f"{ref.describe()}: the name belongs to another object")
        try:
            spec = InferenceServiceSpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            raise application_error(ErrorType.INVALID_SPEC,
                                    f"{ref.describe()}: the spec does not parse: {exc}") from exc
        owner = render.Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
        name = replica_name(owner.name, inp.component)  # the HPA's name in either mode
        cspec = render.component_spec(spec, inp.component)
        if cspec is None:  # the component left the spec: so does its scaler
            self._delete_ours(HPA, owner, name)
            self._delete_ours(KEDA, owner, scaled_object_name(name))
            return AutoscalerObservation()
        native = deployment_mode(spec, cspec, dict(meta.get("annotations") or {})) == OMENATIVE
        if not native and inp.revision is None:
            return AutoscalerObservation()
        target = scale_target(owner, inp.component, None if native else inp.revision)
        low, high = bounds(cspec)
        variables = TemplateVariables(namespace=owner.namespace, isvc_name=owner.name, component=inp.component.value,
                                      min_replicas=low, max_replicas=high, target_name=target["name"])
        policy_ref = cspec.autoscaler_policy_ref
        # Read whenever a ref is set: it renders the block, or an inline block shadows it and its render is
        # only previewed (shadowedPolicyRef).
        read = read_policy(self.custom, owner.namespace, policy_ref.name) if policy_ref is not None else None
        policy = read if autoscaler_policy.needs_policy(cspec.autoscaler, policy_ref) else None
        policy_uid = ((policy or {}).get("metadata") or {}).get("uid")
        try:
            # The operator ConfigMap is read only for a block a policy renders or previews.
            providers = self.providers() if read is not None else {}
            resolution = autoscaler_policy.resolve(cspec.autoscaler, policy_ref, policy, variables, providers)
        except PolicyProblem as problem:
            named = policy_ref.name if policy_ref else ""
            return AutoscalerObservation(problem=ScalerProblem(reason=problem.reason, message=(
                f"{inp.component.value}: AutoscalerPolicy {named!r}: {problem.message}; the last good scaler stays")),
                policy_name=named if policy_uid else None, policy_uid=policy_uid)
        autoscaler = resolution.autoscaler
        effective = cspec.model_copy(update={"autoscaler": autoscaler})
        cls = autoscaler.class_ if autoscaler is not None else None
        live: dict[str, Any] | None = None
        if cls is AutoscalerClass.HPA and autoscaler is not None:
            self._delete_ours(KEDA, owner, scaled_object_name(name))
            live = self._apply(owner, hpa_manifest(owner, inp.component, effective, autoscaler, target))
        elif cls is AutoscalerClass.KEDA and autoscaler is not None:
            self._delete_ours(HPA, owner, name)
            for authentication in autoscaler_policy.trigger_authentications(autoscaler, providers):
                self._apply_authentication(authentication)
            live = self._apply(owner, scaled_object_manifest(owner, inp.component, effective, autoscaler, target))
        else:
            self._delete_ours(HPA, owner, name)
            self._delete_ours(KEDA, owner, scaled_object_name(name))
        if native:
            self._sync_replica(owner.namespace, name, effective)
        counts = live
        if cls is AutoscalerClass.KEDA:  # the counters are on the HPA KEDA keeps for the ScaledObject
            hpa_name = ((live or {}).get("status") or {}).get("hpaName")
            counts = self._get(HPA, owner.namespace, str(hpa_name)) if hpa_name else None
        mirrored = ((((obj.get("status") or {}).get("components") or {}).get(inp.component.value) or {})
                    .get("autoscaler") or {}).get("conditions")
        return AutoscalerObservation(
            status=autoscaler_status(autoscaler, live, resolution.source or autoscaler_policy.SPEC_SOURCE_ISVC,
                                     resolution.policy, autoscaler_policy.shadow(cspec.autoscaler, policy_ref, read,
                                                                                 variables, providers),
                                     counts=counts, previous=mirrored if isinstance(mirrored, list) else None,
                                     now=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")),
            policy_name=policy_ref.name if policy_uid and policy_ref else None, policy_uid=policy_uid)

    def _sync_replica(self, namespace: str, name: str, cspec: render.ComponentSpec) -> None:
        """Keep the projected replica's spec.autoscaler the component's block, and give the count
        back to the service (minReplicas, at least 1) when the block stops owning it. The projection
        writes the replica only when a revision's capacity moves (omenative.py); an autoscaler edit
        moves none, and this runs every pass."""
        live = cast(dict[str, Any] | None, get_or_none(self.custom.get_namespaced_custom_object,
                                                       REPLICA_GROUP, REPLICA_VERSION, namespace, REPLICA_PLURAL, name))
        if live is None:
            return  # not projected yet: the projection creates it with both fields
        spec = live.get("spec") or {}
        autoscaler = cspec.autoscaler
        desired = autoscaler.model_dump(by_alias=True, exclude_none=True, mode="json") if autoscaler else None
        patch: dict[str, Any] = {}
        if spec.get("autoscaler") != desired:
            patch["autoscaler"] = replacing(spec.get("autoscaler"), desired)
        stored = spec.get("autoscaler")
        try:
            was_owned = isinstance(stored, dict) and owns_replicas(ComponentAutoscaler.model_validate(stored))
        except ValidationError:
            was_owned = False
        if was_owned and not owns_replicas(autoscaler):
            patch["replicas"] = max(1, render.desired_replicas(cspec))
        if patch:
            call(self.custom.patch_namespaced_custom_object, REPLICA_GROUP, REPLICA_VERSION, namespace, REPLICA_PLURAL,
                 name, {"spec": patch})

    def all(self) -> list[Any]:
        return [self.ensure]


__all__ = [
    "AutoscalerActivities",
    "AutoscalerObservation",
    "EnsureAutoscalerInput",
    "ScalerProblem",
    "autoscaler_status",
    "hpa_manifest",
    "read_policy",
    "scale_target",
    "scaled_object_manifest",
    "scaled_object_name",
]
