"""The catalog refresh process (issue #15): one CatalogSourceWorkflow per ModelCatalogSource
(`source_workflow`), refreshed by a Temporal Schedule whose ticks are CatalogRefreshTickWorkflow runs
(`tick`); `rules` holds the pure rules. docs/catalog.md. Nothing is imported here: the worker's
registry imports the workflow modules it registers."""
