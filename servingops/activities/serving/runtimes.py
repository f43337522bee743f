"""Reads for the ServingRuntime workflow: a runtime and the parents its `ome.io/inherit-from`
chain names, resolved (rendering/runtime_inheritance.py holds the rules)."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from pydantic import BaseModel
from temporalio import activity

from servingops.activities.reference_reader import KubeReader
from servingops.api_models.ome.constants import GROUP
from servingops.api_models.refs import ObjectRef
from servingops.rendering.runtime_inheritance import RuntimeObject, resolve


class RuntimeResolution(BaseModel):
    """How one runtime's inheritance chain resolved, as its status reports it."""

    generation: int
    chain: list[str]
    ready: bool
    reason: str
    message: str


class RuntimeActivities:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._reader = KubeReader(client.CustomObjectsApi(api_client))

    def _get(self, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        return self._reader.get(GROUP, kind, name, namespace)

    def _lookup(self, kind: str, name: str, namespace: str | None) -> RuntimeObject | None:
        body = self._get(kind, name, namespace)
        return None if body is None else RuntimeObject(kind=kind, name=name, namespace=namespace, body=body)

    @activity.defn(name="serving.resolve_runtime")
    def resolve_runtime(self, ref: ObjectRef) -> RuntimeResolution | None:
        """The runtime's chain walked over the live objects; None when the runtime is gone (or its
        name now belongs to another uid) or being deleted."""
        body = self._get(ref.kind, ref.name, ref.namespace)
        if body is None or (ref.uid and body["metadata"].get("uid") != ref.uid):
            return None
        if body["metadata"].get("deletionTimestamp"):
            return None
        runtime = RuntimeObject(kind=ref.kind, name=ref.name, namespace=ref.namespace, body=body)
        result = resolve(runtime, self._lookup)
        return RuntimeResolution(generation=int(body["metadata"].get("generation", 0)), chain=result.chain,
                                 ready=result.ready, reason=result.reason.value, message=result.message)

    def all(self) -> list[Any]:
        return [self.resolve_runtime]
