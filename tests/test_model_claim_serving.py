"""Serving a model stored on a claim (pvc://<claim>/<sub-path>): the InferenceService's pods mount the claim
read-only with the sub-path as subPath at the model's path (rendering/model_claim.py, resolution.py,
runtime_merge.py), on upstream OME's sample manifests with an in-memory reader; a claim the service's pods
cannot mount (another namespace) holds the service with a named reason."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.rendering import render
from servingops.rendering.model_claim import ModelClaim, claim_namespace, model_claim
from servingops.rendering.resolution import Unresolvable, UnresolvableReason, resolve_service
from tests.support.serving_world import Cluster, ready_model, sample_service, sglang_runtime

pytestmark = pytest.mark.unit

SERVICE_NS = "llama-3-2-1b-instruct"
PATH = "/raid/models/meta/llama-3-2-1b-instruct"


def claim_model(uri: str, *, namespaced: bool = False, parameters: dict[str, str] | None = None) -> dict[str, Any]:
    model = copy.deepcopy(ready_model(state="Ready"))
    model["spec"]["storage"] = {"storageUri": uri, "path": PATH, **({"parameters": parameters} if parameters else {})}
    if namespaced:
        model["kind"] = "BaseModel"
        model["metadata"]["namespace"] = SERVICE_NS
    return model


def engine_pod(cluster: Cluster, service: dict[str, Any]) -> dict[str, Any]:
    engine = InferenceServiceSpec.model_validate(resolve_service(cluster, service).spec).engine
    assert engine is not None
    return dict(render.render_revision("svc", ComponentType.ENGINE, engine).template["spec"])


def base_model_service() -> dict[str, Any]:
    service = sample_service()
    service["spec"]["model"]["kind"] = "BaseModel"
    return service


def test_the_pods_mount_the_claim_read_only_with_the_sub_path_at_the_model_path() -> None:
    cluster = Cluster(claim_model("pvc://weights/meta/llama-3.2-1b", namespaced=True), sglang_runtime())
    pod = engine_pod(cluster, base_model_service())
    [container] = pod["containers"]
    volume = next(v for v in pod["volumes"] if v["name"] == "llama-3-2-1b-instruct")
    assert volume == {"name": "llama-3-2-1b-instruct",
                      "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}}
    assert {"name": "llama-3-2-1b-instruct", "mountPath": PATH, "readOnly": True,
            "subPath": "meta/llama-3.2-1b"} in container["volumeMounts"]
    assert {"name": "MODEL_PATH", "value": PATH} in container["env"]
    # No node copy: no hostPath and no node label to wait for.
    assert not any("hostPath" in v for v in pod["volumes"])
    assert "models.ome.io/basemodel" not in str(pod.get("nodeSelector") or {})


def test_a_claim_root_has_no_sub_path_and_a_cluster_model_uses_its_parameters_namespace() -> None:
    model = claim_model("pvc://weights", parameters={"namespace": SERVICE_NS})
    pod = engine_pod(Cluster(model, sglang_runtime()), sample_service())
    [container] = pod["containers"]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == PATH)
    assert mount == {"name": "llama-3-2-1b-instruct", "mountPath": PATH, "readOnly": True}
    assert {"name": "llama-3-2-1b-instruct",
            "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}} in pod["volumes"]


@pytest.mark.parametrize(("parameters", "where"), [
    ({"namespace": "models"}, "namespace models"),
    (None, "the controller namespace"),
])
def test_a_cluster_model_whose_claim_is_elsewhere_holds_the_service_with_a_reason(
        parameters: dict[str, str] | None, where: str) -> None:
    model = claim_model("pvc://weights/llama", parameters=parameters)
    with pytest.raises(Unresolvable) as held:
        resolve_service(Cluster(model, sglang_runtime()), sample_service())
    assert held.value.reason is UnresolvableReason.MODEL_CLAIM_ELSEWHERE
    assert held.value.reason.value == "ModelClaimInOtherNamespace"
    message = held.value.message
    assert "PersistentVolumeClaim weights" in message and where in message and SERVICE_NS in message, message


def test_a_reader_that_knows_the_controller_namespace_serves_a_service_there() -> None:
    class ControllerCluster(Cluster):
        controller_namespace = SERVICE_NS

    pod = engine_pod(ControllerCluster(claim_model("pvc://weights/llama"), sglang_runtime()), sample_service())
    assert {"name": "llama-3-2-1b-instruct",
            "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}} in pod["volumes"]


@pytest.mark.parametrize(("uri", "expected"), [
    ("pvc://weights/a/b/", ModelClaim("weights", "a/b")),
    ("pvc://weights", ModelClaim("weights", "")),
    ("hf://org/repo", None),
    ("pvc://Bad_Name/x", None),
    (None, None),
])
def test_model_claim_parses_pvc_uris_only(uri: str | None, expected: ModelClaim | None) -> None:
    assert model_claim(uri) == expected


def test_claim_namespace_rules() -> None:
    assert claim_namespace("team", {"namespace": "other"}, "ctl") == "team"
    assert claim_namespace(None, {"namespace": "other"}, "ctl") == "other"
    assert claim_namespace(None, None, "ctl") == "ctl"
    assert claim_namespace(None, None, None) is None


def test_the_namespace_refusal_comes_before_readiness() -> None:
    """A claim elsewhere is refused while the model is not Ready yet: its becoming Ready would change nothing."""
    model = claim_model("pvc://weights/llama", parameters={"namespace": "models"})
    model["status"] = {"state": "Failed"}
    with pytest.raises(Unresolvable) as held:
        resolve_service(Cluster(model, sglang_runtime()), sample_service())
    assert held.value.reason is UnresolvableReason.MODEL_CLAIM_ELSEWHERE
