"""The real kube-apiserver enforces every rule of the ome.io/v1beta1 CRDs (seed 004).

Each case applies an object to the apiserver started by the `kube_api` fixture and asserts that it is
accepted, or refused with the CEL message / the pattern, enum or bound complaint naming the field.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.api_models.base import KubeResource
from servingops.api_models.ome import InferenceReplica, InferenceService, RolloutPolicy, WorkloadCluster
from tests.crd_helpers import create, manifest, new_namespace, rejection, replace
from tests.support.ome_objects import (
    HASH,
    T0,
    analysis,
    canary_group,
    columnar_status,
    condition,
    full_isvc_spec,
    full_isvc_status,
    replica_spec,
    replica_status,
    rollout_policy_spec,
    workload_cluster_spec,
)

Spec = dict[str, Any]


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "ome-crds")


def _ns(kind: type[KubeResource], ns: str) -> str | None:
    return None if kind.crd.scope == "Cluster" else ns


def _custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


# --- valid objects ----------------------------------------------------------------------------------


@pytest.mark.integration
def test_full_inference_service_is_accepted_and_status_is_writable(kube_api: client.ApiClient, ns: str) -> None:
    created = create(kube_api, InferenceService, manifest(InferenceService, full_isvc_spec()), ns)
    assert created["spec"] == full_isvc_spec()
    created["status"] = full_isvc_status()
    written = replace(kube_api, InferenceService, created, ns, status=True)
    assert written["status"] == full_isvc_status()
    # What the apiserver stores reads back through the model unchanged.
    assert InferenceService.model_validate(written).to_api()["status"] == full_isvc_status()


@pytest.mark.integration
def test_defaults_are_applied_by_the_apiserver(kube_api: client.ApiClient, ns: str) -> None:
    spec = {"model": {"name": "m"}, "runtime": {"name": "r"}, "scalingPolicy": {"proportional": {}},
            "engine": {"autoscalerPolicyRef": {"name": "p"}},
            "rollout": {"groups": [{"components": ["engine"],
                                    "policyRef": {"name": "p", "progression": "blueGreen"}}]}}
    created = create(kube_api, InferenceService, manifest(InferenceService, spec), ns)["spec"]
    assert created["model"] == {"name": "m", "kind": "ClusterBaseModel", "apiGroup": "ome.io"}
    assert created["runtime"] == {"name": "r", "kind": "ClusterServingRuntime", "apiGroup": "ome.io",
                                  "autoSync": True}
    assert created["scalingPolicy"] == {"mode": "Independent", "proportional": {"anchor": "engine"}}
    assert created["engine"]["autoscalerPolicyRef"]["kind"] == "AutoscalerPolicy"
    assert created["rollout"]["groups"][0]["policyRef"]["kind"] == "RolloutPolicy"


@pytest.mark.integration
@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"engine": {"runner": {"name": "main", "image": "x"}}, "rollout": {"groups": [
            {"components": ["decoder"], "soak": "5m"}, {"components": ["engine"], "blueGreen": {}}]}},
        {"replicaRefs": {"engine": ["ir-engine"], "router": ["ir-router"]}},
        {"engine": {}, "decoder": {}, "router": {},
         "placement": {"policy": "ComponentAffinity", "mode": "Single", "replacementTimeout": "90s",
                       "componentAffinity": {
                           "engine": [{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}],
                           "decoder": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                         "values": ["a", "b"]}]}],
                           "router": [{"matchExpressions": [{"key": "tier", "operator": "Lt", "values": ["-2"]}]}]}}},
        {"placement": {"policy": "ClusterAffinity", "mode": "SplitByCapacity", "split": {"replicas": 2}}},
        {"routing": {"probe": {"disabled": True}, "capacity": {"disabled": True}}},
        {"traffic": {"algorithm": "RoundRobin",
                     "endpointOverride": {"type": "Header", "headers": [{"name": "X-Endpoint-HostPort"}]}}},
        {"traffic": {"algorithm": "ConsistentHash", "consistentHash": {"type": "SourceIP"}}},
        {"traffic": {"algorithm": "ConsistentHash",
                     "consistentHash": {"type": "Cookie", "cookie": {"name": "s", "ttlSeconds": 0}}}},
        {"engine": {"autoscaler": {"class": "KEDA", "keda": {"triggers": [{"type": "cron"}]}}},
         "router": {"autoscaler": {"class": "None"}}},
    ],
    ids=["empty", "sequence-with-soak", "replica-refs", "component-affinity", "split-by-capacity",
         "routing-disabled", "round-robin", "source-ip-hash", "cookie-hash", "keda"],
)
def test_valid_inference_services(kube_api: client.ApiClient, ns: str, spec: Spec) -> None:
    assert create(kube_api, InferenceService, manifest(InferenceService, spec), ns)["spec"] == spec


@pytest.mark.integration
def test_valid_rollout_policies(kube_api: client.ApiClient, ns: str) -> None:
    for spec in (rollout_policy_spec(), {"blueGreen": {}}, {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": "10%"}}):
        created = create(kube_api, RolloutPolicy, manifest(RolloutPolicy, spec), ns)
        assert created["spec"] == spec
    created["status"] = {"observedGeneration": 1, "portableDigest": "rp1:abc", "attachedGroups": 2,
                         "conditions": [condition()]}
    assert replace(kube_api, RolloutPolicy, created, ns, status=True)["status"]["attachedGroups"] == 2


@pytest.mark.integration
def test_valid_workload_clusters(kube_api: client.ApiClient) -> None:
    created = create(kube_api, WorkloadCluster, manifest(WorkloadCluster, workload_cluster_spec()))
    assert created["spec"] == workload_cluster_spec()
    created["status"] = {"conditions": [condition()]}
    assert replace(kube_api, WorkloadCluster, created, status=True)["status"]["conditions"][0]["type"] == "Ready"
    created = create(kube_api, WorkloadCluster, manifest(WorkloadCluster, workload_cluster_spec(
        clusterProfileRef={"name": "gpu-west"})))
    assert created["spec"]["clusterSource"] == {"clusterProfileRef": {"name": "gpu-west"}}
    # The kubeconfig key defaults, and the kind is cluster-scoped (no namespace in its metadata).
    created = create(kube_api, WorkloadCluster, manifest(WorkloadCluster, workload_cluster_spec(
        kubeConfig={"secretRef": {"name": "s"}})))
    assert created["spec"]["clusterSource"]["kubeConfig"]["key"] == "kubeconfig"
    assert "namespace" not in created["metadata"]


@pytest.mark.integration
def test_inference_replica_scale_and_status(kube_api: client.ApiClient, ns: str) -> None:
    created = create(kube_api, InferenceReplica, manifest(InferenceReplica, replica_spec()), ns)
    name = created["metadata"]["name"]
    info = InferenceReplica.crd
    created["status"] = replica_status()
    assert replace(kube_api, InferenceReplica, created, ns, status=True)["status"] == replica_status()

    custom = _custom(kube_api)
    custom.patch_namespaced_custom_object_scale(info.group, info.version, ns, info.plural, name,
                                                {"spec": {"replicas": 5}})
    scale = custom.get_namespaced_custom_object_scale(info.group, info.version, ns, info.plural, name)
    assert scale["spec"]["replicas"] == 5
    assert scale["status"]["replicas"] == 2
    assert scale["status"]["selector"] == "ome.io/inferencereplica=llama-engine"
    stored = custom.get_namespaced_custom_object(info.group, info.version, ns, info.plural, name)
    assert stored["spec"]["replicas"] == 5
    # The scale subresource respects the schema's minimum.
    assert "spec.replicas" in rejection(lambda: custom.patch_namespaced_custom_object_scale(
        info.group, info.version, ns, info.plural, name, {"spec": {"replicas": -1}}))


@pytest.mark.integration
@pytest.mark.parametrize(
    "spec",
    [
        {"component": "decoder", "modelRef": {"name": "m"}, "runtimeRef": {"name": "r"},
         "parentRef": {"name": "llama"}, "lifecycle": {"minReadySeconds": 3},
         "autoscaler": {"class": "HPA"},
         "placementExecution": {"planID": "p", "revision": 1, "sourceUID": "u", "clusterUID": "c",
                                "pauseSurge": True,
                                "demand": {"fingerprint": HASH, "components": [
                                    {"component": "engine", "renderingHash": HASH},
                                    {"component": "decoder", "renderingHash": HASH}]},
                                "replicaFloors": [{"component": "engine", "replicas": 2},
                                                  {"component": "router", "replicas": 0}]},
         "placementReplicaLimit": 4},
        {"component": "router", "runtimeRef": {"name": "r", "autoSync": True}},
        replica_spec(runners=[
            {"name": "leader", "size": 1, "template": {}}, {"name": "worker", "size": 3, "template": {}}]),
    ],
    ids=["projected", "runtime-only", "multi-node"],
)
def test_valid_inference_replicas(kube_api: client.ApiClient, ns: str, spec: Spec) -> None:
    created = create(kube_api, InferenceReplica, manifest(InferenceReplica, spec), ns)
    assert created["spec"]["component"] == spec["component"]


@pytest.mark.integration
def test_columnar_replica_status_is_accepted(kube_api: client.ApiClient, ns: str) -> None:
    created = create(kube_api, InferenceReplica, manifest(InferenceReplica, replica_spec()), ns)
    created["status"] = columnar_status()
    assert replace(kube_api, InferenceReplica, created, ns, status=True)["status"] == columnar_status()


# --- InferenceService spec rules ----------------------------------------------------------------------

ONE_PROGRESSION = "at most one of canary, blueGreen, or rollingUpdate may be set on a rollout group"
ENABLED_PROBE = {"path": "/h", "method": "GET", "acceptStatuses": [200], "gateStatuses": [503], "period": "10s",
                 "timeout": "1s", "failureThreshold": 1, "successThreshold": 1, "allFailedPolicy": "Drain"}
ENABLED_CAPACITY = {"path": "/c", "method": "GET", "format": "f", "period": "10s", "timeout": "1s", "samples": 3,
                    "quorum": 2, "maxAge": "10s"}


def _rollout(*groups: Spec, **over: Any) -> Spec:
    return {"rollout": {"groups": list(groups), **over}}


def _step(**over: Any) -> Spec:
    return _rollout({"components": ["engine"], "canary": {"steps": [{"capacity": 1, "traffic": 10, **over}]}})


def _analysis(**over: Any) -> Spec:
    return _step(analysis=analysis(**over))


def _placement(**placement: Any) -> Spec:
    return {"engine": {}, "placement": {"policy": "ClusterAffinity", "mode": "Single", **placement}}


def _term(*reqs: Spec, **over: Any) -> Spec:
    return {"matchExpressions": list(reqs), **over}


def _req(operator: str, *values: str, key: str = "gpu") -> Spec:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


def _affinity(**components: Any) -> Spec:
    return {"policy": "ComponentAffinity", "mode": "Single", "componentAffinity": components}


def _probe(**over: Any) -> Spec:
    return {"routing": {"probe": {**ENABLED_PROBE, **over}}}


def _capacity(**over: Any) -> Spec:
    return {"routing": {"capacity": {**ENABLED_CAPACITY, **over}}}


def _without(block: Spec, key: str) -> Spec:
    return {k: v for k, v in block.items() if k != key}


TERM = _term(_req("Exists"))

ISVC_REJECTIONS: list[tuple[str, Spec, str]] = [
    # rollout groups
    ("two-progressions", _rollout({"components": ["engine"], "blueGreen": {}, "rollingUpdate": {}}), ONE_PROGRESSION),
    ("three-progressions", _rollout(canary_group(blueGreen={}, rollingUpdate={})), ONE_PROGRESSION),
    ("order-outside-group", _rollout({"components": ["engine"], "order": ["engine", "router"]}),
     "order must reference only Components listed in this group"),
    ("maintain-ratio-on-canary", _rollout(canary_group(maintainRatio={"tolerance": 5})),
     "maintainRatio is rejected on canary groups"),
    ("soak-on-multi-component", _rollout({"components": ["engine", "decoder"], "soak": "1m"}),
     "soak is honored only on single-Component blueGreen groups"),
    ("soak-on-canary", _rollout(canary_group(components=["engine"], soak="1m")),
     "soak is honored only on single-Component blueGreen groups"),
    ("sequential-multi-group", _rollout(canary_group(), {"components": ["router"]}),
     "under groupOrdering Sequential a multi-group rollout must be single-Component blueGreen groups"),
    ("prometheus-both-sources", _rollout(canary_group(canary={
        "prometheus": {"providerRef": {"name": "p"}, "serverAddress": "http://prom:9090"}})),
     "at most one of providerRef and serverAddress may be set"),
    ("policy-ref-cluster-kind", _rollout(canary_group(policyRef={
        "name": "p", "progression": "canary", "kind": "ClusterRolloutPolicy"})),
     "only kind RolloutPolicy is accepted; ClusterRolloutPolicy is reserved"),
    ("policy-ref-empty-name", _rollout(canary_group(policyRef={"name": "", "progression": "canary"})),
     "spec.rollout.groups[0].policyRef.name"),
    ("policy-ref-bad-progression", _rollout(canary_group(policyRef={"name": "p", "progression": "linear"})),
     "spec.rollout.groups[0].policyRef.progression: Unsupported value"),
    ("no-components", _rollout({"components": []}), "spec.rollout.groups[0].components"),
    ("unknown-component", _rollout({"components": ["prefill"]}),
     "spec.rollout.groups[0].components[0]: Unsupported value"),
    ("four-components", _rollout({"components": ["engine", "decoder", "router", "engine"]}),
     "spec.rollout.groups[0].components: Too many"),
    ("order-too-long", _rollout({"components": ["engine"], "order": ["engine"] * 4}),
     "spec.rollout.groups[0].order: Too many"),
    ("four-groups", _rollout(*[{"components": ["engine"]}] * 4, groupOrdering="Concurrent"),
     "spec.rollout.groups: Too many"),
    ("bad-ordering", _rollout(groupOrdering="Parallel"), "spec.rollout.groupOrdering: Unsupported value"),
    ("pairing-pattern", _rollout(pairingProtocol="-nixl"), "spec.rollout.pairingProtocol"),
    ("pairing-too-long", _rollout(pairingProtocol="n" * 64), "spec.rollout.pairingProtocol: Too long"),
    ("maintain-ratio-over-100", _rollout({"components": ["engine", "decoder"], "maintainRatio": {"tolerance": 101}}),
     "spec.rollout.groups[0].maintainRatio.tolerance"),
    ("traffic-over-100", _step(traffic=101), "spec.rollout.groups[0].canary.steps[0].traffic"),
    ("traffic-negative", _step(traffic=-1), "spec.rollout.groups[0].canary.steps[0].traffic"),
    ("too-many-steps", _rollout({"components": ["engine"], "canary": {
        "steps": [{"capacity": 1, "traffic": 1}] * 21}}), "spec.rollout.groups[0].canary.steps: Too many"),
    ("step-needs-capacity", _rollout({"components": ["engine"], "canary": {"steps": [{"traffic": 1}]}}),
     "spec.rollout.groups[0].canary.steps[0].capacity: Required value"),
    ("failure-limit-zero", _analysis(failureLimit=0), "spec.rollout.groups[0].canary.steps[0].analysis.failureLimit"),
    ("no-metrics", _analysis(metrics=[]), "spec.rollout.groups[0].canary.steps[0].analysis.metrics"),
    ("too-many-metrics", _analysis(metrics=[{"name": f"m{i}", "query": "q", "operator": "LT", "threshold": "1"}
                                            for i in range(11)]),
     "spec.rollout.groups[0].canary.steps[0].analysis.metrics: Too many"),
    ("duplicate-metric-names", _analysis(metrics=[{"name": "m", "query": "q", "operator": "LT", "threshold": "1"}] * 2),
     "Duplicate value"),
    ("non-numeric-threshold", _analysis(metrics=[{"name": "m", "query": "q", "operator": "LT", "threshold": "low"}]),
     "spec.rollout.groups[0].canary.steps[0].analysis.metrics[0].threshold"),
    ("bad-operator", _analysis(metrics=[{"name": "m", "query": "q", "operator": "EQ", "threshold": "1"}]),
     "analysis.metrics[0].operator: Unsupported value"),
    ("bad-on-inconclusive", _analysis(onInconclusive="Ignore"), "onInconclusive: Unsupported value"),
    ("analysis-needs-interval", _analysis(interval=None), "analysis.interval: Required value"),
    # placement
    ("replacement-timeout-not-single", _placement(mode="All", replacementTimeout="1m"),
     "replacementTimeout requires Single placement"),
    ("replacement-timeout-zero", _placement(replacementTimeout="0s"), "replacementTimeout must be a positive duration"),
    ("replacement-timeout-negative", _placement(replacementTimeout="-5m"),
     "replacementTimeout must be a positive duration"),
    ("component-affinity-policy-without-terms", {"engine": {}, "placement": {"policy": "ComponentAffinity",
                                                                            "mode": "Single"}},
     "componentAffinity is required by, and only valid with, the ComponentAffinity policy"),
    ("component-affinity-under-cluster-policy", _placement(componentAffinity={"engine": [TERM]}),
     "componentAffinity is required by, and only valid with, the ComponentAffinity policy"),
    ("component-policy-with-cluster-affinity", {"engine": {}, "placement": {
        **_affinity(engine=[TERM]), "clusterAffinity": [TERM]}},
     "the ComponentAffinity policy reads componentAffinity, not clusterAffinity"),
    ("split-in-all-mode", _placement(mode="All", split={"replicas": 2}),
     "split is valid only in Split and SplitByCapacity modes"),
    ("weight-outside-split", _placement(mode="SplitByCapacity", clusterAffinity=[_term(_req("Exists"), weight=2)]),
     "an affinity term weight is permitted only in Split mode"),
    ("component-weight-outside-split", {"engine": {}, "placement": _affinity(engine=[{**TERM, "weight": 2}])},
     "an affinity term weight is permitted only in Split mode"),
    ("empty-term", _placement(clusterAffinity=[{}]), "a cluster affinity term must contain a requirement"),
    ("empty-requirement-lists", _placement(clusterAffinity=[{"matchExpressions": [], "matchFields": []}]),
     "a cluster affinity term must contain a requirement"),
    ("match-fields-on-label", _placement(clusterAffinity=[{"matchFields": [_req("In", "a")]}]),
     "matchFields selects only metadata.name, with In or NotIn"),
    ("match-fields-exists", _placement(clusterAffinity=[{"matchFields": [_req("Exists", key="metadata.name")]}]),
     "matchFields selects only metadata.name, with In or NotIn"),
    ("in-without-values", _placement(clusterAffinity=[_term(_req("In"))]),
     "values must be nonempty for In/NotIn, empty for Exists/DoesNotExist, and a single integer for Gt/Lt"),
    ("exists-with-values", _placement(clusterAffinity=[_term(_req("DoesNotExist", "x"))]),
     "values must be nonempty for In/NotIn, empty for Exists/DoesNotExist, and a single integer for Gt/Lt"),
    ("gt-not-integer", _placement(clusterAffinity=[_term(_req("Gt", "eight"))]),
     "values must be nonempty for In/NotIn, empty for Exists/DoesNotExist, and a single integer for Gt/Lt"),
    ("lt-two-values", _placement(clusterAffinity=[_term(_req("Lt", "1", "2"))]),
     "values must be nonempty for In/NotIn, empty for Exists/DoesNotExist, and a single integer for Gt/Lt"),
    ("bad-selector-operator", _placement(clusterAffinity=[_term(_req("Near"))]),
     "matchExpressions[0].operator: Unsupported value"),
    ("empty-key", _placement(clusterAffinity=[_term(_req("Exists", key=""))]),
     "spec.placement.clusterAffinity[0].matchExpressions[0].key"),
    ("too-many-values", _placement(clusterAffinity=[_term(_req("In", *[str(i) for i in range(65)]))]),
     "spec.placement.clusterAffinity[0].matchExpressions[0].values: Too many"),
    ("too-many-requirements", _placement(clusterAffinity=[_term(*[_req("Exists")] * 65)]),
     "spec.placement.clusterAffinity[0].matchExpressions: Too many"),
    ("too-many-terms", _placement(clusterAffinity=[TERM] * 65), "spec.placement.clusterAffinity: Too many"),
    ("empty-cluster-affinity", _placement(clusterAffinity=[]), "spec.placement.clusterAffinity"),
    ("weight-zero", _placement(mode="Split", clusterAffinity=[_term(_req("Exists"), weight=0)]),
     "spec.placement.clusterAffinity[0].weight"),
    ("bad-mode", _placement(mode="Some"), "spec.placement.mode: Unsupported value"),
    ("bad-policy", _placement(policy="Nearest"), "spec.placement.policy: Unsupported value"),
    ("mode-required", {"placement": {"policy": "ClusterAffinity"}}, "spec.placement.mode: Required value"),
    ("split-replicas-zero", _placement(mode="Split", split={"replicas": 0}), "spec.placement.split.replicas"),
    ("split-ceiling-negative", _placement(mode="Split", split={"maxReplicasPerCluster": -1}),
     "spec.placement.split.maxReplicasPerCluster"),
    ("max-surge-negative", _placement(maxSurge=-1), "spec.placement.maxSurge"),
    ("empty-component-terms", {"engine": {}, "placement": _affinity(engine=[])},
     "spec.placement.componentAffinity.engine"),
    ("missing-engine-affinity", {"engine": {}, "decoder": {}, "placement": _affinity(decoder=[TERM])},
     "componentAffinity needs an entry for each declared engine and decoder, and none for undeclared ones"),
    ("undeclared-decoder-affinity", {"engine": {}, "placement": _affinity(engine=[TERM], decoder=[TERM])},
     "componentAffinity needs an entry for each declared engine and decoder, and none for undeclared ones"),
    ("undeclared-router-affinity", {"engine": {}, "placement": _affinity(engine=[TERM], router=[TERM])},
     "componentAffinity.router requires a declared router"),
    # placement: the affinity inputs matching relies on (workflows/placement/matching.py)
    ("exists-with-a-value", _placement(clusterAffinity=[_term(_req("Exists", "x"))]),
     "values must be nonempty for In/NotIn, empty for Exists/DoesNotExist, and a single integer for Gt/Lt"),
    ("notin-without-values", _placement(clusterAffinity=[_term(_req("NotIn"))]),
     "values must be nonempty for In/NotIn, empty for Exists/DoesNotExist, and a single integer for Gt/Lt"),
    ("gt-without-value", _placement(clusterAffinity=[_term(_req("Gt"))]),
     "values must be nonempty for In/NotIn, empty for Exists/DoesNotExist, and a single integer for Gt/Lt"),
    ("lt-decimal", _placement(clusterAffinity=[_term(_req("Lt", "1.5"))]),
     "values must be nonempty for In/NotIn, empty for Exists/DoesNotExist, and a single integer for Gt/Lt"),
    ("component-in-without-values", {"engine": {}, "placement": _affinity(engine=[_term(_req("In"))])},
     "values must be nonempty for In/NotIn, empty for Exists/DoesNotExist, and a single integer for Gt/Lt"),
    ("component-empty-term", {"engine": {}, "placement": _affinity(engine=[{}])},
     "a cluster affinity term must contain a requirement"),
    ("match-fields-namespace", _placement(clusterAffinity=[{"matchFields": [_req("In", "a",
                                                                                 key="metadata.namespace")]}]),
     "matchFields selects only metadata.name, with In or NotIn"),
    ("match-fields-gt-on-name", _placement(clusterAffinity=[{"matchFields": [_req("Gt", "1", key="metadata.name")]}]),
     "matchFields selects only metadata.name, with In or NotIn"),
    ("weight-in-single", _placement(clusterAffinity=[_term(_req("Exists"), weight=1)]),
     "an affinity term weight is permitted only in Split mode"),
    ("weight-in-all", _placement(mode="All", clusterAffinity=[TERM, _term(_req("Exists"), weight=3)]),
     "an affinity term weight is permitted only in Split mode"),
    ("decoder-weight-outside-split", {"engine": {}, "decoder": {}, "placement": {
        **_affinity(engine=[TERM], decoder=[{**TERM, "weight": 2}]), "mode": "All"}},
     "an affinity term weight is permitted only in Split mode"),
    ("router-weight-outside-split", {"engine": {}, "router": {}, "placement": _affinity(
        engine=[TERM], router=[{**TERM, "weight": 2}])},
     "an affinity term weight is permitted only in Split mode"),
    ("replacement-timeout-in-split", _placement(mode="Split", replacementTimeout="1m"),
     "replacementTimeout requires Single placement"),
    ("replacement-timeout-zero-minutes", _placement(replacementTimeout="0m"),
     "replacementTimeout must be a positive duration"),
    ("split-in-single-mode", _placement(split={"replicas": 2}),
     "split is valid only in Split and SplitByCapacity modes"),
    # replicaRefs
    ("replica-refs-with-engine", {"engine": {}, "replicaRefs": {"engine": ["ir"]}},
     "replicaRefs excludes engine, decoder, router, model and runtime"),
    ("replica-refs-with-model", {"model": {"name": "m"}, "replicaRefs": {"engine": ["ir"]}},
     "replicaRefs excludes engine, decoder, router, model and runtime"),
    ("replica-refs-without-engine", {"replicaRefs": {"decoder": ["ir"]}}, "replicaRefs.engine is required"),
    # components
    ("keda-without-keda", {"engine": {"autoscaler": {"class": "KEDA"}}},
     "class KEDA requires keda and forbids hpa; class HPA forbids keda"),
    ("keda-with-hpa", {"decoder": {"autoscaler": {"class": "KEDA", "keda": {"triggers": [{}]}, "hpa": {}}}},
     "class KEDA requires keda and forbids hpa; class HPA forbids keda"),
    ("hpa-with-keda", {"router": {"autoscaler": {"class": "HPA", "keda": {"triggers": [{}]}}}},
     "class KEDA requires keda and forbids hpa; class HPA forbids keda"),
    ("keda-no-triggers", {"engine": {"autoscaler": {"class": "KEDA", "keda": {"triggers": []}}}},
     "spec.engine.autoscaler.keda.triggers"),
    ("bad-autoscaler-class", {"engine": {"autoscaler": {"class": "VPA"}}},
     "spec.engine.autoscaler.class: Unsupported value"),
    ("cluster-autoscaler-policy", {"engine": {"autoscalerPolicyRef": {"name": "p", "kind": "ClusterAutoscalerPolicy"}}},
     "ClusterAutoscalerPolicy is reserved until the cluster-scoped twin ships"),
    ("bad-autoscaler-policy-kind", {"engine": {"autoscalerPolicyRef": {"name": "p", "kind": "Policy"}}},
     "spec.engine.autoscalerPolicyRef.kind: Unsupported value"),
    ("empty-autoscaler-policy-name", {"engine": {"autoscalerPolicyRef": {"name": ""}}},
     "spec.engine.autoscalerPolicyRef.name"),
    ("bad-topology-spread", {"engine": {"topologySpread": "Always"}},
     "spec.engine.topologySpread: Unsupported value"),
    ("bad-restart-policy", {"engine": {"lifecycle": {"restartPolicy": "Always"}}},
     "spec.engine.lifecycle.restartPolicy: Unsupported value"),
    ("bad-update-strategy", {"engine": {"lifecycle": {"updateStrategy": {"type": "BlueGreen"}}}},
     "spec.engine.lifecycle.updateStrategy.type: Unsupported value"),
    ("bad-ready-policy", {"engine": {"lifecycle": {"readyPolicy": "AnyPodReady"}}},
     "spec.engine.lifecycle.readyPolicy: Unsupported value"),
    ("bad-migration-mode", {"engine": {"lifecycle": {"migrationPolicy": {"mode": "Always"}}}},
     "spec.engine.lifecycle.migrationPolicy.mode: Unsupported value"),
    ("min-ready-negative", {"engine": {"lifecycle": {"minReadySeconds": -1}}}, "spec.engine.lifecycle.minReadySeconds"),
    ("partition-negative", {"engine": {"lifecycle": {"updateStrategy": {"rollingUpdate": {"partition": -1}}}}},
     "spec.engine.lifecycle.updateStrategy.rollingUpdate.partition"),
    ("grace-negative", {"engine": {"lifecycle": {"updateStrategy": {
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": -1}}}}},
     "spec.engine.lifecycle.updateStrategy.inPlaceUpdateStrategy.gracePeriodSeconds"),
    ("bad-deployment-mode", {"deploymentMode": "MultiNode"}, "spec.deploymentMode: Unsupported value"),
    ("bad-selection-policy", {"acceleratorSelector": {"policy": "Random"}},
     "spec.acceleratorSelector.policy: Unsupported value"),
    ("model-needs-name", {"model": {"kind": "BaseModel"}}, "spec.model.name: Required value"),
    ("ttl-zero", {"ttlSecondsAfterCreation": 0}, "spec.ttlSecondsAfterCreation"),
    # traffic
    ("header-hash-without-headers", {"traffic": {"algorithm": "ConsistentHash", "consistentHash": {"type": "Header"}}},
     "headers are required with type Header and cookie with type Cookie; each is forbidden otherwise"),
    ("cookie-hash-with-headers", {"traffic": {"algorithm": "ConsistentHash", "consistentHash": {
        "type": "Cookie", "cookie": {"name": "c"}, "headers": [{"name": "h"}]}}},
     "headers are required with type Header and cookie with type Cookie; each is forbidden otherwise"),
    ("source-ip-with-cookie", {"traffic": {"algorithm": "ConsistentHash", "consistentHash": {
        "type": "SourceIP", "cookie": {"name": "c"}}}},
     "headers are required with type Header and cookie with type Cookie; each is forbidden otherwise"),
    ("hash-without-consistent-hash", {"traffic": {"algorithm": "ConsistentHash"}},
     "consistentHash is required with algorithm ConsistentHash and rejected otherwise"),
    ("consistent-hash-with-round-robin", {"traffic": {"algorithm": "RoundRobin",
                                                      "consistentHash": {"type": "SourceIP"}}},
     "consistentHash is required with algorithm ConsistentHash and rejected otherwise"),
    ("override-header-without-headers", {"traffic": {"endpointOverride": {"type": "Header"}}},
     "headers are required when type is Header"),
    ("bad-algorithm", {"traffic": {"algorithm": "Fastest"}}, "spec.traffic.algorithm: Unsupported value"),
    ("bad-hash-type", {"traffic": {"algorithm": "ConsistentHash", "consistentHash": {"type": "Query"}}},
     "spec.traffic.consistentHash.type: Unsupported value"),
    ("bad-override-type", {"traffic": {"endpointOverride": {"type": "Cookie"}}},
     "spec.traffic.endpointOverride.type: Unsupported value"),
    ("empty-header-name", {"traffic": {"endpointOverride": {"type": "Header", "headers": [{"name": ""}]}}},
     "spec.traffic.endpointOverride.headers[0].name"),
    ("cookie-ttl-negative", {"traffic": {"algorithm": "ConsistentHash", "consistentHash": {
        "type": "Cookie", "cookie": {"name": "c", "ttlSeconds": -1}}}},
     "spec.traffic.consistentHash.cookie.ttlSeconds"),
    # scaling
    ("proportional-without-policy", {"scalingPolicy": {"mode": "Proportional"}},
     "proportional is required when mode is Proportional"),
    ("bad-scaling-mode", {"scalingPolicy": {"mode": "Linked"}}, "spec.scalingPolicy.mode: Unsupported value"),
    ("bad-anchor", {"scalingPolicy": {"proportional": {"anchor": "prefill"}}},
     "spec.scalingPolicy.proportional.anchor: Unsupported value"),
    # routing: probe
    ("probe-disabled-with-fields", {"routing": {"probe": {"disabled": True, "path": "/h"}}},
     "disabled must not be combined with probe configuration fields"),
    ("probe-incomplete", {"routing": {"probe": {"path": "/h"}}},
     "an enabled probe must specify path, method, acceptStatuses, gateStatuses, period, timeout, failureThreshold, "
     "successThreshold, and allFailedPolicy"),
    ("probe-disabled-false-incomplete", {"routing": {"probe": {"disabled": False}}}, "an enabled probe must specify"),
    ("probe-period-zero", _probe(period="0s", timeout="0s"), "period must be positive"),
    ("probe-timeout-zero", _probe(timeout="0s"), "timeout must be positive"),
    ("probe-timeout-not-shorter", _probe(timeout="10s"), "timeout must be shorter than period"),
    ("probe-gate-429", _probe(gateStatuses=[503, 429]), "gateStatuses must not contain 401, 403, or 429"),
    ("probe-gate-401", _probe(gateStatuses=[401]), "gateStatuses must not contain 401, 403, or 429"),
    ("probe-path-pattern", _probe(path="health"), "spec.routing.probe.path"),
    ("probe-bad-method", _probe(method="PUT"), "spec.routing.probe.method: Unsupported value"),
    ("probe-status-range", _probe(acceptStatuses=[99]), "spec.routing.probe.acceptStatuses[0]"),
    ("probe-gate-range", _probe(gateStatuses=[600]), "spec.routing.probe.gateStatuses[0]"),
    ("probe-no-accept-statuses", _probe(acceptStatuses=[]), "spec.routing.probe.acceptStatuses"),
    ("probe-too-many-gates", _probe(gateStatuses=[500] * 501), "spec.routing.probe.gateStatuses: Too many"),
    ("probe-failure-threshold-zero", _probe(failureThreshold=0), "spec.routing.probe.failureThreshold"),
    ("probe-success-threshold-zero", _probe(successThreshold=0), "spec.routing.probe.successThreshold"),
    ("probe-bad-all-failed", _probe(allFailedPolicy="Panic"),
     "spec.routing.probe.allFailedPolicy: Unsupported value"),
    # routing: capacity
    ("capacity-disabled-with-fields", {"routing": {"capacity": {"disabled": True, "samples": 3}}},
     "disabled must not be combined with capacity configuration fields"),
    ("capacity-incomplete", {"routing": {"capacity": _without(ENABLED_CAPACITY, "maxAge")}},
     "an enabled capacity poll must specify path, method, format, period, timeout, samples, quorum, and maxAge"),
    ("capacity-period-zero", _capacity(period="0s", timeout="0s", maxAge="0s"), "period must be positive"),
    ("capacity-timeout-zero", _capacity(timeout="0s"), "timeout must be positive"),
    ("capacity-timeout-not-shorter", _capacity(timeout="11s"), "timeout must be shorter than period"),
    ("capacity-max-age-short", _capacity(maxAge="5s"), "maxAge must be at least period"),
    ("capacity-quorum-over-samples", _capacity(quorum=4), "quorum must not exceed samples"),
    ("capacity-samples-zero", _capacity(samples=0, quorum=0), "spec.routing.capacity.samples"),
    ("capacity-path-pattern", _capacity(path="c"), "spec.routing.capacity.path"),
    ("capacity-empty-format", _capacity(format=""), "spec.routing.capacity.format"),
    ("capacity-bad-method", _capacity(method="PATCH"), "spec.routing.capacity.method: Unsupported value"),
    # routing: publisher and capacity factors
    ("publisher-long-key", {"routing": {"publisher": {"options": {"k" * 129: "v"}}}},
     "publisher option keys must contain 1-128 characters and values must contain 1-4096 characters"),
    ("publisher-empty-value", {"routing": {"publisher": {"options": {"k": ""}}}},
     "publisher option keys must contain 1-128 characters and values must contain 1-4096 characters"),
    ("publisher-long-value", {"routing": {"publisher": {"options": {"k": "v" * 4097}}}},
     "spec.routing.publisher.options.k: Too long"),
    ("publisher-too-many-keys", {"routing": {"publisher": {"options": {f"k{i}": "v" for i in range(33)}}}},
     "spec.routing.publisher.options: Too many"),
    ("capacity-factor-zero", {"routing": {"capacityFactors": {"gpu-east": "0"}}},
     "every capacity factor must be greater than zero"),
    ("capacity-factor-negative", {"routing": {"capacityFactors": {"gpu-east": -1}}},
     "every capacity factor must be greater than zero"),
    ("capacity-factor-not-quantity", {"routing": {"capacityFactors": {"gpu-east": "fast"}}},
     "spec.routing.capacityFactors.gpu-east"),
]


@pytest.mark.integration
@pytest.mark.parametrize(("spec", "complaint"), [(s, c) for _, s, c in ISVC_REJECTIONS],
                         ids=[i for i, _, _ in ISVC_REJECTIONS])
def test_invalid_inference_services_are_rejected(kube_api: client.ApiClient, ns: str, spec: Spec,
                                                 complaint: str) -> None:
    body = manifest(InferenceService, _drop_none(spec))
    assert complaint in rejection(lambda: create(kube_api, InferenceService, body, ns))


# The shapes matching and allocation read, beside the rejections above: they must stay admissible.
PLACEMENT_ACCEPTED: list[tuple[str, Spec]] = [
    ("split-weights-overlap-fields-gt", _placement(
        mode="Split", split={"replicas": 4, "maxReplicasPerCluster": 0},
        clusterAffinity=[_term(_req("Gt", "-1"), weight=3), _term(_req("Exists")),
                         {"matchFields": [_req("NotIn", "a", "b", key="metadata.name")]}])),
    ("component-split-weights", {"engine": {}, "decoder": {}, "router": {}, "placement": {
        **_affinity(engine=[TERM], decoder=[{**TERM, "weight": 2}], router=[TERM]), "mode": "Split"}}),
    ("all-matches-everything", _placement(mode="All")),
    ("single-replacement-timeout", _placement(
        replacementTimeout="1m30s", clusterAffinity=[_term(_req("Lt", "10"), _req("DoesNotExist", key="x"))])),
]


@pytest.mark.integration
@pytest.mark.parametrize("spec", [s for _, s in PLACEMENT_ACCEPTED], ids=[i for i, _ in PLACEMENT_ACCEPTED])
def test_valid_placements(kube_api: client.ApiClient, ns: str, spec: Spec) -> None:
    assert create(kube_api, InferenceService, manifest(InferenceService, spec), ns)["spec"] == spec


def _drop_none(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _drop_none(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_drop_none(v) for v in node]
    return node


@pytest.mark.integration
def test_ephemeral_containers_are_dropped_from_components(kube_api: client.ApiClient, ns: str) -> None:
    body = manifest(InferenceService, {"engine": {"ephemeralContainers": [{"name": "debug"}]}})
    with pytest.raises(ApiException) as refused:
        create(kube_api, InferenceService, body, ns)
    assert refused.value.status == 400
    assert 'unknown field \\"spec.engine.ephemeralContainers\\"' in str(refused.value.body)


# --- transition rules ---------------------------------------------------------------------------------


def _update(kube_api: client.ApiClient, kind: type[KubeResource], ns: str, spec: Spec,
            change: Callable[[Spec], None]) -> Callable[[], Any]:
    created = create(kube_api, kind, manifest(kind, spec), _ns(kind, ns))
    updated = copy.deepcopy(created)
    change(updated["spec"])
    return lambda: replace(kube_api, kind, updated, _ns(kind, ns))


@pytest.mark.integration
def test_placement_cannot_be_removed(kube_api: client.ApiClient, ns: str) -> None:
    spec = _placement(clusterAffinity=[TERM])
    message = rejection(_update(kube_api, InferenceService, ns, spec, lambda s: s.pop("placement")))
    assert "the placement policy cannot be removed; drain and recreate the service" in message
    # Changing placement, or adding it later, is allowed.
    _update(kube_api, InferenceService, ns, spec, lambda s: s["placement"].update(mode="All"))()
    added = _update(kube_api, InferenceService, ns, {"engine": {}},
                    lambda s: s.update(placement={"policy": "ClusterAffinity", "mode": "All"}))()
    assert added["spec"]["placement"]["mode"] == "All"


@pytest.mark.integration
def test_replica_refs_are_fixed_at_create(kube_api: client.ApiClient, ns: str) -> None:
    spec = {"replicaRefs": {"engine": ["ir-a"]}}
    message = rejection(_update(kube_api, InferenceService, ns, spec,
                                lambda s: s["replicaRefs"].update(engine=["ir-b"])))
    assert "replicaRefs is fixed at create" in message
    message = rejection(_update(kube_api, InferenceService, ns, {},
                                lambda s: s.update(replicaRefs={"engine": ["ir-b"]})))
    assert "replicaRefs is fixed at create" in message


@pytest.mark.integration
def test_replica_component_and_parent_are_immutable(kube_api: client.ApiClient, ns: str) -> None:
    message = rejection(_update(kube_api, InferenceReplica, ns, replica_spec(),
                                lambda s: s.update(component="decoder")))
    assert "component is immutable" in message
    message = rejection(_update(kube_api, InferenceReplica, ns, replica_spec(),
                                lambda s: s.update(parentRef={"name": "llama"})))
    assert "parentRef is set at create and immutable" in message
    projected = replica_spec(parentRef={"name": "llama"})
    message = rejection(_update(kube_api, InferenceReplica, ns, projected,
                                lambda s: s.update(parentRef={"name": "other"})))
    assert "parentRef is set at create and immutable" in message
    # Everything else on a replica may change.
    updated = _update(kube_api, InferenceReplica, ns, projected, lambda s: s.update(replicas=7, paused=True))()
    assert updated["spec"]["replicas"] == 7


# --- InferenceReplica, RolloutPolicy, WorkloadCluster spec rules --------------------------------------

TEMPLATE_SOURCE = "exactly one template source: runners, or modelRef and/or runtimeRef"
RUNNER_SIZE = "the default and leader runners have size 1"

REPLICA_REJECTIONS: list[tuple[str, Spec, str]] = [
    ("runners-and-model", replica_spec(modelRef={"name": "m"}), TEMPLATE_SOURCE),
    ("runners-and-runtime", replica_spec(runtimeRef={"name": "r"}), TEMPLATE_SOURCE),
    ("no-template-source", {"component": "engine"}, TEMPLATE_SOURCE),
    ("leader-size-two", replica_spec(runners=[{"name": "leader", "size": 2, "template": {}}]), RUNNER_SIZE),
    ("default-size-three", replica_spec(runners=[{"name": "default", "size": 3, "template": {}}]), RUNNER_SIZE),
    ("worker-size-zero", replica_spec(runners=[{"name": "worker", "size": 0, "template": {}}]),
     "spec.runners[0].size"),
    ("bad-runner-name", replica_spec(runners=[{"name": "boss", "size": 1, "template": {}}]),
     "spec.runners[0].name: Unsupported value"),
    ("runner-needs-template", replica_spec(runners=[{"name": "default", "size": 1}]),
     "spec.runners[0].template: Required value"),
    ("pinned-runtime", {"component": "engine", "runtimeRef": {"name": "r", "autoSync": False}},
     "runtimeRef cannot pin a revision on an InferenceReplica"),
    ("runtime-revision", {"component": "engine", "runtimeRef": {"name": "r", "revision": "rev-1"}},
     "runtimeRef cannot pin a revision on an InferenceReplica"),
    ("standalone-lifecycle-min-ready", replica_spec(lifecycle={"minReadySeconds": 5}),
     "lifecycle.minReadySeconds is rejected on a standalone replica; set spec.minReadySeconds"),
    ("standalone-hpa", replica_spec(autoscaler={"class": "HPA"}),
     "a standalone replica rejects the HPA and KEDA autoscaler classes"),
    ("standalone-keda", replica_spec(autoscaler={"class": "KEDA", "keda": {"triggers": [{}]}}),
     "a standalone replica rejects the HPA and KEDA autoscaler classes"),
    ("component-required", _without(replica_spec(), "component"), "spec.component: Required value"),
    ("bad-component", replica_spec(component="prefill"), "spec.component: Unsupported value"),
    ("replicas-negative", replica_spec(replicas=-1), "spec.replicas"),
    ("min-ready-negative", replica_spec(minReadySeconds=-1), "spec.minReadySeconds"),
    ("history-limit-zero", replica_spec(revisionHistoryLimit=0), "spec.revisionHistoryLimit"),
    ("placement-limit-zero", replica_spec(placementReplicaLimit=0), "spec.placementReplicaLimit"),
    ("pacing-partition-negative", replica_spec(pacing={"partition": -1}), "spec.pacing.partition"),
    ("pairing-pattern", replica_spec(pairingProtocol="bad!"), "spec.pairingProtocol"),
    ("bad-pause-mode", replica_spec(pauseMode="Halt"), "spec.pauseMode: Unsupported value"),
    ("empty-parent-name", replica_spec(parentRef={"name": ""}), "spec.parentRef.name"),
    ("execution-revision-zero", replica_spec(placementExecution={
        "planID": "p", "revision": 0, "sourceUID": "u", "clusterUID": "c", "pauseSurge": False}),
     "spec.placementExecution.revision"),
    ("execution-needs-plan", replica_spec(placementExecution={
        "revision": 1, "sourceUID": "u", "clusterUID": "c", "pauseSurge": False}),
     "spec.placementExecution.planID: Required value"),
    ("demand-fingerprint-pattern", replica_spec(placementExecution={
        "planID": "p", "revision": 1, "sourceUID": "u", "clusterUID": "c", "pauseSurge": False,
        "demand": {"fingerprint": "xyz", "components": [{"component": "engine", "renderingHash": HASH}]}}),
     "spec.placementExecution.demand.fingerprint"),
    ("demand-router", replica_spec(placementExecution={
        "planID": "p", "revision": 1, "sourceUID": "u", "clusterUID": "c", "pauseSurge": False,
        "demand": {"fingerprint": HASH, "components": [{"component": "router", "renderingHash": HASH}]}}),
     "spec.placementExecution.demand.components[0].component: Unsupported value"),
    ("demand-too-many", replica_spec(placementExecution={
        "planID": "p", "revision": 1, "sourceUID": "u", "clusterUID": "c", "pauseSurge": False,
        "demand": {"fingerprint": HASH, "components": [{"component": "engine", "renderingHash": HASH}] * 3}}),
     "spec.placementExecution.demand.components: Too many"),
    ("floors-too-many", replica_spec(placementExecution={
        "planID": "p", "revision": 1, "sourceUID": "u", "clusterUID": "c", "pauseSurge": False,
        "replicaFloors": [{"component": "engine", "replicas": 1}] * 4}),
     "spec.placementExecution.replicaFloors: Too many"),
    ("floor-negative", replica_spec(placementExecution={
        "planID": "p", "revision": 1, "sourceUID": "u", "clusterUID": "c", "pauseSurge": False,
        "replicaFloors": [{"component": "engine", "replicas": -1}]}),
     "spec.placementExecution.replicaFloors[0].replicas"),
]


@pytest.mark.integration
@pytest.mark.parametrize(("spec", "complaint"), [(s, c) for _, s, c in REPLICA_REJECTIONS],
                         ids=[i for i, _, _ in REPLICA_REJECTIONS])
def test_invalid_inference_replicas_are_rejected(kube_api: client.ApiClient, ns: str, spec: Spec,
                                                 complaint: str) -> None:
    body = manifest(InferenceReplica, spec)
    assert complaint in rejection(lambda: create(kube_api, InferenceReplica, body, ns))


EXACTLY_ONE_PROGRESSION = "exactly one of canary, blueGreen, or rollingUpdate must be set"


@pytest.mark.integration
@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({}, EXACTLY_ONE_PROGRESSION),
        ({"blueGreen": {}, "rollingUpdate": {}}, EXACTLY_ONE_PROGRESSION),
        ({**rollout_policy_spec(), "blueGreen": {}}, EXACTLY_ONE_PROGRESSION),
        ({"canary": {"steps": [{"capacity": 3, "traffic": 10}]}},
         "a RolloutPolicy canary step capacity must be a percentage"),
        ({"canary": {"steps": [{"capacity": "3", "traffic": 10}]}},
         "a RolloutPolicy canary step capacity must be a percentage"),
        ({"canary": {"prometheus": {"serverAddress": "http://prom:9090"}}},
         "a RolloutPolicy names its metrics source by providerRef only; serverAddress is not admitted"),
        ({"canary": {"prometheus": {"providerRef": {"name": "p"}, "serverAddress": "http://prom:9090"}}},
         "at most one of providerRef and serverAddress may be set"),
        ({"canary": {"prometheus": {"providerRef": {"name": ""}}}}, "spec.canary.prometheus.providerRef.name"),
        ({"canary": {"steps": [{"capacity": "10%", "traffic": 200}]}}, "spec.canary.steps[0].traffic"),
    ],
    ids=["none", "two", "canary-and-blue-green", "absolute-capacity", "numeric-string-capacity",
         "server-address", "both-sources", "empty-provider", "traffic-over-100"],
)
def test_invalid_rollout_policies_are_rejected(kube_api: client.ApiClient, ns: str, spec: Spec,
                                               complaint: str) -> None:
    body = manifest(RolloutPolicy, spec)
    assert complaint in rejection(lambda: create(kube_api, RolloutPolicy, body, ns))


EXACTLY_ONE_SOURCE = "exactly one of kubeConfig or clusterProfileRef must be set"


@pytest.mark.integration
@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({"clusterSource": {}}, EXACTLY_ONE_SOURCE),
        ({"clusterSource": {"kubeConfig": {"secretRef": {"name": "s"}}, "clusterProfileRef": {"name": "p"}}},
         EXACTLY_ONE_SOURCE),
        ({}, "spec.clusterSource: Required value"),
        ({"clusterSource": {"kubeConfig": {"key": "k"}}}, "spec.clusterSource.kubeConfig.secretRef: Required value"),
        ({"clusterSource": {"clusterProfileRef": {}}}, "spec.clusterSource.clusterProfileRef.name: Required value"),
    ],
    ids=["none", "both", "no-source", "no-secret", "no-profile-name"],
)
def test_invalid_workload_clusters_are_rejected(kube_api: client.ApiClient, spec: Spec, complaint: str) -> None:
    body = manifest(WorkloadCluster, spec)
    assert complaint in rejection(lambda: create(kube_api, WorkloadCluster, body))


# --- status rules -------------------------------------------------------------------------------------


def _columns(**over: Any) -> Spec:
    return {**columnar_status()["instanceStatusColumns"], **over}


REPLICA_STATUS_REJECTIONS: list[tuple[str, Spec, str]] = [
    ("columns-without-encoding", replica_status(instanceStatusColumns=_columns()),
     "instanceStatusColumns requires instanceStatusEncoding; an unmarked status carries only instanceStatuses"),
    ("encoding-without-columns", replica_status(instanceStatusEncoding="ColumnarV2"),
     "instanceStatusEncoding: ColumnarV2 requires instanceStatusColumns and forbids instanceStatuses"),
    ("encoding-with-dense-rows", replica_status(instanceStatusEncoding="ColumnarV2",
                                                instanceStatusColumns=_columns()),
     "instanceStatusEncoding: ColumnarV2 requires instanceStatusColumns and forbids instanceStatuses"),
    ("bad-encoding", columnar_status(instanceStatusEncoding="DenseV1"),
     "status.instanceStatusEncoding: Unsupported value"),
    ("empty-entry", columnar_status(instanceStatusColumns=_columns(entries=[{"index": 1}])),
     "an entry must carry at least one of conditions, readySince, operation, lastFailure, or announced"),
    ("zero-incarnation", columnar_status(instanceStatusColumns=_columns(incarnations=[{"value": 0, "indexes": "1"}])),
     "an incarnation group value must be nonzero; zero is the absent default"),
    ("index-set-trailing-dash", columnar_status(instanceStatusColumns=_columns(members="0-")),
     "status.instanceStatusColumns.members"),
    ("index-set-leading-zero", columnar_status(instanceStatusColumns=_columns(admitted="01")),
     "status.instanceStatusColumns.admitted"),
    ("index-set-space", columnar_status(instanceStatusColumns=_columns(
        phases=[{"value": "Ready", "indexes": "0, 1"}])), "status.instanceStatusColumns.phases[0].indexes"),
    ("bad-phase", columnar_status(instanceStatusColumns=_columns(phases=[{"value": "Dead", "indexes": "0"}])),
     "status.instanceStatusColumns.phases[0].value: Unsupported value"),
    ("zero-pod-count", columnar_status(instanceStatusColumns=_columns(podCounts=[{"value": 0, "indexes": "0"}])),
     "status.instanceStatusColumns.podCounts[0].value"),
    ("empty-revision", columnar_status(instanceStatusColumns=_columns(
        runningRevisions=[{"value": "", "indexes": "0"}])), "status.instanceStatusColumns.runningRevisions[0].value"),
    ("empty-phases", columnar_status(instanceStatusColumns=_columns(phases=[])),
     "status.instanceStatusColumns.phases"),
    ("negative-row-order", columnar_status(instanceStatusColumns=_columns(rowOrder=[-1])),
     "status.instanceStatusColumns.rowOrder[0]"),
    ("active-ordinal-two", replica_status(instanceStatuses=[{"index": 0, "activeOrdinal": 2}]),
     "status.instanceStatuses[0].activeOrdinal"),
    ("bad-operation-type", replica_status(instanceStatuses=[{"index": 0, "operation": {"type": "Evict"}}]),
     "status.instanceStatuses[0].operation.type: Unsupported value"),
    ("bad-migration-phase", replica_status(migrations=[{"requestUUID": "u", "phase": "Flying"}]),
     "status.migrations[0].phase: Unsupported value"),
    ("bad-migration-trigger", replica_status(migrations=[{"requestUUID": "u", "trigger": "Cron"}]),
     "status.migrations[0].trigger: Unsupported value"),
    ("bad-retry-state", replica_status(retryBlocks=[{"targetRevision": "r", "state": "Waiting"}]),
     "status.retryBlocks[0].state: Unsupported value"),
    ("bad-hold-gate", replica_status(rolloutHold={"gate": "Quota"}), "status.rolloutHold.gate: Unsupported value"),
    ("placement-generation-zero", replica_status(placementObservedGeneration=0),
     "status.placementObservedGeneration"),
    ("traffic-over-100", replica_status(traffic=[{"revisionName": "r", "percent": 101}]), "status.traffic[0].percent"),
]


@pytest.mark.integration
@pytest.mark.parametrize(("status", "complaint"), [(s, c) for _, s, c in REPLICA_STATUS_REJECTIONS],
                         ids=[i for i, _, _ in REPLICA_STATUS_REJECTIONS])
def test_invalid_replica_status_is_rejected(kube_api: client.ApiClient, ns: str, status: Spec,
                                            complaint: str) -> None:
    created = create(kube_api, InferenceReplica, manifest(InferenceReplica, replica_spec()), ns)
    created["status"] = status
    assert complaint in rejection(lambda: replace(kube_api, InferenceReplica, created, ns, status=True))


def _isvc_status(**over: Any) -> Spec:
    return {**full_isvc_status(), **over}


ISVC_STATUS_REJECTIONS: list[tuple[str, Spec, str]] = [
    ("bad-rollout-phase", _isvc_status(components={"engine": {"rolloutPhase": "Baking"}}),
     "status.components.engine.rolloutPhase: Unsupported value"),
    ("bad-failure-reason", _isvc_status(canary={"failed": {"reason": "Timeout", "time": T0}}),
     "status.canary.failed.reason: Unsupported value"),
    ("traffic-over-100", _isvc_status(components={"engine": {"traffic": [{"percent": 101}]}}),
     "status.components.engine.traffic[0].percent"),
    ("bad-managed-by", _isvc_status(components={"engine": {"autoscaler": {"managedBy": "keda"}}}),
     "status.components.engine.autoscaler.managedBy: Unsupported value"),
    ("bad-placement-phase", _isvc_status(placement={"phase": "Won"}), "status.placement.phase: Unsupported value"),
    ("bad-candidate-phase", _isvc_status(placement={"candidates": [{"cluster": "a", "phase": "Racing"}]}),
     "status.placement.candidates[0].phase: Unsupported value"),
    ("plan-revision-zero", _isvc_status(placement={"plan": {"revision": 0}}), "status.placement.plan.revision"),
    ("too-many-component-matches", _isvc_status(placement={"candidates": [{"allocation": {
        "componentMatches": [{"component": "engine"}] * 3}}]}),
     "status.placement.candidates[0].allocation.componentMatches: Too many"),
    ("bad-migration-mode", _isvc_status(migrationHistory=[{"id": "x", "mode": "Live"}]),
     "status.migrationHistory[0].mode: Unsupported value"),
    ("bad-transition-status", _isvc_status(modelStatus={"transitionStatus": "Done"}),
     "status.modelStatus.transitionStatus: Unsupported value"),
    ("bad-run-outcome", _isvc_status(rollout={"lastRun": {"outcome": "Aborted"}}),
     "status.rollout.lastRun.outcome: Unsupported value"),
    ("pinned-group-two-progressions", _isvc_status(rollout={"activeRun": {"plan": {"groups": [{"group": {
        "components": ["engine"], "blueGreen": {}, "rollingUpdate": {}}}]}}}), ONE_PROGRESSION),
    ("bad-coordination-phase", _isvc_status(rolloutCoordination={"groups": [{"phase": "Flipping"}]}),
     "status.rolloutCoordination.groups[0].phase: Unsupported value"),
    ("bad-condition-status", _isvc_status(conditions=[condition(status="Maybe")]), "status.conditions[0].status"),
]


@pytest.mark.integration
@pytest.mark.parametrize(("status", "complaint"), [(s, c) for _, s, c in ISVC_STATUS_REJECTIONS],
                         ids=[i for i, _, _ in ISVC_STATUS_REJECTIONS])
def test_invalid_inference_service_status_is_rejected(kube_api: client.ApiClient, ns: str, status: Spec,
                                                      complaint: str) -> None:
    created = create(kube_api, InferenceService, manifest(InferenceService, {"engine": {}}), ns)
    created["status"] = status
    assert complaint in rejection(lambda: replace(kube_api, InferenceService, created, ns, status=True))


@pytest.mark.integration
def test_printer_columns_read_the_status(kube_api: client.ApiClient, ns: str) -> None:
    created = create(kube_api, InferenceService, manifest(InferenceService, full_isvc_spec()), ns)
    created["status"] = full_isvc_status()
    replace(kube_api, InferenceService, created, ns, status=True)
    info = InferenceService.crd
    method, url, headers, _, _ = kube_api.param_serialize(
        "GET", f"/apis/{info.group}/{info.version}/namespaces/{ns}/{info.plural}/{created['metadata']['name']}",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}, auth_settings=["BearerToken"])
    response = kube_api.call_api(method, url, headers)
    response.read()
    table = json.loads(response.data)
    names = [c["name"] for c in table["columnDefinitions"]]
    cells = dict(zip(names, table["rows"][0]["cells"], strict=True))
    assert cells["Ready"] == "True"
    assert cells["URL"] == "http://llama.ns.example.com"
    assert cells["Rollout"] == "Canarying"
    assert cells["Step"] == 1
    assert cells["Canary%"] == 50


# --- no credentials in Prometheus headers or addresses (issue 10) --------------------------------

CREDENTIAL_HEADERS = [
    {"Authorization": "Bearer abc"}, {"authorization": "x"}, {"Proxy-Authorization": "Basic dTpw"},
    {"Cookie": "session=abc"}, {"X-Api-Key": "k"}, {"X-Auth-Token": "t"}, {"X-Amz-Security-Token": "t"},
    {"Ocp-Apim-Subscription-Key": "k"}, {"X-Access-Token": "t"}, {"X-Session-Id": "s"},
    {"X-Forwarded-Access": "Bearer abc"}, {"X-Custom": "basic dXNlcjpwdw=="}, {"X-Custom": "  Token abc"},
    {"X-Scope-OrgID": "team-a", "X-Client-Secret": "s"},
]
ALLOWED_HEADERS = [{"X-Scope-OrgID": "team-a"}, {"X-Grafana-Org-Id": "3"}, {"Accept": "application/json"},
                   {"X-Tenant": "Bearer-less value"}]
POINTS_TO_AUTHREF = "put the credential in a Secret and name it in authRef"


def _with_headers(headers: dict[str, str]) -> tuple[Spec, Spec]:
    """An InferenceService spec and a RolloutPolicy spec whose canary sends `headers`."""
    isvc = full_isvc_spec()
    isvc["rollout"]["groups"][0]["canary"]["prometheus"]["headers"] = headers
    policy = rollout_policy_spec()
    policy["canary"]["prometheus"]["headers"] = headers
    return isvc, policy


@pytest.mark.integration
@pytest.mark.parametrize("headers", CREDENTIAL_HEADERS, ids=lambda h: ",".join(f"{k}={v}" for k, v in h.items()))
def test_credential_headers_are_rejected_pointing_to_auth_ref(kube_api: client.ApiClient, ns: str,
                                                              headers: dict[str, str]) -> None:
    from servingops.api_models.credential_headers import credential_headers

    isvc, policy = _with_headers(headers)
    assert POINTS_TO_AUTHREF in rejection(
        lambda: create(kube_api, InferenceService, manifest(InferenceService, isvc), ns))
    assert POINTS_TO_AUTHREF in rejection(lambda: create(kube_api, RolloutPolicy, manifest(RolloutPolicy, policy), ns))
    # The worker's own rule (the ConfigMap, the model) refuses exactly what admission refuses.
    assert credential_headers(headers)


@pytest.mark.integration
@pytest.mark.parametrize("headers", ALLOWED_HEADERS, ids=lambda h: ",".join(h))
def test_tenant_headers_are_admitted(kube_api: client.ApiClient, ns: str, headers: dict[str, str]) -> None:
    from servingops.api_models.credential_headers import credential_headers

    isvc, policy = _with_headers(headers)
    created = create(kube_api, InferenceService, manifest(InferenceService, isvc), ns)
    assert created["spec"]["rollout"]["groups"][0]["canary"]["prometheus"]["headers"] == headers
    create(kube_api, RolloutPolicy, manifest(RolloutPolicy, policy), ns)
    assert not credential_headers(headers)


@pytest.mark.integration
def test_server_address_with_user_information_is_rejected(kube_api: client.ApiClient, ns: str) -> None:
    isvc = full_isvc_spec()
    prometheus = isvc["rollout"]["groups"][0]["canary"]["prometheus"]
    prometheus.pop("providerRef")
    prometheus["serverAddress"] = "https://reader:hunter2@prometheus.monitoring.svc:9090"
    assert "serverAddress must not carry credentials" in rejection(
        lambda: create(kube_api, InferenceService, manifest(InferenceService, isvc), ns))
    prometheus["serverAddress"] = "https://prometheus.monitoring.svc:9090/prefix?a=b@c"
    create(kube_api, InferenceService, manifest(InferenceService, isvc), ns)


@pytest.mark.unit
def test_a_stored_credential_header_never_reaches_the_plan() -> None:
    """An object stored before the rule existed parses without its credential headers, so the run's
    plan (status.rollout.activeRun.plan) and the samples' payloads never carry them."""
    from servingops.api_models.ome.rollout import RolloutGroup

    group = canary_group()
    group["canary"]["prometheus"]["headers"] = {"X-Scope-OrgID": "team-a", "Authorization": "Bearer abc",
                                                "X-Custom": "Basic dTpw"}
    parsed = RolloutGroup.model_validate(group)
    assert parsed.canary is not None and parsed.canary.prometheus is not None
    assert parsed.canary.prometheus.headers == {"X-Scope-OrgID": "team-a"}
    assert "Bearer abc" not in json.dumps(parsed.model_dump(mode="json"))
