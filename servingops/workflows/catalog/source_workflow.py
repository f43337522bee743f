"""CatalogSourceWorkflow: one per ModelCatalogSource (id catalog/<name>/<uid>), the sole writer of its status.

A refresh runs when the workflow starts, at once when the spec's generation moves (object-changed), and
when the source's Temporal Schedule ticks (`refresh-now`, every spec.refreshInterval; the schedule is
created, updated, paused and deleted by this workflow through `catalog.ensure_schedule` /
`catalog.delete_schedule`). A refresh:

1. re-reads the source (`kube.read_object`); type Catalog (patch `catalog-backend`; before it Ready False
   `CatalogBackendNotImplemented`): `catalog.refresh_remote_index` fetches the remote catalog endpoint's
   index and stores it as the source's index artifact when its document digest moved, returning digests and
   a count only (patch `catalog-remote-stored`; before it `catalog.fetch_remote_index` returned the whole
   index, which Temporal's payload limit capped near 1.5 MB, and `catalog.store_remote_index` stored it),
   then status as in 5; a failure as below;
2. type HuggingFace: `evaluate_policy(spec.policy)`; blocked: Ready False with the verdict's reason and
   message, no scan, and the schedule paused (its note says why) until the spec changes;
3. runs `catalog.index_huggingface` until its result is complete, passing the previous result's progress
   back as `resume`; an attempt whose refreshBudget ran out yields: a durable pause of YIELD_PAUSE, then
   the next attempt continues where it stopped (a spec change or delete during the pause ends the refresh).
   The last complete scan whose index was kept goes with it as `previous`, so a refresh reads only what
   changed (a no-change refresh: one organisation count and one short page per organisation). Scan bodies
   are offloaded to the registry by the activity (activities/catalog/scan_store.py): what this workflow
   carries is a digest and a summary, never the index;
4. stores the complete index (`catalog.store_index`: an OCI artifact, its manifest digest the
   catalogRevision) only when its document digest differs from the last stored one;
5. writes status (catalogRevision, entryCount, lastSuccessfulRefreshTime, observedGeneration, Ready True)
   only when something moved (workflows/catalog/rules.py: lastSuccessfulRefreshTime is refreshed alone
   when it is older than REFRESH_TIME_RESOLUTION), so a refresh that finds nothing changed writes nothing.

A provider, registry or data-service failure (after the activity's few quick retries): Ready False with the
error's reason, nextRetryTime = now + backoff (30 s doubling to 1 h), a durable timer to that time; the
last good catalogRevision and entryCount stay. Ticks in between are ignored; a spec change retries at once.
Events: Normal `CatalogRefreshed` when the revision moves, Warning with the reason when Ready's reason
becomes a failure or a block. Deletion deletes the schedule and ends the workflow (no finalizer).
History stays bounded with continue-as-new, carrying the state (a yielded scan's progress included).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError

from servingops.workflows import options
from servingops.workflows.catalog import rules
from servingops.workflows.entity import EntityWorkflow, ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.catalog.huggingface_index import CatalogIndexActivities
    from servingops.activities.catalog.policy import evaluate_policy
    from servingops.activities.catalog.remote_activities import (
        CatalogRemoteActivities,
        CatalogRemoteSource,
        FetchRemoteIndexInput,
        RefreshRemoteIndexInput,
        RemoteRefresh,
    )
    from servingops.activities.catalog.schedule import (
        CatalogScheduleActivities,
        DeleteScheduleInput,
        EnsureScheduleInput,
    )
    from servingops.activities.catalog.store import (
        CatalogStoreActivities,
        StoredIndex,
        StoreIndexInput,
        StoreRemoteIndexInput,
        remote_index_digest,
    )
    from servingops.activities.catalog.types import IndexHuggingFaceInput, IndexHuggingFaceResult, ScanProgress
    from servingops.activities.kubernetes import EventNote, KubernetesActivities, StatusPatch
    from servingops.api_models.contract import Signal, StartObject, WorkflowType, catalog_schedule_id
    from servingops.api_models.deckhouse.catalog_source import ModelCatalogSourceSpec, ModelCatalogSourceStatus
    from servingops.api_models.deckhouse.enums import CatalogSourceType
    from servingops.api_models.errors import error_message, error_type_of
    from servingops.api_models.refs import ConditionUpdate, ObjectRef
    from servingops.api_models.timestamps import rfc3339
    from servingops.clients.catalog_remote import RemoteIndex

CONDITION = "Ready"
CATALOG_BACKEND_PATCH = "catalog-backend"
"""type Catalog refreshes from the remote endpoint (before it: blocked CatalogBackendNotImplemented)."""
REMOTE_STORED_PATCH = "catalog-remote-stored"
"""type Catalog: one activity fetches and stores the remote index (`catalog.refresh_remote_index`); before it
the index came back as a result (`catalog.fetch_remote_index`, capped by Temporal's payload limit) and was
stored by `catalog.store_remote_index`."""
YIELD_PAUSE = timedelta(seconds=30)
"""Between two attempts of a scan whose refresh budget ran out: the provider gets a rest."""
MAX_REFRESHES_PER_RUN = 200
"""A run continues as new after this many refreshes (a refresh is 5 to 15 events without yields)."""

REFRESHED = "Refreshed"
"""Ready True: the index is stored and current."""
NOT_IMPLEMENTED = "CatalogBackendNotImplemented"
INVALID_SPEC = "InvalidSpec"
REFRESH_FAILED = "RefreshFailed"
"""A failure that carries none of our error types (an activity timeout, a bug)."""
REVISION_EVENT = "CatalogRefreshed"


class ScheduleSetting(BaseModel):
    """What the source's schedule was last ensured as."""

    interval_seconds: float
    paused: bool
    note: str = ""


class CatalogState(ReconcileState):
    """What the `state` query answers."""

    phase: str = "Pending"
    """Pending, Ready, Blocked, Failed, NotImplemented or Deleted."""
    reason: str = "Pending"
    message: str = ""
    blocked_generation: int | None = None
    """Set while the spec of this generation is blocked (policy, type Catalog, invalid): ticks do nothing."""
    pending: bool = False
    """A tick asked for a refresh."""
    catalog_revision: str | None = None
    """The manifest digest of the last stored index (status.catalogRevision)."""
    document_digest: str | None = None
    """The index document digest of that artifact: a refresh producing the same one stores nothing."""
    entry_count: int | None = None
    last_success: datetime | None = None
    """The end of the last successful refresh, changed or not (status holds it to REFRESH_TIME_RESOLUTION)."""
    failures: int = 0
    """Consecutive failed refreshes."""
    next_retry: datetime | None = None
    resume: ScanProgress | None = None
    """The progress of a scan that yielded at its refresh budget (its body offloaded: a digest)."""
    last_scan: ScanProgress | None = None
    """The progress of the last complete scan whose index is kept, its body offloaded to the registry (a few
    hundred bytes here): passed as `previous`, it makes the next refresh incremental."""
    yields: int = 0
    """Budget yields of the current (or last) refresh."""
    refreshes: int = 0
    """Refreshes in this run."""
    stores: int = 0
    """Index artifacts pushed, over all runs."""
    schedule: ScheduleSetting | None = None


class CatalogRun(StartObject):
    """The bridge starts the workflow with a StartObject; a continued run also carries its state."""

    carried: CatalogState | None = None


@workflow.defn(name=WorkflowType.CATALOG)
class CatalogSourceWorkflow(EntityWorkflow[CatalogState]):
    def __init__(self) -> None:
        super().__init__(CatalogState())

    # object-changed, delete and the state query come from EntitySignals.

    @workflow.signal(name=Signal.REFRESH_NOW)
    def refresh_now(self) -> None:
        self.state.pending = True

    @workflow.run
    async def run(self, start: CatalogRun) -> CatalogState:
        self.begin(start, start.carried)
        return await self.live()

    # -- the entity loop's hooks (workflows/entity.py) -------------------------------------------------

    async def first_pass(self) -> bool:
        if not self.continued:
            self.state.pending = True  # the first refresh, whatever signal started the workflow
        return await self.next_pass(False)

    async def next_pass(self, timed_out: bool) -> bool:
        """Every refresh that is due, one after the other (ticks that came during a refresh are
        answered by it); False when the source is gone or going."""
        while not self.state.deleting and self._due():
            if not await self._refresh():
                return False
            self.state.pending = False
        return not self.state.deleting

    def rest_time(self) -> timedelta | None:
        if self.state.next_retry is None:
            return None
        return max(self.state.next_retry - workflow.now(), timedelta(seconds=1))

    def woken(self) -> bool:
        return self.state.pending

    def rested(self, timed_out: bool) -> None:
        if timed_out:
            self.state.pending = True  # the retry is due

    def run_is_full(self) -> bool:
        return self.state.refreshes >= MAX_REFRESHES_PER_RUN

    def reset_run_counts(self) -> None:
        self.state.refreshes = 0

    async def closing(self) -> None:
        assert self.ref is not None
        await workflow.execute_activity_method(
            CatalogScheduleActivities.delete_schedule,
            DeleteScheduleInput(schedule_id=catalog_schedule_id(self.ref.name, self.ref.uid or "")),
            **options.CATALOG_STORE)

    def gone(self) -> CatalogState:
        self.state.reason, self.state.message = "Deleted", "the source is gone"
        return super().gone()

    # -- when ------------------------------------------------------------------------------------------

    def _due(self) -> bool:
        s = self.state
        if s.generation > s.acted_generation:
            return True
        if not s.pending:
            return False
        s.pending = False
        if s.blocked_generation is not None and s.blocked_generation >= s.acted_generation:
            return False  # blocked: only a spec change refreshes
        return s.next_retry is None or workflow.now() >= s.next_retry

    def _phase(self, phase: str, reason: str, message: str) -> None:
        assert self.visibility is not None
        self.state.phase, self.state.reason, self.state.message = phase, reason, message
        self.visibility.publish(phase)

    # -- a refresh -------------------------------------------------------------------------------------

    async def _refresh(self) -> bool:
        """One refresh; False when the source is gone or going."""
        assert self.ref is not None
        s = self.state
        s.pending = False
        obj = await workflow.execute_activity_method(KubernetesActivities.read_object, self.ref, **options.KUBE)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return False
        generation = int(obj["metadata"].get("generation", 0))
        s.generation = max(s.generation, generation)
        if generation > s.acted_generation:
            # A new spec: refresh at once, forget the backoff, the block and a scan of the old spec.
            s.failures, s.next_retry, s.blocked_generation, s.resume = 0, None, None, None
        s.acted_generation = max(s.acted_generation, generation)
        s.refreshes += 1
        live: dict[str, Any] = obj.get("status") or {}
        try:
            spec = ModelCatalogSourceSpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            await self._blocked(live, generation, INVALID_SPEC, f"the spec does not parse: {problems}", 3600.0)
            return True
        interval = rules.refresh_interval(spec.refresh_interval).total_seconds()
        if spec.type != CatalogSourceType.HUGGING_FACE:
            if workflow.patched(CATALOG_BACKEND_PATCH):
                await self._refresh_remote(spec, live, generation, interval)
                return True
            await self._blocked(
                live, generation, NOT_IMPLEMENTED,
                "type Catalog (a cluster-to-cluster catalog) is not served by this release yet: nothing is "
                "indexed. Use type HuggingFace, or wait for the release that serves Catalog sources.", interval)
            return True
        verdict = evaluate_policy(spec.policy)
        if not verdict.allowed:
            await self._blocked(live, generation, verdict.reason.value, verdict.message, interval)
            return True
        await self._schedule(interval, paused=False)
        token = spec.hugging_face.token_secret_name if spec.hugging_face else None
        s.yields = 0
        while True:
            try:
                result: IndexHuggingFaceResult = await workflow.execute_activity_method(
                    CatalogIndexActivities.index_huggingface,
                    IndexHuggingFaceInput(source=self.ref.name, policy=spec.policy, token_secret_name=token,
                                          resume=s.resume, previous=s.last_scan),
                    **options.CATALOG_INDEX)
            except ActivityError as exc:
                await self._failed(live, generation, exc)
                return True
            if result.blocked_reason is not None:  # the activity judged the same policy: not expected
                await self._blocked(live, generation, result.blocked_reason, result.message, interval)
                return True
            if result.complete and result.progress is not None and result.digest is not None:
                break
            s.resume, s.yields = result.progress, s.yields + 1
            try:
                await workflow.wait_condition(
                    lambda: self.state.deleting or self.state.generation > self.state.acted_generation,
                    timeout=YIELD_PAUSE)
            except TimeoutError:
                continue
            return True  # deleted or a newer spec: the main loop decides
        s.resume = None
        store = StoreIndexInput(source=self.ref.name, progress=result.progress, digest=result.digest)
        kept = await self._keep_index(live, generation, result.digest, result.message,
                                      lambda: workflow.execute_activity_method(
                                          CatalogStoreActivities.store_index, store, **options.CATALOG_STORE))
        if kept:
            # Only an offloaded body is kept between refreshes: an inline one (a worker without a registry)
            # would grow every later event and the continue-as-new input by the whole index.
            s.last_scan = result.progress if result.progress.packed_digest is not None else None
        return True

    async def _refresh_remote(self, spec: ModelCatalogSourceSpec, live: dict[str, Any], generation: int,
                              interval: float) -> None:
        """A type Catalog source: fetch the remote endpoint's index, store it when its document changed,
        Ready True; a failure is Ready False with its reason and a nextRetryTime (as a HuggingFace one)."""
        assert self.ref is not None
        s = self.state
        s.resume = None
        await self._schedule(interval, paused=False)
        remote = CatalogRemoteSource(source=self.ref.name, url=spec.url or "",
                                     ca_secret_name=spec.ca_secret_name,
                                     credentials_secret_name=spec.credentials_secret_name)
        if workflow.patched(REMOTE_STORED_PATCH):
            await self._refresh_and_store_remote(remote, live, generation)
            return
        try:
            index: RemoteIndex = await workflow.execute_activity_method(
                CatalogRemoteActivities.fetch_remote_index, FetchRemoteIndexInput(remote=remote),
                **options.CATALOG_REMOTE)
        except ActivityError as exc:
            await self._failed(live, generation, exc)
            return
        digest = remote_index_digest(index)
        count = len(index.entries)
        message = (f"{count} {'entry' if count == 1 else 'entries'} from {remote.url} (remote revision "
                   f"{index.revision})")
        store = StoreRemoteIndexInput(source=self.ref.name, index=index, digest=digest)
        await self._keep_index(live, generation, digest, message, lambda: workflow.execute_activity_method(
            CatalogStoreActivities.store_remote_index, store, **options.CATALOG_STORE))

    async def _refresh_and_store_remote(self, remote: CatalogRemoteSource, live: dict[str, Any],
                                        generation: int) -> None:
        """`catalog.refresh_remote_index`: the activity stores the index itself when its document moved (the
        same rule as `_keep_index`, so the two agree on whether this refresh stored)."""
        s = self.state
        known = s.document_digest if s.catalog_revision is not None else None
        try:
            refreshed: RemoteRefresh = await workflow.execute_activity_method(
                CatalogRemoteActivities.refresh_remote_index,
                RefreshRemoteIndexInput(remote=remote, known_document_digest=known), **options.CATALOG_REMOTE)
        except ActivityError as exc:
            await self._failed(live, generation, exc)
            return
        count = refreshed.entry_count
        message = (f"{count} {'entry' if count == 1 else 'entries'} from {remote.url} (remote revision "
                   f"{refreshed.remote_revision})")

        async def stored() -> StoredIndex:
            assert refreshed.stored is not None, "the activity stores whenever the document moved"
            return refreshed.stored

        await self._keep_index(live, generation, refreshed.document_digest, message, stored)

    async def _keep_index(self, live: dict[str, Any], generation: int, digest: str, message: str,
                          store: Callable[[], Awaitable[StoredIndex]]) -> bool:
        """A complete index of `digest`: stored (`store`) only when its document moved, then Ready True;
        a failed store is Ready False with its reason and a nextRetryTime (False)."""
        s = self.state
        revision_moved = digest != s.document_digest or s.catalog_revision is None
        if revision_moved:
            try:
                stored = await store()
            except ActivityError as exc:
                await self._failed(live, generation, exc)
                return False
            s.catalog_revision, s.document_digest = stored.revision, stored.document_digest
            s.entry_count, s.stores = stored.entry_count, s.stores + 1
        s.failures, s.next_retry, s.last_success = 0, None, workflow.now()
        self._phase("Ready", REFRESHED, message)
        await self._write_success(live, generation, revision_moved=revision_moved)
        return True

    async def _write_success(self, live: dict[str, Any], generation: int, *, revision_moved: bool) -> None:
        s = self.state
        assert s.last_success is not None
        wanted = {"catalogRevision": s.catalog_revision, "entryCount": s.entry_count,
                  "observedGeneration": generation, "nextRetryTime": None}
        moved = (rules.fields_moved(live, wanted) or rules.condition_moved(live, "True", REFRESHED, s.message)
                 or revision_moved)
        if not moved and not rules.refresh_time_stale(live, s.last_success):
            return  # nothing changed: no write at all
        status = ModelCatalogSourceStatus(
            catalog_revision=s.catalog_revision, entry_count=s.entry_count,
            last_successful_refresh_time=s.last_success.replace(microsecond=0), next_retry_time=None)
        if not moved:
            # Only the time is stale: that one field, no condition, no Event.
            status = ModelCatalogSourceStatus(last_successful_refresh_time=s.last_success.replace(microsecond=0))
            await self._patch(StatusPatch(ref=self._ref(), status=status.to_merge_patch()))
            return
        events = []
        before = rules.ready_of(live)
        if revision_moved:
            events.append(EventNote(type="Normal", reason=REVISION_EVENT,
                                    message=f"catalog revision {s.catalog_revision}: {s.message}"))
        elif before is not None and before.get("reason") != REFRESHED:
            events.append(EventNote(type="Normal", reason=REFRESHED,
                                    message=f"catalog revision {s.catalog_revision} is current again: {s.message}"))
        await self._patch(StatusPatch(
            ref=self._ref(), status=status.to_merge_patch(), observed_generation=generation,
            conditions=[ConditionUpdate(type=CONDITION, status="True", reason=REFRESHED, message=s.message)],
            events=events))

    async def _blocked(self, live: dict[str, Any], generation: int, reason: str, message: str,
                       interval: float) -> None:
        """Ready False with `reason`; no scan, and no tick-driven refresh until the spec changes."""
        s = self.state
        s.blocked_generation, s.next_retry, s.resume = generation, None, None
        self._phase("NotImplemented" if reason == NOT_IMPLEMENTED else "Blocked", reason, message)
        await self._schedule(interval, paused=True, note=f"{reason}: refreshes wait for a change of the spec")
        wanted = {"observedGeneration": generation, "nextRetryTime": None}
        if not (rules.fields_moved(live, wanted) or rules.condition_moved(live, "False", reason, message)):
            return
        before = rules.ready_of(live)
        events = [] if before is not None and before.get("reason") == reason else [
            EventNote(type="Warning", reason=reason, message=message)]
        await self._patch(StatusPatch(
            ref=self._ref(), status=ModelCatalogSourceStatus(next_retry_time=None).to_merge_patch(),
            observed_generation=generation,
            conditions=[ConditionUpdate(type=CONDITION, status="False", reason=reason, message=message)],
            events=events))

    async def _failed(self, live: dict[str, Any], generation: int, exc: BaseException) -> None:
        """Ready False with the failure's reason and a nextRetryTime; the last good revision stays."""
        s = self.state
        kind = error_type_of(exc)
        reason = kind.value if kind is not None else REFRESH_FAILED
        s.failures += 1
        s.next_retry = (workflow.now() + rules.retry_delay(s.failures)).replace(microsecond=0)
        message = f"{error_message(exc)} (attempt {s.failures}; retrying at {rfc3339(s.next_retry)})"
        self._phase("Failed", reason, message)
        before = rules.ready_of(live)
        events = [] if before is not None and before.get("reason") == reason else [
            EventNote(type="Warning", reason=reason, message=message)]
        await self._patch(StatusPatch(
            ref=self._ref(), status=ModelCatalogSourceStatus(next_retry_time=s.next_retry).to_merge_patch(),
            observed_generation=generation,
            conditions=[ConditionUpdate(type=CONDITION, status="False", reason=reason, message=message)],
            events=events))

    # -- writes ----------------------------------------------------------------------------------------

    def _ref(self) -> ObjectRef:
        assert self.ref is not None
        return self.ref

    async def _patch(self, patch: StatusPatch) -> None:
        await workflow.execute_activity_method(KubernetesActivities.patch_status, patch, **options.KUBE)

    async def _schedule(self, interval: float, *, paused: bool, note: str = "") -> None:
        wanted = ScheduleSetting(interval_seconds=interval, paused=paused, note=note)
        if self.state.schedule == wanted:
            return
        ref = self._ref()
        await workflow.execute_activity_method(
            CatalogScheduleActivities.ensure_schedule,
            EnsureScheduleInput(schedule_id=catalog_schedule_id(ref.name, ref.uid or ""),
                                source_workflow_id=workflow.info().workflow_id,
                                task_queue=workflow.info().task_queue, interval_seconds=interval,
                                paused=paused, note=note),
            **options.CATALOG_STORE)
        self.state.schedule = wanted


__all__ = ["YIELD_PAUSE", "CatalogRun", "CatalogSourceWorkflow", "CatalogState", "ScheduleSetting"]
