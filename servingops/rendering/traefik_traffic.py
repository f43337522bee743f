"""spec.traffic as Traefik's own load balancing: the component's weighted TraefikService its HTTPRoute names. Pure.

Traefik (the local data plane, devstack/traefik.py) does not read Envoy Gateway's BackendTrafficPolicy.
Its equivalent is a TraefikService (traefik.io/v1alpha1, served by its kubernetesCRD provider): each child
of a weighted TraefikService (a revision's Service) carries that child's load-balancer settings, which
Traefik applies across the Service's endpoints (pods):

- `strategy` (Traefik 3.7: wrr, p2c, hrw, leasttime): RoundRobin is wrr; LeastRequest is p2c (power of two
  choices on the fewer in-flight requests, which is what Envoy's LeastRequest does by default);
  ConsistentHash on SourceIP is hrw (highest random weight of the client's address, the request's remote
  address);
- `sticky.cookie`: ConsistentHash on a Cookie. Traefik issues the cookie on a response (its value names
  the pod, hashed) and sends every request that carries it back to that pod while it is healthy. Unlike
  Envoy's hash of the cookie's value, a value Traefik did not issue is not hashed: such a request is
  balanced as if it had none and gets a new cookie. ttlSeconds is the cookie's Max-Age.

Traefik has no equivalent of Random, of hashing a request header, or of endpointOverride, nor does this
translation carry the ome.io/* traffic annotations (circuit breaker, retries, timeouts, pass-throughs):
those are named as unsupported (status.traffic's BackendPolicyUnsupportedFields).

The weights between a component's revisions go into one weighted TraefikService named as the component's
HTTPRoute (weighted_service: one child per revision's Service, each with the settings above), and the route's
one backendRef names it (group traefik.io, kind TraefikService), which Traefik's Gateway provider accepts
when its kubernetesCRD provider runs beside it (pkg/provider/kubernetes/crd FillExtensionBuilderRegistry in
Traefik 3.7). A canary's weight writes then change only the TraefikService, which has no status: Traefik's
Gateway provider does not rebuild and write the route's status on a promote (bench/traffic.py). Stickiness
is per revision: the weights between revisions are still drawn per request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from servingops.api_models.ome.enums import ComponentType, HashType, LoadBalancingType
from servingops.api_models.ome.traffic import TrafficCondition, TrafficReason, TrafficSpec
from servingops.api_models.ome.traffic_annotations import traffic_annotations
from servingops.api_models.refs import ConditionUpdate
from servingops.api_models.serving import TrafficWeight
from servingops.rendering.names import revision_name, route_name
from servingops.rendering.render import (
    LABEL_MANAGED_BY,
    MANAGED_BY,
    SERVICE_PORT,
    TRAEFIK_GROUP,
    TRAEFIK_SERVICE_KIND,
    Owner,
    route_weights,
    selector_labels,
)

GROUP, VERSION, KIND, PLURAL = TRAEFIK_GROUP, "v1alpha1", TRAEFIK_SERVICE_KIND, "traefikservices"
API_VERSION = f"{GROUP}/{VERSION}"
TRAEFIK = "traefik"
"""The operator's ingress.trafficTranslator value that selects this translation."""
TRAEFIK_CONTROLLER = "traefik.io/gateway-controller"
"""The controllerName Traefik's Gateway provider writes into a route's status.parents[]."""
LABEL_ISVC = "ome.io/inferenceservice"

_STRATEGY = {
    LoadBalancingType.ROUND_ROBIN: "wrr",
    LoadBalancingType.LEAST_REQUEST: "p2c",
}


@dataclass(frozen=True)
class Balancing:
    """What a child of the component's weighted TraefikService says of its Service's endpoints."""

    strategy: str
    """wrr, p2c or hrw."""
    cookie: str | None = None
    """The sticky cookie's name (None: not sticky)."""
    max_age: int | None = None
    """The sticky cookie's Max-Age in seconds (None: a session cookie)."""

    def describe(self) -> str:
        if self.cookie is not None:
            return f"sticky cookie {self.cookie}" + (f" (Max-Age {self.max_age}s)" if self.max_age else "")
        return f"strategy {self.strategy}"

    def load_balancer(self, service: str) -> dict[str, Any]:
        """The weighted TraefikService's child: the revision's Service with these settings."""
        child: dict[str, Any] = {"name": service, "kind": "Service", "port": SERVICE_PORT,
                                 "strategy": self.strategy}
        if self.cookie is not None:
            cookie: dict[str, Any] = {"name": self.cookie}
            if self.max_age:
                cookie["maxAge"] = self.max_age
            child["sticky"] = {"cookie": cookie}
        return child


@dataclass(frozen=True)
class Translation:
    balancing: Balancing | None
    """None: nothing of spec.traffic has a Traefik equivalent; the routes keep Service backendRefs."""
    unsupported: tuple[str, ...] = ()
    """What is declared and not honoured by Traefik: spec.traffic field paths, annotation keys."""


def translate(traffic: TrafficSpec | None, annotations: dict[str, str] | None) -> Translation:
    """spec.traffic and the ome.io/* traffic annotations as Traefik load balancing."""
    unsupported: list[str] = []
    balancing: Balancing | None = None
    algorithm = traffic.algorithm if traffic is not None else None
    if traffic is not None and algorithm is not None:
        chash = traffic.consistent_hash
        if algorithm in _STRATEGY:
            balancing = Balancing(strategy=_STRATEGY[algorithm])
        elif algorithm is LoadBalancingType.CONSISTENT_HASH and chash is not None:
            if chash.type is HashType.SOURCE_IP:
                balancing = Balancing(strategy="hrw")
            elif chash.type is HashType.COOKIE and chash.cookie is not None:
                balancing = Balancing(strategy="wrr", cookie=chash.cookie.name,
                                      max_age=chash.cookie.ttl_seconds or None)
            else:
                unsupported.append("spec.traffic.consistentHash.headers")
        else:
            unsupported.append(f"spec.traffic.algorithm={algorithm.value}")
    if traffic is not None and traffic.endpoint_override is not None:
        unsupported.append("spec.traffic.endpointOverride")
    unsupported.extend(sorted(traffic_annotations(annotations)))
    return Translation(balancing=balancing, unsupported=tuple(unsupported))


def component_name(isvc: str, component: ComponentType) -> str:
    """A component's weighted TraefikService (the weights between its revisions): the name of its HTTPRoute."""
    return route_name(isvc, component.value)


def child(service: str, weight: int, balancing: Balancing | None) -> dict[str, Any]:
    """A revision's Service as a child of the component's weighted TraefikService: its weight, and spec.traffic's
    settings across its pods (Traefik's defaults when `balancing` is None)."""
    base = (balancing.load_balancer(service) if balancing is not None
            else {"name": service, "kind": "Service", "port": SERVICE_PORT})
    return base | {"weight": weight}


def weighted_service(owner: Owner, component: ComponentType, weights: Iterable[TrafficWeight],
                     balancing: Balancing | None) -> dict[str, Any]:
    """The component's weighted TraefikService: one child per revision's Service, weights exactly as given.
    The component's HTTPRoute names it (one backendRef that a canary's writes do not change), so a promote
    writes only this object, which Traefik's kubernetesCRD provider serves (it has no status to write)."""
    name = component_name(owner.name, component)
    labels = {**selector_labels(owner.name, component), LABEL_MANAGED_BY: MANAGED_BY, LABEL_ISVC: owner.name}
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": name, "namespace": owner.namespace, "labels": labels,
                     "ownerReferences": [owner.reference()]},
        "spec": {"weighted": {"services": [child(revision_name(owner.name, component.value, w.revision), w.weight,
                                                 balancing) for w in weights]}},
    }


def service_weights(obj: dict[str, Any] | None, isvc: str, component: ComponentType) -> list[TrafficWeight]:
    """The split a component's weighted TraefikService carries, read back as revisions (children we did not
    render are skipped; an absent weight is Traefik's default of 1)."""
    prefix = revision_name(isvc, component.value, "")
    children = (((obj or {}).get("spec") or {}).get("weighted") or {}).get("services") or []
    return [TrafficWeight(revision=str(c["name"])[len(prefix):], weight=int(c.get("weight", 1)))
            for c in children if c.get("kind", "Service") == "Service" and str(c.get("name", "")).startswith(prefix)]


def split(route: dict[str, Any] | None, weighted: dict[str, Any] | None, isvc: str,
          component: ComponentType) -> list[TrafficWeight]:
    """The split a component's route serves: the weights of its weighted TraefikService (`weighted`, as read)
    when the route names that one, else the route's own backendRefs' weights (the revisions' Services);
    nothing without a route."""
    if route is None:
        return []
    if names_component(route, isvc, component):
        return service_weights(weighted, isvc, component)
    return route_weights(route, isvc, component)


def names_component(route: dict[str, Any] | None, isvc: str, component: ComponentType) -> bool:
    """The route's one backendRef is the component's weighted TraefikService."""
    rules = ((route or {}).get("spec") or {}).get("rules") or []
    refs = [ref for rule in rules for ref in rule.get("backendRefs") or []]
    return len(refs) == 1 and refs[0].get("kind") == KIND and refs[0].get("group") == GROUP \
        and refs[0].get("name") == component_name(isvc, component)


def referenced(route: dict[str, Any] | None) -> list[str]:
    """Names of the TraefikServices a route's backendRefs name (the component's, under the translation)."""
    return [str(ref.get("name")) for rule in ((route or {}).get("spec") or {}).get("rules") or []
            for ref in rule.get("backendRefs") or []
            if ref.get("kind") == KIND and ref.get("group") == GROUP]


def ours(obj: dict[str, Any], owner: Owner) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == owner.uid and r.get("controller") for r in refs)


def stale(services: Iterable[dict[str, Any]], owner: Owner, routes: Iterable[dict[str, Any] | None]) -> list[str]:
    """Our TraefikServices no live route names (a component's, once the operator turned the translation off,
    or its component removed): safe to delete."""
    kept = {name for route in routes for name in referenced(route)}
    return sorted(str(s["metadata"]["name"]) for s in services
                  if ours(s, owner) and s["metadata"]["name"] not in kept)


# -- status.traffic ------------------------------------------------------------------------------------


def _traefik_parents(route: dict[str, Any]) -> list[dict[str, Any]]:
    parents = (route.get("status") or {}).get("parents") or []
    return [p for p in parents if p.get("controllerName") == TRAEFIK_CONTROLLER]


def _resolved(route: dict[str, Any]) -> bool:
    """Traefik reports the route's backendRefs resolved (ResolvedRefs True) for the current generation."""
    generation = (route.get("metadata") or {}).get("generation")
    parents = _traefik_parents(route)
    conditions = [c for p in parents for c in p.get("conditions") or [] if c.get("type") == "ResolvedRefs"]
    return bool(conditions) and all(c.get("status") == "True" and c.get("observedGeneration", generation) == generation
                                    for c in conditions)


def served_by_traefik(routes: Iterable[dict[str, Any] | None]) -> bool:
    """Every controller that reported on the routes is Traefik's (and at least one did)."""
    controllers = {str(p.get("controllerName")) for r in routes if r
                   for p in (r.get("status") or {}).get("parents") or [] if p.get("controllerName")}
    return controllers == {TRAEFIK_CONTROLLER}


def data_plane(translation: Translation, routes: list[dict[str, Any]], available: bool) -> ConditionUpdate:
    """BackendPolicyDataPlane for routes served by Traefik under the Traefik translation."""
    kind = TrafficCondition.DATA_PLANE.value
    names = [n for r in routes for n in referenced(r)]
    if translation.balancing is None:
        return ConditionUpdate(type=kind, status="False", reason=TrafficReason.NOT_HONORED.value, message=(
            f"the routes are served by {TRAEFIK_CONTROLLER}, which has no equivalent of what spec.traffic "
            f"declares ({', '.join(translation.unsupported) or 'nothing'}): requests are balanced by its defaults"))
    if not available:
        return ConditionUpdate(type=kind, status="False", reason=TrafficReason.NOT_HONORED.value, message=(
            f"the routes are served by {TRAEFIK_CONTROLLER} and this cluster serves no {API_VERSION} {KIND} "
            f"(Traefik's kubernetesCRD provider's CRDs): requests are balanced by its defaults"))
    if not all(referenced(r) for r in routes):
        return ConditionUpdate(type=kind, status="Unknown", reason=TrafficReason.PENDING.value, message=(
            f"the routes served by {TRAEFIK_CONTROLLER} are being pointed at their components' weighted {KIND}s "
            f"({translation.balancing.describe()})"))
    if not all(_resolved(r) for r in routes):
        return ConditionUpdate(type=kind, status="Unknown", reason=TrafficReason.PENDING.value, message=(
            f"{TRAEFIK_CONTROLLER} has not yet resolved the routes' {KIND} backendRefs ({', '.join(names)})"))
    return ConditionUpdate(type=kind, status="True", reason=TrafficReason.HONORED.value, message=(
        f"the routes are served by {TRAEFIK_CONTROLLER} through the {KIND}s {', '.join(names)}: "
        f"{translation.balancing.describe()} across each revision's pods"))


def ready(translation: Translation, plane: ConditionUpdate) -> ConditionUpdate:
    """BackendPolicyReady when the Traefik translation is what the routes' data plane reads: it follows
    BackendPolicyDataPlane (a BackendTrafficPolicy's verdict would come from a controller that does not
    serve these routes)."""
    kind = TrafficCondition.BACKEND_POLICY_READY.value
    if plane.status == "True":
        return ConditionUpdate(type=kind, status="True", reason=TrafficReason.ACCEPTED_BY_GATEWAY.value,
                               message=f"Traefik translation: {plane.message}")
    if plane.status == "Unknown":
        return ConditionUpdate(type=kind, status="Unknown", reason=TrafficReason.PENDING.value,
                               message=f"Traefik translation: {plane.message}")
    return ConditionUpdate(type=kind, status="False", reason=TrafficReason.NO_TRANSLATOR_AVAILABLE.value,
                           message=f"Traefik translation: {plane.message}")


def unsupported_condition(translation: Translation) -> ConditionUpdate | None:
    if not translation.unsupported:
        return None
    return ConditionUpdate(type=TrafficCondition.UNSUPPORTED_FIELDS.value, status="True",
                           reason=TrafficReason.UNSUPPORTED_FIELD.value,
                           message=f"the Traefik translation does not honor {len(translation.unsupported)} declared "
                                   f"field(s): {' '.join(translation.unsupported)}")
