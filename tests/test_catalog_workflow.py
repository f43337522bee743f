"""CatalogSourceWorkflow on Temporal's time-skipping server against tests/catalog_fakes.py (a source in
memory, a scripted index, a recording registry and schedule); the e2e twin is tests/test_catalog_e2e.py.

What is held: a blocked policy says why, scans nothing and ignores ticks until the spec changes; a
success stores the index once and writes catalogRevision, entryCount, lastSuccessfulRefreshTime,
observedGeneration and Ready True; a refresh budget that runs out yields and continues from the
returned progress after a durable pause, without a failure; a provider failure writes its own reason
and a nextRetryTime that backs off, keeping the last revision, and recovers; a refresh that finds the
same index stores nothing and writes nothing; a spec change refreshes at once; a type Catalog source
stores the remote endpoint's index (once per change) and a remote failure is its reason with a nextRetryTime;
the schedule follows the interval and the block; delete removes it; the
schedule's tick workflow signals the source (and ends quietly when the source is gone)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models.contract import Query, Signal
from servingops.api_models.timestamps import parse_rfc3339, rfc3339
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from servingops.workflows.catalog import rules
from testkit.rollout_fakes import until
from tests.catalog_fakes import (
    SCOPED,
    Answer,
    FakeCatalogWorld,
    complete,
    entries,
    hub_unreachable,
    remote_credentials_rejected,
    remote_index,
    token_rejected,
    yielded,
)
from tests.histories.record import start_env

pytestmark = [pytest.mark.timeskip, pytest.mark.asyncio]


@dataclass
class Running:
    env: WorkflowEnvironment
    world: FakeCatalogWorld
    handle: WorkflowHandle[Any, Any]
    queue: str

    async def changed(self) -> None:
        await self.handle.signal(Signal.OBJECT_CHANGED, self.world.event())

    async def tick(self) -> None:
        await self.handle.signal(Signal.REFRESH_NOW)

    async def state(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.handle.query(Query.STATE)
        return result

    async def settle(self, seconds: float = 5) -> None:
        await self.env.sleep(seconds)
        await self.state()  # a query answers only once the workflow has taken its pending tasks


async def serve(world: FakeCatalogWorld) -> AsyncIterator[Running]:
    env = await start_env()
    async with env:
        world.clock = None
        queue = f"catalog-{world.uid[:8]}"
        async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                          activities=world.activities(), workflow_runner=workflow_runner()):
            handle = await env.client.start_workflow("CatalogSourceWorkflow", {"ref": world.ref()},
                                                     id=world.workflow_id(), task_queue=queue)
            yield Running(env, world, handle, queue)
            if world.present:
                await handle.signal(Signal.DELETE, world.event(deleting=True))
                await handle.result()


@pytest.fixture
async def running(request: pytest.FixtureRequest) -> AsyncIterator[Running]:
    world: FakeCatalogWorld = getattr(request, "param", None) or FakeCatalogWorld()
    async for run in serve(world):
        yield run


def blocked_world() -> FakeCatalogWorld:
    return FakeCatalogWorld(spec={"type": "HuggingFace", "policy": {"allowedTags": ["text-generation"]}})


@pytest.mark.parametrize("running", [blocked_world()], indirect=True)
async def test_a_blocked_source_says_why_scans_nothing_and_waits_for_a_spec_change(running: Running) -> None:
    world = running.world
    await until(running.env, lambda: world.ready() is not None, what="the block written")
    assert world.ready() == ("False", "PolicyScopeMissing")
    assert "allowedTags only narrows a scope" in world.ready_message()
    assert world.status["observedGeneration"] == 1 and "nextRetryTime" not in world.status
    assert world.index_calls == [] and world.stores == []
    assert world.events == [("Warning", "PolicyScopeMissing")]
    assert world.schedules[-1]["paused"] is True and "PolicyScopeMissing" in world.schedules[-1]["note"]
    # Ticks do nothing while blocked: no scan, no write.
    patches = len(world.patches)
    for _ in range(3):
        await running.tick()
        await running.settle(600)
    assert world.index_calls == [] and len(world.patches) == patches
    assert (await running.state())["phase"] == "Blocked"
    # The spec is fixed: refreshed at once, the schedule resumed.
    world.change_spec(policy=dict(SCOPED))
    await running.changed()
    await until(running.env, lambda: world.ready() == ("True", "Refreshed"), what="ready after the fix")
    assert len(world.index_calls) == 1 and world.schedules[-1]["paused"] is False
    assert world.status["observedGeneration"] == 2


async def test_a_refresh_stores_the_index_and_writes_its_status(running: Running) -> None:
    world = running.world
    await until(running.env, lambda: world.ready() == ("True", "Refreshed"), what="ready")
    assert len(world.stores) == 1 and world.stores[0]["source"] == "hub"
    assert world.stores[0]["progress"]["cursor"] is None, "only a complete scan is stored"
    status = world.status
    assert status["catalogRevision"].startswith("sha256:") and status["entryCount"] == 1
    assert status["observedGeneration"] == 1 and "nextRetryTime" not in status
    assert parse_rfc3339(status["lastSuccessfulRefreshTime"]) is not None
    assert world.events == [("Normal", "CatalogRefreshed")]
    assert world.index_calls[0]["policy"]["allowedOrganizations"] == ["devstack"]
    assert world.index_calls[0]["resume"] is None
    schedule = world.schedules[-1]
    assert schedule["interval_seconds"] == 600 and schedule["paused"] is False
    assert schedule["schedule_id"] == f"catalog/hub/{world.uid}/refresh"
    assert schedule["source_workflow_id"] == world.workflow_id() and schedule["task_queue"] == running.queue
    state = await running.state()
    assert state["phase"] == "Ready" and state["catalog_revision"] == status["catalogRevision"]


def yielding_world() -> FakeCatalogWorld:
    first = yielded(entries("a", "b"), offset=2)
    return FakeCatalogWorld(answers=[first, yielded(entries("a", "b", "c"), offset=3),
                                     complete(entries("a", "b", "c", "d"))])


@pytest.mark.parametrize("running", [yielding_world()], indirect=True)
async def test_a_spent_refresh_budget_yields_and_continues_where_it_stopped(running: Running) -> None:
    world = running.world
    start = await running.env.get_current_time()
    await until(running.env, lambda: world.ready() is not None, step=5, what="the scan finished")
    assert world.ready() == ("True", "Refreshed") and world.status["entryCount"] == 4
    assert len(world.index_calls) == 3
    assert world.index_calls[0]["resume"] is None
    assert world.index_calls[1]["resume"] == world.answers[0]["progress"]  # type: ignore[index]
    assert world.index_calls[2]["resume"] == world.answers[1]["progress"]  # type: ignore[index]
    assert (await running.env.get_current_time()) - start >= 2 * timedelta(seconds=30), "no durable pause"
    # No failure on the way: one write (Ready True), one store of the complete index.
    assert len(world.patches) == 1 and len(world.stores) == 1
    assert (await running.state())["yields"] == 2


def failing_world() -> FakeCatalogWorld:
    down = hub_unreachable("devstack")
    answers: list[Answer] = [complete(entries("a", "b")), *[down] * 6, complete(entries("a", "b"))]
    return FakeCatalogWorld(answers=answers)


@pytest.mark.parametrize("running", [failing_world()], indirect=True)
async def test_a_provider_failure_backs_off_keeps_the_last_revision_and_recovers(running: Running) -> None:
    world = running.world
    await until(running.env, lambda: world.ready() == ("True", "Refreshed"), what="the first index")
    revision = world.status["catalogRevision"]
    await running.tick()
    await until(running.env, lambda: world.ready() == ("False", "SourceUnavailable"), what="the failure")
    first_retry = parse_rfc3339(world.status["nextRetryTime"])
    failed_at = await running.env.get_current_time()
    assert first_retry is not None and timedelta(seconds=20) <= first_retry - failed_at <= timedelta(seconds=31)
    assert world.status["catalogRevision"] == revision and world.status["entryCount"] == 2
    assert "Connection refused" in world.ready_message() and "retrying at" in world.ready_message()
    assert len(world.index_calls) == 1 + 3, "the activity's own quick retries: three attempts"
    # A tick during the backoff does nothing; the durable timer retries, and the delay doubles.
    await running.tick()
    await running.settle(1)
    assert len(world.index_calls) == 4
    await until(running.env, lambda: world.status.get("nextRetryTime") not in (None, rfc3339(first_retry)),
                what="the second failure")
    second_retry = parse_rfc3339(world.status["nextRetryTime"])
    assert second_retry is not None
    now = await running.env.get_current_time()
    assert timedelta(seconds=50) <= second_retry - now <= timedelta(seconds=61)
    assert world.events.count(("Warning", "SourceUnavailable")) == 1, "one Warning per reason, not per attempt"
    # The Hub is back: Ready again, nextRetryTime gone, the same index stored nothing new.
    await until(running.env, lambda: world.ready() == ("True", "Refreshed"), step=10, what="recovered")
    assert "nextRetryTime" not in world.status and world.status["catalogRevision"] == revision
    assert len(world.stores) == 1
    assert world.events[-1] == ("Normal", "Refreshed"), "the recovery is said once"


def wrong_token_world() -> FakeCatalogWorld:
    denied = token_rejected()
    world = FakeCatalogWorld(answers=[denied])
    world.spec["huggingFace"] = {"tokenSecretName": "hub-token"}
    return world


@pytest.mark.parametrize("running", [wrong_token_world()], indirect=True)
async def test_a_wrong_token_is_its_own_reason_and_is_retried_later(running: Running) -> None:
    world = running.world
    await until(running.env, lambda: world.ready() is not None, what="the failure")
    assert world.ready() == ("False", "SourceAccessDenied") and len(world.index_calls) == 1
    assert world.index_calls[0]["token_secret_name"] == "hub-token"
    assert "catalogRevision" not in world.status and "nextRetryTime" in world.status
    await until(running.env, lambda: len(world.index_calls) == 2, step=5, what="the retry after the backoff")


async def test_a_refresh_that_finds_nothing_changed_writes_nothing(running: Running) -> None:
    world = running.world
    await until(running.env, lambda: world.ready() == ("True", "Refreshed"), what="ready")
    patches, stores = len(world.patches), len(world.stores)
    for expected in (2, 3, 4):
        await running.tick()
        await until(running.env, lambda n=expected: len(world.index_calls) == n, what="the tick's refresh")  # type: ignore[misc]
        await running.settle(1)
    assert len(world.stores) == stores, "a no-change refresh pushed an index"
    assert len(world.patches) == patches, "a no-change refresh wrote status"
    # Hours later the time is refreshed, alone: no condition, no Event, no push.
    await running.env.sleep(rules.REFRESH_TIME_RESOLUTION.total_seconds())
    await running.tick()
    await until(running.env, lambda: len(world.patches) == patches + 1, what="the time refreshed")
    assert set(world.patches[-1]["status"]) == {"lastSuccessfulRefreshTime"}
    assert not world.patches[-1]["conditions"] and not world.patches[-1]["events"]
    assert len(world.stores) == stores


@pytest.mark.parametrize("running", [FakeCatalogWorld(answers=[
    complete(entries("a", "b"), offloaded=True), complete(entries("a", "b", "c"), offloaded=True),
    complete(entries("a", "b", "c"))])], indirect=True)
async def test_each_refresh_is_given_the_last_kept_scan_as_previous(running: Running) -> None:
    """The incremental refresh's input: the last complete scan whose index was kept, offloaded (a digest and a
    summary, never the body); a scan returned inline is not kept (it would grow the history by the index)."""
    world = running.world
    await until(running.env, lambda: world.ready() == ("True", "Refreshed"), what="ready")
    assert world.index_calls[0].get("previous") is None
    for expected in (2, 3, 4):
        await running.tick()
        await until(running.env, lambda n=expected: len(world.index_calls) == n, what="the tick's refresh")  # type: ignore[misc]
    first, second = (world.index_calls[i]["previous"] for i in (1, 2))
    assert first["packed"] == "" and first["packed_digest"].startswith("sha256:") and first["entry_count"] == 2
    assert second["entry_count"] == 3 and second["packed_digest"] != first["packed_digest"]
    assert world.index_calls[3].get("previous") is None, "an inline scan body was kept in the workflow"
    assert len(world.stores) == 2 and world.stores[1]["progress"]["packed_digest"] == second["packed_digest"]


async def test_a_spec_change_refreshes_at_once(running: Running) -> None:
    world = running.world
    await until(running.env, lambda: world.ready() == ("True", "Refreshed"), what="ready")
    world.answers.append(complete(entries("a", "b", "c")))
    world.change_spec(policy={**SCOPED, "allowedOrganizations": ["devstack", "other"]}, refreshInterval="2h")
    before = await running.env.get_current_time()
    await running.changed()
    await until(running.env, lambda: world.status.get("entryCount") == 3, step=0.5, what="the new spec indexed")
    assert (await running.env.get_current_time()) - before < timedelta(minutes=1), "not at once"
    assert world.index_calls[-1]["policy"]["allowedOrganizations"] == ["devstack", "other"]
    assert world.status["observedGeneration"] == 2 and len(world.stores) == 2
    assert world.schedules[-1]["interval_seconds"] == 7200


def remote_world(*answers: Answer) -> FakeCatalogWorld:
    return FakeCatalogWorld(spec={"type": "Catalog", "url": "https://catalog.example.com", "caSecretName": "ca",
                                  "credentialsSecretName": "creds", "refreshInterval": "10m"},
                            remote_answers=list(answers))


@pytest.mark.parametrize("running", [remote_world(remote_index("a", "b"))], indirect=True)
async def test_a_catalog_type_source_stores_the_remote_index(running: Running) -> None:
    world = running.world
    await until(running.env, lambda: world.ready() == ("True", "Refreshed"), what="ready")
    assert world.index_calls == [] and len(world.remote_calls) == 1
    assert world.remote_calls[0]["remote"] == {"source": "hub", "url": "https://catalog.example.com",
                                               "ca_secret_name": "ca", "credentials_secret_name": "creds"}
    assert len(world.stores) == 1 and world.stores[0]["index"]["entries"][0]["name"] == "a"
    assert world.status["entryCount"] == 2 and world.status["catalogRevision"].startswith("sha256:")
    assert "2 entries from https://catalog.example.com" in world.ready_message()
    assert world.schedules[-1]["paused"] is False
    patches = len(world.patches)
    await running.tick()
    await until(running.env, lambda: len(world.remote_calls) == 2, what="the ticked refresh")
    await running.settle()
    assert len(world.stores) == 1 and len(world.patches) == patches, "the same remote index rewrote"
    # One activity fetches and stores (patch catalog-remote-stored), told what is stored already.
    assert world.remote_calls[0].get("known_document_digest") is None
    assert world.remote_calls[1]["known_document_digest"] == world.stores[0]["digest"]


@pytest.mark.parametrize("running", [remote_world(
    remote_credentials_rejected("hub", "https://catalog.example.com"), remote_index("a"))], indirect=True)
async def test_a_catalog_type_failure_is_its_reason_with_a_next_retry(running: Running) -> None:
    world = running.world
    await until(running.env, lambda: world.ready() == ("False", "CatalogCredentialsRejected"), what="rejected")
    assert world.status["nextRetryTime"] and world.stores == []
    assert ("Warning", "CatalogCredentialsRejected") in world.events
    await until(running.env, lambda: world.ready() == ("True", "Refreshed"), step=10, what="recovered")
    assert "nextRetryTime" not in world.status and world.status["entryCount"] == 1


async def test_delete_removes_the_schedule_and_ends(running: Running) -> None:
    world = running.world
    await until(running.env, lambda: world.ready() == ("True", "Refreshed"), what="ready")
    await running.handle.signal(Signal.DELETE, world.event(deleting=True))
    result = await running.handle.result()
    assert result["phase"] == "Deleted"
    assert world.deleted_schedules == [f"catalog/hub/{world.uid}/refresh"]
    world.present = False


async def test_the_schedule_tick_workflow_signals_the_source(running: Running) -> None:
    world = running.world
    await until(running.env, lambda: world.ready() == ("True", "Refreshed"), what="ready")
    # Not auto-skipped: while waiting for a tick's result the test server would skip to the source
    # workflow's run timeout (it has no timer of its own when idle).
    with running.env.auto_time_skipping_disabled():
        tick = await running.env.client.execute_workflow("CatalogRefreshTickWorkflow", world.workflow_id(),
                                                         id=f"catalog/hub/{world.uid}/refresh/tick-1",
                                                         task_queue=running.queue)
    assert tick is True
    await until(running.env, lambda: len(world.index_calls) == 2, what="the ticked refresh")
    with running.env.auto_time_skipping_disabled():
        gone = await running.env.client.execute_workflow("CatalogRefreshTickWorkflow", "catalog/gone/nothing",
                                                         id="catalog/gone/nothing/refresh/tick-1",
                                                         task_queue=running.queue)
    assert gone is False


async def test_rules() -> None:
    assert rules.refresh_interval(None) == rules.DEFAULT_REFRESH_INTERVAL
    assert rules.refresh_interval("5s") == rules.MIN_REFRESH_INTERVAL
    assert rules.refresh_interval("0") == rules.DEFAULT_REFRESH_INTERVAL
    assert rules.refresh_interval("90m") == timedelta(minutes=90)
    assert [rules.retry_delay(n).total_seconds() for n in (1, 2, 3, 8, 50)] == [30, 60, 120, 3600, 3600]
    now = datetime.fromisoformat("2026-12-01T07:00:00+00:00")
    assert rfc3339(now) == "2026-12-01T07:00:00Z"
    assert rules.refresh_time_stale({}, now)
    assert not rules.refresh_time_stale({"lastSuccessfulRefreshTime": "2026-12-01T06:00:00Z"}, now)
    assert rules.refresh_time_stale({"lastSuccessfulRefreshTime": "2026-12-01T00:00:00Z"}, now)


async def test_the_schedule_ticks_the_source_every_interval_and_skips_overlaps() -> None:
    from temporalio.client import ScheduleActionStartWorkflow, ScheduleOverlapPolicy

    from servingops.activities.catalog.schedule import EnsureScheduleInput, schedule_of

    schedule = schedule_of(EnsureScheduleInput(
        schedule_id="catalog/hub/u1/refresh", source_workflow_id="catalog/hub/u1", task_queue="q",
        interval_seconds=600, paused=True, note="blocked"))
    action = schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert action.workflow == "CatalogRefreshTickWorkflow" and list(action.args) == ["catalog/hub/u1"]
    assert action.id == "catalog/hub/u1/refresh/tick" and action.task_queue == "q"
    assert schedule.spec.intervals[0].every == timedelta(minutes=10)
    assert schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
    assert schedule.state.paused and schedule.state.note == "blocked"
