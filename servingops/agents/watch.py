"""List-then-watch threads: the model kinds (cluster-wide) and the agent's own Node.

Level-triggered: each thread hands every object it learns about to a sink, relists on 410 Gone and after
any error (with backoff), and reports objects that vanished while it was not watching as gone. A kind
whose CRD is not installed (404) counts as empty and is listed again every 30 s until it appears.

A watch resumes from a resourceVersion the apiserver's watch cache still holds: a list's (the collection's,
which is current) or the last event's or bookmark's. Never from an object's own resourceVersion read by a
GET: that is the version of the object's last write, which can be older than anything the cache still
holds, and then the watch ends at once with 410 Gone. A 410 is waited for like any error: the loop used to
re-read and re-watch at once, which is the likely way an idle `./dev up` was seen making a GET and a WATCH
of each agent's Node about 30 times a second (issue 27; not reproduced on fresh nodes within 3 minutes).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from servingops.api_models.ome.model_keys import GROUP, VERSION, ModelKey, ModelKind
from servingops.clients.kube.calls import call, get_or_none
from servingops.clients.kube.errors import GONE, absent
from servingops.clients.kube.timeouts import WATCH_REQUEST_TIMEOUT, WATCH_SECONDS

log = logging.getLogger("servingops.agent.watch")

LIST_PAGE = 500
CRD_MISSING_RETRY_SECONDS = 30.0
MIN_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 30.0
HEALTHY_CYCLE_SECONDS = 60.0
"""A cycle that ran this long before it failed resets the backoff."""

ObjectSink = Callable[[ModelKey, dict[str, Any] | None], None]
"""(key, object or None when it is gone)."""
NodeSink = Callable[[dict[str, Any] | None], None]


def key_of(kind: ModelKind, obj: dict[str, Any]) -> ModelKey:
    meta = obj["metadata"]
    return ModelKey(kind, meta.get("namespace") or "", meta["name"])


class _Loop(threading.Thread):
    def __init__(self, name: str, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.stop_event = stop
        self.synced = threading.Event()

    def cycle(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        backoff = MIN_BACKOFF_SECONDS
        while not self.stop_event.is_set():
            started = time.monotonic()
            try:
                self.cycle()
                backoff = MIN_BACKOFF_SECONDS
                continue
            except ApiException as exc:
                if exc.status == GONE:
                    # Expected now and then (a watch resumed after a long quiet spell); the next cycle starts
                    # from a fresh version. Still waited for: a 410 that repeats must never spin.
                    log.info("%s: resource version gone, starting again in %.1fs", self.name, backoff)
                else:
                    log.warning("%s: API error %s, retrying in %.1fs", self.name, exc.status, backoff)
            except Exception:
                log.exception("%s: failed, retrying in %.1fs", self.name, backoff)
            if time.monotonic() - started >= HEALTHY_CYCLE_SECONDS:
                backoff = MIN_BACKOFF_SECONDS  # a long healthy watch before this failure: not a failing streak
            self.stop_event.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)


class KindWatcher(_Loop):
    def __init__(self, api_client: client.ApiClient, kind: ModelKind, sink: ObjectSink, stop: threading.Event) -> None:
        super().__init__(f"watch-{kind.plural}", stop)
        self.custom = client.CustomObjectsApi(api_client)
        self.kind = kind
        self.sink = sink
        self.known: set[ModelKey] = set()

    def cycle(self) -> None:
        try:
            version = self._relist()
        except ApiException as exc:
            if not absent(exc):
                raise
            # The kind is not served (its CRD is not installed): none exist. Look again later.
            for key in self.known:
                self.sink(key, None)
            self.known = set()
            self.synced.set()
            self.stop_event.wait(CRD_MISSING_RETRY_SECONDS)
            return
        self.synced.set()
        while not self.stop_event.is_set():
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                self.custom.list_cluster_custom_object, GROUP, VERSION, self.kind.plural,
                resource_version=version, allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS, _request_timeout=WATCH_REQUEST_TIMEOUT)
            for event in stream:
                obj = event["object"]
                if event["type"] == "ERROR":
                    raise ApiException(status=int(obj.get("code", 500)), reason=str(obj.get("message")))
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if event["type"] == "BOOKMARK":
                    continue
                key = key_of(self.kind, obj)
                if event["type"] == "DELETED":
                    self.known.discard(key)
                    self.sink(key, None)
                else:
                    self.known.add(key)
                    self.sink(key, obj)
                if self.stop_event.is_set():
                    return

    def _relist(self) -> str:
        current: set[ModelKey] = set()
        token: str | None = None
        version = ""
        while True:
            extra: dict[str, Any] = {"_continue": token} if token else {}
            page = cast(dict[str, Any], call(self.custom.list_cluster_custom_object,
                                             GROUP, VERSION, self.kind.plural, limit=LIST_PAGE, **extra))
            for obj in page.get("items", []):
                key = key_of(self.kind, obj)
                current.add(key)
                self.sink(key, obj)
            token = page["metadata"].get("continue")
            version = str(page["metadata"].get("resourceVersion", version))
            if not token:
                break
        for key in self.known - current:
            self.sink(key, None)
        self.known = current
        return version


class NodeWatcher(_Loop):
    """The agent's own Node: a get (so a missing Node is known at once), then a watch narrowed to it by name
    that starts with no resourceVersion (the apiserver sends the Node as it is now, then every change; the
    agent's role may get and watch Nodes but not list them) and resumes from the last version it saw."""

    def __init__(self, api_client: client.ApiClient, node_name: str, sink: NodeSink, stop: threading.Event) -> None:
        super().__init__("watch-node", stop)
        self.core = client.CoreV1Api(api_client)
        self.node_name = node_name
        self.sink = sink

    def cycle(self) -> None:
        node = get_or_none(self.core.read_node, self.node_name)
        if node is None:
            self.sink(None)
            self.synced.set()
            self.stop_event.wait(5)
            return
        raw = self.core.api_client.sanitize_for_serialization(node)
        self.sink(raw)
        self.synced.set()
        version: str | None = None
        while not self.stop_event.is_set():
            since: dict[str, Any] = {"resource_version": version} if version else {}
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                self.core.list_node, field_selector=f"metadata.name={self.node_name}",
                allow_watch_bookmarks=True, timeout_seconds=WATCH_SECONDS,
                _request_timeout=WATCH_REQUEST_TIMEOUT, **since)
            for event in stream:
                if event["type"] == "ERROR":
                    raw_obj = event.get("raw_object") or {}
                    raise ApiException(status=int(raw_obj.get("code", 500)), reason=str(raw_obj.get("message")))
                obj = self.core.api_client.sanitize_for_serialization(event["object"])
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if event["type"] == "BOOKMARK":
                    continue
                self.sink(None if event["type"] == "DELETED" else obj)
                if self.stop_event.is_set():
                    return
