"""The BenchmarkJob's Job, rendered (rendering/benchmark_job.py): genai-bench's command line from the spec,
podOverride merged as upstream merges it, credentials only as Secret references, outputs by scheme."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from servingops.api_models.ome.benchmark_job import SCENARIO_PATTERNS, BenchmarkJobSpec
from servingops.api_models.ome.enums import BenchmarkTask
from servingops.api_models.operator_config import BenchmarkDefaults, parse_configmap_data
from servingops.rendering.benchmark_job import (
    API_KEY_PLACEHOLDER,
    ARTIFACT_TYPE,
    LAYER_MEDIA_TYPE,
    BenchmarkRenderError,
    ResolvedEndpoint,
    job_name,
    render_job,
    request_params,
)

pytestmark = pytest.mark.unit

SPEC: dict[str, Any] = {
    "endpoint": {"inferenceService": {"name": "tiny-llama", "namespace": "default"}},
    "task": "text-to-text",
    "trafficScenarios": ["D(10,10)", "N(48,24)/(30,15)"],
    "numConcurrency": [1, 2],
    "maxTimePerIteration": 1,
    "maxRequestsPerIteration": 20,
    "additionalRequestParams": {"temperature": "0.2", "ignore_eos": "true", "stop": "END", "max_tokens": "16"},
    "outputLocation": {"storageUri": "pvc://results-claim/bench"},
    "serviceMetadata": {"engine": "vLLM", "version": "0.5.3", "gpuType": "A100", "gpuCount": 2},
    "huggingFaceSecretReference": {"name": "hf-token"},
}
ENDPOINT = ResolvedEndpoint(api_base="http://tiny-llama.default.example.com:8000", api_backend="openai",
                            model_name="tiny-llama", tokenizer="servingops/tiny-llama")
DEFAULTS = BenchmarkDefaults(image="genai-bench:0.0.5", hub_endpoint="http://127.0.0.1:9999",
                             insecure_registries=["127.0.0.1:5000"])


def spec(**changes: Any) -> BenchmarkJobSpec:
    body = copy.deepcopy(SPEC)
    body.update(changes)
    return BenchmarkJobSpec.model_validate(body)


def render(s: BenchmarkJobSpec, endpoint: ResolvedEndpoint = ENDPOINT, generation: int = 3) -> dict[str, Any]:
    return render_job(name="bench-a", namespace="ns", uid="u-1", generation=generation, spec=s, endpoint=endpoint,
                      defaults=DEFAULTS).job


def flags(args: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            out.setdefault(arg, []).append(args[i + 1])
    return out


def test_the_command_line_carries_every_field_of_the_spec() -> None:
    job = render(spec())
    container = job["spec"]["template"]["spec"]["initContainers"][0]
    assert container["command"] == ["genai-bench"] and container["args"][0] == "benchmark"
    f = flags(container["args"])
    assert f["--api-base"] == ["http://tiny-llama.default.example.com:8000"]
    assert f["--api-backend"] == ["openai"] and f["--api-model-name"] == ["tiny-llama"]
    assert f["--model-tokenizer"] == ["servingops/tiny-llama"] and f["--task"] == ["text-to-text"]
    assert f["--traffic-scenario"] == ["D(10,10)", "N(48,24)/(30,15)"] and f["--num-concurrency"] == ["1", "2"]
    assert f["--max-time-per-run"] == ["1"] and f["--max-requests-per-run"] == ["20"]
    assert json.loads(f["--additional-request-params"][0]) == {"temperature": 0.2, "ignore_eos": True,
                                                               "stop": "END", "max_tokens": 16}
    assert f["--server-engine"] == ["vLLM"] and f["--server-gpu-type"] == ["A100"]
    assert f["--server-gpu-count"] == ["2"] and f["--server-version"] == ["0.5.3"]
    assert f["--experiment-base-dir"] == ["/results"] and f["--experiment-folder-name"] == ["bench-a-g3"]
    assert f["--api-key"] == [API_KEY_PLACEHOLDER]
    assert container["image"] == "genai-bench:0.0.5"
    assert {"name": "HF_ENDPOINT", "value": "http://127.0.0.1:9999"} in container["env"]
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # 2 scenarios x 2 levels x 1 minute, plus the start-up slack.
    assert job["spec"]["activeDeadlineSeconds"] == 4 * 60 + 600


def test_unset_lists_are_left_to_genai_bench_and_a_result_folder_is_used() -> None:
    job = render(spec(trafficScenarios=None, numConcurrency=None, additionalRequestParams=None,
                      serviceMetadata=None, resultFolderName="mine"))
    f = flags(job["spec"]["template"]["spec"]["initContainers"][0]["args"])
    for absent in ("--traffic-scenario", "--num-concurrency", "--additional-request-params", "--server-engine"):
        assert absent not in f
    assert f["--experiment-folder-name"] == ["mine"]
    assert job["spec"]["activeDeadlineSeconds"] == 10 * 9 * 60 + 600


def test_image_to_text_is_genai_bench_s_image_text_task_and_datasets_reach_it() -> None:
    s = spec(task="image-to-text", trafficScenarios=["I(512,512)"],
             dataset={"storageUri": "hf://org/pictures@main", "parameters": {"promptColumn": "q",
                                                                              "imageColumn": "img"}})
    f = flags(render(s)["spec"]["template"]["spec"]["initContainers"][0]["args"])
    assert f["--task"] == ["image-text-to-text"] and f["--dataset-path"] == ["org/pictures"]
    assert f["--dataset-prompt-column"] == ["q"] and f["--dataset-image-column"] == ["img"]
    pod = render(spec(dataset={"storageUri": "pvc://data/sets/prompts.csv"}))["spec"]["template"]["spec"]
    assert flags(pod["initContainers"][0]["args"])["--dataset-path"] == ["/dataset/sets/prompts.csv"]
    assert {"name": "dataset", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}} in pod["volumes"]
    with pytest.raises(BenchmarkRenderError, match="dataset scheme s3://"):
        render(spec(dataset={"storageUri": "s3://b/o"}))


def test_credentials_are_secret_references_never_values_or_arguments() -> None:
    override = {"env": [{"name": "MODEL_API_KEY", "valueFrom": {"secretKeyRef": {"name": "api", "key": "k"}}}]}
    job = render(spec(podOverride=override))
    container = job["spec"]["template"]["spec"]["initContainers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "HUGGINGFACE_API_KEY"}
    assert env["MODEL_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "api", "key": "k"}
    assert all("value" not in e for n, e in env.items() if n in ("HF_TOKEN", "HUGGINGFACE_API_KEY", "MODEL_API_KEY"))
    with pytest.raises(BenchmarkRenderError, match="MODEL_API_KEY: a credential must come from a Secret"):
        render(spec(podOverride={"env": [{"name": "MODEL_API_KEY", "value": "sk-secret"}]}))


def test_pod_override_merges_into_the_default_pod() -> None:
    override = {"image": "other:1", "env": [{"name": "ENABLE_UI", "value": "true"}, {"name": "X", "value": "1"}],
                "envFrom": [{"configMapRef": {"name": "c"}}],
                "volumeMounts": [{"name": "extra", "mountPath": "/extra"}],
                "volumes": [{"name": "extra", "emptyDir": {}}, {"name": "results", "emptyDir": {}}],
                "resources": {"limits": {"cpu": "1"}}, "tolerations": [{"key": "k", "operator": "Exists"}],
                "nodeSelector": {"pool": "cpu"}, "affinity": {"nodeAffinity": {}}}
    pod = render(spec(podOverride=override))["spec"]["template"]["spec"]
    container = pod["initContainers"][0]
    assert container["image"] == "other:1"
    env = [(e["name"], e.get("value")) for e in container["env"] if "value" in e]
    assert ("ENABLE_UI", "true") in env and ("X", "1") in env and ("ENABLE_UI", "false") not in env
    assert container["envFrom"] == [{"configMapRef": {"name": "c"}}]
    assert {"name": "extra", "mountPath": "/extra"} in container["volumeMounts"]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "8Gi"}  # merged per resource
    assert container["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert {"name": "results", "emptyDir": {}} in pod["volumes"]  # replaced by name
    assert sum(1 for v in pod["volumes"] if v["name"] == "results") == 1
    assert [t["key"] for t in pod["tolerations"]] == ["nvidia.com/gpu", "k"]
    assert pod["nodeSelector"] == {"pool": "cpu"} and pod["affinity"] == {"nodeAffinity": {}}


def test_pvc_output_mounts_the_claim_and_oci_output_pushes_after_the_benchmark() -> None:
    pod = render(spec())["spec"]["template"]["spec"]
    assert {"name": "results", "persistentVolumeClaim": {"claimName": "results-claim"}} in pod["volumes"]
    # pvc://: the benchmark, then the redact step, as init containers (each only after the one before
    # succeeded); the summarize step last, its summary the termination message the worker reads.
    bench, redact = pod["initContainers"]
    [summarize] = pod["containers"]
    assert (bench["name"], redact["name"], summarize["name"]) == ("genai-bench", "redact", "summarize")
    claim_mount = {"name": "results", "mountPath": "/results", "subPath": "bench"}
    for container in (bench, redact, summarize):
        assert claim_mount in container["volumeMounts"], container["name"]
    assert redact["args"][2] == "/results/bench-a-g3" and "MODEL_API_KEY" in redact["args"][3].split(",")
    assert redact["env"] == bench["env"]
    assert summarize["command"] == ["python"] and summarize["args"][0] == "-c"
    assert summarize["args"][2:] == ["/results/bench-a-g3", "/dev/termination-log", "4096"]
    assert summarize["terminationMessagePath"] == "/dev/termination-log" and "env" not in summarize
    assert summarize["image"] == bench["image"] == "genai-bench:0.0.5"
    rendered = render_job(name="bench-a", namespace="ns", uid="u-1", generation=3, defaults=DEFAULTS,
                          spec=spec(outputLocation={"storageUri": "oci://127.0.0.1:5000/bench/results",
                                                    "key": "push-creds"}), endpoint=ENDPOINT)
    pod = rendered.job["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["genai-bench", "redact"]
    upload = pod["containers"][0]
    assert upload["command"] == ["oras"]
    assert upload["args"] == ["push", "--artifact-type", ARTIFACT_TYPE, "--plain-http",
                              "127.0.0.1:5000/bench/results:bench-a-g3", f"bench-a-g3/:{LAYER_MEDIA_TYPE}"]
    assert rendered.results == "127.0.0.1:5000/bench/results:bench-a-g3"
    assert {"name": "DOCKER_CONFIG", "value": "/registry-auth"} in upload["env"]
    tagged = render(spec(outputLocation={"storageUri": "oci://reg.example/r:v1"}))
    assert "--plain-http" not in tagged["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "reg.example/r:v1" in tagged["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize("uri", ["s3://bucket/x", "gs://b/x", "az://a/c/x", "hf://org/repo", "local:///tmp/x",
                                 "oci://n/ns/b/bucket/o/prefix"])
def test_schemes_without_a_writer_are_refused_by_name(uri: str) -> None:
    scheme = uri.split("://")[0]
    with pytest.raises(BenchmarkRenderError, match=f"{scheme}://"):
        render(spec(outputLocation={"storageUri": uri}))


def test_the_job_is_named_per_generation_owned_and_labelled() -> None:
    job = render(spec(), generation=7)
    assert job["metadata"]["name"] == "bench-a-g7"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert job["metadata"]["labels"]["ome.io/benchmarkjob-generation"] == "7"
    long = job_name("b" * 80, 12)
    assert len(long) <= 63 and long.endswith("-g12") and long != job_name("b" * 79 + "c", 12)


def test_a_model_on_a_claim_is_mounted_for_its_tokenizer() -> None:
    endpoint = ENDPOINT.model_copy(update={"tokenizer": "/model", "tokenizer_claim": "models",
                                           "tokenizer_claim_path": "tiny"})
    pod = render(spec(), endpoint=endpoint)["spec"]["template"]["spec"]
    assert {"name": "model", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}} in pod["volumes"]
    assert {"name": "model", "mountPath": "/model", "readOnly": True, "subPath": "tiny"} in \
        pod["initContainers"][0]["volumeMounts"]


def test_request_params_keep_strings_that_are_not_json_scalars() -> None:
    assert request_params({"a": "[1]", "b": "false", "c": "x y", "d": "1e3"}) == {"a": "[1]", "b": False,
                                                                                  "c": "x y", "d": 1000.0}


def test_scenario_patterns_accept_genai_bench_shapes_and_refuse_the_rest() -> None:
    import re

    text = SCENARIO_PATTERNS[BenchmarkTask.TEXT_TO_TEXT]
    for good in ("D(100,100)", "N(480,240)/(300,150)", "U(10,20)", "U(10,20)/(5,6)"):
        assert re.match(text, good), good
    for bad in ("D(100,100)x", "xD(1,2)", "E(64)", "N(1,2)"):
        assert not re.match(text, bad), bad
    assert re.match(SCENARIO_PATTERNS[BenchmarkTask.TEXT_TO_EMBEDDINGS], "E(64)")


def test_the_operator_configmap_carries_the_benchmark_block() -> None:
    config = parse_configmap_data({"benchmark": "image: registry.local/genai-bench:0.0.5\nhubEndpoint: http://hub\n"})
    assert config.benchmark.image == "registry.local/genai-bench:0.0.5"
    assert config.benchmark.hub_endpoint == "http://hub"


def test_the_tokenizer_comes_from_the_served_model_s_source() -> None:
    from servingops.rendering.benchmark_job import tokenizer_from_source

    assert tokenizer_from_source("hf://org/repo@main") == ("org/repo", None, "")
    assert tokenizer_from_source("https://huggingface.co/devstack/tiny-llama") == ("devstack/tiny-llama", None, "")
    assert tokenizer_from_source("pvc://models/tiny") == ("/model", "models", "tiny")
    with pytest.raises(BenchmarkRenderError, match="gives no tokenizer"):
        tokenizer_from_source("s3://b/x")


def test_a_failing_container_fails_the_job_through_a_policy_naming_its_exit() -> None:
    """backoffLimit 0 with a FailJob rule for any non-zero exit: the Job controller waits for a deleted pod's
    containers to end and names the container and its exit code in the Job's Failed condition."""
    for output in ("pvc://results-claim/bench", "oci://127.0.0.1:5000/bench/results"):
        job = render(spec(outputLocation={"storageUri": output}))
        assert job["spec"]["backoffLimit"] == 0
        assert job["spec"]["podFailurePolicy"] == {
            "rules": [{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}]}
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"  # the policy's precondition
