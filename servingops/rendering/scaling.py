"""Who owns an OMENative component's replica count, and how a rollout's capacity maps onto the count
an autoscaler chose. Pure rules shared by the projection and the scaler (activities/serving/omenative.py,
autoscaler.py).

Seed 004 (InferenceReplicaSpec.replicas): on a projected replica the InferenceService controller writes
the component's minReplicas (at least 1) at create, "and thereafter while no autoscaler owns the count
or the stored count is nil or 0". An autoscaler owns it for classes HPA and KEDA (ours) and External
(someone else's scaler targets the replica's /scale); None, or no autoscaler block, leaves it to the
service.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Protocol

from servingops.api_models.ome.autoscaling import ComponentAutoscaler
from servingops.api_models.ome.enums import AutoscalerClass

_OWNING_CLASSES = frozenset({AutoscalerClass.HPA, AutoscalerClass.KEDA, AutoscalerClass.EXTERNAL})


class _Bounded(Protocol):
    min_replicas: int | None
    max_replicas: int | None


def owns_replicas(autoscaler: ComponentAutoscaler | None) -> bool:
    """Whether something other than the InferenceService writes the replica's spec.replicas."""
    return autoscaler is not None and autoscaler.class_ in _OWNING_CLASSES


def class_owns_count(class_value: object) -> bool:
    """The same rule for a class as status reports it (API form: status.components[c].autoscaler.class)."""
    return any(class_value == owning.value for owning in _OWNING_CLASSES)


def bounds(cspec: _Bounded) -> tuple[int, int]:
    """(min, max) of the scaler as upstream OME computes them: min at least 1, max at least min."""
    low = max(1, cspec.min_replicas or 0)
    return low, max(low, cspec.max_replicas or 0)


class _Scaled(_Bounded, Protocol):
    autoscaler: ComponentAutoscaler | None


def scaler_digest(cspec: _Scaled, policy_version: str | None = None) -> str:
    """What a component's scaler and the replica's spec.autoscaler are made from (the block and the
    bounds, and for a block a policy renders the policy's uid and generation): the service workflow
    applies them again only when this moves, or while a scaler of ours is live (its state is mirrored
    every pass)."""
    block = cspec.autoscaler.model_dump(by_alias=True, exclude_none=True, mode="json") if cspec.autoscaler else None
    parts: list[object] = [block, cspec.min_replicas, cspec.max_replicas]
    if policy_version is not None:  # appended only then: digests of services without a policy stay as they were
        parts.append(policy_version)
    text = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def projected_count(live_replicas: int | None, planned: int, capacity: int) -> tuple[int, int]:
    """(replicas, Instances on the desired revision) while an autoscaler owns the count. The rollout
    thinks in the spec's count (`planned`, minReplicas); the replica runs the scaler's
    (`live_replicas`; nil or 0 means the planned one). So a revision's capacity is scaled to it: the
    whole count once the revision has the whole planned count, else the same share rounded up."""
    replicas = live_replicas if live_replicas else max(1, planned)
    if capacity >= planned:
        return replicas, replicas
    return replicas, min(replicas, math.ceil(capacity * replicas / max(1, planned)))


def replacing(live: object, desired: object) -> object:
    """A merge patch turning `live` into exactly `desired`: keys only `live` has are nulled (a merge
    patch alone would keep them), so the written block replaces the stored one whole (seed: the
    service writes the resolved autoscaler onto the replica, "replacing the whole block")."""
    if not isinstance(desired, dict):
        return desired
    before = live if isinstance(live, dict) else {}
    patch: dict[str, object] = {key: None for key in before if key not in desired}
    patch.update({key: replacing(before.get(key), value) for key, value in desired.items()})
    return patch
