"""The WorkloadCluster kind: a registered workload cluster and how the control plane connects to it."""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, Field

from servingops.api_models.base import (
    ApiModel,
    Condition,
    CrdInfo,
    KubeObject,
    KubeResource,
    PrinterColumn,
    cel,
    condition_list_schema,
    validations,
)
from servingops.api_models.ome.constants import GROUP, VERSION


class KubeConfigSource(ApiModel):
    """KubeConfigSource points at a Secret holding a kubeconfig for the cluster."""

    secret_ref: KubeObject
    """SecretRef is the Secret holding the kubeconfig."""
    key: str = "kubeconfig"
    """Key is the Secret data key holding the kubeconfig. Defaults to "kubeconfig"."""


class ClusterProfileRef(ApiModel):
    """ClusterProfileRef references a SIG-Multicluster cluster-inventory-api ClusterProfile. The
    reference is recorded but not resolved."""

    name: str
    """Name of the ClusterProfile."""


class ClusterConnectionSource(ApiModel):
    """ClusterConnectionSource is a pluggable connection (modeled on Kueue's
    MultiKueueCluster.ClusterSource): exactly one of an in-cluster kubeconfig Secret or a SIG-
    Multicluster ClusterProfile reference."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.kubeConfig) != has(self.clusterProfileRef)",
                "exactly one of kubeConfig or clusterProfileRef must be set",
            ),
        )
    )

    kube_config: KubeConfigSource | None = None
    """KubeConfig points at a Secret holding a kubeconfig for the cluster."""
    cluster_profile_ref: ClusterProfileRef | None = None
    """ClusterProfileRef references a SIG-Multicluster ClusterProfile."""


class WorkloadClusterSpec(ApiModel):
    """WorkloadClusterSpec"""

    cluster_source: ClusterConnectionSource
    """ClusterSource is how the control plane connects to this cluster."""


class WorkloadClusterStatus(ApiModel):
    """WorkloadClusterStatus"""

    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions report connection health ONLY (the Ready condition). Never capacity, never
    Kueue/quota state."""


class WorkloadCluster(KubeResource):
    """WorkloadCluster registers a workload cluster, typically a GPU cluster, that OME can place
    workloads onto. Cluster-scoped: it is fleet-level infrastructure, not a namespaced workload."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="WorkloadCluster",
        plural="workloadclusters",
        scope="Cluster",
        short_names=["wlc"],
        categories=["ome"],
        printer_columns=[
            PrinterColumn(name="Ready", type="string", json_path='.status.conditions[?(@.type=="Ready")].status'),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )

    spec: WorkloadClusterSpec | None = None
    """The desired state of the WorkloadCluster."""
    status: WorkloadClusterStatus | None = None
    """The observed state of the WorkloadCluster."""
