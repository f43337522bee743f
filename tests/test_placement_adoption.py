"""Adoption of standing homes (seed 004: adoptionDigest, inventoryPending, originalReplicas) on Temporal's
time-skipping test server with the in-memory fleet (testkit/placement_fakes.py). The source opts in with
servingops.io/placement-adopt: "true" (`fleet.adopt`). Shown against real members in
tests/test_placement_e2e.py::test_a_standing_copy_is_adopted_as_the_home_without_a_race."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.testing import WorkflowEnvironment

from testkit.placement_fakes import FakeFleet, single, split, split_by_capacity, three_members
from testkit.rollout_harness import start_env
from tests.support.placement_workflow import phase, placing, wait

pytestmark = pytest.mark.timeskip


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


def row(fleet: FakeFleet, cluster: str) -> dict:
    return next(r for r in fleet.placed().get("candidates") or [] if r["cluster"] == cluster)


def clusters(fleet: FakeFleet) -> list[str]:
    return [r["cluster"] for r in fleet.placed().get("candidates") or []]


async def test_a_serving_standing_copy_is_the_single_home_at_once_and_is_adopted_not_replaced(
        env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"), adopt=True)
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    a.admit = b.admit = True
    uid = b.standing(replicas=2)  # made by hand in gpu-b before placement existed
    async with placing(env, fleet):
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        placed = fleet.placed()
        assert placed["plan"]["winner"] == placed["cluster"] == "gpu-b"
        assert not placed["plan"].get("adoptionDigest"), "nothing is pending: no adoption digest"
        home = row(fleet, "gpu-b")
        assert home["allocation"]["originalReplicas"] == home["allocation"]["currentReplicas"] == 2
        assert not home["allocation"].get("raceCandidate") and not home["allocation"].get("inventoryPending")
        # Adopted: the same object, now labelled as derived from the source; nothing raced in gpu-a.
        assert b.derived is not None and b.derived["uid"] == uid and b.derived["origin"] == fleet.source_uid
        assert b.deletes == 0 and a.applies == 0 and a.derived is None and clusters(fleet) == ["gpu-b"]
        assert a.inventories == b.inventories == 1
        # The winner was persisted before the member was written.
        commit = next(i for i, line in enumerate(fleet.log) if line.endswith("winner=gpu-b"))
        assert commit < fleet.log.index("apply gpu-b")
        reasons = [r for _, r, _ in fleet.events()]
        assert "PlacementRacing" not in reasons
        assert reasons.index("PlacementInventoried") < reasons.index("PlacementAdopted") < reasons.index("Placed")
        said = next(m for _, r, m in fleet.events() if r == "PlacementInventoried")
        assert "gpu-b" in said and "not derived by placement" in said and "2 admitted Instances" in said


async def test_other_standing_copies_serve_until_the_winner_does_then_are_drained(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"), adopt=True)
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    a.admit = b.admit = True
    a.standing(replicas=1)
    b.standing(replicas=3, origin="an-earlier-source-uid")  # derived from an earlier source of that name
    async with placing(env, fleet):
        await wait(env, lambda: phase(fleet) == "Placed" and b.derived is None, "placed, gpu-b drained")
        assert fleet.placed()["plan"]["winner"] == "gpu-a" and clusters(fleet) == ["gpu-a"]
        assert b.deletes == 1 and b.applies == 0, "the standing copy the plan does not keep is deleted, never written"
        # gpu-b stayed listed (original 3, not a race candidate) until gpu-a served.
        listed = [w["status"]["placement"] for w in fleet.writes if "placement" in (w.get("status") or {})]
        before = next(p for p in listed if "gpu-b" in [r["cluster"] for r in p["candidates"]])
        b_row = next(r for r in before["candidates"] if r["cluster"] == "gpu-b")
        assert b_row["allocation"]["originalReplicas"] == 3 and not b_row["allocation"].get("raceCandidate")
        # The drain was persisted, with gpu-a serving, before gpu-b's copy was deleted.
        statuses = [i for i, line in enumerate(fleet.log) if line.startswith("status ")]
        drain_write = next(n for n, w in enumerate(fleet.writes) if any(
            r["cluster"] == "gpu-b" and r["allocation"].get("drainRequested")
            for r in ((w.get("status") or {}).get("placement") or {}).get("candidates") or []))
        serving = next(r for r in fleet.writes[drain_write]["status"]["placement"]["candidates"]
                       if r["cluster"] == "gpu-a")
        assert serving["phase"] == "Placed" and serving["endpoint"]
        assert statuses[drain_write] < fleet.log.index("delete gpu-b")
        said = [m for _, r, m in fleet.events() if r == "PlacementInventoried"]
        assert any("derived from an earlier source (an-earlier-source-uid)" in m for m in said)
        assert "PlacementStandingDrained" in [r for _, r, _ in fleet.events()]


async def test_without_the_annotation_a_standing_copy_is_name_in_use_and_never_touched(
        env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu-b", key="kubernetes.io/hostname"))
    fleet.members["gpu-b"].labels["kubernetes.io/hostname"] = "gpu-b"
    b = fleet.members["gpu-b"]
    b.admit = True
    uid = b.standing(replicas=1)
    async with placing(env, fleet):
        await wait(env, lambda: any(r == "MemberNameInUse" for _, r, _ in fleet.events()), "NameInUse said")
        message = next(m for _, r, m in fleet.events() if r == "MemberNameInUse")
        assert "servingops.io/placement-adopt=true" in message
        assert b.derived is not None and b.derived["uid"] == uid and b.derived["origin"] is None
        assert b.applies == b.deletes == b.inventories == 0


async def test_a_pending_inventory_fixes_the_intent_and_a_changed_intent_cannot_add_homes_until_it_answers(
        env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), split({"gpu-a": 1, "gpu-b": 1}, replicas=4), adopt=True)
    a, b, c = fleet.members["gpu-a"], fleet.members["gpu-b"], fleet.members["cpu-c"]
    a.admit = b.admit = c.admit = True
    a.standing(replicas=3)
    b.reachable = False
    async with placing(env, fleet):
        await wait(env, lambda: (fleet.placed().get("plan") or {}).get("adoptionDigest") and a.applies > 0,
                   "the first plan accepted with gpu-b pending")
        plan = fleet.placed()["plan"]
        assert plan["adoptionDigest"] == plan["inputDigest"] and plan["revision"] == 1
        assert row(fleet, "gpu-b")["allocation"]["inventoryPending"] is True
        assert row(fleet, "gpu-b")["allocation"]["desiredReplicas"] == 2, "its floor is retained, not moved"
        # As persisted before any member was written: gpu-a's standing copy is the original and authorized floor.
        first = next(w["status"]["placement"] for w in fleet.writes
                     if ((w.get("status") or {}).get("placement") or {}).get("plan"))
        home = next(r for r in first["candidates"] if r["cluster"] == "gpu-a")["allocation"]
        assert (home["originalReplicas"], home["currentReplicas"], home["desiredReplicas"]) == (3, 3, 2)
        assert not home.get("inventoryPending") and b.applies == 0
        assert row(fleet, "gpu-a")["allocation"]["originalReplicas"] == 3, "fixed through the transition"
        await env.sleep(60)
        assert phase(fleet) == "Admitting", "not placed while a home's inventory is pending"

        fleet.placement = split({"gpu-a": 1, "gpu-b": 1, "cpu-c": 1}, replicas=4)  # a changed intent adds cpu-c
        fleet.generation += 1
        await wait(env, lambda: any(r == "InventoryPending" for _, r, _ in fleet.events()), "held")
        message = next(m for _, r, m in fleet.events() if r == "InventoryPending")
        assert "cpu-c" in message and "gpu-b" in message
        await env.sleep(60)
        assert fleet.placed()["plan"]["revision"] == 1 and fleet.placed()["plan"]["adoptionDigest"] == plan[
            "adoptionDigest"]
        assert c.inventories == 0 and c.applies == 0, "an incomplete inventory is not expanded"

        b.reachable = True  # gpu-b answers: nothing stands there
        await wait(env, lambda: fleet.placed()["plan"]["revision"] == 2 and phase(fleet) == "Placed",
                   "the held intent accepted once the inventory is complete")
        assert c.inventories == 1 and c.applies >= 1 and b.applies >= 1
        assert not fleet.placed()["plan"].get("adoptionDigest")
        assert not any(r["allocation"].get("inventoryPending") for r in fleet.placed()["candidates"])


async def test_a_standing_copy_with_no_share_serves_until_the_homes_do(env: WorkflowEnvironment) -> None:
    # 3:1 over a floor of 1: gpu-a gets it, gpu-b is matched with a zero share.
    fleet = FakeFleet(three_members(), split({"gpu-a": 3, "gpu-b": 1}, replicas=1), adopt=True)
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    a.admit = b.admit = True
    b.standing(replicas=2)
    async with placing(env, fleet):
        await wait(env, lambda: phase(fleet) == "Placed" and b.derived is None, "placed, gpu-b drained")
        assert b.applies == 0 and b.deletes == 1
        listed = [w["status"]["placement"] for w in fleet.writes if "placement" in (w.get("status") or {})]
        first = next(r for r in listed[0]["candidates"] if r["cluster"] == "gpu-b")["allocation"]
        assert (first["originalReplicas"], first["currentReplicas"], first["desiredReplicas"]) == (2, 2, 0)
        placed_at = next(i for i, w in enumerate(fleet.log) if w.startswith("status Placed"))
        assert fleet.log.index("delete gpu-b") > placed_at
        assert "PlacementStandingDrained" in [r for _, r, _ in fleet.events()]


async def test_split_by_capacity_counts_a_pending_member_as_unknown_not_free(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), split_by_capacity("gpu-a", "gpu-b", replicas=4), adopt=True)
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    a.admit = b.admit = True
    a.capacity, b.capacity = 6, 2
    b.reachable = False
    async with placing(env, fleet):
        await wait(env, lambda: any(r == "CapacityUnknown" for _, r, _ in fleet.events()), "held")
        message = next(m for _, r, m in fleet.events() if r == "CapacityUnknown")
        assert "gpu-b: InventoryPending" in message
        assert not fleet.placed().get("plan") and a.applies == b.applies == 0
        b.reachable = True
        await wait(env, lambda: phase(fleet) == "Placed", "placed once gpu-b is inventoried")
        assert {r["cluster"]: r["allocation"]["desiredReplicas"] for r in fleet.placed()["candidates"]} == {
            "gpu-a": 3, "gpu-b": 1}


async def test_a_single_plan_lists_a_pending_member_until_it_is_given_up(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"), adopt=True)
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    a.reachable, b.admit = False, True
    b.standing(replicas=1)
    async with placing(env, fleet):
        await wait(env, lambda: phase(fleet) == "Placed", "placed in gpu-b")
        plan = fleet.placed()["plan"]
        assert plan["winner"] == "gpu-b" and plan["adoptionDigest"] == plan["inputDigest"]
        pending = row(fleet, "gpu-a")["allocation"]
        assert pending["inventoryPending"] is True and not pending.get("raceCandidate") and a.applies == 0
        del fleet.members["gpu-a"]  # its WorkloadCluster deleted: no longer waited for
        await wait(env, lambda: clusters(fleet) == ["gpu-b"], "gpu-a's row gone")
        assert not fleet.placed()["plan"].get("adoptionDigest") and fleet.placed()["plan"]["id"] == plan["id"]


async def test_removing_the_annotation_drops_what_adoption_only_listed(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"), adopt=True)
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    a.reachable, b.admit = False, True
    b.standing(replicas=1)
    async with placing(env, fleet) as handle:
        await wait(env, lambda: phase(fleet) == "Placed" and sorted(clusters(fleet)) == ["gpu-a", "gpu-b"], "placed")
        fleet.adopt = False
        fleet.generation += 1  # an annotation moves no generation; a spec edit beside it does
        await handle.signal("object-changed", fleet.event())
        await wait(env, lambda: clusters(fleet) == ["gpu-b"], "the pending row dropped")
        plan = fleet.placed()["plan"]
        assert plan["winner"] == "gpu-b" and not plan.get("adoptionDigest")
        assert b.derived is not None and b.derived["origin"] == fleet.source_uid, "the adopted home stays ours"
