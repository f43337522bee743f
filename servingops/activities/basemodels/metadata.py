"""Spec fields an import's inspection can fill on a BaseModel / ClusterBaseModel (pure, no I/O).

Upstream OME's model agent reads config.json on the node and fills the spec fields the user left
empty (pkg/modelagent/config_parser.go, pkg/controller/v1beta1/basemodel: updateSpecWithConfig);
here the import's inspection (clients/model_files) states the same facts once, in the worker,
before any node copies anything. What upstream derives, and how it maps here:

- modelType: config.json's model_type (inspection `family`);
- modelArchitecture: config.json's architectures[0] (inspection `architecture`);
- modelParameterSize: the parameter count in upstream's FormatParamCount form ("1.1B", "7B", "560M");
- maxTokens: the context length (inspection `contextWindowTokens`);
- modelFormat: {name: safetensors, version: "1.0.0"} for transformers checkpoints, {name: diffusers}
  for diffusers pipelines (upstream), {name: gguf} for GGUF files (ours: upstream reads no GGUF);
- modelFramework: {name: transformers} / {name: diffusers}; none for GGUF (no framework is stated);
- quantization: upstream keeps only int4 and fp8 (a quantization_config naming them); a dtype such as
  BF16 is not a quantization and is not written.

A field the user set is never overwritten; within modelFormat only a missing version is added, and
only when the user's format name is the one inspected (a version of another format would be wrong).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_FORMATS = {"Safetensors": ("safetensors", "1.0.0", "transformers"),
            "Diffusers": ("diffusers", None, "diffusers"),
            "GGUF": ("gguf", None, None)}


class DerivedMetadata(BaseModel):
    """What an inspection states about a model, in BaseModelSpec's terms (camelCase keys on write)."""

    model_type: str | None = None
    model_architecture: str | None = None
    model_parameter_size: str | None = None
    max_tokens: int | None = None
    quantization: str | None = None
    format_name: str | None = None
    format_version: str | None = None
    framework_name: str | None = None


def format_param_count(count: int) -> str:
    """Upstream's FormatParamCount: 1_100_048_384 -> "1.10B", 7_000_000_000 -> "7B", 560_000_000 -> "560M"."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if count >= scale:
            value = count / scale
            if value == int(value):
                return f"{int(value)}{suffix}"
            if value * 100 == int(value * 100):
                return f"{value:.1f}{suffix}"
            return f"{value:.2f}{suffix}"
    return str(count)


def _quantization(stated: str | None) -> str | None:
    lowered = (stated or "").lower()
    if "int4" in lowered:
        return "int4"
    if "fp8" in lowered:
        return "fp8"
    return None


def derive(format_name: str | None, resolved: dict[str, Any]) -> DerivedMetadata:
    """From an InspectionResult's `format` and `resolved` (ResolvedModel as JSON, camelCase)."""
    fmt = _FORMATS.get(format_name or "")
    count = resolved.get("parameterCount")
    context = resolved.get("contextWindowTokens")
    return DerivedMetadata(
        model_type=resolved.get("family") or None,
        model_architecture=resolved.get("architecture") or None,
        model_parameter_size=format_param_count(int(count)) if isinstance(count, int) and count > 0 else None,
        max_tokens=int(context) if isinstance(context, int) and context > 0 else None,
        quantization=_quantization(resolved.get("quantization")),
        format_name=fmt[0] if fmt else None,
        format_version=fmt[1] if fmt else None,
        framework_name=fmt[2] if fmt else None,
    )


def spec_changes(spec: dict[str, Any], derived: DerivedMetadata) -> dict[str, Any]:
    """The spec fields to set (camelCase), each one the user left empty; {} when nothing is missing."""
    changes: dict[str, Any] = {}
    for key, value in (("modelType", derived.model_type), ("modelArchitecture", derived.model_architecture),
                       ("modelParameterSize", derived.model_parameter_size), ("maxTokens", derived.max_tokens),
                       ("quantization", derived.quantization)):
        if value is not None and spec.get(key) in (None, ""):
            changes[key] = value
    current_format = spec.get("modelFormat")
    if derived.format_name:
        if not current_format or not current_format.get("name"):
            fmt: dict[str, Any] = dict(current_format or {})
            fmt["name"] = derived.format_name
            if derived.format_version and not fmt.get("version"):
                fmt["version"] = derived.format_version
            changes["modelFormat"] = fmt
        elif (derived.format_version and not current_format.get("version")
              and str(current_format["name"]).lower() == derived.format_name):
            changes["modelFormat"] = {**current_format, "version": derived.format_version}
    if derived.framework_name and not spec.get("modelFramework"):
        changes["modelFramework"] = {"name": derived.framework_name}
    return changes
