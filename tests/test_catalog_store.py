"""catalog.store_index (and catalog.store_remote_index, read back by catalog.resolve) against the real registry
(the `oci_registry` session fixture): a complete index is pushed as one OCI artifact whose manifest digest is the
catalogRevision, the same document gives the same revision, and an incomplete scan or a digest that does not
match stores nothing."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes.client import ApiClient
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devstack.services import OciRegistry
from servingops.activities.catalog import scan_store
from servingops.activities.catalog.index_document import INDEX_MEDIA_TYPE, index_of, parse_index
from servingops.activities.catalog.resolve import CatalogResolveActivities, CatalogResolveInput
from servingops.activities.catalog.store import (
    CURRENT_TAG,
    REMOTE_INDEX_MEDIA_TYPE,
    CatalogStoreActivities,
    StoreIndexInput,
    StoreRemoteIndexInput,
    catalog_repository,
    remote_index_digest,
)
from servingops.activities.catalog.types import CatalogEntry, ScanCursor, ScanState
from servingops.activities.oci.activities import RegistryTarget
from servingops.api_models.refs import ObjectRef
from servingops.clients.catalog_remote import RemoteIndex
from servingops.clients.catalog_remote import index_document as remote_index_body
from servingops.clients.oci.registry_client import ModelRegistry, RegistryError

pytestmark = pytest.mark.integration


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


def test_a_remote_index_is_stored_and_an_entry_resolves_to_its_digest(
        store: CatalogStoreActivities, oci_registry: OciRegistry) -> None:
    """A type Catalog source: its RemoteIndex is the stored document (catalog.store_remote_index), the same
    index gives the same revision, and catalog.resolve reads an entry back from it, pinned by its digest."""
    source = f"peer-{uuid.uuid4().hex[:6]}"
    digest = "sha256:" + "1" * 64
    manifest_type = "application/vnd.oci.image.manifest.v1+json"
    entries = [{"name": "qwen", "version": "v1", "digest": digest, "mediaType": manifest_type,
                "artifactType": "application/vnd.cncf.model.manifest.v1+json", "sizeBytes": 1234,
                "resolved": {"format": "Safetensors"}},
               {"name": "other", "digest": "sha256:" + "2" * 64, "mediaType": manifest_type}]
    body, _ = remote_index_body(entries, "servingops/models")
    index = RemoteIndex.model_validate_json(body)
    env = ActivityEnvironment()
    with pytest.raises(ApplicationError) as mismatch:
        env.run(store.store_remote_index,
                StoreRemoteIndexInput(source=source, index=index, digest="sha256:" + "0" * 64))
    assert mismatch.value.type == "InvalidInput" and "nothing is stored" in mismatch.value.message
    stored = env.run(store.store_remote_index,
                     StoreRemoteIndexInput(source=source, index=index, digest=remote_index_digest(index)))
    assert stored.entry_count == 2 and stored.document_digest == remote_index_digest(index)
    again = env.run(store.store_remote_index,
                    StoreRemoteIndexInput(source=source, index=index, digest=remote_index_digest(index)))
    assert again.revision == stored.revision
    with ModelRegistry(oci_registry.address, insecure=True) as registry:
        manifest = registry.fetch_manifest(catalog_repository(source), stored.revision)
        assert manifest is not None and manifest.json["artifactType"] == REMOTE_INDEX_MEDIA_TYPE
    resolver = CatalogResolveActivities(ApiClient(), "d8-system",
                                        RegistryTarget(address=oci_registry.address, repository="unused",
                                                       insecure=True))
    spec = {"type": "Catalog", "url": "https://peer.example.com", "caSecretName": "ca",
            "credentialsSecretName": "creds"}
    model = ObjectRef(group="ai.deckhouse.io", version="v1alpha1", plural="clustermodels", kind="ClusterModel",
                      name="qwen")
    found = resolver._remote_entry(CatalogResolveInput(model=model, name="qwen"), source, spec, stored.revision)
    assert (found.remote_digest, found.version, found.size_bytes) == (digest, "v1", 1234)
    assert found.media_type == "application/vnd.cncf.model.manifest.v1+json" and found.url is None
    assert (found.remote_url, found.ca_secret_name, found.credentials_secret_name) == (
        "https://peer.example.com", "ca", "creds")
    assert found.resolved == {"format": "Safetensors"}
    with pytest.raises(ApplicationError) as missing:
        resolver._remote_entry(CatalogResolveInput(model=model, name="qwen", version="v2"), source, spec,
                               stored.revision)
    assert missing.value.type == "CatalogEntryNotFound"


# -- scan bodies kept in the registry (scan_store.py) ------------------------------------------------------------


def test_a_scan_body_is_offloaded_under_its_tag_and_read_back_verified(oci_registry: OciRegistry) -> None:
    source = f"hub-{uuid.uuid4().hex[:6]}"
    whole, partial = _state("a", "b"), _state("c", complete=False)
    with ModelRegistry(oci_registry.address, insecure=True) as registry:
        offloaded = scan_store.offload(registry, source, whole.pack())
        assert offloaded.packed == "" and offloaded.packed_digest is not None
        with pytest.raises(ValueError, match="hydrate it first"):
            offloaded.unpack()
        assert scan_store.offload(registry, source, offloaded) == offloaded  # nothing left to push
        tagged = registry.fetch_manifest(catalog_repository(source), scan_store.COMPLETE_TAG)
        assert tagged is not None and tagged.json["artifactType"] == scan_store.SCAN_MEDIA_TYPE
        assert [layer["digest"] for layer in tagged.json["layers"]] == [offloaded.packed_digest]
        back = scan_store.hydrate(registry, source, offloaded)
        assert back is not None and back.packed_digest is None and back.unpack() == whole

        kept = scan_store.offload(registry, source, partial.pack())
        tagged_partial = registry.fetch_manifest(catalog_repository(source), scan_store.PARTIAL_TAG)
        assert tagged_partial is not None
        assert [layer["digest"] for layer in tagged_partial.json["layers"]] == [kept.packed_digest]
        back_partial = scan_store.hydrate(registry, source, kept)
        assert back_partial is not None and back_partial.unpack() == partial

        # A body the registry does not hold (collected, or another registry): None, for the caller to decide.
        gone = offloaded.model_copy(update={"packed_digest": "sha256:" + "0" * 64})
        assert scan_store.hydrate(registry, source, gone) is None
        # A blob over the cap is refused before it is read whole.
        with pytest.raises(RegistryError, match="larger than"):
            registry.read_blob_bytes(catalog_repository(source), offloaded.packed_digest, max_bytes=8)


def test_store_index_reads_an_offloaded_scan_back(store: CatalogStoreActivities, oci_registry: OciRegistry) -> None:
    source = f"hub-{uuid.uuid4().hex[:6]}"
    state = _state("b", "a")
    document = index_of(state)
    with ModelRegistry(oci_registry.address, insecure=True) as registry:
        offloaded = scan_store.offload(registry, source, state.pack())
    env = ActivityEnvironment()
    stored = env.run(store.store_index, StoreIndexInput(source=source, progress=offloaded, digest=document.digest))
    inline = env.run(store.store_index, StoreIndexInput(source=source, progress=state.pack(), digest=document.digest))
    assert stored.revision == inline.revision and stored.entry_count == 2
    gone = offloaded.model_copy(update={"packed_digest": "sha256:" + "0" * 64})
    other = f"hub-{uuid.uuid4().hex[:6]}"
    with pytest.raises(ApplicationError) as refused:
        env.run(store.store_index, StoreIndexInput(source=other, progress=gone, digest=document.digest))
    assert refused.value.type == "InvalidInput" and "gone from the registry" in refused.value.message
    with ModelRegistry(oci_registry.address, insecure=True) as registry:
        assert registry.fetch_manifest(catalog_repository(other), CURRENT_TAG) is None
