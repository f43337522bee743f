"""An in-memory control-plane cluster behind FAKE routing and publisher activities registered under the real
names (routing.*, publisher.*, kube.emit_event), for time-skipping tests of TrafficMapWorkflow.

It holds one InferenceService (its routing annotations, spec.routing, status.placement), the operator's routing
and endpoint blocks, the TrafficMap (spec, status, finalizers, its controller), the objects the publisher wrote
(by claim) and the homes' answers to a probe or a capacity poll. It answers as the real activities do, through
the same pure rules (rendering/global_route.py, rendering/publication.py), and tests/test_routing_conformance.py
runs the same cases against both.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.testing import WorkflowEnvironment

from servingops.activities.kubernetes import EventSpec
from servingops.activities.routing.types import (
    DeleteMapInput,
    MapWritten,
    ProbeAnswer,
    ProbeRequest,
    PublishInput,
    PublishOutcome,
    RoutingSource,
    SourceInput,
    TrafficMapView,
    Unpublished,
    UnpublishInput,
    WriteMapInput,
)
from servingops.api_models.conditions import merge_conditions
from servingops.api_models.contract.routing import ROUTING_ANNOTATIONS, TRAFFIC_MAP_FINALIZER
from servingops.api_models.ome.enums import PlacementMode
from servingops.api_models.ome.placement_status import PlacementStatus
from servingops.api_models.ome.routing import RoutingSpec
from servingops.api_models.ome.traffic_map import TrafficMapSpec, TrafficMapStatus
from servingops.api_models.operator_config import EndpointConfig, RoutingDefaults
from servingops.api_models.refs import ConditionUpdate, ObjectRef
from servingops.rendering import publication
from servingops.rendering.global_route import (
    PublishedReason,
)

NAMESPACE = "team-a"
NAME = "chat"


@dataclass
class FakeMap:
    uid: str
    controller_uid: str | None
    generation: int = 1
    spec: dict[str, Any] | None = None
    status: dict[str, Any] = field(default_factory=dict)
    finalizers: list[str] = field(default_factory=list)
    deleting: bool = False

    def view(self) -> TrafficMapView:
        return TrafficMapView(
            uid=self.uid, generation=self.generation, resource_version=str(self.generation),
            controller_uid=self.controller_uid, deleting=self.deleting, finalizers=list(self.finalizers),
            spec=TrafficMapSpec.model_validate(self.spec) if self.spec else None,
            status=TrafficMapStatus.model_validate(self.status) if self.status else None)


@dataclass
class HomeAnswer:
    status: int | None = 200
    error: str | None = None
    body: bytes = b""


@dataclass
class FakeRoutingWorld:
    env: WorkflowEnvironment | None = None
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    name: str = NAME
    namespace: str = NAMESPACE
    present: bool = True
    deleting: bool = False
    generation: int = 1
    annotations: dict[str, str] = field(default_factory=dict)
    placed_spec: bool = True
    mode: PlacementMode = PlacementMode.SPLIT
    routing: RoutingSpec | None = None
    placement: PlacementStatus | None = None
    defaults: RoutingDefaults = field(default_factory=lambda: RoutingDefaults(enabled=True))
    endpoint: EndpointConfig = field(default_factory=lambda: EndpointConfig(
        global_gateway="gateway-system/global", backend_port=80,
        global_host_template="{{ .Name }}.{{ .Namespace }}.global.example.com"))
    traffic_map: FakeMap | None = None
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What the publisher wrote, by claim (Kind/namespace/name)."""
    answers: dict[str, HomeAnswer] = field(default_factory=dict)
    """Per cluster, what its endpoint answers (a probe and a poll alike); absent: HTTP 200."""
    checks: list[list[str]] = field(default_factory=list)
    """The clusters of each probe or poll, in order."""
    publications: list[PublishInput] = field(default_factory=list)
    map_writes: int = 0
    events: list[tuple[str, str, str]] = field(default_factory=list)

    def ref(self) -> ObjectRef:
        return ObjectRef(group="ome.io", version="v1beta1", plural="inferenceservices", kind="InferenceService",
                         name=self.name, namespace=self.namespace, uid=self.uid)

    async def now(self) -> datetime:
        if self.env is None:
            return datetime.now(UTC)
        return (await self.env.get_current_time()).astimezone(UTC)

    # -- what a test reads ---------------------------------------------------------------------------------

    def weights(self) -> dict[str, int]:
        """The published route's backend weights by cluster (its Services carry the cluster label)."""
        route = next((o for c, o in self.objects.items() if c.startswith("HTTPRoute/")), None)
        if route is None:
            return {}
        by_name = {o["metadata"]["name"]: o["metadata"]["labels"]["ome.io/placement-cluster"]
                   for c, o in self.objects.items() if c.startswith("Service/")}
        return {by_name[b["name"]]: b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]}

    def condition(self, kind: str) -> dict[str, Any]:
        status = self.traffic_map.status if self.traffic_map else {}
        return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})

    def entries(self) -> dict[str, dict[str, Any]]:
        spec = self.traffic_map.spec if self.traffic_map and self.traffic_map.spec else {}
        return {e["cluster"]: e for e in spec.get("entries") or []}

    def edit_map_spec(self, spec: dict[str, Any]) -> None:
        """A hand edit: the spec replaced, the generation moved."""
        assert self.traffic_map is not None
        self.traffic_map.spec = spec
        self.traffic_map.generation += 1

    # -- the activities --------------------------------------------------------------------------------------

    def activities(self) -> list[Any]:
        world = self

        @activity.defn(name="routing.read_source")
        async def read_source(request: SourceInput) -> RoutingSource:
            view = world.traffic_map.view() if world.traffic_map else None
            if not world.present or request.isvc.uid != world.uid:
                return RoutingSource(present=False, traffic_map=view)
            return RoutingSource(
                present=True, uid=world.uid, generation=world.generation, deleting=world.deleting,
                annotations={k: v for k, v in world.annotations.items() if k in ROUTING_ANNOTATIONS},
                placed_spec=world.placed_spec,
                mode=world.mode if world.placed_spec else None, routing=world.routing,
                placement=world.placement, defaults=world.defaults, endpoint=world.endpoint, traffic_map=view)

        @activity.defn(name="routing.check_homes")
        async def check_homes(request: ProbeRequest) -> list[ProbeAnswer]:
            world.checks.append([t.cluster for t in request.targets])
            at = await world.now()
            answers = []
            for target in request.targets:
                answer = world.answers.get(target.cluster, HomeAnswer())
                answers.append(ProbeAnswer(cluster=target.cluster, status=answer.status, error=answer.error, at=at,
                                           body=answer.body if request.keep_body else b""))
            return answers

        @activity.defn(name="routing.write_map")
        async def write_map(request: WriteMapInput) -> MapWritten:
            if not world.present or world.deleting or request.isvc.uid != world.uid:
                return MapWritten(written=False, reason="SourceGone", message="the InferenceService is gone or going")
            body = request.spec.to_api()
            if world.traffic_map is None:
                world.traffic_map = FakeMap(uid=str(uuid.uuid4()), controller_uid=world.uid, spec=body,
                                            finalizers=[TRAFFIC_MAP_FINALIZER])
                changed = True
            else:
                found = world.traffic_map
                if found.controller_uid != world.uid:
                    return MapWritten(written=False, reason="InvalidOwner", message=(
                        f"TrafficMap {world.namespace}/{world.name} exists but is not controlled by InferenceService "
                        f"UID {world.uid}"))
                if found.deleting:
                    return MapWritten(written=False, reason="MapDeleting", message="the TrafficMap is being deleted",
                                      uid=found.uid, generation=found.generation)
                changed = found.spec != body
                if changed:
                    found.spec = body
                    found.generation += 1
                if TRAFFIC_MAP_FINALIZER not in found.finalizers:
                    found.finalizers.append(TRAFFIC_MAP_FINALIZER)
            found = world.traffic_map
            world.map_writes += 1
            found.status["sourceUID"] = world.uid
            found.status["conditions"] = merge_conditions(found.status.get("conditions"), request.conditions,
                                                          generation=found.generation, now=await world.now())
            return MapWritten(written=True, generation=found.generation, uid=found.uid, spec_changed=changed)

        @activity.defn(name="routing.delete_map")
        async def delete_map(request: DeleteMapInput) -> bool:
            found = world.traffic_map
            if found is None or found.controller_uid != request.isvc.uid:
                return False
            found.deleting = True
            if not found.finalizers:
                world.traffic_map = None
            return True

        def status(change: dict[str, Any], conditions: list[ConditionUpdate], generation: int | None = None) -> None:
            assert world.traffic_map is not None
            found = world.traffic_map
            for key, value in change.items():
                if value is None:
                    found.status.pop(key, None)
                else:
                    found.status[key] = value
            found.status["conditions"] = merge_conditions(found.status.get("conditions"), conditions,
                                                          generation=generation or found.generation,
                                                          now=datetime.now(UTC))

        def remove_claimed(map_uid: str) -> int:
            assert world.traffic_map is not None
            claims = list((world.traffic_map.status.get("publisher") or {}).get("claimedTargets") or [])
            for claim in claims:
                found = world.objects.get(claim)
                if found is not None and publication.owner_mark(found) == map_uid:
                    del world.objects[claim]
            return len(claims)

        @activity.defn(name="publisher.publish")
        async def publish(request: PublishInput) -> PublishOutcome:
            world.publications.append(request)
            found = world.traffic_map
            if found is None or found.uid != request.map_uid:
                return PublishOutcome(published=False, reason=PublishedReason.FINALIZING,
                                      message="the TrafficMap is gone")
            previous = found.view().status
            planned = publication.plan(request.endpoint, world.name, world.namespace, request.annotations,
                                       request.entries, request.addresses, options=request.options,
                                       address_failures=request.address_failures)  # fmt: skip
            refused: publication.Refused | None = planned if isinstance(planned, publication.Refused) else None
            if refused is None:
                assert isinstance(planned, publication.Rendered)
                rendered = planned
                marks = {claim: publication.owner_mark(world.objects[claim]) for claim in rendered.claims
                         if claim in world.objects}  # fmt: skip
                routes = [obj for claim, obj in world.objects.items() if claim.startswith("HTTPRoute/")]
                refused = publication.refuse_claims(rendered, marks, found.uid,
                                                    publication.hostname_taken(rendered, routes, found.uid))
            if refused is not None:
                if refused.withdraw:
                    remove_claimed(found.uid)
                    status(dict(publication.WITHDRAWN_STATUS),
                           publication.conditions(False, PublishedReason.WITHDRAWN, refused.message))
                    return PublishOutcome(published=False, reason=PublishedReason.WITHDRAWN, message=refused.message,
                                          withdrawn=True)
                status({}, publication.conditions(False, refused.reason, refused.message))
                return PublishOutcome(published=False, reason=refused.reason, message=refused.message)
            old = set((found.status.get("publisher") or {}).get("claimedTargets") or [])
            for obj in publication.mark(rendered, found.uid):
                meta = obj["metadata"]
                world.objects[f"{obj['kind']}/{meta['namespace']}/{meta['name']}"] = obj
            for claim in old - set(rendered.claims):
                world.objects.pop(claim, None)
            status(publication.published_status(previous, rendered, request.endpoint, request.generation,
                                                 request.observed_isvc_generation),
                   publication.conditions(True, PublishedReason.PUBLISHED, publication.published_message()),
                   generation=request.generation)
            ref = publication.gateway_ref(rendered)
            return PublishOutcome(published=True, reason=PublishedReason.PUBLISHED,
                                  message=f"HTTPRoute {ref['namespace']}/{ref['name']}",
                                  routed=sorted(e.cluster for e in request.entries if e.weight), gateway_ref=ref)

        @activity.defn(name="publisher.unpublish")
        async def unpublish(request: UnpublishInput) -> Unpublished:
            found = world.traffic_map
            if found is None:
                return Unpublished(done=True, message="no TrafficMap")
            if request.map_uid is not None and found.uid != request.map_uid:
                return Unpublished(done=True, message="the TrafficMap is another one now")
            if found.controller_uid not in (None, request.isvc.uid):
                return Unpublished(done=True, message="the TrafficMap is not this InferenceService's")
            removed = remove_claimed(found.uid)
            status(dict(publication.WITHDRAWN_STATUS), publication.conditions(False, request.reason, request.message))
            if request.release and TRAFFIC_MAP_FINALIZER in found.finalizers:
                found.finalizers.remove(TRAFFIC_MAP_FINALIZER)
            if request.delete_map or (found.deleting and not found.finalizers):
                world.traffic_map = None
            return Unpublished(done=True, message=f"removed {removed} claimed object(s)")

        @activity.defn(name="kube.emit_event")
        async def emit_event(spec: EventSpec) -> None:
            world.events.append((spec.type, spec.reason, spec.message))

        return [read_source, check_homes, write_map, delete_map, publish, unpublish, emit_event]


OWNER = publication.OWNER_ANNOTATION
"""The publisher's owner mark, as on the objects."""
