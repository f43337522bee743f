"""AcceleratorQuotaWorkflow on Temporal's time-skipping server against the fake plane
(testkit/accelerator_quota_fakes.py, held to the real activities by tests/test_accelerator_quota_conformance.py).

What is held: a leaf materializes its ClusterQueue and LocalQueue with the finalizer and is Ready; Kueue's
usage shows in status.budgets at the next pass (10 s); a containment violation freezes the output at the last
good state (nothing written, a Warning Event, frozenAt kept) and thaws when mended; re-parenting updates the
ClusterQueue in place; a leaf that still holds work cannot become a grouping, a drained one can (its queue
deleted, a Cohort made); a flavor that does not exist keeps the leaf not Ready; a deletion reaps the Kueue
objects and releases the finalizer."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models.contract import Query, Signal, accelerator_quota_workflow_id
from servingops.api_models.ome.enums import AcceleratorQuotaDistributionPolicy
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.accelerator_quota_fakes import FakeQuotaWorld, StoredQuota
from testkit.rollout_fakes import until
from tests.histories.record import start_env

pytestmark = [pytest.mark.timeskip, pytest.mark.asyncio]

GPU = "nvidia.com/gpu"
PROPORTIONAL = {"policy": "Proportional"}


def gpus(nominal: int, flavor: str = "a100", **extra: Any) -> list[dict[str, Any]]:
    return [{"resourceName": GPU, "resourceFlavor": flavor, "nominal": nominal, **extra}]


@dataclass
class Running:
    env: WorkflowEnvironment
    world: FakeQuotaWorld
    stored: StoredQuota
    handle: WorkflowHandle[Any, Any]

    def status(self) -> dict[str, Any]:
        return self.stored.status

    def condition(self, kind: str) -> dict[str, Any]:
        return next((c for c in self.status().get("conditions") or [] if c["type"] == kind), {})

    async def changed(self, spec: dict[str, Any]) -> None:
        self.world.edit(self.stored.name, spec)
        await self.handle.signal(Signal.OBJECT_CHANGED, {"uid": self.stored.uid, "generation": self.stored.generation,
                                                         "resource_version": str(self.stored.generation)})


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


def _world() -> FakeQuotaWorld:
    world = FakeQuotaWorld(flavors={"a100"}, priority_classes={"high"})
    world.add_quota("root", {"role": "Cohort", "budgets": gpus(8)})
    world.add_quota("org", {"role": "Cohort", "parentRef": {"name": "root"}, "budgets": gpus(4)})
    world.add_quota("other", {"role": "Cohort", "parentRef": {"name": "root"}})
    world.add_quota("team", {"role": "ClusterQueue", "parentRef": {"name": "org"}, "budgets": gpus(2, borrowingLimit=1),
                             "priorityTier": "high", "distribution": PROPORTIONAL})
    world.bind_namespace("team-ns", "team")
    return world


async def _run(env: WorkflowEnvironment, world: FakeQuotaWorld, name: str) -> AsyncIterator[Running]:
    queue = f"aq-{uuid.uuid4().hex[:8]}"
    stored = world.quotas[name]
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(env.get_current_time), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow("AcceleratorQuotaWorkflow", {"ref": stored.ref().model_dump()},
                                                 id=accelerator_quota_workflow_id(stored.name, stored.uid),
                                                 task_queue=queue)
        running = Running(env, world, stored, handle)
        await until(env, lambda: bool(world.writes), step=1, what="the first status written")
        yield running
        if stored.name in world.quotas:
            world.delete_quota(stored.name)
            await handle.signal(Signal.DELETE, {"uid": stored.uid, "generation": stored.generation,
                                                "resource_version": "99", "deleting": True})
        result = await handle.result()
        assert result["phase"] == "Deleted"


@pytest.fixture
async def team(env: WorkflowEnvironment) -> AsyncIterator[Running]:
    async for run in _run(env, _world(), "team"):
        yield run


async def test_a_leaf_materializes_its_queues_and_reports_kueues_usage(team: Running) -> None:
    world = team.world
    queue = world.cluster_queues["team"]
    assert queue["spec"]["cohortName"] == "org"
    [group] = queue["spec"]["resourceGroups"]
    assert group["flavors"][0]["resources"][0] == {"name": GPU, "nominalQuota": "2", "borrowingLimit": "1"}
    assert world.local_queues[("team-ns", "team")]["spec"] == {"clusterQueue": "team"}
    assert team.stored.finalizers == ["ome.io/accelerator-quota"]
    await until(team.env, lambda: team.condition("Ready").get("status") == "True", step=1, what="Ready")
    assert team.condition("Ready")["reason"] == "Admitted"
    assert (team.condition("Degraded")["status"], team.condition("Materialized")["status"]) == ("False", "True")
    assert team.status()["parent"] == "org" and team.status()["materialization"]["lastAppliedGeneration"] == 1
    assert [e.reason for e in world.events] == ["Materialized"]
    applies = len(world.applies)
    world.set_usage("team", "a100", GPU, admitted="3", borrowed="1", reserved="4")
    await until(team.env, lambda: team.status()["budgets"][0]["admitted"] == "3", step=1, what="usage shown")
    assert team.status()["budgets"] == [{"resourceName": GPU, "resourceFlavor": "a100", "nominal": "2",
                                         "admitted": "3", "reserved": "4", "borrowed": "1"}]
    assert len(world.applies) == applies  # the plane was in sync: nothing applied again
    state = await team.handle.query(Query.STATE)
    assert state["phase"] == "Materialized"


async def test_a_containment_violation_freezes_the_last_good_output(team: Running) -> None:
    world = team.world
    await until(team.env, lambda: team.condition("Ready").get("status") == "True", step=1, what="Ready")
    await team.changed({**team.stored.spec, "budgets": gpus(6)})
    await until(team.env, lambda: (team.status().get("materialization") or {}).get("frozen") is True, step=1,
                what="frozen")
    frozen = team.status()["materialization"]
    assert frozen["reason"] == "ContainmentViolated" and frozen["lastAppliedGeneration"] == 1
    assert world.cluster_queues["team"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] \
        == "2"
    assert (team.condition("Degraded")["status"], team.condition("Degraded")["reason"]) == ("True",
                                                                                           "ContainmentViolated")
    assert team.condition("Materialized")["reason"] == "Frozen" and team.condition("Ready")["status"] == "False"
    assert world.events[-1].type == "Warning" and world.events[-1].reason == "ContainmentViolated"
    assert team.status()["budgets"][0]["nominal"] == "2"
    frozen_at = frozen["frozenAt"]
    await until(team.env, lambda: world.observes >= 6, step=5, what="more passes")
    assert team.status()["materialization"]["frozenAt"] == frozen_at
    assert sum(e.reason == "ContainmentViolated" for e in world.events) == 1  # once, when the freeze began
    await team.changed({**team.stored.spec, "budgets": gpus(3)})
    await until(team.env, lambda: not team.status()["materialization"].get("frozen"), step=1, what="thawed")
    assert world.cluster_queues["team"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] \
        == "3"
    assert team.status()["materialization"]["lastAppliedGeneration"] == 3
    assert "frozenAt" not in team.status()["materialization"] and "reason" not in team.status()["materialization"]
    assert [e.reason for e in world.events][-2:] == ["Unfrozen", "Materialized"]


async def test_re_parenting_moves_the_queue_in_place(team: Running) -> None:
    world = team.world
    uid = world.cluster_queues["team"]["metadata"]["uid"]
    local = world.local_queues[("team-ns", "team")]["metadata"]["uid"]
    await team.changed({**team.stored.spec, "parentRef": {"name": "other"}})
    await until(team.env, lambda: world.cluster_queues["team"]["spec"]["cohortName"] == "other", step=1,
                what="the cohort moved")
    assert world.cluster_queues["team"]["metadata"]["uid"] == uid
    assert world.local_queues[("team-ns", "team")]["metadata"]["uid"] == local
    await until(team.env, lambda: team.status().get("parent") == "other", step=1, what="parent echoed")
    assert world.applies[-1].removals == []


async def test_a_leaf_becomes_a_grouping_only_once_drained(team: Running) -> None:
    world = team.world
    await until(team.env, lambda: team.condition("Ready").get("status") == "True", step=1, what="Ready")
    world.set_usage("team", "a100", GPU, admitted="1", workloads=1)
    await team.changed({"role": "Cohort", "parentRef": {"name": "org"}})
    await until(team.env, lambda: team.condition("Degraded").get("reason") == "RoleChangeBlocked", step=1,
                what="the role change refused")
    assert "team" in world.cluster_queues and "team" not in world.cohorts
    world.cluster_queues["team"]["status"] = {}
    await until(team.env, lambda: "team" in world.cohorts, step=1, what="the drained leaf turned grouping")
    assert "team" not in world.cluster_queues and world.local_queues == {}
    assert world.cohorts["team"]["spec"] == {"parentName": "org"}
    await until(team.env, lambda: team.condition("Ready").get("status") == "True", step=1, what="Ready as a Cohort")


async def test_a_missing_flavor_keeps_the_leaf_not_ready(env: WorkflowEnvironment) -> None:
    world = _world()
    world.flavors = set()
    async for run in _run(env, world, "team"):
        leaf: Running = run
        await until(env, lambda leaf=leaf: leaf.condition("Ready").get("reason") == "FlavorMissing", step=1,
                    what="FlavorMissing")
        assert leaf.condition("Materialized")["status"] == "True"  # written; Kueue keeps it inactive
        assert [(e.type, e.reason) for e in world.events] == [("Warning", "FlavorMissing"), ("Normal", "Materialized")]
        world.flavors.add("a100")
        await until(env, lambda leaf=leaf: leaf.condition("Ready").get("status") == "True", step=1,
                    what="Ready once it exists")


async def test_a_parent_that_does_not_exist_materializes_nothing(env: WorkflowEnvironment) -> None:
    world = _world()
    world.add_quota("stray", {"role": "ClusterQueue", "parentRef": {"name": "nowhere"}, "budgets": gpus(1),
                              "distribution": PROPORTIONAL})
    async for run in _run(env, world, "stray"):
        assert run.condition("Degraded")["reason"] == "ParentMissing"
        assert run.status()["materialization"]["frozen"] is True and "parent" not in run.status()
        assert "stray" not in world.cluster_queues and world.applies == []


async def test_deletion_reaps_the_kueue_objects_and_releases_the_finalizer(env: WorkflowEnvironment) -> None:
    world = _world()
    async for run in _run(env, world, "team"):
        assert "team" in world.cluster_queues
        world.delete_quota("team")
        assert run.stored.deleting
        await run.handle.signal(Signal.DELETE, {"uid": run.stored.uid, "generation": 1, "resource_version": "5",
                                                "deleting": True})
        state = await run.handle.result()
        assert state["phase"] == "Deleted" and sorted(state["reaped"]) == ["ClusterQueue//team",
                                                                           "LocalQueue/team-ns/team"]
        assert "team" not in world.quotas and world.cluster_queues == {} and world.local_queues == {}


async def test_the_operator_configmaps_default_distribution_resolves_a_leaf_that_names_none(
        env: WorkflowEnvironment) -> None:
    """quota.defaultDistribution in the operator ConfigMap (observe reads it every pass): without it a leaf with
    no policy is Degraded ShareUnresolved; set, the next pass materializes the leaf; a block that does not
    parse says so in the Degraded message."""
    world = _world()
    world.add_quota("plain", {"role": "ClusterQueue", "parentRef": {"name": "other"}, "budgets": gpus(1)})
    world.config_error = "ConfigMap servingops-system/servingops-config: quota.defaultDistribution: bad"
    async for run in _run(env, world, "plain"):
        leaf: Running = run
        await until(env, lambda leaf=leaf: "not read" in leaf.condition("Degraded").get("message", ""), step=1,
                    what="the unreadable block named")
        assert leaf.condition("Degraded")["reason"] == "ShareUnresolved" and "plain" not in world.cluster_queues
        assert "quota.defaultDistribution: bad" in leaf.condition("Degraded")["message"]
        world.config_error = ""
        world.operator_default = AcceleratorQuotaDistributionPolicy.PROPORTIONAL
        await until(env, lambda leaf=leaf: leaf.condition("Degraded").get("status") == "False", step=1,
                    what="resolved by the operator default")
        assert "plain" in world.cluster_queues
        assert [e.reason for e in world.events][-2:] == ["Unfrozen", "Materialized"]


async def test_a_refused_reap_is_reported_and_tried_again_not_a_failed_workflow(env: WorkflowEnvironment) -> None:
    """A 403 on the reap's deletes (acceleratorquota.reap answers it as `refused`): the node stays on its
    finalizer with Ready False ReapRefused and one Warning, the workflow keeps trying each interval, and once the
    role is mended the deletion completes."""
    world = _world()
    async for run in _run(env, world, "team"):
        world.refuse_reap = "Forbidden: clusterqueues.kueue.x-k8s.io \"team\" is forbidden"
        world.delete_quota("team")
        await run.handle.signal(Signal.DELETE, {"uid": run.stored.uid, "generation": 1, "resource_version": "5",
                                                "deleting": True})
        await until(env, lambda run=run: run.condition("Ready").get("reason") == "ReapRefused", step=1,
                    what="the refusal on the node")
        assert "is forbidden" in run.condition("Ready")["message"] and "team" in world.quotas
        await env.sleep(35)  # three more tries
        assert [(e.type, e.reason) for e in world.events if e.reason == "ReapRefused"] == [("Warning", "ReapRefused")]
        assert "team" in world.cluster_queues and run.stored.finalizers
        world.refuse_reap = ""
        state = await run.handle.result()
        assert state["phase"] == "Deleted" and "team" not in world.quotas and world.cluster_queues == {}
