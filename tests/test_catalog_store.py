"""catalog.store_index against the real registry (the `oci_registry` session fixture): a complete index is
pushed as one OCI artifact whose manifest digest is the catalogRevision, the same document gives the same
revision, and an incomplete scan or a digest that does not match stores nothing."""

from __future__ import annotations

import json
import uuid

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devstack.services import OciRegistry
from servingops.activities.catalog.index_document import INDEX_MEDIA_TYPE, index_of, parse_index
from servingops.activities.catalog.store import (
    CURRENT_TAG,
    CatalogStoreActivities,
    StoreIndexInput,
    catalog_repository,
)
from servingops.activities.catalog.types import CatalogEntry, ScanCursor, ScanState
from servingops.activities.oci.activities import RegistryTarget
from servingops.activities.oci.registry_client import ModelRegistry


def _state(*names: str, complete: bool = True) -> ScanState:
    found = {f"org/{n}": CatalogEntry(name=f"org/{n}", revision="b" * 40, tags=("llm",)) for n in names}
    cursor = None if complete else ScanCursor(phase="organizations", offset=len(names))
    return ScanState(scope_digest="d" * 64, cursor=cursor, entries=found)


@pytest.fixture
def store(oci_registry: OciRegistry) -> CatalogStoreActivities:
    return CatalogStoreActivities(RegistryTarget(address=oci_registry.address, repository="unused", insecure=True))


def test_a_complete_index_is_one_artifact_whose_manifest_digest_is_the_revision(
        store: CatalogStoreActivities, oci_registry: OciRegistry) -> None:
    source = f"hub-{uuid.uuid4().hex[:6]}"
    state = _state("b", "a")
    document = index_of(state)
    env = ActivityEnvironment()
    stored = env.run(store.store_index, StoreIndexInput(source=source, progress=state.pack(), digest=document.digest))
    assert stored.document_digest == document.digest and stored.entry_count == 2
    assert stored.reference == f"{oci_registry.address}/{catalog_repository(source)}@{stored.revision}"
    with ModelRegistry(oci_registry.address, insecure=True) as registry:
        manifest = registry.fetch_manifest(catalog_repository(source), stored.revision)
        assert manifest is not None and manifest.digest == stored.revision
        tagged = registry.fetch_manifest(catalog_repository(source), CURRENT_TAG)
        assert tagged is not None and tagged.digest == stored.revision
        body = manifest.json
        assert body["artifactType"] == INDEX_MEDIA_TYPE
        assert [layer["digest"] for layer in body["layers"]] == [document.digest]
        response = registry._request("GET", f"{registry._repo_url(catalog_repository(source))}/blobs/{document.digest}")
        assert [e.name for e in parse_index(response.content)] == ["org/a", "org/b"]
        assert json.loads(response.content)["entries"][0]["revision"] == "b" * 40
    # The same document again: the same revision (nothing new in the registry).
    again = env.run(store.store_index, StoreIndexInput(source=source, progress=state.pack(), digest=document.digest))
    assert again.revision == stored.revision


def test_nothing_partial_is_stored(store: CatalogStoreActivities, oci_registry: OciRegistry) -> None:
    source = f"hub-{uuid.uuid4().hex[:6]}"
    partial = _state("a", complete=False)
    env = ActivityEnvironment()
    with pytest.raises(ApplicationError) as refused:
        env.run(store.store_index, StoreIndexInput(source=source, progress=partial.pack(), digest="sha256:" + "0" * 64))
    assert refused.value.type == "InvalidInput" and "not complete" in refused.value.message
    whole = _state("a")
    with pytest.raises(ApplicationError) as mismatch:
        env.run(store.store_index, StoreIndexInput(source=source, progress=whole.pack(), digest="sha256:" + "0" * 64))
    assert "nothing is stored" in mismatch.value.message
    with ModelRegistry(oci_registry.address, insecure=True) as registry:
        assert registry.fetch_manifest(catalog_repository(source), CURRENT_TAG) is None
