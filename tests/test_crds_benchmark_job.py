"""The real kube-apiserver enforces the BenchmarkJob CRD's rules (seed 004, and upstream OME's webhook rules as
CEL) at apply time with the rule's own message; a good job is accepted and its status is writable with every
field the seed names."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client

from servingops.api_models.ome import BenchmarkJob
from servingops.api_models.ome.benchmark_job import DATASET_RULE, ENDPOINT_RULE, IGNORE_EOS_RULE, SCENARIO_RULE
from tests.crd_helpers import create, manifest, new_namespace, rejection, replace

pytestmark = pytest.mark.integration

GOOD: dict[str, Any] = {
    "endpoint": {"inferenceService": {"name": "tiny-llama", "namespace": "default"}},
    "task": "text-to-text",
    "trafficScenarios": ["D(100,100)", "N(480,240)/(300,150)", "U(10,20)"],
    "numConcurrency": [1, 4],
    "maxTimePerIteration": 1,
    "maxRequestsPerIteration": 20,
    "additionalRequestParams": {"temperature": "0.2", "ignore_eos": "true"},
    "outputLocation": {"storageUri": "oci://127.0.0.1:5000/bench/results"},
    "resultFolderName": "run-a",
    "serviceMetadata": {"engine": "vLLM", "version": "0.5.3", "gpuType": "A100", "gpuCount": 1},
    "huggingFaceSecretReference": {"name": "hf-token"},
    "podOverride": {"image": "genai-bench:0.0.5", "env": [{"name": "A", "value": "1"}],
                    "resources": {"limits": {"cpu": "2"}}, "nodeSelector": {"pool": "cpu"}},
}


def _with(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


REJECTED: list[tuple[str, dict[str, Any], str]] = [
    ("both endpoints", _with(endpoint={"inferenceService": {"name": "a", "namespace": "b"},
                                       "endpoint": {"url": "http://x", "apiFormat": "openai"}}), ENDPOINT_RULE),
    ("no endpoint", _with(endpoint={}), ENDPOINT_RULE),
    ("url without scheme", _with(endpoint={"endpoint": {"url": "x.example", "apiFormat": "openai"}}), "should match"),
    ("unknown api format", _with(endpoint={"endpoint": {"url": "http://x", "apiFormat": "grpc"}}), "Unsupported value"),
    ("unknown task", _with(task="text-to-audio"), "Unsupported value"),
    ("scenario of another task", _with(trafficScenarios=["E(64)"]), SCENARIO_RULE),
    ("scenario with a tail", _with(trafficScenarios=["D(100,100)x"]), SCENARIO_RULE),
    ("ignore_eos not a bool", _with(additionalRequestParams={"ignore_eos": "yes"}), IGNORE_EOS_RULE),
    ("image task without dataset", _with(task="image-to-text", trafficScenarios=["I(512,512)"]), DATASET_RULE),
    ("zero minutes", _with(maxTimePerIteration=0), "should be greater than or equal to 1"),
    ("missing request bound", _with(maxRequestsPerIteration=None), "Required value"),
    ("missing output", _with(outputLocation=None), "Required value"),
    ("zero concurrency", _with(numConcurrency=[0]), "should be greater than or equal to 1"),
    ("unknown gpu", _with(serviceMetadata={"engine": "vLLM", "version": "1", "gpuType": "T4", "gpuCount": 1}),
     "Unsupported value"),
    ("unknown engine", _with(serviceMetadata={"engine": "Triton", "version": "1", "gpuType": "A10", "gpuCount": 1}),
     "Unsupported value"),
]


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "bench-crds")


def test_a_good_job_is_accepted_and_every_status_field_is_writable(kube_api: client.ApiClient, ns: str) -> None:
    created = create(kube_api, BenchmarkJob, manifest(BenchmarkJob, GOOD), ns)
    assert created["spec"]["endpoint"] == GOOD["endpoint"]
    url_job = create(kube_api, BenchmarkJob, manifest(BenchmarkJob, _with(
        endpoint={"endpoint": {"url": "https://api.example/v1", "apiFormat": "openai", "modelName": "m"}})), ns)
    assert url_job["spec"]["endpoint"]["endpoint"]["apiFormat"] == "openai"
    image = create(kube_api, BenchmarkJob, manifest(BenchmarkJob, _with(
        task="image-to-text", trafficScenarios=["I(512,512)", "I(1024,512,2)"],
        dataset={"storageUri": "hf://org/images"})), ns)
    assert image["spec"]["dataset"]["storageUri"] == "hf://org/images"
    status = {"state": "Completed", "startTime": "2026-12-07T10:00:00Z", "completionTime": "2026-12-07T10:05:00Z",
              "lastReconcileTime": "2026-12-07T10:05:01Z", "failureMessage": "", "details": '{"runs": []}'}
    created["status"] = status
    written = replace(kube_api, BenchmarkJob, created, ns, status=True)
    assert written["status"] == status
    created = written
    created["status"] = dict(status, state="Done")
    assert "Unsupported value" in rejection(lambda: replace(kube_api, BenchmarkJob, created, ns, status=True))


@pytest.mark.parametrize(("case", "spec", "message"), REJECTED, ids=[c[0] for c in REJECTED])
def test_bad_jobs_are_rejected_with_the_rules_message(kube_api: client.ApiClient, ns: str, case: str,
                                                       spec: dict[str, Any], message: str) -> None:
    answer = rejection(lambda: create(kube_api, BenchmarkJob, manifest(BenchmarkJob, spec), ns))
    assert message in answer, f"{case}: {answer}"
