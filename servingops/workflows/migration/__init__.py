"""MigrationWorkflow: one per migration request (docs/migration.md)."""
