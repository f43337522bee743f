"""What the benchmarks share about the local stack they start."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.identities import Identities
from devstack.kube import LocalKubeCluster


def admin_identities(cluster: LocalKubeCluster, api: client.ApiClient) -> Identities:
    """Every process as the cluster admin (benchmarks measure; the tests check the chart's roles), with
    the controller namespace (the bridge's Lease lives there) created."""
    identities = Identities.admin(cluster.kubeconfig_path)
    try:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=identities.namespace)))
    except ApiException as exc:
        if exc.status != 409:
            raise
    return identities
