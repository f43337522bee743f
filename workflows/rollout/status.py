"""Render the InferenceService status the rollout workflows own, from the InferenceService
workflow's memory: per-component traffic / revisions / canary / rolloutPhase, status.url,
status.canary (the entrypoint unit's run), status.rollout (active run, last run, resolution
view), status.rolloutCoordination, and the Ready conditions. Pure functions returning the wire
dicts that kube.patch_status merges into status."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from api_models.ome.enums import ComponentType, RolloutRunOutcome
from api_models.ome.inference_service import ComponentStatusSpec
from api_models.ome.rollout_status import (
    CanaryStatus,
    RolloutCoordinationStatus,
    RolloutRun,
    RolloutRunGroup,
    RolloutRunPlan,
    RolloutRunProvenance,
    RolloutRunRecord,
    RolloutRunTarget,
    RolloutStatus,
)
from api_models.ome.traffic import ComponentTrafficTarget
from api_models.refs import ConditionUpdate
from api_models.serving_io import TrafficWeight, revision_name
from workflows.rollout.models import ActiveRun, ComponentTarget, ComponentView, ServiceState
from workflows.rollout.units import entrypoint, target_id

_CONDITION = {ComponentType.ENGINE: "EngineReady", ComponentType.DECODER: "DecoderReady",
              ComponentType.ROUTER: "RouterReady"}


def armed_canary(targets: list[ComponentTarget], primary: ComponentTarget, *, previous: CanaryStatus | None,
                 rearm: bool, has_analysis: bool, now: datetime) -> CanaryStatus:
    """The CanaryStatus a canary arms with. On a re-arm toward a new target it is replaced in place
    but keeps the pre-canary stable (the rollback target, never an intermediate) and the analysis
    clocks; targetID names the whole component target set, so a new set re-arms even when the
    entrypoint's revision did not change. The analysis-only fields are set only when some step
    has analysis."""
    stable = previous.stable_revision_hash if rearm and previous else primary.stable_revision
    return CanaryStatus(
        target_id=target_id({t.component: t.revision for t in targets}),
        canary_revision_hash=primary.revision, stable_revision_hash=stable, current_step=0,
        step_entered_time=now, observed_traffic_weight=0, pre_step_hold=False,
        analysis_failed_checks=0 if has_analysis else None,
        last_evaluation_time=previous.last_evaluation_time if has_analysis and previous else None,
        last_conclusive_evaluation_time=previous.last_conclusive_evaluation_time if has_analysis and previous
        else None)


def traffic_targets(isvc: str, component: ComponentType, weights: list[TrafficWeight],
                    stable: str | None) -> list[dict[str, Any]]:
    """ComponentTrafficTarget per revision carrying traffic (a zero-weight backend is not one)."""
    targets = []
    for weight in weights:
        if weight.weight <= 0:
            continue
        latest = weight.revision == stable
        targets.append(ComponentTrafficTarget(
            revision_name=revision_name(isvc, component.value, weight.revision), percent=weight.weight,
            tag="latest" if latest else "canary", latest_revision=latest).to_api())
    return targets


def component_status(isvc: str, component: ComponentType, view: ComponentView) -> dict[str, Any]:
    def name(revision: str | None) -> str | None:
        return revision_name(isvc, component.value, revision) if revision else None

    spec = ComponentStatusSpec(
        url=view.url,
        latest_ready_revision=name(view.latest_ready),
        latest_rolledout_revision=name(view.stable),
        previous_rolledout_revision=name(view.previous),
        rollout_phase=view.rollout_phase,
        canary=view.canary,
    )
    body = spec.to_api()
    body["traffic"] = traffic_targets(isvc, component, view.traffic, view.stable)
    return body


def run_targets(runs: list[ActiveRun]) -> list[RolloutRunTarget]:
    return [RolloutRunTarget(component=t.component, revision=t.revision, stable_revision=t.stable_revision)
            for run in runs for t in run.targets]


def active_run(runs: list[ActiveRun], now: datetime) -> RolloutRun | None:
    if not runs:
        return None
    first = min(runs, key=lambda r: r.opened_at)
    groups = [RolloutRunGroup(source=r.pinned.source, policy_ref=r.pinned.policy_ref,
                              policy_generation=r.pinned.policy_generation,
                              portable_digest=r.pinned.portable_digest, group=r.pinned.group)
              for r in sorted(runs, key=lambda r: (r.pinned.index if r.pinned.index is not None else 99, r.key))]
    return RolloutRun(run_id=",".join(sorted(r.run_id for r in runs)), opened_at=first.opened_at,
                      pinned_at=max(r.opened_at for r in runs), target_revisions=run_targets(runs),
                      plan=RolloutRunPlan(groups=groups[:3]))


def run_record(run: ActiveRun, outcome: RolloutRunOutcome, closed_at: datetime) -> dict[str, Any]:
    record = RolloutRunRecord(
        outcome=outcome, opened_at=run.opened_at, closed_at=closed_at, target_revisions=run_targets([run]),
        groups=[RolloutRunProvenance(source=run.pinned.source, policy_ref=run.pinned.policy_ref,
                                     portable_digest=run.pinned.portable_digest)])
    return record.to_api()


def conditions(state: ServiceState) -> list[ConditionUpdate]:
    updates = []
    for component, view in sorted(state.components.items(), key=lambda item: item[0].value):
        updates.append(ConditionUpdate(
            type=_CONDITION[component], status="True" if view.serving_ready else "False",
            reason="RevisionReady" if view.serving_ready else "RevisionNotReady",
            message=f"{component.value} serves revision {view.stable}" if view.serving_ready
            else f"{component.value} has no ready pods on a revision carrying traffic"))
    ready = bool(state.components) and all(v.serving_ready for v in state.components.values())
    updates.append(ConditionUpdate(type="Ready", status="True" if ready else "False",
                                   reason="ComponentsReady" if ready else "ComponentsNotReady",
                                   message="" if ready else "waiting for components to serve"))
    if state.parked:
        updates.append(ConditionUpdate(
            type="RolloutReady", status="False", reason=_park_reason(state.parked),
            message="; ".join(f"group {k}: {v}" for k, v in sorted(state.parked.items()))))
    else:
        updates.append(ConditionUpdate(type="RolloutReady", status="True", reason="RolloutPlanResolved"))
    return updates


def _park_reason(parked: dict[str, str]) -> str:
    first = parked[sorted(parked)[0]]
    return first.split(":", 1)[0] if ":" in first else "RolloutParked"


def service_status(isvc: str, state: ServiceState, now: datetime) -> dict[str, Any]:
    """The status fields the InferenceService workflow owns (each replaced whole)."""
    components = {c.value: component_status(isvc, c, v) for c, v in state.components.items()}
    body: dict[str, Any] = {"components": components}
    served = list(state.components)
    if served:
        entry = entrypoint(served)
        url = state.components[entry].url
        if url:
            body["url"] = url
        # status.canary mirrors the canary of the unit owning the ISVC entrypoint.
        canary = state.components[entry].canary
        if canary is not None:
            body["canary"] = canary.to_api()
    rollout = RolloutStatus(active_run=active_run(list(state.active.values()), now))
    rollout_body = rollout.to_api()
    if state.last_run is not None:
        rollout_body["lastRun"] = state.last_run
    if state.resolutions:
        rollout_body["groups"] = state.resolutions
    body["rollout"] = rollout_body
    if state.coordination:
        coordination = RolloutCoordinationStatus(groups=[state.coordination[k] for k in sorted(state.coordination)])
        body["rolloutCoordination"] = coordination.to_api()
    return body
