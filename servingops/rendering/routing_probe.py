"""The routing health probe's rules (seed 004 TrafficMapProbe; upstream OME's "Configure routing health
probes"): what one attempt's answer means, and how the hysteresis gate moves. Pure; the prober activity
sends the request and the routing workflow keeps the state.

- An attempt is Passing when its status is in acceptStatuses, Failing when it is in gateStatuses or the
  request failed (DNS, connection, TLS, or no full response within the timeout), Unknown otherwise (a
  redirect, say). Unknown leaves the counts and the gate as they are: it never moves traffic.
- failureThreshold Failing attempts in a row gate the home; successThreshold Passing attempts in a row lift
  the gate.
- The state belongs to one effective policy (its digest): any change of the policy lifts the gates and
  starts the counts over.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from servingops.api_models.durations import parse_duration
from servingops.api_models.ome.enums import ProbeResult, RoutingAllFailedPolicy
from servingops.api_models.ome.routing import RoutingProbeSpec
from servingops.api_models.ome.traffic_map import TrafficMapProbe


class InvalidProbePolicy(ValueError):
    """A probe the apiserver accepted but that cannot run (a status in both lists): the routing workflow
    stops probing the service and keeps its last table until it is fixed."""


@dataclass(frozen=True)
class ProbePolicy:
    """An enabled probe with every field set (the CRD's rules require all nine)."""

    path: str
    method: str
    accept_statuses: frozenset[int]
    gate_statuses: frozenset[int]
    period_s: float
    timeout_s: float
    failure_threshold: int
    success_threshold: int
    all_failed_policy: RoutingAllFailedPolicy

    @property
    def digest(self) -> str:
        body = json.dumps({
            "path": self.path, "method": self.method, "accept": sorted(self.accept_statuses),
            "gate": sorted(self.gate_statuses), "period": self.period_s, "timeout": self.timeout_s,
            "failureThreshold": self.failure_threshold, "successThreshold": self.success_threshold,
            "allFailedPolicy": self.all_failed_policy.value,
        }, sort_keys=True)  # fmt: skip
        return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def effective_policy(service: RoutingProbeSpec | None, operator: RoutingProbeSpec | None) -> ProbePolicy | None:
    """The service's probe block replaces the operator's as a whole; `disabled: true` or no block at either
    level: no probing."""
    spec = service if service is not None else operator
    if spec is None or spec.disabled:
        return None
    missing = spec.missing()
    if missing:
        raise InvalidProbePolicy(f"spec.routing.probe leaves out {', '.join(missing)}")
    accept, gate = frozenset(spec.accept_statuses or ()), frozenset(spec.gate_statuses or ())
    both = sorted(accept & gate)
    if both:
        raise InvalidProbePolicy(f"spec.routing.probe status {both[0]} is in both acceptStatuses and gateStatuses")
    return ProbePolicy(
        path=str(spec.path), method=str(spec.method), accept_statuses=accept, gate_statuses=gate,
        period_s=parse_duration(str(spec.period)).total_seconds(),
        timeout_s=parse_duration(str(spec.timeout)).total_seconds(),
        failure_threshold=spec.failure_threshold or 1, success_threshold=spec.success_threshold or 1,
        all_failed_policy=spec.all_failed_policy or RoutingAllFailedPolicy.DRAIN,
    )  # fmt: skip


@dataclass(frozen=True)
class Attempt:
    """One probe request's outcome: a status, or the transport error that prevented one."""

    status: int | None = None
    error: str | None = None


def classify(policy: ProbePolicy, attempt: Attempt) -> tuple[ProbeResult, str]:
    if attempt.status is None:
        return ProbeResult.FAILING, f"transport error: {attempt.error or 'no response'}"
    if attempt.status in policy.accept_statuses:
        return ProbeResult.PASSING, f"HTTP {attempt.status}"
    if attempt.status in policy.gate_statuses:
        return ProbeResult.FAILING, f"HTTP {attempt.status}"
    return ProbeResult.UNKNOWN, f"HTTP {attempt.status} (not in accept or gate list)"


@dataclass(frozen=True)
class ProbeState:
    """One home's probe record as the TrafficMap shows it, plus the passes in a row (which the map does
    not carry; the routing workflow keeps them)."""

    record: TrafficMapProbe
    consecutive_successes: int = 0

    @property
    def gated(self) -> bool:
        return bool(self.record.gated)


def advance(policy: ProbePolicy, previous: ProbeState | None, attempt: Attempt, at: datetime) -> ProbeState:
    """The state after one attempt. A previous state from another policy is dropped (gates lifted)."""
    if previous is not None and previous.record.policy_digest != policy.digest:
        previous = None
    gated = previous.gated if previous else False
    failures = (previous.record.consecutive_failures or 0) if previous else 0
    successes = previous.consecutive_successes if previous else 0
    result, message = classify(policy, attempt)
    if result == ProbeResult.FAILING:
        failures, successes = failures + 1, 0
        gated = gated or failures >= policy.failure_threshold
    elif result == ProbeResult.PASSING:
        failures, successes = 0, successes + 1
        if gated and successes >= policy.success_threshold:
            gated = False
    record = TrafficMapProbe(policy_digest=policy.digest, result=result, gated=gated or None,
                             last_probe_time=at, consecutive_failures=failures or None, message=message)
    return ProbeState(record, successes)
