"""What the Gateway API publisher writes into a TrafficMap's status: pure rules, shared by the publisher
(activities/routing/publisher.py) and its fake (testkit/routing_fakes.py).

The checks before a publication writes anything are here too (`plan`, then `refuse_claims` once the claimed
names are looked up), in the order the seed gives, so the publisher and its fake refuse alike.

The publisher owns `published`, `gatewayRef`, `observedTrafficMapGeneration`, `publisher` (the claim journal
and the last positive plan) and the Published and PublicationFallback conditions (seed 004). The built-in
publisher has no fallback: PublicationFallback is False with reason Unsupported once it publishes, Unknown
while a publication is under way or failing, and False with the Published reason when it withdraws.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servingops.api_models.contract.routing import GLOBAL_HOST_ANNOTATION
from servingops.api_models.ome.traffic_map import TrafficMapEntry, TrafficMapStatus
from servingops.api_models.operator_config import EndpointConfig
from servingops.api_models.refs import ConditionUpdate
from servingops.rendering.global_route import (
    GATEWAY_GROUP,
    PUBLISHER_NAME,
    InvalidPlan,
    PublishedReason,
    global_host,
    plan_compatibility_digest,
    render_backend_endpoint_slices,
    render_global_route,
    withdrawn_because,
)

OWNER_ANNOTATION = "servingops.io/traffic-map-uid"
"""On every object the publisher writes: the uid of the TrafficMap that claims it. An object of a claimed
name without it (or with another map's) is someone else's: ClaimRejected, never overwritten."""


@dataclass(frozen=True)
class Rendered:
    """Everything one publication writes: the route, its backend Services, their EndpointSlices (the
    fallback), every identifier claimed (the slices' too) and the (target, weight) plan."""

    route: dict[str, Any]
    services: tuple[dict[str, Any], ...]
    slices: tuple[dict[str, Any], ...]
    claims: tuple[str, ...]
    targets: tuple[tuple[str, int], ...]


def with_endpoint_slices(config: EndpointConfig, isvc: str, namespace: str, host: str,
                         entries: Sequence[TrafficMapEntry], addresses: Mapping[str, Sequence[str]]) -> Rendered:
    """The global route, with the EndpointSlice fallback's selectorless backends and slices when it is on
    (InvalidPlan as render_global_route says)."""
    fallback = config.gateway_backend.endpoint_slices.enabled
    route = render_global_route(config, isvc, namespace, host, entries, endpoint_slices=fallback)
    slices = render_backend_endpoint_slices(config, isvc, namespace, addresses) if fallback else ()
    claims = (*route.claims, *(f"EndpointSlice/{s['metadata']['namespace']}/{s['metadata']['name']}" for s in slices))
    return Rendered(route.route, route.services, tuple(slices), claims, route.targets)


@dataclass(frozen=True)
class Refused:
    """A publication that writes nothing new, and why (the Published condition's reason and message)."""

    reason: PublishedReason
    message: str
    withdraw: bool = False
    """Nothing can be published at all: every claimed object goes (Published False, Withdrawn). Otherwise the
    last route stands."""


def plan(config: EndpointConfig, isvc: str, namespace: str, annotations: Mapping[str, str],
         entries: Sequence[TrafficMapEntry], addresses: Mapping[str, Sequence[str]], *,
         options: Mapping[str, str], address_failures: Mapping[str, str]) -> Rendered | Refused:  # fmt: skip
    """What one publication writes, or the first check it fails, in this order: nowhere to publish (Withdrawn),
    a table that cannot become a route (InvalidPlan), publisher options (the built-in publisher takes none:
    InvalidOptions), a member Gateway whose addresses could not be read (ApplyFailed: upstream OME's rule,
    every entry's addresses, weight 0 included, before anything is written)."""
    withdrawn = withdrawn_because(config)
    try:
        host = global_host(config, isvc, namespace, annotations)
        if withdrawn is None and host is None:
            withdrawn = (f"the InferenceService has no global hostname (no {GLOBAL_HOST_ANNOTATION} annotation and "
                         "no endpoint.globalHostTemplate)")
        if withdrawn is not None or host is None:
            return Refused(PublishedReason.WITHDRAWN, str(withdrawn), withdraw=True)
        rendered = with_endpoint_slices(config, isvc, namespace, host, entries, addresses)
    except InvalidPlan as exc:
        return Refused(PublishedReason.INVALID_PLAN, str(exc))
    if options:
        return Refused(PublishedReason.INVALID_OPTIONS, f'publisher "{PUBLISHER_NAME}" takes no options; '
                       f"spec.routing.publisher.options sets {', '.join(sorted(options))}")
    if address_failures:
        return Refused(PublishedReason.APPLY_FAILED, "the members' Gateway addresses could not all be read: "
                       + "; ".join(f"{cluster}: {why}" for cluster, why in sorted(address_failures.items())))
    return rendered


def mark(rendered: Rendered, map_uid: str) -> list[dict[str, Any]]:
    """Every object to write, backends first (the route never names a Service that is not there), each with
    the claiming map's owner mark."""
    objects = [*rendered.services, *rendered.slices, rendered.route]
    for obj in objects:
        obj["metadata"].setdefault("annotations", {})[OWNER_ANNOTATION] = map_uid
    return objects


def owner_mark(obj: Mapping[str, Any]) -> str:
    """The owner mark an existing object carries ("" without one)."""
    return str(((obj.get("metadata") or {}).get("annotations") or {}).get(OWNER_ANNOTATION) or "")


def hostname_taken(rendered: Rendered, routes: Iterable[Mapping[str, Any]], map_uid: str) -> str | None:
    """`<namespace>/<name>` of another HTTPRoute (not this map's) on the same Gateway listing the same
    hostname, or None."""
    host = rendered.route["spec"]["hostnames"][0]
    parent = rendered.route["spec"]["parentRefs"][0]
    for other in routes:
        meta = other.get("metadata") or {}
        if owner_mark(other) == map_uid:
            continue
        spec = other.get("spec") or {}
        same_gateway = any(p.get("name") == parent["name"]
                           and (p.get("namespace") or meta.get("namespace")) == parent["namespace"]
                           for p in spec.get("parentRefs") or [])  # fmt: skip
        if same_gateway and host in (spec.get("hostnames") or []):
            return f"{meta.get('namespace')}/{meta.get('name')}"
    return None


def refuse_claims(rendered: Rendered, marks: Mapping[str, str], map_uid: str,
                  taken_by: str | None) -> Refused | None:  # fmt: skip
    """ClaimRejected, nothing written: a claimed name that exists without this map's mark (`marks`: each
    existing claimed object's owner mark, absent ones left out), or the hostname another route publishes on
    the same Gateway (`taken_by`, from hostname_taken)."""
    for claim in rendered.claims:
        if claim in marks and marks[claim] != map_uid:
            return Refused(PublishedReason.CLAIM_REJECTED, f"{claim} exists and is not this TrafficMap's (no "
                           f"{OWNER_ANNOTATION} mark of uid {map_uid})")
    if taken_by is not None:
        host = rendered.route["spec"]["hostnames"][0]
        return Refused(PublishedReason.CLAIM_REJECTED,
                       f"HTTPRoute {taken_by} already publishes the hostname {host} on the same Gateway")
    return None


FAILING = frozenset({PublishedReason.APPLY_FAILED, PublishedReason.CLAIM_REJECTED, PublishedReason.INVALID_PLAN})
"""Reasons of a publication that did not go through (the last route stands): PublicationFallback Unknown."""


def conditions(published: bool, reason: str, message: str, *, underway: bool = False) -> list[ConditionUpdate]:
    """Published and PublicationFallback for one outcome."""
    if published:
        fallback = ConditionUpdate(type="PublicationFallback", status="False", reason="Unsupported",
                                   message=f'publisher "{PUBLISHER_NAME}" has no fallback')
    else:
        fallback = ConditionUpdate(type="PublicationFallback",
                                   status="Unknown" if underway or reason in FAILING else "False",
                                   reason=reason, message=message)
    return [ConditionUpdate(type="Published", status="True" if published else "False", reason=reason,
                            message=message), fallback]


def published_message() -> str:
    return f'TrafficMap is published by publisher "{PUBLISHER_NAME}"'


def gateway_ref(rendered: Rendered) -> dict[str, str]:
    meta = rendered.route["metadata"]
    return {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": meta["name"], "namespace": meta["namespace"]}


def claim_journal(previous: TrafficMapStatus | None, rendered: Rendered) -> dict[str, Any] | None:
    """status.publisher with every identifier about to be written added to the claims (before any write), or
    None when they are all claimed already."""
    old = previous.publisher if previous is not None else None
    claimed = list(old.claimed_targets) if old is not None else []
    if not set(rendered.claims) - set(claimed):
        return None
    journal = old.to_api() if old is not None else {}
    journal.update({"publisherName": PUBLISHER_NAME, "claimedTargets": sorted(set(claimed) | set(rendered.claims))})
    return journal


def published_status(previous: TrafficMapStatus | None, rendered: Rendered, endpoint: EndpointConfig,
                     generation: int, observed_isvc_generation: int) -> dict[str, Any]:
    """The publisher's fields once `rendered` is written: the claims exactly what exists now, and the last
    positive plan (kept from before when every weight is 0, so a restart can replay a positive one)."""
    digest = plan_compatibility_digest(endpoint)
    publisher: dict[str, Any] = {"publisherName": PUBLISHER_NAME, "claimedTargets": list(rendered.claims),
                                 "observedOptionsDigest": digest}
    if any(weight for _, weight in rendered.targets):
        publisher["lastPositive"] = {
            "trafficMapGeneration": generation, "observedISVCGeneration": max(1, observed_isvc_generation),
            "planCompatibilityDigest": digest,
            "targets": [{"target": target, "weight": weight} for target, weight in rendered.targets],
        }
    elif previous is not None and previous.publisher is not None and previous.publisher.last_positive is not None:
        publisher["lastPositive"] = previous.publisher.last_positive.to_api()
    return {"published": True, "gatewayRef": gateway_ref(rendered), "observedTrafficMapGeneration": generation,
            "publisher": publisher}


WITHDRAWN_STATUS: dict[str, Any] = {"published": False, "gatewayRef": None, "publisher": None}
"""The publisher's fields once its objects are gone (withdrawn or unpublished): nothing claimed."""
