"""Timestamped watches on the local cluster, so benchmarks time what a controller wrote, not a poll.

One `ObjectWatch` follows one resource in one namespace (any API group served under /apis, custom or
not) and records, per object, each change of a value derived from the object (weights of a route, a
status summary), stamped with `time.monotonic()` when the event arrived. Every benchmark and every
peer it is compared with is timed through the same kind of watch, so the watch's own delay is common
to both sides.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch


class ObjectWatch:
    def __init__(self, api: client.ApiClient, group: str, version: str, namespace: str, plural: str,
                 value: Callable[[dict[str, Any]], Any]) -> None:  # fmt: skip
        self._custom = client.CustomObjectsApi(api)
        self._resource = (group, version, namespace, plural)
        self._value = value
        self.changes: dict[str, list[tuple[float, Any]]] = {}
        self._lock = threading.Condition()
        self._stop = False
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]
        self._thread = threading.Thread(target=self._run, name=f"watch-{plural}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        version = ""
        while not self._stop:
            try:
                events = self._watch.stream(  # type: ignore[no-untyped-call]
                    self._custom.list_namespaced_custom_object, *self._resource,
                    resource_version=version, timeout_seconds=30,
                )  # fmt: skip
                for event in events:
                    now = time.monotonic()
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] == "DELETED":
                        continue
                    value = self._value(obj)
                    with self._lock:
                        log = self.changes.setdefault(obj["metadata"]["name"], [])
                        if not log or log[-1][1] != value:
                            log.append((now, value))
                            self._lock.notify_all()
            except Exception:
                if self._stop:
                    return
                version = ""  # expired or broken: list again (current states arrive as ADDED)
                time.sleep(0.2)

    def latest(self, name: str) -> Any:
        with self._lock:
            log = self.changes.get(name) or []
            return log[-1][1] if log else None

    def first(self, name: str, predicate: Callable[[Any], bool], since: float = 0.0,
              timeout: float = 120.0) -> tuple[float, Any]:  # fmt: skip
        """When (and what) the object's value first satisfied `predicate` at or after `since`."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                for at, value in self.changes.get(name) or []:
                    if at >= since and predicate(value):
                        return at, value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    last = (self.changes.get(name) or [(0.0, None)])[-1][1]
                    raise TimeoutError(f"{self._resource[3]}/{name}: not as awaited within {timeout} s (last: {last})")
                self._lock.wait(remaining)

    def wait(self, name: str, predicate: Callable[[Any], bool], timeout: float = 120.0) -> Any:
        """The object's value once its latest value satisfies `predicate`."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                log = self.changes.get(name) or []
                if log and predicate(log[-1][1]):
                    return log[-1][1]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    last = log[-1][1] if log else None
                    raise TimeoutError(f"{self._resource[3]}/{name}: not as awaited within {timeout} s (last: {last})")
                self._lock.wait(remaining)

    def stop(self) -> None:
        self._stop = True
        self._watch.stop()  # type: ignore[no-untyped-call]
