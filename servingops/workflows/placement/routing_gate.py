"""Seed 004's ordering between placement and routing: "Publication must acknowledge this plan before a
placement drains." A home's copy is removed only when the latest Publication the routing workflow sent
(api_models/contract/routing.py) leaves it out: no request can reach it through the global route any more.
Without any Publication nothing was ever published for the source, and nothing holds a removal. Pure rules.
"""

from __future__ import annotations

from collections.abc import Iterable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract.routing import Publication


def newer(current: Publication | None, arrived: Publication) -> bool:
    """Keep the highest sequence: a late signal never undoes a newer one."""
    return current is None or arrived.sequence > current.sequence


def routed(publication: Publication | None, cluster: str) -> bool:
    """The global route may still send requests to `cluster`."""
    return publication is not None and cluster in publication.routed


def held(publication: Publication | None, clusters: Iterable[str]) -> list[str]:
    """The clusters among `clusters` whose removal must wait for a publication that leaves them out."""
    return sorted(c for c in clusters if routed(publication, c))
