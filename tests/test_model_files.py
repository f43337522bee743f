"""Model file inspection: valid repos resolve to the right format and metadata; every bad input is an
InvalidModel with its own condition reason and a message naming the file."""

from __future__ import annotations

import io
import json
import math
import pickle
import shutil
import stat
import struct
import tarfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

from devstack import model_repos as repos
from devstack.model_repos import GGUF_STRING, GGUF_UINT32, GGUFTensor, TensorSpec
from servingops.api_models.deckhouse.enums import EndpointType, ModelFeature, ModelFormat, SourceType
from servingops.api_models.errors import CONDITION_REASON_PATTERN, ErrorType, application_error
from servingops.clients.model_files import (
    ArchiveLimits,
    FileRole,
    InvalidModel,
    ProviderInfo,
    UploadKind,
    classify_upload,
    extract_archive,
    inspect_model_dir,
    read_gguf_header,
    read_safetensors_header,
    stage_upload,
)
from servingops.clients.model_files.archive import _Extractor
from servingops.clients.model_files.gguf import MAX_STRING_BYTES

pytestmark = pytest.mark.unit

# -- builders ---------------------------------------------------------------------------------


def make_repo(tmp_path: Path, maker: Callable[..., repos.GeneratedRepo], **kwargs: Any) -> Path:
    """A generated repo's files, as a fresh directory of their own (the devstack server layout aside)."""
    generated = maker(tmp_path / "hub", f"test/{maker.__name__.removeprefix('make_')}", **kwargs)
    model = tmp_path / "model"
    shutil.copytree(generated.snapshot, model)
    return model


def safetensors_bytes(header: dict[str, Any], data: bytes = b"", *, raw_header: bytes | None = None) -> bytes:
    raw = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def gguf_string(s: str | bytes) -> bytes:
    raw = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(raw)) + raw


def gguf_bytes(
    kvs: list[bytes] | None = None,
    tensors: Sequence[tuple[str, tuple[int, ...], int, int]] | None = None,
    data: bytes = b"",
    *,
    version: int = 3,
) -> bytes:
    """A GGUF file from pre-encoded metadata entries and (name, dims, ggml type, offset) tensor infos."""
    kvs = kvs if kvs is not None else [kv_str("general.architecture", "llama")]
    tensors = tensors or []
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    for name, dims, ggml_type, offset in tensors:
        out += gguf_string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, offset)
    return out + b"\0" * (-len(out) % 32) + data


def kv_str(key: str, value: str) -> bytes:
    return gguf_string(key) + struct.pack("<I", GGUF_STRING) + gguf_string(value)


def kv_u32(key: str, value: int) -> bytes:
    return gguf_string(key) + struct.pack("<II", GGUF_UINT32, value)


def expect(reason: ErrorType, call: Callable[[], Any], *fragments: str) -> InvalidModel:
    with pytest.raises(InvalidModel) as info:
        call()
    assert info.value.reason == reason, info.value.message
    for fragment in fragments:
        assert fragment in info.value.message, info.value.message
    assert CONDITION_REASON_PATTERN.match(info.value.reason)
    return info.value


def inspect(path: Path, provider: SourceType = SourceType.UPLOAD, info: ProviderInfo | None = None) -> Any:
    return inspect_model_dir(path, provider, info)


LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}


# -- valid models -----------------------------------------------------------------------------


def test_sharded_safetensors_resolves_from_config_and_headers(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=3, max_position_embeddings=4096)
    result = inspect(model)

    expected_params = sum(
        math.prod(t.shape) for t in repos.llama_tensors(64, 128, 2, 4, 4, vocab_size=128, dtype="F16")
    )
    assert result.format == ModelFormat.SAFETENSORS
    r = result.resolved
    assert (r.architecture, r.family, r.format) == ("LlamaForCausalLM", "llama", ModelFormat.SAFETENSORS)
    assert r.parameter_count == expected_params
    assert r.quantization == "F16"  # torch_dtype float16, and every tensor really is F16
    assert r.context_window_tokens == 4096
    # ForCausalLM generates text; the tokenizer's chat template makes it a chat model too.
    assert r.supported_endpoint_types == [EndpointType.CHAT, EndpointType.TEXT_GENERATION]
    assert r.supported_features is None  # the template does not mention tools
    assert r.source_capabilities is None  # an upload has no provider metadata

    roles = {f.path: f.role for f in result.files}
    assert roles["model-00002-of-00003.safetensors"] == FileRole.WEIGHT
    assert roles["config.json"] == roles["model.safetensors.index.json"] == FileRole.CONFIG
    assert roles["tokenizer.json"] == roles["tokenizer_config.json"] == FileRole.TOKENIZER
    assert roles["README.md"] == FileRole.OTHER
    assert result.total_size_bytes == sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
    # The status model serialises with the seed's camelCase names.
    assert result.resolved.model_dump(exclude_none=True)["parameterCount"] == expected_params


def test_parameter_count_agrees_with_the_hub_summary(tmp_path: Path) -> None:
    generated = repos.make_safetensors_repo(tmp_path, "test/summary", num_shards=2)
    meta = json.loads((generated.snapshot.parents[1] / "repo.json").read_text())
    total = meta["commits"][generated.commit]["safetensors"]["total"]
    assert inspect(generated.snapshot).resolved.parameter_count == total


def test_hugging_face_provider_tags_become_tasks_features_and_endpoints(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=1)
    info = ProviderInfo(
        pipeline_tag="text-generation",
        tags=["transformers", "safetensors", "llama", "text-generation", "conversational", "license:mit", "en"],
        library_name="transformers",
    )
    r = inspect(model, SourceType.HUGGING_FACE, info).resolved
    assert r.source_capabilities is not None
    assert r.source_capabilities.provider == SourceType.HUGGING_FACE
    assert r.source_capabilities.tasks == ["text-generation"]
    assert r.source_capabilities.features == ["conversational"]
    assert r.supported_endpoint_types == [EndpointType.CHAT, EndpointType.TEXT_GENERATION]


def test_pipeline_tag_overrides_what_the_files_suggest(tmp_path: Path) -> None:
    # An embedding model built on a decoder: the provider's word wins over "ForCausalLM".
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=1)
    info = ProviderInfo.model_validate({"cardData": {"pipeline_tag": "feature-extraction", "tags": ["embeddings"]}})
    r = inspect(model, SourceType.HUGGING_FACE, info).resolved
    assert r.supported_endpoint_types == [EndpointType.EMBEDDINGS]
    assert r.source_capabilities is not None and r.source_capabilities.features == ["embeddings"]


def test_tool_calling_and_vision_come_from_template_and_config(tmp_path: Path) -> None:
    template = "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"
    model = make_repo(
        tmp_path,
        repos.make_safetensors_repo,
        num_shards=1,
        extra_files={"tokenizer_config.json": json.dumps({"chat_template": template}).encode()},
    )
    config = json.loads((model / "config.json").read_text())
    config["vision_config"] = {"hidden_size": 32}
    (model / "config.json").write_text(json.dumps(config))
    r = inspect(model).resolved
    assert r.supported_features == [ModelFeature.VISION_INPUT, ModelFeature.TOOL_CALLING]


def test_packed_quantization_leaves_parameter_count_unset(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=1)
    config = json.loads((model / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    (model / "config.json").write_text(json.dumps(config))
    r = inspect(model).resolved
    # GPTQ packs 8 weights into one I32 element: counting elements would not count parameters.
    assert r.parameter_count is None
    assert r.quantization == "gptq-4bit"


def test_dtype_is_not_named_when_config_and_tensors_disagree(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=1, dtype="BF16")
    config = json.loads((model / "config.json").read_text())
    config["torch_dtype"] = "float16"
    (model / "config.json").write_text(json.dumps(config))
    assert inspect(model).resolved.quantization is None


def test_context_window_from_a_nested_text_config(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=1)
    config = json.loads((model / "config.json").read_text())
    del config["max_position_embeddings"]
    config["text_config"] = {"max_position_embeddings": 32768}
    (model / "config.json").write_text(json.dumps(config))
    assert inspect(model).resolved.context_window_tokens == 32768


def test_gguf_v3_resolves_from_its_metadata(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_gguf_repo, quantizations=("Q8_0",), context_length=8192)
    [gguf_file] = model.glob("*.gguf")
    header = read_gguf_header(gguf_file)
    assert (header.version, header.alignment, header.architecture) == (3, 32, "llama")
    assert header.file_type == 7 and header.quantization == "Q8_0"
    assert header.name == "gguf_repo"
    assert header.has_chat_template and header.chat_template == repos.CHAT_TEMPLATE
    assert header.tensor_types["Q8_0"] > 0 and header.tensor_types["F32"] > 0
    assert header.data_end <= header.file_size

    result = inspect(model)
    r = result.resolved
    assert result.format == ModelFormat.GGUF
    assert (r.architecture, r.family, r.quantization, r.context_window_tokens) == ("llama", "llama", "Q8_0", 8192)
    assert r.parameter_count == header.parameter_count
    assert r.supported_endpoint_types == [EndpointType.CHAT, EndpointType.TEXT_GENERATION]


def test_gguf_parameter_count_agrees_with_the_hub_summary(tmp_path: Path) -> None:
    generated = repos.make_gguf_repo(tmp_path, "test/summary-gguf")
    meta = json.loads((generated.snapshot.parents[1] / "repo.json").read_text())
    assert inspect(generated.snapshot).resolved.parameter_count == meta["commits"][generated.commit]["gguf"]["total"]


def test_ollama_capabilities_and_template_decide_endpoints_and_features(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_gguf_repo)
    info = ProviderInfo(
        capabilities=["completion", "tools", "vision"],
        template="{{ if .System }}{{ .System }}{{ end }}{{ range .Messages }}{{ .Content }}{{ end }}{{ .Tools }}",
        params={"num_ctx": 4096},
        license="apache-2.0",
    )
    r = inspect(model, SourceType.OLLAMA, info).resolved
    assert r.supported_endpoint_types == [EndpointType.CHAT, EndpointType.TEXT_GENERATION]
    assert r.supported_features == [ModelFeature.TOOL_CALLING, ModelFeature.VISION_INPUT]
    assert r.source_capabilities is not None
    assert r.source_capabilities.provider == SourceType.OLLAMA
    assert r.source_capabilities.tasks == ["completion"]
    assert r.source_capabilities.features == ["tools", "vision"]
    assert r.context_window_tokens == 2048  # the model's own, not Ollama's runtime num_ctx


def test_gguf_embedding_model_by_pooling_type(tmp_path: Path) -> None:
    path = tmp_path / "m" / "embed.gguf"
    path.parent.mkdir()
    data = b"\0" * 32 * 4
    kvs = [kv_str("general.architecture", "bert"), kv_u32("bert.pooling_type", 1), kv_u32("bert.context_length", 512)]
    path.write_bytes(gguf_bytes(kvs, [("token_embd.weight", (32,), 0, 0)], data))
    r = inspect(path.parent).resolved
    assert r.supported_endpoint_types == [EndpointType.EMBEDDINGS]
    assert (r.parameter_count, r.context_window_tokens, r.quantization) == (32, 512, None)


def test_gguf_split_model_is_one_model(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    for no in range(2):
        kvs = [kv_str("general.architecture", "llama"), kv_u32("split.no", no), kv_u32("split.count", 2)]
        tensors = [(f"t{no}", (8,), 0, 0)]
        (model / f"m-0000{no + 1}-of-00002.gguf").write_bytes(gguf_bytes(kvs, tensors, b"\0" * 32))
    assert inspect(model).resolved.parameter_count == 16


def test_gguf_projector_adds_vision_input(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_gguf_repo)
    kvs = [kv_str("general.architecture", "clip"), kv_str("general.type", "mmproj")]
    (model / "mmproj-F16.gguf").write_bytes(gguf_bytes(kvs, [("v.patch_embd.weight", (8,), 0, 0)], b"\0" * 32))
    r = inspect(model).resolved
    assert r.supported_features == [ModelFeature.VISION_INPUT]
    assert r.parameter_count == read_gguf_header(next(model.glob("gguf_repo-*.gguf"))).parameter_count


def test_diffusers_pipeline_resolves_from_model_index(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_diffusers_repo)
    result = inspect(model, SourceType.HUGGING_FACE, ProviderInfo(pipeline_tag="text-to-image", tags=["diffusers"]))
    r = result.resolved
    weights = [p for p in model.rglob("*.safetensors")]
    assert len(weights) == 3
    assert result.format == ModelFormat.DIFFUSERS
    assert r.architecture == "StableDiffusionPipeline"
    assert r.parameter_count == sum(read_safetensors_header(p).parameter_count for p in weights)
    assert r.supported_endpoint_types == [EndpointType.IMAGE_GENERATION]
    assert r.supported_features == [ModelFeature.IMAGE_OUTPUT]
    assert r.family is None and r.context_window_tokens is None  # nobody states them
    roles = {f.path: f.role for f in result.files}
    assert roles["tokenizer/vocab.json"] == FileRole.TOKENIZER
    assert roles["unet/diffusion_pytorch_model.safetensors"] == FileRole.WEIGHT
    assert roles["scheduler/scheduler_config.json"] == FileRole.CONFIG


def test_alternative_checkpoints_leave_parameter_count_unset(tmp_path: Path) -> None:
    # A consolidated copy next to the shards, no canonical single file: counting both would double.
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=1)
    (model / "model.safetensors").rename(model / "a.safetensors")
    shutil.copy(model / "a.safetensors", model / "b.safetensors")
    r = inspect(model).resolved
    assert r.parameter_count is None and r.architecture == "LlamaForCausalLM"


# -- bad safetensors --------------------------------------------------------------------------


def test_truncated_shard_is_detected_from_its_size(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=2)
    shard = model / "model-00002-of-00002.safetensors"
    with shard.open("r+b") as fh:
        fh.truncate(shard.stat().st_size - 1000)
    expect(ErrorType.TRUNCATED_SAFETENSORS, lambda: inspect(model), "model-00002-of-00002.safetensors", "1000 bytes")


def test_header_length_larger_than_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", 10_000) + b'{"a":1}')
    expect(ErrorType.TRUNCATED_SAFETENSORS, lambda: read_safetensors_header(path), "x.safetensors", "10000-byte header")
    path.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    expect(ErrorType.INVALID_SAFETENSORS_HEADER, lambda: read_safetensors_header(path), "more than")
    path.write_bytes(b"\x01\x02")
    expect(ErrorType.TRUNCATED_SAFETENSORS, lambda: read_safetensors_header(path), "fewer than")


@pytest.mark.parametrize(
    ("header", "data", "fragment"),
    [
        (None, b"", "not valid JSON"),
        ([1, 2], b"", "start with"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "v": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, "overlap"),
        ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, "belong to no tensor"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, "needs 8"),
        ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 12, "8 bytes follow"),
        ({"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "unknown dtype"),
        ({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, "invalid shape"),
        ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, b"\0" * 4, "invalid data_offsets"),
        ({"__metadata__": {"format": 1}}, b"", "__metadata__"),
    ],
)  # fmt: skip
def test_bad_safetensors_headers(tmp_path: Path, header: Any, data: bytes, fragment: str) -> None:
    path = tmp_path / "bad.safetensors"
    raw = b'{"w": ' if header is None else None
    path.write_bytes(safetensors_bytes(header, data, raw_header=raw))
    expect(ErrorType.INVALID_SAFETENSORS_HEADER, lambda: read_safetensors_header(path), "bad.safetensors", fragment)


def test_duplicate_tensor_names_in_a_header(tmp_path: Path) -> None:
    path = tmp_path / "dup.safetensors"
    entry = '{"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}'
    path.write_bytes(safetensors_bytes({}, b"\0", raw_header=f'{{"w": {entry}, "w": {entry}}}'.encode()))
    expect(ErrorType.INVALID_SAFETENSORS_HEADER, lambda: read_safetensors_header(path), "twice")


def test_valid_header_details(tmp_path: Path) -> None:
    path = tmp_path / "ok.safetensors"
    specs = [TensorSpec("a", "BF16", (3, 4)), TensorSpec("b", "I64", (2,)), TensorSpec("empty", "F32", (0, 5))]
    repos.write_safetensors(path, specs, metadata={"format": "pt"})
    info = read_safetensors_header(path)
    assert (info.tensor_count, info.parameter_count) == (3, 14)
    assert info.dtypes == {"BF16": 12, "I64": 2, "F32": 0}
    assert info.metadata == {"format": "pt"}
    assert info.data_size == 12 * 2 + 2 * 8


def test_safetensors_without_config_is_missing_config(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=2)
    (model / "config.json").unlink()
    expect(ErrorType.MISSING_CONFIG, lambda: inspect(model), "config.json", "model-00001-of-00002.safetensors")


def test_bad_config_json(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=1)
    (model / "config.json").write_text("[1, 2]")
    expect(ErrorType.INVALID_CONFIG, lambda: inspect(model), "config.json", "JSON object")
    (model / "config.json").write_text("{not json")
    expect(ErrorType.INVALID_CONFIG, lambda: inspect(model), "config.json", "not valid JSON")


def test_index_naming_a_missing_shard(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=2)
    (model / "model-00002-of-00002.safetensors").unlink()
    expect(ErrorType.MISSING_SHARD, lambda: inspect(model), "model.safetensors.index.json", "model-00002-of-00002")


def test_index_mapping_a_tensor_its_shard_lacks(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=2)
    index = json.loads((model / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.extra.weight"] = "model-00001-of-00002.safetensors"
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    expect(ErrorType.INVALID_SAFETENSORS_INDEX, lambda: inspect(model), "model.extra.weight")


def test_index_pointing_outside_its_directory(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=2)
    index = json.loads((model / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors"
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    expect(ErrorType.INVALID_SAFETENSORS_INDEX, lambda: inspect(model), "not a file name")


def test_broken_safetensors_anywhere_in_the_tree_fails(tmp_path: Path) -> None:
    # A sentence-transformers style module folder: its weights must be what they claim too.
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=1)
    (model / "2_Dense").mkdir()
    (model / "2_Dense" / "model.safetensors").write_bytes(b"not safetensors at all")
    expect(ErrorType.INVALID_SAFETENSORS_HEADER, lambda: inspect(model), "2_Dense/model.safetensors")


# -- bad GGUF ---------------------------------------------------------------------------------


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_bad_gguf_magic_in_a_model_dir(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    write(model, "model.gguf", b"GGUX" + b"\0" * 100)
    expect(ErrorType.INVALID_GGUF, lambda: inspect(model), "model.gguf", "not a GGUF file")


@pytest.mark.parametrize(
    ("version", "fragment"), [(1, "versions 2 and 3"), (4, "versions 2 and 3"), (0x03000000, "big-endian")]
)
def test_unsupported_gguf_version(tmp_path: Path, version: int, fragment: str) -> None:
    path = write(tmp_path, "v.gguf", gguf_bytes(version=version))
    expect(ErrorType.UNSUPPORTED_GGUF_VERSION, lambda: read_gguf_header(path), "v.gguf", fragment)


def test_gguf_absurd_string_length(tmp_path: Path) -> None:
    absurd = struct.pack("<Q", 1 << 62)
    path = write(tmp_path, "s.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + absurd + b"general.architecture")
    expect(ErrorType.INVALID_GGUF, lambda: read_gguf_header(path), "s.gguf", "claims")
    # Below the hard limit but beyond the file: still refused before any allocation.
    value = gguf_string("general.name") + struct.pack("<IQ", GGUF_STRING, MAX_STRING_BYTES - 1) + b"x" * 10
    path = write(tmp_path, "s2.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + value)
    expect(ErrorType.TRUNCATED_GGUF, lambda: read_gguf_header(path), "left in the file")


def test_gguf_absurd_counts(tmp_path: Path) -> None:
    array = gguf_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, GGUF_STRING, 1 << 60)
    path = write(tmp_path, "a.gguf", gguf_bytes([array]))
    expect(ErrorType.INVALID_GGUF, lambda: read_gguf_header(path), "elements")
    path = write(tmp_path, "c.gguf", b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 1) + b"\0" * 64)
    expect(ErrorType.INVALID_GGUF, lambda: read_gguf_header(path), "tensors", "allowed")
    path = write(tmp_path, "k.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1000) + b"\0" * 64)
    expect(ErrorType.TRUNCATED_GGUF, lambda: read_gguf_header(path), "1000 metadata entries")
    nested = gguf_string("x") + struct.pack("<IIQ", 9, 9, 1)
    path = write(tmp_path, "n.gguf", gguf_bytes([nested]))
    expect(ErrorType.INVALID_GGUF, lambda: read_gguf_header(path), "array of arrays")


def test_gguf_tensor_data_beyond_eof(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_gguf_repo)
    [path] = model.glob("*.gguf")
    with path.open("r+b") as fh:
        fh.truncate(path.stat().st_size - 100)
    expect(ErrorType.TRUNCATED_GGUF, lambda: inspect(model), path.name, "bytes are missing")


def test_gguf_header_cut_short(tmp_path: Path) -> None:
    full = gguf_bytes([kv_str("general.architecture", "llama")], [("w", (8,), 0, 0)], b"\0" * 32)
    path = write(tmp_path, "cut.gguf", full[:40])
    expect(ErrorType.TRUNCATED_GGUF, lambda: read_gguf_header(path), "cut.gguf")


def test_gguf_overlapping_tensors_and_unknown_types(tmp_path: Path) -> None:
    tensors = [("a", (16,), 0, 0), ("b", (16,), 0, 32)]  # "a" takes 64 bytes: "b" overlaps it
    path = write(tmp_path, "o.gguf", gguf_bytes(None, tensors, b"\0" * 128))
    expect(ErrorType.INVALID_GGUF, lambda: read_gguf_header(path), "overlaps")
    path = write(tmp_path, "t.gguf", gguf_bytes(None, [("a", (16,), 99, 0)], b"\0" * 64))
    expect(ErrorType.UNSUPPORTED_GGUF_TYPE, lambda: read_gguf_header(path), "ggml type 99")
    path = write(tmp_path, "b.gguf", gguf_bytes(None, [("a", (16,), 8, 0)], b"\0" * 64))  # Q8_0 rows of 32
    expect(ErrorType.INVALID_GGUF, lambda: read_gguf_header(path), "block size 32")
    path = write(tmp_path, "al.gguf", gguf_bytes([kv_u32("general.alignment", 24)]))
    expect(ErrorType.INVALID_GGUF, lambda: read_gguf_header(path), "power of two")
    path = write(tmp_path, "d.gguf", gguf_bytes([kv_str("k", "a"), kv_str("k", "b")]))
    expect(ErrorType.INVALID_GGUF, lambda: read_gguf_header(path), "twice")


def test_several_gguf_quantizations_are_ambiguous(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_gguf_repo, quantizations=("F16", "Q8_0"))
    expect(ErrorType.AMBIGUOUS_MODEL, lambda: inspect(model), "gguf_repo-F16.gguf", "gguf_repo-Q8_0.gguf")


def test_gguf_without_tensors_is_empty(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    write(model, "vocab.gguf", gguf_bytes())
    expect(ErrorType.EMPTY_MODEL, lambda: inspect(model), "no tensors")


def test_large_metadata_arrays_are_skipped_not_kept(tmp_path: Path) -> None:
    tokens = [f"tok{i}" for i in range(1000)]
    tensors = [GGUFTensor("w", (32,), "F32")]
    path = tmp_path / "big.gguf"
    repos.write_gguf(path, [("general.architecture", GGUF_STRING, "llama"),
                            ("tokenizer.ggml.tokens", 9, (GGUF_STRING, tokens))], tensors)  # fmt: skip
    info = read_gguf_header(path)
    skipped = info.metadata["tokenizer.ggml.tokens"]
    assert skipped.length == 1000 and info.parameter_count == 32


# -- bad diffusers and unknown formats --------------------------------------------------------


def test_diffusers_component_without_folder(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_diffusers_repo)
    shutil.rmtree(model / "vae")
    expect(ErrorType.INVALID_DIFFUSERS, lambda: inspect(model), "'vae'", "AutoencoderKL")


def test_diffusers_component_without_weights(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_diffusers_repo)
    (model / "unet" / "diffusion_pytorch_model.safetensors").unlink()
    expect(ErrorType.INVALID_DIFFUSERS, lambda: inspect(model), "unet/", "no safetensors weights")
    (model / "unet" / "diffusion_pytorch_model.bin").write_bytes(b"\x80\x02pickle")
    expect(ErrorType.UNSUPPORTED_FORMAT, lambda: inspect(model), "diffusion_pytorch_model.bin")


def test_diffusers_bad_model_index(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_diffusers_repo)
    (model / "model_index.json").write_text(json.dumps({"unet": ["diffusers", "UNet2DConditionModel"]}))
    expect(ErrorType.INVALID_DIFFUSERS, lambda: inspect(model), "_class_name")
    (model / "model_index.json").write_text(json.dumps({"_class_name": "P", "unet": ["diffusers", 3]}))
    expect(ErrorType.INVALID_DIFFUSERS, lambda: inspect(model), "'unet'")


def test_empty_and_unknown_and_pickle_dirs(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / ".cache" / "huggingface").mkdir(parents=True)
    (empty / ".cache" / "huggingface" / "x.metadata").write_text("bookkeeping, not the model")
    expect(ErrorType.EMPTY_MODEL, lambda: inspect(empty))
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "notes.txt").write_text("hello")
    expect(ErrorType.UNKNOWN_FORMAT, lambda: inspect(unknown), "notes.txt")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text("{}")
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x02")
    expect(ErrorType.UNSUPPORTED_FORMAT, lambda: inspect(pickled), "pytorch_model.bin")


# -- uploads ----------------------------------------------------------------------------------


def test_uploads_are_classified_by_content(tmp_path: Path) -> None:
    gguf = write(tmp_path, "anything.bin2", gguf_bytes())
    assert classify_upload(gguf) == UploadKind.GGUF
    st = tmp_path / "w"
    repos.write_safetensors(st, [TensorSpec("a", "F32", (2,))])
    assert classify_upload(st) == UploadKind.SAFETENSORS
    assert classify_upload(st, "model.safetensors") == UploadKind.SAFETENSORS
    expect(ErrorType.UNKNOWN_FORMAT, lambda: classify_upload(st, "model.gguf"), "model.gguf", "safetensors")
    expect(ErrorType.UNKNOWN_FORMAT, lambda: classify_upload(write(tmp_path, "x.gguf", b"hello world")), "x.gguf")
    expect(ErrorType.EMPTY_MODEL, lambda: classify_upload(write(tmp_path, "e.gguf", b"")))
    expect(ErrorType.UNSUPPORTED_ARCHIVE, lambda: classify_upload(write(tmp_path, "a.tar.xz", b"\xfd7zXZ\x00..")), "xz")
    torch_zip = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(torch_zip, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({}))
    expect(ErrorType.UNSUPPORTED_FORMAT, lambda: classify_upload(torch_zip), "PyTorch")
    tgz = tmp_path / "m.tar"  # gzipped though named .tar: still a tar
    with tarfile.open(tgz, "w:gz") as tf:
        add_file(tf, "config.json", b"{}")
    assert classify_upload(tgz) == UploadKind.TAR_GZ


def test_single_gguf_upload_is_staged_and_inspected(tmp_path: Path) -> None:
    source = make_repo(tmp_path, repos.make_gguf_repo)
    [gguf] = source.glob("*.gguf")
    upload = tmp_path / "upload-blob"
    shutil.copy(gguf, upload)
    kind, root = stage_upload(upload, tmp_path / "staged", filename="../../weird/My-Model.gguf")
    assert kind == UploadKind.GGUF and [p.name for p in root.iterdir()] == ["My-Model.gguf"]
    assert upload.exists()
    assert inspect(root).format == ModelFormat.GGUF


def test_single_safetensors_upload_needs_a_config(tmp_path: Path) -> None:
    upload = tmp_path / "blob"
    repos.write_safetensors(upload, [TensorSpec("a", "F32", (2,))])
    _, root = stage_upload(upload, tmp_path / "staged", filename="model.safetensors")
    expect(ErrorType.MISSING_CONFIG, lambda: inspect(root), "model.safetensors")


TarMode = Literal["w", "w:gz"]


def open_tar(path: Path, mode: TarMode) -> tarfile.TarFile:
    if mode == "w:gz":
        return tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT)
    return tarfile.open(path, "w", format=tarfile.PAX_FORMAT)


def add_file(tf: tarfile.TarFile, name: str, data: bytes) -> object:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))
    return info


def entries(*added: object) -> None:
    """Lets a parametrized lambda add several entries (the adds run as its arguments are evaluated)."""


def add_special(tf: tarfile.TarFile, name: str, kind: bytes, linkname: str = "") -> object:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    tf.addfile(info)
    return info


@pytest.mark.parametrize("mode", ["w", "w:gz"])
def test_tar_of_a_model_extracts_and_inspects(tmp_path: Path, mode: TarMode) -> None:
    model = make_repo(tmp_path, repos.make_safetensors_repo, num_shards=2)
    archive = tmp_path / "upload"
    with open_tar(archive, mode) as tf:
        tf.add(model, arcname="my-model")  # the usual wrapping directory
    seen: list[int] = []
    result = extract_archive(archive, tmp_path / "out", progress=seen.append)
    assert result.root == tmp_path / "out" / "my-model"
    assert result.kind == (UploadKind.TAR if mode == "w" else UploadKind.TAR_GZ)
    assert result.files == len([p for p in model.rglob("*") if p.is_file()])
    assert seen and seen[-1] == result.total_bytes
    assert inspect(result.root).resolved.architecture == "LlamaForCausalLM"
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
    # A retry replaces the previous result whole.
    assert extract_archive(archive, tmp_path / "out").files == result.files


def test_zip_of_a_model_extracts_and_inspects(tmp_path: Path) -> None:
    model = make_repo(tmp_path, repos.make_gguf_repo)
    archive = tmp_path / "upload.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in model.rglob("*"):
            zf.write(p, p.relative_to(model).as_posix())
        zf.writestr("__MACOSX/._README.md", b"\x00\x05\x16\x07 resource fork")
        zf.writestr("._config.json", b"\x00\x05\x16\x07 resource fork")
    result = extract_archive(archive, tmp_path / "out")
    assert result.root == tmp_path / "out"
    assert not (tmp_path / "out" / "__MACOSX").exists() and not (tmp_path / "out" / "._config.json").exists()
    assert inspect(result.root).format == ModelFormat.GGUF


def tar_with(tmp_path: Path, build: Callable[[tarfile.TarFile], object], mode: TarMode = "w") -> Path:
    archive = tmp_path / ("evil.tar.gz" if mode == "w:gz" else "evil.tar")
    with open_tar(archive, mode) as tf:
        build(tf)
    return archive


def zip_with(tmp_path: Path, build: Callable[[zipfile.ZipFile], None]) -> Path:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        build(zf)
    return archive


def extract_fails(tmp_path: Path, archive: Path, reason: ErrorType, *fragments: str, **limits: Any) -> None:
    out = tmp_path / "out"
    expect(reason, lambda: extract_archive(archive, out, limits=ArchiveLimits(**limits)), archive.name, *fragments)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name], "a failed extraction leaves nothing"
    assert not (tmp_path / "evil").exists() and not Path("/tmp/evil-servingops-test").exists()


@pytest.mark.parametrize(
    ("build", "reason", "fragment"),
    [
        (lambda tf: add_file(tf, "../evil", b"x"), ErrorType.ARCHIVE_PATH_ESCAPE, "'../evil'"),
        (lambda tf: add_file(tf, "a/../../evil", b"x"), ErrorType.ARCHIVE_PATH_ESCAPE, "outside"),
        (lambda tf: add_file(tf, "/tmp/evil-servingops-test", b"x"), ErrorType.ARCHIVE_PATH_ESCAPE, "absolute"),
        (lambda tf: add_special(tf, "link", tarfile.SYMTYPE, "/etc/passwd"), ErrorType.ARCHIVE_LINK, "symbolic link"),
        (lambda tf: entries(add_file(tf, "a", b"x"), add_special(tf, "b", tarfile.LNKTYPE, "a")),
         ErrorType.ARCHIVE_LINK, "hard link"),
        (lambda tf: add_special(tf, "dev", tarfile.CHRTYPE), ErrorType.ARCHIVE_SPECIAL_FILE, "device"),
        (lambda tf: add_special(tf, "fifo", tarfile.FIFOTYPE), ErrorType.ARCHIVE_SPECIAL_FILE, "FIFO"),
        (lambda tf: entries(add_file(tf, "a", b"x"), add_file(tf, "a", b"y")), ErrorType.ARCHIVE_DUPLICATE_ENTRY,
         "more than"),
        (lambda tf: entries(add_file(tf, "a", b"x"), add_file(tf, "a/b", b"y")), ErrorType.ARCHIVE_DUPLICATE_ENTRY,
         "is a file"),
        (lambda tf: add_file(tf, "a\\b", b"x"), ErrorType.INVALID_ARCHIVE_PATH, "backslash"),
        (lambda tf: add_file(tf, "x" * 300, b"x"), ErrorType.INVALID_ARCHIVE_PATH, "too long"),
    ],
)  # fmt: skip
def test_hostile_tar_entries(tmp_path: Path, build: Callable[[tarfile.TarFile], None], reason: ErrorType,
                             fragment: str) -> None:  # fmt: skip
    extract_fails(tmp_path, tar_with(tmp_path, build), reason, fragment)


def test_symlink_after_a_good_file_removes_everything(tmp_path: Path) -> None:
    def build(tf: tarfile.TarFile) -> None:
        add_file(tf, "config.json", b"{}")
        add_special(tf, "weights.safetensors", tarfile.SYMTYPE, "../../secret")

    extract_fails(tmp_path, tar_with(tmp_path, build, "w:gz"), ErrorType.ARCHIVE_LINK, "weights.safetensors")


def test_zip_entry_escaping(tmp_path: Path) -> None:
    archive = zip_with(tmp_path, lambda zf: zf.writestr(zipfile.ZipInfo("../../evil"), b"x"))
    extract_fails(tmp_path, archive, ErrorType.ARCHIVE_PATH_ESCAPE, "'../../evil'")
    archive = zip_with(tmp_path, lambda zf: zf.writestr(zipfile.ZipInfo("/tmp/evil-servingops-test"), b"x"))
    extract_fails(tmp_path, archive, ErrorType.ARCHIVE_PATH_ESCAPE, "absolute")


def test_zip_symlink_entry(tmp_path: Path) -> None:
    def build(zf: zipfile.ZipFile) -> None:
        info = zipfile.ZipInfo("link")
        info.create_system = 3
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, b"/etc/passwd")

    extract_fails(tmp_path, zip_with(tmp_path, build), ErrorType.ARCHIVE_LINK, "'link'")


def test_zip_bomb(tmp_path: Path) -> None:
    # 64 MiB of zeros deflate to about 64 KB: a ratio near 1000.
    def build(zf: zipfile.ZipFile) -> None:
        with zf.open("weights.safetensors", "w", force_zip64=True) as out:
            for _ in range(64):
                out.write(bytes(1 << 20))

    archive = zip_with(tmp_path, build)
    assert archive.stat().st_size < 1 << 20
    extract_fails(tmp_path, archive, ErrorType.ARCHIVE_BOMB, "compression ratio", max_ratio=100,
                  ratio_grace_bytes=1 << 20)


def test_gzip_bomb_is_stopped_while_streaming(tmp_path: Path) -> None:
    # tar headers are not summed in advance: the count of bytes actually written stops this one.
    class Zeros(io.RawIOBase):
        def __init__(self, n: int) -> None:
            self.left = n

        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            n = min(len(b), self.left)
            b[:n] = bytes(n)
            self.left -= n
            return n

    def build(tf: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("weights.safetensors")
        info.size = 48 << 20
        tf.addfile(info, io.BufferedReader(Zeros(info.size)))

    archive = tar_with(tmp_path, build, "w:gz")
    extract_fails(tmp_path, archive, ErrorType.ARCHIVE_BOMB, "extraction stopped", ratio_grace_bytes=1 << 20)


def test_bytes_written_are_counted_whatever_the_header_says(tmp_path: Path) -> None:
    # An entry whose header claims 10 bytes but whose reader never ends: the chunks written are what count.
    root = tmp_path / "root"
    root.mkdir()
    written: list[int] = []
    limits = ArchiveLimits(max_ratio=100, ratio_grace_bytes=1 << 20)
    extractor = _Extractor(root, 10_000, limits, "lying.tar", written.append)
    expect(ErrorType.ARCHIVE_BOMB, lambda: extractor.add_file("w.safetensors", bytes, 10), "lying.tar")
    # Stopped at the limit, before writing the chunk that would pass it.
    assert max(written) <= max(100 * 10_000, 1 << 20)
    limits = ArchiveLimits(max_total_bytes=3 << 20)
    extractor = _Extractor(root, 1 << 40, limits, "big.tar", None)
    expect(ErrorType.ARCHIVE_TOO_LARGE, lambda: extractor.add_file("x.safetensors", bytes, None), "big.tar")
    assert (root / "x.safetensors").stat().st_size <= 3 << 20


def test_archive_too_large(tmp_path: Path) -> None:
    def build(tf: tarfile.TarFile) -> None:
        add_file(tf, "a.bin", bytes(range(256)) * 8192)  # 2 MiB, ratio 1 for a plain tar

    extract_fails(tmp_path, tar_with(tmp_path, build), ErrorType.ARCHIVE_TOO_LARGE, "limit", max_total_bytes=1 << 20)


def test_too_many_files(tmp_path: Path) -> None:
    def build_tar(tf: tarfile.TarFile) -> None:
        for i in range(20):
            add_file(tf, f"f{i}", b"x")

    extract_fails(tmp_path, tar_with(tmp_path, build_tar), ErrorType.ARCHIVE_TOO_MANY_FILES, "10 entries",
                  max_entries=10)

    def build_zip(zf: zipfile.ZipFile) -> None:
        for i in range(20):
            zf.writestr(f"f{i}", b"x")

    extract_fails(tmp_path, zip_with(tmp_path, build_zip), ErrorType.ARCHIVE_TOO_MANY_FILES, "20 entries",
                  max_entries=10)


def test_empty_archives(tmp_path: Path) -> None:
    extract_fails(tmp_path, tar_with(tmp_path, lambda tf: None), ErrorType.EMPTY_ARCHIVE, "no files")
    only_dirs = tar_with(tmp_path, lambda tf: add_special(tf, "dir", tarfile.DIRTYPE))
    extract_fails(tmp_path, only_dirs, ErrorType.EMPTY_ARCHIVE, "no files")
    extract_fails(tmp_path, zip_with(tmp_path, lambda zf: None), ErrorType.EMPTY_ARCHIVE, "no files")


def test_damaged_archives(tmp_path: Path) -> None:
    good = tar_with(tmp_path, lambda tf: add_file(tf, "a", bytes(range(256)) * 100), "w:gz")
    damaged = write(tmp_path, "damaged.tar.gz", good.read_bytes()[: good.stat().st_size // 2])
    extract_fails(tmp_path, damaged, ErrorType.INVALID_ARCHIVE)
    corrupt = write(tmp_path, "corrupt.zip", b"PK\x03\x04" + b"\0" * 100)
    extract_fails(tmp_path, corrupt, ErrorType.INVALID_ARCHIVE, "zip")


# -- the error type ---------------------------------------------------------------------------


def test_invalid_model_crosses_process_and_activity_boundaries() -> None:
    err = InvalidModel(ErrorType.MISSING_SHARD, "model.safetensors.index.json: names a missing shard")
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.reason, copy.message) == (err.reason, err.message) == ("MissingShard", str(err))
    app = application_error(err.reason, err.message)
    assert app.non_retryable and app.type == "MissingShard" and app.message == err.message
    with pytest.raises(ValueError):
        InvalidModel("not a reason!", "x")  # type: ignore[arg-type]
    assert all(CONDITION_REASON_PATTERN.match(r.value) for r in ErrorType)
