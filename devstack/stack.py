"""`./dev up | down | status` (devstack/cli.py): the whole local stack for people.

`up` starts every real part (Temporal with its Web UI, the local Kubernetes cluster, the
registry, Prometheus, the Hub-compatible server), installs deploy/chart with Helm (CRDs, RBAC,
the operator ConfigMap pointed at the local Prometheus), then runs the worker and the bridge as
their own processes under the chart's ServiceAccounts (devstack/identities.py), applies
deploy/examples/, waits for the examples and prints what became Ready. The processes outlive
the command; their pids are kept in <state-dir>/stack.json so that `down` can stop them. State
(etcd, SQLite, registry data) persists in the state dir.
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

from devstack import admission as local_admission
from devstack import identities
from devstack.kube import CONTROLLER_BINARIES, REPO_ROOT, LocalKubeCluster, missing_binaries
from devstack.members import MemberCluster
from devstack.pod_runtime import PodRuntimeProcess
from devstack.process import ManagedProcess, free_port, http_ok, pid_alive, tcp_open
from devstack.services import OciRegistry, Prometheus, TemporalDevServer
from devstack.traefik import GATEWAY_NAME, GATEWAY_NAMESPACE, Traefik
from devstack.webhook import WebhookProcess, register

EXAMPLES = REPO_ROOT / "deploy" / "examples"
CRDS = REPO_ROOT / "deploy" / "crds"
READY_WAIT_SECONDS = 180
SERVED_KINDS = ("InferenceService",)
"""Examples that are Ready only once their pods are (the others are model imports, done by the worker)."""
STATUSLESS_KINDS = ("ClusterServingRuntime", "ServingRuntime")
"""Examples with no readiness of their own: listed, not waited for."""
INGRESS_DOMAIN = "example.com"
"""The operator ConfigMap's ingress.ingressDomain under `./dev up`: hosts are <name>.<namespace>.example.com."""
TOKEN_SECONDS = 30 * 24 * 3600
"""The processes' ServiceAccount tokens outlive any dev session; `./dev up` issues fresh ones."""


def _port(preferred: int) -> int:
    """The well-known port when it is free (so bookmarks keep working), another one otherwise."""
    return preferred if not tcp_open("127.0.0.1", preferred) else free_port()


def _load_state(state_dir: Path) -> dict[str, Any] | None:
    path = state_dir / "stack.json"
    if not path.exists():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def up(state_dir: Path, members: int = 0) -> int:
    state = _load_state(state_dir)
    if state and any(pid_alive(pid) for pid in state["pids"]):
        print("the stack is already up (./dev down stops it)")
        return status(state_dir)
    logs = state_dir / "logs"
    temporal = TemporalDevServer(state_dir / "temporal", logs, port=_port(7233), ui_port=_port(8233)).start()
    registry = OciRegistry(state_dir / "registry", logs, port=_port(5000)).start()
    prometheus = Prometheus(state_dir / "prometheus", logs, port=_port(9090)).start()
    # On a new machine the controllers (kube-controller-manager, kube-scheduler, kwok: about half of the
    # Go build) are not built yet. Nothing the examples need waits for them (a model import runs in
    # the worker, not in a pod), so the cluster starts without them, the examples become Ready, and
    # they are built and joined after: examples Ready minutes sooner, the same stack in the end. Member
    # clusters run their own controllers, so they start once those are built.
    staged = bool(missing_binaries(CONTROLLER_BINARIES))
    # The InferenceServices' pods answer (devstack/pod_runtime.py): the runtime's network namespace gives
    # the range kwok hands their addresses out of, so it starts first.
    cluster = LocalKubeCluster(state_dir / "kube", logs, controllers=not staged, answering=True)
    runtime = PodRuntimeProcess(cluster.kubeconfig_path, state_dir / "runtime", logs,
                                prometheus.pod_targets_file).start()
    cluster.pod_cidr = runtime.pod_cidr
    cluster.start()
    # The chart as an operator installs it; a canary that names no metrics source samples the
    # Prometheus started above, and every HTTPRoute attaches to the Gateway Traefik serves on loopback.
    # Helm creates CRDs but never updates them: apply the generated ones.
    identities.install(cluster, identities.local_values(
        image=identities.built_image_values(),
        operatorConfig={"canaryAnalysis": {"bundledPrometheusAddress": prometheus.url},
                        "ingress": {"omeIngressGateway": f"{GATEWAY_NAMESPACE}/{GATEWAY_NAME}",
                                    "ingressDomain": INGRESS_DOMAIN}}), wait=not staged)
    traefik = Traefik(state_dir / "traefik", logs, cluster.kubeconfig_path, port=_port(8000)).start(
        cluster.api_client())
    cluster.apply_crds([CRDS])
    ids = identities.issue(cluster, state_dir / "identities", seconds=TOKEN_SECONDS)

    hub_port = free_port()
    hub = ManagedProcess("hub", [sys.executable, "-m", "devstack.hub_server", "--root", str(state_dir / "hub"),
                                 "--port", str(hub_port), "--demo"], logs, cwd=REPO_ROOT).start()
    hub_url = f"http://127.0.0.1:{hub_port}"
    hub.wait_ready(lambda: http_ok(f"{hub_url}/api/models"), timeout=60)

    env = {
        "TEMPORAL_ADDRESS": temporal.address,
        "HF_ENDPOINT": hub_url,
        "SERVINGOPS_REGISTRY": registry.address,
        "SERVINGOPS_OLLAMA_REGISTRY": registry.url,
        "SERVINGOPS_SPOOL_DIR": str(state_dir / "spool"),
    }
    api = cluster.api_client()
    # Metrics an operator scrapes: the worker's (the Temporal SDK's and its own) and the bridge's,
    # both scraped by the Prometheus above, each process's series labelled with its component.
    worker_metrics, bridge_metrics = f"127.0.0.1:{_port(9103)}", f"127.0.0.1:{_port(9102)}"
    prometheus.set_target_groups([([worker_metrics], {"component": "worker"}),
                                  ([bridge_metrics], {"component": "bridge"})])
    # Each process talks to the apiserver as its own ServiceAccount, bound to the chart's roles.
    worker = ManagedProcess("worker", [sys.executable, "-m", "servingops.workers.main"], logs,
                            env={**env, **ids.worker_env(), "SERVINGOPS_WORKER_METRICS": worker_metrics},
                            cwd=REPO_ROOT).start()
    # The bridge follows, by default, every kind whose workflow the worker serves; it holds the
    # chart's Lease as the one bridge replica (the chart's own pods are kwok's, and run nothing).
    bridge = ManagedProcess("bridge", [sys.executable, "-m", "servingops.crd_bridge.main", "--leader-elect",
                                       "--lease-name", ids.lease_name, "--metrics-address", bridge_metrics], logs,
                            env={**env, **ids.bridge_env()}, cwd=REPO_ROOT).start()

    # One node agent per kwok node, each with a directory of its own as that node's disk, under the
    # chart's agent identity (in a cluster: the DaemonSet).
    def start_agents() -> list[ManagedProcess]:
        return [
            ManagedProcess(f"agent-{node}", [sys.executable, "-m", "servingops.cli.main", "agent", "--node", node,
                                             "--root", str(state_dir / "nodes" / node), "--namespace",
                                             ids.namespace, "--registry", registry.address,
                                             "--registry-insecure"], logs,
                           env={**env, "KUBECONFIG": str(ids.agent)}, cwd=REPO_ROOT).start()
            for node in cluster.node_names
        ] if ids.agent is not None else []

    agents = [] if staged else start_agents()

    # The model admission webhook on loopback TLS, registered with the chart's configuration pointed at it.
    assert ids.webhook is not None
    webhook = WebhookProcess(ids.webhook, state_dir / "webhook", logs, registry=registry.address).start()
    register(api, webhook.configuration("servingops-webhook-local"))
    # The validating admission webhook likewise (devstack/admission.py), registered only now that it runs.
    assert ids.admission is not None
    admission = local_admission.AdmissionProcess(ids.admission, state_dir / "admission", logs).start()
    local_admission.register(api, admission.configuration(local_admission.LOCAL_NAME))

    # Member clusters for placement (devstack/members.py): each its own apiserver, kwok nodes, Kueue
    # (4 cpus of quota) and servingops, registered here as WorkloadCluster member-<i>, labelled
    # servingops.dev/member=member-<i>; the `default` namespace is prepared in each.
    def start_fleet() -> list[MemberCluster]:
        started = [MemberCluster(f"member-{i}", state_dir / "members" / f"member-{i}", logs,
                                 labels={"servingops.dev/member": f"member-{i}"}).start(temporal.address, env)
                   for i in range(1, members + 1)]
        for member in started:
            member.prepare_namespace("default")
            member.register(api, ids.namespace)
        return started

    fleet = [] if staged else start_fleet()

    def processes() -> list[ManagedProcess | None]:
        return [temporal.process, registry.process, prometheus.process, runtime.process, *cluster._processes,
                traefik.process, hub, worker, bridge, *agents, webhook.process, admission.process,
                *(p for m in fleet for p in m.processes())]

    def print_fleet() -> None:
        for member in fleet:
            print(f"member cluster:  {member.name} (WorkloadCluster), KUBECONFIG={member.cluster.kubeconfig_path}")

    state: dict[str, Any] = {
        "pids": [p.pid for p in processes() if p and p.pid],
        "temporal": temporal.address,
        "temporal_ui": temporal.ui_url,
        "kubeconfig": str(cluster.kubeconfig_path),
        "registry": registry.address,
        "prometheus": prometheus.url,
        "metrics": f"worker http://{worker_metrics}/metrics, bridge http://{bridge_metrics}/metrics",
        "hub": hub_url,
        "gateway": traefik.url,
        "logs": str(logs),
        "members": {m.name: str(m.cluster.kubeconfig_path) for m in fleet},
    }
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "stack.json").write_text(json.dumps(state, indent=2))

    applied = apply_examples(api)
    print(f"Temporal UI:     {temporal.ui_url}")
    print(f"export KUBECONFIG={cluster.kubeconfig_path}")
    print(f"registry:        {registry.address}    Prometheus: {prometheus.url}    Hub: {hub_url}")
    print(f"metrics:         {state['metrics']} (scraped by Prometheus)")
    print(f"gateway:         {traefik.url} (Traefik; an InferenceService answers for Host "
          f"<name>.<namespace>.{INGRESS_DOMAIN})")
    print(f"logs:            {logs}")
    print_fleet()
    print(f"node disks:      {state_dir / 'nodes'} (one agent per kwok node)")
    # Served examples need pods, so on a new machine they are reported once the controllers have joined.
    served = [doc for doc in applied if doc["kind"] in SERVED_KINDS]
    report(api, [doc for doc in applied if not staged or doc not in served], wait_seconds=READY_WAIT_SECONDS)
    if staged:
        began = time.monotonic()
        print(f"\nbuilding and joining {', '.join(CONTROLLER_BINARIES)} (the examples above are usable meanwhile;"
              " pods wait for the scheduler)", flush=True)
        cluster.start_controllers()
        agents.extend(start_agents())
        identities.wait_workloads(cluster, ids.namespace)
        state["pids"] = [p.pid for p in processes() if p and p.pid]
        (state_dir / "stack.json").write_text(json.dumps(state, indent=2))
        print(f"controllers, {len(cluster.node_names)} kwok nodes and their agents joined in "
              f"{time.monotonic() - began:.0f}s")
        if members:
            fleet.extend(start_fleet())
            state["pids"] = [p.pid for p in processes() if p and p.pid]
            state["members"] = {m.name: str(m.cluster.kubeconfig_path) for m in fleet}
            (state_dir / "stack.json").write_text(json.dumps(state, indent=2))
            print_fleet()
        report(api, served, wait_seconds=READY_WAIT_SECONDS)
    for doc in served:
        print(answer_line(traefik, doc))
    return 0


def answer_line(traefik: Traefik, doc: dict[str, Any]) -> str:
    """One request to a served example's host through the Gateway, said as a line of `up`'s output."""
    host = f"{doc['metadata']['name']}.{doc['metadata'].get('namespace', 'default')}.{INGRESS_DOMAIN}"
    deadline, last = time.monotonic() + 30, "no answer"
    while time.monotonic() < deadline:
        try:
            code, headers, _ = traefik.get("/v1/models", host)
        except OSError as exc:
            code, headers, last = 0, {}, str(exc)
        if code == 200:
            return (f"{host} answered through the gateway: 200 from pod {headers.get('x-servingops-pod')}, "
                    f"revision {headers.get('x-servingops-revision')}")
        last = last if code == 0 else f"status {code}"
        time.sleep(1)
    return f"{host} did not answer through the gateway: {last}"


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
    if doc["kind"] in STATUSLESS_KINDS:
        return "-", ""
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
    print(f"{ready} of {sum(1 for p, _ in phases if p != '-')} became Ready")


def down(state_dir: Path) -> int:
    state = _load_state(state_dir)
    if not state:
        print("nothing to stop")
        return 0
    for pid in reversed(state["pids"]):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(pid_alive(pid) for pid in state["pids"]):
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
    alive = sum(1 for pid in state["pids"] if pid_alive(pid))
    print(f"{alive} of {len(state['pids'])} processes alive")
    for key in ("temporal_ui", "kubeconfig", "registry", "prometheus", "hub", "gateway", "logs"):
        print(f"  {key:<12} {state.get(key, '-')}")
    return 0 if alive == len(state["pids"]) else 1


def command(action: str, state_dir: Path) -> int:
    return {"up": up, "down": down, "status": status}[action](state_dir)
