"""The loop every watch thread of the bridge runs: list, then watch from the list's resourceVersion; on 410 Gone
list again at once; on any other failure wait (0.5 s doubling to 30 s) and list again. A relist is how a watch
learns what it missed while it was down, so every failure goes through one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kubernetes.client.exceptions import ApiException

from servingops.clients.kube.errors import GONE


def keep_watching(kind: str, stop: threading.Event, relist: Callable[[], str], watch_from: Callable[[str], None],
                  synced: threading.Event, log: logging.Logger) -> None:
    """Until `stop`: `relist()` (answers the resourceVersion to go on from; `synced` is set after the first),
    then `watch_from(version)` until it ends or fails."""
    backoff = 0.5
    while not stop.is_set():
        try:
            version = relist()
            synced.set()
            backoff = 0.5
            watch_from(version)
        except ApiException as exc:
            if exc.status == GONE:
                log.info("%s: resourceVersion expired, relisting", kind)
                continue
            log.warning("%s: API error %s, retrying in %.1fs", kind, exc.status, backoff)
        except Exception:
            log.exception("%s: watch failed, retrying in %.1fs", kind, backoff)
        stop.wait(backoff)
        backoff = min(backoff * 2, 30)
