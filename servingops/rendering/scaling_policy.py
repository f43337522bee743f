"""spec.scalingPolicy (seed 004, since v1.3, alpha): how the replica counts of an InferenceService's
components are coordinated. Pure: the policy and what the service sets in, the followers and their
counts out. The service's workflow applies them (workflows/inference_service/serving.py); the observe
activity refuses a policy that breaks a rule below (reason InvalidScalingPolicy).

What the seed says, and what is chosen here where it is silent (docs/autoscaling.md):
- Independent (the default, and a nil policy): every component scales on its own. Nothing here runs.
- Proportional: `proportional.anchor` (default engine) drives; each component in `proportional.ratios`
  follows at ceil(anchor's count x ratio) ("0.25 means one follower per four anchor replicas
  (rounded up)"); components not listed scale independently. Chosen: the follower's own bounds hold
  (at least its minReplicas, 1 when unset; at most its maxReplicas when set).
- Pinned: the seed gives only the name. Chosen: every other component the service sets runs exactly
  the anchor's count (parity, no rounding, the follower's bounds do not apply: pinned means equal). The
  anchor is `proportional.anchor` when a block is given, else engine; ratios are refused under Pinned
  (they would say something Pinned does not do).
- The anchor's count is the one its scaler set (the scale target's spec.replicas), not its minReplicas.
- A follower gets no scaler of its own: a follower with an autoscaler that owns the count (class HPA,
  KEDA, External) or an AutoscalerPolicy reference is refused, since two writers would fight.
- A component listed in ratios that the service does not set is skipped (a runtime's default policy may
  name a decoder a service binding the runtime does not have).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction

from servingops.api_models.ome.autoscaling import ScalingPolicy
from servingops.api_models.ome.enums import ComponentType, ScalingMode
from servingops.api_models.quantity import quantity

REASON = "InvalidScalingPolicy"
"""The refusal's reason (ErrorType.INVALID_SCALING_POLICY)."""


class ScalingPolicyError(ValueError):
    """The policy breaks a rule: the message says which, in the user's words."""


@dataclass(frozen=True)
class Bounds:
    low: int
    """The follower's minReplicas (1 when unset)."""
    high: int | None = None
    """Its maxReplicas when set (at least low)."""


@dataclass(frozen=True)
class Coordination:
    mode: ScalingMode
    anchor: ComponentType
    ratios: Mapping[ComponentType, Fraction]
    """Follower -> ratio to the anchor (Pinned: 1 for every other component)."""

    @property
    def pinned(self) -> bool:
        return self.mode is ScalingMode.PINNED

    def describe(self, component: ComponentType) -> str:
        """How a follower follows, for messages: "x 1/2" or "pinned"."""
        if self.pinned:
            return "pinned"
        ratio = self.ratios[component]
        return f"x {ratio.numerator}" if ratio.denominator == 1 else f"x {ratio.numerator}/{ratio.denominator}"


def plan(policy: ScalingPolicy | None, present: Collection[ComponentType],
         own_scalers: Collection[ComponentType] = ()) -> Coordination | None:
    """The coordination a policy asks of a service setting `present` (None: every component scales
    independently); `own_scalers`: the components with an autoscaler that owns their count. Raises
    ScalingPolicyError when a rule is broken."""
    if policy is None or policy.mode is ScalingMode.INDEPENDENT:
        return None
    block = policy.proportional
    if policy.mode is ScalingMode.PROPORTIONAL and block is None:
        raise ScalingPolicyError("scalingPolicy: mode Proportional requires the proportional block "
                                 "(proportional.anchor and proportional.ratios)")
    anchor = block.anchor if block is not None else ComponentType.ENGINE
    if anchor not in present:
        sets = ", ".join(sorted(c.value for c in present)) or "no component"
        raise ScalingPolicyError(f"scalingPolicy: the anchor {anchor.value} is not a component of this service "
                                 f"(it sets {sets})")
    ratios: dict[ComponentType, Fraction] = {}
    if policy.mode is ScalingMode.PINNED:
        if block is not None and block.ratios:
            raise ScalingPolicyError("scalingPolicy: mode Pinned holds every component at the anchor's count; "
                                     "proportional.ratios applies only to mode Proportional")
        ratios = {c: Fraction(1) for c in present if c is not anchor}
    else:
        for follower, raw in sorted(((block.ratios if block else None) or {}).items(), key=lambda i: i[0].value):
            if follower is anchor:
                raise ScalingPolicyError(f"scalingPolicy: {anchor.value} is the anchor and cannot follow itself "
                                         f"(remove it from proportional.ratios)")
            try:
                ratio = quantity(raw)
            except ValueError as exc:
                raise ScalingPolicyError(f"scalingPolicy: the ratio of {follower.value} ({raw!r}) is not a "
                                         f"quantity") from exc
            if ratio <= 0:
                raise ScalingPolicyError(f"scalingPolicy: the ratio of {follower.value} must be greater than 0 "
                                         f"(got {raw!r})")
            if follower in present:
                ratios[follower] = ratio
    for follower in sorted(ratios, key=lambda c: c.value):
        if follower in own_scalers:
            raise ScalingPolicyError(
                f"scalingPolicy: {follower.value} follows {anchor.value} ({policy.mode.value}), so it cannot have "
                f"an autoscaler of its own; remove {follower.value}.autoscaler / autoscalerPolicyRef, or leave "
                f"{follower.value} out of the policy")
    return Coordination(mode=policy.mode, anchor=anchor, ratios=ratios)


def follower_count(anchor_count: int, ratio: Fraction, bounds: Bounds, *, pinned: bool = False) -> int:
    """One follower's count: ceil(anchor x ratio) within its bounds; Pinned: the anchor's count."""
    if pinned:
        return max(0, anchor_count)
    count = math.ceil(max(0, anchor_count) * ratio)
    count = max(bounds.low, count)
    if bounds.high is not None:
        count = min(max(bounds.low, bounds.high), count)
    return count


def desired_counts(coordination: Coordination, anchor_count: int,
                   bounds: Mapping[ComponentType, Bounds]) -> dict[ComponentType, int]:
    """Every follower's count for the anchor's current count (a follower without bounds given: min 1)."""
    return {c: follower_count(anchor_count, ratio, bounds.get(c, Bounds(low=1)), pinned=coordination.pinned)
            for c, ratio in coordination.ratios.items()}


def bounds_of(min_replicas: int | None, max_replicas: int | None) -> Bounds:
    """A follower's bounds from its spec: minReplicas (1 when unset; 0 allowed: scale to zero with the
    anchor), maxReplicas when set (at least min)."""
    low = 1 if min_replicas is None else max(0, min_replicas)
    return Bounds(low=low, high=None if max_replicas is None else max(low, max_replicas))


__all__ = ["REASON", "Bounds", "Coordination", "ScalingPolicyError", "bounds_of", "desired_counts",
           "follower_count", "plan"]
