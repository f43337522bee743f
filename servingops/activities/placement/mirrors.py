"""What a home's derived InferenceService reports, lifted onto its CandidatePlacement row, as pure
rules (seed 004's "watch funnel"): rollout-run provenance and AutoscalerPolicy digest state, so
that drift between homes is visible on the source without reading each member.

- `rollout` (CandidateRolloutStatus): the open run's id and its pinned groups' provenance (source,
  policy name, portable digest; never the plan bodies), and the last closed run's outcome with a
  digest folding its groups' portable digests in order (sha256 over "d1\\nd2\\n...", so a reorder or
  one changed group changes it).
- `autoscaling` (CandidateAutoscalingStatus): per policy-consuming component the resolved digest the
  home rendered and whether it came from the policy; the portable digest of each policy as the home
  observed it; ready when every such component reports specSource=policy with a resolved digest.

The placement workflow sets them on a row only when the source references a RolloutPolicy / an
AutoscalerPolicy (the seed: "Set only when ..."); the activity lifts them whenever it reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from servingops.api_models.ome.autoscaling import (
    CandidateAutoscalingStatus,
    CandidateComponentAutoscaling,
    CandidatePolicyDigest,
)
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.rollout_status import (
    CandidateRolloutGroup,
    CandidateRolloutLastRun,
    CandidateRolloutStatus,
)


def fold_digests(digests: Iterable[str]) -> str:
    """One order-sensitive comparable value of a run's per-group portable digests."""
    return "sha256:" + hashlib.sha256("".join(f"{d}\n" for d in digests).encode()).hexdigest()


def _policy_name(group: Mapping[str, Any]) -> str | None:
    ref = group.get("policyRef") or {}
    return str(ref["name"]) if ref.get("name") else None


def rollout_mirror(status: Mapping[str, Any]) -> CandidateRolloutStatus | None:
    rollout = status.get("rollout") or {}
    active, last = rollout.get("activeRun") or {}, rollout.get("lastRun") or {}
    if not active and not last:
        return None
    groups = ((active.get("plan") or {}).get("groups")) or []
    mirror = CandidateRolloutStatus(
        active_run_id=active.get("runID") or None,
        active_groups=[CandidateRolloutGroup(source=g.get("source"), policy_name=_policy_name(g),
                                             portable_digest=g.get("portableDigest")) for g in groups] or None)
    if last:
        closed = last.get("groups") or []
        mirror.last_run = CandidateRolloutLastRun(
            outcome=last.get("outcome"),
            digest=fold_digests(str(g.get("portableDigest") or "") for g in closed) if closed else None)
    return mirror


def autoscaling_mirror(status: Mapping[str, Any], consumers: Iterable[str]) -> CandidateAutoscalingStatus | None:
    """`consumers`: the components whose spec names an autoscalerPolicyRef."""
    wanted = sorted(set(consumers))
    if not wanted:
        return None
    components = status.get("components") or {}
    per_component: dict[ComponentType, CandidateComponentAutoscaling] = {}
    policies: dict[str, str | None] = {}
    for component in wanted:
        autoscaler = (components.get(component) or {}).get("autoscaler") or {}
        policy = autoscaler.get("policy") or {}
        from_policy = autoscaler.get("specSource") == "policy" and bool(policy.get("resolvedDigest"))
        per_component[ComponentType(component)] = CandidateComponentAutoscaling(
            resolved_digest=policy.get("resolvedDigest"), ready=from_policy)
        if policy.get("name"):
            policies[str(policy["name"])] = policy.get("portableDigest")
    return CandidateAutoscalingStatus(
        policies=[CandidatePolicyDigest(name=name, portable_digest=digest) for name, digest in sorted(policies.items())]
        or None,
        components=per_component,
        ready=all(c.ready for c in per_component.values()))
