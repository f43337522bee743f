"""KubeReader: the reads of what a spec references (its model, its runtimes and their parents, a
runtime snapshot) over the apiserver, as the worker. The rendering that reads through it is pure and
imports no client (rendering/resolution.py, its `Reader`); the serving and the replica activities
hand it this reader, from here, since neither activity group imports the other."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client

from servingops.clients.kube.calls import call, create_unless_exists, get_or_none
from servingops.rendering.resolution import Unresolvable, UnresolvableReason

# A literal here, not rendering's OME_GROUP: tests/rbac_calls.py reads the group of each list call from
# the constants of the module that makes it.
_OME_GROUP = "ome.io"
_VERSIONS = {"ome.io": "v1beta1", "ai.deckhouse.io": "v1alpha1"}
_PLURALS = {
    "Model": "models",
    "ClusterModel": "clustermodels",
    "BaseModel": "basemodels",
    "ClusterBaseModel": "clusterbasemodels",
    "FineTunedWeight": "finetunedweights",
    "ServingRuntime": "servingruntimes",
    "ClusterServingRuntime": "clusterservingruntimes",
    "AcceleratorClass": "acceleratorclasses",
}
_SERVING_RUNTIMES = "servingruntimes"
_CLUSTER_SERVING_RUNTIMES = "clusterservingruntimes"
_ACCELERATOR_CLASSES = "acceleratorclasses"


class KubeReader:
    """The Reader over the apiserver (the worker's identity: get and list on the four kinds; get and
    create ControllerRevisions in the controller namespace)."""

    def __init__(self, custom: client.CustomObjectsApi, apps: client.AppsV1Api | None = None,
                 controller_namespace: str | None = None) -> None:
        self.custom = custom
        self.apps = apps
        self.controller_namespace = controller_namespace

    def _snapshots(self) -> tuple[client.AppsV1Api, str]:
        if self.apps is None or not self.controller_namespace:
            raise Unresolvable(UnresolvableReason.RUNTIME_REVISION_NOT_FOUND,
                               "this worker has no controller namespace for runtime snapshots")
        return self.apps, self.controller_namespace

    def get_snapshot(self, name: str) -> dict[str, Any] | None:
        apps, namespace = self._snapshots()
        revision = get_or_none(apps.read_namespaced_controller_revision, name, namespace)
        if revision is None:
            return None
        data = revision.data
        return dict(data) if isinstance(data, dict) else None

    def save_snapshot(self, name: str, data: dict[str, Any]) -> None:
        apps, namespace = self._snapshots()
        body = client.V1ControllerRevision(
            metadata=client.V1ObjectMeta(name=name, labels={"app.kubernetes.io/managed-by": "servingops",
                                                            "serving.ome.io/runtime": str(data["name"])[:63]}),
            data=data, revision=1)
        # None when already there: names are content hashes, so it is this snapshot.
        create_unless_exists(apps.create_namespaced_controller_revision, namespace, body)

    def get(self, group: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        plural = _PLURALS[kind]
        version = _VERSIONS[group]
        if namespace:
            found = get_or_none(self.custom.get_namespaced_custom_object, group, version, namespace, plural, name)
        else:
            found = get_or_none(self.custom.get_cluster_custom_object, group, version, plural, name)
        if found is None:
            return None
        return dict(cast(dict[str, Any], found))

    def list(self, group: str, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        """Only runtimes and AcceleratorClasses are listed (selection); spelled out per kind so the worker's role can be
        held to exactly these lists (tests/rbac_calls.py reads the literal plurals)."""
        if kind == "ServingRuntime" and namespace:
            found = call(self.custom.list_namespaced_custom_object, _OME_GROUP, "v1beta1", namespace,
                         _SERVING_RUNTIMES)
        elif kind == "ClusterServingRuntime":
            found = call(self.custom.list_cluster_custom_object, _OME_GROUP, "v1beta1", _CLUSTER_SERVING_RUNTIMES)
        elif kind == "AcceleratorClass":
            found = call(self.custom.list_cluster_custom_object, _OME_GROUP, "v1beta1", _ACCELERATOR_CLASSES)
        else:
            raise ValueError(f"no list of {kind} in namespace {namespace!r} is needed")
        items = cast(dict[str, Any], found).get("items") or []
        return [dict(item) for item in items]
