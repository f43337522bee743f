"""BaseModelWorkflow's state machine in Temporal's time-skipping environment, against the fake
activities the history recorder uses (tests/histories/basemodel_fakes.py): refused schemes, the
hf:// import through the shared import steps, spec metadata filled without overwriting the user's,
node reports folded into status, pvc://, modelpack://, local://, a storage change, and deletion with
and without another model holding the same digest.

The real activities are tested in tests/test_basemodel_activities.py, the whole chain in
tests/test_basemodel_e2e.py."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.rollout_fakes import until
from tests.histories.basemodel_fakes import ARTIFACT, FakeBaseModelWorld
from tests.histories.model_fakes import REGISTRY, sha
from tests.histories.record import start_env

pytestmark = [pytest.mark.timeskip, pytest.mark.asyncio]

MANIFEST = f"sha256:{sha('manifest')}"
IMPORTED = f"{REGISTRY['address']}/{REGISTRY['repository']}@{MANIFEST}"
IMPORT_ACTIVITIES = {"host.claim", "source.resolve", "source.fetch_file", "oci.push_file", "model.inspect",
                     "oci.push_manifest"}


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    try:
        yield environment
    finally:
        await environment.shutdown()


def world_of(**kwargs: Any) -> FakeBaseModelWorld:
    return FakeBaseModelWorld(uid=str(uuid.uuid4()), **kwargs)


@asynccontextmanager
async def served(env: WorkflowEnvironment, world: FakeBaseModelWorld) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    world.task_queue = f"basemodel-{uuid.uuid4().hex[:8]}"
    scope = world.namespace if world.kind == "BaseModel" else "_cluster"
    async with Worker(env.client, task_queue=world.task_queue, workflows=list(registry_workflows()),
                      activities=world.activities(),
                      workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "BaseModelWorkflow", {"ref": world.ref}, id=f"basemodel/{scope}/{world.name}/{world.uid}",
            task_queue=world.task_queue)
        try:
            yield handle
        finally:
            # A workflow left polling without its worker would hold the shared server's clock.
            with contextlib.suppress(RPCError):
                await env.client.get_workflow_handle(handle.id).terminate()


async def delete(handle: WorkflowHandle[Any, Any], world: FakeBaseModelWorld) -> None:
    world.start_deleting()
    await handle.signal("delete", {"uid": world.uid, "generation": world.generation, "resource_version": "9",
                                   "deleting": True})


async def changed(handle: WorkflowHandle[Any, Any], world: FakeBaseModelWorld) -> None:
    """What the bridge sends when the generation moved."""
    await handle.signal("object-changed", {"uid": world.uid, "generation": world.generation,
                                           "resource_version": str(world.generation)})


def last(world: FakeBaseModelWorld, key: str) -> Any:
    for status in reversed(world.statuses):
        if key in status:
            return status[key]
    return None


@pytest.mark.parametrize(("uri", "reason", "named"), [
    ("oci://n/ns/b/bucket/o/llama", "UnsupportedStorage", "oci://"),
    ("s3://bucket/llama", "UnsupportedStorage", "s3://"),
    ("az://account/container/llama", "UnsupportedStorage", "az://"),
    ("gs://bucket/llama", "UnsupportedStorage", "gs://"),
    ("github://acme/llama@v1", "UnsupportedStorage", "github://"),
    ("vendor://acme/models/llama", "UnsupportedStorage", "vendor://"),
    ("ftp://example.com/llama", "InvalidStorageUri", "ftp://"),
    ("just some words", "InvalidStorageUri", "just some words"),
    ("hf://only-one-part", "InvalidStorageUri", "hf://only-one-part"),
])
async def test_a_refused_storage_uri_fails_with_a_condition_and_a_warning(
        env: WorkflowEnvironment, uri: str, reason: str, named: str) -> None:
    world = world_of(storage_uri=uri)
    async with served(env, world):
        await until(env, lambda: world.state == "Failed", what="Failed")
    ready = [c for c in world.conditions if c["type"] == "Ready"]
    assert ready and ready[-1]["status"] == "False" and ready[-1]["reason"] == reason, world.conditions
    assert named in ready[-1]["message"]
    assert "hf://<org>/<repo>[@<revision>]" in ready[-1]["message"]  # what is served is listed
    assert {"type": "Warning", "reason": reason, "message": ready[-1]["message"]} in world.events
    assert not IMPORT_ACTIVITIES & set(world.calls), world.calls
    assert "basemodel.annotate" not in world.calls


async def test_hf_import_annotates_and_aggregates_node_reports(env: WorkflowEnvironment) -> None:
    """hf://: imported through the shared import steps (a blob the registry holds is neither fetched
    whole nor pushed), annotated with the artifact, In_Transit until a node reports Ready."""
    world = world_of(storage_uri="hf://acme/tiny-llama@main", in_registry={sha("model.safetensors")})
    async with served(env, world) as handle:
        await until(env, lambda: world.annotations.get(ARTIFACT) == IMPORTED, what="annotated")
        await until(env, lambda: world.state == "In_Transit", what="In_Transit")
        states = [s["state"] for s in world.statuses if "state" in s]
        assert states[0] == "Importing" and "Ready" not in states
        assert world.calls.count("oci.push_file") == 2  # config.json and tokenizer.json; the weight was there
        world.reports = [{"node": "kwok-node-0", "status": "Updating", "digest": MANIFEST, "message": "pulling"}]
        await handle.signal("node-report")
        await until(env, lambda: world.calls.count("basemodel.node_reports") >= 2, what="a re-read")
        assert world.state == "In_Transit"
        world.reports = [{"node": "kwok-node-0", "status": "Ready", "digest": MANIFEST, "message": ""}]
        await until(env, lambda: world.state == "Ready", step=5.0, what="Ready from the fast poll")
        assert last(world, "nodesReady") == ["kwok-node-0"] and last(world, "nodesFailed") == []
        query = await handle.query("state")
        assert query["imported"] and query["digest"] == MANIFEST
    assert "source.clean_spool" in world.calls


async def test_metadata_fills_what_the_user_left_empty_and_does_not_loop(env: WorkflowEnvironment) -> None:
    """The inspection fills modelType, modelParameterSize, maxTokens, modelFormat, modelFramework;
    the user's modelArchitecture and quantization stay. The spec write bumps the generation; the
    bridge's echo of that generation starts nothing again, while observedGeneration follows it."""
    world = world_of(kind="BaseModel", storage_uri="hf://acme/tiny-llama",
                     spec={"modelArchitecture": "MyLlama", "quantization": "fp8"})
    async with served(env, world) as handle:
        await until(env, lambda: world.annotations.get(ARTIFACT) == IMPORTED, what="annotated")
        assert world.generation == 2
        await changed(handle, world)  # the bridge saw generation 2: our own write
        await until(env, lambda: world.calls.count("basemodel.node_reports") >= 3, step=5.0, what="polls")
    assert world.spec["modelArchitecture"] == "MyLlama" and world.spec["quantization"] == "fp8"
    assert world.spec["modelType"] == "llama"
    assert world.spec["modelParameterSize"] == "1.10B"
    assert world.spec["maxTokens"] == 2048
    assert world.spec["modelFormat"] == {"name": "safetensors", "version": "1.0.0"}
    assert world.spec["modelFramework"] == {"name": "transformers"}
    assert world.fill_calls == 1 and world.calls.count("source.resolve") == 1
    assert world.calls.count("basemodel.read") == 1, world.calls  # the echo was not even re-read
    assert last(world, "observedGeneration") == 2


async def test_a_spec_edit_that_keeps_the_storage_only_moves_observed_generation(env: WorkflowEnvironment) -> None:
    world = world_of(storage_uri="hf://acme/tiny-llama")
    async with served(env, world) as handle:
        await until(env, lambda: world.state == "In_Transit", what="In_Transit")
        world.set_spec(displayName="Tiny")
        await changed(handle, world)
        await until(env, lambda: last(world, "observedGeneration") == world.generation, step=5.0,
                    what="observedGeneration")
    assert world.calls.count("source.resolve") == 1


async def test_reports_are_folded_as_upstream_and_only_for_the_current_digest(env: WorkflowEnvironment) -> None:
    world = world_of(storage_uri="modelpack://registry.test:5000/models/llama:v1", tags={"v1": MANIFEST},
                     reports=[
                         {"node": "node-b", "status": "Failed", "digest": MANIFEST, "message": "disk full"},
                         {"node": "node-a", "status": "Ready", "digest": MANIFEST, "message": ""},
                         {"node": "node-c", "status": "Updating", "digest": MANIFEST, "message": ""},
                         {"node": "node-d", "status": "Ready", "digest": f"sha256:{sha('old')}", "message": ""},
                     ])
    async with served(env, world):
        await until(env, lambda: world.state == "Ready", what="Ready")
        assert last(world, "nodesReady") == ["node-a"] and last(world, "nodesFailed") == ["node-b"]
        world.reports[1]["status"] = "Failed"
        await until(env, lambda: world.state == "Failed", step=5.0, what="Failed when no node is Ready")
        assert last(world, "nodesReady") == [] and last(world, "nodesFailed") == ["node-a", "node-b"]
        assert world.events[-1]["type"] == "Warning" and "disk full" in world.events[-1]["message"]
    assert world.annotations[ARTIFACT] == f"registry.test:5000/models/llama@{MANIFEST}"
    assert not IMPORT_ACTIVITIES - {"host.claim"} & set(world.calls)


async def test_a_missing_modelpack_tag_fails_with_source_not_found(env: WorkflowEnvironment) -> None:
    world = world_of(storage_uri="modelpack://registry.test:5000/models/llama:nope")
    async with served(env, world):
        await until(env, lambda: world.state == "Failed", what="Failed")
    assert world.conditions[-1]["reason"] == "SourceNotFound"
    assert ARTIFACT not in world.annotations


async def test_local_storage_is_not_annotated_and_counts_presence(env: WorkflowEnvironment) -> None:
    world = world_of(storage_uri="local:///mnt/models/llama", annotations={ARTIFACT: "stale"},
                     reports=[{"node": "node-a", "status": "Ready", "digest": "", "message": ""}])
    async with served(env, world):
        await until(env, lambda: world.state == "Ready", what="Ready")
    assert ARTIFACT not in world.annotations
    assert last(world, "nodesReady") == ["node-a"]


@pytest.mark.parametrize(("pvcs", "state", "reason", "status"), [
    ({"weights": "Bound"}, "Ready", "PVCBound", "True"),
    ({"weights": "Pending"}, "In_Transit", "PVCNotBound", "False"),
    ({}, "Failed", "PVCNotFound", "False"),
])
async def test_pvc_sets_source_reachable_and_ready(env: WorkflowEnvironment, pvcs: dict[str, str], state: str,
                                                   reason: str, status: str) -> None:
    world = world_of(kind="BaseModel", storage_uri="pvc://weights/llama/8b", pvcs=pvcs)
    async with served(env, world):
        await until(env, lambda: world.state == state, what=state)
    by_type = {c["type"]: c for c in world.conditions}
    assert by_type["Ready"]["status"] == status and by_type["Ready"]["reason"] == reason
    assert by_type["SourceReachable"]["reason"] == reason
    assert by_type["SourceReachable"]["status"] == ("True" if state == "Ready" else "False")
    assert "basemodel.node_reports" not in world.calls and ARTIFACT not in world.annotations


async def test_a_storage_change_delivers_again(env: WorkflowEnvironment) -> None:
    world = world_of(storage_uri="s3://bucket/llama")
    async with served(env, world) as handle:
        await until(env, lambda: world.state == "Failed", what="Failed")
        world.set_spec(storage={"storageUri": "modelpack://registry.test:5000/models/llama@" + MANIFEST})
        await changed(handle, world)
        await until(env, lambda: world.annotations.get(ARTIFACT, "").endswith(MANIFEST), what="annotated")
    assert "basemodel.resolve_tag" not in world.calls  # a digest needs no resolution


@pytest.mark.parametrize("shared", [False, True])
async def test_delete_removes_the_imported_artifact_unless_shared(env: WorkflowEnvironment, shared: bool) -> None:
    world = world_of(storage_uri="hf://acme/tiny-llama", shared_digests={MANIFEST} if shared else set(),
                     reports=[{"node": "node-a", "status": "Ready", "digest": MANIFEST, "message": ""}])
    async with served(env, world) as handle:
        await until(env, lambda: world.state == "Ready", what="Ready")
        await delete(handle, world)
        await handle.result()
    tail = world.calls[world.calls.index("kube.artifact_referenced"):]
    assert ("oci.delete_artifact" in tail) is not shared
    assert world.calls[-1] == "kube.remove_finalizer", world.calls


async def test_delete_of_a_modelpack_model_leaves_the_users_artifact(env: WorkflowEnvironment) -> None:
    world = world_of(storage_uri="modelpack://registry.test:5000/models/llama:v1", tags={"v1": MANIFEST})
    async with served(env, world) as handle:
        await until(env, lambda: "basemodel.annotate" in world.calls, what="annotated")
        await delete(handle, world)
        await handle.result()
    assert "oci.delete_artifact" not in world.calls
    assert world.calls[-1] == "kube.remove_finalizer"


async def test_delete_mid_import_cancels_it_and_removes_what_was_pushed(env: WorkflowEnvironment) -> None:
    world = world_of(storage_uri="hf://acme/tiny-llama", held={"source.fetch_file": 2})
    async with served(env, world) as handle:
        await until(env, lambda: world.calls.count("source.fetch_file") == 2 and "oci.push_file" in world.calls,
                    what="the second fetch, the first file pushed")
        await delete(handle, world)
        await handle.result()
    assert "source.fetch_file" in world.cancelled
    assert "oci.delete_blobs" in world.calls and "oci.delete_artifact" not in world.calls
    assert "Failed" not in [s.get("state") for s in world.statuses]
    assert world.calls[-1] == "kube.remove_finalizer", world.calls


async def test_an_import_left_behind_by_a_storage_edit_is_deleted_with_the_object(env: WorkflowEnvironment) -> None:
    """hf:// imported, then the storage edited to a modelpack:// digest (the user's artifact): the
    imported artifact is still this workflow's and leaves the registry on delete; the user's stays."""
    world = world_of(storage_uri="hf://acme/tiny-llama")
    theirs = f"sha256:{sha('theirs')}"
    async with served(env, world) as handle:
        await until(env, lambda: world.annotations.get(ARTIFACT) == IMPORTED, what="imported")
        world.set_spec(storage={"storageUri": f"modelpack://registry.test:5000/models/llama@{theirs}"})
        await changed(handle, world)
        await until(env, lambda: world.annotations.get(ARTIFACT, "").endswith(theirs), what="re-annotated")
        await delete(handle, world)
        await handle.result()
    assert world.calls.count("oci.delete_artifact") == 1
    assert world.calls.count("oci.delete_blobs") == 0  # the import had published: its blobs are the manifest's


async def test_a_fine_tuned_weight_is_delivered_without_spec_metadata(env: WorkflowEnvironment) -> None:
    world = world_of(kind="FineTunedWeight", storage_uri="hf://acme/tiny-lora",
                     reports=[{"node": "node-a", "status": "Ready", "digest": MANIFEST, "message": ""}])
    async with served(env, world):
        await until(env, lambda: world.state == "Ready", what="Ready")
    assert world.annotations[ARTIFACT] == IMPORTED
    assert "basemodel.fill_spec" not in world.calls and world.generation == 1


@pytest.fixture
async def own_env() -> AsyncIterator[WorkflowEnvironment]:
    """A test server of its own: an activity cancelled mid-heartbeat by an earlier test (delete mid
    import) keeps the shared server from skipping hours of time at once."""
    environment = await start_env()
    try:
        yield environment
    finally:
        await environment.shutdown()


async def test_a_long_life_continues_as_new_without_delivering_again(own_env: WorkflowEnvironment) -> None:
    """Settled for hours: the run continues as new after its poll budget, carrying what it delivered
    and owns; the next run neither re-reads the object nor imports again, and still cleans up."""
    env = own_env
    world = world_of(storage_uri="hf://acme/tiny-llama",
                     reports=[{"node": "node-a", "status": "Ready", "digest": MANIFEST, "message": ""}])
    async with served(env, world) as handle:
        await until(env, lambda: world.state == "Ready", what="Ready")
        first_run = (await handle.describe()).run_id
        latest = env.client.get_workflow_handle(handle.id)
        for _ in range(300):
            await env.sleep(240)
            if (await latest.describe()).run_id != first_run:
                break
        assert (await latest.describe()).run_id != first_run, "never continued as new"
        assert world.calls.count("basemodel.node_reports") > 100  # hours of slow polls behind it
        await delete(latest, world)
        await latest.result()
    assert world.calls.count("source.resolve") == 1 and world.calls.count("basemodel.read") == 1
    assert world.calls.count("oci.delete_artifact") == 1 and world.calls[-1] == "kube.remove_finalizer"
