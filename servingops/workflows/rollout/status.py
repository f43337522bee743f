"""Render the InferenceService status the rollout workflows own, from the InferenceService
workflow's memory: per-component traffic / revisions / canary / rolloutPhase, status.url,
status.address and status.addresses, status.canary (the entrypoint unit's run), status.rollout
(active run, last run, resolution view), status.rolloutCoordination, the Ready and IngressReady
conditions, and the Events that go with a status write (`EventReason`). Pure functions: the status
is built as the kind's model (`InferenceServiceStatus`, seed 004), whose `to_merge_patch(whole_values=True)`
gives the fields kube.patch_status merges into status; the Event notes are recorded with the write.

kube.patch_status records no Event of its own for a condition's transition: the notes here are
every Event: a canary step promoted, traffic moved, a run completed or rolled back, and the
Warning of a refused spec, a failed run or a route the Gateway refuses (its reason is the
condition's reason).

IngressReady (docs/rollouts.md "Routes and the Gateway"): with no Gateway configured it is True
(GatewayNotConfigured; the service answers at its cluster-local address, as before the ingress
block existed), so no stale False is left behind when a Gateway is removed and Ready keeps its
old meaning. With one, it is True (RouteAccepted) only when the Gateway reports every component's
route Accepted and ResolvedRefs for the route's current generation, and False otherwise with
the Gateway's own reason and message; Ready is then never True while it is False."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from servingops.activities.kubernetes import EventNote
from servingops.activities.serving.types import ServingHold
from servingops.api_models.contract.rollout import ActiveRun, ComponentTarget, ComponentView, ServiceState
from servingops.api_models.errors import ErrorType
from servingops.api_models.ome.accelerator import AcceleratorSelection
from servingops.api_models.ome.autoscaling import ComponentAutoscalerStatus
from servingops.api_models.ome.enums import (
    CanaryFailureReason,
    ComponentType,
    FailureReason,
    ModelState,
    RolloutRunOutcome,
    TransitionStatus,
)
from servingops.api_models.ome.inference_service import ComponentStatusSpec, InferenceServiceStatus
from servingops.api_models.ome.lifecycle import LifecycleStatus
from servingops.api_models.ome.model_status import FailureInfo, ModelCopies, ModelRevisionStates, ModelStatus
from servingops.api_models.ome.refs import ScaleTargetRef
from servingops.api_models.ome.rollout_status import (
    CanaryStatus,
    RolloutCoordinationStatus,
    RolloutGroupResolution,
    RolloutRun,
    RolloutRunGroup,
    RolloutRunPlan,
    RolloutRunProvenance,
    RolloutRunRecord,
    RolloutRunTarget,
    RolloutStatus,
)
from servingops.api_models.ome.traffic import ComponentTrafficTarget
from servingops.api_models.refs import ConditionUpdate
from servingops.api_models.serving import IngressObservation, RouteStatus, TrafficWeight
from servingops.rendering.names import revision_name
from servingops.workflows.rollout.models import Refusal
from servingops.workflows.rollout.plan import entrypoint, target_id

_CONDITION = {ComponentType.ENGINE: "EngineReady", ComponentType.DECODER: "DecoderReady",
              ComponentType.ROUTER: "RouterReady"}


class EventReason(StrEnum):
    """Reasons of the Events the rollout status writes carry (Warnings about refused input use
    the ErrorType value instead, the same reason as their condition)."""

    STEP_PROMOTED = "StepPromoted"
    """A canary step's gate passed (timed, analysis, promote or promote-force): the next step begins."""
    TRAFFIC_SHIFTED = "TrafficShifted"
    """A component's HTTPRoute weights changed."""
    COMPLETED = "Completed"
    """A run finished: its target revisions carry all traffic."""
    ROLLED_BACK = "RolledBack"
    """A run ended with traffic back on the stable revisions."""
    ROLLOUT_FAILED = "RolloutFailed"
    """A run ended without an outcome (a readiness timeout, or the run itself failed); also the
    park reason of such a group when the failure carries no error type."""


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
                    stable: str | None) -> list[ComponentTrafficTarget]:
    """ComponentTrafficTarget per revision carrying traffic (a zero-weight backend is not one)."""
    targets = []
    for weight in weights:
        if weight.weight <= 0:
            continue
        latest = weight.revision == stable
        targets.append(ComponentTrafficTarget(
            revision_name=revision_name(isvc, component.value, weight.revision), percent=weight.weight,
            tag="latest" if latest else "canary", latest_revision=latest))
    return targets


def component_status(isvc: str, component: ComponentType, view: ComponentView) -> ComponentStatusSpec:
    """status.components[c]. An OMENative component's lifecycle (its replica's status) and autoscaler
    are kept in the workflow's memory in their API form (ServiceState is the query's answer too), so
    they are read back into their models here."""
    def name(revision: str | None) -> str | None:
        return revision_name(isvc, component.value, revision) if revision else None

    return ComponentStatusSpec(
        url=view.url,
        latest_ready_revision=name(view.latest_ready),
        latest_rolledout_revision=name(view.stable),
        previous_rolledout_revision=name(view.previous),
        rollout_phase=view.rollout_phase,
        canary=view.canary,
        traffic=traffic_targets(isvc, component, view.traffic, view.stable),
        scale_target_ref=ScaleTargetRef(api_version="ome.io/v1beta1", kind="InferenceReplica", name=view.replica)
        if view.replica is not None else ScaleTargetRef(api_version="apps/v1", kind="Deployment",
                                                        name=view.autoscaler_target)
        if view.autoscaler_target is not None else None,
        lifecycle=LifecycleStatus.model_validate(view.lifecycle) if view.lifecycle is not None else None,
        autoscaler=ComponentAutoscalerStatus.model_validate(view.autoscaler) if view.autoscaler is not None
        else None,
        selected_accelerator=AcceleratorSelection.model_validate(view.selected_accelerator)
        if view.selected_accelerator is not None else None,
    )


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


class IngressReason(StrEnum):
    """Reasons of IngressReady (and Ready's while ingress holds it) that are ours; a route the Gateway
    refuses carries the Gateway's own reason instead (NoMatchingParent, BackendNotFound, ...), and a
    configuration that cannot be rendered the observation's (IngressConfigInvalid, InvalidHost)."""

    ROUTE_ACCEPTED = "RouteAccepted"
    GATEWAY_NOT_CONFIGURED = "GatewayNotConfigured"
    ROUTE_NOT_CREATED = "RouteNotCreated"
    """A component has no HTTPRoute yet (its first revision is being served)."""
    PARENT_STATUS_NOT_AVAILABLE = "ParentStatusNotAvailable"
    """The Gateway has written no verdict for our parentRef yet (upstream OME's reason)."""
    ROUTE_GENERATION_NOT_OBSERVED = "RouteGenerationNotObserved"
    """The Gateway's verdict is for an older generation of the route (a split was just programmed)."""
    INGRESS_NOT_READY = "IngressNotReady"
    """Ready's reason when every component serves but IngressReady is not True."""


_INGRESS_WAITS = {IngressReason.ROUTE_NOT_CREATED.value, IngressReason.PARENT_STATUS_NOT_AVAILABLE.value,
                  IngressReason.ROUTE_GENERATION_NOT_OBSERVED.value}
"""IngressReady False reasons that end by themselves once the Gateway catches up: no Warning for them
(every new service and every traffic shift passes through one)."""


def _route_verdict(gateway: str, component: ComponentType, route: RouteStatus | None) -> tuple[str, str] | None:
    """(reason, message) of what keeps one component's route from being ready; None when it is."""
    if route is None:
        return IngressReason.ROUTE_NOT_CREATED.value, f"{component.value} has no HTTPRoute yet"
    if not route.reported:
        return (IngressReason.PARENT_STATUS_NOT_AVAILABLE.value,
                f"Gateway {gateway} has not reported on HTTPRoute {route.route} yet")
    if route.current and (route.accepted is False or route.resolved_refs is False):
        which = "Accepted" if route.accepted is False else "ResolvedRefs"
        said = f": {route.message}" if route.message else ""
        return route.reason or f"Not{which}", f"HTTPRoute {route.route}: {which} False{said}"
    if route.accepted is None or route.resolved_refs is None:
        said = f" ({route.reason}{': ' + route.message if route.message else ''})" if route.reason else ""
        return (IngressReason.PARENT_STATUS_NOT_AVAILABLE.value,
                f"Gateway {gateway} has not decided Accepted and ResolvedRefs of HTTPRoute {route.route} yet{said}")
    if not route.current:
        return (IngressReason.ROUTE_GENERATION_NOT_OBSERVED.value,
                f"Gateway {gateway} reported on generation {route.observed_generation} of HTTPRoute {route.route}, "
                f"not on generation {route.generation} yet")
    return None


def ingress_condition(ingress: IngressObservation | None,
                      components: dict[ComponentType, ComponentView]) -> ConditionUpdate | None:
    """IngressReady from the last observation; None when there is nothing to say (no components, or
    an observation from before the ingress block existed). A route the Gateway refuses outranks one
    it has yet to look at: the refusal is what someone has to act on."""
    if ingress is None or not components:
        return None
    if ingress.problem_reason is not None:
        return ConditionUpdate(type="IngressReady", status="False", reason=ingress.problem_reason,
                               message=ingress.problem or "")
    if not ingress.gateway:
        return ConditionUpdate(type="IngressReady", status="True", reason=IngressReason.GATEWAY_NOT_CONFIGURED.value,
                               message="no ingress.omeIngressGateway: the routes attach to no Gateway; the service "
                                       "answers at its cluster-local address")
    verdicts = [verdict for component, view in sorted(components.items(), key=lambda item: item[0].value)
                if (verdict := _route_verdict(ingress.gateway, component, view.route_status)) is not None]
    if verdicts:
        reason, message = next((v for v in verdicts if v[0] not in _INGRESS_WAITS), verdicts[0])
        return ConditionUpdate(type="IngressReady", status="False", reason=reason, message=message)
    routes = ", ".join(view.route_status.route for _, view in sorted(components.items(), key=lambda i: i[0].value)
                       if view.route_status is not None)
    return ConditionUpdate(type="IngressReady", status="True", reason=IngressReason.ROUTE_ACCEPTED.value,
                           message=f"Gateway {ingress.gateway} accepted {routes}")


def ingress_ready(condition: ConditionUpdate | None) -> bool:
    """Whether ingress lets the service be Ready (no IngressReady written counts as ready)."""
    return condition is None or condition.status == "True"


def ingress_waiting(condition: ConditionUpdate | None) -> bool:
    """IngressReady False for a reason that ends by itself (the workflow looks again soon)."""
    return condition is not None and condition.status == "False" and condition.reason in _INGRESS_WAITS


def ingress_verdict(condition: ConditionUpdate | None, before: str | None) -> str | None:
    """ServiceState.ingress_verdict after this condition: waits do not count (see ingress_note)."""
    if condition is None or ingress_waiting(condition):
        return before
    return f"{condition.status}:{condition.reason}"


def ingress_note(condition: ConditionUpdate | None, before: str | None) -> EventNote | None:
    """The Warning of IngressReady turning False with a verdict it did not have (the Gateway refused a
    route, the ingress block does not parse, a host cannot be formed): once per verdict, not on
    the waits every new route and every traffic shift pass through."""
    if condition is None or condition.status != "False" or ingress_waiting(condition):
        return None
    if ingress_verdict(condition, before) == before:
        return None
    return EventNote(type="Warning", reason=condition.reason, message=condition.message)


def conditions(state: ServiceState, refusal: Refusal | None = None,
               held: ServingHold | None = None) -> list[ConditionUpdate]:
    """EngineReady / DecoderReady / RouterReady, IngressReady, Ready and RolloutReady."""
    updates = []
    for component, view in sorted(state.components.items(), key=lambda item: item[0].value):
        updates.append(ConditionUpdate(
            type=_CONDITION[component], status="True" if view.serving_ready else "False",
            reason="RevisionReady" if view.serving_ready else "RevisionNotReady",
            message=f"{component.value} serves revision {view.stable}" if view.serving_ready
            else f"{component.value} has no ready pods on a revision carrying traffic"))
    ready = bool(state.components) and all(v.serving_ready for v in state.components.values())
    ingress = ingress_condition(state.ingress, state.components)
    if ingress is not None:
        updates.append(ingress)
    if refusal is not None and not ready:
        # Nothing serves and nothing will until the spec changes: say why, not "waiting".
        updates.append(ConditionUpdate(type="Ready", status="False", reason=refusal.reason.value,
                                       message=refusal.message))
    elif held is not None and not ready:
        # Nothing serves yet, and will once the model / runtime can: say which and why.
        updates.append(ConditionUpdate(type="Ready", status="False", reason=held.reason, message=held.message))
    elif ready and ingress is not None and not ingress_ready(ingress):
        # The pods serve but the Gateway does not (yet) route to them: never a silent Ready.
        updates.append(ConditionUpdate(type="Ready", status="False", reason=IngressReason.INGRESS_NOT_READY.value,
                                       message=f"IngressReady is False: {ingress.reason}: {ingress.message}"))
    else:
        updates.append(ConditionUpdate(type="Ready", status="True" if ready else "False",
                                       reason="ComponentsReady" if ready else "ComponentsNotReady",
                                       message="" if ready else "waiting for components to serve"))
    resolved = autoscaler_condition(state)
    if resolved is not None:
        updates.append(resolved)
    if held is not None:
        # What serves keeps serving; no new revision is rendered until the model / runtime can serve.
        updates.append(ConditionUpdate(type="RolloutReady", status="False", reason=held.reason, message=held.message))
    elif state.parked:
        updates.append(ConditionUpdate(
            type="RolloutReady", status="False", reason=_park_reason(state.parked),
            message="; ".join(f"group {k}: {v}" for k, v in sorted(state.parked.items()))))
    else:
        updates.append(ConditionUpdate(type="RolloutReady", status="True", reason="RolloutPlanResolved"))
    return updates


AUTOSCALER_RESOLVED = "AutoscalerResolved"


def autoscaler_condition(state: ServiceState) -> ConditionUpdate | None:
    """AutoscalerResolved, while a component's scaler comes from an AutoscalerPolicy (or did not
    resolve): False with the first problem's reason while any component's policy does not render (its
    last good scaler stays), True once every one rendered."""
    views = sorted(state.components.items(), key=lambda item: item[0].value)
    problems = [(c, v.autoscaler_problem) for c, v in views if v.autoscaler_problem is not None]
    if problems:
        return ConditionUpdate(type=AUTOSCALER_RESOLVED, status="False", reason=problems[0][1][0],
                               message="; ".join(p[1] for _, p in problems))
    rendered = [f"{c.value} from AutoscalerPolicy {v.autoscaler_policy}" for c, v in views if v.autoscaler_policy]
    if not rendered:
        return None
    return ConditionUpdate(type=AUTOSCALER_RESOLVED, status="True", reason="PolicyRendered",
                           message="; ".join(rendered))


def autoscaler_note(component: ComponentType, before: tuple[str, str] | None,
                    after: tuple[str, str] | None) -> EventNote | None:
    """A Warning when a component's autoscaler stops resolving (or resolves otherwise), a Normal when
    it resolves again."""
    if after == before:
        return None
    if after is not None:
        return EventNote(type="Warning", reason=after[0], message=after[1])
    return EventNote(type="Normal", reason="PolicyRendered",
                     message=f"{component.value}: the autoscaler resolves again; its scaler follows the policy")


def _park_reason(parked: dict[str, str]) -> str:
    return _reason_of(parked[sorted(parked)[0]])


def _reason_of(why: str) -> str:
    """A park is written "<Reason>: <message>"; the reason is also the RolloutReady condition's."""
    return why.split(":", 1)[0] if ":" in why else "RolloutParked"


def park_note(group: str, why: str) -> EventNote:
    """The Warning of a group that parks (PolicyNotFound, MetricProviderUnbound, ...): the same
    reason as the RolloutReady condition, so `kubectl get events` says why it is held."""
    message = why.split(":", 1)[1].strip() if ":" in why else why
    return EventNote(type="Warning", reason=_reason_of(why), message=f"group {group}: {message}")


def service_status(isvc: str, state: ServiceState, now: datetime) -> InferenceServiceStatus:
    """The status fields the InferenceService workflow owns, from its memory: only the fields set
    here are written (to_merge_patch(whole_values=True)), each replaced whole. The workflow adds what
    it knows beside its memory (mountedOverlays, modelStatus, the runtime pin, migrationHistory)
    before the write."""
    served = list(state.components)
    entry = state.components[entrypoint(served)] if served else None
    written = addresses(state.ingress, entry) if entry is not None else InferenceServiceStatus()
    written.components = {c: component_status(isvc, c, v) for c, v in state.components.items()}
    if entry is not None and entry.canary is not None:
        # status.canary mirrors the canary of the unit owning the ISVC entrypoint.
        written.canary = entry.canary
    # The last run and the groups' resolutions are kept in their API form (see component_status).
    written.rollout = RolloutStatus(
        active_run=active_run(list(state.active.values()), now),
        last_run=RolloutRunRecord.model_validate(state.last_run) if state.last_run is not None else None,
        groups=[RolloutGroupResolution.model_validate(r) for r in state.resolutions] or None)
    if state.coordination:
        written.rollout_coordination = RolloutCoordinationStatus(
            groups=[state.coordination[k] for k in sorted(state.coordination)])
    return written


def addresses(ingress: IngressObservation | None, entry: ComponentView) -> InferenceServiceStatus:
    """status.url, status.address and status.addresses from the entrypoint component (seed 004:
    one address per Gateway the routes attach to, named by its class, plus the cluster-local one;
    status.url is the Gateway's, status.address the cluster-local one). Nothing before the
    entrypoint's route exists, and nothing new while the ingress block cannot be rendered (what
    was written stays): the fields left unset are not written. An address is the seed's
    Addressable (knative's duck type, not defined by the seed), which the model keeps as an object."""
    if ingress is None:
        # Observed before the ingress block existed: status.url as it was then.
        return InferenceServiceStatus(url=entry.url) if entry.url else InferenceServiceStatus()
    if ingress.problem_reason is not None or not entry.address:
        return InferenceServiceStatus()
    external = ingress.url if ingress.gateway else None
    listed = [{"name": "external", "url": external}] if external else []
    listed.append({"name": "cluster-local", "url": entry.address})
    return InferenceServiceStatus(url=external or entry.address, address={"url": entry.address}, addresses=listed)


def overlays_condition(mounted: list[dict[str, object]], skipped: list[str]) -> ConditionUpdate:
    """OverlaysReady: True when every declared overlay is wired in; else False naming each one left
    out and why (seed 004: a skipped overlay surfaces here, it does not hold the service)."""
    if not skipped:
        names = ", ".join(str(m.get("name")) for m in mounted)
        return ConditionUpdate(type="OverlaysReady", status="True", reason="OverlaysMounted", message=names)
    return ConditionUpdate(type="OverlaysReady", status="False", reason="OverlaysSkipped",
                           message="; ".join(skipped))


# -- status.modelStatus --------------------------------------------------------------------------

_FAILURE_OF_HOLD = {
    "ModelNotFound": FailureReason.BASE_MODEL_NOT_FOUND,
    "ModelKindUnsupported": FailureReason.BASE_MODEL_NOT_FOUND,
    "ModelDisabled": FailureReason.BASE_MODEL_NOT_READY,
    "ModelNotReady": FailureReason.BASE_MODEL_NOT_READY,
    "FineTunedWeightNotFound": FailureReason.BASE_MODEL_NOT_FOUND,
    "FineTunedWeightNotReady": FailureReason.BASE_MODEL_NOT_READY,
    "NoRuntimeMatches": FailureReason.NO_SUPPORTING_RUNTIME,
    "RuntimeNotCompatible": FailureReason.NO_SUPPORTING_RUNTIME,
    "RuntimeNotFound": FailureReason.RUNTIME_NOT_RECOGNIZED,
    "RuntimeInheritanceNotReady": FailureReason.RUNTIME_NOT_RECOGNIZED,
    "RuntimeRevisionNotFound": FailureReason.RUNTIME_NOT_RECOGNIZED,
}
_WAITING = {"ModelNotReady", "FineTunedWeightNotReady"}
"""Holds that end by themselves (a copy becomes Ready): in progress, not blocked."""


def model_status(state: ServiceState, *, refusal: Refusal | None, held: ServingHold | None, copies: int | None,
                 now: datetime) -> ModelStatus:
    """status.modelStatus of a service that names a model (seed 004 ModelStatus): whether the pods
    reflect the current spec, the model's load state in them, the last failure, the copies loaded
    (Ready engine pods on revisions carrying traffic)."""
    views = state.components.values()
    serving = bool(views) and all(v.serving_ready for v in views)
    settled = serving and not state.active and all(v.desired in (None, v.stable) for v in views)
    failure: FailureInfo | None = None
    if refusal is not None:
        transition, active = TransitionStatus.INVALID_SPEC, ModelState.FAILED_TO_LOAD
        failure = FailureInfo(reason=FailureReason.MODEL_LOAD_FAILED, message=refusal.message, time=now)
    elif held is not None:
        waiting = held.reason in _WAITING
        transition = TransitionStatus.IN_PROGRESS if waiting else TransitionStatus.BLOCKED_BY_FAILED_LOAD
        active = ModelState.LOADED if serving else (ModelState.PENDING if waiting else ModelState.FAILED_TO_LOAD)
        failure = FailureInfo(reason=_FAILURE_OF_HOLD.get(held.reason, FailureReason.MODEL_LOAD_FAILED),
                              message=held.message, time=now)
    else:
        transition = TransitionStatus.UP_TO_DATE if settled else TransitionStatus.IN_PROGRESS
        active = ModelState.LOADED if serving else ModelState.LOADING
    # Replaced whole on each write: a failure that is over leaves no lastFailureInfo.
    return ModelStatus(
        transition_status=transition,
        model_revision_states=ModelRevisionStates(active_model_state=active, target_model_state=ModelState.LOADED),
        last_failure_info=failure,
        model_copies=ModelCopies(failed_copies=0, total_copies=copies) if copies is not None else None,
    )


# -- Events ------------------------------------------------------------------------------------


def _split(weights: list[TrafficWeight]) -> str:
    return " / ".join(f"{w.revision} {w.weight}%" for w in weights if w.weight > 0) or "no traffic"


def traffic_note(component: ComponentType, before: list[TrafficWeight], after: list[TrafficWeight]) -> EventNote | None:
    """TrafficShifted when the weights a component carries changed."""
    if [w for w in before if w.weight > 0] == [w for w in after if w.weight > 0]:
        return None
    return EventNote(reason=EventReason.TRAFFIC_SHIFTED.value,
                     message=f"{component.value} traffic: {_split(after)} (was {_split(before)})")


def step_note(before: CanaryStatus | None, after: CanaryStatus | None, step_count: int) -> EventNote | None:
    """StepPromoted when the same canary moved past its current step."""
    if before is None or after is None or before.canary_revision_hash != after.canary_revision_hash:
        return None
    was, now = before.current_step or 0, after.current_step or 0
    if now <= was:
        return None
    following = f"step {now} of {step_count}" if now < step_count else "completion"
    how = " by promote" if after.promoted_through and after.promoted_through != before.promoted_through else ""
    return EventNote(reason=EventReason.STEP_PROMOTED.value,
                     message=f"canary {after.canary_revision_hash}: step {was} promoted{how}; on to {following}")


_STOPPED = {
    CanaryFailureReason.CAPACITY_TIMEOUT: "step {step} capacity not Ready within the ready timeout; stable keeps "
                                          "serving, waiting for a rollback, a resume or a new target",
    CanaryFailureReason.ANALYSIS_STALLED: "analysis at step {step} inconclusive past the stall timeout; traffic "
                                          "held, waiting for a rollback, a resume or a new target",
    CanaryFailureReason.STABLE_REVISION_MISSING: "cannot roll back from step {step}: the stable revision is gone; "
                                                 "the canary keeps its traffic",
}


def stopped_note(group: str, before: CanaryStatus | None, after: CanaryStatus | None) -> EventNote | None:
    """The Warning of a canary that stopped mid-run (status.canary.failed appeared, or changed
    reason), with the failure's reason: it waits for a decision, and `kubectl get events` says why."""
    reason = after.failed.reason if after is not None and after.failed is not None else None
    if after is None or reason is None:
        return None
    if before is not None and before.failed is not None and before.failed.reason == reason \
            and before.canary_revision_hash == after.canary_revision_hash:
        return None
    why = _STOPPED[reason].format(step=after.current_step or 0)
    return EventNote(type="Warning", reason=reason.value,
                     message=f"group {group}: canary {after.canary_revision_hash}: {why}")


def _revisions(targets: list[ComponentTarget], *, stable: bool) -> str:
    return ", ".join(f"{t.component.value} {t.stable_revision if stable else t.revision}" for t in targets)


def closed_note(group: str, outcome: RolloutRunOutcome | None, targets: list[ComponentTarget],
                message: str = "") -> EventNote | None:
    """Completed / RolledBack (Normal) or RolloutFailed (Warning) as a run closes; a superseded run
    says nothing (its successor is already running)."""
    moved = [t for t in targets if t.revision != t.stable_revision] or targets
    if outcome == RolloutRunOutcome.COMPLETED:
        return EventNote(reason=EventReason.COMPLETED.value,
                         message=f"group {group}: all traffic on {_revisions(moved, stable=False)}")
    if outcome == RolloutRunOutcome.ROLLED_BACK:
        return EventNote(reason=EventReason.ROLLED_BACK.value,
                         message=f"group {group}: rolled back from {_revisions(moved, stable=False)}; "
                                 f"all traffic on {_revisions(moved, stable=True)}")
    if outcome is None:
        why = f" ({message})" if message else ""
        return EventNote(type="Warning", reason=EventReason.ROLLOUT_FAILED.value,
                         message=f"group {group}: {_revisions(moved, stable=False)} not rolled out{why}; "
                                 f"all traffic on {_revisions(moved, stable=True)}")
    return None


def failed_run_note(group: str, error_type: ErrorType | None, message: str) -> EventNote:
    """The Warning of a run that failed (its park reason: the error's type, else RolloutFailed)."""
    reason = error_type.value if error_type is not None else EventReason.ROLLOUT_FAILED.value
    return EventNote(type="Warning", reason=reason, message=f"group {group}: {message}")


def held_note(held: ServingHold) -> EventNote:
    """The Warning of a spec held until its model / runtime can serve it."""
    return EventNote(type="Warning", reason=held.reason, message=held.message)


def refusal_note(refusal: Refusal) -> EventNote:
    """The Warning of a spec a serving activity refused (the Ready condition's reason)."""
    return EventNote(type="Warning", reason=refusal.reason.value,
                     message=f"generation {refusal.generation}: {refusal.message}")
