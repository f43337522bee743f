"""The replica workflow's side of the migration audit ledger (activities/migration/ledger.py).

The replica workflow is the ledger's single writer: it is the sole writer of status.migrations, so it
sees every record turn terminal (Manual ones, refusals it judged, and born-terminal Auto
`Relocated` entries) and every later change to one (the `succeeded` stamp), in one place and in
order, after the status write that put it on the object. A MigrationWorkflow would see only Manual
requests, and may end or be lost before its record turns terminal.

A terminal record is archived when its content differs from what this workflow last archived for
its id; a fresh workflow (nothing remembered) archives again, which the activity makes a no-op.
"""

from __future__ import annotations

import hashlib

from temporalio import workflow
from temporalio.exceptions import ActivityError

from servingops.workflows import options

with workflow.unsafe.imports_passed_through():
    from servingops.activities.migration.activities import MigrationActivities
    from servingops.activities.migration.types import LedgerWrite
    from servingops.api_models.ome.migration import MigrationStatus
    from servingops.api_models.refs import ObjectRef
    from servingops.workflows.replica.migrate import TERMINAL

PATCH = "migration-ledger"
"""Asked only on a pass with a terminal record to archive: older histories replay without the activity."""


def _digest(record: MigrationStatus) -> str:
    return hashlib.sha256(record.model_dump_json(by_alias=True, exclude_none=True).encode()).hexdigest()[:16]


async def archive(ref: ObjectRef, records: list[MigrationStatus],
                  archived: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """Archive the terminal records not yet archived as they are; the new request id -> digest map
    (ids no longer in status.migrations are forgotten: a pruned record never changes again), and why
    the write failed when it did (the workflow says so in a Warning Event; a later pass tries again)."""
    known = {r.request_uuid or "": r for r in records}
    remembered = {k: v for k, v in archived.items() if k in known}
    due = [r for r in records if r.phase in TERMINAL and remembered.get(r.request_uuid or "") != _digest(r)]
    if not due:
        return remembered, None
    if not workflow.patched(PATCH):
        return remembered, None
    try:
        # Bounded (CLEANUP): the ledger is history, not work; a write that keeps failing must not
        # hold the replica's pass. Nothing is remembered, so a later pass writes it again.
        await workflow.execute_activity_method(MigrationActivities.archive, LedgerWrite(replica=ref, records=due),
                                               **options.CLEANUP)
    except ActivityError as exc:
        return remembered, str(exc.cause or exc)
    return {**remembered, **{r.request_uuid or "": _digest(r) for r in due}}, None


__all__ = ["PATCH", "archive"]
