"""A member's side of placement's demand contract (seed 004, PlacementExecutionPolicy.demand).

When placement divides a service by capacity (SplitByCapacity), it reads what one replica of each
component costs in a member by rendering the derived service there (placement.read_capacity), and the
plan it accepts carries that rendering in the derived service's `ome.io/placement-execution` annotation:
one `renderingHash` per Engine/Decoder component. The seed: "Demand requires member rendering to match
the accepted normalization inputs before a component can project workloads." So before this member
renders anything of a placed service, it renders each component the way placement did and compares:
a runtime, model or accelerator class changed in the member since the read renders other pods, which the
accepted capacity did not count. Such a service is held (nothing new is projected, what serves keeps
serving) until placement reads the member again and accepts a plan with the new rendering.

Static plans (Single, All, Split) carry no demand: nothing to check.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from servingops.activities.component_shape import component_shape
from servingops.activities.serving.types import ServingHold
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.api_models.ome.placement import EXECUTION_ANNOTATION, PlacementExecutionPolicy
from servingops.rendering import multinode, render

DEMAND_MISMATCH = "PlacementDemandMismatch"
"""The hold's reason: this member renders a component otherwise than the accepted plan counted."""
EXECUTION_UNREADABLE = "PlacementExecutionUnreadable"
"""The hold's reason: the execution annotation is not a PlacementExecutionPolicy (nothing to check it by)."""

_DEMAND_COMPONENTS = (ComponentType.ENGINE, ComponentType.DECODER)  # the seed: Router is excluded


def demand_hold(isvc: str, annotations: dict[str, str], spec: InferenceServiceSpec) -> ServingHold | None:
    """Why `spec` (resolved, as this member renders it) may not project workloads under the plan its
    annotations carry, or None when it may (no plan, a static plan, or the same rendering)."""
    text = annotations.get(EXECUTION_ANNOTATION)
    if text is None:
        return None
    try:
        policy = PlacementExecutionPolicy.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        return ServingHold(reason=EXECUTION_UNREADABLE,
                           message=f"annotation {EXECUTION_ANNOTATION} is not a PlacementExecutionPolicy: {exc}")
    if policy.demand is None:
        return None
    accepted: dict[ComponentType, str] = {c.component: c.rendering_hash for c in policy.demand.components}
    rendered: dict[ComponentType, str] = {}
    try:
        for component in _DEMAND_COMPONENTS:
            cspec = render.component_spec(spec, component)
            if cspec is not None:
                rendered[component] = component_shape(
                    component.value, multinode.runner_templates(isvc, component, cspec)).rendering_hash
    except (ValueError, ValidationError):
        return None  # a spec that does not render is refused by rendering itself, with its own reason
    if rendered == accepted:
        return None
    differences = []
    for component in sorted(set(rendered) | set(accepted), key=lambda c: c.value):
        mine, theirs = rendered.get(component), accepted.get(component)
        if mine != theirs:
            differences.append(f"{component.value} renders {_short(mine)} here, plan {policy.plan_id} revision "
                               f"{policy.revision} accepted {_short(theirs)}")
    return ServingHold(reason=DEMAND_MISMATCH, message=(
        "; ".join(differences) + ": nothing new is projected until placement reads this member's capacity "
        "again and accepts a plan for this rendering"))


def _short(rendering_hash: str | None) -> str:
    return f"rendering {rendering_hash[:12]}" if rendering_hash else "no such component"
