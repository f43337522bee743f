"""A Hugging Face scan's packed body kept in the registry, so that it never travels in Temporal's history.

A `ScanProgress` is small apart from `packed` (every entry found so far and, per organisation, the ids its
listing saw: about a megabyte for 10,000 entries). The index activity offloads that body before it returns:
the zlib bytes become a blob of the source's catalog repository (`catalog_repository(source)`, beside its
index artifacts) and the progress keeps only `packed_digest`. The workflow then carries a few hundred bytes
between attempts (`resume`) and between refreshes (`previous`), and the next activity (an index attempt, or
`catalog.store_index`) reads the body back by digest (`hydrate`), verified against it.

Every offloaded body is referenced by a small manifest under a tag, `scan-complete` for a complete scan and
`scan-partial` for one that yielded at its refresh budget, so a registry garbage collection keeps the latest
of each. An older body may be collected: a `previous` whose body is gone only costs a full listing (the index
is rebuilt from the provider), and a `resume` whose body is gone starts the scan over. Nothing here is the
index: the catalogRevision is always the manifest `store.py` pushes.
"""

from __future__ import annotations

import base64

from servingops.activities.catalog.artifacts import (
    ANNOTATION_SOURCE,
    catalog_repository,
    push_single_layer,
    sha256_of,
    single_layer_manifest,
)
from servingops.activities.catalog.types import ScanProgress
from servingops.clients.oci.registry_client import ModelRegistry

SCAN_MEDIA_TYPE = "application/vnd.servingops.catalog.scan.v1+zlib"
"""The layer of a scan body: zlib-compressed canonical JSON (`ScanState.pack`)."""
COMPLETE_TAG = "scan-complete"
PARTIAL_TAG = "scan-partial"
MAX_BODY_BYTES = 64 << 20
"""A body read back is refused beyond this (zlib of 10,000 entries is about 1 MB)."""


def offload(registry: ModelRegistry, source: str, progress: ScanProgress) -> ScanProgress:
    """`progress` with its body pushed (when not already there) and replaced by its digest."""
    if not progress.packed:
        return progress
    body = base64.b64decode(progress.packed)
    digest = sha256_of(body)
    tag = COMPLETE_TAG if progress.cursor is None else PARTIAL_TAG
    manifest = single_layer_manifest(SCAN_MEDIA_TYPE, digest, len(body), annotations={ANNOTATION_SOURCE: source})
    # The body blob is sent only when the registry lacks it (a HEAD first).
    push_single_layer(registry, catalog_repository(source), tag, body, digest, manifest)
    return progress.model_copy(update={"packed": "", "packed_digest": digest})


def hydrate(registry: ModelRegistry, source: str, progress: ScanProgress) -> ScanProgress | None:
    """`progress` with its body read back from the registry; None when the registry no longer has it."""
    if progress.packed or progress.packed_digest is None:
        return progress
    body = registry.read_blob_bytes(catalog_repository(source), progress.packed_digest, max_bytes=MAX_BODY_BYTES)
    if body is None:
        return None
    return progress.model_copy(update={"packed": base64.b64encode(body).decode(), "packed_digest": None})


__all__ = ["COMPLETE_TAG", "MAX_BODY_BYTES", "PARTIAL_TAG", "SCAN_MEDIA_TYPE", "hydrate", "offload"]
