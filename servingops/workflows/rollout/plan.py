"""The rollout plan of an InferenceService, as pure rules: which components roll together (its
units), what each unit rolls toward, and which units may open a run now.

A spec.rollout group is a unit keyed by its list index; a component in no group rolls on its own
(keyed by its name) with the default progression. The unit's entrypoint (router, else engine,
else decoder) carries the unit's CanaryStatus, and status.canary mirrors the unit that owns the
InferenceService's entrypoint.

The InferenceService workflow (workflows/inference_service/) observes, asks `triage` which units have a
run to steer and which could start, steers the running ones, then asks `admit` which of the
others start now (groups in order, one at a time, after the previous group's soak, unless the
spec says Concurrent), and opens their runs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from servingops.activities.serving.types import ComponentObservation
from servingops.api_models.contract.rollout import ComponentTarget, ServiceState
from servingops.api_models.ome.enums import ComponentType, RolloutGroupOrdering
from servingops.api_models.ome.rollout import RolloutGroup, RolloutSpec

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


class Planned(NamedTuple):
    unit: Unit
    targets: list[ComponentTarget]


def unit_targets(unit: Unit, seen: dict[ComponentType, ComponentObservation],
                 state: ServiceState) -> list[ComponentTarget]:
    """What the unit rolls toward: each component's desired revision, from the revision that
    fully serves it now (its first desired revision when nothing serves it yet)."""
    return [ComponentTarget(component=c, revision=seen[c].desired_revision,
                            stable_revision=state.components[c].stable or seen[c].desired_revision,
                            desired_replicas=seen[c].desired_replicas) for c in unit.components]


def triage(planned_units: list[Unit], seen: dict[ComponentType, ComponentObservation],
           state: ServiceState) -> tuple[list[Planned], list[Planned]]:
    """(units with an open run, to steer toward their targets; units that could open a run).

    Keeps the hold and park bookkeeping of `state`: a unit back on its stable revisions is
    released from both; a held (rejected) target set is not retried until a different one
    appears, and a different one releases the hold."""
    running: list[Planned] = []
    startable: list[Planned] = []
    for unit in planned_units:
        targets = unit_targets(unit, seen, state)
        wanted = {t.component: t.revision for t in targets}
        if unit.key in state.active:
            running.append(Planned(unit, targets))
            continue
        if all(t.revision == t.stable_revision for t in targets):
            state.held.pop(unit.key, None)
            state.held_primary.pop(unit.key, None)
            state.parked.pop(unit.key, None)
            continue
        if state.held.get(unit.key) == wanted:
            continue  # the rejected target set is not retried until a different one appears
        state.held.pop(unit.key, None)
        state.held_primary.pop(unit.key, None)
        startable.append(Planned(unit, targets))
    return running, startable


def admit(spec: RolloutSpec | None, startable: list[Planned], state: ServiceState, now: datetime) -> list[Planned]:
    """The startable units that open a run now. Sequenced groups: group N completes (and soaks)
    before group N+1 starts, so only the first startable group may start, and only when no
    group runs and no soak is under way (an elapsed soak is cleared here); ungrouped components
    are independent of the sequence."""
    if not sequential(spec):
        return startable
    grouped_busy = any(r.pinned.index is not None for r in state.active.values())
    soaking = state.soak_until is not None and now < state.soak_until
    if state.soak_until is not None and not soaking:
        state.soak_until = None
    first = True
    kept = []
    for planned in startable:
        if planned.unit.index is None:
            kept.append(planned)
        elif first and not grouped_busy and not soaking:
            kept.append(planned)
            first = False
        else:
            first = False
    return kept
