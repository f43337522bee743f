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


@pytest.mark.parametrize("status", [403, 422])
def test_a_refused_create_is_an_answer_not_an_exception(status: int) -> None:
    """acceleratorclass.ensure_flavor with the apiserver's refusal stood in (a 403 needs an identity without the
    rule): `refused`, not an ApiException the worker's interceptor would make permanent; other errors raise."""
    from typing import Any

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from servingops.activities.capacity.accelerator_class import AcceleratorClassActivities
    from servingops.activities.capacity.class_types import ClassFlavorInput
    from servingops.api_models.ome.accelerator_class import AcceleratorClass
    from servingops.api_models.refs import ObjectRef

    answer = [status]

    def refuse(*_: Any, **__: Any) -> None:
        raise ApiException(status=answer[0], reason="Forbidden")

    acts = AcceleratorClassActivities(client.ApiClient())
    acts._custom.create_cluster_custom_object = refuse  # type: ignore[method-assign]
    request = ClassFlavorInput(accelerator_class=ObjectRef.of(AcceleratorClass, "a100"), flavor="f",
                               node_labels=SELECTOR)
    out = acts.ensure_flavor(request)
    assert out.served and not out.created and out.refused.startswith(f"{status} Forbidden")
    assert flavor_condition(FlavorState(name="f", desired_labels=SELECTOR, refused=out.refused)).reason \
        == "FlavorCreateRefused"
    answer[0] = 500  # : the apiserver's failure, retried by the activity's policy
    with pytest.raises(ApiException):
        acts.ensure_flavor(request)
