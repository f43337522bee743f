"""The Gateway API publisher's objects for one TrafficMap: pure rendering.

What upstream OME's built-in `gatewayapi` publisher writes on the control-plane cluster ("Publish a global
endpoint", How publishing works), and so what a platform team's tooling already reads:

- an HTTPRoute `<isvc>-global`, attached to the operator's global Gateway, matching the service's global
  hostname at every path, with one backend per TrafficMap entry at the entry's weight, weight-0 entries
  included (so taking a home out is a weight change, never a route edit that could race a request);
- per backend, an `ExternalName` Service `tmb-<hash>` pointing at the host of the entry's endpoint, and,
  with `rewrite_hostname`, a URLRewrite filter on that backend setting the Host header to it (a member's
  own routes match only its own hostnames);
- optionally an EndpointSlice per backend Service with the member Gateway's IP addresses, for a control
  plane that cannot resolve the members' hostnames (`render_backend_endpoint_slices`).

Where this departs from upstream, and why: with EndpointSlices the backend Service is a selectorless
ClusterIP Service, not an ExternalName one. The Gateway API says implementations SHOULD NOT support
ExternalName backends (their support is implementation-specific), and Traefik's Gateway provider refuses them
outright ("type ExternalName is not supported for Kubernetes Service reference", ResolvedRefs False, a 500 for
that backend's share; 3.7.15, checked on the local stack, with or without EndpointSlices beside them, and no
flag changes it: allowExternalNameServices belongs to its Ingress and CRD providers). A Service without a
selector and EndpointSlices labelled `kubernetes.io/service-name` is a Core backend: every conformant Gateway
routes to the addresses in the slices, and the endpoint controllers leave slices they do not manage alone
(seen: kube-controller-manager left such a slice as written and made no Endpoints for the Service).
Without EndpointSlices the Service stays ExternalName, for implementations that resolve it.

Every object carries the labels `ome.io/placement-endpoint-isvc` and `ome.io/placement-cluster` (backends),
and the claim identifiers the publisher journals in `status.publisher.claimedTargets` before writing.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from servingops.api_models.contract.routing import GLOBAL_HOST_ANNOTATION
from servingops.api_models.ome.traffic_map import TrafficMapEntry
from servingops.api_models.operator_config import EndpointConfig, is_subdomain

PUBLISHER_NAME = "gatewayapi"
MAX_BACKENDS = 16
"""The Gateway API's limit of backendRefs per rule: a larger table is InvalidPlan, not a truncated route."""
ISVC_LABEL = "ome.io/placement-endpoint-isvc"
CLUSTER_LABEL = "ome.io/placement-cluster"
GATEWAY_GROUP = "gateway.networking.k8s.io"
BACKEND_PORT_NAME = "http"
"""The backend Service's one port; an EndpointSlice's port is matched to it by this name (Traefik, and the
Service's own semantics: a slice port without the Service port's name serves no Service port)."""
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
SLICE_MANAGER = "trafficmap-publisher.ome.io"
"""Our slices' manager: anything but the endpoint controllers' own value, so they never adopt or delete them."""


class PublishedReason(StrEnum):
    """The Published condition's reasons (upstream OME's set; PublicationFallback reuses the terminal ones)."""

    PUBLISHED = "Published"
    TRANSITIONING = "Transitioning"
    WITHDRAWN = "Withdrawn"
    INVALID_PLAN = "InvalidPlan"
    INVALID_OPTIONS = "InvalidOptions"
    CLAIM_REJECTED = "ClaimRejected"
    APPLY_FAILED = "ApplyFailed"
    DRAIN_FAILED = "DrainFailed"
    INVALID_OWNER = "InvalidOwner"
    PUBLISHER_CHANGED = "PublisherChanged"
    FINALIZING = "Finalizing"
    UNPUBLISHED = "Unpublished"


class InvalidPlan(ValueError):
    """The table cannot become a route (too many entries, no usable host, a malformed gateway): Published is
    False with reason InvalidPlan and the last published route stays as it was."""


def withdrawn_because(config: EndpointConfig) -> str | None:
    """Why nothing can be published (the publisher withdraws its routes), or None."""
    if not config.global_gateway:
        return "endpoint.globalGateway is not set"
    if not 0 < config.backend_port < 65536:
        return "endpoint.backendPort is not set (1-65535)"
    return None


def global_host(config: EndpointConfig, isvc: str, namespace: str,
                annotations: Mapping[str, str]) -> str | None:  # fmt: skip
    """The service's global hostname: the annotation wins over the template; None when neither gives one."""
    host = annotations.get(GLOBAL_HOST_ANNOTATION)
    if host is None:
        host = config.global_host(isvc, namespace)
    if host is None:
        return None
    if not is_subdomain(host.removeprefix("*.")):
        raise InvalidPlan(f"global hostname: {host!r} is not a lower-case DNS subdomain name")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host
    raise InvalidPlan(f"global hostname: {host!r} is an IP address")


def gateway_ref(config: EndpointConfig, route_namespace: str) -> dict[str, str]:
    parts = config.global_gateway.split("/")
    if len(parts) == 1 and parts[0]:
        namespace, name = route_namespace, parts[0]
    elif len(parts) == 2 and all(parts):
        namespace, name = parts
    else:
        raise InvalidPlan(f"Gateway API global gateway {config.global_gateway!r} is not name or namespace/name")
    return {"group": GATEWAY_GROUP, "kind": "Gateway", "namespace": namespace, "name": name}


def route_placement(config: EndpointConfig, isvc: str, namespace: str) -> tuple[str, str]:
    """(namespace, name) of the global route: `<isvc>-global` beside the service, or in `route_namespace`
    with a hash of the source namespace (two services of one name in different namespaces never collide)."""
    if not config.route_namespace or config.route_namespace == namespace:
        return namespace, f"{isvc}-global"
    return config.route_namespace, f"{isvc}-{_digest(namespace)[:8]}-global"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def backend_service_name(namespace: str, isvc: str, cluster: str) -> str:
    """`tmb-<hash>`: stable per (service, home), so a weight change never renames a backend."""
    return f"tmb-{_digest(namespace, isvc, cluster)[:16]}"


def endpoint_host(entry: TrafficMapEntry) -> str:
    host = urlsplit(entry.endpoint or "").hostname
    if not host:
        raise InvalidPlan(f"entry {entry.cluster}: endpoint {entry.endpoint!r} has no host")
    return host


@dataclass(frozen=True)
class GlobalRoute:
    route: dict[str, Any]
    services: tuple[dict[str, Any], ...]
    claims: tuple[str, ...]
    """Canonical identifiers of every object, journalled before any is written."""
    targets: tuple[tuple[str, int], ...]
    """(backend Service claim, weight) per entry: the plan status.publisher.lastPositive keeps."""


def plan_compatibility_digest(config: EndpointConfig) -> str:
    """sha256 of the options that change target identity or weights (a replayed plan from other options
    would name other objects)."""
    body = json.dumps({"routeNamespace": config.route_namespace, "backendPort": config.backend_port,
                       "rewriteHostname": config.gateway_backend.rewrite_hostname}, sort_keys=True)  # fmt: skip
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def render_global_route(config: EndpointConfig, isvc: str, namespace: str, host: str,
                        entries: Sequence[TrafficMapEntry], *,
                        endpoint_slices: bool = False) -> GlobalRoute:  # fmt: skip
    """The route and its backend Services for `entries` (weights verbatim). `endpoint_slices`: the backends
    are selectorless Services whose addresses come from render_backend_endpoint_slices (see the module's
    docstring); otherwise ExternalName Services to each entry's endpoint host."""
    if len(entries) > MAX_BACKENDS:
        raise InvalidPlan(f"the table has {len(entries)} entries; a route rule takes at most {MAX_BACKENDS} "
                          "backendRefs")  # fmt: skip
    route_ns, route_name = route_placement(config, isvc, namespace)
    parent = gateway_ref(config, route_ns)
    labels = {ISVC_LABEL: isvc}
    services, backends, targets = [], [], []
    for entry in sorted(entries, key=lambda e: e.cluster):
        host_of_home = endpoint_host(entry)
        name = backend_service_name(namespace, isvc, entry.cluster)
        ports = [{"name": BACKEND_PORT_NAME, "port": config.backend_port, "protocol": "TCP"}]
        kind = {"type": "ClusterIP"} if endpoint_slices else {"type": "ExternalName", "externalName": host_of_home}
        services.append({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": route_ns, "labels": {**labels, CLUSTER_LABEL: entry.cluster}},
            "spec": {**kind, "ports": ports},
        })  # fmt: skip
        backend: dict[str, Any] = {"group": "", "kind": "Service", "name": name, "port": config.backend_port,
                                   "weight": entry.weight or 0}  # fmt: skip
        if config.gateway_backend.rewrite_hostname:
            backend["filters"] = [{"type": "URLRewrite", "urlRewrite": {"hostname": host_of_home}}]
        backends.append(backend)
        targets.append((f"Service/{route_ns}/{name}", entry.weight or 0))
    route = {
        "apiVersion": f"{GATEWAY_GROUP}/v1", "kind": "HTTPRoute",
        "metadata": {"name": route_name, "namespace": route_ns, "labels": labels},
        "spec": {"parentRefs": [parent], "hostnames": [host],
                 "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": backends}]},
    }  # fmt: skip
    claims = (f"HTTPRoute/{route_ns}/{route_name}", *(claim for claim, _ in targets))
    return GlobalRoute(route, tuple(services), claims, tuple(targets))


def render_backend_endpoint_slices(config: EndpointConfig, isvc: str, namespace: str,
                                   addresses_by_cluster: Mapping[str, Sequence[str]],
                                   ) -> tuple[dict[str, Any], ...]:  # fmt: skip
    """The EndpointSlices of each home's backend Service (render_global_route with endpoint_slices=True): the
    member Gateway's IP addresses (its `status.addresses` of type IPAddress) at `backend_port`, one slice per
    address family, every endpoint ready. A home with no address gets no slice, so a Gateway finds no
    endpoint for it (Traefik: ResolvedRefs False and a 500 for that backend's share, read in its source): the
    publisher weights such a home 0 or does not publish. An address that is not an IP is an InvalidPlan (the
    apiserver would refuse the slice). The slices are not among GlobalRoute.claims: the publisher journals
    `EndpointSlice/<namespace>/<name>` for each before writing it, like the rest."""
    route_ns, _ = route_placement(config, isvc, namespace)
    slices = []
    for cluster in sorted(addresses_by_cluster):
        service = backend_service_name(namespace, isvc, cluster)
        by_family: dict[str, list[str]] = {}
        for text in addresses_by_cluster[cluster]:
            try:
                address = ipaddress.ip_address(text)
            except ValueError:
                raise InvalidPlan(f"home {cluster}: gateway address {text!r} is not an IP address") from None
            family = f"IPv{address.version}"
            if str(address) not in by_family.setdefault(family, []):
                by_family[family].append(str(address))
        for family, addresses in sorted(by_family.items()):
            slices.append({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": f"{service}-{family.lower()}", "namespace": route_ns, "labels": {
                    SERVICE_NAME_LABEL: service, MANAGED_BY_LABEL: SLICE_MANAGER, ISVC_LABEL: isvc,
                    CLUSTER_LABEL: cluster}},
                "addressType": family,
                "ports": [{"name": BACKEND_PORT_NAME, "port": config.backend_port, "protocol": "TCP"}],
                "endpoints": [{"addresses": [address], "conditions": {"ready": True}} for address in addresses],
            })  # fmt: skip
    return tuple(slices)
