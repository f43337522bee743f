"""Which components roll together: the rollout units of an InferenceService.

A spec.rollout group is a unit keyed by its list index; a component in no group rolls on its own
(keyed by its name) with the default progression. The unit's entrypoint (router, else engine,
else decoder) carries the unit's CanaryStatus, and status.canary mirrors the unit that owns the
InferenceService's entrypoint.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from api_models.ome.enums import ComponentType, RolloutGroupOrdering
from api_models.ome.rollout import RolloutGroup, RolloutSpec

_ENTRY_ORDER = (ComponentType.ROUTER, ComponentType.ENGINE, ComponentType.DECODER)


@dataclass(frozen=True)
class Unit:
    key: str
    index: int | None
    group: RolloutGroup | None
    """None for a component in no group."""
    components: tuple[ComponentType, ...]


def entrypoint(components: list[ComponentType] | tuple[ComponentType, ...]) -> ComponentType:
    for candidate in _ENTRY_ORDER:
        if candidate in components:
            return candidate
    raise ValueError("no components")


def units(spec: RolloutSpec | None, served: list[ComponentType]) -> list[Unit]:
    """Spec groups in list order (only their served components), then every ungrouped component."""
    result: list[Unit] = []
    grouped: set[ComponentType] = set()
    for index, group in enumerate((spec.groups if spec else None) or []):
        members = tuple(c for c in group.components if c in served)
        grouped.update(group.components)
        if members:
            result.append(Unit(key=str(index), index=index, group=group, components=members))
    for component in served:
        if component not in grouped:
            result.append(Unit(key=component.value, index=None, group=None, components=(component,)))
    return result


def sequential(spec: RolloutSpec | None) -> bool:
    """Groups are sequenced unless the spec declares them Concurrent."""
    return spec is None or spec.group_ordering != RolloutGroupOrdering.CONCURRENT


def target_id(targets: dict[ComponentType, str]) -> str:
    """A short stable identity of a unit's component target set."""
    text = ",".join(f"{c.value}={targets[c]}" for c in sorted(targets, key=lambda c: c.value))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
