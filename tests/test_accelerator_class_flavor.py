"""The KueueResourceFlavorSynced rule (activities/capacity/class_flavor.py): when a flavor is created, and
what the condition says."""

from __future__ import annotations

import pytest

from servingops.activities.capacity.class_flavor import FlavorState, flavor_condition, should_create

pytestmark = pytest.mark.unit

SELECTOR = {"nvidia.com/gpu.product": "A100"}


def test_created_only_when_absent_served_and_a_selector_to_give() -> None:
    assert should_create(FlavorState(name="f", desired_labels=SELECTOR))
    assert not should_create(FlavorState(name="f", desired_labels=SELECTOR, exists=True, node_labels={"x": "y"}))
    assert not should_create(FlavorState(name="f", desired_labels={}))
    assert not should_create(FlavorState(name="f", desired_labels=SELECTOR, served=False))


@pytest.mark.parametrize(("state", "status", "reason"), [
    (FlavorState(name="f", desired_labels=SELECTOR, exists=True, node_labels=SELECTOR), "True", "FlavorMatches"),
    (FlavorState(name="f", desired_labels=SELECTOR, exists=True, node_labels={"zone": "a"}), "False",
     "FlavorNodeLabelsDiffer"),
    (FlavorState(name="f", desired_labels={}), "False", "FlavorNeedsNodeSelector"),
    (FlavorState(name="f", desired_labels=SELECTOR, served=False), "False", "KueueNotServed"),
])
def test_the_condition(state: FlavorState, status: str, reason: str) -> None:
    condition = flavor_condition(state)
    assert (condition.type, condition.status, condition.reason) == ("KueueResourceFlavorSynced", status, reason)
    assert condition.message
