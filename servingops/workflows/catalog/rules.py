"""Pure rules of the catalog refresh: the refresh interval, the retry backoff, and whether a status write
is worth making. No Temporal, no I/O: unit-tested directly."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from servingops.api_models.durations import parse_duration
from servingops.api_models.timestamps import parse_rfc3339

DEFAULT_REFRESH_INTERVAL = timedelta(hours=1)
"""spec.refreshInterval omitted (or not a positive duration)."""
MIN_REFRESH_INTERVAL = timedelta(minutes=1)
"""A shorter interval is raised to this: a schedule firing every second would only queue skipped ticks."""
RETRY_BASE = timedelta(seconds=30)
RETRY_MAX = timedelta(hours=1)
"""The backoff of provider, registry and data-service failures: 30 s, 1 min, 2 min, ... at most 1 h."""
REFRESH_TIME_RESOLUTION = timedelta(hours=6)
"""A refresh that finds nothing changed writes nothing, unless status.lastSuccessfulRefreshTime is older
than this: then it writes that one field. So the field is exact whenever the index changed and at most this
stale otherwise, and a no-change refresh at the default interval writes nothing five times out of six."""


def refresh_interval(text: str | None) -> timedelta:
    if not text:
        return DEFAULT_REFRESH_INTERVAL
    try:
        interval = parse_duration(text)
    except ValueError:
        return DEFAULT_REFRESH_INTERVAL
    if interval <= timedelta(0):
        return DEFAULT_REFRESH_INTERVAL
    return max(interval, MIN_REFRESH_INTERVAL)


def retry_delay(failures: int) -> timedelta:
    """The wait before the next attempt after `failures` consecutive failed refreshes (1 or more)."""
    exponent = max(0, min(failures - 1, 20))
    return min(RETRY_BASE * (1 << exponent), RETRY_MAX)


def ready_of(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)


def condition_moved(status: dict[str, Any], ready: str, reason: str, message: str) -> bool:
    current = ready_of(status)
    return current is None or (current.get("status"), current.get("reason"), current.get("message")) != (
        ready, reason, message)


def fields_moved(status: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether any of `wanted` (camelCase status fields; None = absent) differs from the live status."""
    return any(status.get(key) != value for key, value in wanted.items())


def refresh_time_stale(status: dict[str, Any], now: datetime) -> bool:
    last = parse_rfc3339(status.get("lastSuccessfulRefreshTime"))
    return last is None or now - last >= REFRESH_TIME_RESOLUTION


__all__ = ["DEFAULT_REFRESH_INTERVAL", "MIN_REFRESH_INTERVAL", "REFRESH_TIME_RESOLUTION", "RETRY_BASE", "RETRY_MAX",
           "condition_moved", "fields_moved", "ready_of", "refresh_interval", "refresh_time_stale",
           "retry_delay"]
