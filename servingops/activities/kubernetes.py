"""Activities that read and write Kubernetes objects of the served kinds.

Status goes through the status subresource with the object's resourceVersion, so a concurrent
writer causes a 409 that we retry on a fresh read instead of silently overwriting it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel
from temporalio import activity

from servingops.api_models.conditions import merge_conditions
from servingops.api_models.credential_headers import scrubbed
from servingops.api_models.ome.model_keys import ARTIFACT_ANNOTATION
from servingops.api_models.refs import ConditionUpdate, ObjectRef
from servingops.clients.kube.calls import list_items
from servingops.clients.kube.custom_objects import CustomObjects
from servingops.clients.kube.events import record_event


class EventNote(BaseModel):
    """An Event to record on the object once the status write it travels with has landed.

    Condition transitions get their Event without a note (the activity sees the transition); a
    note is for what a condition does not show, such as a canary step promoted or traffic moved.
    """

    type: Literal["Normal", "Warning"] = "Normal"
    reason: str
    message: str


class StatusPatch(BaseModel):
    ref: ObjectRef
    status: dict[str, Any] = {}
    """Fields of status to set (merged into the current status; None deletes a field)."""
    conditions: list[ConditionUpdate] = []
    observed_generation: int | None = None
    events: list[EventNote] = []
    """Events to record after the write (a new field: histories recorded before it decode it as [])."""


class FinalizerChange(BaseModel):
    ref: ObjectRef
    finalizer: str


class AnnotationRemoval(BaseModel):
    ref: ObjectRef
    name: str
    value: str
    """Removed only while the annotation still has this value: another value is a new request."""


class EventSpec(BaseModel):
    ref: ObjectRef
    type: str = "Normal"
    reason: str
    message: str
    component: str = "servingops"


class PolicyAttachments(BaseModel):
    namespace: str
    name: str
    """The RolloutPolicy whose referencing rollout groups are counted."""


class ArtifactReferences(BaseModel):
    digest: str
    except_uid: str
    """The object asking: its own reference does not count."""


# Every kind whose status.artifact can point at a published model.
_ARTIFACT_HOLDERS = (("ai.deckhouse.io", "v1alpha1", "models"), ("ai.deckhouse.io", "v1alpha1", "clustermodels"))
# Every kind whose servingops.io/artifact annotation (<registry>/<repository>@<digest>) names one.
_ANNOTATED_HOLDERS = (("ome.io", "v1beta1", "basemodels"), ("ome.io", "v1beta1", "clusterbasemodels"),
                      ("ome.io", "v1beta1", "finetunedweights"))


class KubernetesActivities:
    """Bound to one ApiClient for the life of the worker."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self._objects = CustomObjects(self.custom)

    # -- activities ---------------------------------------------------------------------------

    @activity.defn(name="kube.read_object")
    def read_object(self, ref: ObjectRef) -> dict[str, Any] | None:
        """The live object, or None when it is gone (or its name belongs to another uid now); any
        credential an object stored before admission refused them still holds in a `prometheus`
        block is left out (the answer is kept in workflow history)."""
        obj = self._objects.get(ref)
        return scrubbed(obj) if obj is not None else None

    @activity.defn(name="kube.patch_status")
    def patch_status(self, patch: StatusPatch) -> bool:
        """Merge `patch` into the object's status, then record its Event notes; False when the
        object is gone (and no Event is recorded)."""

        def mutate(obj: dict[str, Any]) -> bool:
            status = dict(obj.get("status") or {})
            before = dict(status)
            for key, value in patch.status.items():
                if value is None:
                    status.pop(key, None)
                else:
                    status[key] = value
            if patch.conditions:
                status["conditions"] = merge_conditions(
                    status.get("conditions"), patch.conditions,
                    generation=int(obj["metadata"].get("generation", 0)), now=dt.datetime.now(dt.UTC),
                )
            if patch.observed_generation is not None:
                status["observedGeneration"] = patch.observed_generation
            obj["status"] = status
            return status != before

        if self._objects.update(patch.ref, mutate, status=True) is None:
            return False
        for note in patch.events:
            self._record(patch.ref, note.type, note.reason, note.message)
        return True

    def _record(self, ref: ObjectRef, event_type: str, reason: str, message: str,
                component: str = "servingops") -> None:
        """An Event is best effort: the status it accompanies has landed, so a failure to record
        it must not fail (and repeat) the write."""
        try:
            record_event(self.core, api_version=f"{ref.group}/{ref.version}", kind=ref.kind, name=ref.name,
                         namespace=ref.namespace, uid=ref.uid, event_type=event_type, reason=reason,
                         message=message, component=component)
        except ApiException as exc:
            activity.logger.warning("could not record Event %s on %s: %s", reason, ref.describe(), exc.reason)

    @activity.defn(name="kube.ensure_finalizer")
    def ensure_finalizer(self, change: FinalizerChange) -> bool:
        """Add the finalizer unless the object is already being deleted; False when gone."""

        def mutate(obj: dict[str, Any]) -> bool:
            meta = obj["metadata"]
            finalizers = list(meta.get("finalizers") or [])
            if change.finalizer in finalizers or meta.get("deletionTimestamp"):
                return False
            meta["finalizers"] = [*finalizers, change.finalizer]
            return True

        return self._objects.update(change.ref, mutate, status=False) is not None

    @activity.defn(name="kube.remove_finalizer")
    def remove_finalizer(self, change: FinalizerChange) -> bool:
        """Drop the finalizer; the apiserver then completes a pending deletion."""

        def mutate(obj: dict[str, Any]) -> bool:
            finalizers = list(obj["metadata"].get("finalizers") or [])
            if change.finalizer not in finalizers:
                return False
            obj["metadata"]["finalizers"] = [f for f in finalizers if f != change.finalizer]
            return True

        self._objects.update(change.ref, mutate, status=False)
        return True

    @activity.defn(name="kube.remove_annotation")
    def remove_annotation(self, removal: AnnotationRemoval) -> bool:
        """Remove metadata.annotations[name] if it still holds `value` (the workflow consumed that
        value); True when this call removed it. Written with the read resourceVersion, so a user
        who sets a new value meanwhile keeps it; False when absent, changed, or the object is gone."""
        removed = False

        def mutate(obj: dict[str, Any]) -> bool:
            nonlocal removed
            annotations = dict(obj["metadata"].get("annotations") or {})
            removed = annotations.get(removal.name) == removal.value
            if removed:
                del annotations[removal.name]
                obj["metadata"]["annotations"] = annotations
            return removed

        if self._objects.update(removal.ref, mutate, status=False) is None:
            return False
        return removed

    @activity.defn(name="kube.emit_event")
    def emit_event(self, spec: EventSpec) -> None:
        """Record an Event on the object (Warning events are how bad input is reported)."""
        self._record(spec.ref, spec.type, spec.reason, spec.message, spec.component)

    @activity.defn(name="kube.artifact_referenced")
    def artifact_referenced(self, query: ArtifactReferences) -> bool:
        """Whether any other Model or ClusterModel reports the same artifact digest, or BaseModel,
        ClusterBaseModel or FineTunedWeight is annotated with it, in which case deleting one of them
        must leave the artifact in the registry."""
        for group, version, plural in _ARTIFACT_HOLDERS:
            for obj in list_items(self.custom.list_cluster_custom_object, group, version, plural):
                digest = ((obj.get("status") or {}).get("artifact") or {}).get("digest")
                if digest == query.digest and obj["metadata"].get("uid") != query.except_uid:
                    return True
        for group, version, plural in _ANNOTATED_HOLDERS:
            for obj in list_items(self.custom.list_cluster_custom_object, group, version, plural):
                annotated = (obj["metadata"].get("annotations") or {}).get(ARTIFACT_ANNOTATION) or ""
                if annotated.endswith(f"@{query.digest}") and obj["metadata"].get("uid") != query.except_uid:
                    return True
        return False

    @activity.defn(name="kube.list_policy_attachments")
    def list_policy_attachments(self, query: PolicyAttachments) -> int:
        """How many rollout groups of the namespace's InferenceServices (not being deleted) name
        the RolloutPolicy in their policyRef: a count, never a list (RolloutPolicyStatus)."""
        items = list_items(self.custom.list_namespaced_custom_object,
                           "ome.io", "v1beta1", query.namespace, "inferenceservices")
        count = 0
        for obj in items:
            if obj["metadata"].get("deletionTimestamp"):
                continue
            groups = ((obj.get("spec") or {}).get("rollout") or {}).get("groups") or []
            count += sum(1 for group in groups
                         if ((group or {}).get("policyRef") or {}).get("name") == query.name
                         and ((group or {}).get("policyRef") or {}).get("kind", "RolloutPolicy") == "RolloutPolicy")
        return count

    def all(self) -> list[Any]:
        return [self.read_object, self.patch_status, self.ensure_finalizer, self.remove_finalizer,
                self.remove_annotation, self.emit_event, self.artifact_referenced, self.list_policy_attachments]
