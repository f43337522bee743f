"""Pydantic models of the ome.io/v1beta1 kinds this project serves, the single source of their CRDs.

Root kinds: InferenceService, RolloutPolicy, InferenceReplica, TrafficMap, BaseModel, ServingRuntime (namespaced)
and WorkloadCluster, AcceleratorQuota, ClusterBaseModel, FineTunedWeight, ClusterServingRuntime (cluster-scoped). Every
OME type they reference is modelled field by field; core Kubernetes types (Container, Volume,
Affinity, ...) are embedded opaquely.
"""

from servingops.api_models.base import KubeResource
from servingops.api_models.ome.accelerator_quota import AcceleratorQuota, AcceleratorQuotaSpec, AcceleratorQuotaStatus
from servingops.api_models.ome.constants import API_VERSION, GROUP, VERSION
from servingops.api_models.ome.inference_service import InferenceService, InferenceServiceSpec, InferenceServiceStatus
from servingops.api_models.ome.models import (
    BaseModel,
    BaseModelSpec,
    ClusterBaseModel,
    FineTunedWeight,
    FineTunedWeightSpec,
    ModelStatusSpec,
)
from servingops.api_models.ome.replica import InferenceReplica, InferenceReplicaSpec, InferenceReplicaStatus
from servingops.api_models.ome.rollout_policy import RolloutPolicy, RolloutPolicySpec, RolloutPolicyStatus
from servingops.api_models.ome.runtimes import (
    ClusterServingRuntime,
    ServingRuntime,
    ServingRuntimeSpec,
    ServingRuntimeStatus,
)
from servingops.api_models.ome.traffic_map import TrafficMap, TrafficMapSpec, TrafficMapStatus
from servingops.api_models.ome.workload_cluster import WorkloadCluster, WorkloadClusterSpec, WorkloadClusterStatus

OME_KINDS: list[type[KubeResource]] = [
    InferenceService,
    RolloutPolicy,
    InferenceReplica,
    TrafficMap,
    WorkloadCluster,
    AcceleratorQuota,
    BaseModel,
    ClusterBaseModel,
    FineTunedWeight,
    ServingRuntime,
    ClusterServingRuntime,
]

__all__ = [
    "API_VERSION",
    "GROUP",
    "OME_KINDS",
    "VERSION",
    "AcceleratorQuota",
    "AcceleratorQuotaSpec",
    "AcceleratorQuotaStatus",
    "BaseModel",
    "BaseModelSpec",
    "ClusterBaseModel",
    "ClusterServingRuntime",
    "FineTunedWeight",
    "FineTunedWeightSpec",
    "InferenceReplica",
    "InferenceReplicaSpec",
    "InferenceReplicaStatus",
    "InferenceService",
    "InferenceServiceSpec",
    "InferenceServiceStatus",
    "ModelStatusSpec",
    "RolloutPolicy",
    "RolloutPolicySpec",
    "RolloutPolicyStatus",
    "ServingRuntime",
    "ServingRuntimeSpec",
    "ServingRuntimeStatus",
    "TrafficMap",
    "TrafficMapSpec",
    "TrafficMapStatus",
    "WorkloadCluster",
    "WorkloadClusterSpec",
    "WorkloadClusterStatus",
]
