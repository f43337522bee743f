"""What the InferenceReplica workflow keeps between its passes, answers to the `state` query and carries
into a continued run."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

from servingops.workflows.entity import ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract import StartObject
    from servingops.api_models.contract.migration import MigrationAsk
    from servingops.api_models.ome.instance_status import OMENativeInstanceStatus, RetryBlock
    from servingops.api_models.ome.lifecycle import RolloutHold
    from servingops.api_models.ome.migration import MigrationStatus
    from servingops.api_models.operator_config import LifecycleDefaults


class ReplicaState(ReconcileState):
    phase: str = "Pending"
    """For the Temporal UI: Pending, Progressing, Available, Degraded, Paused, Invalid, Deleted."""
    rows: list[OMENativeInstanceStatus] = []
    blocks: list[RetryBlock] = []
    update_revision: str = ""
    current_revision: str = ""
    collision_count: int = 0
    runner_sizes: dict[str, int] = {}
    pairing_protocol: str | None = None
    hold: RolloutHold | None = None
    resumed: bool = False
    """The rows were taken from the stored status once (a fresh workflow for an existing replica)."""
    refused: str | None = None
    invalid: tuple[str, str] | None = None
    rejected: tuple[str, str] | None = None
    """(reason, message) of a pod command the apiserver or an activity refused for good, until one passes."""
    in_place_held: dict[str, str] = {}
    """Revision -> why it cannot be applied in place (InPlaceOnly holds the rollout on it)."""
    announced: list[str] = []
    """Once-only Warnings already recorded (a foreign rollbackToRevision)."""
    written: str = ""
    """Digest of the last status write, so an unchanged pass writes nothing."""
    pruned_for: str = ""
    passes: int = 0
    lifecycle_defaults: LifecycleDefaults | None = None
    parent_told: str = ""
    """Digest of the mirrored status the parent InferenceService's workflow was last told about."""
    parent_told_at: datetime | None = None
    migrations: list[MigrationStatus] = []
    """status.migrations (workflows/replica/migrate.py); taken from the stored status on a resume."""
    migration_asks: list[MigrationAsk] = []
    """Requests signalled and not yet judged (judged at the next pass, recorded by its status write)."""
    migration_cancels: list[str] = []
    migration_told: dict[str, str] = {}
    """Request UUID -> the phase its MigrationWorkflow was last told."""
    migrations_written: bool = False
    """status.migrations has been written once (then it is written on every pass, None once empty)."""
    ledger_archived: dict[str, str] = {}
    ledger_failing: bool = False
    """The last ledger write failed (its Warning Event was recorded once)."""
    """Request UUID -> digest of the terminal record last put in the audit ledger (replica/ledger.py)."""


class ReplicaRun(StartObject):
    carried: ReplicaState | None = None
