"""List-then-watch of the objects of one built-in kind that belong to our workflows (a label selector),
resumed from the last resourceVersion and relisted on 410 Gone, like crd_bridge/watcher.py for custom objects.

Runs in its own thread. It keeps a small state per object (never the object itself), maps each event with
the kind's pure `change` function (pod_events.pod_change, scaler_events.scaler_change), and hands the workflow
ids to wake to `wake`. An object that vanished while the watch was down is found by the relist and wakes its
workflow like a DELETED. Objects are read as plain JSON: the client's models would cost far more than the
mapping. The subclasses make the client's list and watch calls (`list_page`, `stream`), where
tests/rbac_calls.py reads the rights they need.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from servingops.clients.kube.timeouts import WATCH_REQUEST_TIMEOUT, WATCH_SECONDS
from servingops.crd_bridge.list_watch import keep_watching

log = logging.getLogger("servingops.bridge.owned")

LIST_PAGE = 500

S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)

Key = tuple[str, str]
"""(namespace, name) of an object."""


class Change(Protocol[S_co]):
    @property
    def state(self) -> S_co | None: ...

    @property
    def wake(self) -> tuple[str, ...]: ...


class OwnedWatcher(threading.Thread, Generic[S]):
    def __init__(self, kind: str, selector: str, change: Callable[[dict[str, Any], S | None, bool], Change[S]],
                 wake: Callable[[str], None], stop: threading.Event,
                 on_event: Callable[[str], None] | None = None) -> None:
        super().__init__(name=f"watch-{kind}", daemon=True)
        self.kind = kind
        self.selector = selector
        self.change = change
        self.wake = wake
        self.stop_event = stop
        self.on_event = on_event or (lambda _type: None)
        self.states: dict[Key, S] = {}
        self.synced = threading.Event()
        self.relists = 0

    def list_page(self, **kwargs: Any) -> Any:
        """One page of the list for all namespaces, as the raw HTTP response (_preload_content=False)."""
        raise NotImplementedError

    def stream(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """The watch for all namespaces, its events as dicts (return_type "object": no client models)."""
        raise NotImplementedError

    def run(self) -> None:
        keep_watching(self.kind, self.stop_event, self.relist, self.watch_from, self.synced, log)

    def observe(self, obj: dict[str, Any], *, gone: bool) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        change = self.change(obj, self.states.get(key), gone)
        if change.state is None:
            self.states.pop(key, None)
        else:
            self.states[key] = change.state
        for workflow_id in change.wake:
            self.wake(workflow_id)

    def relist(self) -> str:
        """Map every current object, and wake the workflows of objects that vanished meanwhile."""
        self.relists += 1
        seen: set[Key] = set()
        token: str | None = None
        version = ""
        while True:
            response = self.list_page(label_selector=self.selector, limit=LIST_PAGE, _continue=token,
                                      _preload_content=False)
            page = json.loads(response.data)
            for obj in page.get("items") or []:
                meta = obj["metadata"]
                seen.add((meta.get("namespace") or "", meta["name"]))
                self.observe(obj, gone=False)
            token = page["metadata"].get("continue")
            version = str(page["metadata"].get("resourceVersion", version))
            if not token:
                break
        for namespace, name in [key for key in self.states if key not in seen]:
            # A vanished object as far as the mapping needs it: the change wakes from the remembered state.
            self.observe({"metadata": {"namespace": namespace, "name": name}}, gone=True)
        return version

    def watch_from(self, version: str) -> None:
        while not self.stop_event.is_set():
            stream = self.stream(label_selector=self.selector, resource_version=version,
                                 allow_watch_bookmarks=True, timeout_seconds=WATCH_SECONDS,
                                 _request_timeout=WATCH_REQUEST_TIMEOUT)
            for event in stream:
                kind = event["type"]
                obj = event["object"]
                version = obj.get("metadata", {}).get("resourceVersion", version)
                self.on_event(kind)
                if kind != "BOOKMARK":
                    self.observe(obj, gone=kind == "DELETED")
                if self.stop_event.is_set():
                    return
