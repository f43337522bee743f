"""Which workflow each routed kind's events go to, and what an event becomes.

Pure mapping, no I/O: `plan()` compares an object with the fingerprint of what was last sent for
it and returns the dispatches to make. Unchanged generation plus unchanged watched annotations
means nothing to send. Whether a dispatch's workflow type is served is decided per dispatch by
the dispatcher (`not_served()` words the refusal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servingops.api_models import contract
from servingops.api_models.contract import (
    AnnotationEvent,
    BadAnnotation,
    MigrationStart,
    ObjectEvent,
    Signal,
    StartObject,
    Update,
    WorkflowType,
)
from servingops.api_models.contract.routing import ROUTING_ANNOTATIONS
from servingops.api_models.contract.workload_cluster import RECHECK_ANNOTATION
from servingops.api_models.ome.traffic_annotations import is_traffic_annotation
from servingops.api_models.refs import ObjectRef


@dataclass(frozen=True)
class Companion:
    """A second workflow an object's generation changes and deletion also go to, while `only_when` holds (or
    held at the previous event: the running workflow learns it stopped holding)."""

    workflow_type: WorkflowType
    workflow_id: Callable[[str | None, str, str], str]
    only_when: Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class Route:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    workflow_type: WorkflowType
    workflow_id: Callable[[str | None, str, str], str]
    annotations: tuple[str, ...] = ()
    annotations_matching: Callable[[str], bool] | None = None
    """Annotations beyond `annotations`, by a rule (a set with prefixes), whose change goes to the kind's
    workflow as `annotation` too."""
    migration_requests: bool = False
    placement: bool = False
    """An object with spec.placement (or that had it) is also sent to its placement workflow, and to its
    routing workflow (TrafficMapWorkflow), which decides whether the service is routed."""
    routing_annotations: tuple[str, ...] = ()
    """Annotations whose change goes to the routing workflow (routing-changed) instead of the kind's own."""
    owner_routing: bool = False
    """The object is a TrafficMap: its changes go to its InferenceService's routing workflow (a hand edit
    is undone), never to a workflow of its own."""
    only_when: Callable[[dict[str, Any]], bool] | None = None
    """Events of an object for which this is False start nothing, unless it is being deleted or it
    was True at the previous event (the running workflow learns it stopped holding)."""
    companion: Companion | None = None
    """Another workflow the object's object-changed and delete signals also go to (AcceleratorQuota: every
    node's tree workflow, and the root's capacity report too)."""

    def watches(self, annotation: str) -> bool:
        """Whether a change of the annotation is news for a workflow (the fingerprint keeps its value)."""
        return (annotation in self.annotations or annotation in self.routing_annotations
                or (self.annotations_matching is not None and self.annotations_matching(annotation)))

    def ref(self, obj: dict[str, Any]) -> ObjectRef:
        meta = obj["metadata"]
        return ObjectRef(group=self.group, version=self.version, plural=self.plural, kind=self.kind,
                         name=meta["name"], namespace=meta.get("namespace") if self.namespaced else None,
                         uid=meta.get("uid"))


def _ns(namespace: str | None) -> str:
    return namespace or ""


def _quota_root(obj: dict[str, Any]) -> bool:
    """An AcceleratorQuota without spec.parentRef: the root, whose capacity report a workflow writes."""
    return not ((obj.get("spec") or {}).get("parentRef") or {}).get("name")


def _controlled_by_service(obj: dict[str, Any]) -> bool:
    return _controller(obj) is not None


def _controller(obj: dict[str, Any]) -> dict[str, Any] | None:
    """A TrafficMap's controlling InferenceService reference (the routing workflow that writes it)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((o for o in refs if o.get("controller") and o.get("kind") == "InferenceService" and o.get("uid")),
                None)


ROUTES: dict[str, Route] = {
    route.kind: route
    for route in (
        Route("Model", "ai.deckhouse.io", "v1alpha1", "models", True, WorkflowType.MODEL,
              contract.model_workflow_id),
        Route("ClusterModel", "ai.deckhouse.io", "v1alpha1", "clustermodels", False, WorkflowType.MODEL,
              contract.model_workflow_id),
        Route("ModelCatalogSource", "ai.deckhouse.io", "v1alpha1", "modelcatalogsources", False,
              WorkflowType.CATALOG, lambda _ns_, name, uid: contract.catalog_workflow_id(name, uid)),
        Route("InferenceService", "ome.io", "v1beta1", "inferenceservices", True, WorkflowType.INFERENCE_SERVICE,
              lambda ns, name, uid: contract.inference_service_workflow_id(_ns(ns), name, uid),
              annotations=contract.ROLLOUT_ANNOTATIONS, annotations_matching=is_traffic_annotation,
              migration_requests=True, placement=True, routing_annotations=ROUTING_ANNOTATIONS),
        Route("InferenceReplica", "ome.io", "v1beta1", "inferencereplicas", True, WorkflowType.INFERENCE_REPLICA,
              lambda ns, name, uid: contract.replica_workflow_id(_ns(ns), name, uid)),
        Route("RolloutPolicy", "ome.io", "v1beta1", "rolloutpolicies", True, WorkflowType.ROLLOUT_POLICY,
              lambda ns, name, uid: contract.rollout_policy_workflow_id(_ns(ns), name, uid)),
        Route("AutoscalerPolicy", "ome.io", "v1beta1", "autoscalerpolicies", True, WorkflowType.AUTOSCALER_POLICY,
              lambda ns, name, uid: contract.autoscaler_policy_workflow_id(_ns(ns), name, uid)),
        Route("ServingRuntime", "ome.io", "v1beta1", "servingruntimes", True, WorkflowType.SERVING_RUNTIME,
              contract.serving_runtime_workflow_id, annotations=(contract.RUNTIME_INHERIT_FROM,)),
        Route("ClusterServingRuntime", "ome.io", "v1beta1", "clusterservingruntimes", False,
              WorkflowType.SERVING_RUNTIME, contract.serving_runtime_workflow_id,
              annotations=(contract.RUNTIME_INHERIT_FROM,)),
        Route("BaseModel", "ome.io", "v1beta1", "basemodels", True, WorkflowType.BASE_MODEL,
              contract.basemodel_workflow_id),
        Route("ClusterBaseModel", "ome.io", "v1beta1", "clusterbasemodels", False, WorkflowType.BASE_MODEL,
              contract.basemodel_workflow_id),
        Route("FineTunedWeight", "ome.io", "v1beta1", "finetunedweights", False, WorkflowType.BASE_MODEL,
              contract.basemodel_workflow_id),
        Route("WorkloadCluster", "ome.io", "v1beta1", "workloadclusters", False, WorkflowType.WORKLOAD_CLUSTER,
              lambda _ns_, name, uid: contract.workload_cluster_workflow_id(name, uid),
              annotations=(RECHECK_ANNOTATION,)),
        Route("TrafficMap", "ome.io", "v1beta1", "trafficmaps", True, WorkflowType.TRAFFIC_MAP,
              lambda ns, name, uid: contract.traffic_map_workflow_id(_ns(ns), name, uid), owner_routing=True,
              only_when=_controlled_by_service),
        Route("AcceleratorQuota", "ome.io", "v1beta1", "acceleratorquotas", False, WorkflowType.ACCELERATOR_QUOTA,
              lambda _ns_, name, uid: contract.accelerator_quota_workflow_id(name, uid),
              companion=Companion(WorkflowType.ACCELERATOR_CAPACITY,
                                  lambda _ns_, name, uid: contract.capacity_workflow_id(name, uid), _quota_root)),
        Route("AcceleratorClass", "ome.io", "v1beta1", "acceleratorclasses", False, WorkflowType.ACCELERATOR_CLASS,
              lambda _ns_, name, uid: contract.accelerator_class_workflow_id(name, uid)),
        Route("BenchmarkJob", "ome.io", "v1beta1", "benchmarkjobs", True, WorkflowType.BENCHMARK_JOB,
              lambda ns, name, uid: contract.benchmark_job_workflow_id(_ns(ns), name, uid)),
    )
}


DEFAULT_KINDS: tuple[str, ...] = tuple(
    kind for kind, route in ROUTES.items() if route.workflow_type in contract.IMPLEMENTED_WORKFLOWS)
"""What the bridge follows when not told: every kind whose own workflow the worker serves (an
object of another kind could only collect WorkflowNotServed Events)."""

NOT_SERVED = "WorkflowNotServed"
"""The reason of the Warning Event for a dispatch whose workflow type no worker registers."""


@dataclass(frozen=True)
class Fingerprint:
    """What was last sent for one object: enough to tell whether an event is news."""

    uid: str
    generation: int
    deleting: bool
    annotations: tuple[tuple[str, str], ...] = ()
    migrations: frozenset[str] = frozenset()
    placed: bool = False
    """spec.placement was set: its removal is news for the placement workflow too."""
    routed: bool = True
    """The route's only_when held (or the object was being deleted)."""
    companion: bool = False
    """The route's companion's only_when held (or the object was being deleted)."""


@dataclass(frozen=True)
class Dispatch:
    """One signal-with-start (or a plain start when signal is None)."""

    workflow_type: WorkflowType
    workflow_id: str
    start_arg: Any
    signal: Signal | None = None
    signal_arg: Any = None
    """The signal's argument, or the update's."""
    update: Update | None = None
    """Instead of a signal-with-start: this update to the workflow, only if it is running, once, best
    effort; a shortcut beside a durable dispatch that carries the same news (a failure or an absent
    workflow is not retried)."""

    @property
    def running_only(self) -> bool:
        return self.update is not None

    def describe(self) -> str:
        """What the dispatch delivers, for a person reading an Event."""
        if isinstance(self.start_arg, MigrationStart):
            return f"migration request {self.start_arg.request_uuid}"
        if self.update is not None:
            return f"the {self.update.value} update"
        return f"the {self.signal.value} signal" if self.signal else "a start"


def not_served(dispatch: Dispatch) -> tuple[str, str]:
    """(reason, message) of the Warning Event recorded instead of starting a workflow that no
    worker of this release registers: it would wait forever and hide the request from the user."""
    return NOT_SERVED, (f"no worker serves {dispatch.workflow_type.value}: {dispatch.describe()} was not started "
                        f"(workflow {dispatch.workflow_id}); nothing will act on it in this release")


@dataclass
class Plan:
    dispatches: list[Dispatch] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    """(reason, message) pairs to record as Warning Events on the object."""
    fingerprint: Fingerprint | None = None


def plan(route: Route, obj: dict[str, Any], previous: Fingerprint | None, *, gone: bool = False) -> Plan:
    meta = obj["metadata"]
    uid = str(meta.get("uid", ""))
    generation = int(meta.get("generation", 0))
    version = str(meta.get("resourceVersion", ""))
    deleting = gone or bool(meta.get("deletionTimestamp"))
    annotations: dict[str, str] = meta.get("annotations") or {}
    watched = tuple(sorted((k, v) for k, v in annotations.items() if route.watches(k)))
    requests = {k: v for k, v in annotations.items() if route.migration_requests
                and k.startswith(contract.MIGRATION_REQUEST_PREFIX)}
    if previous is not None and previous.uid != uid:
        previous = None  # the name was reused by a new object: a new workflow, nothing carried over

    if route.owner_routing:
        return _owner_routing_plan(route, obj, previous, uid, generation, deleting)
    ref = route.ref(obj)
    workflow_id = route.workflow_id(ref.namespace, ref.name, uid)
    start = StartObject(ref=ref)
    placed = route.placement and bool((obj.get("spec") or {}).get("placement"))
    routed = route.only_when is None or deleting or route.only_when(obj)
    companion = route.companion is not None and (deleting or route.companion.only_when(obj))
    result = Plan(fingerprint=Fingerprint(uid, generation, deleting, watched, frozenset(requests), placed, routed,
                                          companion))
    if not routed and (previous is None or not previous.routed):
        return result

    if previous is None or (previous.generation, previous.deleting) != (generation, deleting):
        event = ObjectEvent(uid=uid, generation=generation, resource_version=version, deleting=deleting)
        signal = Signal.DELETE if deleting else Signal.OBJECT_CHANGED
        result.dispatches.append(Dispatch(route.workflow_type, workflow_id, start, signal, event))
        if route.companion is not None and (companion or (previous is not None and previous.companion)):
            result.dispatches.append(Dispatch(route.companion.workflow_type,
                                              route.companion.workflow_id(ref.namespace, ref.name, uid),
                                              start, signal, event))
        if placed or (previous is not None and previous.placed):
            # The placement workflow writes the derived services in the members; it learns of a
            # removed spec.placement (and of deletion) as it learned of the placement itself.
            result.dispatches.append(Dispatch(
                WorkflowType.PLACEMENT, contract.placement_workflow_id(ref.namespace or "", ref.name, uid),
                start, signal, event))
            result.dispatches.append(Dispatch(
                WorkflowType.TRAFFIC_MAP, contract.traffic_map_workflow_id(ref.namespace or "", ref.name, uid),
                start, signal, event))

    before = dict(previous.annotations) if previous else {}
    after = dict(watched)
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name) and not deleting and name in route.routing_annotations:
            if placed:
                result.dispatches.append(Dispatch(
                    WorkflowType.TRAFFIC_MAP, contract.traffic_map_workflow_id(ref.namespace or "", ref.name, uid),
                    start, Signal.ROUTING_CHANGED, f"annotation {name}"))
        elif before.get(name) != after.get(name) and not deleting:
            changed = AnnotationEvent(uid=uid, generation=generation, resource_version=version, name=name,
                                      value=after.get(name))
            result.dispatches.append(Dispatch(route.workflow_type, workflow_id, start, Signal.ANNOTATION, changed))
            if route.workflow_type == WorkflowType.INFERENCE_SERVICE and name in contract.ROLLOUT_SIGNALS:
                # Straight to the service's rollout runs too: a promote's shortest path to its weights
                # skips the service workflow's forward (a workflow task and a signal), which still
                # follows; a run acts on the change once (RolloutHandlers.on_annotation).
                namespace = ref.namespace or ""
                result.dispatches.extend(
                    Dispatch(WorkflowType.ROLLOUT, contract.rollout_workflow_id(namespace, ref.name, uid, key),
                             None, None, changed, update=Update.RUN_ANNOTATION)
                    for key in contract.rollout_unit_keys(obj.get("spec") or {}))

    already = previous.migrations if previous else frozenset()
    for key in sorted(set(requests) - already):
        if deleting:
            break
        try:
            request_uuid, request = contract.parse_migration_request(key, requests[key])
        except BadAnnotation as exc:
            result.warnings.append(("InvalidMigrationRequest", str(exc)))
            continue
        replica = f"{ref.name}-{request.component}"
        migration = MigrationStart(isvc=ref, request_uuid=request_uuid, annotation=key, request=request)
        result.dispatches.append(Dispatch(
            WorkflowType.MIGRATION,
            contract.migration_workflow_id(ref.namespace or "", replica, request_uuid),
            migration,
        ))
    return result


def _owner_routing_plan(route: Route, obj: dict[str, Any], previous: Fingerprint | None, uid: str, generation: int,
                        deleting: bool) -> Plan:
    """A TrafficMap's new generation (or deletion) wakes its InferenceService's routing workflow, which puts
    its own spec back over a hand edit and releases the map's finalizer once the route is gone. A start
    when none runs: a map whose service went meanwhile still gets its route removed."""
    result = Plan(fingerprint=Fingerprint(uid, generation, deleting))
    owner = _controller(obj)
    if owner is None or (previous is not None and previous.uid == uid
                         and (previous.generation, previous.deleting) == (generation, deleting)):
        return result
    meta = obj["metadata"]
    namespace = meta.get("namespace") or ""
    isvc = ObjectRef(group="ome.io", version="v1beta1", plural="inferenceservices", kind="InferenceService",
                     name=str(owner.get("name") or meta["name"]), namespace=namespace, uid=str(owner["uid"]))
    result.dispatches.append(Dispatch(
        route.workflow_type, route.workflow_id(namespace, isvc.name, isvc.uid or ""), StartObject(ref=isvc),
        Signal.ROUTING_CHANGED, f"TrafficMap generation {generation}{' deleting' if deleting else ''}"))
    return result
