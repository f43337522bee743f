"""The container runtime for BenchmarkJob pods in the local stack (devstack only, never shipped).

In an answering cluster kwok leaves a benchmark Job's pod alone once scheduled (devstack/kube.py keeps its
pod-ready and pod-complete stages off pods labelled BENCH_POD_LABEL). This runner, inside
devstack/pod_runtime.py's process, does what a kubelet would for such a pod (no pod address: the benchmark
runs on the host, as a pod with hostNetwork would):

- Runs its init containers, then its containers, one after the other, each `command` + `args` as a host
  process. Only the commands of the images the product renders are known (default_commands): `genai-bench`
  and `python` from genai-bench's own venv (deploy/local/bench/genai-bench-venv.sh, never the product's),
  `oras` from the stack's cache;
  any other command exits 127, as a missing binary would.
- The env is the pod spec's: literal values, and `valueFrom.secretKeyRef` / `configMapKeyRef` read from the
  real Secrets and ConfigMaps; `envFrom` likewise. A missing one holds the container waiting
  (CreateContainerConfigError, tried again), as a kubelet does; so does a claim not bound (FailedMount).
- Volumes are host directories under the pod's work directory (emptyDir; a Secret volume's items written
  out), or, for a persistentVolumeClaim, the directory of the PersistentVolume it is bound to (hostPath or
  local: the path on this "node"; another volume kind holds the pod waiting). A container sees
  a volume at its mountPath by a rewrite: every argument, env value and workingDir at or under a mountPath
  is turned into the host path (there is no mount namespace here). subPath is honoured; readOnly is not.
- Network: the process resolves host names to the cluster's Gateway (loopback; devstack/bench_shim) and may
  reach loopback and the stack's pod range only.
- Status: phase Pending while init containers run (Initialized False), Running once the containers do; each
  container's running and terminated state (exit code, reason, and as the message what the container wrote to
  its terminationMessagePath, a file of its own the path is rewritten to, first 4096 bytes; when it wrote
  nothing, with FallbackToLogsOnError and a non-zero exit, the end of its log), then phase Succeeded or
  Failed, so the real Job controller marks the Job Complete or Failed. A pod deleted mid-run has its process
  group stopped (SIGTERM, SIGKILL after the grace period), as a kubelet stops a container, and reports Failed
  with the container's exit (143/137): the Job's podFailurePolicy holds the pod (its tracking finalizer) until
  that status is in, so the Job's Failed condition names the exit.
- Bounded: a container runs at most RUN_LIMIT_SECONDS (the Job's activeDeadlineSeconds usually ends it first).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("devstack.bench_runner")

BENCH_POD_LABEL = "ome.io/benchmarkjob-uid"
"""On a BenchmarkJob's pods (servingops/rendering/benchmark_job.py LABEL_UID): the pods this runner runs."""
GENAI_BENCH_VERSION = "0.0.5"
RUN_LIMIT_SECONDS = 3600.0
SETUP_RETRY_SECONDS = 5.0
LOG_TAIL_BYTES = 2048
"""How much of a failed container's log becomes its termination message (a kubelet keeps 2048 bytes or 80
lines for FallbackToLogsOnError)."""
SHIM_DIR = Path(__file__).resolve().parent / "bench_shim"
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
"""A container's terminationMessagePath when its spec has none (the apiserver's default)."""
MESSAGE_BYTES = 4096
"""How much of the termination message file a kubelet keeps."""


def cache_dir() -> Path:
    return Path(os.environ.get("SERVINGOPS_CACHE") or Path.home() / ".cache" / "servingops")


def default_commands() -> dict[str, Path]:
    """The commands a benchmark pod's images provide, as host executables."""
    cache = cache_dir()
    venv = cache / f"genai-bench-{GENAI_BENCH_VERSION}" / "bin"
    # `python` is the benchmark image's own (the redact step runs there).
    return {"genai-bench": venv / "genai-bench", "python": venv / "python", "oras": cache / "bin" / "oras"}


def termination_message(container: dict[str, Any], exit_code: int, message_file: Path, logfile: Path) -> str:
    """What a kubelet reports as a terminated container's message: the first MESSAGE_BYTES of the file at its
    terminationMessagePath; when that is empty, with FallbackToLogsOnError and a non-zero exit, the end of its
    log (LOG_TAIL_BYTES)."""
    with contextlib.suppress(FileNotFoundError):
        with message_file.open("rb") as fh:
            written = fh.read(MESSAGE_BYTES)
        if written:
            return written.decode(errors="replace")
    if exit_code == 0 or container.get("terminationMessagePolicy") != "FallbackToLogsOnError":
        return ""
    with logfile.open("rb") as fh:
        fh.seek(max(0, logfile.stat().st_size - LOG_TAIL_BYTES))
        return fh.read().decode(errors="replace")


class PodSetupError(Exception):
    """The pod cannot start (reason, message), as a kubelet reports a container it could not create."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def host_path(value: str, mounts: list[tuple[str, Path]]) -> str:
    """`value` with a leading container path under a mountPath turned into its host directory."""
    for mount_path, directory in mounts:
        if value == mount_path:
            return str(directory)
        if value.startswith(mount_path.rstrip("/") + "/"):
            return str(directory) + value[len(mount_path.rstrip("/")):]
    return value


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Running:
    uid: str
    thread: threading.Thread
    process: subprocess.Popen[bytes] | None = None
    deleted: threading.Event = field(default_factory=threading.Event)
    grace: float = 30.0


class BenchRunner:
    """Watches the cluster's benchmark pods and runs each Running one once."""

    def __init__(self, api: client.ApiClient, workdir: Path, allowed_cidrs: list[str],
                 commands: Mapping[str, Path] | None = None) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.workdir = workdir
        self.allowed = allowed_cidrs
        self.commands = dict(commands or default_commands())
        self.running: dict[str, Running] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    # -- the watch ----------------------------------------------------------------------------

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._watch_once()
            except Exception as exc:  # the apiserver away, a dropped watch: list again
                log.info("benchmark pod watch ended (%s); listing again", exc)
                self._stopping.wait(1.0)

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            for run in self.running.values():
                run.deleted.set()

    def _watch_once(self) -> None:
        listed = self.api.sanitize_for_serialization(  # type: ignore[no-untyped-call]
            self.core.list_pod_for_all_namespaces(label_selector=BENCH_POD_LABEL, _request_timeout=30))
        seen = set()
        for pod in listed["items"]:
            seen.add(pod["metadata"]["uid"])
            self._observe(pod)
        with self._lock:
            for uid in set(self.running) - seen:
                self.running[uid].deleted.set()
        stream = watch.Watch()  # type: ignore[no-untyped-call]
        for event in stream.stream(  # type: ignore[no-untyped-call]
                self.core.list_pod_for_all_namespaces, label_selector=BENCH_POD_LABEL,
                resource_version=listed["metadata"]["resourceVersion"], allow_watch_bookmarks=True,
                timeout_seconds=300):
            if self._stopping.is_set():
                stream.stop()  # type: ignore[no-untyped-call]
                return
            pod = self.api.sanitize_for_serialization(event["object"])  # type: ignore[no-untyped-call]
            if event["type"] == "DELETED":
                with self._lock:
                    run = self.running.get(pod["metadata"]["uid"])
                if run is not None:
                    run.grace = 0.0
                    run.deleted.set()
            elif event["type"] in ("ADDED", "MODIFIED"):
                self._observe(pod)

    def _observe(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            run = self.running.get(uid)
            if pod["metadata"].get("deletionTimestamp"):
                if run is not None:
                    run.grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
                    run.deleted.set()
                return
            phase = (pod.get("status") or {}).get("phase")
            if run is not None or phase not in (None, "Pending") or not pod["spec"].get("nodeName"):
                return  # started already, ended, or not scheduled yet
            thread = threading.Thread(target=self._run_pod, args=(pod,), name=f"bench-{pod['metadata']['name']}",
                                      daemon=True)
            self.running[uid] = Running(uid, thread)
        thread.start()

    # -- one pod ------------------------------------------------------------------------------

    def _run_pod(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        run = self.running[meta["uid"]]
        pod_dir = self.workdir / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        pod_dir.mkdir(parents=True, exist_ok=True)
        spec = pod["spec"]
        inits, mains = spec.get("initContainers") or [], spec.get("containers") or []
        init_states: list[dict[str, Any]] = []
        main_states: list[dict[str, Any]] = []
        failed = False
        try:
            for i, container in enumerate([*inits, *mains]):
                states = init_states if i < len(inits) else main_states
                prepared = self._prepare(pod, container, pod_dir, run, init_states, main_states, states)
                if prepared is None:
                    break  # deleted while it waited
                env, mounts = prepared
                state = self._run_container(key, run, container, env, mounts, pod_dir, pod,
                                            init_states, main_states, states)
                states.append(state)
                failed = state["state"]["terminated"]["exitCode"] != 0
                if failed or run.deleted.is_set():
                    break
        except Exception as exc:  # a bug of the runner is the pod's failure, said, never a hang
            log.exception("running %s", key)
            failed = True
            main_states = [self._terminated(c, 128, "RunnerError", repr(exc)[-LOG_TAIL_BYTES:]) for c in mains]
        with self._lock:
            if run.deleted.is_set():
                self.running.pop(meta["uid"], None)
        # A container not run (an earlier one failed, or the pod was deleted) reports as never started, as a
        # kubelet does; a deleted pod's containers were stopped, so it ends Failed too (its status may not land
        # if the pod is already gone).
        failed = failed or run.deleted.is_set()
        main_states += [self._waiting(c) for c in mains[len(main_states):]]
        init_states += [self._waiting(c) for c in inits[len(init_states):]]
        phase = "Failed" if failed else "Succeeded"
        self._patch_status(pod, {"phase": phase, "conditions": self._conditions(False, "PodCompleted"),
                                 "initContainerStatuses": init_states, "containerStatuses": main_states})
        log.info("%s ended %s%s", key, phase, " (deleted)" if run.deleted.is_set() else "")

    def _prepare(self, pod: dict[str, Any], container: dict[str, Any], pod_dir: Path, run: Running,
                 init_states: list[dict[str, Any]], main_states: list[dict[str, Any]],
                 states: list[dict[str, Any]]) -> tuple[dict[str, str], list[tuple[str, Path]]] | None:
        """The container's env and mounts. What cannot be had yet (a Secret or claim missing, a claim unbound)
        holds the container waiting with the reason, tried again every SETUP_RETRY_SECONDS, as a kubelet holds
        it; None when the pod is deleted meanwhile."""
        said = ""
        while not run.deleted.is_set():
            try:
                volumes = self._volumes(pod, pod_dir)
                return self._env(pod["metadata"]["namespace"], container), self._mounts(container, volumes)
            except PodSetupError as exc:
                if str(exc) != said:
                    said = str(exc)
                    log.info("%s/%s waits: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], exc)
                    waiting = {"name": container["name"], "image": container.get("image", ""), "ready": False,
                               "restartCount": 0, "started": False,
                               "state": {"waiting": {"reason": exc.reason, "message": str(exc)}}}
                    is_init = states is init_states
                    self._patch_status(pod, {
                        "initContainerStatuses": [*states, waiting] if is_init else init_states,
                        "containerStatuses": main_states if is_init else [*states, waiting]})
            run.deleted.wait(SETUP_RETRY_SECONDS)
        return None

    def _run_container(self, key: str, run: Running, container: dict[str, Any], env: dict[str, str],
                       mounts: list[tuple[str, Path]], pod_dir: Path, pod: dict[str, Any],
                       init_states: list[dict[str, Any]], main_states: list[dict[str, Any]],
                       states: list[dict[str, Any]]) -> dict[str, Any]:
        name = container["name"]
        words = [*(container.get("command") or []), *(container.get("args") or [])]
        started = _now()
        states_now = [*states, {"name": name, "image": container.get("image", ""), "ready": False,
                                "restartCount": 0, "started": True, "state": {"running": {"startedAt": started}}}]
        is_init = states is init_states
        # A kubelet's phases: Pending while init containers run (Initialized False), Running once the
        # containers do.
        self._patch_status(pod, {"phase": "Pending" if is_init else "Running",
                                 "startTime": (pod.get("status") or {}).get("startTime") or started,
                                 "conditions": [{"type": "Initialized", "status": str(not is_init),
                                                 "lastTransitionTime": started,
                                                 **({"reason": "ContainersNotInitialized"} if is_init else {})}],
                                 "initContainerStatuses": states_now if is_init else init_states,
                                 "containerStatuses": ([self._waiting(c) for c in pod["spec"]["containers"]]
                                                       if is_init else states_now)})
        executable = self.commands.get(words[0]) if words else None
        logfile = pod_dir / f"{name}.log"
        if executable is None or not executable.exists():
            logfile.write_text(f"{words[0] if words else '(no command)'}: command not found in the devstack runtime\n")
            return self._terminated(container, 127, "Error", logfile.read_text()[-LOG_TAIL_BYTES:], started)
        # The termination message file, as a kubelet mounts it: an empty file of the container's own at its
        # terminationMessagePath, read back when the container ends.
        message_file = pod_dir / f"{name}.termination-log"
        message_file.write_bytes(b"")
        mounts = [(str(container.get("terminationMessagePath") or TERMINATION_MESSAGE_PATH), message_file), *mounts]
        argv = [str(executable), *(host_path(w, mounts) for w in words[1:])]
        scratch = pod_dir / "home"
        scratch.mkdir(parents=True, exist_ok=True)
        process_env = {"PATH": f"{executable.parent}:/usr/bin:/bin", "HOME": str(scratch),
                       "HF_HOME": str(scratch / "hf"), "PYTHONPATH": str(SHIM_DIR),
                       "SERVINGOPS_BENCH_GATEWAY": self._gateway(),
                       "SERVINGOPS_BENCH_ALLOWED": ",".join(self.allowed), "PYTHONUNBUFFERED": "1",
                       **{k: host_path(v, mounts) for k, v in env.items()}}
        cwd = host_path(container.get("workingDir") or "", mounts) or str(scratch)
        log.info("%s: running %s", key, argv)
        with logfile.open("ab") as out:
            process = subprocess.Popen(argv, env=process_env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        run.process = process
        deadline = time.monotonic() + RUN_LIMIT_SECONDS
        reason = ""
        while process.poll() is None:
            if run.deleted.wait(0.5):
                reason = self._kill(process, run.grace)
                break
            if time.monotonic() > deadline:
                reason = self._kill(process, 0)
                break
        code = process.wait()
        exit_code = code if code >= 0 else 128 - code  # killed by signal n: 128 + n, as a runtime reports
        return self._terminated(container, exit_code, reason or ("Completed" if exit_code == 0 else "Error"),
                                termination_message(container, exit_code, message_file, logfile), started)

    @staticmethod
    def _kill(process: subprocess.Popen[bytes], grace: float) -> str:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(max(grace, 1.0))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        return "Error"

    # -- what a kubelet prepares --------------------------------------------------------------

    def _volumes(self, pod: dict[str, Any], pod_dir: Path) -> dict[str, Path]:
        namespace = pod["metadata"]["namespace"]
        volumes: dict[str, Path] = {}
        for volume in pod["spec"].get("volumes") or []:
            name = volume["name"]
            if "emptyDir" in volume:
                path = pod_dir / "volumes" / name
                path.mkdir(parents=True, exist_ok=True)
            elif "secret" in volume:
                path = pod_dir / "volumes" / name
                path.mkdir(parents=True, exist_ok=True)
                data = self._secret_data(namespace, volume["secret"]["secretName"])
                items = volume["secret"].get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    if item["key"] not in data:
                        raise PodSetupError("FailedMount", f"Secret {volume['secret']['secretName']} has no key "
                                                           f"{item['key']}")
                    (path / item["path"]).write_bytes(data[item["key"]])
            elif "configMap" in volume:
                path = pod_dir / "volumes" / name
                path.mkdir(parents=True, exist_ok=True)
                values = self._configmap_data(namespace, volume["configMap"]["name"])
                for item in volume["configMap"].get("items") or [{"key": k, "path": k} for k in values]:
                    (path / item["path"]).write_text(values.get(item["key"], ""))
            elif "projected" in volume or "downwardAPI" in volume:
                # The ServiceAccount token volume every pod gets: the benchmark never calls the apiserver, so
                # an empty directory stands for it (no token is handed to a host process).
                path = pod_dir / "volumes" / name
                path.mkdir(parents=True, exist_ok=True)
            elif "persistentVolumeClaim" in volume:
                path = self._claim_dir(namespace, volume["persistentVolumeClaim"]["claimName"])
            else:
                raise PodSetupError("FailedMount", f"volume {name}: this kind has no devstack mount")
            volumes[name] = path
        return volumes

    def _claim_dir(self, namespace: str, claim: str) -> Path:
        """The directory of the PersistentVolume the claim is bound to: its hostPath or local path."""
        try:
            pvc = self.core.read_namespaced_persistent_volume_claim(claim, namespace, _request_timeout=10)
        except ApiException as exc:
            if exc.status == 404:
                raise PodSetupError("FailedMount", f"PersistentVolumeClaim {claim} not found") from None
            raise
        volume_name = pvc.spec.volume_name if pvc.spec else None
        if not volume_name or (pvc.status and pvc.status.phase != "Bound"):
            raise PodSetupError("FailedMount", f"PersistentVolumeClaim {claim} is not bound")
        pv = self.core.read_persistent_volume(volume_name, _request_timeout=10)
        source = pv.spec.host_path.path if pv.spec and pv.spec.host_path else (
            pv.spec.local.path if pv.spec and pv.spec.local else None)
        if not source:
            raise PodSetupError("FailedMount", f"PersistentVolume {volume_name}: only hostPath and local volumes "
                                               "have a directory in the devstack")
        return Path(source)

    @staticmethod
    def _mounts(container: dict[str, Any], volumes: dict[str, Path]) -> list[tuple[str, Path]]:
        mounts = []
        for mount in container.get("volumeMounts") or []:
            if mount["name"] not in volumes:
                raise PodSetupError("CreateContainerConfigError", f"volumeMount {mount['name']}: no such volume")
            directory = volumes[mount["name"]]
            if mount.get("subPath"):
                directory = directory / mount["subPath"]
                directory.mkdir(parents=True, exist_ok=True)  # a kubelet makes a missing subPath
            mounts.append((str(mount["mountPath"]), directory))
        return sorted(mounts, key=lambda m: len(m[0]), reverse=True)  # the deepest mountPath wins

    def _secret_data(self, namespace: str, name: str) -> dict[str, bytes]:
        try:
            secret = self.core.read_namespaced_secret(name, namespace, _request_timeout=10)
        except ApiException as exc:
            if exc.status == 404:
                raise PodSetupError("CreateContainerConfigError", f"secret \"{name}\" not found") from None
            raise
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    def _configmap_data(self, namespace: str, name: str) -> dict[str, str]:
        try:
            configmap = self.core.read_namespaced_config_map(name, namespace, _request_timeout=10)
        except ApiException as exc:
            if exc.status == 404:
                raise PodSetupError("CreateContainerConfigError", f"configmap \"{name}\" not found") from None
            raise
        return dict(configmap.data or {})

    def _env(self, namespace: str, container: dict[str, Any]) -> dict[str, str]:
        env: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            if "secretRef" in source:
                data = self._secret_data(namespace, source["secretRef"]["name"])
                env.update({prefix + k: v.decode() for k, v in data.items()})
            elif "configMapRef" in source:
                env.update({prefix + k: v for k, v in
                            self._configmap_data(namespace, source["configMapRef"]["name"]).items()})
        for entry in container.get("env") or []:
            name, ref = entry["name"], entry.get("valueFrom")
            if ref is None:
                env[name] = str(entry.get("value", ""))
            elif "secretKeyRef" in ref:
                key = ref["secretKeyRef"]
                data = self._secret_data(namespace, key["name"])
                if key["key"] not in data:
                    raise PodSetupError("CreateContainerConfigError",
                                        f"couldn't find key {key['key']} in Secret {namespace}/{key['name']}")
                env[name] = data[key["key"]].decode()
            elif "configMapKeyRef" in ref:
                key = ref["configMapKeyRef"]
                values = self._configmap_data(namespace, key["name"])
                if key["key"] not in values:
                    raise PodSetupError("CreateContainerConfigError",
                                        f"couldn't find key {key['key']} in ConfigMap {namespace}/{key['name']}")
                env[name] = values[key["key"]]
            else:
                raise PodSetupError("CreateContainerConfigError", f"env {name}: this valueFrom has no devstack "
                                                                  "source")
        return env

    def _gateway(self) -> str:
        """`ip:port` of the cluster's first Programmed Gateway with an HTTP listener on loopback ("" if none):
        where the pod's host names resolve (devstack/bench_shim)."""
        try:
            listed = self.custom.list_cluster_custom_object("gateway.networking.k8s.io", "v1", "gateways",
                                                            _request_timeout=10)
        except ApiException:
            return ""
        for gateway in listed.get("items") or []:
            status = gateway.get("status") or {}
            addresses = [a.get("value") for a in status.get("addresses") or [] if a.get("value")]
            listeners = [listener for listener in (gateway.get("spec") or {}).get("listeners") or []
                         if listener.get("protocol") == "HTTP"]
            if addresses and listeners and str(addresses[0]).startswith("127."):
                return f"{addresses[0]}:{listeners[0]['port']}"
        return ""

    # -- status -------------------------------------------------------------------------------

    @staticmethod
    def _terminated(container: dict[str, Any], code: int, reason: str, message: str = "",
                    started: str | None = None) -> dict[str, Any]:
        terminated: dict[str, Any] = {"exitCode": code, "reason": reason, "startedAt": started or _now(),
                                      "finishedAt": _now()}
        if message:
            terminated["message"] = message
        return {"name": container["name"], "image": container.get("image", ""), "ready": False, "restartCount": 0,
                "started": False, "state": {"terminated": terminated}}

    @staticmethod
    def _waiting(container: dict[str, Any]) -> dict[str, Any]:
        return {"name": container["name"], "image": container.get("image", ""), "ready": False, "restartCount": 0,
                "started": False, "state": {"waiting": {"reason": "PodInitializing"}}}

    @staticmethod
    def _conditions(ready: bool, reason: str) -> list[dict[str, Any]]:
        now = _now()
        return [{"type": kind, "status": str(ready), "reason": reason, "lastTransitionTime": now}
                for kind in ("Ready", "ContainersReady")]

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        for attempt in range(10):
            try:
                self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": status},
                                                      _request_timeout=10)
                return
            except ApiException as exc:
                if exc.status == 404:
                    return  # the pod is gone: nothing to report to
                log.info("status of %s/%s: %s (try %d)", meta["namespace"], meta["name"], exc.reason, attempt + 1)
            except Exception as exc:  # the apiserver away for a moment
                log.info("status of %s/%s: %s (try %d)", meta["namespace"], meta["name"], exc, attempt + 1)
            time.sleep(1.0)


__all__ = ["BENCH_POD_LABEL", "BenchRunner", "PodSetupError", "default_commands", "host_path", "termination_message"]
