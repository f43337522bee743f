"""The inputs and outputs of the upload activities, and the payload of the `upload-complete` signal.

Workflows import this module, so it holds pydantic models only: no I/O, no Kubernetes, no archive code.
No model here has a field for the bearer token: the token lives in the session Secret and nowhere else.
"""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, Field

from servingops.api_models.contract.uploads import UploadComplete
from servingops.api_models.refs import ObjectRef

DEFAULT_TTL_SECONDS = 24 * 3600
DEFAULT_MAX_BYTES = 1 << 40


class OpenUploadInput(BaseModel):
    """Open (or re-read) the upload session of a Model or ClusterModel whose source is `upload: {}`."""

    model: ObjectRef
    """Must carry the uid: the session id is the model's uid, so a reused name gets a fresh session."""
    ttl_seconds: int = Field(default=DEFAULT_TTL_SECONDS, gt=0)
    """How long the session accepts bytes from its creation; an expired session answers 410."""
    max_bytes: int = Field(default=DEFAULT_MAX_BYTES, gt=0)
    """The largest upload accepted (the server answers 413 above it)."""


class UploadSessionInfo(BaseModel):
    """What status.upload shows: where the Secret with the URL and the token is, and until when."""

    secret_name: str
    secret_namespace: str
    expires_at: dt.datetime
    """UTC, whole seconds (status.upload.expiresAt has one-second resolution)."""
    upload_path: str
    """`/uploads/<session id>`, relative to the upload server's public base URL."""


class CloseUploadInput(BaseModel):
    model: ObjectRef
    discard_files: bool = False
    """Also remove the uploaded file (and any partial upload) from this worker's spool. Safe once
    prepare_model_dir has run: a staged single file is a hard link, an archive has been extracted."""


class PrepareUploadInput(BaseModel):
    model: ObjectRef
    upload: UploadComplete


class PreparedFile(BaseModel):
    path: str
    """Relative to model_dir, with forward slashes."""
    size: int


class PreparedUpload(BaseModel):
    model_dir: str
    """Absolute path of the model root on this worker (an archive's single top directory when it had one)."""
    kind: str
    files: list[PreparedFile]
    total_bytes: int
