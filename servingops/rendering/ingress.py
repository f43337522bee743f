"""Pure rules of a component's HTTPRoute and its Gateway: which Gateway it attaches to and which
hostnames it answers on (from the operator's `ingress` block, api_models/operator_config.py
IngressConfig), what the Gateway says of it (the route's status.parents[] entry for our
parentRef), and whether the live route still carries the attachment the configuration renders now.

Upstream OME renders one HTTPRoute per component plus a top-level route on the service's own host.
Here the split lives in one route per component (`<isvc>-<component>`, its weighted backendRefs),
so the entrypoint component's route (router, else engine, else decoder: the rule of
workflows/rollout/plan.py) answers on the top-level host too, and no second route has to carry a
copy of that split.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.operator_config import HostError, IngressConfig, OperatorConfigError
from servingops.api_models.serving import IngressObservation, RouteStatus
from servingops.rendering.names import route_name

GATEWAY_GROUP = "gateway.networking.k8s.io"
_ENTRY_ORDER = (ComponentType.ROUTER, ComponentType.ENGINE, ComponentType.DECODER)


def entrypoint(components: Iterable[ComponentType]) -> ComponentType:
    """The component a client of the service reaches: the router when there is one, else the engine."""
    present = set(components)
    for candidate in _ENTRY_ORDER:
        if candidate in present:
            return candidate
    raise ValueError("no components")


@dataclass(frozen=True)
class Attachment:
    """What of a route its Gateway cares about: parentRefs and hostnames (both empty: attached to none)."""

    parent_refs: tuple[dict[str, str], ...] = ()
    hostnames: tuple[str, ...] = ()


DETACHED = Attachment()
"""Attached to no Gateway, no hostnames: a route as it was before the ingress block existed."""


def parent_ref(gateway: tuple[str, str]) -> dict[str, str]:
    namespace, name = gateway
    return {"group": GATEWAY_GROUP, "kind": "Gateway", "namespace": namespace, "name": name}


def attachment(config: IngressConfig, isvc: str, namespace: str, component: ComponentType,
               entry: bool) -> Attachment:
    """The route's attachment by the configuration: the Gateway, the component's own host (the
    domain template applied to the route's name) and, on the entrypoint, the service's host.
    Raises HostError when the template gives no DNS name for this service."""
    gateway = config.gateway
    if gateway is None:
        return DETACHED
    hosts = [config.host(route_name(isvc, component.value), namespace)]
    if entry:
        hosts.append(config.host(isvc, namespace))
    return Attachment(parent_refs=(parent_ref(gateway),), hostnames=tuple(hosts))


def live_attachment(route: dict[str, Any] | None) -> Attachment:
    """The attachment a live route carries (kept as it is while the configuration cannot be rendered)."""
    spec = (route or {}).get("spec") or {}
    return Attachment(parent_refs=tuple(dict(p) for p in spec.get("parentRefs") or []),
                      hostnames=tuple(str(h) for h in spec.get("hostnames") or []))


def _parent_key(ref: dict[str, Any], route_namespace: str) -> tuple[str, str, str, str]:
    """A parentRef with Gateway API's defaults filled in (group gateway.networking.k8s.io, kind
    Gateway, the route's namespace); sectionName and port are not compared: we set neither."""
    return (str(ref.get("group") or GATEWAY_GROUP), str(ref.get("kind") or "Gateway"),
            str(ref.get("namespace") or route_namespace), str(ref.get("name") or ""))


def _verdict(condition: dict[str, Any] | None) -> bool | None:
    status = (condition or {}).get("status")
    return status == "True" if status in ("True", "False") else None


def route_status(route: dict[str, Any], gateway: tuple[str, str]) -> RouteStatus:
    """What the Gateway says of the route: its status.parents[] entry for our parentRef. Entries for
    other parents (someone attached the route elsewhere too) are not ours to judge."""
    meta = route.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    generation = int(meta.get("generation") or 0)
    ours = _parent_key(parent_ref(gateway), namespace)
    entry = next((p for p in (route.get("status") or {}).get("parents") or []
                  if _parent_key(p.get("parentRef") or {}, namespace) == ours), None)
    if entry is None:
        return RouteStatus(route=str(meta.get("name") or ""), generation=generation)
    by_type = {c.get("type"): c for c in entry.get("conditions") or []}
    accepted, resolved = by_type.get("Accepted"), by_type.get("ResolvedRefs")
    present = [c for c in (accepted, resolved) if c is not None]
    telling = next((c for c in present if c.get("status") != "True"), accepted) or {}
    observed = [int(c["observedGeneration"]) for c in present if c.get("observedGeneration") is not None]
    observed_generation = min(observed) if len(observed) == len(present) and observed else None
    return RouteStatus(
        route=str(meta.get("name") or ""), generation=generation, reported=True,
        accepted=_verdict(accepted), resolved_refs=_verdict(resolved),
        reason=str(telling.get("reason") or ""), message=str(telling.get("message") or ""),
        observed_generation=observed_generation,
        current=observed_generation is not None and observed_generation >= generation)


def _applied_by(route: dict[str, Any], manager: str, field: str) -> bool:
    """Whether `manager`'s server-side apply owns spec.<field> (the apiserver's managedFields)."""
    for entry in (route.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            if f"f:{field}" in ((entry.get("fieldsV1") or {}).get("f:spec") or {}):
                return True
    return False


def drifted(route: dict[str, Any], desired: Attachment, manager: str) -> bool:
    """The live route's attachment is not what the configuration renders now (the ingress block
    changed since the route was programmed, or the entrypoint moved): the route is to be applied
    again with its current weights. With no Gateway configured only an attachment `manager` applied
    counts: someone else may attach the route to a Gateway of theirs."""
    spec = route.get("spec") or {}
    if not desired.parent_refs:
        return _applied_by(route, manager, "parentRefs") or _applied_by(route, manager, "hostnames")
    namespace = str((route.get("metadata") or {}).get("namespace") or "")
    live = {_parent_key(p, namespace) for p in spec.get("parentRefs") or []}
    wanted = {_parent_key(p, namespace) for p in desired.parent_refs}
    return not wanted <= live or sorted(spec.get("hostnames") or []) != sorted(desired.hostnames)


@dataclass(frozen=True)
class Routing:
    """What the ingress configuration, as one activity call read it, gives one service's routes."""

    config: IngressConfig | None
    """None when the block does not parse."""
    problem: tuple[str, str] | None = None
    """(reason, message) when no attachment can be rendered now: IngressConfigInvalid, InvalidHost."""
    attachments: dict[ComponentType, Attachment] | None = None
    """Per served component (None with a problem: routes keep what they carry)."""
    url: str | None = None
    """`<urlScheme>://<the service's host>` when a Gateway is configured."""

    def observation(self) -> IngressObservation:
        reason, message = self.problem or (None, None)
        return IngressObservation(gateway=self.config.ome_ingress_gateway if self.config else "", url=self.url,
                                  problem_reason=reason, problem=message)

    def observe(self, component: ComponentType, route: dict[str, Any] | None, address: str | None,
                manager: str) -> tuple[str | None, RouteStatus | None, bool]:
        """(url, the Gateway's verdict, drift) of a component whose live route is `route` and whose
        cluster-local address is `address` (both None before the route exists)."""
        attachment = (self.attachments or {}).get(component)
        if route is None or attachment is None or self.config is None:
            return address, None, False
        drift = drifted(route, attachment, manager)
        gateway = self.config.gateway
        if gateway is None:
            return address, None, drift
        return self.config.url(attachment.hostnames[0]), route_status(route, gateway), drift


def routing(config: IngressConfig | OperatorConfigError, isvc: str, namespace: str,
            components: Iterable[ComponentType]) -> Routing:
    """The attachment of every served component, or the problem that keeps any from being rendered."""
    if isinstance(config, OperatorConfigError):
        return Routing(None, ("IngressConfigInvalid", str(config)))
    served = list(components)
    try:
        entry = entrypoint(served) if served else None
        attachments = {c: attachment(config, isvc, namespace, c, c == entry) for c in served}
        url = config.url(config.host(isvc, namespace)) if config.gateway else None
    except HostError as exc:
        return Routing(config, ("InvalidHost", str(exc)))
    return Routing(config, None, attachments, url)
