"""An in-memory cluster and Prometheus behind FAKE activities registered under the real names
(serving.*, prometheus.evaluate, kube.patch_status, kube.read_object), for time-skipping
tests of the rollout workflows.

Pods become Ready a configurable delay after they are created, measured on the test server's
clock (the one the workflows' timers use), so an hour-long pause and a 10 s warm-up compose the
way they would on a real cluster. Every traffic change and status write is recorded so a test can
check HTTPRoute weights and CanaryStatus after every transition.

HTTPRoutes are kept as the objects the real activity applies (render.http_route, with the
parentRefs and hostnames of `ingress`, the operator's ingress block, read through the same pure
rules as the real activities: rendering/ingress.py), with a generation that moves when
their spec does. A test plays the Gateway with `gateway_verdict` (the route's status.parents).

The fake answers as the real activities do, and tests/test_serving_conformance.py runs the same
cases against both. A call the real activity refuses is refused here with the same permanent
error type (so the workflow sees what it would see on a cluster) and is also recorded in
`violations`: `served()` (testkit/rollout_harness.py) fails the test when a workflow made one,
instead of the call retrying forever as an assert inside an activity would.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from servingops.activities.kubernetes import AnnotationRemoval, EventNote, StatusPatch
from servingops.activities.prometheus import EvaluateInput, Evaluation, MetricOutcome
from servingops.activities.serving.types import (
    ComponentObservation,
    EnsureRevisionInput,
    ObserveInput,
    RevisionKey,
    RevisionObservation,
    ScaleThenRouteInput,
    ScaleThenRouteResult,
    ServiceObservation,
    SetTrafficInput,
)
from servingops.api_models.contract import AnnotationEvent
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.operator_config import IngressConfig, OperatorConfigError, OperatorDefaults, PrometheusSource
from servingops.api_models.refs import ObjectRef
from servingops.api_models.serving import TrafficWeight
from servingops.rendering import ingress, render
from testkit.traffic_policy_fakes import FakeBackendPolicies

NAMESPACE = "team-a"
NAME = "llama"


@dataclass
class Revision:
    pods: list[float] = field(default_factory=list)
    """Ready-at times (test clock seconds) of the revision's pods."""
    replicas: int = 0

    def ready(self, now: float) -> int:
        return sum(1 for ready_at in self.pods if ready_at <= now)


@dataclass
class Point:
    """The state of one component right after a mutation."""

    at: float
    component: ComponentType
    total: int
    ready: int
    revisions: dict[str, int]


class FakePrometheus:
    """Answers each sample from a script: "pass", "fail", "down" (unreachable: inconclusive),
    "nodata" (empty result: inconclusive), "error" (the activity raises). When the script runs
    out, `default` answers."""

    def __init__(self) -> None:
        self.script: list[str] = []
        self.default = "pass"
        self.samples: list[EvaluateInput] = []

    def answer(self, request: EvaluateInput) -> Evaluation:
        self.samples.append(request)
        kind = self.script.pop(0) if self.script else self.default
        if kind == "error":
            raise application_error(ErrorType.PROMETHEUS_ERROR, "prometheus query failed: 503")
        outcomes = []
        for index, metric in enumerate(request.metrics):
            if kind == "pass":
                outcomes.append(MetricOutcome(name=metric.name, value="0.01", passed=True, message=""))
            elif kind == "fail" and index == 0:
                outcomes.append(MetricOutcome(name=metric.name, value="0.5", passed=False,
                                              message=f"0.5 is not {metric.operator} {metric.threshold}"))
            elif kind == "fail":
                outcomes.append(MetricOutcome(name=metric.name, value="0.01", passed=True, message=""))
            else:
                message = "no data" if kind == "nodata" else "connection refused"
                outcomes.append(MetricOutcome(name=metric.name, value=None, passed=None, message=message))
        return Evaluation(metrics=outcomes)


class FakeCluster:
    def __init__(self, env: WorkflowEnvironment, *, ready_delay: float = 10.0) -> None:
        self.env = env
        self.uid = str(uuid.uuid4())
        self.ref = ObjectRef(group="ome.io", version="v1beta1", plural="inferenceservices",
                             kind="InferenceService", name=NAME, namespace=NAMESPACE, uid=self.uid)
        self.owner = render.Owner(name=NAME, namespace=NAMESPACE, uid=self.uid)
        self.ready_delay = ready_delay
        self.delay_for: dict[tuple[ComponentType, str], float] = {}
        """Per (component, revision) readiness delay; float('inf') never becomes Ready."""
        self.generation = 1
        self.annotations: dict[str, str] = {}
        self.annotation_writes = 0
        """How many annotation changes were made: each one's resourceVersion, as an apiserver's grows."""
        self.spec_rollout: dict[str, Any] | None = None
        self.deleting = False
        self.gone = False
        self.created_at: datetime | None = None
        """The object's creationTimestamp: the test clock when the first observe read it (its ttl counts from it)."""
        self.ttl_seconds: int | None = None
        self.selects_accelerators = False
        """An inline spec selecting an AcceleratorClass (serving.observe's selects_accelerators)."""
        """spec.ttlSecondsAfterCreation."""
        self.expired: list[datetime] = []
        """When serving.delete_expired deleted the object (test clock)."""
        self.desired: dict[ComponentType, tuple[str, int]] = {}
        self.revisions: dict[ComponentType, dict[str, Revision]] = {}
        self.routes: dict[ComponentType, list[TrafficWeight]] = {}
        self.route_objects: dict[ComponentType, dict[str, Any]] = {}
        """Each component's HTTPRoute as the real activity would leave it (spec, generation, status)."""
        self.ingress: IngressConfig | OperatorConfigError = IngressConfig()
        """The operator ConfigMap's ingress block as the serving activities read it (an
        OperatorConfigError: the block does not parse)."""
        self.status: dict[str, Any] = {}
        self.conditions: dict[str, dict[str, Any]] = {}
        self.patches: list[dict[str, Any]] = []
        self.route_log: list[tuple[float, ComponentType, list[TrafficWeight]]] = []
        self.points: list[Point] = []
        self.policies: dict[str, dict[str, Any]] = {}
        self.prometheus = FakePrometheus()
        self.operator = OperatorDefaults(default_source=PrometheusSource(address="http://prometheus.test:9090"))
        """What the operator ConfigMap says; read by each run as it opens."""
        self.deleted: list[tuple[ComponentType, str, float]] = []
        self.unservable: dict[ComponentType, str] = {}
        """Component -> why its spec cannot be rendered: creating a revision of it is refused
        (InvalidSpec, permanent), as the real activity refuses a component with nothing to run."""
        self.events: list[EventNote] = []
        """Every Event note the workflows asked kube.patch_status to record, in order."""
        self.refusals: list[tuple[ComponentType, str]] = []
        """Every (component, revision) whose creation was refused as unservable."""
        self.removed_annotations: list[tuple[float, str, str]] = []
        """(test clock, name, value) of every annotation kube.remove_annotation removed."""
        self.metadata_writes_fail = False
        """While set, kube.remove_annotation fails as when the apiserver is away (retryable)."""
        self.failed_removals = 0
        self.bridge: Callable[[str, str | None], Awaitable[None]] | None = None
        """Tells the workflow about an annotation the fake changed, as the bridge would (the harness sets it)."""
        self.backend_policies = FakeBackendPolicies(self)
        """serving.ensure_backend_policy's side: spec.traffic, the namespace's BackendTrafficPolicies."""
        self.violations: list[str] = []
        """Calls the real activity would refuse (a split not adding up to 100, traffic to a revision
        without a Service, deleting a revision that has traffic...): each is answered with the real
        error and recorded here; `served()` fails the test when any was made."""

    # -- test-side edits ----------------------------------------------------------------------

    def annotation_event(self, name: str, value: str | None) -> AnnotationEvent:
        """What the bridge sends for a change of one of the object's annotations: a new write, so a
        resourceVersion above every earlier one."""
        self.annotation_writes += 1
        return AnnotationEvent(uid=self.uid, generation=self.generation, resource_version=str(self.annotation_writes),
                               name=name, value=value)

    def set_desired(self, component: ComponentType, revision: str, replicas: int = 4) -> None:
        """Edit the spec so the component renders `revision` (a new generation)."""
        self.desired[component] = (revision, replicas)
        self.revisions.setdefault(component, {})
        self.generation += 1

    def set_rollout(self, rollout: dict[str, Any] | None) -> None:
        self.spec_rollout = rollout
        self.generation += 1

    # -- reading --------------------------------------------------------------------------------

    def weights(self, component: ComponentType) -> dict[str, int]:
        return {w.revision: w.weight for w in self.routes.get(component, []) if w.weight > 0}

    def canary(self, component: ComponentType = ComponentType.ENGINE) -> dict[str, Any]:
        return dict(self.status.get("components", {}).get(component.value, {}).get("canary") or {})

    def component(self, component: ComponentType = ComponentType.ENGINE) -> dict[str, Any]:
        return dict(self.status.get("components", {}).get(component.value) or {})

    def replicas(self, component: ComponentType, revision: str) -> int | None:
        rev = self.revisions.get(component, {}).get(revision)
        return rev.replicas if rev else None

    def hold_unready(self, component: ComponentType, revision: str, pods: int = 1) -> None:
        """Make `pods` of the revision's Ready pods unready for good (a failing readiness probe)."""
        rev = self.revisions[component][revision]
        rev.pods.sort()
        for index in range(min(pods, len(rev.pods))):
            rev.pods[index] = float("inf")
        rev.pods.sort()

    def gateway_verdict(self, component: ComponentType, parents: list[dict[str, Any]]) -> None:
        """Play the Gateway: set the component's HTTPRoute status.parents (the route must exist)."""
        self.route_objects[component]["status"] = {"parents": [dict(p) for p in parents]}

    def route_generation(self, component: ComponentType) -> int:
        return int(self.route_objects[component]["metadata"]["generation"])

    def _routing(self) -> ingress.Routing:
        return ingress.routing(self.ingress, NAME, NAMESPACE, self.desired)

    def _apply_route(self, component: ComponentType, weights: list[TrafficWeight]) -> None:
        """Server-side apply, as the real set_traffic does: the generation moves only when the spec
        does, the status (the Gateway's) stays, and managedFields say which spec fields we own."""
        attachment = (self._routing().attachments or {}).get(component)
        if attachment is None:  # the attachment cannot be rendered now: the route keeps its own
            attachment = ingress.live_attachment(self.route_objects.get(component))
        body = render.http_route(self.owner, component, weights, attachment)
        before = self.route_objects.get(component)
        generation = int(before["metadata"]["generation"]) if before else 0
        if before is None or before["spec"] != body["spec"]:
            generation += 1
        body["metadata"]["generation"] = generation
        body["metadata"]["managedFields"] = [{"manager": "servingops", "operation": "Apply", "fieldsV1": {
            "f:spec": {f"f:{key}": {} for key in body["spec"]}}}]
        if before is not None and "status" in before:
            body["status"] = before["status"]
        self.route_objects[component] = body

    def refuse(self, error_type: ErrorType, message: str) -> Exception:
        """What the real activity raises for this call, recorded as a violation."""
        self.violations.append(f"{error_type.value}: {message}")
        return application_error(error_type, message)

    # -- the activities -------------------------------------------------------------------------

    async def now(self) -> float:
        return (await self.env.get_current_time()).timestamp()

    def _observe_revision(self, name: str, rev: Revision, now: float) -> RevisionObservation:
        return RevisionObservation(revision=name, replicas=rev.replicas, ready_replicas=rev.ready(now),
                                   updated_replicas=rev.replicas)

    def _record(self, component: ComponentType, now: float) -> None:
        revs = self.revisions.get(component, {})
        self.points.append(Point(at=now, component=component, total=sum(r.replicas for r in revs.values()),
                                 ready=sum(r.ready(now) for r in revs.values()),
                                 revisions={name: r.replicas for name, r in revs.items()}))

    @staticmethod
    def is_split(weights: list[TrafficWeight]) -> bool:
        """What an HTTPRoute can carry: each revision once, weights 0-100 adding up to 100."""
        revisions = [w.revision for w in weights]
        return bool(weights) and len(set(revisions)) == len(revisions) and all(0 <= w.weight <= 100 for w in weights) \
            and sum(w.weight for w in weights) == 100

    def activities(self) -> list[Callable[..., Any]]:
        cluster = self

        @activity.defn(name="serving.observe")
        async def observe(request: ObserveInput) -> ServiceObservation | None:
            now = await cluster.now()
            if cluster.gone:
                return None
            cluster.created_at = cluster.created_at or datetime.fromtimestamp(now, UTC)
            components = []
            routing = cluster._routing()
            for component, (revision, replicas) in cluster.desired.items():
                revs = cluster.revisions.get(component, {})
                route = cluster.routes.get(component)
                # Like the real one: the component's address exists once its HTTPRoute does.
                address = render.component_url(cluster.owner, component) if route is not None else None
                url, route_status, drift = routing.observe(component, cluster.route_objects.get(component),
                                                           address, "servingops")
                components.append(ComponentObservation(
                    component=component, desired_revision=revision, desired_replicas=replicas,
                    revisions=[cluster._observe_revision(n, r, now) for n, r in revs.items()],
                    traffic=list(route or []), url=url, address=address, route_status=route_status,
                    ingress_drift=drift))
            return ServiceObservation(uid=cluster.uid, generation=cluster.generation,
                                      resource_version=str(cluster.generation), deleting=cluster.deleting,
                                      annotations={k: v for k, v in cluster.annotations.items()
                                                   if k.startswith("ome.io/rollout-")},
                                      spec_rollout=cluster.spec_rollout, components=components,
                                      ingress=routing.observation(), expires_at=cluster.expires_at(),
                                      traffic_declared=cluster.backend_policies.declared(),
                                      traffic_reported="traffic" in cluster.status,
                                      selects_accelerators=cluster.selects_accelerators)

        @activity.defn(name="serving.ensure_revision")
        async def ensure_revision(request: EnsureRevisionInput) -> RevisionObservation:
            now = await cluster.now()
            key = request.key
            if request.replicas < 0:
                raise cluster.refuse(ErrorType.INVALID_INPUT, f"replicas must be >= 0, got {request.replicas}")
            if cluster.gone:
                raise application_error(ErrorType.OBJECT_GONE, f"{cluster.ref.describe()} is gone")
            revs = cluster.revisions.setdefault(key.component, {})
            rev = revs.get(key.revision)
            if rev is None:
                if cluster.desired.get(key.component, ("", 0))[0] != key.revision:
                    raise application_error(ErrorType.REVISION_SUPERSEDED, f"{key.revision} is no longer rendered")
                why = cluster.unservable.get(key.component)
                if why is not None:
                    cluster.refusals.append((key.component, key.revision))
                    raise application_error(ErrorType.INVALID_SPEC, why)
                rev = revs[key.revision] = Revision()
            delay = cluster.delay_for.get((key.component, key.revision), cluster.ready_delay)
            while len(rev.pods) < request.replicas:
                rev.pods.append(now + delay)
            if len(rev.pods) > request.replicas:
                # Like a ReplicaSet: the not-yet-Ready (newest) pods go first.
                rev.pods.sort()
                del rev.pods[request.replicas:]
            rev.replicas = request.replicas
            cluster._record(key.component, now)
            return cluster._observe_revision(key.revision, rev, now)

        @activity.defn(name="serving.revision_status")
        async def revision_status(key: RevisionKey) -> RevisionObservation:
            # Like the real activity: 0/0 for a revision without a Deployment.
            now = await cluster.now()
            rev = cluster.revisions.get(key.component, {}).get(key.revision)
            return cluster._observe_revision(key.revision, rev or Revision(), now)

        @activity.defn(name="serving.set_traffic")
        async def set_traffic(request: SetTrafficInput) -> None:
            now = await cluster.now()
            weights = request.weights
            revisions = [w.revision for w in weights]
            if not cluster.is_split(weights):
                raise cluster.refuse(ErrorType.INVALID_TRAFFIC, f"not a split: {weights}")
            if cluster.gone:
                raise application_error(ErrorType.OBJECT_GONE, f"{cluster.ref.describe()} is gone")
            # Every backend named needs its Service, a zero weight too (the HTTPRoute names it).
            missing = [r for r in revisions if r not in cluster.revisions.get(request.component, {})]
            if missing:
                raise cluster.refuse(ErrorType.INVALID_TRAFFIC, f"no Service for revision(s) {', '.join(missing)} "
                                                                f"of {request.component.value}")
            cluster.routes[request.component] = list(weights)
            cluster._apply_route(request.component, list(weights))
            cluster.route_log.append((now, request.component, list(weights)))

        @activity.defn(name="serving.scale_then_route")
        async def scale_then_route(request: ScaleThenRouteInput) -> ScaleThenRouteResult:
            if not request.revisions:
                raise cluster.refuse(ErrorType.INVALID_INPUT, "no revision to scale")
            isvc = request.revisions[0].key.isvc
            if any(r.key.isvc != isvc for r in request.revisions) or any(r.isvc != isvc for r in request.routes):
                raise cluster.refuse(ErrorType.INVALID_INPUT, "one call serves one InferenceService")
            for route in request.routes:  # refused before anything moves, as the real one
                if not cluster.is_split(route.weights):
                    raise cluster.refuse(ErrorType.INVALID_TRAFFIC, f"not a split: {route.weights}")
            scaled = [await ensure_revision(revision) for revision in request.revisions]
            routed = bool(request.routes) and all(seen.ready_replicas >= asked.replicas
                                                  for seen, asked in zip(scaled, request.revisions, strict=True))
            if routed:
                for route in request.routes:
                    await set_traffic(route)
            return ScaleThenRouteResult(scaled=scaled, routed=routed)

        @activity.defn(name="serving.delete_revision")
        async def delete_revision(key: RevisionKey) -> None:
            now = await cluster.now()
            weight = cluster.weights(key.component).get(key.revision, 0)
            if weight:
                raise cluster.refuse(ErrorType.REVISION_SERVING_TRAFFIC,
                                     f"revision {key.revision} of {key.component.value} still has weight {weight}")
            if cluster.revisions.get(key.component, {}).pop(key.revision, None) is not None:
                cluster.deleted.append((key.component, key.revision, now))
                cluster._record(key.component, now)

        @activity.defn(name="serving.delete_expired")
        async def delete_expired(request: ObserveInput) -> bool:
            # As the real one: judged by the object as it is now; a deleted object (no finalizer) is gone.
            now = datetime.fromtimestamp(await cluster.now(), UTC)
            deadline = cluster.expires_at()
            if cluster.gone or cluster.deleting or deadline is None or deadline > now:
                return False
            cluster.gone = True
            cluster.expired.append(now)
            return True

        @activity.defn(name="prometheus.evaluate")
        async def evaluate(request: EvaluateInput) -> Evaluation:
            return cluster.prometheus.answer(request)

        @activity.defn(name="kube.patch_status")
        async def patch_status(patch: StatusPatch) -> bool:
            # Like the real one: False only once the object is gone; an object being deleted
            # (a finalizer holds it) still takes status writes.
            if cluster.gone:
                return False
            for key, value in patch.status.items():
                if value is None:
                    cluster.status.pop(key, None)
                else:
                    cluster.status[key] = value
            for condition in patch.conditions:
                cluster.conditions[condition.type] = condition.model_dump()
            cluster.patches.append(dict(patch.status))
            cluster.events.extend(patch.events)
            return True

        @activity.defn(name="kube.remove_annotation")
        async def remove_annotation(removal: AnnotationRemoval) -> bool:
            now = await cluster.now()
            if cluster.metadata_writes_fail:
                cluster.failed_removals += 1
                raise ApplicationError("the apiserver is unavailable")  # retryable, as the client's error
            if cluster.gone or cluster.annotations.get(removal.name) != removal.value:
                return False
            del cluster.annotations[removal.name]
            cluster.removed_annotations.append((now, removal.name, removal.value))
            if cluster.bridge is not None:
                await cluster.bridge(removal.name, None)
            return True

        @activity.defn(name="kube.read_object")
        async def read_object(ref: ObjectRef) -> dict[str, Any] | None:
            return cluster.policies.get(ref.name)

        @activity.defn(name="operator.config")
        async def operator_config() -> OperatorDefaults:
            return cluster.operator

        return [observe, ensure_revision, revision_status, set_traffic, scale_then_route, delete_revision, evaluate,
                patch_status, remove_annotation, read_object, operator_config, delete_expired,
                cluster.backend_policies.activity()]

    def expires_at(self) -> datetime | None:
        if self.ttl_seconds is None or self.created_at is None:
            return None
        return self.created_at + timedelta(seconds=self.ttl_seconds)


async def until(env: WorkflowEnvironment, predicate: Callable[[], bool], *, step: float = 1.0,
                real_seconds: float = 60.0, what: str = "") -> None:
    """Skip test time in `step`s until `predicate` holds (bounded in real time)."""
    deadline = time.monotonic() + real_seconds
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what or predicate}"
        await env.sleep(step)
        await asyncio.sleep(0)


async def register_search_attributes(env: WorkflowEnvironment) -> None:
    """The workflows publish kind/namespace/name/phase; the test server must know them."""
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest

    from servingops.api_models.contract import search_attributes

    await env.client.operator_service.add_search_attributes(AddSearchAttributesRequest(
        namespace=env.client.namespace,
        search_attributes={key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for key in search_attributes.ALL}))
