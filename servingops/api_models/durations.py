"""Go duration strings, as metav1.Duration spells them on the wire. Parsed in one place so the
workflows and the operator configuration agree on what "90s" means."""

from __future__ import annotations

import re
from datetime import timedelta

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> timedelta:
    """A Go duration string ("1h30m", "90s", "500ms", "0") as metav1.Duration spells it."""
    value = text.strip()
    if value in ("0", ""):
        return timedelta(0)
    sign = -1 if value.startswith("-") else 1
    body = value.lstrip("+-")
    position = 0
    seconds = 0.0
    for match in _DURATION_PART.finditer(body):
        if match.start() != position:
            break
        seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(body) or position == 0:
        raise ValueError(f"invalid duration {text!r}")
    return timedelta(seconds=sign * seconds)
