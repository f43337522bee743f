"""The worker's spool: where fetched model files land, streamed, verified and resumable.

Layout, per model (the model's uid names its directory, so a reused name never sees old files):

    <root>/<uid>/<relative path>                            a complete file (or a header-only sparse one)
    <root>/<uid>/.cache/servingops/partial/<path>.part      bytes received so far (resume point)
    <root>/<uid>/.cache/servingops/done/<path>.json         what we know about a complete file
    <root>/<uid>/.cache/servingops/lock/<path>.lock         one fetch per file at a time

The bookkeeping lives under `.cache/`, a directory `clients.model_files` skips as "tools' bookkeeping",
so the model directory can be inspected as is.

Both providers hand this module an `Opener` (a ranged GET); it does the rest the same way for both:
bounded chunks (memory stays at one chunk whatever the file size), sha256 computed while writing,
heartbeats at most every `HEARTBEAT_INTERVAL`, a retry that continues from the bytes on disk with a
Range request (after re-hashing them from disk), and verification against the digest the provider
declared. The file on disk, not the heartbeat, is the resume point: a retry on the same worker finds
exactly what the previous attempt wrote; a retry on another worker starts from 0, which is still correct.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from servingops.api_models.errors import ErrorType, application_error

log = logging.getLogger(__name__)

MiB = 1024 * 1024
CHUNK_SIZE = 1 * MiB
"""Bytes read from the network and written at a time: the memory one fetch holds."""
HEARTBEAT_INTERVAL = 2.0
"""Seconds between heartbeats; give the activity a heartbeat timeout several times this (30 s is comfortable)."""
HEADER_LIMIT = 64 * MiB
"""The most a header-only fetch reads; a header beyond it (huge embedded vocabularies) means a full fetch."""
SMALL_FILE = 1 * MiB
"""Below this a header-only fetch takes the whole file: one request either way."""
HEADER_WINDOW = 256 * 1024
"""The first request of a header-only fetch: most safetensors headers fit; GGUF headers (with their
tokenizer) take a few doublings."""
LOCK_WAIT = 10.0
"""Seconds to wait for another attempt still writing the same file (a timed-out attempt's thread may
still be running in this worker) before failing this attempt with a retryable error."""
DEFAULT_SPOOL_DIR = Path(tempfile.gettempdir()) / "servingops-spool"
SPOOL_DIR_ENV = "SERVINGOPS_SPOOL_DIR"

_STATE = (".cache", "servingops")
# Kubernetes uids are UUIDs; anything with a separator or a dot could leave the spool root.
_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,127}$")
_MAX_PATH_CHARS = 1024


class HeaderKind(StrEnum):
    SAFETENSORS = "safetensors"
    GGUF = "gguf"


def header_kind(path: str) -> HeaderKind | None:
    """Which header a file has that inspection reads (and a header-only fetch can stop after)."""
    name = path.rsplit("/", 1)[-1].lower()
    if name.endswith(".safetensors"):
        return HeaderKind.SAFETENSORS
    if name.endswith(".gguf"):
        return HeaderKind.GGUF
    return None


# -- what providers hand in ----------------------------------------------------------------------


@dataclass
class RangeBody:
    """An open response body of a ranged GET."""

    offset: int
    """Where in the file the body starts: the requested start (206), or 0 when the server ignored the
    Range header and sent the whole file (200)."""
    chunks: Iterator[bytes]


Opener = Callable[[int, int | None], AbstractContextManager[RangeBody]]
"""`opener(start, last)` GETs bytes start..last (inclusive; None: to the end). Network trouble must come out
as a retryable ApplicationError; a body cut short may also just end (the size check catches it)."""


@dataclass(frozen=True)
class Expected:
    """What the provider said about a file before we fetched it."""

    size: int
    sha256: str | None = None
    git_oid: str | None = None
    """A git blob id (Hugging Face files outside LFS): verifies content when no sha256 is known."""

    @property
    def verifiable(self) -> bool:
        return self.sha256 is not None or self.git_oid is not None


@dataclass(frozen=True)
class FetchResult:
    path: Path
    sha256: str | None
    transferred_bytes: int
    header_only: bool


class Heartbeat:
    """Calls `beat({"offset": n})` at most every `interval` seconds."""

    def __init__(self, beat: Callable[[Any], None], interval: float = HEARTBEAT_INTERVAL) -> None:
        self._beat = beat
        self._interval = interval
        self._last = time.monotonic()

    def __call__(self, offset: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self._interval:
            self._last = now
            self._beat({"offset": offset})


class _Hashes:
    """sha256 always (the digest everything downstream uses); git's blob sha1 when that is what we verify."""

    def __init__(self, expected: Expected) -> None:
        self.sha256 = hashlib.sha256()
        self.git = (
            hashlib.sha1(b"blob %d\0" % expected.size, usedforsecurity=False)
            if expected.sha256 is None and expected.git_oid is not None
            else None
        )

    def update(self, data: bytes | memoryview) -> None:
        self.sha256.update(data)
        if self.git is not None:
            self.git.update(data)

    def mismatch(self, expected: Expected) -> str | None:
        """None when the content is what the provider declared; else what differs."""
        if expected.sha256 is not None and self.sha256.hexdigest() != expected.sha256:
            return f"sha256 {self.sha256.hexdigest()}, the source declared {expected.sha256}"
        if self.git is not None and expected.git_oid is not None and self.git.hexdigest() != expected.git_oid:
            return f"git blob id {self.git.hexdigest()}, the source declared {expected.git_oid}"
        return None


# -- layout --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FilePaths:
    target: Path
    partial: Path
    marker: Path
    lock: Path


def check_relative_path(rel: str) -> str:
    """A provider's file path, accepted only if it stays inside the model directory."""
    parts = rel.split("/")
    if (
        not rel
        or len(rel) > _MAX_PATH_CHARS
        or "\\" in rel
        or "\0" in rel
        or any(part in ("", ".", "..") or len(part.encode()) > 255 for part in parts)
        or parts[0] == _STATE[0]
    ):
        raise application_error(
            ErrorType.INVALID_FETCH_INPUT,
            f"the source file path {rel[:200]!r} is not a relative path inside the model directory",
        )
    return rel


class Spool:
    """The spool directory of one worker."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(os.path.abspath(root or os.environ.get(SPOOL_DIR_ENV) or DEFAULT_SPOOL_DIR))

    def model_dir(self, uid: str) -> Path:
        if not _UID.match(uid):
            raise application_error(ErrorType.INVALID_FETCH_INPUT, f"{uid[:200]!r} is not a Kubernetes uid")
        return self.root / uid

    def _paths(self, uid: str, rel: str) -> _FilePaths:
        base = self.model_dir(uid)
        rel = check_relative_path(rel)
        state = base.joinpath(*_STATE)
        paths = _FilePaths(
            target=base / rel,
            partial=state / "partial" / f"{rel}.part",
            marker=state / "done" / f"{rel}.json",
            lock=state / "lock" / f"{rel}.lock",
        )
        # Every component was checked; a symlink in the spool (we create none) must not lead elsewhere either,
        # so where each folder really is gets checked before anything is created in it.
        real_base = os.path.realpath(base)
        for p in (paths.target, paths.partial, paths.marker, paths.lock):
            if os.path.commonpath([real_base, os.path.realpath(p.parent)]) != real_base:
                raise application_error(ErrorType.INVALID_FETCH_INPUT, f"{rel!r} leads outside the model directory")
            p.parent.mkdir(parents=True, exist_ok=True)
        return paths

    def remove(self, uid: str) -> bool:
        """Delete a model's spool directory; False when there was none."""
        path = self.model_dir(uid)
        if not path.exists():
            return False
        shutil.rmtree(path, ignore_errors=False)
        return True

    def fetch(
        self,
        uid: str,
        rel: str,
        expected: Expected,
        opener: Opener,
        heartbeat: Heartbeat,
        *,
        header_only: bool = False,
    ) -> FetchResult:
        """Make `<uid>/<rel>` hold the file (or, with header_only, its header in a sparse file of full size)."""
        paths = self._paths(uid, rel)
        with _locked(paths.lock, rel):
            kind = header_kind(rel)
            if header_only and kind is not None and expected.size >= SMALL_FILE:
                done = _already_there(paths, expected, heartbeat, header_only=True)
                if done is not None:
                    return done
                result = _fetch_header(paths, rel, expected, opener, heartbeat, kind)
                if result is not None:
                    return result
                log.info("%s: header larger than %d bytes, fetching the whole file", rel, HEADER_LIMIT)
            done = _already_there(paths, expected, heartbeat, header_only=False)
            if done is not None:
                return done
            return _fetch_whole(paths, rel, expected, opener, heartbeat)


@contextlib.contextmanager
def _locked(lock: Path, rel: str) -> Iterator[None]:
    # flock conflicts between two open() calls even inside one process, which is the case that matters:
    # an attempt that timed out may still be writing in this worker's thread pool when the retry starts.
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                    raise application_error(
                        ErrorType.FETCH_IN_PROGRESS,
                        f"{rel}: another attempt is still writing this file on this worker",
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


# -- markers: a complete file is not fetched (nor hashed) again -------------------------------------


def _write_marker(paths: _FilePaths, expected: Expected, sha256: str | None, header_only: bool) -> None:
    st = paths.target.stat()
    data = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "sha256": sha256,
            "header_only": header_only, "expected_sha256": expected.sha256, "git_oid": expected.git_oid}  # fmt: skip
    tmp = paths.marker.with_name(paths.marker.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, paths.marker)


def _read_marker(paths: _FilePaths, expected: Expected) -> dict[str, Any] | None:
    """The marker, if it describes the file on disk as it is now and the file the provider lists."""
    try:
        data = json.loads(paths.marker.read_text())
        st = paths.target.stat()
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    same_file = (data.get("size"), data.get("mtime_ns"), data.get("ino")) == (st.st_size, st.st_mtime_ns, st.st_ino)
    same_source = (data.get("expected_sha256"), data.get("git_oid")) == (expected.sha256, expected.git_oid)
    return data if same_file and same_source and st.st_size == expected.size else None


def _already_there(
    paths: _FilePaths, expected: Expected, heartbeat: Heartbeat, *, header_only: bool
) -> FetchResult | None:
    """The file when the spool already has what is asked (a whole file also answers a header-only ask)."""
    if not paths.target.is_file():
        return None
    marker = _read_marker(paths, expected)
    if marker is not None:
        if not marker["header_only"]:
            return FetchResult(paths.target, marker["sha256"], 0, False)
        if header_only:
            return FetchResult(paths.target, expected.sha256, 0, True)
    elif paths.target.stat().st_size == expected.size and expected.verifiable:
        # A complete file without a marker (the worker died between rename and marker): check it from disk.
        hashes = _Hashes(expected)
        _hash_prefix(paths.target, expected.size, hashes, heartbeat)
        if hashes.mismatch(expected) is None:
            _write_marker(paths, expected, hashes.sha256.hexdigest(), header_only=False)
            return FetchResult(paths.target, hashes.sha256.hexdigest(), 0, False)
    paths.target.unlink()
    paths.marker.unlink(missing_ok=True)
    return None


# -- whole files -----------------------------------------------------------------------------------


def _hash_prefix(path: Path, length: int, hashes: _Hashes, heartbeat: Heartbeat) -> None:
    done = 0
    with path.open("rb") as fh:
        while done < length:
            block = fh.read(min(CHUNK_SIZE, length - done))
            if not block:
                raise OSError(f"{path} ended at byte {done}, expected {length}")
            hashes.update(block)
            done += len(block)
            heartbeat(done)


def _fetch_whole(paths: _FilePaths, rel: str, expected: Expected, opener: Opener, heartbeat: Heartbeat) -> FetchResult:
    size = expected.size
    transferred = 0
    allow_resume = expected.verifiable
    while True:
        have = paths.partial.stat().st_size if paths.partial.exists() else 0
        if have > size or (have and not allow_resume):
            # Bytes we cannot vouch for: without a digest to check them against, a resumed file could be
            # silently wrong, so unverifiable files always start over (they are small: Hub files outside LFS).
            paths.partial.unlink()
            have = 0
        resumed_from = have
        hashes = _Hashes(expected)
        if have:
            log.info("%s: resuming at byte %d of %d", rel, have, size)
            _hash_prefix(paths.partial, have, hashes, heartbeat)
        with paths.partial.open("r+b" if have else "wb") as out:
            out.seek(have)
            if have < size:
                with opener(have, None) as body:
                    if body.offset != have:
                        if body.offset != 0:
                            raise application_error(
                                ErrorType.SOURCE_UNAVAILABLE,
                                f"{rel}: asked for bytes from {have}, the server sent bytes from {body.offset}",
                            )
                        # The server ignored the Range header and sends everything: start over with it.
                        out.seek(0)
                        out.truncate()
                        hashes, have, resumed_from = _Hashes(expected), 0, 0
                    for chunk in body.chunks:
                        if have + len(chunk) > size:
                            out.close()
                            paths.partial.unlink(missing_ok=True)
                            raise application_error(
                                ErrorType.SOURCE_SIZE_MISMATCH,
                                f"{rel}: the source sends more than the {size} bytes it listed for this file",
                            )
                        out.write(chunk)
                        hashes.update(chunk)
                        have += len(chunk)
                        transferred += len(chunk)
                        heartbeat(have)
            out.truncate(have)
        if have < size:
            # The partial file stays: the retry continues from here.
            raise application_error(ErrorType.SOURCE_TRUNCATED, f"{rel}: the download ended at byte {have} of {size}")
        mismatch = hashes.mismatch(expected)
        if mismatch is None:
            break
        paths.partial.unlink(missing_ok=True)
        if resumed_from == 0:
            raise application_error(ErrorType.SOURCE_CHECKSUM_MISMATCH, f"{rel}: the downloaded content has {mismatch}")
        # The bytes a previous attempt left may be what is wrong (a crash mid-write): one fresh try.
        log.warning("%s: content resumed from byte %d has %s; downloading it again from 0", rel, resumed_from,
                    mismatch)
        allow_resume = False
    os.replace(paths.partial, paths.target)
    digest = hashes.sha256.hexdigest()
    _write_marker(paths, expected, digest, header_only=False)
    heartbeat(size, force=True)
    return FetchResult(paths.target, digest, transferred, False)


# -- header-only -----------------------------------------------------------------------------------


class _TooLarge(Exception):
    """The header runs past HEADER_LIMIT."""


class _NeedMore(Exception):
    """More leading bytes are needed, at least up to `until`."""

    def __init__(self, until: int) -> None:
        super().__init__(until)
        self.until = until


def _read_range(opener: Opener, start: int, stop: int, rel: str) -> tuple[bytes, int]:
    """Bytes [start, stop) of the file and how many bytes were received to get them."""
    wanted = stop - start
    out = bytearray()
    received = 0
    with opener(start, stop - 1) as body:
        if body.offset not in (start, 0):
            raise application_error(
                ErrorType.SOURCE_UNAVAILABLE,
                f"{rel}: asked for bytes from {start}, the server sent bytes from {body.offset}",
            )
        skip = start - body.offset  # the whole file came (Range ignored): drop what precedes start
        for chunk in body.chunks:
            received += len(chunk)
            if skip:
                dropped = min(skip, len(chunk))
                chunk = chunk[dropped:]
                skip -= dropped
            out += chunk[: wanted - len(out)]
            if len(out) >= wanted:
                break
    if len(out) < wanted:
        raise application_error(ErrorType.SOURCE_TRUNCATED, f"{rel}: the download ended at byte {start + len(out)}")
    return bytes(out), received


def _fetch_header(
    paths: _FilePaths, rel: str, expected: Expected, opener: Opener, heartbeat: Heartbeat, kind: HeaderKind
) -> FetchResult | None:
    """Fetch the leading bytes inspection reads; None when they exceed HEADER_LIMIT (fetch it all instead)."""
    size = expected.size
    buf = b""
    transferred = 0
    want = min(size, HEADER_WINDOW)
    while True:
        if want > len(buf):
            more, received = _read_range(opener, len(buf), want, rel)
            buf += more
            transferred += received
            heartbeat(len(buf))
        try:
            end = _header_end(kind, buf, size)
            break
        except _TooLarge:
            return None
        except _NeedMore as need:
            # Ask for what the header says it needs, and at least double: few requests for long headers.
            want = min(size, max(need.until, 2 * len(buf)))
            if want > HEADER_LIMIT:
                return None
    paths.partial.unlink(missing_ok=True)
    with paths.partial.open("wb") as out:
        out.write(buf[:end])
        # Setting the size past the written bytes leaves a hole: full size for the inspector's size checks,
        # a few blocks on disk.
        out.truncate(size)
    os.replace(paths.partial, paths.target)
    _write_marker(paths, expected, None, header_only=True)
    return FetchResult(paths.target, expected.sha256, transferred, True)


def _header_end(kind: HeaderKind, buf: bytes, size: int) -> int:
    """How many leading bytes hold the header; raises _NeedMore when `buf` is too short to tell yet.

    A header that is invalid or claims more than the file holds ends where it stops making sense: the bytes
    up to there are what inspection needs to reject it with the right message.
    """
    if kind == HeaderKind.SAFETENSORS:
        if len(buf) < 8:
            if len(buf) < size:
                raise _NeedMore(8)
            return len(buf)
        end: int = 8 + struct.unpack("<Q", buf[:8])[0]
        if end > size:
            return min(len(buf), size)
        if end > HEADER_LIMIT:
            raise _TooLarge
        if end > len(buf):
            raise _NeedMore(end)
        return end
    return _gguf_end(buf, size)


# GGUF value types (see clients.model_files.gguf) and their sizes.
_GGUF_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_STRING, _GGUF_ARRAY, _GGUF_UINT32 = 8, 9, 4
# Sanity bounds (the inspector's, or looser): past them the header is invalid and we stop walking.
_GGUF_MAX_KV = 65_536
_GGUF_MAX_TENSORS = 200_000
_GGUF_MAX_ARRAY = 1 << 22
_GGUF_MAX_DIMS = 16


class _Stop(Exception):
    """The header is invalid here; inspection will say how."""


class _GGUFWalker:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def skip(self, n: int) -> None:
        if self.pos + n > HEADER_LIMIT:
            raise _TooLarge
        if self.pos + n > len(self.buf):
            raise _NeedMore(self.pos + n)
        self.pos += n

    def u32(self) -> int:
        start = self.pos
        self.skip(4)
        value: int = struct.unpack_from("<I", self.buf, start)[0]
        return value

    def u64(self) -> int:
        start = self.pos
        self.skip(8)
        value: int = struct.unpack_from("<Q", self.buf, start)[0]
        return value

    def string(self) -> None:
        self.skip(self.u64())

    def value(self, vtype: int) -> None:
        if vtype in _GGUF_SCALAR_SIZES:
            self.skip(_GGUF_SCALAR_SIZES[vtype])
        elif vtype == _GGUF_STRING:
            self.string()
        elif vtype == _GGUF_ARRAY:
            etype, count = self.u32(), self.u64()
            if count > _GGUF_MAX_ARRAY:
                raise _Stop
            if etype in _GGUF_SCALAR_SIZES:
                self.skip(count * _GGUF_SCALAR_SIZES[etype])
            elif etype == _GGUF_STRING:
                for _ in range(count):
                    self.string()
            else:
                raise _Stop  # nested arrays or unknown types: ggml refuses the file
        else:
            raise _Stop


def gguf_header_end(buf: bytes, size: int) -> int | None:
    """The end of a GGUF file's metadata and tensor infos, padded to the data alignment, from its first
    bytes `buf`; None when `buf` is too short to tell. Raises _TooLarge past HEADER_LIMIT."""
    try:
        return _gguf_end(buf, size)
    except _NeedMore:
        return None


def _gguf_end(buf: bytes, size: int) -> int:
    w = _GGUFWalker(buf)
    alignment = 32
    try:
        if len(buf) < 4:
            raise _NeedMore(4)
        if buf[:4] != b"GGUF":
            return 4
        w.skip(4)
        if w.u32() not in (2, 3):
            return w.pos
        n_tensors, n_kv = w.u64(), w.u64()
        if n_tensors > _GGUF_MAX_TENSORS or n_kv > _GGUF_MAX_KV:
            return w.pos
        for _ in range(n_kv):
            key_start = w.pos + 8
            w.string()
            key = buf[key_start : w.pos]
            vtype = w.u32()
            if key == b"general.alignment" and vtype == _GGUF_UINT32:
                alignment = w.u32()
            else:
                w.value(vtype)
        for _ in range(n_tensors):
            w.string()
            n_dims = w.u32()
            if n_dims > _GGUF_MAX_DIMS:
                return w.pos
            w.skip(8 * n_dims + 4 + 8)
    except _NeedMore as more:
        if more.until > size:
            return min(len(buf), size)  # the header claims more than the file has: truncated
        raise
    except _Stop:
        return w.pos
    end = w.pos
    if alignment > 0:
        end += -end % alignment
    return min(end, size)
