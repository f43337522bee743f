"""AcceleratorCapacityWorkflow: one per root AcceleratorQuota (id capacity/<name>/<uid>), the sole
writer of that root's status.capacity on a workload cluster.

It writes seed 004's capacity report: on every cluster, "that cluster's own derived capacity" on its
root (the AcceleratorQuota without spec.parentRef), which placement's SplitByCapacity reads from each
member (activities/placement/capacity.py); on a management plane (WorkloadClusters registered), also
each member's own root report per (resource, flavor) in perCluster (`placement.read_member_capacity`,
rules in rendering/capacity_per_cluster.py), which a Proportional split of the quota tree follows
(rendering/quota_projection.py). The tree's materialization, budgets, projections, freezes and
conditions are AcceleratorQuotaWorkflow's (workflows/accelerator_quota.py). Nothing here reads or
writes spec.

Every sample interval (30 s by default, `CapacitySettings.interval_seconds`; a durable timer:
`wait_condition` with a timeout, so a newer generation or deletion wakes it at once) it runs
`capacity.observe` (Nodes, Kueue ResourceFlavors and the tree's budget resource names, attributed by
activities/capacity/attribution.py), advances each (resource, flavor) pair's high-water mark (same
module: rises at once, lowered only after `lower_after` consecutive complete samples more than
`band` below it), and writes status.capacity (`capacity.write_status`, a merge patch of the status
subresource) only when something but observedAt changed, or when the observedAt last written is
`refresh_seconds` (120 s) old or older: a reader tells a live report from a stopped one by
observedAt alone (activities/placement/capacity.py STALE_AFTER, 5 min). A new run with no state
adopts the high-water marks the root's status already carries (same flavor identity), so a
restarted worker does not forget them.

A node that is not a root (or stops being one) reports nothing: the workflow removes what it wrote
and waits, without a timer, for a newer generation (it may become the root again) or deletion. The
bridge starts it only for roots (crd_bridge/routes.py); deletion ends it. History stays bounded with
continue-as-new after `samples_per_run` samples, carrying the state.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel
from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.entity import EntityWorkflow, ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.capacity.activities import CapacityActivities
    from servingops.activities.capacity.attribution import (
        DEFAULT_BAND,
        DEFAULT_LOWER_AFTER,
        DEFAULT_RESOURCE_NAMES,
        FlavorCapacity,
        HighWaterMark,
        advance_high_water_mark,
        flavor_identity,
    )
    from servingops.activities.capacity.types import ObserveInput, ObserveOutput, WriteInput, WriteOutput
    from servingops.activities.placement.activities import PlacementActivities
    from servingops.activities.placement.quota_types import MemberCapacityInput, MemberCapacityReading
    from servingops.api_models.contract import StartObject, WorkflowType
    from servingops.api_models.ome.accelerator_quota import AcceleratorCapacityStatus
    from servingops.rendering.capacity_per_cluster import with_per_cluster


class CapacitySettings(BaseModel):
    """How the report samples and writes; the defaults are what the bridge's start uses."""

    interval_seconds: float = 30.0
    """Between two samples."""
    refresh_seconds: float = 120.0
    """An unchanged report is rewritten once its observedAt is this old, so readers see it is live."""
    band: float = DEFAULT_BAND
    """Hysteresis band of the high-water mark, a fraction of it."""
    lower_after: int = DEFAULT_LOWER_AFTER
    """Consecutive complete samples below the band before the high-water mark is lowered."""
    samples_per_run: int = 500
    """A run continues as new after this many samples (each about seven events)."""
    resource_names: list[str] = list(DEFAULT_RESOURCE_NAMES)
    """Reported in addition to every budget resourceName of the tree."""


class CapacityState(ReconcileState):
    """What the `state` query answers, and what a continued run carries."""

    phase: str = "Pending"
    """Pending (nothing sampled yet), Reporting, NotRoot, or Deleted."""
    marks: dict[str, HighWaterMark] = {}
    """Per `resource|flavor`, the high-water mark and its lowering count."""
    written: list[AcceleratorCapacityStatus] | None = None
    """The status.capacity last written (None: nothing written by this workflow, or removed)."""
    written_at: datetime | None = None
    """The observedAt of that write."""
    resource_version: str = ""
    """The root's resourceVersion after that write."""
    samples: int = 0
    """Samples in this run."""
    writes: int = 0
    """Writes in this run."""


class CapacityRun(StartObject):
    """The bridge starts the workflow with a StartObject; a continued run also carries its state."""

    settings: CapacitySettings = CapacitySettings()
    carried: CapacityState | None = None


def _key(resource_name: str | None, flavor: str | None) -> str:
    return f"{resource_name}|{flavor}"


def adopted_marks(reported: list[AcceleratorCapacityStatus]) -> dict[str, HighWaterMark]:
    """The high-water marks a root's status already carries, for a run that has none."""
    marks = {}
    for entry in reported:
        if entry.high_water_mark is None or entry.attribution is None:
            continue
        identity = flavor_identity(entry.attribution.flavor_uid, entry.attribution.node_labels)
        marks[_key(entry.resource_name, entry.resource_flavor)] = HighWaterMark(
            value=entry.high_water_mark, identity=identity)
    return marks


def report(observed: list[FlavorCapacity], observed_at: datetime, marks: dict[str, HighWaterMark],
           settings: CapacitySettings) -> tuple[list[AcceleratorCapacityStatus], dict[str, HighWaterMark]]:
    """The status.capacity of one sample and the marks after it (pairs no longer observed are dropped)."""
    entries, after = [], {}
    for pair in observed:
        key = _key(pair.resource_name, pair.resource_flavor)
        attribution = pair.attribution
        mark = advance_high_water_mark(
            marks.get(key), pair.allocatable, complete=bool(attribution.complete),
            identity=flavor_identity(attribution.flavor_uid, attribution.node_labels),
            band=settings.band, lower_after=settings.lower_after)
        after[key] = mark
        entries.append(AcceleratorCapacityStatus(
            resource_name=pair.resource_name, resource_flavor=pair.resource_flavor, allocatable=pair.allocatable,
            high_water_mark=mark.value, observed_at=observed_at, attribution=attribution))
    return entries, after


def _values(entries: list[AcceleratorCapacityStatus] | None) -> list[dict[str, object]] | None:
    if entries is None:
        return None
    return [e.model_copy(update={"observed_at": None}).to_api() for e in entries]


def needs_write(state: CapacityState, entries: list[AcceleratorCapacityStatus], observed_at: datetime,
                refresh: timedelta) -> bool:
    """A value moved (anything but observedAt), or what was written is `refresh` old."""
    if state.written is None or state.written_at is None:
        return True
    return _values(entries) != _values(state.written) or observed_at - state.written_at >= refresh


@workflow.defn(name=WorkflowType.ACCELERATOR_CAPACITY)
class AcceleratorCapacityWorkflow(EntityWorkflow[CapacityState]):
    def __init__(self) -> None:
        super().__init__(CapacityState())
        self.settings = CapacitySettings()
        self._root = False
        """The last sample found a root (a root is sampled on a timer, another node waits for a change)."""

    # object-changed, delete and the state query come from EntitySignals.

    @workflow.run
    async def run(self, start: CapacityRun) -> CapacityState:
        self.settings = start.settings
        self.begin(start, start.carried)
        return await self.live()

    # -- the entity loop's hooks (workflows/entity.py) ----------------------------------------------

    async def next_pass(self, timed_out: bool) -> bool:
        root = await self._sample()
        if root is None:
            return False
        self._root = root
        return True

    def rest_time(self) -> timedelta | None:
        # Not a root: nothing to sample until the object changes.
        return timedelta(seconds=self.settings.interval_seconds) if self._root else None

    def run_is_full(self) -> bool:
        return self.state.samples >= self.settings.samples_per_run

    def reset_run_counts(self) -> None:
        self.state.samples = self.state.writes = 0

    # -- a sample -----------------------------------------------------------------------------------

    async def _sample(self) -> bool | None:
        """One sample, written when it needs to be: True while reporting, False when not a root, None
        when the AcceleratorQuota is gone or going."""
        assert self.ref is not None and self.visibility is not None
        self.state.samples += 1
        observed: ObserveOutput = await workflow.execute_activity_method(
            CapacityActivities.observe,
            ObserveInput(quota=self.ref, resource_names=self.settings.resource_names), **options.KUBE)
        if not observed.present:
            return None
        self.state.generation = max(self.state.generation, observed.generation)
        self.state.acted_generation = max(self.state.acted_generation, observed.generation)
        if not observed.root or observed.observed_at is None:
            if (self.state.written is not None or observed.reported) and not await self._write(None):
                return None
            self.state.marks, self.state.written, self.state.written_at = {}, None, None
            self._publish("NotRoot")
            return False
        marks = self.state.marks if self.state.marks else adopted_marks(observed.reported)
        entries, marks = report(observed.capacity, observed.observed_at, marks, self.settings)
        self.state.marks = marks
        if observed.workload_clusters:
            # A management plane: each member's own root report, per (resource, flavor), in perCluster. No
            # patch guards the new step: it is taken only when the recorded observation counts WorkloadClusters,
            # which no history recorded before the field does.
            members: MemberCapacityReading = await workflow.execute_activity_method(
                PlacementActivities.read_member_capacity, MemberCapacityInput(root=self.ref.name), **options.MEMBER)
            entries = with_per_cluster(entries, members.members, self.state.written, observed.observed_at)
        if needs_write(self.state, entries, observed.observed_at, timedelta(seconds=self.settings.refresh_seconds)):
            if not await self._write(entries):
                return None
            self.state.written, self.state.written_at = entries, observed.observed_at
        self._publish("Reporting")
        return True

    async def _write(self, entries: list[AcceleratorCapacityStatus] | None) -> bool:
        assert self.ref is not None
        written: WriteOutput = await workflow.execute_activity_method(
            CapacityActivities.write_status, WriteInput(quota=self.ref, capacity=entries), **options.KUBE)
        if not written.present:
            return False
        self.state.writes += 1
        self.state.resource_version = written.resource_version or ""
        return True

    def _publish(self, phase: str) -> None:
        assert self.visibility is not None
        if phase != self.state.phase:
            self.state.phase = phase
            self.visibility.publish(phase)


__all__ = ["AcceleratorCapacityWorkflow", "CapacityRun", "CapacitySettings", "CapacityState", "adopted_marks",
           "needs_write", "report"]
