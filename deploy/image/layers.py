"""Layer blobs whose bytes depend only on their content: sorted entries, one owner, one mtime, gzip
without a name or a timestamp."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class Layer:
    path: Path
    """The gzip-compressed tar (the blob)."""
    digest: str
    """sha256 of the blob."""
    diff_id: str
    """sha256 of the uncompressed tar (the image config names layers by it)."""
    size: int
    uncompressed_size: int

    def save(self, meta: Path) -> None:
        meta.write_text(json.dumps({**asdict(self), "path": str(self.path)}, indent=1))

    @staticmethod
    def load(meta: Path) -> Layer | None:
        """A finished layer (its blob present), or None: a cache miss."""
        try:
            data = json.loads(meta.read_text())
        except (OSError, ValueError):
            return None
        layer = Layer(**{**data, "path": Path(data["path"])})
        return layer if layer.path.is_file() and layer.path.stat().st_size == layer.size else None


class _Hashing(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through to `sink`."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink, self.sha, self.count = sink, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha.update(data)
        self.count += len(data)
        self.sink.write(data)
        return len(data)


def _compress(out: Path, write_tar: Callable[[IO[bytes]], None]) -> Layer:
    part = out.with_name(f"{out.name}.{os.getpid()}.part")  # two builds at once never share a file
    with part.open("wb") as blob_file:
        blob = _Hashing(blob_file)
        # mtime=0 and no file name: the gzip header carries nothing of this machine or moment.
        with gzip.GzipFile(filename="", mode="wb", fileobj=blob, compresslevel=6, mtime=0) as gz:
            plain = _Hashing(gz)  # type: ignore[arg-type]
            write_tar(plain)  # type: ignore[arg-type]
    os.replace(part, out)
    return Layer(out, f"sha256:{blob.sha.hexdigest()}", f"sha256:{plain.sha.hexdigest()}", blob.count, plain.count)


def compress_tar(tar: Path, out: Path, drop: tuple[str, ...] = (), empty: tuple[str, ...] = ()) -> Layer:
    """A tar that is already reproducible (mmdebstrap's), compressed in its own order, without the
    entries under `drop` (paths as the tar names them, e.g. "./var/lib/apt") nor the contents of the
    directories `empty` (kept themselves)."""
    def copy(sink: IO[bytes]) -> None:
        with tarfile.open(tar, mode="r|") as source, \
                tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as target:
            for member in source:
                if any(member.name == path or member.name.startswith(path + "/") for path in drop) or \
                        any(member.name.startswith(path + "/") for path in empty):
                    continue
                target.addfile(member, source.extractfile(member) if member.isreg() else None)
    return _compress(out, copy)


def _entries(root: Path, top: Path) -> list[Path]:
    """`top` (a directory under root), its parents up to root, and everything under it, in byte order."""
    found = [top]
    for directory, subdirs, files in os.walk(top):
        subdirs.sort()
        for name in [*subdirs, *files]:
            found.append(Path(directory) / name)
    parents = [parent for parent in top.relative_to(root).parents if str(parent) != "."]
    return [root / parent for parent in parents] + sorted(found, key=lambda path: str(path.relative_to(root)).encode())


def directory_layer(root: Path, tops: list[str], epoch: int, out: Path) -> Layer:
    """A layer of the trees `tops` (paths relative to root, as they sit in the image), owned by root,
    every mtime `epoch`, modes 0755 (directories and executables) or 0644, symlinks kept."""
    paths: dict[str, Path] = {}
    for top in tops:
        for path in _entries(root, root / top):
            paths[str(path.relative_to(root))] = path

    def write(sink: IO[bytes]) -> None:
        with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(paths, key=str.encode):
                path = paths[name]
                info = tarfile.TarInfo(name)
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = epoch
                mode = path.lstat().st_mode
                if stat.S_ISLNK(mode):
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
                    tar.addfile(info)
                elif stat.S_ISDIR(mode):
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                elif stat.S_ISREG(mode):
                    info.mode = 0o755 if mode & 0o111 else 0o644
                    info.size = path.stat().st_size
                    with path.open("rb") as data:
                        tar.addfile(info, data)
                else:
                    raise ValueError(f"{path}: not a file, directory or symlink")
    return _compress(out, write)
