"""Create, update and expect rejection of custom objects on the real apiserver."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.api_models.base import KubeResource


def manifest(kind: type[KubeResource], spec: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": kind.crd.api_version,
        "kind": kind.crd.kind,
        "metadata": {"name": name or f"t-{uuid.uuid4().hex[:10]}"},
        "spec": copy.deepcopy(spec),
    }


def create(api: client.ApiClient, kind: type[KubeResource], body: dict[str, Any],
           namespace: str | None = None) -> dict[str, Any]:
    custom = client.CustomObjectsApi(api)
    info = kind.crd
    if info.scope == "Namespaced":
        assert namespace, "a namespaced kind needs a namespace"
        return dict(custom.create_namespaced_custom_object(info.group, info.version, namespace, info.plural,
                                                           body, field_validation="Strict"))
    return dict(custom.create_cluster_custom_object(info.group, info.version, info.plural, body,
                                                    field_validation="Strict"))


def replace(api: client.ApiClient, kind: type[KubeResource], body: dict[str, Any],
            namespace: str | None = None, *, status: bool = False) -> dict[str, Any]:
    custom = client.CustomObjectsApi(api)
    info = kind.crd
    name = body["metadata"]["name"]
    if info.scope == "Namespaced":
        call = (custom.replace_namespaced_custom_object_status if status
                else custom.replace_namespaced_custom_object)
        return dict(call(info.group, info.version, namespace, info.plural, name, body))
    cluster_call = custom.replace_cluster_custom_object_status if status else custom.replace_cluster_custom_object
    return dict(cluster_call(info.group, info.version, info.plural, name, body))


def rejection(call: Any) -> str:
    """Run `call`, which must be refused by the apiserver as invalid; return the message.

    Schema and CEL violations answer 422 Invalid; an unknown field under strict field validation
    answers 400 BadRequest.
    """
    try:
        call()
    except ApiException as exc:
        assert exc.status in (400, 422), f"expected 422 Invalid or 400, got {exc.status}: {exc.body}"
        return str(exc.body)
    raise AssertionError("the apiserver accepted an invalid object")


def new_namespace(api: client.ApiClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name
