"""The routing controller's activities: read what a table is computed from, probe and poll the homes, and
write the TrafficMap (its spec, `status.sourceUID` and the controller's three conditions).

The map is named after its InferenceService, in its namespace, controlled by it (an owner reference, so it
is garbage-collected with it) and carries the publisher's finalizer from its first write (the route is
removed before the map may go). Two writers share the status (seed 004): these activities write only
`sourceUID` and the Routable, OverrideActive and CapacityFallback conditions, each update keyed on the
read resourceVersion, so the publisher's fields are never overwritten. A map another InferenceService
controls (a same-named earlier one's, or a hand-made one) is not written: InvalidOwner, said on the
service. Retries: apiserver failures raise (KUBE policy); a probe or a poll answers what it saw.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from kubernetes import client
from pydantic import ValidationError
from temporalio import activity

from servingops.activities.routing import http_checks
from servingops.activities.routing.types import (
    DeleteMapInput,
    MapWritten,
    ProbeAnswer,
    ProbeRequest,
    RoutingSource,
    SourceInput,
    TrafficMapView,
    WriteMapInput,
)
from servingops.api_models.conditions import merge_conditions
from servingops.api_models.contract.routing import ROUTING_ANNOTATIONS, TRAFFIC_MAP_FINALIZER
from servingops.api_models.ome.enums import PlacementMode
from servingops.api_models.ome.placement_status import PlacementStatus
from servingops.api_models.ome.routing import RoutingSpec
from servingops.api_models.ome.traffic_map import TrafficMap, TrafficMapSpec, TrafficMapStatus
from servingops.api_models.operator_config import (
    DEFAULT_CONFIGMAP,
    OperatorConfig,
    OperatorConfigError,
    parse_configmap_data,
)
from servingops.api_models.refs import ObjectRef
from servingops.clients.kube.calls import call, create_unless_exists, delete_if_present, get_or_none
from servingops.clients.kube.custom_objects import CustomObjects, update_optimistically

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "trafficmaps"
ROUTING_CONDITIONS = frozenset({"Routable", "OverrideActive", "CapacityFallback"})
"""The condition types the routing controller owns; the publisher owns Published and PublicationFallback."""


def map_ref(isvc: ObjectRef, uid: str | None = None) -> ObjectRef:
    return ObjectRef.of(TrafficMap, isvc.name, isvc.namespace, uid)


def map_view(obj: dict[str, Any]) -> TrafficMapView:
    meta = obj["metadata"]
    controller = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    spec = status = None
    try:
        spec = TrafficMapSpec.model_validate(obj["spec"]) if obj.get("spec") else None
    except ValidationError:
        spec = None  # a hand edit the schema let through: the controller writes its own over it
    try:
        status = TrafficMapStatus.model_validate(obj["status"]) if obj.get("status") else None
    except ValidationError:
        status = None
    return TrafficMapView(uid=str(meta.get("uid", "")), generation=int(meta.get("generation", 0)),
                          resource_version=str(meta.get("resourceVersion", "")),
                          controller_uid=controller.get("uid") if controller else None,
                          deleting=bool(meta.get("deletionTimestamp")), finalizers=list(meta.get("finalizers") or []),
                          spec=spec, status=status)


def _spec_body(spec: TrafficMapSpec) -> dict[str, Any]:
    return spec.to_api()


class MapWriter:
    """Read-change-replace of one TrafficMap (or its status) under the read resourceVersion, again on 409.
    The calls name the kind literally (tests/rbac_calls.py holds the chart's RBAC to them)."""

    def __init__(self, custom: client.CustomObjectsApi) -> None:
        self.custom = custom

    def update(self, ref: ObjectRef, mutate: Callable[[dict[str, Any]], bool], *,
               status: bool = False) -> dict[str, Any] | None:
        """None when the map is gone or is another one now (uid); the map as it stands otherwise."""

        def read() -> dict[str, Any] | None:
            found = get_or_none(self.custom.get_namespaced_custom_object, GROUP, VERSION, ref.namespace, PLURAL,
                                ref.name)
            if found is None or (ref.uid and found["metadata"].get("uid") != ref.uid):
                return None
            return dict(found)

        def replace(obj: dict[str, Any]) -> dict[str, Any]:
            if status:
                return dict(call(self.custom.replace_namespaced_custom_object_status, GROUP, VERSION, ref.namespace,
                                 PLURAL, ref.name, obj))
            return dict(call(self.custom.replace_namespaced_custom_object, GROUP, VERSION, ref.namespace, PLURAL,
                             ref.name, obj))

        return update_optimistically(ref, read, replace, mutate)


class RoutingActivities:
    """Bound to the control-plane cluster the worker runs in; `namespace`/`configmap`: the operator ConfigMap."""

    def __init__(self, api_client: client.ApiClient, namespace: str, configmap: str = DEFAULT_CONFIGMAP) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._objects = CustomObjects(self._custom)
        self._maps = MapWriter(self._custom)
        self._core = client.CoreV1Api(api_client)
        self._namespace = namespace
        self._configmap = configmap

    # -- reads --------------------------------------------------------------------------------------

    def _map(self, isvc: ObjectRef) -> dict[str, Any] | None:
        obj = get_or_none(self._custom.get_namespaced_custom_object, GROUP, VERSION, isvc.namespace, PLURAL,
                          isvc.name)
        return dict(obj) if obj is not None else None

    def _config(self) -> tuple[OperatorConfig, str | None]:
        configmap = get_or_none(self._core.read_namespaced_config_map, self._configmap, self._namespace)
        if configmap is None:
            return OperatorConfig(), None
        try:
            return parse_configmap_data(configmap.data), None
        except OperatorConfigError as error:
            return OperatorConfig(), f"ConfigMap {self._namespace}/{self._configmap}: {error}"

    @activity.defn(name="routing.read_source")
    def read_source(self, request: SourceInput) -> RoutingSource:
        found = self._map(request.isvc)
        view = map_view(found) if found is not None else None
        obj = self._objects.get(request.isvc)
        if obj is None:
            return RoutingSource(present=False, traffic_map=view)
        meta, spec = obj["metadata"], obj.get("spec") or {}
        config, config_error = self._config()
        routing, routing_error = None, None
        try:
            routing = RoutingSpec.model_validate(spec["routing"]) if spec.get("routing") else None
        except ValidationError as exc:
            routing_error = f"spec.routing does not parse: {exc.errors()[0]['msg']}"
        placement = None
        stored = (obj.get("status") or {}).get("placement")
        if stored:
            placement = PlacementStatus.model_validate(stored)
        mode = (spec.get("placement") or {}).get("mode")
        return RoutingSource(
            present=True, uid=str(meta.get("uid", "")), generation=int(meta.get("generation", 0)),
            deleting=bool(meta.get("deletionTimestamp")),
            annotations={k: v for k, v in (meta.get("annotations") or {}).items() if k in ROUTING_ANNOTATIONS},
            placed_spec=bool(spec.get("placement")),
            mode=_mode(mode, bool(spec.get("placement"))),
            routing=routing, routing_error=routing_error, placement=placement,
            defaults=config.routing, endpoint=config.endpoint, config_error=config_error, traffic_map=view)

    # -- the homes ----------------------------------------------------------------------------------

    @activity.defn(name="routing.check_homes")
    def check_homes(self, request: ProbeRequest) -> list[ProbeAnswer]:
        """One request per home (a probe, or a capacity poll when `method` reads a report): what each
        answered, or the transport error. Bodies are kept only for a poll (a report to parse)."""
        return http_checks.check_all(request.targets, request.path, request.method, request.timeout_s,
                                     keep_body=request.keep_body)

    # -- the map --------------------------------------------------------------------------------------

    @activity.defn(name="routing.write_map")
    def write_map(self, request: WriteMapInput) -> MapWritten:
        isvc = request.isvc
        source = self._objects.get(isvc)
        if source is None or source["metadata"].get("deletionTimestamp"):
            return MapWritten(written=False, reason="SourceGone", message="the InferenceService is gone or going")
        body = _spec_body(request.spec)
        found = self._map(isvc)
        created = None
        if found is None:
            created = create_unless_exists(self._custom.create_namespaced_custom_object, GROUP, VERSION,
                                           isvc.namespace, PLURAL, self._new_map(isvc, body))
            found = created if created is not None else self._map(isvc)
            if found is None:
                return MapWritten(written=False, reason="Conflict", message="the TrafficMap vanished while created")
        view = map_view(found)
        if view.controller_uid != isvc.uid:
            return MapWritten(written=False, reason="InvalidOwner", message=(
                f"TrafficMap {isvc.namespace}/{isvc.name} exists but is not controlled by InferenceService UID "
                f"{isvc.uid} (its controller: {view.controller_uid or 'none'}); delete it to let routing write "
                "its own"))
        if view.deleting:
            return MapWritten(written=False, reason="MapDeleting", message="the TrafficMap is being deleted",
                              uid=view.uid, generation=view.generation)
        ref = map_ref(isvc, view.uid)
        changed = False

        def set_spec(obj: dict[str, Any]) -> bool:
            nonlocal changed
            finalizers = obj["metadata"].setdefault("finalizers", [])
            missing = TRAFFIC_MAP_FINALIZER not in finalizers
            if missing:
                finalizers.append(TRAFFIC_MAP_FINALIZER)
            changed = obj.get("spec") != body
            obj["spec"] = body
            return changed or missing

        written = self._maps.update(ref, set_spec)
        if written is None:
            return MapWritten(written=False, reason="MapGone", message="the TrafficMap was deleted meanwhile")
        generation = int(written["metadata"].get("generation", 0))
        now = dt.datetime.now(dt.UTC)

        def set_status(obj: dict[str, Any]) -> bool:
            status = obj.setdefault("status", {})
            before = {c["type"]: c for c in status.get("conditions") or []}
            merged = merge_conditions(status.get("conditions"), request.conditions, generation=generation, now=now)
            same = (status.get("sourceUID") == isvc.uid and all(
                _same(before.get(u.type), u.status, u.reason, u.message, generation) for u in request.conditions))
            status["sourceUID"] = isvc.uid
            status["conditions"] = merged
            return not same

        self._maps.update(ref, set_status, status=True)
        return MapWritten(written=True, generation=generation, uid=view.uid,
                          spec_changed=changed or created is not None)

    def _new_map(self, isvc: ObjectRef, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrafficMap",
            "metadata": {
                "name": isvc.name, "namespace": isvc.namespace, "finalizers": [TRAFFIC_MAP_FINALIZER],
                "ownerReferences": [{"apiVersion": f"{isvc.group}/{isvc.version}", "kind": isvc.kind,
                                     "name": isvc.name, "uid": isvc.uid, "controller": True}],
            },
            "spec": spec,
        }  # fmt: skip

    @activity.defn(name="routing.delete_map")
    def delete_map(self, request: DeleteMapInput) -> bool:
        """Delete the service's map when it is this service's (the publisher has released it first)."""
        found = self._map(request.isvc)
        if found is None:
            return False
        view = map_view(found)
        if view.controller_uid != request.isvc.uid:
            return False
        return delete_if_present(self._custom.delete_namespaced_custom_object, GROUP, VERSION,
                                 request.isvc.namespace, PLURAL, request.isvc.name,
                                 body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=view.uid)))

    def all(self) -> list[object]:
        return [self.read_source, self.check_homes, self.write_map, self.delete_map]


def _mode(value: object, placed: bool) -> PlacementMode | None:
    """spec.placement.mode, Single when a placement leaves it out (the CRD's default)."""
    if isinstance(value, str) and value in PlacementMode._value2member_map_:
        return PlacementMode(value)
    return PlacementMode.SINGLE if placed else None


def _same(current: dict[str, Any] | None, status: str, reason: str, message: str, generation: int) -> bool:
    return current is not None and (current.get("status"), current.get("reason"), current.get("message"),
                                    current.get("observedGeneration")) == (status, reason, message, generation)


__all__ = ["ROUTING_CONDITIONS", "MapWriter", "RoutingActivities", "map_ref", "map_view"]
