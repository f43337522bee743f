"""What the InferenceService serves: one observation of the object (serving.observe), and each
component kept served from it (its first revision at 100%, stable replicas at the spec's count while
no run moves it, the route re-attached after an ingress change, the OMENative scaler). What the
observation found that status reports (held, placed, served by reference, overlays, pins) is kept
here for the status write.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote
    from servingops.activities.serving.activities import ServingActivities
    from servingops.activities.serving.autoscaler import (
        AutoscalerActivities,
        AutoscalerObservation,
        EnsureAutoscalerInput,
    )
    from servingops.activities.serving.types import (
        ComponentObservation,
        EnsureRevisionInput,
        ObserveInput,
        RevisionKey,
        ServiceObservation,
        ServingHold,
        SetTrafficInput,
    )
    from servingops.api_models import contract
    from servingops.api_models.contract.rollout import ComponentView
    from servingops.api_models.errors import ErrorType, error_message, error_type_of
    from servingops.api_models.ome.autoscaling import ScalingPolicy
    from servingops.api_models.ome.enums import AutoscalerManagedBy, ComponentType
    from servingops.api_models.ome.rollout import RolloutSpec
    from servingops.api_models.refs import ConditionUpdate
    from servingops.api_models.serving import TrafficWeight
    from servingops.rendering import scaling_policy
    from servingops.rendering.names import revision_name
    from servingops.rendering.scaling import class_owns_count
    from servingops.workflows import options
    from servingops.workflows.inference_service.context import ServiceContext
    from servingops.workflows.rollout import status

OMENATIVE_AUTOSCALER = "omenative-autoscaler"
"""The patch that added serving.ensure_autoscaler for OMENative components (docs/replicas.md)."""
TTL_AFTER_CREATION = "ttl-after-creation"
"""The patch that deletes a service once spec.ttlSecondsAfterCreation passed (serving.delete_expired)."""
EXPIRY_RECHECK = 5.0
"""Seconds before asking again when the delete did not happen (clock skew, a racing write)."""
RAW_AUTOSCALER = "rawdeployment-autoscaler"
"""The patch that gives a RawDeployment component its scaler (targeting the Deployment of the revision
carrying its traffic) and leaves that Deployment's count to the scaler (docs/autoscaling.md)."""
REMOVED_COMPONENT_SCALER = "removed-component-scaler"
"""The patch that deletes the scaler of a component that left the spec."""
AUTOSCALER_POLICY_NUDGES = "autoscaler-policy-nudges"
"""The patch that tells an AutoscalerPolicy's workflow (refresh-now) when this service's references to it
change, so its status.attachedComponents moves at once."""
SCALER_MIRROR_WRITES = "scaler-mirror-writes"
"""The patch that writes the status when status.components[c].autoscaler (the scaler's mirror) changed."""
SCALING_POLICY = "scaling-policy"
"""The patch that coordinates components under spec.scalingPolicy: each follower's count derived from the
anchor's current count (rendering/scaling_policy.py), written by the service, with its Events and the
ScalingCoordinated condition. Asked only of an observation carrying a coordinating policy, so services
without one (Independent, the default) issue the commands they always did."""
SCALING_DURING_RUN = "scaling-during-run"
"""The patch that reads a RawDeployment anchor's count, while a rollout run moves it, as the replicas of every
revision of it carrying traffic (before: its stable revision's alone, which the run scales down)."""
SCALING_CONDITION = "ScalingCoordinated"
AUTOSCALER_WHEN_NEEDED = "autoscaler-when-needed"
"""The patch that calls serving.ensure_autoscaler only when the scaler's inputs moved or a scaler of
ours is live (before it: every pass, four apiserver reads for a component with no scaler at all)."""


def loaded_copies(observation: ServiceObservation) -> int:
    """Ready pods of the engine's revisions that carry traffic (the copies of the model serving)."""
    for seen in observation.components:
        if seen.component is ComponentType.ENGINE:
            carrying = {w.revision for w in seen.traffic if w.weight > 0}
            return sum(r.ready_replicas for r in seen.revisions if r.revision in carrying)
    return 0


class Serving:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.held: ServingHold | None = None
        """The spec serves by reference and its model / runtime cannot serve it yet: what serves keeps
        serving, nothing new is rendered, and the service is observed again (not refused)."""
        self.placed = False
        """The source has spec.placement: its Ready condition is the placement workflow's."""
        self.by_reference = False
        """The last observation was rendered from a model and runtime (observed again every
        pacing.RESYNC_BY_REFERENCE)."""
        self.selects_accelerators = False
        """The inline spec selects an AcceleratorClass: a class edit re-renders it at the by-reference timer."""
        self.pin: tuple[str | None, str | None] = (None, None)
        """(status.pinnedRevisionName, status.lastRuntimeSyncToken) as last observed: autoSync false."""
        self.pin_dropped = False
        self.model_copies: int | None = None
        """Ready engine pods on revisions carrying traffic, for status.modelStatus.modelCopies."""
        self.overlays: tuple[list[dict[str, object]], list[str]] = ([], [])
        """(status.mountedOverlays, overlays left out with why) as last rendered."""
        self.ingress_settling = False
        """A route was applied again for a new ingress configuration: looked at soon, whatever the
        last verdict said (it was about the route before)."""
        self.expires_at: datetime | None = None
        """When spec.ttlSecondsAfterCreation deletes the service, as last observed (None: never)."""
        self.traffic_intent = (False, False)
        """(declared, reported) of spec.traffic / status.traffic as last observed (traffic_policy.py)."""
        self.scaling: ConditionUpdate | None = None
        """ScalingCoordinated as the last observation's coordination says (None: never coordinated)."""
        self.scaling_polled = False
        """A coordinating policy's anchor is a RawDeployment component: no event says its scaler moved the
        count, so the service looks again every pacing.RESYNC_COORDINATION."""
        self.expiry_recheck: datetime | None = None
        """Not before then: the delete found the ttl not yet passed by the worker's clock (it runs behind the
        server's), or another write raced it."""

    async def observe(self) -> tuple[RolloutSpec | None, ServiceObservation] | None:
        """Observe the service and keep what serves served; the rollout spec and the observation when
        the runs are to be planned from them (None: gone, a refused spec unchanged, held, or placed)."""
        ref = self.ctx.require_ref()
        observation = await workflow.execute_activity_method(
            ServingActivities.observe, ObserveInput(isvc=ref), **options.KUBE)
        if observation is None or observation.deleting:
            self.ctx.deleting = True
            return None
        state = self.ctx.state
        state.generation = observation.generation
        state.annotations = dict(observation.annotations)
        self.expires_at = observation.expires_at
        self.traffic_intent = (observation.traffic_declared, observation.traffic_reported)
        self.ingress_settling = False
        if observation.ingress is not None and observation.ingress != state.ingress:
            state.ingress = observation.ingress
            self.ctx.dirty = True
        if observation.placed != self.placed:
            self.placed = observation.placed
            self.ctx.dirty = True
        if self.ctx.refusal is not None:
            if self.ctx.refusal.generation == observation.generation:
                return None  # the refused spec has not changed: wait for the next generation
            self.ctx.refusal = None
            self.ctx.dirty = True
        self.by_reference = observation.by_reference
        self.selects_accelerators = observation.selects_accelerators
        if observation.held is None and (observation.mounted_overlays, observation.skipped_overlays) != self.overlays:
            self.overlays = (observation.mounted_overlays, observation.skipped_overlays)
            self.ctx.dirty = True
        if observation.by_reference and observation.held is None:
            copies = loaded_copies(observation)
            if copies != self.model_copies:
                self.model_copies = copies
                self.ctx.dirty = True
        pin = (observation.pinned_revision, observation.runtime_sync_token)
        if observation.held is None and pin != self.pin:
            self.pin_dropped = pin == (None, None)  # back to autoSync: the old pin leaves status
            self.pin = pin
            self.ctx.dirty = True
        if observation.held != self.held:
            if observation.held is not None:
                self.ctx.notes.append(status.held_note(observation.held))
            self.held = observation.held
            self.ctx.dirty = True
        if observation.held is not None:
            return None  # nothing to render: what serves keeps serving, the next poll looks again
        if observation.placed:
            # Member clusters serve it: the placement workflow writes the derived services there and
            # status.placement here. Nothing is rendered in this cluster, no rollout runs here.
            if state.components:
                state.components.clear()
                self.ctx.dirty = True
            return None
        targets = self._coordinate(observation)
        for seen in observation.components:
            await self._serve(seen, targets.get(seen.component))
        served = [c.component for c in observation.components]
        for gone in [c for c in state.components if c not in served]:
            view = state.components.pop(gone)
            if (view.autoscaler is not None or view.autoscaler_problem is not None) and workflow.patched(
                    REMOVED_COMPONENT_SCALER):
                # The component left the spec: the scaler of ours it had goes too (the activity finds no
                # component and deletes it), and its policy counts one reference less.
                await workflow.execute_activity_method(
                    AutoscalerActivities.ensure, EnsureAutoscalerInput(isvc=ref, component=gone), **options.KUBE)
                await self._nudge_policies(view.autoscaler_policy_workflow, None)
        spec = RolloutSpec.model_validate(observation.spec_rollout) if observation.spec_rollout else None
        return spec, observation

    def expiry_wait(self) -> float | None:
        """Seconds until spec.ttlSecondsAfterCreation deletes the service (0: due), None without one. Behind
        the patch: histories recorded before it observed no expiry and wait for none."""
        if self.expires_at is None or not workflow.patched(TTL_AFTER_CREATION):
            return None
        due = max(self.expires_at, self.expiry_recheck or self.expires_at)
        return max(0.0, (due - workflow.now()).total_seconds())

    async def delete_if_expired(self) -> bool:
        """Delete the service when its ttl has passed; True when it asked (then the object is observed again:
        a deleted service's observation ends the workflow, a moved ttl gives the new deadline). The activity
        judges by the object as it is then: an edit may have moved the ttl since this observation."""
        if self.expiry_wait() != 0.0:
            return False
        deleted = await workflow.execute_activity_method(ServingActivities.delete_expired,
                                                         ObserveInput(isvc=self.ctx.require_ref()), **options.KUBE)
        self.expiry_recheck = None if deleted else workflow.now() + timedelta(seconds=EXPIRY_RECHECK)
        self.ctx.changed = True
        return True

    def _coordinate(self, observation: ServiceObservation) -> dict[ComponentType, int]:
        """spec.scalingPolicy: each follower's count from the anchor's current count (the count its scaler
        set: the projected replica's /scale, or the replicas of the Deployment carrying its traffic; its
        minReplicas until either exists). Empty when nothing coordinates."""
        if observation.scaling_policy is None or not workflow.patched(SCALING_POLICY):
            if self.scaling is not None and self.scaling.status == "True":
                self._set_scaling(ConditionUpdate(type=SCALING_CONDITION, status="False", reason="Independent",
                                                  message="no scalingPolicy coordinates the components: each "
                                                          "scales independently"))
            self.scaling_polled = False
            return {}
        seen = {c.component: c for c in observation.components}
        try:
            plan = scaling_policy.plan(ScalingPolicy.model_validate(observation.scaling_policy), list(seen))
        except (scaling_policy.ScalingPolicyError, ValueError) as error:
            workflow.logger.warning("scalingPolicy not applied: %s", error)  # the observe activity refuses it
            return {}
        if plan is None:
            return {}
        anchor = seen[plan.anchor]
        count = self._current_count(anchor)
        bounds = {c: scaling_policy.bounds_of(o.desired_replicas, o.max_replicas) for c, o in seen.items()}
        targets = scaling_policy.desired_counts(plan, count, bounds)
        self.scaling_polled = anchor.replica is None
        followers = "; ".join(f"{c.value} {n} ({plan.describe(c)})" for c, n in sorted(
            targets.items(), key=lambda item: item[0].value)) or "no component follows"
        self._set_scaling(ConditionUpdate(type=SCALING_CONDITION, status="True", reason=plan.mode.value,
                                          message=f"{plan.anchor.value} {count} (anchor); {followers}"))
        return targets

    def _set_scaling(self, condition: ConditionUpdate) -> None:
        if condition != self.scaling:
            self.scaling = condition
            self.ctx.dirty = True

    def _current_count(self, seen: ComponentObservation) -> int:
        """The component's count as its scaler (or the service) left it."""
        if seen.replica is not None:
            return seen.scale_replicas if seen.scale_replicas is not None else seen.desired_replicas
        view = self.ctx.state.components.get(seen.component)
        moving = any(seen.component in (t.component for t in run.targets) for run in self.ctx.state.active.values())
        if view is not None and moving and workflow.patched(SCALING_DURING_RUN):
            # A run moves the anchor's pods between revisions (rolling, canary, blue-green): its serving
            # capacity is every revision carrying its traffic, not the stable one the run scales down.
            carrying = {w.revision for w in view.traffic if w.weight > 0} or {view.stable or ""}
            total = sum(r.replicas for r in seen.revisions if r.revision in carrying)
            return total if total > 0 else seen.desired_replicas
        stable = next((r for r in seen.revisions if view is not None and r.revision == view.stable), None)
        return stable.replicas if stable is not None else seen.desired_replicas

    async def _serve(self, seen: ComponentObservation, target: int | None = None) -> None:
        """Keep a component served: its first revision at 100%, stable replicas at the spec's
        count (a follower's: `target`, what spec.scalingPolicy derives) when no run moves it, and
        readiness of whatever carries its traffic."""
        ref = self.ctx.require_ref()
        desired = seen.desired_replicas if target is None else target
        whole = target if target is not None and seen.replica is not None else None
        view = self.ctx.state.components.setdefault(seen.component, ComponentView())
        ingress = self.ctx.state.ingress
        if ingress is None or ingress.problem_reason is None:
            view.url = seen.url  # else the last known: the ingress block that gave it cannot be read now
        view.address, view.route_status = seen.address, seen.route_status
        view.desired = seen.desired_revision
        view.replica, view.lifecycle = seen.replica, seen.lifecycle
        view.selected_accelerator = seen.selected_accelerator
        if view.stable is None and seen.traffic:
            view.stable = max(seen.traffic, key=lambda w: w.weight).revision
            view.traffic = list(seen.traffic)
        if view.stable is None:
            await workflow.execute_activity_method(
                ServingActivities.ensure_revision,
                EnsureRevisionInput(key=RevisionKey(isvc=ref, component=seen.component, revision=seen.desired_revision),
                                    replicas=desired, component_replicas=whole),
                **options.KUBE)
            weights = [TrafficWeight(revision=seen.desired_revision, weight=100)]
            await workflow.execute_activity_method(
                ServingActivities.set_traffic, SetTrafficInput(isvc=ref, component=seen.component, weights=weights),
                **options.KUBE)
            view.stable = seen.desired_revision
            view.traffic = weights
        revisions = {r.revision: r for r in seen.revisions}
        moving = any(seen.component in (t.component for t in run.targets) for run in self.ctx.state.active.values())
        stable = revisions.get(view.stable)
        if seen.ingress_drift and not moving:
            await self._reattach(seen)
        # A follower on a projected replica: its whole count is the target, whatever the revision was asked.
        off = whole is not None and seen.scale_replicas is not None and seen.scale_replicas != whole
        if (not moving and stable is not None and (stable.replicas != desired or off)
                and not self._scaler_owns_deployment(view)):
            if target is not None:
                before = stable.replicas if whole is None or seen.scale_replicas is None else seen.scale_replicas
                self.ctx.note(self._follower_note(seen.component, before, target))
            await workflow.execute_activity_method(
                ServingActivities.ensure_revision,
                EnsureRevisionInput(key=RevisionKey(isvc=ref, component=seen.component, revision=view.stable),
                                    replicas=desired, component_replicas=whole),
                **options.KUBE)
        if seen.replica is not None and workflow.patched(OMENATIVE_AUTOSCALER) and self._scaler_due(seen, view):
            # The service owns the scaler of its projected replica (seed: only the InferenceService
            # controller creates one): applied when its inputs move, mirrored while it is live.
            scaler = await workflow.execute_activity_method(
                AutoscalerActivities.ensure, EnsureAutoscalerInput(isvc=ref, component=seen.component),
                **options.KUBE)
            await self._take_scaler(seen.component, view, scaler, seen.autoscaler_digest)
        elif (seen.replica is None and view.stable is not None and self._raw_scaler_due(seen, view)
              and workflow.patched(RAW_AUTOSCALER)):
            # A RawDeployment component's scaler targets the Deployment of the revision carrying its
            # traffic; a new stable revision moves it there.
            scaler = await workflow.execute_activity_method(
                AutoscalerActivities.ensure,
                EnsureAutoscalerInput(isvc=ref, component=seen.component, revision=view.stable), **options.KUBE)
            await self._take_scaler(seen.component, view, scaler, f"{seen.autoscaler_digest}@{view.stable}")
            if scaler.problem is None:
                owning = class_owns_count((scaler.status or {}).get("class"))
                view.autoscaler_target = revision_name(ref.name, seen.component.value, view.stable) if owning else None
        carrying = [w.revision for w in view.traffic if w.weight > 0] or [view.stable]
        view.serving_ready = any(revisions[r].ready_replicas > 0 for r in carrying if r in revisions)
        if view.latest_ready is None and stable is not None and stable.ready_replicas > 0:
            view.latest_ready = view.stable

    def _follower_note(self, component: ComponentType, before: int, after: int) -> EventNote | None:
        """The Normal Event of a follower whose count moves because of the anchor's."""
        if before == after or self.scaling is None:
            return None
        return EventNote(type="Normal", reason="FollowerScaled",
                         message=f"{component.value} {before} -> {after} replicas: {self.scaling.message}")

    async def _reattach(self, seen: ComponentObservation) -> None:
        """The ingress configuration changed since the component's route was programmed (a Gateway
        set or removed, another domain, the entrypoint moved): apply the route again with the split
        it carries, so existing services follow the operator's configuration. Only while no run moves
        the component (a run's own set_traffic renders the new attachment, and two writers of one
        split could undo each other). A drift is new data (older histories decode it as False), so
        replaying them schedules no such call."""
        weights = [w for w in seen.traffic if w.weight > 0]
        if not weights or sum(w.weight for w in weights) != 100:
            return  # not a split this workflow programmed: leave it to the next run
        try:
            await workflow.execute_activity_method(
                ServingActivities.set_traffic,
                SetTrafficInput(isvc=self.ctx.require_ref(), component=seen.component, weights=weights), **options.KUBE)
        except ActivityError as error:
            # The live split cannot be programmed again (a backend's Service deleted behind our
            # back): housekeeping, not the user's spec, so no refusal. The route keeps serving as it
            # is, IngressReady keeps saying it is not attached, and the next look tries again.
            if error_type_of(error) is not ErrorType.INVALID_TRAFFIC:
                raise
            workflow.logger.warning("%s route not re-attached: %s", seen.component.value, error_message(error))
            return
        self.ingress_settling = True

    async def _take_scaler(self, component: ComponentType, view: ComponentView, scaler: AutoscalerObservation,
                           applied: str | None) -> None:
        """What serving.ensure_autoscaler answered: the scaler's status, or (its policy did not render)
        the problem, the last good scaler and its status staying as they were."""
        problem = (scaler.problem.reason, scaler.problem.message) if scaler.problem is not None else None
        if problem != view.autoscaler_problem:
            self.ctx.note(status.autoscaler_note(component, view.autoscaler_problem, problem))
            view.autoscaler_problem = problem
            self.ctx.dirty = True
        if problem is None:
            if scaler.status != view.autoscaler and workflow.patched(SCALER_MIRROR_WRITES):
                # The scaler's own news (KEDA's verdict, the counts) is written even when nothing else of
                # the service moved: before this patch it waited for another change to dirty the status.
                self.ctx.dirty = True
            view.autoscaler = scaler.status
            policy = (scaler.status or {}).get("policy")
            named = policy.get("name") if isinstance(policy, dict) else None
            view.autoscaler_policy = str(named) if named else None
        view.autoscaler_applied = applied
        ref = self.ctx.require_ref()
        wid = (contract.autoscaler_policy_workflow_id(ref.namespace or "", scaler.policy_name, scaler.policy_uid)
               if scaler.policy_name and scaler.policy_uid else None)
        if wid != view.autoscaler_policy_workflow:
            await self._nudge_policies(view.autoscaler_policy_workflow, wid)
            view.autoscaler_policy_workflow = wid

    async def _nudge_policies(self, before: str | None, after: str | None) -> None:
        """Tell the AutoscalerPolicy workflows whose count of this service's references moved to recount
        (best effort: a policy whose workflow is not running counts when it starts, and every resync)."""
        if before == after or not workflow.patched(AUTOSCALER_POLICY_NUDGES):
            return
        for wid in (w for w in (before, after) if w):
            try:
                await workflow.get_external_workflow_handle(wid).signal(contract.Signal.REFRESH_NOW)
            except Exception as error:
                workflow.logger.debug("AutoscalerPolicy workflow %s not signalled: %s", wid, error)

    async def release_policies(self) -> None:
        """The service is going: every policy it referenced counts it no more."""
        for view in self.ctx.state.components.values():
            if view.autoscaler_policy_workflow:
                await self._nudge_policies(view.autoscaler_policy_workflow, None)

    @staticmethod
    def _scaler_owns_deployment(view: ComponentView) -> bool:
        """A RawDeployment component whose scaler (ours or External) writes its Deployment's count: the
        service no longer resets it to minReplicas."""
        return view.autoscaler_target is not None and class_owns_count((view.autoscaler or {}).get("class"))

    @staticmethod
    def _raw_scaler_due(seen: ComponentObservation, view: ComponentView) -> bool:
        """A RawDeployment component has a scaler to keep: a block or a policy ref (observe gives it a
        digest), or one of ours is live or was (to mirror it, move it, or delete it)."""
        if seen.autoscaler_digest is None and view.autoscaler is None:
            return False
        live = (view.autoscaler or {}).get("managedBy") == AutoscalerManagedBy.OME.value
        return live or f"{seen.autoscaler_digest}@{view.stable}" != view.autoscaler_applied

    @staticmethod
    def _scaler_due(seen: ComponentObservation, view: ComponentView) -> bool:
        live = (view.autoscaler or {}).get("managedBy") == AutoscalerManagedBy.OME.value
        changed = seen.autoscaler_digest is None or seen.autoscaler_digest != view.autoscaler_applied
        return live or changed or not workflow.patched(AUTOSCALER_WHEN_NEEDED)

