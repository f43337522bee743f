"""A placement execution policy and the rendering hash its demand contract carries."""

from __future__ import annotations

import json
from typing import Any

from servingops.activities.component_shape import component_shape
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.api_models.ome.placement import EXECUTION_ANNOTATION
from servingops.rendering import multinode, render

ENGINE, DECODER = ComponentType.ENGINE, ComponentType.DECODER


def _spec(body: dict[str, Any]) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate(body)


def rendering_hash(isvc: str, body: dict[str, Any], component: ComponentType = ENGINE) -> str:
    """What placement.read_capacity records for the component (the same two calls)."""
    cspec = render.component_spec(_spec(body), component)
    assert cspec is not None
    return component_shape(component.value, multinode.runner_templates(isvc, component, cspec)).rendering_hash


def execution(components: dict[str, str] | None) -> dict[str, str]:
    policy: dict[str, Any] = {"planID": "p1", "revision": 3, "sourceUID": "src", "clusterUID": "member-uid",
                              "pauseSurge": False}
    if components is not None:
        policy["demand"] = {"fingerprint": "f" * 64,
                            "components": [{"component": c, "renderingHash": h} for c, h in components.items()]}
    return {EXECUTION_ANNOTATION: json.dumps(policy)}
