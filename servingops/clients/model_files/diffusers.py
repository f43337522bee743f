"""Diffusers pipelines: model_index.json and one folder per component.

model_index.json names the pipeline class (`_class_name`), the diffusers version that saved it, and each
component as `"<name>": [<library>, <class>]` (`[null, null]` for an unused optional component). Every
used component lives in the folder of its name. A model component (unet, vae, transformer, text encoder)
has config.json and safetensors weights; a scheduler, tokenizer or feature extractor has only its config
files. Keys starting with "_" and values that are not [library, class] pairs are pipeline settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servingops.api_models.errors import ErrorType
from servingops.clients.model_files.errors import InvalidModel, display_path, load_json_object
from servingops.clients.model_files.safetensors import SafetensorsInfo, WeightSet, read_weight_dir

MODEL_INDEX = "model_index.json"
# Weights in a format we do not serve (pickles can run code when loaded; the rest need other runtimes).
UNSUPPORTED_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".msgpack", ".h5", ".onnx")
# The JSON configuration files a component may carry; each must parse.
COMPONENT_JSON_FILES = (
    "config.json",
    "scheduler_config.json",
    "tokenizer_config.json",
    "preprocessor_config.json",
    "special_tokens_map.json",
)


@dataclass(frozen=True)
class DiffusersComponent:
    name: str
    library: str
    class_name: str
    weights: WeightSet | None
    """None for a component without weights (scheduler, tokenizer, feature extractor)."""

    @property
    def parameter_count(self) -> int | None:
        return self.weights.parameter_count if self.weights else 0


@dataclass(frozen=True)
class DiffusersPipeline:
    class_name: str
    diffusers_version: str | None
    components: dict[str, DiffusersComponent]

    @property
    def parameter_count(self) -> int | None:
        """Sum over the components; None when any model component's count is unknown."""
        counts = [c.parameter_count for c in self.components.values()]
        return None if any(n is None for n in counts) else sum(n for n in counts if n is not None)


def read_diffusers(root: Path, *, parsed: dict[Path, SafetensorsInfo] | None = None) -> DiffusersPipeline:
    """Validate a diffusers pipeline rooted at `root` (which holds model_index.json)."""
    parsed = {} if parsed is None else parsed
    index = load_json_object(root / MODEL_INDEX, ErrorType.INVALID_DIFFUSERS, what="the pipeline index")
    class_name = index.get("_class_name")
    if not isinstance(class_name, str) or not class_name:
        raise InvalidModel(ErrorType.INVALID_DIFFUSERS, f"{MODEL_INDEX}: _class_name (the pipeline class) is missing")
    version = index.get("_diffusers_version")
    if version is not None and not isinstance(version, str):
        raise InvalidModel(ErrorType.INVALID_DIFFUSERS, f"{MODEL_INDEX}: _diffusers_version must be a string")

    components: dict[str, DiffusersComponent] = {}
    for key, value in index.items():
        spec = _component_spec(key, value)
        if spec is None:
            continue
        library, cls = spec
        components[key] = _read_component(root, key, library, cls, parsed)
    if not any(c.weights for c in components.values()):
        raise InvalidModel(
            ErrorType.INVALID_DIFFUSERS, f"{MODEL_INDEX}: the pipeline {class_name} has no component with weights"
        )
    return DiffusersPipeline(class_name=class_name, diffusers_version=version, components=components)


def _component_spec(key: str, value: Any) -> tuple[str, str] | None:
    """(library, class) for a used component; None for settings and unused components."""
    if key.startswith("_") or not isinstance(value, list) or len(value) != 2:
        return None
    library, cls = value
    if library is None and cls is None:
        return None
    if not isinstance(library, str) or not isinstance(cls, str) or not library or not cls:
        raise InvalidModel(
            ErrorType.INVALID_DIFFUSERS,
            f"{MODEL_INDEX}: component {key!r} must be [library, class] as two strings, found {value!r}",
        )
    if "/" in key or "\\" in key or key in (".", "..") or "\0" in key:
        raise InvalidModel(ErrorType.INVALID_DIFFUSERS, f"{MODEL_INDEX}: {key!r} is not a valid component folder name")
    return library, cls


def _read_component(
    root: Path, key: str, library: str, cls: str, parsed: dict[Path, SafetensorsInfo]
) -> DiffusersComponent:
    folder = root / key
    if not folder.is_dir():
        raise InvalidModel(
            ErrorType.INVALID_DIFFUSERS,
            f"{MODEL_INDEX}: component {key!r} ({library}.{cls}) has no folder {key}/ in the model",
        )
    names = {p.name for p in folder.iterdir() if p.is_file()}
    if not names:
        raise InvalidModel(ErrorType.INVALID_DIFFUSERS, f"{key}/: the folder of component {cls} is empty")
    for json_name in COMPONENT_JSON_FILES:
        if json_name in names:
            load_json_object(
                folder / json_name, ErrorType.INVALID_DIFFUSERS, what=f"the {key} configuration",
                shown_as=f"{key}/{json_name}",
            )  # fmt: skip
    weights = read_weight_dir(folder, root=root, parsed=parsed)
    if "config.json" in names and weights is None:
        # config.json marks a model component: diffusers would fail to load it without weights.
        others = sorted(n for n in names if n.endswith(UNSUPPORTED_WEIGHT_SUFFIXES))
        if others:
            raise InvalidModel(
                ErrorType.UNSUPPORTED_FORMAT,
                f"{key}/: component {cls} has only {', '.join(others)}; weights must be safetensors",
            )
        raise InvalidModel(
            ErrorType.INVALID_DIFFUSERS, f"{key}/: component {cls} has config.json but no safetensors weights"
        )
    if weights is not None and "config.json" not in names:
        raise InvalidModel(
            ErrorType.INVALID_DIFFUSERS,
            f"{key}/: component {cls} has weights ({display_path(weights.files[0], folder)}) but no config.json",
        )
    return DiffusersComponent(name=key, library=library, class_name=cls, weights=weights)
