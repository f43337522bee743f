"""GGUF headers (llama.cpp's model format), read without touching tensor data.

Layout (v2 and v3; v1 used 32-bit counts and is obsolete): magic "GGUF", u32 version, u64 tensor count,
u64 metadata count, the metadata as (string key, u32 type, value), one info per tensor (string name, u32
n_dims, u64 dims[n_dims], u32 ggml type, u64 offset), padding to `general.alignment` (default 32), then
the tensor data. Every length and count in the header comes from the file, so each is bounded by what the
rest of the file could hold and by fixed limits before anything is allocated: a hostile header cannot make
us allocate gigabytes or loop for hours. Large values (token lists, merges) are skipped, not kept.

The layout rules are those of ggml's own loader (gguf.cpp), the reader every runtime of this format uses:
no duplicate keys or tensor names, no nested arrays, at most 4 dims, rows a whole number of blocks, and
tensors stored in order, each at the aligned end of the previous one; a file ggml would refuse is refused.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, BinaryIO

from servingops.api_models.errors import ErrorType
from servingops.clients.model_files.errors import InvalidModel, display_path

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4

# Bounds on what a header may claim. Real files are far below each (a few hundred keys, a few thousand
# tensors, tokenizer arrays of a few hundred thousand entries).
MAX_KV_COUNT = 65_536
MAX_TENSOR_COUNT = 200_000
MAX_KEY_BYTES = 65_535
MAX_TENSOR_NAME_BYTES = 256  # ggml itself allows 63
MAX_STRING_BYTES = 256 * 1024 * 1024  # a whole tokenizer.json may be embedded as one string
MAX_ARRAY_LENGTH = 1 << 22  # the largest vocabularies and merge lists are a few hundred thousand
# Values bigger than these are checked and skipped, not kept: only small ones are ever looked at.
MAX_KEPT_STRING_BYTES = 1024 * 1024
MAX_KEPT_ARRAY_LENGTH = 64
# All kept strings together: memory stays bounded however many keys a file has.
MAX_KEPT_TOTAL_BYTES = 16 * 1024 * 1024


class ValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_SCALAR_FORMATS: dict[ValueType, str] = {
    ValueType.UINT8: "<B",
    ValueType.INT8: "<b",
    ValueType.UINT16: "<H",
    ValueType.INT16: "<h",
    ValueType.UINT32: "<I",
    ValueType.INT32: "<i",
    ValueType.FLOAT32: "<f",
    ValueType.BOOL: "<B",
    ValueType.UINT64: "<Q",
    ValueType.INT64: "<q",
    ValueType.FLOAT64: "<d",
}
_INTEGER_TYPES = frozenset(
    {
        ValueType.UINT8, ValueType.INT8, ValueType.UINT16, ValueType.INT16,
        ValueType.UINT32, ValueType.INT32, ValueType.UINT64, ValueType.INT64,
    }
)  # fmt: skip


@dataclass(frozen=True)
class GGMLType:
    name: str
    block_size: int  # elements per block
    type_size: int  # bytes per block


# ggml_type ids with their block layout, as ggml's type traits define them (ids 4, 5, 31-33 and 36-38
# were removed from the format and never appear in current files).
GGML_TYPES: dict[int, GGMLType] = {
    t[0]: GGMLType(t[1], t[2], t[3])
    for t in [
        (0, "F32", 1, 4), (1, "F16", 1, 2), (2, "Q4_0", 32, 18), (3, "Q4_1", 32, 20),
        (6, "Q5_0", 32, 22), (7, "Q5_1", 32, 24), (8, "Q8_0", 32, 34), (9, "Q8_1", 32, 36),
        (10, "Q2_K", 256, 84), (11, "Q3_K", 256, 110), (12, "Q4_K", 256, 144), (13, "Q5_K", 256, 176),
        (14, "Q6_K", 256, 210), (15, "Q8_K", 256, 292), (16, "IQ2_XXS", 256, 66), (17, "IQ2_XS", 256, 74),
        (18, "IQ3_XXS", 256, 98), (19, "IQ1_S", 256, 50), (20, "IQ4_NL", 32, 18), (21, "IQ3_S", 256, 110),
        (22, "IQ2_S", 256, 82), (23, "IQ4_XS", 256, 136), (24, "I8", 1, 1), (25, "I16", 1, 2),
        (26, "I32", 1, 4), (27, "I64", 1, 8), (28, "F64", 1, 8), (29, "IQ1_M", 256, 56),
        (30, "BF16", 1, 2), (34, "TQ1_0", 256, 54), (35, "TQ2_0", 256, 66), (39, "MXFP4", 32, 17),
        (40, "NVFP4", 64, 36), (41, "Q1_0", 128, 18),
    ]
}  # fmt: skip

# llama.cpp's llama_ftype (`general.file_type`), named the way model hubs and Ollama name quantizations.
LLAMA_FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 4: "Q4_1_SOME_F16", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS",
    24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS",
    31: "IQ1_M", 32: "BF16", 33: "Q4_0_4_4", 34: "Q4_0_4_8", 35: "Q4_0_8_8", 36: "TQ1_0", 37: "TQ2_0",
    38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0",
}  # fmt: skip

# llama_pooling_type, as `<arch>.pooling_type`.
POOLING_NONE, POOLING_MEAN, POOLING_CLS, POOLING_LAST, POOLING_RANK = range(5)


@dataclass(frozen=True)
class SkippedValue:
    """A metadata value that was checked but not kept (a long array or string)."""

    type: ValueType
    length: int
    element_type: ValueType | None = None


@dataclass(frozen=True)
class GGUFInfo:
    path: Path
    file_size: int
    version: int
    alignment: int
    data_offset: int
    data_end: int
    tensor_count: int
    parameter_count: int
    """Elements over all tensors (ggml dims are logical, so quantized tensors count their weights)."""
    tensor_types: dict[str, int]
    """Elements per ggml type."""
    metadata: dict[str, Any]
    metadata_types: dict[str, ValueType]

    def _typed(self, key: str, types: frozenset[ValueType]) -> Any:
        return self.metadata.get(key) if self.metadata_types.get(key) in types else None

    def string(self, key: str) -> str | None:
        value = self._typed(key, frozenset({ValueType.STRING}))
        return value if isinstance(value, str) else None

    def integer(self, key: str) -> int | None:
        value = self._typed(key, _INTEGER_TYPES)
        return value if isinstance(value, int) else None

    def boolean(self, key: str) -> bool | None:
        value = self._typed(key, frozenset({ValueType.BOOL}))
        return value if isinstance(value, bool) else None

    @property
    def architecture(self) -> str | None:
        return self.string("general.architecture")

    @property
    def name(self) -> str | None:
        return self.string("general.name")

    @property
    def basename(self) -> str | None:
        return self.string("general.basename")

    @property
    def size_label(self) -> str | None:
        return self.string("general.size_label")

    @property
    def general_type(self) -> str | None:
        """The file's role ("model", "adapter", "mmproj", ...) when the writer said so."""
        return self.string("general.type")

    @property
    def file_type(self) -> int | None:
        return self.integer("general.file_type")

    @property
    def quantization(self) -> str | None:
        """The llama.cpp name of `general.file_type`; None when the file does not say (never guessed)."""
        ft = self.file_type
        return LLAMA_FILE_TYPES.get(ft) if ft is not None else None

    @property
    def context_length(self) -> int | None:
        arch = self.architecture
        value = self.integer(f"{arch}.context_length") if arch else None
        return value if value is not None and value >= 1 else None

    @property
    def pooling_type(self) -> int | None:
        arch = self.architecture
        return self.integer(f"{arch}.pooling_type") if arch else None

    @property
    def chat_template(self) -> str | None:
        return self.string("tokenizer.chat_template")

    @property
    def has_chat_template(self) -> bool:
        # Present even when too long to keep; named variants (tokenizer.chat_template.<name>) count too.
        return any(
            k == "tokenizer.chat_template" or k.startswith("tokenizer.chat_template.") for k in self.metadata_types
        )

    @property
    def has_tokenizer(self) -> bool:
        return "tokenizer.ggml.model" in self.metadata_types

    @property
    def is_projector(self) -> bool:
        """A multimodal projector (mmproj / CLIP) file, an add-on of a model rather than a model."""
        return self.general_type == "mmproj" or self.architecture == "clip"

    @property
    def is_adapter(self) -> bool:
        return self.general_type == "adapter"

    @property
    def split(self) -> tuple[int, int] | None:
        """(index, count) of a file of a model split by gguf-split, when it is one."""
        no, count = self.integer("split.no"), self.integer("split.count")
        if no is None or count is None or count < 2:
            return None
        return no, count

    def has_key_prefix(self, prefix: str) -> bool:
        return any(k.startswith(prefix) for k in self.metadata_types)


def _invalid(name: str, what: str) -> InvalidModel:
    return InvalidModel(ErrorType.INVALID_GGUF, f"{name}: {what}")


class _Reader:
    """Bounded reads over a buffered file: nothing is read or allocated past the file's end."""

    def __init__(self, fh: BinaryIO, size: int, name: str) -> None:
        self.fh = fh
        self.size = size
        self.name = name
        self.pos = 0
        self.keep_budget = MAX_KEPT_TOTAL_BYTES

    def keep(self, n: int) -> bool:
        """Whether a string of n bytes may still be kept (and if so, charge it to the budget)."""
        if n > MAX_KEPT_STRING_BYTES or n > self.keep_budget:
            return False
        self.keep_budget -= n
        return True

    @property
    def remaining(self) -> int:
        return self.size - self.pos

    def read(self, n: int, what: str) -> bytes:
        if n > self.remaining:
            raise InvalidModel(
                ErrorType.TRUNCATED_GGUF,
                f"{self.name}: the file ends inside {what} (needs {n} bytes at offset {self.pos}, "
                f"{self.remaining} left)",
            )
        raw = self.fh.read(n)
        if len(raw) != n:
            raise InvalidModel(ErrorType.TRUNCATED_GGUF, f"{self.name}: the file ends inside {what}")
        self.pos += n
        return raw

    def skip(self, n: int, what: str) -> None:
        if n > self.remaining:
            raise InvalidModel(
                ErrorType.TRUNCATED_GGUF,
                f"{self.name}: {what} of {n} bytes runs past the end of the file (offset {self.pos})",
            )
        self.fh.seek(n, 1)
        self.pos += n

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt), what))[0]

    def u32(self, what: str) -> int:
        value: int = self.scalar("<I", what)
        return value

    def u64(self, what: str) -> int:
        value: int = self.scalar("<Q", what)
        return value

    def string_length(self, limit: int, what: str) -> int:
        n = self.u64(f"the length of {what}")
        self.check_claim(n, limit, n, f"{what} claims {n} bytes at offset {self.pos - 8}")
        return n

    def check_claim(self, claimed: int, limit: int, min_bytes: int, what: str) -> None:
        """A count or length from the header: beyond `limit` the file is invalid; beyond what the rest of
        the file can hold (`min_bytes` at least) it was cut short, or lies; either way it is refused."""
        if claimed > limit:
            raise _invalid(self.name, f"{what}, more than the {limit} allowed")
        if min_bytes > self.remaining:
            raise InvalidModel(
                ErrorType.TRUNCATED_GGUF,
                f"{self.name}: {what}, needing at least {min_bytes} bytes, but only {self.remaining} are left "
                "in the file",
            )

    def text(self, limit: int, what: str) -> str:
        raw = self.read(self.string_length(limit, what), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _invalid(self.name, f"{what} is not UTF-8") from None


def _value_type(raw: int, name: str, key: str) -> ValueType:
    try:
        return ValueType(raw)
    except ValueError:
        raise _invalid(name, f"metadata {key!r} has unknown value type {raw}") from None


def _read_value(r: _Reader, vtype: ValueType, key: str) -> Any:
    if vtype == ValueType.STRING:
        n = r.string_length(MAX_STRING_BYTES, f"the value of {key!r}")
        if not r.keep(n):
            r.skip(n, f"the value of {key!r}")
            return SkippedValue(vtype, n)
        raw = r.read(n, f"the value of {key!r}")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _invalid(r.name, f"the value of {key!r} is not UTF-8") from None
    if vtype == ValueType.ARRAY:
        return _read_array(r, key)
    value = r.scalar(_SCALAR_FORMATS[vtype], f"the value of {key!r}")
    if vtype == ValueType.BOOL:
        if value > 1:
            raise _invalid(r.name, f"the boolean {key!r} holds {value}")
        return bool(value)
    return value


def _read_array(r: _Reader, key: str) -> Any:
    etype = _value_type(r.u32(f"the element type of {key!r}"), r.name, key)
    if etype == ValueType.ARRAY:
        raise _invalid(r.name, f"metadata {key!r} is an array of arrays, which GGUF readers do not accept")
    count = r.u64(f"the length of {key!r}")
    # Each element takes at least its scalar size, or 8 bytes for a string's length.
    min_size = 8 if etype == ValueType.STRING else struct.calcsize(_SCALAR_FORMATS[etype])
    r.check_claim(count, MAX_ARRAY_LENGTH, count * min_size, f"metadata {key!r} claims {count} elements")
    keep = count <= MAX_KEPT_ARRAY_LENGTH
    if etype != ValueType.STRING:
        if not keep:
            r.skip(count * min_size, f"the array {key!r}")
            return SkippedValue(ValueType.ARRAY, count, etype)
        fmt = _SCALAR_FORMATS[etype]
        values = list(struct.unpack(f"<{count}{fmt[1]}", r.read(count * min_size, f"the array {key!r}")))
        return [bool(v) for v in values] if etype == ValueType.BOOL else values
    items: list[str] = []
    for i in range(count):
        n = r.string_length(MAX_STRING_BYTES, f"element {i} of {key!r}")
        if keep and r.keep(n):
            items.append(_decode(r.read(n, f"element {i} of {key!r}"), r.name, key))
        else:
            keep = False
            r.skip(n, f"element {i} of {key!r}")
    return items if keep else SkippedValue(ValueType.ARRAY, count, etype)


def _decode(raw: bytes, name: str, key: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid(name, f"a string in {key!r} is not UTF-8") from None


def read_gguf_header(path: Path, *, root: Path | None = None) -> GGUFInfo:
    """Parse and validate a GGUF file's header and tensor layout against its size."""
    name = display_path(path, root)
    size = path.stat().st_size
    with path.open("rb", buffering=1 << 16) as fh:
        r = _Reader(fh, size, name)
        magic = fh.read(4)
        if magic != GGUF_MAGIC:
            raise _invalid(name, f"not a GGUF file: it starts with {magic!r}, not {GGUF_MAGIC!r}")
        r.pos = 4
        version = r.u32("the version")
        if version not in SUPPORTED_VERSIONS:
            swapped = struct.unpack("<I", struct.pack(">I", version))[0]
            detail = (
                "a big-endian GGUF file; only little-endian files are served"
                if swapped in SUPPORTED_VERSIONS
                else "only versions 2 and 3 are supported (re-convert it with a current llama.cpp)"
            )
            raise InvalidModel(ErrorType.UNSUPPORTED_GGUF_VERSION, f"{name}: GGUF version {version}: {detail}")
        n_tensors = r.u64("the tensor count")
        n_kv = r.u64("the metadata count")
        # A key/value takes at least 8 + 4 + 1 bytes and a tensor info 8 + 4 + 4 + 8.
        r.check_claim(n_kv, MAX_KV_COUNT, n_kv * 13, f"the header claims {n_kv} metadata entries")
        r.check_claim(n_tensors, MAX_TENSOR_COUNT, n_kv * 13 + n_tensors * 24, f"the header claims {n_tensors} tensors")

        metadata: dict[str, Any] = {}
        types: dict[str, ValueType] = {}
        for i in range(n_kv):
            key = r.text(MAX_KEY_BYTES, f"metadata key {i}")
            if key in types:
                raise _invalid(name, f"metadata key {key!r} appears twice")
            vtype = _value_type(r.u32(f"the type of {key!r}"), name, key)
            metadata[key] = _read_value(r, vtype, key)
            types[key] = vtype

        alignment = _alignment(metadata, types, name)
        seen: set[str] = set()
        expected = 0
        parameters = 0
        data_end = 0
        per_type: dict[str, int] = {}
        for i in range(n_tensors):
            tname = r.text(MAX_TENSOR_NAME_BYTES, f"the name of tensor {i}")
            if tname in seen:
                raise _invalid(name, f"tensor {tname!r} appears twice")
            seen.add(tname)
            n_dims = r.u32(f"the dimension count of {tname!r}")
            if n_dims > GGML_MAX_DIMS:
                raise _invalid(name, f"tensor {tname!r} has {n_dims} dimensions, more than {GGML_MAX_DIMS}")
            dims = [r.u64(f"the dimensions of {tname!r}") for _ in range(n_dims)]
            type_id = r.u32(f"the type of {tname!r}")
            offset = r.u64(f"the offset of {tname!r}")
            ggml = GGML_TYPES.get(type_id)
            if ggml is None:
                raise InvalidModel(
                    ErrorType.UNSUPPORTED_GGUF_TYPE,
                    f"{name}: tensor {tname!r} has ggml type {type_id}, which this server does not know",
                )
            elements = math.prod(dims)
            if any(d >= 1 << 63 for d in dims) or elements >= 1 << 63:
                raise _invalid(name, f"tensor {tname!r} has dimensions {dims} too large to exist")
            if dims and dims[0] % ggml.block_size:
                raise _invalid(
                    name,
                    f"tensor {tname!r} ({ggml.name}) has rows of {dims[0]} elements, "
                    f"not a multiple of its block size {ggml.block_size}",
                )
            nbytes = elements // ggml.block_size * ggml.type_size
            if offset != expected:
                raise _invalid(
                    name,
                    f"tensor {tname!r} starts at data offset {offset}, expected {expected} "
                    "(tensors must follow each other in order, each aligned; this one "
                    + ("overlaps the previous one)" if offset < expected else "leaves a gap)"),
                )
            data_end = offset + nbytes
            expected = data_end + (-data_end % alignment)
            parameters += elements
            per_type[ggml.name] = per_type.get(ggml.name, 0) + elements
        header_end = r.pos

    data_offset = header_end + (-header_end % alignment)
    if data_offset + data_end > size:
        raise InvalidModel(
            ErrorType.TRUNCATED_GGUF,
            f"{name}: tensor data should end at byte {data_offset + data_end} but the file has only {size} "
            f"bytes; {data_offset + data_end - size} bytes are missing",
        )
    return GGUFInfo(
        path=path,
        file_size=size,
        version=version,
        alignment=alignment,
        data_offset=data_offset,
        data_end=data_offset + data_end,
        tensor_count=n_tensors,
        parameter_count=parameters,
        tensor_types=per_type,
        metadata=metadata,
        metadata_types=types,
    )


def _alignment(metadata: dict[str, Any], types: dict[str, ValueType], name: str) -> int:
    if "general.alignment" not in types:
        return DEFAULT_ALIGNMENT
    value = metadata["general.alignment"]
    if types["general.alignment"] != ValueType.UINT32 or value == 0 or value & (value - 1):
        raise _invalid(name, f"general.alignment must be a power of two stored as uint32, found {value!r}")
    return int(value)


def is_gguf_prefix(prefix: bytes) -> bool:
    return prefix[:4] == GGUF_MAGIC
