"""BenchmarkJob end to end (issue #32): the worker and the bridge as processes, the real kube-apiserver, Job
controller and scheduler, kwok nodes, Traefik as the Gateway, the stack's registry and Hub; the Job's pod run by
devstack/bench_runner.py (inside the pod runtime), which runs genai-bench 0.0.5 from its own venv and oras.

One traffic stack (tests/support/traffic_stack.py) for the module, with the example InferenceService
(deploy/examples: Model, ClusterServingRuntime, InferenceService, in the module's namespace; the Model's
repository generated on the stack's Hub, tokenizer files included) Ready behind the Gateway. Every benchmark is
bounded: one scenario, at most MAX_REQUESTS requests per iteration (genai-bench overshoots a little), one minute
per iteration at most.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devstack import model_repos
from devstack.bench_runner import default_commands
from devstack.hub_server import HubServer
from devstack.kube import REPO_ROOT
from devstack.services import OciRegistry
from testkit.waiting import wait_until
from tests.fixtures.hub import HUB_USER_TOKEN
from tests.support.replica_stack import restart
from tests.support.traffic_stack import DEFAULT_BRIDGE_KINDS, TrafficStack, traffic_stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]
__all__ = ["traffic_stack"]

BRIDGE_KINDS = DEFAULT_BRIDGE_KINDS + ",Model,ClusterServingRuntime,BenchmarkJob,BaseModel,ClusterBaseModel"
GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "benchmarkjobs"
MAX_REQUESTS = 8
DEADLINE = 420.0
EXAMPLES = REPO_ROOT / "deploy" / "examples"


@dataclass(frozen=True)
class BenchWorld:
    stack: TrafficStack
    registry: OciRegistry
    isvc: str
    model: str
    pod_url: str
    """The URL of one of the InferenceService's pods (its address in the stack's pod range): a URL endpoint."""
    repo_id: str
    """The model's Hub repository: a URL endpoint's modelName (genai-bench loads its tokenizer by that name, as
    from a server started with `--model <repo>`; the pods answer any model name)."""
    repo_files: Path
    """The model repository's files as the Hub keeps them (config, tokenizer, weights): what a claim holds."""

    @property
    def namespace(self) -> str:
        return self.stack.namespace

    @property
    def api(self) -> client.ApiClient:
        return self.stack.live.api


def _example(name: str, namespace: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    if "namespace" in doc["metadata"]:
        doc["metadata"]["namespace"] = namespace
    return doc


@pytest.fixture(scope="module")
def bench_world(traffic_stack: TrafficStack, hub_server: HubServer, oci_registry: OciRegistry) -> BenchWorld:
    for command, path in default_commands().items():
        assert path.exists(), f"{command} is not installed at {path} (./dev setup installs it)"
    stack, ns = traffic_stack, traffic_stack.namespace
    core, custom = client.CoreV1Api(stack.live.api), client.CustomObjectsApi(stack.live.api)
    # The benchmark pod's tokenizer from the stack's Hub, its results pushed to the stack's registry over HTTP.
    core.patch_namespaced_config_map(stack.operator_config, ns, {"data": {"benchmark": yaml.safe_dump(
        {"hubEndpoint": hub_server.url, "insecureRegistries": [oci_registry.address]})}})
    repo = model_repos.make_safetensors_repo(hub_server.root, f"devstack/tiny-llama-{uuid.uuid4().hex[:8]}")
    model = _example("model-tiny-llama.yaml", ns)
    model["spec"]["source"]["url"] = f"https://huggingface.co/{repo.repo_id}"
    runtime = _example("clusterservingruntime-vllm-tiny.yaml", ns)
    isvc = _example("inferenceservice-tiny-llama.yaml", ns)
    # The pods answer like a small model (20 ms to the first token, 2 ms per token) rather than at once: the
    # figures mean something, and a bounded run sends fewer requests.
    isvc["spec"]["engine"]["annotations"] = {"devstack.servingops.io/ttft-ms": "20",
                                             "devstack.servingops.io/tpot-ms": "2"}
    custom.create_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models", model)
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterservingruntimes", runtime)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", isvc)
    name = isvc["metadata"]["name"]

    def ready() -> str | None:
        got = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name)
        status = got.get("status") or {}
        ok = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        return status.get("url") if ok else None

    wait_until("the example InferenceService Ready with a URL", ready, stack.live.worker, timeout=DEADLINE)
    pods = core.list_namespaced_pod(ns, label_selector=f"ome.io/inferenceservice={name}").items
    ip = next(p.status.pod_ip for p in pods if p.status and p.status.pod_ip and p.status.phase == "Running")
    return BenchWorld(stack, oci_registry, name, model["metadata"]["name"], f"http://{ip}:8080", repo.repo_id,
                      repo.snapshot)


def _bench(world: BenchWorld, name: str, endpoint: dict[str, Any], *, requests: int = MAX_REQUESTS,
           **extra: Any) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "BenchmarkJob",
            "metadata": {"name": name, "namespace": world.namespace},
            "spec": {"endpoint": endpoint, "task": "text-to-text", "trafficScenarios": ["D(100,100)"],
                     "numConcurrency": [1, 2], "maxTimePerIteration": 1, "maxRequestsPerIteration": requests,
                     "additionalRequestParams": {"temperature": "0.2"},
                     "outputLocation": {"storageUri": f"oci://{world.registry.address}/benchmarks/{name}"},
                     **extra}}
    return dict(client.CustomObjectsApi(world.api).create_namespaced_custom_object(
        GROUP, VERSION, world.namespace, PLURAL, body))


def _get(world: BenchWorld, name: str) -> dict[str, Any]:
    return dict(client.CustomObjectsApi(world.api).get_namespaced_custom_object(
        GROUP, VERSION, world.namespace, PLURAL, name))


def _status(world: BenchWorld, name: str) -> dict[str, Any]:
    return dict(_get(world, name).get("status") or {})


def _terminal(world: BenchWorld, name: str) -> dict[str, Any] | None:
    status = _status(world, name)
    return status if status.get("state") in ("Completed", "Failed") else None


def _jobs(world: BenchWorld, name: str) -> list[client.V1Job]:
    uid = _get(world, name)["metadata"]["uid"]
    return list(client.BatchV1Api(world.api).list_namespaced_job(
        world.namespace, label_selector=f"ome.io/benchmarkjob-uid={uid}").items)


def _pods(world: BenchWorld, name: str) -> list[client.V1Pod]:
    uid = _get(world, name)["metadata"]["uid"]
    return list(client.CoreV1Api(world.api).list_namespaced_pod(
        world.namespace, label_selector=f"ome.io/benchmarkjob-uid={uid}").items)


def _events(world: BenchWorld, name: str) -> list[tuple[str, str, str]]:
    listed = client.CoreV1Api(world.api).list_namespaced_event(
        world.namespace, field_selector=f"involvedObject.kind=BenchmarkJob,involvedObject.name={name}")
    return sorted((e.type, e.reason, e.message) for e in listed.items)


def _table(world: BenchWorld) -> list[list[str]]:
    """`kubectl get benchmarkjob` as the apiserver serves it: the CRD's printer columns, as a Table."""
    method, url, headers, _, _ = world.api.param_serialize(
        "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{world.namespace}/{PLURAL}",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}, auth_settings=["BearerToken"])
    response = world.api.call_api(method, url, headers)
    response.read()
    table = json.loads(response.data)
    return [[c["name"] for c in table["columnDefinitions"]], *([str(v) for v in row["cells"]] for row in table["rows"])]


def _oras_pull(reference: str, into: Path) -> list[str]:
    into.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([str(default_commands()["oras"]), "pull", "--plain-http", reference, "-o", str(into)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"oras pull {reference}: {done.stdout}{done.stderr}"
    return sorted(str(p.relative_to(into)) for p in into.rglob("*") if p.is_file())


def _runner_started(world: BenchWorld, name: str) -> bool:
    """The runner reports the genai-bench container running (kwok alone would say terminated, Completed)."""
    for pod in _pods(world, name):
        for status in (pod.status.init_container_statuses or []) if pod.status else []:
            if status.name == "genai-bench" and status.state and status.state.running:
                return True
    return False


@pytest.fixture
def started() -> Iterator[float]:
    begin = time.monotonic()
    yield begin
    print(f"test took {time.monotonic() - begin:.0f}s")


def test_an_inference_service_and_a_url_complete_with_summaries_and_results_in_the_registry(
        bench_world: BenchWorld, tmp_path: Path, started: float) -> None:
    world, ns = bench_world, bench_world.namespace
    core = client.CoreV1Api(world.api)
    # The URL run's credentials travel as Secret references: a Hub token (the Hub accepts it) and an API key.
    core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="bench-creds"),
                                                      string_data={"HUGGINGFACE_API_KEY": HUB_USER_TOKEN,
                                                                   "api-key": "sk-devstack-bench"}))
    isvc_name, url_name = "isvc-bench", "url-bench"
    _bench(world, isvc_name, {"inferenceService": {"name": world.isvc, "namespace": ns}})
    _bench(world, url_name, {"endpoint": {"url": world.pod_url, "apiFormat": "openai", "modelName": world.repo_id}},
           huggingFaceSecretReference={"name": "bench-creds"},
           podOverride={"env": [{"name": "MODEL_API_KEY",
                                 "valueFrom": {"secretKeyRef": {"name": "bench-creds", "key": "api-key"}}}]})
    running = wait_until("both Running", lambda: all(_status(world, n).get("state") in ("Running", "Completed")
                                                     for n in (isvc_name, url_name)), timeout=DEADLINE)
    assert running
    for name in (isvc_name, url_name):
        status = wait_until(f"{name} terminal", lambda n=name: _terminal(world, n), timeout=DEADLINE,
                            detail=lambda n=name: [p.status for p in _pods(world, n)])
        assert status["state"] == "Completed", status
        assert status["startTime"] <= status["completionTime"]
        details = json.loads(status["details"])
        print(name, json.dumps(details, indent=1))
        assert "summaryProblem" not in details, details
        summary = details["summary"]
        assert [(s["scenario"], s["concurrency"]) for s in summary] == [("D(100,100)", 1), ("D(100,100)", 2)]
        for row in summary:
            # genai-bench stops its users mid-stream when an iteration ends: a request cut there counts as an
            # error ("Response ended prematurely"); a few, never most.
            assert row["requests"] >= MAX_REQUESTS and row["errors"] <= row["requests"] // 4, row
            assert 20 <= row["ttftP50Ms"] <= row["ttftP99Ms"] and row["outputTokensPerSecond"] > 0, row
        files = _oras_pull(details["results"], tmp_path / name)
        folder = f"{name}-g1"
        assert f"{folder}/experiment_metadata.json" in files, files
        assert f"{folder}/D100_100_text-to-text_num_concurrency_1_time_" in " ".join(files), files
        metadata = json.loads((tmp_path / name / folder / "experiment_metadata.json").read_text())
        assert world.model in json.dumps(metadata) or world.repo_id in json.dumps(metadata), metadata
        assert len(_jobs(world, name)) == 1
        reasons = [(t, r) for t, r, _ in _events(world, name)]
        assert ("Normal", "BenchmarkStarted") in reasons and ("Normal", "BenchmarkCompleted") in reasons, reasons
    isvc_details = json.loads(_status(world, isvc_name)["details"])
    assert isvc_details["endpoint"] == f"http://{world.isvc}.{ns}.example.com"
    # The credentials are in the pod's env as references only, never in its command line or in the status.
    pod_spec = _pods(world, url_name)[0].spec
    assert pod_spec is not None
    words = " ".join(" ".join([*(c.command or []), *(c.args or [])]) for c in pod_spec.init_containers or [])
    assert "sk-devstack-bench" not in words and HUB_USER_TOKEN not in words
    assert "sk-devstack-bench" not in json.dumps(_status(world, url_name))
    # genai-bench writes its options, the API key among them, into its results; the redact step took it out
    # before the push (the workbook is a zip: read inside).
    for path in (tmp_path / url_name).rglob("*"):
        if path.suffix == ".xlsx":
            with zipfile.ZipFile(path) as book:
                assert not any(b"sk-devstack-bench" in book.read(i) for i in book.namelist()), path
        elif path.is_file():
            assert b"sk-devstack-bench" not in path.read_bytes(), path
    assert "--model-api-key REDACTED" in (tmp_path / url_name / f"{url_name}-g1" / "experiment_metadata.json"
                                             ).read_text()
    table = _table(world)
    print("kubectl get benchmarkjob:\n" + "\n".join("  ".join(f"{cell:<22}" for cell in row) for row in table))
    assert table[0][:6] == ["Name", "State", "Service", "URL", "Started", "Completed"], table[0]
    rows = {row[0]: row for row in table[1:]}
    assert rows[isvc_name][1:3] == ["Completed", world.isvc] and rows[url_name][1] == "Completed", rows
    assert rows[url_name][3] == world.pod_url and rows[isvc_name][4] and rows[isvc_name][5], rows


def test_a_pod_killed_mid_run_ends_failed_honestly_with_no_second_job(bench_world: BenchWorld,
                                                                      started: float) -> None:
    world, name = bench_world, "killed-bench"
    _bench(world, name, {"inferenceService": {"name": world.isvc, "namespace": world.namespace}}, requests=100000)
    wait_until("genai-bench running in the pod", lambda: _runner_started(world, name), timeout=DEADLINE)
    time.sleep(3)  # mid-run: the tokenizer loaded, requests flowing
    pod = _pods(world, name)[0]
    assert pod.metadata is not None
    client.CoreV1Api(world.api).delete_namespaced_pod(pod.metadata.name, world.namespace, grace_period_seconds=5)
    status = wait_until("Failed", lambda: _terminal(world, name), timeout=DEADLINE)
    print(status)
    assert status["state"] == "Failed" and f"Job {name}-g1 failed" in status["failureMessage"], status
    # The container's end, not only the Job's reason: the podFailurePolicy held the pod until the runner (the
    # kubelet here) reported genai-bench stopped, so the Job's condition and the pod both name its exit.
    exited = re.search(r"container genai-bench exited (\d+) \(([^)]*)\)", status["failureMessage"])
    assert exited is not None, status["failureMessage"]
    assert int(exited[1]) in (143, 137) and ("SIGTERM" in exited[2] or "SIGKILL" in exited[2]), exited[0]
    assert len(_jobs(world, name)) == 1
    # backoffLimit 0: no second pod ran the benchmark again.
    time.sleep(5)
    assert [p.metadata.name for p in _pods(world, name) if p.metadata and p.metadata.name != pod.metadata.name] == []
    events = _events(world, name)
    assert ("Warning", "BenchmarkFailed", status["failureMessage"]) in events, events


def test_a_worker_killed_mid_run_and_restarted_completes_with_one_job(bench_world: BenchWorld,
                                                                       started: float) -> None:
    world, name = bench_world, "restart-bench"
    _bench(world, name, {"inferenceService": {"name": world.isvc, "namespace": world.namespace}})
    wait_until("Running", lambda: _status(world, name).get("state") == "Running", timeout=DEADLINE)
    restart(world.stack.live.worker)
    status = wait_until("terminal", lambda: _terminal(world, name), world.stack.live.worker, timeout=DEADLINE)
    assert status["state"] == "Completed", status
    assert len(_jobs(world, name)) == 1
    assert json.loads(status["details"])["summary"]


def test_a_pvc_output_lands_in_the_claims_volume(bench_world: BenchWorld, tmp_path: Path, started: float) -> None:
    """pvc://<claim>/<sub-path>: genai-bench writes into the claim (here bound to a hostPath PersistentVolume,
    whose directory the devstack runner mounts), the redact step takes the API key out of the files there, and
    the summarize step's termination message becomes details.summary. The run Completes."""
    world, ns, name = bench_world, bench_world.namespace, "pvc-bench"
    core = client.CoreV1Api(world.api)
    key = "sk-devstack-pvc-bench"
    core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="pvc-creds"),
                                                      string_data={"api-key": key}))
    volume_dir = tmp_path / "volume"
    volume_dir.mkdir()
    pv_name = f"bench-results-{uuid.uuid4().hex[:6]}"
    core.create_persistent_volume(client.V1PersistentVolume(
        metadata=client.V1ObjectMeta(name=pv_name),
        spec=client.V1PersistentVolumeSpec(capacity={"storage": "1Gi"}, access_modes=["ReadWriteOnce"],
                                           storage_class_name="", host_path=client.V1HostPathVolumeSource(
                                               path=str(volume_dir)))))
    try:
        core.create_namespaced_persistent_volume_claim(ns, client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="bench-results"),
            spec=client.V1PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"], storage_class_name="",
                                                    volume_name=pv_name,
                                                    resources=client.V1VolumeResourceRequirements(
                                                        requests={"storage": "1Gi"}))))
        _bench(world, name, {"inferenceService": {"name": world.isvc, "namespace": ns}},
               outputLocation={"storageUri": "pvc://bench-results/runs"},
               podOverride={"env": [{"name": "MODEL_API_KEY",
                                     "valueFrom": {"secretKeyRef": {"name": "pvc-creds", "key": "api-key"}}}]})
        status = wait_until("terminal", lambda: _terminal(world, name), timeout=DEADLINE,
                            detail=lambda: [p.status for p in _pods(world, name)])
        assert status["state"] == "Completed", status
        details = json.loads(status["details"])
        print(name, json.dumps(details, indent=1))
        assert details["results"] == f"pvc://bench-results/runs/{name}-g1"
        assert "summaryProblem" not in details, details
        summary = details["summary"]
        assert [(s["scenario"], s["concurrency"]) for s in summary] == [("D(100,100)", 1), ("D(100,100)", 2)]
        for row in summary:
            assert row["requests"] >= MAX_REQUESTS and row["errors"] <= row["requests"] // 4, row
            assert 20 <= row["ttftP50Ms"] <= row["ttftP99Ms"] and row["outputTokensPerSecond"] > 0, row
        [pod] = _pods(world, name)
        assert pod.status is not None
        [summarized] = pod.status.container_statuses or []
        assert summarized.name == "summarize" and summarized.state.terminated.exit_code == 0
        print("termination message", len(summarized.state.terminated.message), "bytes:",
              summarized.state.terminated.message)
        folder = volume_dir / "runs" / f"{name}-g1"
        written = sorted(p.name for p in folder.iterdir())
        assert "experiment_metadata.json" in written, written
        assert any(n.startswith("D100_100_text-to-text_num_concurrency_1_") for n in written), written
        # genai-bench wrote the key (its --model-api-key option) into its results; the redact step took it out
        # of every file in the claim (the workbook is a zip: read inside).
        for path in folder.rglob("*"):
            if path.suffix == ".xlsx":
                with zipfile.ZipFile(path) as book:
                    assert not any(key.encode() in book.read(i) for i in book.namelist()), path
            elif path.is_file():
                assert key.encode() not in path.read_bytes(), path
        assert "--model-api-key REDACTED" in (folder / "experiment_metadata.json").read_text()
        assert key not in json.dumps(status)
    finally:
        core.delete_persistent_volume(pv_name)


def _hostpath_claim(world: BenchWorld, claim: str, directory: Path) -> str:
    """A claim `claim` in the world's namespace bound to a new hostPath PersistentVolume on `directory` (the
    devstack runners read it there); the PersistentVolume's name."""
    core = client.CoreV1Api(world.api)
    pv_name = f"{claim}-{uuid.uuid4().hex[:6]}"
    core.create_persistent_volume(client.V1PersistentVolume(
        metadata=client.V1ObjectMeta(name=pv_name),
        spec=client.V1PersistentVolumeSpec(capacity={"storage": "1Gi"}, access_modes=["ReadOnlyMany"],
                                           storage_class_name="", host_path=client.V1HostPathVolumeSource(
                                               path=str(directory)))))
    core.create_namespaced_persistent_volume_claim(world.namespace, client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=claim),
        spec=client.V1PersistentVolumeClaimSpec(access_modes=["ReadOnlyMany"], storage_class_name="",
                                                volume_name=pv_name,
                                                resources=client.V1VolumeResourceRequirements(
                                                    requests={"storage": "1Gi"}))))
    return pv_name


def _isvc_condition(world: BenchWorld, name: str, kind: str = "Ready") -> dict[str, Any]:
    got = client.CustomObjectsApi(world.api).get_namespaced_custom_object(GROUP, VERSION, world.namespace,
                                                                          "inferenceservices", name)
    return next((c for c in (got.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def _isvc_url(world: BenchWorld, name: str) -> str | None:
    got = client.CustomObjectsApi(world.api).get_namespaced_custom_object(GROUP, VERSION, world.namespace,
                                                                          "inferenceservices", name)
    ready = _isvc_condition(world, name).get("status") == "True"
    return (got.get("status") or {}).get("url") if ready else None


def _chat_through_gateway(world: BenchWorld, isvc: str) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"model": isvc, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
    request = urllib.request.Request(f"{world.stack.traefik.url}/v1/chat/completions", data=body, method="POST",
                                     headers={"Host": world.stack.host(isvc), "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}


def test_a_model_served_from_a_claim_answers_and_is_benchmarked_with_its_tokenizer_from_the_claim(
        bench_world: BenchWorld, tmp_path: Path, started: float) -> None:
    """A BaseModel at pvc://model-weights/tiny/llama (the claim bound to a hostPath PersistentVolume holding the
    Hub repository's files): its InferenceService's pods mount the claim read-only with that subPath at the
    model path, it becomes Ready and answers through the Gateway, and a BenchmarkJob against it Completes with
    genai-bench's tokenizer read from the claim. A ClusterBaseModel whose claim is in another namespace holds its
    service with a named reason and a Warning Event, and no pod is made for it."""
    world, ns = bench_world, bench_world.namespace
    core, custom = client.CoreV1Api(world.api), client.CustomObjectsApi(world.api)
    volume_dir = tmp_path / "model-volume"
    shutil.copytree(world.repo_files, volume_dir / "tiny" / "llama")
    assert (volume_dir / "tiny" / "llama" / "tokenizer.json").exists()
    pv_name = _hostpath_claim(world, "model-weights", volume_dir)
    model_path, elsewhere_model = "/mnt/models/tiny-pvc", f"tiny-elsewhere-{uuid.uuid4().hex[:6]}"
    selection = {"modelFormat": {"name": "safetensors", "version": "1.0.0"},
                 "modelFramework": {"name": "transformers", "version": "4.45.0"},
                 "modelArchitecture": "LlamaForCausalLM"}
    pacing = {"devstack.servingops.io/ttft-ms": "20", "devstack.servingops.io/tpot-ms": "2"}
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "basemodels", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "BaseModel", "metadata": {"name": "tiny-pvc"},
            "spec": {**selection, "storage": {"storageUri": "pvc://model-weights/tiny/llama", "path": model_path}}})
        custom.create_cluster_custom_object(GROUP, VERSION, "clusterbasemodels", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterBaseModel", "metadata": {"name": elsewhere_model},
            "spec": {**selection, "storage": {"storageUri": "pvc://model-weights/tiny/llama",
                                              "parameters": {"namespace": "models-elsewhere"}}}})
        for isvc, model in (("tiny-pvc", {"name": "tiny-pvc", "kind": "BaseModel"}),
                            ("tiny-elsewhere", {"name": elsewhere_model, "kind": "ClusterBaseModel"})):
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": isvc},
                "spec": {"model": model, "engine": {"minReplicas": 1, "maxReplicas": 1, "annotations": pacing}}})

        url = wait_until("tiny-pvc Ready with a URL", lambda: _isvc_url(world, "tiny-pvc"), world.stack.live.worker,
                         timeout=DEADLINE, detail=lambda: _isvc_condition(world, "tiny-pvc"))
        assert url == f"http://tiny-pvc.{ns}.example.com"
        pods = [p for p in core.list_namespaced_pod(ns, label_selector="ome.io/inferenceservice=tiny-pvc").items
                if p.status and p.status.phase == "Running"]
        assert pods
        for pod in pods:
            spec = world.api.sanitize_for_serialization(pod.spec)
            claims = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
            assert [v["persistentVolumeClaim"] for v in claims] == [{"claimName": "model-weights", "readOnly": True}]
            main = next(c for c in spec["containers"] if c["name"] == "ome-container")
            assert {"name": claims[0]["name"], "mountPath": model_path, "readOnly": True,
                    "subPath": "tiny/llama"} in main["volumeMounts"], main["volumeMounts"]
            assert {"name": "MODEL_PATH", "value": model_path} in main["env"]
            assert not any("hostPath" in v for v in spec["volumes"])
        answered = wait_until("tiny-pvc answers through the Gateway",
                              lambda: (got := _chat_through_gateway(world, "tiny-pvc"))[0] == 200 and got[1],
                              timeout=60)
        assert answered["choices"], answered

        # The claim in another namespace: held with the reason, a Warning Event, no pod.
        held = wait_until("tiny-elsewhere held", lambda: (c := _isvc_condition(world, "tiny-elsewhere")).get(
            "reason") == "ModelClaimInOtherNamespace" and c, world.stack.live.worker, timeout=DEADLINE)
        assert held["status"] == "False" and "namespace models-elsewhere" in held["message"], held
        events = core.list_namespaced_event(ns, field_selector="involvedObject.name=tiny-elsewhere,"
                                                               "reason=ModelClaimInOtherNamespace").items
        assert any(e.type == "Warning" for e in events), events
        assert core.list_namespaced_pod(ns, label_selector="ome.io/inferenceservice=tiny-elsewhere").items == []

        name = "claim-bench"
        _bench(world, name, {"inferenceService": {"name": "tiny-pvc", "namespace": ns}})
        status = wait_until(f"{name} terminal", lambda: _terminal(world, name), timeout=DEADLINE,
                            detail=lambda: [p.status for p in _pods(world, name)])
        assert status["state"] == "Completed", status
        bench_pod = world.api.sanitize_for_serialization(_pods(world, name)[0].spec)
        bench = next(c for c in [*bench_pod.get("initContainers", []), *bench_pod["containers"]]
                     if c["name"] == "genai-bench")
        assert "--model-tokenizer /model" in " ".join([*bench.get("command", []), *bench.get("args", [])])
        model_volume = next(v for v in bench_pod["volumes"] if v["name"] == "model")
        assert model_volume["persistentVolumeClaim"]["claimName"] == "model-weights"
        assert {"name": "model", "mountPath": "/model", "readOnly": True,
                "subPath": "tiny/llama"} in bench["volumeMounts"], bench["volumeMounts"]
        details = json.loads(status["details"])
        print(name, json.dumps(details, indent=1))
        assert details["endpoint"] == url
        assert [(s["scenario"], s["concurrency"]) for s in details["summary"]] == [("D(100,100)", 1),
                                                                                    ("D(100,100)", 2)]
        assert all(row["requests"] >= MAX_REQUESTS and row["outputTokensPerSecond"] > 0 for row in details["summary"])
    finally:
        for isvc in ("tiny-pvc", "tiny-elsewhere"):
            custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", isvc)
        core.delete_persistent_volume(pv_name)
