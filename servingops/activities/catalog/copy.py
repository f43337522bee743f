"""Copy one artifact of a remote catalog into the local registry, by digest, with a grant's pull token.

`copy_artifact(remote, grant, digest, local_registry, repository)`:

1. GET the manifest from the remote endpoint's `/v2/<grant.repository>/manifests/<digest>` (Bearer: the grant
   token), read at most 4 MiB, and check its bytes hash to `digest` (`ArtifactDigestMismatch` otherwise). It
   must be one OCI image manifest (or Docker schema 2): config and layers (`CatalogArtifactUnsupported`).
2. For every blob it references (config first, then the layers): HEAD it in the local repository; present with
   the descriptor's size: skipped. Otherwise stream it from `/v2/<repo>/blobs/<digest>` into a spool file while
   hashing, reading no more than the descriptor's size plus one byte; wrong size or hash:
   `ArtifactDigestMismatch`, the spool file is removed and nothing of that blob is sent. Then upload it
   (the local registry checks the digest once more on its final PUT).
3. Only once every blob is verified and present, PUT the manifest's exact bytes (under `tag` if given, else by
   digest). A mismatch anywhere leaves at most verified, content-addressed blobs that no manifest
   references (the registry's garbage collector removes them): nothing partial is tagged.

Retry-safe: a later attempt skips the blobs an earlier one committed (HEAD), and `CopyProgress` (heartbeated
after each blob) carries the counts so the result still says what was copied in total. A 401 on a pull (the
grant expired mid-copy) is answered once by `renew()` when the caller gives one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from servingops.clients.catalog_remote import (
    DIGEST,
    DIGEST_PATTERN,
    MAX_MANIFEST_BYTES,
    ArtifactDigestMismatch,
    CatalogArtifactNotFound,
    CatalogArtifactUnsupported,
    CatalogEndpointError,
    CatalogGrantRefused,
    CatalogResponseMalformed,
    Grant,
    RemoteCatalog,
    raise_for_server,
    transport_error,
)
from servingops.clients.oci import media_types as mt
from servingops.clients.oci.registry_client import ModelRegistry

READ_BLOCK = 1 << 20
"""Bytes read from the remote and written to the spool per step: a blob is never held whole in memory."""
RENEW_MARGIN = 30.0
"""Seconds: a grant closer than this to its expiry is renewed before the next pull (when `renew` is given)."""
MANIFEST_MEDIA_TYPES = (mt.OCI_MANIFEST, mt.DOCKER_MANIFEST_V2)
"""What a catalog artifact may be: one image manifest (config + layers)."""


class CopyProgress(BaseModel):
    """Where a copy stands: heartbeated after each blob, passed back to a retried attempt."""

    digest: str
    done: list[str] = []
    """Blobs this copy (any attempt) transferred and committed to the local registry."""
    bytes_copied: int = 0
    blobs_copied: int = 0
    blobs_skipped: int = 0
    current: str | None = None
    """The blob being transferred now, and its bytes so far (for the Temporal UI)."""
    current_bytes: int = 0


class CopyResult(BaseModel):
    digest: str
    """The manifest digest, identical on both sides."""
    repository: str
    reference: str
    """`<local registry>/<repository>@<digest>`."""
    tag: str | None = None
    media_type: str
    artifact_type: str | None = None
    size_bytes: int = Field(ge=0)
    """Manifest, config and layers: the artifact's size."""
    bytes_copied: int = Field(ge=0)
    """Blob bytes transferred (by every attempt of this copy)."""
    blobs_copied: int = Field(ge=0)
    blobs_skipped: int = Field(ge=0)
    """Blobs the local registry already held."""


class _Descriptor(BaseModel):
    media_type: str = Field(alias="mediaType", default="")
    digest: str = Field(pattern=DIGEST_PATTERN)
    size: int = Field(ge=0)


def _manifest_blobs(raw: bytes, content_type: str, what: str) -> tuple[str, str | None, list[_Descriptor]]:
    """(media type, artifactType, blobs: config then layers, without duplicates)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise CatalogResponseMalformed(f"{what}: the manifest is not JSON") from None
    if not isinstance(body, dict):
        raise CatalogResponseMalformed(f"{what}: the manifest is not a JSON object")
    media_type = body.get("mediaType") or content_type
    if media_type not in MANIFEST_MEDIA_TYPES or body.get("schemaVersion") != 2:
        raise CatalogArtifactUnsupported(f"{what}: a {str(media_type)[:100]!r} is not an image manifest; a catalog "
                                         "artifact is one OCI image manifest")
    config, layers = body.get("config"), body.get("layers")
    if not isinstance(config, dict) or not isinstance(layers, list):
        raise CatalogArtifactUnsupported(f"{what}: the manifest has no config or no layers")
    try:
        descriptors = [_Descriptor.model_validate(d) for d in [config, *layers]]
    except ValueError:
        raise CatalogArtifactUnsupported(f"{what}: a descriptor is not a sha256 digest with a size") from None
    unique: dict[str, _Descriptor] = {}
    for d in descriptors:
        seen = unique.setdefault(d.digest, d)
        if seen.size != d.size:
            raise CatalogArtifactUnsupported(f"{what}: blob {d.digest} is listed with two sizes")
    artifact_type = body.get("artifactType")
    return str(media_type), artifact_type if isinstance(artifact_type, str) else None, list(unique.values())


class _Puller:
    """GETs of one grant's artifacts from the remote's `/v2/`, renewing the grant once on a 401."""

    def __init__(self, remote: RemoteCatalog, grant: Grant, renew: Callable[[], Grant] | None,
                 renew_margin: float) -> None:
        self.remote, self.grant, self.renew, self.renew_margin = remote, grant, renew, renew_margin

    def _headers(self, accept: str | None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.grant.token}", "User-Agent": "servingops-catalog"}
        if accept:
            headers["Accept"] = accept
        return headers

    @contextlib.contextmanager
    def get(self, kind: str, digest: str, accept: str | None = None) -> Any:
        if self.renew is not None and self.grant.expired(margin=self.renew_margin):
            self.grant = self.renew()
        path = f"/v2/{self.grant.repository}/{kind}/{digest}"
        what = f"GET {self.remote.base_url}{path}"
        for attempt in (0, 1):
            with self.remote.request("GET", path, headers=self._headers(accept)) as response:
                status = response.status
                if status == 401 and attempt == 0 and self.renew is not None:
                    self.grant = self.renew()
                    continue
                raise_for_server(status, what)
                if status in (401, 403):
                    raise CatalogGrantRefused(f"{what}: the pull was refused with the grant (HTTP {status}"
                                              f"{', expired' if self.grant.expired() else ''})")
                if status == 404:
                    raise CatalogArtifactNotFound(f"{what}: the remote registry does not have it (HTTP 404)")
                if status != 200:
                    raise CatalogEndpointError(f"{what}: HTTP {status}")
                yield response, what
                return
        raise CatalogGrantRefused(f"{what}: the pull was refused with a renewed grant (HTTP 401)")  # pragma: no cover


def copy_artifact(
    remote: RemoteCatalog,
    grant: Grant,
    digest: str,
    local_registry: ModelRegistry | str,
    repository: str,
    *,
    tag: str | None = None,
    spool_dir: str | os.PathLike[str] | None = None,
    progress: CopyProgress | None = None,
    on_progress: Callable[[CopyProgress], None] | None = None,
    progress_interval: float = 2.0,
    renew: Callable[[], Grant] | None = None,
    renew_margin: float = RENEW_MARGIN,
) -> CopyResult:
    """Copy the artifact `digest` of the remote catalog into `repository` of the local registry (a
    ModelRegistry, or a plain-http `host:port`).

    `on_progress` runs after each blob (and every `progress_interval` seconds inside a long one); an exception
    it raises aborts the copy. `renew()` gives a fresh grant for `digest`: called before a pull when the grant
    is within `renew_margin` seconds of its expiry, and once after a pull answered 401.

    Raises CatalogGrantRefused, CatalogArtifactNotFound, CatalogArtifactUnsupported,
    ArtifactDigestMismatch, CatalogResponseMalformed, the transport errors of RemoteCatalog, and the local
    registry's RegistryError."""
    if not DIGEST.match(digest):
        raise CatalogGrantRefused(f"{digest[:80]!r} is not a sha256 digest")
    if digest not in grant.digests:
        raise CatalogGrantRefused(f"the grant does not cover {digest}")
    own = isinstance(local_registry, str)
    registry = ModelRegistry(local_registry, insecure=True) if isinstance(local_registry, str) else local_registry
    state = progress.model_copy(deep=True) if progress is not None and progress.digest == digest \
        else CopyProgress(digest=digest)
    puller = _Puller(remote, grant, renew, renew_margin)
    try:
        raw, content_type = _pull_manifest(puller, digest)
        media_type, artifact_type, blobs = _manifest_blobs(raw, content_type, f"manifest {digest}")
        for blob in blobs:
            present = registry.blob_size(repository, blob.digest)
            if present is not None and present in (blob.size, -1):
                if blob.digest not in state.done:
                    state.blobs_skipped += 1
                _report(on_progress, state)
                continue
            _copy_blob(puller, blob, registry, repository, spool_dir, state, on_progress, progress_interval)
            if blob.digest not in state.done:
                state.done.append(blob.digest)
                state.blobs_copied += 1
                state.bytes_copied += blob.size
            state.current, state.current_bytes = None, 0
            _report(on_progress, state)
        stored = registry.put_manifest(repository, tag or digest, raw, media_type)
        if stored != digest:  # pragma: no cover - put_manifest hashes the bytes we verified
            raise ArtifactDigestMismatch(f"the local registry stored manifest {stored}, not {digest}")
    finally:
        if own:
            registry.close()
    return CopyResult(
        digest=digest, repository=repository, reference=f"{registry.hostname}/{repository}@{digest}", tag=tag,
        media_type=media_type, artifact_type=artifact_type, size_bytes=len(raw) + sum(b.size for b in blobs),
        bytes_copied=state.bytes_copied, blobs_copied=state.blobs_copied, blobs_skipped=state.blobs_skipped)


def _report(on_progress: Callable[[CopyProgress], None] | None, state: CopyProgress) -> None:
    if on_progress is not None:
        on_progress(state.model_copy(deep=True))


def _pull_manifest(puller: _Puller, digest: str) -> tuple[bytes, str]:
    accept = ", ".join(MANIFEST_MEDIA_TYPES)
    with puller.get("manifests", digest, accept) as (response, what):
        content_type = (response.getheader("Content-Type") or "").split(";")[0].strip()
        raw = puller.remote.read_body(response, MAX_MANIFEST_BYTES, what)
    actual = "sha256:" + hashlib.sha256(raw).hexdigest()
    if actual != digest:
        raise ArtifactDigestMismatch(f"manifest {digest}: the remote served bytes that hash to {actual}")
    return raw, content_type


def _copy_blob(puller: _Puller, blob: _Descriptor, registry: ModelRegistry, repository: str,
               spool_dir: str | os.PathLike[str] | None, state: CopyProgress,
               on_progress: Callable[[CopyProgress], None] | None, interval: float) -> None:
    fd, spool = tempfile.mkstemp(prefix="catalog-blob-", suffix=".part", dir=spool_dir)
    try:
        with os.fdopen(fd, "wb") as out:
            _download(puller, blob, out, state, on_progress, interval)
        registry.upload_blob_streaming(repository, spool, blob.digest, blob.size)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(spool)


def _download(puller: _Puller, blob: _Descriptor, out: Any, state: CopyProgress,
              on_progress: Callable[[CopyProgress], None] | None, interval: float) -> None:
    hasher = hashlib.sha256()
    received = 0
    last = time.monotonic()
    state.current, state.current_bytes = blob.digest, 0
    with puller.get("blobs", blob.digest) as (response, what):
        while True:
            try:
                piece = response.read(min(READ_BLOCK, blob.size + 1 - received))
            except Exception as exc:
                raise transport_error(what, exc) from None
            if not piece:
                break
            received += len(piece)
            if received > blob.size:
                raise ArtifactDigestMismatch(f"blob {blob.digest}: the remote served more than its {blob.size} "
                                             "bytes")
            hasher.update(piece)
            out.write(piece)
            if on_progress is not None and time.monotonic() - last >= interval:
                last = time.monotonic()
                state.current_bytes = received
                _report(on_progress, state)
    if received != blob.size:
        raise ArtifactDigestMismatch(f"blob {blob.digest}: the remote served {received} of its {blob.size} bytes")
    actual = "sha256:" + hasher.hexdigest()
    if actual != blob.digest:
        raise ArtifactDigestMismatch(f"blob {blob.digest}: the remote served bytes that hash to {actual}")
