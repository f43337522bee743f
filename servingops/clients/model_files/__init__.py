"""Model files: validate what a model source delivered and derive status.resolved from it.

Headers and configs only: weight data is never read here (hashing happens where the artifact is built).
Every rejection is an `InvalidModel` with an ErrorType (the condition reason) and a message naming the file
at fault. No Temporal here: the inspection activity (activities/model_files/activity.py) turns an
`InvalidModel` into an activity error, and the upload endpoint classifies uploads with `classify_upload`.
"""

from servingops.clients.model_files.archive import (
    ArchiveLimits,
    ExtractionResult,
    UploadKind,
    classify_upload,
    extract_archive,
    stage_upload,
)
from servingops.clients.model_files.diffusers import DiffusersComponent, DiffusersPipeline, read_diffusers
from servingops.clients.model_files.errors import InvalidModel
from servingops.clients.model_files.gguf import LLAMA_FILE_TYPES, GGUFInfo, read_gguf_header
from servingops.clients.model_files.inspect import (
    FileRole,
    InspectionResult,
    ModelFile,
    ProviderInfo,
    file_role,
    inspect_model_dir,
    list_model_files,
)
from servingops.clients.model_files.safetensors import (
    SafetensorsIndex,
    SafetensorsInfo,
    WeightSet,
    read_safetensors_header,
    read_safetensors_index,
    read_weight_dir,
)

__all__ = [
    "LLAMA_FILE_TYPES",
    "ArchiveLimits",
    "DiffusersComponent",
    "DiffusersPipeline",
    "ExtractionResult",
    "FileRole",
    "GGUFInfo",
    "InspectionResult",
    "InvalidModel",
    "ModelFile",
    "ProviderInfo",
    "SafetensorsIndex",
    "SafetensorsInfo",
    "UploadKind",
    "WeightSet",
    "classify_upload",
    "extract_archive",
    "file_role",
    "inspect_model_dir",
    "list_model_files",
    "read_diffusers",
    "read_gguf_header",
    "read_safetensors_header",
    "read_safetensors_index",
    "read_weight_dir",
    "stage_upload",
]
