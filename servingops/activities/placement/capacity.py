"""SplitByCapacity's normalization, as pure rules: how many whole replicas a member's capacity report
holds, by what one replica of a source demands as the member renders it (activities/component_shape.py,
shared with the member's own demand check).

Seed 004: a member's capacity is "that cluster's own derived capacity", written by its own
controller on the root AcceleratorQuota (`status.capacity`: per resource and flavor, allocatable,
observedAt and the attribution of nodes to the flavor). A PlacementCapacitySample "records the
identified hardware and resolved demand used to normalize one member into nominal whole-replica
capacity", each pool citing the report it came from (reportUID / reportResourceVersion).

Read here as:
- One replica unit is one engine replica plus one decoder replica when the source has a decoder
  ("Engine and Decoder use equal whole-replica floors"); the router is excluded (its replicas follow
  a per-home policy). A replica's demand of a resource is the sum over its pods (a gang: the leader
  and `size` workers) of each pod's effective request: the larger of its containers' sum and its
  largest init container, a request defaulting to its limit, as the scheduler counts it
  (component_shape.py).
- Only resources the report covers count (the accelerators the member's report names); cpu and
  memory are not normalized. A service that demands none of them has no capacity to divide by.
- Whole replicas of one resource: a replica's pods land on one flavor, so it is the sum over the
  resource's flavors of floor(allocatable / demand). Of several resources: the smallest.
- Verifiable means: exactly one root AcceleratorQuota (no parentRef), every pool's attribution
  complete with a flavor identity, and observedAt no older than STALE_AFTER (the reporter refreshes
  it at least every 2 minutes even when nothing changes). Anything else is unknown, with a reason
  and a message, and SplitByCapacity keeps its last plan (CapacityUnknown).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from servingops.activities.capacity.attribution import quantity_value
from servingops.activities.component_shape import ComponentShape
from servingops.api_models.canonical import canonical_json
from servingops.api_models.timestamps import parse_rfc3339

STALE_AFTER = timedelta(minutes=5)
"""A report whose observedAt is older than this says nothing about the member now."""


class CapacityUnknown(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


def canonical_hash(value: Any) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


def root_quota(quotas: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    roots = [q for q in quotas if not ((q.get("spec") or {}).get("parentRef") or {}).get("name")]
    if not roots:
        raise CapacityUnknown("NoCapacityReport", "no root AcceleratorQuota (one without spec.parentRef) exists, "
                                                  "so nothing reports this cluster's capacity")
    if len(roots) > 1:
        names = ", ".join(sorted(str((q.get("metadata") or {}).get("name")) for q in roots))
        raise CapacityUnknown("AmbiguousCapacityReport", f"{len(roots)} AcceleratorQuotas have no parentRef "
                                                         f"({names}); only the reserved root may be parent-less")
    return roots[0]


@dataclass(frozen=True)
class Pool:
    resource_name: str
    resource_flavor: str
    demand: int
    allocatable: int
    observed_at: str
    attribution: dict[str, Any]


@dataclass(frozen=True)
class Normalized:
    replicas: int
    pools: list[Pool]
    fingerprint: str
    report_uid: str
    report_resource_version: str


def normalize(shapes: Sequence[ComponentShape], root: Mapping[str, Any], now: datetime) -> Normalized:
    """Whole replicas of `shapes` (one unit: every component once) in the root's capacity report."""
    meta = root.get("metadata") or {}
    name = meta.get("name")
    entries = [e for e in (root.get("status") or {}).get("capacity") or [] if e.get("resourceName")]
    if not entries:
        raise CapacityUnknown("NoCapacityReport", f"the root AcceleratorQuota {name} reports no capacity yet "
                                                  "(status.capacity is empty)")
    unit: dict[str, Decimal] = {}
    for shape in shapes:
        for resource, amount in shape.demand.items():
            unit[resource] = unit.get(resource, Decimal(0)) + amount
    reported = sorted({str(e["resourceName"]) for e in entries})
    demanded = [r for r in reported if unit.get(r, Decimal(0)) > 0]
    if not demanded:
        raise CapacityUnknown("NoAcceleratorDemand", (
            f"one replica requests none of the resources {name} reports ({', '.join(reported)}); "
            "SplitByCapacity divides by accelerator demand"))
    pools: list[Pool] = []
    per_resource: dict[str, int] = {}
    for entry in sorted(entries, key=lambda e: (str(e["resourceName"]), str(e.get("resourceFlavor") or ""))):
        resource = str(entry["resourceName"])
        if resource not in demanded:
            continue
        flavor = str(entry.get("resourceFlavor") or "")
        where = f"{resource} on flavor {flavor or '(none)'} in {name}"
        attribution = dict(entry.get("attribution") or {})
        if not attribution.get("complete") or not attribution.get("flavorUID"):
            raise CapacityUnknown("CapacityIncomplete", f"{where} is not a complete attribution of nodes to an "
                                                        "identified flavor")
        observed = parse_rfc3339(entry.get("observedAt"))
        if observed is None or now - observed > STALE_AFTER:
            seen = entry.get("observedAt") or "never"
            raise CapacityUnknown("CapacityStale", f"{where} was last observed at {seen}, "
                                                   f"more than {int(STALE_AFTER.total_seconds() // 60)} minutes ago")
        demand = unit[resource]
        allocatable = quantity_value(entry.get("allocatable"))
        per_resource[resource] = per_resource.get(resource, 0) + int(allocatable // demand)
        pools.append(Pool(resource, flavor, int(demand.to_integral_value(rounding="ROUND_CEILING")),
                          int(allocatable), str(entry.get("observedAt")), attribution))
    fingerprint = canonical_hash({
        "components": [[s.component, s.rendering_hash] for s in shapes],
        "pools": [[p.resource_name, p.resource_flavor, str(unit[p.resource_name])] for p in pools]})
    return Normalized(replicas=min(per_resource[r] for r in demanded), pools=pools, fingerprint=fingerprint,
                      report_uid=str(meta.get("uid") or ""),
                      report_resource_version=str(meta.get("resourceVersion") or ""))
