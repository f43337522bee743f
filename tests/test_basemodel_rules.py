"""The pure rules of base model delivery: storage URIs, spec metadata from an inspection (as upstream
OME derives it, never overwriting the user's), and node reports folded into status."""

from __future__ import annotations

import pytest

from servingops.activities.basemodels.aggregate import summarise
from servingops.activities.basemodels.metadata import derive, format_param_count, spec_changes
from servingops.activities.basemodels.storage import BadStorage, StorageReason, StorageScheme, parse_storage_uri
from servingops.activities.basemodels.types import NodeEntry
from servingops.api_models.ome.enums import LifeCycleState

pytestmark = pytest.mark.unit


def test_hf_uris() -> None:
    source = parse_storage_uri("hf://meta-llama/Llama-3.2-1B-Instruct")
    assert (source.scheme, source.hf_repo, source.hf_revision) == (StorageScheme.HF, "meta-llama/Llama-3.2-1B-Instruct",
                                                                   None)
    assert source.hf_url() == "https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct"
    pinned = parse_storage_uri("hf://acme/tiny@refs/pr/1")
    assert pinned.hf_url() == "https://huggingface.co/acme/tiny/tree/refs%2Fpr%2F1"


def test_modelpack_uris() -> None:
    tagged = parse_storage_uri("modelpack://127.0.0.1:5000/models/llama:v1")
    assert (tagged.registry, tagged.repository, tagged.tag, tagged.digest) == ("127.0.0.1:5000", "models/llama",
                                                                               "v1", None)
    assert parse_storage_uri("modelpack://reg.example/models/llama").tag == "latest"
    digest = "sha256:" + "a" * 64
    pinned = parse_storage_uri(f"modelpack://reg.example/models/llama@{digest}")
    assert (pinned.tag, pinned.digest) == (None, digest)


def test_pvc_and_local_uris() -> None:
    pvc = parse_storage_uri("pvc://weights/llama/8b/")
    assert (pvc.pvc_name, pvc.sub_path) == ("weights", "llama/8b")
    assert parse_storage_uri("pvc://weights").sub_path == ""
    assert parse_storage_uri("local:///mnt/models/llama").path == "/mnt/models/llama"


@pytest.mark.parametrize("scheme", ["oci", "s3", "az", "gs", "github", "vendor"])
def test_the_seeds_other_schemes_are_unsupported_by_name(scheme: str) -> None:
    with pytest.raises(BadStorage) as refused:
        parse_storage_uri(f"{scheme}://something/else")
    assert refused.value.reason is StorageReason.UNSUPPORTED_STORAGE
    assert f"{scheme}://" in refused.value.message and "modelpack://" in refused.value.message


@pytest.mark.parametrize("uri", ["", "llama", "http://example.com/x", "hf://a", "hf://a/b/c", "hf://a/b@",
                                 "modelpack://reg/Upper/Case:v1", "modelpack://reg/m@sha256:short",
                                 "modelpack://reg", "pvc://Bad_Name/x", "pvc://weights/../etc", "local://",
                                 "local://a/../../b"])
def test_malformed_uris_are_invalid(uri: str) -> None:
    with pytest.raises(BadStorage) as refused:
        parse_storage_uri(uri)
    assert refused.value.reason is StorageReason.INVALID_STORAGE_URI
    assert "supported: hf://" in refused.value.message


def test_param_count_in_upstreams_form() -> None:
    """Upstream's FormatParamCount, quirk included: a value with exactly two decimals takes the
    one-decimal format (1.23T -> "1.2T"), so a runtime's size range compares the same strings."""
    assert [format_param_count(n) for n in (999, 560_000_000, 1_100_048_384, 7_000_000_000, 1_500_000_000,
                                            1_230_000_000_000)] == ["999", "560M", "1.10B", "7B", "1.5B", "1.2T"]


INSPECTED = {"architecture": "LlamaForCausalLM", "family": "llama", "parameterCount": 1_235_814_400,
             "contextWindowTokens": 131072, "quantization": "fp8"}


def test_inspection_fills_only_empty_fields() -> None:
    derived = derive("Safetensors", INSPECTED)
    assert spec_changes({}, derived) == {
        "modelType": "llama", "modelArchitecture": "LlamaForCausalLM", "modelParameterSize": "1.24B",
        "maxTokens": 131072, "quantization": "fp8", "modelFormat": {"name": "safetensors", "version": "1.0.0"},
        "modelFramework": {"name": "transformers"}}
    user = {"modelType": "mine", "modelArchitecture": "X", "modelParameterSize": "1B", "maxTokens": 8,
            "quantization": "int4", "modelFormat": {"name": "safetensors", "version": "2"},
            "modelFramework": {"name": "vllm"}}
    assert spec_changes(user, derived) == {}


def test_a_format_version_is_added_only_to_the_same_format() -> None:
    derived = derive("Safetensors", INSPECTED)
    assert spec_changes({"modelFormat": {"name": "SafeTensors"}}, derived)["modelFormat"] == {
        "name": "SafeTensors", "version": "1.0.0"}
    assert "modelFormat" not in spec_changes({"modelFormat": {"name": "pytorch"}}, derived)


def test_a_dtype_is_no_quantization_and_gguf_has_no_framework() -> None:
    derived = derive("GGUF", {**INSPECTED, "quantization": "BF16"})
    changes = spec_changes({}, derived)
    assert "quantization" not in changes and "modelFramework" not in changes
    assert changes["modelFormat"] == {"name": "gguf"}


def entry(node: str, status: str, digest: str = "sha256:new") -> NodeEntry:
    return NodeEntry(node=node, status=status, digest=digest)


def test_reports_fold_as_upstreams_controller() -> None:
    ready = summarise([entry("b", "Ready"), entry("a", "Ready"), entry("c", "Failed")], "sha256:new")
    assert (ready.state, ready.nodes_ready, ready.nodes_failed, ready.settled) == (
        LifeCycleState.READY, ["a", "b"], ["c"], True)
    failed = summarise([entry("c", "Failed")], "sha256:new")
    assert failed.state is LifeCycleState.FAILED
    moving = summarise([entry("a", "Updating"), entry("b", "Ready", "sha256:old")], "sha256:new")
    assert (moving.state, moving.nodes_ready, moving.nodes_updating, moving.settled) == (
        LifeCycleState.IN_TRANSIT, [], ["a", "b"], False)
    assert summarise([], "sha256:new").state is LifeCycleState.IN_TRANSIT
    assert summarise([entry("a", "Ready", "")], None).nodes_ready == ["a"]
