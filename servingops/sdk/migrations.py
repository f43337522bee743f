"""MigrationClient: request, list and cancel surge migrations of OMENative Instances
(docs/migration.md). Equivalent to writing an `ome.io/migration-request-v1-<uuid>` annotation,
without the annotation: the SDK starts the request's MigrationWorkflow itself (annotation None),
with the id the bridge would use, so a UUID is one migration whichever way it came.

The records are read from the InferenceReplica's status.migrations (the replica's workflow is
their only writer); a request's own progress also answers the MigrationWorkflow's `state` query.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client as kube
from temporalio.client import Client

from servingops.api_models import contract
from servingops.api_models.contract import MigrationRequest, MigrationStart, Query, Signal, WorkflowType
from servingops.api_models.contract.migration import MigrationView
from servingops.api_models.ome.instance_keys import INSTANCE_LABEL, REPLICA_LABEL, RUNNER_LABEL, SLOT_LABEL
from servingops.api_models.ome.migration import MigrationStatus
from servingops.api_models.refs import ObjectRef

GROUP, VERSION = "ome.io", "v1beta1"


class MigrationRefused(RuntimeError):
    """The request cannot be made as asked (no such Instance, not scheduled, not OMENative)."""


class MigrationClient:
    def __init__(self, temporal_client: Client, kube_api_client: kube.ApiClient, task_queue: str) -> None:
        self.temporal = temporal_client
        self.kube = kube_api_client
        self.task_queue = task_queue

    def _get(self, namespace: str, plural: str, name: str) -> dict[str, Any]:
        return cast(dict[str, Any], kube.CustomObjectsApi(self.kube).get_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, name))

    def _node_of(self, namespace: str, replica: str, instance: int) -> str:
        """The node the Instance's anchor pod runs on (from_node is part of the request contract)."""
        pods = kube.CoreV1Api(self.kube).list_namespaced_pod(
            namespace, label_selector=f"{REPLICA_LABEL}={replica},{INSTANCE_LABEL}={instance}").items
        placed: list[tuple[bool, str, str, str]] = []
        for pod in pods:
            meta, spec = pod.metadata, pod.spec
            if meta is None or spec is None or meta.deletion_timestamp is not None or not spec.node_name:
                continue
            labels = meta.labels or {}
            # The anchor pod (leader, or the single pod) first; then the lower slot.
            placed.append((labels.get(RUNNER_LABEL) not in ("leader", "default"), labels.get(SLOT_LABEL, "0"),
                           meta.name or "", spec.node_name))
        if not placed:
            raise MigrationRefused(f"Instance {instance} of InferenceReplica {namespace}/{replica} has no pod "
                                   "on a node")
        return min(placed)[3]

    async def migrate(self, namespace: str, isvc: str, *, component: str, instance: int,
                      to: list[str] | None = None, reason: str = "", requested_by: str | None = None,
                      from_node: str | None = None) -> str:
        """Start the migration of one Instance; answers the request UUID at once (follow it with
        `state` or `records`)."""
        obj = await asyncio.to_thread(self._get, namespace, "inferenceservices", isvc)
        replica = f"{isvc}-{component}"
        node = from_node or await asyncio.to_thread(self._node_of, namespace, replica, instance)
        request_uuid = str(uuid.uuid4())
        request = MigrationRequest.model_validate({
            "schemaVersion": "v1", "component": component, "instance": instance, "from_node": node,
            "hint_target_nodes": list(to or []), "reason": reason,
            "requested_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "requested_by": requested_by})
        ref = ObjectRef(group=GROUP, version=VERSION, plural="inferenceservices", kind="InferenceService",
                        name=isvc, namespace=namespace, uid=obj["metadata"]["uid"])
        await self.temporal.start_workflow(
            WorkflowType.MIGRATION.value,
            MigrationStart(isvc=ref, request_uuid=request_uuid, annotation=None, request=request),
            id=contract.migration_workflow_id(namespace, replica, request_uuid), task_queue=self.task_queue)
        return request_uuid

    async def records(self, namespace: str, isvc: str, component: str) -> list[MigrationStatus]:
        """status.migrations of the component's InferenceReplica (terminal ones for the rate window)."""
        obj = await asyncio.to_thread(self._get, namespace, "inferencereplicas", f"{isvc}-{component}")
        return [MigrationStatus.model_validate(m) for m in (obj.get("status") or {}).get("migrations") or []]

    async def state(self, namespace: str, isvc: str, component: str, request_uuid: str) -> MigrationView:
        """The request's MigrationWorkflow state (its phases as the replica reported them)."""
        handle = self.temporal.get_workflow_handle(
            contract.migration_workflow_id(namespace, f"{isvc}-{component}", request_uuid))
        view: MigrationView = await handle.query(Query.STATE, result_type=MigrationView)
        return view

    async def cancel(self, namespace: str, isvc: str, component: str, request_uuid: str) -> None:
        """Ask to stop the migration: honoured while its source is still in rotation (queued or
        surging); once the drain began the migration completes."""
        await self.temporal.get_workflow_handle(
            contract.migration_workflow_id(namespace, f"{isvc}-{component}", request_uuid)).signal(
            Signal.MIGRATION_CANCEL)


__all__ = ["MigrationClient", "MigrationRefused"]
