"""Serving a model stored on a claim (pvc://<claim>/<sub-path>): the InferenceService's pods mount the claim
read-only with the sub-path as subPath at the model's path (rendering/model_claim.py, resolution.py,
runtime_merge.py), on upstream OME's sample manifests with an in-memory reader; a claim the service's pods
cannot mount (another namespace) holds the service with a named reason."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.activities.placement.member import MemberClient
from servingops.activities.reference_reader import KubeReader
from servingops.activities.replica.activities import ReplicaActivities
from servingops.activities.replica.from_refs import render_runners
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.api_models.ome.replica import InferenceReplicaSpec
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


class _Custom:
    """CustomObjectsApi's reads over a Cluster's objects (what KubeReader and MemberReader call)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def _find(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        return [obj for (_, kind, ns, _), obj in self.cluster.objects.items()
                if kind.lower() + "s" == plural and ns == namespace]

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str,
                                  **_: Any) -> dict[str, Any]:
        return self._one(plural, None, name)

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     **_: Any) -> dict[str, Any]:
        return self._one(plural, namespace, name)

    def _one(self, plural: str, namespace: str | None, name: str) -> dict[str, Any]:
        found = [o for o in self._find(plural, namespace) if o["metadata"]["name"] == name]
        if not found:
            raise ApiException(status=404, reason="Not Found")
        return found[0]

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **_: Any) -> dict[str, Any]:
        return {"items": self._find(plural, None)}

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                      **_: Any) -> dict[str, Any]:
        return {"items": self._find(plural, namespace)}


def _readers(cluster: Cluster, controller_namespace: str) -> dict[str, Any]:
    """The reader of each path that resolves a served model, as the worker builds it: the direct
    InferenceService path (ServingActivities' KubeReader), the OMENative replica path (ReplicaActivities'
    KubeReader) and a member cluster's (PlacementActivities' MemberReader)."""
    custom: Any = _Custom(cluster)
    replica = ReplicaActivities(client.ApiClient(), controller_namespace=controller_namespace)
    replica._reader.custom = custom  # its reader, over the fake apiserver
    member = MemberClient(client.ApiClient())
    member.custom = custom
    return {"direct": KubeReader(custom, controller_namespace=controller_namespace), "replica": replica._reader,
            "member": member.reader(controller_namespace)}


@pytest.mark.parametrize("path", ["direct", "replica", "member"])
def test_every_path_judges_a_cluster_model_s_claim_by_the_controller_namespace(path: str) -> None:
    """A ClusterBaseModel on a claim without storage.parameters.namespace: its claim is in the controller
    namespace on the direct path, the OMENative replica path and a member's alike (before, the replica and
    member readers knew no controller namespace and refused it everywhere)."""
    cluster = Cluster(claim_model("pvc://weights/llama"), sglang_runtime())
    reader = _readers(cluster, SERVICE_NS)[path]
    assert reader.controller_namespace == SERVICE_NS
    engine = InferenceServiceSpec.model_validate(resolve_service(reader, sample_service()).spec).engine
    assert engine is not None
    pod = render.render_revision("svc", ComponentType.ENGINE, engine).template["spec"]
    assert {"name": "llama-3-2-1b-instruct",
            "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}} in pod["volumes"]
    elsewhere = sample_service()
    elsewhere["metadata"]["namespace"] = "team-b"
    with pytest.raises(Unresolvable) as held:
        resolve_service(reader, elsewhere)
    assert held.value.reason is UnresolvableReason.MODEL_CLAIM_ELSEWHERE
    assert f"in namespace {SERVICE_NS};" in held.value.message and "team-b" in held.value.message


def test_an_omenative_replica_renders_a_cluster_model_s_claim_in_the_controller_namespace() -> None:
    """The replica path's own entry (activities/replica/from_refs.py render_runners, as ReplicaActivities calls it
    with its reader): a modelRef to the ClusterBaseModel mounts the claim in a replica of the controller
    namespace."""
    runtime = sglang_runtime()
    cluster = Cluster(claim_model("pvc://weights/llama"), runtime)
    reader = _readers(cluster, SERVICE_NS)["replica"]
    spec = InferenceReplicaSpec.model_validate({
        "component": "engine", "runtimeRef": {"name": runtime["metadata"]["name"]},
        "modelRef": {"name": "llama-3-2-1b-instruct"}})
    runners = render_runners(reader, spec, name="r1", namespace=SERVICE_NS, artifacts=None)
    for runner in runners:
        assert {"name": "llama-3-2-1b-instruct", "persistentVolumeClaim": {
            "claimName": "weights", "readOnly": True}} in runner.template["spec"]["volumes"], runner.name
    with pytest.raises(Unresolvable, match=r"PersistentVolumeClaim weights in namespace"):
        render_runners(reader, spec, name="r1", namespace="team-b", artifacts=None)
