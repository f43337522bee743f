"""Condition bookkeeping keeps lastTransitionTime while a status is unchanged."""

from datetime import UTC, datetime

import pytest

from servingops.api_models.conditions import merge_conditions
from servingops.api_models.refs import ConditionUpdate

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 2, tzinfo=UTC)


def test_new_condition_is_stamped() -> None:
    merged = merge_conditions(None, [ConditionUpdate(type="Ready", status="False", reason="Pending")],
                              generation=3, now=T0)
    assert merged == [{"type": "Ready", "status": "False", "reason": "Pending", "message": "",
                       "observedGeneration": 3, "lastTransitionTime": "2026-01-01T00:00:00Z"}]


def test_unchanged_status_keeps_transition_time_but_updates_the_rest() -> None:
    first = merge_conditions(None, [ConditionUpdate(type="Ready", status="False", reason="Pending")],
                             generation=1, now=T0)
    second = merge_conditions(first, [ConditionUpdate(type="Ready", status="False", reason="Publishing",
                                                      message="50%")], generation=2, now=T1)
    assert second[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert (second[0]["reason"], second[0]["message"], second[0]["observedGeneration"]) == ("Publishing", "50%", 2)


def test_changed_status_moves_transition_time_and_keeps_other_types() -> None:
    first = merge_conditions(None, [ConditionUpdate(type="Ready", status="False", reason="Pending"),
                                    ConditionUpdate(type="Validated", status="True", reason="Ok")],
                             generation=1, now=T0)
    second = merge_conditions(first, [ConditionUpdate(type="Ready", status="True", reason="Published")],
                              generation=1, now=T1)
    by_type = {c["type"]: c for c in second}
    assert by_type["Ready"]["lastTransitionTime"] == "2026-01-02T00:00:00Z"
    assert by_type["Validated"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
