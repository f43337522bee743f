"""Store a complete catalog index outside status: an OCI artifact in the worker's registry.

One repository per source, `<CATALOG_REPOSITORY_PREFIX>/<source name>` (source names are DNS-1123
subdomains, valid repository path components). The artifact is an OCI image manifest with
`artifactType` the index media type, the empty config, and one layer: the canonical index document
(`index_document.build_index`) whose digest is the document digest. The manifest carries no time and
no scan statistics, so the same document always makes the same manifest bytes, hence the same manifest
digest: that manifest digest is the source's `status.catalogRevision`, and
`<registry>/<repository>@<catalogRevision>` pulls exactly that index.

Nothing partial is stored: the activity accepts only a complete scan (`ScanProgress.cursor` None), rebuilds
the document from it and checks it hashes to the digest the index activity reported, then pushes the
document blob, the empty config and last the manifest (tagged `current`). Until the manifest lands the
blobs are referenced by nothing. Retry-safe: blobs are content addressed (present ones are skipped) and
the manifest bytes are deterministic.

The workflow calls this only when the document digest differs from the one it last stored: a refresh that
finds nothing changed pushes nothing.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from pydantic import BaseModel
from temporalio import activity

from servingops.activities.catalog.index_document import INDEX_MEDIA_TYPE, index_of
from servingops.activities.catalog.remote import INDEX_CONTENT_TYPE, SCHEMA_VERSION, RemoteIndex
from servingops.activities.catalog.types import ScanProgress
from servingops.activities.oci import media_types as mt
from servingops.activities.oci.activities import CredentialsResolver, RegistryTarget, open_registry
from servingops.activities.oci.registry_client import ModelRegistry
from servingops.api_models.canonical import canonical_json
from servingops.api_models.errors import ErrorType, application_error

STORE_ACTIVITY = "catalog.store_index"
STORE_REMOTE_ACTIVITY = "catalog.store_remote_index"
REMOTE_INDEX_MEDIA_TYPE = INDEX_CONTENT_TYPE
"""The layer (and artifactType) of a type Catalog source's stored index: the remote's RemoteIndex document."""
CATALOG_REPOSITORY_PREFIX = "servingops/catalog"
CURRENT_TAG = "current"
"""The tag of a source's newest index (older revisions stay pullable by digest until GC)."""
EMPTY_CONFIG = b"{}"
ANNOTATION_SOURCE = "ai.deckhouse.io/catalog-source"
ANNOTATION_ENTRIES = "ai.deckhouse.io/catalog-entries"
INDEX_FILE = "index.json"


def catalog_repository(source: str) -> str:
    return f"{CATALOG_REPOSITORY_PREFIX}/{source}"


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def index_manifest(source: str, document_digest: str, document_size: int, entry_count: int,
                   media_type: str = INDEX_MEDIA_TYPE) -> bytes:
    """The artifact's manifest bytes: a pure function of the document (and the source's name)."""
    manifest = {
        "schemaVersion": 2,
        "mediaType": mt.OCI_MANIFEST,
        "artifactType": media_type,
        "config": {"mediaType": mt.OCI_EMPTY, "digest": _digest(EMPTY_CONFIG), "size": len(EMPTY_CONFIG),
                   "data": base64.b64encode(EMPTY_CONFIG).decode()},
        "layers": [{"mediaType": media_type, "digest": document_digest, "size": document_size,
                    "annotations": {mt.ANNOTATION_TITLE: INDEX_FILE}}],
        "annotations": {ANNOTATION_SOURCE: source, ANNOTATION_ENTRIES: str(entry_count)},
    }
    return canonical_json(manifest)


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
    return _digest(remote_index_document(index))


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
        document = index_of(req.progress.unpack())
        if document.digest != req.digest:
            raise application_error(
                ErrorType.INVALID_INPUT,
                f"catalog {req.source}: the index rebuilt from the scan hashes to {document.digest}, "
                f"not the reported {req.digest}; nothing is stored")
        target = self.target(req.source)
        manifest = index_manifest(req.source, document.digest, len(document.content), document.entry_count)
        with self._registry(target) as registry:
            registry.put_blob_bytes(target.repository, document.content, document.digest)
            registry.put_blob_bytes(target.repository, EMPTY_CONFIG, _digest(EMPTY_CONFIG))
            revision = registry.put_manifest(target.repository, CURRENT_TAG, manifest, mt.OCI_MANIFEST)
        activity.logger.info("catalog %s: stored %d entries as %s", req.source, document.entry_count, revision)
        return StoredIndex(revision=revision, document_digest=document.digest, entry_count=document.entry_count,
                           reference=target.reference(revision))

    @activity.defn(name=STORE_REMOTE_ACTIVITY)
    def store_remote_index(self, req: StoreRemoteIndexInput) -> StoredIndex:
        """Push a type Catalog source's RemoteIndex as its artifact (the same layout, the remote index media type
        for the layer); its manifest digest."""
        content = remote_index_document(req.index)
        digest = _digest(content)
        if digest != req.digest:
            raise application_error(ErrorType.INVALID_INPUT,
                                    f"catalog {req.source}: the remote index document hashes to {digest}, not the "
                                    f"reported {req.digest}; nothing is stored")
        target = self.target(req.source)
        entry_count = len(req.index.entries)
        manifest = index_manifest(req.source, digest, len(content), entry_count, REMOTE_INDEX_MEDIA_TYPE)
        with self._registry(target) as registry:
            registry.put_blob_bytes(target.repository, content, digest)
            registry.put_blob_bytes(target.repository, EMPTY_CONFIG, _digest(EMPTY_CONFIG))
            revision = registry.put_manifest(target.repository, CURRENT_TAG, manifest, mt.OCI_MANIFEST)
        activity.logger.info("catalog %s: stored the remote index %s (%d entries) as %s", req.source,
                             req.index.revision, entry_count, revision)
        return StoredIndex(revision=revision, document_digest=digest, entry_count=entry_count,
                           reference=target.reference(revision))


__all__ = ["CATALOG_REPOSITORY_PREFIX", "CURRENT_TAG", "REMOTE_INDEX_MEDIA_TYPE", "STORE_ACTIVITY",
           "STORE_REMOTE_ACTIVITY", "CatalogStoreActivities", "StoreIndexInput", "StoreRemoteIndexInput",
           "StoredIndex", "catalog_repository", "index_manifest", "remote_index_digest", "remote_index_document"]
