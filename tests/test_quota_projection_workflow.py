"""The AcceleratorQuota projection onto WorkloadClusters in AcceleratorQuotaWorkflow, on Temporal's time-skipping
server: a management plane (FakeQuotaWorld with WorkloadClusters registered) projecting into members
(FakeQuotaFleet, held to the real member activities by tests/test_quota_projection_conformance.py), and each
member running the same workflow on its own fake plane.

What is held: a Proportional leaf's fleet nominal is split by each cluster's capacity (the root's
status.capacity perCluster) into each member's copy (one resolved share, the source generation annotated);
status.clusters reports appliedGeneration / appliedTime and materializedGeneration read back from the copy's
status.sourceGeneration (a message while behind); budgets[].perCluster carries each cluster's share and usage;
an unreachable member's row says why and the other member still gets its new share; a frozen node writes no new
projection; a member materializes the copies into its own Kueue (its ClusterQueue's nominal is the share) and
echoes the source generation; deleting the node deletes the copies."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models.contract import Signal, accelerator_quota_workflow_id
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.accelerator_quota_fakes import FakeQuotaFleet, FakeQuotaWorld, StoredQuota
from testkit.rollout_fakes import until
from tests.histories.record import start_env

pytestmark = [pytest.mark.timeskip, pytest.mark.asyncio]

GPU = "nvidia.com/gpu"


def gpus(nominal: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"resourceName": GPU, "resourceFlavor": "a100", "nominal": nominal, **extra}]


def management() -> FakeQuotaWorld:
    world = FakeQuotaWorld(flavors={"a100"}, workload_clusters=["east", "west"])
    root = world.add_quota("fleet", {"role": "Cohort", "budgets": gpus(8)})
    root.status = {"capacity": [{"resourceName": GPU, "resourceFlavor": "a100", "allocatable": "8",
                                 "highWaterMark": "8", "perCluster": [
                                     {"cluster": "east", "allocatable": "6", "highWaterMark": "6"},
                                     {"cluster": "west", "allocatable": "2", "highWaterMark": "2"}]}]}
    world.add_quota("grp", {"role": "Cohort", "parentRef": {"name": "fleet"}, "budgets": gpus(8)})
    world.add_quota("team", {"role": "ClusterQueue", "parentRef": {"name": "grp"}, "budgets": gpus(4),
                             "distribution": {"policy": "Proportional"}})
    return world


def fleet() -> FakeQuotaFleet:
    out = FakeQuotaFleet()
    for name in ("east", "west"):
        out.member(name).flavors.add("a100")
    return out


@asynccontextmanager
async def running(env: WorkflowEnvironment, world: FakeQuotaWorld, members: FakeQuotaFleet | None,
                  name: str) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    queue = f"aqp-{uuid.uuid4().hex[:8]}"
    stored = world.quotas[name]
    activities = [*world.activities(env.get_current_time), *(members.activities() if members else [])]
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()), activities=activities,
                      workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow("AcceleratorQuotaWorkflow", {"ref": stored.ref().model_dump()},
                                                 id=accelerator_quota_workflow_id(stored.name, stored.uid),
                                                 task_queue=queue)
        yield handle


async def changed(handle: WorkflowHandle[Any, Any], world: FakeQuotaWorld, name: str, spec: dict[str, Any]) -> None:
    stored = world.edit(name, spec)
    await handle.signal(Signal.OBJECT_CHANGED, {"uid": stored.uid, "generation": stored.generation,
                                                "resource_version": str(stored.generation)})


def row(stored: StoredQuota, cluster: str) -> dict[str, Any]:
    return next((r for r in stored.status.get("clusters") or [] if r["cluster"] == cluster), {})


def copy_spec(members: FakeQuotaFleet, cluster: str, name: str) -> dict[str, Any] | None:
    found = members.members[cluster].quotas.get(name)
    return found.spec if found is not None else None


def share(members: FakeQuotaFleet, cluster: str) -> str | None:
    spec = copy_spec(members, cluster, "team")
    return None if spec is None else str(spec["budgets"][0]["nominal"])


def materialize(members: FakeQuotaFleet, cluster: str, admitted: str = "0") -> None:
    """What the member's own controller writes on its copy once it has materialized it (a member workflow does
    this in test_a_member_materializes_the_copies_into_its_own_kueue)."""
    copy = members.members[cluster].quotas["team"]
    copy.status = {"sourceGeneration": int(copy.annotations["ome.io/quota-source-generation"]),
                   "budgets": [{"resourceName": GPU, "resourceFlavor": "a100",
                                "nominal": copy.spec["budgets"][0]["nominal"], "admitted": admitted,
                                "reserved": admitted, "borrowed": "0"}]}


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


async def test_a_leaf_is_split_by_capacity_and_reports_each_cluster(env: WorkflowEnvironment) -> None:
    world, members = management(), fleet()
    team = world.quotas["team"]
    async with running(env, world, members, "team") as handle:
        await until(env, lambda: share(members, "east") == "3" and share(members, "west") == "1", step=1,
                    what="the copies written")
        copy = members.members["east"].quotas["team"]
        assert copy.labels["ome.io/quota-projected"] == "servingops"
        assert copy.annotations == {"ome.io/quota-origin": team.uid, "ome.io/quota-source-generation": "1"}
        assert copy.spec == {"role": "ClusterQueue", "parentRef": {"name": "grp"}, "budgets": [
            {"resourceName": GPU, "resourceFlavor": "a100", "nominal": "3"}]}
        await until(env, lambda: row(team, "east").get("appliedGeneration") == 1, step=1, what="rows")
        assert row(team, "east")["message"].startswith("the member has not materialized generation 1 yet")
        assert "appliedTime" in row(team, "east") and row(team, "east").get("materializedGeneration") is None

        materialize(members, "east", admitted="2")
        materialize(members, "west")
        await until(env, lambda: row(team, "east").get("materializedGeneration") == 1, step=1, what="read back")
        assert row(team, "east") == {"cluster": "east", "appliedGeneration": 1,
                                     "appliedTime": row(team, "east")["appliedTime"], "materializedGeneration": 1}
        await until(env, lambda: team.status["budgets"][0].get("admitted") == "2", step=1, what="usage")
        assert team.status["budgets"][0]["perCluster"] == [
            {"cluster": "east", "nominal": "3", "admitted": "2", "reserved": "2", "borrowed": "0"},
            {"cluster": "west", "nominal": "1", "admitted": "0", "reserved": "0", "borrowed": "0"}]
        writes = len(members.writes)
        await env.sleep(25)
        assert len(members.writes) == writes  # in sync: nothing written again

        # west goes dark; a new nominal reaches east, and west's row says why it is behind
        members.unreachable["west"] = "west cannot be reached: connection refused"
        await changed(handle, world, "team", {**team.spec, "budgets": gpus(8)})
        await until(env, lambda: share(members, "east") == "6", step=1, what="east's new share")
        await until(env, lambda: row(team, "west").get("message") == "west cannot be reached: connection refused",
                    step=1, what="west's row")
        assert row(team, "west")["appliedGeneration"] == 1 and share(members, "west") == "1"
        assert row(team, "east")["appliedGeneration"] == 2
        assert row(team, "east")["message"].startswith("the member has not materialized generation 2 yet")
        del members.unreachable["west"]
        await until(env, lambda: share(members, "west") == "2" and row(team, "west").get("appliedGeneration") == 2,
                    step=1, what="west caught up")

        # frozen: no new projection (the seed), and the rows say so
        await changed(handle, world, "team", {**team.spec, "budgets": gpus(9)})  # above grp's 8
        await until(env, lambda: (team.status.get("materialization") or {}).get("frozen") is True, step=1,
                    what="frozen")
        await until(env, lambda: "frozen while ContainmentViolated" in (row(team, "east").get("message") or ""),
                    step=1, what="the frozen row")
        assert share(members, "east") == "6"

        # deletion removes the copies
        world.delete_quota("team")
        await handle.signal(Signal.DELETE, {"uid": team.uid, "generation": team.generation, "resource_version": "99",
                                            "deleting": True})
        assert (await handle.result())["phase"] == "Deleted"
    assert "team" not in members.members["east"].quotas and "team" not in members.members["west"].quotas
    assert "team" not in world.quotas


async def test_explicit_shares_and_a_grouping_copy(env: WorkflowEnvironment) -> None:
    world, members = management(), fleet()
    world.edit("team", {"role": "ClusterQueue", "parentRef": {"name": "grp"}, "distribution": {"policy": "Explicit"},
                        "budgets": gpus(4, borrowingLimit=1, perCluster=[{"cluster": "west", "nominal": 4}])})
    async with running(env, world, members, "team"):
        await until(env, lambda: share(members, "west") == "4" and share(members, "east") == "0", step=1,
                    what="explicit shares")
        assert copy_spec(members, "west", "team")["budgets"][0]["borrowingLimit"] == "1"  # type: ignore[index]
    async with running(env, world, members, "grp"):
        await until(env, lambda: copy_spec(members, "east", "grp") is not None, step=1, what="the grouping copy")
        assert copy_spec(members, "east", "grp") == {"role": "Cohort", "parentRef": {"name": "fleet"}}


async def test_a_members_own_node_is_left_alone(env: WorkflowEnvironment) -> None:
    world, members = management(), fleet()
    members.member("east").add_quota("team", {"role": "Cohort"})
    team = world.quotas["team"]
    async with running(env, world, members, "team"):
        await until(env, lambda: share(members, "west") == "1" and bool(row(team, "east")), step=1, what="rows")
        assert "of its own" in row(team, "east")["message"]
        assert copy_spec(members, "east", "team") == {"role": "Cohort"}


async def test_a_member_materializes_the_copies_into_its_own_kueue(env: WorkflowEnvironment) -> None:
    world, members = management(), fleet()
    team = world.quotas["team"]
    async with running(env, world, members, "fleet"), running(env, world, members, "grp"), \
            running(env, world, members, "team"):
        await until(env, lambda: all(copy_spec(members, "east", n) is not None for n in ("fleet", "grp", "team")),
                    step=1, what="the tree path projected")
        east = members.members["east"]
        east.bind_namespace("team-ns", "team")
        async with running(env, east, None, "fleet"), running(env, east, None, "grp"), running(env, east, None, "team"):
            await until(env, lambda: "team" in east.cluster_queues, step=1, what="the member's ClusterQueue")
            resources = east.cluster_queues["team"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
            assert resources[0] == {"name": GPU, "nominalQuota": "3", "borrowingLimit": "0"}
            assert east.cluster_queues["team"]["spec"]["cohortName"] == "grp"
            copy = east.quotas["team"]
            await until(env, lambda: copy.status.get("sourceGeneration") == 1, step=1, what="the echo")
            assert next(c for c in copy.status["conditions"] if c["type"] == "Degraded")["status"] == "False"
            assert copy.status.get("clusters") is None  # a member projects nothing
            await until(env, lambda: row(team, "east").get("materializedGeneration") == 1, step=1,
                        what="the management plane reads it back")
            east.set_usage("team", "a100", GPU, admitted="2")
            await until(env, lambda: (team.status["budgets"][0].get("perCluster") or [{}])[0].get("admitted") == "2",
                        step=1, what="the member's usage on the management plane")


async def test_a_member_with_its_own_root_keeps_it_and_the_projected_tree_says_root_conflict(
        env: WorkflowEnvironment) -> None:
    """The single reserved root: east already has a root of its own (`local`, with its own leaf under it). The
    projected tree (fleet -> grp -> team) is not materialized beside it: each copy is Degraded and Ready False
    RootConflict with a Warning, nothing of east's own tree is touched, and the management plane's row for east
    names the reason. (Before the rule the projected `fleet` won the tie on its name, `local` became
    NodeKindInvalid, and the projected tree materialized as a second tree.)"""
    world, members = management(), fleet()
    east = members.member("east")
    east.add_quota("local", {"role": "Cohort"})
    east.add_quota("mine", {"role": "ClusterQueue", "parentRef": {"name": "local"}, "budgets": gpus(1),
                            "distribution": {"policy": "Proportional"}})
    team = world.quotas["team"]
    async with running(env, world, members, "fleet"), running(env, world, members, "grp"), \
            running(env, world, members, "team"):
        await until(env, lambda: all(copy_spec(members, "east", n) is not None for n in ("fleet", "grp", "team")),
                    step=1, what="the tree path projected")
        async with running(env, east, None, "local"), running(env, east, None, "mine"), \
                running(env, east, None, "fleet"), running(env, east, None, "grp"), running(env, east, None, "team"):
            def ready(name: str) -> dict[str, Any]:
                return next((c for c in east.quotas[name].status.get("conditions") or [] if c["type"] == "Ready"), {})

            await until(env, lambda: all(ready(n).get("reason") == "RootConflict" for n in ("fleet", "grp", "team")),
                        step=1, what="the projected tree refused on east")
            assert "has its own root local" in ready("team")["message"]
            await until(env, lambda: ready("local").get("status") == "True" and ready("mine").get("status") == "True",
                        step=1, what="east's own tree Ready")
            assert "local" in east.cohorts and "mine" in east.cluster_queues
            assert "fleet" not in east.cohorts and "grp" not in east.cohorts and "team" not in east.cluster_queues
            refusals = {(e.type, e.reason) for e in east.events if e.reason == "RootConflict"}
            assert refusals == {("Warning", "RootConflict")}
            await until(env, lambda: "RootConflict" in (row(team, "east").get("message") or ""), step=1,
                        what="the management plane's row for east")
            assert "has its own root local" in row(team, "east")["message"]


async def test_a_deregistered_clusters_copies_are_deleted_or_its_row_says_why(env: WorkflowEnvironment) -> None:
    """WorkloadCluster west is deleted (the projection's finalizer holds it): the management plane deletes the
    copies there (placement.release_quota_hold) and releases the hold; east keeps its copies. While west cannot
    be reached, its hold stays and the node's row for west says why."""
    world, members = management(), fleet()
    team = world.quotas["team"]
    async with running(env, world, members, "grp"), running(env, world, members, "team"):
        await until(env, lambda: share(members, "west") == "1" and copy_spec(members, "west", "grp") is not None,
                    step=1, what="the copies written")
        assert members.holds == {"east", "west"}
        members.unreachable["west"] = "west cannot be reached: connection refused"
        world.workload_clusters.remove("west")
        world.deregistering.append("west")
        members.deregistering.add("west")
        await until(env, lambda: "could not be deleted" in (row(team, "west").get("message") or ""), step=1,
                    what="west's row says why")
        assert "west" in members.holds and share(members, "west") == "1"
        del members.unreachable["west"]
        await until(env, lambda: "west" not in members.holds, step=1, what="west's hold released")
        west = members.members["west"]
        assert all(q.deleting for q in west.quotas.values()) or not west.quotas
        assert share(members, "east") is not None and copy_spec(members, "east", "grp") is not None
        world.deregistering.remove("west")  # the registration is gone
        await until(env, lambda: not row(team, "west"), step=1, what="west's row gone")
