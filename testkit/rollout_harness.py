"""Shared pieces of the rollout workflow tests: one time-skipping Temporal test server for the
session, a worker per test on its own task queue, and helpers that drive an InferenceService
through the bridge's signals and read what the fake cluster saw."""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models import contract
from servingops.api_models.contract import ObjectEvent
from servingops.api_models.ome.enums import ComponentType
from servingops.workers.sandbox import workflow_runner
from servingops.workflows.inference_service.workflow import InferenceServiceWorkflow, ServiceInput
from servingops.workflows.rollout.models import RolloutSettings
from servingops.workflows.rollout.workflow import RolloutWorkflow
from testkit.rollout_fakes import NAME, NAMESPACE, FakeCluster, register_search_attributes, until

WORKFLOWS = (InferenceServiceWorkflow, RolloutWorkflow)
"""The workflows a rollout test's worker serves: the service and its runs."""
ENGINE = ComponentType.ENGINE
DECODER = ComponentType.DECODER
ROUTER = ComponentType.ROUTER


async def start_env() -> WorkflowEnvironment:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=shutil.which("temporal-test-server") or ".venv/bin/temporal-test-server",
        data_converter=pydantic_data_converter)
    await register_search_attributes(env)
    return env


@dataclass
class Isvc:
    """One InferenceService under test: its fake cluster and its workflow."""

    env: WorkflowEnvironment
    cluster: FakeCluster
    handle: WorkflowHandle[Any, Any]

    async def changed(self) -> None:
        """What the bridge sends when the generation moved."""
        await self.handle.signal(contract.Signal.OBJECT_CHANGED, ObjectEvent(
            uid=self.cluster.uid, generation=self.cluster.generation, resource_version=str(self.cluster.generation)))

    async def annotate(self, name: str, value: str | None) -> None:
        if value is None:
            self.cluster.annotations.pop(name, None)
        else:
            self.cluster.annotations[name] = value
        await self.handle.signal(contract.Signal.ANNOTATION, self.cluster.annotation_event(name, value))

    def rollout_id(self, group: str) -> str:
        return contract.rollout_workflow_id(NAMESPACE, NAME, self.cluster.uid, group)

    def rollout(self, group: str) -> WorkflowHandle[Any, Any]:
        return self.env.client.get_workflow_handle(self.rollout_id(group))

    async def until(self, predicate: Any, *, step: float = 5.0, what: str = "") -> None:
        await until(self.env, predicate, step=step, what=what)

    def canary(self, component: ComponentType = ENGINE) -> dict[str, Any]:
        return self.cluster.canary(component)

    def weights(self, component: ComponentType = ENGINE) -> dict[str, int]:
        return self.cluster.weights(component)

    def phase(self, component: ComponentType = ENGINE) -> str | None:
        value = self.cluster.component(component).get("rolloutPhase")
        return str(value) if value is not None else None


@asynccontextmanager
async def served(env: WorkflowEnvironment, *, desired: dict[ComponentType, tuple[str, int]] | None = None,
                 rollout: dict[str, Any] | None = None, ready_delay: float = 10.0,
                 settings: RolloutSettings | None = None,
                 unservable: dict[ComponentType, str] | None = None) -> AsyncIterator[Isvc]:
    """A created InferenceService, already serving its first revision at 100% and Ready; with
    `unservable` components it is only started (it cannot become Ready)."""
    cluster = FakeCluster(env, ready_delay=ready_delay)
    for component, (revision, replicas) in (desired or {ENGINE: ("a", 4)}).items():
        cluster.set_desired(component, revision, replicas)
    cluster.spec_rollout = rollout
    cluster.unservable.update(unservable or {})
    queue = f"rollout-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(WORKFLOWS), activities=cluster.activities(),
                      workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "InferenceServiceWorkflow",
            ServiceInput(ref=cluster.ref, settings=settings or RolloutSettings()),
            id=contract.inference_service_workflow_id(NAMESPACE, NAME, cluster.uid), task_queue=queue)
        isvc = Isvc(env=env, cluster=cluster, handle=handle)

        async def bridge(name: str, value: str | None) -> None:
            await handle.signal(contract.Signal.ANNOTATION, cluster.annotation_event(name, value))

        cluster.bridge = bridge
        try:
            if not unservable:
                await isvc.until(lambda: cluster.conditions.get("Ready", {}).get("status") == "True",
                                 what="first Ready")
            yield isvc
            # A call the real activity refuses is a workflow bug even when the test's own checks
            # passed (the workflow may have parked on it): fail here, naming it.
            assert not cluster.violations, f"calls the real activities refuse: {cluster.violations}"
        finally:
            # Nothing of this test may keep the shared test server's clock locked for the next one:
            # the time-skipping server does not apply ParentClosePolicy, so close the children too.
            with contextlib.suppress(RPCError):
                await handle.terminate()
            for key in ("0", "1", "2", "engine", "decoder", "router"):
                with contextlib.suppress(RPCError):
                    await isvc.rollout(key).terminate()


async def roll_to(isvc: Isvc, revision: str, component: ComponentType = ENGINE, *, replicas: int | None = None,
                  rollout: dict[str, Any] | None = None) -> None:
    """Edit the spec (optionally spec.rollout too) so `component` renders `revision`, then tell
    the workflow, as the bridge would."""
    if rollout is not None:
        isvc.cluster.spec_rollout = rollout
    current = isvc.cluster.desired[component][1]
    isvc.cluster.set_desired(component, revision, replicas if replicas is not None else current)
    await isvc.changed()


def canary_group(steps: list[dict[str, Any]], *, components: list[str] | None = None, **canary: Any) -> dict[str, Any]:
    return {"groups": [{"components": components or ["engine"], "canary": {"steps": steps, **canary}}]}


def analysis(failure_limit: int = 2, interval: str = "1m", on_inconclusive: str | None = None,
             initial_delay: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "interval": interval, "failureLimit": failure_limit,
        "metrics": [{"name": "error-rate", "operator": "LT", "threshold": "0.05",
                     "query": 'sum(rate(errors{service="{{.CanaryService}}",ns="{{ .Namespace }}"}[1m]))'}]}
    if on_inconclusive:
        body["onInconclusive"] = on_inconclusive
    if initial_delay:
        body["initialDelay"] = initial_delay
    return body


async def rolled_out(isvc: Any, revision: str) -> None:
    """latestRolledoutRevision is recorded when the run closes, a moment after the phase reads
    Stable (or the coordination Idle): wait for it rather than race it."""
    name = f"llama-engine-rev-{revision}"
    await isvc.until(lambda: isvc.cluster.component(ENGINE).get("latestRolledoutRevision") == name,
                     what=f"latestRolledoutRevision {name}")
