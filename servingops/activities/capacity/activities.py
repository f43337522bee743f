"""`capacity.observe` and `capacity.write_status`: a workload cluster's accelerator capacity, read from
its Nodes and Kueue ResourceFlavors, written on its root AcceleratorQuota's status.capacity.

Both talk to the cluster the worker runs in, with the worker's own identity. observe only reads: the
AcceleratorQuota by name, then (for a root) every AcceleratorQuota of the tree for the budgets'
resource names, every Kueue ResourceFlavor (kueue.x-k8s.io/v1beta2) and every Node; the rule that
turns them into numbers is attribution.py. write_status merge-patches status.capacity through the
status subresource, under the resourceVersion of a read that checked the uid it was asked for, so a
same-named newer object is never written; the patch replaces the list whole (the report workflow is
its only writer).

Retries: a failure of the apiserver raises and is retried (KUBE policy); a cluster without Kueue's
ResourceFlavor API is an answer (no flavors, `flavors_served` False), not an error; so is a 403 on the list of
WorkloadClusters (`refused`: the workflow reports it on the root, CapacityReported False AccessRefused, and a
Warning, and samples again), where the worker's interceptor would have failed the sample for good.
write_status sets the CapacityReported condition beside status.capacity when asked (the object's other
conditions kept: the list is rewritten from the read it is patched under) and records the Events it is given.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio import activity

from servingops.activities.capacity.attribution import FlavorView, NodeView, observe_capacity
from servingops.activities.capacity.types import ObserveInput, ObserveOutput, WriteInput, WriteOutput
from servingops.api_models.conditions import merge_conditions
from servingops.api_models.ome.accelerator_quota import AcceleratorCapacityStatus
from servingops.clients.kube.calls import MERGE_PATCH, call
from servingops.clients.kube.custom_objects import CONFLICT_RETRIES, CustomObjects
from servingops.clients.kube.errors import absent, conflict, conflicts_outlasted, forbidden
from servingops.clients.kube.events import record_event

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "acceleratorquotas"
KUEUE_GROUP, KUEUE_VERSION, FLAVORS = "kueue.x-k8s.io", "v1beta2", "resourceflavors"
PAGE = 500


def pages(call: Callable[[str | None], Any]) -> Iterator[Any]:
    """Every item of a paginated list; `call(continue_token)` returns one page."""
    token: str | None = None
    while True:
        page = call(token)
        meta = page["metadata"] if isinstance(page, dict) else page.metadata
        items = page["items"] if isinstance(page, dict) else page.items
        yield from items or []
        token = (meta.get("continue") if isinstance(meta, dict) else meta._continue) or None
        if not token:
            return


def refusal(what: str, exc: ApiException) -> str:
    """A 403 in words: what was refused and the apiserver's own answer (its Status.message)."""
    return f"the worker may not {what}: {exc.status} {exc.reason}: {str(exc.body)[:400]}"


def node_view(node: client.V1Node) -> NodeView:
    conditions = (node.status.conditions if node.status else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    allocatable = (node.status.allocatable if node.status else None) or {}
    meta = node.metadata or client.V1ObjectMeta()
    return NodeView(name=str(meta.name or ""), labels=dict(meta.labels or {}), ready=ready,
                    unschedulable=bool(node.spec.unschedulable if node.spec else False),
                    allocatable={str(k): str(v) for k, v in allocatable.items()})


def flavor_view(flavor: dict[str, Any]) -> FlavorView:
    meta = flavor.get("metadata") or {}
    return FlavorView(name=str(meta.get("name", "")), uid=meta.get("uid") or None,
                      node_labels=dict((flavor.get("spec") or {}).get("nodeLabels") or {}))


def _readable(entries: list[Any]) -> list[AcceleratorCapacityStatus]:
    """The report's entries that parse. They only seed a new run's high-water marks: an entry someone else
    wrote badly is left out (and overwritten by the next write), never an error the KUBE policy would
    retry for ever."""
    readable = []
    for entry in entries:
        try:
            readable.append(AcceleratorCapacityStatus.model_validate(entry))
        except ValidationError:
            continue
    return readable


def budget_resource_names(quotas: list[dict[str, Any]]) -> set[str]:
    return {str(b["resourceName"]) for q in quotas for b in (q.get("spec") or {}).get("budgets") or []
            if b.get("resourceName")}


class CapacityActivities:
    """Bound to the worker's ApiClient (the workload cluster this report describes)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._objects = CustomObjects(self._custom)
        self._core = client.CoreV1Api(api_client)

    @activity.defn(name="capacity.observe")
    def observe(self, request: ObserveInput) -> ObserveOutput:
        obj = self._objects.get(request.quota)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return ObserveOutput(present=False)
        meta = obj["metadata"]
        reported = _readable((obj.get("status") or {}).get("capacity") or [])
        known = ObserveOutput(present=True, generation=int(meta.get("generation", 0)),
                              resource_version=str(meta.get("resourceVersion", "")), reported=reported)
        if ((obj.get("spec") or {}).get("parentRef") or {}).get("name"):
            return known
        quotas = list(pages(lambda token: call(self._custom.list_cluster_custom_object,
                                                GROUP, VERSION, PLURAL, limit=PAGE, _continue=token)))
        names = sorted(budget_resource_names(quotas) | set(request.resource_names))
        try:
            flavors = [flavor_view(f) for f in pages(lambda token: call(
                self._custom.list_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, FLAVORS, limit=PAGE,
                _continue=token))]
            served = True
        except ApiException as exc:
            if not absent(exc):  # absent: Kueue's ResourceFlavor kind is not served
                raise
            flavors, served = [], False
        nodes = [node_view(n) for n in pages(lambda token: call(self._core.list_node, limit=PAGE, _continue=token))]
        observed_at = dt.datetime.now(dt.UTC).replace(microsecond=0)
        registered, refused = self._workload_clusters()
        return known.model_copy(update={
            "root": True, "observed_at": observed_at, "resource_names": names,
            "capacity": observe_capacity(nodes, flavors, names), "flavors_served": served,
            "workload_clusters": registered, "refused": refused})

    def _workload_clusters(self) -> tuple[int, str | None]:
        """How many WorkloadClusters are registered here (this is a management plane when any are); 0 where
        the kind is not served. A 403 is an answer (0, what the apiserver said)."""
        try:
            listed = cast(dict[str, Any], call(self._custom.list_cluster_custom_object, GROUP, VERSION,
                                               "workloadclusters", limit=PAGE))
        except ApiException as exc:
            if absent(exc):
                return 0, None
            if forbidden(exc):
                return 0, refusal("list WorkloadClusters", exc)
            raise
        items = listed.get("items") or []
        return len(items) + (1 if (listed.get("metadata") or {}).get("continue") else 0), None

    @activity.defn(name="capacity.write_status")
    def write_status(self, request: WriteInput) -> WriteOutput:
        ref = request.quota
        capacity = None if request.capacity is None else [entry.to_api() for entry in request.capacity]
        for _ in range(CONFLICT_RETRIES):
            # Read first: the uid is checked on the object read, and the patch carries that read's
            # resourceVersion, so an object that changed in between (or a same-named newer one)
            # answers 409 and is read again; the status subresource ignores a uid in the patch.
            obj = self._objects.get(ref)
            if obj is None:
                return WriteOutput(present=False)
            status: dict[str, Any] = {"capacity": capacity}
            if request.condition is not None:
                # A merge patch replaces the list whole: rewritten from this read, under its resourceVersion.
                current = (obj.get("status") or {}).get("conditions") or []
                status["conditions"] = merge_conditions(
                    current, [request.condition], generation=int(obj["metadata"].get("generation", 0)),
                    now=dt.datetime.now(dt.UTC))
            body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": status}
            try:
                written = cast(dict[str, Any], call(self._custom.patch_cluster_custom_object_status,
                                                    GROUP, VERSION, PLURAL, ref.name, body, _content_type=MERGE_PATCH))
            except ApiException as exc:
                if conflict(exc):
                    continue
                if absent(exc):
                    return WriteOutput(present=False)
                raise
            for event in request.events:
                record_event(self._core, api_version=f"{GROUP}/{VERSION}", kind="AcceleratorQuota", name=ref.name,
                             namespace=None, uid=ref.uid, event_type=event.type, reason=event.reason,
                             message=event.message)
            return WriteOutput(present=True, resource_version=str(written["metadata"].get("resourceVersion", "")))
        raise conflicts_outlasted(ref.describe(), CONFLICT_RETRIES)

    def all(self) -> list[object]:
        return [self.observe, self.write_status]


__all__ = ["CapacityActivities", "budget_resource_names", "flavor_view", "node_view", "refusal"]
