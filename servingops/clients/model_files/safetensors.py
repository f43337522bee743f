"""Safetensors headers and sharded-checkpoint indexes, read without touching tensor data.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON, then the tensor data.
Every tensor's `data_offsets` are relative to the end of the header; together they must tile the data
section exactly (no gap, no overlap) and end at the end of the file. So a shard cut short by a failed
download is caught from the file size alone, without reading or hashing its data.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servingops.api_models.errors import ErrorType
from servingops.clients.model_files.errors import InvalidModel, display_path, load_json_object

# The reference implementation refuses headers above 100 MB; so do we, before reading one.
MAX_HEADER_BYTES = 100_000_000
METADATA_KEY = "__metadata__"
INDEX_SUFFIX = ".safetensors.index.json"

# Bits per element of every dtype the safetensors format defines (sub-byte floats included).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
FLOAT_DTYPES = frozenset({"F8_E5M2", "F8_E4M3", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "F16", "BF16", "F32", "F64"})


@dataclass(frozen=True)
class SafetensorsInfo:
    """What one file's header says, after checking it against the file."""

    path: Path
    file_size: int
    header_size: int
    metadata: dict[str, str]
    tensor_count: int
    parameter_count: int
    """Sum over tensors of the product of their shapes (elements, not bytes)."""
    dtypes: dict[str, int]
    """Elements per dtype."""
    tensor_names: frozenset[str] = field(repr=False)

    @property
    def data_size(self) -> int:
        return self.file_size - 8 - self.header_size


@dataclass(frozen=True)
class SafetensorsIndex:
    """A `*.safetensors.index.json` whose shards exist, parse, and hold the tensors it maps to them."""

    path: Path
    metadata: dict[str, Any]
    weight_map: dict[str, str]
    shards: dict[str, SafetensorsInfo]
    """By the shard name as the index spells it (relative to the index's directory)."""

    @property
    def parameter_count(self) -> int:
        return sum(s.parameter_count for s in self.shards.values())

    @property
    def dtypes(self) -> dict[str, int]:
        return merge_dtypes(s.dtypes for s in self.shards.values())


def merge_dtypes(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for c in counts:
        for dtype, n in c.items():
            total[dtype] = total.get(dtype, 0) + n
    return total


def is_safetensors_prefix(prefix: bytes, file_size: int) -> bool:
    """Whether the first bytes of a file look like a safetensors header (used to classify uploads)."""
    if len(prefix) < 9:
        return False
    (n,) = struct.unpack("<Q", prefix[:8])
    return 2 <= n <= MAX_HEADER_BYTES and 8 + n <= file_size and prefix[8:9] == b"{"


def read_safetensors_header(path: Path, *, root: Path | None = None) -> SafetensorsInfo:
    """Parse and validate the header of one .safetensors file; reads at most 8 + 100 MB."""
    name = display_path(path, root)
    size = path.stat().st_size
    with path.open("rb") as fh:
        prefix = fh.read(8)
        if len(prefix) < 8:
            raise InvalidModel(
                ErrorType.TRUNCATED_SAFETENSORS,
                f"{name}: the file has {size} bytes, fewer than the 8-byte header length of a safetensors file",
            )
        (n,) = struct.unpack("<Q", prefix)
        if n > MAX_HEADER_BYTES:
            raise InvalidModel(
                ErrorType.INVALID_SAFETENSORS_HEADER,
                f"{name}: declares a {n}-byte header, more than the {MAX_HEADER_BYTES} bytes safetensors allows "
                "(this is probably not a safetensors file)",
            )
        if 8 + n > size:
            raise InvalidModel(
                ErrorType.TRUNCATED_SAFETENSORS,
                f"{name}: declares a {n}-byte header but the file has only {size} bytes; it was cut short",
            )
        raw = fh.read(n)
    if len(raw) != n:  # the file shrank while we read it
        raise InvalidModel(ErrorType.TRUNCATED_SAFETENSORS, f"{name}: ends inside its {n}-byte header")
    header = _decode_header(raw, name)
    metadata = _metadata(header.pop(METADATA_KEY, None), name)

    spans: list[tuple[int, int, str]] = []
    dtypes: dict[str, int] = {}
    parameters = 0
    for tensor, info in header.items():
        dtype, shape, begin, end = _tensor_entry(tensor, info, name)
        elements = math.prod(shape)
        bits = elements * DTYPE_BITS[dtype]
        if bits % 8:
            raise InvalidModel(
                ErrorType.INVALID_SAFETENSORS_HEADER,
                f"{name}: tensor {tensor!r} of {elements} {dtype} elements does not fill whole bytes",
            )
        if end - begin != bits // 8:
            raise InvalidModel(
                ErrorType.INVALID_SAFETENSORS_HEADER,
                f"{name}: tensor {tensor!r} spans {end - begin} bytes (offsets {begin}..{end}) but "
                f"{dtype}{list(shape)} needs {bits // 8}",
            )
        spans.append((begin, end, tensor))
        dtypes[dtype] = dtypes.get(dtype, 0) + elements
        parameters += elements

    data_end = _check_tiling(spans, name)
    data_size = size - 8 - n
    if data_end > data_size:
        raise InvalidModel(
            ErrorType.TRUNCATED_SAFETENSORS,
            f"{name}: tensor data should end at byte {8 + n + data_end} but the file has only {size} bytes; "
            f"{8 + n + data_end - size} bytes are missing",
        )
    if data_end < data_size:
        raise InvalidModel(
            ErrorType.INVALID_SAFETENSORS_HEADER,
            f"{name}: {data_size - data_end} bytes follow the last tensor; the header does not describe them",
        )
    return SafetensorsInfo(
        path=path,
        file_size=size,
        header_size=n,
        metadata=metadata,
        tensor_count=len(spans),
        parameter_count=parameters,
        dtypes=dtypes,
        tensor_names=frozenset(header),
    )


def _decode_header(raw: bytes, name: str) -> dict[str, Any]:
    # The format requires the header to start with "{"; trailing spaces are the writers' padding.
    if not raw.startswith(b"{"):
        raise InvalidModel(ErrorType.INVALID_SAFETENSORS_HEADER,
                           f"{name}: the header does not start with '{{' (not JSON)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidModel(
            ErrorType.INVALID_SAFETENSORS_HEADER, f"{name}: the header is not UTF-8 (byte {exc.start})"
        ) from None
    try:
        header = json.loads(text, object_pairs_hook=_unique_keys(name))
    except RecursionError:
        raise InvalidModel(ErrorType.INVALID_SAFETENSORS_HEADER, f"{name}: the header JSON nests too deeply") from None
    except ValueError as exc:
        raise InvalidModel(ErrorType.INVALID_SAFETENSORS_HEADER,
                           f"{name}: the header is not valid JSON ({exc})") from None
    if not isinstance(header, dict):
        raise InvalidModel(ErrorType.INVALID_SAFETENSORS_HEADER, f"{name}: the header is not a JSON object")
    return header


def _unique_keys(name: str) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise InvalidModel(ErrorType.INVALID_SAFETENSORS_HEADER, f"{name}: the header names {key!r} twice")
            result[key] = value
        return result

    return hook


def _metadata(value: Any, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidModel(ErrorType.INVALID_SAFETENSORS_HEADER, f"{name}: {METADATA_KEY} must map strings to strings")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor_entry(tensor: str, info: Any, name: str) -> tuple[str, tuple[int, ...], int, int]:
    def bad(what: str) -> InvalidModel:
        return InvalidModel(ErrorType.INVALID_SAFETENSORS_HEADER, f"{name}: tensor {tensor!r} {what}")

    if not isinstance(info, dict):
        raise bad("is not described by an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise bad(f"has unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise bad(f"has an invalid shape {shape!r} (a list of non-negative integers is required)")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_int(o) and o >= 0 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise bad(f"has invalid data_offsets {offsets!r} (required: [begin, end] with 0 <= begin <= end)")
    return dtype, tuple(shape), offsets[0], offsets[1]


def _check_tiling(spans: list[tuple[int, int, str]], name: str) -> int:
    """The data section must be covered exactly once, from 0 to the returned end."""
    expected = 0
    previous = ""
    for begin, end, tensor in sorted(spans):
        if begin < expected:
            raise InvalidModel(
                ErrorType.INVALID_SAFETENSORS_HEADER,
                f"{name}: tensors {previous!r} and {tensor!r} overlap (byte {begin} is used twice)",
            )
        if begin > expected:
            raise InvalidModel(
                ErrorType.INVALID_SAFETENSORS_HEADER,
                f"{name}: {begin - expected} bytes of tensor data before {tensor!r} (offset {expected}) "
                "belong to no tensor",
            )
        expected = end
        previous = tensor
    return expected


# -- sharded checkpoints ------------------------------------------------------------------------


def is_index_file(path: Path) -> bool:
    return path.name.endswith(INDEX_SUFFIX)


def read_safetensors_index(
    path: Path, *, root: Path | None = None, parsed: dict[Path, SafetensorsInfo] | None = None
) -> SafetensorsIndex:
    """Validate an index: every shard it names exists next to it, parses, and holds its tensors.

    `parsed` caches headers already read (by path), so a directory walk parses each shard once.
    """
    name = display_path(path, root)
    data = load_json_object(path, ErrorType.INVALID_SAFETENSORS_INDEX, what="the weight index", shown_as=name)
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise InvalidModel(ErrorType.INVALID_SAFETENSORS_INDEX, f"{name}: has no weight_map (tensor -> shard file)")
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidModel(ErrorType.INVALID_SAFETENSORS_INDEX, f"{name}: metadata must be an object")

    by_shard: dict[str, list[str]] = {}
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not _is_plain_file_name(shard):
            raise InvalidModel(
                ErrorType.INVALID_SAFETENSORS_INDEX,
                f"{name}: tensor {tensor!r} maps to {shard!r}, which is not a file name next to the index",
            )
        by_shard.setdefault(shard, []).append(tensor)

    shards: dict[str, SafetensorsInfo] = {}
    for shard, tensors in sorted(by_shard.items()):
        shard_path = path.parent / shard
        if not shard_path.is_file():
            raise InvalidModel(
                ErrorType.MISSING_SHARD,
                f"{name}: names the shard {shard} (for {len(tensors)} tensors, e.g. {tensors[0]!r}) "
                "but the file is not there",
            )
        info = parsed.get(shard_path) if parsed is not None else None
        if info is None:
            info = read_safetensors_header(shard_path, root=root)
            if parsed is not None:
                parsed[shard_path] = info
        missing = [t for t in tensors if t not in info.tensor_names]
        if missing:
            raise InvalidModel(
                ErrorType.INVALID_SAFETENSORS_INDEX,
                f"{name}: maps {len(missing)} tensors to {shard} that it does not contain, e.g. {missing[0]!r}",
            )
        shards[shard] = info
    return SafetensorsIndex(path=path, metadata=metadata or {}, weight_map=dict(weight_map), shards=shards)


def _is_plain_file_name(name: str) -> bool:
    # Indexes name shards in their own directory; anything else could point outside the model.
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..") and "\0" not in name


# -- the weights of one directory --------------------------------------------------------------

# The names transformers and diffusers save under; a variant adds ".<variant>" before the extension.
CANONICAL_STEMS = ("model", "diffusion_pytorch_model")


@dataclass(frozen=True)
class WeightSet:
    """The safetensors weights of one directory, all validated.

    `parameter_count` and `dtypes` describe the checkpoint a loader would pick; they are None when the
    directory holds several alternatives (variants, or a consolidated copy next to shards) and no
    canonical name says which one is the model: counting all would double the count, picking one would be
    a guess.
    """

    files: tuple[Path, ...]
    primary: tuple[Path, ...]
    parameter_count: int | None
    dtypes: dict[str, int] | None
    indexes: tuple[SafetensorsIndex, ...]


def read_weight_dir(
    directory: Path, *, root: Path | None = None, parsed: dict[Path, SafetensorsInfo] | None = None
) -> WeightSet | None:
    """Validate every .safetensors file and index directly in `directory`; None when there are none."""
    parsed = {} if parsed is None else parsed
    files = sorted(p for p in directory.iterdir() if p.name.endswith(".safetensors") and p.is_file())
    index_paths = sorted(p for p in directory.iterdir() if is_index_file(p) and p.is_file())
    if not files and not index_paths:
        return None
    for path in files:
        if path not in parsed:
            parsed[path] = read_safetensors_header(path, root=root)
    indexes = tuple(read_safetensors_index(p, root=root, parsed=parsed) for p in index_paths)

    chosen: list[SafetensorsInfo] | None = None
    canonical_indexes = [i for i in indexes if i.path.name in {s + INDEX_SUFFIX for s in CANONICAL_STEMS}]
    canonical_files = [p for p in files if p.name in {s + ".safetensors" for s in CANONICAL_STEMS}]
    if len(canonical_indexes) == 1:
        chosen = list(canonical_indexes[0].shards.values())
    elif not canonical_indexes and len(indexes) == 1:
        chosen = list(indexes[0].shards.values())
    elif not indexes and len(canonical_files) == 1:
        chosen = [parsed[canonical_files[0]]]
    elif not indexes and len(files) == 1:
        chosen = [parsed[files[0]]]
    return WeightSet(
        files=tuple(files),
        primary=tuple(i.path for i in chosen) if chosen is not None else (),
        parameter_count=sum(i.parameter_count for i in chosen) if chosen is not None else None,
        dtypes=merge_dtypes(i.dtypes for i in chosen) if chosen is not None else None,
        indexes=indexes,
    )
