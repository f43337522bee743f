"""Recorded scenarios of PlacementWorkflow (tests/histories/record.py runs them), against the
in-memory fleet of testkit/placement_fakes.py under the real activity names, spoken to only through
the wire contract (type and signal names, JSON payloads)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from temporalio.client import WorkflowHandle
from temporalio.worker import Worker

from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.placement_fakes import FakeFleet, capacity_fleet, single, split, split_three_to_one, three_members
from testkit.rollout_fakes import until

if TYPE_CHECKING:
    from tests.histories.record import Recording


@asynccontextmanager
async def placing(rec: Recording, fleet: FakeFleet) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    """The registry's workflows on a worker of their own, against `fleet`; the workflow started."""
    queue = f"placement-{uuid.uuid4().hex[:8]}"
    async with Worker(rec.env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=fleet.activities(),
                      workflow_runner=workflow_runner()):
        handle = await rec.env.client.start_workflow(
            "PlacementWorkflow", {"ref": fleet.ref()}, id=f"placement/team-a/chat/{fleet.source_uid}",
            task_queue=queue)
        await rec.root(handle)
        yield handle


async def delete_and_save(rec: Recording, handle: WorkflowHandle[Any, Any], fleet: FakeFleet) -> None:
    """Every scenario's ending: the source deleted, the workflow done with every copy withdrawn, saved."""
    fleet.deleting = True
    await handle.signal("delete", fleet.event(deleting=True))
    await handle.result()
    assert all(m.derived is None for m in fleet.members.values())
    await rec.save()


async def placement_single_race(rec: Recording) -> None:
    """Single over two matching members: the plan persisted, both copies applied, nobody admits for
    a while, the second admits and wins, the loser unreachable for a while then deleted; a spec
    change re-applied to the winner; the winner unreadable past the observation grace (lost, a new
    race, the first member wins, the lost home drained once back); spec.placement removed (the
    copy withdrawn); delete."""
    env = rec.env
    fleet = FakeFleet(three_members(), single("gpu"))
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    async with placing(rec, fleet) as handle:
        await until(env, lambda: a.derived is not None and b.derived is not None, step=1, what="applied")
        await env.sleep(20)
        a.reachable, b.admit = False, True
        await until(env, lambda: fleet.placed().get("plan", {}).get("winner") == "gpu-b", step=1, what="committed")
        await env.sleep(10)
        a.reachable = True
        await until(env, lambda: fleet.placed().get("phase") == "Placed", step=1, what="placed")
        fleet.generation = 2
        await handle.signal("object-changed", fleet.event())
        await until(env, lambda: b.derived is not None and b.derived["generation"] == 2, step=1, what="re-applied")
        b.reachable, b.ready, a.admit = False, False, True
        await until(env, lambda: fleet.placed().get("plan", {}).get("winner") == "gpu-a", step=10, what="re-raced")
        b.reachable = True
        await until(env, lambda: b.derived is None, step=5, what="the lost winner drained")
        fleet.placement, fleet.generation = None, 3
        await handle.signal("object-changed", fleet.event())
        await until(env, lambda: a.derived is None, step=1, what="withdrawn")
        await delete_and_save(rec, handle, fleet)


async def placement_split(rec: Recording) -> None:
    """Split 3:1 over two members (plan persisted, each home its floor, both admit: Placed); weights
    1:1 (revision 2, floors 2/2); one member no longer matched (drained, deleted); delete."""
    env = rec.env
    fleet = split_three_to_one()
    b = fleet.members["gpu-b"]
    async with placing(rec, fleet) as handle:
        await until(env, lambda: fleet.placed().get("phase") == "Placed", step=1, what="placed")
        fleet.placement, fleet.generation = split({"gpu-a": 1, "gpu-b": 1}, replicas=4), 2
        await handle.signal("object-changed", fleet.event())
        await until(env, lambda: fleet.placed()["plan"]["revision"] == 2 and fleet.placed()["phase"] == "Placed",
                    step=1, what="revision 2")
        fleet.placement, fleet.generation = split({"gpu-a": 1}, replicas=4), 3
        await handle.signal("object-changed", fleet.event())
        await until(env, lambda: b.derived is None, step=1, what="drained")
        await delete_and_save(rec, handle, fleet)


async def placement_single_move(rec: Recording) -> None:
    """Placed in gpu-b; spec.placement stops matching it (replacementTimeout 30s): cpu-c probed and never
    admits, rotated after the timeout; gpu-a probed, admits and serves, takes over; gpu-b withdrawn; the
    move record cleared; delete."""
    env = rec.env
    fleet = FakeFleet(three_members(), single("gpu"))
    a, b, c = fleet.members["gpu-a"], fleet.members["gpu-b"], fleet.members["cpu-c"]
    b.admit = True
    async with placing(rec, fleet) as handle:
        await until(env, lambda: fleet.placed().get("phase") == "Placed", step=1, what="placed")
        a.admit = True
        fleet.placement, fleet.generation = {
            "policy": "ClusterAffinity", "mode": "Single", "replacementTimeout": "30s", "clusterAffinity": [
                {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-b"]}]}]}, 2
        await handle.signal("object-changed", fleet.event())
        await until(env, lambda: c.derived is not None, step=1, what="c probed")
        await until(env, lambda: fleet.placed()["plan"]["winner"] == "gpu-a" and b.derived is None, step=5,
                    what="moved to gpu-a")
        await until(env, lambda: "singleMove" not in fleet.placed()["plan"], step=1, what="move record cleared")
        await delete_and_save(rec, handle, fleet)


async def placement_single_move_waits_ready(rec: Recording) -> None:
    """Placed in gpu-b; spec.placement stops matching it: gpu-a probed, admits with a URL while its pods are not
    Ready, so gpu-b keeps serving (placement-move-hands-over-when-ready); its pods Ready, it takes over; gpu-b
    withdrawn; delete."""
    env = rec.env
    fleet = FakeFleet(three_members(), single("gpu"))
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    b.admit = True
    async with placing(rec, fleet) as handle:
        await until(env, lambda: fleet.placed().get("phase") == "Placed", step=1, what="placed")
        a.admit, a.pods_ready = True, False
        fleet.placement, fleet.generation = {
            "policy": "ClusterAffinity", "mode": "Single", "clusterAffinity": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-a"]}]}]}, 2
        await handle.signal("object-changed", fleet.event())
        await until(env, lambda: fleet.placed()["plan"].get("singleMove", {}).get("selected") == "gpu-a", step=1,
                    what="gpu-a selected")
        await env.sleep(30)
        a.pods_ready = True
        await until(env, lambda: fleet.placed()["plan"]["winner"] == "gpu-a" and b.derived is None, step=5,
                    what="moved to gpu-a")
        await until(env, lambda: "singleMove" not in fleet.placed()["plan"], step=1, what="move record cleared")
        await delete_and_save(rec, handle, fleet)


async def placement_split_by_capacity(rec: Recording) -> None:
    """SplitByCapacity over two members reporting 6 and 2 whole replicas (floor 4: 3/1, Placed); gpu-b's
    report gone (CapacityUnknown, the plan kept); back with 6 (revision 2, 2/2); delete."""
    env = rec.env
    fleet = capacity_fleet()
    b = fleet.members["gpu-b"]
    async with placing(rec, fleet) as handle:
        await until(env, lambda: fleet.placed().get("phase") == "Placed", step=1, what="placed")
        b.capacity = None
        await handle.signal("object-changed", fleet.event())
        await until(env, lambda: any(r == "CapacityUnknown" for _, r, _ in fleet.events()), step=1, what="held")
        b.capacity = 6
        await handle.signal("object-changed", fleet.event())
        await until(env, lambda: fleet.placed()["plan"]["revision"] == 2 and fleet.placed()["phase"] == "Placed",
                    step=1, what="revision 2")
        await delete_and_save(rec, handle, fleet)


async def placement_split_by_capacity_demand(rec: Recording) -> None:
    """SplitByCapacity (6 and 2 whole replicas, floor 4: 3/1, Placed); gpu-a renders the service otherwise at the
    same capacity (a runtime changed there): revision 2 carries its new demand contract; delete. Recorded with
    the demand fingerprint in the input digest (workflow patch placement-demand-in-digest)."""
    env = rec.env
    fleet = capacity_fleet()
    a = fleet.members["gpu-a"]
    async with placing(rec, fleet) as handle:
        await until(env, lambda: fleet.placed().get("phase") == "Placed", step=1, what="placed")
        a.rendering = "2"
        await handle.signal("object-changed", fleet.event())
        await until(env, lambda: fleet.placed()["plan"]["revision"] == 2 and fleet.placed()["phase"] == "Placed",
                    step=1, what="revision 2")
        await delete_and_save(rec, handle, fleet)


async def placement_adopt_single(rec: Recording) -> None:
    """Adoption (servingops.io/placement-adopt), Single: serving copies in gpu-a (derived from an earlier source)
    and gpu-b (made by hand): gpu-a, first by name, is the home at once (adopted in place), gpu-b's standing copy
    is drained once gpu-a serves; delete."""
    env = rec.env
    fleet = FakeFleet(three_members(), single("gpu"), adopt=True)
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    a.admit = b.admit = True
    a.standing(replicas=1, origin="an-earlier-source")
    b.standing(replicas=2)
    async with placing(rec, fleet) as handle:
        await until(env, lambda: fleet.placed().get("phase") == "Placed" and b.derived is None, step=1,
                    what="placed in gpu-a, gpu-b drained")
        await delete_and_save(rec, handle, fleet)


async def placement_adopt_split_pending(rec: Recording) -> None:
    """Adoption, Split 1:1 over gpu-a (a standing copy of 3) and gpu-b (unreachable: inventory pending): the
    plan with adoptionDigest; a changed intent adding cpu-c held InventoryPending; gpu-b answers (nothing
    stands there): the held intent is revision 2, Placed; delete."""
    env = rec.env
    fleet = FakeFleet(three_members(), split({"gpu-a": 1, "gpu-b": 1}, replicas=4), adopt=True)
    a, b, c = fleet.members["gpu-a"], fleet.members["gpu-b"], fleet.members["cpu-c"]
    a.admit = b.admit = c.admit = True
    a.standing(replicas=3)
    b.reachable = False
    async with placing(rec, fleet) as handle:
        await until(env, lambda: (fleet.placed().get("plan") or {}).get("adoptionDigest") and a.applies > 0, step=1,
                    what="planned with gpu-b pending")
        fleet.placement = split({"gpu-a": 1, "gpu-b": 1, "cpu-c": 1}, replicas=4)
        fleet.generation += 1
        await handle.signal("object-changed", fleet.event())
        await until(env, lambda: any(r == "InventoryPending" for _, r, _ in fleet.events()), step=1, what="held")
        b.reachable = True
        await until(env, lambda: fleet.placed()["plan"]["revision"] == 2 and fleet.placed()["phase"] == "Placed",
                    step=1, what="revision 2 placed")
        await delete_and_save(rec, handle, fleet)


async def placement_split_zero_share(rec: Recording) -> None:
    """Split 3:1 over two members (Placed); the routing workflow's word names both; 2 replicas: gpu-b's share is 0
    (revision 2, Placed); the route's word leaves gpu-b out; delete. With the patch placement-zero-share-withdrawn
    gpu-b leaves the route once gpu-a serves its new floor, and its copy is deleted after the second word (its row
    kept); before it (placement-split-zero-share-before, recorded at 9f96b20) the copy stays until the delete."""
    env = rec.env
    fleet = split_three_to_one()
    async with placing(rec, fleet) as handle:
        await until(env, lambda: fleet.placed().get("phase") == "Placed", step=1, what="placed")
        await handle.signal("publication", {"sequence": 1, "routed": ["gpu-a", "gpu-b"],
                                            "plan_id": fleet.placed()["plan"]["id"], "settled": True})
        fleet.placement, fleet.generation = split({"gpu-a": 3, "gpu-b": 1}, replicas=2), 2
        await handle.signal("object-changed", fleet.event())
        await until(env, lambda: fleet.placed()["plan"]["revision"] == 2 and fleet.placed()["phase"] == "Placed",
                    step=1, what="revision 2")
        await env.sleep(60)
        await handle.signal("publication", {"sequence": 2, "routed": ["gpu-a"],
                                            "plan_id": fleet.placed()["plan"]["id"], "settled": True})
        await env.sleep(60)
        await delete_and_save(rec, handle, fleet)


SCENARIOS = {"placement-single-race": placement_single_race, "placement-split": placement_split,
             "placement-single-move": placement_single_move,
             "placement-single-move-waits-ready": placement_single_move_waits_ready,
             "placement-split-by-capacity": placement_split_by_capacity,
             "placement-split-by-capacity-demand": placement_split_by_capacity_demand,
             "placement-adopt-single": placement_adopt_single,
             "placement-adopt-split-pending": placement_adopt_split_pending,
             "placement-split-zero-share": placement_split_zero_share,
             "placement-split-zero-share-before": placement_split_zero_share}
