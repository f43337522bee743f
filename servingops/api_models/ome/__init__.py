"""Pydantic models of the ome.io/v1beta1 kinds this project serves, the single source of their CRDs.

Root kinds: InferenceService, RolloutPolicy, AutoscalerPolicy, InferenceReplica, TrafficMap, BaseModel,
ServingRuntime, BenchmarkJob (namespaced)
and WorkloadCluster, AcceleratorQuota, AcceleratorClass, ClusterBaseModel, FineTunedWeight,
ClusterServingRuntime (cluster-scoped). Every OME type they reference is modelled field by field; core Kubernetes
types (Container, Volume, Affinity, ...) are embedded opaquely.
"""

from servingops.api_models.base import KubeResource
from servingops.api_models.ome.accelerator_class import AcceleratorClass, AcceleratorClassSpec, AcceleratorClassStatus
from servingops.api_models.ome.accelerator_quota import AcceleratorQuota, AcceleratorQuotaSpec, AcceleratorQuotaStatus
from servingops.api_models.ome.autoscaler_policy import AutoscalerPolicy, AutoscalerPolicySpec, AutoscalerPolicyStatus
from servingops.api_models.ome.benchmark_job import BenchmarkJob, BenchmarkJobSpec, BenchmarkJobStatus
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
    AutoscalerPolicy,
    InferenceReplica,
    TrafficMap,
    WorkloadCluster,
    AcceleratorQuota,
    AcceleratorClass,
    BaseModel,
    ClusterBaseModel,
    FineTunedWeight,
    ServingRuntime,
    ClusterServingRuntime,
    BenchmarkJob,
]

__all__ = [
    "API_VERSION",
    "GROUP",
    "OME_KINDS",
    "VERSION",
    "AcceleratorClass",
    "AcceleratorClassSpec",
    "AcceleratorClassStatus",
    "AcceleratorQuota",
    "AcceleratorQuotaSpec",
    "AcceleratorQuotaStatus",
    "AutoscalerPolicy",
    "AutoscalerPolicySpec",
    "AutoscalerPolicyStatus",
    "BaseModel",
    "BaseModelSpec",
    "BenchmarkJob",
    "BenchmarkJobSpec",
    "BenchmarkJobStatus",
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
