"""When the InferenceService workflow looks at its service again with no news: the polls for what no
event of the object reports (components becoming ready, a parked group's policy appearing, a model or
runtime rendered by reference moving, the Gateway's verdict on a route, a failed annotation removal
to retry, a soak ending). Each wait that backs off remembers when it began.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.workflows.inference_service.annotations import Annotations
    from servingops.workflows.inference_service.context import ServiceContext
    from servingops.workflows.inference_service.serving import Serving
    from servingops.workflows.inference_service.traffic_policy import TrafficPolicy
    from servingops.workflows.rollout import status
    from servingops.workflows.rollout.steps import poll_interval

RESYNC_PARKED = 60.0
"""How often a parked group re-tries resolving its policy (it may have been created since)."""
RESYNC_BY_REFERENCE = 30.0
"""How often a service rendered from a model and runtime is observed again without an event of its
own: a runtime edit (autoSync) or a model change re-renders, and a new template rolls out."""
RESYNC_HELD = 60.0
"""The longest wait between looks at a held spec's model and runtime (sooner at first)."""
RETRY_REMOVAL = 60.0
"""How soon a consumed annotation whose removal failed is tried again (a pass re-reads it first)."""
RESYNC_INGRESS_WAIT = 60.0
"""The longest wait between looks at routes the Gateway has not accepted yet (sooner at first): its
verdict is written on the HTTPRoute, and no event of the InferenceService says it arrived."""
RESYNC_POLICY_WAIT = 60.0
"""The longest wait between looks at a backend traffic policy Envoy Gateway has not judged yet (sooner at
first): its verdict is on the BackendTrafficPolicy, which no event of the InferenceService reports."""
RESYNC_SCALER_WAIT = 60.0
"""The longest wait between looks at a KEDA ScaledObject of ours that KEDA has not said Ready True about
(sooner at first): KEDA writes its verdict (Ready, or Ready False with its reason when it cannot run a
trigger) on the ScaledObject, which no event of the InferenceService reports."""
SCALER_READINESS_POLL = "scaler-readiness-poll"
"""The patch that polls a not-yet-Ready ScaledObject of ours (histories from before it schedule no
such timer)."""
RESYNC_COORDINATION = 10.0
"""How often a service whose spec.scalingPolicy anchor is a RawDeployment component is observed again: its
scaler writes the Deployment's count, and no event of the InferenceService says so (an OMENative anchor's
replica reports its own changes)."""
RESYNC_INGRESS = 293.0
"""How often a service whose routes are settled is observed again (about 5 minutes): a Gateway that
later refuses a route turns IngressReady (and Ready) False within this long, and a change of the
operator's ingress block (a Gateway configured after the service was served) reaches its routes.
Neither is an event of the InferenceService; the cost is one observe (and status write) per
service per interval. Not a round number: at 300 s it came due at the instant a run's 5m
readyTimeout report woke the service, and the time-skipping test server refuses the CancelTimer
of a timer that fires while the task is with the worker (temporalio/sdk-java#2606, #3088; see
tests/test_replica_workflow.py). The real server takes it; the tests would strand the run."""


class Pacing:
    def __init__(self, ctx: ServiceContext, serving: Serving, annotations: Annotations,
                 traffic: TrafficPolicy) -> None:
        self.ctx = ctx
        self.serving = serving
        self.annotations = annotations
        self.traffic = traffic
        self.policy_since: datetime | None = None
        """When the current wait for Envoy Gateway's verdict on the backend traffic policy began."""
        self.unready_since: datetime | None = None
        """When the current wait for components to serve began (paces the readiness poll)."""
        self.held_since: datetime | None = None
        """When the current wait for a held spec's model and runtime began."""
        self.ingress_since: datetime | None = None
        """When the current wait for the Gateway to accept the routes began (paces its poll)."""
        self.scaler_since: datetime | None = None
        """When the current wait for KEDA's Ready on a ScaledObject of ours began (paces its poll)."""

    def next_wake(self) -> float | None:
        """Seconds until the next look without news (None: only news wakes the service)."""
        waits: list[float] = []
        # A refused spec is not polled: nothing will serve until a new generation arrives.
        if self.ctx.refusal is None and any(not v.serving_ready for v in self.ctx.state.components.values()):
            self.unready_since = self.unready_since or workflow.now()
            waits.append(poll_interval(workflow.now() - self.unready_since, self.ctx.settings.poll_seconds))
        else:
            self.unready_since = None
        if self.ctx.state.parked:
            waits.append(RESYNC_PARKED)
        if self.serving.by_reference or self.serving.selects_accelerators:
            # A class edit is no event of this object either (an inline service that selects a class).
            waits.append(RESYNC_BY_REFERENCE)
        if self.serving.held is not None:
            # A model turns Ready, a runtime appears: no event of this object says so.
            self.held_since = self.held_since or workflow.now()
            waits.append(poll_interval(workflow.now() - self.held_since, RESYNC_HELD))
        else:
            self.held_since = None
        if self.serving.scaling_polled and self.ctx.refusal is None:
            waits.append(RESYNC_COORDINATION)
        if self.annotations.removal_failed:
            waits.append(RETRY_REMOVAL)
        if self.ctx.state.soak_until is not None:
            waits.append(max(0.0, (self.ctx.state.soak_until - workflow.now()).total_seconds()))
        waits.extend(self._ingress_wait())
        if self.traffic.awaiting_verdict():
            self.policy_since = self.policy_since or workflow.now()
            waits.append(poll_interval(workflow.now() - self.policy_since, RESYNC_POLICY_WAIT))
        else:
            self.policy_since = None
        if self.ctx.refusal is None and any(keda_unsettled(v.autoscaler) for v in self.ctx.state.components.values()
                                            ) and workflow.patched(SCALER_READINESS_POLL):
            self.scaler_since = self.scaler_since or workflow.now()
            waits.append(poll_interval(workflow.now() - self.scaler_since, RESYNC_SCALER_WAIT))
        else:
            self.scaler_since = None
        expiry = self.serving.expiry_wait()
        if expiry is not None:
            waits.append(expiry)
        return min(waits) if waits else None

    def _ingress_wait(self) -> list[float]:
        """Polls for what no event of this object brings (the Gateway's verdict, the operator's ingress
        block): soon while a route is not accepted, every few minutes once all are. None for an
        observation from before the ingress block (histories recorded then replay without these
        timers) or a refused spec."""
        ingress = self.ctx.state.ingress
        condition = status.ingress_condition(ingress, self.ctx.state.components)
        if self.ctx.refusal is not None or ingress is None or condition is None:
            self.ingress_since = None
            return []
        if self.serving.ingress_settling or not status.ingress_ready(condition):
            self.ingress_since = self.ingress_since or workflow.now()
            return [poll_interval(workflow.now() - self.ingress_since, RESYNC_INGRESS_WAIT)]
        self.ingress_since = None
        return [RESYNC_INGRESS]


def keda_unsettled(mirrored: dict[str, object] | None) -> bool:
    """A ScaledObject of ours (status.components[c].autoscaler, API form) whose mirrored conditions do not
    say Ready True: KEDA has not judged it yet, or refused it (Ready False, its reason and message)."""
    if not mirrored or mirrored.get("class") != "KEDA" or mirrored.get("managedBy") != "ome":
        return False
    conditions = mirrored.get("conditions")
    listed: list[object] = conditions if isinstance(conditions, list) else []
    return not any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True" for c in listed)
