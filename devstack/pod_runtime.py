"""`python -m devstack.pod_runtime`: the container runtime for the serving pods of one local cluster.

kwok plays the kubelets, but runs nothing: a pod gets an address and nobody answers there. This process
does, for the pods of InferenceServices (those carrying UPSTREAM_SERVICE_LABEL), what a kubelet and its
container runtime would:

- It makes a network namespace of its own (devstack/netns.py) and a host route for the cluster's pod
  range into it, since the apiserver refuses loopback addresses in EndpointSlices and tests may only send
  traffic to loopback and to the stack's own namespaces. The range is printed at start; kwok hands out
  pod addresses from it (LocalKubeCluster's pod_cidr).
- Inside the namespace runs one devstack.pod_server, which answers for every pod on its address and
  container ports: an OpenAI-compatible server with per-pod time to first token, time per token and
  error rate, and vLLM's metric names.
- For each running pod it puts the pod's address on the namespace's loopback and starts the pod's server;
  the pod's behaviour comes from its annotations (or its main container's env, FAULT_KEYS), and follows
  them when they change.
- Readiness is the kubelet's: the pod is Ready when its server's `/health` answers 200 (probed every
  PROBE_SECONDS) and every readiness gate is True; kwok leaves these pods unready (kube.py's answered
  stages), so nothing else says Ready for them. A pod held by POD_UNREADY_ANNOTATION stays unready.
- A deleted pod's server gets what a kubelet gives a container: its preStop sleep (lifecycle.preStop.sleep
  or an exec `sleep N`) while it still accepts requests, then SIGTERM (stop accepting, finish what is in
  flight) and the kill at terminationGracePeriodSeconds.
- Each pod's /metrics is listed for the stack's Prometheus (a file_sd file) with namespace, pod, revision
  and InferenceService labels.
- A BenchmarkJob's pod (labelled devstack.bench_runner.BENCH_POD_LABEL) is run by devstack/bench_runner.py:
  its command (genai-bench from its own venv, oras) as host processes, its end reported as a kubelet would.

Not shipped with the product: it stands in for a node's runtime, which kwok has none of.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from devstack.bench_runner import BenchRunner
from devstack.kube import POD_UNREADY_ANNOTATION
from devstack.netns import NetworkNamespace
from devstack.pod_server import PodServerClient
from devstack.process import ManagedProcess

log = logging.getLogger("devstack.pod_runtime")

UPSTREAM_SERVICE_LABEL = "ome.io/inferenceservice"
"""Pods of an InferenceService carry it (rendering/render.py): the ones this runtime answers for."""
REVISION_LABEL = "serving.ome.io/revision"
ANNOTATION_PREFIX = "devstack.servingops.io/"
FAULT_KEYS = {"ttft-ms": "ttft_ms", "tpot-ms": "tpot_ms", "tokens": "tokens", "error-rate": "error_rate",
              "capacity-servable": "servable"}
"""Per-pod behaviour: annotation `devstack.servingops.io/<key>`, or env `SERVINGOPS_POD_<KEY>` (upper,
dashes as underscores) on the main container; the annotation wins. A component's annotations reach its
pods, so a revision can be made slow or failing as a whole. `capacity-servable` makes the pod answer the
routing capacity poll's report (`/capacity`) with that many servable replicas."""
WHOLE_NUMBER_KEYS = frozenset({"tokens", "servable"})
DEFAULT_PORT = 8080
PROBE_SECONDS = 1.0


def fault_settings(annotations: Mapping[str, str], env: Mapping[str, str]) -> dict[str, Any]:
    """The behaviour a pod asks for, parsed; what it does not set is left to the server's defaults."""
    settings: dict[str, Any] = {}
    for key, field_name in FAULT_KEYS.items():
        raw = annotations.get(ANNOTATION_PREFIX + key, env.get("SERVINGOPS_POD_" + key.upper().replace("-", "_")))
        if raw is None:
            continue
        try:
            settings[field_name] = int(raw) if field_name in WHOLE_NUMBER_KEYS else float(raw)
        except ValueError:
            log.warning("ignoring %s=%r: not a number", key, raw)
    return settings


def container_ports(pod: dict[str, Any]) -> list[int]:
    """Every TCP containerPort of the pod's containers; DEFAULT_PORT when none is declared (what the
    product's Service targets then)."""
    ports = sorted({int(p["containerPort"]) for c in pod["spec"].get("containers") or []
                    for p in c.get("ports") or [] if p.get("protocol", "TCP") == "TCP" and "containerPort" in p})
    return ports or [DEFAULT_PORT]


def served_model(pod: dict[str, Any]) -> str:
    """`--served-model-name` of the main container when given (vLLM's and SGLang's flag), else the
    InferenceService's name."""
    containers = pod["spec"].get("containers") or [{}]
    words = [*(containers[0].get("command") or []), *(containers[0].get("args") or [])]
    for i, word in enumerate(words):
        if word == "--served-model-name" and i + 1 < len(words):
            return str(words[i + 1])
        if word.startswith("--served-model-name="):
            return str(word.split("=", 1)[1])
    return str(pod["metadata"].get("labels", {}).get(UPSTREAM_SERVICE_LABEL, "model"))


def pre_stop_seconds(pod: dict[str, Any]) -> float:
    """The main container's preStop sleep: `sleep: {seconds}` or an exec of `sleep N`; 0 without one."""
    containers = pod["spec"].get("containers") or [{}]
    hook = ((containers[0].get("lifecycle") or {}).get("preStop")) or {}
    if "sleep" in hook:
        return float(hook["sleep"].get("seconds", 0))
    command = (hook.get("exec") or {}).get("command") or []
    words = " ".join(command).split()
    if "sleep" in words and words.index("sleep") + 1 < len(words):
        with contextlib.suppress(ValueError):
            return float(words[words.index("sleep") + 1])
    return 0.0


def ready_status(pod: dict[str, Any], healthy: bool) -> dict[str, Any] | None:
    """The status patch a kubelet would send for this probe result, or None when the pod already says so.

    ContainersReady follows the probe; Ready also needs every readiness gate True (the gate's owner
    writes it, never the kubelet) and the pod not held unready."""
    status = pod.get("status") or {}
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    held = (pod["metadata"].get("annotations") or {}).get(POD_UNREADY_ANNOTATION) == "true"
    containers_ready = healthy and not held
    gates = [g["conditionType"] for g in pod["spec"].get("readinessGates") or []]
    gates_open = all((conditions.get(g) or {}).get("status") == "True" for g in gates)
    ready = containers_ready and gates_open
    want = {"ContainersReady": containers_ready, "Ready": ready}
    if all((conditions.get(kind) or {}).get("status") == str(value) for kind, value in want.items()):
        return None
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    reason = "" if containers_ready else "ContainersNotReady"
    if containers_ready and not gates_open:
        reason = "ReadinessGatesNotReady"
    patched = []
    for kind, value in want.items():
        old = conditions.get(kind) or {}
        moved = old.get("status") != str(value)
        condition = {"type": kind, "status": str(value),
                     "lastTransitionTime": now if moved else old.get("lastTransitionTime", now)}
        if not value:
            condition["reason"] = reason if kind == "Ready" else "ContainersNotReady"
        patched.append(condition)
    container_statuses = [
        {**c, "ready": containers_ready, "started": True} for c in status.get("containerStatuses") or []
    ]
    return {"status": {"conditions": patched, "containerStatuses": container_statuses}}


@dataclass
class Served:
    """A pod this runtime started a server for."""

    key: str
    uid: str
    ip: str
    ports: list[int]
    settings: dict[str, Any]


class PodRuntime:
    """Watches the cluster's InferenceService pods and keeps the pod server's set in step with them."""

    def __init__(self, api: client.ApiClient, netns: NetworkNamespace, server: PodServerClient,
                 targets_file: Path | None) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.netns = netns
        self.server = server
        self.targets_file = targets_file
        self.served: dict[str, Served] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.waiting: dict[str, str] = {}
        """Running pods whose server could not start yet (key -> why), tried again every probe: kwok hands a
        deleted pod's address to a new pod at once, while the old pod's server still drains on it (its
        preStop and grace period); a kubelet would not have that address back before tearing the old
        sandbox down, so the new pod starts, unready, once the address is free."""
        self._changes = threading.RLock()
        """The watch and the probe loop (retrying waiting pods) both start and stop servers."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    # -- the watch --------------------------------------------------------------------------

    def run(self) -> None:
        threading.Thread(target=self._probe_loop, name="probe", daemon=True).start()
        while not self._stopping.is_set():
            try:
                self._watch_once()
            except Exception as exc:  # the apiserver away (an outage test), a dropped watch: list again
                log.info("pod watch ended (%s); listing again", exc)
                self._stopping.wait(1.0)

    def _watch_once(self) -> None:
        listed = self.api.sanitize_for_serialization(  # type: ignore[no-untyped-call]
            self.core.list_pod_for_all_namespaces(label_selector=UPSTREAM_SERVICE_LABEL, _request_timeout=30))
        seen = set()
        for pod in listed["items"]:
            seen.add(self._key(pod))
            self._observe(pod)
        for key in set(self.pods) - seen:
            self._gone(key)
        stream = watch.Watch()  # type: ignore[no-untyped-call]
        for event in stream.stream(  # type: ignore[no-untyped-call]
                self.core.list_pod_for_all_namespaces, label_selector=UPSTREAM_SERVICE_LABEL,
                                   resource_version=listed["metadata"]["resourceVersion"],
                                   allow_watch_bookmarks=True, timeout_seconds=300):
            if self._stopping.is_set():
                stream.stop()  # type: ignore[no-untyped-call]
                return
            pod = self.api.sanitize_for_serialization(event["object"])  # type: ignore[no-untyped-call]
            if event["type"] == "DELETED":
                self._gone(self._key(pod))
            elif event["type"] in ("ADDED", "MODIFIED"):
                self._observe(pod)

    @staticmethod
    def _key(pod: dict[str, Any]) -> str:
        return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"

    def _observe(self, pod: dict[str, Any]) -> None:
        with self._changes:
            self._observe_locked(pod)

    def _observe_locked(self, pod: dict[str, Any]) -> None:
        key = self._key(pod)
        self.waiting.pop(key, None)
        if pod["metadata"].get("deletionTimestamp"):
            self._gone(key, pod)
            return
        with self._lock:
            self.pods[key] = pod
        ip = (pod.get("status") or {}).get("podIP")
        if not ip or (pod.get("status") or {}).get("phase") != "Running":
            return
        container = (pod["spec"].get("containers") or [{}])[0]
        env = {e["name"]: e.get("value", "") for e in container.get("env") or [] if "name" in e}
        settings = fault_settings(pod["metadata"].get("annotations") or {}, env)
        served = self.served.get(key)
        if served is not None and served.uid == pod["metadata"]["uid"]:
            if served.settings != settings:
                self.server.configure(key, **settings)
                served.settings = settings
            return
        self.netns.add_address(ip)
        try:
            self.server.start(pod=key, uid=pod["metadata"]["uid"], ip=ip, ports=container_ports(pod),
                              revision=pod["metadata"].get("labels", {}).get(REVISION_LABEL, ""),
                              model=served_model(pod), **settings)
        except RuntimeError as exc:  # one pod's trouble never stops the others' (see `waiting`)
            if key not in self.waiting:
                log.info("%s waits: %s", key, exc)
            self.waiting[key] = str(exc)
            return
        self.served[key] = Served(key, pod["metadata"]["uid"], ip, container_ports(pod), settings)
        self._write_targets()
        self._probe(key)

    def _gone(self, key: str, pod: dict[str, Any] | None = None) -> None:
        with self._changes:
            self._gone_locked(key, pod)

    def _gone_locked(self, key: str, pod: dict[str, Any] | None) -> None:
        self.waiting.pop(key, None)
        with self._lock:
            known = self.pods.pop(key, None)
        served = self.served.pop(key, None)
        if served is None:
            return
        pod = pod or known or {"spec": {}}
        grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
        pre_stop = min(pre_stop_seconds(pod), grace)
        self._write_targets()
        # A kubelet runs the preStop hook (the server still accepts), then SIGTERM, then the kill at
        # the grace period's end; in a thread of its own so other pods' events keep flowing.
        threading.Thread(target=self._terminate, args=(served, pre_stop, grace - pre_stop),
                         name=f"stop-{key}", daemon=True).start()

    def _terminate(self, served: Served, pre_stop: float, grace: float) -> None:
        if pre_stop:
            time.sleep(pre_stop)
        try:
            # By uid: a new pod of the same name may have started meanwhile (its server replaced this one's), and
            # stopping by name alone would take it down instead, leaving it never Ready.
            result = self.server.stop(served.key, grace_seconds=max(grace, 0.0), uid=served.uid)
            log.info("stopped %s: %s", served.key, result)
        except RuntimeError as exc:
            log.warning("stopping %s: %s", served.key, exc)
        with self._changes:  # a waiting pod given this address may start on it meanwhile: keep it then
            if not any(s.ip == served.ip for s in self.served.values()):
                self.netns.remove_address(served.ip)

    # -- readiness --------------------------------------------------------------------------

    def _probe_loop(self) -> None:
        while not self._stopping.wait(PROBE_SECONDS):
            for key in list(self.waiting):
                with self._lock:
                    pod = self.pods.get(key)
                if pod is not None:
                    self._observe(pod)
            for key in list(self.served):
                try:
                    self._probe(key)
                except Exception as exc:
                    log.info("probe of %s: %s", key, exc)

    def _probe(self, key: str) -> None:
        served = self.served.get(key)
        with self._lock:
            pod = self.pods.get(key)
        if served is None or pod is None:
            return
        patch = ready_status(pod, _health(served.ip, served.ports[0]))
        if patch is None:
            return
        try:
            updated = self.core.patch_namespaced_pod_status(pod["metadata"]["name"], pod["metadata"]["namespace"],
                                                            patch, _request_timeout=10)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
            return
        with self._lock:
            if key in self.pods:
                self.pods[key] = self.api.sanitize_for_serialization(updated)  # type: ignore[no-untyped-call]

    # -- metrics ----------------------------------------------------------------------------

    def _write_targets(self) -> None:
        if self.targets_file is None:
            return
        groups = []
        with self._lock:
            pods = dict(self.pods)
        for key, served in sorted(self.served.items()):
            labels = (pods.get(key) or {}).get("metadata", {}).get("labels", {})
            namespace, name = key.split("/", 1)
            groups.append({"targets": [f"{served.ip}:{served.ports[0]}"],
                           "labels": {"namespace": namespace, "pod": name,
                                      "revision": labels.get(REVISION_LABEL, ""),
                                      "inferenceservice": labels.get(UPSTREAM_SERVICE_LABEL, "")}})
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.targets_file)

    def stop(self) -> None:
        self._stopping.set()


def _health(ip: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{ip}:{port}/health", timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


READY_FILE = "runtime.json"


class PodRuntimeProcess:
    """Starts `python -m devstack.pod_runtime` for a cluster not started yet: start() returns once the
    runtime has its namespace, route and pod server, and pod_cidr is what the cluster's kwok must use.
    The runtime waits for the apiserver by itself (its watch lists again until it answers)."""

    def __init__(self, kubeconfig: Path, workdir: Path, log_dir: Path, targets_file: Path | None = None) -> None:
        self.kubeconfig, self.workdir, self.log_dir, self.targets_file = kubeconfig, workdir, log_dir, targets_file
        self.process: ManagedProcess | None = None
        self.pod_cidr = ""
        self.netns = ""
        self.address = ""
        """The namespace's own address (NetworkNamespace.address): a non-loopback address of the stack's
        where a relay into this namespace can listen (MemberCluster's reachable gateway)."""

    def start(self, timeout: float = 60) -> PodRuntimeProcess:
        ready = self.workdir / READY_FILE
        with contextlib.suppress(FileNotFoundError):
            ready.unlink()
        argv = [sys.executable, "-m", "devstack.pod_runtime", "--kubeconfig", str(self.kubeconfig),
                "--workdir", str(self.workdir)]
        if self.targets_file is not None:
            argv += ["--prometheus-targets", str(self.targets_file)]
        self.process = ManagedProcess("pod-runtime", argv, self.log_dir, cwd=Path(__file__).resolve().parent.parent,
                                      env={"PYTHONUNBUFFERED": "1"}).start()
        self.process.wait_ready(ready.exists, timeout)
        info = json.loads(ready.read_text())
        self.pod_cidr, self.netns, self.address = info["pod_cidr"], info["netns"], info["address"]
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.pod_runtime", description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--workdir", required=True, help="the pod server's control socket and log go here")
    parser.add_argument("--prometheus-targets", help="file_sd file listing every pod's /metrics")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)

    netns = NetworkNamespace.create()
    server_proc: subprocess.Popen[bytes] | None = None
    try:
        netns.route_pods()
        control = workdir / "pod-server.sock"
        with contextlib.suppress(FileNotFoundError):
            control.unlink()
        server_log = (workdir / "pod-server.log").open("ab")
        server_proc = subprocess.Popen(
            [*netns.exec_argv(), sys.executable, "-m", "devstack.pod_server", "--control", str(control)],
            stdout=subprocess.PIPE, stderr=server_log, cwd=Path(__file__).resolve().parent.parent)
        assert server_proc.stdout is not None
        if server_proc.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"the pod server did not start (see {workdir / 'pod-server.log'})")
        # What the launcher waits for: the range kwok must hand pod addresses out of.
        ready = workdir / READY_FILE
        ready.with_suffix(".tmp").write_text(json.dumps({"pod_cidr": netns.pod_cidr, "netns": netns.name,
                                                           "address": netns.address}))
        ready.with_suffix(".tmp").replace(ready)
        # Started before its cluster (kwok needs the pod range first): the kubeconfig comes later.
        while not Path(args.kubeconfig).exists():
            time.sleep(0.2)
        api = config.new_client_from_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
        runtime = PodRuntime(api, netns, PodServerClient(control),
                             Path(args.prometheus_targets) if args.prometheus_targets else None)
        # The benchmark Jobs' pods (BenchmarkJob): run as host processes, their end reported (bench_runner.py).
        bench = BenchRunner(api, workdir / "bench", [netns.pod_cidr])
        threading.Thread(target=bench.run, name="bench-runner", daemon=True).start()

        def terminate(*_: object) -> None:
            bench.stop()
            runtime.stop()
            sys.exit(0)

        signal.signal(signal.SIGTERM, terminate)
        runtime.run()
    finally:
        if server_proc is not None and server_proc.poll() is None:
            server_proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                server_proc.wait(10)
        netns.delete()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
