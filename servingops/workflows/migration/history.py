"""status.migrationHistory of an InferenceService: one MigrationHistoryEntry per migration that
ended, built by the MigrationWorkflow from the replica's record and kept by the InferenceService
workflow (the sole writer of its status) in a window of the most recent. Pure."""

from __future__ import annotations

from datetime import datetime

from servingops.api_models.ome.enums import ComponentType, MigrationMode, MigrationPhase
from servingops.api_models.ome.migration import MigrationHistoryEntry, MigrationStatus

WINDOW = 20
"""Entries kept on the InferenceService (seed: "bounded to the most recent entries"; no number)."""


def entry(request_uuid: str, component: str, instance: int | None, record: MigrationStatus | None, *,
          refused: str | None = None, requested_at: datetime | None = None, requested_by: str | None = None,
          reason: str | None = None, now: datetime) -> MigrationHistoryEntry:
    """The history entry of a request that ended: from its record, or from why it never got one."""
    try:
        kind: ComponentType | None = ComponentType(component)
    except ValueError:
        kind = None
    if record is None:
        outcome = (refused or "Refused").split(":", 1)[0]
        return MigrationHistoryEntry(id=request_uuid, component=kind, instance=instance, mode=MigrationMode.SURGE,
                                     phase=MigrationPhase.FAILED, requested_at=requested_at, completed_at=now,
                                     reason=reason or None, requested_by=requested_by, outcome_reason=outcome)
    outcome = "Completed" if record.phase is MigrationPhase.COMPLETED else (
        (record.message or "Failed").split(":", 1)[0])
    return MigrationHistoryEntry(
        id=request_uuid, component=kind, instance=record.source_instance, replacement_instance=record.surge_instance,
        mode=MigrationMode.SURGE, phase=record.phase, requested_at=requested_at or record.started_at,
        started_at=record.allocated_at, completed_at=record.completed_at or now, reason=record.reason,
        requested_by=requested_by, outcome_reason=outcome)


def window(entries: list[MigrationHistoryEntry], new: MigrationHistoryEntry,
           size: int = WINDOW) -> list[MigrationHistoryEntry]:
    """The window with `new` added (an entry of the same id replaced, never repeated), newest last."""
    kept = [e for e in entries if e.id != new.id]
    return [*kept, new][-size:]
