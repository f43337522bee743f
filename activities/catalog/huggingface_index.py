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
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from huggingface_hub import HfApi
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError
from huggingface_hub.hf_api import ModelInfo
from kubernetes import client
from temporalio import activity
from temporalio.exceptions import ApplicationError

from servingops.activities.catalog.index_document import canonical_json, fit_entry, index_of
from servingops.activities.catalog.policy import IndexBounds, IndexScope, evaluate_policy
from servingops.activities.catalog.secrets import read_token
from servingops.activities.catalog.types import (
    INDEX_ACTIVITY,
    PHASES,
    CatalogEntry,
    IndexHuggingFaceInput,
    IndexHuggingFaceResult,
    ScanCursor,
    ScanProgress,
    ScanState,
)
from servingops.activities.sources.activities import _without_token_in_errors
from servingops.activities.sources.huggingface import (
    API_TIMEOUT,
    DEFAULT_HF_ENDPOINT,
    HF_ENDPOINT_ENV,
    LIBRARY_NAME,
    hub_error,
)
from servingops.activities.uploads.sessions import DEFAULT_CONTROLLER_NAMESPACE

log = logging.getLogger(__name__)

EXPAND = ["sha", "lastModified", "gated", "tags", "pipeline_tag", "library_name", "usedStorage"]
"""The model fields an entry is made of, asked for by name (`expand`) in listings and model infos alike."""
LIST_SORT = "created_at"
MAX_REPORTED_MISSING = 20
HEARTBEAT_INTERVAL = 5.0
"""Seconds between heartbeats carrying the scan state (the resume point of a retried attempt)."""

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
                position += 1
                self.state.cursor = ScanCursor(phase="organizations", item=i, listing=t, offset=position)
                if position % 100 == 0:
                    self._progress()
        except (_Stop, ApplicationError):
            raise
        except Exception as exc:
            raise hub_error(exc, f"listing the models of {org}" + (f" tagged {tag}" if tag else "")) from None
        self._progress()
        return True


def scan(
    api: HfApi,
    scope: IndexScope,
    bounds: IndexBounds,
    deadline: float,
    resume: ScanProgress | ScanState | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    on_progress: Callable[[ScanState], None] | None = None,
) -> ScanState:
    """Scan `scope` until done, full, or `clock()` passes `deadline`; continue from `resume` when it belongs to
    the same scope and bounds (otherwise start over). `on_progress` is called after each unit of work."""
    digest = scope_digest(scope, bounds)
    state = resume.unpack() if isinstance(resume, ScanProgress) else resume.model_copy(deep=True) if resume else None
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
        result = result.model_copy(update={"digest": document.digest, "message": _summary(state)})
    else:
        message = f"The refresh budget ran out after {len(state.entries)} entries; it continues where it stopped."
        result = result.model_copy(update={"message": message})
    return result


def _summary(state: ScanState) -> str:
    parts = [f"Indexed {len(state.entries)} entries"]
    if state.truncated:
        parts.append("truncated at maxIndexedEntries")
    if state.skipped_oversized:
        parts.append(f"{len(state.skipped_oversized)} skipped over maxMetadataBytes")
    if state.skipped_inaccessible:
        parts.append(f"{len(state.skipped_inaccessible)} gated without access")
    if state.missing:
        parts.append(f"not found: {', '.join(state.missing[:MAX_REPORTED_MISSING])}")
    return "; ".join(parts) + "."


class CatalogIndexActivities:
    """The catalog index activity, bound to this worker's Kubernetes client, namespace and Hub endpoint."""

    def __init__(
        self,
        api_client: client.ApiClient | None = None,
        controller_namespace: str = DEFAULT_CONTROLLER_NAMESPACE,
        hf_endpoint: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
    ) -> None:
        self._core = client.CoreV1Api(api_client) if api_client is not None else None
        self._heartbeat_interval = heartbeat_interval
        self.controller_namespace = controller_namespace
        self.endpoint = (hf_endpoint or os.environ.get(HF_ENDPOINT_ENV) or DEFAULT_HF_ENDPOINT).rstrip("/")
        self._clock = clock

    def all(self) -> list[Callable[..., Any]]:
        return [self.index_huggingface]

    def _api(self, token: str | None) -> HfApi:
        # token=False: never the worker's own HF_TOKEN or saved login.
        return HfApi(endpoint=self.endpoint, token=token or False, library_name=LIBRARY_NAME)

    @activity.defn(name=INDEX_ACTIVITY)
    def index_huggingface(self, req: IndexHuggingFaceInput) -> IndexHuggingFaceResult:
        """Index the source within its policy, until done or until its refresh budget is spent."""
        verdict = evaluate_policy(req.policy)
        if not verdict.allowed or verdict.scope is None or verdict.bounds is None:
            return IndexHuggingFaceResult(blocked_reason=verdict.reason.value, message=verdict.message)
        scope, bounds = verdict.scope, verdict.bounds
        deadline = self._clock() + bounds.refresh_budget_seconds
        resume: ScanProgress | None = req.resume
        info = activity.info()
        if info.heartbeat_details:
            # A retried attempt continues from the last heartbeat of the one before (newer than `resume`).
            try:
                resume = ScanProgress.model_validate(info.heartbeat_details[-1])
            except ValueError:
                log.warning("catalog %s: unreadable heartbeat details, starting from the input", req.source)
        token = read_token(self._core, self.controller_namespace, req.token_secret_name)
        api = self._api(token)

        last_beat = [float("-inf")]

        def heartbeat(state: ScanState) -> None:
            # Packing a large state costs milliseconds: at most one heartbeat per interval (the SDK throttles
            # what it sends anyway; this throttles what we build).
            now = time.monotonic()
            if now - last_beat[0] >= self._heartbeat_interval:
                last_beat[0] = now
                activity.heartbeat(state.pack().model_dump(mode="json"))

        def run() -> ScanState:
            if token:
                try:
                    api.whoami()
                except Exception as exc:
                    raise hub_error(exc, "checking the source's token") from None
            return scan(api, scope, bounds, deadline, resume, clock=self._clock, on_progress=heartbeat)

        state = _without_token_in_errors(token, run)
        if not state.complete:
            activity.heartbeat(state.pack().model_dump(mode="json"))
        result = result_of(state)
        log.info("catalog %s: %s", req.source, result.message)
        return result
