"""List-then-watch of one kind, resumed from the last resourceVersion, relisted on 410 Gone.

Runs in its own thread (the kubernetes client is blocking). Every object it learns about is
handed to `sink`; objects that vanished while the watch was down are found by the relist and
handed over as gone, so no deletion is missed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client, watch

from servingops.clients.kube.calls import call
from servingops.clients.kube.timeouts import WATCH_REQUEST_TIMEOUT, WATCH_SECONDS
from servingops.crd_bridge.list_watch import keep_watching
from servingops.crd_bridge.routes import Route

log = logging.getLogger("servingops.bridge.watch")

LIST_PAGE = 500


@dataclass(frozen=True)
class Observed:
    """An object as last seen, or (gone=True) its last state before it disappeared."""

    route: Route
    obj: dict[str, Any]
    gone: bool
    seen_at: float
    """time.monotonic() when the watch delivered it: the start of the bridge's lag."""

    @property
    def key(self) -> tuple[str, str, str]:
        meta = self.obj["metadata"]
        return self.route.kind, meta.get("namespace") or "", meta["name"]


class KindWatcher(threading.Thread):
    def __init__(self, api_client: client.ApiClient, route: Route, sink: Callable[[Observed], None],
                 stop: threading.Event, on_event: Callable[[str], None] | None = None) -> None:
        super().__init__(name=f"watch-{route.kind}", daemon=True)
        self.custom = client.CustomObjectsApi(api_client)
        self.route = route
        self.sink = sink
        self.stop_event = stop
        self.on_event = on_event or (lambda _type: None)
        self.known: dict[tuple[str, str], dict[str, Any]] = {}
        self.synced = threading.Event()
        self.relists = 0

    def _list_page(self, **kwargs: Any) -> dict[str, Any]:
        r = self.route
        listed = call(self.custom.list_cluster_custom_object, r.group, r.version, r.plural, **kwargs)
        return cast(dict[str, Any], listed)

    def run(self) -> None:
        keep_watching(self.route.kind, self.stop_event, self.relist, self.watch_from, self.synced, log)

    def relist(self) -> str:
        """Hand every current object to the sink, and every vanished one as gone."""
        self.relists += 1
        current: dict[tuple[str, str], dict[str, Any]] = {}
        token: str | None = None
        version = ""
        while True:
            page = self._list_page(limit=LIST_PAGE, **({"_continue": token} if token else {}))
            now = time.monotonic()
            for obj in page.get("items", []):
                meta = obj["metadata"]
                current[(meta.get("namespace") or "", meta["name"])] = obj
                self.sink(Observed(self.route, obj, False, now))
            token = page["metadata"].get("continue")
            version = str(page["metadata"].get("resourceVersion", version))
            if not token:
                break
        for key, obj in self.known.items():
            if key not in current:
                self.sink(Observed(self.route, obj, True, time.monotonic()))
        self.known = current
        return version

    def watch_from(self, version: str) -> None:
        r = self.route
        while not self.stop_event.is_set():
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                self.custom.list_cluster_custom_object, r.group, r.version, r.plural,
                resource_version=version, allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS, _request_timeout=WATCH_REQUEST_TIMEOUT,
            )
            for event in stream:
                kind = event["type"]
                obj = event["object"]
                version = obj.get("metadata", {}).get("resourceVersion", version)
                self.on_event(kind)
                if kind == "BOOKMARK":
                    continue
                meta = obj["metadata"]
                key = (meta.get("namespace") or "", meta["name"])
                if kind == "DELETED":
                    self.known.pop(key, None)
                    self.sink(Observed(r, obj, True, time.monotonic()))
                else:
                    self.known[key] = obj
                    self.sink(Observed(r, obj, False, time.monotonic()))
                if self.stop_event.is_set():
                    return
