"""The waits of the tests that poll the real stack: a probe, a deadline, and a failure that says what
never happened (`wait_until`) or what stopped holding (`hold`), the probe's last answer, anything else
the caller knows (`detail`: the object's status) and, when a process is named, the tail of its log; a
named process that dies fails the wait at once."""

from __future__ import annotations

import asyncio
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
        _alive(process, f"waiting for {what}")
        time.sleep(interval)
    raise AssertionError(f"{what} never happened (last: {value!r}){_context(process, detail)}")


async def wait_until_async(what: str, probe: Callable[[], T], seconds: float = 120, interval: float = 0.3) -> T:
    """wait_until for an async test: the (blocking) probe runs in a thread, so the event loop (a
    time-skipping server's client, an activity environment) goes on meanwhile."""
    deadline = time.monotonic() + seconds
    value: Any = None
    while time.monotonic() < deadline:
        value = await asyncio.to_thread(probe)
        if value:
            return value  # type: ignore[no-any-return]
        await asyncio.sleep(interval)
    raise AssertionError(f"{what} never happened (last: {value!r})")


def hold(what: str, probe: Callable[[], object], seconds: float, process: ManagedProcess | None = None,
         interval: float = 0.5, detail: Callable[[], object] | None = None) -> None:
    """The probe answers truthy on every poll for `seconds` (what must not change while nothing asks
    it to); AssertionError at its first falsy answer, or once the named process has died."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = probe()
        if not value:
            raise AssertionError(f"{what} did not hold (got: {value!r}){_context(process, detail)}")
        _alive(process, f"{what} was to hold")
        time.sleep(interval)


def _alive(process: ManagedProcess | None, during: str) -> None:
    if process is not None and not process.alive:
        raise AssertionError(f"{process.name} died while {during}:\n{process.log_tail(60)}")


def _context(process: ManagedProcess | None, detail: Callable[[], object] | None) -> str:
    extra = f"\n{detail()}" if detail is not None else ""
    log = f"\n{process.name} log:\n{process.log_tail(60)}" if process is not None else ""
    return extra + log
