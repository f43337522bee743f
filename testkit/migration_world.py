"""A MigrationWorkflow's time-skipping world: fake replica, nodes and history keeper."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models import contract
from servingops.api_models.contract import MigrationRequest, MigrationStart
from servingops.api_models.contract.migration import MigrationView
from servingops.api_models.ome.migration import MigrationHistoryEntry
from servingops.api_models.operator_config import LifecycleDefaults
from servingops.api_models.refs import ObjectRef
from servingops.workers.sandbox import workflow_runner
from servingops.workflows.migration import history
from servingops.workflows.migration.workflow import MigrationWorkflow
from servingops.workflows.replica.workflow import InferenceReplicaWorkflow, ReplicaRun
from testkit.replica_fakes import NAME, NAMESPACE, FakeReplicaCluster
from testkit.rollout_fakes import until

NODES = ["node-a", "node-b", "node-c", "node-d"]

ISVC = ObjectRef(group="ome.io", version="v1beta1", plural="inferenceservices", kind="InferenceService",
                 name="svc", namespace=NAMESPACE, uid="isvc-uid")


@workflow.defn(name="InferenceServiceWorkflow", sandboxed=False)  # a test stub, defined beside the tests
class HistoryKeeper:
    """Stands in for the InferenceService's workflow: keeps the window as it does."""

    def __init__(self) -> None:
        self.entries: list[MigrationHistoryEntry] = []

    @workflow.signal(name=contract.Signal.MIGRATION_OUTCOME)
    def outcome(self, entry: MigrationHistoryEntry) -> None:
        self.entries = history.window(self.entries, entry)

    @workflow.query(name="entries")
    def kept(self) -> list[MigrationHistoryEntry]:
        return self.entries

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


@dataclass
class Stack:
    env: WorkflowEnvironment
    cluster: FakeReplicaCluster
    replica: WorkflowHandle[Any, Any]
    queue: str

    async def until(self, predicate: Any, what: str = "") -> None:
        await until(self.env, predicate, step=1.0, what=what, real_seconds=240)

    def rows(self) -> list[dict[str, Any]]:
        return self.cluster.rows()

    def node_of(self, index: int) -> str | None:
        return next((p.node for p in self.cluster.live() if p.index == index), None)

    def records(self) -> dict[str, dict[str, Any]]:
        return {m["requestUUID"]: m for m in self.cluster.status.get("migrations") or []}

    def settled(self, indexes: list[int]) -> bool:
        rows = self.rows()
        return ([r["index"] for r in rows] == indexes and all("operation" not in r and r.get("phase") == "Ready"
                                                               for r in rows)
                and self.cluster.status.get("availableReplicas") == len(indexes))

    async def migrate(self, instance: int | str, from_node: str | None = None, *, to: list[str] | None = None,
                      request_uuid: str | None = None, component: str = "engine",
                      annotation: bool = True) -> tuple[str, WorkflowHandle[Any, Any]]:
        request_uuid = request_uuid or str(uuid.uuid4())
        node = from_node if from_node is not None else self.node_of(int(instance)) or "nowhere"
        key = f"{contract.MIGRATION_REQUEST_PREFIX}{request_uuid}"
        request = MigrationRequest(schemaVersion="v1", component=component, instance=instance, from_node=node,
                                   hint_target_nodes=to or [], reason="fragmentation", requested_by="test")
        if annotation:
            self.cluster.isvc_annotations[key] = request.model_dump_json(by_alias=True)
        handle = await self.env.client.start_workflow(
            MigrationWorkflow.run, MigrationStart(isvc=ISVC, request_uuid=request_uuid,
                                                  annotation=key if annotation else None, request=request),
            id=contract.migration_workflow_id(NAMESPACE, NAME, request_uuid), task_queue=self.queue)
        return request_uuid, handle

    async def outcome(self, handle: WorkflowHandle[Any, Any]) -> MigrationView:
        result: MigrationView = await handle.result()
        return result


@asynccontextmanager
async def stack(env: WorkflowEnvironment, *, replicas: int = 3, nodes: list[str] | None = None,
                operator: LifecycleDefaults | None = None, settle: bool = True, sick: set[str] | None = None,
                **spec: Any) -> AsyncIterator[Stack]:
    cluster = FakeReplicaCluster(env)
    cluster.nodes = list(nodes or NODES)
    cluster.sick_nodes = set(sick or ())
    if operator is not None:
        cluster.lifecycle = operator
    cluster.spec.update(spec, replicas=replicas)
    queue = f"migration-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=[InferenceReplicaWorkflow, MigrationWorkflow,
                                                                 HistoryKeeper],
                      activities=[*cluster.activities(), *cluster.migration_activities()],
                      workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            InferenceReplicaWorkflow.run, ReplicaRun(ref=cluster.ref),
            id=contract.replica_workflow_id(NAMESPACE, NAME, cluster.uid), task_queue=queue)
        s = Stack(env=env, cluster=cluster, replica=handle, queue=queue)
        try:
            if settle:
                await s.until(lambda: s.settled(list(range(replicas))), what=f"{replicas} Ready")
            yield s
            assert not cluster.violations, cluster.violations
            live = [p.name for p in cluster.live()]
            assert len(live) == len(set(live))
        finally:
            with contextlib.suppress(RPCError):
                await s.replica.terminate()
