"""Surge migration on Temporal's time-skipping test server with the fake cluster
(testkit/replica_fakes.py, with nodes and EndpointSlices): the MigrationWorkflow asks the
InferenceReplicaWorkflow, which records and executes the request (workflows/replica/migrate.py).

The serving count is sampled after every pod change, so a test can prove a migration never took
the replica below N; `endpoint_log` lists every pod deleted while an EndpointSlice still had it Ready."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from servingops.api_models import contract
from servingops.api_models.ome.migration import MigrationHistoryEntry
from servingops.api_models.operator_config import LifecycleDefaults
from servingops.workflows.migration import history
from servingops.workflows.replica.workflow import InferenceReplicaWorkflow, ReplicaRun
from testkit.migration_world import ISVC, HistoryKeeper, stack
from testkit.replica_fakes import NAME, NAMESPACE, FakeReplicaCluster
from testkit.rollout_harness import start_env

pytestmark = pytest.mark.timeskip





@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment






def reasons(cluster: FakeReplicaCluster) -> list[str]:
    return [e.reason for e in cluster.events]


async def test_a_manual_request_surges_drains_and_completes(env: WorkflowEnvironment) -> None:
    async with stack(env) as s:
        s.cluster.endpoint_lag = 3.0  # the endpoint controller lags: the source must wait it out
        source = s.node_of(1)
        assert sorted(str(s.node_of(i)) for i in range(3)) == ["node-a", "node-b", "node-c"], "spread"
        start = await s.cluster.now()
        request_uuid, handle = await s.migrate(1, source, to=["node-d"])
        view = await s.outcome(handle)
        assert view.record is not None and view.record.phase == "Completed", view
        assert view.phases == ["Accepted", "SurgePending", "SurgeReady", "Draining", "Completed"]
        assert view.annotation_removed and not s.cluster.isvc_annotations
        record = s.records()[request_uuid]
        assert record["surgeInstance"] == 3 and record["sourceInstance"] == 1 and record["trigger"] == "Manual"
        assert record["fromNode"] == source and record["hintTargetNodes"] == ["node-d"]
        assert record["allocatedAt"] and record["deadline"] and record["completedAt"]
        await s.until(lambda: s.settled([0, 2, 3]), what="Instance 1 replaced by Instance 3")
        assert s.node_of(3) == "node-d", "the hint is preferred"
        assert sorted(p.name for p in s.cluster.live()) == ["engine-set-0", "engine-set-2", "engine-set-3"]
        assert s.cluster.min_serving(after=start) >= 3, "never below N during the surge"
        assert s.cluster.endpoint_log == [], "the source was deleted while an endpoint still had it Ready"
        migration_events = [r for r in reasons(s.cluster) if r.startswith("Migration")]
        assert migration_events == ["MigrationAccepted", "MigrationSurgePending", "MigrationSurgeReady",
                                    "MigrationDraining", "MigrationCompleted"]
        assert [reason for _, reason, _ in s.cluster.isvc_events] == ["MigrationAccepted", "MigrationCompleted"]
        assert s.cluster.created_names.count("engine-set-3") == 1


async def test_the_surge_avoids_the_source_node_without_a_hint(env: WorkflowEnvironment) -> None:
    async with stack(env, replicas=2, nodes=["node-a", "node-b"]) as s:
        source = s.node_of(0)
        _, handle = await s.migrate(0, source)
        view = await s.outcome(handle)
        assert view.record is not None and view.record.phase == "Completed"
        await s.until(lambda: s.settled([1, 2]))
        assert s.node_of(2) != source, "required anti-affinity to fromNode"


async def test_a_never_policy_records_failed_at_once(env: WorkflowEnvironment) -> None:
    async with stack(env, lifecycle={"migrationPolicy": {"mode": "Never"}}) as s:
        created = len(s.cluster.created_names)
        request_uuid, handle = await s.migrate(1)
        view = await s.outcome(handle)
        assert view.record is not None and view.record.phase == "Failed"
        assert (view.record.message or "").startswith("MigrationPolicyNever")
        assert s.records()[request_uuid]["phase"] == "Failed"
        assert view.annotation_removed
        assert len(s.cluster.created_names) == created, "no surge for a refused request"


@pytest.mark.parametrize(("instance", "from_node", "component", "omenative", "expected"), [
    (7, "node-a", "engine", True, "InstanceNotFound"),
    (1, "elsewhere", "engine", True, "FromNodeMismatch"),
    (1, None, "engine", False, "NotOMENative"),
    ("first", "node-a", "engine", True, "InvalidInstance"),
    (1, None, "decoder", True, "ComponentNotFound"),
])
async def test_a_bad_request_is_refused_with_its_reason(env: WorkflowEnvironment, instance: int | str,
                                                        from_node: str | None, component: str, omenative: bool,
                                                        expected: str) -> None:
    async with stack(env) as s:
        s.cluster.omenative = omenative
        created = len(s.cluster.created_names)
        request_uuid, handle = await s.migrate(instance, from_node, component=component)
        view = await s.outcome(handle)
        text = view.refused or (view.record.message if view.record else "") or ""
        assert text.startswith(expected), view
        assert view.annotation_removed
        assert len(s.cluster.created_names) == created
        if view.record is not None:  # judged by the replica: on its status, with a Warning
            assert s.records()[request_uuid]["phase"] == "Failed"
            assert expected in reasons(s.cluster)
        else:  # refused before any replica: a Warning on the InferenceService
            assert s.cluster.isvc_events[-1][:2] == ("Warning", expected)


async def test_a_recorded_uuid_is_answered_with_its_record(env: WorkflowEnvironment) -> None:
    async with stack(env) as s:
        request_uuid, handle = await s.migrate(1)
        await s.outcome(handle)
        created = list(s.cluster.created_names)
        _, again = await s.migrate(2, request_uuid=request_uuid)  # same UUID, another Instance
        view = await s.outcome(again)
        assert view.record is not None and view.record.phase == "Completed" and view.record.source_instance == 1
        assert s.cluster.created_names == created, "a recorded UUID starts nothing"
        assert len(s.records()) == 1


async def test_in_flight_cap_queues_and_requests_for_one_instance_are_serialised(env: WorkflowEnvironment) -> None:
    async with stack(env, replicas=3, operator=LifecycleDefaults(max_in_flight_migrations=1)) as s:
        start = await s.cluster.now()
        first, one = await s.migrate(0)
        await s.until(lambda: s.records().get(first, {}).get("phase") == "SurgePending", what="the first executing")
        second, two = await s.migrate(1)
        third, three = await s.migrate(0)  # the same Instance again: waits, then finds it gone
        await s.until(lambda: s.records().get(second, {}).get("message", "").startswith(
            "queued: maxInFlightMigrations 1"), what="the second request queued by the cap")
        views = [await s.outcome(h) for h in (one, two, three)]
        assert [v.record.phase if v.record else None for v in views] == ["Completed", "Completed", "Failed"]
        assert (views[2].record.message or "").startswith("InstanceNotFound")  # type: ignore[union-attr]
        assert s.cluster.max_pods(after=start) <= 4, "one surge at a time"
        assert s.cluster.min_serving(after=start) >= 3
        # The lowest unused index: Instance 0's, freed by the first migration (indexes stay sparse-safe).
        await s.until(lambda: s.settled([0, 2, 3]), what="Instances 0 and 1 replaced by 3, then 0")
        assert s.records()[first]["surgeInstance"] == 3 and s.records()[second]["surgeInstance"] == 0
        assert s.records()[third].get("surgeInstance") is None


async def test_the_rate_window_refuses_with_a_message(env: WorkflowEnvironment) -> None:
    async with stack(env, operator=LifecycleDefaults(max_migrations_per_window=1)) as s:
        _, one = await s.migrate(0)
        await s.outcome(one)
        _, two = await s.migrate(1)
        view = await s.outcome(two)
        assert view.record is not None and view.record.phase == "Failed"
        assert (view.record.message or "").startswith("MigrationRateLimited: maxMigrationsPerWindow 1 reached")


async def test_a_surge_that_cannot_be_ready_expires_and_the_source_keeps_serving(env: WorkflowEnvironment) -> None:
    # One node only: the surge's required anti-affinity leaves it nowhere to run.
    async with stack(env, replicas=2, nodes=["node-a"], lifecycle={"instanceReadyTimeout": "2m"}) as s:
        start = await s.cluster.now()
        _, handle = await s.migrate(1, "node-a")
        view = await s.outcome(handle)
        assert view.record is not None and view.record.phase == "Failed"
        assert (view.record.message or "").startswith("MigrationExpired"), view.record.message
        assert view.phases[:2] == ["Accepted", "SurgePending"] and "Draining" not in view.phases
        await s.until(lambda: s.settled([0, 1]), what="back to Instances 0 and 1")
        assert sorted(p.name for p in s.cluster.live()) == ["engine-set-0", "engine-set-1"]
        assert s.cluster.min_serving(after=start) == 2, "the source never left rotation"
        assert "MigrationExpired" in reasons(s.cluster)


async def test_a_surge_that_cannot_be_cleaned_is_wedged(env: WorkflowEnvironment) -> None:
    async with stack(env, replicas=2, nodes=["node-a"], lifecycle={"instanceReadyTimeout": "2m"}) as s:
        _, handle = await s.migrate(1, "node-a")
        await s.until(lambda: "engine-set-2" in s.cluster.pods, what="the surge pod")
        s.cluster.hold_deletion("engine-set-2")
        view = await s.outcome(handle)
        assert view.record is not None and (view.record.message or "").startswith("MigrationSurgeWedged")
        assert "MigrationSurgeWedged" in reasons(s.cluster)
        assert [r["index"] for r in s.rows()] == [0, 1], "the wedged surge is no Instance"
        s.cluster.release_deletion("engine-set-2")
        await s.until(lambda: "engine-set-2" not in s.cluster.pods, what="the surge pod finally gone")
        await s.until(lambda: s.settled([0, 1]))


async def test_cancel_before_the_drain_removes_the_surge(env: WorkflowEnvironment) -> None:
    async with stack(env, replicas=2, nodes=["node-a"], lifecycle={"instanceReadyTimeout": "30m"}) as s:
        _, handle = await s.migrate(1, "node-a")
        await s.until(lambda: "engine-set-2" in s.cluster.pods, what="the surge pod")
        await handle.signal(contract.Signal.MIGRATION_CANCEL)
        view = await s.outcome(handle)
        assert view.record is not None and (view.record.message or "").startswith("MigrationCancelled")
        await s.until(lambda: s.settled([0, 1]) and "engine-set-2" not in s.cluster.pods)


async def test_a_fresh_replica_workflow_resumes_a_migration_with_no_second_surge(env: WorkflowEnvironment) -> None:
    async with stack(env) as s:
        s.cluster.endpoint_lag = 3.0
        request_uuid, handle = await s.migrate(1, annotation=False)
        await s.until(lambda: s.records().get(request_uuid, {}).get("phase") in ("SurgeReady", "Draining"),
                      what="the surge Ready")
        await s.replica.terminate()
        s.replica = await s.env.client.start_workflow(
            InferenceReplicaWorkflow.run, ReplicaRun(ref=s.cluster.ref),
            id=contract.replica_workflow_id(NAMESPACE, NAME, s.cluster.uid), task_queue=s.queue)
        view = await s.outcome(handle)  # the ask is sent again; the fresh run answers from its record
        assert view.record is not None and view.record.phase == "Completed"
        await s.until(lambda: s.settled([0, 2, 3]))
        assert s.cluster.created_names.count("engine-set-3") == 1
        assert s.cluster.endpoint_log == []


async def test_the_service_keeps_each_outcome_in_its_history_window(env: WorkflowEnvironment) -> None:
    async with stack(env) as s:
        keeper = await env.client.start_workflow(
            HistoryKeeper.run, id=contract.inference_service_workflow_id(NAMESPACE, ISVC.name, ISVC.uid or ""),
            task_queue=s.queue)
        moved, one = await s.migrate(1, to=["node-d"])
        await s.outcome(one)
        refused, two = await s.migrate(0, "elsewhere")
        await s.outcome(two)
        gone, three = await s.migrate(0, component="decoder")
        await s.outcome(three)
        kept = await keeper.query("entries", result_type=list[MigrationHistoryEntry])
        assert [(e.id, e.phase, e.outcome_reason) for e in kept] == [
            (moved, "Completed", "Completed"), (refused, "Failed", "FromNodeMismatch"),
            (gone, "Failed", "ComponentNotFound")]
        assert kept[0].instance == 1 and kept[0].replacement_instance == 3 and kept[0].started_at is not None
        assert kept[0].reason == "fragmentation" and kept[0].requested_by == "test" and kept[0].mode == "Surge"
        assert kept[1].replacement_instance is None, "rejected before allocation"
        await keeper.terminate()


def test_the_history_window_keeps_the_newest_and_never_repeats_an_id() -> None:
    entries: list[MigrationHistoryEntry] = []
    for n in range(history.WINDOW + 5):
        entries = history.window(entries, MigrationHistoryEntry(id=f"u{n}", phase="Completed"))
    assert [e.id for e in entries] == [f"u{n}" for n in range(5, history.WINDOW + 5)]
    again = history.window(entries, MigrationHistoryEntry(id="u10", phase="Failed"))
    assert len(again) == history.WINDOW and [e.id for e in again].count("u10") == 1 and again[-1].phase == "Failed"


async def test_an_instance_not_ready_on_its_node_is_relocated_away_from_it(env: WorkflowEnvironment) -> None:
    async with stack(env, replicas=1, nodes=["node-a", "node-b"], lifecycle={"instanceReadyTimeout": "1m"},
                     settle=False, sick={"node-a"}) as s:
        await s.until(lambda: s.settled([0]), what="Instance 0 Ready after a relocation")
        assert s.node_of(0) == "node-b"
        [record] = s.records().values()
        assert record["trigger"] == "Auto" and record["phase"] == "Relocated" and record["fromNode"] == "node-a"
        assert record["attempt"] == 1 and record["sourceInstance"] == 0 and "surgeInstance" not in record
        await s.until(lambda: next(iter(s.records().values())).get("succeeded") is True, what="succeeded stamped")
        assert "InstanceRelocated" in reasons(s.cluster)
        assert s.cluster.pods["engine-set-0"].manifest["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"] == [
            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-a"]}]


async def test_relocation_stops_after_max_attempts_and_never_means_never(env: WorkflowEnvironment) -> None:
    async with stack(env, replicas=1, nodes=["node-a", "node-b"], lifecycle={"instanceReadyTimeout": "1m"},
                     operator=LifecycleDefaults(auto_migrate_max_attempts=2), settle=False,
                     sick={"node-a", "node-b"}) as s:
        await s.until(lambda: any(r.get("phase") == "Failed" for r in s.rows()), what="failed after two relocations")
        records = [*s.records().values()]
        assert [(r["attempt"], r["fromNode"]) for r in records] == [(1, "node-a"), (2, "node-b")]
        assert records[0]["succeeded"] is False
        assert s.cluster.condition("FailedUpdate") == "True" or s.cluster.status.get("retryBlocks")
    async with stack(env, replicas=1, nodes=["node-a", "node-b"], settle=False, sick={"node-a"},
                     lifecycle={"instanceReadyTimeout": "1m", "migrationPolicy": {"mode": "Never"}}) as s:
        await s.until(lambda: any(r.get("phase") == "Failed" for r in s.rows()), what="failed in place")
        assert not s.records(), "Never: no relocation"


def ledger_entries(cluster: FakeReplicaCluster) -> dict[str, dict[str, Any]]:
    """The fake ledger ConfigMap's data, by request id (keys are `<namespace>.<replica>.<id>`)."""
    prefix = f"{NAMESPACE}.{NAME}."
    return {key.removeprefix(prefix): json.loads(value) for key, value in cluster.ledger.items()}


async def test_the_ledger_keeps_terminal_records_after_status_prunes_them(env: WorkflowEnvironment) -> None:
    async with stack(env, operator=LifecycleDefaults(migration_window="5m")) as s:
        moved, one = await s.migrate(1)
        await s.outcome(one)
        refused, two = await s.migrate(0, "elsewhere")
        await s.outcome(two)
        await s.until(lambda: {moved, refused} <= set(ledger_entries(s.cluster)), what="both archived")
        kept = ledger_entries(s.cluster)
        assert kept[moved]["phase"] == "Completed" and kept[moved]["surgeInstance"] == 3
        assert kept[moved]["sourceInstance"] == 1 and kept[moved]["trigger"] == "Manual"
        assert kept[moved]["completedAt"] and kept[moved]["inferenceReplica"] == NAME
        assert kept[refused]["phase"] == "Failed" and kept[refused]["message"].startswith("FromNodeMismatch")
        writes = s.cluster.ledger_writes
        # status.migrations drops terminal records past the window; the ledger keeps them, unchanged.
        await s.until(lambda: not s.records(), what="status.migrations pruned")
        assert ledger_entries(s.cluster) == kept
        assert s.cluster.ledger_writes == writes, "an archived record is not written again"


async def test_the_ledger_follows_a_relocation_until_it_succeeded(env: WorkflowEnvironment) -> None:
    async with stack(env, replicas=1, nodes=["node-a", "node-b"], lifecycle={"instanceReadyTimeout": "1m"},
                     settle=False, sick={"node-a"}) as s:
        await s.until(lambda: next(iter(s.records().values()), {}).get("succeeded") is True, what="succeeded")
        [request_id] = s.records()
        await s.until(lambda: ledger_entries(s.cluster).get(request_id, {}).get("succeeded") is True,
                      what="the ledger entry stamped succeeded")
        entry = ledger_entries(s.cluster)[request_id]
        assert entry["phase"] == "Relocated" and entry["trigger"] == "Auto" and entry["fromNode"] == "node-a"
        assert s.cluster.ledger_writes >= 2, "born-terminal entry archived, then again once stamped"


async def test_a_ledger_that_cannot_be_written_holds_nothing_back(env: WorkflowEnvironment) -> None:
    async with stack(env) as s:
        s.cluster.ledger_broken = True
        moved, one = await s.migrate(1)
        view = await s.outcome(one)
        assert view.record is not None and view.record.phase == "Completed"
        await s.until(lambda: s.settled([0, 2, 3]), what="the migration done without its ledger entry")
        assert not s.cluster.ledger
        await s.until(lambda: any(e.reason == "MigrationLedgerNotWritten" for e in s.cluster.events),
                      what="the failing ledger said on the replica")
        s.cluster.ledger_broken = False
        await s.until(lambda: moved in ledger_entries(s.cluster), what="archived on a later pass")
        failing = [e for e in s.cluster.events if e.reason == "MigrationLedgerNotWritten"]
        assert len(failing) == 1 and failing[0].type == "Warning", "said once per failing spell"
