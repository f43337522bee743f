"""RolloutPolicyWorkflow: status.portableDigest ("rp1:" + canonical hash), observedGeneration, the
Ready condition and attachedGroups. On the time-skipping test server with fake activities, then
end to end with worker and bridge as processes on the local cluster."""

from __future__ import annotations

import copy
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from servingops.activities.kubernetes import PolicyAttachments, StatusPatch
from servingops.api_models import contract
from servingops.api_models.contract import ObjectEvent
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome.rollout_policy import RolloutPolicy, RolloutPolicySpec
from servingops.api_models.refs import ObjectRef
from servingops.workers.sandbox import workflow_runner
from servingops.workflows.rollout.policy_pinning import portable_digest
from servingops.workflows.rollout_policy import (
    ATTACH_RESYNC,
    MAX_REFRESHES_PER_RUN,
    RolloutPolicyRun,
    RolloutPolicyState,
    RolloutPolicyWorkflow,
    validate,
)
from testkit.rollout_harness import start_env
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest
from tests.support.rollout_stack import worker_and_bridge

CANARY = {"canary": {"steps": [{"capacity": "10%", "traffic": 10, "pause": {}},
                               {"capacity": "50%", "traffic": 50, "pause": {"duration": "5m"}}]}}


# -- pure rules -------------------------------------------------------------------------------------


@pytest.mark.timeskip
def test_validate_accepts_a_canary_and_rejects_what_policy_admission_rejects() -> None:
    assert validate(CANARY)[1] is None
    assert validate({"blueGreen": {}})[1] is None
    assert validate(None)[1] == "the policy has no spec"
    assert "exactly one" in (validate({"canary": {}, "blueGreen": {}})[1] or "")
    absolute = {"canary": {"steps": [{"capacity": 3, "traffic": 10}]}}
    assert "percentage" in (validate(absolute)[1] or "")
    raw_url = {"canary": {"steps": [{"capacity": "10%", "traffic": 10}],
                          "prometheus": {"serverAddress": "http://prom:9090"}}}
    assert "providerRef" in (validate(raw_url)[1] or "")


# -- time-skipping, fake cluster -------------------------------------------------------------------


class FakePolicyCluster:
    def __init__(self) -> None:
        self.uid = uuid.uuid4().hex
        self.ref = ObjectRef.of(RolloutPolicy, "steady", "team", uid=self.uid)
        self.obj: dict[str, Any] | None = {"metadata": {"name": "steady", "namespace": "team", "uid": self.uid,
                                                        "generation": 1}, "spec": copy.deepcopy(CANARY)}
        self.status: dict[str, Any] = {}
        self.conditions: dict[str, dict[str, str]] = {}
        self.attached = 0
        self.reads = 0
        self.patches: list[StatusPatch] = []

    def activities(self) -> list[Any]:
        @activity.defn(name="kube.read_object")
        async def read_object(ref: ObjectRef) -> dict[str, Any] | None:
            self.reads += 1
            return copy.deepcopy(self.obj)

        @activity.defn(name="kube.patch_status")
        async def patch_status(patch: StatusPatch) -> bool:
            self.patches.append(patch)
            for key, value in patch.status.items():
                if value is None:
                    self.status.pop(key, None)
                else:
                    self.status[key] = value
            for condition in patch.conditions:
                self.conditions[condition.type] = condition.model_dump()
            if patch.observed_generation is not None:
                self.status["observedGeneration"] = patch.observed_generation
            return self.obj is not None

        @activity.defn(name="kube.list_policy_attachments")
        async def list_policy_attachments(query: PolicyAttachments) -> int:
            assert (query.namespace, query.name) == ("team", "steady")
            return self.attached

        return [read_object, patch_status, list_policy_attachments]

    def bump(self, spec: dict[str, Any]) -> ObjectEvent:
        assert self.obj is not None
        self.obj["spec"] = copy.deepcopy(spec)
        self.obj["metadata"]["generation"] += 1
        return ObjectEvent(uid=self.uid, generation=self.obj["metadata"]["generation"], resource_version="2")


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


async def _until(env: WorkflowEnvironment, probe: Any, what: str, skip: float = 1.0) -> None:
    for _ in range(200):
        if probe():
            return
        await env.sleep(skip)
    raise AssertionError(f"{what} never happened")


async def _start(env: WorkflowEnvironment, cluster: FakePolicyCluster, queue: str) -> WorkflowHandle[Any, Any]:
    return await env.client.start_workflow(
        "RolloutPolicyWorkflow", RolloutPolicyRun(ref=cluster.ref),
        id=contract.rollout_policy_workflow_id("team", "steady", cluster.uid), task_queue=queue)


@pytest.mark.timeskip
async def test_digest_generation_ready_and_attached_groups(env: WorkflowEnvironment) -> None:
    cluster = FakePolicyCluster()
    queue = f"policy-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=[RolloutPolicyWorkflow],
                      activities=cluster.activities(),
                      workflow_runner=workflow_runner()):
        handle = await _start(env, cluster, queue)
        expected = portable_digest(RolloutPolicySpec.model_validate(CANARY))
        await _until(env, lambda: cluster.status.get("portableDigest") == expected, "first digest")
        assert expected.startswith("rp1:")
        assert cluster.status["observedGeneration"] == 1 and cluster.status["attachedGroups"] == 0
        assert cluster.conditions["Ready"]["status"] == "True"

        # An identical spec at a new generation: same digest, observedGeneration moves.
        await handle.signal("object-changed", cluster.bump(CANARY))
        await _until(env, lambda: cluster.status.get("observedGeneration") == 2, "generation 2")
        assert cluster.status["portableDigest"] == expected

        # A stale event (generation already acted on) does not re-read.
        reads = cluster.reads
        await handle.signal("object-changed", ObjectEvent(uid=cluster.uid, generation=1, resource_version="1"))
        await env.sleep(1)
        assert cluster.reads == reads

        # A different spec: a different digest.
        changed = copy.deepcopy(CANARY)
        changed["canary"]["steps"][1]["traffic"] = 60
        await handle.signal("object-changed", cluster.bump(changed))
        await _until(env, lambda: cluster.status.get("observedGeneration") == 3, "generation 3")
        assert cluster.status["portableDigest"] != expected
        assert cluster.status["portableDigest"].startswith("rp1:")

        # Groups attach without the policy's generation moving: the periodic recount sees them,
        # and an unchanged count writes nothing.
        cluster.attached = 2
        await _until(env, lambda: cluster.status.get("attachedGroups") == 2, "two attached groups",
                     skip=ATTACH_RESYNC.total_seconds())
        writes = len(cluster.patches)
        await env.sleep(ATTACH_RESYNC.total_seconds() * 3)
        assert len(cluster.patches) == writes
        state = await handle.query("state", result_type=RolloutPolicyState)
        assert state.phase == "Ready" and state.attached_groups == 2 and state.acted_generation == 3

        # What an InferenceService workflow sends when its references change: recounted at once.
        cluster.attached = 1
        await handle.signal("refresh-now")
        await _until(env, lambda: cluster.status.get("attachedGroups") == 1, "recount on refresh-now", skip=1.0)

        # A body that breaks the policy's admission rules: Ready False with the reason.
        await handle.signal("object-changed", cluster.bump({"canary": {"steps": [{"capacity": 2, "traffic": 10}]}}))
        await _until(env, lambda: cluster.conditions["Ready"]["status"] == "False", "invalid")
        assert cluster.conditions["Ready"]["reason"] == "PolicyInvalid"
        assert cluster.status["observedGeneration"] == 4

        await handle.signal("delete", ObjectEvent(uid=cluster.uid, generation=4, resource_version="9",
                                                  deleting=True))
        final = RolloutPolicyState.model_validate(await handle.result())
        assert final.phase == "Deleted"


@pytest.mark.timeskip
async def test_recounts_continue_as_new(env: WorkflowEnvironment) -> None:
    cluster = FakePolicyCluster()
    queue = f"policy-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=[RolloutPolicyWorkflow],
                      activities=cluster.activities(),
                      workflow_runner=workflow_runner()):
        handle = await _start(env, cluster, queue)
        await _until(env, lambda: "portableDigest" in cluster.status, "first status")
        first_run = (await handle.describe()).run_id
        await env.sleep((MAX_REFRESHES_PER_RUN + 20) * ATTACH_RESYNC.total_seconds())
        latest = env.client.get_workflow_handle(handle.id)
        assert (await latest.describe()).run_id != first_run
        state = await latest.query("state", result_type=RolloutPolicyState)
        assert state.phase == "Ready" and state.acted_generation == 1
        # The continued run neither re-reads the unchanged policy nor rewrites its status.
        reads = cluster.reads
        await env.sleep(60)
        assert cluster.reads == reads
        history = [e async for e in latest.fetch_history_events()]
        assert len(history) < 20 * MAX_REFRESHES_PER_RUN
        await latest.signal("delete", ObjectEvent(uid=cluster.uid, generation=1, resource_version="9",
                                                  deleting=True))
        assert RolloutPolicyState.model_validate(await latest.result()).phase == "Deleted"


# -- end to end ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def policy_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                 oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                           tmp_path_factory.mktemp("spool"), "policy", "RolloutPolicy,InferenceService",
                           identities=chart_identities) as stack:
        yield stack


@pytest.mark.e2e
def test_policy_status_on_a_real_cluster(kube_api: client.ApiClient,
                                         policy_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = policy_stack
    custom = client.CustomObjectsApi(kube_api)

    def status(name: str) -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object("ome.io", "v1beta1", ns, "rolloutpolicies", name)
        return dict(obj.get("status") or {}) | {"generation": obj["metadata"]["generation"]}

    create(kube_api, RolloutPolicy, manifest(RolloutPolicy, CANARY, name="gentle"), ns)
    create(kube_api, RolloutPolicy, manifest(RolloutPolicy, CANARY, name="twin"), ns)
    first = wait_until("a digest on gentle", lambda: (s := status("gentle")).get("portableDigest") and s, worker)
    assert first["portableDigest"].startswith("rp1:")
    assert first["observedGeneration"] == first["generation"]
    assert first["attachedGroups"] == 0
    ready = next(c for c in first["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    # Identical specs digest identically (another object, the same body).
    twin = wait_until("a digest on twin", lambda: status("twin").get("portableDigest"), worker)
    assert twin == first["portableDigest"]

    changed = copy.deepcopy(CANARY)
    changed["canary"]["steps"][1]["traffic"] = 70
    custom.patch_namespaced_custom_object("ome.io", "v1beta1", ns, "rolloutpolicies", "gentle", {"spec": changed})
    second = wait_until("the digest follows the change", lambda: (
        (s := status("gentle")).get("observedGeneration") == s["generation"] and s["generation"] > 1 and s), worker)
    assert second["portableDigest"] != first["portableDigest"] and second["portableDigest"].startswith("rp1:")

    isvc = {"engine": {"minReplicas": 1, "runner": {"name": "engine", "image": "vllm/vllm-openai:v0.9",
                                                     "ports": [{"containerPort": 8000}]}},
            "rollout": {"groups": [{"components": ["engine"],
                                    "policyRef": {"name": "gentle", "progression": "canary"}}]}}
    create(kube_api, InferenceService, manifest(InferenceService, isvc, name="chat"), ns)
    # The InferenceService's workflow nudges the policy: counted well within the resync period.
    pushed = ATTACH_RESYNC.total_seconds() / 5
    wait_until("the InferenceService's group counted in attachedGroups",
          lambda: status("gentle").get("attachedGroups") == 1, worker, timeout=pushed)
    assert status("twin").get("attachedGroups") == 0
    assert status("gentle")["portableDigest"] == second["portableDigest"]

    # The group moves to the other policy: both counts follow.
    isvc_api = ("ome.io", "v1beta1", ns, "inferenceservices", "chat")
    custom.patch_namespaced_custom_object(*isvc_api, {"spec": {"rollout": {"groups": [
        {"components": ["engine"], "policyRef": {"name": "twin", "progression": "canary"}}]}}})
    wait_until("the reference moved from gentle to twin", lambda: (
        status("gentle").get("attachedGroups") == 0 and status("twin").get("attachedGroups") == 1), worker,
        timeout=pushed)
    # The InferenceService is deleted: its group no longer counts.
    custom.delete_namespaced_custom_object(*isvc_api)
    wait_until("the deleted InferenceService's group uncounted", lambda: status("twin").get("attachedGroups") == 0,
          worker, timeout=pushed)
