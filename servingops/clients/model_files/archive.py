"""Uploaded files: what they are (by content), and safe extraction of .tar, .tar.gz and .zip archives.

An upload comes from a user and is hostile until proven otherwise. Extraction therefore:
- writes only regular files and directories, under the destination, with our own permissions: entries
  that are absolute, contain "..", are links (symbolic or hard) or devices/FIFOs are refused, and
  nothing is ever created through a link (we create none, and the destination starts empty);
- counts the bytes it actually writes, chunk by chunk, and stops as soon as they exceed the size limit
  or the compression ratio limit (bytes written / archive size on disk): an archive's own size fields are
  used only to reject early, never to allow;
- streams every entry in bounded chunks, so no entry is ever held whole in memory;
- caps the number of entries, and the length and depth of paths;
- works in a fresh sibling directory and renames it into place only when everything succeeded, so a
  retry after a crash starts clean and a failure leaves nothing half-extracted behind.
"""

from __future__ import annotations

import gzip
import os
import shutil
import stat
import tarfile
import uuid
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO

from servingops.api_models.errors import ErrorType
from servingops.clients.model_files.errors import InvalidModel
from servingops.clients.model_files.gguf import is_gguf_prefix
from servingops.clients.model_files.safetensors import is_safetensors_prefix

CHUNK = 1 << 20
# Peeked from the start of an upload to classify it: the tar magic sits at offset 257.
_PREFIX_BYTES = 512
_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_APPLEDOUBLE_MAGIC = b"\x00\x05\x16\x07"
# Formats recognised only to say precisely why they are refused.
_OTHER_MAGICS: tuple[tuple[bytes, str], ...] = (
    (b"BZh", "a bzip2 file"),
    (b"\xfd7zXZ\x00", "an xz file"),
    (b"\x28\xb5\x2f\xfd", "a zstd file"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"),
)
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_ZIP_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
# Read errors of the archive libraries: the archive is damaged or is not what it claims.
_READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, zlib.error, gzip.BadGzipFile, EOFError, NotImplementedError)


class UploadKind(StrEnum):
    SAFETENSORS = "safetensors"
    GGUF = "gguf"
    TAR = "tar"
    TAR_GZ = "tar.gz"
    ZIP = "zip"


ARCHIVE_KINDS = frozenset({UploadKind.TAR, UploadKind.TAR_GZ, UploadKind.ZIP})
_NAME_SUFFIXES: tuple[tuple[str, UploadKind], ...] = (
    (".safetensors", UploadKind.SAFETENSORS),
    (".gguf", UploadKind.GGUF),
    (".tar.gz", UploadKind.TAR_GZ),
    (".tgz", UploadKind.TAR_GZ),
    (".tar", UploadKind.TAR),
    (".zip", UploadKind.ZIP),
)


@dataclass(frozen=True)
class ArchiveLimits:
    max_total_bytes: int = 1 << 40
    """Bytes of file content written, over all entries."""
    max_entries: int = 100_000
    """Files and directories."""
    max_ratio: float = 100.0
    """Bytes written per byte of archive. Weights barely compress (about 1.1x); configs and tokenizers
    compress 5-10x but are small, hence the grace below which the ratio is not enforced."""
    ratio_grace_bytes: int = 64 << 20
    max_path_bytes: int = 4096
    max_name_bytes: int = 255
    max_depth: int = 32


@dataclass(frozen=True)
class ExtractionResult:
    root: Path
    """The model root: the destination, or the single directory an archive wrapped everything in."""
    destination: Path
    kind: UploadKind
    files: int
    directories: int
    total_bytes: int


# -- classification -----------------------------------------------------------------------------


def classify_upload(path: Path, filename: str | None = None) -> UploadKind:
    """What an uploaded file is, from its content. The name only sharpens the error when they disagree."""
    shown = filename or path.name
    size = path.stat().st_size
    if size == 0:
        raise InvalidModel(ErrorType.EMPTY_MODEL, f"{shown}: the upload is empty")
    with path.open("rb") as fh:
        prefix = fh.read(_PREFIX_BYTES)
    kind = _kind_of(prefix, size)
    claimed = _claimed_kind(shown)
    if kind is None:
        for magic, what in _OTHER_MAGICS:
            if prefix.startswith(magic):
                raise InvalidModel(
                    ErrorType.UNSUPPORTED_ARCHIVE,
                    f"{shown}: is {what}; upload a .safetensors or .gguf file, or a .tar, .tar.gz or .zip archive",
                )
        if shown.lower().endswith(_PICKLE_SUFFIXES) or prefix[:1] == b"\x80":
            raise InvalidModel(
                ErrorType.UNSUPPORTED_FORMAT,
                f"{shown}: looks like a PyTorch/pickle checkpoint, which is not served (loading a pickle can run "
                "code); convert it to safetensors",
            )
        expected = f"is named like a {claimed} file but" if claimed else "is not a .safetensors or .gguf file"
        raise InvalidModel(
            ErrorType.UNKNOWN_FORMAT,
            f"{shown}: {expected} its content is not recognised (it starts with {prefix[:16].hex(' ')})",
        )
    # A tar named .tgz or a tar.gz named .tar is still a tar: the content decides the compression.
    tars = {UploadKind.TAR, UploadKind.TAR_GZ}
    if claimed is not None and claimed != kind and not (claimed in tars and kind in tars):
        raise InvalidModel(
            ErrorType.UNKNOWN_FORMAT, f"{shown}: is named like a {claimed} file but its content is a {kind} file"
        )
    if kind == UploadKind.ZIP and shown.lower().endswith(_PICKLE_SUFFIXES):
        # torch.save writes a zip whose entries are pickles: refuse it as a checkpoint, not as an archive.
        raise InvalidModel(
            ErrorType.UNSUPPORTED_FORMAT,
            f"{shown}: is a PyTorch checkpoint (pickle in a zip), which is not served; convert it to safetensors",
        )
    return kind


def _kind_of(prefix: bytes, size: int) -> UploadKind | None:
    if is_gguf_prefix(prefix):
        return UploadKind.GGUF
    if prefix.startswith(_GZIP_MAGIC):
        return UploadKind.TAR_GZ
    if prefix.startswith(_ZIP_MAGICS):
        return UploadKind.ZIP
    if prefix[257:262] == b"ustar":
        return UploadKind.TAR
    if size >= 1024 and size % 512 == 0 and not prefix.strip(b"\0"):
        return UploadKind.TAR  # only the end-of-archive marker: an empty tar, reported as such
    if is_safetensors_prefix(prefix, size):
        return UploadKind.SAFETENSORS
    return None


def _claimed_kind(name: str) -> UploadKind | None:
    lower = name.lower()
    return next((kind for suffix, kind in _NAME_SUFFIXES if lower.endswith(suffix)), None)


# -- extraction ---------------------------------------------------------------------------------


def extract_archive(
    archive: Path,
    destination: Path,
    *,
    kind: UploadKind | None = None,
    limits: ArchiveLimits | None = None,
    progress: Callable[[int], None] | None = None,
    filename: str | None = None,
) -> ExtractionResult:
    """Extract `archive` into `destination` (replaced if it exists), or raise InvalidModel.

    `progress` is called with the bytes written so far after each chunk (for activity heartbeats).
    """
    limits = limits or ArchiveLimits()
    shown = filename or archive.name
    kind = kind or classify_upload(archive, shown)
    if kind not in ARCHIVE_KINDS:
        raise ValueError(f"{shown} is a {kind} file, not an archive")
    destination = Path(os.path.abspath(destination))
    staging = destination.with_name(f".{destination.name}.partial-{uuid.uuid4().hex[:12]}")
    staging.mkdir(parents=True)
    try:
        extractor = _Extractor(staging, archive.stat().st_size, limits, shown, progress)
        if kind == UploadKind.ZIP:
            extractor.extract_zip(archive)
        else:
            extractor.extract_tar(archive, compressed=kind == UploadKind.TAR_GZ)
        if extractor.files == 0:
            raise InvalidModel(ErrorType.EMPTY_ARCHIVE, f"{shown}: the archive contains no files")
        if destination.exists():
            shutil.rmtree(destination)  # a previous attempt's result: this run replaces it whole
        os.replace(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ExtractionResult(
        root=_model_root(destination),
        destination=destination,
        kind=kind,
        files=extractor.files,
        directories=extractor.directories,
        total_bytes=extractor.written,
    )


def _model_root(destination: Path) -> Path:
    # Archives made with `tar czf model.tgz mymodel/` wrap everything in one directory.
    entries = list(destination.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return destination


class _Extractor:
    def __init__(
        self, root: Path, archive_size: int, limits: ArchiveLimits, shown: str, progress: Callable[[int], None] | None
    ) -> None:
        self.root = root
        self.archive_size = max(archive_size, 1)
        self.limits = limits
        self.shown = shown
        self.progress = progress
        self.entries = 0
        self.files = 0
        self.directories = 0
        self.written = 0
        self.kinds: dict[tuple[str, ...], str] = {}  # relative parts -> "file" | "dir"

    # -- checks shared by both formats

    def fail(self, reason: ErrorType, what: str) -> InvalidModel:
        return InvalidModel(reason, f"{self.shown}: {what}")

    def count_entry(self) -> None:
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise self.fail(
                ErrorType.ARCHIVE_TOO_MANY_FILES,
                f"has more than {self.limits.max_entries} entries (files and directories)",
            )

    def relative_parts(self, name: str) -> tuple[str, ...]:
        """The entry's path as safe components under the root; raises for anything that could escape."""
        if "\0" in name:
            raise self.fail(ErrorType.INVALID_ARCHIVE_PATH, f"entry {name!r} has a NUL byte in its name")
        if "\\" in name:
            raise self.fail(
                ErrorType.INVALID_ARCHIVE_PATH, f"entry {name!r} uses backslashes, which are not path separators here"
            )
        if name.startswith("/"):
            raise self.fail(ErrorType.ARCHIVE_PATH_ESCAPE, f"entry {name!r} has an absolute path")
        parts = tuple(p for p in name.split("/") if p not in ("", "."))
        if ".." in parts:
            raise self.fail(ErrorType.ARCHIVE_PATH_ESCAPE, f"entry {name!r} points outside the archive root (..)")
        encoded = [os.fsencode(p) for p in parts]
        if any(len(p) > self.limits.max_name_bytes for p in encoded):
            raise self.fail(ErrorType.INVALID_ARCHIVE_PATH,
                            f"entry {name[:200]!r} has a path component that is too long")
        if sum(len(p) + 1 for p in encoded) > self.limits.max_path_bytes or len(parts) > self.limits.max_depth:
            raise self.fail(ErrorType.INVALID_ARCHIVE_PATH, f"entry {name[:200]!r} has a path that is too long or deep")
        target = os.path.normpath(os.path.join(self.root, *parts))
        if os.path.commonpath([target, str(self.root)]) != str(self.root):  # belt and braces
            raise self.fail(ErrorType.ARCHIVE_PATH_ESCAPE, f"entry {name!r} points outside the archive root")
        return parts

    def make_dirs(self, parts: tuple[str, ...], name: str) -> None:
        for i in range(1, len(parts) + 1):
            prefix = parts[:i]
            known = self.kinds.get(prefix)
            if known == "dir":
                continue
            if known == "file":
                raise self.fail(
                    ErrorType.ARCHIVE_DUPLICATE_ENTRY,
                    f"entry {name!r} needs {'/'.join(prefix)} as a directory, but it is a file",
                )
            os.mkdir(self.root.joinpath(*prefix), 0o755)
            self.kinds[prefix] = "dir"
            self.directories += 1

    def add_directory(self, name: str) -> None:
        self.count_entry()
        parts = self.relative_parts(name)
        if parts:
            self.make_dirs(parts, name)

    def add_file(self, name: str, read: Callable[[int], bytes], declared: int | None) -> None:
        """Stream one regular file's content from `read` into place."""
        self.count_entry()
        parts = self.relative_parts(name)
        if not parts:
            raise self.fail(ErrorType.INVALID_ARCHIVE_PATH, f"entry {name!r} is a file without a name")
        if parts in self.kinds:
            raise self.fail(ErrorType.ARCHIVE_DUPLICATE_ENTRY, f"entry {name!r} appears more than once")
        if declared is not None:
            self.check_totals(self.written + declared)  # early rejection only; the real count is below
        first = self.read(read, name)
        if parts[-1].startswith("._") and first.startswith(_APPLEDOUBLE_MAGIC):
            return  # macOS resource-fork metadata that archivers add next to every file; never model data
        self.make_dirs(parts[:-1], name)
        self.kinds[parts] = "file"
        path = self.root.joinpath(*parts)
        # O_EXCL and O_NOFOLLOW: never write through anything that already exists at that path.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        written = 0
        with os.fdopen(fd, "wb") as out:
            chunk = first
            while chunk:
                self.check_totals(self.written + len(chunk))
                out.write(chunk)
                self.written += len(chunk)
                written += len(chunk)
                if self.progress is not None:
                    self.progress(self.written)
                chunk = self.read(read, name)
        if declared is not None and written != declared:
            raise self.fail(ErrorType.INVALID_ARCHIVE,
                            f"entry {name!r} holds {written} bytes, its header says {declared}")
        self.files += 1

    def read(self, read: Callable[[int], bytes], name: str) -> bytes:
        try:
            return read(CHUNK)
        except _READ_ERRORS as exc:
            raise self.fail(
                ErrorType.INVALID_ARCHIVE, f"cannot read entry {name!r}: {exc or type(exc).__name__}"
            ) from None

    def check_totals(self, total: int) -> None:
        limits = self.limits
        if total > limits.ratio_grace_bytes and total > limits.max_ratio * self.archive_size:
            raise self.fail(
                ErrorType.ARCHIVE_BOMB,
                f"expands to more than {total} bytes from {self.archive_size} bytes, more than the "
                f"{limits.max_ratio:g}x compression ratio allowed; extraction stopped",
            )
        if total > limits.max_total_bytes:
            raise self.fail(
                ErrorType.ARCHIVE_TOO_LARGE,
                f"expands to more than {limits.max_total_bytes} bytes, the limit for an upload; extraction stopped",
            )

    # -- tar

    def extract_tar(self, archive: Path, *, compressed: bool) -> None:
        with archive.open("rb") as fh:
            try:
                tf = tarfile.open(fileobj=fh, mode="r|gz" if compressed else "r|", bufsize=CHUNK)
            except _READ_ERRORS as exc:
                raise self.fail(ErrorType.INVALID_ARCHIVE, f"is not a readable tar archive: {exc}") from None
            with tf:
                for member in self._members(tf):
                    self._tar_member(tf, member)

    def _members(self, tf: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
        iterator = iter(tf)
        while True:
            try:
                member = next(iterator)
            except StopIteration:
                return
            except _READ_ERRORS as exc:
                raise self.fail(ErrorType.INVALID_ARCHIVE, f"is damaged after {self.entries} entries: {exc}") from None
            yield member

    def _tar_member(self, tf: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        name = member.name
        if member.issym() or member.islnk():
            kind = "symbolic link" if member.issym() else "hard link"
            raise self.fail(
                ErrorType.ARCHIVE_LINK, f"entry {name!r} is a {kind} (to {member.linkname!r}); links are not accepted"
            )
        if member.ischr() or member.isblk() or member.isfifo():
            raise self.fail(ErrorType.ARCHIVE_SPECIAL_FILE, f"entry {name!r} is a device or FIFO, not a file")
        if member.isdir():
            self.add_directory(name)
            return
        if not member.isreg():
            raise self.fail(
                ErrorType.UNSUPPORTED_ARCHIVE, f"entry {name!r} has tar type {member.type!r}, which is not supported"
            )
        try:
            src = tf.extractfile(member)
        except _READ_ERRORS as exc:
            raise self.fail(ErrorType.INVALID_ARCHIVE, f"cannot read entry {name!r}: {exc}") from None
        if src is None:  # pragma: no cover - extractfile returns a reader for every regular member
            raise self.fail(ErrorType.INVALID_ARCHIVE, f"cannot read entry {name!r}")
        # A sparse member's header size is the stored size, not what it expands to: do not compare.
        self.add_file(name, src.read, None if member.issparse() else member.size)

    # -- zip

    def extract_zip(self, archive: Path) -> None:
        try:
            zf = zipfile.ZipFile(archive)
        except (*_READ_ERRORS, OSError, ValueError) as exc:
            raise self.fail(ErrorType.INVALID_ARCHIVE, f"is not a readable zip archive: {exc}") from None
        with zf:
            infos = [i for i in zf.infolist() if not _is_macos_metadata(i.filename)]
            # Early rejection from the central directory; the limits are enforced again while writing.
            if len(infos) > self.limits.max_entries:
                raise self.fail(
                    ErrorType.ARCHIVE_TOO_MANY_FILES,
                    f"has {len(infos)} entries, more than the {self.limits.max_entries} allowed",
                )
            self.check_totals(sum(i.file_size for i in infos))
            for info in infos:
                self._zip_member(zf, info)

    def _zip_member(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
        name = info.filename
        mode = info.external_attr >> 16 if info.create_system == 3 else 0  # Unix mode, when made on Unix
        if stat.S_ISLNK(mode):
            raise self.fail(ErrorType.ARCHIVE_LINK, f"entry {name!r} is a symbolic link; links are not accepted")
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise self.fail(ErrorType.ARCHIVE_SPECIAL_FILE, f"entry {name!r} is a device, FIFO or socket, not a file")
        if info.is_dir() or stat.S_ISDIR(mode):
            self.add_directory(name)
            return
        if info.flag_bits & 0x1:
            raise self.fail(ErrorType.ENCRYPTED_ARCHIVE, f"entry {name!r} is encrypted")
        if info.compress_type not in _ZIP_METHODS:
            raise self.fail(
                ErrorType.UNSUPPORTED_ARCHIVE, f"entry {name!r} uses zip compression method {info.compress_type}"
            )
        try:
            src: IO[bytes] = zf.open(info)
        except (*_READ_ERRORS, RuntimeError, ValueError) as exc:
            raise self.fail(ErrorType.INVALID_ARCHIVE, f"cannot read entry {name!r}: {exc}") from None
        with src:
            self.add_file(name, src.read, info.file_size)


def _is_macos_metadata(name: str) -> bool:
    # Finder's zip adds a __MACOSX/ tree of resource forks; it is never model data.
    return name == "__MACOSX" or name.startswith("__MACOSX/")


# -- staging an upload as a model directory -----------------------------------------------------


def stage_upload(
    upload: Path,
    destination: Path,
    *,
    filename: str | None = None,
    limits: ArchiveLimits | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[UploadKind, Path]:
    """Turn an uploaded file into a model directory at `destination`; returns its kind and model root.

    An archive is extracted; a single weight file is linked (or copied, across file systems) into the
    directory under a plain file name, the upload itself left untouched.
    """
    kind = classify_upload(upload, filename)
    if kind in ARCHIVE_KINDS:
        result = extract_archive(upload, destination, kind=kind, limits=limits, progress=progress, filename=filename)
        return kind, result.root
    name = _plain_name(filename or upload.name, kind)
    destination = Path(os.path.abspath(destination))
    staging = destination.with_name(f".{destination.name}.partial-{uuid.uuid4().hex[:12]}")
    staging.mkdir(parents=True)
    try:
        target = staging / name
        try:
            os.link(upload, target)
        except OSError:
            with upload.open("rb") as src, target.open("xb") as out:
                shutil.copyfileobj(src, out, CHUNK)
        if destination.exists():
            shutil.rmtree(destination)
        os.replace(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return kind, destination


def _plain_name(name: str, kind: UploadKind) -> str:
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    suffix = f".{kind.value}"
    if not base.lower().endswith(suffix) or base.startswith(".") or len(os.fsencode(base)) > 255 or "\0" in base:
        return f"model{suffix}"
    return base
