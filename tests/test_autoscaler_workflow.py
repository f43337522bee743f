"""The InferenceService workflow owns the scaler of each OMENative component (time skipping, the fake
cluster of testkit/rollout_fakes.py with its components projected onto replicas): every pass asks
serving.ensure_autoscaler for an OMENative component and never for another, and
status.components[c].autoscaler is what the activity answers. The fake answers with the real
status rule (autoscaler.autoscaler_status), which tests/test_autoscaler_activities.py holds the real
activity to against the apiserver."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from temporalio import activity
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.activities.serving.autoscaler import AutoscalerObservation, EnsureAutoscalerInput, autoscaler_status
from servingops.activities.serving.types import ObserveInput, ServiceObservation
from servingops.api_models import contract
from servingops.api_models.ome.autoscaling import ComponentAutoscaler
from servingops.api_models.ome.enums import ComponentType
from servingops.workers.sandbox import workflow_runner
from servingops.workflows.inference_service.workflow import ServiceInput
from servingops.workflows.rollout.models import RolloutSettings
from testkit.rollout_fakes import NAME, NAMESPACE, FakeCluster, until
from testkit.rollout_harness import WORKFLOWS, start_env

pytestmark = pytest.mark.timeskip

ENGINE, ROUTER = ComponentType.ENGINE, ComponentType.ROUTER


class NativeCluster(FakeCluster):
    """FakeCluster whose `native` components are served by projected replicas, with a scaler each."""

    def __init__(self, env: WorkflowEnvironment, native: set[ComponentType]) -> None:
        super().__init__(env)
        self.native = native
        self.blocks: dict[ComponentType, dict[str, Any] | None] = {}
        """The component's spec.<c>.autoscaler."""
        self.scaler_status: dict[str, Any] = {}
        """What the live HPA reports (status), for every component."""
        self.asked: list[ComponentType] = []

    def activities(self) -> list[Callable[..., Any]]:
        cluster = self
        base = super().activities()
        observe_fake = next(a for a in base if getattr(a, "__temporal_activity_definition").name == "serving.observe")

        @activity.defn(name="serving.observe")
        async def observe(request: ObserveInput) -> ServiceObservation | None:
            seen = await observe_fake(request)
            if seen is None:
                return None
            for component in seen.components:
                if component.component in cluster.native:
                    component.replica = f"{NAME}-{component.component.value}"
                    component.autoscaler_digest = json.dumps(cluster.blocks.get(component.component), sort_keys=True)
            return seen

        @activity.defn(name="serving.ensure_autoscaler")
        async def ensure_autoscaler(request: EnsureAutoscalerInput) -> AutoscalerObservation:
            cluster.asked.append(request.component)
            if request.component not in cluster.native:
                return AutoscalerObservation()
            raw = cluster.blocks.get(request.component)
            block = ComponentAutoscaler.model_validate(raw) if raw is not None else None
            return AutoscalerObservation(status=autoscaler_status(block, {"status": cluster.scaler_status}))

        return [observe if a is observe_fake else a for a in base] + [ensure_autoscaler]


@contextlib.asynccontextmanager
async def native_service(native: set[ComponentType], blocks: dict[ComponentType, dict[str, Any] | None]
                         ) -> AsyncIterator[tuple[Any, NativeCluster]]:
    env = await start_env()
    cluster = NativeCluster(env, native)
    cluster.blocks.update(blocks)
    for component in blocks:
        cluster.set_desired(component, "a", 2)
    queue = f"autoscale-{uuid.uuid4().hex[:8]}"
    try:
        async with Worker(env.client, task_queue=queue, workflows=list(WORKFLOWS), activities=cluster.activities(),
                          workflow_runner=workflow_runner()):
            handle = await env.client.start_workflow(
                "InferenceServiceWorkflow", ServiceInput(ref=cluster.ref, settings=RolloutSettings()),
                id=contract.inference_service_workflow_id(NAMESPACE, NAME, cluster.uid), task_queue=queue)
            try:
                await until(env, lambda: cluster.conditions.get("Ready", {}).get("status") == "True",
                            what="first Ready")
                yield handle, cluster
            finally:
                with contextlib.suppress(RPCError):
                    await handle.terminate()
    finally:
        await env.shutdown()


@pytest.mark.asyncio
async def test_the_service_owns_and_reports_the_scaler_of_its_omenative_components() -> None:
    hpa = {"class": "HPA", "hpa": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}}
    async with native_service({ENGINE}, {ENGINE: hpa, ROUTER: None}) as (handle, cluster):
        env = cluster.env
        await until(env, lambda: cluster.component(ENGINE).get("autoscaler") is not None, what="autoscaler status")
        assert cluster.component(ENGINE)["autoscaler"] == {
            "class": "HPA", "managedBy": "ome", "specSource": "isvc", "currentReplicas": 0, "desiredReplicas": 0}
        assert ENGINE in cluster.asked and ROUTER not in cluster.asked, "only OMENative components have one"
        assert "autoscaler" not in cluster.component(ROUTER)

        # The HPA acts: the replica's status moves, the replica tells its service, which mirrors it.
        cluster.scaler_status = {"currentReplicas": 2, "desiredReplicas": 3}
        await handle.signal(contract.Signal.REPLICA_CHANGED)
        await until(env, lambda: cluster.component(ENGINE).get("autoscaler", {}).get("desiredReplicas") == 3,
                    what="the scaler's desired count mirrored")
        assert cluster.component(ENGINE)["autoscaler"]["currentReplicas"] == 2

        # The block goes: what the activity answers (managedBy none) replaces the mirrored state.
        cluster.blocks[ENGINE] = None
        cluster.generation += 1
        await handle.signal(contract.Signal.OBJECT_CHANGED, contract.ObjectEvent(
            uid=cluster.uid, generation=cluster.generation, resource_version=str(cluster.generation)))
        await until(env, lambda: cluster.component(ENGINE).get("autoscaler") == {"managedBy": "none"},
                    what="no autoscaler reported")


@pytest.mark.asyncio
async def test_the_scaler_is_asked_for_only_when_its_inputs_move_or_it_is_live() -> None:
    async with native_service({ENGINE}, {ENGINE: None}) as (handle, cluster):
        env = cluster.env
        await until(env, lambda: cluster.component(ENGINE).get("autoscaler") == {"managedBy": "none"},
                    what="no autoscaler reported")
        asked = len(cluster.asked)
        for _ in range(3):  # passes with nothing to apply and nothing live to mirror
            await handle.signal(contract.Signal.REPLICA_CHANGED)
            await env.sleep(5)
        assert len(cluster.asked) == asked, "no scaler, no change: not asked again"

        cluster.blocks[ENGINE] = {"class": "HPA"}
        cluster.generation += 1
        await handle.signal(contract.Signal.OBJECT_CHANGED, contract.ObjectEvent(
            uid=cluster.uid, generation=cluster.generation, resource_version=str(cluster.generation)))
        await until(env, lambda: cluster.component(ENGINE).get("autoscaler", {}).get("managedBy") == "ome",
                    what="the new block applied")
        live = len(cluster.asked)
        await handle.signal(contract.Signal.REPLICA_CHANGED)
        await until(env, lambda: len(cluster.asked) > live, what="a live scaler mirrored on the next pass")
