"""ControllerRevisions of a replica: the hash that names them and the apiserver calls on them.

Hash input (seed, Runner and InferenceReplicaSpec.pairingProtocol): every runner (its template
included) and the pairing protocol, as canonical JSON (sorted keys), salted with the collision
count as StatefulSet does; 10 hex characters of its SHA-256. topologySpread and everything else
outside the runners is not in it: changing them shapes future pods without rolling the fleet.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.activities.replica.pods import Owner
from servingops.clients.kube.calls import call, create_unless_exists, delete_if_present, get_or_none
from servingops.clients.kube.errors import conflict

HASH_LENGTH = 10


def raw_json(response: Any) -> dict[str, Any]:
    """The JSON of a call made with _preload_content=False: plain objects, opaque fields intact
    and no model classes built (a list of 200 Instances' pods is read on every observe)."""
    return dict(json.loads(response.data))


def as_body(manifest: dict[str, Any]) -> Any:
    """The client's create calls are typed for its model classes but take plain manifests, which
    keep opaque template fields (a container field newer than the client) intact."""
    return manifest


def revision_hash(payload: dict[str, Any], collision_count: int) -> str:
    salted = {**payload, "collisionCount": collision_count}
    canonical = json.dumps(salted, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:HASH_LENGTH]


def controlled_by(obj: dict[str, Any], uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("controller") and r.get("uid") == uid for r in refs)


def same_data(left: Any, right: Any) -> bool:
    """Equal as JSON (what the apiserver stored against what we would store)."""
    return json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True)


def revision_body(owner: Owner, name: str, labels: dict[str, str], data: dict[str, Any],
                  number: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {"name": name, "namespace": owner.namespace, "labels": labels,
                     "ownerReferences": [owner.reference()]},
        "data": data,
        "revision": number,
    }


class RevisionStore:
    """ControllerRevision calls, answered as plain JSON objects (their `data` is opaque)."""

    def __init__(self, apps: client.AppsV1Api) -> None:
        self.apps = apps

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        response = get_or_none(self.apps.read_namespaced_controller_revision, name, namespace,
                               _preload_content=False)
        return raw_json(response) if response is not None else None

    def owned(self, namespace: str, selector: dict[str, str], uid: str) -> list[dict[str, Any]]:
        """The revisions the replica controls, oldest (lowest revision number) first."""
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        response = call(self.apps.list_namespaced_controller_revision, namespace, label_selector=label_selector,
                        _preload_content=False)
        items = [item for item in raw_json(response).get("items") or [] if controlled_by(item, uid)]
        return sorted(items, key=lambda item: (int(item.get("revision") or 0), item["metadata"]["name"]))

    def create(self, namespace: str, body: dict[str, Any]) -> bool:
        """False when the name is taken (409)."""
        return create_unless_exists(self.apps.create_namespaced_controller_revision, namespace,
                                    as_body(body)) is not None

    def delete(self, namespace: str, name: str, uid: str | None) -> bool:
        """False when already gone, or when the name now belongs to another object (uid)."""
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None)
        try:
            return delete_if_present(self.apps.delete_namespaced_controller_revision, name, namespace, body=options)
        except ApiException as exc:
            if conflict(exc):  # the uid precondition failed
                return False
            raise
