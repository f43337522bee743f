"""What a migration reads of the cluster: which InferenceReplica serves a component, and whether
a drained pod still has a Ready endpoint in any EndpointSlice; the request annotation's removal and
the audit ledger ConfigMap (ledger.py). Pods and status.migrations are the replica workflow's."""

from __future__ import annotations

import random
import time
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from servingops.activities.migration import ledger
from servingops.activities.migration.types import (
    EndpointQuery,
    LedgerWrite,
    LedgerWritten,
    RequestRemoval,
    Resolved,
    ResolveInput,
)
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.operator_config import DEFAULT_CONTROLLER_NAMESPACE
from servingops.clients.kube.calls import call, get_or_none
from servingops.clients.kube.custom_objects import CustomObjects
from servingops.clients.kube.errors import conflict

_CONFLICT_TRIES = 20
"""Every replica's workflow writes the one ledger: a lost race is read, merged and written again
(after a short random pause, so racing writers spread out); past this, Temporal retries the activity."""
GROUP, VERSION = "ome.io", "v1beta1"


class MigrationActivities:
    """Bound to one ApiClient for the life of the worker."""

    def __init__(self, api_client: client.ApiClient, controller_namespace: str = DEFAULT_CONTROLLER_NAMESPACE,
                 ledger_bound: int = ledger.BOUND_BYTES) -> None:
        self.controller_namespace = controller_namespace
        """Where the audit ledger lives (the worker's own namespace)."""
        self.ledger_bound = ledger_bound
        self.custom = client.CustomObjectsApi(api_client)
        self.objects = CustomObjects(self.custom)
        self.discovery = client.DiscoveryV1Api(api_client)
        self.core = client.CoreV1Api(api_client)

    def _get(self, namespace: str, plural: str, name: str) -> dict[str, Any] | None:
        return cast(dict[str, Any] | None, get_or_none(self.custom.get_namespaced_custom_object,
                                                      GROUP, VERSION, namespace, plural, name))

    @activity.defn(name="migration.resolve")
    def resolve(self, request: ResolveInput) -> Resolved:
        return resolve_replica(request, self._get)

    @activity.defn(name="migration.ready_endpoints")
    def ready_endpoints(self, query: EndpointQuery) -> list[str]:
        """The pods of `query.pods` that some EndpointSlice of the namespace lists as a Ready endpoint
        (the headless Service and every per-revision Service alike)."""
        wanted = set(query.pods)
        found: set[str] = set()
        token: str | None = None
        while True:
            page = call(self.discovery.list_namespaced_endpoint_slice, query.namespace, limit=500,
                        _continue=token)
            for piece in page.items or []:
                for endpoint in piece.endpoints or []:
                    target = endpoint.target_ref
                    ready = endpoint.conditions.ready if endpoint.conditions else None
                    if target is not None and target.kind == "Pod" and target.name in wanted and ready is not False:
                        found.add(target.name)
            token = page.metadata._continue if page.metadata else None
            if not token:
                return sorted(found)

    @activity.defn(name="migration.remove_request")
    def remove_request(self, removal: RequestRemoval) -> bool:
        """Remove the request's annotation from the InferenceService once its record is written. The
        key carries the request UUID, so only that request's annotation goes (a new request has a
        new key). True when this call removed it."""
        removed = False

        def mutate(obj: dict[str, Any]) -> bool:
            nonlocal removed
            annotations = dict(obj["metadata"].get("annotations") or {})
            removed = annotations.pop(removal.annotation, None) is not None
            obj["metadata"]["annotations"] = annotations
            return removed

        self.objects.update(removal.isvc, mutate)
        return removed

    @activity.defn(name="migration.archive")
    def archive(self, write: LedgerWrite) -> LedgerWritten:
        """Put terminal records of one replica in the audit ledger (ledger.py), the oldest entries
        dropped past the bound. Idempotent: records already there as given change nothing (no
        write); a write lost to a concurrent one (409: another replica's) is read and merged again."""
        namespace, name = self.controller_namespace, ledger.NAME
        entries = ledger.entries(write.replica.namespace or "", write.replica.name, write.records)
        for attempt in range(_CONFLICT_TRIES):
            current = get_or_none(self.core.read_namespaced_config_map, name, namespace)
            data = dict((current.data if current is not None else None) or {})
            merged, dropped = ledger.merge(data, entries, self.ledger_bound)
            if current is not None and merged == data:
                return LedgerWritten(changed=False)
            try:
                if current is None:
                    call(self.core.create_namespaced_config_map, namespace, client.V1ConfigMap(
                        metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels={ledger.LABEL: "true"},
                                                     annotations={ledger.DROPPED: str(dropped)}),
                        data=merged))
                else:
                    meta = current.metadata or client.V1ObjectMeta(name=name, namespace=namespace)
                    annotations = dict(meta.annotations or {})
                    annotations[ledger.DROPPED] = str(_count(annotations.get(ledger.DROPPED)) + dropped)
                    meta.annotations = annotations
                    current.metadata = meta
                    current.data = merged
                    # resourceVersion as read: a concurrent write makes this a 409, never a lost entry
                    call(self.core.replace_namespaced_config_map, name, namespace, current)
            except ApiException as exc:
                if conflict(exc):  # created or changed since the read: merge into what is there now
                    time.sleep(random.uniform(0, 0.05 * (attempt + 1)))
                    continue
                raise
            return LedgerWritten(changed=True, dropped=dropped)
        raise RuntimeError(f"ConfigMap {namespace}/{name} kept changing under {_CONFLICT_TRIES} writes")

    def all(self) -> list[Any]:
        return [self.resolve, self.ready_endpoints, self.remove_request, self.archive]


def _count(text: str | None) -> int:
    """The dropped count as annotated; a hand-edited unreadable value restarts it."""
    return int(text) if text and text.isdigit() else 0


def resolve_replica(request: ResolveInput, get: Any) -> Resolved:
    """The replica `<isvc>-<component>` when the service's controller owns it (the component is
    OMENative); otherwise why not. `get(namespace, plural, name)` reads an object or None."""
    ref = request.isvc
    namespace = ref.namespace or ""
    isvc = get(namespace, "inferenceservices", ref.name)
    if isvc is None or (ref.uid and isvc["metadata"].get("uid") != ref.uid):
        return Resolved(refused="InferenceServiceNotFound", message=f"InferenceService {namespace}/{ref.name} is gone")
    if request.component not in set(ComponentType) or not (isvc.get("spec") or {}).get(request.component):
        return Resolved(refused="ComponentNotFound", message=(
            f"InferenceService {namespace}/{ref.name} has no component {request.component!r}"))
    name = f"{ref.name}-{request.component}"
    replica = get(namespace, "inferencereplicas", name)
    owners = (replica or {}).get("metadata", {}).get("ownerReferences") or []
    uid = isvc["metadata"].get("uid")
    if replica is None or not any(o.get("controller") and o.get("uid") == uid for o in owners):
        return Resolved(refused="NotOMENative", message=(
            f"component {request.component} of InferenceService {namespace}/{ref.name} is not OMENative (no "
            f"InferenceReplica {name} serves it): only OMENative Instances can be migrated"))
    return Resolved(replica=name, replica_uid=replica["metadata"]["uid"])


__all__ = ["MigrationActivities", "resolve_replica"]
