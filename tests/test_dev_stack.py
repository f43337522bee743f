"""`./dev up` / `status` / `down` (devstack/cli.py), the README's first command, run for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from devstack.kube import REPO_ROOT


def _cli(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devstack.cli", *args, "--state-dir", str(state)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


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


def test_dev_up_makes_the_examples_ready_and_down_stops_everything(tmp_path: Path) -> None:
    state = tmp_path / "stack"
    up = _cli("up", state=state)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "Temporal UI:" in up.stdout
        examples = sorted(Path(REPO_ROOT / "deploy" / "examples").glob("*.yaml"))
        assert f"{len(examples)} of {len(examples)} became Ready" in up.stdout, up.stdout
        assert _cli("status", state=state).returncode == 0
        stack = json.loads((state / "stack.json").read_text())
        pids = stack["pids"]
        # One node agent per kwok node was started (a log each); `down` must stop them with the rest.
        agent_logs = sorted(p.name for p in Path(stack["logs"]).glob("agent-*"))
        assert agent_logs and all(name.startswith("agent-kwok-node-") for name in agent_logs), agent_logs
        # The local Prometheus scrapes the worker (the SDK's metrics and its own) and the bridge.
        for promql in ('up{component="worker"}', 'up{component="bridge"}', 'servingops_bridge_leader',
                       'clamp_max(sum(servingops_worker_pushed_bytes_total), 1)',
                       'clamp_max(count(temporal_worker_task_slots_available{component="worker"}), 1)'):
            assert _eventually_one(stack["prometheus"], promql), promql
    finally:
        down = _cli("down", state=state)
    assert down.returncode == 0, down.stdout + down.stderr
    alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()
             and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]
    assert alive == [], f"left running: {alive}"
    assert not os.path.exists(state / "stack.json")
