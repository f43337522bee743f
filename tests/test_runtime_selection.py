"""Runtime selection rules (rendering/runtime_selection.py), pure."""

from __future__ import annotations

from typing import Any

import pytest

from servingops.api_models.ome.models import BaseModelSpec
from servingops.api_models.ome.runtimes import ServingRuntimeSpec
from servingops.rendering.runtime_selection import (
    RuntimeCandidate,
    RuntimeKind,
    check_runtime,
    parse_size,
    select_runtime,
    versions_match,
)

pytestmark = pytest.mark.unit


def model(**fields: Any) -> BaseModelSpec:
    body: dict[str, Any] = {
        "modelFormat": {"name": "safetensors", "version": "1.0.0"},
        "modelFramework": {"name": "transformers", "version": "4.46.0"},
        "modelArchitecture": "LlamaForCausalLM",
        "modelParameterSize": "8B",
        "storage": {"storageUri": "hf://meta-llama/Llama-3.1-8B-Instruct"},
    }
    body.update(fields)
    return BaseModelSpec.model_validate({k: v for k, v in body.items() if v is not None})


def fmt(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "modelFormat": {"name": "safetensors", "version": "1.0.0"},
        "modelFramework": {"name": "transformers", "version": "4.46.0"},
        "modelArchitecture": "LlamaForCausalLM",
        "autoSelect": True,
        "priority": 1,
    }
    body.update(fields)
    return {k: v for k, v in body.items() if v is not None}


def runtime(name: str, *formats: dict[str, Any], kind: RuntimeKind = RuntimeKind.CLUSTER,
            **spec: Any) -> RuntimeCandidate:
    body = {"supportedModelFormats": list(formats) or [fmt()],
            "containers": [{"name": "ome-container", "image": "srt:1"}], **spec}
    return RuntimeCandidate(name=name, kind=kind, spec=ServingRuntimeSpec.model_validate(body),
                            namespace="team" if kind is RuntimeKind.NAMESPACED else None)


def test_the_one_compatible_runtime_is_chosen_and_each_other_says_why() -> None:
    chosen = select_runtime(model(), [
        runtime("vllm"),
        runtime("off", disabled=True),
        runtime("gemma", fmt(modelArchitecture="GemmaForCausalLM")),
        runtime("manual", fmt(autoSelect=False)),
        runtime("small", modelSizeRange={"min": "1B", "max": "3B"}),
        runtime("onnx", fmt(modelFormat={"name": "onnx", "version": "1"})),
    ])
    assert chosen.chosen is not None and chosen.chosen.candidate.name == "vllm"
    why = {v.candidate.name: "; ".join(v.reasons) for v in chosen.verdicts}
    assert why["off"] == "disabled"
    assert "architecture 'LlamaForCausalLM' is not the runtime's 'GemmaForCausalLM'" in why["gemma"]
    assert why["manual"] == "no supported format has autoSelect: true"
    assert why["small"] == "model size 8B is outside the runtime's range [1B, 3B]"
    assert "format 'safetensors' is not the runtime's 'onnx'" in why["onnx"]
    assert "ClusterServingRuntime gemma: no supported format fits" in chosen.explain()


def test_nothing_fits_explains_every_candidate() -> None:
    selection = select_runtime(model(quantization="fp8"), [runtime("vllm"), runtime("sglang")])
    assert selection.chosen is None
    assert [v.compatible for v in selection.verdicts] == [False, False]
    assert "the model's quantization 'fp8' is not among the runtime's (it names none)" in selection.explain()
    assert select_runtime(model(), []).explain() == "no ServingRuntime or ClusterServingRuntime exists"


def test_namespaced_runtimes_outrank_cluster_ones_then_score_then_size_then_name() -> None:
    cluster_high = runtime("a-cluster", fmt(priority=50))
    namespaced_low = runtime("z-local", kind=RuntimeKind.NAMESPACED)
    assert select_runtime(model(), [cluster_high, namespaced_low]).chosen.candidate.name == "z-local"  # type: ignore[union-attr]

    low, high = runtime("low", fmt(priority=1)), runtime("high", fmt(priority=5))
    assert select_runtime(model(), [low, high]).chosen.candidate.name == "high"  # type: ignore[union-attr]

    wide = runtime("wide", modelSizeRange={"min": "1B", "max": "70B"})
    tight = runtime("tight", modelSizeRange={"min": "7B", "max": "9B"})
    assert select_runtime(model(), [wide, tight]).chosen.candidate.name == "tight"  # type: ignore[union-attr]

    assert select_runtime(model(), [runtime("b"), runtime("a")]).chosen.candidate.name == "a"  # type: ignore[union-attr]


def test_score_is_weight_times_priority_of_the_best_fitting_format() -> None:
    weighted = runtime("w", fmt(priority=2, modelFormat={"name": "safetensors", "version": "1.0.0", "weight": 10},
                                modelFramework={"name": "transformers", "version": "4.46.0", "weight": 5}))
    verdict = select_runtime(model(), [weighted]).chosen
    assert verdict is not None and verdict.score == 2 * 10 + 2 * 5


def test_architecture_and_quantization_must_both_be_absent_or_equal() -> None:
    assert not check_runtime(runtime("r", fmt(modelArchitecture=None)), model()).compatible
    assert check_runtime(runtime("r", fmt(modelArchitecture=None)), model(modelArchitecture=None)).compatible
    assert not check_runtime(runtime("r", fmt(quantization="fp8")), model()).compatible
    assert check_runtime(runtime("r", fmt(quantization="fp8")), model(quantization="fp8")).compatible


def test_a_named_runtime_is_checked_without_auto_select() -> None:
    manual = runtime("manual", fmt(autoSelect=False))
    assert check_runtime(manual, model()).compatible
    assert select_runtime(model(), [manual]).chosen is None


def test_accelerator_classes_required_by_the_service_must_be_offered() -> None:
    gpu = runtime("gpu", acceleratorRequirements={"acceleratorClasses": ["nvidia-h100", "nvidia-a100"]})
    plain = runtime("plain")
    picked = select_runtime(model(), [plain, gpu], frozenset({"nvidia-h100"}))
    assert picked.chosen is not None and picked.chosen.candidate.name == "gpu"
    assert "does not offer accelerator class nvidia-h100" in picked.explain()


@pytest.mark.parametrize(("runtime_version", "model_version", "operator", "expected"), [
    ("1.0.0", "1.0.0", "Equal", True),
    ("1.0.0", "1.0.1", "Equal", False),
    ("2.0.0", "1.0.0", "GreaterThan", True),   # the runtime's version is greater than the model's
    ("1.0.0", "1.0.0", "GreaterThan", False),
    ("1.0.0", "1.0.0", "GreaterThanOrEqual", True),
    ("2", "1.0.0", "GreaterThan", False),       # different precision never compares as greater
    ("v2", "1", "GreaterThan", False),          # nor a different prefix
    ("2.0.0-rc1", "1.0.0", "GreaterThan", False),  # unofficial versions compare by equality only
    ("1.0.0-rc1", "1.0.0-rc1", "GreaterThan", True),
    ("x.y", "1.0.0", "Equal", False),
])
def test_versions(runtime_version: str, model_version: str, operator: str, expected: bool) -> None:
    assert versions_match(runtime_version, model_version, operator) is expected


def test_version_presence_must_agree() -> None:
    no_version = runtime("r", fmt(modelFormat={"name": "safetensors"}))
    verdict = check_runtime(no_version, model())
    assert not verdict.compatible
    assert "the model's format version '1.0.0' is not among the runtime's" in verdict.reasons[0]


def test_sizes() -> None:
    assert parse_size("7B") == 7e9
    assert parse_size("1.5T") == 1.5e12
    assert parse_size("350M") == 3.5e8
    assert parse_size("big") is None
    assert parse_size(None) is None


def test_diffusion_pipeline_requirements() -> None:
    pipeline_runtime = runtime("sd", fmt(modelArchitecture=None, modelFramework={"name": "diffusers"},
                                         diffusionPipeline={"className": "FluxPipeline",
                                                            "vae": {"library": "diffusers"}}))
    base = {"modelArchitecture": None, "modelFramework": {"name": "diffusers"}}
    fits = model(**base, diffusionPipeline={"className": "FluxPipeline",
                                           "vae": {"library": "diffusers", "type": "AutoencoderKL"}})
    assert check_runtime(pipeline_runtime, fits).compatible
    wrong_class = model(**base, diffusionPipeline={"className": "StableDiffusionPipeline"})
    assert "pipeline class 'StableDiffusionPipeline'" in check_runtime(pipeline_runtime, wrong_class).reasons[0]
    no_vae = model(**base, diffusionPipeline={"className": "FluxPipeline"})
    assert "needs a vae" in check_runtime(pipeline_runtime, no_vae).reasons[0]
