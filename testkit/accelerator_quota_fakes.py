"""A fake plane for AcceleratorQuotaWorkflow: AcceleratorQuotas, Kueue's Cohorts, ClusterQueues, LocalQueues,
ResourceFlavors and WorkloadPriorityClasses, and namespaces, in memory, serving `acceleratorquota.observe`,
`.apply`, `.write_status` and `.reap` under their wire names and payloads.

Held to the real activities (activities/capacity/accelerator_quota.py) by
tests/test_accelerator_quota_conformance.py. What the fake does not model: Kueue's admission (a test sets a
ClusterQueue's usage with `set_usage`; the queue is Active once every flavor it names exists), server-side
apply's field ownership (an apply replaces the object's labels and spec, keeping its uid and status),
resourceVersions (it counts writes), and a spec the CRD schema would refuse."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio import activity

from servingops.activities.capacity.accelerator_quota import FINALIZER, OWNED_STATUS_FIELDS
from servingops.activities.capacity.quota_types import (
    QuotaApplyInput,
    QuotaApplyOutput,
    QuotaEvent,
    QuotaObserveInput,
    QuotaObserveOutput,
    QuotaReapInput,
    QuotaReapOutput,
    QuotaWriteInput,
    QuotaWriteOutput,
)
from servingops.activities.placement.quota_types import QuotaProjectInput, QuotaReleaseInput, QuotaUnprojectInput
from servingops.api_models.ome.accelerator_quota import (
    AcceleratorCapacityStatus,
    AcceleratorQuota,
    AcceleratorQuotaStatus,
)
from servingops.api_models.ome.enums import AcceleratorQuotaDistributionPolicy
from servingops.api_models.refs import ObjectRef
from servingops.rendering.accelerator_quota import (
    MANAGED_BY,
    NODE_LABEL,
    PROJECTED_LABEL,
    ClusterQueueView,
    CohortView,
    LocalQueueView,
    Plane,
    QuotaNode,
    owned,
    root_of,
)
from servingops.rendering.quota_projection import ClusterOutcome, CopyView, copy_conflict, copy_in_sync


@dataclass
class StoredQuota:
    name: str
    spec: dict[str, Any]
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    generation: int = 1
    created: str = "2026-12-07T00:00:00Z"
    status: dict[str, Any] = field(default_factory=dict)
    finalizers: list[str] = field(default_factory=list)
    deleting: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    def ref(self) -> ObjectRef:
        return ObjectRef.of(AcceleratorQuota, self.name, uid=self.uid)

    def object(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "uid": self.uid, "generation": self.generation,
                                "creationTimestamp": self.created, "finalizers": list(self.finalizers)}
        if self.deleting:
            meta["deletionTimestamp"] = "2026-12-07T00:00:00Z"
        if self.labels:
            meta["labels"] = dict(self.labels)
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        return {"metadata": meta, "spec": self.spec, "status": self.status}


@dataclass
class FakeQuotaWorld:
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    quotas: dict[str, StoredQuota] = field(default_factory=dict)
    cohorts: dict[str, dict[str, Any]] = field(default_factory=dict)
    cluster_queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    local_queues: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    flavors: set[str] = field(default_factory=set)
    priority_classes: set[str] = field(default_factory=set)
    kueue_served: bool = True
    events: list[QuotaEvent] = field(default_factory=list)
    writes: list[tuple[datetime, dict[str, Any]]] = field(default_factory=list)
    applies: list[QuotaApplyInput] = field(default_factory=list)
    observes: int = 0
    workload_clusters: list[str] = field(default_factory=list)
    """The WorkloadClusters registered on this plane (observe reports them to a node that is no copy)."""
    deregistering: list[str] = field(default_factory=list)
    """WorkloadClusters being deregistered, their deletion held by the projection's finalizer."""
    operator_default: AcceleratorQuotaDistributionPolicy | None = None
    """The operator ConfigMap's quota.defaultDistribution, as the real observe reads it."""
    config_error: str = ""
    """Set: the ConfigMap's quota block does not parse (observe reports why, and no default)."""
    refuse_reap: str = ""
    """Set: the apiserver refuses the reap's deletes (a 403), as the real reap answers it."""

    # -- the world, as a test sets it ---------------------------------------------------------------

    def add_quota(self, name: str, spec: dict[str, Any], *, created: str = "2026-12-07T00:00:00Z") -> StoredQuota:
        stored = self.quotas[name] = StoredQuota(name=name, spec=spec, created=created)
        return stored

    def edit(self, name: str, spec: dict[str, Any]) -> StoredQuota:
        stored = self.quotas[name]
        stored.spec, stored.generation = spec, stored.generation + 1
        return stored

    def delete_quota(self, name: str) -> None:
        stored = self.quotas[name]
        if stored.finalizers:
            stored.deleting = True
        else:
            del self.quotas[name]

    def bind_namespace(self, namespace: str, leaf: str) -> None:
        self.namespaces[namespace] = {NODE_LABEL: leaf}

    def set_usage(self, queue: str, flavor: str, resource: str, *, admitted: str, borrowed: str = "0",
                  reserved: str | None = None, workloads: int = 1) -> None:
        """What Kueue would report on a ClusterQueue's status."""
        status = self.cluster_queues[queue].setdefault("status", {})
        status["flavorsUsage"] = [{"name": flavor, "resources": [{"name": resource, "total": admitted,
                                                                  "borrowed": borrowed}]}]
        status["flavorsReservation"] = [{"name": flavor, "resources": [{"name": resource,
                                                                        "total": reserved or admitted}]}]
        status["admittedWorkloads"] = status["reservingWorkloads"] = workloads

    def _live(self, ref: ObjectRef) -> StoredQuota | None:
        found = self.quotas.get(ref.name)
        return found if found is not None and (not ref.uid or found.uid == ref.uid) else None

    def _kueue_status(self, queue: dict[str, Any]) -> None:
        names = [f["name"] for g in queue["spec"].get("resourceGroups") or [] for f in g.get("flavors") or []]
        missing = [n for n in names if n not in self.flavors]
        status = queue.setdefault("status", {})
        status["conditions"] = [{"type": "Active", "status": "False" if missing else "True",
                                 "reason": "FlavorNotFound" if missing else "Ready",
                                 "message": f"Can't admit new workloads: references missing ResourceFlavor(s): "
                                            f"{missing}" if missing else "Can admit new workloads"}]

    # -- the activities -----------------------------------------------------------------------------

    def observe(self, request: QuotaObserveInput) -> QuotaObserveOutput:
        self.observes += 1
        found = self._live(request.quota)
        if found is None:
            return QuotaObserveOutput(present=False)
        node = QuotaNode.from_object(found.object())
        tree = [QuotaNode.from_object(q.object()) for q in self.quotas.values()]
        status = AcceleratorQuotaStatus.model_validate(found.status) if found.status else None
        root = self.quotas.get(root_of(tree) or "")
        capacity = (root.status.get("capacity") or []) if root is not None else []
        return QuotaObserveOutput(present=True, deleting=found.deleting, node=node, tree=tree, plane=self._plane(node),
                                  status=status, clusters=sorted(self.workload_clusters) if node.projected is None
                                  else [], root_capacity=[AcceleratorCapacityStatus.model_validate(c)
                                                          for c in capacity],
                                  deregistering=sorted(self.deregistering) if node.projected is None else [],
                                  default_distribution=None if self.config_error else self.operator_default,
                                  config_error=self.config_error)

    def _plane(self, node: QuotaNode) -> Plane:
        if not self.kueue_served:
            return Plane(served=False)
        for queue in self.cluster_queues.values():
            self._kueue_status(queue)
        cohort = self.cohorts.get(node.name)
        queue = self.cluster_queues.get(node.name)
        leaf_queues = {str(q["metadata"]["labels"][NODE_LABEL]): ClusterQueueView.from_object(
            q, str(q["metadata"]["labels"][NODE_LABEL])) for q in self.cluster_queues.values()
            if (q["metadata"].get("labels") or {}).get(NODE_LABEL)}
        return Plane(
            served=True,
            cohort=None if cohort is None else CohortView(name=node.name, ours=owned(cohort["metadata"], node.name),
                                                          parent=cohort["spec"].get("parentName")),
            cluster_queue=None if queue is None else ClusterQueueView.from_object(queue, node.name),
            local_queues=[LocalQueueView(namespace=ns, name=name, cluster_queue=q["spec"]["clusterQueue"])
                          for (ns, name), q in sorted(self.local_queues.items())
                          if (q["metadata"].get("labels") or {}).get(NODE_LABEL) == node.name],
            bound_namespaces=sorted(ns for ns, labels in self.namespaces.items()
                                    if labels.get(NODE_LABEL) == node.name),
            flavors=sorted({b.resource_flavor for b in node.budgets} & self.flavors),
            priority_classes=[node.priority_tier] if node.priority_tier in self.priority_classes else [],
            leaf_queues=leaf_queues)

    def _store(self, kind: str, namespace: str | None, name: str) -> dict[Any, dict[str, Any]]:
        if kind == "Cohort":
            return self.cohorts  # type: ignore[return-value]
        if kind == "ClusterQueue":
            return self.cluster_queues  # type: ignore[return-value]
        return self.local_queues  # type: ignore[return-value]

    def apply(self, request: QuotaApplyInput) -> QuotaApplyOutput:
        found = self._live(request.quota)
        if found is None or found.deleting:
            return QuotaApplyOutput(present=False)
        if FINALIZER not in found.finalizers:
            found.finalizers.append(FINALIZER)
        self.applies.append(request)
        node = request.quota.name
        out = QuotaApplyOutput(present=True)
        for removal in request.removals:
            store = self._store(removal.kind, removal.namespace, removal.name)
            key: Any = (removal.namespace, removal.name) if removal.kind == "LocalQueue" else removal.name
            existing = store.get(key)
            if existing is not None and owned(existing["metadata"], node):
                del store[key]
                out.removed.append(f"{removal.kind}/{removal.namespace or ''}/{removal.name}")
        for body in request.objects:
            kind, meta = str(body["kind"]), body["metadata"]
            namespace, name = meta.get("namespace"), str(meta["name"])
            store = self._store(kind, namespace, name)
            key = (namespace, name) if kind == "LocalQueue" else name
            existing = store.get(key)
            if existing is not None and not owned(existing["metadata"], node):
                out.refused = f"{kind} {name} exists and is not this node's: not adopted"
                return out
            uid = existing["metadata"]["uid"] if existing is not None else str(uuid.uuid4())
            kept = existing.get("status") if existing is not None else None
            stored: dict[str, Any] = {"kind": kind, "metadata": {**meta, "uid": uid}, "spec": dict(body["spec"])}
            if kept is not None:
                stored["status"] = kept
            store[key] = stored
            out.applied.append(f"{kind}/{namespace or ''}/{name}")
        return out

    def write_status(self, request: QuotaWriteInput) -> QuotaWriteOutput:
        found = self._live(request.quota)
        if found is None:
            return QuotaWriteOutput(present=False)
        status = request.status.to_api()
        kept = {k: v for k, v in found.status.items() if k not in OWNED_STATUS_FIELDS}
        found.status = {**kept, **{k: v for k, v in status.items() if k in OWNED_STATUS_FIELDS}}
        self.writes.append((self.clock(), found.status))
        self.events.extend(request.events)
        return QuotaWriteOutput(present=True, resource_version=str(len(self.writes)))

    def reap(self, request: QuotaReapInput) -> QuotaReapOutput:
        name = request.quota.name
        if self.refuse_reap:
            return QuotaReapOutput(refused=self.refuse_reap)
        out = QuotaReapOutput()
        for kind, store in (("ClusterQueue", self.cluster_queues), ("Cohort", self.cohorts)):
            if name in store and owned(store[name]["metadata"], name):
                del store[name]
                out.removed.append(f"{kind}//{name}")
        for key, queue in list(self.local_queues.items()):
            if owned(queue["metadata"], name):
                del self.local_queues[key]
                out.removed.append(f"LocalQueue/{key[0]}/{key[1]}")
        found = self._live(request.quota)
        if found is not None:
            found.finalizers = [f for f in found.finalizers if f != FINALIZER]
            if found.deleting and not found.finalizers:
                del self.quotas[name]
        out.released = True
        return out

    def activities(self, now: Callable[[], Awaitable[datetime]] | None = None) -> list[Callable[..., Any]]:
        """The four activities, async; `now`: the clock to stamp writes with (a time-skipping server's time)."""

        async def tick() -> None:
            if now is not None:
                current = await now()
                self.clock = lambda: current

        @activity.defn(name="acceleratorquota.observe")
        async def observe(request: QuotaObserveInput) -> QuotaObserveOutput:
            return self.observe(request)

        @activity.defn(name="acceleratorquota.apply")
        async def apply(request: QuotaApplyInput) -> QuotaApplyOutput:
            return self.apply(request)

        @activity.defn(name="acceleratorquota.write_status")
        async def write_status(request: QuotaWriteInput) -> QuotaWriteOutput:
            await tick()
            return self.write_status(request)

        @activity.defn(name="acceleratorquota.reap")
        async def reap(request: QuotaReapInput) -> QuotaReapOutput:
            return self.reap(request)

        return [observe, apply, write_status, reap]


@dataclass
class FakeQuotaFleet:
    """Member clusters for the projection: each a FakeQuotaWorld of its own (a test runs that member's
    AcceleratorQuotaWorkflow against it, or sets a copy's status itself), serving `placement.project_quota` and
    `placement.unproject_quota`. A member in `unreachable` answers with the message given there."""

    members: dict[str, FakeQuotaWorld] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)
    writes: list[tuple[str, str]] = field(default_factory=list)
    """(cluster, name) of every copy written."""
    holds: set[str] = field(default_factory=set)
    """The WorkloadClusters carrying the projection's finalizer (a copy was written there)."""
    deregistering: set[str] = field(default_factory=set)
    """WorkloadClusters being deleted: no copy is written there, release_quota_hold reaps them."""

    def member(self, cluster: str) -> FakeQuotaWorld:
        return self.members.setdefault(cluster, FakeQuotaWorld())

    def project(self, request: QuotaProjectInput) -> ClusterOutcome:
        out = ClusterOutcome(cluster=request.cluster, unresolved=request.unresolved)
        if request.cluster in self.unreachable or request.cluster not in self.members:
            out.error = self.unreachable.get(request.cluster, f"WorkloadCluster {request.cluster} does not exist")
            return out
        if request.body is not None and request.cluster in self.deregistering:
            out.error = f"WorkloadCluster {request.cluster} is being deregistered"
            return out
        if request.body is not None:
            self.holds.add(request.cluster)
        world = self.members[request.cluster]
        found = world.quotas.get(request.name)
        existing = CopyView.from_object(found.object()) if found is not None else None
        out.conflict = copy_conflict(request.cluster, existing)
        if not out.conflict and request.body is not None and not copy_in_sync(request.body, existing):
            meta, spec = request.body["metadata"], dict(request.body["spec"])
            if found is None:
                found = world.add_quota(request.name, spec)
            elif found.spec != spec:
                world.edit(request.name, spec)
            found.labels, found.annotations = dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})
            out.wrote = True
            self.writes.append((request.cluster, request.name))
            existing = CopyView.from_object(found.object())
        out.copy_ = existing
        return out

    def unproject(self, request: QuotaUnprojectInput) -> ClusterOutcome:
        out = ClusterOutcome(cluster=request.cluster)
        if request.cluster in self.unreachable or request.cluster not in self.members:
            out.error = self.unreachable.get(request.cluster, f"WorkloadCluster {request.cluster} does not exist")
            return out
        world = self.members[request.cluster]
        found = world.quotas.get(request.name)
        if found is not None:
            view = CopyView.from_object(found.object())
            if view.projected and view.origin == request.origin:
                world.delete_quota(request.name)
                out.wrote = True
        return out

    def release(self, request: QuotaReleaseInput) -> ClusterOutcome:
        """As the real release_quota_hold: every projected copy in a deregistering member deleted, then its hold
        released; an unreachable member keeps the hold and answers why."""
        out = ClusterOutcome(cluster=request.cluster)
        if request.cluster not in self.deregistering or request.cluster not in self.holds:
            return out
        if request.cluster in self.unreachable:
            out.error = (f"{request.cluster} is being deregistered, but its projected copies could not be deleted: "
                         f"{self.unreachable[request.cluster]}")
            return out
        world = self.members[request.cluster]
        for name, stored in list(world.quotas.items()):
            if stored.labels.get(PROJECTED_LABEL) == MANAGED_BY and not stored.deleting:
                world.delete_quota(name)
                out.wrote = True
        self.holds.discard(request.cluster)
        return out

    def activities(self) -> list[Callable[..., Any]]:
        @activity.defn(name="placement.project_quota")
        async def project_quota(request: QuotaProjectInput) -> ClusterOutcome:
            return self.project(request)

        @activity.defn(name="placement.unproject_quota")
        async def unproject_quota(request: QuotaUnprojectInput) -> ClusterOutcome:
            return self.unproject(request)

        @activity.defn(name="placement.release_quota_hold")
        async def release_quota_hold(request: QuotaReleaseInput) -> ClusterOutcome:
            return self.release(request)

        return [project_quota, unproject_quota, release_quota_hold]


__all__ = ["FakeQuotaFleet", "FakeQuotaWorld", "StoredQuota"]
