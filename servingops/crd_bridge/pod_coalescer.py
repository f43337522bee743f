"""Per-workflow coalescing and pacing of payload-less wake-up signals. Pure state, no I/O, no
clock of its own: every call is given `now`, so tests drive it with a fake clock.

For each workflow id:
- one pending flag: any number of marks before the send become one signal (the engine re-reads
  all its pods, so the count carries nothing);
- at most one send in flight; marks that arrive meanwhile make one more send after it;
- consecutive sends start at least `interval` apart (a burst of 200 pods turning Ready becomes
  a handful of signals, not 200);
- a failed send is retried with exponential backoff, the pending flag kept.

The entries of idle workflows are forgotten once their interval has passed, so memory follows the
replicas that are busy, not every replica ever seen.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

INTERVAL = 0.2
MAX_BACKOFF = 5.0


@dataclass
class _Entry:
    pending_since: float | None = None
    """When the oldest change not yet sent was marked; None when nothing is pending."""
    in_flight: bool = False
    last_sent: float = float("-inf")
    failures: int = 0
    ticket: int = -1
    """The heap item that is current for this entry (older items are stale and skipped)."""


@dataclass(frozen=True)
class Due:
    """A signal to send now."""

    workflow_id: str
    pending_since: float


class Coalescer:
    def __init__(self, interval: float = INTERVAL, max_backoff: float = MAX_BACKOFF) -> None:
        self.interval = interval
        self.max_backoff = max_backoff
        self._entries: dict[str, _Entry] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._tickets = itertools.count()

    def __len__(self) -> int:
        """Workflows with a signal pending (in flight not counted)."""
        return sum(1 for e in self._entries.values() if e.pending_since is not None)

    def tracked(self) -> int:
        """Workflows the coalescer holds an entry for (pending, in flight or within their interval)."""
        return len(self._entries)

    def mark(self, workflow_id: str, now: float) -> bool:
        """Something changed for `workflow_id`. False when it joined a signal already pending."""
        entry = self._entries.setdefault(workflow_id, _Entry())
        if entry.pending_since is not None:
            return False
        entry.pending_since = now
        if not entry.in_flight:
            self._schedule(workflow_id, entry, max(now, entry.last_sent + self.interval))
        return True

    def take(self, now: float) -> Due | float | None:
        """The next signal to send (it is in flight until finish()), else the seconds until one is
        due, else None when nothing is pending."""
        while self._heap:
            due, ticket, workflow_id = self._heap[0]
            entry = self._entries.get(workflow_id)
            if entry is None or entry.ticket != ticket:
                heapq.heappop(self._heap)  # stale
                continue
            if due > now:
                return due - now
            heapq.heappop(self._heap)
            if entry.pending_since is None:
                # An idle entry whose interval has passed: nothing left to pace.
                del self._entries[workflow_id]
                continue
            since, entry.pending_since = entry.pending_since, None
            entry.in_flight = True
            entry.last_sent = now
            entry.ticket = -1
            return Due(workflow_id, since)
        return None

    def finish(self, due: Due, now: float, *, failed: bool = False) -> None:
        """The send of `due` ended; when it failed, the change is pending again and retried later."""
        entry = self._entries[due.workflow_id]
        entry.in_flight = False
        if failed:
            entry.failures += 1
            entry.pending_since = min(due.pending_since, entry.pending_since or due.pending_since)
            backoff = min(self.interval * 2 ** (entry.failures - 1), self.max_backoff)
            self._schedule(due.workflow_id, entry, now + backoff)
            return
        entry.failures = 0
        # Pending again (marked while in flight): send after the interval. Idle: keep the entry
        # until then so that a mark right now is still paced, and forget it after.
        self._schedule(due.workflow_id, entry, max(now, entry.last_sent + self.interval))

    def _schedule(self, workflow_id: str, entry: _Entry, due: float) -> None:
        entry.ticket = next(self._tickets)
        heapq.heappush(self._heap, (due, entry.ticket, workflow_id))
