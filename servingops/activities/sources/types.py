"""Inputs and outputs of the source activities (`source.resolve`, `source.fetch_file`, `source.clean_spool`).

Everything here travels in Temporal payloads, so nothing here is a secret: a private source is reached
through `auth_secret_name`, which names a Secret the activity reads itself, never the token.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from servingops.api_models.deckhouse.enums import SourceType
from servingops.api_models.refs import ObjectRef
from servingops.clients.model_files import ProviderInfo


class SourceFile(BaseModel):
    """One file of the model as the provider lists it."""

    model_config = ConfigDict(frozen=True)

    path: str
    """Relative path in the model directory ("/" separators); also where it lands in the spool."""
    size: int = Field(ge=0)
    sha256: str | None = None
    """Lower-case hex, when the provider states it before the download (Hugging Face LFS files, every
    Ollama layer). The fetch verifies the content against it."""
    blob: str | None = None
    """The provider's id of the content: the git blob oid on Hugging Face (verified for files without
    sha256), the layer digest ("sha256:<hex>") on Ollama (what the blob is fetched by)."""


class ResolveInput(BaseModel):
    model: ObjectRef
    url: str
    auth_secret_name: str | None = None
    """A Secret in model.namespace holding a Hugging Face token (key `token`, `HF_TOKEN` or
    `HUGGING_FACE_HUB_TOKEN`)."""
    auth_secret_namespace: str | None = None
    """Where that Secret is when not in model.namespace (a ClusterBaseModel's token lives in the
    controller namespace); None: model.namespace."""
    auth_secret_key: str | None = None
    """The one key holding the token (a BaseModel's storage.parameters.secretKey); None: the usual keys."""


class SourceListing(BaseModel):
    """What a source URL resolved to: an immutable revision and the files to import from it."""

    provider: SourceType
    locator: str
    """Hugging Face: the repo id (canonical, after a rename); Ollama: `<name>:<tag>`."""
    requested_revision: str | None = None
    """Hugging Face: the revision of a tree/ or blob/ URL (None: the default branch); Ollama: the tag."""
    resolved_revision: str
    """Hugging Face: the commit sha; Ollama: the manifest digest. Fetches read exactly this."""
    files: list[SourceFile]
    provider_info: ProviderInfo
    skipped: list[str] = []
    """Files of the source that are not part of the model by the selection rules (for status messages)."""

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


class FetchInput(BaseModel):
    model: ObjectRef
    """model.uid names the spool directory."""
    provider: SourceType
    locator: str
    resolved_revision: str
    file: SourceFile
    auth_secret_name: str | None = None
    auth_secret_namespace: str | None = None
    auth_secret_key: str | None = None
    header_only: bool = False
    """Fetch only what inspection reads (safetensors / GGUF header) into a sparse file of the full size."""


class FetchedFile(BaseModel):
    path: str
    """Absolute path on the worker."""
    relative_path: str
    size: int
    sha256: str | None
    """Of the whole file: computed (full fetch) or as the provider declared it (header-only fetch)."""
    transferred_bytes: int
    """Bytes this call received from the provider (0 when the file was already complete in the spool)."""
    header_only: bool
    """True when the file on disk holds only its header, the rest being a hole."""


class CleanSpoolInput(BaseModel):
    model_uid: str

