"""The rollout workflows' pure rules: durations, capacity, gate order, sample verdicts, stall
anchoring, ready-timeout precedence, repin clamping, PromQL templating, rolling-update budget
math, units and policy digests."""

from __future__ import annotations

import hashlib
import itertools
from datetime import UTC, datetime, timedelta

import pytest

from servingops.activities.serving.types import ComponentObservation
from servingops.api_models.contract.rollout import ComponentView, ServiceState
from servingops.api_models.ome.enums import ComponentType, OnInconclusive, RolloutPlanSource
from servingops.api_models.ome.rollout import GroupCanary, RolloutGroup, RolloutGroupStep, RolloutSpec
from servingops.api_models.ome.rollout_policy import RolloutPolicySpec
from servingops.workflows.rollout import plan, policy_pinning, steps, templating
from servingops.workflows.rollout.progressions import rolling

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def step(**body: object) -> RolloutGroupStep:
    return RolloutGroupStep.model_validate({"capacity": "10%", "traffic": 10, **body})


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("1h30m", 5400), ("500ms", 0.5), ("0", 0),
                                               ("1.5h", 5400), ("2m3s", 123)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert steps.parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("bad", ["1d", "abc", "10", "m"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        steps.parse_duration(bad)


def test_capacity_percent_rounds_up_absolute_is_literal() -> None:
    assert steps.step_capacity(step(capacity="10%"), 4) == 1
    assert steps.step_capacity(step(capacity="50%"), 5) == 3
    assert steps.step_capacity(step(capacity="0%"), 4) == 0
    assert steps.step_capacity(step(capacity="3"), 10) == 3
    assert steps.step_capacity(step(capacity=2), 10) == 2


def test_gate_order_analysis_then_timed_then_manual_then_immediate() -> None:
    analysis = {"interval": "1m", "failureLimit": 1, "metrics": [
        {"name": "m", "query": "q", "operator": "LT", "threshold": "1"}]}
    assert steps.gate_of(step(analysis=analysis, pause={"duration": "5m"})) == steps.Gate.ANALYSIS
    assert steps.gate_of(step(pause={"duration": "5m"})) == steps.Gate.TIMED
    assert steps.gate_of(step(pause={})) == steps.Gate.MANUAL
    assert steps.gate_of(step()) == steps.Gate.IMMEDIATE


def judge(**kwargs: object) -> tuple[steps.Verdict, int]:
    base: dict[str, object] = {"failed": False, "conclusive": True, "failed_checks": 0, "failure_limit": 2,
                               "on_inconclusive": None, "now": T0 + timedelta(minutes=5), "stall_anchor": T0,
                               "stall_timeout": timedelta(minutes=10)}
    base.update(kwargs)
    return steps.judge_sample(**base)  # type: ignore[arg-type]


def test_sample_verdicts() -> None:
    assert judge() == (steps.Verdict.PASS, 0)
    assert judge(failed=True) == (steps.Verdict.CONTINUE, 1)
    assert judge(failed=True, failed_checks=1) == (steps.Verdict.ROLLBACK, 2)
    # Inconclusive: Hold rides out the stall then parks; Rollback is immediate; RollbackOnStall
    # rides out then rolls back.
    assert judge(conclusive=False) == (steps.Verdict.CONTINUE, 0)
    late = T0 + timedelta(minutes=10)
    assert judge(conclusive=False, now=late) == (steps.Verdict.PARK, 0)
    assert judge(conclusive=False, on_inconclusive=OnInconclusive.ROLLBACK) == (steps.Verdict.ROLLBACK, 0)
    assert judge(conclusive=False, on_inconclusive=OnInconclusive.ROLLBACK_ON_STALL) == (steps.Verdict.CONTINUE, 0)
    assert judge(conclusive=False, now=late, on_inconclusive=OnInconclusive.ROLLBACK_ON_STALL) == \
        (steps.Verdict.ROLLBACK, 0)


def test_stall_anchor_never_predates_the_step() -> None:
    step_start = T0 + timedelta(hours=2)
    assert steps.stall_anchor(T0, step_start) == step_start
    assert steps.stall_anchor(None, step_start) == step_start
    assert steps.stall_anchor(step_start + timedelta(minutes=1), step_start) == step_start + timedelta(minutes=1)


def test_ready_timeout_precedence() -> None:
    assert steps.ready_timeout("5m", "20m", "10m") == timedelta(minutes=5)
    assert steps.ready_timeout(None, "20m", "10m") == timedelta(minutes=20)
    assert steps.ready_timeout(None, None, "10m") == timedelta(minutes=10)
    assert steps.ready_timeout("garbage", "20m", "10m") == timedelta(minutes=20)


def test_repin_clamps_and_holds_raises() -> None:
    assert steps.clamp_step(5, 3) == 2
    assert steps.clamp_step(1, 3) == 1
    assert steps.repin_raises_exposure(step(traffic=50), 20)
    assert not steps.repin_raises_exposure(step(traffic=10), 20)


def test_templating_renders_every_variable_and_rejects_unknown() -> None:
    context = templating.QueryContext(namespace="ns", isvc_name="llama", component="engine",
                                      canary_service="llama-engine-rev-b", stable_service="llama-engine-rev-a",
                                      canary_revision="b", stable_revision="a")
    query = ("{{.Namespace}}/{{.ISVCName}}/{{.Component}}/{{ .CanaryService }}/{{.StableService}}/"
             "{{.CanaryRevision}}/{{.StableRevision}}")
    assert templating.render(query, context) == "ns/llama/engine/llama-engine-rev-b/llama-engine-rev-a/b/a"
    with pytest.raises(templating.TemplateError):
        templating.render("{{.Cluster}}", context)


def test_rolling_budget_defaults_and_deadlock_guard() -> None:
    assert rolling.budget(4, None) == (1, 1)
    assert rolling.budget(1, None) == (1, 0)
    spec = rolling.GroupRollingUpdate(max_surge=0, max_unavailable=0)
    assert rolling.budget(3, spec) == (0, 1)


@pytest.mark.parametrize(("desired", "surge", "unavailable"),
                         [(d, s, u) for d, s, u in itertools.product([1, 2, 3, 5, 8], [0, 1, 2], [0, 1, 2])
                          if s + u > 0])
def test_rolling_pacing_never_breaks_the_budget(desired: int, surge: int, unavailable: int) -> None:
    """Simulate rounds in which every new pod becomes Ready before the next round."""
    counts = rolling.Counts(new=0, old=desired)
    new_ready, old_ready = 0, desired
    for _ in range(4 * desired + 4):
        counts = rolling.next_counts(desired, surge, unavailable, counts, new_ready, old_ready)
        old_ready = min(old_ready, counts.old)
        assert counts.new + counts.old <= desired + surge
        assert new_ready + old_ready >= desired - unavailable
        new_ready = counts.new  # the pods come up
        if counts == rolling.Counts(new=desired, old=0):
            break
    assert counts == rolling.Counts(new=desired, old=0)
    assert rolling.split(1, 3) == 25 and rolling.split(0, 0) == 100


def test_units_entrypoint_and_sequencing() -> None:
    spec = RolloutSpec.model_validate({"groups": [{"components": ["engine", "decoder"]}]})
    found = plan.units(spec, [ComponentType.ENGINE, ComponentType.DECODER, ComponentType.ROUTER])
    assert [(u.key, u.components) for u in found] == [
        ("0", (ComponentType.ENGINE, ComponentType.DECODER)), ("router", (ComponentType.ROUTER,))]
    assert plan.entrypoint([ComponentType.DECODER, ComponentType.ENGINE]) == ComponentType.ENGINE
    assert plan.sequential(None) and not plan.sequential(RolloutSpec(group_ordering="Concurrent"))



def test_target_id_names_the_target_set() -> None:
    engine, decoder = ComponentType.ENGINE, ComponentType.DECODER
    # The same set read in another order (components come from the spec and the route) is the same target.
    assert plan.target_id({engine: "a", decoder: "d"}) == plan.target_id({decoder: "d", engine: "a"})
    sets = [{engine: "a"}, {engine: "b"}, {decoder: "a"}, {engine: "a", decoder: "d"}, {engine: "a", decoder: "e"}]
    assert len({plan.target_id(targets) for targets in sets}) == len(sets), "distinct sets, distinct ids"
    # status.rollout.lastRun.targetId is compared across workers and releases: a fixed digest, not hash().
    assert plan.target_id({engine: "a"}) == hashlib.sha256(b"engine=a").hexdigest()[:16]


def test_which_units_start_now() -> None:
    engine, decoder, router = ComponentType.ENGINE, ComponentType.DECODER, ComponentType.ROUTER
    spec = RolloutSpec.model_validate({"groups": [{"components": ["engine"]}, {"components": ["decoder"]}]})
    seen = {c: ComponentObservation(component=c, desired_revision=f"{c.value}-new", desired_replicas=2, revisions=[],
                                    traffic=[]) for c in (engine, decoder, router)}
    state = ServiceState(components={c: ComponentView(stable=f"{c.value}-old") for c in (engine, decoder, router)},
                         held={"router": {router: "router-new"}}, held_primary={"router": "router-new"},
                         parked={"1": "PolicyNotFound: gone"})
    running, startable = plan.triage(plan.units(spec, [engine, decoder, router]), seen, state)
    # The router's rejected target is held; both groups could start.
    assert not running and [p.unit.key for p in startable] == ["0", "1"]
    assert startable[0].targets[0].stable_revision == "engine-old"
    assert state.held == {"router": {router: "router-new"}}
    now = datetime(2026, 1, 1, tzinfo=UTC)
    # Sequenced: only the first group opens; an ungrouped component would open beside it.
    assert [p.unit.key for p in plan.admit(spec, startable, state, now)] == ["0"]
    assert [p.unit.key for p in plan.admit(RolloutSpec(groups=spec.groups, group_ordering="Concurrent"),
                                          startable, state, now)] == ["0", "1"]
    state.soak_until = now + timedelta(minutes=5)
    assert plan.admit(spec, startable, state, now) == []
    assert [p.unit.key for p in plan.admit(spec, startable, state, now + timedelta(minutes=5))] == ["0"]
    assert state.soak_until is None  # an elapsed soak is cleared
    # A unit back on its stable revisions is released from its hold and its park.
    seen[decoder] = seen[decoder].model_copy(update={"desired_revision": "decoder-old"})
    seen[router] = seen[router].model_copy(update={"desired_revision": "router-old"})
    running, startable = plan.triage(plan.units(spec, [engine, decoder, router]), seen, state)
    assert [p.unit.key for p in startable] == ["0"] and not state.parked and not state.held


def test_policy_resolution_and_digest() -> None:
    canary = GroupCanary.model_validate({"steps": [{"capacity": "50%", "traffic": 50}]})
    body = RolloutPolicySpec(canary=canary)
    digest = policy_pinning.portable_digest(body)
    assert digest.startswith("rp1:") and digest == policy_pinning.portable_digest(RolloutPolicySpec.model_validate(
        body.to_api()))
    live = {"apiVersion": "ome.io/v1beta1", "kind": "RolloutPolicy", "metadata": {"generation": 2},
            "spec": body.to_api()}
    ref = {"name": "p", "progression": "canary"}
    resolved = policy_pinning.resolve(RolloutGroup.model_validate({"components": ["engine"], "policyRef": ref}), live)
    assert resolved.source == RolloutPlanSource.POLICY and resolved.group is not None
    assert resolved.group.canary == canary and resolved.policy_generation == 2 and resolved.digest == digest
    missing = policy_pinning.resolve(RolloutGroup.model_validate({"components": ["engine"], "policyRef": ref}), None)
    assert missing.group is None and missing.park_reason == "PolicyNotFound"
    wrong = policy_pinning.resolve(RolloutGroup.model_validate(
        {"components": ["engine"], "policyRef": {"name": "p", "progression": "blueGreen"}}), live)
    assert wrong.group is None and wrong.park_reason == "ProgressionMismatch"
    default = policy_pinning.resolve(RolloutGroup.model_validate({"components": ["engine"]}), None)
    assert default.group is not None and default.group.blue_green is not None


def test_readiness_poll_starts_quick_and_backs_off() -> None:
    waits = [steps.poll_interval(timedelta(seconds=s), 5.0) for s in (0, 0.9, 2, 4, 8, 30, 3600)]
    assert waits == [0.5, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
