"""PlacementWorkflow on Temporal's time-skipping test server with an in-memory fleet
(testkit/placement_fakes.py): the Single race and its order of writes, the winner commit before any
loser is deleted, an unreachable loser retried, a crash after the commit (a fresh workflow resuming
from status), a source that is removed, un-placed, or asks for a mode this release does not serve.
Every behaviour is shown once against real member clusters in tests/test_placement_e2e.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio import workflow
from temporalio.testing import WorkflowEnvironment

from servingops.api_models import contract
from servingops.workflows.placement.spread_steps import ZERO_SHARE_PATCH
from testkit.placement_fakes import (
    FakeFleet,
    capacity_fleet,
    single,
    split,
    split_by_capacity,
    split_three_to_one,
    three_members,
)
from testkit.rollout_harness import start_env
from tests.support.placement_workflow import phase, placing, wait

pytestmark = pytest.mark.timeskip


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment








async def test_the_first_member_in_race_order_to_admit_wins_and_only_then_losers_go(
        env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"))
    a, b, c = fleet.members["gpu-a"], fleet.members["gpu-b"], fleet.members["cpu-c"]
    async with placing(env, fleet) as handle:
        await wait(env, lambda: a.derived is not None and b.derived is not None, "both race copies applied")
        racing = fleet.placed()
        assert racing["phase"] == "Racing" and not racing["plan"].get("winner")
        assert [r["cluster"] for r in racing["candidates"]] == ["gpu-a", "gpu-b"]
        assert all(r["allocation"]["raceCandidate"] for r in racing["candidates"])
        assert c.derived is None, "cpu-c does not match tier=gpu"
        # The plan was persisted before any member was written.
        assert fleet.log.index("status Racing winner=None") < fleet.log.index("apply gpu-a")
        assert a.derived["execution"]["planID"] == racing["plan"]["id"] == b.derived["execution"]["planID"]

        await env.sleep(60)  # nobody admits: the race waits, nothing is committed
        assert phase(fleet) == "Racing" and a.derived is not None and b.derived is not None

        b.admit = True
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        placed = fleet.placed()
        assert placed["plan"]["winner"] == placed["cluster"] == "gpu-b"
        assert placed["plan"]["id"] == racing["plan"]["id"] and placed["plan"]["revision"] == 1
        assert [(r["cluster"], r["phase"]) for r in placed["candidates"]] == [("gpu-b", "Placed")]
        assert placed["endpoint"] == placed["candidates"][0]["endpoint"] == "http://chat.gpu-b.example"
        readiness = [c for w in fleet.writes for c in w.get("conditions") or [] if c["type"] == "Ready"]
        assert (readiness[0]["status"], readiness[0]["reason"]) == ("False", "PlacementRacing")
        assert (readiness[-1]["status"], readiness[-1]["reason"], readiness[-1]["message"]) == (
            "True", "PlacementServing", "served from gpu-b at http://chat.gpu-b.example")
        # The commit landed before the loser was deleted; the winner was never deleted.
        commit = next(i for i, line in enumerate(fleet.log) if line.endswith("winner=gpu-b"))
        assert commit < fleet.log.index("delete gpu-a")
        assert a.derived is None and b.derived is not None and b.deletes == 0
        reasons = [r for _, r, _ in fleet.events()]
        assert reasons.index("PlacementRacing") < reasons.index("PlacementWinner") < reasons.index(
            "PlacementLoserRemoved") <= reasons.index("Placed")
        state = await handle.query(contract.Query.STATE, result_type=dict)
        assert state["why"]["gpu-a"] == "lost the race: gpu-b admitted first"

        a.admit = True  # quota freed on the loser afterwards changes nothing
        await env.sleep(120)
        assert fleet.placed()["plan"]["winner"] == "gpu-b" and a.derived is None and a.applies == 1


async def test_two_members_admitted_in_one_look_the_earlier_in_race_order_wins(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"))
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    a.admit = b.admit = True
    async with placing(env, fleet):
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        assert fleet.placed()["plan"]["winner"] == "gpu-a" and b.derived is None


async def test_an_unreachable_loser_keeps_its_row_until_it_is_deleted_and_a_new_run_resumes_the_plan(
        env: WorkflowEnvironment) -> None:
    """A crash after the commit: the first workflow is terminated while the loser cannot be reached;
    a fresh workflow for the same source (a reset, a lost history) resumes from status.placement:
    the same plan, the same winner, no new race, the winner's copy untouched."""
    fleet = FakeFleet(three_members(), single("gpu"))
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await wait(env, lambda: a.derived is not None and b.derived is not None, "both race copies applied")
        a.reachable = False
        b.admit = True
        await wait(env, lambda: fleet.placed().get("plan", {}).get("winner") == "gpu-b", "the winner committed")
        await env.sleep(30)
        held = fleet.placed()
        assert held["phase"] == "Racing" and [r["cluster"] for r in held["candidates"]] == ["gpu-a", "gpu-b"]
        assert ("Warning", "MemberUnreachable") in [(t, r) for t, r, _ in fleet.events()]
        plan_id, b_uid = held["plan"]["id"], b.derived["uid"]
        await handle.terminate("a crash after the winner commit")

    applies = b.applies
    async with placing(env, fleet) as handle:
        await env.sleep(10)
        assert fleet.placed()["plan"]["id"] == plan_id and a.derived is not None, "a is still unreachable"
        a.reachable = True
        await wait(env, lambda: phase(fleet) == "Placed", "placed after the resume")
        assert fleet.placed()["plan"]["id"] == plan_id and fleet.placed()["plan"]["winner"] == "gpu-b"
        assert a.derived is None and b.derived["uid"] == b_uid and b.deletes == 0
        # A fresh run does not know which generation the winner's copy was applied from: it applies it
        # again (server-side apply of the same body, the same object), never a new copy or a new plan.
        assert b.applies == applies + 1 and b.derived["execution"]["planID"] == plan_id
        state = await handle.query(contract.Query.STATE, result_type=dict)
        assert state["why"]["gpu-b"] == "resumed from status"


async def test_a_spec_change_reaches_the_winner_and_a_removed_placement_withdraws_every_copy(
        env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"))
    b = fleet.members["gpu-b"]
    b.admit = True
    async with placing(env, fleet) as handle:
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        fleet.generation = 2
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: b.derived is not None and b.derived["generation"] == 2, "generation 2 applied")
        assert fleet.placed()["plan"]["winner"] == "gpu-b"

        fleet.placement, fleet.generation = None, 3
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: b.derived is None and fleet.placed() == {}, "withdrawn")
        assert ("Warning", "NotPlaced") in [(t, r) for t, r, _ in fleet.events()]


async def test_a_winner_unreadable_past_the_grace_is_lost_and_a_new_race_places_the_service(
        env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"))
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    b.admit = True
    async with placing(env, fleet) as handle:
        await wait(env, lambda: phase(fleet) == "Placed", "placed in gpu-b")
        first = fleet.placed()["plan"]
        b.reachable = False
        await env.sleep(60)  # within the grace: still the home, counts of its last read kept
        during = fleet.placed()
        assert during["plan"] == first and during["candidates"][0]["observationKnown"] is False
        assert during["candidates"][0]["observationFailingSince"] and during["candidates"][0]["admittedReplicas"] == 1
        b.ready, a.admit = False, True  # its registration stops being Ready; a has room now
        await wait(env, lambda: fleet.placed().get("plan", {}).get("revision") == 2, "a new race", step=5)
        lost = next(m for t, r, m in fleet.events() if r == "PlacementWinnerLost")
        assert lost.startswith("gpu-b lost: it cannot be read (Unreachable") and "observation grace of 2m" in lost
        await wait(env, lambda: fleet.placed().get("plan", {}).get("winner") == "gpu-a", "gpu-a wins")
        second = fleet.placed()
        assert second["plan"]["id"] != first["id"]
        rows = {r["cluster"]: r for r in second["candidates"]}
        assert rows["gpu-b"]["allocation"]["drainRequested"] is True and "endpoint" not in rows["gpu-b"]
        assert second["endpoint"] == "http://chat.gpu-a.example"
        assert b.derived is not None, "b cannot be reached: its copy is still there"
        b.reachable = True
        await wait(env, lambda: b.derived is None and phase(fleet) == "Placed", "b's copy drained")
        assert [r["cluster"] for r in fleet.placed()["candidates"]] == ["gpu-a"]
        state = await handle.query(contract.Query.STATE, result_type=dict)
        assert state["why"]["gpu-b"].startswith("lost as the winner: it cannot be read")


async def test_a_winner_whose_copy_is_gone_past_the_grace_races_again(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"), observation_grace="30s")
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    b.admit = True
    async with placing(env, fleet):
        await wait(env, lambda: phase(fleet) == "Placed", "placed in gpu-b")
        b.derived = None  # someone deleted the derived service in the member
        await wait(env, lambda: fleet.placed().get("plan", {}).get("revision") == 2, "a new race", step=5)
        assert any(r == "PlacementWinnerLost" and "its derived service is gone" in m for _, r, m in fleet.events())
        # b is still Ready and matching: it races again, and wins again (a has no quota).
        await wait(env, lambda: phase(fleet) == "Placed", "placed again")
        assert fleet.placed()["plan"]["winner"] == "gpu-b" and b.derived is not None and a.derived is None


async def test_deleting_the_source_deletes_the_copies_and_ends_the_workflow(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"))
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await wait(env, lambda: a.derived is not None and b.derived is not None, "both race copies applied")
        # The finalizer went on before the first member write.
        assert fleet.log.index("finalizer + servingops.io/placement") < fleet.log.index("apply gpu-a")
        fleet.deleting = True
        await handle.signal(contract.Signal.DELETE, fleet.event(deleting=True))
        await handle.result()
        assert a.derived is None and b.derived is None
        assert fleet.finalizers == [] and fleet.gone
        assert fleet.log.index("finalizer - servingops.io/placement") > fleet.log.index("delete gpu-b")


async def test_a_deleted_source_waits_for_an_unreachable_member_to_withdraw_its_copy(env: WorkflowEnvironment) -> None:
    """The source stays (its finalizer) while a member cannot be reached, said in a Warning naming it; the
    copy is withdrawn once the member answers, and only then is the source let go."""
    fleet = FakeFleet(three_members(), single("gpu"))
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    b.admit = True
    async with placing(env, fleet) as handle:
        await wait(env, lambda: phase(fleet) == "Placed", "placed in gpu-b")
        b.reachable = False
        fleet.deleting = True
        await handle.signal(contract.Signal.DELETE, fleet.event(deleting=True))
        await wait(env, lambda: any(r == "PlacementWithdrawalPending" for _, r, _ in fleet.events()), "said")
        [said] = [m for _, r, m in fleet.events() if r == "PlacementWithdrawalPending"]
        assert "still in gpu-b (gpu-b: Unreachable: gpu-b cannot be reached" in said
        await env.sleep(20 * 60)  # twenty minutes of retries: the copy is not forgotten, the source not let go
        assert not fleet.gone and fleet.finalizers == ["servingops.io/placement"] and b.derived is not None
        rows = fleet.placed()["candidates"]
        assert [(r["cluster"], r["allocation"]["drainRequested"]) for r in rows] == [("gpu-b", True)]
        assert len([r for _, r, _ in fleet.events() if r == "PlacementWithdrawalPending"]) == 1, "said once"
        b.reachable = True
        await wait(env, lambda: fleet.gone, "the source let go", step=30)
        await handle.result()
        assert b.derived is None and a.derived is None


async def test_a_removed_placement_keeps_withdrawing_from_an_unreachable_member(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"))
    b = fleet.members["gpu-b"]
    b.admit = True
    async with placing(env, fleet) as handle:
        await wait(env, lambda: phase(fleet) == "Placed", "placed in gpu-b")
        b.reachable = False
        fleet.placement, fleet.generation = None, 2
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: any(r == "NotPlaced" and "not yet from gpu-b" in m for _, r, m in fleet.events()),
                   "said")
        assert b.derived is not None and fleet.finalizers == ["servingops.io/placement"]
        b.reachable = True
        await wait(env, lambda: b.derived is None and fleet.placed() == {}, "withdrawn", step=5)
        await wait(env, lambda: fleet.finalizers == [], "finalizer removed")


async def test_nothing_matches_then_a_member_becomes_ready(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"))
    for member in fleet.members.values():
        member.ready = False
    async with placing(env, fleet):
        await wait(env, lambda: ("Warning", "NoReadyCandidate") in [(t, r) for t, r, _ in fleet.events()],
                   "held with a reason")
        [message] = [m for _, r, m in fleet.events() if r == "NoReadyCandidate"]
        assert message == "no Ready WorkloadCluster matches spec.placement (matched but not Ready: gpu-a, gpu-b)"
        assert not fleet.placed().get("plan") and all(m.derived is None for m in fleet.members.values())
        fleet.members["gpu-b"].ready = True  # no event of the source says so: the pending poll sees it
        fleet.members["gpu-b"].admit = True
        await wait(env, lambda: phase(fleet) == "Admitting" or phase(fleet) == "Placed", "a race of one", step=5)
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        assert [r["cluster"] for r in fleet.placed()["candidates"]] == ["gpu-b"]


async def test_split_three_to_one_places_each_share_in_its_home_and_a_new_weighting_is_a_new_revision(
        env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), split({"gpu-a": 3, "gpu-b": 1}, replicas=4))
    a, b, c = fleet.members["gpu-a"], fleet.members["gpu-b"], fleet.members["cpu-c"]
    a.admit = b.admit = True
    async with placing(env, fleet) as handle:
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        placed = fleet.placed()
        plan = placed["plan"]
        assert (plan["mode"], plan["revision"], plan["requestedReplicas"], plan["assignedReplicas"],
                plan["unassignedReplicas"]) == ("Split", 1, 4, 4, 0)
        rows = {r["cluster"]: r for r in placed["candidates"]}
        assert {n: r["allocation"]["desiredReplicas"] for n, r in rows.items()} == {"gpu-a": 3, "gpu-b": 1}
        assert {n: r["allocation"]["weight"] for n, r in rows.items()} == {"gpu-a": 3, "gpu-b": 1}
        assert rows["gpu-a"]["allocation"]["desiredHome"]["replicaFloors"] == [
            {"component": "engine", "replicas": 3}]
        assert {n: (r["phase"], r["admittedReplicas"], r["endpoint"]) for n, r in rows.items()} == {
            "gpu-a": ("Placed", 3, "http://chat.gpu-a.example"), "gpu-b": ("Placed", 1, "http://chat.gpu-b.example")}
        assert "cluster" not in placed and "endpoint" not in placed, "All/Split: the candidates are authoritative"
        assert a.derived["floors"] == {"engine": 3} and b.derived["floors"] == {"engine": 1} and c.derived is None
        assert a.derived["execution"]["replicaFloors"] == [{"component": "engine", "replicas": 3}]
        assert fleet.log.index("status Admitting winner=None") < fleet.log.index("apply gpu-a")
        assert any(r == "PlacementPlanned" and m.startswith("plan revision 1 (Split): gpu-a=3, gpu-b=1;")
                   for _, r, m in fleet.events())

        fleet.placement, fleet.generation = split({"gpu-a": 1, "gpu-b": 1}, replicas=4), 2
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: fleet.placed()["plan"]["revision"] == 2 and phase(fleet) == "Placed", "revision 2")
        rows = {r["cluster"]: r for r in fleet.placed()["candidates"]}
        assert {n: r["allocation"]["desiredReplicas"] for n, r in rows.items()} == {"gpu-a": 2, "gpu-b": 2}
        assert rows["gpu-a"]["allocation"]["originalReplicas"] == 3
        assert a.derived["floors"] == {"engine": 2} and b.derived["floors"] == {"engine": 2}

        # gpu-b no longer matched: drained (its row listed, drainRequested) until its copy is gone.
        b.reachable = False
        fleet.placement, fleet.generation = split({"gpu-a": 1}, replicas=4), 3
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: fleet.placed()["plan"]["revision"] == 3, "revision 3")
        rows = {r["cluster"]: r for r in fleet.placed()["candidates"]}
        assert rows["gpu-b"]["allocation"]["drainRequested"] is True and rows["gpu-a"]["allocation"][
            "desiredReplicas"] == 4
        b.reachable = True
        await wait(env, lambda: b.derived is None and [r["cluster"] for r in fleet.placed()["candidates"]] == [
            "gpu-a"], "b drained")
        assert any(r == "PlacementHomeDrained" for _, r, _ in fleet.events())


async def test_split_a_home_whose_share_goes_to_zero_loses_its_copy_and_keeps_its_row(
        env: WorkflowEnvironment) -> None:
    """Split 3:1 (4 replicas), then 2 replicas: gpu-b's share is 0. Nothing was ever published for the service
    (no routing workflow), so nothing holds the removal: its copy goes, and its row stays listed (weight 1,
    nothing desired, no copy acknowledged)."""
    fleet = split_three_to_one()
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        fleet.placement, fleet.generation = split({"gpu-a": 3, "gpu-b": 1}, replicas=2), 2
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: fleet.placed()["plan"]["revision"] == 2 and b.derived is None, "gpu-b's copy gone")
        # The pass that deleted it writes the row after the delete.
        await wait(env, lambda: any(r == "PlacementShareWithdrawn" for _, r, _ in fleet.events()), "said")
        assert phase(fleet) == "Placed"
        rows = {r["cluster"]: r for r in fleet.placed()["candidates"]}
        assert set(rows) == {"gpu-a", "gpu-b"}
        assert (rows["gpu-b"]["allocation"]["weight"], rows["gpu-b"]["allocation"]["desiredReplicas"],
                rows["gpu-b"].get("appliedPlanID"), rows["gpu-b"].get("endpoint")) == (1, 0, None, None)
        assert rows["gpu-a"]["appliedPlanID"] == fleet.placed()["plan"]["id"]
        assert a.derived is not None and a.derived["floors"] == {"engine": 2} and a.deletes == 0
        assert b.deletes == 1
        assert [m for _, r, m in fleet.events() if r == "PlacementShareWithdrawn"] == [
            "the copy in gpu-b, a home whose share the plan lowered to 0, was deleted"]


async def test_a_zero_share_copy_left_by_a_run_before_the_fix_is_deleted_by_the_next_run(
        env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that accepted the zero share before `placement-zero-share-withdrawn` (its patch call answered False,
    as a replay of such a run does) left gpu-b's row without appliedPlanID and its copy running; a run continued
    from that state (continue-as-new) knows the copy from what it applied (applied_generation) and deletes it."""
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched", lambda asked: False if asked == ZERO_SHARE_PATCH else real(asked))
    fleet = split_three_to_one()
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        fleet.placement, fleet.generation = split({"gpu-a": 3, "gpu-b": 1}, replicas=2), 2
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: fleet.placed()["plan"]["revision"] == 2 and phase(fleet) == "Placed", "revision 2")
        await env.sleep(10 * 60)
        row_b = next(r for r in fleet.placed()["candidates"] if r["cluster"] == "gpu-b")
        assert row_b["allocation"]["desiredReplicas"] == 0 and row_b.get("appliedPlanID") is None
        assert b.derived is not None and b.deletes == 0, "before the fix: the zero share's copy stays"
        carried = await handle.query(contract.Query.STATE, result_type=dict)
        await handle.terminate("continued by the next run")
    monkeypatch.setattr(workflow, "patched", real)

    assert carried["applied_generation"] == {"gpu-a": 2, "gpu-b": 1}
    async with placing(env, fleet, carried=carried):
        # The event travels with the status write of the pass that deleted the copy.
        await wait(env, lambda: b.derived is None and any(
            r == "PlacementShareWithdrawn" and "gpu-b" in m for _, r, m in fleet.events()), "the leftover deleted")
        rows = {r["cluster"]: r for r in fleet.placed()["candidates"]}
        assert set(rows) == {"gpu-a", "gpu-b"} and rows["gpu-b"]["allocation"]["desiredReplicas"] == 0
        assert fleet.placed()["plan"]["revision"] == 2, "no new plan: the one accepted before is kept"
        assert a.derived is not None and a.derived["floors"] == {"engine": 2} and a.deletes == 0


async def test_a_plan_past_max_replicas_per_cluster_is_held_with_the_reason(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), split({"gpu-a": 3, "gpu-b": 1}, replicas=4, ceiling=2))
    async with placing(env, fleet):
        await wait(env, lambda: any(r == "MaxReplicasPerClusterExceeded" for _, r, _ in fleet.events()), "held")
        [message] = [m for _, r, m in fleet.events() if r == "MaxReplicasPerClusterExceeded"]
        assert message == "maxReplicasPerCluster is 2; the plan needs gpu-a=3"
        assert not fleet.placed().get("plan") and all(m.applies == 0 for m in fleet.members.values())


async def test_a_hold_that_resolves_back_to_the_accepted_plan_ends(env: WorkflowEnvironment) -> None:
    """A held spec, then the spec of the plan already accepted again: no new plan is accepted, and the hold
    (search attribute, query) ends with it instead of staying Pending."""
    fleet = FakeFleet(three_members(), split({"gpu-a": 3, "gpu-b": 1}, replicas=4))
    for member in fleet.members.values():
        member.admit = True
    async with placing(env, fleet) as handle:
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        fleet.placement, fleet.generation = split({"gpu-a": 3, "gpu-b": 1}, replicas=4, ceiling=2), 2
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: any(r == "MaxReplicasPerClusterExceeded" for _, r, _ in fleet.events()), "held")
        held = await handle.query(contract.Query.STATE)
        assert held["held"].startswith("MaxReplicasPerClusterExceeded")
        fleet.placement, fleet.generation = split({"gpu-a": 3, "gpu-b": 1}, replicas=4), 3
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        for _ in range(120):
            if (await handle.query(contract.Query.STATE))["held"] is None:
                break
            await env.sleep(1)
        else:
            raise AssertionError(f"the hold never ended: {(await handle.query(contract.Query.STATE))['held']}")
        assert fleet.placed()["plan"]["revision"] == 1 and phase(fleet) == "Placed"


async def test_all_runs_the_full_policy_in_every_matching_home(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), {**single("gpu"), "mode": "All"}, min_replicas={"engine": 2})
    for member in fleet.members.values():
        member.admit = True
    async with placing(env, fleet):
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        rows = {r["cluster"]: r for r in fleet.placed()["candidates"]}
        assert {n: r["allocation"]["desiredReplicas"] for n, r in rows.items()} == {"gpu-a": 2, "gpu-b": 2}
        assert fleet.members["cpu-c"].derived is None
        assert fleet.placed()["plan"]["assignedReplicas"] == 4


async def test_split_by_capacity_without_capacity_reports_holds_and_writes_nothing(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), split_by_capacity("gpu-a", "gpu-b", replicas=4))
    fleet.members["gpu-b"].capacity = 3
    async with placing(env, fleet):
        await wait(env, lambda: any(r == "CapacityUnknown" for _, r, _ in fleet.events()), "said")
        said = next(m for _, r, m in fleet.events() if r == "CapacityUnknown")
        assert said.startswith("no verified capacity from gpu-a: NoCapacityReport (no root AcceleratorQuota"), said
        assert "gpu-b" not in said, "a member that reports is not named"
        assert all(m.applies == 0 for m in fleet.members.values()) and not fleet.placed().get("plan")


async def test_split_by_capacity_divides_by_reported_capacity_and_keeps_the_plan_while_one_is_unknown(
        env: WorkflowEnvironment) -> None:
    fleet = capacity_fleet()
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        plan = fleet.placed()["plan"]
        assert (plan["mode"], plan["revision"], plan["assignedReplicas"]) == ("SplitByCapacity", 1, 4)
        rows = {r["cluster"]: r for r in fleet.placed()["candidates"]}
        assert {n: r["allocation"]["desiredReplicas"] for n, r in rows.items()} == {"gpu-a": 3, "gpu-b": 1}
        assert {n: r["allocation"]["weight"] for n, r in rows.items()} == {"gpu-a": 6, "gpu-b": 2}
        sample = rows["gpu-a"]["allocation"]["capacity"]
        assert sample["replicas"] == 6 and sample["pools"][0]["reportUID"] == a.uid, sample
        # The member gets the demand contract its rendering is bound to.
        assert a.derived["execution"]["demand"] == sample["demandContract"]

        # gpu-b stops reporting: the plan stays (no new revision, no write to a member), said with why.
        b.capacity, applies = None, (a.applies, b.applies)
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: any(r == "CapacityUnknown" for _, r, _ in fleet.events()), "held")
        assert fleet.placed()["plan"]["revision"] == 1 and (a.applies, b.applies) == applies
        assert {r["cluster"]: r["allocation"]["desiredReplicas"] for r in fleet.placed()["candidates"]} == {
            "gpu-a": 3, "gpu-b": 1}
        await wait(env, lambda: {r["cluster"]: r["allocation"].get("homeInputsPending")
                                 for r in fleet.placed()["candidates"]} == {"gpu-a": None, "gpu-b": True},
                   "gpu-b's inputs pending")
        assert fleet.placed()["plan"]["pauseSurge"] is False

        # It reports again, with more: a new revision divides by the new capacities.
        b.capacity = 6
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: fleet.placed()["plan"]["revision"] == 2 and phase(fleet) == "Placed", "revision 2")
        assert {r["cluster"]: r["allocation"]["desiredReplicas"] for r in fleet.placed()["candidates"]} == {
            "gpu-a": 2, "gpu-b": 2}
        assert not any(r["allocation"].get("homeInputsPending") for r in fleet.placed()["candidates"])


async def test_split_by_capacity_a_member_rendering_otherwise_gets_a_new_revision_with_its_contract(
        env: WorkflowEnvironment) -> None:
    """The member holds a copy whose rendering differs from the plan's demand contract
    (activities/serving/placement_demand.py), so a changed rendering with the same whole replicas (a runtime
    changed in the member, or a spec change) must still be a new plan revision carrying the new contract."""
    fleet = capacity_fleet()
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        first = a.derived["execution"]["demand"]
        a.rendering = "2"
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: fleet.placed()["plan"]["revision"] == 2 and phase(fleet) == "Placed", "revision 2")
        # The plan is persisted before any member is written (and the phase is the last pass's until this pass
        # ends): the copies follow within the pass.
        await wait(env, lambda: a.derived["execution"]["revision"] == 2 and b.derived["execution"]["revision"] == 2,
                   "both copies at revision 2")
        rows = {r["cluster"]: r for r in fleet.placed()["candidates"]}
        assert {n: r["allocation"]["desiredReplicas"] for n, r in rows.items()} == {"gpu-a": 3, "gpu-b": 1}
        renewed = rows["gpu-a"]["allocation"]["capacity"]["demandContract"]
        assert renewed != first and a.derived["execution"]["demand"] == renewed
        assert a.derived["execution"]["revision"] == 2 and b.derived["execution"]["revision"] == 2
        # Nothing changed since: no further revision.
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: a.capacity_reads >= 3, "read again")
        assert fleet.placed()["plan"]["revision"] == 2


async def test_a_homes_rollout_provenance_is_mirrored_only_when_the_source_names_a_rollout_policy(
        env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"))
    b = fleet.members["gpu-b"]
    b.admit = True
    b.rollout = {"activeRunID": "run-1", "activeGroups": [
        {"source": "Policy", "policyName": "canary-fast", "portableDigest": "rp1:aa"}]}
    async with placing(env, fleet) as handle:
        await wait(env, lambda: phase(fleet) == "Placed", "placed")
        assert all("rollout" not in row for row in fleet.placed()["candidates"]), "no RolloutPolicy named"
        fleet.rollout_policies, fleet.generation = True, 2
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: any(r.get("rollout") for r in fleet.placed()["candidates"]), "mirrored")
        row = next(r for r in fleet.placed()["candidates"] if r["cluster"] == "gpu-b")
        assert row["rollout"] == b.rollout


def _not_on(*names: str, timeout: str | None = None) -> dict[str, Any]:
    """spec.placement: Single over every member but `names` (by name), with an optional replacementTimeout."""
    placement: dict[str, Any] = {"policy": "ClusterAffinity", "mode": "Single", "clusterAffinity": [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": list(names)}]}]}
    if timeout:
        placement["replacementTimeout"] = timeout
    return placement


async def _placed_in_b(env: WorkflowEnvironment, fleet: FakeFleet) -> None:
    fleet.members["gpu-b"].admit = True
    await wait(env, lambda: phase(fleet) == "Placed" and fleet.placed()["plan"]["winner"] == "gpu-b", "placed in b")


async def test_a_single_move_rotates_a_probe_that_never_admits_and_hands_over_only_once_the_replacement_serves(
        env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"))
    a, b, c = fleet.members["gpu-a"], fleet.members["gpu-b"], fleet.members["cpu-c"]
    async with placing(env, fleet) as handle:
        await _placed_in_b(env, fleet)
        plan_id = fleet.placed()["plan"]["id"]
        a.admit = True  # a has room now; c never will
        fleet.placement, fleet.generation = _not_on("gpu-b", timeout="30s"), 2
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        # Name order from no cursor: cpu-c is probed first; gpu-a waits (one extra copy at a time).
        await wait(env, lambda: c.derived is not None, "c probed", step=0.5)
        probing = fleet.placed()
        assert probing["plan"]["winner"] == probing["cluster"] == "gpu-b" and probing["plan"]["id"] == plan_id
        assert probing["endpoint"] == "http://chat.gpu-b.example" and probing["phase"] == "Placed"
        assert probing["plan"]["singleMove"] == {"cursor": "cpu-c"}
        rows = {r["cluster"]: r for r in probing["candidates"]}
        assert rows["cpu-c"]["allocation"]["raceCandidate"] is True and rows["cpu-c"]["allocation"][
            "replacementStartedAt"]
        assert a.derived is None and "gpu-a" not in rows
        await env.sleep(5)  # the next look at the move says why gpu-a waits
        state = await handle.query(contract.Query.STATE, result_type=dict)
        assert state["why"]["gpu-a"].startswith("SurgeBudgetExhausted")
        # The nomination was persisted before c was written.
        assert fleet.log.index("apply cpu-c") > max(i for i, line in enumerate(fleet.log)
                                                    if line.startswith("status") and i < fleet.log.index("apply cpu-c"))

        a.pods_ready = False  # a admits with a URL before its pods are Ready
        await wait(env, lambda: a.derived is not None, "rotated to a after replacementTimeout", step=5)
        assert c.derived is None, "the timed-out probe was withdrawn before the next one"
        assert any(r == "PlacementProbeRotated" and m.startswith("cpu-c did not admit") for _, r, m in fleet.events())
        await wait(env, lambda: fleet.placed()["plan"].get("singleMove", {}).get("selected") == "gpu-a",
                   "a selected", step=1)
        await env.sleep(20)  # looks at the move while a has a URL and no Ready replica: b keeps serving
        held = fleet.placed()
        assert held["plan"]["winner"] == "gpu-b" and b.derived is not None, held
        state = await handle.query(contract.Query.STATE, result_type=dict)
        assert state["why"]["gpu-a"].endswith("takes over once a replica of every component is Ready"), state
        a.pods_ready = True
        await wait(env, lambda: fleet.placed()["plan"]["winner"] == "gpu-a" and b.derived is None, "moved to a")
        moved = fleet.placed()
        assert moved["cluster"] == "gpu-a" and moved["endpoint"] == "http://chat.gpu-a.example"
        handoff = next(i for i, line in enumerate(fleet.log) if line.endswith("winner=gpu-a"))
        assert handoff < fleet.log.index("delete gpu-b"), "the old home went only after the handoff was persisted"
        await wait(env, lambda: "singleMove" not in fleet.placed()["plan"], "move record cleared")
        assert [r["cluster"] for r in fleet.placed()["candidates"]] == ["gpu-a"] and phase(fleet) == "Placed"
        reasons = [r for _, r, _ in fleet.events()]
        for expected in ("PlacementMoveStarted", "PlacementProbe", "PlacementReplacementSelected", "PlacementMoved"):
            assert expected in reasons, reasons


async def test_without_replacement_timeout_a_pending_probe_is_kept(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"))
    a, b, c = fleet.members["gpu-a"], fleet.members["gpu-b"], fleet.members["cpu-c"]
    async with placing(env, fleet) as handle:
        await _placed_in_b(env, fleet)
        a.admit = True
        fleet.placement, fleet.generation = _not_on("gpu-b"), 2
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: c.derived is not None, "c probed", step=0.5)
        await env.sleep(300)  # ten times the other test's timeout: still the same probe
        assert c.derived is not None and a.derived is None and fleet.placed()["plan"]["winner"] == "gpu-b"
        c.admit = True  # c admits at last: it is the replacement
        await wait(env, lambda: fleet.placed()["plan"]["winner"] == "cpu-c" and b.derived is None, "moved to c")


async def test_a_winner_that_matches_again_calls_the_move_off(env: WorkflowEnvironment) -> None:
    fleet = FakeFleet(three_members(), single("gpu"))
    b, c = fleet.members["gpu-b"], fleet.members["cpu-c"]
    async with placing(env, fleet) as handle:
        await _placed_in_b(env, fleet)
        fleet.placement, fleet.generation = _not_on("gpu-b"), 2
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: c.derived is not None, "c probed", step=0.5)
        fleet.placement, fleet.generation = single("gpu"), 3
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: c.derived is None and "singleMove" not in fleet.placed()["plan"], "called off")
        placed = fleet.placed()
        assert placed["plan"]["winner"] == "gpu-b" and [r["cluster"] for r in placed["candidates"]] == ["gpu-b"]
        assert b.derived is not None and any(r == "PlacementMoveCancelled" for _, r, _ in fleet.events())
