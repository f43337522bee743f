"""The canary step machine's pure rules: durations, capacity per step, the gate of a step, the
verdict of an analysis sample, timeouts and repin clamping. No workflow code, so every rule is
testable on its own and the workflow only sequences them."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from enum import StrEnum

from servingops.api_models.durations import parse_duration
from servingops.api_models.ome.enums import OnInconclusive
from servingops.api_models.ome.rollout import RolloutGroupStep

_FIRST_POLL_SECONDS = 0.5


def poll_interval(waited: timedelta, longest: float) -> float:
    """How long to sleep before re-reading readiness, `waited` into a wait: quick at first (kwok
    and warm nodes are Ready within a second or two, and a step can move no sooner than the
    workflow looks), then backing off to `longest` so a long wait costs few history events."""
    return min(longest, max(_FIRST_POLL_SECONDS, waited.total_seconds() / 2))


def scaled(value: int | str, total: int, *, round_up: bool) -> int:
    """An IntOrString against a total: "25%" of total (rounded as asked) or an absolute count."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if text.endswith("%"):
        fraction = float(text[:-1]) * total / 100
        return math.ceil(fraction - 1e-9) if round_up else math.floor(fraction + 1e-9)
    return int(text)


def step_capacity(step: RolloutGroupStep, desired_replicas: int) -> int:
    """New-revision replicas for one component at this step. A percentage rounds up so a
    non-zero step always gets at least one pod; an absolute count is taken as written."""
    return max(0, scaled(step.capacity, desired_replicas, round_up=True))


class Gate(StrEnum):
    ANALYSIS = "analysis"
    TIMED = "timed"
    MANUAL = "manual"
    IMMEDIATE = "immediate"


class StepWait(StrEnum):
    """What a step waits on besides its gate (with Gate, the `gate` the state query reports)."""

    CAPACITY = "capacity"
    """The step's new-revision replicas are not Ready yet."""
    HOLD = "hold"
    """A repin would raise exposure: traffic holds until a promote."""
    PAUSED = "paused"
    """ome.io/rollout-paused=true."""


class GateOutcome(StrEnum):
    """What waiting on a step's gate came to."""

    ADVANCE = "advance"
    """The gate passed on its own (immediate, timed pause over, analysis passed and baked)."""
    PROMOTED = "promoted"
    """A manual gate passed by a promote (recorded as promotedThrough)."""
    FORCED = "forced"
    """ome.io/rollout-promote-force skipped the gate."""
    ROLLBACK = "rollback"
    """Analysis failed: roll back."""
    AGAIN = "again"
    """Something else needs the step machine's outer loop (a signal, a park, a released hold)."""


def gate_of(step: RolloutGroupStep) -> Gate:
    """The seed's resolution order: analysis, then timed pause, then manual pause, then none."""
    if step.analysis is not None:
        return Gate.ANALYSIS
    if step.pause is not None and step.pause.duration:
        return Gate.TIMED
    if step.pause is not None:
        return Gate.MANUAL
    return Gate.IMMEDIATE


def pause_of(step: RolloutGroupStep) -> timedelta:
    """The step's pause duration (timed advance, or the minimum bake of an analysis step)."""
    if step.pause is None or not step.pause.duration:
        return timedelta(0)
    return parse_duration(step.pause.duration)


class Verdict(StrEnum):
    PASS = "pass"
    """Every metric passed."""
    CONTINUE = "continue"
    """Keep sampling (a failure below the limit, or an inconclusive sample within the stall)."""
    ROLLBACK = "rollback"
    PARK = "park"
    """Inconclusive past the stall timeout under Hold: Failed / AnalysisStalled."""


def judge_sample(*, failed: bool, conclusive: bool, failed_checks: int, failure_limit: int,
                 on_inconclusive: OnInconclusive | None, now: datetime, stall_anchor: datetime,
                 stall_timeout: timedelta) -> tuple[Verdict, int]:
    """The verdict of one sample and the step's new failed-check count."""
    if failed:
        failed_checks += 1
        return (Verdict.ROLLBACK if failed_checks >= failure_limit else Verdict.CONTINUE), failed_checks
    if conclusive:
        return Verdict.PASS, failed_checks
    mode = on_inconclusive or OnInconclusive.HOLD
    if mode == OnInconclusive.ROLLBACK:
        # Fail-safe: "can't tell" is treated as "bad" on the first inconclusive sample.
        return Verdict.ROLLBACK, failed_checks
    if now - stall_anchor < stall_timeout:
        return Verdict.CONTINUE, failed_checks
    return (Verdict.PARK if mode == OnInconclusive.HOLD else Verdict.ROLLBACK), failed_checks


def stall_anchor(last_conclusive: datetime | None, analysis_start: datetime) -> datetime:
    """The stall timeout runs from the last conclusive sample, but never from before this step's
    analysis began: a long timed step before it must not pre-spend the stall budget."""
    if last_conclusive is None:
        return analysis_start
    return max(last_conclusive, analysis_start)


def ready_timeout(annotation: str | None, group_value: str | None, operator_default: str) -> timedelta:
    """ome.io/rollout-ready-timeout overrides the group's readyTimeout, which overrides the
    operator default. An unparsable annotation falls back instead of wedging the rollout."""
    for candidate in (annotation, group_value):
        if candidate:
            try:
                return parse_duration(candidate)
            except ValueError:
                continue
    return parse_duration(operator_default)


def clamp_step(current_step: int, step_count: int) -> int:
    """Where a repin lands: the same index, clamped into the new step list."""
    return max(0, min(current_step, step_count - 1))


def repin_raises_exposure(new_step: RolloutGroupStep, programmed_weight: int) -> bool:
    """A repin may only hold or tighten traffic: a raise waits for an explicit promote."""
    return new_step.traffic > programmed_weight
