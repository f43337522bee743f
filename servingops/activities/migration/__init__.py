"""Activities of surge migration (docs/migration.md)."""
