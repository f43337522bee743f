"""Every media type and annotation key servingops writes into OCI registries, in one place.

The ModelPack values are copied from the CNCF ModelPack model-spec v0.0.7
(`specs-go/v1/mediatype.go` and `specs-go/v1/annotations.go` at tag v0.0.7); the OCI values from
the OCI image spec. Nothing else in the code base spells these strings, so a spec bump is a
change to this module only.
"""

from __future__ import annotations

from enum import StrEnum

# -- OCI image spec --------------------------------------------------------------------------

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
"""The empty descriptor's media type: the config of an artifact that has none (a catalog index)."""

# What we send as Accept when reading a manifest: anything a registry may hold under a reference.
MANIFEST_ACCEPT = (OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST_V2, DOCKER_MANIFEST_LIST)

ANNOTATION_TITLE = "org.opencontainers.image.title"
"""Set next to the ModelPack filepath because stock ORAS clients (oras-py, oras CLI) name pulled
files after the title: with it a plain `oras pull` recreates the model directory."""

# -- CNCF ModelPack model-spec v0.0.7 --------------------------------------------------------

ARTIFACT_TYPE_MODEL_MANIFEST = "application/vnd.cncf.model.manifest.v1+json"
MODEL_CONFIG = "application/vnd.cncf.model.config.v1+json"

MODEL_WEIGHT_RAW = "application/vnd.cncf.model.weight.v1.raw"
MODEL_WEIGHT_CONFIG_RAW = "application/vnd.cncf.model.weight.config.v1.raw"
MODEL_DOC_RAW = "application/vnd.cncf.model.doc.v1.raw"
MODEL_CODE_RAW = "application/vnd.cncf.model.code.v1.raw"
MODEL_DATASET_RAW = "application/vnd.cncf.model.dataset.v1.raw"

# The spec also has archived (.tar) variants; we publish raw (uncompressed, one file per layer)
# layers only, because weights do not compress and a raw layer can be mounted or range-read as is.

ANNOTATION_FILEPATH = "org.cncf.model.filepath"
ANNOTATION_MEDIATYPE_UNTESTED = "org.cncf.model.file.mediatype.untested"

MODELFS_TYPE_LAYERS = "layers"


class FileRole(StrEnum):
    """What a file of a model directory is, which decides its layer media type."""

    WEIGHT = "weight"
    WEIGHT_CONFIG = "weight_config"
    """config.json, tokenizer files, generation config: what an engine reads next to weights."""
    DOC = "doc"
    CODE = "code"
    DATASET = "dataset"


RAW_LAYER_MEDIA_TYPE: dict[FileRole, str] = {
    FileRole.WEIGHT: MODEL_WEIGHT_RAW,
    FileRole.WEIGHT_CONFIG: MODEL_WEIGHT_CONFIG_RAW,
    FileRole.DOC: MODEL_DOC_RAW,
    FileRole.CODE: MODEL_CODE_RAW,
    FileRole.DATASET: MODEL_DATASET_RAW,
}


def layer_media_type(role: FileRole) -> str:
    """The raw (one file, uncompressed) layer media type for a file of this role."""
    return RAW_LAYER_MEDIA_TYPE[role]
