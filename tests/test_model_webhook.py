"""The model webhook's rules without a cluster: which model an object names, each refusal and its message, the
patch for a Pod and for each workload kind, idempotence (a second admission changes nothing), updates that are
none of its business; then the HTTPS server answering a real AdmissionReview, and the chart's Deployment and
configuration read by the process they start. (The apiserver's side: tests/test_model_webhook_e2e.py.)"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from devstack import identities
from devstack.certs import write_serving_cert
from servingops.ingress.model_mount import (
    CLUSTER_MODEL_ANNOTATION,
    MODEL_ANNOTATION,
    SKIP_ANNOTATION,
    VOLUME_NAME,
    ModelRequest,
)
from servingops.ingress.model_webhook import (
    MUTATE_PATH,
    LookupFailed,
    ModelWebhookServer,
    add_arguments,
    from_arguments,
    review,
)

pytestmark = pytest.mark.unit

REGISTRY, REPOSITORY = "registry.example:5000", "servingops/models"
DIGEST = "sha256:" + "ab" * 32
REFERENCE = f"{REGISTRY}/{REPOSITORY}@{DIGEST}"


def _model(phase: str | None = "Ready", digest: str | None = DIGEST, reason: str = "Published",
           message: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
        status["conditions"] = [{"type": "Ready", "status": "True" if phase == "Ready" else "False",
                                 "reason": reason, "message": message}]
    if digest:
        status["artifact"] = {"digest": digest, "kind": "OCI"}
    return {"metadata": {"name": "m"}, "status": status}


class Models:
    """A lookup over a dict: (namespace or None, name) -> model; records what was asked."""

    def __init__(self, models: Mapping[tuple[str | None, str], dict[str, Any]]) -> None:
        self.models = dict(models)
        self.asked: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> Mapping[str, Any] | None:
        self.asked.append(request)
        return self.models.get((request.namespace, request.name))


READY = Models({("team", "llama"): _model(), (None, "qwen"): _model(),
                ("team", "busy"): _model("Publishing", None, "Publishing", "3 of 7 files"),
                ("team", "broken"): _model("Failed", None, "SourceNotFound", "no such repository"),
                ("team", "fresh"): _model(None, None)})


def _pod(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "team", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "main", "image": "engine"}, {"name": "proxy", "image": "envoy"}],
                     **spec}}


def _workload(kind: str, annotations: dict[str, str] | None = None,
              template_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": "x"}, "annotations": template_annotations or {}},
                "spec": {"containers": [{"name": "main", "image": "engine"}]}}
    spec: dict[str, Any] = {"template": template}
    if kind == "CronJob":
        spec = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
    return {"kind": kind, "metadata": {"name": "w", "namespace": "team", "annotations": annotations or {}},
            "spec": spec}


def _review(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
            models: Models = READY) -> dict[str, Any]:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": obj["kind"]},
                        "namespace": "team", "operation": operation, "object": obj, "oldObject": old}}
    answer = review(body, models, REGISTRY, REPOSITORY)
    assert answer["kind"] == "AdmissionReview" and answer["response"]["uid"] == "u-1"
    return dict(answer["response"])


def _admitted(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """The object as the apiserver stores it after applying the webhook's patch."""
    response = _review(obj, **kwargs)
    assert response["allowed"] is True, response
    if "patch" not in response:
        return obj
    assert response["patchType"] == "JSONPatch"
    return _apply(obj, json.loads(base64.b64decode(response["patch"])))


def _apply(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 `add` on object members, the only operation the webhook emits (the apiserver applies the real
    thing in tests/test_model_webhook_e2e.py)."""
    result = copy.deepcopy(obj)
    for op in patch:
        assert op["op"] == "add", op
        *parents, last = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        node = result
        for token in parents:
            node = node[token]
        node[last] = op["value"]
    return result


def _refusal(obj: dict[str, Any], **kwargs: Any) -> str:
    response = _review(obj, **kwargs)
    assert response["allowed"] is False, response
    return str(response["status"]["message"])


def _mounted(spec: dict[str, Any], name: str, reference: str = REFERENCE) -> None:
    assert [v for v in spec["volumes"] if v["name"] == VOLUME_NAME] == [
        {"name": VOLUME_NAME, "image": {"reference": reference, "pullPolicy": "IfNotPresent"}}]
    for container in spec["containers"]:
        assert {"name": VOLUME_NAME, "mountPath": f"/models/{name}", "readOnly": True} in container["volumeMounts"]
        assert {"name": "MODEL_PATH", "value": f"/models/{name}"} in container["env"]


# -- what gets mounted --------------------------------------------------------------------------------


def test_an_annotated_pod_gets_the_image_volume_mount_and_model_path_in_every_container() -> None:
    pod = _admitted(_pod({MODEL_ANNOTATION: "llama"}, initContainers=[{"name": "warm", "image": "w"}]))
    _mounted(pod["spec"], "llama")
    assert {"name": "MODEL_PATH", "value": "/models/llama"} in pod["spec"]["initContainers"][0]["env"]
    assert READY.asked[-1] == ModelRequest("llama", "team")


def test_a_cluster_model_is_mounted_the_same_way() -> None:
    _mounted(_admitted(_pod({CLUSTER_MODEL_ANNOTATION: "qwen"}))["spec"], "qwen")
    assert READY.asked[-1] == ModelRequest("qwen", None)


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"])
@pytest.mark.parametrize("where", ["object", "template"])
def test_a_workloads_pod_template_is_mutated(kind: str, where: str) -> None:
    annotations = {MODEL_ANNOTATION: "llama"}
    obj = _workload(kind, annotations if where == "object" else None, annotations if where == "template" else None)
    admitted = _admitted(obj)
    _mounted(admitted["spec"]["template"]["spec"], "llama")
    assert admitted["metadata"] == obj["metadata"]


def test_a_cronjobs_job_template_is_mutated() -> None:
    admitted = _admitted(_workload("CronJob", {CLUSTER_MODEL_ANNOTATION: "qwen"}))
    _mounted(admitted["spec"]["jobTemplate"]["spec"]["template"]["spec"], "qwen")


def test_a_second_admission_changes_nothing() -> None:
    for obj in (_pod({MODEL_ANNOTATION: "llama"}), _workload("Deployment", None, {MODEL_ANNOTATION: "llama"})):
        once = _admitted(obj)
        response = _review(copy.deepcopy(once))
        assert response["allowed"] is True and "patch" not in response


def test_skipped_containers_are_left_alone_and_the_users_model_path_is_kept() -> None:
    pod = _pod({MODEL_ANNOTATION: "llama", SKIP_ANNOTATION: "proxy"})
    pod["spec"]["containers"][0]["env"] = [{"name": "MODEL_PATH", "value": "/models/llama/gguf"}]
    admitted = _admitted(pod)
    main, proxy = admitted["spec"]["containers"]
    assert proxy == {"name": "proxy", "image": "envoy"}
    assert main["env"] == [{"name": "MODEL_PATH", "value": "/models/llama/gguf"}]
    assert main["volumeMounts"] == [{"name": VOLUME_NAME, "mountPath": "/models/llama", "readOnly": True}]


def test_another_model_replaces_the_volume_and_our_model_path() -> None:
    deployment = _admitted(_workload("Deployment", None, {MODEL_ANNOTATION: "llama"}))
    deployment["spec"]["template"]["metadata"]["annotations"] = {CLUSTER_MODEL_ANNOTATION: "qwen"}
    old = copy.deepcopy(deployment)
    old["spec"]["template"]["metadata"]["annotations"] = {MODEL_ANNOTATION: "llama"}
    spec = _admitted(deployment, operation="UPDATE", old=old)["spec"]["template"]["spec"]
    _mounted(spec, "qwen")
    [container] = spec["containers"]
    assert [m["name"] for m in container["volumeMounts"]] == [VOLUME_NAME]
    assert [e for e in container["env"] if e["name"] == "MODEL_PATH"] == [{"name": "MODEL_PATH",
                                                                          "value": "/models/qwen"}]


def test_unannotated_objects_and_updates_that_touch_neither_template_nor_annotations_pass_untouched() -> None:
    asked = len(READY.asked)
    assert "patch" not in _review(_pod())
    deployment = _admitted(_workload("Deployment", {MODEL_ANNOTATION: "llama"}))
    gone = Models({})  # the model was deleted since: scaling and deleting the workload must still work
    scaled = copy.deepcopy(deployment)
    scaled["spec"]["replicas"] = 5
    scaled["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "2"
    assert _review(scaled, operation="UPDATE", old=deployment, models=gone) == {"uid": "u-1", "allowed": True}
    deleting = copy.deepcopy(deployment)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    deleting["spec"]["template"]["spec"]["containers"][0]["image"] = "engine:2"
    assert _review(deleting, operation="UPDATE", old=deployment, models=gone)["allowed"] is True
    assert gone.asked == [] and len(READY.asked) == asked + 1
    # An update of the template is checked again: the model is gone, so it is refused.
    changed = copy.deepcopy(deployment)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "engine:2"
    assert "does not exist" in _refusal(changed, operation="UPDATE", old=deployment, models=gone)


# -- refusals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("annotations", "expected"), [
    ({MODEL_ANNOTATION: "nope"}, "Model team/nope does not exist in namespace team"),
    ({CLUSTER_MODEL_ANNOTATION: "nope"}, "ClusterModel nope does not exist"),
    ({MODEL_ANNOTATION: "busy"}, "Model team/busy is not Ready (phase Publishing, reason Publishing: 3 of 7 files)"),
    ({MODEL_ANNOTATION: "broken"},
     "Model team/broken is not Ready (phase Failed, reason SourceNotFound: no such repository)"),
    ({MODEL_ANNOTATION: "fresh"}, "Model team/fresh is not Ready (phase none yet, reason none)"),
    ({MODEL_ANNOTATION: "other/llama"}, "names another namespace; a workload may use a Model of its own namespace"),
    ({MODEL_ANNOTATION: "llama", CLUSTER_MODEL_ANNOTATION: "qwen"}, "are both set"),
    ({MODEL_ANNOTATION: ""}, "ai.deckhouse.io/model is empty"),
    ({CLUSTER_MODEL_ANNOTATION: " "}, "ai.deckhouse.io/clustermodel is empty"),
    ({MODEL_ANNOTATION: "Llama_3"}, "is not a valid object name"),
])
def test_each_bad_reference_is_refused_with_its_message(annotations: dict[str, str], expected: str) -> None:
    assert expected in _refusal(_pod(annotations))


def test_the_object_and_its_template_naming_different_models_is_refused() -> None:
    message = _refusal(_workload("Deployment", {MODEL_ANNOTATION: "llama"}, {MODEL_ANNOTATION: "other"}))
    assert "different models on the object and on its pod template" in message


def test_a_ready_model_without_a_digest_and_a_volume_name_taken_are_refused() -> None:
    assert "reports no artifact digest" in _refusal(
        _pod({MODEL_ANNOTATION: "x"}), models=Models({("team", "x"): _model(digest=None)}))
    taken = _pod({MODEL_ANNOTATION: "llama"}, volumes=[{"name": VOLUME_NAME, "emptyDir": {}}])
    assert f"the volume name {VOLUME_NAME!r} is reserved" in _refusal(taken)
    clash = _pod({MODEL_ANNOTATION: "llama"}, volumes=[{"name": "data", "emptyDir": {}}])
    clash["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/models/llama"}]
    assert "container 'main' already mounts volume 'data' at /models/llama" in _refusal(clash)


def test_a_model_that_cannot_be_read_is_refused_as_an_error_to_retry() -> None:
    def failing(request: ModelRequest) -> None:
        raise LookupFailed(f"could not read {request}: 503 Service Unavailable")

    response = review({"request": {"uid": "u", "kind": {"kind": "Pod"}, "namespace": "team", "operation": "CREATE",
                                   "object": _pod({MODEL_ANNOTATION: "llama"})}}, failing, REGISTRY, REPOSITORY)
    assert response["response"]["allowed"] is False
    assert response["response"]["status"]["code"] == 500
    assert "could not read Model team/llama: 503" in response["response"]["status"]["message"]


# -- the server ----------------------------------------------------------------------------------------


def test_the_https_server_answers_an_admission_review(tmp_path: Path) -> None:
    cert = write_serving_cert(tmp_path)
    server = ModelWebhookServer("127.0.0.1", 0, cert.cert_file, cert.key_file, READY, registry=REGISTRY,
                                repository=REPOSITORY).start()
    try:
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "abc", "kind": {"kind": "Pod"}, "namespace": "team", "operation": "CREATE",
                            "object": _pod({MODEL_ANNOTATION: "llama"})}}
        request = urllib.request.Request(f"https://127.0.0.1:{server.port}{MUTATE_PATH}",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10, context=cert.client_context()) as answer:
            response = json.loads(answer.read())["response"]
        assert response["uid"] == "abc" and response["allowed"] is True and response["patchType"] == "JSONPatch"
        # A client that does not trust the webhook's CA gets no answer.
        with pytest.raises(urllib.error.URLError) as untrusted:
            urllib.request.urlopen(request, timeout=10, context=ssl.create_default_context())
        assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)
    finally:
        server.stop()


# -- the chart -----------------------------------------------------------------------------------------


def _rendered(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return identities.render("servingops", "ops", values)


def test_the_charts_deployment_runs_the_webhook_with_what_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = _rendered({"registry": {"address": "dmcr.example:5000", "repository": "models"},
                      "webhook": {"registryAddress": "dmcr.nodes.example:5000"}})
    [deployment] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "servingops-webhook"]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert pod["serviceAccountName"] == "servingops-webhook" and container["args"][0] == "webhook"
    for variable in container["env"]:
        monkeypatch.setenv(variable["name"], variable["value"])
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser)
    settings = from_arguments(parser.parse_args(container["args"][1:]))
    assert (settings.registry, settings.repository) == ("dmcr.nodes.example:5000", "models")
    assert settings.host_port == ("0.0.0.0", 8443)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    secret_name = volumes[mounts[str(settings.cert_file.parent)]]["secret"]["secretName"]
    assert settings.key_file.parent == settings.cert_file.parent
    [secret] = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == secret_name]
    assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    [config] = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    for webhook in config["webhooks"]:
        assert webhook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
        assert webhook["clientConfig"]["service"] == {"name": "servingops-webhook", "namespace": "ops",
                                                      "path": MUTATE_PATH, "port": 443}
        assert (webhook["failurePolicy"], webhook["sideEffects"], webhook["reinvocationPolicy"]) == (
            "Fail", "None", "IfNeeded")
        assert webhook["timeoutSeconds"] <= 5
        assert webhook["matchConditions"][0]["name"] == "annotated"
    [service] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "servingops-webhook"]
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    assert container["ports"][0]["containerPort"] == settings.host_port[1]


def test_a_tls_secret_of_your_own_is_mounted_and_the_local_stack_renders_no_webhook() -> None:
    docs = _rendered({"webhook": {"tls": {"secretName": "from-cert-manager", "caBundle": "Q0E="}}})
    # No certificate of the chart's for the model webhook (the admission webhook's own is another Secret).
    assert not [d for d in docs if d["kind"] == "Secret" and d["type"] == "kubernetes.io/tls"
                and d["metadata"]["name"] != "servingops-admission-tls"]
    [config] = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    assert {w["clientConfig"]["caBundle"] for w in config["webhooks"]} == {"Q0E="}
    local = _rendered(identities.local_values())
    assert not [d for d in local if d["kind"] == "MutatingWebhookConfiguration"]
    assert {d["kind"] for d in local if d["metadata"]["name"] == "servingops-webhook"} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding"}  # the identity the local process runs as
