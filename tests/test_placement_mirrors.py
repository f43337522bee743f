"""The watch funnel (activities/placement/mirrors.py): a home's rollout provenance and autoscaling
digests lifted off its derived InferenceService's status."""

from __future__ import annotations

import pytest

from servingops.activities.placement.mirrors import autoscaling_mirror, fold_digests, rollout_mirror
from servingops.api_models.ome.enums import ComponentType

pytestmark = pytest.mark.unit


def _group(digest: str, policy: str | None = None) -> dict[str, object]:
    return {"source": "Policy" if policy else "Inline", "portableDigest": digest,
            **({"policyRef": {"name": policy}} if policy else {}), "group": {"components": ["engine"]}}


def test_rollout_provenance_never_the_plan_body() -> None:
    status = {"rollout": {
        "activeRun": {"runID": "run-2", "plan": {"groups": [_group("rp1:aa", "canary-fast"), _group("rp1:bb")]}},
        "lastRun": {"outcome": "Completed", "groups": [_group("rp1:aa", "canary-fast"), _group("rp1:cc")]}}}
    mirror = rollout_mirror(status)
    assert mirror is not None
    assert mirror.to_api() == {
        "activeRunID": "run-2",
        "activeGroups": [{"source": "Policy", "policyName": "canary-fast", "portableDigest": "rp1:aa"},
                         {"source": "Inline", "portableDigest": "rp1:bb"}],
        "lastRun": {"outcome": "Completed", "digest": fold_digests(["rp1:aa", "rp1:cc"])}}
    assert fold_digests(["rp1:cc", "rp1:aa"]) != fold_digests(["rp1:aa", "rp1:cc"]), "order-sensitive"
    assert rollout_mirror({}) is None


def test_autoscaling_ready_only_when_every_consumer_renders_from_its_policy() -> None:
    status = {"components": {
        "engine": {"autoscaler": {"specSource": "policy", "policy": {
            "name": "gpu-hpa", "portableDigest": "ap1:11", "resolvedDigest": "r-engine"}}},
        "decoder": {"autoscaler": {"specSource": "isvc"}}}}
    mirror = autoscaling_mirror(status, ["engine", "decoder"])
    assert mirror is not None and mirror.ready is False
    assert [(p.name, p.portable_digest) for p in mirror.policies or []] == [("gpu-hpa", "ap1:11")]
    components = mirror.components or {}
    assert components[ComponentType.ENGINE].resolved_digest == "r-engine" and components[ComponentType.ENGINE].ready
    assert components[ComponentType.DECODER].ready is False
    engine_only = autoscaling_mirror(status, ["engine"])
    assert engine_only is not None and engine_only.ready is True
    assert autoscaling_mirror(status, []) is None, "set only when the source references a policy"
