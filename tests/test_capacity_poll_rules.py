"""The routing capacity poll's rules (rendering/capacity_poll.py): the Report format, the quorum-th lowest
fresh reading as the ceiling, and the fallbacks, as upstream OME's "Tune routing capacity polling" states."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from servingops.api_models.ome.routing import RoutingCapacitySpec
from servingops.rendering.capacity_poll import (
    CapacityWindow,
    InvalidCapacityPolicy,
    PollOutcome,
    Reading,
    ceiling,
    effective_policy,
    parse_report,
    record,
)

pytestmark = pytest.mark.unit

SPEC = RoutingCapacitySpec(path="/capacity", method="GET", format="Report", samples=3, quorum=2, period="10s",
                           timeout="3s", max_age="30s")
POLICY = effective_policy(SPEC, None)
NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)


def report(servable: int, age_s: float = 0) -> PollOutcome:
    body = json.dumps({"servable": servable, "observedAt": (NOW - timedelta(seconds=age_s)).isoformat()})
    return parse_report(200, body.encode(), None, NOW)


def window(*outcomes: PollOutcome) -> CapacityWindow | None:
    assert POLICY is not None
    state = None
    for outcome in outcomes:
        state = record(POLICY, state, outcome)
    return state


def test_the_quorum_th_lowest_reading_is_the_ceiling() -> None:
    assert POLICY is not None
    # quorum 2: 4, 1, 4 give 4 (one low reading cannot set it alone); 1, 4, 1 give 1.
    assert ceiling(POLICY, window(report(4), report(1), report(4)), NOW).value == 4
    assert ceiling(POLICY, window(report(1), report(4), report(1)), NOW).value == 1
    # Only the last `samples` readings count.
    assert ceiling(POLICY, window(report(0), report(0), report(5), report(5), report(5)), NOW).value == 5


def test_a_failed_poll_drops_the_ceiling_until_quorum_polls_in_a_row() -> None:
    assert POLICY is not None
    failed = PollOutcome(failure="capacity endpoint returned HTTP 404")
    after_failure = window(report(1), report(1), failed)
    assert ceiling(POLICY, after_failure, NOW).value is None
    assert ceiling(POLICY, after_failure, NOW).fallback_reason == "capacity endpoint returned HTTP 404"
    one = record(POLICY, after_failure, report(2))
    assert ceiling(POLICY, one, NOW).fallback_reason == "capacity report awaiting quorum (1/2 accepted samples)"
    assert ceiling(POLICY, record(POLICY, one, report(2)), NOW).value == 2


def test_stale_readings_expire() -> None:
    assert POLICY is not None
    assert ceiling(POLICY, window(report(3, 40), report(3, 35)), NOW).fallback_reason == (
        "capacity report is stale (at least configured maximum age 30s)")
    assert ceiling(POLICY, window(report(3, 40), report(3, 5)), NOW).fallback_reason == (
        "capacity report awaiting quorum after stale samples expired (1/2 accepted samples)")
    assert ceiling(POLICY, None, NOW).fallback_reason == "no capacity report yet"


def test_the_report_format() -> None:
    assert report(4).reading == Reading(4, NOW)
    assert parse_report(None, b"", "connection refused", NOW).failure == (
        "capacity endpoint unreachable: connection refused")
    assert parse_report(503, b"", None, NOW).failure == "capacity endpoint returned HTTP 503"
    future = json.dumps({"servable": 1, "observedAt": (NOW + timedelta(seconds=5)).isoformat()}).encode()
    assert parse_report(200, future, None, NOW).failure == "capacity report timestamp is in the future"
    for body in (b"{", b'{"servable": -1, "observedAt": "2026-12-06T12:00:00Z"}',
                 b'{"servable": 1.5, "observedAt": "2026-12-06T12:00:00Z"}', b'{"servable": 1}',
                 b'{"servable": 1, "observedAt": "2026-12-06T12:00:00"}'):
        failure = parse_report(200, body, None, NOW).failure
        assert failure is not None and failure.startswith("capacity report is not valid"), body
    assert parse_report(200, b'{"servable": 0, "observedAt": "2026-12-06T11:59:59Z"}', None, NOW).reading == (
        Reading(0, NOW - timedelta(seconds=1)))


def test_a_changed_policy_starts_the_window_over_and_the_policy_is_checked() -> None:
    assert POLICY is not None
    other = effective_policy(SPEC.model_copy(update={"samples": 4}), None)
    assert other is not None and other.digest != POLICY.digest
    full = window(report(1), report(1))
    assert ceiling(other, full, NOW).fallback_reason == "no capacity report yet"
    assert record(other, full, report(3)).readings == (Reading(3, NOW),)
    assert effective_policy(RoutingCapacitySpec(disabled=True), SPEC) is None
    assert effective_policy(None, SPEC) == POLICY
    with pytest.raises(InvalidCapacityPolicy, match="must span at least quorum"):
        effective_policy(SPEC.model_copy(update={"max_age": "15s"}), None)
    with pytest.raises(InvalidCapacityPolicy, match="is not registered"):
        effective_policy(SPEC.model_copy(update={"format": "report"}), None)
    with pytest.raises(InvalidCapacityPolicy, match="takes none"):
        effective_policy(SPEC.model_copy(update={"options": {"a": "b"}}), None)
