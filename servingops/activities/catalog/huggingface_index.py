"""Index a `type: HuggingFace` ModelCatalogSource within its policy, with the real `huggingface_hub` client.

What we use from `huggingface_hub` (pointed at the worker's Hub endpoint, `HfApi(endpoint=..., token=...)`):
- `list_models(author=org, filter=tag, sort="created_at", expand=EXPAND)` per allowed organisation and per
  allowed tag (the Hub's `filter` is AND, `allowedTags` is OR: one listing per tag, so the provider does the
  narrowing and the scan reads only matching models). Sorted by creation time, an immutable key, so a
  listing read again on resume has the same order (a model created meanwhile comes first: read twice and
  deduplicated, never missed);
- `model_info(repo, expand=EXPAND)` per allowed repository and per model item of an allowed collection (the
  same fields as the listings, so an entry reached through two scopes normalises to the same bytes);
- `get_collection(slug)` per allowed collection (`/api/collections/{namespace}/{slug}`);
- `auth_check(repo)` for gated entries: the entry is indexed only when the source's token has been granted
  access (an import of it would fail otherwise); `whoami()` once per attempt when a token is set, so a wrong
  token fails the refresh with SourceAccessDenied instead of making every private repository look missing.

Rules of a scan (`scan`): scope items in a fixed order (repositories, collections, organisations; each list
sorted), entries deduplicated by repo id, kept only when they match at least one allowed tag (if any), each
fitted to maxMetadataBytes (`index_document.fit_entry`: optional fields dropped in a fixed order, else the
entry is skipped and counted). The scan stops at maxIndexedEntries: meeting one more new in-scope entry sets
`truncated` and ends it (the provider is never read further). So the index is the first maxIndexedEntries
distinct entries in scan order, stored sorted by name.

Refresh budget: before each unit of work (one model info, one listing item, one collection) the scan checks
the monotonic deadline; once it has passed (and at least one unit was done in this call, so a tiny budget
still progresses) the scan returns its state with the cursor of the next unit. Resuming runs the same units
from there with the same state, so the final index equals that of an unbudgeted scan. A listing resumed
mid-way is read again from its start and the first `offset` items are skipped (the Hub's page cursors are
not exposed by `list_models`; the skipped items cost page requests, not work).

Incremental refresh (issue #15's no-change goal), when the caller passes the last complete refresh's progress
(`IndexHuggingFaceInput.previous`) and the scope lists organisations without tags. A full scan notes, per
organisation, every model its listing returned, the organisation's model count read before the listing
(`get_organization_overview(org).num_models`) and a *mark*: the newest lastModified it saw less the listing's
duration and `MARK_MARGIN`, so any change after the listing began has a lastModified at or after the mark
(no clock comparison between the Hub and us). The next refresh then reads, per organisation, the count and
the listing newest first (`list_models(author=org, sort="last_modified")`, the Hub's `sort=lastModified`;
first with `limit=HEAD_PAGE`) only down to the mark:
- nothing changed (the same count, the models at or after the mark the same ones at the same lastModified):
  the previous progress and digest are returned as they are (`unchanged_progress`: no unpacking, no
  repacking, no hashing; scopes of organisations only);
- else, when the count adds up (the previous count plus the models new since the mark), the index is the
  previous one with the models read again replaced (`_incremental`; explicit repositories and collections are
  read again as in a full scan);
- else (a model deleted, renamed or hidden, or a new one the count leaves out, e.g. private), or with tags, a
  truncated or incomplete previous index, more than a quarter of the models changed, a budget running out, an
  organisation without a count (a user's namespace): a full scan.
What no lastModified shows (a gating or visibility switch, a rename that keeps the count, an access grant, a
deleted private model when the count is of public ones) is seen at the next full listing: one every
`FULL_LISTING_INTERVAL` (24 h) at the latest. The result equals a full scan's otherwise.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from huggingface_hub import HfApi
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError
from huggingface_hub.hf_api import ModelInfo
from kubernetes import client
from temporalio import activity
from temporalio.exceptions import ApplicationError

from servingops.activities.catalog import scan_store
from servingops.activities.catalog.artifacts import catalog_repository
from servingops.activities.catalog.index_document import fit_entry, index_of
from servingops.activities.catalog.policy import IndexBounds, IndexScope, evaluate_policy
from servingops.activities.catalog.types import (
    INDEX_ACTIVITY,
    PHASES,
    CatalogEntry,
    IndexHuggingFaceInput,
    IndexHuggingFaceResult,
    ListingHead,
    OrgListing,
    ScanCursor,
    ScanProgress,
    ScanState,
    ScanSummary,
)
from servingops.activities.oci.activities import CredentialsResolver, RegistryTarget, open_registry
from servingops.activities.sources.activities import _without_token_in_errors
from servingops.activities.sources.huggingface import (
    API_TIMEOUT,
    DEFAULT_HF_ENDPOINT,
    HF_ENDPOINT_ENV,
    LIBRARY_NAME,
    hub_error,
)
from servingops.activities.sources.tokens import read_token
from servingops.api_models.canonical import canonical_json
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.operator_config import DEFAULT_CONTROLLER_NAMESPACE
from servingops.clients.oci.registry_client import ModelRegistry

log = logging.getLogger(__name__)

EXPAND = ["sha", "lastModified", "gated", "tags", "pipeline_tag", "library_name", "usedStorage"]
"""The model fields an entry is made of, asked for by name (`expand`) in listings and model infos alike."""
LIST_SORT = "created_at"
MAX_REPORTED_MISSING = 20
HEARTBEAT_INTERVAL = 5.0
"""Seconds between heartbeats carrying the scan state (the resume point of a retried attempt)."""
CHANGES_SORT = "last_modified"
"""The incremental refresh's listing order: the Hub's `sort=lastModified`, newest first."""
HEAD_PAGE = 100
"""The first page an incremental refresh asks for (`limit`); only when every model on it changed is the
organisation's listing read on (from its start, without a limit)."""
MARK_MARGIN = timedelta(seconds=60)
"""Taken off a listing's mark beyond its own duration: request latency between the Hub's clock and ours."""
FULL_LISTING_INTERVAL = 24 * 3600.0
"""Seconds after a full listing of an organisation at which the next refresh lists it fully again, whatever
the incremental checks say: the bound on how long a change they cannot see stays unseen (a gating or
visibility switch, a rename, an access grant, a deleted private model: none moves lastModified)."""

__all__ = [
    "EXPAND",
    "CatalogEntry",
    "CatalogIndexActivities",
    "scan",
    "scope_digest",
]


def scope_digest(scope: IndexScope, bounds: IndexBounds) -> str:
    """What a scan's state is valid for: its scope and the bounds that shape the index (not the budget)."""
    body = {"scope": scope.model_dump(mode="json"), "max_entries": bounds.max_indexed_entries,
            "max_bytes": bounds.max_metadata_bytes}  # fmt: skip
    return hashlib.sha256(canonical_json(body)).hexdigest()


def _timestamp(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def normalise(info: ModelInfo) -> CatalogEntry | None:
    """The entry of a model info (listing item or model_info); None when the Hub named no commit."""
    if not info.sha:
        return None
    tags = tuple(sorted({str(t) for t in info.tags or []})) or None
    used = getattr(info, "used_storage", None)
    return CatalogEntry(
        name=info.id,
        revision=info.sha,
        gated=bool(info.gated),
        tags=tags,
        pipeline_tag=info.pipeline_tag or None,
        library=info.library_name or None,
        total_size=int(used) if isinstance(used, int) and used >= 0 else None,
        last_modified=_timestamp(info.last_modified),
    )


class _Stop(Exception):
    """The budget ran out before the unit at the state's cursor."""


class _Scan:
    def __init__(self, api: HfApi, scope: IndexScope, bounds: IndexBounds, deadline: float,
                 state: ScanState, clock: Callable[[], float],
                 on_progress: Callable[[ScanState], None] | None) -> None:  # fmt: skip
        self.api, self.scope, self.bounds, self.deadline = api, scope, bounds, deadline
        self.state, self.clock, self.on_progress = state, clock, on_progress
        self.units = 0
        self.seen_skipped = set(state.skipped_oversized) | set(state.skipped_inaccessible)
        self._newest: dict[str, list[tuple[str, str]]] = {}
        """Per organisation being listed in this call, its newest models (stamp, id): a min-heap."""

    # -- budget and cursor ---------------------------------------------------------------------------

    def _check(self, cursor: ScanCursor) -> None:
        """Before a request that does not by itself advance the cursor (a collection, a listing's first page):
        stop here if the budget is spent, but only after this call has done some unit of work."""
        self.state.cursor = cursor
        if self.units and self.clock() >= self.deadline:
            raise _Stop

    def _unit(self, cursor: ScanCursor) -> None:
        """Before each unit of work that advances the cursor (one entry considered)."""
        self._check(cursor)
        self.units += 1

    def _progress(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.state)

    # -- entries -------------------------------------------------------------------------------------

    def _matches_tags(self, entry: CatalogEntry) -> bool:
        return not self.scope.tags or bool(set(entry.tags or ()) & set(self.scope.tags))

    def _admit(self, info: ModelInfo) -> bool:
        """Add the model to the index if it belongs there; False when the index is full (scan over)."""
        entry = normalise(info)
        if entry is None or entry.name in self.state.entries or entry.name in self.seen_skipped:
            return True
        if not self._matches_tags(entry):
            return True
        fitted = fit_entry(entry, self.bounds.max_metadata_bytes)
        if fitted is None:
            self.state.skipped_oversized.append(entry.name)
            self.seen_skipped.add(entry.name)
            return True
        if len(self.state.entries) >= self.bounds.max_indexed_entries:
            self.state.truncated = True  # one more entry than allowed exists: stop reading the provider
            return False
        if entry.gated and not self._accessible(entry.name):
            self.state.skipped_inaccessible.append(entry.name)
            self.seen_skipped.add(entry.name)
            return True
        self.state.entries[fitted.name] = fitted
        return True

    def _accessible(self, repo_id: str) -> bool:
        try:
            self.api.auth_check(repo_id)
        except GatedRepoError:
            return False
        except Exception as exc:
            raise hub_error(exc, f"checking access to {repo_id}") from None
        return True

    def _model_info(self, repo_id: str) -> ModelInfo | None:
        try:
            return self.api.model_info(repo_id, expand=EXPAND, timeout=API_TIMEOUT)  # type: ignore[arg-type]
        except RepositoryNotFoundError:
            return None
        except Exception as exc:
            raise hub_error(exc, f"reading {repo_id}") from None

    def _org_count(self, org: str) -> int | None:
        """The Hub's model count of `org` (its overview's `numModels`), None when it gives none: a user's
        namespace, an error (the count only enables the incremental refresh; a full one does without)."""
        try:
            count = self.api.get_organization_overview(org).num_models
        except Exception as exc:
            log.info("catalog: no model count for %s (%s): the next refresh of it lists it fully",
                     org, type(exc).__name__)  # fmt: skip
            return None
        return count if isinstance(count, int) and count >= 0 else None

    def _listed(self, org: str, info: ModelInfo) -> None:
        listing = self.state.listings.get(org)
        if listing is None:
            return
        listing.ids.append(info.id)
        stamp = _timestamp(info.last_modified)
        if stamp is not None and (listing.newest is None or stamp > listing.newest):
            listing.newest = stamp
        if stamp is not None:
            top = self._newest.setdefault(org, [])
            heapq.heappush(top, (stamp, info.id))
            if len(top) > HEAD_PAGE + 1:
                heapq.heappop(top)

    def _missing(self, what: str) -> None:
        if what not in self.state.missing:
            self.state.missing.append(what)

    # -- phases --------------------------------------------------------------------------------------

    def run(self) -> ScanState:
        cursor = self.state.cursor
        if cursor is None:
            return self.state
        try:
            for phase in PHASES[PHASES.index(cursor.phase) :]:
                start = cursor if cursor.phase == phase else ScanCursor(phase=phase)
                if not getattr(self, f"_{phase}")(start):
                    self.state.cursor = None  # full: the scan is over
                    return self.state
            self.state.cursor = None
        except _Stop:
            log.info("catalog scan yielded at %s with %d entries", self.state.cursor, len(self.state.entries))
        return self.state

    def _repositories(self, start: ScanCursor) -> bool:
        for i in range(start.item, len(self.scope.repositories)):
            repo_id = self.scope.repositories[i]
            self._unit(ScanCursor(phase="repositories", item=i))
            info = self._model_info(repo_id)
            if info is None:
                self._missing(f"repo:{repo_id}")
            elif not self._admit(info):
                return False
            self.state.cursor = ScanCursor(phase="repositories", item=i + 1)
            self._progress()
        return True

    def _collections(self, start: ScanCursor) -> bool:
        for i in range(start.item, len(self.scope.collections)):
            slug = self.scope.collections[i]
            offset = start.offset if i == start.item else 0
            self._check(ScanCursor(phase="collections", item=i, offset=offset))
            try:
                collection = self.api.get_collection(slug)
            except HfHubHTTPError as exc:
                if exc.response is not None and exc.response.status_code == 404:
                    self._missing(f"collection:{slug}")
                    continue
                raise hub_error(exc, f"reading collection {slug}") from None
            except Exception as exc:
                raise hub_error(exc, f"reading collection {slug}") from None
            models = [item.item_id for item in collection.items if item.item_type == "model"]
            for j in range(offset, len(models)):
                self._unit(ScanCursor(phase="collections", item=i, offset=j))
                info = self._model_info(models[j])
                # A model item the Hub lists but whose info is gone (deleted meanwhile) is not indexed.
                if info is not None and not self._admit(info):
                    return False
                self.state.cursor = ScanCursor(phase="collections", item=i, offset=j + 1)
                self._progress()
        return True

    def _organizations(self, start: ScanCursor) -> bool:
        tags: tuple[str | None, ...] = self.scope.tags or (None,)
        for i in range(start.item, len(self.scope.organizations)):
            org = self.scope.organizations[i]
            for t in range(start.listing if i == start.item else 0, len(tags)):
                offset = start.offset if (i, t) == (start.item, start.listing) else 0
                if not self._listing(i, org, t, tags[t], offset):
                    return False
        return True

    def _listing(self, i: int, org: str, t: int, tag: str | None, offset: int) -> bool:
        self._check(ScanCursor(phase="organizations", item=i, listing=t, offset=offset))
        if not self.scope.tags and offset == 0:
            # An unfiltered listing from its start: note what the next refresh needs to read only the changes.
            self.state.listings[org] = OrgListing(started=time.time(), model_count=self._org_count(org))
        elif tag is not None:
            self.state.listings.pop(org, None)
        try:
            models: Iterator[ModelInfo] = iter(
                self.api.list_models(author=org, filter=tag, sort=LIST_SORT, expand=EXPAND)  # type: ignore[arg-type]
            )
            position = offset
            for _ in itertools.islice(models, offset):
                pass
            while True:
                self._unit(ScanCursor(phase="organizations", item=i, listing=t, offset=position))
                info = next(models, None)
                if info is None:
                    break
                if not self._admit(info):
                    return False
                self._listed(org, info)
                position += 1
                self.state.cursor = ScanCursor(phase="organizations", item=i, listing=t, offset=position)
                if position % 100 == 0:
                    self._progress()
        except (_Stop, ApplicationError):
            raise
        except Exception as exc:
            raise hub_error(exc, f"listing the models of {org}" + (f" tagged {tag}" if tag else "")) from None
        listing = self.state.listings.get(org)
        if listing is not None and listing.started is not None:
            listing.ids = list(dict.fromkeys(listing.ids))  # a resumed listing may have met a model twice
            listing.mark = _mark(listing.newest, listing.started)
            listing.listed_at = time.time()
            # Only when this call listed it from its start (a resumed listing did not see the first models).
            top = self._newest.get(org) if offset == 0 else None
            recent = {i: st for st, i in top or [] if listing.mark is not None and st >= listing.mark}
            listing.recent = recent if top is not None and len(recent) <= HEAD_PAGE else None
        self._progress()
        return True

    # -- the incremental refresh ---------------------------------------------------------------------

    def changes_of(self, org: str, listing: OrgListing, previous: ScanState,
                   skipped: tuple[set[str], set[str]]) -> bool:  # fmt: skip
        """Index `org` from `previous` and the models changed since its listing's mark; False when that cannot be
        trusted (a count that does not add up, too many changes, the budget, the index full): list it fully."""
        assert listing.mark is not None and listing.model_count is not None
        started = time.time()
        count = self._org_count(org)
        if count is None:
            return False
        changed = self._changed_since(org, listing.mark, max(HEAD_PAGE, len(listing.ids) // 4))
        if changed is None:
            return False
        known = set(listing.ids)
        new = [name for name in changed if name not in known]
        if count - listing.model_count != len(new):
            # A model deleted, renamed or hidden (or a new one the count does not include): list it all.
            log.info("catalog: %s counts %d models, %d expected: listing it fully", org, count,
                     listing.model_count + len(new))  # fmt: skip
            return False
        oversized, inaccessible = skipped
        for name in [*listing.ids, *new]:
            info = changed.get(name)
            if info is not None:
                if not self._admit(info):
                    return False
            elif not self._reuse(name, previous, oversized, inaccessible):
                return False
        stamps = [s for s in (_timestamp(i.last_modified) for i in changed.values()) if s is not None]
        newest = max([*stamps, *([listing.newest] if listing.newest else [])], default=None)
        mark = _mark(newest, started)
        mark = max(mark, listing.mark) if mark else listing.mark
        # The next refresh reads again every model at or after the mark; all of those were read here.
        recent = {name: st for name, i in changed.items() if (st := _timestamp(i.last_modified)) and st >= mark}
        self.state.listings[org] = OrgListing(
            ids=[*listing.ids, *new], newest=newest, started=started, model_count=count, mark=mark,
            listed_at=listing.listed_at, recent=recent if len(recent) <= HEAD_PAGE else None,
        )  # fmt: skip
        return True

    def unchanged(self, org: str, head: ListingHead) -> ListingHead | None:
        """The head of `org` after a refresh when nothing in it changed: the same count, and the models at or
        after the mark exactly those read last time, at the same lastModified. None otherwise."""
        started = time.time()
        if self._org_count(org) != head.model_count:
            return None
        changed = self._changed_since(org, head.mark, len(head.recent))
        if changed is None or {n: _timestamp(i.last_modified) for n, i in changed.items()} != head.recent:
            return None
        mark = _mark(head.newest, started)
        if mark is None or mark <= head.mark:
            return head
        return head.model_copy(update={"mark": mark, "recent": {n: st for n, st in head.recent.items() if st >= mark}})

    def _changed_since(self, org: str, mark: str, most: int) -> dict[str, ModelInfo] | None:
        """The models of `org` whose lastModified is at or after `mark`, newest first; None when more than
        `most`, when the budget runs out, or when the listing fails (the full scan then reports it)."""
        for limit in (HEAD_PAGE, None):
            changed: dict[str, ModelInfo] = {}
            try:
                models = self.api.list_models(author=org, sort=CHANGES_SORT, expand=EXPAND, limit=limit)  # type: ignore[arg-type]
                for info in models:
                    stamp = _timestamp(info.last_modified)
                    if stamp is None or self.clock() >= self.deadline:
                        return None
                    if stamp < mark:
                        return changed
                    changed.setdefault(info.id, info)
                    if len(changed) > most:
                        return None
            except Exception as exc:
                log.info("catalog: listing the changes of %s failed (%s): listing it fully", org, type(exc).__name__)
                return None
            if limit is None or len(changed) < limit:
                return changed  # the listing ended: everything in it changed since the mark
        return None

    def _reuse(self, name: str, previous: ScanState, oversized: set[str], inaccessible: set[str]) -> bool:
        """An unchanged model as the previous refresh indexed it (or skipped it); False when the index is full."""
        if name in self.state.entries or name in self.seen_skipped:
            return True
        entry = previous.entries.get(name)
        if entry is not None:
            if len(self.state.entries) >= self.bounds.max_indexed_entries:
                self.state.truncated = True
                return False
            self.state.entries[name] = entry
        elif name in oversized:
            self.state.skipped_oversized.append(name)
            self.seen_skipped.add(name)
        elif name in inaccessible:
            self.state.skipped_inaccessible.append(name)
            self.seen_skipped.add(name)
        return True


def _mark(newest: str | None, started: float) -> str | None:
    """A listing's mark: its newest lastModified less the listing's duration (our clock) and MARK_MARGIN, so
    it is no later than the Hub's time when the listing began, without comparing clocks."""
    if newest is None:
        return None
    then = datetime.fromisoformat(newest.replace("Z", "+00:00"))
    return _timestamp(then - timedelta(seconds=max(0.0, time.time() - started)) - MARK_MARGIN)


def unchanged_progress(
    api: HfApi, scope: IndexScope, bounds: IndexBounds, deadline: float, previous: ScanProgress,
    *, clock: Callable[[], float] = time.monotonic,
) -> ScanProgress | None:  # fmt: skip
    """`previous` again (with its listings' marks moved on) when a refresh of `scope` would find nothing changed,
    checked with two small requests per organisation (its model count and one short newest-first page) and
    without unpacking the index; None when anything may have changed (or the scope has explicit repositories,
    collections or tags): the caller scans (incrementally when it can)."""
    summary = previous.summary
    if summary is None or previous.cursor is not None or previous.truncated:
        return None
    if previous.scope_digest != scope_digest(scope, bounds):
        return None
    if scope.tags or scope.repositories or scope.collections or not scope.organizations:
        return None
    run = _Scan(api, scope, bounds, deadline, ScanState(scope_digest=previous.scope_digest), clock, None)
    now = time.time()
    heads: dict[str, ListingHead] = {}
    for org in scope.organizations:
        head = summary.heads.get(org)
        if head is None or now - head.listed_at > FULL_LISTING_INTERVAL:
            return None
        moved = run.unchanged(org, head)
        if moved is None:
            return None
        heads[org] = moved
    return previous.model_copy(update={"summary": summary.model_copy(update={"heads": heads})})


def _incremental(api: HfApi, scope: IndexScope, bounds: IndexBounds, deadline: float, digest: str,
                 previous: ScanState, clock: Callable[[], float]) -> ScanState | None:  # fmt: skip
    """The refresh from `previous` reading only what changed, or None when a full scan is needed: a previous
    refresh of another scope, incomplete or truncated, a scope with tags or without organisations, an
    organisation without a count or a mark, or listed fully longer than FULL_LISTING_INTERVAL ago."""
    if previous.scope_digest != digest or not previous.complete or previous.truncated:
        return None
    if scope.tags or not scope.organizations:
        return None
    now = time.time()
    listings = [previous.listings.get(org) for org in scope.organizations]
    for listing in listings:
        if listing is None or listing.mark is None or listing.model_count is None or listing.listed_at is None:
            return None
        if now - listing.listed_at > FULL_LISTING_INTERVAL:
            return None
    state = ScanState(scope_digest=digest)
    run = _Scan(api, scope, bounds, deadline, state, clock, None)
    skipped = (set(previous.skipped_oversized), set(previous.skipped_inaccessible))
    try:
        # The explicit scope items as in a full scan (they come first in scan order), then each organisation.
        if not run._repositories(ScanCursor(phase="repositories")):
            return None
        if not run._collections(ScanCursor(phase="collections")):
            return None
        for org, listing in zip(scope.organizations, listings, strict=True):
            assert listing is not None
            if not run.changes_of(org, listing, previous, skipped):
                return None
    except _Stop:
        return None
    state.cursor = None
    return state


def scan(
    api: HfApi,
    scope: IndexScope,
    bounds: IndexBounds,
    deadline: float,
    resume: ScanProgress | ScanState | None = None,
    *,
    previous: ScanProgress | ScanState | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_progress: Callable[[ScanState], None] | None = None,
) -> ScanState:
    """Scan `scope` until done, full, or `clock()` passes `deadline`; continue from `resume` when it belongs to
    the same scope and bounds (otherwise start over). `on_progress` is called after each unit of work.

    `previous`, the state of the last complete refresh, makes a fresh scan incremental when it can be (see
    `_incremental`): the result is the same index a full scan would give, read from fewer requests."""
    digest = scope_digest(scope, bounds)
    state = resume.unpack() if isinstance(resume, ScanProgress) else resume.model_copy(deep=True) if resume else None
    if (state is None or state.scope_digest != digest) and previous is not None:
        before = previous.unpack() if isinstance(previous, ScanProgress) else previous
        quick = _incremental(api, scope, bounds, deadline, digest, before, clock)
        if quick is not None:
            return quick
    if state is None or state.scope_digest != digest:
        state = ScanState(scope_digest=digest)
    return _Scan(api, scope, bounds, deadline, state, clock, on_progress).run()


def result_of(state: ScanState) -> IndexHuggingFaceResult:
    progress = state.pack()
    result = IndexHuggingFaceResult(
        complete=state.complete,
        progress=progress,
        entry_count=len(state.entries),
        truncated=state.truncated,
        skipped_oversized=len(state.skipped_oversized),
        skipped_inaccessible=len(state.skipped_inaccessible),
        missing=state.missing[:MAX_REPORTED_MISSING],
    )
    if state.complete:
        document = index_of(state)
        heads = {org: ListingHead(mark=listing.mark, model_count=listing.model_count, listed_at=listing.listed_at,
                                  newest=listing.newest, recent=listing.recent)
                 for org, listing in state.listings.items()
                 if listing.mark is not None and listing.model_count is not None and listing.listed_at is not None
                 and listing.recent is not None}  # fmt: skip
        summary = ScanSummary(document_digest=document.digest, skipped_oversized=len(state.skipped_oversized),
                              skipped_inaccessible=len(state.skipped_inaccessible), heads=heads)  # fmt: skip
        result = result.model_copy(update={"digest": document.digest, "message": _summary(state),
                                           "progress": progress.model_copy(update={"summary": summary})})  # fmt: skip
    else:
        message = f"The refresh budget ran out after {len(state.entries)} entries; it continues where it stopped."
        result = result.model_copy(update={"message": message})
    return result


def _summary(state: ScanState) -> str:
    return _message(len(state.entries), state.truncated, len(state.skipped_oversized),
                    len(state.skipped_inaccessible), state.missing)  # fmt: skip


def _message(entries: int, truncated: bool, oversized: int, inaccessible: int, missing: list[str]) -> str:
    parts = [f"Indexed {entries} entries"]
    if truncated:
        parts.append("truncated at maxIndexedEntries")
    if oversized:
        parts.append(f"{oversized} skipped over maxMetadataBytes")
    if inaccessible:
        parts.append(f"{inaccessible} gated without access")
    if missing:
        parts.append(f"not found: {', '.join(missing[:MAX_REPORTED_MISSING])}")
    return "; ".join(parts) + "."


def unchanged_result(progress: ScanProgress) -> IndexHuggingFaceResult:
    """The result of a refresh that found nothing changed (`unchanged_progress`): the previous one's, with the
    same digest and message (so the workflow stores and writes nothing)."""
    summary = progress.summary
    assert summary is not None and progress.cursor is None
    message = _message(progress.entry_count, progress.truncated, summary.skipped_oversized,
                       summary.skipped_inaccessible, [])  # fmt: skip
    return IndexHuggingFaceResult(
        complete=True, progress=progress, digest=summary.document_digest, entry_count=progress.entry_count,
        truncated=progress.truncated, skipped_oversized=summary.skipped_oversized,
        skipped_inaccessible=summary.skipped_inaccessible, message=message,
    )  # fmt: skip


class CatalogIndexActivities:
    """The catalog index activity, bound to this worker's Kubernetes client, namespace and Hub endpoint."""

    def __init__(
        self,
        api_client: client.ApiClient | None = None,
        controller_namespace: str = DEFAULT_CONTROLLER_NAMESPACE,
        hf_endpoint: str | None = None,
        *,
        registry: RegistryTarget | None = None,
        credentials: CredentialsResolver | None = None,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
    ) -> None:
        """`registry`: the worker's registry (its repository is replaced by the source's catalog repository),
        where scan bodies are offloaded (scan_store.py); without it, results carry their bodies inline."""
        self._core = client.CoreV1Api(api_client) if api_client is not None else None
        self._heartbeat_interval = heartbeat_interval
        self.controller_namespace = controller_namespace
        self.endpoint = (hf_endpoint or os.environ.get(HF_ENDPOINT_ENV) or DEFAULT_HF_ENDPOINT).rstrip("/")
        self._registry_target = registry
        self._credentials = credentials
        self._clock = clock

    def all(self) -> list[Callable[..., Any]]:
        return [self.index_huggingface]

    def _api(self, token: str | None) -> HfApi:
        # token=False: never the worker's own HF_TOKEN or saved login.
        return HfApi(endpoint=self.endpoint, token=token or False, library_name=LIBRARY_NAME)

    @contextmanager
    def _registry(self, source: str) -> Iterator[ModelRegistry]:
        if self._registry_target is None:
            raise application_error(ErrorType.INVALID_INPUT, f"catalog {source}: a scan body is offloaded to the "
                                    "registry, and this worker has no registry configured")
        target = self._registry_target.model_copy(update={"repository": catalog_repository(source)})
        with open_registry(target, self._credentials) as registry:
            yield registry

    def _hydrate(self, source: str, progress: ScanProgress | None, what: str) -> ScanProgress | None:
        """`progress` with its body read back when it was offloaded; None (with a log line) when the registry
        lost the body: a lost `previous` costs a full listing, a lost `resume` restarts the scan."""
        if progress is None or progress.packed or progress.packed_digest is None:
            return progress
        with self._registry(source) as registry:
            whole = scan_store.hydrate(registry, source, progress)
        if whole is None:
            log.warning("catalog %s: the %s scan body %s is gone from the registry; scanning without it", source,
                        what, progress.packed_digest)
        return whole

    def _offload(self, source: str, result: IndexHuggingFaceResult) -> IndexHuggingFaceResult:
        if self._registry_target is None or result.progress is None or not result.progress.packed:
            return result
        with self._registry(source) as registry:
            progress = scan_store.offload(registry, source, result.progress)
        return result.model_copy(update={"progress": progress})

    @activity.defn(name=INDEX_ACTIVITY)
    def index_huggingface(self, req: IndexHuggingFaceInput) -> IndexHuggingFaceResult:
        """Index the source within its policy, until done or until its refresh budget is spent."""
        verdict = evaluate_policy(req.policy)
        if not verdict.allowed or verdict.scope is None or verdict.bounds is None:
            return IndexHuggingFaceResult(blocked_reason=verdict.reason.value, message=verdict.message)
        scope, bounds = verdict.scope, verdict.bounds
        deadline = self._clock() + bounds.refresh_budget_seconds
        resume: ScanProgress | None = None
        info = activity.info()
        if info.heartbeat_details:
            # A retried attempt continues from the last heartbeat of the one before (newer than `resume`).
            try:
                resume = ScanProgress.model_validate(info.heartbeat_details[-1])
            except ValueError:
                log.warning("catalog %s: unreadable heartbeat details, starting from the input", req.source)
        if resume is None:
            resume = self._hydrate(req.source, req.resume, "resumed")
        token = (read_token(self._core, self.controller_namespace, req.token_secret_name)
                 if req.token_secret_name else None)
        api = self._api(token)

        last_beat = [float("-inf")]

        def heartbeat(state: ScanState) -> None:
            # Packing a large state costs milliseconds: at most one heartbeat per interval (the SDK throttles
            # what it sends anyway; this throttles what we build).
            now = time.monotonic()
            if now - last_beat[0] >= self._heartbeat_interval:
                last_beat[0] = now
                activity.heartbeat(state.pack().model_dump(mode="json"))

        previous = None if resume or req.resume else req.previous
        if previous is not None and previous.scope_digest != scope_digest(scope, bounds):
            previous = None  # of another scope or bounds (a spec change): no use, so not even read back

        def run() -> ScanState | ScanProgress:
            if token:
                try:
                    api.whoami()
                except Exception as exc:
                    raise hub_error(exc, "checking the source's token") from None
            if previous is not None:
                # Reads only the summary: an offloaded previous is not read back when nothing changed.
                same = unchanged_progress(api, scope, bounds, deadline, previous, clock=self._clock)
                if same is not None:
                    return same
            whole = self._hydrate(req.source, previous, "previous")
            return scan(api, scope, bounds, deadline, resume, previous=whole,
                        clock=self._clock, on_progress=heartbeat)  # fmt: skip

        outcome = _without_token_in_errors(token, run)
        if isinstance(outcome, ScanProgress):
            result = unchanged_result(outcome)
            log.info("catalog %s: unchanged: %s", req.source, result.message)
            return self._offload(req.source, result)  # offloaded already, unless given inline
        state = outcome
        if not state.complete:
            activity.heartbeat(state.pack().model_dump(mode="json"))
        result = result_of(state)
        log.info("catalog %s: %s", req.source, result.message)
        return self._offload(req.source, result)
