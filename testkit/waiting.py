"""The one wait of the tests that poll the real stack: a probe, a deadline, and a failure that says what
never happened, the probe's last answer, anything else the caller knows (`detail`: the object's status)
and, when a process is named, the tail of its log; a named process that dies fails the wait at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from devstack.process import ManagedProcess

T = TypeVar("T")


def wait_until(what: str, probe: Callable[[], T], process: ManagedProcess | None = None, timeout: float = 120,
               interval: float = 0.5, detail: Callable[[], object] | None = None) -> T:
    """The probe's first truthy answer; AssertionError once `timeout` seconds pass without one."""
    deadline = time.monotonic() + timeout
    value: Any = None
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value  # type: ignore[no-any-return]
        if process is not None and not process.alive:
            raise AssertionError(f"{process.name} died while waiting for {what}:\n{process.log_tail(60)}")
        time.sleep(interval)
    extra = f"\n{detail()}" if detail is not None else ""
    log = f"\n{process.name} log:\n{process.log_tail(60)}" if process is not None else ""
    raise AssertionError(f"{what} never happened (last: {value!r}){extra}{log}")
