"""Recorded scenarios of CatalogSourceWorkflow and CatalogRefreshTickWorkflow (tests/histories/record.py
runs them) against tests/catalog_fakes.py, under the real activity names, spoken to only through the wire
contract (type and signal names, JSON payloads)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from temporalio.worker import Worker

from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.rollout_fakes import until
from tests.catalog_fakes import SCOPED, FakeCatalogWorld, complete, entries, failure, remote_index, yielded

if TYPE_CHECKING:
    from tests.histories.record import Recording


async def catalog_refresh(rec: Recording) -> None:
    """A HuggingFace source blocked by a tags-only policy (ticks ignored), fixed by a spec change; the first
    scan yields at its refresh budget and continues; stored, Ready; a schedule tick (the tick workflow) that
    finds the same index writes nothing; the Hub down: SourceUnavailable with a nextRetryTime, retried on
    its timer, recovered; delete removes the schedule."""
    down = failure("SourceUnavailable", "listing the models of devstack: ConnectError: connection refused",
                   permanent=False)
    world = FakeCatalogWorld(spec={"type": "HuggingFace", "policy": {"allowedTags": ["text-generation"]},
                                   "refreshInterval": "10m"},
                             answers=[yielded(entries("a"), offset=1), complete(entries("a", "b")),
                                      complete(entries("a", "b")), down, down, down,
                                      complete(entries("a", "b"))])
    env = rec.env
    queue = f"catalog-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow("CatalogSourceWorkflow", {"ref": world.ref()},
                                                 id=world.workflow_id(), task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: world.ready() == ("False", "PolicyScopeMissing"), what="blocked")
        await handle.signal("refresh-now")
        await env.sleep(60)
        world.change_spec(policy=dict(SCOPED))
        await handle.signal("object-changed", world.event())
        await until(env, lambda: world.ready() == ("True", "Refreshed"), step=5, what="indexed after a yield")
        with env.auto_time_skipping_disabled():
            tick = await env.client.start_workflow("CatalogRefreshTickWorkflow", world.workflow_id(),
                                                   id=f"catalog/{world.name}/{world.uid}/refresh/tick-1",
                                                   task_queue=queue)
            await rec.root(tick)
            await tick.result()
        await until(env, lambda: len(world.index_calls) == 3, what="the ticked refresh")
        await handle.signal("refresh-now")
        await until(env, lambda: world.ready() == ("False", "SourceUnavailable"), what="the Hub down")
        await until(env, lambda: world.ready() == ("True", "Refreshed"), step=10, what="recovered")
        await handle.signal("delete", world.event(deleting=True))
        await handle.result()
        await rec.save()


async def catalog_not_implemented(rec: Recording) -> None:
    """A type Catalog source: Ready False CatalogBackendNotImplemented, the schedule paused; delete."""
    world = FakeCatalogWorld(spec={"url": "https://catalog.example.com"})
    env = rec.env
    queue = f"catalog-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow("CatalogSourceWorkflow", {"ref": world.ref()},
                                                 id=world.workflow_id(), task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: world.ready() is not None, what="the condition")
        await handle.signal("delete", world.event(deleting=True))
        await handle.result()
        await rec.save()


async def catalog_remote(rec: Recording) -> None:
    """A type Catalog source (patch `catalog-backend`): the remote endpoint's index fetched and stored, Ready;
    a tick finds the same index and writes nothing; the credentials rejected: CatalogCredentialsRejected with
    a nextRetryTime, retried on its timer with a grown index, stored again, Ready; delete."""
    rejected = failure("CatalogCredentialsRejected", "GET https://catalog.example.com/catalog/v1/index: the "
                       "endpoint rejected the catalog credential (HTTP 401)", permanent=True)
    world = FakeCatalogWorld(spec={"type": "Catalog", "url": "https://catalog.example.com", "caSecretName": "ca",
                                   "credentialsSecretName": "creds", "refreshInterval": "10m"},
                             remote_answers=[remote_index("a"), remote_index("a"), rejected,
                                             remote_index("a", "b")])
    env = rec.env
    queue = f"catalog-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow("CatalogSourceWorkflow", {"ref": world.ref()},
                                                 id=world.workflow_id(), task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: world.ready() == ("True", "Refreshed"), what="ready")
        await handle.signal("refresh-now")
        await until(env, lambda: len(world.remote_calls) == 2, what="the ticked refresh")
        await handle.signal("refresh-now")
        await until(env, lambda: world.ready() == ("False", "CatalogCredentialsRejected"), what="rejected")
        await until(env, lambda: world.ready() == ("True", "Refreshed") and len(world.stores) == 2, step=10,
                    what="recovered")
        await handle.signal("delete", world.event(deleting=True))
        await handle.result()
        await rec.save()


async def catalog_continue_as_new(rec: Recording) -> None:
    """Ticks until the source workflow continues as new (MAX_REFRESHES_PER_RUN refreshes), carrying its
    revision: the continued run refreshes on the next tick, finds the same index and writes nothing; delete."""
    world = FakeCatalogWorld()
    env = rec.env
    queue = f"catalog-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow("CatalogSourceWorkflow", {"ref": world.ref()},
                                                 id=world.workflow_id(), task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: world.ready() == ("True", "Refreshed"), what="ready")
        first = (await handle.describe()).run_id
        latest = env.client.get_workflow_handle(handle.id)
        for _ in range(400):
            if (await latest.describe()).run_id != first:
                break
            calls = len(world.index_calls)
            await latest.signal("refresh-now")
            await until(env, lambda n=calls: len(world.index_calls) > n, what="a ticked refresh")  # type: ignore[misc]
        assert (await latest.describe()).run_id != first, "the source workflow never continued as new"
        patches, calls = len(world.patches), len(world.index_calls)
        await latest.signal("refresh-now")
        await until(env, lambda: len(world.index_calls) > calls, what="the continued run refreshing")
        await env.sleep(5)
        assert len(world.patches) == patches and len(world.stores) == 1, "the continued run rewrote"
        await latest.signal("delete", world.event(deleting=True))
        await latest.result()
        await rec.save()


SCENARIOS = {"catalog-refresh": catalog_refresh, "catalog-not-implemented": catalog_not_implemented,
             "catalog-continue-as-new": catalog_continue_as_new, "catalog-remote": catalog_remote}
