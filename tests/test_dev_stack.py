"""`./dev up --members 1` / `status` / `down` (devstack/cli.py), the README's first command, run for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from devstack.kube import CONTROLLER_BINARIES, REPO_ROOT, STORAGE_BINARIES
from devstack.process import cache_dir, find_binary
from devstack.stack import SERVED_KINDS, STATUSLESS_KINDS
from servingops.runtime.kube import load_api_client

pytestmark = pytest.mark.e2e


def _cli(*args: str, state: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devstack.cli", *args, "--state-dir", str(state)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, **(env or {})})


def _eventually_one(prometheus: str, promql: str, seconds: float = 60) -> bool:
    """Whether the instant query answers 1 within `seconds` (Prometheus scrapes every second)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=5) as response:
            result = json.load(response)["data"]["result"]
        if result and all(float(series["value"][1]) == 1 for series in result):
            return True
        time.sleep(1)
    return False


def _eventually(probe: Callable[[], bool], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if probe():
            return True
        time.sleep(1)
    return False


def _member_ready(kubeconfig: Path, name: str) -> bool:
    api = load_api_client(str(kubeconfig))
    try:
        obj = client.CustomObjectsApi(api).get_cluster_custom_object("ome.io", "v1beta1", "workloadclusters", name)
    finally:
        api.close()  # type: ignore[no-untyped-call]
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _example_kinds() -> list[str]:
    return [doc["kind"] for path in sorted((REPO_ROOT / "deploy" / "examples").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def _stopped(pids: list[int]) -> list[int]:
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()
            and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]


def test_dev_up_on_a_new_machine_makes_the_examples_ready_then_joins_controllers_and_a_member(
        tmp_path: Path) -> None:
    # One `./dev up --members 1` proves both what a new machine sees and the whole stack `down` stops: each
    # `up` costs minutes of a CI worker, so the README's command is run once.
    # A new machine as `./dev up` leaves it before the stack starts: etcd, kube-apiserver and helm
    # built, the controllers not (Kueue too, which only the member runs). A cache of its own holds links to
    # those; the controllers are really built into it (a relink here: the Go build cache is warm).
    cache = tmp_path / "cache"
    (cache / "bin" / ".versions").mkdir(parents=True)
    for name in (*STORAGE_BINARIES, "helm", "kueue"):
        found = find_binary(name)
        assert found is not None, f"{name} is built by ./dev test's setup"
        (cache / "bin" / name).symlink_to(found)
        stamp = cache_dir() / "bin" / ".versions" / name
        if stamp.exists():
            (cache / "bin" / ".versions" / name).write_text(stamp.read_text())
    state = tmp_path / "stack"
    up = _cli("up", "--members", "1", state=state, env={"SERVINGOPS_CACHE": str(cache)})
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "Temporal UI:" in up.stdout
        stack = json.loads((state / "stack.json").read_text())
        pids = stack["pids"]
        kinds = _example_kinds()
        imports = len([k for k in kinds if k not in STATUSLESS_KINDS and k not in SERVED_KINDS])
        served = len([k for k in kinds if k in SERVED_KINDS])
        ready = up.stdout.index(f"{imports} of {imports} became Ready")
        # The model imports were Ready before the controllers were built; the member joined once they
        # had; the served examples, which need pods, then became Ready and answered through the Gateway
        # (the README's curl line).
        order = [up.stdout.index(line) for line in (
            "building and joining", "joined in", "member cluster:  member-1", f"{served} of {served} became Ready",
            "tiny-llama.default.example.com answered through the gateway: 200")]
        assert ready < order[0] and order == sorted(order), up.stdout
        for name in CONTROLLER_BINARIES:
            assert (cache / "bin" / name).is_file(), f"{name} not built into the new machine's cache"
        api = load_api_client(stack["kubeconfig"])
        try:
            nodes = client.CoreV1Api(api).list_node().items
            assert len(nodes) == 3 and all(
                any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or [])) for n in nodes)
            # The chart's own workloads, which helm installed without --wait, have their pods Ready (kwok's).
            deployments = client.AppsV1Api(api).list_deployment_for_all_namespaces(
                label_selector="app.kubernetes.io/part-of=servingops").items
            assert deployments and all((d.status.ready_replicas or 0) == d.spec.replicas for d in deployments)
        finally:
            api.close()  # type: ignore[no-untyped-call]
        # --members 1: a member cluster, registered as a WorkloadCluster that the health workflow finds
        # connected (its own apiserver, Kueue, worker and bridge are among the pids `down` stops).
        assert set(stack["members"]) == {"member-1"}
        assert _eventually(lambda: _member_ready(Path(stack["kubeconfig"]), "member-1"), 90), "member-1 not Ready"
        # The node agents started with their nodes; stack.json names every process for `down`.
        agent_logs = sorted(p.name for p in Path(stack["logs"]).glob("agent-*"))
        assert len(agent_logs) == 3 and all(name.startswith("agent-kwok-node-") for name in agent_logs), agent_logs
        # The local Prometheus scrapes the worker (the SDK's metrics and its own) and the bridge.
        for promql in ('up{component="worker"}', 'up{component="bridge"}', 'servingops_bridge_leader',
                       'clamp_max(sum(servingops_worker_pushed_bytes_total), 1)',
                       'clamp_max(count(temporal_worker_task_slots_available{component="worker"}), 1)'):
            assert _eventually_one(stack["prometheus"], promql), promql
        assert _cli("status", state=state).returncode == 0
    finally:
        down = _cli("down", state=state)
    assert down.returncode == 0, down.stdout + down.stderr
    assert _stopped(pids) == [], "left running"
    assert not os.path.exists(state / "stack.json")
