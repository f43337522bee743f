"""The capacity rules of a workload cluster's root AcceleratorQuota, pure (no I/O, no clock): which
Kueue ResourceFlavor each node counts for, what each (resource, flavor) pair can schedule now, and
the high-water mark budget checks compare against (seed 004, AcceleratorCapacityStatus).

Attribution of a node to a flavor (`attribute`):
- A flavor matches a node when the flavor's spec.nodeLabels are a subset of the node's labels; a
  flavor without nodeLabels matches every node.
- Of several matches, the most specific wins: the one whose labels are a strict superset of every
  other match's labels (a `gpu=a100, zone=a` flavor beats a `gpu=a100` one, which beats a flavor
  without labels). When no match is that (two flavors with the same labels, or overlapping
  selectors neither of which contains the other) the node is ambiguous and counts for none of them.

Capacity (`observe_capacity`), per configured resource name and per flavor:
- allocatable: the sum of node.status.allocatable[resource] over the nodes attributed to the flavor
  that are Ready and not cordoned (spec.unschedulable). NotReady and cordoned nodes stay attributed
  (they are inventory) but contribute 0.
- attribution.complete is False for a (resource, flavor) pair when a node advertising the resource
  (the resource is a key of its allocatable, whatever the value) is ambiguous between this flavor
  and another, when any node advertising the resource matches no flavor at all (the resource's
  total is then not the sum of its flavors), or when the flavor has no uid to identify it.
- attribution.flavorSetHash: sha256 of the canonical JSON (sorted keys, no spaces) of every flavor's
  {name, uid, nodeLabels} sorted by name, and the sorted configured resource names: it changes when
  any flavor definition the rule read, or the resource list, changes.
- Every (resource, flavor) pair is reported, zeros included: an observed, complete zero is an answer.

High-water mark (`advance_high_water_mark`), chosen here and kept by the report workflow:
- It rises at once to any greater allocatable.
- It is lowered only after `lower_after` (default 3) consecutive complete samples each below
  mark x (1 - band) (band default 0.1, i.e. more than 10 % below); it is then lowered to the latest
  observed value. A sample within the band, or at or above the mark, restarts that count. An
  incomplete sample (its attribution not complete) neither counts toward lowering nor restarts the
  count: it cannot show that capacity dropped.
- It starts over (at the observed value) when the flavor's identity changes: another uid, or other
  nodeLabels; a mark of different hardware says nothing about this one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity
from pydantic import BaseModel

from servingops.api_models.base import Quantity
from servingops.api_models.canonical import canonical_json
from servingops.api_models.ome.accelerator import AcceleratorCapacityAttribution

DEFAULT_RESOURCE_NAMES = ("nvidia.com/gpu",)
"""Reported even when no budget of the tree names them."""
DEFAULT_BAND = 0.1
DEFAULT_LOWER_AFTER = 3


class NodeView(BaseModel):
    """What the rule reads of one Node."""

    name: str
    labels: dict[str, str] = {}
    ready: bool
    """The Ready condition is True."""
    unschedulable: bool = False
    """spec.unschedulable (cordoned)."""
    allocatable: dict[str, str] = {}
    """status.allocatable, as the apiserver gives it (quantities as strings)."""


class FlavorView(BaseModel):
    """What the rule reads of one Kueue ResourceFlavor."""

    name: str
    uid: str | None = None
    node_labels: dict[str, str] = {}
    """spec.nodeLabels."""


class FlavorCapacity(BaseModel):
    """One (resource, flavor) pair's observation."""

    resource_name: str
    resource_flavor: str
    allocatable: Quantity
    attribution: AcceleratorCapacityAttribution


class HighWaterMark(BaseModel):
    """The state of one (resource, flavor) pair's high-water mark between samples."""

    value: Quantity
    below: int = 0
    """Consecutive complete samples below the band so far."""
    identity: str = ""
    """The flavor identity the mark was observed under (flavor_identity)."""


def quantity_value(value: Quantity | None) -> Decimal:
    """A resource.Quantity (int or string) as a number; None is 0."""
    if value is None:
        return Decimal(0)
    return Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]


def quantity(value: Decimal) -> Quantity:
    """The wire form: an integer when whole (GPUs always are), else its plain decimal string."""
    if value == value.to_integral_value():
        return int(value)
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def flavor_set_hash(flavors: Iterable[FlavorView], resource_names: Iterable[str]) -> str:
    body = {
        "flavors": [{"name": f.name, "uid": f.uid or "", "nodeLabels": dict(f.node_labels)}
                    for f in sorted(flavors, key=lambda f: f.name)],
        "resourceNames": sorted(set(resource_names)),
    }
    return hashlib.sha256(canonical_json(body)).hexdigest()


def flavor_identity(flavor_uid: str | None, node_labels: Mapping[str, str] | None) -> str:
    return canonical_json({"uid": flavor_uid or "", "nodeLabels": dict(node_labels or {})}).decode()


def _subset(small: Mapping[str, str], big: Mapping[str, str]) -> bool:
    return all(big.get(key) == value for key, value in small.items())


def attribute(node: NodeView, flavors: Sequence[FlavorView]) -> tuple[FlavorView | None, list[FlavorView]]:
    """(the flavor the node counts for, the flavors it matched). No flavor with matches: ambiguous;
    no flavor and no matches: unmatched."""
    matches = [f for f in flavors if _subset(f.node_labels, node.labels)]
    if len(matches) == 1:
        return matches[0], matches
    for candidate in matches:
        if all(other is candidate or (_subset(other.node_labels, candidate.node_labels)
                                      and len(candidate.node_labels) > len(other.node_labels))
               for other in matches):
            return candidate, matches
    return None, matches


def observe_capacity(nodes: Sequence[NodeView], flavors: Sequence[FlavorView],
                     resource_names: Iterable[str]) -> list[FlavorCapacity]:
    """Every (resource, flavor) pair's allocatable and attribution, sorted by resource then flavor."""
    resources = sorted(set(resource_names))
    ordered = sorted(flavors, key=lambda f: f.name)
    hashed = flavor_set_hash(ordered, resources)
    totals = {(r, f.name): Decimal(0) for r in resources for f in ordered}
    incomplete: set[tuple[str, str]] = set()
    unmatched: set[str] = set()
    for node in nodes:
        advertised = [r for r in resources if r in node.allocatable]
        if not advertised:
            continue
        chosen, matches = attribute(node, ordered)
        if chosen is None:
            if not matches:
                unmatched.update(advertised)
            for resource in advertised:
                incomplete.update((resource, f.name) for f in matches)
            continue
        if not node.ready or node.unschedulable:
            continue
        for resource in advertised:
            totals[(resource, chosen.name)] += quantity_value(node.allocatable[resource])
    observed = []
    for resource in resources:
        for flavor in ordered:
            complete = (bool(flavor.uid) and resource not in unmatched
                        and (resource, flavor.name) not in incomplete)
            observed.append(FlavorCapacity(
                resource_name=resource, resource_flavor=flavor.name,
                allocatable=quantity(totals[(resource, flavor.name)]),
                attribution=AcceleratorCapacityAttribution(
                    flavor_uid=flavor.uid or None, node_labels=dict(flavor.node_labels),
                    flavor_set_hash=hashed, complete=complete)))
    return observed


def advance_high_water_mark(previous: HighWaterMark | None, observed: Quantity, *, complete: bool,
                            identity: str = "", band: float = DEFAULT_BAND,
                            lower_after: int = DEFAULT_LOWER_AFTER) -> HighWaterMark:
    """The mark after one more sample (rules in the module docstring)."""
    now = quantity_value(observed)
    if previous is None or previous.identity != identity:
        return HighWaterMark(value=quantity(now), identity=identity)
    mark = quantity_value(previous.value)
    if now >= mark:
        return HighWaterMark(value=quantity(now), identity=identity)
    if now >= mark * (Decimal(1) - Decimal(str(band))):
        return HighWaterMark(value=previous.value, below=0, identity=identity)
    if not complete:
        return previous
    below = previous.below + 1
    if below >= lower_after:
        return HighWaterMark(value=quantity(now), identity=identity)
    return HighWaterMark(value=previous.value, below=below, identity=identity)


__all__ = [
    "DEFAULT_BAND",
    "DEFAULT_LOWER_AFTER",
    "DEFAULT_RESOURCE_NAMES",
    "FlavorCapacity",
    "FlavorView",
    "HighWaterMark",
    "NodeView",
    "advance_high_water_mark",
    "attribute",
    "flavor_identity",
    "flavor_set_hash",
    "observe_capacity",
    "quantity",
    "quantity_value",
]
