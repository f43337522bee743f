"""The devstack's benchmark pod runner (devstack/bench_runner.py) in pieces: a container path turned into the
host directory of its mount, kwok leaving benchmark pods' completion to the runner in an answering cluster, and
the name-resolution shim the benchmark process runs with (host names to the Gateway, nothing off the stack).
The runner's whole run is tests/test_benchmark_job_e2e.py."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from kubernetes import client

from devstack.bench_runner import BENCH_POD_LABEL, MESSAGE_BYTES, SHIM_DIR, BenchRunner, Running, host_path
from devstack.kube import go_module_dir, kwok_stages, pinned_versions
from servingops.activities.benchmark.activities import job_phase
from servingops.activities.benchmark.types import JobPhase
from servingops.rendering.benchmark_job import LABEL_UID

pytestmark = pytest.mark.unit


def test_a_container_path_under_a_mount_becomes_its_host_directory() -> None:
    mounts = [("/results/deep", Path("/h/deep")), ("/results", Path("/h/results")), ("/model", Path("/h/m"))]
    assert host_path("/results", mounts) == "/h/results"
    assert host_path("/results/x-g1/a.json", mounts) == "/h/results/x-g1/a.json"
    assert host_path("/results/deep/f", mounts) == "/h/deep/f"
    assert host_path("/resultsX", mounts) == "/resultsX"  # a sibling name is not under the mount
    assert host_path("http://tiny.ns.example.com", mounts) == "http://tiny.ns.example.com"


def test_the_runner_takes_the_pods_the_renderer_labels() -> None:
    assert BENCH_POD_LABEL == LABEL_UID


def _stage(name: str, answering: bool) -> dict[str, object]:
    root = go_module_dir("sigs.k8s.io/kwok", pinned_versions()["KWOK_VERSION"])
    stages = kwok_stages(root, answering=answering)
    return next(s for s in stages if s["metadata"]["name"] == name)


def _complete_stage(answering: bool) -> dict[str, object]:
    return _stage("pod-complete", answering)


def test_kwok_starts_and_completes_pods_except_benchmark_pods_in_an_answering_cluster() -> None:
    answering = json.dumps(_complete_stage(True))
    assert BENCH_POD_LABEL in json.dumps(_stage("pod-ready", True))
    assert BENCH_POD_LABEL in answering and "DoesNotExist" in answering
    assert BENCH_POD_LABEL not in json.dumps(_complete_stage(False))


def _resolve(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(SHIM_DIR), **env},
                          capture_output=True, text=True, timeout=30, check=False)


def test_the_shim_resolves_host_names_to_the_gateway_and_nothing_off_the_stack() -> None:
    env = {"SERVINGOPS_BENCH_GATEWAY": "127.0.0.1:18000", "SERVINGOPS_BENCH_ALLOWED": "10.244.0.0/16"}
    done = _resolve("import socket; print(socket.getaddrinfo('tiny.ns.example.com', 80, 0, socket.SOCK_STREAM)[0][4])",
                    env)
    assert done.stdout.strip() == "('127.0.0.1', 18000)", done.stderr
    done = _resolve("import socket; print(socket.getaddrinfo('10.244.1.7', 8080, 0, socket.SOCK_STREAM)[0][4])", env)
    assert done.stdout.strip() == "('10.244.1.7', 8080)", done.stderr
    done = _resolve("import socket; socket.getaddrinfo('8.8.8.8', 443)", env)
    assert done.returncode != 0 and "not on the local stack" in done.stderr
    done = _resolve("import socket; socket.getaddrinfo('huggingface.co', 443)", {})
    assert done.returncode != 0 and "no Gateway" in done.stderr


def test_a_pod_whose_init_container_runs_genai_bench_is_a_running_benchmark() -> None:
    """oci:// runs genai-bench as the init container: Kubernetes calls that pod Pending (PodInitializing), the
    BenchmarkJob calls it Running; a pod still waiting to start is Pending for both."""
    job = client.V1Job(metadata=client.V1ObjectMeta(name="b-g1"), status=client.V1JobStatus(active=1))

    def pod(state: client.V1ContainerState) -> client.V1Pod:
        return client.V1Pod(status=client.V1PodStatus(phase="Pending", init_container_statuses=[
            client.V1ContainerStatus(name="genai-bench", image="i", image_id="", ready=False, restart_count=0,
                                     state=state)]))

    running = client.V1ContainerState(running=client.V1ContainerStateRunning())
    waiting = client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason="PodInitializing"))
    assert job_phase(job, [pod(running)]).phase == JobPhase.RUNNING
    assert job_phase(job, [pod(waiting)]).phase == JobPhase.PENDING


def _runner(tmp_path: Path) -> BenchRunner:
    runner = BenchRunner(client.ApiClient(), tmp_path, [], commands={"python": Path(sys.executable)})
    runner._gateway = lambda: ""  # type: ignore[method-assign]  # no cluster here
    runner._patch_status = lambda pod, status: None  # type: ignore[method-assign]
    return runner


def _run(runner: BenchRunner, tmp_path: Path, container: dict[str, object]) -> dict[str, object]:
    pod = {"metadata": {"namespace": "ns", "name": "p", "uid": "u"}, "spec": {"containers": [container]}}
    run = Running("u", threading.Thread(target=lambda: None))
    state = runner._run_container("ns/p", run, container, {}, [], tmp_path, pod, [], [], [])
    return dict(state["state"]["terminated"])


def test_a_container_s_termination_message_is_what_it_wrote_at_its_path_as_a_kubelet_reports_it(
        tmp_path: Path) -> None:
    """The summarize step writes its summary to /dev/termination-log: the runner gives the container a file of
    its own there and reports its first 4096 bytes in the terminated state; with nothing written, a failed
    FallbackToLogsOnError container's message is its log's end; a succeeded one's is empty."""
    runner = _runner(tmp_path)
    write = "import sys; open(sys.argv[1], 'w').write(sys.argv[2] * 5000)"
    done = _run(runner, tmp_path, {"name": "summarize", "command": ["python"],
                                   "args": ["-c", write, "/dev/termination-log", "x"],
                                   "terminationMessagePath": "/dev/termination-log"})
    assert done["exitCode"] == 0 and done["message"] == "x" * MESSAGE_BYTES
    custom = _run(runner, tmp_path, {"name": "custom", "command": ["python"],
                                     "args": ["-c", "import sys; open(sys.argv[1], 'w').write('hi')", "/tmp/said"],
                                     "terminationMessagePath": "/tmp/said"})
    assert custom["message"] == "hi"
    failed = _run(runner, tmp_path, {"name": "failing", "command": ["python"],
                                     "args": ["-c", "print('the last words'); raise SystemExit(3)"],
                                     "terminationMessagePolicy": "FallbackToLogsOnError"})
    assert failed["exitCode"] == 3 and "the last words" in str(failed["message"])
    quiet = _run(runner, tmp_path, {"name": "quiet", "command": ["python"], "args": ["-c", "print('ok')"],
                                    "terminationMessagePolicy": "FallbackToLogsOnError"})
    assert quiet["exitCode"] == 0 and "message" not in quiet
