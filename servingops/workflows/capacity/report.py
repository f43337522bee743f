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

A 403 on the list of WorkloadClusters (capacity.observe's, or read_member_capacity's) is an answer, not a
failure retried forever: the sample still reports this plane's own capacity, keeps each member's last row
marked reportAvailable false, and says why on the root (CapacityReported False AccessRefused, with the
apiserver's answer, and a Warning Event, once per answer); the next sample tries again, and a mended role
turns the condition True Reported.

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
    from servingops.activities.capacity.types import (
        ACCESS_REFUSED,
        CAPACITY_CONDITION,
        CapacityEvent,
        ObserveInput,
        ObserveOutput,
        WriteInput,
        WriteOutput,
    )
    from servingops.activities.placement.activities import PlacementActivities
    from servingops.activities.placement.quota_types import MemberCapacityInput, MemberCapacityReading
    from servingops.api_models.contract import StartObject, WorkflowType
    from servingops.api_models.ome.accelerator_quota import AcceleratorCapacityStatus
    from servingops.api_models.refs import ConditionUpdate
    from servingops.rendering.capacity_per_cluster import MemberCapacityReport, with_per_cluster


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
    refused: str | None = None
    """What the apiserver said when it last refused (403) a reading of WorkloadClusters, as CapacityReported
    False AccessRefused says it on the root; None while the readings succeed."""


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


def unreadable_members(written: list[AcceleratorCapacityStatus] | None, refused: str) -> list[MemberCapacityReport]:
    """Every member the last report has a row of, unread this time because the list of WorkloadClusters was
    refused: rendering/capacity_per_cluster keeps such a member's row, marked reportAvailable false."""
    clusters = sorted({row.cluster for entry in written or [] for row in entry.per_cluster or [] if row.cluster})
    return [MemberCapacityReport(cluster=c, reason=ACCESS_REFUSED, message=refused) for c in clusters]


def access_change(before: str | None, now: str | None) -> tuple[ConditionUpdate | None, list[CapacityEvent]]:
    """CapacityReported and its Event when the refusal of the WorkloadCluster readings starts, changes or ends
    (None: nothing to say). False AccessRefused with the apiserver's answer and a Warning; back to True Reported
    once the readings succeed again."""
    if now == before:
        return None, []
    if now is not None:
        message = f"capacity observed, but no member's report read: {now}"[:1000]
        return (ConditionUpdate(type=CAPACITY_CONDITION, status="False", reason=ACCESS_REFUSED, message=message),
                [CapacityEvent(type="Warning", reason=ACCESS_REFUSED, message=message)])
    message = "the WorkloadClusters and their members' reports are read again"
    return (ConditionUpdate(type=CAPACITY_CONDITION, status="True", reason="Reported", message=message),
            [CapacityEvent(type="Normal", reason="Reported", message=message)])


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
        refused = observed.refused
        if observed.workload_clusters:
            # A management plane: each member's own root report, per (resource, flavor), in perCluster. No
            # patch guards the new step: it is taken only when the recorded observation counts WorkloadClusters,
            # which no history recorded before the field does.
            members: MemberCapacityReading = await workflow.execute_activity_method(
                PlacementActivities.read_member_capacity, MemberCapacityInput(root=self.ref.name), **options.MEMBER)
            refused = members.refused
            entries = with_per_cluster(entries, members.members, self.state.written, observed.observed_at)
        if refused is not None:
            # No member could be listed: each one's last row stays, marked unavailable (as for a member that
            # could not be read), and the root says why. Only an observation carrying a refusal (a field no
            # history recorded before it has) takes this step or the condition's write below.
            entries = with_per_cluster(entries, unreadable_members(self.state.written, refused), self.state.written,
                                       observed.observed_at)
        condition, events = access_change(self.state.refused, refused)
        if condition is not None or needs_write(self.state, entries, observed.observed_at,
                                                timedelta(seconds=self.settings.refresh_seconds)):
            if not await self._write(entries, condition, events):
                return None
            self.state.written, self.state.written_at = entries, observed.observed_at
            self.state.refused = refused
        self._publish("Reporting")
        return True

    async def _write(self, entries: list[AcceleratorCapacityStatus] | None, condition: ConditionUpdate | None = None,
                     events: list[CapacityEvent] | None = None) -> bool:
        assert self.ref is not None
        written: WriteOutput = await workflow.execute_activity_method(
            CapacityActivities.write_status, WriteInput(quota=self.ref, capacity=entries, condition=condition,
                                                        events=events or []), **options.KUBE)
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


__all__ = ["AcceleratorCapacityWorkflow", "CapacityRun", "CapacitySettings", "CapacityState", "access_change",
           "adopted_marks", "needs_write", "report", "unreadable_members"]
