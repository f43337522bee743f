"""What the placement workflow says about its source: status.placement, the Ready condition (this
workflow's while the source is placed) and the Events that go with them, written through
kube.patch_status only when something moved (or a decision must be on the object before a member is
written: `force`). Also why the service is held, said once per distinct reason."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import FailureError

from servingops.workflows.placement.readiness import ready_condition
from servingops.workflows.placement.state import PlacementState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote, KubernetesActivities, StatusPatch
    from servingops.api_models.contract import Signal, traffic_map_workflow_id
    from servingops.api_models.ome.inference_service import InferenceServiceStatus
    from servingops.api_models.ome.placement_status import PlacementStatus
    from servingops.api_models.refs import ConditionUpdate, ObjectRef
    from servingops.workflows import options


ROUTING_NOTICE_PATCH = "placement-tells-routing"
"""Runs from before it recorded no signal to the routing workflow after a status write (tests/histories)."""


class PlacementRecord:
    """One per run, made once the state a continued run carries is taken."""

    def __init__(self, ref: ObjectRef, state: PlacementState) -> None:
        self.ref = ref
        self.state = state
        self.notes: list[EventNote] = []
        """Events to record with the next status write."""
        self.written: dict[str, object] | None = None
        """status.placement as last written by this run (a write only when it moved)."""
        self.held_this_pass = False
        """Whether the pass under way held the service: a pass that did not clears `state.held`."""
        self.written_ready: ConditionUpdate | None = None
        """The Ready condition as last written by this run."""
        self.told_routing: list[object] | None = None
        """What the routing workflow was last told about (routing_view of the status written)."""

    def hold(self, reason: str, message: str) -> None:
        self.held_this_pass = True
        said = f"{reason}: {message}"
        if said != self.state.held:
            self.notes.append(EventNote(type="Warning", reason=reason, message=message))
            self.state.held = said

    async def persist(self, *, force: bool = False, clear: bool = False) -> None:
        # Ready is this workflow's while the source is placed; a cleared placement hands it back to
        # the InferenceService workflow (it renders the service here again).
        ready = None
        if not clear:
            ready = ready_condition(self.state.status, self.state.held)
        if not (force or self.notes or self._dirty() or ready != self.written_ready):
            return
        body = placement_patch(None if clear else self.state.status)
        self.written, self.written_ready = self.state.status.to_api(), ready
        notes, self.notes = self.notes, []
        await workflow.execute_activity_method(
            KubernetesActivities.patch_status,
            StatusPatch(ref=self.ref, status=body, conditions=[ready] if ready else [], events=notes), **options.KUBE)
        await self._tell_routing()

    async def _tell_routing(self) -> None:
        """The routing workflow of this source computes its table from status.placement: a write that moved
        what it reads (homes, endpoints, counts, drains, the plan) wakes it at once instead of at its timer."""
        view = routing_view(self.state.status)
        if view == self.told_routing or not workflow.patched(ROUTING_NOTICE_PATCH):
            return
        self.told_routing = view
        handle = workflow.get_external_workflow_handle(
            traffic_map_workflow_id(self.ref.namespace or "", self.ref.name, self.ref.uid or ""))
        try:
            await handle.signal(Signal.ROUTING_CHANGED)
        except FailureError:
            pass  # no routing workflow for the source (a bridge that does not start one): nothing to wake
    def _dirty(self) -> bool:
        return self.written != self.state.status.to_api()


def routing_view(status: PlacementStatus) -> list[object]:
    """What of status.placement a routing table is computed from."""
    return [status.phase, status.plan.id if status.plan else None, *(
        (row.cluster, row.endpoint, row.admitted_replicas, row.ready_replicas,
         bool(row.allocation and row.allocation.drain_requested)) for row in status.candidates or [])]


def placement_patch(placement: PlacementStatus | None) -> dict[str, Any]:
    """The merge patch of the InferenceService status that this workflow owns, built through the kind's
    status model: status.placement whole (nested defaults included, as `to_api()` gives them), or
    removed (None) when the placement is cleared. Only `placement` is set on the model, so no other
    field of the status is touched. The body is the dict this write sent before it went through the
    model, key for key (tests/test_placement_status_write.py holds it to every write in the stored
    histories)."""
    return InferenceServiceStatus(placement=placement).to_merge_patch(whole_values=True)
