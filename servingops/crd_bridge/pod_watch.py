"""List-then-watch of the pods of InferenceReplicas (label `ome.io/inferencereplica`), resumed from
the last resourceVersion and relisted on 410 Gone, like crd_bridge/watcher.py for custom objects.

Runs in its own thread. It keeps a small PodState per replica pod (never the pod itself), maps each
event with pod_events.pod_change, and hands the replica workflow ids to wake to `wake`. A pod that
vanished while the watch was down is found by the relist and wakes its replica like a DELETED.
Pods are read as plain JSON: the client's V1Pod models would cost far more than the mapping.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from servingops.clients.kube.calls import call
from servingops.clients.kube.errors import GONE
from servingops.clients.kube.timeouts import WATCH_REQUEST_TIMEOUT, WATCH_SECONDS
from servingops.crd_bridge.pod_events import LABEL_SELECTOR, PodKey, PodState, pod_change, pod_key

log = logging.getLogger("servingops.bridge.pods")

LIST_PAGE = 500


class PodWatcher(threading.Thread):
    def __init__(self, api_client: client.ApiClient, wake: Callable[[str], None], stop: threading.Event,
                 on_event: Callable[[str], None] | None = None) -> None:
        super().__init__(name="watch-pods", daemon=True)
        self.core = client.CoreV1Api(api_client)
        self.wake = wake
        self.stop_event = stop
        self.on_event = on_event or (lambda _type: None)
        self.states: dict[PodKey, PodState] = {}
        self.synced = threading.Event()
        self.relists = 0

    def run(self) -> None:
        backoff = 0.5
        while not self.stop_event.is_set():
            try:
                version = self.relist()
                self.synced.set()
                backoff = 0.5
                self.watch_from(version)
            except ApiException as exc:
                if exc.status == GONE:
                    log.info("pods: resourceVersion expired, relisting")
                    continue
                log.warning("pods: API error %s, retrying in %.1fs", exc.status, backoff)
            except Exception:
                log.exception("pods: watch failed, retrying in %.1fs", backoff)
            self.stop_event.wait(backoff)
            backoff = min(backoff * 2, 30)

    def observe(self, pod: dict[str, Any], *, gone: bool) -> None:
        key = pod_key(pod)
        change = pod_change(pod, self.states.get(key), gone=gone)
        if change.state is None:
            self.states.pop(key, None)
        else:
            self.states[key] = change.state
        for workflow_id in change.wake:
            self.wake(workflow_id)

    def relist(self) -> str:
        """Map every current pod, and wake the replicas of pods that vanished meanwhile."""
        self.relists += 1
        seen: set[PodKey] = set()
        token: str | None = None
        version = ""
        while True:
            # _preload_content=False answers the raw HTTP response (the stubs do not know it).
            response: Any = call(self.core.list_pod_for_all_namespaces, label_selector=LABEL_SELECTOR,
                                 limit=LIST_PAGE, _continue=token, _preload_content=False)
            page = json.loads(response.data)
            for pod in page.get("items") or []:
                seen.add(pod_key(pod))
                self.observe(pod, gone=False)
            token = page["metadata"].get("continue")
            version = str(page["metadata"].get("resourceVersion", version))
            if not token:
                break
        for (namespace, name), state in list(self.states.items()):
            if (namespace, name) not in seen:
                self.observe(_last_seen(namespace, name, state.fingerprint.uid), gone=True)
        return version

    def watch_from(self, version: str) -> None:
        while not self.stop_event.is_set():
            # return_type "object": events stay dicts, as for custom objects (no V1Pod models).
            stream = watch.Watch(return_type="object").stream(  # type: ignore[no-untyped-call]
                self.core.list_pod_for_all_namespaces, label_selector=LABEL_SELECTOR,
                resource_version=version, allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS, _request_timeout=WATCH_REQUEST_TIMEOUT,
            )
            for event in stream:
                kind = event["type"]
                pod = event["object"]
                version = pod.get("metadata", {}).get("resourceVersion", version)
                self.on_event(kind)
                if kind != "BOOKMARK":
                    self.observe(pod, gone=kind == "DELETED")
                if self.stop_event.is_set():
                    return


def _last_seen(namespace: str, name: str, uid: str) -> dict[str, Any]:
    """A vanished pod as far as the mapping needs it: pod_change wakes the replica it belonged to
    from the remembered state, whatever this stand-in lacks."""
    return {"metadata": {"namespace": namespace, "name": name, "uid": uid}}
