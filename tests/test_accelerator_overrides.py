"""A runtime's acceleratorConfig applied to the main container (rendering/accelerator_overrides.py)
and chosen by the service's accelerator class (rendering/resolution.py)."""

from __future__ import annotations

import pytest

from servingops.api_models.ome.runtimes import AcceleratorModelConfig
from servingops.rendering.accelerator_overrides import apply, merge_args
from servingops.rendering.resolution import resolve_service
from tests.support.serving_world import Cluster, ready_model, sample_service, sglang_runtime

pytestmark = pytest.mark.unit


def test_args_merge_by_flag_keeping_order() -> None:
    base = ["--model-path", "/m", "--tp-size", "1", "--enable-metrics", "--port=8080"]
    merged = merge_args(base, ["--tp-size", "8", "--port=9000", "--quantization", "fp8"])
    assert merged == ["--model-path", "/m", "--tp-size", "8", "--enable-metrics", "--port=9000",
                      "--quantization", "fp8"]
    assert merge_args(base, []) == base


def test_env_args_and_parallelism_are_overridden() -> None:
    container = {"name": "ome-container", "image": "sglang",
                 "command": ["python3", "-m", "sglang.launch_server", "--tp", "1", "--pp-size=1"],
                 "args": ["--mem-frac", "0.9"], "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    config = AcceleratorModelConfig.model_validate({
        "environmentOverride": {"B": "20", "C": "3"}, "runtimeArgsOverride": ["--mem-frac", "0.8"],
        "tensorParallelismOverride": {"tensorParallelSize": 8, "pipelineParallelSize": 2}})
    tuned = apply(container, config)
    assert tuned["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "20"}, {"name": "C", "value": "3"}]
    assert tuned["args"] == ["--mem-frac", "0.8"]
    assert tuned["command"] == ["python3", "-m", "sglang.launch_server", "--tp", "8", "--pp-size=2"]
    assert container["env"][1]["value"] == "2"  # the input is untouched


def test_the_service_accelerator_class_picks_the_formats_tuning() -> None:
    runtime = sglang_runtime()
    runtime["spec"]["acceleratorRequirements"] = {"acceleratorClasses": ["nvidia-h100"]}
    runtime["spec"]["supportedModelFormats"][0]["acceleratorConfig"] = {
        "nvidia-h100": {"environmentOverride": {"NCCL_ALGO": "Ring"},
                        "tensorParallelismOverride": {"tensorParallelSize": 2}}}
    service = sample_service()
    plain = resolve_service(Cluster(ready_model(), runtime), service).spec["engine"]["runner"]
    assert "--tp-size" in plain["command"] and plain["command"][plain["command"].index("--tp-size") + 1] == "1"
    service["spec"]["acceleratorSelector"] = {"acceleratorClass": "nvidia-h100"}
    # The class named must exist (it is also what renders the pods' node selector and GPUs).
    h100 = {"apiVersion": "ome.io/v1beta1", "kind": "AcceleratorClass", "metadata": {"name": "nvidia-h100"},
            "spec": {"discovery": {"nodeSelector": {"nvidia.com/gpu.product": "H100"}}, "capabilities": {}}}
    runner = resolve_service(Cluster(ready_model(), runtime, h100), service).spec["engine"]["runner"]
    assert runner["command"][runner["command"].index("--tp-size") + 1] == "2"
    assert {"name": "NCCL_ALGO", "value": "Ring"} in runner["env"]
