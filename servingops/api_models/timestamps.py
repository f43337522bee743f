"""RFC 3339 timestamps as the apiserver writes them (metav1.Time: UTC, seconds, a trailing Z), read and
written in one way. Pure: a workflow may use them on times it has from `workflow.now()` or from an object."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def parse_rfc3339(value: Any) -> datetime | None:
    """A timestamp read from an object: None when absent or unreadable (a reader decides what that means,
    never a crash); a time without a zone is taken as UTC."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def rfc3339(moment: datetime) -> str:
    """metav1.Time's form: UTC, whole seconds, Z."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
