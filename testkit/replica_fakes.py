"""An in-memory InferenceReplica, its pods and ControllerRevisions behind FAKE activities registered
under the real names (replica.*, kube.patch_status, operator.config), for time-skipping tests of
the replica engine (tests/test_replica_workflow.py).

The fake kubelet works on the test server's clock: a pod's containers turn ready `ready_delay`
seconds after it is created (never, when its first container's image is in `broken_images`), and
the pod is Ready only while its ome.io/serving gate is True, as a kubelet (and kwok's stages)
report it; a deleted pod is gone `delete_delay` seconds later, or once released when
`hold_deletion` keeps it terminating (a finalizer would). Tests make pods fail, restart or vanish
through `fail_pod`, `restart_pod`, `lose_pod`. `quota` caps the pod count as a ResourceQuota would
(the create is refused, QuotaExceeded); `gate_new_pods` holds new pods at a scheduling gate until
`ungate`; `kueue_capacity` plays Kueue (pods naming a queue wait at its gate until it admits them).
After every call that changes pods, the serving Instance count is sampled into `serving_log`, so a
test can prove a rollout never dipped below its budget.

The fake answers as the real activities do (tests/test_replica_conformance.py runs the same cases
against both): pods, names, labels and revision names come from the activities' own pure parts
(activities/replica/pods.py, revisions.py, in_place.py), only the apiserver and the kubelet are
simulated. A call the real activity would refuse is answered with its error and recorded in
`violations`.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.testing import WorkflowEnvironment

from servingops.activities.kubernetes import EventNote, EventSpec, StatusPatch
from servingops.activities.migration import ledger
from servingops.activities.migration.types import (
    EndpointQuery,
    LedgerWrite,
    LedgerWritten,
    RequestRemoval,
    Resolved,
    ResolveInput,
)
from servingops.activities.replica import in_place
from servingops.activities.replica import pods as render
from servingops.activities.replica.activities import MAX_COLLISIONS, QUOTA_EXCEEDED
from servingops.activities.replica.revisions import revision_hash, same_data
from servingops.activities.replica.types import (
    CreatePodsInput,
    CreatePodsResult,
    DeletePodsInput,
    EnsureRevisionInput,
    InPlaceInput,
    InPlaceResult,
    PodView,
    PruneRevisionsInput,
    ReplicaObservation,
    ReplicaRef,
    RevisionLookup,
    RevisionResult,
    RevisionView,
    SetServingInput,
    SetServingResult,
)
from servingops.api_models.conditions import merge_conditions
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.ome import instance_keys as keys
from servingops.api_models.ome.instance_keys import base_name, revision_object_name
from servingops.api_models.ome.instance_status import InstanceTermination
from servingops.api_models.ome.replica import InferenceReplicaSpec, InferenceReplicaStatus
from servingops.api_models.operator_config import LifecycleDefaults, OperatorDefaults
from servingops.api_models.refs import ObjectRef
from servingops.rendering import kueue

NAMESPACE = "team-a"
LEDGER_BOUND = ledger.BOUND_BYTES
NAME = "engine-set"


def runner(name: str = "default", size: int = 1, image: str = "vllm:1", env: str = "a") -> dict[str, Any]:
    return {"name": name, "size": size, "template": {
        "metadata": {"labels": {"ome.io/runner": name}},
        "spec": {"containers": [{"name": "main", "image": image, "env": [{"name": "MODE", "value": env}]}]}}}


@dataclass
class FakePod:
    name: str
    uid: str
    index: int
    slot: int
    runner: str
    worker: int
    incarnation: int
    revision: str
    image: str
    template: dict[str, Any]
    created: float
    serving: bool | None = None
    deleted: float | None = None
    failed: bool = False
    restarts: int = 0
    restarted_at: float | None = None
    ready_from: float | None = None
    """When the containers turned ready (set by the simulated kubelet)."""
    gated: bool = False
    queue: str | None = None
    """The Kueue LocalQueue the pod names (kueue.x-k8s.io/queue-name)."""
    group: str | None = None
    """Its Kueue pod group (a gang), else None: the pod is a Workload of its own."""
    group_total: int = 1
    admission: str | None = None
    """Why the simulated Kueue holds the gated pod (its Workload's QuotaReserved=False message)."""
    ungated_at: float | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    """The pod as create_pods rendered it (what update_in_place diffs and patches)."""
    serving_since: float | None = None
    """When the ome.io/serving condition last turned True (None while it is not True)."""
    failed_at: float | None = None
    held: bool = False
    """A finalizer holds the pod: once deleted it stays terminating until released."""
    node: str | None = "node-1"
    """Where the fake scheduler put it (None: no node fits its required affinity)."""
    unserved_at: float | None = None
    """When the ome.io/serving condition last turned False."""


@dataclass
class FakeRevision:
    name: str
    revision: int
    data: dict[str, Any]
    owned: bool = True


@dataclass
class Sample:
    time: float
    serving: int
    pods: int


@dataclass
class FakeReplicaCluster:
    env: WorkflowEnvironment
    ready_delay: float = 5.0
    delete_delay: float = 1.0
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    spec: dict[str, Any] = field(default_factory=lambda: {"component": "engine", "replicas": 3,
                                                           "runners": [runner()]})
    generation: int = 1
    gone: bool = False
    pods: dict[str, FakePod] = field(default_factory=dict)
    revisions: dict[str, FakeRevision] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[EventNote] = field(default_factory=list)
    broken_images: set[str] = field(default_factory=set)
    quota: int | None = None
    reject_creates: str | None = None
    """While set, every pod create is refused for good (Invalid, this message), as the apiserver refuses a
    pod it cannot admit (the worker's interceptor makes a 422 permanent)."""
    gate_new_pods: bool = False
    kueue_capacity: int | None = None
    """A simulated Kueue, None when there is none: pods naming a queue are created gated (its webhook),
    and whole Workloads (one pod, or a gang's complete pod group) are admitted in creation order while
    the admitted pods fit `kueue_capacity`; the others are told why, as Kueue says it."""
    lifecycle: LifecycleDefaults = field(default_factory=LifecycleDefaults)
    violations: list[str] = field(default_factory=list)
    serving_log: list[Sample] = field(default_factory=list)
    created_names: list[str] = field(default_factory=list)
    """Every pod name created, in order (a duplicate create of a live name would be a bug)."""
    collide_next: bool = False
    """The next revision name minted collides with a foreign object (a collision test)."""
    nodes: list[str] = field(default_factory=lambda: ["node-1"])
    """The fake scheduler's nodes: a pod goes to a node its required affinity allows, preferring its
    preferred nodes, else the one with the fewest live pods (first by name on a tie)."""
    sick_nodes: set[str] = field(default_factory=set)
    """Nodes whose pods never become ready (a node that cannot run the workload)."""
    endpoint_lag: float = 0.0
    """Seconds an EndpointSlice keeps a pod's endpoint Ready after its ome.io/serving gate turned
    False (the endpoint controller's delay), as migration.ready_endpoints reports it."""
    isvc_annotations: dict[str, str] = field(default_factory=dict)
    """The parent InferenceService's annotations (migration requests), for migration.remove_request."""
    isvc_events: list[tuple[str, str, str]] = field(default_factory=list)
    """(type, reason, message) of every kube.emit_event (the migration workflow's Events)."""
    omenative: bool = True
    """migration.resolve: the component is served by this replica (False: it is not OMENative)."""
    isvc_uid: str = "isvc-uid"
    """The parent InferenceService `svc`'s uid (testkit/migration_world.py ISVC)."""
    isvc_gone: bool = False
    """The InferenceService is deleted: resolve answers InferenceServiceNotFound, remove_request False."""
    endpoint_log: list[tuple[float, str]] = field(default_factory=list)
    """(time, pod) of every pod deleted while the fake EndpointSlices still listed it Ready."""
    ledger: dict[str, str] = field(default_factory=dict)
    """The audit ledger ConfigMap's data (migration.archive, merged by the real ledger.merge)."""
    ledger_writes: int = 0
    """migration.archive calls that changed the ledger."""
    ledger_dropped: int = 0
    ledger_broken: bool = False
    """migration.archive fails (a ledger the worker cannot write)."""
    ledger_bound: int = LEDGER_BOUND
    """The ledger's size bound (MigrationActivities' ledger_bound)."""

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(group="ome.io", version="v1beta1", plural="inferencereplicas", kind="InferenceReplica",
                         name=NAME, namespace=NAMESPACE, uid=self.uid)

    # -- test-side edits ----------------------------------------------------------------------

    def edit(self, **changes: Any) -> None:
        """A spec edit (a new generation), as kubectl apply / scale would make it."""
        for key, value in changes.items():
            if value is None:
                self.spec.pop(key, None)
            else:
                self.spec[key] = value
        self.generation += 1

    async def now(self) -> float:
        return (await self.env.get_current_time()).timestamp()

    def live(self) -> list[FakePod]:
        return [pod for pod in self.pods.values() if pod.deleted is None]

    def fail_pod(self, name: str) -> None:
        self.pods[name].failed = True

    async def restart_pod(self, name: str) -> None:
        pod = self.pods[name]
        pod.restarts += 1
        pod.restarted_at = await self.now()

    def hold_deletion(self, name: str) -> None:
        self.pods[name].held = True

    def release_deletion(self, name: str) -> None:
        self.pods[name].held = False

    def lose_pod(self, name: str) -> None:
        """The pod vanishes (a node gone, a kubectl delete --force)."""
        del self.pods[name]

    def rows(self) -> list[dict[str, Any]]:
        if "instanceStatuses" in self.status:
            return list(self.status["instanceStatuses"])
        from servingops.api_models.ome.instance_columns import status_rows
        rows = status_rows(InferenceReplicaStatus.model_validate(self.status))
        return [r.model_dump(by_alias=True, exclude_none=True, mode="json") for r in rows]

    def condition(self, kind: str) -> str | None:
        entry = self.conditions.get(kind)
        return entry["status"] if entry else None

    def min_serving(self, after: float = 0.0) -> int:
        return min(s.serving for s in self.serving_log if s.time >= after)

    def max_pods(self, after: float = 0.0) -> int:
        return max(s.pods for s in self.serving_log if s.time >= after)

    # -- the simulated kubelet -----------------------------------------------------------------

    def ungate(self, now: float) -> None:
        """Every gate lifted (an admission controller released the pods)."""
        self.gate_new_pods = False
        for pod in self.live():
            if pod.gated:
                pod.gated, pod.ungated_at, pod.admission = False, now, None

    def _kueue(self, now: float) -> None:
        if self.kueue_capacity is None:
            return
        used = sum(1 for pod in self.live() if pod.queue and not pod.gated)
        workloads: dict[str, list[FakePod]] = {}
        for pod in sorted(self.live(), key=lambda p: p.created):
            if pod.queue and pod.gated:
                workloads.setdefault(pod.group or pod.name, []).append(pod)
        for members in workloads.values():
            if len(members) < members[0].group_total:
                continue  # Kueue makes a group's Workload once every pod of the group exists
            if used + len(members) <= self.kueue_capacity:
                used += len(members)
                for pod in members:
                    pod.gated, pod.ungated_at, pod.admission = False, now, None
                continue
            for pod in members:
                pod.admission = (f"Workload {members[0].group or 'pod-' + pod.name}: couldn't assign flavors to "
                                 f"pod set main: insufficient quota for pods in flavor default, request > maximum "
                                 f"capacity ({len(members)} > {self.kueue_capacity - used})")

    def _settle(self, now: float) -> None:
        for name in [n for n, p in self.pods.items()
                     if p.deleted is not None and not p.held and now - p.deleted >= self.delete_delay]:
            del self.pods[name]
        self._kueue(now)
        for pod in self.pods.values():
            if pod.ready_from is None and not pod.gated and pod.node is not None and not pod.failed and (
                    pod.image not in self.broken_images) and pod.node not in self.sick_nodes:
                # The kubelet starts the containers once the pod is scheduled: after its gates lifted.
                pod.ready_from = max(pod.created, pod.ungated_at or 0.0) + self.ready_delay
            if pod.failed and pod.failed_at is None:
                pod.failed_at = now  # the kubelet's finishedAt: the same on every later read

    def _containers_ready(self, pod: FakePod, now: float) -> bool:
        return (pod.ready_from is not None and pod.ready_from <= now and not pod.failed and pod.deleted is None
                and pod.image not in self.broken_images)

    def _ready(self, pod: FakePod, now: float) -> bool:
        """PodReady: the containers ready and every readiness gate (ome.io/serving) True."""
        return self._containers_ready(pod, now) and pod.serving is True

    def _view(self, pod: FakePod, now: float) -> PodView:
        ready = self._ready(pod, now)
        placed = not pod.gated and pod.node is not None
        since = None
        if ready:
            # When Ready last turned True: the containers (again, after a restart) or the gate, last.
            start = max(pod.ready_from or now, pod.restarted_at or 0.0, pod.serving_since or 0.0)
            since = datetime.fromtimestamp(start, UTC)
        termination = None
        if pod.failed:
            termination = InstanceTermination(pod_name=pod.name, container_name="main", reason="Error", exit_code=1,
                                              time=datetime.fromtimestamp(pod.failed_at or now, UTC))
        elif pod.restarted_at is not None:
            termination = InstanceTermination(pod_name=pod.name, container_name="main", reason="OOMKilled",
                                              exit_code=137, time=datetime.fromtimestamp(pod.restarted_at, UTC))
        return PodView(name=pod.name, uid=pod.uid, index=pod.index, slot=pod.slot, runner=pod.runner,
                       worker=pod.worker, incarnation=pod.incarnation, revision=pod.revision,
                       node=None if pod.gated else pod.node,
                       phase="Failed" if pod.failed else "Running" if placed else "Pending",
                       # No node fits: the scheduler says PodScheduled False, Unschedulable.
                       scheduled=placed, unschedulable=not pod.gated and pod.node is None,
                       gated=pod.gated, queue=pod.queue,
                       admission=pod.admission if pod.gated else None,
                       containers_ready=self._containers_ready(pod, now),
                       ready=ready, ready_since=since, serving=pod.serving, deleting=pod.deleted is not None,
                       restart_count=pod.restarts, last_termination=termination,
                       created_at=datetime.fromtimestamp(pod.created, UTC))

    def _sample(self, now: float) -> None:
        per = sum(r["size"] for r in self._runners_of(self.spec))
        by_index: dict[int, int] = {}
        for pod in self.live():
            if self._ready(pod, now):
                by_index[pod.index] = by_index.get(pod.index, 0) + 1
        self.serving_log.append(Sample(time=now, serving=sum(1 for n in by_index.values() if n >= per),
                                       pods=len(self.live())))

    @staticmethod
    def _runners_of(spec: dict[str, Any]) -> list[dict[str, Any]]:
        return list(spec.get("runners") or [])

    def _base(self) -> str:
        parent = (self.spec.get("parentRef") or {}).get("name")
        return base_name(NAME, parent, self.spec["component"])

    def _owner(self) -> render.Owner:
        return render.Owner(name=NAME, namespace=NAMESPACE, uid=self.uid)

    def _live_spec(self, ref: ObjectRef) -> InferenceReplicaSpec:
        """The spec as the real activities read it (ObjectGone, InvalidSpec as they raise them)."""
        if self.gone or (ref.uid and ref.uid != self.uid):
            raise application_error(ErrorType.OBJECT_GONE, f"{ref.describe()} is gone")
        try:
            return InferenceReplicaSpec.model_validate(self.spec)
        except ValidationError as exc:
            raise application_error(ErrorType.INVALID_SPEC, f"{ref.describe()}: the spec does not parse: {exc}") \
                from exc

    def _revision_data(self, name: str) -> render.RevisionData:
        found = self.revisions.get(name)
        if found is None or not found.owned:
            self.violations.append(f"a pod from unknown revision {name}")
            raise application_error(ErrorType.REVISION_NOT_FOUND,
                                    f"ControllerRevision {NAMESPACE}/{name} of InferenceReplica {NAME} does not exist")
        try:
            return render.parse_revision(name, found.data)
        except render.RenderError as exc:
            raise application_error(ErrorType.INVALID_SPEC, str(exc)) from exc

    def _add_pod(self, body: dict[str, Any], runner_template: dict[str, Any], now: float) -> FakePod:
        meta = body["metadata"]
        labels = meta["labels"]
        queue = labels.get(kueue.QUEUE_LABEL)
        pod = FakePod(
            name=meta["name"], uid=str(uuid.uuid4()), index=int(labels[keys.INSTANCE_LABEL]),
            slot=int(labels[keys.SLOT_LABEL]), runner=labels[keys.RUNNER_LABEL],
            worker=int(labels.get(keys.WORKER_LABEL) or 0), incarnation=int(labels[keys.INCARNATION_LABEL]),
            revision=labels[keys.REVISION_LABEL], image=body["spec"]["containers"][0]["image"],
            template=copy.deepcopy(runner_template), created=now, gated=self.gate_new_pods or
            bool(body["spec"].get("schedulingGates")) or (queue is not None and self.kueue_capacity is not None),
            queue=queue, group=labels.get(kueue.GROUP_NAME_LABEL),
            group_total=int(meta["annotations"].get(kueue.GROUP_TOTAL_ANNOTATION) or 1), manifest=body)
        pod.node = self._schedule(body)
        self.pods[pod.name] = pod
        self.created_names.append(pod.name)
        return pod

    def _schedule(self, body: dict[str, Any]) -> str | None:
        """Required nodeAffinity (NotIn / In on kubernetes.io/hostname) filters, preferred terms rank."""
        affinity = (body["spec"].get("affinity") or {}).get("nodeAffinity") or {}
        allowed = list(self.nodes)
        required = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
        for term in required or []:
            for expression in term.get("matchExpressions") or []:
                if expression.get("key") != "kubernetes.io/hostname":
                    continue
                values = set(expression.get("values") or [])
                if expression.get("operator") == "NotIn":
                    allowed = [n for n in allowed if n not in values]
                elif expression.get("operator") == "In":
                    allowed = [n for n in allowed if n in values]
        if not allowed:
            return None
        preferred: list[str] = []
        for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
            for expression in (term.get("preference") or {}).get("matchExpressions") or []:
                if expression.get("key") == "kubernetes.io/hostname" and expression.get("operator") == "In":
                    preferred.extend(expression.get("values") or [])
        for name in preferred:
            if name in allowed:
                return name
        load = {n: sum(1 for p in self.live() if p.node == n) for n in allowed}
        return min(allowed, key=lambda n: (load[n], n))

    def endpoint_ready(self, pod: FakePod, now: float) -> bool:
        """The endpoint controller's view: Ready, or its gate turned False less than endpoint_lag ago."""
        if pod.deleted is not None:
            return False
        if self._ready(pod, now):
            return True
        return pod.unserved_at is not None and now - pod.unserved_at < self.endpoint_lag

    # -- the activities -------------------------------------------------------------------------

    def activities(self) -> list[Any]:
        cluster = self

        @activity.defn(name="replica.observe")
        async def observe(ref: ObjectRef) -> ReplicaObservation | None:
            if cluster.gone or ref.uid != cluster.uid:
                return None
            now = await cluster.now()
            cluster._settle(now)
            spec = InferenceReplicaSpec.model_validate(cluster.spec)
            rollback = (spec.pacing.rollback_to_revision if spec.pacing else None) or None
            lookup = None
            if rollback:
                found = cluster.revisions.get(rollback)
                lookup = RevisionLookup(name=rollback, exists=found is not None, owned=bool(found and found.owned))
            return ReplicaObservation(
                uid=cluster.uid, generation=cluster.generation, deleting=False, spec=spec,
                base=cluster._base(),
                pods=sorted((cluster._view(pod, now) for pod in cluster.pods.values()), key=_pod_order),
                revisions=[RevisionView(name=r.name, revision=r.revision) for r in sorted(
                    (r for r in cluster.revisions.values() if r.owned), key=lambda r: (r.revision, r.name))],
                rollback_target=lookup, now=datetime.fromtimestamp(now, UTC))

        @activity.defn(name="replica.read_record")
        async def read_record(ref: ObjectRef) -> InferenceReplicaStatus | None:
            if cluster.gone or ref.uid != cluster.uid or not cluster.status:
                return None
            return InferenceReplicaStatus.model_validate(cluster.status)

        @activity.defn(name="replica.ensure_revision")
        async def ensure_revision(request: EnsureRevisionInput) -> RevisionResult:
            spec = cluster._live_spec(request.replica.ref)
            runners = spec.runners
            if not runners:
                # The real one renders runners from spec.modelRef / runtimeRef; the fake has no models
                # or runtimes, so it answers as the real one does for a model that is not there.
                raise application_error(ErrorType.INVALID_SPEC, f"{request.replica.ref.describe()}: spec needs "
                                                                "runners, or a modelRef and/or runtimeRef to render "
                                                                "them from (the fake renders from runners only)")
            try:
                sizes = render.runner_sizes(runners)
            except render.RenderError as exc:
                raise application_error(ErrorType.INVALID_SPEC, f"spec.runners: {exc}") from exc
            data = render.revision_payload(runners, spec.pairing_protocol)
            count = max(request.collision_count, 0)
            for _ in range(MAX_COLLISIONS):
                name = revision_object_name(request.replica.base, revision_hash(data, count))
                if cluster.collide_next and name not in cluster.revisions:
                    cluster.collide_next = False
                    cluster.revisions[name] = FakeRevision(name=name, revision=0, data={"foreign": True}, owned=False)
                existing = cluster.revisions.get(name)
                if existing is None:
                    # Numbered after the replica's own revisions only, as the real one lists them.
                    number = max((r.revision for r in cluster.revisions.values() if r.owned), default=0) + 1
                    existing = cluster.revisions[name] = FakeRevision(name=name, revision=number,
                                                                      data=copy.deepcopy(data))
                elif not (existing.owned and same_data(existing.data, data)):
                    count += 1
                    continue
                return RevisionResult(name=name, revision=existing.revision, collision_count=count,
                                      generation=cluster.generation, runner_sizes=sizes,
                                      pairing_protocol=spec.pairing_protocol)
            raise application_error(ErrorType.CONFLICT, f"{MAX_COLLISIONS} revision name collisions in a row")

        @activity.defn(name="replica.ensure_service")
        async def ensure_service(replica: ReplicaRef) -> None:
            return None

        @activity.defn(name="replica.create_pods")
        async def create_pods(request: CreatePodsInput) -> CreatePodsResult:
            now = await cluster.now()
            cluster._settle(now)
            if cluster.reject_creates:
                raise application_error(ErrorType.INVALID_OBJECT, cluster.reject_creates)
            spec = cluster._live_spec(request.replica.ref)
            revision = cluster._revision_data(request.revision)
            key = render.InstanceKey(index=request.index, incarnation=request.incarnation, slot=request.slot)
            placement = render.InstancePlacement.of(spec, request.preferred_nodes, request.avoid_node)
            try:
                rendered = render.render_instance(cluster._owner(), spec.component.value, request.replica.base,
                                                  revision, key, placement)
            except render.RenderError as exc:
                raise application_error(ErrorType.INVALID_SPEC, str(exc)) from exc
            templates = {r.name.value: r.template for r in revision.runners}
            result = CreatePodsResult()
            for body in rendered:
                name = body["metadata"]["name"]
                if name in cluster.pods:  # terminating ones too: the name is still taken
                    result.existed.append(name)
                    continue
                if cluster.quota is not None and len(cluster.pods) >= cluster.quota:
                    result.refused = (f'pods "{name}" is forbidden: exceeded quota: pods, requested: pods=1, '
                                      f"used: pods={len(cluster.pods)}, limited: pods={cluster.quota}")
                    result.refused_reason = QUOTA_EXCEEDED
                    cluster._sample(now)
                    return result
                cluster._add_pod(body, templates[body["metadata"]["labels"][keys.RUNNER_LABEL]], now)
                result.created.append(name)
            cluster._sample(now)
            return result

        @activity.defn(name="replica.delete_pods")
        async def delete_pods(request: DeletePodsInput) -> list[str]:
            now = await cluster.now()
            deleted = []
            for name in request.pods:
                pod = cluster.pods.get(name)
                if pod is None or (request.uids.get(name) and request.uids[name] != pod.uid):
                    continue
                # A pod already terminating answers the delete as accepted: listed again.
                if pod.deleted is None:
                    if cluster.endpoint_ready(pod, now):
                        cluster.endpoint_log.append((now, name))
                    pod.deleted = now
                deleted.append(name)
            cluster._sample(now)
            return deleted

        @activity.defn(name="replica.set_serving")
        async def set_serving(request: SetServingInput) -> SetServingResult:
            now = await cluster.now()
            result = SetServingResult()
            for name in request.pods:
                pod = cluster.pods.get(name)
                if pod is None:
                    result.missing.append(name)
                elif pod.serving is not request.serving:
                    pod.serving = request.serving
                    pod.serving_since = now if request.serving else None
                    pod.unserved_at = None if request.serving else now
                    result.changed.append(name)
            cluster._sample(now)
            return result

        @activity.defn(name="replica.update_in_place")
        async def update_in_place(request: InPlaceInput) -> InPlaceResult:
            now = await cluster.now()
            cluster._settle(now)
            if cluster.reject_creates:
                raise application_error(ErrorType.INVALID_OBJECT, cluster.reject_creates)
            spec = cluster._live_spec(request.replica.ref)
            revision = cluster._revision_data(request.revision)
            pod = cluster.pods.get(request.pod)
            if pod is None or pod.deleted is not None:
                return InPlaceResult(applied=False, reason=f"pod {request.pod} is gone")
            key = render.InstanceKey(index=pod.index, incarnation=pod.incarnation, slot=pod.slot)
            try:
                rendered = render.render_instance(cluster._owner(), spec.component.value, request.replica.base,
                                                  revision, key, render.InstancePlacement.of(spec))
            except render.RenderError:
                rendered = []
            desired = next((p for p in rendered if p["metadata"]["name"] == pod.name), None)
            if desired is None:
                return InPlaceResult(applied=False,
                                     reason=f"pod {request.pod} has no place in revision {request.revision}")
            change = in_place.diff(desired, pod.manifest)
            if not change.possible:
                return InPlaceResult(applied=False, reason=change.reason())
            _apply(pod.manifest, change)
            pod.image = pod.manifest["spec"]["containers"][0]["image"]
            pod.revision = pod.manifest["metadata"]["labels"][keys.REVISION_LABEL]
            pod.template = copy.deepcopy(next(r.template for r in revision.runners if r.name.value == pod.runner))
            cluster._sample(now)
            return InPlaceResult(applied=True)

        @activity.defn(name="replica.prune_revisions")
        async def prune_revisions(request: PruneRevisionsInput) -> list[str]:
            cluster._live_spec(request.replica.ref)
            ours = sorted((r for r in cluster.revisions.values() if r.owned and r.name not in request.live),
                          key=lambda r: r.revision)
            doomed = ours[:max(0, len(ours) - request.limit)]
            for r in doomed:
                del cluster.revisions[r.name]
            return [r.name for r in doomed]

        @activity.defn(name="kube.patch_status")
        async def patch_status(patch: StatusPatch) -> bool:
            if cluster.gone:
                return False
            now = await cluster.now()
            for key, value in patch.status.items():
                if value is None:
                    cluster.status.pop(key, None)
                else:
                    cluster.status[key] = value
            merged = merge_conditions(list(cluster.conditions.values()), patch.conditions,
                                      generation=patch.observed_generation or cluster.generation,
                                      now=datetime.fromtimestamp(now, UTC))
            cluster.conditions = {c["type"]: c for c in merged}
            cluster.status["conditions"] = merged
            cluster.events.extend(patch.events)
            # The real apiserver refuses a status that breaks the CRD's rules; the fake checks the model.
            InferenceReplicaStatus.model_validate(cluster.status)
            return True

        @activity.defn(name="operator.config")
        async def operator_config() -> OperatorDefaults:
            return OperatorDefaults(lifecycle=cluster.lifecycle)

        @activity.defn(name="migration.archive")
        async def archive(write: LedgerWrite) -> LedgerWritten:
            if cluster.ledger_broken:
                raise RuntimeError("the ledger ConfigMap cannot be written")
            merged, dropped = ledger.merge(cluster.ledger, ledger.entries(
                write.replica.namespace or "", write.replica.name, write.records), cluster.ledger_bound)
            if merged == cluster.ledger:
                return LedgerWritten(changed=False)
            cluster.ledger, cluster.ledger_writes = merged, cluster.ledger_writes + 1
            cluster.ledger_dropped += dropped
            return LedgerWritten(changed=True, dropped=dropped)

        return [observe, read_record, ensure_revision, ensure_service, create_pods, delete_pods, set_serving,
                update_in_place, prune_revisions, patch_status, operator_config, archive]

    def migration_activities(self) -> list[Any]:
        """migration.* and kube.emit_event as the migration workflow and the replica's drain call them;
        the InferenceService is `svc` in NAMESPACE, its component served by this replica unless
        `omenative` is False."""
        cluster = self

        @activity.defn(name="migration.resolve")
        async def resolve(request: ResolveInput) -> Resolved:
            isvc = request.isvc
            if cluster.isvc_gone or isvc.name != "svc" or (isvc.uid and isvc.uid != cluster.isvc_uid):
                return Resolved(refused="InferenceServiceNotFound",
                                message=f"InferenceService {isvc.namespace}/{isvc.name} is gone")
            if request.component != cluster.spec["component"]:
                return Resolved(refused="ComponentNotFound",
                                message=f"InferenceService {NAMESPACE}/svc has no component {request.component!r}")
            if not cluster.omenative:
                return Resolved(refused="NotOMENative", message=(
                    f"component {request.component} of InferenceService {NAMESPACE}/svc is not OMENative (no "
                    f"InferenceReplica {NAME} serves it): only OMENative Instances can be migrated"))
            return Resolved(replica=NAME, replica_uid=cluster.uid)

        @activity.defn(name="migration.ready_endpoints")
        async def ready_endpoints(query: EndpointQuery) -> list[str]:
            now = await cluster.now()
            cluster._settle(now)
            return sorted(name for name in query.pods
                          if name in cluster.pods and cluster.endpoint_ready(cluster.pods[name], now))

        @activity.defn(name="migration.remove_request")
        async def remove_request(removal: RequestRemoval) -> bool:
            if cluster.isvc_gone:
                return False
            return cluster.isvc_annotations.pop(removal.annotation, None) is not None

        @activity.defn(name="kube.emit_event")
        async def emit_event(spec: EventSpec) -> None:
            cluster.isvc_events.append((spec.type, spec.reason, spec.message))

        return [resolve, ready_endpoints, remove_request, emit_event]


_RUNNER_ORDER = {"leader": 0, "default": 0, "worker": 1}


def _pod_order(view: PodView) -> tuple[int, int, int, int]:
    """The order the real observe lists pods in: by Instance, anchor first, then workers, slots."""
    return view.index, _RUNNER_ORDER.get(view.runner, 2), view.worker, view.slot


def _apply(manifest: dict[str, Any], change: in_place.InPlaceDiff) -> None:
    """What the apiserver does with the diff's strategic merge patch: containers merge by name."""
    for (kind, name), image in change.images.items():
        for container in manifest["spec"].get(kind) or []:
            if container.get("name") == name:
                container["image"] = image
    manifest["metadata"].setdefault("labels", {}).update(change.labels)


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)
