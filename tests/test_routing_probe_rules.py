"""The routing health probe's rules (rendering/routing_probe.py): what an attempt means and how the
hysteresis gate moves, as upstream OME's "Configure routing health probes" states them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from servingops.api_models.ome.enums import ProbeResult, RoutingAllFailedPolicy
from servingops.api_models.ome.routing import RoutingProbeSpec
from servingops.rendering.routing_probe import (
    Attempt,
    InvalidProbePolicy,
    ProbeState,
    advance,
    classify,
    effective_policy,
)

pytestmark = pytest.mark.unit

SPEC = RoutingProbeSpec(path="/v1/models", method="GET", accept_statuses=[200], gate_statuses=[404, 500, 502, 503],
                        period="10s", timeout="3s", failure_threshold=3, success_threshold=2,
                        all_failed_policy=RoutingAllFailedPolicy.PRESERVE_TRAFFIC)
POLICY = effective_policy(SPEC, None)
T0 = datetime(2026, 12, 6, tzinfo=UTC)


def run(*attempts: Attempt, state: ProbeState | None = None) -> list[ProbeState]:
    assert POLICY is not None
    states = []
    for i, attempt in enumerate(attempts):
        state = advance(POLICY, state, attempt, T0 + timedelta(seconds=10 * i))
        states.append(state)
    return states


OK, DOWN, MOVED = Attempt(200), Attempt(503), Attempt(301)
REFUSED = Attempt(error="connection refused")


def test_an_attempt_is_passing_failing_or_unknown() -> None:
    assert POLICY is not None
    assert classify(POLICY, OK) == (ProbeResult.PASSING, "HTTP 200")
    assert classify(POLICY, DOWN) == (ProbeResult.FAILING, "HTTP 503")
    assert classify(POLICY, REFUSED) == (ProbeResult.FAILING, "transport error: connection refused")
    assert classify(POLICY, MOVED) == (ProbeResult.UNKNOWN, "HTTP 301 (not in accept or gate list)")


def test_failure_threshold_failures_in_a_row_gate_and_success_threshold_passes_lift() -> None:
    states = run(DOWN, REFUSED, DOWN, OK, DOWN, OK, OK)
    assert [s.gated for s in states] == [False, False, True, True, True, True, False]
    assert [s.record.consecutive_failures for s in states] == [1, 2, 3, None, 1, None, None]
    third = states[2].record
    assert (third.result, third.message, third.last_probe_time) == (ProbeResult.FAILING, "HTTP 503",
                                                                    T0 + timedelta(seconds=20))
    assert POLICY is not None and third.policy_digest == POLICY.digest


def test_a_pass_breaks_the_failure_run() -> None:
    assert not any(s.gated for s in run(DOWN, DOWN, OK, DOWN, DOWN))


def test_unknown_leaves_counts_and_gate_as_they_are() -> None:
    states = run(DOWN, DOWN, MOVED, DOWN)
    assert [s.record.consecutive_failures for s in states] == [1, 2, 2, 3]
    assert states[-1].gated and states[2].record.result == ProbeResult.UNKNOWN
    gated = run(DOWN, DOWN, DOWN, OK, MOVED, OK)
    assert [s.gated for s in gated] == [False, False, True, True, True, False]


def test_a_changed_policy_lifts_the_gate_and_starts_over() -> None:
    gated = run(DOWN, DOWN, DOWN)[-1]
    other = effective_policy(SPEC.model_copy(update={"failure_threshold": 5}), None)
    assert other is not None and other.digest != (POLICY.digest if POLICY else "")
    after = advance(other, gated, DOWN, T0)
    assert not after.gated and after.record.consecutive_failures == 1


def test_the_effective_policy() -> None:
    operator = SPEC.model_copy(update={"path": "/health"})
    assert effective_policy(None, operator) == effective_policy(operator, None)
    chosen = effective_policy(SPEC, operator)
    assert chosen is not None and chosen.path == "/v1/models"  # the service's block replaces the operator's
    assert (chosen.period_s, chosen.timeout_s) == (10.0, 3.0)
    assert effective_policy(RoutingProbeSpec(disabled=True), operator) is None
    assert effective_policy(None, None) is None
    with pytest.raises(InvalidProbePolicy, match="status 503 is in both acceptStatuses and gateStatuses"):
        effective_policy(SPEC.model_copy(update={"accept_statuses": [200, 503]}), None)
    with pytest.raises(InvalidProbePolicy, match="leaves out period"):
        effective_policy(SPEC.model_copy(update={"period": None}), None)
