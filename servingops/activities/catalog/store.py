"""Store a complete catalog index outside status: an OCI artifact in the worker's registry.

In the source's catalog repository (artifacts.py), the artifact is a one-layer OCI manifest whose
`artifactType` is the index media type and whose layer is the canonical index document
(`index_document.build_index`); the layer's digest is the document digest. The manifest carries no time and
no scan statistics, so the same document always makes the same manifest bytes, hence the same manifest
digest: that manifest digest is the source's `status.catalogRevision`, and
`<registry>/<repository>@<catalogRevision>` pulls exactly that index.

Nothing partial is stored: the activity accepts only a complete scan (`ScanProgress.cursor` None), rebuilds
the document from it (its body read back from the registry when the index activity offloaded it,
scan_store.py) and checks it hashes to the digest the index activity reported, then pushes the
document blob, the empty config and last the manifest (tagged `current`). Until the manifest lands the
blobs are referenced by nothing. Retry-safe: blobs are content addressed (present ones are skipped) and
the manifest bytes are deterministic.

The workflow calls this only when the document digest differs from the one it last stored: a refresh that
finds nothing changed pushes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from pydantic import BaseModel
from temporalio import activity

from servingops.activities.catalog.artifacts import (
    ANNOTATION_SOURCE,
    CATALOG_REPOSITORY_PREFIX,
    EMPTY_CONFIG,
    catalog_repository,
    push_single_layer,
    sha256_of,
    single_layer_manifest,
)
from servingops.activities.catalog.index_document import INDEX_MEDIA_TYPE, index_of
from servingops.activities.catalog.scan_store import hydrate
from servingops.activities.catalog.types import ScanProgress
from servingops.activities.oci.activities import CredentialsResolver, RegistryTarget, open_registry
from servingops.api_models.canonical import canonical_json
from servingops.api_models.errors import ErrorType, application_error
from servingops.clients.catalog_remote import INDEX_CONTENT_TYPE, SCHEMA_VERSION, RemoteIndex
from servingops.clients.oci import media_types as mt
from servingops.clients.oci.registry_client import ModelRegistry

STORE_ACTIVITY = "catalog.store_index"
STORE_REMOTE_ACTIVITY = "catalog.store_remote_index"
REMOTE_INDEX_MEDIA_TYPE = INDEX_CONTENT_TYPE
"""The layer (and artifactType) of a type Catalog source's stored index: the remote's RemoteIndex document."""
CURRENT_TAG = "current"
"""The tag of a source's newest index (older revisions stay pullable by digest until GC)."""
ANNOTATION_ENTRIES = "ai.deckhouse.io/catalog-entries"
INDEX_FILE = "index.json"


def index_manifest(source: str, document_digest: str, document_size: int, entry_count: int,
                   media_type: str = INDEX_MEDIA_TYPE) -> bytes:
    """The artifact's manifest bytes: a pure function of the document (and the source's name)."""
    return single_layer_manifest(media_type, document_digest, document_size,
                                 layer_annotations={mt.ANNOTATION_TITLE: INDEX_FILE},
                                 annotations={ANNOTATION_SOURCE: source, ANNOTATION_ENTRIES: str(entry_count)})


def push_index(registry: ModelRegistry, source: str, content: bytes, digest: str, entry_count: int,
               media_type: str = INDEX_MEDIA_TYPE) -> str:
    """Push an index document as the source's artifact tagged `current`; its manifest digest (the
    catalogRevision)."""
    manifest = index_manifest(source, digest, len(content), entry_count, media_type)
    return push_single_layer(registry, catalog_repository(source), CURRENT_TAG, content, digest, manifest)


class StoreIndexInput(BaseModel):
    source: str
    """The ModelCatalogSource's name: the repository is `catalog_repository(source)`."""
    progress: ScanProgress
    """A complete scan (what `catalog.index_huggingface` returned with complete=True)."""
    digest: str
    """The document digest the index activity reported: the rebuilt document must hash to it."""


class StoreRemoteIndexInput(BaseModel):
    """A type Catalog source's index: the remote's RemoteIndex, stored as its canonical JSON document."""

    source: str
    index: RemoteIndex
    digest: str
    """`remote_index_digest(index)`, as the workflow computed it: the document must hash to it."""


def remote_index_document(index: RemoteIndex) -> bytes:
    """The stored document of a type Catalog source: the RemoteIndex's canonical JSON (camelCase keys, no
    nulls, schemaVersion), which `remote.parse_index` reads back (and checks its revision)."""
    body = {**index.model_dump(mode="json", by_alias=True, exclude_none=True), "schemaVersion": SCHEMA_VERSION}
    return canonical_json(body)


def remote_index_digest(index: RemoteIndex) -> str:
    """The document digest of `remote_index_document(index)`: a pure function, the workflow decides a no-change
    refresh by it."""
    return sha256_of(remote_index_document(index))


class StoredIndex(BaseModel):
    revision: str
    """The manifest digest: status.catalogRevision."""
    document_digest: str
    entry_count: int
    reference: str
    """`registry/repository@revision`."""


class CatalogStoreActivities:
    """Bound to the worker's registry (address, TLS, credentials Secret) and its credential resolver."""

    def __init__(self, registry: RegistryTarget, credentials: CredentialsResolver | None = None) -> None:
        self._registry_target = registry
        self._credentials = credentials

    def all(self) -> list[Callable[..., Any]]:
        return [self.store_index, self.store_remote_index]

    def target(self, source: str) -> RegistryTarget:
        return self._registry_target.model_copy(update={"repository": catalog_repository(source)})

    def _registry(self, target: RegistryTarget) -> AbstractContextManager[ModelRegistry]:
        return open_registry(target, self._credentials)

    @activity.defn(name=STORE_ACTIVITY)
    def store_index(self, req: StoreIndexInput) -> StoredIndex:
        """Push the complete index of `req.progress` as the source's artifact; its manifest digest."""
        if req.progress.cursor is not None:
            raise application_error(ErrorType.INVALID_INPUT,
                                    f"catalog {req.source}: the scan is not complete, nothing is stored")
        target = self.target(req.source)
        with self._registry(target) as registry:
            # Offloaded by the index activity (scan_store.py): read back by digest, verified.
            progress = hydrate(registry, req.source, req.progress)
            if progress is None:
                raise application_error(
                    ErrorType.INVALID_INPUT,
                    f"catalog {req.source}: the scan body {req.progress.packed_digest} is gone from the registry; "
                    "nothing is stored (the next refresh scans again)")
            document = index_of(progress.unpack())
            if document.digest != req.digest:
                raise application_error(
                    ErrorType.INVALID_INPUT,
                    f"catalog {req.source}: the index rebuilt from the scan hashes to {document.digest}, "
                    f"not the reported {req.digest}; nothing is stored")
            revision = push_index(registry, req.source, document.content, document.digest, document.entry_count)
        activity.logger.info("catalog %s: stored %d entries as %s", req.source, document.entry_count, revision)
        return StoredIndex(revision=revision, document_digest=document.digest, entry_count=document.entry_count,
                           reference=target.reference(revision))

    @activity.defn(name=STORE_REMOTE_ACTIVITY)
    def store_remote_index(self, req: StoreRemoteIndexInput) -> StoredIndex:
        """Push a type Catalog source's RemoteIndex as its artifact (the same layout, the remote index media type
        for the layer); its manifest digest."""
        content = remote_index_document(req.index)
        digest = sha256_of(content)
        if digest != req.digest:
            raise application_error(ErrorType.INVALID_INPUT,
                                    f"catalog {req.source}: the remote index document hashes to {digest}, not the "
                                    f"reported {req.digest}; nothing is stored")
        target = self.target(req.source)
        entry_count = len(req.index.entries)
        with self._registry(target) as registry:
            revision = push_index(registry, req.source, content, digest, entry_count, REMOTE_INDEX_MEDIA_TYPE)
        activity.logger.info("catalog %s: stored the remote index %s (%d entries) as %s", req.source,
                             req.index.revision, entry_count, revision)
        return StoredIndex(revision=revision, document_digest=digest, entry_count=entry_count,
                           reference=target.reference(revision))


__all__ = ["CATALOG_REPOSITORY_PREFIX", "CURRENT_TAG", "EMPTY_CONFIG", "REMOTE_INDEX_MEDIA_TYPE", "STORE_ACTIVITY",
           "STORE_REMOTE_ACTIVITY", "CatalogStoreActivities", "StoreIndexInput", "StoreRemoteIndexInput",
           "StoredIndex", "catalog_repository", "index_manifest", "push_index", "remote_index_digest",
           "remote_index_document"]
