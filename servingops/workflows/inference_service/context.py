"""What the parts of the InferenceService workflow share: the object, its state, the settings, what
is pending for the loop (a look at the object, a status write, the end) and the Events that go
with the next status write.

One ServiceContext per workflow, made in the workflow's __init__ (signals may arrive before run());
run() sets the object and the state a continued run carries.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote
    from servingops.api_models.contract.rollout import ServiceState
    from servingops.api_models.refs import ObjectRef
    from servingops.workflows.rollout.models import Refusal, RolloutSettings


class ServiceContext:
    def __init__(self) -> None:
        self.ref: ObjectRef | None = None
        self.state = ServiceState()
        self.settings = RolloutSettings()
        self.changed = True
        """The object is to be observed (again) at the next pass."""
        self.dirty = False
        """Status is to be written at the next pass."""
        self.deleting = False
        self.refusal: Refusal | None = None
        """The generation a serving activity refused for good (carried, so a continued run does not retry it)."""
        self.notes: list[EventNote] = []
        """Events to record with the next status write."""

    def note(self, note: EventNote | None) -> None:
        if note is not None:
            self.notes.append(note)

    def require_ref(self) -> ObjectRef:
        assert self.ref is not None
        return self.ref

    def same_object(self, uid: str) -> bool:
        # Before run() the ref is unknown; the uid in the workflow id already scopes the object.
        return self.ref is None or not self.ref.uid or uid == self.ref.uid
