"""An in-memory InferenceReplica, its pods and ControllerRevisions behind FAKE activities registered
under the real names (replica.*, kube.patch_status, operator.config), for time-skipping tests of
the replica engine (tests/test_replica_workflow.py).

The fake kubelet works on the test server's clock: a pod turns Ready `ready_delay` seconds after it
is created (never, when its first container's image is in `broken_images`), a deleted pod is gone
`delete_delay` seconds later. Tests make pods fail, restart or vanish through `fail_pod`,
`restart_pod`, `lose_pod`. `quota` caps the pod count as a ResourceQuota would (the create is
refused, QuotaExceeded). After every call that changes pods, the serving Instance count is
sampled into `serving_log`, so a test can prove a rollout never dipped below its budget.

The fake answers as the real activities do (tests/test_replica_conformance.py runs the same cases
against both); a call the real activity would refuse is answered with its error and recorded in
`violations`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.testing import WorkflowEnvironment

from servingops.activities.kubernetes import EventNote, StatusPatch
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
from servingops.api_models.ome.instance_keys import base_name, pod_name, revision_object_name
from servingops.api_models.ome.instance_status import InstanceTermination
from servingops.api_models.ome.replica import InferenceReplicaSpec, InferenceReplicaStatus
from servingops.api_models.operator_config import LifecycleDefaults, OperatorDefaults
from servingops.api_models.refs import ObjectRef

NAMESPACE = "team-a"
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
    gated: bool = False


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
    gate_new_pods: bool = False
    lifecycle: LifecycleDefaults = field(default_factory=LifecycleDefaults)
    violations: list[str] = field(default_factory=list)
    serving_log: list[Sample] = field(default_factory=list)
    created_names: list[str] = field(default_factory=list)
    """Every pod name created, in order (a duplicate create of a live name would be a bug)."""
    collide_next: bool = False
    """The next revision name minted collides with a foreign object (a collision test)."""

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

    def _settle(self, now: float) -> None:
        for name in [n for n, p in self.pods.items() if p.deleted is not None and now - p.deleted >= self.delete_delay]:
            del self.pods[name]
        for pod in self.pods.values():
            if pod.ready_from is None and not pod.gated and not pod.failed and pod.image not in self.broken_images:
                pod.ready_from = pod.created + self.ready_delay

    def _ready(self, pod: FakePod, now: float) -> bool:
        return (pod.ready_from is not None and pod.ready_from <= now and not pod.failed and pod.deleted is None
                and pod.image not in self.broken_images)

    def _view(self, pod: FakePod, now: float) -> PodView:
        ready = self._ready(pod, now)
        since = None
        if ready:
            start = max(pod.ready_from or now, pod.restarted_at or 0.0)
            since = datetime.fromtimestamp(start, UTC)
        termination = None
        if pod.failed:
            termination = InstanceTermination(pod_name=pod.name, container_name="main", reason="Error", exit_code=1,
                                              time=datetime.fromtimestamp(now, UTC))
        elif pod.restarted_at is not None:
            termination = InstanceTermination(pod_name=pod.name, container_name="main", reason="OOMKilled",
                                              exit_code=137, time=datetime.fromtimestamp(pod.restarted_at, UTC))
        return PodView(name=pod.name, uid=pod.uid, index=pod.index, slot=pod.slot, runner=pod.runner,
                       worker=pod.worker, incarnation=pod.incarnation, revision=pod.revision, node="node-1",
                       phase="Failed" if pod.failed else "Running" if not pod.gated else "Pending",
                       scheduled=not pod.gated, gated=pod.gated, containers_ready=ready, ready=ready,
                       ready_since=since, serving=pod.serving, deleting=pod.deleted is not None,
                       restart_count=pod.restarts, last_termination=termination,
                       created_at=datetime.fromtimestamp(pod.created, UTC))

    def _sample(self, now: float) -> None:
        per = sum(r["size"] for r in self._runners_of(self.spec))
        by_index: dict[int, int] = {}
        for pod in self.live():
            if self._ready(pod, now) and pod.serving is True:
                by_index[pod.index] = by_index.get(pod.index, 0) + 1
        self.serving_log.append(Sample(time=now, serving=sum(1 for n in by_index.values() if n >= per),
                                       pods=len(self.live())))

    @staticmethod
    def _runners_of(spec: dict[str, Any]) -> list[dict[str, Any]]:
        return list(spec.get("runners") or [])

    def _base(self) -> str:
        parent = (self.spec.get("parentRef") or {}).get("name")
        return base_name(NAME, parent, self.spec["component"])

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
            status = InferenceReplicaStatus.model_validate(cluster.status) if cluster.status else None
            rollback = (spec.pacing.rollback_to_revision if spec.pacing else None) or None
            lookup = None
            if rollback:
                found = cluster.revisions.get(rollback)
                lookup = RevisionLookup(name=rollback, exists=found is not None, owned=bool(found and found.owned))
            return ReplicaObservation(
                uid=cluster.uid, generation=cluster.generation, deleting=False, spec=spec, status=status,
                base=cluster._base(),
                pods=[cluster._view(pod, now) for pod in sorted(cluster.pods.values(), key=lambda p: p.name)],
                revisions=[RevisionView(name=r.name, revision=r.revision) for r in cluster.revisions.values()
                           if r.owned],
                rollback_target=lookup, now=datetime.fromtimestamp(now, UTC))

        @activity.defn(name="replica.ensure_revision")
        async def ensure_revision(request: EnsureRevisionInput) -> RevisionResult:
            runners = cluster._runners_of(cluster.spec)
            if not runners:
                raise application_error(ErrorType.INVALID_SPEC, "spec.runners is empty: nothing to render")
            data = {"runners": runners, "pairingProtocol": cluster.spec.get("pairingProtocol")}
            count = request.collision_count
            while True:
                digest = hashlib.sha256(json.dumps([data, count], sort_keys=True).encode()).hexdigest()[:10]
                name = revision_object_name(request.replica.base, digest)
                if cluster.collide_next and name not in cluster.revisions:
                    cluster.collide_next = False
                    cluster.revisions[name] = FakeRevision(name=name, revision=0, data={"foreign": True}, owned=False)
                existing = cluster.revisions.get(name)
                if existing is None:
                    number = max((r.revision for r in cluster.revisions.values()), default=0) + 1
                    cluster.revisions[name] = FakeRevision(name=name, revision=number, data=copy.deepcopy(data))
                    existing = cluster.revisions[name]
                elif existing.data != data:
                    count += 1
                    continue
                sizes = {r["name"]: r["size"] for r in runners}
                return RevisionResult(name=name, revision=existing.revision, collision_count=count,
                                      generation=cluster.generation, runner_sizes=sizes,
                                      pairing_protocol=cluster.spec.get("pairingProtocol"))

        @activity.defn(name="replica.ensure_service")
        async def ensure_service(replica: ReplicaRef) -> None:
            return None

        @activity.defn(name="replica.create_pods")
        async def create_pods(request: CreatePodsInput) -> CreatePodsResult:
            now = await cluster.now()
            cluster._settle(now)
            revision = cluster.revisions.get(request.revision)
            if revision is None:
                cluster.violations.append(f"create_pods from unknown revision {request.revision}")
                raise application_error(ErrorType.INVALID_REVISION, f"ControllerRevision {request.revision} not found")
            result = CreatePodsResult()
            base = request.replica.base
            for spec in revision.data["runners"]:
                for k in range(spec["size"]):
                    worker = k + 1 if spec["name"] == "worker" else 0
                    name = pod_name(base, request.index, slot=request.slot if spec["name"] == "default" else 0,
                                    worker=worker)
                    if name in cluster.pods:
                        result.existed.append(name)
                        continue
                    if cluster.quota is not None and len(cluster.pods) >= cluster.quota:
                        result.refused = (f'pods "{name}" is forbidden: exceeded quota: pods, requested: pods=1, '
                                          f"used: pods={len(cluster.pods)}, limited: pods={cluster.quota}")
                        result.refused_reason = "QuotaExceeded"
                        cluster._sample(now)
                        return result
                    container = spec["template"]["spec"]["containers"][0]
                    cluster.pods[name] = FakePod(
                        name=name, uid=str(uuid.uuid4()), index=request.index,
                        slot=request.slot if spec["name"] == "default" else 0, runner=spec["name"], worker=worker,
                        incarnation=request.incarnation, revision=request.revision, image=container["image"],
                        template=copy.deepcopy(spec["template"]), created=now, gated=cluster.gate_new_pods)
                    cluster.created_names.append(name)
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
                if pod.deleted is None:
                    pod.deleted = now
                    pod.serving = False if pod.serving is not None else None
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
                    result.changed.append(name)
            cluster._sample(now)
            return result

        @activity.defn(name="replica.update_in_place")
        async def update_in_place(request: InPlaceInput) -> InPlaceResult:
            now = await cluster.now()
            pod = cluster.pods.get(request.pod)
            revision = cluster.revisions.get(request.revision)
            if pod is None or revision is None:
                raise application_error(ErrorType.INVALID_REVISION, f"pod {request.pod} or revision {request.revision}")
            wanted = next(r for r in revision.data["runners"] if r["name"] == pod.runner)["template"]
            strip = copy.deepcopy(wanted)
            mine = copy.deepcopy(pod.template)
            for t in (strip, mine):
                for c in t["spec"]["containers"]:
                    c.pop("image", None)
            if strip != mine:
                return InPlaceResult(applied=False, reason="env of container main differs")
            pod.image = wanted["spec"]["containers"][0]["image"]
            pod.template = copy.deepcopy(wanted)
            pod.revision = request.revision
            cluster._sample(now)
            return InPlaceResult(applied=True)

        @activity.defn(name="replica.prune_revisions")
        async def prune_revisions(request: PruneRevisionsInput) -> list[str]:
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

        return [observe, ensure_revision, ensure_service, create_pods, delete_pods, set_serving, update_in_place,
                prune_revisions, patch_status, operator_config]


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)
