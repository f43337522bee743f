"""The watch of the pods of InferenceReplicas (label `ome.io/inferencereplica`): each change the replica
engine reads (pod_events.pod_change) wakes its replica workflow. The list-then-watch is owned_watch.py's."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client, watch

from servingops.clients.kube.calls import call
from servingops.crd_bridge.owned_watch import OwnedWatcher
from servingops.crd_bridge.pod_events import LABEL_SELECTOR, PodChange, PodState, pod_change


def _pod_change(pod: dict[str, Any], previous: PodState | None, gone: bool) -> PodChange:
    return pod_change(pod, previous, gone=gone)


class PodWatcher(OwnedWatcher[PodState]):
    def __init__(self, api_client: client.ApiClient, wake: Callable[[str], None], stop: threading.Event,
                 on_event: Callable[[str], None] | None = None) -> None:
        super().__init__("pods", LABEL_SELECTOR, _pod_change, wake, stop, on_event)
        self.core = client.CoreV1Api(api_client)

    def list_page(self, **kwargs: Any) -> Any:
        # _preload_content=False answers the raw HTTP response (the stubs do not know it).
        return call(self.core.list_pod_for_all_namespaces, **kwargs)

    def stream(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        return watch.Watch(return_type="object").stream(  # type: ignore[no-any-return,no-untyped-call]
            self.core.list_pod_for_all_namespaces, **kwargs)
