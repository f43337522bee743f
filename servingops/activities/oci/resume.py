"""The resume point of an upload, split so that no secret reaches Temporal.

A registry's upload URL (the `Location` of a blob upload session) is opaque and the client must
send it back as is. Its query is where registries keep what authorises the session: distribution
keeps a signed `_state`, other registries and storage front-ends put a token or a pre-signed
signature there. Heartbeat details are stored by the Temporal server (and copied into the history
when an attempt times out), so the heartbeat carries only the query-less form:

- `ResumeDetails` (the heartbeat): the upload URL without its query, the committed offset, the
  digest and repository. Nothing in it lets anyone write to the registry.
- `UploadLocations` (on the worker's disk, beside the spool): the full URL, one small file per
  (registry, repository, digest), mode 0600, replaced atomically after every committed chunk.

On resume the full URL is re-derived from the local record and checked against the heartbeat (same
URL path), then the registry is asked how much it holds. `oci.push_file` runs on the host's own
task queue, where the file being pushed lives, so a retry finds the record exactly when it can
find the file; a record that is missing or does not match means a fresh upload, which is always
correct (the registry is asked, never trusted blindly).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import urllib.parse
from pathlib import Path

from pydantic import BaseModel

from servingops.clients.oci.registry_client import UploadResume

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path(tempfile.gettempdir()) / "servingops-oci-uploads"


def without_query(url: str) -> str:
    """The URL with its query and fragment dropped: what may be stored and logged."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


class ResumeDetails(BaseModel):
    """The heartbeat details of `oci.push_file`: where the upload stands, without its secret."""

    upload_path: str | None = None
    """The upload URL without its query (scheme, host and path only)."""
    committed_offset: int = 0
    digest: str | None = None
    repository: str | None = None
    hashed_bytes: int | None = None
    """Set while the file is being hashed (progress only)."""

    @classmethod
    def of(cls, point: UploadResume) -> ResumeDetails:
        return cls(upload_path=without_query(point.upload_location) if point.upload_location else None,
                   committed_offset=point.committed_offset, digest=point.digest, repository=point.repository)


class UploadLocations:
    """The full upload URLs of this host's unfinished uploads, one file each."""

    def __init__(self, root: str | os.PathLike[str] = DEFAULT_STATE_DIR) -> None:
        self.root = Path(root)

    def _path(self, registry: str, repository: str, digest: str) -> Path:
        key = hashlib.sha256(f"{registry}\n{repository}\n{digest}".encode()).hexdigest()
        return self.root / f"{key}.json"

    def save(self, registry: str, repository: str, digest: str, location: str) -> None:
        """Record the upload URL after a committed chunk (atomic: a crash leaves the old or the new)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        target = self._path(registry, repository, digest)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as out:  # mkstemp creates it 0600
                json.dump({"location": location}, out)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def load(self, registry: str, repository: str, digest: str) -> str | None:
        try:
            raw = json.loads(self._path(registry, repository, digest).read_text())
        except (OSError, ValueError):
            return None
        location = raw.get("location") if isinstance(raw, dict) else None
        return location if isinstance(location, str) else None

    def forget(self, registry: str, repository: str, digest: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(registry, repository, digest).unlink()

    def resume(self, registry: str, details: ResumeDetails) -> UploadResume | None:
        """The full resume point for these heartbeat details, when this host still has it."""
        if not (details.upload_path and details.digest and details.repository):
            return None
        location = self.load(registry, details.repository, details.digest)
        if location is None or without_query(location) != details.upload_path:
            log.info("no local upload record for %s matching the heartbeat: starting a new upload", details.digest)
            return None
        return UploadResume(upload_location=location, committed_offset=details.committed_offset,
                            digest=details.digest, repository=details.repository)
