"""Component merge and model wiring (rendering/runtime_merge.py), pure."""

from __future__ import annotations

import pytest

from servingops.rendering.runtime_merge import (
    ModelMount,
    attach_model,
    merge_component,
    strategic_merge,
)

pytestmark = pytest.mark.unit

RUNTIME_ENGINE = {
    "minReplicas": 1,
    "containers": [{
        "name": "ome-container",
        "image": "lmsysorg/sglang:v0.4",
        "args": ["--model-path", "$(MODEL_PATH)", "--tp", "1"],
        "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "PORT", "value": "8080"}],
        "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "40Gi"}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }],
    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
}


def test_the_services_component_merges_over_the_runtimes() -> None:
    isvc_engine = {
        "minReplicas": 2,
        "containers": [{
            "name": "ome-container",
            "args": ["--tp", "2"],
            "env": [{"name": "LOG_LEVEL", "value": "debug"}, {"name": "EXTRA", "value": "1"}],
            "resources": {"limits": {"memory": "80Gi"}},
        }, {"name": "sidecar", "image": "busybox"}],
        "volumes": [{"name": "cache", "emptyDir": {}}],
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "llm"}],
    }
    merged = merge_component(RUNTIME_ENGINE, isvc_engine)
    assert merged is not None
    main, sidecar = merged["containers"]
    assert main["image"] == "lmsysorg/sglang:v0.4"  # kept from the runtime
    assert main["args"] == ["--tp", "2"]  # lists without a merge key are replaced
    assert main["env"] == [{"name": "LOG_LEVEL", "value": "debug"}, {"name": "PORT", "value": "8080"},
                           {"name": "EXTRA", "value": "1"}]  # env by name, runtime order first
    assert main["resources"] == {"limits": {"nvidia.com/gpu": "1", "memory": "80Gi"}}
    assert main["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert sidecar == {"name": "sidecar", "image": "busybox"}
    assert [v["name"] for v in merged["volumes"]] == ["dshm", "cache"]
    assert merged["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "llm"}]
    assert merged["minReplicas"] == 2
    assert RUNTIME_ENGINE["minReplicas"] == 1  # inputs untouched


def test_an_explicit_null_removes_and_absent_components_are_not_rendered() -> None:
    merged = strategic_merge({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"d": None}, "a": None})
    assert merged == {"b": {"c": 2}}
    assert merge_component(RUNTIME_ENGINE, None) is None
    assert merge_component(None, {"minReplicas": 1}) == {"minReplicas": 1}


def test_the_model_is_mounted_read_only_with_model_path_and_a_ready_node() -> None:
    mount = ModelMount(volume_name="llama-3-2-1b", path="/raid/models/llama-3-2-1b",
                       node_label="models.ome.io/clusterbasemodel.llama-3-2-1b")
    wired = attach_model(RUNTIME_ENGINE, mount)
    container = wired["containers"][0]
    assert {"name": "llama-3-2-1b", "mountPath": "/raid/models/llama-3-2-1b", "readOnly": True} in container[
        "volumeMounts"]
    assert {"name": "MODEL_PATH", "value": "/raid/models/llama-3-2-1b"} in container["env"]
    assert {"name": "llama-3-2-1b", "hostPath": {"path": "/raid/models/llama-3-2-1b", "type": "Directory"}} in wired[
        "volumes"]
    assert wired["nodeSelector"] == {"models.ome.io/clusterbasemodel.llama-3-2-1b": "Ready"}
    assert attach_model(wired, mount) == wired  # idempotent
    assert "nodeSelector" not in RUNTIME_ENGINE


def test_a_model_path_the_container_sets_is_kept() -> None:
    engine = {"containers": [{"name": "x", "image": "i", "env": [{"name": "MODEL_PATH", "value": "/custom"}]}]}
    wired = attach_model(engine, ModelMount("m", "/models/m", "models.ome.io/clusterbasemodel.m"))
    assert wired["containers"][0]["env"] == [{"name": "MODEL_PATH", "value": "/custom"}]


def test_the_named_runner_container_gets_the_mount() -> None:
    engine = {"containers": [{"name": "proxy", "image": "p"}, {"name": "ome-container", "image": "e"}]}
    wired = attach_model(engine, ModelMount("m", "/models/m", "label"), container_name="ome-container")
    assert "volumeMounts" not in wired["containers"][0]
    assert wired["containers"][1]["volumeMounts"][0]["mountPath"] == "/models/m"
