"""A rollout's life beyond the happy path, end to end (what the fake cluster proved so far):
worker and bridge as processes, kwok pods, the session's Temporal and Prometheus.

- a policyRef that does not resolve parks the group (PolicyNotFound, then ProgressionMismatch),
  stable serving, a Warning Event each; the periodic re-resolve and a spec fix release it;
- a revision whose pods never turn Ready parks the canary CapacityTimeout after the
  ome.io/rollout-ready-timeout annotation's timeout; a new target releases it;
- deleting the InferenceService mid-canary ends its workflows and leaves nothing behind;
- a canary baking long enough to cross the production history budget continues as new with its
  state and completes.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.client import WorkflowExecutionStatus

from devstack.kube import POD_UNREADY_ANNOTATION
from devstack.services import Prometheus
from servingops.api_models import contract
from servingops.api_models.ome.rollout_policy import RolloutPolicy
from servingops.rendering.render import LABEL_REVISION
from servingops.runtime.temporal import TemporalSettings, connect
from servingops.workflows.rollout.models import RolloutSettings
from tests.crd_helpers import create, manifest
from tests.metrics_exporter import Exporter
from tests.rollout_live import NEW_IMAGE, OLD_IMAGE, LiveStack, canary, component, live_stack

pytestmark = pytest.mark.e2e

__all__ = ["live_stack"]  # the fixture, reused

STEPS = [{"capacity": "50%", "traffic": 30, "pause": {}}, {"capacity": "100%", "traffic": 100}]


def test_policy_ref_parks_until_the_policy_resolves(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc("by-policy")
    ref = {"name": "steady", "progression": "blueGreen"}
    isvc.create({"engine": component(OLD_IMAGE), "rollout": {"groups": [{"components": ["engine"], "policyRef": ref}]}})
    stable = isvc.first_revision()  # the first revision is served whatever the plan
    isvc.set_component("engine", component(NEW_IMAGE))

    parked = isvc.wait("RolloutReady False / PolicyNotFound", lambda: (
        (c := isvc.condition("RolloutReady")).get("reason") == "PolicyNotFound" and c))
    assert parked["status"] == "False" and "steady" in parked["message"]
    [warning] = isvc.wait("a PolicyNotFound Warning", lambda: isvc.events("PolicyNotFound"))
    assert warning.type == "Warning" and warning.message.startswith("group 0: ")
    assert isvc.condition("Ready")["status"] == "True" and isvc.serving() == {stable: 100}
    assert list(isvc.deployments()) == [stable] and "activeRun" not in isvc.status()["rollout"]
    assert isvc.service_state().parked["0"].startswith("PolicyNotFound:")

    # A policy appears, of another progression than the reference declares: re-resolved within a
    # minute (nothing about the InferenceService changed), still parked, for the new reason.
    create(live_stack.api, RolloutPolicy, manifest(RolloutPolicy, {"canary": {"steps": STEPS}}, name="steady"),
           live_stack.namespace)
    isvc.wait("RolloutReady False / ProgressionMismatch",
              lambda: isvc.condition("RolloutReady").get("reason") == "ProgressionMismatch", timeout=150)
    [mismatch] = isvc.wait("a ProgressionMismatch Warning", lambda: isvc.events("ProgressionMismatch"))
    assert mismatch.type == "Warning"
    assert list(isvc.deployments()) == [stable] and isvc.serving() == {stable: 100}
    assert len(isvc.events("PolicyNotFound")) == 1 and isvc.events("PolicyNotFound")[0].count == 1, \
        "a park is said once, not once a minute"

    # The reference is fixed: the run opens at once with the policy's canary.
    isvc.patch({"spec": {"rollout": {"groups": [{"components": ["engine"],
                                                 "policyRef": {**ref, "progression": "canary"}}]}}})
    canary_backend = isvc.canary_at(stable, 30)
    ready = isvc.wait("RolloutReady True", lambda: (c := isvc.condition("RolloutReady")).get("status") == "True"
                      and c)
    assert ready["reason"] == "RolloutPlanResolved"
    policy = client.CustomObjectsApi(live_stack.api).get_namespaced_custom_object(
        "ome.io", "v1beta1", isvc.ns, "rolloutpolicies", "steady")
    rollout = isvc.status()["rollout"]
    [pinned] = rollout["activeRun"]["plan"]["groups"]
    assert pinned["source"] == "Policy" and pinned["policyRef"]["name"] == "steady"
    assert pinned["policyGeneration"] == policy["metadata"]["generation"]
    assert pinned["portableDigest"] == policy["status"]["portableDigest"] == rollout["groups"][0]["observedDigest"]
    assert pinned["group"]["canary"]["steps"][0]["traffic"] == 30

    isvc.annotate("ome.io/rollout-promote", isvc.canary()["canaryRevisionHash"])
    isvc.rolled_out(canary_backend)
    last = isvc.wait("the run recorded", lambda: (r := isvc.status()["rollout"].get("lastRun")) and r)
    assert last["outcome"] == "Completed" and last["groups"][0]["source"] == "Policy"


def test_pods_that_never_turn_ready_park_the_canary_until_a_new_target(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc("never-ready")
    # The group allows ten minutes; the annotation overrides it (the seed's precedence).
    isvc.create({"engine": component(OLD_IMAGE), "rollout": canary(STEPS, readyTimeout="10m")},
                annotations={"ome.io/rollout-ready-timeout": "6s"})
    stable = isvc.first_revision()
    # kwok runs this revision's pods without ever reporting them Ready (a failing readiness probe).
    isvc.set_component("engine", component(NEW_IMAGE, annotations={POD_UNREADY_ANNOTATION: "true"}))
    unready = isvc.wait("the new revision's pod running, not Ready", lambda: next(
        (d for d in isvc.deployments() if d != stable and isvc.pods().get(isvc.revision(d)) == (1, 0)), None))
    waiting = isvc.wait("the capacity wait recorded", lambda: (c := isvc.canary()).get("capacityWaitSince") and c)
    assert waiting["currentStep"] == 0 and not waiting.get("failed")

    engine = isvc.wait("parked CapacityTimeout", lambda: (e := isvc.component()).get("canary", {}).get("failed")
                       and e)
    status = engine["canary"]
    assert status["failed"]["reason"] == "CapacityTimeout" and engine["rolloutPhase"] == "Failed"
    assert status["currentStep"] == 0 and status["observedTrafficWeight"] == 0
    assert isvc.backend(status["canaryRevisionHash"]) == unready
    elapsed = _time(status["failed"]["time"]) - _time(status["capacityWaitSince"])
    assert 5 <= elapsed.total_seconds() < 600, "the annotation's 6s timeout, not the group's 10m"
    # Stable keeps serving; nothing moved to the revision that never turned Ready.
    assert isvc.serving() == {stable: 100} and isvc.condition("Ready")["status"] == "True"
    assert isvc.deployments()[unready].ready == 0
    selector = f"{LABEL_REVISION}={status['canaryRevisionHash']}"
    [pod] = isvc.core.list_namespaced_pod(isvc.ns, label_selector=selector).items
    conditions = {c.type: c.status for c in pod.status.conditions or []}
    assert pod.status.phase == "Running" and conditions["Ready"] == "False" == conditions["ContainersReady"], \
        "kwok runs the pod, not Ready"
    [warning] = isvc.wait("a CapacityTimeout Warning", lambda: isvc.events("CapacityTimeout"))
    assert warning.type == "Warning" and status["canaryRevisionHash"] in warning.message
    assert isvc.rollout_state("0").phase == "Failed"

    # A fixed image is a new target: the canary re-arms at step 0, from the same stable.
    isvc.set_component("engine", component("vllm/vllm-openai:v0.11"))
    fixed = isvc.canary_at(stable, 30)
    rearmed = isvc.wait("re-armed and paused at step 0", lambda: (
        (c := isvc.canary()).get("canaryRevisionHash") == isvc.revision(fixed) and isvc.phase() == "Paused" and c))
    assert not rearmed.get("failed") and rearmed["stableRevisionHash"] == isvc.revision(stable)
    isvc.wait("the unready revision drained", lambda: unready not in isvc.deployments())


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_deleting_the_inference_service_mid_canary_leaves_nothing(live_stack: LiveStack) -> None:
    isvc = live_stack.isvc("deleted")
    isvc.create({"engine": component(OLD_IMAGE), "rollout": canary(STEPS)})
    stable = isvc.first_revision()
    isvc.set_component("engine", component(NEW_IMAGE))
    canary_backend = isvc.canary_at(stable, 30)
    isvc.wait("paused at step 0", lambda: isvc.phase() == "Paused")
    uid = isvc.uid()
    service_id, rollout_id = isvc.service_workflow_id(), isvc.rollout_workflow_id("0")
    assert isvc.describe(rollout_id).status == WorkflowExecutionStatus.RUNNING
    # Everything serving it is owned by it: the garbage collector removes it with its owner, so
    # the InferenceService needs no finalizer of ours and its deletion is never held up.
    obj = isvc.get()
    assert obj is not None and not obj["metadata"].get("finalizers")
    apps, core = isvc.apps, isvc.core
    for name in (stable, canary_backend):
        for owned in (apps.read_namespaced_deployment(name, isvc.ns), core.read_namespaced_service(name, isvc.ns)):
            assert [(r.kind, r.uid) for r in owned.metadata.owner_references] == [("InferenceService", uid)]
    route = client.CustomObjectsApi(live_stack.api).get_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", isvc.ns, "httproutes", f"{isvc.name}-engine")
    assert [r["uid"] for r in route["metadata"]["ownerReferences"]] == [uid]

    isvc.delete()
    isvc.wait("the InferenceService gone", lambda: isvc.get() is None)
    assert isvc.wait("the InferenceService workflow completed", lambda: (
        isvc.describe(service_id).status == WorkflowExecutionStatus.COMPLETED))
    assert isvc.describe(rollout_id).status == WorkflowExecutionStatus.TERMINATED, "the canary run was left running"
    isvc.wait("its Deployments, Services and route gone", lambda: not isvc.deployments() and not isvc.services()
              and not isvc.weights() and not isvc.pods())
    # Nothing comes back: no workflow of it is left to recreate anything.
    isvc.hold("nothing recreated", lambda: not isvc.deployments() and not isvc.weights(), 4)
    assert not _route_exists(live_stack, isvc.ns, f"{isvc.name}-engine")


def _route_exists(stack: LiveStack, ns: str, name: str) -> bool:
    try:
        client.CustomObjectsApi(stack.api).get_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", ns, "httproutes", name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _signal_burst(stack: LiveStack, workflow_id: str, count: int) -> None:
    """`count` signals the run accepts and that change nothing: the ready-timeout annotation's
    current value (none), as the InferenceService workflow forwards it. Each is one history event."""
    async def burst() -> None:
        temporal = await connect(TemporalSettings(address=stack.temporal_address))
        handle = temporal.get_workflow_handle(workflow_id)
        await asyncio.gather(*(handle.signal(contract.Signal.READY_TIMEOUT, None) for _ in range(count)))

    asyncio.run(burst())


def test_a_long_bake_continues_as_new_at_the_production_history_budget(
        live_stack: LiveStack, prometheus: Prometheus, exporter: Exporter) -> None:
    """The production risk is a bake of days, sampled every minute: a dozen history events a
    sample. Here the bake is sampled every 200ms, and bursts of signals add the rest of the events
    (samples alone took 7 minutes on a loaded machine to cross the server's suggestion at 4096
    events). The run decides to continue as new where it would in production: at the top of its
    gate loop, between two samples, with the shipped budget and the server's suggestion."""
    budget = RolloutSettings().history_budget  # the worker runs with the shipped settings
    isvc = live_stack.isvc("long-bake")
    metric = "servingops_long_bake_error_ratio"
    exporter.set({metric + '{isvc="' + isvc.name + '"}': 0.01})
    analysis = {"interval": "200ms", "failureLimit": 3,
                "metrics": [{"name": "error-ratio", "query": metric + '{isvc="{{.ISVCName}}"}',
                             "operator": "LT", "threshold": "0.05"}]}
    steps: list[dict[str, Any]] = [{"capacity": "50%", "traffic": 40, "pause": {"duration": "1h"},
                                    "analysis": analysis}, {"capacity": "100%", "traffic": 100}]
    isvc.create({"engine": component(OLD_IMAGE),
                 "rollout": canary(steps, prometheus={"serverAddress": prometheus.url})})
    stable = isvc.first_revision()
    isvc.set_component("engine", component(NEW_IMAGE))
    canary_backend = isvc.canary_at(stable, 40)
    baking = isvc.wait("a passing sample", lambda: (c := isvc.canary()).get("metricResults")
                       and c["metricResults"][0]["passed"] is True and c)
    rollout_id = isvc.rollout_workflow_id("0")
    first = isvc.describe(rollout_id)
    samples_before = first.history_length

    # Signals up to just past the server's suggestion, in small bursts (a workflow task handed
    # hundreds of signals at once can outlast the SDK's 2s deadlock detector on a loaded machine),
    # then none: a task that would close the run is refused while new signals keep arriving.
    suggested = 4096  # the server's limit.historyCount.suggestContinueAsNew, as shipped
    deadline = time.monotonic() + 300
    while (view := isvc.describe(rollout_id, first.run_id)).status == WorkflowExecutionStatus.RUNNING \
            and view.history_length < suggested + 50:
        assert time.monotonic() < deadline, view
        _signal_burst(live_stack, rollout_id, 20)
    view = isvc.wait("the run continued as new", lambda: (
        (d := isvc.describe(rollout_id, first.run_id)).status != WorkflowExecutionStatus.RUNNING and d))
    assert view.status == WorkflowExecutionStatus.CONTINUED_AS_NEW, view
    print(f"\nthe first run closed ContinuedAsNew at {view.history_length} events (budget {budget}; "
          f"{samples_before} when the bake began)")
    assert view.history_length <= budget, "the run outgrew the production budget"
    latest = isvc.describe(rollout_id)
    assert latest.run_id != first.run_id and latest.status == WorkflowExecutionStatus.RUNNING
    assert latest.history_length < 200, "the new run started small"

    # The new run carries on where the old one stopped: same step, same bake clock, still sampling.
    state = isvc.rollout_state("0").canary
    assert state is not None and state.current_step == 0 and isvc.rollout_state("0").phase == "Canarying"
    assert state.step_entered_time == _time(baking["stepEnteredTime"]), "the bake clock restarted"

    def sampled_since() -> bool:
        now = isvc.rollout_state("0").canary
        return now is not None and now.last_evaluation_time != state.last_evaluation_time

    isvc.wait("a sample taken by the new run", sampled_since)
    assert isvc.serving() == {stable: 60, canary_backend: 40}
    assert isvc.canary()["canaryRevisionHash"] == baking["canaryRevisionHash"]

    # And it completes: promote-force ends the hour's bake.
    isvc.annotate("ome.io/rollout-promote-force", baking["canaryRevisionHash"])
    isvc.rolled_out(canary_backend)
    assert isvc.canary()["currentStep"] == len(steps)
    assert isvc.wait("the run recorded", lambda: isvc.status()["rollout"].get("lastRun"))["outcome"] == "Completed"
    assert isvc.describe(rollout_id).status == WorkflowExecutionStatus.COMPLETED
