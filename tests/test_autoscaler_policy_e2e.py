"""AutoscalerPolicy end to end: worker and bridge as processes under the chart's identities, the real
apiserver with KEDA's ScaledObject CRD, kube-controller-manager's HPA controller.

A RawDeployment InferenceService whose engine references a KEDA policy and whose router references an
HPA policy gets both scalers rendered from them (template variables, the operator's provider binding,
fallback from the component's bounds), each targeting the Deployment of the revision carrying the
component's traffic; the policies' status fills in (portableDigest, attachedComponents). A policy edit
the apiserver admits but that cannot render (an unbound provider) leaves the last good ScaledObject and
sets AutoscalerResolved False with the reason and a Warning Event; fixing it renders the new spec.
Removing the router deletes its HPA and its policy counts it no more. (The KEDA operator is not run
here: the ScaledObject is asserted as rendered, not as acting; the HPA controller does act on the HPA.)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devstack import identities
from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.services import OciRegistry, TemporalDevServer
from servingops.api_models.ome import AutoscalerPolicy, InferenceService
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest
from tests.support.rollout_stack import worker_and_bridge

pytestmark = pytest.mark.e2e

GROUP, VERSION = "ome.io", "v1beta1"
PROMETHEUS = "http://prometheus.monitoring.svc:9090"
TIMEOUT = 180.0
"""Upper bound only (never asserted as a timing)."""


@pytest.fixture(scope="module")
def policy_stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
                 oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    # This module's worker binds the provider name `prom` (the operator ConfigMap's metricProviders).
    config = f"autoscaler-policy-e2e-{uuid.uuid4().hex[:5]}"
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_config_map(identities.NAMESPACE, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=config),
        data={"metricProviders": f"prom:\n  serverAddress: {PROMETHEUS}\n  headers: {{X-Scope-OrgID: team-a}}\n"}))
    try:
        with worker_and_bridge(kube_cluster, kube_api, temporal_server, oci_registry, hub_server, stack_logs,
                               tmp_path_factory.mktemp("spool"), "asp", "InferenceService,AutoscalerPolicy",
                               identities=chart_identities,
                               extra_env={"SERVINGOPS_OPERATOR_CONFIG": config}) as stack:
            yield stack
            core.delete_namespace(stack[0])
    finally:
        core.delete_namespaced_config_map(config, identities.NAMESPACE)


def _get(api: client.ApiClient, ns: str, plural: str, name: str, group: str = GROUP,
         version: str = VERSION) -> dict[str, Any]:
    try:
        found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            group, version, ns, plural, name)
        return found
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return {}
        raise


def _keda_policy(provider: str, threshold: str) -> dict[str, Any]:
    return {"class": "KEDA", "keda": {
        "triggers": [{"type": "prometheus", "providerRef": {"name": provider}, "metricType": "AverageValue",
                      "metadata": {"query": 'sum(vllm:num_requests_waiting{namespace="{{ .Namespace }}",'
                                            'service="{{ .ISVCName }}-{{ .Component }}"})',
                                   "threshold": threshold, "ignoreNullValues": "false"}}],
        "pollingInterval": 10,
        "fallback": {"failureThreshold": 3, "replicas": {"fromComponent": "MaxReplicas"}}}}


HPA_POLICY = {"class": "HPA", "hpa": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}}


def _runner(name: str) -> dict[str, Any]:
    return {"name": name, "image": "vllm/vllm-openai:v0.9", "ports": [{"containerPort": 8000}]}


def _status(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return _get(api, ns, "inferenceservices", name).get("status") or {}


def _condition(api: client.ApiClient, ns: str, name: str, kind: str) -> dict[str, Any]:
    return next((c for c in _status(api, ns, name).get("conditions") or [] if c["type"] == kind), {})


def _events(api: client.ApiClient, ns: str, name: str) -> list[Any]:
    return list(client.CoreV1Api(api).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={name},involvedObject.kind=InferenceService").items)


def test_policies_render_scalers_fail_closed_and_follow_removal(
        kube_api: client.ApiClient, policy_stack: tuple[str, ManagedProcess]) -> None:
    ns, worker = policy_stack
    custom = client.CustomObjectsApi(kube_api)
    name = f"pol-{uuid.uuid4().hex[:5]}"
    create(kube_api, AutoscalerPolicy, manifest(AutoscalerPolicy, _keda_policy("prom", "5"), name="queue-keda"), ns)
    create(kube_api, AutoscalerPolicy, manifest(AutoscalerPolicy, HPA_POLICY, name="cpu-hpa"), ns)
    spec = {"deploymentMode": "RawDeployment",
            "engine": {"minReplicas": 1, "maxReplicas": 4, "runner": _runner("engine"),
                       "autoscalerPolicyRef": {"name": "queue-keda"}},
            "router": {"minReplicas": 1, "maxReplicas": 3, "runner": _runner("router"),
                       "autoscalerPolicyRef": {"name": "cpu-hpa"}}}
    create(kube_api, InferenceService, manifest(InferenceService, spec, name=name), ns)

    # The engine's ScaledObject, rendered from the KEDA policy for this component.
    scaled = wait_until("the engine's ScaledObject", lambda: _get(
        kube_api, ns, "scaledobjects", f"scaledobject-{name}-engine", "keda.sh", "v1alpha1"), worker, TIMEOUT)
    engine_deployment = wait_until("the engine's rolled-out revision", lambda: (
        (_status(kube_api, ns, name).get("components") or {}).get("engine") or {}).get("latestRolledoutRevision"),
        worker, TIMEOUT)
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                "name": engine_deployment}
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (1, 4)
    fallback = scaled["spec"]["fallback"]  # KEDA's CRD defaults behavior: static
    assert (fallback["failureThreshold"], fallback["replicas"]) == (3, 4)
    assert scaled["spec"]["pollingInterval"] == 10
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["metadata"] == {
        "query": f'sum(vllm:num_requests_waiting{{namespace="{ns}",service="{name}-engine"}})', "threshold": "5",
        "ignoreNullValues": "false", "serverAddress": PROMETHEUS, "customHeaders": "X-Scope-OrgID=team-a"}
    assert trigger["metricType"] == "AverageValue"

    # The router's HPA, verbatim from the HPA policy (default CPU metric), acted on by the HPA controller.
    hpa = wait_until("the router's HPA", lambda: _get(
        kube_api, ns, "horizontalpodautoscalers", f"{name}-router", "autoscaling", "v2"), worker, TIMEOUT)
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment"
    assert hpa["spec"]["scaleTargetRef"]["name"].startswith(f"{name}-router-rev-")
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 0
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 3)
    wait_until("the HPA controller reached the router's Deployment", lambda: any(
        c.get("type") == "AbleToScale" and c.get("status") == "True" for c in (_get(
            kube_api, ns, "horizontalpodautoscalers", f"{name}-router", "autoscaling", "v2").get("status") or {})
        .get("conditions") or []), worker, TIMEOUT)

    # The service reports where each block came from; the policies count their consumers.
    resolved = wait_until("AutoscalerResolved True", lambda: (
        c := _condition(kube_api, ns, name, "AutoscalerResolved")).get("status") == "True" and c, worker, TIMEOUT)
    assert resolved["reason"] == "PolicyRendered"
    engine = wait_until("the engine's autoscaler status", lambda: (
        (_status(kube_api, ns, name).get("components") or {}).get("engine") or {}).get("autoscaler"), worker, TIMEOUT)
    assert (engine["class"], engine["managedBy"], engine["specSource"]) == ("KEDA", "ome", "policy")
    assert engine["policy"]["name"] == "queue-keda" and engine["policy"]["portableDigest"].startswith("ap1:")
    for policy in ("queue-keda", "cpu-hpa"):
        status = wait_until(f"{policy}'s status", lambda p=policy: (
            s := _get(kube_api, ns, "autoscalerpolicies", p).get("status") or {}).get("attachedComponents") == 1
            and s, worker, TIMEOUT)
        assert status["portableDigest"].startswith("ap1:") and status["observedGeneration"] == 1
    assert engine["policy"]["portableDigest"] == _get(kube_api, ns, "autoscalerpolicies", "queue-keda")["status"][
        "portableDigest"]

    # An admitted edit that cannot render here (the provider name is bound to nothing): fail closed.
    before = _get(kube_api, ns, "scaledobjects", f"scaledobject-{name}-engine", "keda.sh", "v1alpha1")
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "autoscalerpolicies", "queue-keda",
                                          {"spec": _keda_policy("nowhere", "7")})
    failed = wait_until("AutoscalerResolved False", lambda: (
        c := _condition(kube_api, ns, name, "AutoscalerResolved")).get("status") == "False" and c, worker, TIMEOUT)
    assert failed["reason"] == "ProviderUnbound"
    assert "'nowhere'" in failed["message"] and "last good scaler stays" in failed["message"]
    wait_until("a Warning Event ProviderUnbound", lambda: any(
        e.type == "Warning" and e.reason == "ProviderUnbound" for e in _events(kube_api, ns, name)), worker, TIMEOUT)
    kept = _get(kube_api, ns, "scaledobjects", f"scaledobject-{name}-engine", "keda.sh", "v1alpha1")
    assert kept["spec"] == before["spec"], "the last good ScaledObject stays"
    assert _get(kube_api, ns, "autoscalerpolicies", "queue-keda")["status"]["observedGeneration"] == 2

    # Fixed: the new spec renders (threshold 7), and AutoscalerResolved is True again.
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "autoscalerpolicies", "queue-keda",
                                          {"spec": _keda_policy("prom", "7")})
    wait_until("the ScaledObject follows the fixed policy", lambda: (_get(
        kube_api, ns, "scaledobjects", f"scaledobject-{name}-engine", "keda.sh", "v1alpha1")["spec"]["triggers"][0]
        ["metadata"]["threshold"] == "7"), worker, TIMEOUT)
    wait_until("AutoscalerResolved True again", lambda: _condition(
        kube_api, ns, name, "AutoscalerResolved").get("status") == "True", worker, TIMEOUT)

    # The router leaves the spec: its HPA goes, its policy counts it no more.
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name, {"spec": {"router": None}})
    wait_until("the router's HPA deleted", lambda: not _get(
        kube_api, ns, "horizontalpodautoscalers", f"{name}-router", "autoscaling", "v2"), worker, TIMEOUT)
    wait_until("cpu-hpa counts no component", lambda: (
        _get(kube_api, ns, "autoscalerpolicies", "cpu-hpa").get("status") or {}).get("attachedComponents") == 0,
        worker, TIMEOUT)
    assert _get(kube_api, ns, "scaledobjects", f"scaledobject-{name}-engine", "keda.sh", "v1alpha1"), \
        "the engine keeps its scaler"
