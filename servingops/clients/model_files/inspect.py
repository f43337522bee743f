"""Inspect a model directory: which format it is, whether its files are what they claim, and status.resolved.

Detection looks at the root of the directory:
- Diffusers: model_index.json (every component folder is then checked);
- Safetensors: *.safetensors or *.safetensors.index.json, with the transformers config.json next to them;
- GGUF: *.gguf (one model, or one model split by gguf-split, plus optional multimodal projectors).
Every weight file of a known format anywhere in the tree is validated, whichever format was detected.

Resolved metadata comes from explicit statements only (a file's header or config, or what the provider
says), never from a model's name or a heuristic: a field nobody states stays unset.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from servingops.api_models.deckhouse.enums import EndpointType, ModelFeature, ModelFormat, SourceType
from servingops.api_models.deckhouse.model import ResolvedModel, SourceCapabilities
from servingops.api_models.errors import ErrorType
from servingops.clients.model_files.diffusers import MODEL_INDEX, DiffusersPipeline, read_diffusers
from servingops.clients.model_files.errors import InvalidModel, load_json_object
from servingops.clients.model_files.gguf import (
    POOLING_CLS,
    POOLING_LAST,
    POOLING_MEAN,
    POOLING_RANK,
    GGUFInfo,
    read_gguf_header,
)
from servingops.clients.model_files.safetensors import (
    FLOAT_DTYPES,
    INDEX_SUFFIX,
    SafetensorsInfo,
    read_safetensors_header,
    read_safetensors_index,
    read_weight_dir,
)

# Directories that are bookkeeping of the tools that fetched the model, not part of it.
_SKIPPED_DIRS = frozenset({".git", ".cache", ".huggingface"})
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_WEIGHT_SUFFIXES = (".safetensors", ".gguf", *_PICKLE_SUFFIXES, ".onnx", ".h5", ".msgpack", ".tflite", ".npz")
_NOT_WEIGHTS = frozenset({"training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth"})
_TOKENIZER_FILES = frozenset(
    {
        "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
        "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
        "chat_template.json", "chat_template.jinja", "vocab.model",
    }
)  # fmt: skip
_CONFIG_FILES = frozenset(
    {"config.json", MODEL_INDEX, "params.json", "modules.json", "config.yaml", "config_sentence_transformers.json"}
)
_MAX_TEMPLATE_BYTES = 1024 * 1024

# Context window keys of transformers configs, in the order they are consulted (each is the model's own
# maximum sequence length in the config classes that use it).
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "max_seq_len", "seq_length", "n_ctx")
# Multimodal configs keep the language model's settings in a nested config.
_NESTED_TEXT_CONFIGS = ("text_config", "llm_config", "language_config")
# Quantizations whose stored tensors hold one element per weight, so tensor elements are parameters.
# Others (GPTQ, AWQ, 4-bit bitsandbytes, packed compressed-tensors, ...) pack several weights per element.
_UNPACKED_QUANT_METHODS = frozenset({"fp8", "fbgemm_fp8"})
_UNPACKED_COMPRESSED_FORMATS = frozenset({"float-quantized", "naive-quantized", "int-quantized"})
_TORCH_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64"}

# llama.cpp architectures that are encoders: without a pooling type they are not text generators.
_GGUF_ENCODER_ARCHS = frozenset(
    {"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "modern-bert", "neo-bert", "t5encoder"}
)

# Hugging Face pipeline tags -> endpoint types.
PIPELINE_ENDPOINTS: dict[str, tuple[EndpointType, ...]] = {
    "text-generation": (EndpointType.TEXT_GENERATION,),
    "text2text-generation": (EndpointType.TEXT_GENERATION,),
    "feature-extraction": (EndpointType.EMBEDDINGS,),
    "sentence-similarity": (EndpointType.EMBEDDINGS,),
    "text-ranking": (EndpointType.RERANK,),
    "automatic-speech-recognition": (EndpointType.SPEECH_TO_TEXT,),
    "text-to-speech": (EndpointType.TEXT_TO_SPEECH,),
    "translation": (EndpointType.TRANSLATION,),
    "image-classification": (EndpointType.IMAGE_CLASSIFICATION,),
    "object-detection": (EndpointType.OBJECT_DETECTION,),
    "image-segmentation": (EndpointType.IMAGE_SEGMENTATION,),
    "image-to-text": (EndpointType.IMAGE_TO_TEXT,),
    "image-text-to-text": (EndpointType.IMAGE_TO_TEXT,),
    "visual-question-answering": (EndpointType.VISUAL_QUESTION_ANSWERING,),
    "text-to-image": (EndpointType.IMAGE_GENERATION,),
    "image-to-image": (EndpointType.IMAGE_GENERATION,),
    "text-to-video": (EndpointType.VIDEO_GENERATION,),
    "image-to-video": (EndpointType.VIDEO_GENERATION,),
    "text-to-audio": (EndpointType.AUDIO_GENERATION,),
}
# Hugging Face pipeline tags -> the input/output modalities they state.
PIPELINE_FEATURES: dict[str, tuple[ModelFeature, ...]] = {
    "image-text-to-text": (ModelFeature.VISION_INPUT,),
    "visual-question-answering": (ModelFeature.VISION_INPUT,),
    "document-question-answering": (ModelFeature.VISION_INPUT,),
    "image-to-text": (ModelFeature.VISION_INPUT,),
    "video-text-to-text": (ModelFeature.VIDEO_INPUT,),
    "video-classification": (ModelFeature.VIDEO_INPUT,),
    "automatic-speech-recognition": (ModelFeature.AUDIO_INPUT,),
    "audio-text-to-text": (ModelFeature.AUDIO_INPUT,),
    "audio-classification": (ModelFeature.AUDIO_INPUT,),
    "text-to-speech": (ModelFeature.AUDIO_OUTPUT,),
    "text-to-audio": (ModelFeature.AUDIO_OUTPUT,),
    "text-to-image": (ModelFeature.IMAGE_OUTPUT,),
    "image-to-image": (ModelFeature.IMAGE_OUTPUT,),
    "text-to-video": (ModelFeature.VIDEO_OUTPUT,),
    "image-to-video": (ModelFeature.VIDEO_OUTPUT,),
    "any-to-any": (ModelFeature.MULTI_MODAL_INPUT,),
}
# Every Hugging Face task name: tags among these are tasks in sourceCapabilities.
HF_TASKS = frozenset(
    {
        *PIPELINE_ENDPOINTS, *PIPELINE_FEATURES, "fill-mask", "question-answering", "summarization",
        "table-question-answering", "text-classification", "token-classification", "zero-shot-classification",
        "depth-estimation", "image-feature-extraction", "mask-generation",
        "zero-shot-image-classification", "zero-shot-object-detection", "keypoint-detection", "video-to-video",
        "audio-to-audio", "voice-activity-detection", "tabular-classification", "tabular-regression",
        "reinforcement-learning", "robotics", "graph-ml", "time-series-forecasting", "text-to-3d", "image-to-3d",
        "unconditional-image-generation", "visual-document-retrieval",
    }
)  # fmt: skip
# Hub tags that state a capability or packaging feature of the repository (the Hub's "Other" filters and
# the community's capability tags); other tags (languages, licenses, datasets, model names) are not features.
HF_FEATURE_TAGS = frozenset(
    {
        "conversational", "text-generation-inference", "endpoints_compatible", "custom_code", "autotrain_compatible",
        "4-bit", "8-bit", "gptq", "awq", "fp8", "bitsandbytes", "imatrix", "merge", "mergekit", "moe", "lora", "peft",
        "tool-use", "function-calling", "function_calling", "tools", "vision", "multimodal", "reasoning", "thinking",
        "sentence-transformers", "cross-encoder", "embeddings", "reranker", "eval-results", "compressed-tensors",
    }
)  # fmt: skip
# Ollama capabilities: which are tasks and what they mean.
OLLAMA_TASKS = frozenset({"completion", "embedding"})
_OLLAMA_FEATURES: dict[str, ModelFeature] = {
    "tools": ModelFeature.TOOL_CALLING,
    "vision": ModelFeature.VISION_INPUT,
    "audio": ModelFeature.AUDIO_INPUT,
}
# Diffusers pipelines that generate video or audio; any other pipeline generates images. Class names of
# video pipelines mostly say "Video"; these are the ones that do not.
_VIDEO_PIPELINE_PREFIXES = ("Wan", "LTX", "Mochi", "Latte", "Allegro", "AnimateDiff", "SkyReels", "EasyAnimate")
_AUDIO_PIPELINE_WORDS = ("Audio", "Music")
_T = TypeVar("_T")
_TOOLS_IN_TEMPLATE = re.compile(r"\btools\b|\.Tools\b")


class FileRole(StrEnum):
    WEIGHT = "weight"
    CONFIG = "config"
    TOKENIZER = "tokenizer"
    OTHER = "other"


class ModelFile(BaseModel):
    path: str
    """Relative to the model root, with "/" separators."""
    role: FileRole
    size_bytes: int


class ProviderInfo(BaseModel):
    """What the source provider says about the model (from its API, not from the files)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    # Hugging Face (model_info)
    pipeline_tag: str | None = None
    tags: list[str] = []
    library_name: str | None = None
    config: dict[str, Any] | None = None
    """The Hub's summary of config.json (architectures, model_type, tokenizer_config.chat_template, ...)."""
    card_data: dict[str, Any] | None = Field(default=None, alias="cardData")
    # Ollama (the manifest's config and layers)
    template: str | None = None
    params: dict[str, Any] | None = None
    license: str | None = None
    system: str | None = None
    """The system prompt layer of an Ollama model."""
    capabilities: list[str] = []


class InspectionResult(BaseModel):
    format: ModelFormat
    resolved: ResolvedModel
    files: list[ModelFile]
    total_size_bytes: int


@dataclass
class _Facts:
    """What the files state, before the provider's word is merged in."""

    architecture: str | None = None
    family: str | None = None
    parameter_count: int | None = None
    quantization: str | None = None
    context_window: int | None = None
    chat_templates: list[str] = field(default_factory=list)
    has_chat_template: bool = False
    endpoints: list[EndpointType] = field(default_factory=list)
    features: list[ModelFeature] = field(default_factory=list)


def inspect_model_dir(path: Path, provider: SourceType, provider_info: ProviderInfo | None = None) -> InspectionResult:
    """Detect the format of the model at `path`, validate its files, and derive status.resolved.

    Raises InvalidModel when the files are not a model we can serve; reads only headers and configs.
    """
    root = Path(os.path.abspath(path))
    files = list_model_files(root)
    if not files:
        raise InvalidModel(ErrorType.EMPTY_MODEL, "the model has no files")
    top = {f.path for f in files if "/" not in f.path}
    parsed: dict[Path, SafetensorsInfo] = {}
    if MODEL_INDEX in top:
        fmt, facts = ModelFormat.DIFFUSERS, _diffusers_facts(read_diffusers(root, parsed=parsed))
    elif any(n.endswith((".safetensors", INDEX_SUFFIX)) for n in top):
        fmt, facts = ModelFormat.SAFETENSORS, _safetensors_facts(root, top, parsed, provider_info)
    elif any(n.endswith(".gguf") for n in top):
        fmt, facts = ModelFormat.GGUF, _gguf_facts(root, sorted(n for n in top if n.endswith(".gguf")))
    else:
        raise _no_model(files)
    _validate_remaining(root, files, parsed, skip_gguf=fmt == ModelFormat.GGUF)

    resolved = _resolve(fmt, facts, provider, provider_info)
    return InspectionResult(
        format=fmt, resolved=resolved, files=files, total_size_bytes=sum(f.size_bytes for f in files)
    )


def list_model_files(root: Path) -> list[ModelFile]:
    """Every regular file under root (symlinked files followed, symlinked directories not), sorted."""
    result: list[ModelFile] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
        for name in filenames:
            full = Path(dirpath) / name
            if not full.is_file():
                continue
            rel = full.relative_to(root).as_posix()
            result.append(ModelFile(path=rel, role=file_role(rel), size_bytes=full.stat().st_size))
    return sorted(result, key=lambda f: f.path)


def file_role(rel: str) -> FileRole:
    parts = rel.split("/")
    name = parts[-1].lower()
    if name.endswith(_WEIGHT_SUFFIXES) and name not in _NOT_WEIGHTS:
        return FileRole.WEIGHT
    # Diffusers keep tokenizers in folders named tokenizer, tokenizer_2, ...
    if name in _TOKENIZER_FILES or name.endswith(".tiktoken") or (len(parts) > 1 and parts[-2].startswith("tokenizer")):
        return FileRole.TOKENIZER
    if name in _CONFIG_FILES or name.endswith(("config.json", INDEX_SUFFIX, ".index.json")):
        return FileRole.CONFIG
    return FileRole.OTHER


def _no_model(files: list[ModelFile]) -> InvalidModel:
    pickles = [f.path for f in files if f.path.lower().endswith(_PICKLE_SUFFIXES) and f.role == FileRole.WEIGHT]
    if pickles:
        return InvalidModel(
            ErrorType.UNSUPPORTED_FORMAT,
            f"the weights are PyTorch pickles ({_some(pickles)}), which are not served (loading a pickle can run "
            "code); supported formats are Safetensors, GGUF and Diffusers",
        )
    nested = [f.path for f in files if f.path.endswith((".safetensors", ".gguf", MODEL_INDEX))]
    if nested:
        return InvalidModel(
            ErrorType.UNKNOWN_FORMAT,
            f"no model at the root of the files; model files were found only in subdirectories ({_some(nested)})",
        )
    return InvalidModel(
        ErrorType.UNKNOWN_FORMAT,
        f"no Safetensors, GGUF or Diffusers model among the files ({_some([f.path for f in files])})",
    )


def _some(names: list[str], n: int = 5) -> str:
    shown = ", ".join(names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


def _validate_remaining(
    root: Path, files: list[ModelFile], parsed: dict[Path, SafetensorsInfo], skip_gguf: bool
) -> None:
    """Every weight file of a known format must be what it claims, even outside the detected model."""
    for f in files:
        full = root / f.path
        if f.path.endswith(".safetensors") and full not in parsed:
            parsed[full] = read_safetensors_header(full, root=root)
    for f in files:
        full = root / f.path
        if f.path.endswith(INDEX_SUFFIX):
            read_safetensors_index(full, root=root, parsed=parsed)
        elif f.path.endswith(".gguf") and not (skip_gguf and "/" not in f.path):
            read_gguf_header(full, root=root)


# -- Safetensors --------------------------------------------------------------------------------


def _safetensors_facts(
    root: Path, top: set[str], parsed: dict[Path, SafetensorsInfo], provider_info: ProviderInfo | None
) -> _Facts:
    weights = read_weight_dir(root, root=root, parsed=parsed)
    assert weights is not None  # the root holds a .safetensors file or an index
    if "config.json" not in top:
        raise InvalidModel(
            ErrorType.MISSING_CONFIG,
            f"the model has safetensors weights ({_some(sorted(p.name for p in weights.files))}) but no config.json "
            "next to them; a Safetensors model needs its transformers config to be served",
        )
    config = load_json_object(root / "config.json", ErrorType.INVALID_CONFIG, what="the model config")
    all_infos = [parsed[p] for p in weights.files]
    if all(i.tensor_count == 0 for i in all_infos):
        raise InvalidModel(ErrorType.EMPTY_MODEL, "the safetensors files contain no tensors")

    facts = _Facts()
    architectures = config.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        facts.architecture = architectures[0]
    facts.family = _str(config.get("model_type"))
    qc = config.get("quantization_config") or config.get("compression_config")
    qc = qc if isinstance(qc, dict) else None
    if weights.parameter_count and _tensors_are_parameters(qc):
        facts.parameter_count = weights.parameter_count
    facts.quantization = _quantization(qc, config, all_infos)
    facts.context_window = _context_window(config)

    templates = _chat_templates(root, top)
    if not templates and provider_info and isinstance(provider_info.config, dict):
        tokenizer_config = provider_info.config.get("tokenizer_config")
        if isinstance(tokenizer_config, dict):
            templates = _template_strings(tokenizer_config.get("chat_template"))
    facts.chat_templates = templates
    facts.has_chat_template = bool(templates)

    if facts.architecture and facts.architecture.endswith("ForCausalLM"):
        facts.endpoints.append(EndpointType.TEXT_GENERATION)
    if "modules.json" in top or "config_sentence_transformers.json" in top:
        facts.endpoints.append(EndpointType.EMBEDDINGS)  # a sentence-transformers embedding model
    if isinstance(config.get("vision_config"), dict) or isinstance(config.get("mm_vision_tower"), str):
        facts.features.append(ModelFeature.VISION_INPUT)
    if isinstance(config.get("audio_config"), dict):
        facts.features.append(ModelFeature.AUDIO_INPUT)
    return facts


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _tensors_are_parameters(qc: dict[str, Any] | None) -> bool:
    if qc is None:
        return True
    method = qc.get("quant_method")
    if method in _UNPACKED_QUANT_METHODS:
        return True
    if method == "bitsandbytes":
        return bool(qc.get("load_in_8bit")) and not qc.get("load_in_4bit")
    if method == "compressed-tensors":
        return qc.get("format") in _UNPACKED_COMPRESSED_FORMATS
    return False


def _quantization(qc: dict[str, Any] | None, config: dict[str, Any], infos: list[SafetensorsInfo]) -> str | None:
    if qc is not None:
        method = _str(qc.get("quant_method"))
        if method is None:
            return None
        bits = qc.get("bits")
        if method == "bitsandbytes":
            bits = 4 if qc.get("load_in_4bit") else 8 if qc.get("load_in_8bit") else None
        return f"{method}-{bits}bit" if _positive_int(bits) else method
    # Unquantized: name the dtype the config declares, when every floating tensor really has it.
    declared = _TORCH_DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or ""))
    stored = {d for i in infos for d in i.dtypes if d in FLOAT_DTYPES}
    return declared if declared is not None and stored == {declared} else None


def _context_window(config: dict[str, Any]) -> int | None:
    for scope in (config, *(config.get(k) for k in _NESTED_TEXT_CONFIGS)):
        if not isinstance(scope, dict):
            continue
        for key in _CONTEXT_KEYS:
            value = _positive_int(scope.get(key))
            if value is not None:
                return value
    return None


def _chat_templates(root: Path, top: set[str]) -> list[str]:
    templates: list[str] = []
    if "tokenizer_config.json" in top:
        tokenizer_config = load_json_object(
            root / "tokenizer_config.json", ErrorType.INVALID_CONFIG, what="the tokenizer config"
        )
        templates += _template_strings(tokenizer_config.get("chat_template"))
    if "chat_template.jinja" in top:
        path = root / "chat_template.jinja"
        if path.stat().st_size <= _MAX_TEMPLATE_BYTES:
            templates.append(path.read_text(encoding="utf-8", errors="replace"))
    if "chat_template.json" in top:
        data = load_json_object(root / "chat_template.json", ErrorType.INVALID_CONFIG, what="the chat template")
        templates += _template_strings(data.get("chat_template"))
    return [t for t in templates if t.strip()]


def _template_strings(value: Any) -> list[str]:
    # A single template, or named ones: [{"name": "default", "template": "..."}, {"name": "tool_use", ...}].
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [t["template"] for t in value if isinstance(t, dict) and isinstance(t.get("template"), str)]
    return []


# -- GGUF ---------------------------------------------------------------------------------------


def _gguf_facts(root: Path, names: list[str]) -> _Facts:
    infos = [read_gguf_header(root / n, root=root) for n in names]
    projectors = [i for i in infos if i.is_projector]
    adapters = [i for i in infos if i.is_adapter]
    models = [i for i in infos if not i.is_projector and not i.is_adapter]
    if not models:
        what = "LoRA adapters" if adapters else "multimodal projectors"
        raise InvalidModel(
            ErrorType.UNKNOWN_FORMAT,
            f"the GGUF files ({_some(names)}) are {what}, not a model; include the model's GGUF file",
        )
    main = _one_gguf_model(models)
    for info in models:
        if info.architecture is None:
            raise InvalidModel(ErrorType.INVALID_GGUF, f"{info.path.name}: has no general.architecture")
    parameters = sum(i.parameter_count for i in models)
    if parameters == 0:
        raise InvalidModel(ErrorType.EMPTY_MODEL, f"{main.path.name}: the GGUF file contains no tensors")

    arch = main.architecture
    facts = _Facts(
        architecture=arch,
        family=arch,
        parameter_count=parameters,
        quantization=main.quantization,
        context_window=main.context_length,
        has_chat_template=main.has_chat_template,
    )
    if main.chat_template:
        facts.chat_templates.append(main.chat_template)

    pooling = main.pooling_type
    if pooling == POOLING_RANK:
        facts.endpoints.append(EndpointType.RERANK)
    elif pooling in (POOLING_MEAN, POOLING_CLS, POOLING_LAST):
        facts.endpoints.append(EndpointType.EMBEDDINGS)
    elif main.has_tokenizer and arch not in _GGUF_ENCODER_ARCHS:
        facts.endpoints.append(EndpointType.TEXT_GENERATION)

    # Vision / audio come from a projector file, or from encoders built into the model file (Ollama's).
    if any(p.boolean("clip.has_vision_encoder") is not False for p in projectors) or main.has_key_prefix(
        f"{arch}.vision."
    ):
        facts.features.append(ModelFeature.VISION_INPUT)
    if any(p.boolean("clip.has_audio_encoder") for p in projectors) or main.has_key_prefix(f"{arch}.audio."):
        facts.features.append(ModelFeature.AUDIO_INPUT)
    return facts


def _one_gguf_model(models: list[GGUFInfo]) -> GGUFInfo:
    """The model's first file; several model files are fine only as the parts of one split model."""
    if len(models) == 1:
        return models[0]
    splits = [m.split for m in models]
    counts = {s[1] for s in splits if s is not None}
    numbers = sorted(s[0] for s in splits if s is not None)
    if None not in splits and counts == {len(models)} and numbers == list(range(len(models))):
        return next(m for m in models if m.split is not None and m.split[0] == 0)
    raise InvalidModel(
        ErrorType.AMBIGUOUS_MODEL,
        f"{len(models)} GGUF models ({_some(sorted(m.path.name for m in models))}) where one is expected; "
        "keep the one quantization to serve",
    )


# -- Diffusers ----------------------------------------------------------------------------------


def _diffusers_facts(pipeline: DiffusersPipeline) -> _Facts:
    count = pipeline.parameter_count
    if count == 0:
        raise InvalidModel(ErrorType.EMPTY_MODEL, f"{MODEL_INDEX}: the pipeline's weights contain no tensors")
    facts = _Facts(architecture=pipeline.class_name, parameter_count=count)
    name = pipeline.class_name
    if "Video" in name or name.startswith(_VIDEO_PIPELINE_PREFIXES):
        facts.endpoints.append(EndpointType.VIDEO_GENERATION)
        facts.features.append(ModelFeature.VIDEO_OUTPUT)
    elif any(word in name for word in _AUDIO_PIPELINE_WORDS):
        facts.endpoints.append(EndpointType.AUDIO_GENERATION)
        facts.features.append(ModelFeature.AUDIO_OUTPUT)
    else:
        facts.endpoints.append(EndpointType.IMAGE_GENERATION)
        facts.features.append(ModelFeature.IMAGE_OUTPUT)
    return facts


# -- merging in the provider's word ---------------------------------------------------------------


def _resolve(fmt: ModelFormat, facts: _Facts, provider: SourceType, info: ProviderInfo | None) -> ResolvedModel:
    endpoints = list(facts.endpoints)
    features = list(facts.features)
    templates = list(facts.chat_templates)
    chat = facts.has_chat_template
    pipeline_tag = _pipeline_tag(info)

    if info is not None and provider == SourceType.OLLAMA and info.template is not None:
        # Ollama serves with the template of its manifest, not the one in the GGUF file. A chat template
        # renders the system prompt or the message list; a bare "{{ .Prompt }}" is plain completion.
        templates = [info.template]
        chat = ".Messages" in info.template or ".System" in info.template
    if info is not None and provider == SourceType.OLLAMA and info.capabilities:
        # Ollama states what the model does.
        caps = set(info.capabilities)
        endpoints = []
        if "completion" in caps:
            endpoints.append(EndpointType.TEXT_GENERATION)
        if "embedding" in caps:
            endpoints.append(EndpointType.EMBEDDINGS)
        features += [feature for cap, feature in _OLLAMA_FEATURES.items() if cap in caps]
    elif pipeline_tag in PIPELINE_ENDPOINTS:
        endpoints = list(PIPELINE_ENDPOINTS[pipeline_tag])
    if pipeline_tag in PIPELINE_FEATURES:
        features += PIPELINE_FEATURES[pipeline_tag]

    if chat and any(e in endpoints for e in (EndpointType.TEXT_GENERATION, EndpointType.IMAGE_TO_TEXT)):
        endpoints.insert(0, EndpointType.CHAT)
    if any(_TOOLS_IN_TEMPLATE.search(t) for t in templates):
        features.append(ModelFeature.TOOL_CALLING)
    inputs = {ModelFeature.VISION_INPUT, ModelFeature.AUDIO_INPUT, ModelFeature.VIDEO_INPUT}
    if len(inputs & set(features)) >= 2:
        features.append(ModelFeature.MULTI_MODAL_INPUT)

    return ResolvedModel(
        architecture=facts.architecture,
        family=facts.family,
        format=fmt,
        parameter_count=facts.parameter_count or None,
        quantization=facts.quantization,
        context_window_tokens=facts.context_window,
        supported_endpoint_types=_unique(endpoints) or None,
        supported_features=_unique(features) or None,
        source_capabilities=_source_capabilities(provider, info),
    )


def _pipeline_tag(info: ProviderInfo | None) -> str | None:
    if info is None:
        return None
    if info.pipeline_tag:
        return info.pipeline_tag
    card = info.card_data or {}
    return _str(card.get("pipeline_tag"))


def _provider_tags(info: ProviderInfo) -> list[str]:
    card_tags = (info.card_data or {}).get("tags")
    tags = list(info.tags) + (card_tags if isinstance(card_tags, list) else [])
    return [t for t in tags if isinstance(t, str)]


def _source_capabilities(provider: SourceType, info: ProviderInfo | None) -> SourceCapabilities | None:
    if info is None:
        return None
    tags = _provider_tags(info)
    pipeline_tag = _pipeline_tag(info)
    tasks = ([pipeline_tag] if pipeline_tag else []) + [t for t in tags if t in HF_TASKS]
    tasks += [c for c in info.capabilities if c in OLLAMA_TASKS]
    features = [t for t in tags if t in HF_FEATURE_TAGS]
    features += [c for c in info.capabilities if c not in OLLAMA_TASKS]
    tasks, features = _short_names(tasks), _short_names(features)
    if not tasks and not features:
        return None
    return SourceCapabilities(provider=provider, tasks=tasks or None, features=features or None)


def _short_names(values: Iterable[str]) -> list[str]:
    return _unique(v for v in values if isinstance(v, str) and 1 <= len(v) <= 128)


def _unique(values: Iterable[_T]) -> list[_T]:
    return list(dict.fromkeys(values))
