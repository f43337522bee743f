"""The progressions and groups end to end (what test_rollout_progressions and, for a refused
spec, test_rollout_events prove on the fake cluster): worker and bridge as processes, the local
cluster with kwok pods. Shown here:

- blue-green (no spec.rollout) surges the whole green revision and flips all traffic at once only
  after every green pod is Ready (kwok holds them unready until the test lets them go), then
  drains blue;
- a blue-green whose green never turns Ready fails on the ready timeout, deletes green and
  leaves blue serving all traffic;
- a rolling update keeps to maxSurge (Deployment replicas) and maxUnavailable (Ready pods)
  while both revisions serve, traffic following the Ready pods;
- sequential groups: the second group starts only after the first completed and soaked;
- concurrent canary groups of a router and an engine+decoder unit advance independently, each
  component on its own route, the unit's CanaryStatus on its entrypoint;
- a later spec that cannot be rendered (no runner, no containers) is refused once: RolloutReady
  False / InvalidSpec and a Warning Event say why, no new revision is made, and the running
  revision keeps serving.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from devstack.kube import POD_UNREADY_ANNOTATION
from servingops.api_models import contract
from servingops.rendering.render import LABEL_COMPONENT, LABEL_NAME, LABEL_REVISION
from tests.rollout_live import NEW_IMAGE, OLD_IMAGE, LiveIsvc, LiveStack, Recorder, component, live_stack

pytestmark = pytest.mark.e2e

__all__ = ["live_stack"]  # the fixture, reused


def _hash(isvc: LiveIsvc, backend: str, name: str = "engine") -> str:
    return isvc.revision(backend, name)


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def _held_pods(isvc: LiveIsvc, revision: str) -> list[str]:
    """The names of a revision's pods (by its hash), not being deleted, sorted."""
    selector = f"{LABEL_NAME}={isvc.name},{LABEL_COMPONENT}=engine,{LABEL_REVISION}={revision}"
    return sorted(p.metadata.name for p in isvc.core.list_namespaced_pod(isvc.ns, label_selector=selector).items
                  if p.metadata.deletion_timestamp is None)


def _release(isvc: LiveIsvc, pod: str) -> None:
    """Let a pod kwok holds unready turn Ready (devstack/kube.py, POD_UNREADY_ANNOTATION)."""
    isvc.core.patch_namespaced_pod(pod, isvc.ns, {"metadata": {"annotations": {POD_UNREADY_ANNOTATION: "false"}}})


def test_blue_green_flips_at_once_after_full_ready(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc(_unique("bgflip"))
    isvc.create({"engine": component(OLD_IMAGE, 3)})  # no spec.rollout: the component rolls alone, blue-green
    old = isvc.first_revision()
    blue = _hash(isvc, old)
    isvc.wait("every blue pod Ready", lambda: isvc.pods().get(blue) == (3, 3))

    with Recorder(isvc) as recorder:
        # Green's pods run but kwok holds them unready: the test decides when each turns Ready.
        isvc.set_component("engine", component(NEW_IMAGE, 3, annotations={POD_UNREADY_ANNOTATION: "true"}))
        new = isvc.wait("the whole green revision surged", lambda: next(
            (d for d, r in isvc.deployments().items() if d != old and r.replicas == 3), None))
        green = _hash(isvc, new)
        isvc.wait("three green pods running, none Ready", lambda: isvc.pods().get(green) == (3, 0))
        waiting = isvc.wait("the group waiting for green", lambda: (
            (g := isvc.coordination("engine")).get("phase") == "Waiting" and g))
        assert waiting["policy"] == "BlueGreen", waiting
        pods = _held_pods(isvc, green)
        assert len(pods) == 3, pods
        for pod in pods[:2]:
            _release(isvc, pod)
        isvc.wait("two of three green pods Ready", lambda: isvc.pods().get(green) == (3, 2))
        isvc.hold("blue keeps all traffic while green is not fully Ready",
                  lambda: isvc.serving() == {old: 100} and isvc.coordination("engine").get("phase") == "Waiting", 10)
        _release(isvc, pods[2])
        isvc.rolled_out(new)
        isvc.wait("blue drained", lambda: old not in isvc.deployments())
        isvc.wait("the group idle", lambda: isvc.coordination("engine").get("phase") == "Idle")

    # Only two programs of the route ever: all on blue, then all on green, and green carried
    # traffic only in samples where all three of its pods were Ready.
    assert recorder.distinct_routes() == [{old: 100}, {new: 100}], recorder.distinct_routes()
    for sample in recorder.samples:
        if sample.weights.get(new, 0) > 0:
            assert sample.pods.get(green) == (3, 3), sample
    assert any(s.pods.get(green) == (3, 2) and s.weights.get(old) == 100 for s in recorder.samples), \
        "never sampled green partly Ready while blue served"
    shifted = [e.message for e in isvc.events("TrafficShifted") if green in e.message]
    assert shifted == [f"engine traffic: {green} 100% (was {blue} 100%)"], shifted
    engine = isvc.rolled_out(new)
    assert engine["previousRolledoutRevision"] == old
    assert "rolloutPhase" not in engine and "canary" not in engine, "blue-green reports coordination"
    assert isvc.coordination("engine")["policy"] == "BlueGreen"
    assert list(isvc.deployments()) == [new]


def test_blue_green_never_ready_keeps_old_serving(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc(_unique("bgstuck"))
    # A short ready timeout (ome.io/rollout-ready-timeout) so the run gives up within the test.
    isvc.create({"engine": component(OLD_IMAGE)}, annotations={contract.ROLLOUT_READY_TIMEOUT: "20s"})
    old = isvc.first_revision()
    blue = _hash(isvc, old)

    with Recorder(isvc) as recorder:
        isvc.set_component("engine", component(NEW_IMAGE, annotations={POD_UNREADY_ANNOTATION: "true"}))
        new = isvc.wait("the green revision", lambda: next((d for d in isvc.deployments() if d != old), None))
        green = _hash(isvc, new)
        isvc.wait("green pods running, not Ready", lambda: isvc.pods().get(green) == (2, 0))
        failed = isvc.wait("the group failed on the ready timeout", lambda: (
            (g := isvc.coordination("engine")).get("phase") == "Failed" and g))
        isvc.wait("the green revision deleted", lambda: new not in isvc.deployments()
                  and green not in isvc.pods())

    assert "not Ready within the ready timeout" in str(failed.get("message")), failed
    assert failed["policy"] == "BlueGreen", failed
    assert all({b: w for b, w in s.weights.items() if w > 0} == {old: 100} for s in recorder.samples), \
        [s.weights for s in recorder.samples if s.weights.get(new)]
    assert any(s.pods.get(green) for s in recorder.samples), "never sampled a green pod"
    assert isvc.serving() == {old: 100}
    assert list(isvc.deployments()) == [old] and isvc.pods().get(blue) == (2, 2)
    assert isvc.condition("Ready")["status"] == "True", isvc.condition("Ready")
    assert isvc.component()["latestRolledoutRevision"] == old
    assert not [e for e in isvc.events("TrafficShifted") if green in e.message]


@pytest.mark.parametrize(("surge", "unavailable", "replicas"), [(1, 0, 4), (0, 1, 3)])
def test_rolling_update_keeps_its_surge_and_unavailable_budget(live_stack: LiveStack, surge: int, unavailable: int,
                                                               replicas: int) -> None:
    isvc = live_stack.isvc(f"rolling-{surge}-{unavailable}")
    rollout = {"groups": [{"components": ["engine"],
                           "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}]}
    isvc.create({"engine": component(OLD_IMAGE, replicas), "rollout": rollout})
    old = isvc.first_revision()
    isvc.wait("every first-revision pod Ready", lambda: isvc.pods().get(_hash(isvc, old)) == (replicas, replicas))

    with Recorder(isvc) as recorder:
        isvc.set_component("engine", component(NEW_IMAGE, replicas))
        new = isvc.wait("a second revision", lambda: next((d for d in isvc.deployments() if d != old), None))
        isvc.wait("the rolling run closed", lambda: isvc.coordination("0").get("phase") == "Idle"
                  and isvc.serving() == {new: 100})
        isvc.wait("the old revision removed", lambda: old not in isvc.deployments())

    # The budget, at every sample: what the workflow asked for never exceeds desired + maxSurge,
    # and the Ready pods (not being deleted) never fall below desired - maxUnavailable.
    assert len(recorder.samples) > 10
    for sample in recorder.samples:
        assert sum(r.replicas for r in sample.replicas.values()) <= replicas + surge, sample
        assert sum(ready for _, ready in sample.pods.values()) >= replicas - unavailable, sample
        assert set(sample.weights) <= {old, new}, sample
        if sample.weights:
            assert sum(sample.weights.values()) == 100, sample
    assert any(len(s.pods) == 2 and all(ready for _, ready in s.pods.values()) for s in recorder.samples), \
        "never saw Ready pods of both revisions at once"
    # Traffic follows the Ready pods: the new revision's share only grows, through a split.
    shares = [route.get(new, 0) for route in recorder.distinct_routes()]
    assert shares == sorted(shares) and shares[-1] == 100, recorder.distinct_routes()
    shifted = [e.message for e in isvc.events("TrafficShifted")]
    split = [m for m in shifted if f"{_hash(isvc, old)} " in m.split("(was")[0] and f"{_hash(isvc, new)} " in m]
    assert split, f"no TrafficShifted Event with both revisions serving: {shifted}"

    group = isvc.coordination("0")
    assert group["policy"] == "RollingUpdate" and group["observedSurge"] == surge
    assert isvc.deployments() == {new: isvc.deployments()[new]} and isvc.deployments()[new].ready == replicas
    assert isvc.rolled_out(new)["previousRolledoutRevision"] == old
    assert isvc.status()["rollout"]["lastRun"]["outcome"] == "Completed"
    [completed] = isvc.events("Completed")
    assert completed.message == f"group 0: all traffic on engine {_hash(isvc, new)}"


def test_sequential_groups_wait_for_the_previous_group_and_its_soak(live_stack: LiveStack) -> None:
    soak = 10
    isvc = live_stack.isvc("sequenced")
    rollout = {"groups": [{"components": ["engine"], "soak": f"{soak}s"}, {"components": ["decoder"]}]}
    isvc.create({"engine": component(OLD_IMAGE), "decoder": component(OLD_IMAGE), "rollout": rollout})
    old_engine, old_decoder = isvc.first_revision("engine"), isvc.first_revision("decoder")

    # One edit changes both components: group 0 (engine) goes first, blue-green by default.
    isvc.patch({"spec": {"engine": component(NEW_IMAGE), "decoder": component(NEW_IMAGE)}})
    new_engine = isvc.wait("the engine flipped", lambda: next(
        (b for b, w in isvc.serving("engine").items() if b != old_engine and w == 100), None))
    assert list(isvc.deployments("decoder")) == [old_decoder], "group 1 started before group 0 completed"
    assert isvc.serving("decoder") == {old_decoder: 100}
    engine_done = isvc.wait("group 0 closed", lambda: (g := isvc.coordination("0")).get("phase") == "Idle" and g)
    closed_at = _time(engine_done["lastTransitionTime"])
    isvc.hold("group 1 waiting out group 0's soak", lambda: list(isvc.deployments("decoder")) == [old_decoder],
              soak / 2)

    new_decoder = isvc.wait("group 1's new revision", lambda: next(
        (d for d in isvc.deployments("decoder") if d != old_decoder), None))
    created = isvc.apps.read_namespaced_deployment(new_decoder, isvc.ns).metadata.creation_timestamp
    # creationTimestamp has whole seconds: allow the truncation, nothing more.
    assert created - closed_at >= timedelta(seconds=soak - 1), (closed_at, created)
    isvc.rolled_out(new_decoder, "decoder")
    assert isvc.rolled_out(new_engine, "engine")["previousRolledoutRevision"] == old_engine
    assert isvc.coordination("1").get("phase") == "Idle"
    assert {e.message for e in isvc.events("Completed")} == {
        f"group 0: all traffic on engine {_hash(isvc, new_engine)}",
        f"group 1: all traffic on decoder {_hash(isvc, new_decoder, 'decoder')}"}


def _canary_group(components: list[str]) -> dict[str, Any]:
    steps = [{"capacity": "50%", "traffic": 30, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    return {"components": components, "canary": {"steps": steps, "scaleDownDelaySeconds": 1}}


def test_concurrent_router_and_engine_decoder_canaries(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc("pd")
    rollout = {"groupOrdering": "Concurrent", "groups": [_canary_group(["router"]),
                                                         _canary_group(["engine", "decoder"])]}
    names = ("router", "engine", "decoder")
    isvc.create({"router": component(OLD_IMAGE), "engine": component(OLD_IMAGE), "decoder": component(OLD_IMAGE),
                 "rollout": rollout})
    old = {name: isvc.first_revision(name) for name in names}
    # Each component is served on a route of its own; the router is the InferenceService's entrypoint.
    status = isvc.wait("Ready, with the entrypoint's URL", lambda: (
        (s := isvc.status()).get("url") and isvc.condition("Ready").get("status") == "True" and s))
    assert status["url"] == isvc.component("router")["url"] != isvc.component("engine")["url"]
    for kind in ("RouterReady", "EngineReady", "DecoderReady", "Ready"):
        assert isvc.condition(kind)["status"] == "True", kind
    assert all(isvc.services(name) == {old[name]} for name in names)

    isvc.patch({"spec": {name: component(NEW_IMAGE) for name in names}})
    new = {name: isvc.canary_at(old[name], 30, name) for name in names}
    # Both units run at once, each its own run.
    active = isvc.status()["rollout"]["activeRun"]
    assert len(active["runID"].split(",")) == 2
    assert {(t["component"], t["revision"]) for t in active["targetRevisions"]} == {
        (name, _hash(isvc, new[name], name)) for name in names}
    router, engine = isvc.canary("router"), isvc.canary("engine")
    assert router["canaryRevisionHash"] == _hash(isvc, new["router"], "router")
    assert engine["canaryRevisionHash"] == _hash(isvc, new["engine"])
    assert "canary" not in isvc.component("decoder"), "the engine carries its unit's CanaryStatus"
    assert isvc.status()["canary"] == isvc.canary("router"), "status.canary mirrors the entrypoint's unit"
    isvc.wait("both units paused at step 0", lambda: isvc.phase("router") == "Paused" == isvc.phase("engine"))

    # Promoting the engine's hash moves only the engine+decoder unit.
    isvc.annotate("ome.io/rollout-promote", engine["canaryRevisionHash"])
    isvc.rolled_out(new["engine"], "engine")
    isvc.rolled_out(new["decoder"], "decoder")
    assert isvc.serving("router") == {old["router"]: 70, new["router"]: 30}
    assert isvc.canary("router")["currentStep"] == 0 and isvc.phase("router") == "Paused"
    isvc.wait("the old engine drained", lambda: old["engine"] not in isvc.deployments("engine"))

    isvc.annotate("ome.io/rollout-promote", router["canaryRevisionHash"])
    assert isvc.rolled_out(new["router"], "router")["previousRolledoutRevision"] == old["router"]
    isvc.wait("the old router drained", lambda: list(isvc.deployments("router")) == [new["router"]])
    promoted = [e.message for e in isvc.events("StepPromoted")]
    for name in ("router", "engine"):
        revision = _hash(isvc, new[name], name)
        assert f"canary {revision}: step 0 promoted by promote; on to step 1 of 2" in promoted, promoted


def test_refused_new_revision_parks_the_group_while_stable_serves(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc(_unique("refused"))
    isvc.create({"engine": component(OLD_IMAGE)})
    old = isvc.first_revision()

    # A component with no runner and no containers: nothing to render pods from.
    isvc.set_component("engine", {"minReplicas": 2})
    parked = isvc.wait("RolloutReady False / InvalidSpec", lambda: (
        (c := isvc.condition("RolloutReady")).get("reason") == "InvalidSpec" and c))
    assert parked["status"] == "False", parked
    assert "spec.engine has no runner and no containers" in parked["message"], parked
    warnings = isvc.wait("a Warning InvalidSpec Event", lambda: isvc.events("InvalidSpec"))
    assert len(warnings) == 1 and warnings[0].type == "Warning", [(e.type, e.message) for e in warnings]
    assert "spec.engine has no runner and no containers" in warnings[0].message, warnings[0].message
    assert isvc.condition("Ready")["status"] == "True", isvc.condition("Ready")
    assert isvc.serving() == {old: 100} and list(isvc.deployments()) == [old]

    # Parked, not retried: no new revision and the refusal stands while the stable revision serves.
    isvc.hold("the stable revision serving alone, the group parked", lambda: (
        isvc.serving() == {old: 100} and list(isvc.deployments()) == [old]
        and isvc.pods().get(_hash(isvc, old)) == (2, 2)
        and isvc.condition("RolloutReady").get("reason") == "InvalidSpec"), 15)
    again = isvc.events("InvalidSpec")
    assert len(again) == 1 and (again[0].count or 1) == 1, [(e.message, e.count) for e in again]
    assert isvc.component()["latestRolledoutRevision"] == old
