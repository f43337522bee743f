"""Where a catalog source's artifacts live in the worker's registry, and the one manifest shape they share.

One repository per source, `<CATALOG_REPOSITORY_PREFIX>/<source name>` (source names are DNS-1123
subdomains, valid repository path components). Every artifact there (the index, store.py; a scan body,
scan_store.py) is an OCI image manifest with an `artifactType`, the empty config and one layer: bytes that
depend only on the layer, so the same content always gets the same manifest digest.
"""

from __future__ import annotations

import base64
import hashlib

from servingops.api_models.canonical import canonical_json
from servingops.clients.oci import media_types as mt
from servingops.clients.oci.registry_client import ModelRegistry

CATALOG_REPOSITORY_PREFIX = "servingops/catalog"
EMPTY_CONFIG = b"{}"
ANNOTATION_SOURCE = "ai.deckhouse.io/catalog-source"


def catalog_repository(source: str) -> str:
    return f"{CATALOG_REPOSITORY_PREFIX}/{source}"


def sha256_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def single_layer_manifest(artifact_type: str, layer_digest: str, layer_size: int, *,
                          layer_annotations: dict[str, str] | None = None,
                          annotations: dict[str, str] | None = None) -> bytes:
    """The canonical manifest bytes of a one-layer artifact of `artifact_type` (the layer's media type too)."""
    layer: dict[str, object] = {"mediaType": artifact_type, "digest": layer_digest, "size": layer_size}
    if layer_annotations:
        layer["annotations"] = layer_annotations
    manifest: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": mt.OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": mt.OCI_EMPTY, "digest": sha256_of(EMPTY_CONFIG), "size": len(EMPTY_CONFIG),
                   "data": base64.b64encode(EMPTY_CONFIG).decode()},
        "layers": [layer],
    }
    if annotations:
        manifest["annotations"] = annotations
    return canonical_json(manifest)


def push_single_layer(registry: ModelRegistry, repository: str, tag: str, content: bytes, digest: str,
                      manifest: bytes) -> str:
    """Push the layer `content` (skipped when present), the empty config, then `manifest` under `tag`: until
    the manifest lands the blobs are referenced by nothing. Returns the manifest digest."""
    registry.put_blob_bytes(repository, content, digest)
    registry.put_blob_bytes(repository, EMPTY_CONFIG, sha256_of(EMPTY_CONFIG))
    return registry.put_manifest(repository, tag, manifest, mt.OCI_MANIFEST)


__all__ = ["ANNOTATION_SOURCE", "CATALOG_REPOSITORY_PREFIX", "EMPTY_CONFIG", "catalog_repository",
           "push_single_layer", "sha256_of", "single_layer_manifest"]
