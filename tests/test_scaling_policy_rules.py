"""spec.scalingPolicy's pure rule (rendering/scaling_policy.py): every mode, the rounding, the bounds, and
each refusal with its message."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from servingops.api_models.ome.autoscaling import ScalingPolicy
from servingops.api_models.ome.enums import ComponentType, ScalingMode
from servingops.rendering import scaling_policy as sp

pytestmark = pytest.mark.unit

ENGINE, DECODER, ROUTER = ComponentType.ENGINE, ComponentType.DECODER, ComponentType.ROUTER
PD = (ENGINE, DECODER)


def _policy(body: dict[str, Any]) -> ScalingPolicy:
    return ScalingPolicy.model_validate(body)


def test_nil_and_independent_coordinate_nothing() -> None:
    assert sp.plan(None, PD) is None
    assert sp.plan(_policy({}), PD) is None
    assert sp.plan(_policy({"mode": "Independent"}), PD) is None
    # A proportional block under Independent is kept for a later switch, not acted on.
    assert sp.plan(_policy({"mode": "Independent", "proportional": {"ratios": {"decoder": "0"}}}), PD) is None


def test_proportional_defaults_the_anchor_to_engine_and_parses_quantities() -> None:
    plan = sp.plan(_policy({"mode": "Proportional", "proportional": {"ratios": {"decoder": "0.25",
                                                                                 "router": "500m"}}}),
                   (ENGINE, DECODER, ROUTER))
    assert plan is not None and plan.anchor is ENGINE and not plan.pinned
    assert dict(plan.ratios) == {DECODER: Fraction(1, 4), ROUTER: Fraction(1, 2)}
    assert plan.describe(DECODER) == "x 1/4"
    integral = sp.plan(_policy({"mode": "Proportional", "proportional": {"ratios": {"decoder": 2}}}), PD)
    assert integral is not None and integral.ratios == {DECODER: Fraction(2)} and integral.describe(DECODER) == "x 2"


@pytest.mark.parametrize(("anchor", "ratio", "expected"), [
    (1, "0.25", 1), (4, "0.25", 1), (5, "0.25", 2), (8, "0.25", 2), (9, "0.25", 3),
    (1, "0.5", 1), (3, "0.5", 2), (4, "0.5", 2), (4, "1", 4), (4, "1.0", 4), (3, "2", 6),
    (30, "0.1", 3), (31, "0.1", 4), (3, "1.5", 5),
])
def test_followers_round_up(anchor: int, ratio: str, expected: int) -> None:
    plan = sp.plan(_policy({"mode": "Proportional", "proportional": {"ratios": {"decoder": ratio}}}), PD)
    assert plan is not None
    assert sp.desired_counts(plan, anchor, {DECODER: sp.Bounds(low=1)}) == {DECODER: expected}


def test_bounds_hold_a_proportional_follower() -> None:
    half = Fraction(1, 2)
    assert sp.follower_count(1, half, sp.Bounds(low=2)) == 2           # minReplicas
    assert sp.follower_count(10, half, sp.Bounds(low=1, high=3)) == 3  # maxReplicas
    assert sp.follower_count(0, half, sp.Bounds(low=1)) == 1           # unset min is 1
    assert sp.follower_count(0, half, sp.Bounds(low=0)) == 0           # minReplicas 0: to zero with the anchor
    assert sp.follower_count(4, half, sp.Bounds(low=5, high=3)) == 5   # max below min: min wins
    assert sp.bounds_of(None, None) == sp.Bounds(low=1)
    assert sp.bounds_of(0, None) == sp.Bounds(low=0)
    assert sp.bounds_of(3, 2) == sp.Bounds(low=3, high=3)
    assert sp.bounds_of(2, 6) == sp.Bounds(low=2, high=6)


def test_pinned_holds_every_other_component_at_the_anchors_count_exactly() -> None:
    plan = sp.plan(_policy({"mode": "Pinned"}), (ENGINE, DECODER, ROUTER))
    assert plan is not None and plan.pinned and plan.anchor is ENGINE
    assert set(plan.ratios) == {DECODER, ROUTER}
    assert plan.describe(DECODER) == "pinned"
    # Exactly the anchor's count: the follower's bounds do not apply.
    counts = sp.desired_counts(plan, 7, {DECODER: sp.Bounds(low=1, high=4), ROUTER: sp.Bounds(low=9)})
    assert counts == {DECODER: 7, ROUTER: 7}
    by_decoder = sp.plan(_policy({"mode": "Pinned", "proportional": {"anchor": "decoder"}}), PD)
    assert by_decoder is not None and by_decoder.anchor is DECODER and set(by_decoder.ratios) == {ENGINE}


def test_unlisted_and_absent_components_scale_independently() -> None:
    plan = sp.plan(_policy({"mode": "Proportional", "proportional": {"ratios": {"router": "1"}}}), PD)
    assert plan is not None and dict(plan.ratios) == {}   # the service sets no router: skipped
    plan = sp.plan(_policy({"mode": "Proportional", "proportional": {"ratios": {"decoder": "1"}}}),
                   (ENGINE, DECODER, ROUTER))
    assert plan is not None and set(plan.ratios) == {DECODER}  # router not listed: on its own


@pytest.mark.parametrize(("body", "present", "own", "message"), [
    ({"mode": "Proportional"}, PD, (), "mode Proportional requires the proportional block"),
    ({"mode": "Proportional", "proportional": {"anchor": "decoder", "ratios": {"engine": "1"}}}, (ENGINE,), (),
     "the anchor decoder is not a component of this service (it sets engine)"),
    ({"mode": "Pinned", "proportional": {"anchor": "router"}}, PD, (),
     "the anchor router is not a component of this service (it sets decoder, engine)"),
    ({"mode": "Proportional", "proportional": {"ratios": {"decoder": "0"}}}, PD, (),
     "the ratio of decoder must be greater than 0 (got '0')"),
    ({"mode": "Proportional", "proportional": {"ratios": {"decoder": "-0.5"}}}, PD, (),
     "the ratio of decoder must be greater than 0 (got '-0.5')"),
    ({"mode": "Proportional", "proportional": {"ratios": {"decoder": "half"}}}, PD, (),
     "the ratio of decoder ('half') is not a quantity"),
    ({"mode": "Proportional", "proportional": {"ratios": {"engine": "1"}}}, PD, (),
     "engine is the anchor and cannot follow itself"),
    ({"mode": "Pinned", "proportional": {"ratios": {"decoder": "1"}}}, PD, (),
     "ratios applies only to mode Proportional"),
    ({"mode": "Proportional", "proportional": {"ratios": {"decoder": "0.5"}}}, PD, (DECODER,),
     "decoder follows engine (Proportional), so it cannot have an autoscaler of its own"),
    ({"mode": "Pinned"}, PD, (DECODER,), "decoder follows engine (Pinned), so it cannot have an autoscaler"),
])
def test_refusals_say_what_is_wrong(body: dict[str, Any], present: tuple[ComponentType, ...],
                                    own: tuple[ComponentType, ...], message: str) -> None:
    with pytest.raises(sp.ScalingPolicyError) as raised:
        sp.plan(_policy(body), present, own)
    assert str(raised.value).startswith("scalingPolicy: ")
    assert message in str(raised.value)


def test_the_anchor_may_keep_its_own_scaler() -> None:
    plan = sp.plan(_policy({"mode": "Proportional", "proportional": {"ratios": {"decoder": "0.5"}}}), PD, (ENGINE,))
    assert plan is not None and plan.mode is ScalingMode.PROPORTIONAL
