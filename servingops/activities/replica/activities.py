"""ReplicaActivities: every Kubernetes call of the InferenceReplica engine (names `replica.*`).

They observe and act on one Instance's pods at a time; the workflow decides (activities/replica/
types.py is the contract). Pure parts live beside them: pods.py renders an Instance's pods,
revisions.py names and stores ControllerRevisions, in_place.py decides what an in-place update
may change, observe.py reads a pod.

Every call is idempotent: creates answer 409 as "already there", deletes 404 as "already gone",
and a delete or patch of a pod carries the uid or resourceVersion the decision was made on, so a
pod recreated under the same name meanwhile is left alone. What a retry cannot change is raised
permanent (api_models/errors.py); other ApiExceptions go to the worker's interceptor, which
makes 403 and 400/422 permanent and retries the rest.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio import activity

from servingops.activities.reference_reader import KubeReader
from servingops.activities.replica import in_place, pods
from servingops.activities.replica.from_refs import NotRenderable, render_runners
from servingops.activities.replica.observe import pod_view
from servingops.activities.replica.revisions import (
    RevisionStore,
    as_body,
    controlled_by,
    raw_json,
    revision_body,
    revision_hash,
    same_data,
)
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
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.ome import instance_keys as keys
from servingops.api_models.ome.replica import InferenceReplicaSpec, InferenceReplicaStatus, Runner
from servingops.api_models.refs import ObjectRef
from servingops.clients.kube.calls import (
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    call,
    create_unless_exists,
    delete_if_present,
    get_or_none,
    list_items,
)
from servingops.clients.kube.errors import UNPROCESSABLE, absent, conflict, forbidden
from servingops.rendering import kueue
from servingops.rendering.accelerator_quota import NODE_LABEL as QUOTA_NODE_LABEL
from servingops.rendering.resolution import Unresolvable

_GROUP, _VERSION, _PLURAL = "ome.io", "v1beta1", "inferencereplicas"
_KUEUE_GROUP, _KUEUE_VERSION, _WORKLOADS = "kueue.x-k8s.io", "v1beta2", "workloads"
"""Kueue's Workloads, read while a pod of ours waits at Kueue's admission gate (rendering/kueue.py)."""
FAN_OUT = 8
"""Pods one set_serving call reads and patches side by side."""
REVISION_CACHE = 256
"""ControllerRevisions (namespace, name, replica uid) kept parsed: oldest out first."""
QUOTA_EXCEEDED = keys.QUOTA_EXCEEDED
"""CreatePodsResult.refused_reason when a ResourceQuota refused a pod."""
_QUOTA_MESSAGE = "exceeded quota"
"""What the ResourceQuota admission plugin's 403 says (`pods "x" is forbidden: exceeded quota: ...`)."""
MAX_COLLISIONS = 16
"""Hash collisions one ensure_revision walks past before giving up (each one is a 10-hex-digit
SHA-256 prefix clash or a foreign object under our name: more than a few means something is wrong)."""
IN_PLACE_CONFLICTS = 5
_RUNNER_ORDER = {"leader": 0, "default": 0, "worker": 1}


@dataclass(frozen=True)
class _Replica:
    owner: pods.Owner
    generation: int
    deleting: bool
    spec: InferenceReplicaSpec
    obj: dict[str, Any]

    @property
    def component(self) -> str:
        return self.spec.component.value

    @property
    def base(self) -> str:
        parent = self.spec.parent_ref.name if self.spec.parent_ref else None
        return keys.base_name(self.owner.name, parent, self.component)

    @property
    def selector(self) -> dict[str, str]:
        return keys.selector_labels(self.owner.name, self.component)


def _parent_uid(obj: dict[str, Any]) -> str | None:
    """The uid of the InferenceService controlling this replica (a projected one), if any."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller") and owner.get("kind") == "InferenceService":
            return str(owner.get("uid"))
    return None


def _namespace(ref: ObjectRef) -> str:
    if not ref.namespace:
        raise application_error(ErrorType.INVALID_INPUT, f"{ref.describe()}: an InferenceReplica is namespaced")
    return ref.namespace


def _invalid_spec(ref: ObjectRef, exc: ValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else None
    if first is None:
        return f"{ref.describe()}: the spec does not parse: {exc}"
    where = ".".join(["spec", *(str(part) for part in first["loc"])])
    return f"{ref.describe()}: {where}: {first['msg']}"


def _status_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        body = None
    said = body.get("message") if isinstance(body, dict) else None
    return str(said or exc.reason or exc.status)


def _pod_order(view: PodView) -> tuple[int, int, int, int]:
    return view.index, _RUNNER_ORDER.get(view.runner, 2), view.worker, view.slot


class ReplicaActivities:
    def __init__(self, api_client: client.ApiClient, artifacts: str | None = None,
                 controller_namespace: str | None = None) -> None:
        self._api_client = api_client
        self._artifacts = artifacts
        """`<registry>/<repository>` where a Deckhouse model's artifact is (rendering from a modelRef)."""
        # The controller namespace: where a ClusterBaseModel's claim is without storage.parameters.namespace,
        # the same rule as the direct path's (rendering/model_claim.py).
        self._reader = KubeReader(client.CustomObjectsApi(api_client), controller_namespace=controller_namespace)
        self._fan_out = ThreadPoolExecutor(max_workers=FAN_OUT, thread_name_prefix="replica-pods")
        self._revision_cache: dict[tuple[str, str, str], pods.RevisionData] = {}
        self._cache_lock = threading.Lock()
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.revisions = RevisionStore(client.AppsV1Api(api_client))

    # -- reads --------------------------------------------------------------------------------

    def _replica(self, ref: ObjectRef) -> _Replica | None:
        """The live replica; None when gone or its name now belongs to another uid."""
        found = get_or_none(self.custom.get_namespaced_custom_object, _GROUP, _VERSION, _namespace(ref), _PLURAL,
                            ref.name)
        if found is None:
            return None
        obj = cast(dict[str, Any], found)
        meta = obj["metadata"]
        if ref.uid and meta.get("uid") != ref.uid:
            return None
        try:
            spec = InferenceReplicaSpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            raise application_error(ErrorType.INVALID_SPEC, _invalid_spec(ref, exc)) from exc
        owner = pods.Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
        return _Replica(owner=owner, generation=int(meta.get("generation") or 0),
                        deleting=bool(meta.get("deletionTimestamp")), spec=spec, obj=dict(obj))

    def _live(self, ref: ObjectRef) -> _Replica:
        replica = self._replica(ref)
        if replica is None:
            raise application_error(ErrorType.OBJECT_GONE, f"{ref.describe()} is gone")
        return replica

    def _pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        response = get_or_none(self.core.read_namespaced_pod, name, namespace, _preload_content=False)
        return raw_json(response) if response is not None else None

    def _pods(self, replica: _Replica) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in sorted(replica.selector.items()))
        response = call(self.core.list_namespaced_pod, replica.owner.namespace, label_selector=selector,
                        _preload_content=False)
        # Pods of an earlier replica of the same name wait for garbage collection: not ours.
        return [p for p in raw_json(response).get("items") or [] if controlled_by(p, replica.owner.uid)]

    def _revision(self, replica: _Replica, name: str) -> pods.RevisionData:
        """A ControllerRevision's runners. Its data never changes once written, so a revision read for
        one Instance serves the next ones (a pass creates up to every Instance's pods at once)."""
        key = (replica.owner.namespace, name, replica.owner.uid)
        with self._cache_lock:
            cached = self._revision_cache.get(key)
        if cached is not None:
            return cached
        obj = self.revisions.get(replica.owner.namespace, name)
        if obj is None or not controlled_by(obj, replica.owner.uid):
            raise application_error(ErrorType.REVISION_NOT_FOUND,
                                    f"ControllerRevision {replica.owner.namespace}/{name} of "
                                    f"InferenceReplica {replica.owner.name} does not exist")
        try:
            parsed = pods.parse_revision(name, obj.get("data"))
        except pods.RenderError as exc:
            raise application_error(ErrorType.INVALID_SPEC, str(exc)) from exc
        with self._cache_lock:
            if len(self._revision_cache) >= REVISION_CACHE:
                self._revision_cache.pop(next(iter(self._revision_cache)))
            self._revision_cache[key] = parsed
        return parsed

    # -- activities ---------------------------------------------------------------------------

    @activity.defn(name="replica.observe")
    def observe(self, ref: ObjectRef) -> ReplicaObservation | None:
        """The replica, its pods and its ControllerRevisions; None when gone (or its name now
        belongs to another uid)."""
        replica = self._replica(ref)
        if replica is None:
            return None
        views = [v for v in (pod_view(p) for p in self._pods(replica)) if v is not None]
        namespace = replica.owner.namespace
        if any(v.gated and v.queue for v in views):
            holds = self._kueue_holds(namespace)
            views = [v.model_copy(update={"admission": holds.get(v.uid)}) if v.gated and v.queue else v
                     for v in views]
        revisions = [RevisionView(name=r["metadata"]["name"], revision=int(r.get("revision") or 0))
                     for r in self.revisions.owned(namespace, replica.selector, replica.owner.uid)]
        target = replica.spec.pacing.rollback_to_revision if replica.spec.pacing else None
        lookup = None
        if target:
            found = self.revisions.get(namespace, target)
            lookup = RevisionLookup(name=target, exists=found is not None,
                                    owned=found is not None and controlled_by(found, replica.owner.uid))
        return ReplicaObservation(
            uid=replica.owner.uid, generation=replica.generation, deleting=replica.deleting, spec=replica.spec,
            base=replica.base, pods=sorted(views, key=_pod_order), revisions=revisions,
            rollback_target=lookup, now=dt.datetime.now(dt.UTC), parent_uid=_parent_uid(replica.obj),
        )

    def _kueue_holds(self, namespace: str) -> dict[str, str]:
        """Pod uid -> why Kueue holds it, from the namespace's Workloads (read only while some pod of
        ours waits at Kueue's gate). A cluster without Kueue's API answers nothing; so does a worker not
        allowed to list Workloads (an older chart): the engine still parks and says KueuePending, only
        without Kueue's words, rather than fail every observe of the replica."""
        try:
            listed = list_items(self.custom.list_namespaced_custom_object,
                                _KUEUE_GROUP, _KUEUE_VERSION, namespace, _WORKLOADS)
        except ApiException as exc:
            if forbidden(exc):
                activity.logger.warning("may not list Kueue Workloads in %s: %s", namespace, exc.reason)
                return {}
            if absent(exc):
                return {}
            raise
        return kueue.holds_by_pod(listed)

    @activity.defn(name="replica.read_record")
    def read_record(self, ref: ObjectRef) -> InferenceReplicaStatus | None:
        """The stored status (the operations recorded in it), read once by a fresh workflow to resume;
        None when the replica is gone or has no status yet. Kept out of observe: at 200 Instances
        the status is half of what every observe would put in the workflow's history."""
        replica = self._replica(ref)
        raw = replica.obj.get("status") if replica is not None else None
        # Our own writes: a status that does not parse is a bug, raised (and retried) as such.
        return InferenceReplicaStatus.model_validate(raw) if raw else None

    @activity.defn(name="replica.ensure_revision")
    def ensure_revision(self, request: EnsureRevisionInput) -> RevisionResult:
        """The ControllerRevision of the replica's current spec: reused when one with the same
        data exists under its name, created (revision = highest + 1) when none does; a different
        object under the name is a collision, which raises the count and tries the next name."""
        ref = request.replica.ref
        replica = self._live(ref)
        runners = replica.spec.runners or self._runners_from_refs(ref, replica)
        try:
            sizes = pods.runner_sizes(runners)
        except pods.RenderError as exc:
            raise application_error(ErrorType.INVALID_SPEC, f"{ref.describe()}: spec.runners: {exc}") from exc
        data = pods.revision_payload(runners, replica.spec.pairing_protocol)
        namespace, base = replica.owner.namespace, request.replica.base
        count = max(request.collision_count, 0)
        for _ in range(MAX_COLLISIONS):
            name = keys.revision_object_name(base, revision_hash(data, count))
            existing = self.revisions.get(namespace, name)
            if existing is None:
                owned = self.revisions.owned(namespace, replica.selector, replica.owner.uid)
                number = max((int(r.get("revision") or 0) for r in owned), default=0) + 1
                labels = {**replica.selector, keys.REVISION_LABEL: name}
                if self.revisions.create(namespace, revision_body(replica.owner, name, labels, data, number)):
                    return self._revision_result(name, number, count, replica, sizes)
                existing = self.revisions.get(namespace, name)  # created meanwhile: judge it like any other
                if existing is None:
                    continue  # and deleted again since: try the same name once more
            if controlled_by(existing, replica.owner.uid) and same_data(existing.get("data"), data):
                return self._revision_result(name, int(existing.get("revision") or 0), count, replica, sizes)
            count += 1
        raise application_error(ErrorType.CONFLICT, f"{ref.describe()}: {MAX_COLLISIONS} revision name collisions "
                                                    f"in a row (collision count now {count})")

    def _runners_from_refs(self, ref: ObjectRef, replica: _Replica) -> list[Runner]:
        """Runners rendered from spec.modelRef / runtimeRef (activities/replica/from_refs.py). A model
        or runtime that is missing or not ready yet is ModelNotReady-like: refused as InvalidSpec with
        the reason in the message, and the workflow tries again on its next pass."""
        spec = replica.spec
        if spec.model_ref is None and spec.runtime_ref is None:
            raise application_error(ErrorType.INVALID_SPEC, f"{ref.describe()}: spec needs runners, or a modelRef "
                                                            "and/or runtimeRef to render them from")
        try:
            return render_runners(self._reader, spec, name=replica.base, namespace=replica.owner.namespace,
                                  artifacts=self._artifacts)
        except Unresolvable as exc:
            raise application_error(ErrorType.INVALID_SPEC, f"{ref.describe()}: {exc.reason.value}: "
                                                            f"{exc.message}") from exc
        except NotRenderable as exc:
            raise application_error(ErrorType.INVALID_SPEC, f"{ref.describe()}: {exc}") from exc

    @staticmethod
    def _revision_result(name: str, number: int, count: int, replica: _Replica,
                         sizes: dict[str, int]) -> RevisionResult:
        return RevisionResult(name=name, revision=number, collision_count=count, generation=replica.generation,
                              runner_sizes=sizes, pairing_protocol=replica.spec.pairing_protocol)

    @activity.defn(name="replica.ensure_service")
    def ensure_service(self, replica_ref: ReplicaRef) -> None:
        """The headless Service of the component (named base): it gives every pod its DNS name
        <pod>.<base>; not-ready pods are not published, so only serving pods resolve."""
        replica = self._live(replica_ref.ref)
        body = _service(replica, replica_ref.base)
        namespace = replica.owner.namespace
        if create_unless_exists(self.core.create_namespaced_service, namespace, as_body(body)) is not None:
            return
        live = call(self.core.read_namespaced_service, replica_ref.base, namespace, _preload_content=False)
        current = raw_json(live)
        if not controlled_by(current, replica.owner.uid):
            raise application_error(ErrorType.NAME_IN_USE, f"Service {namespace}/{replica_ref.base} exists and is not "
                                                        f"controlled by InferenceReplica {replica.owner.name}")
        wanted = {k: body["spec"][k] for k in ("selector", "ports")}
        have = {"selector": current["spec"].get("selector") or {},
                "ports": [{k: p.get(k) for k in ("name", "port", "targetPort", "protocol")}
                          for p in current["spec"].get("ports") or []]}
        if not same_data(wanted, have):
            # Ports follow the runners (a new revision may open another one); a merge patch
            # replaces both lists whole.
            call(self.core.patch_namespaced_service, replica_ref.base, namespace, {"spec": wanted},
                 _content_type=MERGE_PATCH)

    @activity.defn(name="replica.create_pods")
    def create_pods(self, request: CreatePodsInput) -> CreatePodsResult:
        """The Instance's pods from the revision, anchor first. A ResourceQuota refusal stops
        there and is reported, not raised: the workflow records it and tries again later."""
        replica = self._live(request.replica.ref)
        revision = self._revision(replica, request.revision)
        key = pods.InstanceKey(index=request.index, incarnation=request.incarnation, slot=request.slot)
        placement = pods.InstancePlacement.of(replica.spec, request.preferred_nodes, request.avoid_node)
        try:
            rendered = pods.render_instance(replica.owner, replica.component, request.replica.base, revision, key,
                                            placement)
        except pods.RenderError as exc:
            raise application_error(ErrorType.INVALID_SPEC, f"{request.replica.ref.describe()}: {exc}") from exc
        kueue.stamp_priority(rendered, self._leaf_tier(replica.owner.namespace, rendered))
        result = CreatePodsResult()
        for body in rendered:
            name = body["metadata"]["name"]
            try:
                created = create_unless_exists(self.core.create_namespaced_pod, replica.owner.namespace,
                                               as_body(body))
            except ApiException as exc:
                message = _status_message(exc)
                if forbidden(exc) and _QUOTA_MESSAGE in message:
                    # Quota admission answers before the name is checked: a full quota refuses
                    # the create of a pod that already exists (seen on kube-apiserver 1.35).
                    existing = self._pod(replica.owner.namespace, name)
                    if existing is not None and controlled_by(existing, replica.owner.uid):
                        result.existed.append(name)
                        continue
                    result.refused, result.refused_reason = message, QUOTA_EXCEEDED
                    return result
                raise
            if created is None:  # the name is taken (409)
                result.existed.append(name)
                continue
            result.created.append(name)
        return result

    def _leaf_tier(self, namespace: str, rendered: list[dict[str, Any]]) -> str | None:
        """The priorityTier of the AcceleratorQuota leaf whose LocalQueue the pods name, when the namespace is
        bound to that leaf (label ome.io/accelerator-quota: <leaf>; the leaf's LocalQueue there is named after
        it: docs/quota.md). None for pods in no queue, a queue that is not a leaf's, or a leaf without a tier."""
        queue = kueue.queue_of(rendered)
        if queue is None:
            return None
        bound = get_or_none(self.core.read_namespace, namespace)
        labels = (bound.metadata.labels or {}) if bound is not None and bound.metadata else {}
        if labels.get(QUOTA_NODE_LABEL) != queue:
            return None
        leaf = get_or_none(self.custom.get_cluster_custom_object, _GROUP, _VERSION, "acceleratorquotas", queue)
        spec = (leaf or {}).get("spec") or {}
        if spec.get("role") != "ClusterQueue":
            return None
        return str(spec.get("priorityTier") or "") or None

    @activity.defn(name="replica.delete_pods")
    def delete_pods(self, request: DeletePodsInput) -> list[str]:
        """The names this call deleted (or found already terminating); a pod already gone, or a
        name that now holds another pod (uid precondition, 409), is not in the list."""
        deleted = []
        for name in request.pods:
            uid = request.uids.get(name)
            options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None)
            try:
                if not delete_if_present(self.core.delete_namespaced_pod, name, request.namespace, body=options):
                    continue
            except ApiException as exc:
                if conflict(exc):  # the uid precondition failed: another pod holds the name
                    continue
                raise
            deleted.append(name)
        return deleted

    @activity.defn(name="replica.set_serving")
    def set_serving(self, request: SetServingInput) -> SetServingResult:
        """The ome.io/serving condition of each pod (pods/status, a strategic merge keyed by
        condition type, so the kubelet's conditions stay); a pod already at that status is left as
        it is, lastTransitionTime included."""
        result = SetServingResult()
        # One read and one patch per pod, the pods side by side (a pass may put 200 in rotation).
        for name, outcome in zip(request.pods, self._fan_out.map(lambda n: self._set_one(request, n), request.pods),
                                 strict=True):
            if outcome == "missing":
                result.missing.append(name)
            elif outcome == "changed":
                result.changed.append(name)
        return result

    def _set_one(self, request: SetServingInput, name: str) -> str:
        """"changed", "unchanged" or "missing" for one pod."""
        wanted = "True" if request.serving else "False"
        pod = self._pod(request.namespace, name)
        if pod is None:
            return "missing"
        current = next((c for c in (pod.get("status") or {}).get("conditions") or []
                        if c.get("type") == keys.SERVING_GATE), None)
        if current is not None and current.get("status") == wanted:
            return "unchanged"
        now = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        patch = {
            # The pod the decision was made on: a pod recreated under the name is not touched.
            "metadata": {"uid": pod["metadata"]["uid"]},
            "status": {"conditions": [{"type": keys.SERVING_GATE, "status": wanted, "reason": request.reason,
                                       "message": request.message, "lastTransitionTime": now}]},
        }
        try:
            call(self.core.patch_namespaced_pod_status, name, request.namespace, patch,
                 _content_type=STRATEGIC_MERGE_PATCH)
        except ApiException as exc:
            # 404: gone since the read. 422 on metadata.uid: the name holds another pod now
            # (a uid in a patch answers "field is immutable", seen on kube-apiserver 1.35).
            if absent(exc) or (exc.status == UNPROCESSABLE and "metadata.uid" in str(exc.body or "")):
                return "missing"
            raise
        return "changed"

    @activity.defn(name="replica.update_in_place")
    def update_in_place(self, request: InPlaceInput) -> InPlaceResult:
        """Move the pod to the revision by patching its images (and labels) when nothing else
        differs; otherwise say what does."""
        replica = self._live(request.replica.ref)
        revision = self._revision(replica, request.revision)
        namespace = replica.owner.namespace
        for _ in range(IN_PLACE_CONFLICTS):
            live = self._pod(namespace, request.pod)
            if live is None or (live.get("metadata") or {}).get("deletionTimestamp"):
                return InPlaceResult(applied=False, reason=f"pod {request.pod} is gone")
            if not controlled_by(live, replica.owner.uid):
                return InPlaceResult(applied=False,
                                     reason=f"pod {request.pod} is not controlled by this InferenceReplica")
            desired = self._desired(replica, request, revision, live)
            if desired is None:
                return InPlaceResult(applied=False,
                                     reason=f"pod {request.pod} has no place in revision {request.revision}")
            change = in_place.diff(desired, live)
            if not change.possible:
                return InPlaceResult(applied=False, reason=change.reason())
            if not change.images and not change.labels:
                return InPlaceResult(applied=True)  # already there
            try:
                call(self.core.patch_namespaced_pod, request.pod, namespace,
                     change.patch(live["metadata"].get("resourceVersion")), _content_type=STRATEGIC_MERGE_PATCH)
            except ApiException as exc:
                if conflict(exc):
                    continue  # the pod changed since it was read: diff again
                if absent(exc):
                    return InPlaceResult(applied=False, reason=f"pod {request.pod} is gone")
                raise
            return InPlaceResult(applied=True)
        raise application_error(ErrorType.CONFLICT, f"pod {namespace}/{request.pod}: still changing after "
                                                    f"{IN_PLACE_CONFLICTS} tries")

    @staticmethod
    def _desired(replica: _Replica, request: InPlaceInput, revision: pods.RevisionData,
                 live: dict[str, Any]) -> dict[str, Any] | None:
        """The pod the revision gives this pod's place (its index, incarnation, slot, worker)."""
        view = pod_view(live)
        if view is None:
            return None
        key = pods.InstanceKey(index=view.index, incarnation=view.incarnation, slot=view.slot)
        # The live pod's own placement terms (migration hints) are not the revision's to change.
        placement = pods.InstancePlacement.of(replica.spec)
        try:
            rendered = pods.render_instance(replica.owner, replica.component, request.replica.base, revision, key,
                                            placement)
        except pods.RenderError:
            return None
        return next((p for p in rendered if p["metadata"]["name"] == request.pod), None)

    @activity.defn(name="replica.prune_revisions")
    def prune_revisions(self, request: PruneRevisionsInput) -> list[str]:
        """Delete the oldest non-live revisions beyond `limit`; a live one never."""
        replica = self._live(request.replica.ref)
        namespace = replica.owner.namespace
        owned = self.revisions.owned(namespace, replica.selector, replica.owner.uid)
        live = set(request.live)
        spare = [r for r in owned if r["metadata"]["name"] not in live]
        excess = spare[: max(len(spare) - max(request.limit, 0), 0)]  # oldest first
        deleted = []
        for revision in excess:
            meta = revision["metadata"]
            if self.revisions.delete(namespace, meta["name"], meta.get("uid")):
                deleted.append(meta["name"])
        return deleted

    def all(self) -> list[Any]:
        return [self.observe, self.read_record, self.ensure_revision, self.ensure_service, self.create_pods,
                self.delete_pods, self.set_serving, self.update_in_place, self.prune_revisions]


def _service(replica: _Replica, base: str) -> dict[str, Any]:
    ports: list[dict[str, Any]] = []
    seen: set[tuple[int, str]] = set()
    for runner in replica.spec.runners or []:
        containers = ((runner.template.get("spec") or {}).get("containers") or [])[:1]
        for port in (containers[0].get("ports") or []) if containers else []:
            number, protocol = int(port["containerPort"]), port.get("protocol") or "TCP"
            if (number, protocol) in seen:
                continue
            seen.add((number, protocol))
            ports.append({"name": port.get("name") or f"{protocol.lower()}-{number}", "port": number,
                          "targetPort": number, "protocol": protocol})
    names = [p["name"] for p in ports]
    if len(set(names)) != len(names):  # two runners naming different ports alike
        for port in ports:
            port["name"] = f"{port['protocol'].lower()}-{port['port']}"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": base, "namespace": replica.owner.namespace, "labels": dict(replica.selector),
                     "ownerReferences": [replica.owner.reference()]},
        "spec": {"clusterIP": "None", "selector": dict(replica.selector), "ports": ports,
                 "publishNotReadyAddresses": False},
    }
