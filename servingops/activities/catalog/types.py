"""Inputs, outputs and the entry model of the catalog index activities (they travel in Temporal payloads).

Import-light (pydantic and the API models only) so a workflow can import them for its activity calls.
Nothing here is a secret: a token is reached through `token_secret_name`, which the activity reads itself.

The scan state crosses attempts in two ways, both as a `ScanProgress`: in the heartbeat details (a retried
attempt reads `activity.info().heartbeat_details`) and in the result of an attempt whose refresh budget ran
out (the caller passes it back as `resume`). Its entries are packed (canonical JSON, zlib, base64): a
10,000-entry index would otherwise approach Temporal's 2 MB payload limit. What the activity returns has its
packed body offloaded to the registry (scan_store.py), so results, `resume` and `previous` stay small in the
workflow's history; heartbeat details keep the body inline (they are not history events).
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servingops.api_models.deckhouse.catalog_source import CatalogPolicy

INDEX_ACTIVITY = "catalog.index_huggingface"

Phase = Literal["repositories", "collections", "organizations"]
PHASES: tuple[Phase, ...] = ("repositories", "collections", "organizations")
"""Scan order. Explicit repositories come first, then collections, then organisations: when
maxIndexedEntries truncates, the most specific scope is kept."""


class CatalogEntry(BaseModel):
    """One model of the index, normalised from the Hub's model info."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The repository id (`org/name`), canonical as the Hub returns it."""
    revision: str
    """The commit sha of the default branch when indexed: an import of this entry pins it."""
    gated: bool = False
    tags: tuple[str, ...] | None = None
    """Sorted, without duplicates."""
    pipeline_tag: str | None = None
    library: str | None = None
    total_size: int | None = Field(default=None, ge=0)
    """The Hub's `usedStorage` of the repository in bytes, when it states it."""
    last_modified: str | None = None
    """The repository's last commit time (RFC 3339, UTC): it changes only when the repository does."""


OPTIONAL_FIELDS_DROP_ORDER: tuple[str, ...] = ("tags", "library", "pipeline_tag", "total_size", "last_modified")
"""What an entry over maxMetadataBytes loses first: tags (the only list, unbounded on the Hub) before the
small scalars. `name`, `revision` and `gated` are never dropped: without them an entry cannot be imported."""


class ScanCursor(BaseModel):
    """Where a scan stopped: the next unit of work."""

    model_config = ConfigDict(frozen=True)

    phase: Phase
    item: int = Field(default=0, ge=0)
    """Index into the phase's sorted scope list (repository, collection or organisation)."""
    listing: int = Field(default=0, ge=0)
    """Organisations: index into the tag listings (`list_models(author=org, filter=tag)` per allowed tag, or
    one unfiltered listing when no tag is allowed)."""
    offset: int = Field(default=0, ge=0)
    """Items of the current listing (collection items, organisation listing) already consumed."""


class OrgListing(BaseModel):
    """What a complete unfiltered listing of one organisation saw: what lets the next refresh read only the
    models changed since (`huggingface_index`'s incremental refresh). Kept only for scopes without tags."""

    ids: list[str] = []
    """Every model the listing returned (indexed, skipped or without a commit)."""
    newest: str | None = None
    """The newest lastModified among them (RFC 3339, UTC, as `CatalogEntry.last_modified`)."""
    started: float | None = None
    """Wall time (epoch seconds) at which the listing began (its first attempt, when it yielded)."""
    model_count: int | None = None
    """The Hub's model count of the organisation (`numModels` of its overview) read before the listing began;
    None when the Hub gave none (a user, not an organisation): no incremental refresh then."""
    mark: str | None = None
    """Set when the listing completed: every change after the listing began has a lastModified at or after it."""
    listed_at: float | None = None
    """Wall time of the last full listing: an incremental refresh older than FULL_LISTING_INTERVAL lists again."""
    recent: dict[str, str] | None = None
    """The models at or after `mark`, with their lastModified (the next refresh reads them again: unchanged
    if they are the same); None when there were too many to keep (no no-change shortcut then)."""


class ListingHead(BaseModel):
    """An `OrgListing` without its ids: what a no-change refresh checks, outside the packed entries."""

    model_config = ConfigDict(frozen=True)

    mark: str
    model_count: int
    listed_at: float
    newest: str | None = None
    recent: dict[str, str] = {}


class ScanSummary(BaseModel):
    """Of a complete scan, beside its packed entries: what a refresh that finds nothing changed answers with,
    without unpacking, repacking or hashing the index again."""

    model_config = ConfigDict(frozen=True)

    document_digest: str
    skipped_oversized: int = 0
    skipped_inaccessible: int = 0
    heads: dict[str, ListingHead] = {}


class ScanState(BaseModel):
    """Everything a scan has found so far: the unpacked form of `ScanProgress`."""

    scope_digest: str
    cursor: ScanCursor | None = ScanCursor(phase="repositories")
    """None: the scan is complete."""
    truncated: bool = False
    entries: dict[str, CatalogEntry] = {}
    skipped_oversized: list[str] = []
    """Entries whose metadata did not fit maxMetadataBytes even without its optional fields."""
    skipped_inaccessible: list[str] = []
    """Gated entries the source's token (or no token) has no access to: an import would fail."""
    missing: list[str] = []
    """Explicit scope items the provider does not have (or does not show this token): `repo:<id>`,
    `collection:<slug>`."""
    listings: dict[str, OrgListing] = {}
    """Per organisation, what its full listing saw (scopes without tags only): see `OrgListing`."""

    @property
    def complete(self) -> bool:
        return self.cursor is None

    def pack(self) -> ScanProgress:
        body: dict[str, Any] = {
            "entries": [e.model_dump(mode="json", exclude_none=True) for e in self.entries.values()],
            "skipped_oversized": self.skipped_oversized,
            "skipped_inaccessible": self.skipped_inaccessible,
            "missing": self.missing,
        }
        if self.listings:
            body["listings"] = {org: listing.model_dump(mode="json") for org, listing in self.listings.items()}
        raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        return ScanProgress(
            scope_digest=self.scope_digest,
            cursor=self.cursor,
            truncated=self.truncated,
            entry_count=len(self.entries),
            packed=base64.b64encode(zlib.compress(raw, 6)).decode(),
        )


class ScanProgress(BaseModel):
    """A scan's state in wire form: where it is and what it found (packed)."""

    model_config = ConfigDict(frozen=True)

    scope_digest: str
    """Of the scope and bounds the scan ran under: a progress of another policy is never resumed."""
    cursor: ScanCursor | None
    truncated: bool = False
    entry_count: int = 0
    packed: str = ""
    packed_digest: str | None = None
    """Set instead of `packed` when the body was offloaded to the registry (`scan_store.offload`): the digest
    of its zlib bytes there. `scan_store.hydrate` reads it back before the progress is unpacked."""
    summary: ScanSummary | None = None
    """Set on the progress of a complete scan (`result_of`)."""

    def unpack(self) -> ScanState:
        if self.packed_digest is not None and not self.packed:
            raise ValueError(f"the scan body {self.packed_digest} is in the registry: hydrate it first")
        body: dict[str, Any] = json.loads(zlib.decompress(base64.b64decode(self.packed))) if self.packed else {}
        entries = [CatalogEntry.model_validate(e) for e in body.get("entries", [])]
        return ScanState(
            scope_digest=self.scope_digest,
            cursor=self.cursor,
            truncated=self.truncated,
            entries={e.name: e for e in entries},
            skipped_oversized=list(body.get("skipped_oversized", [])),
            skipped_inaccessible=list(body.get("skipped_inaccessible", [])),
            missing=list(body.get("missing", [])),
            listings={org: OrgListing.model_validate(v) for org, v in (body.get("listings") or {}).items()},
        )


class IndexHuggingFaceInput(BaseModel):
    source: str
    """The ModelCatalogSource's name (for logs and messages)."""
    policy: CatalogPolicy | None
    token_secret_name: str | None = None
    """`spec.huggingFace.tokenSecretName`: a Secret in the controller's namespace with key `token`."""
    resume: ScanProgress | None = None
    """The progress of the previous attempt whose budget ran out; None starts a fresh scan."""
    previous: ScanProgress | None = None
    """The progress of the last complete refresh of this source (optional): with it, a refresh of a scope
    without tags lists only the models changed since (a no-change refresh reads one short page per
    organisation), falling back to a full scan whenever it cannot be sure (see `huggingface_index`). Ignored
    while `resume` is set.

    Both may be offloaded (`packed_digest`, see scan_store.py): the activity reads their bodies back from
    the registry, and offloads the body of the progress it returns when it has a registry."""


class IndexHuggingFaceResult(BaseModel):
    """Either blocked by the policy (nothing was requested from the provider), or a scan's progress: complete
    (the index is `progress`, its digest `digest`) or yielded at the refresh budget (pass `progress` back as
    `resume` to continue)."""

    blocked_reason: str | None = None
    """A PolicyReason value when the policy forbids the scan."""
    message: str = ""
    complete: bool = False
    progress: ScanProgress | None = None
    digest: str | None = None
    """sha256 of the canonical index document (the future catalogRevision); set when complete."""
    entry_count: int = 0
    truncated: bool = False
    skipped_oversized: int = 0
    skipped_inaccessible: int = 0
    missing: list[str] = []
    """At most the first 20."""
