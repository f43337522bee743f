"""The watch of the HorizontalPodAutoscalers of InferenceService components (ours, and KEDA's for our
ScaledObjects: label `app.kubernetes.io/managed-by=servingops`): a change of what the service mirrors
(scaler_events.scaler_change) wakes the service's workflow. The list-then-watch is owned_watch.py's."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client, watch

from servingops.clients.kube.calls import call
from servingops.crd_bridge.owned_watch import OwnedWatcher
from servingops.crd_bridge.scaler_events import LABEL_SELECTOR, ScalerChange, ScalerState, scaler_change


def _scaler_change(hpa: dict[str, Any], previous: ScalerState | None, gone: bool) -> ScalerChange:
    return scaler_change(hpa, previous, gone=gone)


class ScalerWatcher(OwnedWatcher[ScalerState]):
    def __init__(self, api_client: client.ApiClient, wake: Callable[[str], None], stop: threading.Event,
                 on_event: Callable[[str], None] | None = None) -> None:
        super().__init__("horizontalpodautoscalers", LABEL_SELECTOR, _scaler_change, wake, stop, on_event)
        self.autoscaling = client.AutoscalingV2Api(api_client)

    def list_page(self, **kwargs: Any) -> Any:
        # _preload_content=False answers the raw HTTP response (the stubs do not know it).
        return call(self.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces, **kwargs)

    def stream(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        return watch.Watch(return_type="object").stream(  # type: ignore[no-any-return,no-untyped-call]
            self.autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces, **kwargs)
