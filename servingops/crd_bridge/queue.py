"""A bounded, per-object coalescing work queue between watch threads and async dispatchers.

- Coalescing: while an object waits, a newer event replaces the older one (the newest wins), so a
  storm of updates to one object costs one dispatch.
- Per-object serialisation: an object being dispatched is not handed out again until done();
  events that arrive meanwhile wait and are dispatched after.
- Bounded: producers block when `maxsize` distinct objects wait, so memory cannot grow without
  bound; replacing a waiting object's event never blocks.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

Item = TypeVar("Item")


class CoalescingQueue(Generic[Item]):
    def __init__(self, loop: asyncio.AbstractEventLoop, maxsize: int = 10_000) -> None:
        self._loop = loop
        self._maxsize = maxsize
        self._cond = threading.Condition()
        self._pending: dict[Hashable, Item] = {}
        self._ready: deque[Hashable] = deque()
        self._inflight: set[Hashable] = set()
        self._wakeup = asyncio.Event()
        self.coalesced = 0

    def __len__(self) -> int:
        with self._cond:
            return len(self._pending)

    def put(self, key: Hashable, item: Item, timeout: float | None = None) -> bool:
        """From any thread. Blocks while the queue is full; False if `timeout` ran out."""
        with self._cond:
            if key not in self._pending and not self._cond.wait_for(
                lambda: len(self._pending) < self._maxsize, timeout=timeout
            ):
                return False
            self._store(key, item)
        self._loop.call_soon_threadsafe(self._wakeup.set)
        return True

    def _store(self, key: Hashable, item: Item) -> None:
        if key in self._pending:
            self.coalesced += 1
        elif key not in self._inflight:
            self._ready.append(key)
        self._pending[key] = item

    async def get(self) -> tuple[Hashable, Item]:
        """The next object to dispatch; it stays in flight until done()."""
        while True:
            with self._cond:
                if self._ready:
                    key = self._ready.popleft()
                    item = self._pending.pop(key)
                    self._inflight.add(key)
                    self._cond.notify_all()
                    return key, item
                self._wakeup.clear()
            await self._wakeup.wait()

    def done(self, key: Hashable, retry: Item | None = None) -> None:
        """Release `key`; with `retry`, hand it back unless a newer event already waits."""
        with self._cond:
            self._inflight.discard(key)
            if retry is not None and key not in self._pending:
                # Never dropped, even when full: it may be the only record of a change.
                self._pending[key] = retry
            if key in self._pending:
                self._ready.append(key)
        self._wakeup.set()
