"""Every call placement makes in a member cluster, as the member's placement identity (the chart's
`placementMember` ClusterRole, deploy/chart/templates/rbac-placement-member.yaml). Kept apart from
the control-plane activities so that tests/rbac_calls.py holds these calls to that role, not to the
worker's: the worker's own ServiceAccount never makes them."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.clients.kube.calls import apply, call, get_or_none, list_items
from servingops.clients.kube.errors import absent
from servingops.clients.kube.timeouts import MEMBER_REQUEST_TIMEOUT
from servingops.rendering.accelerator_quota import MANAGED_BY, PROJECTED_LABEL

GROUP, VERSION = "ome.io", "v1beta1"
DECKHOUSE_GROUP, DECKHOUSE_VERSION = "ai.deckhouse.io", "v1alpha1"
FIELD_MANAGER = "servingops-placement"
QUOTA_FIELD_MANAGER = "servingops-quota-projection"
# Every request to a member carries MEMBER_REQUEST_TIMEOUT (15 s): a member that hangs is Unreachable for this
# look, not a stuck race.


class MemberClient:
    """One member's apiserver, through an ApiClient built from its registration's kubeconfig."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    # service() and replica() spell their plural out rather than share a helper taking it: the RBAC
    # reader (tests/rbac_calls.py) resolves literal plurals only, and these are held to the role.
    def service(self, namespace: str, name: str) -> dict[str, Any] | None:
        return cast(dict[str, Any] | None, get_or_none(
            self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, "inferenceservices", name,
            timeout=MEMBER_REQUEST_TIMEOUT))

    def replica(self, namespace: str, name: str) -> dict[str, Any] | None:
        return cast(dict[str, Any] | None, get_or_none(
            self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, "inferencereplicas", name,
            timeout=MEMBER_REQUEST_TIMEOUT))

    def apply_service(self, body: dict[str, Any]) -> None:
        """Server-side apply of the derived service (creates it when missing)."""
        meta = body["metadata"]
        apply(self.custom.patch_namespaced_custom_object,
              GROUP, VERSION, meta["namespace"], "inferenceservices", meta["name"], body,
              field_manager=FIELD_MANAGER, timeout=MEMBER_REQUEST_TIMEOUT)

    def delete_service(self, namespace: str, name: str, uid: str) -> None:
        """Delete that object only (the uid precondition: never a same-named one created since)."""
        call(self.custom.delete_namespaced_custom_object,
             GROUP, VERSION, namespace, "inferenceservices", name,
             body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)), timeout=MEMBER_REQUEST_TIMEOUT)

    def route(self, namespace: str, name: str) -> dict[str, Any] | None:
        """An HTTPRoute the member's own servingops wrote for a derived service (its Gateway is the parent)."""
        return cast(dict[str, Any] | None, get_or_none(
            self.custom.get_namespaced_custom_object, "gateway.networking.k8s.io", "v1", namespace, "httproutes", name,
            timeout=MEMBER_REQUEST_TIMEOUT))

    def gateway(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A member's serving Gateway: its status.addresses is where the global route sends (EndpointSlice
        fallback)."""
        return cast(dict[str, Any] | None, get_or_none(
            self.custom.get_namespaced_custom_object, "gateway.networking.k8s.io", "v1", namespace, "gateways", name,
            timeout=MEMBER_REQUEST_TIMEOUT))

    def pods(self, namespace: str) -> list[client.V1Pod]:
        return list_items(self.core.list_namespaced_pod, namespace, timeout=MEMBER_REQUEST_TIMEOUT)

    def accelerator_quotas(self) -> list[dict[str, Any]]:
        """Every AcceleratorQuota node (cluster-scoped): the root among them carries the member's
        capacity report (status.capacity, written by the member's own servingops)."""
        try:
            listed = list_items(self.custom.list_cluster_custom_object, GROUP, VERSION, "acceleratorquotas",
                                timeout=MEMBER_REQUEST_TIMEOUT)
        except ApiException as exc:
            if absent(exc):  # the kind is not installed there: nothing reports
                return []
            raise
        return [dict(item) for item in listed]

    def quota_copy(self, name: str) -> dict[str, Any] | None:
        """The member's AcceleratorQuota of a projected node's name (a copy, or the member's own)."""
        return cast(dict[str, Any] | None, get_or_none(
            self.custom.get_cluster_custom_object, GROUP, VERSION, "acceleratorquotas", name,
            timeout=MEMBER_REQUEST_TIMEOUT))

    def projected_copies(self) -> list[dict[str, Any]]:
        """Every AcceleratorQuota projected into the member (the projection label); none where the kind is not
        served."""
        try:
            listed = list_items(self.custom.list_cluster_custom_object, GROUP, VERSION, "acceleratorquotas",
                                label_selector=f"{PROJECTED_LABEL}={MANAGED_BY}", timeout=MEMBER_REQUEST_TIMEOUT)
        except ApiException as exc:
            if absent(exc):
                return []
            raise
        return [dict(item) for item in listed]

    def apply_quota_copy(self, body: dict[str, Any]) -> None:
        """Server-side apply of a projected AcceleratorQuota (creates it when missing)."""
        apply(self.custom.patch_cluster_custom_object, GROUP, VERSION, "acceleratorquotas",
              body["metadata"]["name"], body, field_manager=QUOTA_FIELD_MANAGER, timeout=MEMBER_REQUEST_TIMEOUT)

    def delete_quota_copy(self, name: str, uid: str) -> None:
        """Delete that copy only (the uid precondition)."""
        call(self.custom.delete_cluster_custom_object, GROUP, VERSION, "acceleratorquotas", name,
             body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)), timeout=MEMBER_REQUEST_TIMEOUT)

    def reader(self, controller_namespace: str | None) -> MemberReader:
        return MemberReader(self.custom, controller_namespace)


class MemberReader:
    """The serving resolution's Reader (rendering/resolution.py) over a member's apiserver,
    read-only: SplitByCapacity resolves a source the way the member will render it (its runtimes, its
    models) to learn what one replica demands. Runtime snapshots are neither read nor taken: demand
    follows the live runtime, and a placement identity never writes ControllerRevisions. Each kind's
    plural is spelled out so tests/rbac_calls.py holds these reads to the placementMember role.

    `controller_namespace` is the plane's: a member runs servingops from the same chart, in the namespace of
    the same name (nothing in a WorkloadCluster names the member's), so a ClusterBaseModel on a claim without
    storage.parameters.namespace is judged as the member's own servingops will judge it."""

    def __init__(self, custom: client.CustomObjectsApi, controller_namespace: str | None = None) -> None:
        self.custom = custom
        self.controller_namespace = controller_namespace

    def get_snapshot(self, name: str) -> dict[str, Any] | None:
        return None

    def save_snapshot(self, name: str, data: dict[str, Any]) -> None:
        return None

    def get(self, group: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        custom = self.custom
        found: object
        if group == GROUP and kind == "ClusterBaseModel":
            found = get_or_none(custom.get_cluster_custom_object, GROUP, VERSION, "clusterbasemodels", name,
                                timeout=MEMBER_REQUEST_TIMEOUT)
        elif group == GROUP and kind == "BaseModel" and namespace:
            found = get_or_none(custom.get_namespaced_custom_object, GROUP, VERSION, namespace, "basemodels", name,
                                timeout=MEMBER_REQUEST_TIMEOUT)
        elif group == GROUP and kind == "FineTunedWeight":
            found = get_or_none(custom.get_cluster_custom_object, GROUP, VERSION, "finetunedweights", name,
                                timeout=MEMBER_REQUEST_TIMEOUT)
        elif group == GROUP and kind == "ClusterServingRuntime":
            found = get_or_none(custom.get_cluster_custom_object, GROUP, VERSION, "clusterservingruntimes", name,
                                timeout=MEMBER_REQUEST_TIMEOUT)
        elif group == GROUP and kind == "ServingRuntime" and namespace:
            found = get_or_none(custom.get_namespaced_custom_object, GROUP, VERSION, namespace, "servingruntimes",
                                name, timeout=MEMBER_REQUEST_TIMEOUT)
        elif group == GROUP and kind == "AcceleratorClass":
            found = get_or_none(custom.get_cluster_custom_object, GROUP, VERSION, "acceleratorclasses", name,
                                timeout=MEMBER_REQUEST_TIMEOUT)
        elif group == DECKHOUSE_GROUP and kind == "ClusterModel":
            found = get_or_none(custom.get_cluster_custom_object, DECKHOUSE_GROUP, DECKHOUSE_VERSION, "clustermodels",
                                name, timeout=MEMBER_REQUEST_TIMEOUT)
        elif group == DECKHOUSE_GROUP and kind == "Model" and namespace:
            found = get_or_none(custom.get_namespaced_custom_object, DECKHOUSE_GROUP, DECKHOUSE_VERSION, namespace,
                                "models", name, timeout=MEMBER_REQUEST_TIMEOUT)
        else:
            raise ValueError(f"placement reads no {kind}.{group} in a member")
        return dict(cast(dict[str, Any], found)) if found is not None else None

    def list(self, group: str, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        found: object
        if group == GROUP and kind == "ServingRuntime" and namespace:
            found = list_items(self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, "servingruntimes",
                               timeout=MEMBER_REQUEST_TIMEOUT)
        elif group == GROUP and kind == "ClusterServingRuntime":
            found = list_items(self.custom.list_cluster_custom_object, GROUP, VERSION, "clusterservingruntimes",
                               timeout=MEMBER_REQUEST_TIMEOUT)
        elif group == GROUP and kind == "AcceleratorClass":
            found = list_items(self.custom.list_cluster_custom_object, GROUP, VERSION, "acceleratorclasses",
                               timeout=MEMBER_REQUEST_TIMEOUT)
        else:
            raise ValueError(f"placement lists no {kind}.{group} in a member")
        return [dict(item) for item in found]
