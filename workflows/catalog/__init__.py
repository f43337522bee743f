"""The catalog refresh process (issue #15): one CatalogSourceWorkflow per ModelCatalogSource, refreshed by a
Temporal Schedule whose ticks are CatalogRefreshTickWorkflow runs. docs/catalog.md."""

from servingops.workflows.catalog.source_workflow import CatalogSourceWorkflow
from servingops.workflows.catalog.tick import CatalogRefreshTickWorkflow

WORKFLOWS = [CatalogSourceWorkflow, CatalogRefreshTickWorkflow]

__all__ = ["WORKFLOWS", "CatalogRefreshTickWorkflow", "CatalogSourceWorkflow"]
