"""Activities that serve InferenceService components: revision Deployments and Services, and the
HTTPRoute whose weights carry the traffic split. They observe and move; the workflow decides.

Revisions are created with a plain create (a 409 means a concurrent or earlier attempt already
did it) and only their replicas are patched afterwards: a revision's pod template is fixed by its
hash, so there is nothing else to reconcile. The HTTPRoute is server-side applied, so a retry is
a no-op and fields other managers own are kept.

The route's parentRefs and hostnames come from the operator's `ingress` block, read by the
activities themselves (`ingress`: an IngressConfigReader in the worker), so no workflow input or
command depends on it. While the block does not parse, or its domain template gives no DNS name
for a service, set_traffic moves only the weights and keeps the attachment the route has: a typo
in the ConfigMap never takes a serving route off its Gateway. observe reports why
(ServiceObservation.ingress), and the InferenceService's IngressReady condition says it.

Errors are classified (api_models.errors): what the spec or the input cannot give (a component
with nothing to run, a spec that does not parse, an object the apiserver rejects with 400/422, a
split that does not add up) is raised permanent, naming the field, so the workflow reports it
on the object at once; an apiserver that is away, conflicting (409), throttling (429) or failing
(5xx) surfaces as the client's own exception, which the activity's retry policy retries.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio import activity

from servingops.activities.operator_config import IngressSource, current_ingress
from servingops.activities.reference_reader import KubeReader
from servingops.activities.serving import omenative
from servingops.activities.serving.autoscaler import read_policy
from servingops.activities.serving.omenative import OMENATIVE, ProjectedReplicas, deployment_mode
from servingops.activities.serving.placement_demand import demand_hold
from servingops.activities.serving.traefik_traffic import TraefikServices
from servingops.activities.serving.types import (
    ComponentObservation,
    EnsureRevisionInput,
    ObserveInput,
    RevisionKey,
    RevisionObservation,
    ScaleThenRouteInput,
    ScaleThenRouteResult,
    ServiceObservation,
    ServingHold,
    SetTrafficInput,
)
from servingops.api_models.credential_headers import scrubbed
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.ome.components import EngineSpec
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.inference_service import InferenceService, InferenceServiceSpec
from servingops.api_models.operator_config import IngressConfig, OperatorConfigError
from servingops.api_models.refs import ObjectRef
from servingops.api_models.serving import IngressObservation, TrafficWeight
from servingops.clients.kube.calls import apply, call, create_unless_exists, delete_if_present, get_or_none, list_items
from servingops.clients.kube.errors import conflict, invalid
from servingops.clients.kube.events import record_event
from servingops.rendering import ingress, multinode, render, scaling, scaling_policy
from servingops.rendering import traefik_traffic as tt
from servingops.rendering.autoscaler_policy import needs_policy
from servingops.rendering.backend_traffic_policy import declares_traffic
from servingops.rendering.expiry import expires_at
from servingops.rendering.names import revision_name, route_name
from servingops.rendering.resolution import ResolvedService, Unresolvable, asks_for_accelerators, resolve_service

FIELD_MANAGER = "servingops"
_ROLLOUT_ANNOTATION_PREFIX = "ome.io/rollout-"
_READERS = 8
# Literal, not InferenceService.crd's: tests/rbac_calls.py reads the kind a delete names from the code, and the
# worker may delete this kind only (spec.ttlSecondsAfterCreation). The assert keeps them one fact.
_ISVC_GROUP, _ISVC_VERSION, _ISVC_PLURAL = "ome.io", "v1beta1", "inferenceservices"
assert (_ISVC_GROUP, _ISVC_VERSION, _ISVC_PLURAL) == (InferenceService.crd.group, InferenceService.crd.version,
                                                      InferenceService.crd.plural)
"""Threads for the independent reads one activity makes before it writes (ensure_revision,
set_traffic): issued together they cost one apiserver round trip instead of one each, and these
activities are on a promote's path to its traffic."""
_GATEWAY_GROUP, _GATEWAY_VERSION, _ROUTES = "gateway.networking.k8s.io", "v1", "httproutes"


def _namespace(ref: ObjectRef) -> str:
    if not ref.namespace:
        raise application_error(ErrorType.INVALID_INPUT,
                                f"{ref.describe()}: an InferenceService is namespaced; no namespace given")
    return ref.namespace


def _invalid_spec(ref: ObjectRef, exc: ValidationError) -> str:
    """The first problem pydantic found, named by its field path under spec."""
    first = exc.errors()[0] if exc.errors() else None
    if first is None:
        return f"{ref.describe()}: the spec does not parse: {exc}"
    field = ".".join(["spec", *(str(part) for part in first["loc"])])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{ref.describe()}: {field}: {first['msg']}{more}"


def _as_dict(obj: object) -> dict[str, Any]:
    """Custom objects come back as plain JSON objects (typed `object` by the client)."""
    return dict(cast(dict[str, Any], obj))


def _body(manifest: dict[str, Any]) -> Any:
    """The client's create calls are typed for its model classes but take plain manifests, which
    keep opaque user fields (a container field newer than the client) intact."""
    return manifest


def _revision_observation(revision: str, dep: client.V1Deployment | None) -> RevisionObservation:
    if dep is None:
        return RevisionObservation(revision=revision, replicas=0, ready_replicas=0)
    spec, status = dep.spec, dep.status
    return RevisionObservation(
        revision=revision,
        replicas=(spec.replicas if spec and spec.replicas is not None else 0),
        ready_replicas=(status.ready_replicas or 0) if status else 0,
        updated_replicas=(status.updated_replicas or 0) if status else 0,
    )


LiveService = tuple[render.Owner, InferenceServiceSpec, dict[str, str]]
"""The InferenceService as an activity reads it before it writes: owner, rendered spec, annotations."""

class ServingActivities:
    """Bound to one ApiClient for the life of the worker; `ingress` is the operator's ingress block
    (the Gateway every HTTPRoute attaches to, the hostnames): fixed, or read on each call (the
    worker passes an IngressConfigReader). None: the defaults, routes attached to no Gateway."""

    def __init__(self, api_client: client.ApiClient, ingress: IngressSource | None = None,
                 controller_namespace: str | None = None, artifacts: str | None = None) -> None:
        self.api_client = api_client
        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._reader = KubeReader(self.custom, self.apps, controller_namespace)
        self._artifacts = artifacts
        """`<registry>/<repository>` where Deckhouse models' artifacts are (served by reference)."""
        self._ingress_source = ingress if ingress is not None else IngressConfig()
        self.projected = ProjectedReplicas(api_client)
        """OMENative components: their projected InferenceReplicas (activities/serving/omenative.py)."""
        self._readers = ThreadPoolExecutor(max_workers=_READERS, thread_name_prefix="serving-read")
        self.traefik = TraefikServices(api_client)
        """spec.traffic's Traefik translation: the component's weighted TraefikService a route may name."""

    def _read(self, call: Any, *args: Any) -> Future[Any]:
        """Start a read on the reader threads; its result (or exception) comes from .result()."""
        return self._readers.submit(call, *args)

    # -- reads --------------------------------------------------------------------------------

    def _isvc(self, ref: ObjectRef) -> dict[str, Any] | None:
        found = get_or_none(self.custom.get_namespaced_custom_object, ref.group, ref.version, _namespace(ref),
                            ref.plural, ref.name)
        if found is None:
            return None
        obj = _as_dict(found)
        if ref.uid and obj["metadata"].get("uid") != ref.uid:
            return None  # the name now belongs to another object
        return obj

    def _live_isvc_annotated(self, ref: ObjectRef) -> LiveService:
        """The live service's owner, rendered spec and annotations (the deployment mode may be one)."""
        obj = self._isvc(ref)
        if obj is None:
            raise application_error(ErrorType.OBJECT_GONE, f"{ref.describe()} is gone")
        try:
            return self._owner(obj), self._spec(ref, obj), dict(obj["metadata"].get("annotations") or {})
        except Unresolvable as exc:
            # Observed servable a moment ago, not now (a model or runtime changed): the revision
            # asked for is no longer what the spec renders; the workflow observes again.
            raise application_error(ErrorType.REVISION_SUPERSEDED, f"{exc.reason}: {exc.message}") from exc

    @staticmethod
    def _owner(obj: dict[str, Any]) -> render.Owner:
        meta = obj["metadata"]
        return render.Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])

    def _spec(self, ref: ObjectRef, obj: dict[str, Any]) -> InferenceServiceSpec:
        """The spec to render: as written, or, when it names a model, made concrete from the model
        and its runtime (rendering/resolution.py; raises Unresolvable when that cannot be done now)."""
        return self._resolved(ref, obj)[0]

    def _resolved(self, ref: ObjectRef, obj: dict[str, Any]) -> tuple[InferenceServiceSpec, ResolvedService | None]:
        # A spec that names a model, or asks for an accelerator, is made concrete first; else it renders as written.
        concrete = (obj.get("spec") or {}).get("model") or asks_for_accelerators(obj)
        resolved = resolve_service(self._reader, obj, self._artifacts) if concrete else None
        body = resolved.spec if resolved is not None else obj.get("spec")
        try:
            return InferenceServiceSpec.model_validate(body or {}), resolved
        except ValidationError as exc:
            raise application_error(ErrorType.INVALID_SPEC, _invalid_spec(ref, exc)) from exc

    def _deployment(self, name: str, namespace: str) -> client.V1Deployment | None:
        found: client.V1Deployment | None = get_or_none(self.apps.read_namespaced_deployment, name, namespace)
        return found

    def _service_exists(self, name: str, namespace: str) -> bool:
        return get_or_none(self.core.read_namespaced_service, name, namespace) is not None

    def _route(self, isvc: str, namespace: str, component: ComponentType) -> dict[str, Any] | None:
        found = get_or_none(self.custom.get_namespaced_custom_object,
                            _GATEWAY_GROUP, _GATEWAY_VERSION, namespace, _ROUTES, route_name(isvc, component.value))
        return _as_dict(found) if found is not None else None

    def _ingress_config(self) -> IngressConfig | OperatorConfigError:
        """The ingress block as read now (cached by its reader), or why it does not parse."""
        return current_ingress(self._ingress_source)

    def _ingress(self, owner: render.Owner, spec: InferenceServiceSpec,
                 config: Future[IngressConfig | OperatorConfigError] | None = None) -> ingress.Routing:
        """What the ingress block gives this service's routes; `config`: its read already started."""
        block = config.result() if config is not None else self._ingress_config()
        return ingress.routing(block, owner.name, owner.namespace, (c for c, _ in render.set_components(spec)))

    def _revisions(self, owner: render.Owner, component: ComponentType) -> list[RevisionObservation]:
        selector = ",".join(f"{k}={v}" for k, v in render.selector_labels(owner.name, component).items())
        items = list_items(self.apps.list_namespaced_deployment, owner.namespace, label_selector=selector)

        def owned(dep: client.V1Deployment) -> bool:
            # Leftovers of an earlier object with the same name await garbage collection.
            refs = (dep.metadata.owner_references if dep.metadata else None) or []
            return any(r.uid == owner.uid for r in refs)

        def order(dep: client.V1Deployment) -> tuple[str, str]:
            meta = dep.metadata
            created = meta.creation_timestamp.isoformat() if meta and meta.creation_timestamp else ""
            return created, (meta.name or "") if meta else ""

        result = []
        for dep in sorted((d for d in items if owned(d)), key=order):
            labels = (dep.metadata.labels if dep.metadata else None) or {}
            if render.LABEL_REVISION in labels:
                result.append(_revision_observation(labels[render.LABEL_REVISION], dep))
        return result

    def _weighted(self, route: dict[str, Any] | None, isvc: str, namespace: str,
                  component: ComponentType) -> dict[str, Any] | None:
        """The component's weighted TraefikService when the route names it (read once per look), else None."""
        if not tt.names_component(route, isvc, component):
            return None
        return self.traefik.read(namespace, tt.component_name(isvc, component))

    # -- activities ---------------------------------------------------------------------------

    @activity.defn(name="serving.observe")
    def observe(self, inp: ObserveInput) -> ServiceObservation | None:
        """The InferenceService and everything serving it; None when it is gone."""
        obj = self._isvc(inp.isvc)
        if obj is None:
            return None
        if (obj.get("spec") or {}).get("placement"):
            return self._observation(obj, [], placed=True)  # served by members: workflows/placement/
        try:
            owner, (spec, resolved) = self._owner(obj), self._resolved(inp.isvc, obj)
        except Unresolvable as exc:
            return self._observation(obj, [], held=ServingHold(reason=exc.reason.value, message=exc.message))
        components = []
        annotations = obj["metadata"].get("annotations") or {}
        demand = demand_hold(owner.name, annotations, spec)
        if demand is not None:
            return self._observation(obj, [], held=demand, resolved=resolved)
        routing = self._ingress(owner, spec)
        coordinating = _scaling_policy(inp.isvc, spec)
        for component, cspec in render.set_components(spec):
            route = self._route(owner.name, owner.namespace, component)
            native = deployment_mode(spec, cspec, annotations) == OMENATIVE
            lifecycle, scale_replicas = self.projected.observed(owner, component) if native else (None, None)
            address = render.component_url(owner, component) if route else None
            url, route_status, drift = routing.observe(component, route, address, FIELD_MANAGER)
            weighted = self._weighted(route, owner.name, owner.namespace, component)
            if route is not None and not drift and routing.config is not None:
                # Under the Traefik translation the route names the component's weighted TraefikService, which
                # is there; otherwise it names the revisions' Services. Anything else is for set_traffic to
                # apply again (the workflow's reattach), with the split the route serves now.
                if self.traefik.weighted(routing.config):
                    drift = not tt.names_component(route, owner.name, component) or weighted is None
                else:
                    drift = bool(tt.referenced(route))
            components.append(ComponentObservation(
                component=component,
                desired_revision=(multinode.render_component if native else render.render_revision)(
                    owner.name, component, cspec).revision,
                desired_replicas=render.desired_replicas(cspec),
                revisions=self.projected.revisions(owner, component) if native else self._revisions(owner, component),
                traffic=tt.split(route, weighted, owner.name, component),
                url=url,
                address=address,
                route_status=route_status,
                ingress_drift=drift,
                replica=omenative.replica_name(owner.name, component) if native else None,
                lifecycle=lifecycle,
                autoscaler_digest=self._scaler_digest(owner.namespace, cspec, native),
                scale_replicas=scale_replicas,
                max_replicas=cspec.max_replicas,
                selected_accelerator=resolved.accelerators.get(component.value) if resolved is not None else None,
            ))
        observation = self._observation(obj, components, resolved=resolved, ingress=routing.observation())
        observation.scaling_policy = coordinating
        return observation

    def _scaler_digest(self, namespace: str, cspec: render.ComponentSpec, native: bool) -> str | None:
        """What the component's scaler is made from (scaling.scaler_digest), with the referenced policy's
        uid and generation when a policy renders it; None for a RawDeployment component with neither an
        autoscaler block nor a policy reference (it has no scaler to keep)."""
        ref = cspec.autoscaler_policy_ref
        if not native and cspec.autoscaler is None and ref is None:
            return None
        version = None
        if needs_policy(cspec.autoscaler, ref) and ref is not None:
            policy = read_policy(self.custom, namespace, ref.name)
            meta = (policy or {}).get("metadata") or {}
            version = f"{meta.get('uid')}/{meta.get('generation')}" if policy is not None else "absent"
        return scaling.scaler_digest(cspec, version)

    @staticmethod
    def _observation(obj: dict[str, Any], components: list[ComponentObservation], held: ServingHold | None = None,
                     resolved: ResolvedService | None = None, placed: bool = False,
                     ingress: IngressObservation | None = None) -> ServiceObservation:
        meta = obj["metadata"]
        annotations = meta.get("annotations") or {}
        rollout = (obj.get("spec") or {}).get("rollout")
        return ServiceObservation(
            uid=meta["uid"],
            generation=int(meta.get("generation", 0)),
            resource_version=meta["resourceVersion"],
            deleting=bool(meta.get("deletionTimestamp")),
            annotations={k: v for k, v in annotations.items() if k.startswith(_ROLLOUT_ANNOTATION_PREFIX)},
            spec_rollout=scrubbed(dict(rollout)) if rollout is not None else None,
            components=components,
            by_reference=bool((obj.get("spec") or {}).get("model")),
            selects_accelerators=not (obj.get("spec") or {}).get("model") and bool(asks_for_accelerators(obj)),
            mounted_overlays=list(resolved.overlays) if resolved is not None else [],
            skipped_overlays=list(resolved.skipped_overlays) if resolved is not None else [],
            pinned_revision=resolved.pinned_revision if resolved is not None else None,
            runtime_sync_token=resolved.sync_token if resolved is not None else None,
            held=held,
            placed=placed,
            ingress=ingress,
            expires_at=expires_at(obj),
            traffic_declared=declares_traffic((obj.get("spec") or {}).get("traffic"), annotations),
            traffic_reported=bool((obj.get("status") or {}).get("traffic")),
        )

    @activity.defn(name="serving.ensure_revision")
    def ensure_revision(self, inp: EnsureRevisionInput) -> RevisionObservation:
        """Create the revision from the current spec when absent, else only set its replicas."""
        return self._ensure_revision(inp, self._read(self._live_isvc_annotated, inp.key.isvc))

    def _revision_reads(self, key: RevisionKey) -> tuple[Future[Any], Future[bool]]:
        """Start the reads of a revision's Deployment and Service."""
        namespace = _namespace(key.isvc)
        name = revision_name(key.isvc.name, key.component.value, key.revision)
        return self._read(self._deployment, name, namespace), self._read(self._service_exists, name, namespace)

    def _ensure_revision(self, inp: EnsureRevisionInput, live: Future[LiveService],
                         reads: tuple[Future[Any], Future[bool]] | None = None) -> RevisionObservation:
        """ensure_revision with the service's read already started (`live`), and the revision's own reads
        when the caller started them (`reads`: a step's revisions all read at once)."""
        key = inp.key
        if inp.replicas < 0:
            raise application_error(ErrorType.INVALID_INPUT, f"replicas must be >= 0, got {inp.replicas}")
        namespace = _namespace(key.isvc)
        name = revision_name(key.isvc.name, key.component.value, key.revision)
        # The three reads are independent: issued together (the Service's answer is used only when
        # the Deployment exists). Errors surface from .result() in the order the code had them.
        deployment, service = reads if reads is not None else self._revision_reads(key)
        owner, spec, annotations = live.result()
        demand = demand_hold(owner.name, annotations, spec)
        if demand is not None:
            # Placement accepted another rendering since the workflow observed (placement_demand.py):
            # nothing is projected; the workflow reads again and sees the hold.
            raise application_error(ErrorType.REVISION_SUPERSEDED, f"{demand.reason}: {demand.message}")
        cspec = render.component_spec(spec, key.component)
        if cspec is not None and deployment_mode(spec, cspec, annotations) == OMENATIVE:
            return self._ensure_native(owner, key, spec, cspec, inp.replicas, inp.component_replicas)
        existing = deployment.result()
        if existing is not None and existing.metadata and existing.metadata.deletion_timestamp:
            # Being deleted: creating under the same name only works once it is gone; a retry will.
            raise application_error(ErrorType.REVISION_DELETING, f"Deployment {namespace}/{name} is being deleted")
        if existing is None:
            try:
                return self._create_revision(owner, key, spec, inp.replicas)
            except ValidationError as exc:
                # Rendering read a part of the spec it cannot use: the spec must change.
                raise application_error(ErrorType.INVALID_SPEC, _invalid_spec(key.isvc, exc)) from exc
        if not service.result():
            # Deleted by someone else: rebuild it from the Deployment's own template, which is
            # what the revision runs whatever the spec says now.
            template = self.api_client.sanitize_for_serialization(  # type: ignore[no-untyped-call]
                existing.spec.template if existing.spec else None)
            rendered = render.RenderedRevision(component=key.component, revision=key.revision,
                                               template=template or {})
            cspec = render.component_spec(spec, key.component) or EngineSpec()
            self._create_service(owner, rendered, cspec)
        if existing.spec is not None and existing.spec.replicas == inp.replicas:
            return _revision_observation(key.revision, existing)  # already so: the read is the answer
        dep = call(self.apps.patch_namespaced_deployment, name, namespace, {"spec": {"replicas": inp.replicas}},
                   field_manager=FIELD_MANAGER)
        return _revision_observation(key.revision, dep)

    def _ensure_native(self, owner: render.Owner, key: RevisionKey, spec: InferenceServiceSpec,
                       cspec: render.ComponentSpec, replicas: int, count: int | None = None) -> RevisionObservation:
        """An OMENative component: the revision's Service selects the projected replica's pods of
        that revision, and its capacity moves through the replica's pacing (omenative.py); `count`: the
        replica's whole count when a spec.scalingPolicy sets it (else minReplicas)."""
        desired = multinode.render_component(owner.name, key.component, cspec)  # a gang's: its leader's
        if key.revision == desired.revision:
            try:
                multinode.check_servable(spec, key.component, cspec)
            except render.Unservable as exc:
                raise application_error(ErrorType.INVALID_SPEC, f"{key.isvc.describe()}: {exc}") from exc
            self._create_service(owner, desired, multinode.serving_spec(cspec))
        elif not self._service_exists(revision_name(owner.name, key.component.value, key.revision), owner.namespace):
            raise application_error(
                ErrorType.REVISION_SUPERSEDED,
                f"revision {key.revision} of {key.component.value} does not exist and the spec now renders "
                f"{desired.revision}")
        return self.projected.ensure(owner, key.component, spec, cspec, desired, revision=key.revision,
                                     capacity=replicas, count=count)

    def _create_revision(self, owner: render.Owner, key: RevisionKey, spec: InferenceServiceSpec,
                         replicas: int) -> RevisionObservation:
        cspec = render.component_spec(spec, key.component)
        rendered = render.render_revision(owner.name, key.component, cspec) if cspec is not None else None
        if cspec is None or rendered is None or rendered.revision != key.revision:
            now = rendered.revision if rendered else "nothing (the component is not set)"
            raise application_error(
                ErrorType.REVISION_SUPERSEDED,
                f"revision {key.revision} of {key.component.value} does not exist and the spec now renders {now}")
        try:
            render.check_servable(spec, key.component, cspec)
        except render.Unservable as exc:
            raise application_error(ErrorType.INVALID_SPEC, f"{key.isvc.describe()}: {exc}") from exc
        # The Service first: once the Deployment exists, its Service does too, so a crash
        # between the two leaves at worst an unused Service that the retry adopts.
        self._create_service(owner, rendered, cspec)
        name = revision_name(owner.name, key.component.value, key.revision)
        try:
            dep = call(self.apps.create_namespaced_deployment, owner.namespace,
                       _body(render.deployment(owner, rendered, cspec, replicas)), field_manager=FIELD_MANAGER)
        except ApiException as exc:
            if conflict(exc):  # created meanwhile by a concurrent attempt: converge on replicas
                dep = call(self.apps.patch_namespaced_deployment, name, owner.namespace,
                           {"spec": {"replicas": replicas}}, field_manager=FIELD_MANAGER)
            elif invalid(exc):
                raise application_error(ErrorType.INVALID_REVISION,
                                        f"Deployment {owner.namespace}/{name} rejected: {exc.body}") from exc
            else:
                raise
        return _revision_observation(key.revision, dep)

    def _create_service(self, owner: render.Owner, rendered: render.RenderedRevision,
                        cspec: render.ComponentSpec) -> None:
        body = render.service(owner, rendered, cspec)
        try:
            if create_unless_exists(self.core.create_namespaced_service, owner.namespace, _body(body),
                                    field_manager=FIELD_MANAGER) is None:
                return  # already there: a revision's Service never changes
        except ApiException as exc:
            if invalid(exc):
                raise application_error(ErrorType.INVALID_REVISION,
                                        f"Service {owner.namespace}/{body['metadata']['name']} rejected: "
                                        f"{exc.body}") from exc
            raise

    @activity.defn(name="serving.set_traffic")
    def set_traffic(self, inp: SetTrafficInput) -> None:
        """Program the component's HTTPRoute with exactly these weights."""
        _validate_weights(inp.weights)
        self._set_traffic(inp, self._read(self._live_isvc_annotated, inp.isvc), with_services=(),
                          config=self._read(self._ingress_config))

    @activity.defn(name="serving.scale_then_route")
    def scale_then_route(self, inp: ScaleThenRouteInput) -> ScaleThenRouteResult:
        """A canary step's scale and weights in one call (one workflow task hop and one read of the
        InferenceService fewer on a promote's path): each revision ensured as ensure_revision does;
        the routes programmed as set_traffic does, only when every revision has its replicas Ready.
        Everything named must belong to one InferenceService."""
        if not inp.revisions:
            raise application_error(ErrorType.INVALID_INPUT, "no revision to scale")
        isvc = inp.revisions[0].key.isvc
        strays = [r.key.isvc.describe() for r in inp.revisions if r.key.isvc != isvc] + \
                 [r.isvc.describe() for r in inp.routes if r.isvc != isvc]
        if strays:
            raise application_error(ErrorType.INVALID_INPUT,
                                    f"one call serves one InferenceService ({isvc.describe()}), also named: "
                                    f"{', '.join(strays)}")
        for route in inp.routes:
            _validate_weights(route.weights)
        live = self._read(self._live_isvc_annotated, isvc)
        # The ingress block is cached for seconds; when its read is due it goes beside the others, not after.
        config = self._read(self._ingress_config) if inp.routes else None
        # Every revision's reads start now, beside the service's: a step's stable and canary revisions cost
        # one round trip of reads, not one each (a promote's path, docs/metrics.md).
        reads = [self._revision_reads(request.key) for request in inp.revisions]
        scaled = [self._ensure_revision(request, live, read)
                  for request, read in zip(inp.revisions, reads, strict=True)]
        routed = bool(inp.routes) and all(seen.ready_replicas >= request.replicas
                                          for seen, request in zip(scaled, inp.revisions, strict=True))
        if routed:
            # An ensured revision's Service exists (ensure_revision creates or checks it): not read again.
            ensured = [(r.key.component, r.key.revision) for r in inp.revisions]
            for route in inp.routes:
                self._set_traffic(route, live, with_services=[rev for comp, rev in ensured if comp == route.component],
                                  config=config)
        return ScaleThenRouteResult(scaled=scaled, routed=routed)

    def _set_traffic(self, inp: SetTrafficInput, live: Future[LiveService], with_services: Iterable[str],
                     config: Future[IngressConfig | OperatorConfigError] | None = None) -> None:
        """set_traffic with the service's read already started (`live`, and the ingress block's: `config`);
        `with_services`: revisions whose Service is known to exist."""
        namespace = _namespace(inp.isvc)
        known = set(with_services)
        services = [(w.revision, self._read(self._service_exists, revision_name(inp.isvc.name, inp.component.value,
                                                                                w.revision), namespace))
                    for w in inp.weights if w.revision not in known]
        owner, spec, _ = live.result()
        missing = [revision for revision, exists in services if not exists.result()]
        if missing:
            raise application_error(ErrorType.INVALID_TRAFFIC,
                                    f"no Service for revision(s) {', '.join(missing)} of {inp.component.value}")
        routing = self._ingress(owner, spec, config)
        attachment = (routing.attachments or {}).get(inp.component)
        if attachment is None:
            # The attachment cannot be rendered now (observe says why): keep the route's as it is.
            attachment = ingress.live_attachment(self._route(owner.name, owner.namespace, inp.component))
        if routing.config is not None:
            weighted = self.traefik.weighted(routing.config)
        else:  # the ingress block cannot be read: the route keeps naming what it names
            weighted = tt.names_component(self._route(owner.name, owner.namespace, inp.component), owner.name,
                                          inp.component)
        if weighted:
            # The weights go into the component's weighted TraefikService, before the route names it (Traefik
            # never sees a route naming a TraefikService that is not there); the route's one backendRef does
            # not change, so a promote writes only the TraefikService.
            self.traefik.apply_weighted(owner, inp.component, inp.weights, tt.translate(spec.traffic, None).balancing)
            body = render.http_route(owner, inp.component, inp.weights, attachment,
                                     weighted=tt.component_name(owner.name, inp.component))
        else:
            body = render.http_route(owner, inp.component, inp.weights, attachment)
        try:
            apply(self.custom.patch_namespaced_custom_object,
                  _GATEWAY_GROUP, _GATEWAY_VERSION, owner.namespace, _ROUTES, body["metadata"]["name"], body,
                  field_manager=FIELD_MANAGER)
        except ApiException as exc:
            if invalid(exc):
                raise application_error(ErrorType.INVALID_TRAFFIC,
                                        f"HTTPRoute {owner.namespace}/{body['metadata']['name']} rejected: "
                                        f"{exc.body}") from exc
            raise

    @activity.defn(name="serving.delete_revision")
    def delete_revision(self, key: RevisionKey) -> None:
        """Delete the revision's Deployment and Service; nothing to do when already gone. Refused
        while the HTTPRoute still sends it traffic: shift traffic first."""
        namespace = _namespace(key.isvc)
        route = self._route(key.isvc.name, namespace, key.component)
        weighted = self._weighted(route, key.isvc.name, namespace, key.component)
        if route is not None:
            serving = [w for w in tt.split(route, weighted, key.isvc.name, key.component)
                       if w.revision == key.revision and w.weight > 0]
            if serving:
                raise application_error(ErrorType.REVISION_SERVING_TRAFFIC,
                                        f"revision {key.revision} of {key.component.value} still has weight "
                                        f"{serving[0].weight}")
        name = revision_name(key.isvc.name, key.component.value, key.revision)
        if weighted is not None:
            # The revision's child (at weight 0) out of the component's weighted TraefikService before its Service
            # goes: Traefik drops a TraefikService one of whose Services is missing. Only over the object as read
            # (a 409, retried, when a set_traffic wrote it since).
            self.traefik.drop_child(weighted, name)
        options = client.V1DeleteOptions(propagation_policy="Background")
        for delete in (self.apps.delete_namespaced_deployment, self.core.delete_namespaced_service):
            delete_if_present(delete, name, namespace, body=options)

    @activity.defn(name="serving.delete_expired")
    def delete_expired(self, inp: ObserveInput) -> bool:
        """Delete the InferenceService once its ttlSecondsAfterCreation has passed, by the object as it is
        now (an edit that moved or removed the ttl since the workflow looked wins): True when this call
        deleted it. The delete is conditional on the uid and resourceVersion just read, so a concurrent
        write makes it read again (409, retried) instead of deleting what that write changed."""
        obj = self._isvc(inp.isvc)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return False
        deadline = expires_at(obj)
        if deadline is None or deadline > dt.datetime.now(dt.UTC):
            return False
        meta, ref = obj["metadata"], inp.isvc
        options = client.V1DeleteOptions(propagation_policy="Background", preconditions=client.V1Preconditions(
            uid=meta["uid"], resource_version=meta["resourceVersion"]))
        deleted = delete_if_present(self.custom.delete_namespaced_custom_object, _ISVC_GROUP, _ISVC_VERSION,
                                    _namespace(ref), _ISVC_PLURAL, ref.name, body=options)
        if deleted:
            ttl = obj["spec"]["ttlSecondsAfterCreation"]
            record_event(self.core, api_version=obj["apiVersion"], kind=obj["kind"], name=ref.name,
                         namespace=_namespace(ref), uid=meta["uid"], event_type="Normal", reason="Expired",
                         message=f"deleted: spec.ttlSecondsAfterCreation is {ttl}s and it was created at "
                                 f"{meta['creationTimestamp']}")  # fmt: skip
        return deleted

    @activity.defn(name="serving.revision_status")
    def revision_status(self, key: RevisionKey) -> RevisionObservation:
        """Replicas of the revision's Deployment; 0/0 when it does not exist."""
        name = revision_name(key.isvc.name, key.component.value, key.revision)
        namespace = _namespace(key.isvc)
        deployment = self._deployment(name, namespace)
        if deployment is None and self.projected.get(namespace, omenative.replica_name(key.isvc.name, key.component)):
            owner = render.Owner(name=key.isvc.name, namespace=namespace, uid=key.isvc.uid or "")
            return next((r for r in self.projected.revisions(owner, key.component) if r.revision == key.revision),
                        RevisionObservation(revision=key.revision, replicas=0, ready_replicas=0))
        return _revision_observation(key.revision, deployment)

    def all(self) -> list[Any]:
        return [self.observe, self.ensure_revision, self.set_traffic, self.scale_then_route, self.delete_revision,
                self.revision_status, self.delete_expired]


def _scaling_policy(ref: ObjectRef, spec: InferenceServiceSpec) -> dict[str, object] | None:
    """The spec's scalingPolicy (the runtime's default already in it, rendering/resolution.py) in API form
    when it coordinates; refused (InvalidScalingPolicy, permanent) when it breaks a rule."""
    policy = spec.scaling_policy
    components = list(render.set_components(spec))
    own = [c for c, cspec in components if scaling.owns_replicas(cspec.autoscaler)
           or (cspec.autoscaler is None and cspec.autoscaler_policy_ref is not None)]
    try:
        plan = scaling_policy.plan(policy, [c for c, _ in components], own)
    except scaling_policy.ScalingPolicyError as exc:
        raise application_error(ErrorType.INVALID_SCALING_POLICY, f"{ref.describe()}: {exc}") from exc
    if plan is None or policy is None:
        return None
    return policy.model_dump(by_alias=True, exclude_none=True, mode="json")


def _validate_weights(weights: list[TrafficWeight]) -> None:
    if not weights:
        raise application_error(ErrorType.INVALID_TRAFFIC, "no weights given")
    revisions = [w.revision for w in weights]
    if len(set(revisions)) != len(revisions):
        raise application_error(ErrorType.INVALID_TRAFFIC, f"a revision is listed twice: {revisions}")
    if any(not 0 <= w.weight <= 100 for w in weights):
        raise application_error(ErrorType.INVALID_TRAFFIC,
                                f"weights must be within 0-100: {[w.weight for w in weights]}")
    total = sum(w.weight for w in weights)
    if total != 100:
        raise application_error(ErrorType.INVALID_TRAFFIC, f"weights add up to {total}, not 100")
