"""Driving a canary end to end (what test_rollout_workflows proves on the fake cluster): the
`ome.io/rollout-*` annotations through the bridge, the SDK's rollback update, and a new target
mid-canary, with the worker and the bridge as processes and kwok pods.

What is asserted is what an operator sees: the HTTPRoute weights, the revisions' Deployments,
status.components.engine.canary / rolloutPhase, status.rollout, and the Events.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from servingops.api_models import contract
from servingops.api_models.ome.rollout_status import CanaryStatus
from servingops.runtime.temporal import TemporalSettings, connect
from servingops.sdk import RolloutClient
from servingops.sdk.rollouts import NoActiveCanaryError
from tests.rollout_live import NEW_IMAGE, OLD_IMAGE, LiveIsvc, LiveStack, Recorder, canary, component, live_stack
from tests.support.histories import local_activity_types

pytestmark = pytest.mark.e2e

__all__ = ["live_stack"]  # the fixture, reused

ROLLBACK = "ome.io/rollout-rollback"
RESUME = "ome.io/rollout-resume"
PAUSED = "ome.io/rollout-paused"
PROMOTE = "ome.io/rollout-promote"
PROMOTE_FORCE = "ome.io/rollout-promote-force"
QUIET = 4.0
"""How long a test watches for something that must not happen (the worker acts within a second)."""


def _start(isvc: LiveIsvc, steps: list[dict[str, Any]], annotations: dict[str, str] | None = None,
           weight: int | None = None) -> tuple[str, str]:
    """Create the InferenceService serving OLD_IMAGE, then roll to NEW_IMAGE; answer (stable,
    canary) backends once the canary carries `weight` (the first step's; a step without a gate
    passes too quickly to be seen)."""
    isvc.create({"engine": component(OLD_IMAGE), "rollout": canary(steps)}, annotations)
    stable = isvc.first_revision()
    isvc.set_component("engine", component(NEW_IMAGE))
    return stable, isvc.canary_at(stable, steps[0]["traffic"] if weight is None else weight)


def _paused_at(isvc: LiveIsvc, step: int) -> dict[str, Any]:
    return isvc.wait(f"the canary paused at step {step}", lambda: (
        (c := isvc.canary()).get("currentStep") == step and isvc.phase() == "Paused" and c))


def _annotation_seen(isvc: LiveIsvc, key: str, value: str | None) -> None:
    """Wait until the InferenceService workflow acted on the annotation's latest value (the
    bridge sends only the latest: a value set and changed back before it looked is never seen)."""
    isvc.wait(f"{key}={value} seen by the workflow", lambda: isvc.service_state().annotations.get(key) == value)


def _promoted_to_step_one(isvc: LiveIsvc) -> tuple[str, str, str]:
    """A canary of two manual steps (20 %, 50 %) promoted once by the annotation: (stable backend,
    canary backend, canary revision hash) once it waits at step 1. promotedThrough clears as soon as
    the workflow removes the consumed promote."""
    steps = [{"capacity": "50%", "traffic": 20, "pause": {}}, {"capacity": "50%", "traffic": 50, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    stable, canary_backend = _start(isvc, steps)
    revision = _paused_at(isvc, 0)["canaryRevisionHash"]
    isvc.annotate(PROMOTE, revision)
    _paused_at(isvc, 1)
    return stable, canary_backend, revision


async def _run_local_activities(isvc: LiveIsvc, group: str) -> list[str]:
    """The activity types of the rollout run's local activities, in history order."""
    temporal = await connect(TemporalSettings(address=isvc.stack.temporal_address))
    return await local_activity_types(
        temporal.get_workflow_handle(contract.rollout_workflow_id(isvc.ns, isvc.name, isvc.uid(), group)))


async def _run_annotation_signals(isvc: LiveIsvc, group: str) -> list[tuple[dict[str, Any], str]]:
    """The `run-annotation` changes in the rollout run's history: (the event, who sent it): the signals
    with the workflow that sent them (the service's forward), and the accepted updates as "update" (the
    bridge's shortcut; rejected ones leave nothing)."""
    temporal = await connect(TemporalSettings(address=isvc.stack.temporal_address))
    run = temporal.get_workflow_handle(contract.rollout_workflow_id(isvc.ns, isvc.name, isvc.uid(), group))
    found = []
    async for event in run.fetch_history_events():
        if event.HasField("workflow_execution_signaled_event_attributes"):
            signaled = event.workflow_execution_signaled_event_attributes
            if signaled.signal_name == contract.Signal.RUN_ANNOTATION:
                sender = signaled.external_workflow_execution.workflow_id
                found.append((json.loads(signaled.input.payloads[0].data), sender))
        elif event.HasField("workflow_execution_update_accepted_event_attributes"):
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request.input
            if request.name == contract.Update.RUN_ANNOTATION:
                found.append((json.loads(request.args.payloads[0].data), "update"))
    return found


def test_a_promote_reaches_the_run_by_both_paths_and_advances_one_step(live_stack: LiveStack) -> None:
    """The bridge sends the promote straight to the rollout run (an update) and the InferenceService
    workflow forwards it too (a signal: the path that cannot be lost): the run's history holds the one
    change twice, from the bridge and from the service, and the canary advanced one step, not two. (When
    the service's copy lands first the bridge's update is rejected and leaves nothing; on this idle
    stack the bridge's comes first.)"""
    isvc = live_stack.isvc("shortcut")
    stable, canary_backend, revision = _promoted_to_step_one(isvc)
    isvc.wait("the consumed promote removed and promotion re-armed",
              lambda: "promotedThrough" not in isvc.canary() and PROMOTE not in (isvc.get() or {})["metadata"].get(
                  "annotations", {}))
    time.sleep(QUIET)
    assert isvc.canary()["currentStep"] == 1 and isvc.serving() == {stable: 50, canary_backend: 50}
    promotes = [(event, sender) for event, sender in asyncio.run(_run_annotation_signals(isvc, "0"))
                if event["name"] == PROMOTE and event["value"] == revision]
    service = contract.inference_service_workflow_id(isvc.ns, isvc.name, isvc.uid())
    assert sorted(sender for _, sender in promotes) == sorted([service, "update"]), promotes
    assert len({event["resource_version"] for event, _ in promotes}) == 1, promotes
    # Steps 0 and 1 have the same capacity: the promote's weights were written by the call that found
    # it Ready (patch scale-then-route), no set_traffic after it. Step 0's weights waited for its pods.
    calls = asyncio.run(_run_local_activities(isvc, "0"))
    last_route = len(calls) - 1 - calls[::-1].index("serving.set_traffic")
    assert calls[last_route + 1:] == ["serving.scale_then_route"], calls


def test_rollback_holds_the_target_until_resume_reenters_at_step_zero(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc("rollback")
    stable, canary_backend, revision = _promoted_to_step_one(isvc)
    assert isvc.serving() == {stable: 50, canary_backend: 50}
    isvc.annotate(PROMOTE, None)  # removed: promotion re-armed, and nothing lingers for a later run
    isvc.wait("promotedThrough cleared", lambda: "promotedThrough" not in isvc.canary())

    isvc.annotate(ROLLBACK, "yes")  # only "true" asks for a rollback (upstream OME's contract)
    _annotation_seen(isvc, ROLLBACK, "yes")
    isvc.hold("the canary ignoring rollback=yes", lambda: isvc.serving() == {stable: 50, canary_backend: 50}, QUIET)

    isvc.annotate(ROLLBACK, "true")
    isvc.wait("traffic back on stable", lambda: isvc.serving() == {stable: 100})
    engine = isvc.wait("RolledBack", lambda: (e := isvc.component()).get("rolloutPhase") == "RolledBack" and e)
    assert engine["canary"]["rolledBackRevisionHash"] == revision
    assert engine["canary"]["observedTrafficWeight"] == 0 and engine["canary"]["currentStep"] == 1
    assert engine["latestRolledoutRevision"] == stable
    isvc.wait("the canary revision drained", lambda: list(isvc.deployments()) == [stable])
    assert isvc.wait("the run recorded", lambda: isvc.status()["rollout"].get("lastRun"))["outcome"] == "RolledBack"
    [event] = isvc.wait("a RolledBack Event", lambda: isvc.events("RolledBack"))
    assert event.type == "Normal" and event.message == \
        f"group 0: rolled back from engine {revision}; all traffic on engine {isvc.revision(stable)}"

    # Clearing the annotation does not retry the rejected target.
    isvc.annotate(ROLLBACK, None)
    _annotation_seen(isvc, ROLLBACK, None)
    isvc.hold("the rejected target held", lambda: list(isvc.deployments()) == [stable]
              and isvc.serving() == {stable: 100}, QUIET)

    # ome.io/rollout-resume=<the rejected hash> re-enters it at step 0.
    isvc.annotate(RESUME, revision)
    resumed = _paused_at(isvc, 0)
    assert resumed["canaryRevisionHash"] == revision and "rolledBackRevisionHash" not in resumed
    assert isvc.serving() == {stable: 80, canary_backend: 20}
    assert isvc.deployments()[canary_backend].ready == 1


def test_paused_annotation_holds_a_timed_step_until_removed(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc("paused")
    steps = [{"capacity": "50%", "traffic": 20, "pause": {"duration": "2s"}}, {"capacity": "100%", "traffic": 100}]
    stable, canary_backend = _start(isvc, steps, annotations={PAUSED: "true"})
    _paused_at(isvc, 0)
    assert isvc.rollout_state("0").gate == "paused"
    # Twice the step's pause: the timed gate does not run while paused.
    isvc.hold("the paused step", lambda: isvc.serving() == {stable: 80, canary_backend: 20}
              and isvc.canary().get("currentStep") == 0, QUIET)
    isvc.annotate(PAUSED, None)
    isvc.rolled_out(canary_backend)
    assert isvc.canary()["currentStep"] == len(steps) and isvc.phase() == "Stable"


def test_promote_force_skips_one_gate_per_value(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc("forced")
    steps = [{"capacity": "50%", "traffic": 20, "pause": {"duration": "1h"}},
             {"capacity": "50%", "traffic": 40, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    stable, canary_backend = _start(isvc, steps)
    revision = isvc.wait("step 0 baking", lambda: (c := isvc.canary()).get("currentStep") == 0
                         and isvc.phase() == "Canarying" and c["canaryRevisionHash"])
    isvc.annotate(PROMOTE_FORCE, "not-the-canary")
    _annotation_seen(isvc, PROMOTE_FORCE, "not-the-canary")
    isvc.hold("a force naming another revision ignored", lambda: isvc.canary().get("currentStep") == 0, QUIET)

    isvc.annotate(PROMOTE_FORCE, revision)  # skips the hour-long timed gate
    _paused_at(isvc, 1)
    assert isvc.serving() == {stable: 60, canary_backend: 40}
    isvc.hold("the lingering force inert at the manual step", lambda: isvc.canary().get("currentStep") == 1, QUIET)
    assert "promotedThrough" not in isvc.canary(), "a force is not a promote"

    isvc.annotate(PROMOTE_FORCE, None)
    _annotation_seen(isvc, PROMOTE_FORCE, None)
    isvc.annotate(PROMOTE_FORCE, revision)  # set again: one more step
    isvc.rolled_out(canary_backend)
    promoted = [e.message for e in isvc.events("StepPromoted")]
    assert promoted == [f"canary {revision}: step 0 promoted; on to step 1 of 3",
                        f"canary {revision}: step 1 promoted; on to step 2 of 3",
                        f"canary {revision}: step 2 promoted; on to completion"], promoted


def test_sdk_rollback_answers_with_traffic_back_on_stable(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc("sdk-rollback")
    steps = [{"capacity": "50%", "traffic": 25, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    stable, canary_backend = _start(isvc, steps)
    revision = _paused_at(isvc, 0)["canaryRevisionHash"]

    async def rollback() -> tuple[CanaryStatus, dict[str, int]]:
        temporal = await connect(TemporalSettings(address=isvc.stack.temporal_address))
        answer = await RolloutClient(temporal, isvc.stack.api).rollback(isvc.ns, isvc.name)
        return answer, isvc.serving()  # read the route the moment the update answered

    answer, route = asyncio.run(rollback())
    assert answer.rolled_back_revision_hash == revision and answer.observed_traffic_weight == 0
    assert route == {stable: 100}, "the update answered before traffic was back on stable"
    isvc.wait("RolledBack", lambda: isvc.phase() == "RolledBack")
    isvc.wait("the canary revision drained", lambda: list(isvc.deployments()) == [stable])
    assert isvc.wait("a RolledBack Event", lambda: isvc.events("RolledBack"))
    assert isvc.component()["latestRolledoutRevision"] == stable

    async def again() -> None:
        temporal = await connect(TemporalSettings(address=isvc.stack.temporal_address))
        await RolloutClient(temporal, isvc.stack.api).rollback(isvc.ns, isvc.name)

    with pytest.raises(NoActiveCanaryError):
        asyncio.run(again())
    assert canary_backend not in isvc.weights()


def test_new_image_while_step_one_waits_rearms_and_keeps_the_original_stable(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc("retarget")
    steps = [{"capacity": "50%", "traffic": 10}, {"capacity": "50%", "traffic": 40, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    stable, intermediate = _start(isvc, steps, weight=40)
    before = _paused_at(isvc, 1)
    first_run = isvc.status()["rollout"]["activeRun"]["runID"]

    with Recorder(isvc) as recorder:
        isvc.set_component("engine", component("vllm/vllm-openai:v0.11"))
        latest = isvc.wait("a third revision", lambda: next(
            (d for d in isvc.deployments() if d not in (stable, intermediate)), None))
        isvc.wait("re-armed", lambda: isvc.canary().get("canaryRevisionHash") == isvc.revision(latest))
        after = _paused_at(isvc, 1)
        isvc.wait("the intermediate revision drained", lambda: intermediate not in isvc.deployments())
    assert isvc.serving() == {stable: 60, latest: 40}
    assert after["stableRevisionHash"] == before["stableRevisionHash"], "the rollback target stays the original"
    assert after["targetID"] != before["targetID"]
    # The intermediate's traffic went back to stable, then the new target started from step 0,
    # and the intermediate never carried traffic again.
    a, b, c = (isvc.revision(x) for x in (stable, intermediate, latest))
    shifted = [e.message for e in isvc.events("TrafficShifted")]
    assert f"engine traffic: {a} 100% (was {a} 60% / {b} 40%)" in shifted, shifted
    assert f"engine traffic: {a} 90% / {c} 10% (was {a} 100%)" in shifted, shifted
    routes = recorder.distinct_routes()
    first = next(i for i, r in enumerate(routes) if latest in r)
    assert not any(intermediate in r for r in routes[first:]), routes
    rollout = isvc.status()["rollout"]
    assert rollout["lastRun"]["outcome"] == "Superseded" and rollout["activeRun"]["runID"] != first_run
    assert rollout["activeRun"]["targetRevisions"] == [{
        "component": "engine", "revision": after["canaryRevisionHash"],
        "stableRevision": before["stableRevisionHash"]}]

    isvc.annotate(PROMOTE, after["canaryRevisionHash"])
    engine = isvc.rolled_out(latest)
    assert engine["previousRolledoutRevision"] == stable
