"""A watch on the pods of one namespace that counts the serving units at every event.

A benchmark of a rollout wants the fewest units in rotation at any moment of it. Polling a list of
hundreds of pods every 100 ms costs a core on a small machine and still misses what happens
between polls; a watch sees every change the apiserver publishes, in order. `ServingWatch` keeps,
per unit (an Instance: its index label; a StatefulSet pod: its name), the pods of that unit that
count as serving, and logs `(time.monotonic(), serving units, pods alive)` whenever either count
changes. Pods being deleted (deletionTimestamp set) count as neither serving nor alive, on both
sides of a comparison alike.

Events are parsed as plain JSON (no client-model deserialization: that alone is milliseconds per
pod event in Python).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

Unit = Callable[[dict[str, Any]], str]
"""The unit a pod belongs to (what is counted once, however many of its pods serve)."""
Serving = Callable[[dict[str, Any]], bool]


def conditions(pod: dict[str, Any]) -> dict[str, str]:
    return {c.get("type", ""): c.get("status", "") for c in (pod.get("status") or {}).get("conditions") or []}


class ServingWatch:
    def __init__(self, api: client.ApiClient, namespace: str, label_selector: str, unit: Unit,
                 serving: Serving) -> None:  # fmt: skip
        self._core = client.CoreV1Api(api)
        self._namespace, self._selector = namespace, label_selector
        self._unit, self._serving = unit, serving
        self._alive: set[str] = set()
        self._serving_pods: dict[str, set[str]] = {}
        """unit -> names of its pods that serve now."""
        self._unit_of: dict[str, str] = {}
        self.log: list[tuple[float, int, int]] = []
        self._lock = threading.Lock()
        self._stop = False
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]
        self._thread = threading.Thread(target=self._run, name=f"serving-{namespace}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        version = ""
        while not self._stop:
            try:
                events = self._watch.stream(  # type: ignore[no-untyped-call]
                    self._core.list_namespaced_pod, self._namespace, label_selector=self._selector,
                    resource_version=version, timeout_seconds=30, deserialize=False)
                for event in events:
                    pod = event["object"]
                    version = pod["metadata"]["resourceVersion"]
                    self._apply(event["type"], pod, time.monotonic())
            except Exception:
                if self._stop:
                    return
                # Expired or broken: watch again without a version, which re-sends every pod as
                # ADDED (`_apply` takes that as an update). A pod deleted in the gap would linger;
                # the 30 s timeout above resumes from the last version, so only an error gets here.
                version = ""
                time.sleep(0.2)

    def _apply(self, kind: str, pod: dict[str, Any], now: float) -> None:
        name = pod["metadata"]["name"]
        gone = kind == "DELETED" or pod["metadata"].get("deletionTimestamp") is not None
        with self._lock:
            previous = self._unit_of.get(name)
            if previous is not None:
                self._serving_pods.get(previous, set()).discard(name)
            self._alive.discard(name)
            if not gone:
                unit = self._unit(pod)
                self._unit_of[name] = unit
                self._alive.add(name)
                if self._serving(pod):
                    self._serving_pods.setdefault(unit, set()).add(name)
            else:
                self._unit_of.pop(name, None)
            counts = (sum(1 for pods in self._serving_pods.values() if pods), len(self._alive))
            if not self.log or self.log[-1][1:] != counts:
                self.log.append((now, *counts))

    def now(self) -> tuple[int, int]:
        """(serving units, pods alive) as of the last event."""
        with self._lock:
            return self.log[-1][1:] if self.log else (0, 0)

    def window(self, since: float, until: float) -> tuple[int, int]:
        """(fewest serving units, most pods alive) from `since` to `until`, the state at `since` included."""
        with self._lock:
            before = [entry for entry in self.log if entry[0] < since][-1:]
            inside = before + [entry for entry in self.log if since <= entry[0] <= until]
        if not inside:
            return 0, 0
        return min(entry[1] for entry in inside), max(entry[2] for entry in inside)

    def first(self, since: float, serving: int | None = None, alive: int | None = None) -> float | None:
        """When, at or after `since`, at least `serving` units served and at least `alive` pods were alive."""
        with self._lock:
            for at, count, pods in self.log:
                if at >= since and count >= (serving or 0) and pods >= (alive or 0):
                    return at
        return None

    def stop(self) -> None:
        self._stop = True
        self._watch.stop()  # type: ignore[no-untyped-call]
