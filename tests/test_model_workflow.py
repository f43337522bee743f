"""ModelWorkflow under deletion at awkward moments, in Temporal's time-skipping environment
against the fake activities the history recorder uses (tests/histories/model_fakes.py).

The end-to-end twin is tests/test_model_import_e2e.py::test_delete_removes_artifact_and_finalizer,
which deletes right after Ready, the moment the first case below pins down."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.rollout_fakes import until
from tests.histories.model_fakes import FakeModelWorld, sha
from tests.histories.record import start_env

pytestmark = [pytest.mark.timeskip, pytest.mark.asyncio]


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    try:
        yield environment
    finally:
        await environment.shutdown()


@asynccontextmanager
async def served(env: WorkflowEnvironment, world: FakeModelWorld) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    world.task_queue = f"model-{uuid.uuid4().hex[:8]}"
    ref = {"group": "ai.deckhouse.io", "version": "v1alpha1", "plural": "models", "kind": "Model",
           "name": world.name, "namespace": world.namespace, "uid": world.uid}
    async with Worker(env.client, task_queue=world.task_queue, workflows=list(registry_workflows()),
                      activities=world.activities(),
                      workflow_runner=workflow_runner()):
        yield await env.client.start_workflow(
            "ModelWorkflow", {"ref": ref}, id=f"model/{world.namespace}/{world.name}/{world.uid}",
            task_queue=world.task_queue)


async def delete(handle: WorkflowHandle[Any, Any], world: FakeModelWorld) -> None:
    await handle.signal("delete", {"uid": world.uid, "generation": 1, "resource_version": "9", "deleting": True})


def phases(world: FakeModelWorld) -> list[str]:
    return [s["phase"] for s in world.statuses if "phase" in s]


async def test_delete_while_the_spool_is_cleaned_after_ready(env: WorkflowEnvironment) -> None:
    """Ready is written, then the spool is cleaned; a delete in between cancels that cleanup. The
    workflow still deletes the artifact, cleans the spool and removes the finalizer (it used to
    fail on the cancelled activity and leave the finalizer on the object for ever)."""
    world = FakeModelWorld(uid=str(uuid.uuid4()), in_registry={sha("model.safetensors")},
                           held={"source.clean_spool": 1})
    async with served(env, world) as handle:
        await until(env, lambda: world.phase == "Ready" and "source.clean_spool" in world.calls, what="Ready")
        await delete(handle, world)
        await handle.result()
    assert world.cancelled == ["source.clean_spool"]
    assert phases(world)[-2:] == ["Ready", "Deleting"]
    tail = world.calls[world.calls.index("source.clean_spool") + 1:]
    assert tail[-1] == "kube.remove_finalizer", world.calls
    assert {"oci.delete_artifact", "source.clean_spool"} <= set(tail), world.calls


async def test_delete_in_the_middle_of_a_transfer(env: WorkflowEnvironment) -> None:
    """A delete while a file is being fetched cancels the import: the model goes Deleting (not a
    Failed that blames a cancelled activity), the blobs this import had pushed are deleted since
    no artifact will ever name them, and the finalizer is removed."""
    world = FakeModelWorld(uid=str(uuid.uuid4()), held={"source.fetch_file": 2})
    async with served(env, world) as handle:
        await until(env, lambda: world.calls.count("source.fetch_file") == 2 and "oci.push_file" in world.calls,
                    what="the second fetch, the first file pushed")
        await delete(handle, world)
        await handle.result()
    assert "source.fetch_file" in world.cancelled
    assert "Failed" not in phases(world), world.statuses
    assert phases(world)[-1] == "Deleting"
    assert "oci.delete_blobs" in world.calls
    assert "oci.delete_artifact" not in world.calls  # nothing was published
    assert world.calls[-1] == "kube.remove_finalizer", world.calls
