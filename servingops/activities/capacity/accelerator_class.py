"""`acceleratorclass.observe` and `acceleratorclass.write_status`: an AcceleratorClass's inventory, read
from the cluster's Nodes and Pods (counted by class_inventory.py, pure), written on its status.

observe reads the class by its uid, then every Node (read as the capacity report reads them,
activities.node_view) and every Pod bound to a node that is not finished (`spec.nodeName!=`,
`status.phase!=Succeeded`, `status.phase!=Failed` as field selectors, so the apiserver sends only pods
that can hold an accelerator). write_status merge-patches the whole status through the status
subresource under the resourceVersion of a read that checked the uid, so a same-named newer class is
never written; the workflow is its only writer.

ensure_flavor creates the Kueue ResourceFlavor the class names (integration.kueueResourceFlavor) unless one
of that name exists; an existing one is never changed (class_flavor.py says why).

Retries: a failure of the apiserver raises and is retried (KUBE policy); a spec the model cannot read
is an answer (`problem`), and a cluster without Kueue's ResourceFlavor kind an answer (`served` False), not
errors.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio import activity

from servingops.activities.capacity.activities import PAGE, node_view, pages
from servingops.activities.capacity.class_flavor import FlavorState
from servingops.activities.capacity.class_inventory import PodView, effective_requests, inventory
from servingops.activities.capacity.class_types import (
    ClassFlavorInput,
    ClassFlavorOutput,
    ClassObserveInput,
    ClassObserveOutput,
    ClassWriteInput,
    ClassWriteOutput,
)
from servingops.api_models.ome.accelerator_class import AcceleratorClassSpec, AcceleratorClassStatus
from servingops.clients.kube.calls import MERGE_PATCH, call, create_unless_exists, get_or_none
from servingops.clients.kube.custom_objects import CustomObjects, update_optimistically
from servingops.clients.kube.errors import absent, forbidden, invalid
from servingops.clients.kube.events import record_event

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "acceleratorclasses"
KUEUE_GROUP, KUEUE_VERSION, FLAVORS = "kueue.x-k8s.io", "v1beta2", "resourceflavors"
CLASS_ANNOTATION = "ome.io/accelerator-class"
"""On a ResourceFlavor this workflow created: the class it was made from."""
HOLDING_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
"""Pods that can hold an accelerator: bound to a node and not finished."""


def pod_view(pod: client.V1Pod, api: client.ApiClient) -> PodView:
    meta = pod.metadata or client.V1ObjectMeta()
    phase = pod.status.phase if pod.status else None
    spec = cast(dict[str, Any], api.sanitize_for_serialization(pod.spec) or {})  # type: ignore[no-untyped-call]
    return PodView(name=str(meta.name or ""), namespace=str(meta.namespace or ""),
                   node_name=spec.get("nodeName") or None, terminal=phase in ("Succeeded", "Failed"),
                   requests=effective_requests(spec))


def _readable_status(raw: Any) -> AcceleratorClassStatus | None:
    if not raw:
        return None
    try:
        return AcceleratorClassStatus.model_validate(raw)
    except ValidationError:
        return None  # someone else wrote it badly: the next write replaces it


class AcceleratorClassActivities:
    """Bound to the worker's ApiClient (the cluster whose nodes the classes describe)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._objects = CustomObjects(self._custom)
        self._core = client.CoreV1Api(api_client)

    @activity.defn(name="acceleratorclass.observe")
    def observe(self, request: ClassObserveInput) -> ClassObserveOutput:
        obj = self._objects.get(request.accelerator_class)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return ClassObserveOutput(present=False)
        known = ClassObserveOutput(present=True, generation=int(obj["metadata"].get("generation", 0)),
                                   status=_readable_status(obj.get("status")))
        try:
            spec = AcceleratorClassSpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            return known.model_copy(update={"problem": f"spec.{exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}"})
        nodes = [node_view(n) for n in pages(lambda token: call(self._core.list_node, limit=PAGE, _continue=token))]
        pods = [pod_view(p, self._api) for p in pages(lambda token: call(
            self._core.list_pod_for_all_namespaces, field_selector=HOLDING_PODS, limit=PAGE, _continue=token))]
        observed_at = dt.datetime.now(dt.UTC).replace(microsecond=0)
        flavor = self._flavor(spec)
        return known.model_copy(update={"observed_at": observed_at, "inventory": inventory(spec, nodes, pods),
                                        "flavor": flavor})

    def _flavor(self, spec: AcceleratorClassSpec) -> FlavorState | None:
        name = spec.integration.kueue_resource_flavor if spec.integration else None
        if not name:
            return None
        state = FlavorState(name=name, desired_labels=dict(spec.discovery.node_selector or {}))
        found = get_or_none(self._custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, FLAVORS, name)
        if found is None:
            # 404: no such flavor, or no such kind; a list of the kind tells them apart.
            try:
                call(self._custom.list_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, FLAVORS, limit=1)
            except ApiException as exc:
                if absent(exc):
                    return state.model_copy(update={"served": False})
                raise
            return state
        labels = (cast(dict[str, Any], found).get("spec") or {}).get("nodeLabels") or {}
        return state.model_copy(update={"exists": True, "node_labels": {str(k): str(v) for k, v in labels.items()}})

    @activity.defn(name="acceleratorclass.ensure_flavor")
    def ensure_flavor(self, request: ClassFlavorInput) -> ClassFlavorOutput:
        """Create the ResourceFlavor unless one of that name exists (never changed then)."""
        body = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "ResourceFlavor",
                "metadata": {"name": request.flavor, "labels": {"app.kubernetes.io/managed-by": "servingops"},
                             "annotations": {CLASS_ANNOTATION: request.accelerator_class.name}},
                "spec": {"nodeLabels": dict(request.node_labels)}}
        try:
            created = create_unless_exists(self._custom.create_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION,
                                           FLAVORS, body)
        except ApiException as exc:
            if absent(exc):
                return ClassFlavorOutput(served=False)
            if forbidden(exc) or invalid(exc):
                # An answer: the worker's interceptor would make a 403 or 422 a permanent failure of the class's
                # workflow (its inventory would stop). The class reports it (KueueResourceFlavorSynced False
                # FlavorCreateRefused and a Warning) and the next sample tries again, so a mended role heals.
                return ClassFlavorOutput(served=True, refused=f"{exc.status} {exc.reason}: {str(exc.body)[:400]}")
            raise
        return ClassFlavorOutput(served=True, created=created is not None)

    @activity.defn(name="acceleratorclass.write_status")
    def write_status(self, request: ClassWriteInput) -> ClassWriteOutput:
        ref = request.accelerator_class
        status = request.status.to_api()
        # Every field of the status is ours: a field we no longer state is removed.
        body_status: dict[str, Any] = {name: None for name in ("nodes", "totalAccelerators", "availableAccelerators",
                                                               "availableNodes", "lastUpdated", "conditions")}
        body_status.update(status)

        def patch(obj: dict[str, Any]) -> dict[str, Any]:
            # Under the resourceVersion read (the read checked the uid): a change in between is a 409, read again.
            body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": body_status}
            return cast(dict[str, Any], call(self._custom.patch_cluster_custom_object_status,
                                             GROUP, VERSION, PLURAL, ref.name, body, _content_type=MERGE_PATCH))

        written = update_optimistically(ref, lambda: self._objects.get(ref), patch, lambda _: True)
        if written is None:
            return ClassWriteOutput(present=False)
        for event in request.events:
            record_event(self._core, api_version=f"{GROUP}/{VERSION}", kind="AcceleratorClass", name=ref.name,
                         namespace=None, uid=ref.uid, event_type=event.type, reason=event.reason,
                         message=event.message)
        return ClassWriteOutput(present=True, resource_version=str(written["metadata"].get("resourceVersion", "")))

    def all(self) -> list[object]:
        return [self.observe, self.write_status, self.ensure_flavor]


__all__ = ["AcceleratorClassActivities", "pod_view"]
