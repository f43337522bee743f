"""Reading an artifact from the registry: the manifest by digest, and blobs streamed from an offset.

The import's client (clients/oci/registry_client.py, oras-py's Registry extended) already carries the
auth handling (token and basic challenges, docker config), the per-request timeouts and the error mapping;
its `pull_blob_to` streams, but always from byte 0. The agent adds a ranged GET on the same client, so a
layer interrupted by a kill continues where the file on disk stops.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import requests

from servingops.clients.oci import media_types as mt
from servingops.clients.oci.modelpack import normalize_digest
from servingops.clients.oci.registry_client import ModelRegistry, RegistryError


@dataclass(frozen=True)
class Layer:
    digest: str
    size: int
    media_type: str
    filepath: str | None
    """The ModelPack `org.cncf.model.filepath` annotation (or the OCI title when it is missing)."""


@dataclass(frozen=True)
class Manifest:
    digest: str
    layers: tuple[Layer, ...]

    @property
    def size(self) -> int:
        return sum(layer.size for layer in self.layers)


def parse_manifest(digest: str, raw: bytes) -> Manifest:
    """The layers of an OCI image manifest (a ModelPack artifact); refuses an index or garbage."""
    try:
        doc: dict[str, Any] = json.loads(raw)
    except ValueError as exc:
        raise RegistryError(f"manifest {digest} is not JSON") from exc
    if doc.get("mediaType") not in (None, mt.OCI_MANIFEST) or "layers" not in doc:
        raise RegistryError(f"manifest {digest} is not an OCI image manifest (mediaType {doc.get('mediaType')!r})",
                            status=400)
    layers = []
    for entry in doc["layers"]:
        annotations = entry.get("annotations") or {}
        layers.append(Layer(
            digest=normalize_digest(entry["digest"]), size=int(entry["size"]), media_type=entry.get("mediaType", ""),
            filepath=annotations.get(mt.ANNOTATION_FILEPATH) or annotations.get(mt.ANNOTATION_TITLE)))
    return Manifest(digest=digest, layers=tuple(layers))


class AgentRegistry(ModelRegistry):
    """The import's registry client plus what a puller needs."""

    def manifest(self, repository: str, digest: str) -> Manifest:
        document = self.fetch_manifest(repository, digest)
        if document is None:
            raise RegistryError(f"manifest {repository}@{digest} not found", status=404)
        if document.digest != digest:
            # Asked by digest, so the bytes must hash to it: anything else is not the artifact named.
            raise RegistryError(f"manifest {repository}@{digest}: content hashes to {document.digest}", status=400)
        return parse_manifest(digest, document.raw)

    def open_blob(self, repository: str, digest: str, offset: int = 0) -> requests.Response:
        """A streaming GET of the blob from `offset`: 206 when the registry honoured the Range, 200 when it
        sent the whole blob (the caller starts over), 416 when offset is at or past the end. The caller
        closes the response."""
        url = f"{self._repo_url(repository)}/blobs/{normalize_digest(digest)}"
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        response = self._request("GET", url, headers=headers, stream=True)
        if response.status_code in (200, 206, 416):
            return response
        error = self._error(response, f"GET blob {digest}")
        response.close()
        raise error
