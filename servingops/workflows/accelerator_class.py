"""AcceleratorClassWorkflow: one per AcceleratorClass (id acceleratorclass/<name>/<uid>), the sole writer
of its status: the nodes its `spec.discovery` matches, their accelerators, how many the cluster's pods
have not taken, and a Ready condition (activities/capacity/class_inventory.py holds the rules).

Keeping it current as nodes and pods change: a durable timer, not a watch. Every
`interval_seconds` (10 s by default; `wait_condition` with a timeout, so a newer generation or the
deletion wakes it at once) it runs `acceleratorclass.observe`, one list of Nodes and one of bound,
unfinished Pods. Why not the bridge's watches: any node or pod change can move any class's numbers, so a
watch would have to fan every pod event out to every class (the bridge would have to know the classes and
their discovery, which it must not decide) or signal every class workflow on every pod event; with a
handful of classes a 10 s poll costs two list calls per class per interval and bounds staleness at the
interval, with nothing to lose when an event is missed. A cluster with many classes or a very large
pod list is where a shared watch-fed cache would pay; not built.

Writes: the status is written only when something in it other than lastUpdated changed (nodes, the three
counts, a condition), or when the lastUpdated last written is `refresh_seconds` (300 s) old: lastUpdated
then says when the inventory was last confirmed, so a reader can tell a live class from one whose
workflow stopped. Conditions: Ready True `NodesDiscovered` when the discovery matches at least one node,
False `NoMatchingNodes` otherwise, False `InvalidSpec` when the spec cannot be read (the CRD schema let
it through; nothing is counted then). A class naming a Kueue ResourceFlavor (integration.kueueResourceFlavor)
gets it created from its nodeSelector when absent (`acceleratorclass.ensure_flavor`) and a
KueueResourceFlavorSynced condition (activities/capacity/class_flavor.py). History stays bounded with
continue-as-new after `samples_per_run` samples, carrying what was written.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel
from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.entity import EntityWorkflow, ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.capacity.accelerator_class import AcceleratorClassActivities
    from servingops.activities.capacity.class_flavor import (
        FLAVOR_CONDITION,
        FlavorReason,
        flavor_condition,
        should_create,
    )
    from servingops.activities.capacity.class_inventory import Inventory
    from servingops.activities.capacity.class_types import (
        ClassEvent,
        ClassFlavorInput,
        ClassFlavorOutput,
        ClassObserveInput,
        ClassObserveOutput,
        ClassWriteInput,
        ClassWriteOutput,
    )
    from servingops.api_models.conditions import merge_conditions
    from servingops.api_models.contract import StartObject, WorkflowType
    from servingops.api_models.ome.accelerator_class import AcceleratorClassStatus
    from servingops.api_models.refs import ConditionUpdate

READY = "Ready"


class ClassReason:
    """The Ready condition's reasons (one place: the docs and the tests name these)."""

    NODES_DISCOVERED = "NodesDiscovered"
    NO_MATCHING_NODES = "NoMatchingNodes"
    INVALID_SPEC = "InvalidSpec"


class ClassSettings(BaseModel):
    """How the inventory samples and writes; the defaults are what the bridge's start uses."""

    interval_seconds: float = 10.0
    """Between two samples (how stale the numbers may be)."""
    refresh_seconds: float = 300.0
    """An unchanged status is rewritten (a new lastUpdated) once the last write is this old."""
    samples_per_run: int = 1000
    """A run continues as new after this many samples (each about six events)."""


class ClassState(ReconcileState):
    """What the `state` query answers, and what a continued run carries."""

    phase: str = "Pending"
    """Pending (nothing sampled yet), Observing, Invalid, or Deleted."""
    written: AcceleratorClassStatus | None = None
    """The status last written by this workflow."""
    samples: int = 0
    writes: int = 0


class ClassRun(StartObject):
    settings: ClassSettings = ClassSettings()
    carried: ClassState | None = None


def ready_condition(found: Inventory | None, problem: str) -> ConditionUpdate:
    if found is None:
        return ConditionUpdate(type=READY, status="False", reason=ClassReason.INVALID_SPEC, message=problem)
    if not found.nodes:
        return ConditionUpdate(type=READY, status="False", reason=ClassReason.NO_MATCHING_NODES,
                               message="spec.discovery matches no node")
    return ConditionUpdate(
        type=READY, status="True", reason=ClassReason.NODES_DISCOVERED,
        message=(f"{len(found.nodes)} node(s) match; {found.available_accelerators} of {found.total_accelerators} "
                 f"{found.resource_name} available"))


def desired_status(observed: ClassObserveOutput, previous: AcceleratorClassStatus | None,
                   now: datetime) -> AcceleratorClassStatus:
    """The whole status one sample calls for (lastUpdated: `now`; the caller keeps the old one when
    nothing else moved)."""
    found = observed.inventory
    # Only the conditions this workflow states now: a flavor no longer named loses its condition.
    updates = [ready_condition(found, observed.problem)]
    if observed.flavor is not None:
        updates.append(flavor_condition(observed.flavor))
    before = [c.to_api() for c in (previous.conditions or []) if c.type in {u.type for u in updates}] if previous \
        else []
    conditions = merge_conditions(before, updates, generation=observed.generation, now=now)
    return AcceleratorClassStatus.model_validate({
        "nodes": found.nodes if found else [],
        "totalAccelerators": found.total_accelerators if found else 0,
        "availableAccelerators": found.available_accelerators if found else 0,
        "availableNodes": found.available_nodes if found else 0,
        "lastUpdated": now, "conditions": conditions})


def _values(status: AcceleratorClassStatus | None) -> dict[str, object] | None:
    return None if status is None else status.model_copy(update={"last_updated": None}).to_api()


def flavor_events(written: AcceleratorClassStatus | None, desired: AcceleratorClassStatus) -> list[ClassEvent]:
    """A Warning when the flavor's create is refused (once, as the condition turns to that reason)."""
    def reason(status: AcceleratorClassStatus | None) -> tuple[str, str]:
        found = next((c for c in (status.conditions or []) if c.type == FLAVOR_CONDITION), None) if status else None
        return (found.reason or "", found.message or "") if found else ("", "")

    now, message = reason(desired)
    if now == FlavorReason.REFUSED and reason(written)[0] != now:
        return [ClassEvent(type="Warning", reason=now, message=message)]
    return []


def needs_write(written: AcceleratorClassStatus | None, desired: AcceleratorClassStatus, refresh: timedelta) -> bool:
    """Something but lastUpdated moved, or what was written is `refresh` old (or was never written)."""
    if written is None or written.last_updated is None or desired.last_updated is None:
        return True
    return _values(written) != _values(desired) or desired.last_updated - written.last_updated >= refresh


@workflow.defn(name=WorkflowType.ACCELERATOR_CLASS)
class AcceleratorClassWorkflow(EntityWorkflow[ClassState]):
    def __init__(self) -> None:
        super().__init__(ClassState())
        self.settings = ClassSettings()

    # object-changed, delete and the state query come from EntitySignals.

    @workflow.run
    async def run(self, start: ClassRun) -> ClassState:
        self.settings = start.settings
        self.begin(start, start.carried)
        return await self.live()

    async def next_pass(self, timed_out: bool) -> bool:
        return await self._sample()

    def rest_time(self) -> timedelta:
        return timedelta(seconds=self.settings.interval_seconds)

    def run_is_full(self) -> bool:
        return self.state.samples >= self.settings.samples_per_run

    def reset_run_counts(self) -> None:
        self.state.samples = self.state.writes = 0

    async def _sample(self) -> bool:
        """One sample, written when it needs to be; False when the class is gone or going."""
        assert self.ref is not None
        self.state.samples += 1
        observed: ClassObserveOutput = await workflow.execute_activity_method(
            AcceleratorClassActivities.observe, ClassObserveInput(accelerator_class=self.ref), **options.KUBE)
        if not observed.present:
            return False
        if observed.flavor is not None and should_create(observed.flavor):
            made: ClassFlavorOutput = await workflow.execute_activity_method(
                AcceleratorClassActivities.ensure_flavor,
                ClassFlavorInput(accelerator_class=self.ref, flavor=observed.flavor.name,
                                 node_labels=observed.flavor.desired_labels), **options.KUBE)
            # Whether created now or by someone a moment before, what the class names exists; its labels are
            # compared at the next sample (made here: the class's own).
            flavor = observed.flavor.model_copy(update={"served": made.served,
                                                        "exists": made.served and not made.refused,
                                                        "refused": made.refused,
                                                        "node_labels": observed.flavor.desired_labels
                                                        if made.created else observed.flavor.node_labels})
            observed = observed.model_copy(update={"flavor": flavor})
        self.state.generation = max(self.state.generation, observed.generation)
        self.state.acted_generation = max(self.state.acted_generation, observed.generation)
        # A new run starts from what is already on the object (a restarted worker writes nothing new).
        written = self.state.written if self.state.written is not None else observed.status
        desired = desired_status(observed, written, workflow.now().replace(microsecond=0))
        events = flavor_events(written, desired)
        if needs_write(written, desired, timedelta(seconds=self.settings.refresh_seconds)) or events:
            result: ClassWriteOutput = await workflow.execute_activity_method(
                AcceleratorClassActivities.write_status,
                ClassWriteInput(accelerator_class=self.ref, status=desired, events=events), **options.KUBE)
            if not result.present:
                return False
            self.state.writes += 1
            written = desired
        self.state.written = written
        self._publish("Invalid" if observed.inventory is None else "Observing")
        return True

    def _publish(self, phase: str) -> None:
        assert self.visibility is not None
        if phase != self.state.phase:
            self.state.phase = phase
            self.visibility.publish(phase)


__all__ = ["AcceleratorClassWorkflow", "ClassReason", "ClassRun", "ClassSettings", "ClassState", "desired_status",
           "needs_write", "ready_condition"]
