"""The payload of the `upload-complete` signal (Signal.UPLOAD_COMPLETE): sent by the upload
ingress, received by the model workflow, read back by the upload activities."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class UploadComplete(BaseModel):
    """The payload of the `upload-complete` signal, sent by the upload server once the last byte is in."""

    model_config = ConfigDict(frozen=True)

    filename: str
    """The file's name as the user gave it (X-Filename or ?filename=), or model.<kind> when none was given."""
    size: int = Field(ge=1)
    sha256: str
    """Hex digest of the whole upload, computed while streaming."""
    path: str
    """Absolute path of the upload in the spool of the worker that received it."""
    kind: str
    """What the content is, by its magic bytes: safetensors, gguf, tar, tar.gz or zip."""
    worker_task_queue: str | None = None
    """When several workers serve uploads, a task queue served only by the worker holding `path`: run
    prepare_model_dir (and publishing) there, because the bytes are on that worker's disk only."""
