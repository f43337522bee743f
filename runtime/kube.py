"""Load Kubernetes client configuration: an explicit kubeconfig, $KUBECONFIG, or in-cluster."""

from __future__ import annotations

import datetime as dt
import os

from kubernetes import client, config


def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return config.new_client_from_config(config_file=path)
    config.load_incluster_config()
    return client.ApiClient()


def record_event(core: client.CoreV1Api, *, api_version: str, kind: str, name: str, namespace: str | None,
                 uid: str | None, event_type: str, reason: str, message: str,
                 component: str = "servingops") -> None:
    """Create an Event on an object (how bad input and notable transitions reach `kubectl describe`)."""
    now = dt.datetime.now(dt.UTC)
    where = namespace or "default"
    core.create_namespaced_event(where, client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{name}.", namespace=where),
        involved_object=client.V1ObjectReference(api_version=api_version, kind=kind, name=name,
                                                 namespace=namespace, uid=uid),
        type=event_type, reason=reason, message=message[:1024],
        first_timestamp=now, last_timestamp=now, count=1,
        source=client.V1EventSource(component=component),
        reporting_component=component, reporting_instance=component,
    ))
