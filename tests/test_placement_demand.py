"""A member's check of placement's demand contract (activities/serving/placement_demand.py), pure: the
member renders each Engine/Decoder component as placement.read_capacity did and holds a service whose
rendering differs from the accepted plan's. The same check against the real apiserver, through
ServingActivities.observe and ensure_revision, is in tests/test_serving_activities.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from servingops.activities.serving.placement_demand import DEMAND_MISMATCH, EXECUTION_UNREADABLE, demand_hold
from servingops.api_models.ome.placement import EXECUTION_ANNOTATION
from tests.support.placement_demand import DECODER, _spec, execution, rendering_hash

pytestmark = pytest.mark.unit

SPEC: dict[str, Any] = {"engine": {"minReplicas": 1, "runner": {
    "name": "engine", "image": "registry.invalid/engine:v1",
    "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}}}}








def test_a_service_no_plan_or_a_static_plan_governs_is_never_held() -> None:
    assert demand_hold("chat", {}, _spec(SPEC)) is None
    assert demand_hold("chat", execution(None), _spec(SPEC)) is None  # Single, All, Split carry no demand


def test_the_rendering_placement_accepted_projects() -> None:
    assert demand_hold("chat", execution({"engine": rendering_hash("chat", SPEC)}), _spec(SPEC)) is None


def test_another_rendering_is_held_with_the_component_and_the_plan_named() -> None:
    accepted = rendering_hash("chat", SPEC)
    changed = copy.deepcopy(SPEC)
    changed["engine"]["runner"]["resources"]["requests"]["nvidia.com/gpu"] = "8"  # a runtime asking for more
    hold = demand_hold("chat", execution({"engine": accepted}), _spec(changed))
    assert hold is not None and hold.reason == DEMAND_MISMATCH
    assert hold.message.startswith(f"engine renders rendering {rendering_hash('chat', changed)[:12]} here, plan p1 "
                                   f"revision 3 accepted rendering {accepted[:12]}"), hold.message
    # The rendering is the member's own: the same spec under another service name renders other pods.
    assert demand_hold("other", execution({"engine": accepted}), _spec(SPEC)) is not None


def test_the_contract_must_name_exactly_the_declared_components() -> None:
    accepted = rendering_hash("chat", SPEC)
    extra = demand_hold("chat", execution({"engine": accepted, "decoder": "d" * 64}), _spec(SPEC))
    assert extra is not None and "decoder renders no such component here" in extra.message
    with_decoder = {**SPEC, "decoder": copy.deepcopy(SPEC["engine"])}
    missing = demand_hold("chat", execution({"engine": rendering_hash("chat", with_decoder)}), _spec(with_decoder))
    assert missing is not None and "accepted no such component" in missing.message
    both = {"engine": rendering_hash("chat", with_decoder),
            "decoder": rendering_hash("chat", with_decoder, DECODER)}
    assert demand_hold("chat", execution(both), _spec(with_decoder)) is None


def test_an_unreadable_execution_annotation_is_held_not_ignored() -> None:
    for text in ("{not json", json.dumps({"planID": "p1"})):
        hold = demand_hold("chat", {EXECUTION_ANNOTATION: text}, _spec(SPEC))
        assert hold is not None and hold.reason == EXECUTION_UNREADABLE
        assert EXECUTION_ANNOTATION in hold.message
