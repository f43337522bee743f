"""The inspection activity: what a spooled model directory is, or why it is not a model."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from temporalio import activity

from servingops.api_models.deckhouse.enums import SourceType
from servingops.api_models.errors import application_error
from servingops.clients.model_files.errors import InvalidModel
from servingops.clients.model_files.inspect import InspectionResult, ProviderInfo, inspect_model_dir


class InspectInput(BaseModel):
    model_dir: str
    """Absolute path on this host (the spool directory of the model)."""
    provider: SourceType
    provider_info: ProviderInfo | None = None


@activity.defn(name="model.inspect")
def inspect(req: InspectInput) -> InspectionResult:
    """Parse headers only (safetensors, GGUF, diffusers): fast, bounded memory."""
    try:
        return inspect_model_dir(Path(req.model_dir), req.provider, req.provider_info)
    except InvalidModel as exc:
        raise application_error(exc.reason, exc.message) from exc
