"""The Gateway API publisher (`gatewayapi`, upstream OME's name): a TrafficMap's entries become the global
HTTPRoute `<isvc>-global` and one backend Service per home (rendering/global_route.py), on the control-plane
cluster, and the publisher's half of the map's status says so.

Order of a publication (seed 004, TrafficMapPublisherStatus: "claims are persisted before external mutation"):

1. render; a table that cannot become a route is Published False InvalidPlan, and the last route stays;
2. refuse what is not ours (ClaimRejected, nothing written): an object of that name without our owner mark,
   or another HTTPRoute on the same Gateway publishing the same hostname;
3. journal every identifier to be written in `status.publisher.claimedTargets` (with the ones already
   claimed), before anything is written;
4. write the backends, then the route (server-side apply, field manager servingops-publisher);
5. delete the claimed objects the new plan no longer holds (a home gone from the table);
6. the status: published, gatewayRef, observedTrafficMapGeneration, the claim set now exactly what exists,
   lastPositive when a weight is positive, Published True and PublicationFallback False (Unsupported: the
   built-in publisher has no fallback).

A failed write leaves the route as it last was and says ApplyFailed; the claims stay journalled, so a later
publication or the unpublish cleans up whatever was written. Unpublish deletes every claimed object, then
releases the claims (and, when asked, the finalizer and the map).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from servingops.activities.routing.activities import MapWriter, map_ref, map_view
from servingops.activities.routing.types import PublishInput, PublishOutcome, Unpublished, UnpublishInput
from servingops.api_models.conditions import merge_conditions
from servingops.api_models.contract.routing import TRAFFIC_MAP_FINALIZER
from servingops.api_models.refs import ConditionUpdate, ObjectRef
from servingops.clients.kube.calls import apply, delete_if_present, get_or_none, list_items
from servingops.clients.kube.errors import absent
from servingops.rendering import publication
from servingops.rendering.global_route import (
    PublishedReason,
)

FIELD_MANAGER = "servingops-publisher"
OWNER_ANNOTATION = publication.OWNER_ANNOTATION
# Literal, not imported: tests/rbac_calls.py reads the group and plural of each call from this module's own
# constants to hold the chart's RBAC to them.
GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "trafficmaps"
GATEWAY_GROUP, ROUTE_VERSION, ROUTES = "gateway.networking.k8s.io", "v1", "httproutes"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _split(claim: str) -> tuple[str, str, str]:
    kind, namespace, name = claim.split("/", 2)
    return kind, namespace, name


class PublisherActivities:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._maps = MapWriter(self._custom)
        self._core = client.CoreV1Api(api_client)
        self._discovery = client.DiscoveryV1Api(api_client)

    # -- the objects, by claim ----------------------------------------------------------------------

    def _read(self, claim: str) -> dict[str, Any] | None:
        kind, namespace, name = _split(claim)
        if kind == "HTTPRoute":
            found = get_or_none(self._custom.get_namespaced_custom_object, GATEWAY_GROUP, ROUTE_VERSION, namespace,
                                ROUTES, name)
            return dict(found) if found is not None else None
        if kind == "Service":
            service = get_or_none(self._core.read_namespaced_service, name, namespace)
            return {"metadata": {"annotations": dict(service.metadata.annotations or {})}} if service else None
        if kind == "EndpointSlice":
            piece = get_or_none(self._discovery.read_namespaced_endpoint_slice, name, namespace)
            return {"metadata": {"annotations": dict(piece.metadata.annotations or {})}} if piece else None
        raise ValueError(f"the publisher writes no {kind}")

    def _write(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        if obj["kind"] == "HTTPRoute":
            apply(self._custom.patch_namespaced_custom_object, GATEWAY_GROUP, ROUTE_VERSION, namespace, ROUTES, name,
                  obj, field_manager=FIELD_MANAGER)
        elif obj["kind"] == "Service":
            apply(self._core.patch_namespaced_service, name, namespace, obj, field_manager=FIELD_MANAGER)
        elif obj["kind"] == "EndpointSlice":
            apply(self._discovery.patch_namespaced_endpoint_slice, name, namespace, obj, field_manager=FIELD_MANAGER)
        else:
            raise ValueError(f"the publisher writes no {obj['kind']}")

    def _delete(self, claim: str) -> bool:
        kind, namespace, name = _split(claim)
        if kind == "HTTPRoute":
            return delete_if_present(self._custom.delete_namespaced_custom_object, GATEWAY_GROUP, ROUTE_VERSION,
                                     namespace, ROUTES, name)
        if kind == "Service":
            return delete_if_present(self._core.delete_namespaced_service, name, namespace)
        if kind == "EndpointSlice":
            return delete_if_present(self._discovery.delete_namespaced_endpoint_slice, name, namespace)
        raise ValueError(f"the publisher writes no {kind}")

    def _ours(self, claim: str, map_uid: str) -> bool | None:
        """None: absent; True: it carries this map's mark; False: someone else's."""
        found = self._read(claim)
        if found is None:
            return None
        return publication.owner_mark(found) == map_uid

    # -- the map's status -----------------------------------------------------------------------------

    def _status(self, isvc: ObjectRef, map_uid: str, change: dict[str, Any], conditions: list[ConditionUpdate],
                generation: int | None = None) -> bool:
        """Merge the publisher's fields into the map's status (keyed on the read resourceVersion)."""
        ref = map_ref(isvc, map_uid)
        now = _now()

        def mutate(obj: dict[str, Any]) -> bool:
            status = obj.setdefault("status", {})
            before = {k: status.get(k) for k in change} | {"conditions": status.get("conditions")}
            for key, value in change.items():
                if value is None:
                    status.pop(key, None)
                else:
                    status[key] = value
            status["conditions"] = merge_conditions(status.get("conditions"), conditions, now=now,
                                                    generation=generation or int(obj["metadata"]["generation"]))
            after = {k: status.get(k) for k in change} | {"conditions": status.get("conditions")}
            return bool(_stripped(before) != _stripped(after))

        updated: dict[str, Any] | None = self._maps.update(ref, mutate, status=True)
        return updated is not None

    # -- publish ----------------------------------------------------------------------------------------

    @activity.defn(name="publisher.publish")
    def publish(self, request: PublishInput) -> PublishOutcome:
        isvc = request.isvc
        found = get_or_none(self._custom.get_namespaced_custom_object, GROUP, VERSION, isvc.namespace, PLURAL,
                            isvc.name)
        if found is None or found["metadata"].get("uid") != request.map_uid:
            return PublishOutcome(published=False, reason=PublishedReason.FINALIZING, message="the TrafficMap is gone")
        view = map_view(dict(found))
        status = view.status
        old_claims = list(status.publisher.claimed_targets) if status and status.publisher else []
        planned = publication.plan(request.endpoint, isvc.name, isvc.namespace or "", request.annotations,
                                   request.entries, request.addresses, options=request.options,
                                   address_failures=request.address_failures)  # fmt: skip
        if isinstance(planned, publication.Refused):
            return self._refuse(isvc, view.uid, planned)
        rendered = planned
        objects = publication.mark(rendered, view.uid)
        marks = {claim: publication.owner_mark(standing) for claim in rendered.claims
                 if (standing := self._read(claim)) is not None}  # fmt: skip
        routes = list_items(self._custom.list_cluster_custom_object, GATEWAY_GROUP, ROUTE_VERSION, ROUTES)
        refused = publication.refuse_claims(rendered, marks, view.uid,
                                            publication.hostname_taken(rendered, routes, view.uid))
        if refused is not None:
            return self._refuse(isvc, view.uid, refused)

        journal = publication.claim_journal(status, rendered)
        if journal is not None:
            self._status(isvc, view.uid, {"publisher": journal},
                         publication.conditions(False, PublishedReason.TRANSITIONING, "writing the route",
                                                underway=True))

        try:
            for obj in objects:  # backends first: the route never names a Service that is not there
                self._write(obj)
            for claim in sorted(set(old_claims) - set(rendered.claims)):
                if self._ours(claim, view.uid) is not False:  # a name we were refused is never deleted
                    self._delete(claim)
        except ApiException as exc:
            if exc.status is not None and exc.status >= 500:
                raise  # the apiserver's trouble: retried
            message = f"writing the route failed: HTTP {exc.status} {exc.reason}"
            self._status(isvc, view.uid, {}, publication.conditions(False, PublishedReason.APPLY_FAILED, message))
            return PublishOutcome(published=False, reason=PublishedReason.APPLY_FAILED, message=message,
                                  partial=True)

        self._status(isvc, view.uid, publication.published_status(status, rendered, request.endpoint,
                                                                  request.generation, request.observed_isvc_generation),
                     publication.conditions(True, PublishedReason.PUBLISHED, publication.published_message()),
                     generation=request.generation)
        ref = publication.gateway_ref(rendered)
        routed = sorted(e.cluster for e in request.entries if e.weight)
        return PublishOutcome(published=True, reason=PublishedReason.PUBLISHED,
                              message=f"HTTPRoute {ref['namespace']}/{ref['name']}", routed=routed, gateway_ref=ref)

    def _refuse(self, isvc: ObjectRef, map_uid: str, refused: publication.Refused) -> PublishOutcome:
        """Nothing new written: say why on the map (withdrawing everything claimed when nothing can be
        published)."""
        if refused.withdraw:
            return self._withdraw(isvc, map_uid, refused.message)
        self._status(isvc, map_uid, {}, publication.conditions(False, refused.reason, refused.message))
        return PublishOutcome(published=False, reason=refused.reason, message=refused.message)

    def _withdraw(self, isvc: ObjectRef, map_uid: str, why: str) -> PublishOutcome:
        """Nothing can be published: every claimed object goes, Published False Withdrawn."""
        self._remove_claimed(isvc, map_uid)
        self._status(isvc, map_uid, publication.WITHDRAWN_STATUS,
                     publication.conditions(False, PublishedReason.WITHDRAWN, why))
        return PublishOutcome(published=False, reason=PublishedReason.WITHDRAWN, message=why, withdrawn=True)

    def _remove_claimed(self, isvc: ObjectRef, map_uid: str) -> int:
        found = get_or_none(self._custom.get_namespaced_custom_object, GROUP, VERSION, isvc.namespace, PLURAL,
                            isvc.name)
        if found is None:
            return 0
        view = map_view(dict(found))
        claims = list(view.status.publisher.claimed_targets) if view.status and view.status.publisher else []
        for claim in claims:
            if self._ours(claim, map_uid) is not False:
                self._delete(claim)
        return len(claims)

    # -- unpublish --------------------------------------------------------------------------------------

    @activity.defn(name="publisher.unpublish")
    def unpublish(self, request: UnpublishInput) -> Unpublished:
        """Delete every claimed object, then release the claims; `release`: the finalizer too; `delete_map`:
        then the map."""
        isvc = request.isvc
        found = get_or_none(self._custom.get_namespaced_custom_object, GROUP, VERSION, isvc.namespace, PLURAL,
                            isvc.name)
        if found is None:
            return Unpublished(done=True, message="no TrafficMap")
        view = map_view(dict(found))
        if request.map_uid is not None and view.uid != request.map_uid:
            return Unpublished(done=True, message="the TrafficMap is another one now")
        if view.controller_uid not in (None, isvc.uid):
            return Unpublished(done=True, message="the TrafficMap is not this InferenceService's")
        removed = self._remove_claimed(isvc, view.uid)
        change: dict[str, Any] = dict(publication.WITHDRAWN_STATUS)
        try:
            self._status(isvc, view.uid, change, publication.conditions(False, request.reason, request.message))
        except ApiException as exc:
            if not absent(exc):
                raise
        if request.release and TRAFFIC_MAP_FINALIZER in view.finalizers:
            self._maps.update(map_ref(isvc, view.uid), _without_finalizer)
        if request.delete_map:
            only_this = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=view.uid))
            delete_if_present(self._custom.delete_namespaced_custom_object, GROUP, VERSION, isvc.namespace, PLURAL,
                              isvc.name, body=only_this)
        return Unpublished(done=True, message=f"removed {removed} claimed object(s)")

    def all(self) -> list[object]:
        return [self.publish, self.unpublish]


def _without_finalizer(obj: dict[str, Any]) -> bool:
    finalizers = obj["metadata"].get("finalizers") or []
    if TRAFFIC_MAP_FINALIZER not in finalizers:
        return False
    obj["metadata"]["finalizers"] = [f for f in finalizers if f != TRAFFIC_MAP_FINALIZER]
    return True


def _stripped(value: Any) -> Any:
    """A status value without condition timestamps, to tell a real change from a rewrite."""
    if isinstance(value, dict):
        return {k: _stripped(v) for k, v in value.items() if k != "lastTransitionTime"}
    if isinstance(value, list):
        return [_stripped(v) for v in value]
    return value


__all__ = ["FIELD_MANAGER", "OWNER_ANNOTATION", "PublisherActivities"]
