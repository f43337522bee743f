"""Pure builders of ModelPack (CNCF model-spec v0.0.7) config blobs and manifests.

No I/O here: the activities hash and upload files, these functions only turn the list of
uploaded layers and the model metadata into bytes. Output is deterministic (layers sorted by
path, keys sorted, no wall-clock timestamp unless the caller passes one), so publishing the same
files with the same metadata again yields byte-identical config and manifest, hence the same
manifest digest: a retried or re-run publish is a no-op at the registry.
"""

from __future__ import annotations

import hashlib
import itertools
import posixpath
import re
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servingops.api_models.canonical import canonical_json
from servingops.clients.oci import media_types as mt
from servingops.clients.oci.media_types import FileRole

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def normalize_digest(value: str) -> str:
    """Accept `<hex>` or `sha256:<hex>` and return the OCI form `sha256:<hex>`."""
    hexpart = value.removeprefix("sha256:").lower()
    if not _HEX64.match(hexpart):
        raise ValueError(f"not a sha256 digest: {value!r}")
    return "sha256:" + hexpart


def normalize_filepath(path: str) -> str:
    """A relative POSIX path inside the model directory; anything escaping it is refused.

    The path ends up in an annotation that pullers use to write the file, so an absolute path
    or `..` here would let an artifact write outside the directory it is pulled into.
    """
    if not path or "\\" in path or "\x00" in path:
        raise ValueError(f"bad file path {path!r}")
    norm = posixpath.normpath(path)
    if norm.startswith("/") or norm == "." or norm == ".." or norm.startswith("../"):
        raise ValueError(f"file path {path!r} escapes the model directory")
    return norm


class LayerFile(BaseModel):
    """One file of the model directory, already uploaded (or about to be) as one raw layer."""

    model_config = ConfigDict(frozen=True)

    path: str
    """Path relative to the model directory, with `/` separators; becomes the filepath annotation."""
    role: FileRole
    sha256: str
    """Digest of the file's bytes, `<hex>` or `sha256:<hex>`."""
    size: int = Field(ge=0)
    role_untested: bool = False
    """True when the role was guessed from the file name; sets the spec's `mediatype.untested`."""

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return normalize_filepath(value)

    @field_validator("sha256")
    @classmethod
    def _digest(cls, value: str) -> str:
        return normalize_digest(value)

    @property
    def media_type(self) -> str:
        return mt.layer_media_type(self.role)


class ModelPackMeta(BaseModel):
    """Model metadata for the config blob; field aliases are the spec's JSON names.

    `created_at` is deliberately optional with no default: a timestamp taken at publish time
    would change the config digest on every re-run. Pass a stable one (the source revision's
    commit time, the Model's creationTimestamp) or none.
    """

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    name: str = Field(min_length=1)
    family: str | None = None
    version: str | None = None
    architecture: str | None = None
    format: str | None = None
    param_size: str | None = Field(default=None, alias="paramSize", pattern=r"^\d+(\.\d)?[QqTtBbMmKk]$")
    precision: str | None = None
    quantization: str | None = None
    capabilities: dict[str, Any] | None = None
    """The spec's ModelCapabilities object (inputTypes, outputTypes, reasoning, toolUsage, ...)."""
    created_at: datetime | None = Field(default=None, alias="createdAt")
    authors: list[str] | None = None
    vendor: str | None = None
    title: str | None = None
    description: str | None = None
    doc_url: str | None = Field(default=None, alias="docURL")
    source_url: str | None = Field(default=None, alias="sourceURL")
    revision: str | None = None
    licenses: list[str] | None = None


class Descriptor(BaseModel):
    media_type: str
    digest: str
    size: int

    def as_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


class BuiltArtifact(BaseModel):
    """The two documents of a ModelPack artifact, as the exact bytes to upload."""

    config: bytes
    config_descriptor: Descriptor
    manifest: bytes
    manifest_descriptor: Descriptor
    layers: list[LayerFile]
    """In manifest order (sorted by path)."""

    @property
    def total_size(self) -> int:
        """Bytes a full pull transfers: manifest + config + every layer."""
        return self.manifest_descriptor.size + self.config_descriptor.size + sum(x.size for x in self.layers)


def _rfc3339(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def sorted_layers(layers: list[LayerFile]) -> list[LayerFile]:
    """Manifest order: by path, so the order files were listed or uploaded in does not matter."""
    ordered = sorted(layers, key=lambda layer: layer.path)
    for before, after in itertools.pairwise(ordered):
        if before.path == after.path:
            raise ValueError(f"file path {after.path!r} appears twice")
    if not ordered:
        raise ValueError("a model artifact needs at least one layer")
    return ordered


def build_config(layers: list[LayerFile], meta: ModelPackMeta) -> bytes:
    """The `application/vnd.cncf.model.config.v1+json` blob."""
    ordered = sorted_layers(layers)
    descriptor = _drop_none({
        "createdAt": _rfc3339(meta.created_at) if meta.created_at else None,
        "authors": meta.authors,
        "family": meta.family,
        "name": meta.name,
        "docURL": meta.doc_url,
        "sourceURL": meta.source_url,
        "version": meta.version,
        "revision": meta.revision,
        "vendor": meta.vendor,
        "licenses": meta.licenses,
        "title": meta.title,
        "description": meta.description,
    })
    config = _drop_none({
        "architecture": meta.architecture,
        "format": meta.format,
        "paramSize": meta.param_size,
        "precision": meta.precision,
        "quantization": meta.quantization,
        "capabilities": meta.capabilities,
    })
    document = {
        "descriptor": descriptor,
        "config": config,
        # Raw layers are the uncompressed content itself, so each DiffID equals the layer digest.
        "modelfs": {"type": mt.MODELFS_TYPE_LAYERS, "diffIds": [layer.sha256 for layer in ordered]},
    }
    return canonical_json(document)


def layer_descriptor(layer: LayerFile) -> dict[str, Any]:
    annotations = {
        mt.ANNOTATION_FILEPATH: layer.path,
        mt.ANNOTATION_TITLE: layer.path,
    }
    if layer.role_untested:
        annotations[mt.ANNOTATION_MEDIATYPE_UNTESTED] = "true"
    return {
        "mediaType": layer.media_type,
        "digest": layer.sha256,
        "size": layer.size,
        "annotations": annotations,
    }


def build_artifact(layers: list[LayerFile], meta: ModelPackMeta,
                   annotations: dict[str, str] | None = None) -> BuiltArtifact:
    """Config blob and OCI image manifest (with artifactType) for these layers."""
    ordered = sorted_layers(layers)
    config = build_config(ordered, meta)
    config_desc = Descriptor(media_type=mt.MODEL_CONFIG, digest=sha256_digest(config), size=len(config))
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": mt.OCI_MANIFEST,
        "artifactType": mt.ARTIFACT_TYPE_MODEL_MANIFEST,
        "config": config_desc.as_json(),
        "layers": [layer_descriptor(layer) for layer in ordered],
    }
    if annotations:
        manifest["annotations"] = dict(annotations)
    body = canonical_json(manifest)
    return BuiltArtifact(
        config=config,
        config_descriptor=config_desc,
        manifest=body,
        manifest_descriptor=Descriptor(media_type=mt.OCI_MANIFEST, digest=sha256_digest(body), size=len(body)),
        layers=ordered,
    )


# -- file roles ------------------------------------------------------------------------------

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".ggml", ".onnx", ".onnx_data",
                    ".h5", ".msgpack", ".tflite", ".pb", ".npz", ".mlmodel", ".engine", ".plan")
_WEIGHT_CONFIG_NAMES = frozenset({
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt",
    "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "preprocessor_config.json",
    "processor_config.json", "chat_template.json", "chat_template.jinja", "params.json",
    "modelfile",
})
_DOC_SUFFIXES = (".md", ".rst", ".txt", ".pdf", ".html")
_DOC_PREFIXES = ("readme", "license", "licence", "notice", "copying", "use_policy", "model_card")
_CODE_SUFFIXES = (".py", ".sh", ".ipynb", ".js", ".ts", ".go", ".rs", ".c", ".cc", ".cpp", ".h", ".cu", ".java")
_DATASET_SUFFIXES = (".parquet", ".arrow", ".csv", ".tsv", ".jsonl")


def role_for_path(path: str) -> tuple[FileRole, bool]:
    """Guess a file's role from its name: (role, untested).

    `untested` is False for names the ecosystem agrees on (weights by extension, the Hugging Face
    config and tokenizer files) and True when we fell back to a guess, which the spec asks us to
    flag with the `org.cncf.model.file.mediatype.untested` annotation.
    """
    name = posixpath.basename(path).lower()
    if name in _WEIGHT_CONFIG_NAMES or name.endswith(".index.json"):
        return FileRole.WEIGHT_CONFIG, False
    if name.endswith(_WEIGHT_SUFFIXES):
        return FileRole.WEIGHT, False
    if name.startswith(_DOC_PREFIXES):
        return FileRole.DOC, False
    if name.endswith(_CODE_SUFFIXES):
        return FileRole.CODE, False
    if name.endswith(_DOC_SUFFIXES):
        return FileRole.DOC, False
    if name.endswith(_DATASET_SUFFIXES):
        return FileRole.DATASET, True
    if name.endswith((".json", ".yaml", ".yml", ".jinja")):
        return FileRole.WEIGHT_CONFIG, True
    return FileRole.DOC, True
