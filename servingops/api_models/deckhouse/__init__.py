"""The ai.deckhouse.io/v1alpha1 kinds: Model, ClusterModel, ModelCatalogSource."""

from servingops.api_models.base import KubeResource
from servingops.api_models.deckhouse.catalog_source import (
    ModelCatalogSource,
    ModelCatalogSourceSpec,
    ModelCatalogSourceStatus,
)
from servingops.api_models.deckhouse.model import ClusterModel, ClusterModelSpec, Model, ModelSpec, ModelStatus

DECKHOUSE_KINDS: list[type[KubeResource]] = [Model, ClusterModel, ModelCatalogSource]

__all__ = [
    "DECKHOUSE_KINDS",
    "ClusterModel",
    "ClusterModelSpec",
    "Model",
    "ModelCatalogSource",
    "ModelCatalogSourceSpec",
    "ModelCatalogSourceStatus",
    "ModelSpec",
    "ModelStatus",
]
