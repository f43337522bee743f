"""storage.storageUri of a BaseModel / ClusterBaseModel / FineTunedWeight, parsed (pure, no I/O).

Served schemes: `hf://org/repo[@rev]` (imported into the registry), `modelpack://registry/repo[:tag|@digest]`
(already there), `pvc://name/sub/path` (mounted by pods, no copy) and `local://path` (already on the
nodes). The seed's other schemes (oci://, s3://, az://, gs://, github://, vendor://) are refused with
UnsupportedStorage; anything that is not a URI of a known scheme with a valid body is InvalidStorageUri.
Both messages name what was given and list what is served, so the user needs no log.
"""

from __future__ import annotations

import re
from enum import StrEnum
from urllib.parse import quote

from pydantic import BaseModel

HF_WEB = "https://huggingface.co"


class StorageScheme(StrEnum):
    HF = "hf"
    MODELPACK = "modelpack"
    PVC = "pvc"
    LOCAL = "local"


class StorageReason(StrEnum):
    """Reasons of the Ready=False condition a refused storage URI gets."""

    UNSUPPORTED_STORAGE = "UnsupportedStorage"
    INVALID_STORAGE_URI = "InvalidStorageUri"


SUPPORTED_FORMS = ("hf://<org>/<repo>[@<revision>]", "modelpack://<registry>/<repository>[:<tag>]",
                   "pvc://<pvc-name>/<sub-path>", "local://<path>")
UNSUPPORTED_SCHEMES = ("oci", "s3", "az", "gs", "github", "vendor")
"""Schemes seed 004 names that this release does not deliver."""

_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*)://(.*)$", re.DOTALL)
_HF_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_REVISION = re.compile(r"^[A-Za-z0-9._/-]{1,255}$")
_REGISTRY = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$")
_REPOSITORY = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")


class StorageSource(BaseModel):
    """What a storage URI names; only the fields of its scheme are set."""

    scheme: StorageScheme
    hf_repo: str | None = None
    """hf: `<org>/<repo>`."""
    hf_revision: str | None = None
    """hf: a branch, tag or commit; None: the default branch."""
    registry: str | None = None
    """modelpack: host[:port]."""
    repository: str | None = None
    tag: str | None = None
    """modelpack: the tag to resolve (`latest` when neither tag nor digest is given)."""
    digest: str | None = None
    """modelpack: `sha256:<hex>` when the URI pins it."""
    pvc_name: str | None = None
    sub_path: str = ""
    """pvc: the directory inside the claim ("" for its root)."""
    path: str | None = None
    """local: the path on the node."""

    def hf_url(self) -> str:
        """The Hugging Face web URL the import's source activities take."""
        assert self.hf_repo is not None
        base = f"{HF_WEB}/{self.hf_repo}"
        return f"{base}/tree/{quote(self.hf_revision, safe='')}" if self.hf_revision else base


class BadStorage(ValueError):
    def __init__(self, reason: StorageReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _supported() -> str:
    return "supported: " + ", ".join(SUPPORTED_FORMS)


def _invalid(uri: str, why: str) -> BadStorage:
    return BadStorage(StorageReason.INVALID_STORAGE_URI, f"storageUri {uri[:300]!r}: {why}; {_supported()}")


def _no_dot_segments(uri: str, path: str) -> None:
    if any(part in (".", "..") for part in path.split("/")):
        raise _invalid(uri, "the path has a '.' or '..' segment")


def parse_storage_uri(uri: str) -> StorageSource:
    """The source a storage URI names, or BadStorage with the reason and a message naming the scheme."""
    match = _SCHEME.match(uri.strip())
    if match is None:
        raise _invalid(uri, "not a <scheme>://... URI")
    scheme, body = match.group(1), match.group(2)
    if scheme in UNSUPPORTED_SCHEMES:
        raise BadStorage(StorageReason.UNSUPPORTED_STORAGE,
                         f"storage scheme {scheme}:// is not delivered by this release; {_supported()}")
    if scheme not in StorageScheme.__members__.values():
        raise _invalid(uri, f"unknown scheme {scheme[:40]}://")
    kind = StorageScheme(scheme)
    if kind is StorageScheme.HF:
        repo, _, revision = body.partition("@")
        parts = repo.split("/")
        if len(parts) != 2 or not all(_HF_NAME.match(p) for p in parts):
            raise _invalid(uri, "hf:// takes <org>/<repo>")
        if "@" in body and not _REVISION.match(revision):
            raise _invalid(uri, "the revision after '@' is empty or has characters a revision cannot have")
        return StorageSource(scheme=kind, hf_repo=repo, hf_revision=revision or None)
    if kind is StorageScheme.MODELPACK:
        registry, _, rest = body.partition("/")
        if not _REGISTRY.match(registry) or not rest:
            raise _invalid(uri, "modelpack:// takes <registry host[:port]>/<repository>[:<tag>]")
        digest = tag = None
        if "@" in rest:
            rest, _, digest = rest.partition("@")
            if not _DIGEST.match(digest):
                raise _invalid(uri, "the digest after '@' is not sha256:<64 hex>")
        elif ":" in rest.rsplit("/", 1)[-1]:
            rest, _, tag = rest.rpartition(":")
            if not _TAG.match(tag):
                raise _invalid(uri, "the tag is not a valid OCI tag")
        if not _REPOSITORY.match(rest):
            raise _invalid(uri, "the repository is not a valid OCI repository name (lower case, '/', '.', '_', '-')")
        return StorageSource(scheme=kind, registry=registry, repository=rest, tag=tag or (None if digest else "latest"),
                             digest=digest)
    if kind is StorageScheme.PVC:
        name, _, sub_path = body.partition("/")
        if not _DNS_SUBDOMAIN.match(name):
            raise _invalid(uri, "pvc:// takes <pvc-name>/<sub-path> with a valid claim name")
        sub_path = sub_path.strip("/")
        _no_dot_segments(uri, sub_path)
        return StorageSource(scheme=kind, pvc_name=name, sub_path=sub_path)
    if not body or body.strip("/") == "":
        raise _invalid(uri, "local:// takes a path")
    _no_dot_segments(uri, body)
    return StorageSource(scheme=kind, path=body)
