"""Builders of OME objects (InferenceService, InferenceReplica, RolloutPolicy, WorkloadCluster specs and
statuses) shared by the model and CRD tests."""

from __future__ import annotations

from typing import Any

T0 = "2026-11-29T10:00:00Z"

T1 = "2026-11-29T10:05:00Z"

HASH = "a" * 64


def _container(name: str, image: str) -> dict[str, Any]:
    return {"name": name, "image": image, "resources": {"limits": {"nvidia.com/gpu": "1"}},
            "env": [{"name": "TP", "value": "2"}]}


def analysis(**over: Any) -> dict[str, Any]:
    return {
        "interval": "30s",
        "initialDelay": "1m",
        "failureLimit": 2,
        "onInconclusive": "RollbackOnStall",
        "metrics": [
            {"name": "error-rate", "query": 'sum(rate(errors{svc="{{.CanaryService}}"}[1m]))',
             "operator": "LT", "threshold": "0.05"},
            {"name": "p99", "query": "histogram_quantile(0.99, x)", "operator": "LTE", "threshold": "1.5e2"},
        ],
        **over,
    }


def canary_group(**over: Any) -> dict[str, Any]:
    return {
        "components": ["engine", "decoder"],
        "canary": {
            "steps": [
                {"capacity": "25%", "traffic": 10, "pause": {}},
                {"capacity": 2, "traffic": 50, "pause": {"duration": "10m"}, "analysis": analysis()},
                {"capacity": "100%", "traffic": 100},
            ],
            "prometheus": {"providerRef": {"name": "fleet-prom"}, "headers": {"X-Scope-OrgID": "team-a"},
                           "authRef": {"name": "prom-token", "key": "token"}},
            "scaleDownDelaySeconds": 30,
            "readyTimeout": "15m",
        },
        "policyRef": {"name": "standard-canary", "progression": "canary", "kind": "RolloutPolicy"},
        **over,
    }


def engine_spec() -> dict[str, Any]:
    return {
        "containers": [_container("sidecar", "busybox:1.36")],
        "volumes": [{"name": "cache", "emptyDir": {}}],
        "nodeSelector": {"gpu": "h100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {}},
        "hostIPC": True,
        "setHostnameAsFQDN": False,
        "overhead": {"cpu": "250m"},
        "runner": _container("ome-container", "vllm/vllm-openai:v0.8.0"),
        "leader": {"runner": _container("leader", "vllm/vllm-openai:v0.8.0"), "nodeSelector": {"rack": "a"}},
        "worker": {"size": 2, "runner": _container("worker", "vllm/vllm-openai:v0.8.0")},
        "minReplicas": 1,
        "maxReplicas": 4,
        "timeoutSeconds": 600,
        "labels": {"team": "a"},
        "annotations": {"note": "x"},
        "servicePortAppProtocols": {"http": "kubernetes.io/h2c"},
        "minAvailable": 1,
        "maxUnavailable": "25%",
        "deploymentStrategy": {"type": "RollingUpdate"},
        "lifecycle": {
            "restartPolicy": "RecreateInstanceOnPodRestart",
            "updateStrategy": {"type": "SurgeThenDrain", "rollingUpdate": {"partition": 0, "maxSurge": 1,
                                                                          "maxUnavailable": "25%"},
                               "inPlaceUpdateStrategy": {"gracePeriodSeconds": 30,
                                                         "markNotReadyDuringLifecycle": True}},
            "readyPolicy": "AllPodReady",
            "instanceReadyTimeout": "20m",
            "minReadySeconds": 10,
            "migrationPolicy": {"mode": "Auto"},
        },
        "autoscaler": {"class": "HPA", "hpa": {"metrics": [{"type": "Resource", "resource": {"name": "cpu"}}],
                                               "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}}}},
        "autoscalerPolicyRef": {"name": "gpu-scaler", "kind": "AutoscalerPolicy"},
        "topologyKey": "nvidia.com/gpu.clique",
        "topologySpread": "Preferred",
        "topologySpreadKey": "topology.kubernetes.io/zone",
        "acceleratorOverride": {"acceleratorClass": "h100-80g"},
    }


def full_isvc_spec() -> dict[str, Any]:
    """Every block of InferenceServiceSpec, with every default the apiserver would add spelled out."""
    return {
        "deploymentMode": "OMENative",
        "engine": engine_spec(),
        "decoder": {
            "runner": _container("decoder", "vllm/vllm-openai:v0.8.0"),
            "minReplicas": 1,
            "autoscaler": {"class": "KEDA", "keda": {
                "triggers": [{"type": "prometheus", "metadata": {"query": "sum(x)", "threshold": "5"}}],
                "pollingInterval": 15, "cooldownPeriod": 120, "idleReplicaCount": 0,
                "advanced": {"restoreToOriginalReplicaCount": True}, "fallback": {"replicas": 1}}},
            "topologySpread": "Required",
        },
        "router": {"runner": _container("router", "ome/router:v1"), "config": {"policy": "cache-aware"},
                   "minReplicas": 2},
        "model": {"name": "llama-3-70b", "kind": "ClusterBaseModel", "apiGroup": "ome.io",
                  "fineTunedWeights": ["adapter-a"],
                  "overlays": [{"name": "draft-model", "kind": "ClusterBaseModel", "apiGroup": "ome.io"}]},
        "runtime": {"name": "vllm-pd", "kind": "ClusterServingRuntime", "apiGroup": "ome.io", "autoSync": True},
        "acceleratorSelector": {"policy": "BestFit", "constraints": {
            "minMemory": 80, "maxMemory": 141, "minComputePerformanceTFLOPS": 900,
            "minArchitectureVersion": "9.0", "requiredFeatures": ["fp8"], "excludedClasses": ["a10"],
            "architectureFamilies": ["nvidia-hopper"], "preferredPrecisions": ["fp8", "fp16"]}},
        "traffic": {"algorithm": "ConsistentHash",
                    "consistentHash": {"type": "Header", "headers": [{"name": "x-session-id"}]},
                    "endpointOverride": {"type": "Header", "headers": [{"name": "X-Endpoint-HostPort"}]}},
        "rollout": {
            "groupOrdering": "Concurrent",
            "pairingProtocol": "nixl-v2",
            "groups": [
                canary_group(),
                {"components": ["router"], "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
                 "maintainRatio": {"tolerance": 10}},
            ],
        },
        "scalingPolicy": {"mode": "Proportional",
                          "proportional": {"anchor": "engine", "ratios": {"decoder": "0.5", "router": 1}}},
        "placement": {
            "policy": "ClusterAffinity",
            "mode": "Split",
            "clusterAffinity": [
                {"weight": 3, "matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100", "h200"]},
                                                   {"key": "capacity", "operator": "Gt", "values": ["8"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["legacy"]}],
                 "matchExpressions": [{"key": "region", "operator": "Exists"}]},
            ],
            "maxSurge": 0,
            "split": {"replicas": 6, "maxReplicasPerCluster": 4},
        },
        "routing": {
            "enabled": True,
            "capacityFactors": {"gpu-east": "1.5", "gpu-west": 2},
            "probe": {"path": "/health", "method": "GET", "acceptStatuses": [200, 204], "gateStatuses": [500, 503],
                      "period": "10s", "timeout": "2s", "failureThreshold": 3, "successThreshold": 2,
                      "allFailedPolicy": "PreserveTraffic"},
            "capacity": {"path": "/capacity", "method": "POST", "format": "openmetrics", "options": {"metric": "x"},
                         "period": "30s", "timeout": "5s", "samples": 5, "quorum": 3, "maxAge": "2m"},
            "publisher": {"options": {"weights": "capacity"}},
        },
        "ttlSecondsAfterCreation": 86400,
    }


def condition(type_: str = "Ready", status: str = "True", reason: str = "Ready") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": T0,
            "observedGeneration": 1}


def canary_status(**over: Any) -> dict[str, Any]:
    return {
        "targetID": "t-1",
        "canaryRevisionHash": "7f9c",
        "stableRevisionHash": "51ab",
        "currentStep": 1,
        "stepEnteredTime": T0,
        "observedTrafficWeight": 50,
        "promotedThrough": "7f9c",
        "preStepHold": False,
        "analysisFailedChecks": 1,
        "lastEvaluationTime": T1,
        "lastConclusiveEvaluationTime": T1,
        "metricResults": [{"name": "error-rate", "value": "0.012", "threshold": "0.05", "operator": "LT",
                           "passed": True, "message": "", "time": T1}],
        "capacityWaitSince": T0,
        **over,
    }


def full_isvc_status() -> dict[str, Any]:
    rolled = {"components": ["engine", "decoder"], "canary": {"steps": [{"capacity": "100%", "traffic": 100}]}}
    return {
        "observedGeneration": 1,
        "conditions": [condition("EngineReady"), condition()],
        "url": "http://llama.ns.example.com",
        "address": {"url": "http://llama.ns.svc.cluster.local"},
        "addresses": [{"name": "cluster-local", "url": "http://llama.ns.svc.cluster.local"}],
        "components": {
            "engine": {
                "url": "http://llama-engine.ns.example.com",
                "restURL": "http://llama-engine.ns.example.com/v1",
                "rolloutPhase": "Canarying",
                "latestReadyRevision": "llama-engine-rev-7f9c",
                "latestRolledoutRevision": "llama-engine-rev-51ab",
                "previousRolledoutRevision": "llama-engine-rev-0000",
                "traffic": [
                    {"revisionName": "llama-engine-rev-51ab", "percent": 50, "tag": "prev", "latestRevision": True,
                     "pairingProtocol": "nixl-v2"},
                    {"revisionName": "llama-engine-rev-7f9c", "percent": 50, "tag": "latest"},
                ],
                "canary": canary_status(),
                "selectedAccelerator": {"acceleratorClass": "h100", "reason": "BestFit",
                                        "nodeSelector": {"gpu": "h100"}},
                "lifecycle": {"observedGeneration": 1, "currentRevision": "r1", "updateRevision": "r2",
                              "replicas": 2, "readyReplicas": 2, "servingReplicas": 2, "availableReplicas": 2,
                              "updatedReplicas": 1, "updatedReadyReplicas": 1, "labelSelector": "app=x",
                              "conditions": [condition("Available")],
                              "rolloutHold": {"gate": "Budget", "reason": "surge spent", "target": "r2",
                                              "since": T0}},
                "autoscaler": {"class": "HPA", "managedBy": "ome", "specSource": "isvc", "currentReplicas": 2,
                               "desiredReplicas": 2, "lastScaleTime": T0,
                               "conditions": [condition("AbleToScale")]},
                "scaleTargetRef": {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica",
                                   "name": "llama-engine"},
            },
            "router": {"rolloutPhase": "Stable"},
        },
        "modelStatus": {"transitionStatus": "UpToDate",
                        "modelRevisionStates": {"activeModelState": "Loaded", "targetModelState": ""},
                        "lastFailureInfo": {"location": "pod-0", "reason": "ModelLoadFailed", "message": "oom",
                                            "time": T0, "exitCode": 137},
                        "modelCopies": {"failedCopies": 0, "totalCopies": 2}},
        "migrationHistory": [{"id": "6c1e", "component": "engine", "instance": 0, "replacementInstance": 2,
                              "mode": "Surge", "phase": "Completed", "requestedAt": T0, "startedAt": T0,
                              "completedAt": T1, "reason": "fragmentation", "requestedBy": "ops",
                              "events": [{"at": T0, "message": "surge ready"}], "outcomeReason": "Drained"}],
        "mountedOverlays": [{"name": "draft-model", "envVar": "OVERLAY_DRAFT_MODEL_MODEL_PATH",
                             "mountPath": "/opt/ml/model-overlays/draft-model", "distribution": "PVC"}],
        "traffic": {"algorithm": "ConsistentHash",
                    "backendPolicyResource": {"apiVersion": "gateway.envoyproxy.io/v1alpha1",
                                              "kind": "BackendTrafficPolicy", "name": "llama"},
                    "targetedHTTPRoutes": ["llama"], "conditions": [condition("BackendPolicyReady")]},
        "canary": canary_status(failed={"reason": "CapacityTimeout", "time": T1}),
        "placement": {
            "phase": "Placed",
            "cluster": "",
            "plan": {"id": "p1", "mode": "Split", "revision": 1, "sourceUID": "uid-1", "observedGeneration": 1,
                     "inputDigest": "d", "pauseSurge": False, "requestedReplicas": 6, "assignedReplicas": 6,
                     "unassignedReplicas": 0, "originalUnassignedReplicas": 0,
                     "singleMove": {"selected": "gpu-east", "cursor": "gpu-west"}},
            "candidates": [{
                "cluster": "gpu-east", "phase": "Admitted", "endpoint": "http://llama.gpu-east.example.com",
                "admittedReplicas": 3, "readyReplicas": 3, "appliedPlanID": "p1", "observationKnown": True,
                "allocation": {"clusterUID": "c-1", "matched": True, "matchingTerms": [0], "weight": 3,
                               "originalReplicas": 3, "currentReplicas": 3, "desiredReplicas": 3,
                               "replacementStartedAt": "2026-11-29T10:00:00.123456Z",
                               "desiredHome": {"inputDigest": "d", "replicaFloors": [
                                   {"component": "engine", "replicas": 3}]},
                               "componentMatches": [{"component": "decoder", "matchingTerms": [0], "weight": 1}],
                               "capacity": {"demandFingerprint": HASH, "replicas": 3,
                                            "demandContract": {"fingerprint": HASH, "components": [
                                                {"component": "engine", "renderingHash": HASH}]},
                                            "pools": [{"resourceName": "nvidia.com/gpu", "resourceFlavor": "h100",
                                                       "demand": 8, "allocatable": 24, "observedAt": T0,
                                                       "attribution": {"flavorUID": "f-1", "complete": True}}]}},
                "autoscaling": {"policies": [{"name": "gpu-scaler", "portableDigest": "ap1:x"}],
                                "components": {"engine": {"resolvedDigest": "r", "ready": True}}, "ready": True},
                "rollout": {"activeRunID": "run-1",
                            "activeGroups": [{"source": "Policy", "policyName": "standard-canary",
                                              "portableDigest": "rp1:x"}],
                            "lastRun": {"outcome": "Completed", "digest": "rp1:y"}},
            }],
        },
        "pinnedRevisionName": "",
        "rollout": {
            "activeRun": {"runID": "run-1", "openedAt": T0, "pinnedAt": T0,
                          "targetRevisions": [{"component": "engine", "revision": "7f9c", "stableRevision": "51ab"}],
                          "plan": {"groups": [{"source": "Inline", "portableDigest": "rp1:z", "group": rolled}]}},
            "lastRun": {"outcome": "RolledBack", "openedAt": T0, "closedAt": T1,
                        "groups": [{"source": "Policy", "portableDigest": "rp1:x",
                                    "policyRef": {"name": "standard-canary", "progression": "canary",
                                                  "kind": "RolloutPolicy"}}]},
            "groups": [{"index": 0, "source": "Inline", "observedDigest": "rp1:z",
                        "shadowedPolicyRef": {"name": "standard-canary", "wouldPinDigest": "rp1:x"}}],
        },
        "rolloutCoordination": {"groups": [{"name": "1", "components": ["router"], "policy": "RollingUpdate",
                                            "phase": "Surging", "compositePhase": "router.Surging",
                                            "observedSurge": "25%", "lastTransitionTime": T0,
                                            "observedRatio": {"original": {"router": 2}, "current": {"router": 3}}}]},
    }


def replica_spec(**over: Any) -> dict[str, Any]:
    template = {"metadata": {"labels": {"ome.io/runner": "default"}},
                "spec": {"containers": [_container("main", "vllm/vllm-openai:v0.8.0")]}}
    return {
        "component": "engine",
        "runners": [{"name": "default", "size": 1, "template": template}],
        "replicas": 2,
        "minReadySeconds": 5,
        "topologySpread": "Preferred",
        "pairingProtocol": "nixl-v2",
        "lifecycle": {"restartPolicy": "None", "readyPolicy": "None"},
        "pacing": {"partition": 1, "rollbackToRevision": "llama-engine-51ab"},
        "autoscaler": {"class": "External"},
        "paused": False,
        "pauseMode": "Recover",
        "revisionHistoryLimit": 5,
        **over,
    }


def replica_status(**over: Any) -> dict[str, Any]:
    return {
        "observedGeneration": 1,
        "replicas": 2,
        "readyReplicas": 2,
        "servingReplicas": 2,
        "availableReplicas": 2,
        "updatedReplicas": 2,
        "updatedReadyReplicas": 2,
        "currentRevision": "llama-engine-51ab",
        "updateRevision": "llama-engine-51ab",
        "labelSelector": "ome.io/inferencereplica=llama-engine",
        "instanceStatuses": [{
            "index": 0, "incarnation": 1, "phase": "Migrating", "runningRevision": "llama-engine-51ab",
            "targetRevision": "llama-engine-51ab", "podCount": 1, "servingPodCount": 1, "availablePodCount": 1,
            "admitted": True, "conditions": [condition("AllPodsReady")], "readySince": T0, "activeOrdinal": 1,
            "operation": {"id": "op-1", "type": "Migrate", "step": "WaitReady", "startedAt": T0,
                          "lastProgressAt": T0, "retryCount": 0, "surgeIndex": 2, "fromNode": "node-a",
                          "hintTargetNodes": ["node-b"], "requestUUID": "6c1e"},
            "lastFailure": {"podName": "p", "containerName": "main", "reason": "OOMKilled", "exitCode": 137,
                            "time": T0},
            "announced": ["GangNoColocation@1"],
        }],
        "retryBlocks": [{"targetRevision": "llama-engine-7f9c", "state": "Backoff", "attemptsStarted": 2,
                         "nextRetryAt": T1, "firstFailureAt": T0, "lastFailureAt": T0, "reason": "crash"}],
        "migrations": [{"requestUUID": "6c1e", "trigger": "Manual", "sourceInstance": 0, "surgeInstance": 2,
                        "allocatedAt": T0, "fromNode": "node-a", "hintTargetNodes": ["node-b"],
                        "phase": "SurgePending", "reason": "fragmentation", "startedAt": T0, "deadline": T1}],
        "conditions": [condition("Available")],
        "traffic": [{"revisionName": "llama-engine-rev-51ab", "percent": 100, "latestRevision": True}],
        "coordinationGroupRef": "0",
        "rolloutHold": {"gate": "Pairing", "reason": "waiting", "target": "llama-engine-7f9c", "since": T0},
        **over,
    }


def columnar_status(**over: Any) -> dict[str, Any]:
    status = replica_status()
    del status["instanceStatuses"]
    status["instanceStatusEncoding"] = "ColumnarV2"
    status["instanceStatusColumns"] = {
        "members": "0-2,5",
        "rowOrder": [5, 0, 1, 2],
        "phases": [{"value": "Ready", "indexes": "0-2"}, {"value": "Creating", "indexes": "5"}],
        "runningRevisions": [{"value": "llama-engine-51ab", "indexes": "0-2"}],
        "targetRevisions": [{"value": "llama-engine-51ab", "indexes": "0-2,5"}],
        "incarnations": [{"value": -3, "indexes": "1"}],
        "podCounts": [{"value": 1, "indexes": "0-2,5"}],
        "servingPodCounts": [{"value": 1, "indexes": "0-2"}],
        "availablePodCounts": [{"value": 1, "indexes": "0-2"}],
        "admitted": "0-2",
        "activeOrdinalOne": "1",
        "entries": [{"index": 0, "readySince": T0}, {"index": 5, "announced": ["Held@2"]}],
    }
    status.update(over)
    return status


def rollout_policy_spec() -> dict[str, Any]:
    return {"canary": {
        "steps": [{"capacity": "10%", "traffic": 5, "pause": {}},
                  {"capacity": "50%", "traffic": 50, "analysis": analysis()},
                  {"capacity": "100%", "traffic": 100}],
        "prometheus": {"providerRef": {"name": "fleet-prom"}},
        "readyTimeout": "10m",
    }}


def workload_cluster_spec(**source: Any) -> dict[str, Any]:
    return {"clusterSource": source or {"kubeConfig": {"secretRef": {"name": "gpu-east", "namespace": "ome"},
                                                        "key": "kubeconfig"}}}
