"""The contract between the CRD bridge and the workflows.

One place names every workflow type, builds every workflow id and names every signal, so the
bridge (which maps) and the workflows (which decide) cannot drift apart. A signal carries a
reference and a version, never a copy of the object: the workflow re-reads what it needs.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api_models.refs import ObjectRef

# Namespace names cannot contain "_", so this never collides with a real namespace.
CLUSTER_SCOPE = "_cluster"


class WorkflowType(StrEnum):
    MODEL = "ModelWorkflow"
    CATALOG = "CatalogSourceWorkflow"
    INFERENCE_SERVICE = "InferenceServiceWorkflow"
    ROLLOUT = "RolloutWorkflow"
    MIGRATION = "MigrationWorkflow"
    PLACEMENT = "PlacementWorkflow"
    INFERENCE_REPLICA = "InferenceReplicaWorkflow"
    ROLLOUT_POLICY = "RolloutPolicyWorkflow"
    WORKLOAD_CLUSTER = "WorkloadClusterWorkflow"


IMPLEMENTED_WORKFLOWS = frozenset({WorkflowType.MODEL, WorkflowType.INFERENCE_SERVICE, WorkflowType.ROLLOUT,
                                   WorkflowType.ROLLOUT_POLICY})
"""The workflow types this release's worker registers (a test holds the worker to it). The bridge
follows, by default, only the kinds routed to one of them: an object of another kind would get a
workflow that no worker runs."""


class Signal(StrEnum):
    OBJECT_CHANGED = "object-changed"
    """The object's generation moved, or it is being deleted (ObjectEvent)."""
    DELETE = "delete"
    """The object is being deleted (ObjectEvent)."""
    ANNOTATION = "annotation"
    """A watched annotation changed (AnnotationEvent)."""
    UPLOAD_COMPLETE = "upload-complete"
    REFRESH_NOW = "refresh-now"
    PROMOTE = "promote"
    ROLLBACK = "rollback"
    RETARGET = "retarget"
    CANCEL = "cancel"
    SPEC_CHANGED = "spec-changed"
    HOME_OBSERVED = "home-observed"


# The OME contract's rollout annotations, with upstream OME's meaning (DESIGN.md).
ROLLOUT_PROMOTE = "ome.io/rollout-promote"
ROLLOUT_PROMOTE_FORCE = "ome.io/rollout-promote-force"
ROLLOUT_ROLLBACK = "ome.io/rollout-rollback"
ROLLOUT_RESUME = "ome.io/rollout-resume"
ROLLOUT_PAUSED = "ome.io/rollout-paused"
ROLLOUT_READY_TIMEOUT = "ome.io/rollout-ready-timeout"
ROLLOUT_ANNOTATIONS = (ROLLOUT_PROMOTE, ROLLOUT_PROMOTE_FORCE, ROLLOUT_ROLLBACK, ROLLOUT_RESUME, ROLLOUT_PAUSED,
                       ROLLOUT_READY_TIMEOUT)
MIGRATION_REQUEST_PREFIX = "ome.io/migration-request-v1-"
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class StartObject(BaseModel):
    """The first argument of every per-object workflow."""

    ref: ObjectRef


class ObjectEvent(BaseModel):
    """A version of an object: the workflow ignores a generation at or below one it acted on."""

    uid: str
    generation: int
    resource_version: str
    deleting: bool = False
    annotation: str | None = None
    """The watched annotation whose change triggered this event, if any."""


class AnnotationEvent(BaseModel):
    """A watched annotation's new value (None when it was removed)."""

    uid: str
    generation: int
    resource_version: str
    name: str
    value: str | None


class MigrationRequest(BaseModel):
    """The JSON of an `ome.io/migration-request-v1-<uuid>` annotation (schemaVersion v1)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_version: str = Field(alias="schemaVersion", pattern="^v1$")
    component: str = Field(min_length=1)
    instance: int | str
    from_node: str = Field(min_length=1)
    hint_target_nodes: list[str] = []
    reason: str = ""
    requested_at: str | None = None
    requested_by: str | None = None


class MigrationStart(BaseModel):
    """The input of a migration workflow started from an annotation or the SDK."""

    isvc: ObjectRef
    request_uuid: str
    annotation: str | None
    """The annotation to remove once the request's record is written (None for SDK requests)."""
    request: MigrationRequest


class BadAnnotation(ValueError):
    """A migration request annotation that cannot be accepted; the message says why."""


def parse_migration_request(key: str, value: str) -> tuple[str, MigrationRequest]:
    """(uuid, request) of a migration-request annotation, or BadAnnotation with the reason."""
    request_uuid = key.removeprefix(MIGRATION_REQUEST_PREFIX)
    if not _UUID.match(request_uuid):
        raise BadAnnotation(f"{key}: the suffix must be a lowercase UUID")
    try:
        raw: Any = json.loads(value)
    except json.JSONDecodeError as exc:
        raise BadAnnotation(f"{key}: value is not JSON ({exc.msg})") from exc
    if not isinstance(raw, dict):
        raise BadAnnotation(f"{key}: value must be a JSON object")
    if raw.get("schemaVersion") != "v1":
        raise BadAnnotation(f"{key}: schemaVersion must be \"v1\", got {raw.get('schemaVersion')!r}")
    try:
        return request_uuid, MigrationRequest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise BadAnnotation(f"{key}: {problems}") from exc


def _scope(namespace: str | None) -> str:
    return namespace or CLUSTER_SCOPE


def model_workflow_id(namespace: str | None, name: str, uid: str) -> str:
    return f"model/{_scope(namespace)}/{name}/{uid}"


def catalog_workflow_id(name: str, uid: str) -> str:
    return f"catalog/{name}/{uid}"


def inference_service_workflow_id(namespace: str, name: str, uid: str) -> str:
    return f"isvc/{namespace}/{name}/{uid}"


def rollout_workflow_id(namespace: str, isvc: str, uid: str, group: str) -> str:
    return f"rollout/{namespace}/{isvc}/{uid}/{group}"


def migration_workflow_id(namespace: str, replica: str, request_uuid: str) -> str:
    return f"migration/{namespace}/{replica}/{request_uuid}"


def placement_workflow_id(namespace: str, isvc: str, uid: str) -> str:
    return f"placement/{namespace}/{isvc}/{uid}"


def replica_workflow_id(namespace: str, name: str, uid: str) -> str:
    return f"replica/{namespace}/{name}/{uid}"


def rollout_policy_workflow_id(namespace: str, name: str, uid: str) -> str:
    return f"rolloutpolicy/{namespace}/{name}/{uid}"


def workload_cluster_workflow_id(name: str, uid: str) -> str:
    return f"workloadcluster/{name}/{uid}"
