"""Small but valid model repositories for the local Hub server, and the registration that serves them.

Generators write real formats (safetensors, GGUF v3, diffusers layout) so code under test parses real
bytes. Tensor data is either deterministic random bytes or left as holes in a sparse file
(`fill="sparse"`), so a test can make a multi-GB model without holding or even writing it.

`register_repo` turns a directory of files into a commit in the layout `devstack.hub_server` reads:
it hashes every file once (git blob sha1, and sha256 for LFS files), decides LFS the way a Hub repo
does (a `filter=lfs` pattern of the repo's .gitattributes, or a size above the threshold), and
computes a deterministic commit sha from the git tree, parent, author, date and message.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import os
import random
import shutil
import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO, Literal

from devstack.hub_server import COMMITS_DIR, REPO_META, bump_generation, git_tree_oids, repo_dir

DEFAULT_LFS_THRESHOLD = 10 * 1024 * 1024
# Commit dates start here and advance a minute per commit, so commit shas are the same on every run.
BASE_DATE = datetime(2024, 1, 1, tzinfo=UTC)
Fill = Literal["random", "sparse"]

# The .gitattributes every new Hub model repo starts with (abridged to the weight formats used here).
GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in ("*.bin", "*.gguf", "*.h5", "*.onnx", "*.pt", "*.pth", "*.safetensors", "*.zip", "*tfevents*")
)

# -- hashing ---------------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob with this content (what the Hub shows as a small file's oid)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def git_blob_sha1_file(path: Path) -> str:
    size = Path(path).stat().st_size
    digest = hashlib.sha1(b"blob %d\0" % size)
    with Path(path).open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer committed in place of a large file; its blob sha1 is the file's git oid."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def lfs_patterns(gitattributes: str) -> list[str]:
    return [line.split()[0] for line in gitattributes.splitlines() if "filter=lfs" in line.split()[1:] and line.strip()]


def _matches(path: str, pattern: str) -> bool:
    # gitattributes: a pattern without a slash matches the base name at any depth.
    return fnmatch.fnmatch(path if "/" in pattern else path.rsplit("/", 1)[-1], pattern.lstrip("/"))


def file_manifest(files_dir: Path, lfs_threshold: int = DEFAULT_LFS_THRESHOLD) -> dict[str, dict[str, Any]]:
    """{path: {"size", "oid", "lfs"?: {"oid", "size", "pointerSize"}}} for every file under files_dir."""
    files_dir = Path(files_dir)
    attributes = files_dir / ".gitattributes"
    patterns = lfs_patterns(attributes.read_text()) if attributes.is_file() else []
    manifest: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in files_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(files_dir).as_posix()
        if rel.startswith(".git/"):
            continue
        size = path.stat().st_size
        if size >= lfs_threshold or any(_matches(rel, p) for p in patterns):
            sha = sha256_file(path)
            pointer = lfs_pointer(sha, size)
            manifest[rel] = {
                "size": size,
                "oid": git_blob_sha1(pointer),
                "lfs": {"oid": sha, "size": size, "pointerSize": len(pointer)},
            }
        else:
            manifest[rel] = {"size": size, "oid": git_blob_sha1_file(path)}
    return manifest


def commit_sha(tree: str, parent: str | None, author: str, date: datetime, message: str) -> str:
    """A real git commit object id; deterministic because the date is an input."""
    stamp = f"{author} <{author}@devstack.invalid> {int(date.timestamp())} +0000"
    body = f"tree {tree}\n" + (f"parent {parent}\n" if parent else "")
    body += f"author {stamp}\ncommitter {stamp}\n\n{message}\n"
    raw = body.encode()
    return hashlib.sha1(b"commit %d\0" % len(raw) + raw).hexdigest()


# -- registration ----------------------------------------------------------------------------------


def _iso(date: datetime) -> str:
    return date.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _write_json_atomic(path: Path, data: Any) -> None:
    # The server may read repo.json at any moment: it must only ever see a whole file.
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _token_users(tokens: Iterable[str] | Mapping[str, str]) -> dict[str, str]:
    if isinstance(tokens, Mapping):
        return dict(tokens)
    return {t: f"user-{hashlib.sha1(t.encode()).hexdigest()[:8]}" for t in tokens}


def register_repo(
    root: Path,
    repo_id: str,
    files_dir: Path,
    branch: str = "main",
    gated: bool | Literal["auto", "manual"] = False,
    private: bool = False,
    tokens: Iterable[str] | Mapping[str, str] | None = None,
    *,
    title: str | None = None,
    message: str = "",
    author: str = "devstack",
    date: datetime | None = None,
    tags: Sequence[str] = (),
    pipeline_tag: str | None = None,
    library_name: str | None = None,
    lfs_threshold: int = DEFAULT_LFS_THRESHOLD,
    move: bool = False,
) -> str:
    """Commit the files of `files_dir` to `branch` of `repo_id` under `root`; returns the commit sha.

    `tokens` are the bearer tokens with read access to a private or gated repo (a mapping gives their
    user names); None keeps the tokens of an existing repo. `move=True` renames files_dir into place,
    which keeps sparse files sparse; a copy would write out their holes.
    """
    root = Path(root)
    base = repo_dir(root, repo_id)
    meta_path = base / REPO_META
    meta: dict[str, Any] = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    if meta.get("moved_to"):
        raise ValueError(f"{repo_id} was renamed to {meta['moved_to']}")
    commits: dict[str, Any] = meta.setdefault("commits", {})
    branches: dict[str, str] = meta.setdefault("branches", {})
    parent = branches.get(branch) or (branches.get("main") if branch != "main" else None)

    files = file_manifest(files_dir, lfs_threshold)
    tree = git_tree_oids(files)[""]
    when = date or BASE_DATE + timedelta(minutes=len(commits))
    title = title or ("initial commit" if parent is None else f"update {branch}")
    text = f"{title}\n\n{message}" if message else title
    sha = commit_sha(tree, parent, author, when, text)

    dest = base / COMMITS_DIR / sha
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        if move:
            shutil.move(str(files_dir), str(dest))
        else:
            shutil.copytree(files_dir, dest, ignore=shutil.ignore_patterns(".git"))
    elif move:
        shutil.rmtree(files_dir)

    commits[sha] = {
        "parents": [parent] if parent else [],
        "title": title,
        "message": message,
        "author": author,
        "date": _iso(when),
        "files": files,
        "safetensors": _safetensors_summary(dest, files),
        "gguf": _gguf_summary(dest, files),
    }
    branches[branch] = sha
    meta.update(
        id=repo_id,
        private=private,
        gated=("auto" if gated is True else gated) or False,
        tags=list(dict.fromkeys([*meta.get("tags", []), *tags])),
    )
    meta.setdefault("created_at", commits[sha]["date"])
    if tokens is not None:
        meta["tokens"] = _token_users(tokens)
    meta.setdefault("tokens", {})
    if pipeline_tag is not None:
        meta["pipeline_tag"] = pipeline_tag
    if library_name is not None:
        meta["library_name"] = library_name
    _write_json_atomic(meta_path, meta)
    bump_generation(root)
    return sha


def set_branch(root: Path, repo_id: str, branch: str, sha: str) -> None:
    """Point a branch at an existing commit (a new branch, or a reset)."""
    meta_path = repo_dir(Path(root), repo_id) / REPO_META
    meta = json.loads(meta_path.read_text())
    if sha not in meta["commits"]:
        raise KeyError(sha)
    meta["branches"][branch] = sha
    _write_json_atomic(meta_path, meta)
    bump_generation(Path(root))


def rename_repo(root: Path, old_id: str, new_id: str) -> None:
    """Move a repo; the old id then answers with the Hub's relative 307 to the new one."""
    root = Path(root)
    old, new = repo_dir(root, old_id), repo_dir(root, new_id)
    new.parent.mkdir(parents=True, exist_ok=True)
    os.replace(old, new)
    meta = json.loads((new / REPO_META).read_text())
    meta["id"] = new_id
    _write_json_atomic(new / REPO_META, meta)
    old.mkdir(parents=True)
    _write_json_atomic(old / REPO_META, {"moved_to": new_id})
    bump_generation(root)


def delete_repo(root: Path, repo_id: str) -> None:
    """Delete a repo with all its commits (as deleting it on the Hub does)."""
    shutil.rmtree(repo_dir(Path(root), repo_id))
    bump_generation(Path(root))


def _safetensors_summary(snapshot: Path, files: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Hub's `safetensors` field: parameter counts per dtype over the repo's safetensors files."""
    counts: dict[str, int] = {}
    for name in files:
        if not name.endswith(".safetensors"):
            continue
        try:
            header = read_safetensors_header(snapshot / name)
        except (OSError, ValueError):
            return None  # a deliberately broken file: the Hub would not summarise it either
        for tensor in header.tensors.values():
            counts[tensor.dtype] = counts.get(tensor.dtype, 0) + math.prod(tensor.shape)
    return {"parameters": counts, "total": sum(counts.values())} if counts else None


def _gguf_summary(snapshot: Path, files: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Hub's `gguf` field, from the first GGUF file."""
    for name in sorted(files):
        if not name.endswith(".gguf"):
            continue
        try:
            gguf = read_gguf(snapshot / name)
        except (OSError, ValueError):
            return None
        arch = gguf.metadata.get("general.architecture")
        summary = {
            "total": sum(math.prod(t.shape) for t in gguf.tensors),
            "architecture": arch,
            "context_length": gguf.metadata.get(f"{arch}.context_length"),
        }
        if "tokenizer.chat_template" in gguf.metadata:
            summary["chat_template"] = gguf.metadata["tokenizer.chat_template"]
        return summary
    return None


# -- tensor data -----------------------------------------------------------------------------------


def _write_data(fh: BinaryIO, nbytes: int, fill: Fill, rng: random.Random) -> None:
    """Write `nbytes` of tensor data in bounded chunks, or skip them to leave a hole."""
    if fill == "sparse":
        fh.seek(nbytes, os.SEEK_CUR)
        return
    remaining = nbytes
    while remaining:
        step = min(remaining, 1 << 20)
        fh.write(rng.randbytes(step))
        remaining -= step


def _finish(fh: BinaryIO) -> None:
    # Holes at the end of a file only exist once the size is set.
    fh.truncate(fh.tell())


# -- safetensors -----------------------------------------------------------------------------------

SAFETENSORS_DTYPES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}
TORCH_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * SAFETENSORS_DTYPES[self.dtype]


def write_safetensors(
    path: Path,
    tensors: Sequence[TensorSpec],
    *,
    fill: Fill = "random",
    seed: int = 0,
    metadata: Mapping[str, str] | None = None,
) -> int:
    """Write a safetensors file: u64 header length, JSON header padded to 8 bytes, contiguous data."""
    header: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # as the reference implementation pads
    rng = random.Random(seed)
    with Path(path).open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        for t in tensors:
            _write_data(fh, t.nbytes, fill, rng)
        _finish(fh)
    return 8 + len(raw) + offset


@dataclass
class SafetensorsHeader:
    header_size: int
    metadata: dict[str, str]
    tensors: dict[str, TensorSpec]
    offsets: dict[str, tuple[int, int]]

    @property
    def data_start(self) -> int:
        return 8 + self.header_size


def read_safetensors_header(path: Path) -> SafetensorsHeader:
    """Parse and validate a safetensors header against the file: dtypes, shapes, contiguous offsets, size."""
    size = Path(path).stat().st_size
    with Path(path).open("rb") as fh:
        prefix = fh.read(8)
        if len(prefix) != 8:
            raise ValueError(f"{path}: shorter than a safetensors header")
        (n,) = struct.unpack("<Q", prefix)
        if n > 100_000_000 or 8 + n > size:
            raise ValueError(f"{path}: header length {n} does not fit the file")
        try:
            header = json.loads(fh.read(n))
        except ValueError as exc:
            raise ValueError(f"{path}: header is not JSON") from exc
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not an object")
    metadata = header.pop("__metadata__", None) or {}
    tensors: dict[str, TensorSpec] = {}
    offsets: dict[str, tuple[int, int]] = {}
    for name, info in header.items():
        dtype, shape, (begin, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
        if dtype not in SAFETENSORS_DTYPES:
            raise ValueError(f"{path}: {name} has unknown dtype {dtype}")
        spec = TensorSpec(name, dtype, shape)
        if end - begin != spec.nbytes:
            raise ValueError(f"{path}: {name} spans {end - begin} bytes, its shape needs {spec.nbytes}")
        tensors[name], offsets[name] = spec, (begin, end)
    expected = 0
    for begin, end in sorted(offsets.values()):
        if begin != expected:
            raise ValueError(f"{path}: tensor data is not contiguous at offset {begin}")
        expected = end
    if 8 + n + expected != size:
        raise ValueError(f"{path}: data ends at {8 + n + expected}, file has {size} bytes")
    return SafetensorsHeader(n, metadata, tensors, offsets)


# -- GGUF ------------------------------------------------------------------------------------------

# Value types of GGUF metadata.
GGUF_UINT8, GGUF_INT8, GGUF_UINT16, GGUF_INT16, GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32 = range(7)
GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64 = range(7, 13)
_GGUF_SCALARS = {
    GGUF_UINT8: "<B", GGUF_INT8: "<b", GGUF_UINT16: "<H", GGUF_INT16: "<h", GGUF_UINT32: "<I", GGUF_INT32: "<i",
    GGUF_FLOAT32: "<f", GGUF_BOOL: "<?", GGUF_UINT64: "<Q", GGUF_INT64: "<q", GGUF_FLOAT64: "<d",
}  # fmt: skip
# ggml tensor types: name -> (type id, elements per block, bytes per block, llama file_type).
GGML_TYPES = {"F32": (0, 1, 4, 0), "F16": (1, 1, 2, 1), "Q8_0": (8, 32, 34, 7), "BF16": (30, 1, 2, 32)}
_GGML_BY_ID = {v[0]: (k, v[1], v[2]) for k, v in GGML_TYPES.items()}
GGUF_ALIGNMENT = 32


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    shape: tuple[int, ...]  # ne[0] first, as GGUF stores it
    ggml_type: str
    offset: int = 0  # from the start of the data section

    @property
    def nbytes(self) -> int:
        _, per_block, block_bytes = _GGML_BY_ID[GGML_TYPES[self.ggml_type][0]]
        return math.prod(self.shape) // per_block * block_bytes


@dataclass
class GGUFFile:
    version: int
    metadata: dict[str, Any]
    tensors: list[GGUFTensor]
    data_offset: int
    types: dict[str, int] = field(default_factory=dict)  # metadata key -> GGUF value type


def _gguf_string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def _gguf_value(vtype: int, value: Any) -> bytes:
    if vtype == GGUF_STRING:
        return _gguf_string(value)
    if vtype == GGUF_ARRAY:
        etype, items = value
        return struct.pack("<IQ", etype, len(items)) + b"".join(_gguf_value(etype, v) for v in items)
    return struct.pack(_GGUF_SCALARS[vtype], value)


def write_gguf(
    path: Path,
    metadata: Sequence[tuple[str, int, Any]],
    tensors: Sequence[GGUFTensor],
    *,
    fill: Fill = "random",
    seed: int = 0,
) -> None:
    """Write a GGUF v3 file: header, typed metadata, tensor infos, then data aligned to 32 bytes."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata) + 1))
    out += _gguf_string("general.alignment") + struct.pack("<I", GGUF_UINT32) + struct.pack("<I", GGUF_ALIGNMENT)
    for key, vtype, value in metadata:
        out += _gguf_string(key) + struct.pack("<I", vtype) + _gguf_value(vtype, value)
    offset = 0
    for t in tensors:
        out += _gguf_string(t.name) + struct.pack("<I", len(t.shape))
        out += struct.pack(f"<{len(t.shape)}Q", *t.shape)
        out += struct.pack("<IQ", GGML_TYPES[t.ggml_type][0], offset)
        offset += t.nbytes + (-t.nbytes % GGUF_ALIGNMENT)
    out += b"\0" * (-len(out) % GGUF_ALIGNMENT)
    rng = random.Random(seed)
    with Path(path).open("wb") as fh:
        fh.write(out)
        for t in tensors:
            _write_data(fh, t.nbytes, fill, rng)
            fh.write(b"\0" * (-t.nbytes % GGUF_ALIGNMENT))
        _finish(fh)


class _Reader:
    def __init__(self, fh: BinaryIO):
        self.fh = fh

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        raw = self.fh.read(size)
        if len(raw) != size:
            raise ValueError("GGUF file ends inside its header")
        return struct.unpack(fmt, raw)[0]

    def string(self) -> str:
        n = self.take("<Q")
        if n > 1 << 24:
            raise ValueError(f"GGUF string of {n} bytes")
        raw = self.fh.read(n)
        if len(raw) != n:
            raise ValueError("GGUF file ends inside a string")
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype == GGUF_STRING:
            return self.string()
        if vtype == GGUF_ARRAY:
            etype, count = self.take("<I"), self.take("<Q")
            return [self.value(etype) for _ in range(count)]
        if vtype not in _GGUF_SCALARS:
            raise ValueError(f"unknown GGUF value type {vtype}")
        return self.take(_GGUF_SCALARS[vtype])


def read_gguf(path: Path) -> GGUFFile:
    """Parse a GGUF (v2/v3) header and check that every tensor lies aligned inside the file."""
    size = Path(path).stat().st_size
    with Path(path).open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file (bad magic)")
        r = _Reader(fh)
        version = r.take("<I")
        if version not in (2, 3):
            raise ValueError(f"{path}: unsupported GGUF version {version}")
        n_tensors, n_kv = r.take("<Q"), r.take("<Q")
        metadata: dict[str, Any] = {}
        types: dict[str, int] = {}
        for _ in range(n_kv):
            key = r.string()
            types[key] = r.take("<I")
            metadata[key] = r.value(types[key])
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            dims = tuple(r.take("<Q") for _ in range(r.take("<I")))
            type_id, offset = r.take("<I"), r.take("<Q")
            if type_id not in _GGML_BY_ID:
                raise ValueError(f"{path}: tensor {name} has a ggml type {type_id} this reader does not know")
            tensors.append(GGUFTensor(name, dims, _GGML_BY_ID[type_id][0], offset))
        alignment = int(metadata.get("general.alignment", GGUF_ALIGNMENT))
        data_offset = fh.tell() + (-fh.tell() % alignment)
    for t in tensors:
        if t.offset % alignment or data_offset + t.offset + t.nbytes > size:
            raise ValueError(f"{path}: tensor {t.name} is misaligned or runs past the end of the file")
    return GGUFFile(version, metadata, tensors, data_offset, types)


# -- generators ------------------------------------------------------------------------------------


@dataclass
class GeneratedRepo:
    repo_id: str
    commit: str
    files: list[str]
    snapshot: Path  # where the server keeps this commit's files


def _staging(root: Path) -> Path:
    # Inside root, so the final move is a rename on the same file system (sparse files stay sparse).
    path = Path(root) / ".staging" / uuid.uuid4().hex
    path.mkdir(parents=True)
    return path


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def _readme(card: Mapping[str, Any], title: str) -> str:
    lines = ["---"]
    for key, value in card.items():
        if value is None:
            continue
        if isinstance(value, list | tuple):
            lines.append(f"{key}:")
            lines.extend(f"- {v}" for v in value)
        else:
            lines.append(f"{key}: {value}")
    return "\n".join([*lines, "---", "", f"# {title}", "", "Generated by devstack for tests.", ""])


def _vocab(size: int) -> list[str]:
    specials = ["<unk>", "<s>", "</s>"]
    return specials + [f"tok{i}" for i in range(max(0, size - len(specials)))]


def _tokenizer_json(vocab: list[str]) -> dict[str, Any]:
    """A WordLevel tokenizer in the `tokenizers` serialisation format."""
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, t in enumerate(vocab[:3])
    ]  # fmt: skip
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(vocab)}, "unk_token": "<unk>"},
    }


CHAT_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"


def llama_tensors(
    hidden_size: int,
    intermediate_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    vocab_size: int,
    dtype: str,
) -> list[TensorSpec]:
    """The tensors of a Llama-architecture checkpoint, with Hugging Face names and shapes."""
    kv = hidden_size // num_attention_heads * num_key_value_heads
    tensors = [TensorSpec("model.embed_tokens.weight", dtype, (vocab_size, hidden_size))]
    for i in range(num_hidden_layers):
        p = f"model.layers.{i}."
        tensors += [
            TensorSpec(p + "self_attn.q_proj.weight", dtype, (hidden_size, hidden_size)),
            TensorSpec(p + "self_attn.k_proj.weight", dtype, (kv, hidden_size)),
            TensorSpec(p + "self_attn.v_proj.weight", dtype, (kv, hidden_size)),
            TensorSpec(p + "self_attn.o_proj.weight", dtype, (hidden_size, hidden_size)),
            TensorSpec(p + "mlp.gate_proj.weight", dtype, (intermediate_size, hidden_size)),
            TensorSpec(p + "mlp.up_proj.weight", dtype, (intermediate_size, hidden_size)),
            TensorSpec(p + "mlp.down_proj.weight", dtype, (hidden_size, intermediate_size)),
            TensorSpec(p + "input_layernorm.weight", dtype, (hidden_size,)),
            TensorSpec(p + "post_attention_layernorm.weight", dtype, (hidden_size,)),
        ]
    tensors += [
        TensorSpec("model.norm.weight", dtype, (hidden_size,)),
        TensorSpec("lm_head.weight", dtype, (vocab_size, hidden_size)),
    ]
    return tensors


def _shards(tensors: Sequence[TensorSpec], num_shards: int) -> list[list[TensorSpec]]:
    """Split tensors in order into `num_shards` groups of roughly equal byte size, none empty."""
    if not 1 <= num_shards <= len(tensors):
        raise ValueError(f"num_shards must be between 1 and {len(tensors)}")
    total = sum(t.nbytes for t in tensors)
    shards: list[list[TensorSpec]] = [[]]
    done = 0
    for i, t in enumerate(tensors):
        left_tensors, left_shards = len(tensors) - i, num_shards - len(shards)
        full = done >= total * len(shards) / num_shards
        if shards[-1] and left_shards and (full or left_tensors <= left_shards):
            shards.append([])
        shards[-1].append(t)
        done += t.nbytes
    return shards


def make_safetensors_repo(
    root: Path,
    repo_id: str,
    *,
    num_shards: int = 2,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int | None = None,
    vocab_size: int = 128,
    max_position_embeddings: int = 2048,
    dtype: str = "F16",
    architecture: str = "LlamaForCausalLM",
    model_type: str = "llama",
    fill: Fill = "random",
    seed: int = 0,
    license: str = "apache-2.0",
    card_tags: Sequence[str] = (),
    extra_files: Mapping[str, bytes] | None = None,
    **register: Any,
) -> GeneratedRepo:
    """A transformers-style causal LM repo: config, tokenizer, safetensors shards (+ index when sharded).

    The defaults make a few hundred KB. Llama-7B shapes (4096 / 11008 / 32 layers / 32000 vocab) make
    about 13.5 GB in F16; with fill="sparse" that costs almost no disk and no memory. Keyword arguments
    beyond these go to `register_repo` (branch, gated, private, tokens, lfs_threshold, ...).
    """
    files = _staging(root)
    kv_heads = num_key_value_heads or num_attention_heads
    tensors = llama_tensors(
        hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, kv_heads, vocab_size, dtype
    )
    vocab = _vocab(vocab_size)
    (files / ".gitattributes").write_text(GITATTRIBUTES)
    card = {"license": license, "library_name": "transformers", "pipeline_tag": "text-generation",
            "tags": list(card_tags) or None}  # fmt: skip
    (files / "README.md").write_text(_readme(card, repo_id))
    _write_json(
        files / "config.json",
        {
            "architectures": [architecture],
            "model_type": model_type,
            "hidden_size": hidden_size,
            "intermediate_size": intermediate_size,
            "num_hidden_layers": num_hidden_layers,
            "num_attention_heads": num_attention_heads,
            "num_key_value_heads": kv_heads,
            "vocab_size": vocab_size,
            "max_position_embeddings": max_position_embeddings,
            "torch_dtype": TORCH_DTYPES.get(dtype, "float16"),
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "bos_token_id": 1,
            "eos_token_id": 2,
            "tie_word_embeddings": False,
            "transformers_version": "4.44.0",
        },
    )
    _write_json(files / "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2, "max_length": 256})
    _write_json(files / "tokenizer.json", _tokenizer_json(vocab))
    _write_json(
        files / "tokenizer_config.json",
        {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "model_max_length": max_position_embeddings,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "chat_template": CHAT_TEMPLATE,
            "clean_up_tokenization_spaces": False,
        },
    )
    _write_json(files / "special_tokens_map.json", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    groups = _shards(tensors, num_shards)
    if num_shards == 1:
        write_safetensors(files / "model.safetensors", groups[0], fill=fill, seed=seed)
    else:
        weight_map: dict[str, str] = {}
        for i, group in enumerate(groups, start=1):
            name = f"model-{i:05d}-of-{num_shards:05d}.safetensors"
            write_safetensors(files / name, group, fill=fill, seed=seed + i)
            weight_map.update({t.name: name for t in group})
        total = sum(t.nbytes for t in tensors)
        _write_json(
            files / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map}
        )
    for name, data in (extra_files or {}).items():
        (files / name).parent.mkdir(parents=True, exist_ok=True)
        (files / name).write_bytes(data)
    return _register_generated(root, repo_id, files, register)


def _register_generated(root: Path, repo_id: str, files: Path, register: dict[str, Any]) -> GeneratedRepo:
    names = sorted(p.relative_to(files).as_posix() for p in files.rglob("*") if p.is_file())
    sha = register_repo(root, repo_id, files, move=True, **register)
    return GeneratedRepo(repo_id, sha, names, repo_dir(Path(root), repo_id) / COMMITS_DIR / sha)


def make_gguf_repo(
    root: Path,
    repo_id: str,
    *,
    architecture: str = "llama",
    model_name: str | None = None,
    context_length: int = 2048,
    embedding_length: int = 64,
    block_count: int = 2,
    feed_forward_length: int = 128,
    head_count: int = 4,
    head_count_kv: int | None = None,
    vocab_size: int = 64,
    quantizations: Sequence[str] = ("F16",),
    fill: Fill = "random",
    seed: int = 0,
    **register: Any,
) -> GeneratedRepo:
    """A llama.cpp-style repo: one GGUF v3 file per quantization (F32, F16, BF16 or Q8_0) and a card."""
    files = _staging(root)
    name = model_name or repo_id.rsplit("/", 1)[-1]
    kv_heads = head_count_kv or head_count
    kv = embedding_length // head_count * kv_heads
    vocab = _vocab(vocab_size)
    (files / ".gitattributes").write_text(GITATTRIBUTES)
    card = {"license": "apache-2.0", "pipeline_tag": "text-generation", "tags": ["gguf", architecture]}
    (files / "README.md").write_text(_readme(card, name))
    for i, quant in enumerate(quantizations):
        if quant not in GGML_TYPES:
            raise ValueError(f"unsupported quantization {quant}; choose from {sorted(GGML_TYPES)}")
        per_block = GGML_TYPES[quant][1]
        if embedding_length % per_block or feed_forward_length % per_block:
            raise ValueError(f"{quant} needs row sizes that are multiples of {per_block}")
        a = architecture
        metadata: list[tuple[str, int, Any]] = [
            ("general.architecture", GGUF_STRING, a),
            ("general.name", GGUF_STRING, name),
            ("general.file_type", GGUF_UINT32, GGML_TYPES[quant][3]),
            ("general.quantization_version", GGUF_UINT32, 2),
            (f"{a}.context_length", GGUF_UINT32, context_length),
            (f"{a}.embedding_length", GGUF_UINT32, embedding_length),
            (f"{a}.block_count", GGUF_UINT32, block_count),
            (f"{a}.feed_forward_length", GGUF_UINT32, feed_forward_length),
            (f"{a}.attention.head_count", GGUF_UINT32, head_count),
            (f"{a}.attention.head_count_kv", GGUF_UINT32, kv_heads),
            (f"{a}.attention.layer_norm_rms_epsilon", GGUF_FLOAT32, 1e-5),
            (f"{a}.rope.dimension_count", GGUF_UINT32, embedding_length // head_count),
            ("tokenizer.ggml.model", GGUF_STRING, "llama"),
            ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, vocab)),
            ("tokenizer.ggml.scores", GGUF_ARRAY, (GGUF_FLOAT32, [0.0] * len(vocab))),
            ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_INT32, [2, 3, 3] + [1] * (len(vocab) - 3))),
            ("tokenizer.ggml.unknown_token_id", GGUF_UINT32, 0),
            ("tokenizer.ggml.bos_token_id", GGUF_UINT32, 1),
            ("tokenizer.ggml.eos_token_id", GGUF_UINT32, 2),
            ("tokenizer.chat_template", GGUF_STRING, CHAT_TEMPLATE),
        ]
        # Norms stay F32 in every llama.cpp quantization; matrices take the file's type.
        tensors = [GGUFTensor("token_embd.weight", (embedding_length, vocab_size), quant)]
        for b in range(block_count):
            p = f"blk.{b}."
            tensors += [
                GGUFTensor(p + "attn_norm.weight", (embedding_length,), "F32"),
                GGUFTensor(p + "attn_q.weight", (embedding_length, embedding_length), quant),
                GGUFTensor(p + "attn_k.weight", (embedding_length, kv), quant),
                GGUFTensor(p + "attn_v.weight", (embedding_length, kv), quant),
                GGUFTensor(p + "attn_output.weight", (embedding_length, embedding_length), quant),
                GGUFTensor(p + "ffn_norm.weight", (embedding_length,), "F32"),
                GGUFTensor(p + "ffn_gate.weight", (embedding_length, feed_forward_length), quant),
                GGUFTensor(p + "ffn_up.weight", (embedding_length, feed_forward_length), quant),
                GGUFTensor(p + "ffn_down.weight", (feed_forward_length, embedding_length), quant),
            ]
        tensors += [
            GGUFTensor("output_norm.weight", (embedding_length,), "F32"),
            GGUFTensor("output.weight", (embedding_length, vocab_size), quant),
        ]
        write_gguf(files / f"{name}-{quant}.gguf", metadata, tensors, fill=fill, seed=seed + i)
    return _register_generated(root, repo_id, files, register)


def make_diffusers_repo(
    root: Path,
    repo_id: str,
    *,
    sample_size: int = 32,
    channels: int = 32,
    text_hidden_size: int = 32,
    vocab_size: int = 64,
    fill: Fill = "random",
    seed: int = 0,
    **register: Any,
) -> GeneratedRepo:
    """A Stable Diffusion-style pipeline: model_index.json and unet / vae / text_encoder / tokenizer /
    scheduler folders, each with its config and (for the models) safetensors weights."""
    files = _staging(root)
    version = "0.27.0"
    (files / ".gitattributes").write_text(GITATTRIBUTES)
    card = {"license": "apache-2.0", "library_name": "diffusers", "pipeline_tag": "text-to-image"}
    (files / "README.md").write_text(_readme(card, repo_id))
    _write_json(
        files / "model_index.json",
        {
            "_class_name": "StableDiffusionPipeline",
            "_diffusers_version": version,
            "feature_extractor": [None, None],
            "requires_safety_checker": False,
            "safety_checker": [None, None],
            "scheduler": ["diffusers", "PNDMScheduler"],
            "text_encoder": ["transformers", "CLIPTextModel"],
            "tokenizer": ["transformers", "CLIPTokenizer"],
            "unet": ["diffusers", "UNet2DConditionModel"],
            "vae": ["diffusers", "AutoencoderKL"],
        },
    )
    c = channels
    _write_json(
        files / "unet" / "config.json",
        {
            "_class_name": "UNet2DConditionModel",
            "_diffusers_version": version,
            "sample_size": sample_size // 8,
            "in_channels": 4,
            "out_channels": 4,
            "block_out_channels": [c, c * 2],
            "layers_per_block": 1,
            "cross_attention_dim": text_hidden_size,
            "attention_head_dim": 8,
            "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
            "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
        },
    )
    write_safetensors(
        files / "unet" / "diffusion_pytorch_model.safetensors",
        [TensorSpec("conv_in.weight", "F32", (c, 4, 3, 3)), TensorSpec("conv_in.bias", "F32", (c,)),
         TensorSpec("conv_out.weight", "F32", (4, c, 3, 3)), TensorSpec("conv_out.bias", "F32", (4,))],
        fill=fill, seed=seed,
    )  # fmt: skip
    _write_json(
        files / "vae" / "config.json",
        {
            "_class_name": "AutoencoderKL",
            "_diffusers_version": version,
            "sample_size": sample_size,
            "in_channels": 3,
            "out_channels": 3,
            "latent_channels": 4,
            "block_out_channels": [c],
            "layers_per_block": 1,
            "down_block_types": ["DownEncoderBlock2D"],
            "up_block_types": ["UpDecoderBlock2D"],
        },
    )
    write_safetensors(
        files / "vae" / "diffusion_pytorch_model.safetensors",
        [TensorSpec("encoder.conv_in.weight", "F32", (c, 3, 3, 3)),
         TensorSpec("decoder.conv_out.weight", "F32", (3, c, 3, 3))],
        fill=fill, seed=seed + 1,
    )  # fmt: skip
    _write_json(
        files / "text_encoder" / "config.json",
        {
            "architectures": ["CLIPTextModel"],
            "model_type": "clip_text_model",
            "hidden_size": text_hidden_size,
            "intermediate_size": text_hidden_size * 2,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "max_position_embeddings": 77,
            "vocab_size": vocab_size,
            "torch_dtype": "float32",
        },
    )
    write_safetensors(
        files / "text_encoder" / "model.safetensors",
        [TensorSpec("text_model.embeddings.token_embedding.weight", "F32", (vocab_size, text_hidden_size)),
         TensorSpec("text_model.embeddings.position_embedding.weight", "F32", (77, text_hidden_size))],
        fill=fill, seed=seed + 2,
    )  # fmt: skip
    vocab = {
        t: i for i, t in enumerate(["<|startoftext|>", "<|endoftext|>", *[f"t{i}</w>" for i in range(vocab_size - 2)]])
    }
    _write_json(files / "tokenizer" / "vocab.json", vocab)
    (files / "tokenizer" / "merges.txt").write_text("#version: 0.2\n")
    _write_json(
        files / "tokenizer" / "tokenizer_config.json",
        {"tokenizer_class": "CLIPTokenizer", "model_max_length": 77, "bos_token": "<|startoftext|>",
         "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"},
    )  # fmt: skip
    _write_json(
        files / "tokenizer" / "special_tokens_map.json",
        {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"},
    )
    _write_json(
        files / "scheduler" / "scheduler_config.json",
        {"_class_name": "PNDMScheduler", "_diffusers_version": version, "num_train_timesteps": 1000,
         "beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear", "skip_prk_steps": True},
    )  # fmt: skip
    return _register_generated(root, repo_id, files, register)


def make_blob_repo(
    root: Path, repo_id: str, files: Mapping[str, int | bytes], *, fill: Fill = "random", seed: int = 0,
    **register: Any,
) -> GeneratedRepo:  # fmt: skip
    """A repo of arbitrary files: bytes as given, or an int for that many generated bytes."""
    staging = _staging(root)
    rng = random.Random(seed)
    for name, content in files.items():
        path = staging / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
            continue
        with path.open("wb") as fh:
            _write_data(fh, content, fill, rng)
            _finish(fh)
    return _register_generated(root, repo_id, staging, register)
