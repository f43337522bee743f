"""The real activities of AutoscalerPolicy against the apiserver (as the test's admin client; the chart's
identity is exercised end to end): serving.ensure_autoscaler renders a RawDeployment component's scaler
from its policy, answers a policy that does not render with the problem and touches nothing, and deletes
the scaler of a component that left the spec; autoscaler_policy.observe digests the policy and counts
its consumers. What testkit/autoscaler_fakes.py answers is held to these."""

from __future__ import annotations

import json
import uuid
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devstack import keda
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from servingops.activities.autoscaler_policy import AutoscalerPolicyActivities, PolicyObservation
from servingops.activities.serving.activities import ServingActivities
from servingops.activities.serving.autoscaler import (
    AutoscalerActivities,
    AutoscalerObservation,
    EnsureAutoscalerInput,
    scaled_object_name,
)
from servingops.activities.serving.types import EnsureRevisionInput, ObserveInput, RevisionKey, ServiceObservation
from servingops.api_models.ome import AutoscalerPolicy, InferenceService
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.refs import ObjectRef
from servingops.rendering.autoscaler_policy import ProviderBinding, trigger_authentication_name
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as
from tests.support.autoscaler_policies import keda_policy
from tests.support.cleanup import ignore_404

pytestmark = pytest.mark.integration

ENGINE, ROUTER = ComponentType.ENGINE, ComponentType.ROUTER
PROM = "http://prometheus.monitoring:9090"


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "asp-acts")


@pytest.fixture(scope="module")
def trigger_auth_crd(kube_cluster: LocalKubeCluster) -> None:
    """KEDA's ClusterTriggerAuthentication CRD from its pinned module (the session's cluster carries only the
    ScaledObject's; devstack/keda.py applies all of them where KEDA runs): rendered objects meet KEDA's schema."""
    kube_cluster.apply_crds([keda.crd_dir() / "keda.sh_clustertriggerauthentications.yaml"])


def _run(fn: Any, *args: Any) -> Any:
    return ActivityEnvironment().run(fn, *args)


def _get(api: client.ApiClient, ns: str, group: str, version: str, plural: str, name: str) -> dict[str, Any] | None:
    try:
        return cast(dict[str, Any], client.CustomObjectsApi(api).get_namespaced_custom_object(
            group, version, ns, plural, name))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _component(policy: str) -> dict[str, Any]:
    return {"runner": {"name": "c", "image": "registry.invalid/c:v1"}, "minReplicas": 2, "maxReplicas": 5,
            "autoscalerPolicyRef": {"name": policy}}


def test_a_raw_component_renders_fails_closed_and_loses_its_scaler(kube_api: client.ApiClient, ns: str) -> None:
    policy = f"p-{uuid.uuid4().hex[:5]}"
    created = create(kube_api, AutoscalerPolicy, manifest(AutoscalerPolicy, keda_policy(), name=policy), ns)
    body = manifest(InferenceService, {"deploymentMode": "RawDeployment", "engine": _component(policy),
                                       "router": _component(policy)}, name=f"as-{uuid.uuid4().hex[:5]}")
    isvc = create(kube_api, InferenceService, body, ns)
    ref = ObjectRef.of(InferenceService, isvc["metadata"]["name"], ns, isvc["metadata"]["uid"])
    acts = AutoscalerActivities(kube_api, lambda: {"prom": ProviderBinding(server_address=PROM)})

    seen: AutoscalerObservation = _run(acts.ensure, EnsureAutoscalerInput(isvc=ref, component=ENGINE, revision="abc"))
    assert seen.problem is None and seen.policy_uid == created["metadata"]["uid"] and seen.policy_name == policy
    assert seen.status is not None and seen.status["specSource"] == "policy"
    name = scaled_object_name(f"{ref.name}-engine")
    scaled = _get(kube_api, ns, "keda.sh", "v1alpha1", "scaledobjects", name)
    assert scaled is not None
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                "name": f"{ref.name}-engine-rev-abc"}
    assert scaled["spec"]["triggers"][0]["metadata"]["serverAddress"] == PROM
    assert 'pod=~"' + f'{ref.name}-engine-rev-abc-.*"' in scaled["spec"]["triggers"][0]["metadata"]["query"]
    assert scaled["spec"]["fallback"]["replicas"] == 5

    # Without a revision (a history from before RawDeployment scalers) nothing is done.
    assert _run(acts.ensure, EnsureAutoscalerInput(isvc=ref, component=ENGINE)).status is None

    # The same policy with no provider bound: the problem, and the ScaledObject as it was.
    unbound = AutoscalerActivities(kube_api, dict)
    failed: AutoscalerObservation = _run(unbound.ensure, EnsureAutoscalerInput(isvc=ref, component=ENGINE,
                                                                               revision="def"))
    assert failed.problem is not None and failed.problem.reason == "ProviderUnbound" and failed.status is None
    after = _get(kube_api, ns, "keda.sh", "v1alpha1", "scaledobjects", name)
    assert after is not None and after["metadata"]["resourceVersion"] == scaled["metadata"]["resourceVersion"]

    # The policy's workflow counts two components of this service.
    observed: PolicyObservation = _run(AutoscalerPolicyActivities(kube_api).observe,
                                       ObjectRef.of(AutoscalerPolicy, policy, ns, created["metadata"]["uid"]))
    assert observed.attached_components == 2 and [c.name for c in observed.consumers] == [ref.name]
    assert observed.portable_digest is not None and observed.portable_digest.startswith("ap1:")
    assert observed.problem is None

    # The router renders, then leaves the spec: its scaler goes.
    _run(acts.ensure, EnsureAutoscalerInput(isvc=ref, component=ROUTER, revision="r1"))
    router = scaled_object_name(f"{ref.name}-router")
    assert _get(kube_api, ns, "keda.sh", "v1alpha1", "scaledobjects", router) is not None
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        "ome.io", "v1beta1", ns, "inferenceservices", ref.name, {"spec": {"router": None}})
    gone: AutoscalerObservation = _run(acts.ensure, EnsureAutoscalerInput(isvc=ref, component=ROUTER))
    assert gone.status is None
    assert _get(kube_api, ns, "keda.sh", "v1alpha1", "scaledobjects", router) is None
    assert _get(kube_api, ns, "keda.sh", "v1alpha1", "scaledobjects", name) is not None, "the engine's stays"
    recount: PolicyObservation = _run(AutoscalerPolicyActivities(kube_api).observe,
                                      ObjectRef.of(AutoscalerPolicy, policy, ns, created["metadata"]["uid"]))
    assert recount.attached_components == 1


def test_a_missing_policy_is_a_problem_and_an_inline_block_outranks_the_ref(kube_api: client.ApiClient,
                                                                            ns: str) -> None:
    spec = {"deploymentMode": "RawDeployment", "engine": _component("absent")}
    isvc = create(kube_api, InferenceService, manifest(InferenceService, spec, name=f"as-{uuid.uuid4().hex[:5]}"), ns)
    ref = ObjectRef.of(InferenceService, isvc["metadata"]["name"], ns, isvc["metadata"]["uid"])
    acts = AutoscalerActivities(kube_api)
    missing: AutoscalerObservation = _run(acts.ensure, EnsureAutoscalerInput(isvc=ref, component=ENGINE, revision="x"))
    assert missing.problem is not None and missing.problem.reason == "PolicyNotFound"
    assert missing.policy_uid is None

    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        "ome.io", "v1beta1", ns, "inferenceservices", ref.name, {"spec": {"engine": {"autoscaler": {"class": "HPA"}}}})
    inline: AutoscalerObservation = _run(acts.ensure, EnsureAutoscalerInput(isvc=ref, component=ENGINE, revision="x"))
    assert inline.problem is None and inline.status is not None and inline.status["specSource"] == "isvc"
    hpa = _get(kube_api, ns, "autoscaling", "v2", "horizontalpodautoscalers", f"{ref.name}-engine")
    assert hpa is not None and hpa["spec"]["scaleTargetRef"]["name"] == f"{ref.name}-engine-rev-x"


def test_an_inline_block_shadowing_a_ref_previews_what_the_policy_would_render(kube_api: client.ApiClient,
                                                                               ns: str) -> None:
    """shadowedPolicyRef (seed 004): the ref an inline block outranks, with the policy's portableDigest and the
    resolvedDigest it would give this component were the block removed; the scaler stays the inline block's."""
    policy = f"p-{uuid.uuid4().hex[:5]}"
    spec = {"deploymentMode": "RawDeployment", "engine": {**_component(policy), "autoscaler": {"class": "HPA"}}}
    isvc = create(kube_api, InferenceService, manifest(InferenceService, spec, name=f"as-{uuid.uuid4().hex[:5]}"), ns)
    ref = ObjectRef.of(InferenceService, isvc["metadata"]["name"], ns, isvc["metadata"]["uid"])
    acts = AutoscalerActivities(kube_api, lambda: {"prom": ProviderBinding(server_address=PROM)})
    ask = EnsureAutoscalerInput(isvc=ref, component=ENGINE, revision="abc")

    absent: AutoscalerObservation = _run(acts.ensure, ask)
    assert absent.problem is None and absent.status is not None and absent.status["specSource"] == "isvc"
    assert absent.status["shadowedPolicyRef"] == {"name": policy}, absent.status  # no policy: nothing to preview

    create(kube_api, AutoscalerPolicy, manifest(AutoscalerPolicy, keda_policy(), name=policy), ns)
    shadowed: AutoscalerObservation = _run(acts.ensure, ask)
    assert shadowed.status is not None and shadowed.status["specSource"] == "isvc" and shadowed.status["class"] == "HPA"
    preview = shadowed.status["shadowedPolicyRef"]
    assert preview["name"] == policy and preview["portableDigest"].startswith("ap1:"), preview
    assert _get(kube_api, ns, "autoscaling", "v2", "horizontalpodautoscalers", f"{ref.name}-engine") is not None
    assert _get(kube_api, ns, "keda.sh", "v1alpha1", "scaledobjects", scaled_object_name(f"{ref.name}-engine")) is None

    # Unbound, the policy does not render here: the preview says only what it can (no wouldRenderDigest) and
    # the inline block's scaler is not touched.
    unbound: AutoscalerObservation = _run(AutoscalerActivities(kube_api, dict).ensure, ask)
    assert unbound.problem is None and unbound.status is not None
    assert unbound.status["shadowedPolicyRef"] == {"name": policy, "portableDigest": preview["portableDigest"]}

    # The inline block removed: the policy renders, and its resolvedDigest is the preview's wouldRenderDigest.
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        "ome.io", "v1beta1", ns, "inferenceservices", ref.name, {"spec": {"engine": {"autoscaler": None}}})
    rendered: AutoscalerObservation = _run(acts.ensure, ask)
    assert rendered.status is not None and rendered.status["specSource"] == "policy"
    assert "shadowedPolicyRef" not in rendered.status
    assert rendered.status["policy"]["resolvedDigest"] == preview["wouldRenderDigest"]
    assert rendered.status["policy"]["portableDigest"] == preview["portableDigest"]


def test_the_projection_keeps_a_policy_rendered_block_and_the_scalers_count(kube_api: client.ApiClient,
                                                                             ns: str) -> None:
    """OMENative: the projection renders no policy, so it keeps the block serving.ensure_autoscaler wrote
    onto the replica (seed: the stored block is the last known good one) and leaves the count to it."""
    policy = f"p-{uuid.uuid4().hex[:5]}"
    create(kube_api, AutoscalerPolicy, manifest(AutoscalerPolicy, {"class": "HPA"}, name=policy), ns)
    engine = {"runner": {"name": "engine", "image": "registry.invalid/engine:v1", "ports": [{"containerPort": 8000}]},
              "minReplicas": 2, "maxReplicas": 5, "autoscalerPolicyRef": {"name": policy}}
    isvc = create(kube_api, InferenceService, manifest(InferenceService, {"deploymentMode": "OMENative",
                                                                          "engine": engine},
                                                       name=f"as-{uuid.uuid4().hex[:5]}"), ns)
    ref = ObjectRef.of(InferenceService, isvc["metadata"]["name"], ns, isvc["metadata"]["uid"])
    serving = ServingActivities(kube_api)

    def project(replicas: int) -> None:
        seen: ServiceObservation = _run(serving.observe, ObserveInput(isvc=ref))
        _run(serving.ensure_revision, EnsureRevisionInput(
            key=RevisionKey(isvc=ref, component=ENGINE, revision=seen.components[0].desired_revision),
            replicas=replicas))

    def replica() -> dict[str, Any]:
        found = _get(kube_api, ns, "ome.io", "v1beta1", "inferencereplicas", f"{ref.name}-engine")
        assert found is not None
        return found

    project(2)
    _run(AutoscalerActivities(kube_api).ensure, EnsureAutoscalerInput(isvc=ref, component=ENGINE))
    assert replica()["spec"]["autoscaler"] == {"class": "HPA"}, "the policy's block, written by the scaler pass"
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object_scale(
        "ome.io", "v1beta1", ns, "inferencereplicas", f"{ref.name}-engine", {"spec": {"replicas": 4}})
    project(2)  # a later capacity write by the projection
    assert replica()["spec"]["autoscaler"] == {"class": "HPA"}, "kept, not cleared"
    assert replica()["spec"]["replicas"] == 4, "the scaler's count stays"


def test_a_credentialed_provider_gets_a_cluster_trigger_authentication_and_no_secret_travels(
        kube_api: client.ApiClient, chart_identities: Identities, ns: str, trigger_auth_crd: None) -> None:
    """The provider's Secret is named, never read: the token is in none of the ScaledObject, the
    ClusterTriggerAuthentication or the activity's answer (what the workflow's history and status carry).
    As the chart's worker identity, so its RBAC for clustertriggerauthentications is proven too."""
    token = f"tok-{uuid.uuid4().hex}"
    secret = f"reader-{uuid.uuid4().hex[:5]}"
    client.CoreV1Api(kube_api).create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name=secret), string_data={"token": token}))
    provider = f"prom-{uuid.uuid4().hex[:5]}"
    policy = f"p-{uuid.uuid4().hex[:5]}"
    create(kube_api, AutoscalerPolicy, manifest(AutoscalerPolicy, keda_policy(providerRef={"name": provider}),
                                                name=policy), ns)
    isvc = create(kube_api, InferenceService, manifest(InferenceService, {
        "deploymentMode": "RawDeployment", "engine": _component(policy)}, name=f"as-{uuid.uuid4().hex[:5]}"), ns)
    ref = ObjectRef.of(InferenceService, isvc["metadata"]["name"], ns, isvc["metadata"]["uid"])
    bindings = {provider: ProviderBinding(server_address=PROM, has_credentials=True, auth_secret=secret,
                                          auth_key="token")}
    auth_name = trigger_authentication_name(provider)
    try:
        with api_as(chart_identities.worker) as worker:
            seen: AutoscalerObservation = _run(AutoscalerActivities(worker, lambda: bindings).ensure,
                                               EnsureAutoscalerInput(isvc=ref, component=ENGINE, revision="abc"))
            assert seen.problem is None and seen.status is not None and seen.status["specSource"] == "policy"
            again: AutoscalerObservation = _run(AutoscalerActivities(worker, lambda: bindings).ensure,
                                                EnsureAutoscalerInput(isvc=ref, component=ENGINE, revision="abc"))
            assert again.problem is None, "a second pass applies the same authentication again"
        scaled = _get(kube_api, ns, "keda.sh", "v1alpha1", "scaledobjects", scaled_object_name(f"{ref.name}-engine"))
        assert scaled is not None
        [trigger] = scaled["spec"]["triggers"]
        assert trigger["authenticationRef"] == {"name": auth_name, "kind": "ClusterTriggerAuthentication"}
        assert trigger["metadata"]["authModes"] == "bearer" and trigger["metadata"]["serverAddress"] == PROM
        auth = client.CustomObjectsApi(kube_api).get_cluster_custom_object(
            "keda.sh", "v1alpha1", "clustertriggerauthentications", auth_name)
        assert auth["spec"]["secretTargetRef"] == [{"parameter": "bearerToken", "name": secret, "key": "token"}]
        assert auth["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "servingops"
        for carried in (json.dumps(scaled), json.dumps(auth), seen.model_dump_json(), again.model_dump_json()):
            assert token not in carried
    finally:
        ignore_404(lambda: client.CustomObjectsApi(kube_api).delete_cluster_custom_object(
            "keda.sh", "v1alpha1", "clustertriggerauthentications", auth_name))


def test_a_cluster_trigger_authentication_not_ours_is_never_written_over(
        kube_api: client.ApiClient, ns: str, trigger_auth_crd: None) -> None:
    provider = f"prom-{uuid.uuid4().hex[:5]}"
    auth_name = trigger_authentication_name(provider)
    custom = client.CustomObjectsApi(kube_api)
    custom.create_cluster_custom_object("keda.sh", "v1alpha1", "clustertriggerauthentications", {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ClusterTriggerAuthentication", "metadata": {"name": auth_name},
        "spec": {"secretTargetRef": [{"parameter": "bearerToken", "name": "admins", "key": "k"}]}})
    try:
        policy = f"p-{uuid.uuid4().hex[:5]}"
        create(kube_api, AutoscalerPolicy, manifest(AutoscalerPolicy, keda_policy(providerRef={"name": provider}),
                                                    name=policy), ns)
        isvc = create(kube_api, InferenceService, manifest(InferenceService, {
            "deploymentMode": "RawDeployment", "engine": _component(policy)}, name=f"as-{uuid.uuid4().hex[:5]}"), ns)
        ref = ObjectRef.of(InferenceService, isvc["metadata"]["name"], ns, isvc["metadata"]["uid"])
        bindings = {provider: ProviderBinding(server_address=PROM, has_credentials=True, auth_secret="mine")}
        with pytest.raises(ApplicationError) as refused:
            _run(AutoscalerActivities(kube_api, lambda: bindings).ensure,
                 EnsureAutoscalerInput(isvc=ref, component=ENGINE, revision="abc"))
        assert refused.value.type == "NameInUse"
        live = custom.get_cluster_custom_object("keda.sh", "v1alpha1", "clustertriggerauthentications", auth_name)
        assert live["spec"]["secretTargetRef"][0]["name"] == "admins"
        assert _get(kube_api, ns, "keda.sh", "v1alpha1", "scaledobjects",
                    scaled_object_name(f"{ref.name}-engine")) is None, "no ScaledObject without its authentication"
    finally:
        ignore_404(lambda: custom.delete_cluster_custom_object("keda.sh", "v1alpha1", "clustertriggerauthentications",
                                                               auth_name))
