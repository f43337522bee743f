"""What routing across homes says to placement and what an operator says to routing (docs/routing.md).

Seed 004's ordering: "Publication must acknowledge this plan before a placement drains". The routing
workflow (TrafficMapWorkflow) tells the placement workflow, by the `publication` signal, which homes the
global route may send requests to: once BEFORE it writes the route (every home the old route or the new
one gives a positive weight: from then on either may be what the data plane runs) and once AFTER (the
homes the new route gives a positive weight, and the plan it was computed from). Placement withdraws a
home's copy only when the latest Publication it holds leaves that home out; with none at all, nothing
was ever published for the service and nothing holds the withdrawal. Both signals are commands in the
routing workflow's history, so a worker killed between the plan and its publication resumes into the
same order.
"""

from __future__ import annotations

from pydantic import BaseModel

DRAIN_ANNOTATION = "ome.io/traffic-drain"
"""On the control-plane InferenceService: a JSON object of drains keyed by drain ID, each
`{"cluster": <WorkloadCluster>, "reason": <text>}`; a drained home gets weight 0."""
GLOBAL_HOST_ANNOTATION = "ome.io/global-host"
"""On an InferenceService: its global hostname, over the operator's globalHostTemplate."""
ROUTING_ANNOTATIONS = (DRAIN_ANNOTATION, GLOBAL_HOST_ANNOTATION)
"""The annotations the bridge watches for the routing workflow: a change moves no generation."""
TRAFFIC_MAP_FINALIZER = "ome.io/trafficmap-publisher"
"""On a TrafficMap: the publisher removes its route and backends before the map may go."""


class Publication(BaseModel):
    """TrafficMapWorkflow -> PlacementWorkflow: the homes the global route may send requests to."""

    sequence: int
    """Increases with every Publication of one routing workflow (carried across its runs): placement keeps
    the highest, so a late signal never undoes a newer one."""
    routed: list[str]
    """The WorkloadClusters that may receive requests through the global route."""
    plan_id: str | None = None
    """The placement plan (status.placement.plan.id) the published table was computed from; None before
    a write, and when nothing is routed (routing off, withdrawn)."""
    settled: bool = False
    """False: sent before a write (`routed` is the union of the old and the new route); True: the write
    is done and `routed` is exactly what the route gives a positive weight."""


__all__ = ["DRAIN_ANNOTATION", "GLOBAL_HOST_ANNOTATION", "ROUTING_ANNOTATIONS", "TRAFFIC_MAP_FINALIZER",
           "Publication"]
