"""The AcceleratorQuota tree on the real plane: `acceleratorquota.observe`, `.apply`, `.write_status`, `.reap`.

observe reads the node by its uid, lists every AcceleratorQuota (the tree is the set of their edges), and
reads what Kueue holds for the node: the Cohort and the ClusterQueue of its name, its LocalQueues (found by
the `ome.io/accelerator-quota` label, in every namespace), the namespaces labelled with it (the leaf's
bound namespaces), which of its budgets' ResourceFlavors and its priorityTier's WorkloadPriorityClass
exist, and every managed ClusterQueue (a grouping rolls their usage up). A cluster that serves no Kueue
Cohort kind is an answer (plane.served False), not an error.

apply first puts the `ome.io/accelerator-quota` finalizer on the node (so a deletion waits for `reap`),
then server-side applies each rendered object as field manager `servingops-quota` (an object of that name
without the node's labels is never applied over: the workflow checked, and apply checks again by reading
first) and deletes the removals that carry the node's labels. write_status merge-patches the fields of
status this controller owns (observedGeneration, parent, budgets, materialization, conditions; the root's
status.capacity and its CapacityReported condition belong to the capacity report and are left alone) under
the resourceVersion of a read that checked the uid, then records the given Events. reap deletes every
Kueue object carrying the node's label and removes the finalizer.

Retries: an apiserver failure raises (KUBE policy); a 422 from Kueue's schema or webhook is an answer
(`refused`), since retrying the same object cannot help.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio import activity

from servingops.activities.capacity.activities import PAGE, pages
from servingops.activities.capacity.quota_types import (
    QuotaApplyInput,
    QuotaApplyOutput,
    QuotaObserveInput,
    QuotaObserveOutput,
    QuotaReapInput,
    QuotaReapOutput,
    QuotaWriteInput,
    QuotaWriteOutput,
)
from servingops.activities.capacity.types import CAPACITY_CONDITION
from servingops.api_models.ome.accelerator_quota import AcceleratorQuotaStatus
from servingops.api_models.ome.enums import AcceleratorQuotaDistributionPolicy
from servingops.api_models.operator_config import OperatorConfigError, QuotaDefaults
from servingops.clients.kube.calls import MERGE_PATCH, apply, call, delete_if_present, get_or_none, list_items
from servingops.clients.kube.custom_objects import CustomObjects, update_optimistically
from servingops.clients.kube.errors import absent, forbidden, invalid
from servingops.clients.kube.events import record_event
from servingops.rendering.accelerator_quota import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODE_LABEL,
    ClusterQueueView,
    CohortView,
    LocalQueueView,
    Plane,
    QuotaNode,
    owned,
    root_of,
)
from servingops.rendering.quota_projection import PROJECTION_FINALIZER

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "acceleratorquotas"
FINALIZER = "ome.io/accelerator-quota"
FIELD_MANAGER = "servingops-quota"
OWNED_STATUS_FIELDS = ("observedGeneration", "parent", "sourceGeneration", "budgets", "clusters", "materialization",
                       "conditions")
MATERIALIZATION_FIELDS = ("frozen", "frozenAt", "reason", "lastAppliedGeneration", "lastAppliedTime")
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
COHORTS, QUEUES, LOCAL_QUEUES = "cohorts", "clusterqueues", "localqueues"
FLAVORS, PRIORITY_CLASSES = "resourceflavors", "workloadpriorityclasses"


def _readable_status(raw: Any) -> AcceleratorQuotaStatus | None:
    if not raw:
        return None
    try:
        return AcceleratorQuotaStatus.model_validate(raw)
    except ValidationError:
        return None


class AcceleratorQuotaActivities:
    """Bound to the worker's ApiClient (the plane whose Kueue the tree materializes into)."""

    def __init__(self, api_client: client.ApiClient, config: Callable[[], QuotaDefaults] | None = None) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._objects = CustomObjects(self._custom)
        self._core = client.CoreV1Api(api_client)
        self._config = config
        """The operator ConfigMap's quota block (activities/operator_config.py QuotaConfigReader); None: none."""

    # -- observe ---------------------------------------------------------------------------------

    @activity.defn(name="acceleratorquota.observe")
    def observe(self, request: QuotaObserveInput) -> QuotaObserveOutput:
        obj = self._objects.get(request.quota)
        if obj is None:
            return QuotaObserveOutput(present=False)
        node = QuotaNode.from_object(obj)
        listed = list(pages(lambda token: call(
            self._custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, limit=PAGE, _continue=token)))
        tree = [QuotaNode.from_object(q) for q in listed]
        if node.name not in {n.name for n in tree}:
            tree.append(node)
        root = root_of(tree)
        root_status = next((_readable_status(q.get("status")) for q in listed
                            if (q.get("metadata") or {}).get("name") == root), None)
        default, error = self._operator_default()
        clusters, leaving = self._workload_clusters() if node.projected is None else ([], [])
        return QuotaObserveOutput(present=True, deleting=node.deleting, node=node, tree=tree,
                                  plane=self._plane(node), status=_readable_status(obj.get("status")),
                                  clusters=clusters, deregistering=leaving,
                                  root_capacity=list(root_status.capacity or []) if root_status else [],
                                  default_distribution=default, config_error=error)

    def _operator_default(self) -> tuple[AcceleratorQuotaDistributionPolicy | None, str]:
        """quota.defaultDistribution as the ConfigMap says now, or why the block does not parse."""
        if self._config is None:
            return None, ""
        try:
            return self._config().default_distribution, ""
        except OperatorConfigError as exc:
            return None, str(exc)

    def _workload_clusters(self) -> tuple[list[str], list[str]]:
        """The registered WorkloadClusters, and those being deregistered whose deletion the projection's
        finalizer holds (none where the kind is not served)."""
        try:
            listed = list_items(self._custom.list_cluster_custom_object, GROUP, VERSION, "workloadclusters")
        except ApiException as exc:
            if absent(exc):
                return [], []
            raise
        registered, leaving = [], []
        for item in listed:
            meta = item.get("metadata") or {}
            if not meta.get("deletionTimestamp"):
                registered.append(str(meta.get("name", "")))
            elif PROJECTION_FINALIZER in (meta.get("finalizers") or []):
                leaving.append(str(meta.get("name", "")))
        return sorted(registered), sorted(leaving)

    def _plane(self, node: QuotaNode) -> Plane:
        try:
            cohort = get_or_none(self._custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, COHORTS,
                                 node.name)
            queues = list(pages(lambda token: call(
                self._custom.list_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, QUEUES,
                label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}", limit=PAGE, _continue=token)))
        except ApiException as exc:
            if absent(exc):
                return Plane(served=False)
            raise
        if cohort is None:
            # 404: no such Cohort, or no such kind; a list of the kind tells them apart.
            try:
                call(self._custom.list_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, COHORTS, limit=1)
            except ApiException as exc:
                if absent(exc):
                    return Plane(served=False)
                raise
        leaf_queues = {}
        for queue in queues:
            name = str(((queue.get("metadata") or {}).get("labels") or {}).get(NODE_LABEL, ""))
            if name:
                leaf_queues[name] = ClusterQueueView.from_object(queue, name)
        own_queue = leaf_queues.get(node.name)
        if own_queue is None or own_queue.name != node.name:
            found = get_or_none(self._custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, QUEUES,
                                node.name)
            own_queue = None if found is None else ClusterQueueView.from_object(cast(dict[str, Any], found), node.name)
        local = [LocalQueueView(namespace=str(q["metadata"].get("namespace", "")), name=str(q["metadata"]["name"]),
                                cluster_queue=str((q.get("spec") or {}).get("clusterQueue", "")))
                 for q in list_items(self._custom.list_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION,
                                     LOCAL_QUEUES, label_selector=f"{NODE_LABEL}={node.name}")]
        bound = sorted(str(ns.metadata.name) for ns in list_items(
            self._core.list_namespace, label_selector=f"{NODE_LABEL}={node.name}"))
        flavors = sorted({b.resource_flavor for b in node.budgets
                          if get_or_none(self._custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION,
                                         FLAVORS, b.resource_flavor) is not None})
        classes = []
        if node.priority_tier and get_or_none(self._custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION,
                                              PRIORITY_CLASSES, node.priority_tier) is not None:
            classes.append(node.priority_tier)
        cohort_view = None
        if cohort is not None:
            meta = cast(dict[str, Any], cohort).get("metadata") or {}
            cohort_view = CohortView(name=node.name, ours=owned(meta, node.name),
                                     parent=(cast(dict[str, Any], cohort).get("spec") or {}).get("parentName") or None)
        return Plane(served=True, cohort=cohort_view, cluster_queue=own_queue, local_queues=local,
                     bound_namespaces=bound, flavors=flavors, priority_classes=classes, leaf_queues=leaf_queues)

    # -- apply -----------------------------------------------------------------------------------

    def _ensure_finalizer(self, request: QuotaApplyInput) -> bool:
        def add(obj: dict[str, Any]) -> bool:
            meta = obj["metadata"]
            finalizers = list(meta.get("finalizers") or [])
            if FINALIZER in finalizers:
                return False
            meta["finalizers"] = [*finalizers, FINALIZER]
            return True

        ref = request.quota
        found = update_optimistically(ref, lambda: self._objects.get(ref), lambda obj: cast(dict[str, Any], call(
            self._custom.replace_cluster_custom_object, GROUP, VERSION, PLURAL, ref.name, obj)), add)
        return found is not None and not (found.get("metadata") or {}).get("deletionTimestamp")

    def _get(self, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        """A Kueue object of the node's (each kind named literally: the RBAC check reads the calls)."""
        if kind == "LocalQueue":
            found = get_or_none(self._custom.get_namespaced_custom_object, KUEUE_GROUP, KUEUE_VERSION, namespace,
                                LOCAL_QUEUES, name)
        elif kind == "ClusterQueue":
            found = get_or_none(self._custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, QUEUES, name)
        else:
            found = get_or_none(self._custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, COHORTS, name)
        return cast(dict[str, Any] | None, found)

    def _delete(self, kind: str, name: str, namespace: str | None) -> None:
        if kind == "LocalQueue":
            delete_if_present(self._custom.delete_namespaced_custom_object, KUEUE_GROUP, KUEUE_VERSION, namespace,
                              LOCAL_QUEUES, name)
        elif kind == "ClusterQueue":
            delete_if_present(self._custom.delete_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, QUEUES, name)
        else:
            delete_if_present(self._custom.delete_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, COHORTS, name)

    def _apply(self, kind: str, name: str, namespace: str | None, body: dict[str, Any]) -> None:
        if kind == "LocalQueue":
            apply(self._custom.patch_namespaced_custom_object, KUEUE_GROUP, KUEUE_VERSION, namespace, LOCAL_QUEUES,
                  name, body, field_manager=FIELD_MANAGER)
        elif kind == "ClusterQueue":
            apply(self._custom.patch_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, QUEUES, name, body,
                  field_manager=FIELD_MANAGER)
        elif kind == "Cohort":
            apply(self._custom.patch_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, COHORTS, name, body,
                  field_manager=FIELD_MANAGER)
        else:
            raise ValueError(f"a quota node materializes no {kind}")

    @activity.defn(name="acceleratorquota.apply")
    def apply(self, request: QuotaApplyInput) -> QuotaApplyOutput:
        if not self._ensure_finalizer(request):
            return QuotaApplyOutput(present=False)
        node = request.quota.name
        out = QuotaApplyOutput(present=True)
        for removal in request.removals:
            found = self._get(removal.kind, removal.name, removal.namespace)
            if found is None or not owned(found.get("metadata") or {}, node):
                continue
            self._delete(removal.kind, removal.name, removal.namespace)
            out.removed.append(f"{removal.kind}/{removal.namespace or ''}/{removal.name}")
        for body in request.objects:
            kind, meta = str(body["kind"]), body["metadata"]
            namespace, name = meta.get("namespace"), str(meta["name"])
            existing = self._get(kind, name, namespace)
            if existing is not None and not owned(existing.get("metadata") or {}, node):
                out.refused = f"{kind} {name} exists and is not this node's: not adopted"
                return out
            try:
                self._apply(kind, name, namespace, body)
            except ApiException as exc:
                if invalid(exc) or forbidden(exc):
                    # An answer, not a retry: the node says it (Materialized False MaterializationFailed and a
                    # Warning) and the next pass (the workflow's timer) tries again, so a role mended later, or
                    # an apiserver whose RBAC was still syncing, heals by itself.
                    out.refused = f"{kind} {name}: {exc.reason}: {str(exc.body)[:400]}"
                    return out
                raise
            out.applied.append(f"{kind}/{namespace or ''}/{name}")
        return out

    # -- status ----------------------------------------------------------------------------------

    @activity.defn(name="acceleratorquota.write_status")
    def write_status(self, request: QuotaWriteInput) -> QuotaWriteOutput:
        ref = request.quota
        body_status: dict[str, Any] = {name: None for name in OWNED_STATUS_FIELDS}
        status = request.status.to_api()
        body_status.update({k: v for k, v in status.items() if k in OWNED_STATUS_FIELDS})
        if isinstance(body_status.get("materialization"), dict):
            # A merge patch keeps a nested key it does not name: name every one (a thawed node loses frozenAt).
            body_status["materialization"] = {**{k: None for k in MATERIALIZATION_FIELDS},
                                              **body_status["materialization"]}

        def patch(obj: dict[str, Any]) -> dict[str, Any]:
            # The capacity report's own condition (activities/capacity/types.py CAPACITY_CONDITION) is not this
            # controller's: carried over from the read this patch is made under, never dropped by a rewrite.
            theirs = [c for c in (obj.get("status") or {}).get("conditions") or []
                      if isinstance(c, dict) and c.get("type") == CAPACITY_CONDITION]
            ours = [c for c in body_status.get("conditions") or [] if c.get("type") != CAPACITY_CONDITION]
            conditions = ours + theirs or body_status.get("conditions")
            body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                    "status": {**body_status, "conditions": conditions}}
            return cast(dict[str, Any], call(self._custom.patch_cluster_custom_object_status,
                                             GROUP, VERSION, PLURAL, ref.name, body, _content_type=MERGE_PATCH))

        written = update_optimistically(ref, lambda: self._objects.get(ref), patch, lambda _: True)
        if written is None:
            return QuotaWriteOutput(present=False)
        for event in request.events:
            record_event(self._core, api_version=f"{GROUP}/{VERSION}", kind="AcceleratorQuota", name=ref.name,
                         namespace=None, uid=ref.uid, event_type=event.type, reason=event.reason,
                         message=event.message)
        return QuotaWriteOutput(present=True, resource_version=str(written["metadata"].get("resourceVersion", "")))

    # -- deletion --------------------------------------------------------------------------------

    @activity.defn(name="acceleratorquota.reap")
    def reap(self, request: QuotaReapInput) -> QuotaReapOutput:
        try:
            return self._reap(request)
        except ApiException as exc:
            if forbidden(exc):
                # An answer, as in apply: the worker's interceptor would make a 403 a permanent failure of the
                # node's workflow, leaving the node stuck on its finalizer with nobody saying why. The workflow
                # reports it on the node and tries again, so a role mended later completes the deletion.
                return QuotaReapOutput(refused=f"{exc.reason}: {str(exc.body)[:400]}")
            raise

    def _reap(self, request: QuotaReapInput) -> QuotaReapOutput:
        ref = request.quota
        out = QuotaReapOutput()
        for kind in ("ClusterQueue", "Cohort"):
            found = self._get(kind, ref.name, None)
            if found is not None and owned(found.get("metadata") or {}, ref.name):
                self._delete(kind, ref.name, None)
                out.removed.append(f"{kind}//{ref.name}")
        try:
            local = list_items(self._custom.list_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, LOCAL_QUEUES,
                               label_selector=f"{NODE_LABEL}={ref.name}")
        except ApiException as exc:
            if not absent(exc):
                raise
            local = []
        for queue in local:
            meta = queue.get("metadata") or {}
            if owned(meta, ref.name):
                self._delete("LocalQueue", str(meta["name"]), str(meta.get("namespace", "")))
                out.removed.append(f"LocalQueue/{meta.get('namespace', '')}/{meta['name']}")

        def drop(obj: dict[str, Any]) -> bool:
            finalizers = list(obj["metadata"].get("finalizers") or [])
            if FINALIZER not in finalizers:
                return False
            obj["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
            return True

        found = update_optimistically(ref, lambda: self._objects.get(ref), lambda obj: cast(dict[str, Any], call(
            self._custom.replace_cluster_custom_object, GROUP, VERSION, PLURAL, ref.name, obj)), drop)
        out.released = True if found is None else FINALIZER not in (found["metadata"].get("finalizers") or [])
        return out

    def all(self) -> list[object]:
        return [self.observe, self.apply, self.write_status, self.reap]


__all__ = ["FIELD_MANAGER", "FINALIZER", "AcceleratorQuotaActivities"]
