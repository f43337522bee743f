"""Load Kubernetes client configuration: an explicit kubeconfig, $KUBECONFIG, or in-cluster."""

from __future__ import annotations

import os

from kubernetes import client, config


def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return config.new_client_from_config(config_file=path)
    config.load_incluster_config()
    return client.ApiClient()
