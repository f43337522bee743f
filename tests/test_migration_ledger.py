"""The migration audit ledger (activities/migration/ledger.py): the pure merge, and the
`migration.archive` activity against the session's real apiserver, as the chart's worker identity
(its Role names the ledger ConfigMap and nothing else it may change)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import workflow
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from devstack.identities import Identities
from servingops.activities.migration import ledger
from servingops.activities.migration.activities import MigrationActivities
from servingops.activities.migration.types import LedgerWrite
from servingops.api_models.ome.migration import MigrationStatus
from servingops.api_models.refs import ObjectRef
from servingops.workers.registry import workflows
from servingops.workers.sandbox import workflow_runner
from tests.crd_helpers import new_namespace
from tests.fixtures.kube import api_as
from tests.support.histories import HISTORIES, load

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def record(n: int, *, phase: str = "Completed", succeeded: bool | None = None) -> MigrationStatus:
    return MigrationStatus(request_uuid=f"{n:08d}-0000-4000-8000-000000000000", trigger="Manual", phase=phase,
                           source_instance=n, surge_instance=n + 100, from_node=f"node-{n}", reason="defrag",
                           message="done", started_at=T0 + timedelta(minutes=n),
                           completed_at=T0 + timedelta(minutes=n, seconds=30), succeeded=succeeded)


def replica(name: str, namespace: str = "team-a") -> ObjectRef:
    return ObjectRef(group="ome.io", version="v1beta1", plural="inferencereplicas", kind="InferenceReplica",
                     name=name, namespace=namespace, uid=str(uuid.uuid4()))


# -- pure -----------------------------------------------------------------------------------------

@pytest.mark.timeskip
def test_merge_drops_the_oldest_entries_past_the_bound() -> None:
    values = ledger.entries("ns", "r", [record(n) for n in (3, 1, 2)])
    size = sum(len(k) + len(v) for k, v in values.items())
    merged, dropped = ledger.merge({}, values, bound=size - 1)
    assert dropped == 1
    assert sorted(json.loads(v)["sourceInstance"] for v in merged.values()) == [2, 3], "the oldest went"
    same, none = ledger.merge(merged, {k: v for k, v in values.items() if k in merged}, bound=size - 1)
    assert (same, none) == (merged, 0), "writing what is there changes nothing"


@pytest.mark.timeskip
def test_keys_are_configmap_keys_and_unique_per_replica() -> None:
    assert ledger.key_of("ns", "chat-engine", "auto-g3p1a2b3c4d.7") == "ns.chat-engine.auto-g3p1a2b3c4d.7"
    assert ledger.key_of("ns", "r", "a/b c") == "ns.r.a_b_c"
    long_a, long_b = (ledger.key_of("ns", "x" * 250 + tail, "u") for tail in ("a", "b"))
    assert len(long_a) <= 253 and len(long_b) <= 253 and long_a != long_b


# -- against the apiserver ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def worker_api(chart_identities: Identities) -> Iterator[client.ApiClient]:
    with api_as(chart_identities.worker) as api:
        yield api


def _ledger(api: client.ApiClient, namespace: str) -> client.V1ConfigMap:
    return client.CoreV1Api(api).read_namespaced_config_map(ledger.NAME, namespace)


def _mine(cm: client.V1ConfigMap, ref: ObjectRef) -> dict[str, dict[str, object]]:
    prefix = f"{ref.namespace}.{ref.name}."
    return {k.removeprefix(prefix): json.loads(v) for k, v in (cm.data or {}).items() if k.startswith(prefix)}


@pytest.mark.integration
def test_the_worker_archives_idempotently_into_the_controller_namespace(
        worker_api: client.ApiClient, kube_api: client.ApiClient, chart_identities: Identities) -> None:
    acts = MigrationActivities(worker_api, chart_identities.namespace)
    ref = replica(f"ledger-{uuid.uuid4().hex[:6]}")
    first = acts.archive(LedgerWrite(replica=ref, records=[record(1), record(2, phase="Failed")]))
    assert first.changed
    cm = _ledger(kube_api, chart_identities.namespace)
    assert (cm.metadata.labels or {}).get(ledger.LABEL) == "true"
    kept = _mine(cm, ref)
    assert kept[record(1).request_uuid or ""]["phase"] == "Completed"
    assert kept[record(2).request_uuid or ""]["phase"] == "Failed"
    assert kept[record(1).request_uuid or ""]["surgeInstance"] == 101
    assert kept[record(1).request_uuid or ""]["inferenceReplica"] == ref.name

    again = acts.archive(LedgerWrite(replica=ref, records=[record(1), record(2, phase="Failed")]))
    assert not again.changed
    assert _ledger(kube_api, chart_identities.namespace).metadata.resource_version == cm.metadata.resource_version

    stamped = acts.archive(LedgerWrite(replica=ref, records=[record(1, succeeded=True)]))
    assert stamped.changed
    kept = _mine(_ledger(kube_api, chart_identities.namespace), ref)
    assert kept[record(1).request_uuid or ""]["succeeded"] is True and len(kept) == 2

    # The Role names the ledger: any other ConfigMap of the namespace stays out of the worker's reach.
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(worker_api).replace_namespaced_config_map(
            chart_identities.operator_config, chart_identities.namespace,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name=chart_identities.operator_config)))
    assert refused.value.status == 403


@pytest.mark.integration
def test_the_bound_drops_the_oldest_and_counts_them(kube_api: client.ApiClient) -> None:
    namespace = new_namespace(kube_api, "ledger")
    try:
        entry = ledger.entries("team-a", "r", [record(0)])
        bound = 3 * sum(len(k) + len(v) for k, v in entry.items()) + 10  # room for three entries
        acts = MigrationActivities(kube_api, namespace, ledger_bound=bound)
        ref = replica("r")
        for n in range(5):
            acts.archive(LedgerWrite(replica=ref, records=[record(n)]))
        cm = _ledger(kube_api, namespace)
        assert sorted(e["sourceInstance"] for e in _mine(cm, ref).values()) == [2, 3, 4]
        assert cm.metadata.annotations[ledger.DROPPED] == "2"
        assert sum(len(k) + len(v) for k, v in (cm.data or {}).items()) <= bound
        assert not acts.archive(LedgerWrite(replica=ref, records=[record(4)])).changed
    finally:
        client.CoreV1Api(kube_api).delete_namespace(namespace)


@pytest.mark.integration
def test_concurrent_writers_lose_no_entry(kube_api: client.ApiClient) -> None:
    namespace = new_namespace(kube_api, "ledger")
    try:
        refs = [replica(f"r{i}") for i in range(4)]

        def write(ref: ObjectRef) -> None:
            acts = MigrationActivities(client.ApiClient(kube_api.configuration), namespace)
            for n in range(5):
                acts.archive(LedgerWrite(replica=ref, records=[record(n)]))

        with ThreadPoolExecutor(len(refs)) as pool:
            list(pool.map(write, refs))
        cm = _ledger(kube_api, namespace)
        assert all(len(_mine(cm, ref)) == 5 for ref in refs), sorted(cm.data or {})
    finally:
        client.CoreV1Api(kube_api).delete_namespace(namespace)


# -- replay -----------------------------------------------------------------------------------------

@pytest.mark.timeskip
@pytest.mark.parametrize("scenario", ["auto-relocation", "manual-surge"])
async def test_histories_from_before_the_ledger_need_its_patch(scenario: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stored replica runs with terminal migration records but no ledger: forced onto the new branch
    (`migration-ledger` taken), they schedule an activity the history does not have."""
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched", lambda patch_id: patch_id == "migration-ledger" or real(patch_id))
    replayer = Replayer(workflows=list(workflows()), data_converter=pydantic_data_converter,
                        workflow_runner=workflow_runner())
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(load(HISTORIES / "InferenceReplicaWorkflow" / f"{scenario}.json"))
