"""MigrationWorkflow: one per migration request, id migration/<ns>/<replica>/<uuid>, started by the
bridge from an `ome.io/migration-request-v1-<uuid>` annotation or by the SDK (annotation None).

It owns no status. It resolves the InferenceService's component to the InferenceReplica serving it
(OMENative only), asks that replica's workflow to record the request (Signal.MIGRATION_REQUEST;
the replica judges what it owns and writes the record to status.migrations), removes the
annotation once the record is on the object, and follows the record (Signal.MIGRATION_RECORD,
sent by the replica at every phase) until it is terminal. The replica executes the migration
(workflows/replica/migrate.py); this workflow can end or be lost without stopping it.

Durable both ways: the ask is idempotent per UUID, so it is sent again whenever no record came
for ASK_AGAIN (a replica that continued as new, a lost reply); the replica answers a repeated ask
with the record it has.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow

from servingops.workflows import options

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventSpec, KubernetesActivities
    from servingops.activities.migration.activities import MigrationActivities
    from servingops.activities.migration.types import RequestRemoval, Resolved, ResolveInput
    from servingops.api_models.contract import (
        MigrationStart,
        Query,
        Signal,
        WorkflowType,
        inference_service_workflow_id,
        replica_workflow_id,
    )
    from servingops.api_models.contract.migration import MigrationAsk, MigrationView
    from servingops.api_models.ome.enums import MigrationPhase
    from servingops.api_models.ome.migration import MigrationStatus
    from servingops.api_models.refs import ObjectRef
    from servingops.workflows.migration import history
    from servingops.workflows.replica.migrate import TERMINAL, refused_at_acceptance

ASK_AGAIN = timedelta(minutes=1)
"""No record from the replica for this long: send the (idempotent) ask again."""
FOLLOW_AGAIN = timedelta(minutes=10)
"""While following a record: ask again this often anyway (a reply lost with a replica's run)."""
REPLICA_MISSING_TRIES = 30
"""The replica's workflow is not running: try this many times, ASK_AGAIN apart, then give up."""
_ORDER = {phase: i for i, phase in enumerate((
    MigrationPhase.ACCEPTED, MigrationPhase.SURGE_PENDING, MigrationPhase.SURGE_READY, MigrationPhase.DRAINING,
    MigrationPhase.COMPLETED))}


@workflow.defn(name=WorkflowType.MIGRATION)
class MigrationWorkflow:
    def __init__(self) -> None:
        self.view: MigrationView | None = None
        self._record: MigrationStatus | None = None
        self._cancel = False
        self._cancel_sent = False
        self._phases: list[str] = []

    @workflow.signal(name=Signal.MIGRATION_RECORD)
    def record(self, record: MigrationStatus) -> None:
        """The replica's record; an older phase arriving late never replaces a newer one."""
        if self._record is None or _rank(record) >= _rank(self._record):
            self._record = record
            self._phases.append(str(record.phase))
            if self.view is not None:
                self.view.record = record
                self.view.phases = self._phases

    @workflow.signal(name=Signal.MIGRATION_CANCEL)
    def cancel(self) -> None:
        self._cancel = True
        if self.view is not None:
            self.view.cancel_requested = True

    @workflow.query(name=Query.STATE)
    def state(self) -> MigrationView | None:
        return self.view

    @workflow.run
    async def run(self, start: MigrationStart) -> MigrationView:
        view = self.view = MigrationView(request_uuid=start.request_uuid, record=self._record,
                                         cancel_requested=self._cancel, phases=self._phases)
        isvc = start.isvc
        request = start.request
        resolved: Resolved = await workflow.execute_activity_method(
            MigrationActivities.resolve, ResolveInput(isvc=isvc, component=request.component), **options.KUBE)
        instance = _instance(request.instance)
        if resolved.refused is None and instance is None:
            resolved = Resolved(refused="InvalidInstance", message=(
                f"instance {request.instance!r} is not an Instance index (a non-negative integer)"))
        if resolved.refused is not None or resolved.replica is None or resolved.replica_uid is None:
            return await self._refuse(start, instance, resolved.refused or "MigrationRefused", resolved.message or "")
        assert instance is not None
        view.replica = resolved.replica
        replica = replica_workflow_id(isvc.namespace or "", resolved.replica, resolved.replica_uid)
        ask = MigrationAsk(request_uuid=start.request_uuid, source_instance=instance, from_node=request.from_node,
                           hint_target_nodes=list(request.hint_target_nodes), reason=request.reason,
                           requested_by=request.requested_by, requested_at=_time(request.requested_at),
                           reply_to=workflow.info().workflow_id)
        missing = 0
        while self._record is None:
            if not await self._send(replica, Signal.MIGRATION_REQUEST, ask):
                missing += 1
                if missing >= REPLICA_MISSING_TRIES:
                    return await self._refuse(start, instance, "ReplicaNotRunning",
                                              f"no workflow runs InferenceReplica {resolved.replica}")
            await self._wait(lambda: self._record is not None, ASK_AGAIN)
        record = self._record
        await self._event(isvc, "Warning" if record.phase is MigrationPhase.FAILED else "Normal",
                          "MigrationAccepted" if record.phase is not MigrationPhase.FAILED else "MigrationRefused",
                          f"migration {start.request_uuid} of {request.component} Instance {instance}: "
                          f"{record.phase}: {record.message or ''}".strip())
        await self._remove(start)
        while self._record is None or self._record.phase not in TERMINAL:
            if self._cancel and not self._cancel_sent:
                self._cancel_sent = await self._send(replica, Signal.MIGRATION_CANCEL, start.request_uuid)
            if not await self._wait(lambda: (self._record is not None and self._record.phase in TERMINAL)
                                    or (self._cancel and not self._cancel_sent), FOLLOW_AGAIN):
                await self._send(replica, Signal.MIGRATION_REQUEST, ask)
        final = self._record
        if not refused_at_acceptance(final):  # a refusal's Event went out with the record above
            reason = "MigrationCompleted" if final.phase is MigrationPhase.COMPLETED else (
                (final.message or "MigrationFailed").split(":", 1)[0])
            await self._event(isvc, "Normal" if final.phase is MigrationPhase.COMPLETED else "Warning", reason,
                              f"migration {start.request_uuid}: {final.message or final.phase}")
        await self._tell_service(start, instance, final)
        view.done = True
        return view

    async def _refuse(self, start: MigrationStart, instance: int | None, reason: str, message: str) -> MigrationView:
        """Refused before any replica recorded it: a Warning on the service, the annotation removed,
        and the service's migrationHistory told (there is no record to hold the refusal)."""
        assert self.view is not None
        self.view.refused = f"{reason}: {message}"
        await self._event(start.isvc, "Warning", reason, f"migration {start.request_uuid}: {message}")
        await self._remove(start)
        await self._tell_service(start, instance, None)
        self.view.done = True
        return self.view

    async def _tell_service(self, start: MigrationStart, instance: int | None, record: MigrationStatus | None) -> None:
        """The InferenceService's workflow keeps status.migrationHistory (it writes its own status)."""
        assert self.view is not None
        request = start.request
        entry = history.entry(start.request_uuid, request.component, instance, record, refused=self.view.refused,
                              requested_at=_time(request.requested_at), requested_by=request.requested_by,
                              reason=request.reason, now=workflow.now())
        target = inference_service_workflow_id(start.isvc.namespace or "", start.isvc.name, start.isvc.uid or "")
        await self._send(target, Signal.MIGRATION_OUTCOME, entry)

    async def _wait(self, done: Callable[[], bool], at_most: timedelta) -> bool:
        try:
            await workflow.wait_condition(done, timeout=at_most)
        except TimeoutError:
            return False
        return True

    async def _send(self, target: str, signal: Signal, payload: object) -> bool:
        try:
            await workflow.get_external_workflow_handle(target).signal(signal, payload)
        except Exception:  # the replica's workflow is not running (yet): asked again later
            workflow.logger.info("workflow %s is not running: %s not delivered", target, signal.value)
            return False
        return True

    async def _remove(self, start: MigrationStart) -> None:
        if start.annotation is None or self.view is None:
            return
        await workflow.execute_activity_method(
            MigrationActivities.remove_request, RequestRemoval(isvc=start.isvc, annotation=start.annotation),
            **options.KUBE)
        self.view.annotation_removed = True

    async def _event(self, ref: ObjectRef, kind: str, reason: str, message: str) -> None:
        await workflow.execute_activity_method(
            KubernetesActivities.emit_event, EventSpec(ref=ref, type=kind, reason=reason, message=message[:1024]),
            **options.KUBE)


def _rank(record: MigrationStatus) -> int:
    if record.phase in TERMINAL:
        return 100
    return _ORDER.get(record.phase, 0) if record.phase is not None else 0


def _instance(value: int | str) -> int | None:
    if isinstance(value, int):
        return value if value >= 0 else None
    text = value.strip()
    return int(text) if text.isdigit() else None


def _time(value: str | None) -> datetime | None:
    """requested_at as the requester wrote it (RFC 3339); unreadable text is dropped, not refused."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


__all__ = ["MigrationWorkflow"]
