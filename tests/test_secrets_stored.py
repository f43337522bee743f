"""Secrets stay out of Temporal, the logs and status (issue 10).

The last test of the run reads every history and description the session's Temporal server holds,
every log and Temporal database file under the run's temporary root, and the status of every
object of the project's kinds plus every Event, for each token the run used: those the tests
registered, every credential a Secret of the cluster held (tests/fixtures/secrets.py) and the Hub
server's tokens. The first test plants tokens where a leak would land and shows the scan finds each.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
from kubernetes import client
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from devstack.hub_server import HubServer
from devstack.services import TemporalDevServer
from servingops.runtime.temporal import TemporalSettings, connect
from tests.fixtures.secrets import harvested_tokens
from tests.secret_scan import (
    Finding,
    registered_tokens,
    scan_cluster,
    scan_files,
    scan_temporal,
    stored_files,
)

pytestmark = pytest.mark.integration

GROUP, VERSION = "ai.deckhouse.io", "v1alpha1"


def _kinds_of(findings: list[Finding]) -> set[str]:
    kinds = set()
    for finding in findings:
        if finding.where.startswith("temporal") and " history event " in finding.where:
            kinds.add("history")
        elif finding.where.startswith("temporal"):
            kinds.add("heartbeat")
        elif finding.where.startswith("file "):
            kinds.add("log")
        elif finding.where.startswith("status of "):
            kinds.add("status")
        elif finding.where.startswith("Event "):
            kinds.add("event")
    return kinds


_HEARTBEAT_TOKEN: list[str] = []


@activity.defn(name="plant.heartbeat")
async def _heartbeat_a_token() -> None:
    """Heartbeats a token that is in no input (only the pending activity's details hold it)."""
    while True:
        activity.heartbeat({"upload_location": f"http://registry/v2/x/blobs/uploads/1?token={_HEARTBEAT_TOKEN[0]}"})
        await asyncio.sleep(0.2)


@workflow.defn(name="PlantedTokenWorkflow", sandboxed=False)
class _Planted:
    @workflow.run
    async def run(self, note: str) -> None:
        await workflow.execute_activity("plant.heartbeat", start_to_close_timeout=timedelta(minutes=5),
                                        heartbeat_timeout=timedelta(seconds=30))


async def _wait_for_heartbeat(temporal: Client, workflow_id: str) -> None:
    for _ in range(100):
        description = await temporal.get_workflow_handle(workflow_id).describe()
        pending = description.raw_description.pending_activities
        if pending and pending[0].heartbeat_details.payloads:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the planted activity never heartbeated")


async def test_the_scan_finds_planted_tokens(temporal_server: TemporalDevServer, kube_api: client.ApiClient,
                                             stack_logs: Path) -> None:
    in_input, in_heartbeat = f"planted-input-{uuid.uuid4().hex}", f"planted-heartbeat-{uuid.uuid4().hex}"
    in_log, in_status = f"planted-log-{uuid.uuid4().hex}", f"planted-status-{uuid.uuid4().hex}"
    _HEARTBEAT_TOKEN[:] = [in_heartbeat]
    planted = frozenset({in_input, in_heartbeat, in_log, in_status})

    log_file = stack_logs / f"planted-{uuid.uuid4().hex[:6]}.log"
    log_file.write_text(f"worker: INFO connecting with {in_log}\n")
    namespace = f"planted-{uuid.uuid4().hex[:6]}"
    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    model = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "models", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Model", "metadata": {"name": "leaky"},
        "spec": {"source": {"url": "https://huggingface.co/devstack/leaky"}}})
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    model["status"] = {"phase": "Failed", "conditions": [{
        "type": "Ready", "status": "False", "lastTransitionTime": now, "reason": "Leaked",
        "message": f"registry said: unauthorized for token {in_status}"}]}
    custom.replace_namespaced_custom_object_status(GROUP, VERSION, namespace, "models", "leaky", model)

    temporal = await connect(TemporalSettings(address=temporal_server.address))
    queue, workflow_id = f"planted-{uuid.uuid4().hex[:6]}", f"planted-{uuid.uuid4().hex[:6]}"
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            async with Worker(temporal, task_queue=queue, workflows=[_Planted], activities=[_heartbeat_a_token],
                              activity_executor=pool):
                await temporal.start_workflow(_Planted.run, f"note {in_input}", id=workflow_id, task_queue=queue)
                await _wait_for_heartbeat(temporal, workflow_id)
                temporal_findings, workflows = await scan_temporal(temporal_server.address, planted)
                await temporal.get_workflow_handle(workflow_id).terminate("planted token found")
        file_findings, files = scan_files(stored_files([stack_logs]), planted)
        cluster_findings, objects = scan_cluster(kube_api, planted)
    finally:
        log_file.unlink(missing_ok=True)
        core.delete_namespace(namespace)

    findings = temporal_findings + file_findings + cluster_findings
    assert workflows >= 1 and files >= 1 and objects >= 1
    assert {f.token for f in findings} == planted, [str(f) for f in findings]
    assert _kinds_of(findings) >= {"history", "heartbeat", "log", "status"}
    by_token = {f.token: _kinds_of([f]) for f in findings}
    assert by_token[in_heartbeat] == {"heartbeat"}  # nowhere but the pending activity's details
    assert by_token[in_input] == {"history"}


@pytest.mark.scans_everything
async def test_no_token_the_run_used_is_stored_anywhere(temporal_server: TemporalDevServer,
                                                        kube_api: client.ApiClient, hub_server: HubServer,
                                                        stack_logs: Path,
                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    tokens = registered_tokens() | harvested_tokens() | frozenset(hub_server.known_tokens())
    assert tokens, "the run used no token at all: the scan would prove nothing"
    temporal_findings, workflows = await scan_temporal(temporal_server.address, tokens)
    roots = [tmp_path_factory.getbasetemp(), stack_logs]
    file_findings, files = scan_files(dict.fromkeys(stored_files(roots)), tokens)
    cluster_findings, objects = scan_cluster(kube_api, tokens)
    print(f"\nscanned {workflows} workflows, {files} log and database files, {objects} objects and Events "
          f"for {len(tokens)} tokens")
    findings = temporal_findings + file_findings + cluster_findings
    assert not findings, "tokens stored outside their Secrets:\n" + "\n".join(str(f) for f in findings)
