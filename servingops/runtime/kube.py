"""Load Kubernetes client configuration: an explicit kubeconfig, $KUBECONFIG, or in-cluster.

What the processes then call through that client goes through clients/kube/ (the access layer), Events included."""

from __future__ import annotations

import os

from kubernetes import client, config

CONNECTION_POOL = 32
"""HTTP connections kept to the apiserver per process. The client's default (10) is below the
worker's activity threads, so busy passes (200 pod creates at once) threw connections away
("Connection pool is full, discarding connection") and opened new ones."""


def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    path = kubeconfig or os.environ.get("KUBECONFIG")
    configuration = client.Configuration()
    if path:
        config.load_kube_config(config_file=path, client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = CONNECTION_POOL
    return client.ApiClient(configuration)
