"""AcceleratorCapacityWorkflow on Temporal's time-skipping server, its two activities replaced by fakes
the tests script (the activities themselves run against the real apiserver in
tests/test_capacity_activities.py).

What is held: the first sample is written; an unchanged sample writes nothing until the written
observedAt is 120 s old (then it is rewritten, so readers can tell a live report); a changed value is
written at the next sample; the high-water mark follows the hysteresis; a newer generation samples at
once; a node that is not the root writes nothing and waits without a timer, a demoted root removes
its report; deletion and a gone object end it; continue-as-new carries the marks and what was written;
a new run adopts the marks already in status; a 403 on the WorkloadCluster list (observe's or the member
reading's) is said on the root (CapacityReported False AccessRefused, one Warning) while sampling goes on,
and turns True once mended."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models.contract import Query, Signal, capacity_workflow_id
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.rollout_fakes import until
from tests.histories.record import start_env

pytestmark = [pytest.mark.timeskip, pytest.mark.asyncio]

INTERVAL = 30.0
SLACK = 2
"""Seconds a timeline may run late: the time-skipping clock skips only while nothing runs, so each activity's
real time (a second or more on a loaded machine) is added to the workflow's clock."""
GPU = "nvidia.com/gpu"


@dataclass
class FakeCluster:
    """What observe answers (scripted) and what write_status received, with the test clock's time."""

    allocatable: int = 16
    complete: bool = True
    root: bool = True
    present: bool = True
    generation: int = 1
    reported: list[dict[str, Any]] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)
    writes: list[tuple[float, list[dict[str, Any]] | None]] = field(default_factory=list)
    env: WorkflowEnvironment | None = None
    members: list[dict[str, Any]] | None = None
    """A management plane's registered members' reports (`placement.read_member_capacity`); None: no
    WorkloadCluster is registered (a workload cluster)."""
    member_reads: int = 0
    refused: str | None = None
    """capacity.observe's answer when the worker may not list WorkloadClusters (a 403)."""
    member_refused: str | None = None
    """placement.read_member_capacity's, likewise."""
    conditions: list[dict[str, Any] | None] = field(default_factory=list)
    """The condition each write_status was asked to set (None: none)."""
    events: list[dict[str, Any]] = field(default_factory=list)

    def activities(self) -> list[Any]:
        @activity.defn(name="capacity.observe")
        async def observe(request: dict[str, Any]) -> dict[str, Any]:
            assert self.env is not None
            now = await self.env.get_current_time()
            self.samples.append(now.timestamp())
            if not self.present:
                return {"present": False}
            if not self.root:
                return {"present": True, "root": False, "generation": self.generation, "reported": self.reported}
            assert GPU in request["resource_names"]
            return {
                "present": True, "root": True, "generation": self.generation, "resource_version": "5",
                "observed_at": now.astimezone(UTC).replace(microsecond=0).isoformat(),
                "resource_names": [GPU],
                "capacity": [{"resource_name": GPU, "resource_flavor": "a100", "allocatable": self.allocatable,
                              "attribution": {"flavorUID": "uid-a100", "nodeLabels": {"gpu": "a100"},
                                              "flavorSetHash": "h" * 64, "complete": self.complete}}],
                "reported": self.reported,
                "workload_clusters": 0 if self.refused else len(self.members or []),
                "refused": self.refused,
            }

        @activity.defn(name="placement.read_member_capacity")
        async def read_member_capacity(request: dict[str, Any]) -> dict[str, Any]:
            self.member_reads += 1
            assert request["root"] == "root"
            if self.member_refused:
                return {"members": [], "refused": self.member_refused}
            return {"members": self.members or []}

        @activity.defn(name="capacity.write_status")
        async def write_status(request: dict[str, Any]) -> dict[str, Any]:
            assert self.env is not None
            self.writes.append(((await self.env.get_current_time()).timestamp(), request["capacity"]))
            self.conditions.append(request.get("condition"))
            self.events.extend(request.get("events") or [])
            return {"present": self.present, "resource_version": str(len(self.writes) + 5)}

        return [observe, read_member_capacity, write_status]

    def last(self) -> dict[str, Any]:
        capacity = self.writes[-1][1]
        assert capacity is not None
        return capacity[0]

    @property
    def marks(self) -> list[Any]:
        return [w[1][0]["highWaterMark"] if w[1] else None for w in self.writes]


@dataclass
class Running:
    env: WorkflowEnvironment
    cluster: FakeCluster
    handle: WorkflowHandle[Any, Any]
    uid: str

    async def changed(self, generation: int) -> None:
        await self.handle.signal(Signal.OBJECT_CHANGED,
                                 {"uid": self.uid, "generation": generation, "resource_version": str(generation)})

    async def sampled(self, count: int, what: str) -> None:
        await until(self.env, lambda: len(self.cluster.samples) >= count, step=1, what=what)


async def _start(env: WorkflowEnvironment, cluster: FakeCluster, queue: str,
                 **settings: Any) -> tuple[WorkflowHandle[Any, Any], str]:
    uid = str(uuid.uuid4())
    ref = {"group": "ome.io", "version": "v1beta1", "plural": "acceleratorquotas", "kind": "AcceleratorQuota",
           "name": "root", "uid": uid}
    start: dict[str, Any] = {"ref": ref}
    if settings:
        start["settings"] = settings
    handle = await env.client.start_workflow("AcceleratorCapacityWorkflow", start,
                                             id=capacity_workflow_id("root", uid), task_queue=queue)
    return handle, uid


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


def _worker(env: WorkflowEnvironment, cluster: FakeCluster, queue: str) -> Worker:
    return Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                  activities=cluster.activities(), workflow_runner=workflow_runner())


@pytest.fixture
async def running(env: WorkflowEnvironment) -> AsyncIterator[Running]:
    cluster = FakeCluster(env=env)
    queue = f"cap-{uuid.uuid4().hex[:8]}"
    async with _worker(env, cluster, queue):
        handle, uid = await _start(env, cluster, queue)
        run = Running(env, cluster, handle, uid)
        await until(env, lambda: len(cluster.writes) == 1, what="the first sample written")
        yield run
        if not cluster.present:
            return
        await handle.signal(Signal.DELETE, {"uid": uid, "generation": cluster.generation,
                                            "resource_version": "99", "deleting": True})
        await handle.result()


async def test_first_sample_is_written_then_refreshed_every_120_seconds_only(running: Running) -> None:
    cluster = running.cluster
    first = cluster.last()
    assert first["resourceName"] == GPU and first["resourceFlavor"] == "a100"
    assert first["allocatable"] == 16 and first["highWaterMark"] == 16
    assert first["attribution"]["complete"] is True and first["attribution"]["flavorUID"] == "uid-a100"
    assert first["observedAt"]
    await running.sampled(10, "ten samples")
    gaps = [round(b - a) for a, b in zip(cluster.samples, cluster.samples[1:], strict=False)]
    assert len(gaps) >= 8 and all(INTERVAL <= gap <= INTERVAL + SLACK for gap in gaps[:8]), gaps
    # Nothing changed: rewritten only when the written observedAt is 120 s old.
    times = [round(t - cluster.writes[0][0]) for t, _ in cluster.writes]
    assert len(times) >= 3 and all(0 <= t - want <= SLACK for t, want in zip(times, [0, 120, 240], strict=False)), times
    observed = [datetime.fromisoformat(w[1][0]["observedAt"]) for w in cluster.writes if w[1]]
    assert observed[1] > observed[0]
    state = await running.handle.query(Query.STATE)
    assert state["phase"] == "Reporting" and state["resource_version"]


def _member(cluster: str, flavor: str, allocatable: int, mark: int, *, available: bool = True) -> dict[str, Any]:
    if not available:
        return {"cluster": cluster, "cluster_uid": f"uid-{cluster}", "available": False, "reason": "Unreachable",
                "message": f"{cluster} cannot be reached"}
    return {"cluster": cluster, "cluster_uid": f"uid-{cluster}", "available": True, "report_uid": f"root-{cluster}",
            "report_resource_version": "11",
            "capacity": [{"resourceName": GPU, "resourceFlavor": flavor, "allocatable": allocatable,
                          "highWaterMark": mark, "observedAt": "2026-12-07T10:00:00Z",
                          "attribution": {"flavorUID": f"uid-{flavor}-{cluster}", "complete": True}}]}


async def test_a_management_plane_writes_each_members_report_per_cluster(env: WorkflowEnvironment) -> None:
    """WorkloadClusters registered: each sample also reads every member's root report and writes it in
    perCluster, per (resource, flavor); a pair only members have gets an entry with their summed
    allocatable and no mark of its own; a member unreadable this time keeps its last row, marked
    reportAvailable false; a cluster with none registered never reads members."""
    cluster = FakeCluster(env=env, members=[_member("east", "a100", 8, 8), _member("west", "h100", 4, 6)])
    queue = f"cap-{uuid.uuid4().hex[:8]}"
    async with _worker(env, cluster, queue):
        handle, uid = await _start(env, cluster, queue)
        await until(env, lambda: len(cluster.writes) == 1, what="the first sample written")
        first = cluster.writes[0][1]
        assert first is not None
        by_pair = {(e["resourceName"], e["resourceFlavor"]): e for e in first}
        own = by_pair[(GPU, "a100")]
        assert (own["allocatable"], own["highWaterMark"]) == (16, 16)  # this plane's own nodes
        assert [(r["cluster"], r["allocatable"], r["highWaterMark"], r["reportAvailable"], r["clusterUID"],
                 r["reportUID"]) for r in own["perCluster"]] == [("east", 8, 8, True, "uid-east", "root-east")]
        only_members = by_pair[(GPU, "h100")]
        assert only_members["allocatable"] == "4" and only_members.get("highWaterMark") is None
        assert [r["cluster"] for r in only_members["perCluster"]] == ["west"]
        cluster.members = [_member("east", "a100", 8, 8), _member("west", "h100", 0, 0, available=False)]
        await until(env, lambda: len(cluster.writes) >= 2, step=1, what="the unreadable member written")
        second = cluster.writes[-1][1]
        assert second is not None
        [west] = next(e for e in second if e["resourceFlavor"] == "h100")["perCluster"]
        assert west["reportAvailable"] is False and west["allocatable"] == 4 and west["highWaterMark"] == 6
        await handle.signal(Signal.DELETE, {"uid": uid, "generation": 1, "resource_version": "99", "deleting": True})
        await handle.result()
    assert cluster.member_reads >= 2


REFUSED = ('the worker may not list WorkloadClusters: 403 Forbidden: workloadclusters.ome.io is forbidden: User '
           '"system:serviceaccount:servingops:servingops-worker" cannot list resource "workloadclusters"')


async def test_a_refused_member_listing_is_said_on_the_root_and_heals(env: WorkflowEnvironment) -> None:
    """read_member_capacity answers a 403 on the WorkloadCluster list: the sample still writes this plane's own
    capacity, keeps each member's last row marked reportAvailable false, and sets CapacityReported False
    AccessRefused with the apiserver's answer and one Warning (not again while the answer stays the same); the
    workflow goes on sampling, and once the role is mended the rows are read again and the condition turns True."""
    cluster = FakeCluster(env=env, members=[_member("east", "a100", 8, 8)])
    queue = f"cap-{uuid.uuid4().hex[:8]}"
    async with _worker(env, cluster, queue):
        handle, uid = await _start(env, cluster, queue)
        await until(env, lambda: len(cluster.writes) == 1, what="the first sample written")
        assert cluster.conditions == [None] and cluster.events == [], "nothing refused: no condition written"
        cluster.member_refused = REFUSED
        await until(env, lambda: len(cluster.writes) >= 2, step=1, what="the refusal written")
        refused = cluster.conditions[-1]
        assert refused is not None
        assert (refused["type"], refused["status"], refused["reason"]) == ("CapacityReported", "False",
                                                                           "AccessRefused")
        assert REFUSED in refused["message"]
        assert [(e["type"], e["reason"]) for e in cluster.events] == [("Warning", "AccessRefused")]
        own = cluster.last()
        assert (own["allocatable"], own["highWaterMark"]) == (16, 16), "this plane's own capacity still reported"
        [east] = own["perCluster"]
        assert (east["cluster"], east["reportAvailable"], east["allocatable"]) == ("east", False, 8)
        samples = len(cluster.samples)
        await running_for(env, cluster, samples + 3)
        assert len(cluster.events) == 1, "the same answer is said once"
        cluster.member_refused = None
        await until(env, lambda: cluster.conditions[-1] is not None and cluster.conditions[-1]["status"] == "True",
                    step=1, what="the mended role said")
        healed = cluster.conditions[-1]
        assert healed is not None and (healed["type"], healed["reason"]) == ("CapacityReported", "Reported")
        assert [(e["type"], e["reason"]) for e in cluster.events] == [("Warning", "AccessRefused"),
                                                                       ("Normal", "Reported")]
        [east] = cluster.last()["perCluster"]
        assert east["reportAvailable"] is True
        state = await handle.query(Query.STATE)
        assert state["phase"] == "Reporting" and state["refused"] is None
        await handle.signal(Signal.DELETE, {"uid": uid, "generation": 1, "resource_version": "99", "deleting": True})
        await handle.result()


async def test_a_refused_observe_listing_is_said_on_the_root(running: Running) -> None:
    """capacity.observe answers a 403 on the WorkloadCluster list: the capacity is written, CapacityReported False
    AccessRefused says why, and the samples go on (before: the activity failed and was retried forever)."""
    cluster = running.cluster
    cluster.refused = REFUSED
    await until(running.env, lambda: cluster.conditions[-1] is not None, step=1, what="the refusal written")
    refused = cluster.conditions[-1]
    assert refused is not None and (refused["status"], refused["reason"]) == ("False", "AccessRefused")
    assert REFUSED in refused["message"]
    samples = len(cluster.samples)
    await running.sampled(samples + 2, "sampling goes on")
    assert cluster.member_reads == 0
    assert [(e["type"], e["reason"]) for e in cluster.events] == [("Warning", "AccessRefused")]
    state = await running.handle.query(Query.STATE)
    assert state["refused"] == REFUSED


async def running_for(env: WorkflowEnvironment, cluster: FakeCluster, samples: int) -> None:
    await until(env, lambda: len(cluster.samples) >= samples, step=1, what=f"{samples} samples")


async def test_a_workload_cluster_reads_no_members(running: Running) -> None:
    await running.sampled(3, "three samples")
    assert running.cluster.member_reads == 0
    assert not running.cluster.last().get("perCluster")


async def test_a_change_is_written_at_the_next_sample_and_the_mark_follows_the_hysteresis(running: Running) -> None:
    cluster = running.cluster
    cluster.allocatable = 24
    await until(running.env, lambda: cluster.last()["allocatable"] == 24, step=5, what="the rise written")
    assert round(cluster.writes[-1][0] - cluster.writes[0][0]) <= INTERVAL + SLACK
    assert cluster.last()["highWaterMark"] == 24
    # A drain: allocatable drops by more than 10 %; the mark holds for two samples, lowered at the third.
    cluster.allocatable = 8
    await until(running.env, lambda: cluster.last()["allocatable"] == 8, step=5, what="the drop written")
    drop = len(cluster.samples)
    assert cluster.last()["highWaterMark"] == 24
    await until(running.env, lambda: cluster.last()["highWaterMark"] == 8, step=5, what="the mark lowered")
    assert len(cluster.samples) - drop == 2
    # A dip within the band does not lower it.
    cluster.allocatable = 8
    state = await running.handle.query(Query.STATE)
    assert state["marks"][f"{GPU}|a100"]["value"] == 8


async def test_incomplete_samples_do_not_lower_the_mark(running: Running) -> None:
    cluster = running.cluster
    cluster.allocatable, cluster.complete = 0, False
    await until(running.env, lambda: cluster.last()["attribution"]["complete"] is False, step=5,
                what="the incomplete sample written")
    await running.sampled(len(cluster.samples) + 5, "five more samples")
    assert cluster.last()["highWaterMark"] == 16


async def test_a_newer_generation_samples_at_once_a_stale_one_does_not(running: Running) -> None:
    cluster = running.cluster
    before = len(cluster.samples)
    await running.changed(1)
    await running.env.sleep(INTERVAL / 3)
    assert len(cluster.samples) == before
    cluster.generation = 2
    await running.changed(2)
    await until(running.env, lambda: len(cluster.samples) > before, step=1, what="the new generation's sample")
    assert cluster.samples[-1] - cluster.samples[-2] < INTERVAL
    state = await running.handle.query(Query.STATE)
    assert state["acted_generation"] == 2


async def test_a_demoted_root_removes_its_report_and_waits_until_it_changes_again(running: Running) -> None:
    cluster = running.cluster
    cluster.root, cluster.generation = False, 2
    await running.changed(2)
    await until(running.env, lambda: cluster.writes[-1][1] is None, step=1, what="the report removed")
    state = await running.handle.query(Query.STATE)
    assert state["phase"] == "NotRoot"
    samples = len(cluster.samples)
    await running.env.sleep(INTERVAL * 10)
    assert len(cluster.samples) == samples  # no timer while not a root
    cluster.root, cluster.generation = True, 3
    await running.changed(3)
    await until(running.env, lambda: cluster.writes[-1][1] is not None, step=1, what="reporting again")
    assert (await running.handle.query(Query.STATE))["phase"] == "Reporting"


async def test_a_gone_object_ends_the_workflow(running: Running) -> None:
    running.cluster.present = False
    state = await running.handle.result()
    assert state["phase"] == "Deleted"
    assert len(running.cluster.writes) == 1


async def test_a_node_that_is_not_the_root_writes_nothing(env: WorkflowEnvironment) -> None:
    cluster = FakeCluster(env=env, root=False)
    queue = f"cap-{uuid.uuid4().hex[:8]}"
    async with _worker(env, cluster, queue):
        handle, uid = await _start(env, cluster, queue)
        await until(env, lambda: len(cluster.samples) == 1, what="the first sample")
        await env.sleep(INTERVAL * 5)
        assert len(cluster.samples) == 1 and cluster.writes == []
        assert (await handle.query(Query.STATE))["phase"] == "NotRoot"
        await handle.signal(Signal.DELETE, {"uid": uid, "generation": 1, "resource_version": "9", "deleting": True})
        assert (await handle.result())["phase"] == "Deleted"


async def test_a_node_that_is_not_the_root_removes_a_report_left_on_it(env: WorkflowEnvironment) -> None:
    cluster = FakeCluster(env=env, root=False, reported=[{"resourceName": GPU, "resourceFlavor": "a100",
                                                          "allocatable": 8}])
    queue = f"cap-{uuid.uuid4().hex[:8]}"
    async with _worker(env, cluster, queue):
        handle, uid = await _start(env, cluster, queue)
        await until(env, lambda: len(cluster.writes) == 1, what="the report removed")
        assert cluster.writes[0][1] is None
        await handle.signal(Signal.DELETE, {"uid": uid, "generation": 1, "resource_version": "9", "deleting": True})
        await handle.result()


async def test_continue_as_new_carries_marks_and_what_was_written(env: WorkflowEnvironment) -> None:
    cluster = FakeCluster(env=env, allocatable=24)
    queue = f"cap-{uuid.uuid4().hex[:8]}"
    async with _worker(env, cluster, queue):
        handle, uid = await _start(env, cluster, queue, samples_per_run=2)
        await until(env, lambda: len(cluster.writes) == 1, what="the first sample")
        cluster.allocatable = 8
        await until(env, lambda: len(cluster.samples) >= 7, step=5, what="samples over three runs")
        # Across runs: the mark was lowered only after three samples below it, and nothing was written
        # again just because a run began.
        assert cluster.marks[:3] == [24, 24, 8], cluster.marks
        description = await handle.describe()
        assert description.run_id != handle.first_execution_run_id
        await handle.signal(Signal.DELETE, {"uid": uid, "generation": 1, "resource_version": "9", "deleting": True})
        await env.client.get_workflow_handle(handle.id).result()


async def test_a_new_run_adopts_the_marks_already_in_status(env: WorkflowEnvironment) -> None:
    cluster = FakeCluster(env=env, allocatable=8, reported=[{
        "resourceName": GPU, "resourceFlavor": "a100", "allocatable": 24, "highWaterMark": 32,
        "observedAt": "2026-01-01T00:00:00Z",
        "attribution": {"flavorUID": "uid-a100", "nodeLabels": {"gpu": "a100"}, "complete": True}}])
    queue = f"cap-{uuid.uuid4().hex[:8]}"
    async with _worker(env, cluster, queue):
        handle, uid = await _start(env, cluster, queue)
        await until(env, lambda: len(cluster.writes) == 1, what="the first sample")
        assert cluster.last()["highWaterMark"] == 32 and cluster.last()["allocatable"] == 8
        await handle.signal(Signal.DELETE, {"uid": uid, "generation": 1, "resource_version": "9", "deleting": True})
        await handle.result()
