"""An InferenceService naming a model and a runtime, made concrete (rendering/resolution.py),
on upstream OME's own sample manifests (tests/fixtures/ome_samples), with an in-memory reader."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.rendering import render
from servingops.rendering.resolution import Unresolvable, UnresolvableReason, resolve_service
from tests.support.serving_world import Cluster, ready_model, sample_service, sglang_runtime

pytestmark = pytest.mark.unit













def test_the_upstream_sample_renders_what_its_runtime_declares() -> None:
    runtime = sglang_runtime()
    resolved = resolve_service(Cluster(ready_model(), runtime), sample_service())
    assert resolved.runtime == "ClusterServingRuntime/srt-llama-3-2-1b-instruct"
    assert resolved.model == "ClusterBaseModel llama-3-2-1b-instruct"
    spec = InferenceServiceSpec.model_validate(resolved.spec)
    assert spec.engine is not None and spec.router is not None
    rendered = render.render_revision("llama-3-2-1b-instruct", ComponentType.ENGINE, spec.engine)
    pod = rendered.template["spec"]
    [container] = pod["containers"]
    declared = runtime["spec"]["engineConfig"]["runner"]
    for field in ("image", "command", "ports", "resources", "readinessProbe", "livenessProbe", "startupProbe"):
        assert container[field] == declared[field], field
    path = "/raid/models/meta/llama-3-2-1b-instruct"
    assert container["volumeMounts"] == [{"mountPath": "/dev/shm", "name": "dshm"},
                                         {"name": "llama-3-2-1b-instruct", "mountPath": path, "readOnly": True}]
    assert {"name": "MODEL_PATH", "value": path} in container["env"]
    assert {"name": "llama-3-2-1b-instruct", "hostPath": {"path": path, "type": "Directory"}} in pod["volumes"]
    assert pod["nodeSelector"] == {"models.ome.io/clusterbasemodel.llama-3-2-1b-instruct": "Ready"}
    assert pod["tolerations"] == runtime["spec"]["engineConfig"]["tolerations"]
    assert rendered.template["metadata"]["annotations"] == runtime["spec"]["engineConfig"]["annotations"]
    # The service's own fields survive the merge.
    assert (spec.engine.min_replicas, spec.engine.max_replicas) == (1, 1)
    # The router gets its runner, and no model.
    router = render.render_revision("llama-3-2-1b-instruct", ComponentType.ROUTER, spec.router).template["spec"]
    assert router["containers"][0]["image"] == runtime["spec"]["routerConfig"]["runner"]["image"]
    assert "nodeSelector" not in router and "volumes" not in router


def test_a_runtime_change_is_a_new_revision_and_an_unchanged_one_is_not() -> None:
    runtime = sglang_runtime()
    cluster = Cluster(ready_model(), runtime)

    def revision() -> str:
        spec = InferenceServiceSpec.model_validate(resolve_service(cluster, sample_service()).spec)
        assert spec.engine is not None
        return render.render_revision("svc", ComponentType.ENGINE, spec.engine).revision

    first = revision()
    assert revision() == first
    changed = copy.deepcopy(runtime)
    changed["spec"]["engineConfig"]["runner"]["image"] = "docker.io/lmsysorg/sglang:v0.5.6"
    cluster.add(changed)
    assert revision() != first


def test_no_runtime_named_selects_one_and_says_why_others_failed() -> None:
    auto = sglang_runtime()
    auto["spec"]["supportedModelFormats"][0]["autoSelect"] = True
    vllm = copy.deepcopy(auto)
    vllm["metadata"]["name"] = "vllm-small"
    vllm["spec"]["modelSizeRange"] = {"min": "7B", "max": "70B"}
    service = sample_service()
    del service["spec"]["runtime"]
    resolved = resolve_service(Cluster(ready_model(), auto, vllm), service)
    assert resolved.runtime == "ClusterServingRuntime/srt-llama-3-2-1b-instruct"

    manual = sglang_runtime()  # autoSelect false: never chosen automatically
    with pytest.raises(Unresolvable) as refused:
        resolve_service(Cluster(ready_model(), manual, vllm), service)
    assert refused.value.reason is UnresolvableReason.NO_RUNTIME
    message = refused.value.message
    assert "ClusterBaseModel llama-3-2-1b-instruct (format safetensors 1.0.0, framework transformers" in message
    assert "ClusterServingRuntime srt-llama-3-2-1b-instruct: no supported format has autoSelect: true" in message
    assert "ClusterServingRuntime vllm-small: model size 1.24B is outside the runtime's range [7B, 70B]" in message


def test_a_namespaced_runtime_wins_and_inherits_from_a_cluster_one() -> None:
    base = sglang_runtime()
    base["spec"]["supportedModelFormats"][0]["autoSelect"] = True
    local = {"apiVersion": "ome.io/v1beta1", "kind": "ServingRuntime",
             "metadata": {"name": "team-sglang", "namespace": "llama-3-2-1b-instruct",
                          "annotations": {"ome.io/inherit-from": "srt-llama-3-2-1b-instruct"}},
             "spec": {"engineConfig": {"runner": {"name": "ome-container", "image": "sglang:team"}}}}
    service = sample_service()
    del service["spec"]["runtime"]
    resolved = resolve_service(Cluster(ready_model(), base, local), service)
    assert resolved.runtime == "ServingRuntime/team-sglang"
    runner = resolved.spec["engine"]["runner"]
    assert runner["image"] == "sglang:team"
    assert runner["command"] == base["spec"]["engineConfig"]["runner"]["command"]


@pytest.mark.parametrize(("change", "reason", "words"), [
    (lambda c, s: c.objects.clear(), UnresolvableReason.MODEL_NOT_FOUND,
     "ClusterBaseModel llama-3-2-1b-instruct does not exist"),
    (lambda c, s: c.add(ready_model(state="Importing")), UnresolvableReason.MODEL_NOT_READY, "state Importing"),
    (lambda c, s: s["spec"]["runtime"].update(name="gone"), UnresolvableReason.RUNTIME_NOT_FOUND,
     "ClusterServingRuntime gone does not exist"),
    (lambda c, s: s["spec"]["model"].update(kind="Dataset", apiGroup="example.com"),
     UnresolvableReason.MODEL_KIND_UNSUPPORTED, "Dataset.example.com"),
    (lambda c, s: s["spec"]["model"].update(kind="Model", apiGroup="ai.deckhouse.io"),
     UnresolvableReason.MODEL_NOT_FOUND, "Model llama-3-2-1b-instruct/llama-3-2-1b-instruct does not exist"),
])
def test_bad_references_are_refused_with_a_reason(change: Any, reason: UnresolvableReason, words: str) -> None:
    cluster = Cluster(ready_model(), sglang_runtime())
    service = sample_service()
    change(cluster, service)
    with pytest.raises(Unresolvable) as refused:
        resolve_service(cluster, service)
    assert refused.value.reason is reason
    assert words in refused.value.message


def test_a_named_runtime_that_cannot_serve_the_model_is_refused() -> None:
    model = ready_model()
    model["spec"]["modelArchitecture"] = "GemmaForCausalLM"
    with pytest.raises(Unresolvable) as refused:
        resolve_service(Cluster(model, sglang_runtime()), sample_service())
    assert refused.value.reason is UnresolvableReason.RUNTIME_NOT_COMPATIBLE
    assert "architecture 'GemmaForCausalLM' is not the runtime's 'LlamaForCausalLM'" in refused.value.message


def test_an_inline_service_is_left_alone() -> None:
    inline = {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
              "metadata": {"name": "x", "namespace": "y"},
              "spec": {"engine": {"runner": {"image": "vllm:1"}}}}
    assert resolve_service(Cluster(), inline).spec == inline["spec"]


# -- autoSync: false -------------------------------------------------------------------------------


class SnapshotCluster(Cluster):
    def __init__(self, *objects: dict[str, Any]) -> None:
        super().__init__(*objects)
        self.snapshots: dict[str, dict[str, Any]] = {}

    def get_snapshot(self, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.snapshots.get(name))

    def save_snapshot(self, name: str, data: dict[str, Any]) -> None:
        self.snapshots.setdefault(name, copy.deepcopy(data))


def pinned_service(**status: Any) -> dict[str, Any]:
    service = sample_service()
    service["spec"]["runtime"]["autoSync"] = False
    if status:
        service["status"] = status
    return service


def image_of(resolved: Any) -> str:
    return str(resolved.spec["engine"]["runner"]["image"])


def test_auto_sync_false_pins_a_snapshot_until_runtime_sync_moves() -> None:
    runtime = sglang_runtime()
    cluster = SnapshotCluster(ready_model(), runtime)
    first = resolve_service(cluster, pinned_service())
    assert first.pinned_revision is not None and first.pinned_revision.startswith("srt-llama-3-2-1b-instruct-")
    assert first.sync_token == "" and list(cluster.snapshots) == [first.pinned_revision]
    old_image = image_of(first)

    changed = copy.deepcopy(runtime)
    changed["spec"]["engineConfig"]["runner"]["image"] = "docker.io/lmsysorg/sglang:v0.6"
    cluster.add(changed)
    kept = resolve_service(cluster, pinned_service(pinnedRevisionName=first.pinned_revision,
                                                   lastRuntimeSyncToken=""))
    assert (kept.pinned_revision, image_of(kept)) == (first.pinned_revision, old_image)

    bumped = pinned_service(pinnedRevisionName=first.pinned_revision, lastRuntimeSyncToken="")
    bumped["metadata"]["annotations"] = {"ome.io/runtime-sync": "2026-11-30"}
    synced = resolve_service(cluster, bumped)
    assert synced.pinned_revision != first.pinned_revision and synced.sync_token == "2026-11-30"
    assert image_of(synced) == "docker.io/lmsysorg/sglang:v0.6"
    # An autoSync service follows the live runtime with no pin.
    live = resolve_service(cluster, sample_service())
    assert live.pinned_revision is None and image_of(live) == "docker.io/lmsysorg/sglang:v0.6"


def test_an_explicit_revision_is_used_even_when_the_runtime_is_gone() -> None:
    cluster = SnapshotCluster(ready_model(), sglang_runtime())
    pin = resolve_service(cluster, pinned_service()).pinned_revision
    assert pin is not None
    del cluster.objects[("ome.io", "ClusterServingRuntime", None, "srt-llama-3-2-1b-instruct")]
    service = pinned_service()
    service["spec"]["runtime"]["revision"] = pin
    assert resolve_service(cluster, service).pinned_revision == pin
    service["spec"]["runtime"]["revision"] = "nope-0000000000"
    with pytest.raises(Unresolvable) as refused:
        resolve_service(cluster, service)
    assert refused.value.reason is UnresolvableReason.RUNTIME_REVISION_NOT_FOUND


# -- fine-tuned weights ----------------------------------------------------------------------------


def weight(name: str, **status: Any) -> dict[str, Any]:
    return {"apiVersion": "ome.io/v1beta1", "kind": "FineTunedWeight", "metadata": {"name": name},
            "spec": {"baseModelRef": {"name": "llama-3-2-1b-instruct"}, "modelType": "Adapter",
                     "hyperParameters": {"rank": 8},
                     "storage": {"storageUri": f"hf://acme/{name}", "path": f"/raid/adapters/{name}"}},
            "status": status or {"state": "Ready", "nodesReady": ["node-a"]}}


def test_fine_tuned_weights_are_mounted_beside_the_model_and_required_on_the_node() -> None:
    service = sample_service()
    service["spec"]["model"]["fineTunedWeights"] = ["sql-lora", "chat-lora"]
    cluster = Cluster(ready_model(), sglang_runtime(), weight("sql-lora"), weight("chat-lora"))
    engine = InferenceServiceSpec.model_validate(resolve_service(cluster, service).spec).engine
    assert engine is not None
    pod = render.render_revision("svc", ComponentType.ENGINE, engine).template["spec"]
    [container] = pod["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for name in ("sql-lora", "chat-lora"):
        assert mounts[f"/raid/adapters/{name}"]["readOnly"] is True
        assert pod["nodeSelector"][f"models.ome.io/finetunedweight.{name}"] == "Ready"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FINE_TUNED_WEIGHT_PATHS"] == "/raid/adapters/sql-lora,/raid/adapters/chat-lora"
    assert env["MODEL_PATH"] == "/raid/models/meta/llama-3-2-1b-instruct"


@pytest.mark.parametrize(("objects", "reason"), [
    ((), UnresolvableReason.FINE_TUNED_WEIGHT_NOT_FOUND),
    ((weight("sql-lora", state="Importing"),), UnresolvableReason.FINE_TUNED_WEIGHT_NOT_READY),
])
def test_a_missing_or_unready_weight_holds_the_service(objects: tuple[dict[str, Any], ...],
                                                       reason: UnresolvableReason) -> None:
    service = sample_service()
    service["spec"]["model"]["fineTunedWeights"] = ["sql-lora"]
    with pytest.raises(Unresolvable) as held:
        resolve_service(Cluster(ready_model(), sglang_runtime(), *objects), service)
    assert held.value.reason is reason and "FineTunedWeight sql-lora" in held.value.message


# -- overlays --------------------------------------------------------------------------------------


def overlay_model(name: str, **status: Any) -> dict[str, Any]:
    model = ready_model(**status)
    model["metadata"]["name"] = name
    model["spec"]["storage"]["path"] = f"/raid/models/{name}"
    return model


def test_ready_overlays_are_mounted_and_the_others_are_left_out_saying_why() -> None:
    service = sample_service()
    service["spec"]["model"]["overlays"] = [{"name": "draft-1b"}, {"name": "gone"},
                                            {"name": "cold", "kind": "ClusterBaseModel"}]
    cluster = Cluster(ready_model(), sglang_runtime(), overlay_model("draft-1b"),
                      overlay_model("cold", state="Importing"))
    resolved = resolve_service(cluster, service)
    assert resolved.overlays == [{"name": "draft-1b", "envVar": "OVERLAY_DRAFT_1B_MODEL_PATH",
                                  "mountPath": "/opt/ml/model-overlays/draft-1b", "distribution": "PerNode"}]
    assert [s.split(":")[0] for s in resolved.skipped_overlays] == ["gone", "cold"]
    assert "does not exist" in resolved.skipped_overlays[0] and "state Importing" in resolved.skipped_overlays[1]
    engine = InferenceServiceSpec.model_validate(resolved.spec).engine
    assert engine is not None
    pod = render.render_revision("svc", ComponentType.ENGINE, engine).template["spec"]
    [container] = pod["containers"]
    assert {"name": "OVERLAY_DRAFT_1B_MODEL_PATH", "value": "/opt/ml/model-overlays/draft-1b"} in container["env"]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/opt/ml/model-overlays/draft-1b")
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert mount["readOnly"] and volume["hostPath"]["path"] == "/raid/models/draft-1b"
    assert pod["nodeSelector"]["models.ome.io/clusterbasemodel.draft-1b"] == "Ready"
    assert "models.ome.io/clusterbasemodel.cold" not in pod["nodeSelector"]


# -- Deckhouse models by reference -----------------------------------------------------------------


def deckhouse_model(phase: str = "Ready") -> dict[str, Any]:
    return {"apiVersion": "ai.deckhouse.io/v1alpha1", "kind": "Model",
            "metadata": {"name": "tiny-llama", "namespace": "llama-3-2-1b-instruct"},
            "spec": {"source": {"url": "https://huggingface.co/acme/tiny-llama"}},
            "status": {"phase": phase,
                       "artifact": {"digest": "sha256:" + "ab" * 32, "kind": "OCI"},
                       "resolved": {"format": "Safetensors", "architecture": "LlamaForCausalLM",
                                    "parameterCount": 1_235_814_400, "quantization": "BF16"}}}


def test_a_deckhouse_model_is_selected_by_its_resolved_metadata_and_served_from_its_artifact() -> None:
    runtime = sglang_runtime()
    service = sample_service()
    service["spec"]["model"] = {"name": "tiny-llama", "kind": "Model", "apiGroup": "ai.deckhouse.io"}
    resolved = resolve_service(Cluster(deckhouse_model(), runtime), service, "registry.local:5000/models")
    assert resolved.model == "Model llama-3-2-1b-instruct/tiny-llama"
    # The runtime asks for format 1.0.0 / transformers 4.45.0.dev0: a Deckhouse model knows no versions.
    assert resolved.runtime == "ClusterServingRuntime/srt-llama-3-2-1b-instruct"
    engine = InferenceServiceSpec.model_validate(resolved.spec).engine
    assert engine is not None
    pod = render.render_revision("svc", ComponentType.ENGINE, engine).template["spec"]
    assert {"name": "tiny-llama", "image": {"reference": "registry.local:5000/models@sha256:" + "ab" * 32,
                                            "pullPolicy": "IfNotPresent"}} in pod["volumes"]
    [container] = pod["containers"]
    assert {"name": "MODEL_PATH", "value": "/models/tiny-llama"} in container["env"]
    assert "nodeSelector" not in pod  # any node can pull the artifact


def test_a_deckhouse_model_not_ready_holds_and_a_size_outside_the_range_does_not_fit() -> None:
    service = sample_service()
    service["spec"]["model"] = {"name": "tiny-llama", "kind": "Model", "apiGroup": "ai.deckhouse.io"}
    with pytest.raises(Unresolvable) as held:
        resolve_service(Cluster(deckhouse_model("Publishing"), sglang_runtime()), service, "r/m")
    assert held.value.reason is UnresolvableReason.MODEL_NOT_READY and "phase Publishing" in held.value.message
    big = deckhouse_model()
    big["status"]["resolved"]["parameterCount"] = 70_000_000_000
    with pytest.raises(Unresolvable) as refused:
        resolve_service(Cluster(big, sglang_runtime()), service, "r/m")
    assert refused.value.reason is UnresolvableReason.RUNTIME_NOT_COMPATIBLE
    assert "model size 70B is outside the runtime's range [500M, 2B]" in refused.value.message


def test_the_runtimes_scaling_policy_is_the_default_and_the_services_replaces_it_whole() -> None:
    runtime = sglang_runtime()
    runtime["spec"]["scalingPolicy"] = {"mode": "Proportional",
                                        "proportional": {"anchor": "engine", "ratios": {"router": "0.25"}}}
    cluster = Cluster(ready_model(), runtime)
    inherited = InferenceServiceSpec.model_validate(resolve_service(cluster, sample_service()).spec)
    assert inherited.scaling_policy is not None
    assert inherited.scaling_policy.model_dump(by_alias=True, exclude_none=True, mode="json") == \
        runtime["spec"]["scalingPolicy"]
    own = sample_service()
    own["spec"]["scalingPolicy"] = {"mode": "Pinned"}
    replaced = InferenceServiceSpec.model_validate(resolve_service(cluster, own).spec)
    assert replaced.scaling_policy is not None
    assert replaced.scaling_policy.model_dump(by_alias=True, exclude_none=True, mode="json") == {"mode": "Pinned"}
