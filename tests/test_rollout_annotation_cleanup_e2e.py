"""Consumed rollout annotations are removed from the InferenceService, end to end (seed 004): the
worker and the bridge as processes, kwok pods. A promote is removed once its step advance is on
status, which re-arms promotion (the same value promotes the next step); a rollback refused for
a missing stable revision is removed too. What the time-skipping tests prove on the fake cluster
(test_rollout_annotation_cleanup.py), here through the apiserver and the bridge.

Uses tests/rollout_live.py (the `live_stack` fixture, LiveIsvc).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.rollout_live import NEW_IMAGE, OLD_IMAGE, LiveIsvc, LiveStack, canary, component, live_stack

pytestmark = pytest.mark.e2e

__all__ = ["live_stack"]  # the fixture, reused

PROMOTE = "ome.io/rollout-promote"
ROLLBACK = "ome.io/rollout-rollback"


def annotations(isvc: LiveIsvc) -> dict[str, str]:
    return dict(((isvc.get() or {}).get("metadata") or {}).get("annotations") or {})


def paused_at(isvc: LiveIsvc, step: int) -> dict[str, Any]:
    return isvc.wait(f"the canary paused at step {step}", lambda: (
        (c := isvc.canary()).get("currentStep") == step and isvc.phase() == "Paused" and c))


def test_a_consumed_promote_is_removed_and_the_same_value_promotes_again(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc("promote-cleanup")
    steps = [{"capacity": "50%", "traffic": 20, "pause": {}}, {"capacity": "50%", "traffic": 50, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    isvc.create({"engine": component(OLD_IMAGE), "rollout": canary(steps)})
    stable = isvc.first_revision()
    isvc.set_component("engine", component(NEW_IMAGE))
    new = isvc.canary_at(stable, 20)
    revision = paused_at(isvc, 0)["canaryRevisionHash"]

    isvc.annotate(PROMOTE, revision)
    isvc.wait("the consumed promote removed from the object", lambda: PROMOTE not in annotations(isvc))
    step = paused_at(isvc, 1)
    assert isvc.serving() == {stable: 50, new: 50}
    isvc.wait("promotedThrough cleared once the removal was seen", lambda: "promotedThrough" not in isvc.canary())
    assert step["currentStep"] == 1, "the removal promoted nothing"
    # The same value again is a new request for the next step, and it is removed in turn.
    isvc.annotate(PROMOTE, revision)
    isvc.rolled_out(new)
    isvc.wait("the second promote removed", lambda: PROMOTE not in annotations(isvc))


def test_a_refused_rollback_is_removed(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc("rollback-cleanup")
    steps = [{"capacity": "50%", "traffic": 20, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    isvc.create({"engine": component(OLD_IMAGE), "rollout": canary(steps)})
    stable = isvc.first_revision()
    isvc.set_component("engine", component(NEW_IMAGE))
    new = isvc.canary_at(stable, 20)
    paused_at(isvc, 0)
    # Someone deletes the stable revision's Deployment: a rollback has nothing to return to.
    client.AppsV1Api(live_stack.api).delete_namespaced_deployment(stable, live_stack.namespace)
    isvc.wait("the stable Deployment gone", lambda: stable not in isvc.deployments())
    isvc.annotate(ROLLBACK, "true")
    failed = isvc.wait("parked StableRevisionMissing", lambda: (isvc.canary().get("failed") or {}).get("reason")
                       == "StableRevisionMissing" and isvc.canary()["failed"])
    assert failed["reason"] == "StableRevisionMissing"
    isvc.wait("the refused rollback removed from the object", lambda: ROLLBACK not in annotations(isvc))
    assert isvc.phase() == "Failed" and isvc.serving().get(new) == 20
