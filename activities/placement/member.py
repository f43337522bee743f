"""Every call placement makes in a member cluster, as the member's placement identity (the chart's
`placementMember` ClusterRole, deploy/chart/templates/rbac-placement-member.yaml). Kept apart from
the control-plane activities so that tests/rbac_calls.py holds these calls to that role, not to the
worker's: the worker's own ServiceAccount never makes them."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

GROUP, VERSION = "ome.io", "v1beta1"
FIELD_MANAGER = "servingops-placement"
REQUEST_TIMEOUT = 15
"""Seconds per request to a member: a member that hangs is Unreachable for this look, not a stuck race."""


class MemberClient:
    """One member's apiserver, through an ApiClient built from its registration's kubeconfig."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    # service() and replica() spell their plural out rather than share a helper taking it: the RBAC
    # reader (tests/rbac_calls.py) resolves literal plurals only, and these are held to the role.
    def service(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return cast(dict[str, Any], self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "inferenceservices", name, _request_timeout=REQUEST_TIMEOUT))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def replica(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return cast(dict[str, Any], self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "inferencereplicas", name, _request_timeout=REQUEST_TIMEOUT))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def apply_service(self, body: dict[str, Any]) -> None:
        """Server-side apply of the derived service (creates it when missing)."""
        meta = body["metadata"]
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, meta["namespace"], "inferenceservices", meta["name"], body,
            field_manager=FIELD_MANAGER, force=True, _content_type="application/apply-patch+yaml",
            _request_timeout=REQUEST_TIMEOUT)

    def delete_service(self, namespace: str, name: str, uid: str) -> None:
        """Delete that object only (the uid precondition: never a same-named one created since)."""
        self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, "inferenceservices", name,
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
            _request_timeout=REQUEST_TIMEOUT)

    def pods(self, namespace: str) -> list[client.V1Pod]:
        return list(self.core.list_namespaced_pod(namespace, _request_timeout=REQUEST_TIMEOUT).items)
