"""The routing capacity poll's rules (seed 004 RoutingCapacitySpec and TrafficMapCapacity; upstream OME's
"Tune routing capacity polling"): what a home's report says and which ceiling its readings give. Pure; the
poller activity sends the request and the routing workflow keeps each home's window.

- A poll is one request to the entry's endpoint + path. The only format is `Report`: status 200 and
  `{"servable": <int >= 0>, "observedAt": <RFC 3339 with a zone>}`. Anything else is a failed poll.
- A home keeps its last `samples` readings; its ceiling is the `quorum`-th lowest of those still younger
  than `maxAge`, so one low reading cannot set it alone.
- A failed poll drops the readings: the home has no ceiling (its admitted replicas count) until `quorum`
  polls in a row succeed again. A network fault can leave a home more traffic than it can serve for a
  while, never take its traffic away.
- A ceiling only lowers `allocated`; the routing table records it as `reported` either way.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from servingops.api_models.durations import parse_duration
from servingops.api_models.ome.routing import RoutingCapacitySpec

FORMATS = ("Report",)


class InvalidCapacityPolicy(ValueError):
    """A poll the apiserver accepted but that cannot run: the routing workflow stops polling the service
    and keeps its last table until it is fixed."""


@dataclass(frozen=True)
class CapacityPolicy:
    path: str
    method: str
    format: str
    samples: int
    quorum: int
    period_s: float
    timeout_s: float
    max_age_s: float

    @property
    def digest(self) -> str:
        body = json.dumps(self.__dict__, sort_keys=True)
        return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def effective_policy(service: RoutingCapacitySpec | None,
                     operator: RoutingCapacitySpec | None) -> CapacityPolicy | None:  # fmt: skip
    """The service's block replaces the operator's as a whole; `disabled: true` or no block: no polling."""
    spec = service if service is not None else operator
    if spec is None or spec.disabled:
        return None
    missing = spec.missing()
    if missing:
        raise InvalidCapacityPolicy(f"spec.routing.capacity leaves out {', '.join(missing)}")
    if spec.format not in FORMATS:
        raise InvalidCapacityPolicy(f"spec.routing.capacity.format {spec.format!r} is not registered "
                                    f"(available: {list(FORMATS)})")  # fmt: skip
    if spec.options:
        raise InvalidCapacityPolicy("spec.routing.capacity.options: the Report format takes none")
    policy = CapacityPolicy(
        path=str(spec.path), method=str(spec.method), format=str(spec.format), samples=spec.samples or 1,
        quorum=spec.quorum or 1, period_s=parse_duration(str(spec.period)).total_seconds(),
        timeout_s=parse_duration(str(spec.timeout)).total_seconds(),
        max_age_s=parse_duration(str(spec.max_age)).total_seconds(),
    )  # fmt: skip
    if policy.max_age_s < policy.quorum * policy.period_s:
        raise InvalidCapacityPolicy(f"spec.routing.capacity.maxAge ({spec.max_age}) must span at least quorum "
                                    f"({policy.quorum}) period intervals")  # fmt: skip
    return policy


@dataclass(frozen=True)
class Reading:
    servable: int
    observed_at: datetime


@dataclass(frozen=True)
class PollOutcome:
    """A usable reading, or why the poll failed."""

    reading: Reading | None = None
    failure: str | None = None


def parse_report(status: int | None, body: bytes, error: str | None, now: datetime) -> PollOutcome:
    """One poll's answer as a reading, or the fallback reason it gives."""
    if status is None:
        return PollOutcome(failure=f"capacity endpoint unreachable: {error or 'no response'}")
    if status != 200:
        return PollOutcome(failure=f"capacity endpoint returned HTTP {status}")
    try:
        report = json.loads(body)
        servable, observed = report["servable"], report["observedAt"]
        if not isinstance(servable, int) or isinstance(servable, bool) or servable < 0:
            raise ValueError("servable must be a whole number, 0 or more")
        observed_at = datetime.fromisoformat(str(observed).replace("Z", "+00:00"))
        if observed_at.tzinfo is None:
            raise ValueError("observedAt must carry a time zone")
    except (ValueError, KeyError, TypeError) as exc:
        return PollOutcome(failure=f"capacity report is not valid: {exc}")
    if observed_at > now:
        return PollOutcome(failure="capacity report timestamp is in the future")
    return PollOutcome(Reading(servable, observed_at))


@dataclass(frozen=True)
class CapacityWindow:
    """One home's recent readings under one policy (its digest); a failure's reason until readings return."""

    policy_digest: str
    readings: tuple[Reading, ...] = ()
    failure: str | None = None


def record(policy: CapacityPolicy, window: CapacityWindow | None, outcome: PollOutcome) -> CapacityWindow:
    """The window after one poll. Another policy's window is dropped (the home starts over)."""
    if window is None or window.policy_digest != policy.digest:
        window = CapacityWindow(policy.digest)
    if outcome.reading is None:
        return CapacityWindow(policy.digest, (), outcome.failure)
    return CapacityWindow(policy.digest, (*window.readings, outcome.reading)[-policy.samples:])


@dataclass(frozen=True)
class Ceiling:
    value: int | None
    """The quorum-th lowest fresh reading; None: no ceiling (the control plane's count stands)."""
    fallback_reason: str | None = None


def ceiling(policy: CapacityPolicy, window: CapacityWindow | None, now: datetime) -> Ceiling:
    if window is None or window.policy_digest != policy.digest:
        return Ceiling(None, "no capacity report yet")
    if window.failure is not None:
        return Ceiling(None, window.failure)
    max_age = timedelta(seconds=policy.max_age_s)
    fresh = [r for r in window.readings if now - r.observed_at < max_age]
    if len(fresh) >= policy.quorum:
        return Ceiling(sorted(r.servable for r in fresh)[policy.quorum - 1])
    if not window.readings:
        return Ceiling(None, "no capacity report yet")
    if not fresh:
        return Ceiling(None, f"capacity report is stale (at least configured maximum age {_seconds(max_age)})")
    expired = len(fresh) < len(window.readings)
    return Ceiling(None, f"capacity report awaiting quorum{' after stale samples expired' if expired else ''} "
                         f"({len(fresh)}/{policy.quorum} accepted samples)")  # fmt: skip


def _seconds(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds}s"
