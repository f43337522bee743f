"""The agent's copies on its node's disk, and what it remembers about them.

- A copy lives in `<root>/<storage.path>`; each layer is a file at its `org.cncf.model.filepath`.
- `<copy>/.servingops-artifact.json` (the marker) names the manifest digest and every file with its
  digest and size; it is written last, atomically, so its presence means a complete copy.
- `<copy>/.servingops-partial/<layer hex>` holds a layer being downloaded; it is renamed into place once
  its digest is verified, so a file at its final path is always whole.
- `<state dir>/records/<id>.json` names, per model, the copy the agent made on this node (its path): how
  a restarted agent finds and removes the copy of a model deleted while it was down.
- A digest cache keyed by (device, inode, mtime, size) spares re-hashing unchanged files on periodic
  verification. It lives in memory only: every start re-hashes every copy once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from servingops.api_models.ome.model_keys import ModelKey, ModelKind
from servingops.clients.oci.modelpack import normalize_filepath

log = logging.getLogger("servingops.agent.store")

MARKER = ".servingops-artifact.json"
PARTIAL_DIR = ".servingops-partial"
READ_BLOCK = 1024 * 1024


@dataclass(frozen=True)
class FileEntry:
    path: str
    digest: str
    size: int


@dataclass(frozen=True)
class Marker:
    manifest_digest: str
    artifact: str
    files: tuple[FileEntry, ...]

    def to_json(self) -> str:
        return json.dumps({"manifestDigest": self.manifest_digest, "artifact": self.artifact,
                           "files": [asdict(f) for f in self.files]}, sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Marker:
        doc = json.loads(text)
        return cls(doc["manifestDigest"], doc.get("artifact", ""),
                   tuple(FileEntry(f["path"], f["digest"], int(f["size"])) for f in doc["files"]))


@dataclass
class Record:
    """What the agent put on this node for one model."""

    kind: str
    namespace: str
    name: str
    path: str
    """Relative to the node root."""
    digest: str = ""
    """Manifest digest of the complete copy ("" while none is complete, or for local:// models)."""
    files: list[str] = field(default_factory=list)
    """Every file path the agent may have written under the copy (the union over the digests it pulled
    there): removal deletes these and nothing else, so a path shared with foreign files loses only ours."""

    @property
    def key(self) -> ModelKey:
        return ModelKey(ModelKind(self.kind), self.namespace, self.name)


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def sha256_file(path: Path, stop: Callable[[], bool] | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fd:
        while data := fd.read(READ_BLOCK):
            digest.update(data)
            if stop is not None and stop():
                raise InterruptedError(f"hashing {path} stopped")
    return "sha256:" + digest.hexdigest()


@dataclass
class DigestCache:
    """sha256 of files by (device, inode, mtime_ns, size): a changed file misses and is hashed again."""

    _entries: dict[tuple[int, int, int, int], str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    hashed_bytes: int = 0

    def digest(self, path: Path, stop: Callable[[], bool] | None = None) -> str | None:
        """The file's digest, None when it does not exist (or is not a regular file)."""
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        if not path.is_file():
            return None
        key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            known = self._entries.get(key)
        if known is not None:
            return known
        value = sha256_file(path, stop)
        with self._lock:
            self.hashed_bytes += st.st_size
            self._entries[key] = value
        return value

    def remember(self, path: Path, digest: str) -> None:
        """A file we just wrote and verified while writing it."""
        st = path.stat()
        with self._lock:
            self._entries[(st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)] = digest

    def forget_all(self) -> None:
        with self._lock:
            self._entries.clear()


class Store:
    def __init__(self, root: Path, state_dir: Path) -> None:
        self.root = root
        self.records_dir = state_dir / "records"
        self.records_dir.mkdir(parents=True, exist_ok=True)
        self.cache = DigestCache()
        self._lock = threading.Lock()

    # -- paths ---------------------------------------------------------------------------------

    def copy_dir(self, relative: str) -> Path:
        return self.root / relative

    @staticmethod
    def file_path(copy: Path, filepath: str) -> Path:
        """Where a layer goes; `normalize_filepath` refuses absolute paths and `..` (an artifact must not
        write outside its copy)."""
        return copy / normalize_filepath(filepath)

    # -- records -------------------------------------------------------------------------------

    def _record_path(self, key: ModelKey) -> Path:
        ident = hashlib.sha256(f"{key.kind}/{key.namespace}/{key.name}".encode()).hexdigest()[:32]
        return self.records_dir / f"{ident}.json"

    def record(self, key: ModelKey) -> Record | None:
        try:
            return Record(**json.loads(self._record_path(key).read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError):
            log.warning("unreadable record for %s: ignored", key)
            return None

    def save_record(self, record: Record) -> None:
        atomic_write(self._record_path(record.key), json.dumps(asdict(record), sort_keys=True))

    def drop_record(self, key: ModelKey) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._record_path(key).unlink()

    def records(self) -> list[Record]:
        found = []
        for path in sorted(self.records_dir.glob("*.json")):
            try:
                found.append(Record(**json.loads(path.read_text())))
            except (ValueError, TypeError, FileNotFoundError):
                log.warning("unreadable record %s: ignored", path)
        return found

    # -- markers -------------------------------------------------------------------------------

    def marker(self, copy: Path) -> Marker | None:
        try:
            return Marker.from_json((copy / MARKER).read_text())
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable marker in %s: treated as incomplete", copy)
            return None

    def write_marker(self, copy: Path, marker: Marker) -> None:
        atomic_write(copy / MARKER, marker.to_json())

    def drop_marker(self, copy: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            (copy / MARKER).unlink()

    def verify(self, copy: Path, marker: Marker, stop: Callable[[], bool] | None = None) -> list[FileEntry]:
        """The files of a complete copy that are missing, of the wrong size or hash to another digest."""
        bad = []
        for entry in marker.files:
            path = self.file_path(copy, entry.path)
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                bad.append(entry)
                continue
            if size != entry.size or self.cache.digest(path, stop) != entry.digest:
                bad.append(entry)
        return bad

    # -- sharing (downloadPolicy: ReuseIfExists) -------------------------------------------------

    def find_layer(self, digest: str, exclude: Path) -> Path | None:
        """A verified file with this digest in another complete copy on this node."""
        for record in self.records():
            if not record.digest:
                continue
            copy = self.copy_dir(record.path)
            if copy == exclude:
                continue
            marker = self.marker(copy)
            if marker is None:
                continue
            for entry in marker.files:
                if entry.digest == digest:
                    path = self.file_path(copy, entry.path)
                    if self.cache.digest(path) == digest:
                        return path
        return None

    # -- removal -------------------------------------------------------------------------------

    def remove_files(self, copy: Path, files: list[str]) -> None:
        """Delete the named files of a copy, its marker first (a crash half-way leaves an incomplete copy,
        never a false complete one), its partial downloads, then the directories left empty."""
        self.drop_marker(copy)
        for rel in files:
            with contextlib.suppress(FileNotFoundError, ValueError, IsADirectoryError):
                self.file_path(copy, rel).unlink()
        shutil.rmtree(copy / PARTIAL_DIR, ignore_errors=True)
        self._prune(copy)

    @staticmethod
    def _prune(copy: Path) -> None:
        if not copy.is_dir():
            return
        for dirpath, _dirs, _files in sorted(os.walk(copy), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)  # only succeeds when empty
