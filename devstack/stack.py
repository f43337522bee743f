"""`./dev up | down | status` (devstack/cli.py): the whole local stack for people.

`up` starts every real part (Temporal with its Web UI, the local Kubernetes cluster with our
CRDs, the registry, Prometheus, the Hub-compatible server), then the worker and the bridge as
their own processes, applies deploy/examples/, waits for the examples and prints what became
Ready. The processes outlive the command; their pids are kept in <state-dir>/stack.json so that
`down` can stop them. State (etcd, SQLite, registry data) persists in the state dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, utils
from kubernetes.client.exceptions import ApiException

from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.process import ManagedProcess, free_port, http_ok, tcp_open
from devstack.services import OciRegistry, Prometheus, TemporalDevServer

EXAMPLES = REPO_ROOT / "deploy" / "examples"
CRDS = REPO_ROOT / "deploy" / "crds"
OPERATOR_CONFIG = REPO_ROOT / "deploy" / "manifests" / "15-operator-config.yaml"
READY_WAIT_SECONDS = 180


def _port(preferred: int) -> int:
    """The well-known port when it is free (so bookmarks keep working), another one otherwise."""
    return preferred if not tcp_open("127.0.0.1", preferred) else free_port()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _load_state(state_dir: Path) -> dict[str, Any] | None:
    path = state_dir / "stack.json"
    if not path.exists():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def up(state_dir: Path) -> int:
    state = _load_state(state_dir)
    if state and any(_alive(pid) for pid in state["pids"]):
        print("the stack is already up (./dev down stops it)")
        return status(state_dir)
    logs = state_dir / "logs"
    temporal = TemporalDevServer(state_dir / "temporal", logs, port=_port(7233), ui_port=_port(8233)).start()
    registry = OciRegistry(state_dir / "registry", logs, port=_port(5000)).start()
    prometheus = Prometheus(state_dir / "prometheus", logs, port=_port(9090)).start()
    cluster = LocalKubeCluster(state_dir / "kube", logs).start()
    cluster.apply_crds([CRDS])

    hub_port = free_port()
    hub = ManagedProcess("hub", [sys.executable, "-m", "devstack.hub_server", "--root", str(state_dir / "hub"),
                                 "--port", str(hub_port), "--demo"], logs, cwd=REPO_ROOT).start()
    hub_url = f"http://127.0.0.1:{hub_port}"
    hub.wait_ready(lambda: http_ok(f"{hub_url}/api/models"), timeout=60)

    env = {
        "TEMPORAL_ADDRESS": temporal.address,
        "KUBECONFIG": str(cluster.kubeconfig_path),
        "HF_ENDPOINT": hub_url,
        "SERVINGOPS_REGISTRY": registry.address,
        "SERVINGOPS_OLLAMA_REGISTRY": registry.url,
        "SERVINGOPS_SPOOL_DIR": str(state_dir / "spool"),
    }
    api = cluster.api_client()
    write_operator_config(api, prometheus.url)
    worker = ManagedProcess("worker", [sys.executable, "-m", "servingops.workers.main"], logs, env=env,
                            cwd=REPO_ROOT).start()
    # The bridge follows, by default, every kind whose workflow the worker serves.
    bridge = ManagedProcess("bridge", [sys.executable, "-m", "servingops.crd_bridge.main", "--no-leader-elect"], logs,
                            env=env, cwd=REPO_ROOT).start()

    processes = [temporal.process, registry.process, prometheus.process, *cluster._processes, hub, worker, bridge]
    state = {
        "pids": [p.pid for p in processes if p and p.pid],
        "temporal": temporal.address,
        "temporal_ui": temporal.ui_url,
        "kubeconfig": str(cluster.kubeconfig_path),
        "registry": registry.address,
        "prometheus": prometheus.url,
        "hub": hub_url,
        "logs": str(logs),
    }
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "stack.json").write_text(json.dumps(state, indent=2))

    applied = apply_examples(api)
    print(f"Temporal UI:     {temporal.ui_url}")
    print(f"export KUBECONFIG={cluster.kubeconfig_path}")
    print(f"registry:        {registry.address}    Prometheus: {prometheus.url}    Hub: {hub_url}")
    print(f"logs:            {logs}")
    report(api, applied, wait_seconds=READY_WAIT_SECONDS)
    return 0


def write_operator_config(api: client.ApiClient, prometheus_url: str) -> None:
    """deploy/manifests' operator ConfigMap, its bundled Prometheus pointed at the local one, so a
    canary that names no metrics source samples the Prometheus `dev up` started."""
    body = yaml.safe_load(OPERATOR_CONFIG.read_text())
    body["data"]["canaryAnalysis"] = yaml.safe_dump({"bundledPrometheusAddress": prometheus_url})
    namespace = body["metadata"]["namespace"]
    core = client.CoreV1Api(api)
    with contextlib.suppress(ApiException):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    try:
        core.create_namespaced_config_map(namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map(body["metadata"]["name"], namespace, body)


def apply_examples(api: client.ApiClient) -> list[dict[str, Any]]:
    """Create every object under deploy/examples/ (existing ones are left as they are)."""
    applied = []
    custom = client.CustomObjectsApi(api)
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            group, _, version = doc["apiVersion"].rpartition("/")
            plural = _plural(api, group, version, doc["kind"])
            try:
                if plural is None:
                    utils.create_from_dict(api, doc)
                elif doc["metadata"].get("namespace"):
                    custom.create_namespaced_custom_object(group, version, doc["metadata"]["namespace"], plural, doc)
                else:
                    custom.create_cluster_custom_object(group, version, plural, doc)
            except ApiException as exc:
                if exc.status != 409:
                    raise
            applied.append(doc)
    return applied


def _plural(api: client.ApiClient, group: str, version: str, kind: str) -> str | None:
    if not group:
        return None
    resources = client.CustomObjectsApi(api).get_api_resources(group, version)
    return next((r.name for r in resources.resources if r.kind == kind and "/" not in r.name), None)


def _phase(api: client.ApiClient, doc: dict[str, Any]) -> tuple[str, str]:
    group, _, version = doc["apiVersion"].rpartition("/")
    plural = _plural(api, group, version, doc["kind"])
    meta = doc["metadata"]
    custom = client.CustomObjectsApi(api)
    if plural is None:
        return "-", ""
    obj = (custom.get_namespaced_custom_object(group, version, meta["namespace"], plural, meta["name"])
           if meta.get("namespace") else custom.get_cluster_custom_object(group, version, plural, meta["name"]))
    status = obj.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    phase = status.get("phase") or (("Ready" if ready["status"] == "True" else "NotReady") if ready else "Pending")
    return phase, (ready or {}).get("message", "")


def report(api: client.ApiClient, applied: list[dict[str, Any]], wait_seconds: float) -> None:
    deadline = time.monotonic() + wait_seconds
    phases: list[tuple[str, str]] = []
    while time.monotonic() < deadline:
        phases = [_phase(api, doc) for doc in applied]
        if all(p in ("Ready", "Failed", "-") for p, _ in phases):
            break
        time.sleep(2)
    print("\nexamples:")
    for doc, (phase, message) in zip(applied, phases, strict=True):
        where = f"{doc['metadata'].get('namespace', '')}/" if doc["metadata"].get("namespace") else ""
        print(f"  {doc['kind']:<20} {where}{doc['metadata']['name']:<32} {phase:<12} {message}")
    ready = sum(1 for p, _ in phases if p == "Ready")
    print(f"{ready} of {len(applied)} became Ready")


def down(state_dir: Path) -> int:
    state = _load_state(state_dir)
    if not state:
        print("nothing to stop")
        return 0
    for pid in reversed(state["pids"]):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(pid) for pid in state["pids"]):
        time.sleep(0.2)
    for pid in state["pids"]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    (state_dir / "stack.json").unlink()
    print("stopped; state is kept in", state_dir)
    return 0


def status(state_dir: Path) -> int:
    state = _load_state(state_dir)
    if not state:
        print("the stack is down")
        return 1
    alive = sum(1 for pid in state["pids"] if _alive(pid))
    print(f"{alive} of {len(state['pids'])} processes alive")
    for key in ("temporal_ui", "kubeconfig", "registry", "prometheus", "hub", "logs"):
        print(f"  {key:<12} {state[key]}")
    return 0 if alive == len(state["pids"]) else 1


def command(action: str, state_dir: Path) -> int:
    return {"up": up, "down": down, "status": status}[action](state_dir)
