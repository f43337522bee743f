"""The validating webhook's HTTPS layer (admission/server.py) and the chart's install of it
(deploy/chart/templates/admission.yaml): what the apiserver talks to and what it is told to send."""

from __future__ import annotations

import argparse
import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from devstack import identities
from devstack.certs import write_serving_cert
from servingops.admission.main import add_arguments, from_arguments
from servingops.admission.server import VALIDATE_PATH, AdmissionServer

pytestmark = pytest.mark.unit


class Stored:
    def __init__(self, *quotas: dict[str, Any]) -> None:
        self.items = list(quotas)

    def quotas(self) -> list[Mapping[str, Any]]:
        return self.items

    def cluster_queue(self, name: str) -> Mapping[str, Any] | None:
        return None


def _quota(name: str, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": {"role": "Cohort"}}


def _post(port: int, payload: bytes, context: ssl.SSLContext) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"https://127.0.0.1:{port}{VALIDATE_PATH}", data=payload,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_https_server_answers_a_review_and_refuses_what_is_not_one(tmp_path: Path) -> None:
    cert = write_serving_cert(tmp_path, subject="servingops-admission")
    server = AdmissionServer("127.0.0.1", 0, cert.cert_file, cert.key_file, Stored(_quota("root")),
                             max_depth=8).start()
    try:
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-1", "kind": {"group": "ome.io", "version": "v1beta1", "kind": "AcceleratorQuota"},
            "operation": "CREATE", "object": _quota("other-root", created="2026-02-01T00:00:00Z")}}
        status, body = _post(server.port, json.dumps(review).encode(), cert.client_context())
        assert status == 200 and body["response"]["uid"] == "u-1" and body["response"]["allowed"] is False
        assert "NodeKindInvalid: root is already the tree's root" in body["response"]["status"]["message"]
        assert _post(server.port, b"not json", cert.client_context())[0] == 400
        assert _post(server.port, json.dumps({"kind": "Pod"}).encode(), cert.client_context())[0] == 400
        # A client that does not trust the webhook's CA gets no answer.
        with pytest.raises(urllib.error.URLError) as untrusted:
            _post(server.port, json.dumps(review).encode(), ssl.create_default_context())
        assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)
    finally:
        server.stop()


def _rendered(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return identities.render("servingops", "ops", values)


def test_the_chart_runs_the_webhook_and_registers_it_for_acceleratorquotas_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    docs = _rendered()
    [deployment] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "servingops-admission"]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert pod["serviceAccountName"] == "servingops-admission" and container["args"][0] == "admission"
    for variable in container["env"]:
        monkeypatch.setenv(variable["name"], variable["value"])
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser)
    settings = from_arguments(parser.parse_args(container["args"][1:]))
    assert settings.host_port == ("0.0.0.0", 9443) and settings.max_depth == 8
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    secret_name = volumes[mounts[str(settings.cert_file.parent)]]["secret"]["secretName"]
    [secret] = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == secret_name]
    assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    # The generated certificate names the Service as the apiserver dials it, and the CA in the caBundle signed it.
    served = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert "servingops-admission.ops.svc" in names
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    served.verify_directly_issued_by(ca)

    [config] = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    [webhook] = config["webhooks"]
    assert webhook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert webhook["clientConfig"]["service"] == {"name": "servingops-admission", "namespace": "ops",
                                                  "path": VALIDATE_PATH, "port": 443}
    assert (webhook["failurePolicy"], webhook["sideEffects"], webhook["admissionReviewVersions"]) == (
        "Ignore", "None", ["v1"])
    assert webhook["timeoutSeconds"] <= 5
    assert webhook["rules"] == [{"apiGroups": ["ome.io"], "apiVersions": ["v1beta1"],
                                 "operations": ["CREATE", "UPDATE"], "resources": ["acceleratorquotas"],
                                 "scope": "Cluster"}]
    assert webhook["objectSelector"] == {"matchExpressions": [
        {"key": "ome.io/quota-projected", "operator": "NotIn", "values": ["servingops"]}]}
    assert [c["name"] for c in webhook["matchConditions"]] == ["spec-changed", "not-being-deleted"]
    [service] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "servingops-admission"]
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    assert container["ports"][0]["containerPort"] == settings.host_port[1]


def test_fail_is_a_choice_anything_else_is_refused_and_the_local_stack_renders_no_registration() -> None:
    [config] = [d for d in _rendered({"admission": {"failurePolicy": "Fail"}})
                if d["kind"] == "ValidatingWebhookConfiguration"]
    assert config["webhooks"][0]["failurePolicy"] == "Fail"
    with pytest.raises(RuntimeError, match=r"admission\.failurePolicy must be Ignore or Fail"):
        _rendered({"admission": {"failurePolicy": "Sometimes"}})
    local = _rendered(identities.local_values())
    assert not [d for d in local if d["kind"] == "ValidatingWebhookConfiguration"]
    assert {d["kind"] for d in local if d["metadata"]["name"] == "servingops-admission"} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding"}  # the identity the local process runs as
