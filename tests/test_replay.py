"""Every stored history (tests/histories/<workflow type>/<scenario>.json) replays against the
workflows the worker registers today. A change to workflow code that would make a running
workflow take a different path than its history records fails here: ship it behind
`workflow.patched(...)` or as a new workflow type (docs/durability.md), never as a plain edit.

No stack is needed: the Replayer runs the workflow code against the recorded events in process.
Histories are recorded by tests/histories/record.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import (
    Interceptor,
    Replayer,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)
from temporalio.workflow import NondeterminismError

from servingops.workers.registry import workflows
from servingops.workers.sandbox import workflow_runner
from tests.support.histories import HISTORIES, load

pytestmark = pytest.mark.timeskip

STORED = sorted(HISTORIES.glob("*/*.json"))
# Histories recorded at commit 1482aaa, before the InferenceService workflow read operator.config
# at run open and nudged RolloutPolicies: they replay only through the patches in that workflow.
BEFORE_PATCHES = {"before-operator-config", "before-refresh-now", "canary-promote", "scaling-during-run-before"}
# scaling-during-run-before: tests/histories/autoscaler_scenarios.py isvc-scaling-during-run recorded with the
# patch's branch off (the decoder followed the stable revision down to 1 mid-run).
# canary-promote was recorded before `remove-consumed-annotations`: its promote is consumed while the
# annotation stays, so it replays only through that patch (annotation-cleanup holds the new branch).




SCHEDULED: list[str] = []
"""Activity types the replayed code scheduled, in order (the Temporal SDK's replay matches an
activity command to its event by sequence number, not by type: a branch that swaps one activity for
another replays without a nondeterminism error, so the types are compared here)."""


class _Outbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> Any:
        SCHEDULED.append(str(input.activity))
        return super().start_activity(input)


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))


class ActivityTypes(Interceptor):
    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _Inbound


def history_activity_types(history: WorkflowHistory) -> list[str]:
    return [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]


async def replay_comparing_activities(history: WorkflowHistory) -> None:
    """Replay (raising on nondeterminism or a failed workflow task), then hold the activity types
    the code scheduled to those the history records, in order (the code may go on past the end)."""
    SCHEDULED.clear()
    replayer = Replayer(workflows=list(workflows()), data_converter=pydantic_data_converter,
                        interceptors=[ActivityTypes()],
                        workflow_runner=workflow_runner())
    await replayer.replay_workflow(history)
    recorded = history_activity_types(history)
    assert SCHEDULED[:len(recorded)] == recorded, "the replayed code scheduled other activities than the history"


def test_every_workflow_type_has_stored_histories() -> None:
    registered = {getattr(w, "__temporal_workflow_definition").name for w in workflows()}
    stored = {path.parent.name for path in STORED}
    assert registered <= stored, f"no stored history for {sorted(registered - stored)}"


def test_stored_histories_are_of_registered_types() -> None:
    # A history of a type no worker registers anymore would never be replayed by anything: either
    # the type still runs somewhere (register it) or its histories are obsolete (delete them).
    registered = {getattr(w, "__temporal_workflow_definition").name for w in workflows()}
    assert {path.parent.name for path in STORED} <= registered


@pytest.mark.parametrize("path", STORED, ids=[f"{p.parent.name}/{p.stem}" for p in STORED])
async def test_history_replays(path: Path) -> None:
    history = load(path)
    assert history.events, f"{path} holds no events"
    await replay_comparing_activities(history)


def test_patched_histories_are_stored() -> None:
    """The histories that hold the InferenceService workflow's patches in place are kept until
    the patches are deprecated (see docs/durability.md)."""
    names = {path.stem.rsplit("-", 1)[0] if path.stem[-1].isdigit() else path.stem for path in STORED}
    assert BEFORE_PATCHES <= names


@pytest.mark.parametrize("scenario", sorted(BEFORE_PATCHES))
async def test_histories_before_the_patches_need_them(scenario: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without its patches (every `workflow.patched` taking the new branch, as the unpatched code
    did) the InferenceService workflow cannot replay a history recorded before them: the patches
    are what keeps those runs alive."""
    monkeypatch.setattr(workflow, "patched", lambda patch_id: True)
    replayer = Replayer(workflows=list(workflows()), data_converter=pydantic_data_converter,
                        workflow_runner=workflow_runner())
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(load(HISTORIES / "InferenceServiceWorkflow" / f"{scenario}.json"))


# RolloutWorkflow histories recorded before `reports-in-flight` and `capacity-from-scale` (each
# report waited for the parent's acknowledgement; each step's first capacity check was a
# revision_status call); reports-in-flight*.json hold the new branches. For capacity-from-scale,
# annotation-cleanup: the older recordings' fake answered serving.ensure_revision with nothing, and a
# step without the scale's answer reads with revision_status on either branch. zero-drain-delay-before
# was recorded before `no-timer-for-zero-delay` (its drain starts a zero-length timer). Every stored
# rollout history but local-serving-writes was recorded before `local-serving-writes` (its scale and
# weights were scheduled activities); every one but scale-then-route was recorded before `scale-then-route`
# (a step's scale and weights were two local activities).
ROLLOUT_BEFORE_PATCHES = [("reports-in-flight", "canary-promote"), ("reports-in-flight", "rollout-continue-as-new-1"),
                          ("capacity-from-scale", "annotation-cleanup"),
                          ("no-timer-for-zero-delay", "zero-drain-delay-before"),
                          ("local-serving-writes", "reports-in-flight"), ("local-serving-writes", "zero-drain-delay"),
                          ("scale-then-route", "local-serving-writes")]


@pytest.mark.parametrize(("patch_id", "scenario"), ROLLOUT_BEFORE_PATCHES)
async def test_rollout_histories_before_the_promote_patches_need_them(scenario: str, patch_id: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of the patches alone, forced to its new branch, breaks the replay of a rollout run
    recorded before it (a nondeterminism error, or other activities than the history's): each patch
    is what keeps those runs alive. A local activity's marker is matched to the call by its sequence
    number, not its type: replaying `scale-then-route` over a `serving.ensure_revision` marker hands
    that answer to the new call, which fails the workflow task (RuntimeError, a decoding failure)."""
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched", lambda asked: True if asked == patch_id else real(asked))
    with pytest.raises((NondeterminismError, AssertionError, RuntimeError)):
        await replay_comparing_activities(load(HISTORIES / "RolloutWorkflow" / f"{scenario}.json"))


async def test_the_catalog_history_before_the_backend_needs_its_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    """`catalog-not-implemented` was recorded before `catalog-backend` (a type Catalog source blocked, no
    fetch): forced to the new branch, its replay schedules other activities than the history's."""
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched", lambda asked: True if asked == "catalog-backend" else real(asked))
    with pytest.raises((NondeterminismError, AssertionError)):
        await replay_comparing_activities(load(HISTORIES / "CatalogSourceWorkflow" / "catalog-not-implemented.json"))


# Recorded after `placement-tells-routing` (at 9f96b20 and later): they carry its marker.
AFTER_ROUTING_NOTICE = {"placement-split-zero-share", "placement-split-zero-share-before",
                        "placement-single-move-waits-ready"}
PLACEMENT_STORED = sorted(p for p in (HISTORIES / "PlacementWorkflow").glob("*.json")
                          if p.stem not in AFTER_ROUTING_NOTICE)


@pytest.mark.parametrize("path", PLACEMENT_STORED, ids=[p.stem for p in PLACEMENT_STORED])
async def test_placement_histories_before_the_routing_notice_need_its_patch(path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Every PlacementWorkflow history stored before `placement-tells-routing` (a status write sends
    routing-changed to the routing workflow): forced to the new branch, each fails to replay, so the patch is
    what keeps those runs alive."""
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched",
                        lambda asked: True if asked == "placement-tells-routing" else real(asked))
    with pytest.raises(NondeterminismError):
        await replay_comparing_activities(load(path))


async def test_the_placement_history_before_the_zero_share_fix_needs_its_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    """`placement-split-zero-share-before` was recorded at 9f96b20, before `placement-zero-share-withdrawn`: gpu-b's
    share went to 0 and its copy stayed. Forced to the new branch, the replay takes gpu-b off the route, waits
    for the routing workflow's word and deletes the copy when it comes: not what the history holds (the word
    wakes the run, which cancels the poll timer the history fired: the SDK's state machines refuse that as a
    RuntimeError)."""
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched",
                        lambda asked: True if asked == "placement-zero-share-withdrawn" else real(asked))
    before = load(HISTORIES / "PlacementWorkflow" / "placement-split-zero-share-before.json")
    with pytest.raises((NondeterminismError, AssertionError, RuntimeError)):
        await replay_comparing_activities(before)


async def test_the_placement_history_of_a_ready_handover_needs_its_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    """`placement-single-move-waits-ready` holds a replacement that had a URL before a Ready replica and took over
    only once it had one (`placement-move-hands-over-when-ready`). Without the patch the replay hands over at the
    first look with a URL: other commands than the history's."""
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched",
                        lambda asked: False if asked == "placement-move-hands-over-when-ready" else real(asked))
    history = load(HISTORIES / "PlacementWorkflow" / "placement-single-move-waits-ready.json")
    with pytest.raises((NondeterminismError, AssertionError, RuntimeError)):
        await replay_comparing_activities(history)


@pytest.mark.parametrize("patch_id", ["scaler-readiness-poll", "scaler-mirror-writes"])
async def test_the_keda_verdict_history_needs_its_patches(patch_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`isvc-keda-verdict` holds a service that looked again by itself until KEDA judged its ScaledObject and
    wrote the verdict at once: without either patch the replay issues other commands than the history's."""
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched", lambda asked: False if asked == patch_id else real(asked))
    history = load(HISTORIES / "InferenceServiceWorkflow" / "isvc-keda-verdict.json")
    with pytest.raises((NondeterminismError, AssertionError, RuntimeError)):
        await replay_comparing_activities(history)


async def test_the_quota_deregistration_history_needs_its_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    """`accelerator-quota-deregistration` holds a node releasing a deregistered WorkloadCluster's copies
    (`placement.release_quota_hold`, patch `quota-deregistration`): without the patch the replay issues other
    commands than the history's."""
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched", lambda asked: False if asked == "quota-deregistration" else real(asked))
    history = load(HISTORIES / "AcceleratorQuotaWorkflow" / "accelerator-quota-deregistration.json")
    with pytest.raises((NondeterminismError, AssertionError, RuntimeError)):
        await replay_comparing_activities(history)


async def test_the_benchmark_histories_need_the_summary_patch_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """`benchmark-job` was recorded before `benchmark-summary` (a Completed oci:// run wrote Completed at once):
    with the patch forced on, the replay schedules `benchmark.summarize` where the history wrote the status.
    `benchmark-summaries` holds the new branch (and a pvc:// run's summary from its pod, which `job_state`
    carries with no command of its own): with the patch forced off, its `benchmark.summarize` is missing."""
    real = workflow.patched
    monkeypatch.setattr(workflow, "patched", lambda asked: True if asked == "benchmark-summary" else real(asked))
    with pytest.raises((NondeterminismError, AssertionError, RuntimeError)):
        await replay_comparing_activities(load(HISTORIES / "BenchmarkJobWorkflow" / "benchmark-job.json"))
    monkeypatch.setattr(workflow, "patched", lambda asked: False if asked == "benchmark-summary" else real(asked))
    with pytest.raises((NondeterminismError, AssertionError, RuntimeError)):
        await replay_comparing_activities(load(HISTORIES / "BenchmarkJobWorkflow" / "benchmark-summaries.json"))
