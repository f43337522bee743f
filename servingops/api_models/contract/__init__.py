"""The contract between the bridge, the workflows, the SDK and the CLI.

One place names every workflow type, builds every workflow id and names every signal, query and
update with its payload, so the bridge (which maps), the workflows (which decide) and the SDK
(which asks) cannot drift apart. A signal from the bridge carries a reference and a version,
never a copy of the object: the workflow re-reads what it needs. The rollout workflows' payloads
and query answers are in `api_models.contract.rollout`.

Every name here is in stored histories: a member may be added, never renamed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.refs import ObjectRef

# Namespace names cannot contain "_", so this never collides with a real namespace.
CLUSTER_SCOPE = "_cluster"


class WorkflowType(StrEnum):
    MODEL = "ModelWorkflow"
    CATALOG = "CatalogSourceWorkflow"
    INFERENCE_SERVICE = "InferenceServiceWorkflow"
    ROLLOUT = "RolloutWorkflow"
    MIGRATION = "MigrationWorkflow"
    INFERENCE_REPLICA = "InferenceReplicaWorkflow"
    ROLLOUT_POLICY = "RolloutPolicyWorkflow"
    AUTOSCALER_POLICY = "AutoscalerPolicyWorkflow"
    WORKLOAD_CLUSTER = "WorkloadClusterWorkflow"
    PLACEMENT = "PlacementWorkflow"
    SERVING_RUNTIME = "ServingRuntimeWorkflow"
    BASE_MODEL = "BaseModelWorkflow"
    ACCELERATOR_CAPACITY = "AcceleratorCapacityWorkflow"
    ACCELERATOR_CLASS = "AcceleratorClassWorkflow"
    """The inventory (status) of one AcceleratorClass."""
    ACCELERATOR_QUOTA = "AcceleratorQuotaWorkflow"
    """One AcceleratorQuota node materialized into Kueue, and its status."""
    TRAFFIC_MAP = "TrafficMapWorkflow"
    """The routing controller and publisher of one routed InferenceService's TrafficMap."""
    BENCHMARK_JOB = "BenchmarkJobWorkflow"
    """One BenchmarkJob: a genai-bench Job per generation, its status."""
    CATALOG_REFRESH_TICK = "CatalogRefreshTickWorkflow"
    """Started by a catalog source's Temporal Schedule: signals refresh-now to the source's workflow."""


IMPLEMENTED_WORKFLOWS = frozenset({WorkflowType.MODEL, WorkflowType.INFERENCE_SERVICE, WorkflowType.ROLLOUT,
                                   WorkflowType.ROLLOUT_POLICY, WorkflowType.SERVING_RUNTIME,
                                   WorkflowType.BASE_MODEL, WorkflowType.INFERENCE_REPLICA,
                                   WorkflowType.MIGRATION, WorkflowType.WORKLOAD_CLUSTER,
                                   WorkflowType.PLACEMENT, WorkflowType.ACCELERATOR_CAPACITY,
                                   WorkflowType.CATALOG, WorkflowType.CATALOG_REFRESH_TICK,
                                   WorkflowType.TRAFFIC_MAP, WorkflowType.ACCELERATOR_CLASS,
                                   WorkflowType.ACCELERATOR_QUOTA,
                                   WorkflowType.AUTOSCALER_POLICY, WorkflowType.BENCHMARK_JOB})
"""The workflow types this release's worker registers (a test holds the worker to it). The bridge
checks every dispatch against it: an event whose workflow type is not here (a migration request,
for a worker built without MigrationWorkflow) starts nothing, since nothing would ever run it, and
becomes a Warning Event on the object. By default the bridge follows only the kinds routed to one of these types."""


class Signal(StrEnum):
    """Every signal name, with its payload beside it. Workflows register with these members and
    the bridge, the upload endpoint, the SDK and other workflows send with them."""

    OBJECT_CHANGED = "object-changed"
    """Bridge -> entity workflows: the object's generation moved, or it is being deleted (ObjectEvent)."""
    DELETE = "delete"
    """Bridge -> entity workflows: the object is being deleted (ObjectEvent)."""
    ANNOTATION = "annotation"
    """Bridge -> InferenceServiceWorkflow (rollout annotations, and the ome.io/* traffic annotations:
    api_models.ome.traffic_annotations) and ServingRuntimeWorkflow (ome.io/inherit-from): a watched
    annotation changed (AnnotationEvent)."""
    UPLOAD_COMPLETE = "upload-complete"
    """Upload endpoint (ingress.uploads) -> ModelWorkflow: the upload finished
    (api_models.contract.uploads.UploadComplete)."""
    REFRESH_NOW = "refresh-now"
    """InferenceServiceWorkflow -> RolloutPolicyWorkflow: re-count attachments now (no payload).
    CatalogRefreshTickWorkflow (a source's Temporal Schedule) -> CatalogSourceWorkflow: refresh the
    catalog now (no payload)."""
    ROLLOUT_REPORT = "rollout-report"
    """RolloutWorkflow -> InferenceServiceWorkflow: a run's progress (contract.rollout.RolloutReport)."""
    # InferenceServiceWorkflow -> RolloutWorkflow: the ome.io/rollout-* annotations forwarded,
    # each carrying the annotation's value (str, None when removed); see ROLLOUT_SIGNALS.
    PROMOTE = "promote"
    """ome.io/rollout-promote (str | None). Also the name of Update.PROMOTE."""
    PROMOTE_FORCE = "promote-force"
    """ome.io/rollout-promote-force (str | None)."""
    ROLLBACK = "rollback"
    """ome.io/rollout-rollback (str | None). Also the name of Update.ROLLBACK."""
    RESUME = "resume"
    """ome.io/rollout-resume (str | None)."""
    PAUSED = "paused"
    """ome.io/rollout-paused (str | None)."""
    READY_TIMEOUT = "ready-timeout"
    """ome.io/rollout-ready-timeout (str | None)."""
    RUN_ANNOTATION = "run-annotation"
    """InferenceServiceWorkflow -> RolloutWorkflow: an ome.io/rollout-* annotation changed
    (AnnotationEvent), forwarded (the durable path). The bridge sends the same change straight to the
    service's running rollout runs as Update.RUN_ANNOTATION (best effort: the shortest path from a
    promote to its weights); the run acts on each change once, by the event's resourceVersion."""
    RETARGET = "retarget"
    """InferenceServiceWorkflow -> RolloutWorkflow: new targets and/or plan (contract.rollout.RetargetRequest)."""
    NODE_REPORT = "node-report"
    """-> BaseModelWorkflow: a node agent's report of the model changed; read the reports now (no
    payload). Optional: the workflow also re-reads them on its own timer."""
    REPLICA_CHANGED = "replica-changed"
    """InferenceReplicaWorkflow -> InferenceServiceWorkflow: the status of a replica the service
    projects moved; observe again (no payload). The bridge sends it too (never a start; coalesced per
    service) when a HorizontalPodAutoscaler of one of the service's components moved what the service
    mirrors of it (its counts, its conditions): the service's "look again" wake-up."""
    AUTOSCALER_POLICY_CHANGED = "autoscaler-policy-changed"
    """AutoscalerPolicyWorkflow -> InferenceServiceWorkflow: a policy one of its components references
    has a new spec; observe again, so the component's scaler is rendered from it (no payload). The
    service also counts its references for the policy: AutoscalerPolicyWorkflow re-counts on refresh-now."""
    PODS_CHANGED = "pods-changed"
    """Bridge -> InferenceReplicaWorkflow: a pod of the replica changed (no payload; the workflow
    re-reads its pods). Sent only to a running workflow, never a start; coalesced per replica."""
    MIGRATION_REQUEST = "migration-request"
    """MigrationWorkflow -> InferenceReplicaWorkflow: judge and record a migration request
    (api_models.contract.migration.MigrationAsk). Idempotent per request UUID."""
    MIGRATION_RECORD = "migration-record"
    """InferenceReplicaWorkflow -> MigrationWorkflow: the request's record moved, once written to
    status.migrations (api_models.ome.migration.MigrationStatus)."""
    MIGRATION_OUTCOME = "migration-outcome"
    """MigrationWorkflow -> InferenceServiceWorkflow: a migration of one of its Instances ended
    (api_models.ome.migration.MigrationHistoryEntry); the service keeps status.migrationHistory."""
    ROUTING_CHANGED = "routing-changed"
    """-> TrafficMapWorkflow (no payload): something the routing table is computed from moved without a
    new generation of the InferenceService (PlacementWorkflow: status.placement written; the bridge: a
    routing annotation changed, or the TrafficMap itself was written by someone). Recompute now."""
    PUBLICATION = "publication"
    """TrafficMapWorkflow -> PlacementWorkflow: what the global route may send traffic to
    (contract.routing.Publication), before and after each write of it. Placement withdraws a home's copy
    only once the latest one leaves that home out."""
    MIGRATION_CANCEL = "migration-cancel"
    """SDK/CLI -> MigrationWorkflow (no payload), and MigrationWorkflow -> InferenceReplicaWorkflow
    (the request UUID): stop a migration whose source is still in rotation."""


class Query(StrEnum):
    STATE = "state"
    """Every entity workflow's state. InferenceServiceWorkflow answers contract.rollout.ServiceView,
    RolloutWorkflow contract.rollout.RolloutState, ModelWorkflow and RolloutPolicyWorkflow their
    own state models (derived from workflows.entity.EntityState)."""


class Update(StrEnum):
    """The RolloutWorkflow's synchronous requests (the SDK and CLI), equivalent to the annotations."""

    PROMOTE = "promote"
    """Argument contract.rollout.PromoteRequest; result CanaryStatus once the step advanced."""
    ROLLBACK = "rollback"
    """No argument; result CanaryStatus once traffic is back on the stable revision."""
    RUN_ANNOTATION = "run-annotation"
    """Bridge -> RolloutWorkflow: Signal.RUN_ANNOTATION's change (AnnotationEvent), sent straight to a
    running run; no result. An update, not a signal, because the server hands an update to the worker
    in a workflow task it does not persist first (a speculative task): the run starts deciding about
    10 ms sooner (docs/metrics.md, "A promote's path"). Rejected, leaving nothing in the history, when
    the run has acted on that change or a newer one already."""


# The OME contract's rollout annotations, with upstream OME's meaning (DESIGN.md).
ROLLOUT_PROMOTE = "ome.io/rollout-promote"
ROLLOUT_PROMOTE_FORCE = "ome.io/rollout-promote-force"
ROLLOUT_ROLLBACK = "ome.io/rollout-rollback"
ROLLOUT_RESUME = "ome.io/rollout-resume"
ROLLOUT_PAUSED = "ome.io/rollout-paused"
ROLLOUT_READY_TIMEOUT = "ome.io/rollout-ready-timeout"
ROLLOUT_SIGNALS: dict[str, Signal] = {
    ROLLOUT_PROMOTE: Signal.PROMOTE,
    ROLLOUT_PROMOTE_FORCE: Signal.PROMOTE_FORCE,
    ROLLOUT_ROLLBACK: Signal.ROLLBACK,
    ROLLOUT_RESUME: Signal.RESUME,
    ROLLOUT_PAUSED: Signal.PAUSED,
    ROLLOUT_READY_TIMEOUT: Signal.READY_TIMEOUT,
}
"""Rollout annotation -> the RolloutWorkflow signal the InferenceService workflow forwards it as."""
ROLLOUT_ANNOTATIONS = tuple(ROLLOUT_SIGNALS)
MIGRATION_REQUEST_PREFIX = "ome.io/migration-request-v1-"
RUNTIME_INHERIT_FROM = "ome.io/inherit-from"
"""On a ServingRuntime / ClusterServingRuntime: the parent runtime whose spec it overrides."""
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


def catalog_schedule_id(name: str, uid: str) -> str:
    """The Temporal Schedule that drives the refreshes of ModelCatalogSource `name` (uid: the source's)."""
    return f"catalog/{name}/{uid}/refresh"


def benchmark_job_workflow_id(namespace: str, name: str, uid: str) -> str:
    return f"benchmarkjob/{namespace}/{name}/{uid}"


def inference_service_workflow_id(namespace: str, name: str, uid: str) -> str:
    return f"isvc/{namespace}/{name}/{uid}"


def rollout_workflow_id(namespace: str, isvc: str, uid: str, group: str) -> str:
    return f"rollout/{namespace}/{isvc}/{uid}/{group}"


def rollout_unit_keys(spec: Mapping[str, Any]) -> list[str]:
    """Every key a rollout run of this InferenceService spec can have (workflows.rollout.plan.units):
    each spec.rollout group's index, and each component set in the spec (a component in no group rolls
    on its own). A superset is fine: it names the runs that may exist, not the ones that do."""
    rollout = spec.get("rollout")
    groups = rollout.get("groups") if isinstance(rollout, Mapping) else None
    keys = [str(index) for index in range(len(groups))] if isinstance(groups, list) else []
    return keys + [component.value for component in ComponentType if spec.get(component.value) is not None]


def resource_version_order(resource_version: str) -> int | None:
    """A resourceVersion as a number to order two changes of one object by, or None when it is not
    one. Kubernetes calls the value opaque; every apiserver backed by etcd writes etcd's revision,
    an integer that grows with every write, and that is what ordering needs here."""
    return int(resource_version) if resource_version.isdigit() else None


def migration_workflow_id(namespace: str, replica: str, request_uuid: str) -> str:
    return f"migration/{namespace}/{replica}/{request_uuid}"


def replica_workflow_id(namespace: str, name: str, uid: str) -> str:
    return f"replica/{namespace}/{name}/{uid}"


def rollout_policy_workflow_id(namespace: str, name: str, uid: str) -> str:
    return f"rolloutpolicy/{namespace}/{name}/{uid}"


def autoscaler_policy_workflow_id(namespace: str, name: str, uid: str) -> str:
    return f"autoscalerpolicy/{namespace}/{name}/{uid}"


def serving_runtime_workflow_id(namespace: str | None, name: str, uid: str) -> str:
    """ServingRuntime (namespaced) and ClusterServingRuntime (namespace None) alike."""
    return f"runtime/{_scope(namespace)}/{name}/{uid}"


def placement_workflow_id(namespace: str, isvc: str, uid: str) -> str:
    """One placement workflow per source InferenceService (uid: the source's)."""
    return f"placement/{namespace}/{isvc}/{uid}"


def traffic_map_workflow_id(namespace: str, isvc: str, uid: str) -> str:
    """One routing workflow per routed InferenceService (uid: the InferenceService's)."""
    return f"trafficmap/{namespace}/{isvc}/{uid}"


def workload_cluster_workflow_id(name: str, uid: str) -> str:
    return f"workloadcluster/{name}/{uid}"


def capacity_workflow_id(name: str, uid: str) -> str:
    """One capacity report per root AcceleratorQuota (cluster-scoped: a name and a uid)."""
    return f"capacity/{name}/{uid}"


def accelerator_quota_workflow_id(name: str, uid: str) -> str:
    """One quota-tree workflow per AcceleratorQuota node (cluster-scoped: a name and a uid)."""
    return f"acceleratorquota/{name}/{uid}"


def accelerator_class_workflow_id(name: str, uid: str) -> str:
    """One inventory workflow per AcceleratorClass (cluster-scoped: a name and a uid)."""
    return f"acceleratorclass/{name}/{uid}"


def basemodel_workflow_id(namespace: str | None, name: str, uid: str) -> str:
    """BaseModel (namespaced), ClusterBaseModel and FineTunedWeight (namespace None) alike. The uid
    tells a ClusterBaseModel and a FineTunedWeight of the same name apart."""
    return f"basemodel/{_scope(namespace)}/{name}/{uid}"
