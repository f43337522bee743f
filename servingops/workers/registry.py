"""Which workflows and activities one worker process serves, built from its settings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client

from servingops.activities.autoscaler_policy import AutoscalerPolicyActivities
from servingops.activities.basemodels.activities import BaseModelActivities
from servingops.activities.benchmark.activities import BenchmarkActivities
from servingops.activities.capacity.accelerator_class import AcceleratorClassActivities
from servingops.activities.capacity.accelerator_quota import AcceleratorQuotaActivities
from servingops.activities.capacity.activities import CapacityActivities
from servingops.activities.catalog.huggingface_index import CatalogIndexActivities
from servingops.activities.catalog.remote_activities import CatalogRemoteActivities
from servingops.activities.catalog.resolve import CatalogResolveActivities
from servingops.activities.catalog.schedule import CatalogScheduleActivities
from servingops.activities.catalog.store import CatalogStoreActivities
from servingops.activities.host import HostActivities
from servingops.activities.kubernetes import KubernetesActivities
from servingops.activities.migration.activities import MigrationActivities
from servingops.activities.model_files.activity import inspect as inspect_model
from servingops.activities.oci.activities import (
    OciActivities,
    RegistryTarget,
    SecretRef,
    kubernetes_secret_credentials,
)
from servingops.activities.operator_config import (
    IngressConfigReader,
    OperatorConfigActivities,
    QuotaConfigReader,
)
from servingops.activities.placement.activities import PlacementActivities
from servingops.activities.prometheus import PrometheusActivities
from servingops.activities.replica.activities import ReplicaActivities
from servingops.activities.routing.activities import RoutingActivities
from servingops.activities.routing.publisher import PublisherActivities
from servingops.activities.serving.activities import ServingActivities
from servingops.activities.serving.autoscaler import AutoscalerActivities, provider_bindings
from servingops.activities.serving.runtimes import RuntimeActivities
from servingops.activities.serving.traffic_policy import BackendPolicyActivities
from servingops.activities.sources.activities import SourceActivities
from servingops.activities.uploads.sessions import UploadActivities
from servingops.activities.workload_cluster.activities import WorkloadClusterActivities
from servingops.workers.settings import WorkerSettings
from servingops.workflows.accelerator_class import AcceleratorClassWorkflow
from servingops.workflows.accelerator_quota import AcceleratorQuotaWorkflow
from servingops.workflows.autoscaler_policy import AutoscalerPolicyWorkflow
from servingops.workflows.basemodel import BaseModelWorkflow
from servingops.workflows.benchmark_job import BenchmarkJobWorkflow
from servingops.workflows.capacity.report import AcceleratorCapacityWorkflow
from servingops.workflows.catalog.source_workflow import CatalogSourceWorkflow
from servingops.workflows.catalog.tick import CatalogRefreshTickWorkflow
from servingops.workflows.inference_service.workflow import InferenceServiceWorkflow
from servingops.workflows.migration.workflow import MigrationWorkflow
from servingops.workflows.model import ModelWorkflow
from servingops.workflows.placement.workflow import PlacementWorkflow
from servingops.workflows.replica.workflow import InferenceReplicaWorkflow
from servingops.workflows.rollout.workflow import RolloutWorkflow
from servingops.workflows.rollout_policy import RolloutPolicyWorkflow
from servingops.workflows.serving_runtime import ServingRuntimeWorkflow
from servingops.workflows.traffic_map.workflow import TrafficMapWorkflow
from servingops.workflows.workload_cluster import WorkloadClusterWorkflow


def workflows() -> Sequence[type]:
    return [ModelWorkflow, InferenceServiceWorkflow, RolloutWorkflow, RolloutPolicyWorkflow, ServingRuntimeWorkflow,
            BaseModelWorkflow, InferenceReplicaWorkflow, MigrationWorkflow, WorkloadClusterWorkflow, PlacementWorkflow,
            AcceleratorCapacityWorkflow, CatalogSourceWorkflow, CatalogRefreshTickWorkflow, TrafficMapWorkflow,
            AcceleratorClassWorkflow, AutoscalerPolicyWorkflow, AcceleratorQuotaWorkflow,
            BenchmarkJobWorkflow]


def registry_target(settings: WorkerSettings) -> RegistryTarget:
    credentials = (SecretRef(namespace=settings.controller_namespace, name=settings.registry_credentials_secret)
                   if settings.registry_credentials_secret else None)
    return RegistryTarget(address=settings.registry, repository=settings.registry_repository,
                          insecure=settings.registry_insecure, credentials_secret=credentials)


def activities(settings: WorkerSettings, api_client: client.ApiClient,
               upload_public_url: str) -> Sequence[Callable[..., Any]]:
    core = client.CoreV1Api(api_client)
    # The routes' Gateway and hostnames, and spec.traffic's translation: the operator ConfigMap's ingress
    # block, read by the serving and backend-policy activities themselves (cached a few seconds), so no
    # workflow input carries it.
    ingress = IngressConfigReader(api_client, settings.controller_namespace, settings.operator_config)
    return [
        *KubernetesActivities(api_client).all(),
        *HostActivities(settings.host_task_queue, registry_target(settings)).all(),
        *OciActivities(kubernetes_secret_credentials(core), state_dir=Path(settings.spool_dir) / ".oci-uploads").all(),
        *SourceActivities(api_client, settings.spool_dir, settings.hf_endpoint, settings.ollama_registry).all(),
        *UploadActivities(api_client, settings.spool_dir, upload_public_url, settings.controller_namespace).all(),
        inspect_model,
        *ServingActivities(api_client, ingress=ingress,
                           controller_namespace=settings.controller_namespace,
                           artifacts=f"{settings.registry}/{settings.registry_repository}").all(),
        *RuntimeActivities(api_client).all(),
        *AutoscalerActivities(api_client, provider_bindings(OperatorConfigActivities(
            api_client, settings.controller_namespace, settings.operator_config).read)).all(),
        *AutoscalerPolicyActivities(api_client).all(),
        *BackendPolicyActivities(api_client, ingress=ingress).all(),
        *ReplicaActivities(api_client, artifacts=f"{settings.registry}/{settings.registry_repository}",
                           controller_namespace=settings.controller_namespace).all(),
        *MigrationActivities(api_client, settings.controller_namespace).all(),
        *BaseModelActivities(api_client, settings.controller_namespace, kubernetes_secret_credentials(core)).all(),
        *PrometheusActivities(api_client).all(),
        *OperatorConfigActivities(api_client, settings.controller_namespace, settings.operator_config).all(),
        *WorkloadClusterActivities(api_client, settings.controller_namespace).all(),
        *PlacementActivities(api_client, settings.controller_namespace).all(),
        *CapacityActivities(api_client).all(),
        *AcceleratorClassActivities(api_client).all(),
        *AcceleratorQuotaActivities(api_client, QuotaConfigReader(
            api_client, settings.controller_namespace, settings.operator_config)).all(),
        *BenchmarkActivities(api_client, settings.controller_namespace, settings.operator_config).all(),
        *RoutingActivities(api_client, settings.controller_namespace, settings.operator_config).all(),
        *PublisherActivities(api_client).all(),
        *CatalogIndexActivities(api_client, settings.controller_namespace, settings.hf_endpoint,
                                registry=registry_target(settings),
                                credentials=kubernetes_secret_credentials(core)).all(),
        *CatalogStoreActivities(registry_target(settings), kubernetes_secret_credentials(core)).all(),
        *CatalogScheduleActivities().all(),
        *CatalogRemoteActivities(api_client, settings.controller_namespace, registry_target(settings),
                                 kubernetes_secret_credentials(core),
                                 spool_dir=settings.spool_dir).all(),
        *CatalogResolveActivities(api_client, settings.controller_namespace, registry_target(settings),
                                  kubernetes_secret_credentials(core)).all(),
    ]
