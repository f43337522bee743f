"""InferenceReplicaWorkflow: one per InferenceReplica (id replica/<ns>/<name>/<uid>), standalone or
projected by an InferenceService. The sole writer of the replica's status.

A pass: observe the replica, its pods and revisions (one activity) -> mint the spec's
ControllerRevision when the generation moved -> plan (workflows/replica/planner.py, pure) -> write
status, which records every operation opened or advanced, -> run the pass's commands (create, delete,
patch pods, set the ome.io/serving gate) -> wait. It wakes on `object-changed` (spec edits, /scale),
on `pods-changed` (the bridge watches the replica's pods), at the earliest deadline the plan names
(instanceReadyTimeout, a RetryBlock's nextRetryAt, minReadySeconds), and every POLL while an
operation is in flight (a backstop for a lost pod event).

Restart safety: the workflow's own state is durable, and on a fresh start (a new workflow for an
existing replica, after a reset) it resumes the operations recorded in status; every step's commands
are idempotent, pods are named per Instance, slot and incarnation, so no pod is duplicated.

Deletion: the pods, the headless Service and the ControllerRevisions carry the replica as controller
owner, so the garbage collector removes them; the workflow only ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from servingops.workflows import options
from servingops.workflows.entity import EntityWorkflow

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote, KubernetesActivities, StatusPatch
    from servingops.activities.migration.activities import MigrationActivities
    from servingops.activities.migration.types import EndpointQuery
    from servingops.activities.operator_config import OperatorConfigActivities
    from servingops.activities.replica.activities import ReplicaActivities
    from servingops.activities.replica.types import (
        EnsureRevisionInput,
        PruneRevisionsInput,
        ReplicaObservation,
        ReplicaRef,
        RevisionResult,
    )
    from servingops.api_models.contract import (
        Signal,
        WorkflowType,
        inference_service_workflow_id,
        migration_workflow_id,
    )
    from servingops.api_models.contract.migration import MigrationAsk
    from servingops.api_models.durations import parse_duration
    from servingops.api_models.errors import error_message, error_type_of
    from servingops.api_models.ome.enums import (
        InstanceOperationType,
        MigrationPolicyMode,
        MigrationTrigger,
    )
    from servingops.api_models.ome.instance_columns import status_rows
    from servingops.api_models.ome.instance_keys import label_selector
    from servingops.api_models.ome.instance_status import OMENativeInstanceStatus
    from servingops.api_models.ome.migration import MigrationStatus
    from servingops.api_models.ome.replica import InferenceReplicaStatus
    from servingops.api_models.operator_config import LifecycleDefaults
    from servingops.api_models.refs import ConditionUpdate
    from servingops.workflows.replica import ledger, migrate, planner, pod_commands
    from servingops.workflows.replica import status as status_rules
    from servingops.workflows.replica.instances import group_pods
    from servingops.workflows.replica.settings import Lifecycle, lifecycle
    from servingops.workflows.replica.state import ReplicaRun, ReplicaState

POLL = timedelta(seconds=2)
"""While an operation is in flight: re-read even without a pod event."""
RESYNC = timedelta(minutes=5)
"""At rest: re-read this often anyway (a controller's resync)."""
INVALID_RETRY = timedelta(seconds=30)
"""A spec that does not render (a model not Ready yet, a runtime missing) is tried again this often."""
MAX_PASSES_PER_RUN = 400
PARENT_NUDGE = timedelta(seconds=2)
_MIRRORED = ("observedGeneration", "currentRevision", "updateRevision", "replicas", "readyReplicas",
             "servingReplicas", "availableReplicas", "updatedReplicas", "updatedReadyReplicas", "rolloutHold")


@workflow.defn(name=WorkflowType.INFERENCE_REPLICA)
class InferenceReplicaWorkflow(EntityWorkflow[ReplicaState]):
    def __init__(self) -> None:
        super().__init__(ReplicaState())
        self._pods_changed = False
        self._nudge_pending = False
        self._notes: list[EventNote] = []
        self._wait = timedelta(0)
        """How long the last pass said to wait before the next."""

    @workflow.signal(name=Signal.PODS_CHANGED)
    def pods_changed(self) -> None:
        self._pods_changed = True

    @workflow.signal(name=Signal.MIGRATION_REQUEST)
    def migration_request(self, ask: MigrationAsk) -> None:
        self.state.migration_asks.append(ask)
        # A repeated ask is answered again (its workflow may have missed the reply).
        self.state.migration_told.pop(ask.request_uuid, None)

    @workflow.signal(name=Signal.MIGRATION_CANCEL)
    def migration_cancel(self, request_uuid: str) -> None:
        if request_uuid not in self.state.migration_cancels:
            self.state.migration_cancels.append(request_uuid)

    @workflow.run
    async def run(self, start: ReplicaRun) -> ReplicaState:
        self.begin(start, start.carried)
        if self.state.lifecycle_defaults is None:
            defaults = await workflow.execute_activity_method(OperatorConfigActivities.read, **options.KUBE)
            self.state.lifecycle_defaults = defaults.lifecycle
        return await self.live()

    # -- the entity loop's hooks (workflows/entity.py) ----------------------------------------------

    async def next_pass(self, timed_out: bool) -> bool:
        self._pods_changed = False
        wait = await self._pass()
        if wait is None:
            return False
        self._wait = wait
        return True

    async def rest(self) -> bool:
        if self._wait <= timedelta(0):
            return False  # the pass asked for the next one at once
        return await super().rest()

    def rest_time(self) -> timedelta:
        return self._wait

    def woken(self) -> bool:
        return self._pods_changed or bool(self.state.migration_asks) or bool(self.state.migration_cancels)

    def run_is_full(self) -> bool:
        return self.state.passes >= MAX_PASSES_PER_RUN

    def reset_run_counts(self) -> None:
        self.state.passes = 0

    # -- a pass -------------------------------------------------------------------------------------

    async def _pass(self) -> timedelta | None:
        """One observe-plan-write-act pass; how long to wait before the next, None when the replica is gone."""
        assert self.ref is not None and self.visibility is not None
        self.state.passes += 1
        seen: ReplicaObservation | None = await workflow.execute_activity_method(
            ReplicaActivities.observe, self.ref, **options.KUBE)
        if seen is None or seen.deleting:
            return None
        state = self.state
        state.generation = max(state.generation, seen.generation)
        if not state.resumed:
            await self._resume()
        replica = ReplicaRef(ref=self.ref, base=seen.base)
        if seen.generation > state.acted_generation or not state.update_revision or state.invalid is not None:
            minted = await self._mint_revision(replica, seen)
            state.acted_generation = max(state.acted_generation, seen.generation)
            if not minted and not state.update_revision:
                return INVALID_RETRY
        state.acted_generation = max(state.acted_generation, seen.generation)
        assert state.lifecycle_defaults is not None
        life = lifecycle(seen.spec, state.runner_sizes, state.lifecycle_defaults)
        target = self._target(seen)
        views = group_pods(seen.pods)
        rows = {row.index or 0: row for row in state.rows}
        blocks = {block.target_revision or "": block for block in state.blocks}
        policy = seen.spec.lifecycle.migration_policy if seen.spec.lifecycle else None
        never, caps = policy is not None and policy.mode is MigrationPolicyMode.NEVER, self._caps()
        self._judge_migrations(seen, rows, views, life, never=never, caps=caps)
        endpoints = await self._ready_endpoints(rows, views, life)
        inputs = planner.Inputs(
            rows=rows, views=views, life=life, target=target, blocks=blocks, now=seen.now,
            op_prefix=f"g{seen.generation}p{workflow.info().run_id[:8]}.{state.passes}",
            in_place_held=state.in_place_held.get(target), migrations=tuple(state.migrations),
            caps=caps, ready_endpoints=endpoints, cancel=frozenset(state.migration_cancels),
            migration_never=never, auto_relocate=True, in_place_rejoin=True)
        decided = planner.plan(inputs)
        if decided.relocated and not workflow.patched("auto-relocation"):
            # A history from before automatic relocation failed the Instance in place: plan it so.
            inputs = dataclasses.replace(inputs, auto_relocate=False)
            decided = planner.plan(inputs)
        if decided.rejoined and not workflow.patched("in-place-rejoin"):
            # A history from before it kept an in-place update's patched pods draining on this pass.
            decided = planner.plan(dataclasses.replace(inputs, in_place_rejoin=False))
        state.migration_cancels = []
        state.migrations = decided.migrations
        state.rows = [decided.rows[i] for i in sorted(decided.rows)]
        state.blocks = [decided.blocks[name] for name in sorted(decided.blocks)]
        self._notes.extend(EventNote(type="Warning" if n.type == "Warning" else "Normal", reason=n.reason,
                                     message=n.message) for n in decided.notes)
        await self._write(seen, life, target, decided, views)
        await self._tell_migrations()
        state.ledger_archived, ledger_error = await ledger.archive(self.ref, state.migrations, state.ledger_archived)
        if ledger_error is not None and not state.ledger_failing:
            # Once per failing spell: the records stay on status.migrations and a later pass writes them.
            self._notes.append(EventNote(type="Warning", reason="MigrationLedgerNotWritten", message=(
                f"the migration audit ledger could not be written (tried again on later passes): {ledger_error}"
            )[:1024]))
        state.ledger_failing = ledger_error is not None
        rejected = False
        if decided.commands:
            rejected = await pod_commands.run(replica, decided.commands, seen.now, self.state, self._notes)
        await self._prune(replica, life, target)
        self.visibility.publish(state.phase)
        if rejected:
            return INVALID_RETRY  # the apiserver refused what the spec renders: not again at once
        if decided.commands:
            return timedelta(seconds=0.5) if decided.opened else POLL
        if any(row.operation is not None for row in state.rows):
            wait = POLL
        else:
            wait = RESYNC
        if decided.wake_at is not None:
            wait = min(wait, max(timedelta(seconds=0.2), decided.wake_at - seen.now))
        if self._nudge_pending:
            wait = min(wait, PARENT_NUDGE)
        return wait

    async def _resume(self) -> None:
        """A fresh workflow takes the stored record: rows with their operations, retry blocks,
        revisions and the collision count (seed: "lets a crashed controller resume work")."""
        assert self.ref is not None
        state = self.state
        if not state.rows:
            stored: InferenceReplicaStatus | None = await workflow.execute_activity_method(
                ReplicaActivities.read_record, self.ref, **options.KUBE)
            if stored is not None:
                state.rows = status_rows(stored)
                state.blocks = list(stored.retry_blocks or [])
                state.collision_count = stored.collision_count or 0
                state.current_revision = stored.current_revision or ""
                state.hold = stored.rollout_hold
                state.migrations = list(stored.migrations or [])
        state.resumed = True

    async def _mint_revision(self, replica: ReplicaRef, seen: ReplicaObservation) -> bool:
        state = self.state
        try:
            minted: RevisionResult = await workflow.execute_activity_method(
                ReplicaActivities.ensure_revision,
                EnsureRevisionInput(replica=replica, collision_count=state.collision_count), **options.KUBE)
            # The headless Service: a foreign one under its name (NameInUse) is said like a bad spec.
            await workflow.execute_activity_method(ReplicaActivities.ensure_service, replica, **options.KUBE)
        except ActivityError as exc:
            error = error_type_of(exc)
            if error is None or not error.permanent:
                raise
            invalid = (error.value, error_message(exc))
            if invalid != state.invalid:
                self._notes.append(EventNote(type="Warning", reason=invalid[0], message=invalid[1]))
            state.invalid = invalid
            state.phase = "Invalid"
            if not state.update_revision:
                await self._write_invalid(seen)
            return False
        if state.update_revision and minted.name != state.update_revision:
            self._notes.append(EventNote(reason="RevisionCreated", message=(
                f"revision {minted.name} (generation {minted.generation}) is the new update target")))
        state.invalid = None
        state.update_revision = minted.name
        state.collision_count = minted.collision_count
        state.runner_sizes = minted.runner_sizes
        state.pairing_protocol = minted.pairing_protocol
        if not state.current_revision:
            state.current_revision = minted.name
        return True

    def _target(self, seen: ReplicaObservation) -> str:
        """The rollback target's revision when it is one of ours, else the spec's (seed)."""
        wanted = seen.rollback_target
        if wanted is None:
            return self.state.update_revision
        if wanted.exists and wanted.owned:
            return wanted.name
        if wanted.exists:
            key = f"ForeignRollbackRevision@{wanted.name}"
            if key not in self.state.announced:
                self.state.announced.append(key)
                self._notes.append(EventNote(type="Warning", reason="ForeignRollbackRevision", message=(
                    f"pacing.rollbackToRevision names {wanted.name}, a ControllerRevision this replica does not "
                    "control: ignored")))
        return self.state.update_revision

    async def _write(self, seen: ReplicaObservation, life: Lifecycle, target: str, decided: planner.Pass,
                     views: dict[int, Any]) -> None:
        assert self.ref is not None
        state = self.state
        rows = {row.index or 0: row for row in state.rows}
        revisions = status_rules.Revisions(update=state.update_revision, target=target,
                                           current=state.current_revision, collision_count=state.collision_count,
                                           pairing_protocol=state.pairing_protocol)
        # Which revision is current needs only what each row runs (build() counts the pods).
        current = status_rules.current_revision(state.rows, revisions, state.current_revision)
        if current != state.current_revision:
            if state.current_revision:
                self._notes.append(EventNote(reason="RolloutComplete", message=(
                    f"every Instance runs {current} (was {state.current_revision})")))
            state.current_revision = current
            revisions = status_rules.Revisions(update=revisions.update, target=target, current=current,
                                               collision_count=revisions.collision_count,
                                               pairing_protocol=revisions.pairing_protocol)
        body, conditions, held = status_rules.build(
            rows, views, life, generation=seen.generation, revisions=revisions,
            label_selector=label_selector(self.ref.name, seen.spec.component.value),
            blocks={b.target_revision or "": b for b in state.blocks}, hold=decided.hold,
            previous_hold=state.hold, problems=status_rules.Problems(refused=state.refused,
                                                                            invalid=state.invalid or state.rejected),
            now=seen.now)
        state.hold = held
        if state.migrations or state.migrations_written:
            # (only once a migration exists: a replica that never had one writes what it always did)
            body["migrations"] = [m.model_dump(by_alias=True, exclude_none=True, mode="json")
                                  for m in state.migrations] or None
            state.migrations_written = True
        available = next(c for c in conditions if c.type == "Available").status == "True"
        if state.invalid:
            state.phase = "Invalid"
        elif life.paused:
            state.phase = "Paused"
        elif any(r.operation for r in state.rows):
            state.phase = "Progressing"
        else:
            state.phase = "Available" if available else "Degraded"
        await self._patch(body, conditions, seen.generation)
        await self._tell_parent(seen, body)

    def _caps(self) -> migrate.Caps:
        defaults = self.state.lifecycle_defaults or LifecycleDefaults()
        return migrate.Caps(max_in_flight=defaults.max_in_flight_migrations,
                            per_window=defaults.max_migrations_per_window,
                            window=parse_duration(defaults.migration_window),
                            auto_max_attempts=defaults.auto_migrate_max_attempts)

    def _judge_migrations(self, seen: ReplicaObservation, rows: dict[int, OMENativeInstanceStatus],
                          views: dict[int, Any], life: Lifecycle, *, never: bool, caps: migrate.Caps) -> None:
        """Record every migration request signalled since the last pass: Accepted or Failed
        (migrate.accept); the pass's status write puts the records on the object."""
        state = self.state
        asks, state.migration_asks = state.migration_asks, []
        for ask in asks:
            judged = migrate.accept(ask, state.migrations, rows, views, life, never=never, caps=caps, now=seen.now)
            state.migrations = judged.records
            if judged.note is not None:
                self._notes.append(EventNote(type="Warning" if judged.note.type == "Warning" else "Normal",
                                             reason=judged.note.reason, message=judged.note.message))

    async def _ready_endpoints(self, rows: dict[int, OMENativeInstanceStatus], views: dict[int, Any],
                               life: Lifecycle) -> frozenset[str] | None:
        """While a migration drains its source: which of the source's pods still have a Ready endpoint."""
        if not migrate.needs_endpoints(rows) or self.ref is None:
            return None
        sources = [views[row.index or 0] for row in rows.values() if row.operation is not None
                   and row.operation.type is InstanceOperationType.MIGRATE and (row.index or 0) in views]
        pods = sorted(pod.name for view in sources for pod in view.live)
        if not workflow.patched("migration-endpoints"):
            return None
        found: list[str] = await workflow.execute_activity_method(
            MigrationActivities.ready_endpoints, EndpointQuery(namespace=self.ref.namespace or "", pods=pods),
            **options.KUBE)
        return frozenset(found)

    async def _tell_migrations(self) -> None:
        """Each Manual request's MigrationWorkflow hears its record once it is on the object, at
        every phase change."""
        if self.ref is None:
            return
        due = [r for r in self.state.migrations if r.trigger is MigrationTrigger.MANUAL
               and self.state.migration_told.get(r.request_uuid or "") != str(r.phase)]
        if due and not workflow.patched("migration-records"):
            return
        if due and workflow.patched("migration-records-together"):
            # One workflow task for all of them: told one by one, 50 records held the pass's pod
            # commands back by ~0.15 s each (bench/migration.py).
            await asyncio.gather(*(self._tell_migration(record) for record in due))
        else:
            for record in due:
                await self._tell_migration(record)
        known = {r.request_uuid for r in self.state.migrations}
        self.state.migration_told = {k: v for k, v in self.state.migration_told.items() if k in known}

    async def _tell_migration(self, record: MigrationStatus) -> None:
        assert self.ref is not None
        uuid = record.request_uuid or ""
        target = migration_workflow_id(self.ref.namespace or "", self.ref.name, uuid)
        try:
            await workflow.get_external_workflow_handle(target).signal(Signal.MIGRATION_RECORD, record)
        except Exception:  # the request's workflow has ended (or never ran): the record is on the object
            workflow.logger.debug("no migration workflow %s to tell", target)
        self.state.migration_told[uuid] = str(record.phase)

    async def _tell_parent(self, seen: ReplicaObservation, body: dict[str, Any]) -> None:
        """A projected replica nudges its InferenceService's workflow when the part of its status the
        service mirrors (status.components[c].lifecycle) moved, at most every PARENT_NUDGE."""
        if seen.parent_uid is None or seen.spec.parent_ref is None or self.ref is None:
            return
        mirrored = {k: v for k, v in body.items() if k in _MIRRORED}
        digest = hashlib.sha256(json.dumps(mirrored, sort_keys=True, default=str).encode()).hexdigest()
        state = self.state
        if digest == state.parent_told:
            return
        if state.parent_told_at is not None and workflow.now() - state.parent_told_at < PARENT_NUDGE:
            self._nudge_pending = True  # the next pass (within PARENT_NUDGE) tells it
            return
        self._nudge_pending = False
        target = inference_service_workflow_id(self.ref.namespace or "", seen.spec.parent_ref.name, seen.parent_uid)
        try:
            await workflow.get_external_workflow_handle(target).signal(Signal.REPLICA_CHANGED)
        except Exception:  # the service's workflow is gone or not started yet: nothing to tell
            workflow.logger.debug("no InferenceService workflow %s to tell", target)
        state.parent_told, state.parent_told_at = digest, workflow.now()

    async def _write_invalid(self, seen: ReplicaObservation) -> None:
        assert self.state.invalid is not None
        reason, message = self.state.invalid
        await self._patch({"observedGeneration": seen.generation},
                          [ConditionUpdate(type="Progressing", status="False", reason=reason, message=message)],
                          seen.generation)

    async def _patch(self, body: dict[str, Any], conditions: list[Any], generation: int) -> None:
        assert self.ref is not None
        digest = hashlib.sha256(json.dumps(
            [body, [c.model_dump() for c in conditions]], sort_keys=True, default=str).encode()).hexdigest()
        if digest == self.state.written and not self._notes:
            return
        notes, self._notes = self._notes, []
        await workflow.execute_activity_method(
            KubernetesActivities.patch_status,
            StatusPatch(ref=self.ref, status=body, conditions=conditions, observed_generation=generation,
                        events=notes),
            **options.KUBE)
        self.state.written = digest

    async def _prune(self, replica: ReplicaRef, life: Lifecycle, target: str) -> None:
        """Once per rollout end: drop non-live revisions beyond revisionHistoryLimit."""
        state = self.state
        if life.history_limit is None or any(r.operation for r in state.rows):
            return
        live = sorted(({state.update_revision, state.current_revision, target}
                       | {r.running_revision or "" for r in state.rows}
                       | {r.target_revision or "" for r in state.rows}) - {""})
        key = ",".join(live) + f"/{life.history_limit}"
        if key == state.pruned_for:
            return
        await workflow.execute_activity_method(
            ReplicaActivities.prune_revisions,
            PruneRevisionsInput(replica=replica, live=live, limit=life.history_limit), **options.KUBE)
        state.pruned_for = key


__all__ = ["InferenceReplicaWorkflow", "ReplicaRun", "ReplicaState"]
