"""The catalog index as one canonical JSON document, and its digest (the future `status.catalogRevision`).

Pure. Canonical: keys sorted, no insignificant whitespace, UTF-8, entries sorted by name, optional fields
that are absent left out (not `null`), and nothing that changes when the index does not (no refresh time,
no scan statistics that depend on how the scan was split into attempts). So a refresh that finds nothing
changed produces the same bytes and the same digest, and a caller can skip every write by comparing digests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from servingops.activities.catalog.types import OPTIONAL_FIELDS_DROP_ORDER, CatalogEntry, ScanState
from servingops.api_models.canonical import canonical_json

INDEX_SCHEMA_VERSION = "v1"
INDEX_MEDIA_TYPE = "application/vnd.deckhouse.ai.catalog.index.v1+json"


def entry_json(entry: CatalogEntry) -> bytes:
    """An entry's canonical bytes: what maxMetadataBytes measures."""
    return canonical_json(entry.model_dump(mode="json", exclude_none=True))


def fit_entry(entry: CatalogEntry, max_bytes: int) -> CatalogEntry | None:
    """The entry within `max_bytes` of canonical JSON: as is, else without its optional fields one at a time in
    `OPTIONAL_FIELDS_DROP_ORDER`; None when even the required fields do not fit (the caller skips it)."""
    if len(entry_json(entry)) <= max_bytes:
        return entry
    trimmed = entry
    for name in OPTIONAL_FIELDS_DROP_ORDER:
        if getattr(trimmed, name) is None:
            continue
        trimmed = trimmed.model_copy(update={name: None})
        if len(entry_json(trimmed)) <= max_bytes:
            return trimmed
    return None


class IndexDocument(BaseModel):
    model_config = ConfigDict(frozen=True)

    content: bytes
    digest: str
    """`sha256:<hex>` of `content`."""
    entry_count: int
    media_type: str = INDEX_MEDIA_TYPE


def build_index(entries: Iterable[CatalogEntry], *, source_type: str = "HuggingFace",
                truncated: bool = False) -> IndexDocument:  # fmt: skip
    """The canonical document of `entries` (deduplicated by name; the last of a name wins)."""
    by_name = {e.name: e for e in entries}
    body = {
        "schemaVersion": INDEX_SCHEMA_VERSION,
        "sourceType": source_type,
        "truncated": truncated,
        "entries": [by_name[name].model_dump(mode="json", exclude_none=True) for name in sorted(by_name)],
    }
    content = canonical_json(body)
    return IndexDocument(
        content=content, digest=f"sha256:{hashlib.sha256(content).hexdigest()}", entry_count=len(by_name)
    )


def index_of(state: ScanState) -> IndexDocument:
    """The document of a complete scan."""
    if not state.complete:
        raise ValueError("the scan is not complete: resume it before building its index")
    return build_index(state.entries.values(), truncated=state.truncated)


def parse_index(content: bytes) -> list[CatalogEntry]:
    """The entries of a document written by `build_index` (a stored index read back)."""
    body = json.loads(content)
    if not isinstance(body, dict) or body.get("schemaVersion") != INDEX_SCHEMA_VERSION:
        raise ValueError("not a catalog index document of schema v1")
    return [CatalogEntry.model_validate(e) for e in body.get("entries", [])]
