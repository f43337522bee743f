"""Payloads between the MigrationWorkflow, the InferenceReplicaWorkflow that executes the migration,
and the SDK (docs/migration.md). Every field added later needs a default: these travel in stored
histories."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from servingops.api_models.ome.migration import MigrationStatus


class MigrationAsk(BaseModel):
    """MigrationWorkflow -> InferenceReplicaWorkflow (Signal.MIGRATION_REQUEST): record this request.
    The replica judges what it owns (the Instance, its node, MigrationPolicy, the caps) and answers
    with Signal.MIGRATION_RECORD to `reply_to` once the record is in status.migrations."""

    request_uuid: str
    source_instance: int
    from_node: str
    hint_target_nodes: list[str] = []
    reason: str = ""
    requested_by: str | None = None
    requested_at: datetime | None = None
    reply_to: str
    """The asking MigrationWorkflow's id."""


class MigrationView(BaseModel):
    """What the MigrationWorkflow's `state` query answers (the SDK's `migration_state`)."""

    request_uuid: str
    replica: str | None = None
    """The InferenceReplica executing it, once resolved."""
    record: MigrationStatus | None = None
    """The last record the replica reported (None before it answered, or when refused before it)."""
    phases: list[str] = []
    """Every phase the replica reported, in order."""
    refused: str | None = None
    """Why the request never reached a replica (unknown component, not OMENative, bad instance)."""
    annotation_removed: bool = False
    cancel_requested: bool = False
    done: bool = False


__all__ = ["MigrationAsk", "MigrationView"]
