"""Accelerator selection (rendering/accelerator_selection.py) and its place in resolution
(rendering/resolution.py choose_accelerators, apply_accelerators): which class a component asks for, which
one each policy chooses, what is held and why, and what the chosen class renders into the pods."""

from __future__ import annotations

from typing import Any

import pytest

from servingops.api_models.ome.accelerator import AcceleratorConstraints
from servingops.api_models.ome.accelerator_class import AcceleratorClassSpec
from servingops.api_models.ome.enums import AcceleratorSelectionPolicy, ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.api_models.ome.runtimes import AcceleratorRequirements
from servingops.rendering import accelerator_selection as sel
from servingops.rendering import render
from servingops.rendering.resolution import Unresolvable, UnresolvableReason, resolve_service
from tests.support.serving_world import Cluster, ready_model, sample_service, sglang_runtime

pytestmark = pytest.mark.unit
GPU = "nvidia.com/gpu"


def klass(memory: str, *, vendor: str = "nvidia", family: str = "ampere", features: list[str] | None = None,
          cc: str = "8.0", fp16: int = 0, cost: dict[str, Any] | None = None, product: str = "x",
          gpus: str = "1") -> AcceleratorClassSpec:
    return AcceleratorClassSpec.model_validate({
        "vendor": vendor, "family": family,
        "discovery": {"nodeSelector": {"nvidia.com/gpu.product": product}},
        "capabilities": {"memoryGB": memory, "features": features or [], "computeCapability": cc,
                         "performance": {"fp16Tflops": fp16}},
        "resources": [{"name": GPU, "quantity": gpus}], **({"cost": cost} if cost else {})})


CLASSES = {
    "a10": klass("24Gi", cc="8.6", fp16=125, cost={"perHour": "1.2"}, product="A10"),
    "a100-40": klass("40Gi", fp16=312, features=["nvlink"], cost={"perHour": "3", "spotPerHour": "1"},
                     product="A100-40"),
    "a100-80": klass("80Gi", fp16=312, features=["nvlink"], cost={"perHour": "4"}, product="A100-80"),
    "h100": klass("80Gi", family="hopper", cc="9.0", fp16=989, features=["nvlink", "fp8"], cost={"perHour": "8"},
                  product="H100"),
}


def request(policy: str | None = None, named: str | None = None, **constraints: Any) -> sel.AcceleratorRequest:
    return sel.AcceleratorRequest(
        component="engine", named=named, named_by="test",
        policy=AcceleratorSelectionPolicy(policy) if policy else None,
        constraints=AcceleratorConstraints.model_validate(constraints) if constraints else None)


def test_what_a_component_asks_for_override_then_service_then_annotation() -> None:
    isvc = {"metadata": {"annotations": {"ome.io/accelerator-class": "ann"}},
            "spec": {"acceleratorSelector": {"acceleratorClass": "svc", "policy": "Cheapest"},
                     "engine": {"acceleratorOverride": {"acceleratorClass": "eng"}}, "decoder": {}}}
    assert sel.request_for(isvc, "engine").named == "eng"  # type: ignore[union-attr]
    assert sel.request_for(isvc, "decoder").named == "svc"  # type: ignore[union-attr]
    del isvc["spec"]["acceleratorSelector"]["acceleratorClass"]
    decoder = sel.request_for(isvc, "decoder")
    assert decoder is not None and decoder.named == "ann"
    assert sel.request_for({"spec": {"engine": {}}}, "engine") is None
    policy = sel.request_for({"spec": {"acceleratorSelector": {"policy": "BestFit", "constraints": {"minMemory": 40}},
                                       "engine": {"acceleratorOverride": {"policy": "Cheapest"}}}}, "engine")
    assert policy is not None and policy.policy is AcceleratorSelectionPolicy.CHEAPEST
    assert policy.constraints is not None and policy.constraints.min_memory == 40


def test_a_named_class_wins_over_constraints_and_must_exist() -> None:
    assert sel.choose(request(named="a10", minMemory=80), CLASSES, None).name == "a10"
    with pytest.raises(sel.NoAcceleratorClass) as held:
        sel.choose(request(named="tpu"), CLASSES, None)
    assert held.value.reason is sel.SelectionReason.NOT_FOUND and "tpu" in held.value.message


def test_each_policy() -> None:
    assert sel.choose(request("FirstAvailable"), CLASSES, None).name == "a10"  # every class, by name
    assert sel.choose(request("BestFit", minMemory=40), CLASSES, None).name == "a100-40"  # least over-provisioned
    assert sel.choose(request("BestFit", minMemory=70, minComputePerformanceTFLOPS=900), CLASSES, None).name == "h100"
    assert sel.choose(request("Cheapest"), CLASSES, None).name == "a100-40"  # its spot price is the lowest
    assert sel.choose(request("Cheapest", minMemory=80), CLASSES, None).name == "a100-80"
    assert sel.choose(request("MostCapable"), CLASSES, None).name == "h100"


def test_cheapest_falls_back_to_tokens_then_tier_then_the_first() -> None:
    tokens = {"x": klass("1", cost={"perMillionTokens": "2"}), "y": klass("1", cost={"perMillionTokens": "1"})}
    assert sel.choose(request("Cheapest"), tokens, None).name == "y"
    tiers = {"x": klass("1", cost={"tier": "high"}), "y": klass("1", cost={"tier": "low"})}
    assert sel.choose(request("Cheapest"), tiers, None).name == "y"
    assert sel.choose(request("Cheapest"), {"x": klass("1"), "y": klass("1")}, None).name == "x"


def test_constraints_filter_and_a_request_nothing_satisfies_is_held_with_every_reason() -> None:
    hopper = sel.choose(request("FirstAvailable", architectureFamilies=["nvidia-hopper"]), CLASSES, None)
    assert hopper.name == "h100"
    assert sel.choose(request("FirstAvailable", requiredFeatures=["FP8"]), CLASSES, None).name == "h100"
    assert sel.choose(request("FirstAvailable", minArchitectureVersion="8.5"), CLASSES, None).name == "a10"
    assert sel.choose(request("FirstAvailable", excludedClasses=["a10"], maxMemory=40), CLASSES, None).name == "a100-40"
    with pytest.raises(sel.NoAcceleratorClass) as held:
        sel.choose(request("BestFit", minMemory=200), CLASSES, None)
    assert held.value.reason is sel.SelectionReason.NO_MATCH
    assert "a10: memory 24GB < 200GB" in held.value.message and "h100: memory 80GB < 200GB" in held.value.message


def test_the_runtime_names_the_pool_and_its_requirements_filter() -> None:
    runtime = AcceleratorRequirements.model_validate({"acceleratorClasses": ["h100", "gone", "a100-80", "a10"],
                                                      "minMemory": 40})
    assert sel.choose(request("FirstAvailable"), CLASSES, runtime).name == "h100"  # the runtime's order
    assert sel.choose(request("Cheapest"), CLASSES, runtime).name == "a100-80"
    with pytest.raises(sel.NoAcceleratorClass) as held:
        sel.choose(request("FirstAvailable", requiredFeatures=["tpu"]), CLASSES, runtime)
    assert "gone: does not exist" in held.value.message


def test_memory_reads_plain_numbers_as_gb() -> None:
    assert sel.memory_gb(klass("80")) == 80 and sel.memory_gb(klass("80Gi")) == 80


def test_the_choice_renders_node_selector_affinity_and_resources() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    spec = AcceleratorClassSpec.model_validate({
        "discovery": {"nodeSelector": {"nvidia.com/gpu.product": "H100", "pool": "gpu"}, "affinity": affinity},
        "capabilities": {}, "resources": [{"name": GPU, "quantity": "2"}, {"name": "rdma/ib"}]})
    choice = sel.Choice("h100", spec, "named by test")
    component = {"nodeSelector": {"pool": "mine"},
                 "runner": {"name": "ome-container", "resources": {"limits": {"rdma/ib": "4"}}},
                 "leader": {"containers": [{"name": "ome-container"}]}}
    rendered = sel.apply(component, choice)
    assert rendered["nodeSelector"] == {"nvidia.com/gpu.product": "H100", "pool": "mine"}
    assert rendered["affinity"] == affinity
    assert rendered["runner"]["resources"] == {"requests": {GPU: "2"}, "limits": {"rdma/ib": "4", GPU: "2"}}
    leader = rendered["leader"]["containers"][0]["resources"]
    assert leader == {"requests": {GPU: "2", "rdma/ib": "1"}, "limits": {GPU: "2", "rdma/ib": "1"}}
    own = sel.apply({"affinity": {"podAffinity": {}}, "containers": [{"name": "c"}]}, choice)
    assert own["affinity"] == {"podAffinity": {}}
    status = sel.selection(choice, rendered).to_api()
    assert status == {"acceleratorClass": "h100", "reason": "named by test",
                      "nodeSelector": {"nvidia.com/gpu.product": "H100", "pool": "mine"},
                      "resourceRequests": {GPU: "2", "rdma/ib": "1"}}


class Classes:
    """A Reader holding AcceleratorClasses only (an inline spec reads nothing else)."""

    controller_namespace = None

    def __init__(self, classes: dict[str, AcceleratorClassSpec]) -> None:
        self.objects = {name: {"metadata": {"name": name}, "spec": spec.to_api()} for name, spec in classes.items()}
        self.lists = 0

    def get(self, group: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        assert (group, kind, namespace) == ("ome.io", "AcceleratorClass", None)
        return self.objects.get(name)

    def list(self, group: str, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        assert (group, kind, namespace) == ("ome.io", "AcceleratorClass", None)
        self.lists += 1
        return list(self.objects.values())

    def get_snapshot(self, name: str) -> dict[str, Any] | None:
        raise AssertionError("no snapshot")

    def save_snapshot(self, name: str, data: dict[str, Any]) -> None:
        raise AssertionError("no snapshot")


def inline(selector: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "svc", "namespace": "ns"},
            "spec": {"acceleratorSelector": selector,
                     "engine": {"containers": [{"name": "ome-container", "image": "x"}]}}}


def test_an_inline_service_is_rendered_for_its_class_and_reports_the_selection() -> None:
    reader = Classes(CLASSES)
    resolved = resolve_service(reader, inline({"policy": "BestFit", "constraints": {"minMemory": 70}}))
    engine = resolved.spec["engine"]
    assert engine["nodeSelector"] == {"nvidia.com/gpu.product": "A100-80"}
    assert engine["containers"][0]["resources"]["limits"] == {GPU: "1"}
    assert resolved.accelerators["engine"]["acceleratorClass"] == "a100-80"
    assert reader.lists == 1
    assert resolve_service(Classes(CLASSES), inline({})).accelerators == {}


def test_an_inline_request_no_class_satisfies_is_unresolvable_with_its_reason() -> None:
    with pytest.raises(Unresolvable) as held:
        resolve_service(Classes(CLASSES), inline({"policy": "BestFit", "constraints": {"minMemory": 640}}))
    assert held.value.reason is UnresolvableReason.NO_ACCELERATOR_CLASS
    assert held.value.reason.value == "NoAcceleratorClassMatches"
    with pytest.raises(Unresolvable) as missing:
        resolve_service(Classes(CLASSES), inline({"acceleratorClass": "tpu-v5"}))
    assert missing.value.reason is UnresolvableReason.ACCELERATOR_CLASS_NOT_FOUND


def test_a_service_by_reference_chooses_among_its_runtimes_classes_and_keeps_the_models_node_label() -> None:
    runtime = sglang_runtime()
    runtime["spec"]["acceleratorRequirements"] = {"acceleratorClasses": ["h100", "a100-80", "a10"]}
    classes = [{"apiVersion": "ome.io/v1beta1", "kind": "AcceleratorClass", "metadata": {"name": name},
                "spec": CLASSES[name].to_api()} for name in ("h100", "a100-80", "a10")]
    isvc = sample_service()
    isvc["spec"]["acceleratorSelector"] = {"policy": "Cheapest", "constraints": {"minMemory": 40}}
    resolved = resolve_service(Cluster(ready_model(), runtime, *classes), isvc)
    assert resolved.accelerators["engine"]["acceleratorClass"] == "a100-80"
    assert resolved.accelerators["engine"]["reason"] == "Cheapest among h100, a100-80"
    spec = InferenceServiceSpec.model_validate(resolved.spec)
    assert spec.engine is not None
    pod = render.render_revision("llama-3-2-1b-instruct", ComponentType.ENGINE, spec.engine).template["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "A100-80",
                                   "models.ome.io/clusterbasemodel.llama-3-2-1b-instruct": "Ready"}
    declared = runtime["spec"]["engineConfig"]["runner"]["resources"]
    [container] = pod["containers"]
    # The runtime states its GPUs: the class adds only what the container does not state.
    for name, value in declared.get("limits", {}).items():
        assert container["resources"]["limits"][name] == value
    assert GPU in container["resources"]["limits"]


def test_a_class_a_policy_chose_picks_the_runtimes_tuning_for_it() -> None:
    runtime = sglang_runtime()
    runtime["spec"]["acceleratorRequirements"] = {"acceleratorClasses": ["a10", "h100"]}
    runtime["spec"]["supportedModelFormats"][0]["acceleratorConfig"] = {
        "h100": {"environmentOverride": {"NCCL_ALGO": "Tree"}},
        "a10": {"environmentOverride": {"NCCL_ALGO": "Ring"}}}
    classes = [{"apiVersion": "ome.io/v1beta1", "kind": "AcceleratorClass", "metadata": {"name": name},
                "spec": CLASSES[name].to_api()} for name in ("h100", "a10")]
    isvc = sample_service()
    isvc["spec"]["acceleratorSelector"] = {"policy": "MostCapable"}
    resolved = resolve_service(Cluster(ready_model(), runtime, *classes), isvc)
    assert resolved.accelerators["engine"]["acceleratorClass"] == "h100"
    assert {"name": "NCCL_ALGO", "value": "Tree"} in resolved.spec["engine"]["runner"]["env"]
