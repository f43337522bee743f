"""A management plane's capacity report broken down by cluster, pure (seed 004:
AcceleratorCapacityStatus.perCluster, "PerCluster breaks capacity down by cluster on a management plane.
Empty on a workload cluster, whose root reports only its own capacity").

Each registered WorkloadCluster's row of a (resource, flavor) pair comes from that member's own root
report (its status.capacity, written by the member's AcceleratorCapacityWorkflow), read through the
registration (`placement.read_member_capacity`): allocatable, highWaterMark, observedAt and attribution
as the member wrote them, with the registration's uid and the report's uid and resourceVersion. A member
that could not be read this time keeps the row it had, marked `reportAvailable: false` (the seed: it
"does not imply that ObservedAt is fresh"); one never read has no row.

The pair's own numbers stay this plane's (its own nodes). A pair only members have gets an entry whose
allocatable is the sum of the rows read this time and no high-water mark: the fleet's aggregate mark is
not kept (each member keeps its own, in its row), so the root's CapacityExceeded check judges only what
this plane itself observed. The Proportional split (rendering/quota_projection.cluster_capacity) reads
the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from fractions import Fraction

from pydantic import BaseModel

from servingops.api_models.ome.accelerator_quota import AcceleratorCapacityStatus, AcceleratorClusterCapacityStatus
from servingops.api_models.quantity import quantity, quantity_text

Pair = tuple[str, str]


class MemberCapacityReport(BaseModel):
    """One registered WorkloadCluster's root report, as read through its registration."""

    cluster: str
    cluster_uid: str = ""
    available: bool = False
    """The registration and the member's root were read this time."""
    reason: str = ""
    message: str = ""
    """Why not (available False)."""
    report_uid: str = ""
    report_resource_version: str = ""
    capacity: list[AcceleratorCapacityStatus] = []
    """The member root's status.capacity (its own perCluster, always empty there, is dropped)."""


def _pair(entry: AcceleratorCapacityStatus) -> Pair | None:
    if entry.resource_name is None or entry.resource_flavor is None:
        return None
    return entry.resource_name, entry.resource_flavor


def _fresh_rows(members: Iterable[MemberCapacityReport]) -> dict[Pair, dict[str, AcceleratorClusterCapacityStatus]]:
    rows: dict[Pair, dict[str, AcceleratorClusterCapacityStatus]] = {}
    for member in members:
        if not member.available:
            continue
        for entry in member.capacity:
            pair = _pair(entry)
            if pair is None:
                continue
            rows.setdefault(pair, {})[member.cluster] = AcceleratorClusterCapacityStatus(
                cluster=member.cluster, cluster_uid=member.cluster_uid or None, report_uid=member.report_uid or None,
                report_resource_version=member.report_resource_version or None, report_available=True,
                allocatable=entry.allocatable, high_water_mark=entry.high_water_mark, observed_at=entry.observed_at,
                attribution=entry.attribution)
    return rows


def _kept_rows(previous: Sequence[AcceleratorCapacityStatus] | None, members: Iterable[MemberCapacityReport],
               ) -> dict[Pair, dict[str, AcceleratorClusterCapacityStatus]]:
    """The rows last written for members registered but unreadable now, marked unavailable."""
    unreadable = {m.cluster for m in members if not m.available}
    rows: dict[Pair, dict[str, AcceleratorClusterCapacityStatus]] = {}
    for entry in previous or []:
        pair = _pair(entry)
        if pair is None:
            continue
        for row in entry.per_cluster or []:
            if row.cluster in unreadable:
                rows.setdefault(pair, {})[row.cluster] = row.model_copy(update={"report_available": False})
    return rows


def with_per_cluster(entries: Sequence[AcceleratorCapacityStatus], members: Sequence[MemberCapacityReport],
                     previous: Sequence[AcceleratorCapacityStatus] | None,
                     observed_at: datetime) -> list[AcceleratorCapacityStatus]:
    """This plane's entries with each pair's perCluster rows, plus an entry for each pair only members
    report; sorted by resource then flavor. With no member rows at all, `entries` unchanged."""
    fresh, kept = _fresh_rows(members), _kept_rows(previous, members)
    rows: dict[Pair, dict[str, AcceleratorClusterCapacityStatus]] = {}
    for source in (kept, fresh):  # a fresh row replaces a kept one
        for pair, by_cluster in source.items():
            rows.setdefault(pair, {}).update(by_cluster)
    if not rows:
        return list(entries)
    out: dict[Pair, AcceleratorCapacityStatus] = {}
    for entry in entries:
        own = _pair(entry)
        if own is None:
            continue
        listed = rows.get(own)
        out[own] = entry.model_copy(update={"per_cluster": [listed[c] for c in sorted(listed)]} if listed else {})
    for pair, by_cluster in rows.items():
        if pair in out:
            continue
        total = sum((quantity(r.allocatable) for r in by_cluster.values()
                     if r.report_available and r.allocatable is not None), Fraction(0))
        out[pair] = AcceleratorCapacityStatus(
            resource_name=pair[0], resource_flavor=pair[1], allocatable=quantity_text(total),
            observed_at=observed_at, per_cluster=[by_cluster[c] for c in sorted(by_cluster)])
    return [out[p] for p in sorted(out)]


__all__ = ["MemberCapacityReport", "with_per_cluster"]
