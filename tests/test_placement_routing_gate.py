"""Seed 004's ordering between placement and routing (workflows/placement/routing_gate.py): a home's copy
is deleted only once the latest Publication the routing workflow sent (signal `publication`) leaves that
home out, and placement tells the routing workflow (signal `routing-changed`) when it wrote what a routing
table is computed from. The pure rules first (unit), then PlacementWorkflow on the time-skipping server
against the fake fleet (testkit/placement_fakes.py), the Publications sent by the test in the routing
workflow's place, and the routing workflow's id held by a recorder (tests/support/routing_recorder.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from servingops.api_models import contract
from servingops.api_models.contract.routing import Publication
from servingops.workflows.placement import routing_gate
from servingops.workflows.placement.members import PUBLICATION_WAIT
from servingops.workflows.placement.race_steps import PLACED_POLL
from testkit.placement_fakes import NAME, NAMESPACE, FakeFleet, split, split_three_to_one, three_members
from testkit.rollout_harness import start_env
from tests.support.placement_workflow import phase, placing, wait
from tests.support.routing_recorder import recording, seen

AWAITING = "PlacementAwaitingPublication"


# --- the pure rules -------------------------------------------------------------------------------------


def pub(sequence: int, *routed: str) -> Publication:
    return Publication(sequence=sequence, routed=list(routed))


@pytest.mark.unit
def test_newer_keeps_the_highest_sequence_only() -> None:
    assert routing_gate.newer(None, pub(0))
    assert routing_gate.newer(pub(3, "a"), pub(4))
    assert not routing_gate.newer(pub(3, "a"), pub(3)), "the same sequence again is not news"
    assert not routing_gate.newer(pub(3, "a"), pub(2)), "a late, lower one never undoes a newer one"


@pytest.mark.unit
def test_routed_is_what_the_latest_publication_names_and_nothing_without_one() -> None:
    assert not routing_gate.routed(None, "a"), "nothing was ever published: nothing holds a removal"
    assert routing_gate.routed(pub(1, "a", "b"), "a")
    assert not routing_gate.routed(pub(1, "b"), "a")
    assert not routing_gate.routed(pub(2), "a"), "routed=[]: the route sends nowhere"


@pytest.mark.unit
def test_held_names_the_routed_clusters_among_those_asked_sorted() -> None:
    assert routing_gate.held(None, ["b", "a"]) == []
    assert routing_gate.held(pub(1, "a", "b", "c"), ["c", "x", "a"]) == ["a", "c"]
    assert routing_gate.held(pub(1, "a"), []) == []
    assert routing_gate.held(pub(1, "a", "b"), iter(["b"])) == ["b"], "any iterable"


# --- PlacementWorkflow, time-skipping ----------------------------------------------------------------


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


async def publish(handle: WorkflowHandle[Any, Any], sequence: int, *routed: str, plan_id: str | None = None,
                  settled: bool = True) -> None:
    """What the routing workflow sends: the homes the global route may send requests to."""
    await handle.signal(contract.Signal.PUBLICATION,
                        Publication(sequence=sequence, routed=list(routed), plan_id=plan_id, settled=settled))


def said(fleet: FakeFleet, reason: str) -> list[str]:
    return [m for _, r, m in fleet.events() if r == reason]


def homes(fleet: FakeFleet) -> dict[str, bool]:
    """Each row's cluster and whether it is being drained."""
    return {r["cluster"]: bool((r.get("allocation") or {}).get("drainRequested"))
            for r in fleet.placed().get("candidates") or []}


async def state(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    return dict(await handle.query(contract.Query.STATE, result_type=dict))


async def placed_in_both(env: WorkflowEnvironment, fleet: FakeFleet) -> None:
    await wait(env, lambda: phase(fleet) == "Placed" and set(homes(fleet)) == {"gpu-a", "gpu-b"}, "placed in a and b")


def both() -> FakeFleet:
    """Split 1:1 over gpu-a and gpu-b (2 replicas), both admitting."""
    fleet = FakeFleet(three_members(), split({"gpu-a": 1, "gpu-b": 1}, replicas=2))
    fleet.members["gpu-a"].admit = fleet.members["gpu-b"].admit = True
    return fleet


async def drop_b(handle: WorkflowHandle[Any, Any], fleet: FakeFleet, generation: int) -> None:
    """A new spec.placement that no longer matches gpu-b: its row is drained."""
    fleet.placement, fleet.generation = split({"gpu-a": 1}, replicas=2), generation
    await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())


@pytest.mark.timeskip
async def test_a_dropped_home_the_route_still_names_keeps_its_copy_until_a_newer_publication_leaves_it_out(
        env: WorkflowEnvironment) -> None:
    fleet = both()
    b = fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await placed_in_both(env, fleet)
        first_plan = fleet.placed()["plan"]["id"]
        await publish(handle, 1, "gpu-a", "gpu-b", plan_id=first_plan)
        await drop_b(handle, fleet, 2)
        await wait(env, lambda: fleet.placed()["plan"]["revision"] == 2 and bool(said(fleet, AWAITING)), "held")
        second_plan = fleet.placed()["plan"]["id"]

        await env.sleep(10 * 60)  # twenty passes at the placed poll: the route still names gpu-b
        assert b.derived is not None and b.deletes == 0 and "delete gpu-b" not in fleet.log
        assert homes(fleet) == {"gpu-a": False, "gpu-b": True}, "listed, drained, not gone"
        [message] = said(fleet, AWAITING)
        assert "gpu-b" in message and "gpu-a" not in message
        held = await state(handle)
        assert held["awaiting_publication"] == ["gpu-b"]
        assert held["why"]["gpu-b"] == "its copy stays until the global route stops sending requests to it"
        assert held["publication"]["sequence"] == 1

        # The routing workflow's word before its next write (old and new route): still gpu-b. Then a late
        # one of a LOWER sequence that leaves gpu-b out arrives: it does not undo the newer one.
        await publish(handle, 3, "gpu-a", "gpu-b", settled=False)
        await publish(handle, 2, "gpu-a", plan_id=second_plan)
        await env.sleep(5 * 60)
        assert b.derived is not None and b.deletes == 0, "a lower sequence released the copy"
        assert (await state(handle))["publication"]["sequence"] == 3
        assert len(said(fleet, AWAITING)) == 1, "said once"

        # The newer word leaves gpu-b out: its copy goes at once, not at the next poll.
        asked = await env.get_current_time()
        await publish(handle, 4, "gpu-a", plan_id=second_plan)
        await wait(env, lambda: b.derived is None, "gpu-b's copy deleted", step=0.5)
        assert await env.get_current_time() - asked < PLACED_POLL / 2, "it waited for the poll, not the signal"
        await wait(env, lambda: homes(fleet) == {"gpu-a": False}, "gpu-b's row gone")
        assert any("gpu-b" in m for m in said(fleet, "PlacementHomeDrained"))
        assert len(said(fleet, AWAITING)) == 1
        released = await state(handle)
        assert released["awaiting_publication"] == [] and released["publication"]["sequence"] == 4

        # gpu-b a home again, then dropped again, with a late lower Publication that names it in between:
        # the latest (4) leaves gpu-b out, so nothing holds the second removal.
        fleet.placement, fleet.generation = split({"gpu-a": 1, "gpu-b": 1}, replicas=2), 3
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await placed_in_both(env, fleet)
        await publish(handle, 2, "gpu-a", "gpu-b")
        await drop_b(handle, fleet, 4)
        await wait(env, lambda: b.derived is None and homes(fleet) == {"gpu-a": False}, "removed again, not held")
        assert len(said(fleet, AWAITING)) == 1 and b.deletes == 2
        assert fleet.members["gpu-a"].derived is not None and fleet.members["gpu-a"].deletes == 0


def rows(fleet: FakeFleet) -> dict[str, dict[str, Any]]:
    return {r["cluster"]: r for r in fleet.placed().get("candidates") or []}


async def zero_b(handle: WorkflowHandle[Any, Any], fleet: FakeFleet, generation: int) -> None:
    """Split 3:1 down to 2 replicas: largest remainder gives gpu-a 2 and gpu-b 0 (ties by name)."""
    fleet.placement, fleet.generation = split({"gpu-a": 3, "gpu-b": 1}, replicas=2), generation
    await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())


@pytest.mark.timeskip
async def test_a_home_whose_share_goes_to_zero_serves_until_the_homes_do_and_loses_its_copy_once_off_the_route(
        env: WorkflowEnvironment) -> None:
    """Split 3:1, then a plan that gives gpu-b 0 replicas: its row stays (weight 1, desired 0) and still says the
    plan its member acknowledged (appliedPlanID, seed 004). Its copy serves until gpu-a admits its new floor, then
    leaves the route (no endpoint), and is deleted only once a Publication leaves gpu-b out (seed 004: "a zero
    current floor does not authorize deletion before traffic drains")."""
    fleet = split_three_to_one()
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await placed_in_both(env, fleet)
        first_plan = fleet.placed()["plan"]["id"]
        assert {n: r.get("appliedPlanID") for n, r in rows(fleet).items()} == {"gpu-a": first_plan,
                                                                               "gpu-b": first_plan}
        await publish(handle, 1, "gpu-a", "gpu-b", plan_id=first_plan)
        a.admit = False  # gpu-a's Kueue holds its new floor for a while
        await zero_b(handle, fleet, 2)
        await wait(env, lambda: fleet.placed()["plan"]["revision"] == 2 and a.derived is not None
                   and a.derived["floors"] == {"engine": 2}, "revision 2 applied to gpu-a")
        second_plan = fleet.placed()["plan"]["id"]
        await env.sleep(5 * 60)
        row_a, row_b = rows(fleet)["gpu-a"], rows(fleet)["gpu-b"]
        assert (row_a["allocation"]["desiredReplicas"], row_b["allocation"]["desiredReplicas"]) == (2, 0)
        assert row_b["allocation"]["weight"] == 1 and not row_b["allocation"].get("drainRequested")
        assert row_a["appliedPlanID"] == second_plan
        assert row_b.get("appliedPlanID") == first_plan, "gpu-b's member acknowledged plan 1 and still runs it"
        assert phase(fleet) == "Admitting" and row_b.get("endpoint") == "http://chat.gpu-b.example", (
            "gpu-b left the route before gpu-a admitted its floor")
        assert b.derived is not None and b.deletes == 0 and said(fleet, AWAITING) == []

        a.admit = True
        await wait(env, lambda: phase(fleet) == "Placed" and bool(said(fleet, AWAITING)), "placed, gpu-b held")
        assert rows(fleet)["gpu-b"].get("endpoint") is None, "the homes serve: gpu-b is taken off the route"
        # Twenty passes at the placed poll: the route still names gpu-b. Not a multiple of the poll, so the
        # Publication below never meets a poll timer firing (the time-skipping server refuses the cancel of a
        # timer that fired while the task was with the worker: temporalio/sdk-java#3088).
        await env.sleep(10 * 60 + 13)
        assert b.derived is not None and b.deletes == 0 and "delete gpu-b" not in fleet.log
        [message] = said(fleet, AWAITING)
        assert "gpu-b" in message and "gpu-a" not in message
        held = await state(handle)
        assert held["awaiting_publication"] == ["gpu-b"]
        assert held["why"]["gpu-b"] == "its copy stays until the global route stops sending requests to it"
        assert rows(fleet)["gpu-b"].get("appliedPlanID") == first_plan

        # The route leaves gpu-b out: its copy goes at once (the signal, not the poll); its row stays.
        asked = await env.get_current_time()
        await publish(handle, 2, "gpu-a", plan_id=second_plan)
        await wait(env, lambda: b.derived is None, "gpu-b's copy deleted", step=0.5)
        assert await env.get_current_time() - asked < PLACED_POLL / 2, "it waited for the poll, not the signal"
        await wait(env, lambda: rows(fleet)["gpu-b"].get("appliedPlanID") is None, "gpu-b's row says no copy")
        row_b = rows(fleet)["gpu-b"]
        assert (row_b["allocation"]["weight"], row_b["allocation"]["desiredReplicas"],
                row_b["allocation"]["currentReplicas"], row_b.get("endpoint"), row_b.get("admittedReplicas"),
                row_b.get("readyReplicas")) == (1, 0, 0, None, 0, 0)
        assert any("gpu-b" in m for m in said(fleet, "PlacementShareWithdrawn"))
        assert len(said(fleet, AWAITING)) == 1 and b.deletes == 1
        assert (await state(handle))["awaiting_publication"] == []
        assert a.derived is not None and a.deletes == 0 and phase(fleet) == "Placed"

        # gpu-b's share back: a copy again, acknowledging the new plan.
        fleet.placement, fleet.generation = split({"gpu-a": 3, "gpu-b": 1}, replicas=4), 3
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: b.derived is not None and phase(fleet) == "Placed"
                   and fleet.placed()["plan"]["revision"] == 3, "gpu-b a home again")
        assert rows(fleet)["gpu-b"]["appliedPlanID"] == fleet.placed()["plan"]["id"]


@pytest.mark.timeskip
async def test_a_zero_share_whose_copy_the_route_still_holds_is_drained_when_the_plan_drops_it(
        env: WorkflowEnvironment) -> None:
    """A home at a zero share whose copy waits for the route, then a plan that no longer matches it at all: it is
    drained (listed, drainRequested) and its copy still goes once the route leaves it out, never forgotten."""
    fleet = split_three_to_one()
    b = fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await placed_in_both(env, fleet)
        await publish(handle, 1, "gpu-a", "gpu-b", plan_id=fleet.placed()["plan"]["id"])
        await zero_b(handle, fleet, 2)
        await wait(env, lambda: bool(said(fleet, AWAITING)), "gpu-b's zero share held by the route")
        await drop_b(handle, fleet, 3)
        await wait(env, lambda: fleet.placed()["plan"]["revision"] == 3, "revision 3")
        assert homes(fleet) == {"gpu-a": False, "gpu-b": True}, "the copy not gone yet: drained, not forgotten"
        await env.sleep(5 * 60 + 13)  # off the 30 s poll, as above
        assert b.derived is not None and b.deletes == 0
        await publish(handle, 2, "gpu-a", plan_id=fleet.placed()["plan"]["id"])
        await wait(env, lambda: b.derived is None and homes(fleet) == {"gpu-a": False}, "gpu-b removed", step=0.5)
        assert any("gpu-b" in m for m in said(fleet, "PlacementHomeDrained"))
        assert len(said(fleet, AWAITING)) == 1


@pytest.mark.timeskip
async def test_without_any_publication_a_dropped_home_is_removed_at_once(env: WorkflowEnvironment) -> None:
    """Nothing was ever published for the service (no routing workflow, or routing off): today's behaviour."""
    fleet = both()
    b = fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await placed_in_both(env, fleet)
        await drop_b(handle, fleet, 2)
        await wait(env, lambda: b.derived is None and homes(fleet) == {"gpu-a": False}, "gpu-b removed", step=0.5)
        assert said(fleet, AWAITING) == []
        after = await state(handle)
        assert after["publication"] is None and after["awaiting_publication"] == []


@pytest.mark.timeskip
async def test_a_home_the_route_does_not_name_is_removed_at_once(env: WorkflowEnvironment) -> None:
    """A Publication that names only the homes that stay does not hold the dropped one."""
    fleet = both()
    b = fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await placed_in_both(env, fleet)
        await publish(handle, 1, "gpu-a")
        await drop_b(handle, fleet, 2)
        await wait(env, lambda: b.derived is None and homes(fleet) == {"gpu-a": False}, "gpu-b removed", step=0.5)
        assert said(fleet, AWAITING) == []


@pytest.mark.timeskip
async def test_a_deleted_source_waits_for_a_publication_that_routes_nothing(env: WorkflowEnvironment) -> None:
    fleet = both()
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await placed_in_both(env, fleet)
        await publish(handle, 1, "gpu-a", "gpu-b", plan_id=fleet.placed()["plan"]["id"])
        fleet.deleting = True
        await handle.signal(contract.Signal.DELETE, fleet.event(deleting=True))
        await wait(env, lambda: bool(said(fleet, AWAITING)), "the wait said")
        [message] = said(fleet, AWAITING)
        assert "gpu-a, gpu-b" in message
        await env.sleep(5 * 60)
        assert a.derived is not None and b.derived is not None and a.deletes == b.deletes == 0
        assert not fleet.gone and fleet.finalizers == ["servingops.io/placement"]

        # gpu-b off the route, gpu-a still on it: the withdrawal waits for the route to name neither.
        await publish(handle, 2, "gpu-a", settled=False)
        await env.sleep(60)
        assert a.derived is not None and not fleet.gone

        await publish(handle, 3)  # the route is removed: it sends nowhere
        await wait(env, lambda: fleet.gone, "the source let go", step=0.5)
        await handle.result()
        assert a.derived is None and b.derived is None and fleet.finalizers == []
        assert said(fleet, "PlacementPublicationTimeout") == [] and len(said(fleet, AWAITING)) == 1


@pytest.mark.timeskip
async def test_a_deleted_source_whose_route_never_lets_go_is_withdrawn_after_the_bound_with_a_warning(
        env: WorkflowEnvironment) -> None:
    fleet = both()
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await placed_in_both(env, fleet)
        await publish(handle, 1, "gpu-a", "gpu-b")
        fleet.deleting = True
        await handle.signal(contract.Signal.DELETE, fleet.event(deleting=True))
        await wait(env, lambda: bool(said(fleet, AWAITING)), "the wait said")
        await env.sleep((PUBLICATION_WAIT - PLACED_POLL).total_seconds())
        assert a.derived is not None and b.derived is not None and not fleet.gone
        await wait(env, lambda: fleet.gone, "withdrawn past the bound", step=10)
        await handle.result()
        assert a.derived is None and b.derived is None
        [warning] = [m for t, r, m in fleet.events() if r == "PlacementPublicationTimeout" and t == "Warning"]
        assert "gpu-a, gpu-b" in warning


@pytest.mark.timeskip
async def test_the_publication_bound_is_waited_once_not_again_at_every_retry_of_an_unreachable_member(
        env: WorkflowEnvironment) -> None:
    """Past the bound the copies go anyway; a member that could not be reached then is tried again with the
    withdrawal's backoff (5 s doubling), not after another full wait for a route that already did not answer."""
    fleet = both()
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    async with placing(env, fleet) as handle:
        await placed_in_both(env, fleet)
        await publish(handle, 1, "gpu-a", "gpu-b")
        b.reachable = False
        fleet.deleting = True
        await handle.signal(contract.Signal.DELETE, fleet.event(deleting=True))
        await wait(env, lambda: a.derived is None, "gpu-a withdrawn past the bound", step=10)
        assert b.derived is not None and not fleet.gone
        b.reachable = True
        answered = await env.get_current_time()
        await wait(env, lambda: fleet.gone, "the source let go", step=10)
        assert await env.get_current_time() - answered < PUBLICATION_WAIT / 2, (
            "the retry of the unreachable member waited for the route again")
        await handle.result()
        assert b.derived is None


@pytest.mark.timeskip
async def test_a_status_write_that_moves_the_routing_inputs_wakes_the_routing_workflow(
        env: WorkflowEnvironment) -> None:
    fleet = both()
    routing_id = contract.traffic_map_workflow_id(NAMESPACE, NAME, fleet.source_uid)
    async with recording(env, routing_id) as recorder, placing(env, fleet) as handle:
        await placed_in_both(env, fleet)

        async def told() -> int:
            return len(await seen(recorder))

        for _ in range(60):
            if await told() > 0:
                break
            await env.sleep(1)
        assert await told() > 0, "the routing workflow was never told of the status writes"
        assert set(await seen(recorder)) == {None}, "routing-changed carries no payload from placement"
        settled = await told()
        await env.sleep(5 * 60)  # ten passes that move nothing routing reads: no more notices
        assert await told() == settled

        fleet.placement, fleet.generation = split({"gpu-a": 3, "gpu-b": 1}, replicas=4), 2
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: fleet.placed()["plan"]["revision"] == 2 and phase(fleet) == "Placed", "revision 2")
        for _ in range(60):
            if await told() > settled:
                break
            await env.sleep(1)
        assert await told() > settled, "a new plan (new id, new counts) was written without telling routing"


@pytest.mark.timeskip
async def test_without_a_routing_workflow_the_notice_fails_quietly_and_placement_goes_on(
        env: WorkflowEnvironment) -> None:
    fleet = both()
    routing_id = contract.traffic_map_workflow_id(NAMESPACE, NAME, fleet.source_uid)
    async with placing(env, fleet) as handle:
        await placed_in_both(env, fleet)
        fleet.placement, fleet.generation = split({"gpu-a": 3, "gpu-b": 1}, replicas=4), 2
        await handle.signal(contract.Signal.OBJECT_CHANGED, fleet.event())
        await wait(env, lambda: fleet.placed()["plan"]["revision"] == 2 and phase(fleet) == "Placed", "revision 2")
        assert fleet.members["gpu-a"].derived is not None and fleet.members["gpu-a"].derived["floors"] == {"engine": 3}
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        history = await handle.fetch_history()
        targets = [e.signal_external_workflow_execution_initiated_event_attributes for e in history.events
                   if e.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED]
        failed = [e for e in history.events
                  if e.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED]
        assert targets, "no routing notice was sent"
        assert {t.workflow_execution.workflow_id for t in targets} == {routing_id}
        assert {t.signal_name for t in targets} == {contract.Signal.ROUTING_CHANGED.value}
        assert len(failed) == len(targets), "every notice failed: nothing runs under the routing id"
        assert not [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
