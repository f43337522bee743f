"""Recorded scenarios of AcceleratorQuotaWorkflow (tests/histories/record.py runs them), against the fake
plane of testkit/accelerator_quota_fakes.py (the activities' wire names and payloads)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from temporalio.worker import Worker

from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.accelerator_quota_fakes import FakeQuotaFleet, FakeQuotaWorld
from testkit.rollout_fakes import until

if TYPE_CHECKING:
    from tests.histories.record import Recording

GPU = "nvidia.com/gpu"


def _gpus(nominal: int) -> list[dict[str, object]]:
    return [{"resourceName": GPU, "resourceFlavor": "a100", "nominal": nominal}]


async def accelerator_quota(rec: Recording) -> None:
    """A leaf of a three-node tree: its ClusterQueue and LocalQueue applied and the status written; Kueue's
    usage shown at the next pass; a budget over its parent's guardrail frozen (Warning Event), then mended
    (thawed, applied again); re-parented in place; continued as new after its bounded passes; deleted (its
    Kueue objects reaped, the finalizer released)."""
    env = rec.env
    world = FakeQuotaWorld(flavors={"a100"})
    world.add_quota("root", {"role": "Cohort", "budgets": _gpus(8)})
    world.add_quota("org", {"role": "Cohort", "parentRef": {"name": "root"}, "budgets": _gpus(4)})
    world.add_quota("other", {"role": "Cohort", "parentRef": {"name": "root"}})
    spec = {"role": "ClusterQueue", "parentRef": {"name": "org"}, "budgets": _gpus(2),
            "distribution": {"policy": "Proportional"}}
    stored = world.add_quota("team", spec)
    world.bind_namespace("team-ns", "team")
    queue = f"aq-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(env.get_current_time), workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "AcceleratorQuotaWorkflow", {"ref": stored.ref().model_dump(), "settings": {"passes_per_run": 12}},
            id=f"acceleratorquota/{stored.name}/{stored.uid}", task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: len(world.writes) >= 1, step=1, what="the first write")
        world.set_usage("team", "a100", GPU, admitted="2")
        await until(env, lambda: world.writes[-1][1]["budgets"][0]["admitted"] == "2", step=1, what="usage shown")

        async def edit(new: dict[str, object]) -> None:
            world.edit("team", new)
            await handle.signal("object-changed", {"uid": stored.uid, "generation": stored.generation,
                                                   "resource_version": str(stored.generation)})

        await edit({**spec, "budgets": _gpus(6)})
        await until(env, lambda: world.writes[-1][1]["materialization"].get("frozen") is True, step=1, what="frozen")
        await edit({**spec, "budgets": _gpus(3)})
        await until(env, lambda: not world.writes[-1][1]["materialization"].get("frozen"), step=1, what="thawed")
        await edit({**spec, "budgets": _gpus(3), "parentRef": {"name": "other"}})
        await until(env, lambda: world.cluster_queues["team"]["spec"]["cohortName"] == "other", step=1,
                    what="re-parented")
        await until(env, lambda: world.observes >= 14, step=10, what="continued as new")
        world.delete_quota("team")
        latest = env.client.get_workflow_handle(handle.id)
        await latest.signal("delete", {"uid": stored.uid, "generation": stored.generation, "resource_version": "9",
                                       "deleting": True})
        await latest.result()
        await rec.save()


async def accelerator_quota_projection(rec: Recording) -> None:
    """A Proportional leaf on a management plane with two WorkloadClusters: its copies written into both
    (patch quota-projection), one member materializes its copy (read back), the other goes dark while the
    nominal changes, then comes back; the node is deleted and its copies with it."""
    env = rec.env
    world = FakeQuotaWorld(flavors={"a100"}, workload_clusters=["east", "west"])
    root = world.add_quota("root", {"role": "Cohort", "budgets": _gpus(8)})
    root.status = {"capacity": [{"resourceName": GPU, "resourceFlavor": "a100", "highWaterMark": "8", "perCluster": [
        {"cluster": "east", "highWaterMark": "6"}, {"cluster": "west", "highWaterMark": "2"}]}]}
    spec = {"role": "ClusterQueue", "parentRef": {"name": "root"}, "budgets": _gpus(4),
            "distribution": {"policy": "Proportional"}}
    stored = world.add_quota("team", spec)
    fleet = FakeQuotaFleet()
    for cluster in ("east", "west"):
        fleet.member(cluster).flavors.add("a100")
    queue = f"aq-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=[*world.activities(env.get_current_time), *fleet.activities()],
                      workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "AcceleratorQuotaWorkflow", {"ref": stored.ref().model_dump()},
            id=f"acceleratorquota/{stored.name}/{stored.uid}", task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: len(fleet.writes) >= 2, step=1, what="both copies written")
        east = fleet.members["east"].quotas["team"]
        east.status = {"sourceGeneration": 1}
        await until(env, lambda: any(r.get("materializedGeneration") == 1 for r in world.writes[-1][1].get("clusters")
                                     or []), step=1, what="read back")
        fleet.unreachable["west"] = "west cannot be reached"
        world.edit("team", {**spec, "budgets": _gpus(8)})
        await handle.signal("object-changed", {"uid": stored.uid, "generation": stored.generation,
                                               "resource_version": str(stored.generation)})
        await until(env, lambda: east.spec["budgets"][0]["nominal"] == "6", step=1, what="east's new share")
        del fleet.unreachable["west"]
        await until(env, lambda: fleet.members["west"].quotas["team"].spec["budgets"][0]["nominal"] == "2", step=1,
                    what="west caught up")
        world.delete_quota("team")
        await handle.signal("delete", {"uid": stored.uid, "generation": stored.generation, "resource_version": "9",
                                       "deleting": True})
        await handle.result()
        await rec.save()


async def accelerator_quota_deregistration(rec: Recording) -> None:
    """A leaf projected into two WorkloadClusters; west is deregistered (patch quota-deregistration): while west
    cannot be reached its row says so, then its copies are deleted and its hold released; the node is deleted."""
    env = rec.env
    world = FakeQuotaWorld(flavors={"a100"}, workload_clusters=["east", "west"])
    world.add_quota("root", {"role": "Cohort", "budgets": _gpus(8)})
    spec = {"role": "ClusterQueue", "parentRef": {"name": "root"}, "distribution": {"policy": "Explicit"},
            "budgets": [{**_gpus(4)[0], "perCluster": [{"cluster": "east", "nominal": 2},
                                                       {"cluster": "west", "nominal": 2}]}]}
    stored = world.add_quota("team", spec)
    fleet = FakeQuotaFleet()
    for cluster in ("east", "west"):
        fleet.member(cluster).flavors.add("a100")
    queue = f"aq-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=[*world.activities(env.get_current_time), *fleet.activities()],
                      workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "AcceleratorQuotaWorkflow", {"ref": stored.ref().model_dump()},
            id=f"acceleratorquota/{stored.name}/{stored.uid}", task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: len(fleet.writes) >= 2, step=1, what="both copies written")
        fleet.unreachable["west"] = "west cannot be reached"
        world.workload_clusters.remove("west")
        world.deregistering.append("west")
        fleet.deregistering.add("west")
        await until(env, lambda: any("could not be deleted" in (r.get("message") or "")
                                     for r in world.writes[-1][1].get("clusters") or []), step=1, what="west's row")
        del fleet.unreachable["west"]
        await until(env, lambda: "west" not in fleet.holds, step=1, what="west released")
        world.deregistering.remove("west")
        world.delete_quota("team")
        await handle.signal("delete", {"uid": stored.uid, "generation": stored.generation, "resource_version": "9",
                                       "deleting": True})
        await handle.result()
        await rec.save()


SCENARIOS = {"accelerator-quota": accelerator_quota, "accelerator-quota-projection": accelerator_quota_projection,
             "accelerator-quota-deregistration": accelerator_quota_deregistration}
