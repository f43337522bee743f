"""ServingRuntimeWorkflow in Temporal's time-skipping environment: a permanent refusal of its read
reaches the runtime as its condition instead of failing the workflow (the e2e twin is
tests/test_serving_runtime_e2e.py, the resolution rules tests/test_runtime_inheritance.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.rollout_fakes import until
from tests.histories.record import start_env

pytestmark = [pytest.mark.timeskip, pytest.mark.asyncio]


async def test_a_forbidden_read_becomes_the_condition_and_the_workflow_goes_on() -> None:
    uid, patches, answers = str(uuid.uuid4()), [], ["forbidden", "resolved"]

    @activity.defn(name="serving.resolve_runtime")
    async def resolve_runtime(ref: dict[str, Any]) -> dict[str, Any]:
        if answers[0] == "forbidden":
            raise ApplicationError("403 Forbidden: cannot get clusterservingruntimes", type="Forbidden",
                                   non_retryable=True)
        return {"generation": 1, "chain": ["srt"], "ready": True, "reason": "Resolved", "message": "no inheritance"}

    @activity.defn(name="kube.patch_status")
    async def patch_status(patch: dict[str, Any]) -> bool:
        patches.append(patch)
        return True

    env = await start_env()
    async with env:
        queue = f"runtime-{uuid.uuid4().hex[:8]}"
        ref = {"group": "ome.io", "version": "v1beta1", "plural": "clusterservingruntimes",
               "kind": "ClusterServingRuntime", "name": "srt", "uid": uid}
        async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                          activities=[resolve_runtime, patch_status],
                          workflow_runner=workflow_runner()):
            handle = await env.client.start_workflow("ServingRuntimeWorkflow", {"ref": ref},
                                                     id=f"runtime/_cluster/srt/{uid}", task_queue=queue)
            await until(env, lambda: len(patches) == 1, what="the refusal written")
            [condition] = patches[0]["conditions"]
            assert (condition["status"], condition["reason"]) == ("False", "Forbidden")
            assert "403 Forbidden" in condition["message"]
            assert patches[0]["events"][0]["type"] == "Warning"
            answers[0] = "resolved"
            await until(env, lambda: len(patches) == 2, step=30, what="resolved on the resync")
            assert patches[1]["conditions"][0]["reason"] == "Resolved"
            await handle.signal("delete", {"uid": uid, "generation": 1, "resource_version": "9", "deleting": True})
            await handle.result()
