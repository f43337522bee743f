"""Canary rollouts end to end: worker and bridge as processes (the `rollout_stack` of
test_rollout_e2e), the local cluster with kwok pods, and a real Prometheus scraping an exporter
whose values the test sets.

- a manual gate waits for the ome.io/rollout-promote annotation, then an analysis step passes
  once the exporter reports a good value, and the canary completes;
- a bad value rolls the canary back on its own;
- the manual gate is promoted through the CLI / SDK (`servingops rollout promote`) instead.

Deadlines are generous upper bounds (the suite may run on a loaded machine); nothing is timed.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from typing import Any

import pytest
from kubernetes import client

from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.services import Prometheus, TemporalDevServer
from servingops.api_models.contract.rollout import RolloutState
from servingops.api_models.ome import InferenceService
from servingops.runtime.temporal import TemporalSettings, connect
from servingops.sdk import RolloutClient
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest
from tests.metrics_exporter import Exporter
from tests.support.rollout_stack import rollout_stack, route_weights

pytestmark = pytest.mark.e2e

__all__ = ["rollout_stack"]  # the fixture, reused

DEADLINE = 240.0
METRIC = "servingops_canary_error_ratio"
GOOD, BAD = 0.01, 0.5


def _analysis_step(traffic: int, label: str) -> dict[str, Any]:
    return {"capacity": "50%", "traffic": traffic, "analysis": {
        "interval": "2s", "failureLimit": 2,
        "metrics": [{"name": "error-ratio", "query": METRIC + '{isvc="{{.ISVCName}}",test="' + label + '"}',
                     "operator": "LT", "threshold": "0.05"}]}}


def _spec(image: str, steps: list[dict[str, Any]], prometheus: Prometheus) -> dict[str, Any]:
    return {
        "engine": {"minReplicas": 2, "runner": {"name": "engine", "image": image, "ports": [{"containerPort": 8000}]}},
        "rollout": {"groups": [{"components": ["engine"], "canary": {
            "steps": steps, "prometheus": {"serverAddress": prometheus.url}, "scaleDownDelaySeconds": 1}}]},
    }


def _isvc(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "ome.io", "v1beta1", ns, "inferenceservices", name)
    return obj


def _engine(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    engine: dict[str, Any] = ((_isvc(api, ns, name).get("status") or {}).get("components") or {}).get("engine") or {}
    return engine


def _set_image(api: client.ApiClient, ns: str, name: str, image: str) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object("ome.io", "v1beta1", ns, "inferenceservices", name, {
        "spec": {"engine": {"runner": {"name": "engine", "image": image, "ports": [{"containerPort": 8000}]}}}})


def _annotate(api: client.ApiClient, ns: str, name: str, key: str, value: str | None) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object("ome.io", "v1beta1", ns, "inferenceservices", name, {
        "metadata": {"annotations": {key: value}}})


def _serving(name: str, revision: str) -> str:
    return f"{name}-engine-rev-{revision}"


def _start_canary(api: client.ApiClient, ns: str, name: str, steps: list[dict[str, Any]], prometheus: Prometheus,
                  worker: ManagedProcess) -> tuple[str, str]:
    """Create the InferenceService, wait for its first revision at 100%, change the image; answer
    (stable backend, canary backend) once the canary holds its first step's weight."""
    create(api, InferenceService, manifest(InferenceService, _spec("vllm/vllm-openai:v0.9", steps, prometheus),
                                           name=name), ns)
    first = wait_until("the first revision serving 100%", lambda: (
        (w := route_weights(api, ns, f"{name}-engine")) and list(w.values()) == [100] and w), worker, DEADLINE)
    [stable] = first
    wait_until("the first revision rolled out", lambda: _engine(api, ns, name).get("latestRolledoutRevision"),
          worker, DEADLINE)
    _set_image(api, ns, name, "vllm/vllm-openai:v0.10")
    first_weight = steps[0]["traffic"]
    weights = wait_until(f"the canary at {first_weight}%", lambda: (
        (w := route_weights(api, ns, f"{name}-engine")).get(stable) == 100 - first_weight and len(w) == 2 and w),
        worker, DEADLINE)
    [canary] = [backend for backend in weights if backend != stable]
    assert weights[canary] == first_weight
    return stable, canary


def _canary_status(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    canary: dict[str, Any] = _engine(api, ns, name).get("canary") or {}
    return canary


def _wait_completed(api: client.ApiClient, ns: str, name: str, canary: str, steps: int,
                    worker: ManagedProcess) -> None:
    wait_until("the route 100% on the new revision", lambda: route_weights(api, ns, f"{name}-engine") == {canary: 100},
          worker, DEADLINE)
    engine = wait_until("status reports the completed canary", lambda: (
        (e := _engine(api, ns, name)) and (e.get("canary") or {}).get("currentStep") == steps
        and e.get("rolloutPhase") == "Stable" and e), worker, DEADLINE)
    status = engine["canary"]
    assert status.get("stableRevisionHash") is None
    assert status["observedTrafficWeight"] == 100
    assert _serving(name, status["canaryRevisionHash"]) == canary
    # latestRolledoutRevision names the serving backend; it moves when the run closes.
    wait_until("the new revision recorded as rolled out", lambda: _engine(api, ns, name).get("latestRolledoutRevision")
          == canary, worker, DEADLINE)


def test_manual_gate_then_analysis_completes(kube_api: client.ApiClient, rollout_stack: tuple[str, ManagedProcess],
                                             prometheus: Prometheus, exporter: Exporter) -> None:
    ns, worker = rollout_stack
    name, label = "canary-good", uuid.uuid4().hex[:8]
    steps = [{"capacity": "50%", "traffic": 20, "pause": {}}, _analysis_step(50, label),
             {"capacity": "100%", "traffic": 100}]
    stable, canary = _start_canary(kube_api, ns, name, steps, prometheus, worker)

    paused = wait_until("the canary paused at the manual gate of step 0", lambda: (
        (e := _engine(kube_api, ns, name)) and (e.get("canary") or {}).get("currentStep") == 0
        and e.get("rolloutPhase") == "Paused" and e), worker, DEADLINE)
    revision = paused["canary"]["canaryRevisionHash"]
    assert _serving(name, revision) == canary
    assert _serving(name, paused["canary"]["stableRevisionHash"]) == stable
    assert route_weights(kube_api, ns, f"{name}-engine") == {stable: 80, canary: 20}

    # No series for this test's label yet: the analysis at step 1 is inconclusive and holds (Hold).
    _annotate(kube_api, ns, name, "ome.io/rollout-promote", revision)
    wait_until("the route at 50/50", lambda: route_weights(kube_api, ns, f"{name}-engine") == {stable: 50, canary: 50},
          worker, DEADLINE)
    step1 = wait_until("status at step 1", lambda: (
        (c := _canary_status(kube_api, ns, name)).get("currentStep") == 1 and c), worker, DEADLINE)
    assert step1.get("promotedThrough", revision) == revision  # cleared once the consumed promote is removed

    exporter.set({METRIC + '{isvc="' + name + '",test="' + label + '"}': GOOD})
    _wait_completed(kube_api, ns, name, canary, len(steps), worker)
    results = _canary_status(kube_api, ns, name).get("metricResults") or []
    assert [r["name"] for r in results] == ["error-ratio"] and results[0]["passed"] is True


def test_bad_metric_rolls_back_on_its_own(kube_api: client.ApiClient, rollout_stack: tuple[str, ManagedProcess],
                                          prometheus: Prometheus, exporter: Exporter) -> None:
    ns, worker = rollout_stack
    name, label = "canary-bad", uuid.uuid4().hex[:8]
    exporter.set({METRIC + '{isvc="' + name + '",test="' + label + '"}': BAD})
    steps = [_analysis_step(20, label), {"capacity": "100%", "traffic": 100}]
    stable, canary = _start_canary(kube_api, ns, name, steps, prometheus, worker)

    wait_until("traffic back on stable", lambda: (
        (w := route_weights(kube_api, ns, f"{name}-engine")) and w.get(stable) == 100
        and not any(v for k, v in w.items() if k != stable)), worker, DEADLINE)
    engine = wait_until("status reports the rollback", lambda: (
        (e := _engine(kube_api, ns, name)) and e.get("rolloutPhase") == "RolledBack" and e), worker, DEADLINE)
    status = engine["canary"]
    assert _serving(name, status["rolledBackRevisionHash"]) == canary
    assert status["analysisFailedChecks"] >= 2
    assert any(r.get("passed") is False for r in status.get("metricResults") or [])
    assert engine["latestRolledoutRevision"] == stable
    # The rejected revision is drained and never retried.
    wait_until("the canary revision drained", lambda: canary not in {
        d.metadata.name for d in client.AppsV1Api(kube_api).list_namespaced_deployment(ns).items}, worker, DEADLINE)


def _cli(temporal: TemporalDevServer, cluster: LocalKubeCluster, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal.address, "KUBECONFIG": str(cluster.kubeconfig_path)}
    return subprocess.run([sys.executable, "-m", "servingops.cli.main", "rollout", *argv], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_promote_through_the_cli_and_the_sdk(kube_api: client.ApiClient, kube_cluster: LocalKubeCluster,
                                             temporal_server: TemporalDevServer, prometheus: Prometheus,
                                             rollout_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = rollout_stack
    name = "canary-cli"
    steps = [{"capacity": "50%", "traffic": 20, "pause": {}}, {"capacity": "50%", "traffic": 50, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    stable, canary = _start_canary(kube_api, ns, name, steps, prometheus, worker)
    paused = wait_until("the canary paused at step 0", lambda: (
        (e := _engine(kube_api, ns, name)) and (e.get("canary") or {}).get("currentStep") == 0
        and e.get("rolloutPhase") == "Paused" and e), worker, DEADLINE)
    revision = paused["canary"]["canaryRevisionHash"]

    shown = _cli(temporal_server, kube_cluster, "status", name, "-n", ns)
    assert shown.returncode == 0, shown.stderr
    assert "Step:" in shown.stdout and "0/3" in shown.stdout, shown.stdout
    assert revision in shown.stdout and "Paused" in shown.stdout, shown.stdout

    # CLI, the hash omitted: the running canary's revision is named.
    promoted = _cli(temporal_server, kube_cluster, "promote", name, "-n", ns)
    assert promoted.returncode == 0, promoted.stderr
    assert "1/" in promoted.stdout, promoted.stdout
    wait_until("the route at 50/50", lambda: route_weights(kube_api, ns, f"{name}-engine") == {stable: 50, canary: 50},
          worker, DEADLINE)
    wait_until("status at step 1, paused", lambda: (
        (e := _engine(kube_api, ns, name)) and (e.get("canary") or {}).get("currentStep") == 1
        and e.get("rolloutPhase") == "Paused"), worker, DEADLINE)
    shown = _cli(temporal_server, kube_cluster, "status", name, "-n", ns)
    assert shown.returncode == 0 and "1/3" in shown.stdout, shown.stdout + shown.stderr

    # A wrong hash is refused by the update's validator; nothing moves.
    refused = _cli(temporal_server, kube_cluster, "promote", name, "-n", ns, "--revision", "not-the-canary")
    assert refused.returncode != 0 and "not-the-canary" in refused.stderr, refused.stdout + refused.stderr

    # The SDK in process, naming the hash: the update answers once the step advanced.
    async def promote() -> dict[str, Any]:
        temporal = await connect(TemporalSettings(address=temporal_server.address))
        sdk = RolloutClient(temporal, kube_api)
        before = await sdk.status(ns, name)
        run = before.rollouts["0"]
        assert isinstance(run, RolloutState) and run.canary is not None and run.canary.current_step == 1
        return (await sdk.promote(ns, name, revision)).to_api()

    after = asyncio.run(promote())
    assert after["currentStep"] >= 2
    _wait_completed(kube_api, ns, name, canary, len(steps), worker)
