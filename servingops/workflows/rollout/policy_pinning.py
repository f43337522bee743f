"""Pinning a group's progression at run open: inline wins over a policyRef; an unresolvable or
mismatched ref parks the group (fail-closed) instead of falling back to blueGreen; a group with
neither defaults to blueGreen. Also the portable digest ("rp1:" + canonical hash) that lets
fleets compare progression bodies."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from servingops.api_models.ome.enums import RolloutPlanSource, RolloutProgressionKind
from servingops.api_models.ome.rollout import GroupBlueGreen, RolloutGroup
from servingops.api_models.ome.rollout_policy import RolloutPolicy, RolloutPolicySpec


def portable_digest(body: RolloutPolicySpec) -> str:
    """sha256 over the canonical JSON (sorted keys, no whitespace, defaults applied) of a
    progression body, so equal bodies digest equally on every cluster."""
    canonical = json.dumps(body.to_api(), sort_keys=True, separators=(",", ":"))
    return "rp1:" + hashlib.sha256(canonical.encode()).hexdigest()


def inline_body(group: RolloutGroup) -> RolloutPolicySpec | None:
    if group.canary is None and group.blue_green is None and group.rolling_update is None:
        return None
    return RolloutPolicySpec(canary=group.canary, blue_green=group.blue_green, rolling_update=group.rolling_update)


def kind_of(body: RolloutPolicySpec) -> RolloutProgressionKind | None:
    kinds = [kind for kind, present in ((RolloutProgressionKind.CANARY, body.canary),
                                        (RolloutProgressionKind.BLUE_GREEN, body.blue_green),
                                        (RolloutProgressionKind.ROLLING_UPDATE, body.rolling_update))
             if present is not None]
    return kinds[0] if len(kinds) == 1 else None


@dataclass(frozen=True)
class Resolution:
    group: RolloutGroup | None
    """The group with exactly one inline progression; None when parked."""
    source: RolloutPlanSource
    digest: str | None
    policy_generation: int | None = None
    park_reason: str | None = None
    park_message: str = ""
    shadowed_digest: str | None = None
    """When inline outranks a ref: what the ref would pin (None if it does not resolve)."""


def resolve(group: RolloutGroup, policy_object: dict[str, Any] | None) -> Resolution:
    """`policy_object` is the live RolloutPolicy the group's policyRef names (None if absent or
    when the group has no ref)."""
    policy: RolloutPolicy | None = RolloutPolicy.model_validate(policy_object) if policy_object else None
    policy_body = policy.spec if policy and policy.spec else None
    inline = inline_body(group)
    if inline is not None:
        shadowed = portable_digest(policy_body) if policy_body is not None else None
        pinned = group.model_copy(update={"policy_ref": None})
        return Resolution(pinned, RolloutPlanSource.INLINE, portable_digest(inline), shadowed_digest=shadowed)
    if group.policy_ref is None:
        default = RolloutPolicySpec(blue_green=GroupBlueGreen())
        pinned = group.model_copy(update={"blue_green": GroupBlueGreen()})
        return Resolution(pinned, RolloutPlanSource.INLINE, portable_digest(default))
    ref = group.policy_ref
    if policy_body is None:
        return Resolution(None, RolloutPlanSource.POLICY, None, park_reason="PolicyNotFound",
                          park_message=f"RolloutPolicy {ref.name} does not exist or has no spec")
    kind = kind_of(policy_body)
    if kind is None:
        return Resolution(None, RolloutPlanSource.POLICY, None, park_reason="PolicyInvalid",
                          park_message=f"RolloutPolicy {ref.name} must carry exactly one progression")
    if kind != ref.progression:
        return Resolution(None, RolloutPlanSource.POLICY, portable_digest(policy_body),
                          park_reason="ProgressionMismatch",
                          park_message=f"policyRef {ref.name} declares {ref.progression.value} but the policy is "
                                       f"{kind.value}")
    pinned = group.model_copy(update={"policy_ref": None, "canary": policy_body.canary,
                                      "blue_green": policy_body.blue_green,
                                      "rolling_update": policy_body.rolling_update})
    generation = int(policy.metadata.get("generation", 0)) if policy else None
    return Resolution(pinned, RolloutPlanSource.POLICY, portable_digest(policy_body), policy_generation=generation)
