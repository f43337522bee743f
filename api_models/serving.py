"""What the serving activities and the rollout messages both speak: a revision's share of one
component's traffic (a weighted backendRef of the component's HTTPRoute). The serving
activities' own inputs and outputs live beside them, in activities/serving/types.py."""

from __future__ import annotations

from pydantic import BaseModel


class TrafficWeight(BaseModel):
    revision: str
    weight: int
    """0-100; the weights of one route add up to 100."""
