"""Every call placement makes in a member cluster, as the member's placement identity (the chart's
`placementMember` ClusterRole, deploy/chart/templates/rbac-placement-member.yaml). Kept apart from
the control-plane activities so that tests/rbac_calls.py holds these calls to that role, not to the
worker's: the worker's own ServiceAccount never makes them."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

GROUP, VERSION = "ome.io", "v1beta1"
DECKHOUSE_GROUP, DECKHOUSE_VERSION = "ai.deckhouse.io", "v1alpha1"
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

    def accelerator_quotas(self) -> list[dict[str, Any]]:
        """Every AcceleratorQuota node (cluster-scoped): the root among them carries the member's
        capacity report (status.capacity, written by the member's own servingops)."""
        try:
            listed = self.custom.list_cluster_custom_object(GROUP, VERSION, "acceleratorquotas",
                                                            _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:  # the kind is not installed there: nothing reports
                return []
            raise
        return [dict(item) for item in cast(dict[str, Any], listed).get("items") or []]

    def reader(self) -> MemberReader:
        return MemberReader(self.custom)


class MemberReader:
    """The serving resolution's Reader (rendering/resolution.py) over a member's apiserver,
    read-only: SplitByCapacity resolves a source the way the member will render it (its runtimes, its
    models) to learn what one replica demands. Runtime snapshots are neither read nor taken: demand
    follows the live runtime, and a placement identity never writes ControllerRevisions. Each kind's
    plural is spelled out so tests/rbac_calls.py holds these reads to the placementMember role."""

    def __init__(self, custom: client.CustomObjectsApi) -> None:
        self.custom = custom

    def get_snapshot(self, name: str) -> dict[str, Any] | None:
        return None

    def save_snapshot(self, name: str, data: dict[str, Any]) -> None:
        return None

    def get(self, group: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        try:
            return self._get(group, kind, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _get(self, group: str, kind: str, name: str, namespace: str | None) -> dict[str, Any]:
        custom, timeout = self.custom, REQUEST_TIMEOUT
        found: object
        if group == GROUP and kind == "ClusterBaseModel":
            found = custom.get_cluster_custom_object(GROUP, VERSION, "clusterbasemodels", name,
                                                     _request_timeout=timeout)
        elif group == GROUP and kind == "BaseModel" and namespace:
            found = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "basemodels", name,
                                                        _request_timeout=timeout)
        elif group == GROUP and kind == "FineTunedWeight":
            found = custom.get_cluster_custom_object(GROUP, VERSION, "finetunedweights", name,
                                                     _request_timeout=timeout)
        elif group == GROUP and kind == "ClusterServingRuntime":
            found = custom.get_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", name,
                                                     _request_timeout=timeout)
        elif group == GROUP and kind == "ServingRuntime" and namespace:
            found = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "servingruntimes", name,
                                                        _request_timeout=timeout)
        elif group == DECKHOUSE_GROUP and kind == "ClusterModel":
            found = custom.get_cluster_custom_object(DECKHOUSE_GROUP, DECKHOUSE_VERSION, "clustermodels", name,
                                                     _request_timeout=timeout)
        elif group == DECKHOUSE_GROUP and kind == "Model" and namespace:
            found = custom.get_namespaced_custom_object(DECKHOUSE_GROUP, DECKHOUSE_VERSION, namespace, "models", name,
                                                        _request_timeout=timeout)
        else:
            raise ValueError(f"placement reads no {kind}.{group} in a member")
        return dict(cast(dict[str, Any], found))

    def list(self, group: str, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        found: object
        if group == GROUP and kind == "ServingRuntime" and namespace:
            found = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "servingruntimes",
                                                              _request_timeout=REQUEST_TIMEOUT)
        elif group == GROUP and kind == "ClusterServingRuntime":
            found = self.custom.list_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes",
                                                           _request_timeout=REQUEST_TIMEOUT)
        else:
            raise ValueError(f"placement lists no {kind}.{group} in a member")
        return [dict(item) for item in cast(dict[str, Any], found).get("items") or []]
