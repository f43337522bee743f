"""Argo Rollouts as the real peer of the promote benchmark, on the same local cluster in the same run.

The controller is built from its upstream Go module by deploy/local/bench/build-argo-rollouts.sh (pinned,
cached, built only when absent) and runs as a process against the local apiserver, like servingops'
worker. Its Rollout mirrors the InferenceService the benchmark promotes: one replica, the canary scaled
to full size before any traffic step (`setCanaryScale`), then for every step `setWeight: w` and a manual
`pause: {}`, traffic routed by its Nginx router, which writes the canary weight into a canary Ingress
(the built-in routing object Argo needs no mesh or plugin for) as servingops writes HTTPRoute weights.
kwok makes the pods Ready; no ingress controller is needed, since only the weight Argo writes is timed.

Promote is what `kubectl argo rollouts promote` does (pkg/kubectl-argo-rollouts/cmd/promote): read the
Rollout, then merge-patch its status subresource to clear `status.pauseConditions` (and unset
`spec.paused` when set), done here with the same requests (`promote`).

bench/traffic.py starts the same controller with its Traefik router instead, whose weights a real data plane
serves (its own Rollouts, TraefikServices and IngressRoutes; `start_controller(extra_args=...)`, `promote`).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from bench.watches import ObjectWatch
from devstack.kube import BIN_DIR_ENV, REPO_ROOT, LocalKubeCluster
from devstack.process import ManagedProcess, cache_dir, find_binary, free_port, http_ok

BUILD_SCRIPT = REPO_ROOT / "deploy" / "local" / "bench" / "build-argo-rollouts.sh"
BINARY = "rollouts-controller"
GROUP, VERSION, PLURAL = "argoproj.io", "v1alpha1", "rollouts"
CANARY_WEIGHT = "nginx.ingress.kubernetes.io/canary-weight"
MERGE_PATCH = "application/merge-patch+json"


def pinned_version() -> str:
    match = re.search(r"^ARGO_ROLLOUTS_VERSION=(\S+)", BUILD_SCRIPT.read_text(), flags=re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no ARGO_ROLLOUTS_VERSION pin in {BUILD_SCRIPT}")
    return match.group(1)


def ensure_built() -> tuple[str, Path]:
    """The controller binary and the folder of its CRDs; the script builds or copies only what is missing."""
    subprocess.run(["bash", str(BUILD_SCRIPT)], check=True)
    binary = find_binary(BINARY, BIN_DIR_ENV)
    crds = cache_dir() / "crds" / "argo-rollouts"
    if binary is None or not (crds / ".version").is_file():
        raise RuntimeError(f"{BUILD_SCRIPT} left no {BINARY} or no CRDs in {crds}")
    return binary, crds


def start_controller(cluster: LocalKubeCluster, binary: str, logs: Path,
                     extra_args: Sequence[str] = ()) -> ManagedProcess:  # fmt: skip
    healthz = free_port()
    argv = [binary, f"--kubeconfig={cluster.kubeconfig_path}", "--leader-elect=false",
            f"--metricsPort={free_port()}", f"--healthzPort={healthz}", "--loglevel=info", *extra_args]  # fmt: skip
    process = ManagedProcess("argo-rollouts", argv, logs).start()
    process.wait_ready(lambda: http_ok(f"http://127.0.0.1:{healthz}/healthz"), timeout=60)
    return process


def promote_patches(rollout: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(spec patch, status patch) of `kubectl argo rollouts promote` without flags (getPatches, default case;
    its extra case for an inconclusive analysis step does not arise here, there is no analysis)."""
    spec, status = rollout.get("spec") or {}, rollout.get("status") or {}
    spec_patch = {"spec": {"paused": False}} if spec.get("paused") else None
    status_patch: dict[str, Any] | None = None
    if status.get("pauseConditions"):
        status_patch = {"status": {"pauseConditions": None}}
    elif (spec.get("strategy") or {}).get("canary") is not None:
        steps = spec["strategy"]["canary"].get("steps") or []
        index = int(status.get("currentStepIndex") or 0)
        index = min(index + 1, len(steps))
        status_patch = {"status": {"pauseConditions": None, "currentStepIndex": index}}
    return spec_patch, status_patch


def promote(custom: client.CustomObjectsApi, namespace: str, name: str) -> None:
    """`kubectl argo rollouts promote NAME`: read the Rollout, then send promote_patches' patches."""
    rollout = cast(dict[str, Any], custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))
    spec_patch, status_patch = promote_patches(rollout)
    if status_patch is not None:
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, status_patch,
                                                     _content_type=MERGE_PATCH)  # fmt: skip
    if spec_patch is not None:
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, spec_patch,
                                              _content_type=MERGE_PATCH)  # fmt: skip


def rollout_state(obj: dict[str, Any]) -> tuple[int | None, bool, bool]:
    """(currentStepIndex, waiting at a manual pause, the new ReplicaSet is the stable one)."""
    status = obj.get("status") or {}
    reasons = {c.get("reason") for c in status.get("pauseConditions") or []}
    index = status.get("currentStepIndex")
    stable = bool(status.get("stableRS")) and status.get("stableRS") == status.get("currentPodHash")
    return index, "CanaryPauseStep" in reasons, stable


def canary_weight(obj: dict[str, Any]) -> int | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(CANARY_WEIGHT)
    return int(value) if value is not None else None


class ArgoCanary:
    """One Argo Rollout canarying through `weights`, each step waiting at a manual pause."""

    label = "Argo Rollouts"

    def __init__(self, api: client.ApiClient, namespace: str, name: str, weights: list[int]) -> None:
        self.api, self.namespace, self.name, self.weights = api, namespace, name, weights
        self.custom = client.CustomObjectsApi(api)
        self.canary_ingress = f"{name}-{name}-canary"  # ingressutil.GetCanaryIngressName(rollout, stable ingress)
        self.rollouts = ObjectWatch(api, GROUP, VERSION, namespace, PLURAL, rollout_state)
        self.ingresses = ObjectWatch(api, "networking.k8s.io", "v1", namespace, "ingresses", canary_weight)

    # -- setup ----------------------------------------------------------------------------------------

    @property
    def steps(self) -> list[dict[str, Any]]:
        steps: list[dict[str, Any]] = [{"setCanaryScale": {"replicas": 1}}]
        for weight in self.weights:
            steps += [{"setWeight": weight}, {"pause": {}}]
        return steps

    def pause_index(self, step: int) -> int:
        return 2 + 2 * step

    def _container(self, image: str) -> dict[str, Any]:
        return {"name": "engine", "image": image, "ports": [{"containerPort": 8000}]}

    def create(self, image: str) -> None:
        core, net = client.CoreV1Api(self.api), client.NetworkingV1Api(self.api)
        for role in ("stable", "canary"):
            core.create_namespaced_service(self.namespace, {  # type: ignore[arg-type]
                "metadata": {"name": f"{self.name}-{role}"},
                "spec": {"selector": {"app": self.name}, "ports": [{"port": 80, "targetPort": 8000}]},
            })  # fmt: skip
        backend = {"service": {"name": f"{self.name}-stable", "port": {"number": 80}}}
        net.create_namespaced_ingress(self.namespace, {  # type: ignore[arg-type]
            "metadata": {"name": self.name},
            "spec": {"ingressClassName": "nginx", "rules": [{"host": f"{self.name}.local", "http": {
                "paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}]},
        })  # fmt: skip
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Rollout", "metadata": {"name": self.name},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": self.name}},
                "template": {"metadata": {"labels": {"app": self.name}},
                             "spec": {"containers": [self._container(image)]}},
                "strategy": {"canary": {
                    "stableService": f"{self.name}-stable", "canaryService": f"{self.name}-canary",
                    "trafficRouting": {"nginx": {"stableIngress": self.name}},
                    "steps": self.steps,
                }},
            },
        })  # fmt: skip

    def wait_stable(self, timeout: float = 180) -> None:
        self.rollouts.wait(self.name, lambda s: s is not None and s[2], timeout)

    def roll(self, image: str) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.name,
            {"spec": {"template": {"spec": {"containers": [self._container(image)]}}}}, _content_type=MERGE_PATCH,
        )  # fmt: skip

    # -- one promote ----------------------------------------------------------------------------------

    def wait_paused(self, step: int, timeout: float = 180) -> None:
        """Paused at `step`'s manual gate with its weight written: all that is left is the promote."""
        index = self.pause_index(step)
        self.rollouts.wait(self.name, lambda s: s is not None and s[0] == index and s[1], timeout)
        self.ingresses.wait(self.canary_ingress, lambda w: w == self.weights[step], timeout)

    def routing(self) -> Any:
        return self.ingresses.latest(self.canary_ingress)

    def promote(self, step: int) -> float:
        """`kubectl argo rollouts promote`: returns when it started (monotonic)."""
        started = time.monotonic()
        promote(self.custom, self.namespace, self.name)
        return started

    def routing_changed(self, since: float, before: Any, timeout: float = 120) -> float:
        return self.ingresses.first(self.canary_ingress, lambda w: w != before, since, timeout)[0]

    def status_past(self, step: int, since: float, timeout: float = 120) -> float:
        """When status showed the Rollout waiting at the next manual pause, or done after the last."""
        if step + 1 < len(self.weights):
            index = self.pause_index(step + 1)
            return self.rollouts.first(self.name, lambda s: s[0] == index and s[1], since, timeout)[0]
        return self.rollouts.first(self.name, lambda s: s[0] == len(self.steps) and s[2], since, timeout)[0]

    def after(self, step: int) -> None:
        """Nothing to re-arm: the next pause step sets its own pause condition."""

    def stop(self) -> None:
        self.rollouts.stop()
        self.ingresses.stop()
