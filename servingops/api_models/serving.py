"""What the serving activities and the rollout messages both speak: a revision's share of one
component's traffic (a weighted backendRef of the component's HTTPRoute), and what the Gateway
says of a component's route and where the service answers (read by serving.observe, kept in the
InferenceService workflow's memory, ServiceState). The serving activities' own inputs and outputs
live beside them, in activities/serving/types.py."""

from __future__ import annotations

from pydantic import BaseModel


class TrafficWeight(BaseModel):
    revision: str
    weight: int
    """0-100; the weights of one route add up to 100."""


class RouteStatus(BaseModel):
    """The Gateway's verdict on one component's HTTPRoute: the route's status.parents[] entry for the
    parentRef we render (whichever controller wrote it; the Gateway's class does not matter)."""

    route: str
    """The HTTPRoute's name (`<isvc>-<component>`)."""
    generation: int = 0
    """metadata.generation of the route as read."""
    reported: bool = False
    """The Gateway wrote an entry for our parentRef. False: it has not seen the route yet, or no
    controller owns that Gateway."""
    accepted: bool | None = None
    """The entry's Accepted condition; None when it is absent or Unknown."""
    resolved_refs: bool | None = None
    """The entry's ResolvedRefs condition (every backendRef resolved); None when absent or Unknown."""
    reason: str = ""
    """The Gateway's own reason: of the first of Accepted and ResolvedRefs that is not True, else
    Accepted's (e.g. NoMatchingParent, NotAllowedByListeners, BackendNotFound)."""
    message: str = ""
    """The Gateway's own message that goes with `reason`."""
    observed_generation: int | None = None
    """The older observedGeneration of those two conditions."""
    current: bool = False
    """That verdict is for the route's current generation (observed_generation == generation):
    a verdict on an older spec says nothing about the split just programmed."""


class IngressObservation(BaseModel):
    """Where an InferenceService answers, by the operator's `ingress` configuration as read now."""

    gateway: str = ""
    """`<namespace>/<name>` of the Gateway the routes attach to; "" when none is configured."""
    url: str | None = None
    """`<urlScheme>://<the service's own host>` when a Gateway is configured (status.url)."""
    problem_reason: str | None = None
    """Set when the routes' attachment cannot be rendered now: IngressConfigInvalid (the ConfigMap's
    ingress block does not parse) or InvalidHost (domainTemplate gives no DNS name for this
    service). The routes then keep the parentRefs and hostnames they have."""
    problem: str | None = None
    """What is wrong, naming the key or the host."""
