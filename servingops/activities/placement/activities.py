"""What placement does in the world: read the source InferenceService and the WorkloadClusters in
the control plane; write, read and delete the derived InferenceService in a member cluster.

A member is reached through the kubeconfig Secret its WorkloadCluster names, read here and turned
into a client in memory (activities/workload_cluster/kubeconfig.py: inline credentials only, never
on disk), kept for the worker's life while its WorkloadCluster and Secret are unchanged (clients.py:
the WorkloadCluster is read on every call, the Secret at most every 30 s). A member that cannot be
reached is an answer (MemberWrite / MemberObservation with a reason), not an exception: the race
goes on with the other candidates, and the workflow looks again.

The derived InferenceService is the source's spec without `placement`, the same name and namespace,
labelled `ome.io/placement-origin=<source uid>` and annotated `ome.io/placement-execution` with the
plan's PlacementExecutionPolicy; each component's pods name the member's Kueue LocalQueue, so
admission is Kueue's decision. A derived object is only ever changed or deleted while it carries
this source's origin label: a same-named object someone else made is NameInUse, never touched, unless
the source opts in to adoption (servingops.io/placement-adopt) and this member's inventory
(`inventory_member`) identified that very object (its uid) as a standing home to adopt.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio import activity
from urllib3.exceptions import HTTPError

from servingops.activities.component_shape import component_shape
from servingops.activities.placement import capacity, mirrors
from servingops.activities.placement.clients import MemberClients
from servingops.activities.placement.member import MemberClient
from servingops.activities.placement.quota_types import (
    MemberCapacityInput,
    MemberCapacityReading,
    QuotaProjectInput,
    QuotaReleaseInput,
    QuotaUnprojectInput,
)
from servingops.activities.placement.types import (
    ApplyMemberInput,
    CapacityInput,
    CapacityReading,
    ClusterRegistration,
    ComponentAdmission,
    MemberInventory,
    MemberObservation,
    MemberTarget,
    MemberWrite,
    PlacementSource,
    SourceInput,
)
from servingops.activities.routing.types import GatewayAddresses, GatewayAddressesInput
from servingops.activities.workload_cluster.registration import (
    RegistrationUnusable,
    VersionedAccess,
    versioned_member_access,
)
from servingops.api_models.contract.placement import ADOPT_ANNOTATION, ADOPT_VALUE
from servingops.api_models.ome import instance_keys as keys
from servingops.api_models.ome.accelerator import AcceleratorCapacityAttribution
from servingops.api_models.ome.accelerator_quota import AcceleratorCapacityStatus
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.api_models.ome.instance_columns import status_rows
from servingops.api_models.ome.placement import (
    EXECUTION_ANNOTATION,
    ORIGIN_LABEL,
    PlacementComponentDemand,
    PlacementDemandContract,
)
from servingops.api_models.ome.placement_status import PlacementCapacityPool, PlacementCapacitySample
from servingops.api_models.ome.replica import InferenceReplicaStatus
from servingops.clients.kube.calls import call
from servingops.clients.kube.custom_objects import CustomObjects
from servingops.clients.kube.errors import absent, conflict, forbidden
from servingops.rendering import multinode, render
from servingops.rendering.capacity_per_cluster import MemberCapacityReport
from servingops.rendering.kueue import ADMISSION_GATE, QUEUE_LABEL
from servingops.rendering.names import route_name
from servingops.rendering.quota_projection import (
    PROJECTION_FINALIZER,
    ClusterOutcome,
    CopyView,
    copy_conflict,
    copy_in_sync,
)
from servingops.rendering.resolution import Unresolvable, resolve_service

GROUP, VERSION = "ome.io", "v1beta1"
_COMPONENTS = (ComponentType.ENGINE, ComponentType.DECODER, ComponentType.ROUTER)
_RAW_NAME, _RAW_COMPONENT = "app.kubernetes.io/name", "app.kubernetes.io/component"


class MemberUnavailable(Exception):
    """The member cannot be reached or its registration cannot be used; `reason` is the token."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _status_message(exc: ApiException) -> str:
    """The apiserver's own reason for a refusal (its Status message), bounded; empty when absent."""
    try:
        message = json.loads(exc.body or "{}").get("message") or ""
    except (ValueError, AttributeError):
        message = ""
    return f": {str(message)[:300]}" if message else ""


def _cause(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:300]


class PlacementActivities:
    """Bound to the control plane's ApiClient for the life of the worker."""

    def __init__(self, api_client: client.ApiClient, controller_namespace: str,
                 clients: MemberClients | None = None) -> None:
        self.controller_namespace = controller_namespace
        """Where a kubeconfig secretRef without a namespace points (as for the health probe)."""
        self.custom = client.CustomObjectsApi(api_client)
        self.objects = CustomObjects(self.custom)
        self.core = client.CoreV1Api(api_client)
        self.clients = clients if clients is not None else MemberClients()
        """Member clients kept for the life of the worker (clients.py)."""

    def all(self) -> list[Any]:
        return [self.read_source, self.apply_member, self.observe_member, self.delete_member, self.read_capacity,
                self.inventory_member, self.member_gateway_addresses, self.project_quota, self.unproject_quota,
                self.release_quota_hold, self.read_member_capacity]

    # -- the control plane ------------------------------------------------------------------

    @activity.defn(name="placement.read_source")
    def read_source(self, inp: SourceInput) -> PlacementSource | None:
        """The source InferenceService and every WorkloadCluster; None when the source is gone."""
        obj = self.objects.get(inp.isvc)  # None also when the name now belongs to a newer object
        if obj is None:
            return None
        meta = obj["metadata"]
        spec = obj.get("spec") or {}
        listed = cast(dict[str, Any], call(self.custom.list_cluster_custom_object,
                                           GROUP, VERSION, "workloadclusters"))
        return PlacementSource(
            uid=meta["uid"],
            generation=int(meta.get("generation", 0)),
            deleting=bool(meta.get("deletionTimestamp")),
            placement=spec.get("placement"),
            components=[c.value for c in _COMPONENTS if spec.get(c.value)],
            min_replicas={c.value: int(spec[c.value]["minReplicas"]) for c in _COMPONENTS
                          if isinstance(spec.get(c.value), dict) and spec[c.value].get("minReplicas") is not None},
            # A registration being deleted (the quota projection's finalizer may hold it a while) is no target:
            # placement sees it as gone at once, as before that finalizer existed.
            registrations=[_registration(item) for item in listed.get("items") or []
                           if not (item.get("metadata") or {}).get("deletionTimestamp")],
            status_placement=(obj.get("status") or {}).get("placement"),
            finalizers=list(meta.get("finalizers") or []),
            rollout_policies=any(isinstance(g, dict) and (g.get("policyRef") or {}).get("name")
                                 for g in (spec.get("rollout") or {}).get("groups") or []),
            autoscaler_policy_components=_autoscaler_policy_consumers(spec),
            adopt=(meta.get("annotations") or {}).get(ADOPT_ANNOTATION) == ADOPT_VALUE,
        )

    def _registration(self, cluster: str) -> dict[str, Any]:
        """The WorkloadCluster, read on every call: a deregistration is seen at once."""
        try:
            return cast(dict[str, Any], call(self.custom.get_cluster_custom_object,
                                             GROUP, VERSION, "workloadclusters", cluster))
        except ApiException as exc:
            if absent(exc):
                self.clients.drop(cluster)
                raise MemberUnavailable("RegistrationNotFound", f"WorkloadCluster {cluster} does not exist") from None
            if forbidden(exc):
                # This plane's own role lacks the read: an answer every caller reports (the quota projection's
                # row, a placement's member condition) and retries at its next pass, not an exception the
                # worker's interceptor would make a permanent failure of the calling workflow.
                raise MemberUnavailable("AccessRefused", f"the worker may not read WorkloadCluster {cluster} "
                                        f"({exc.status} {exc.reason})") from None
            raise

    def _access(self, cluster: str, spec: dict[str, Any]) -> VersionedAccess:
        """The member's client from the kubeconfig Secret; a 403 on the Secret is an answer (as above)."""
        try:
            return versioned_member_access(self.core, spec, self.controller_namespace)
        except ApiException as exc:
            if forbidden(exc):
                raise MemberUnavailable("AccessRefused", f"the worker may not read WorkloadCluster {cluster}'s "
                                        f"kubeconfig Secret ({exc.status} {exc.reason})") from None
            raise

    @contextlib.contextmanager
    def _member(self, cluster: str) -> Iterator[client.ApiClient]:
        """A client for `cluster` from its WorkloadCluster's kubeconfig Secret (the same reading as
        the health probe's: activities/workload_cluster/registration.py), kept between calls
        (clients.py) while the registration and its Secret are unchanged."""
        registration = self._registration(cluster)
        meta = registration.get("metadata") or {}
        spec = registration.get("spec") or {}
        try:
            with self.clients.lease(cluster, str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""),
                                    lambda: self._access(cluster, spec),
                                    ) as api:
                yield api
        except RegistrationUnusable as exc:
            raise MemberUnavailable(exc.reason.value, f"WorkloadCluster {cluster}: {exc.message}") from None

    @contextlib.contextmanager
    def _session(self, cluster: str) -> Iterator[MemberClient]:
        with self._member(cluster) as api:
            try:
                yield MemberClient(api)
            except ApiException as exc:
                if exc.status in (401, 403):
                    self.clients.drop(cluster, api)  # credentials rotated: the next call reads the Secret again
                    raise MemberUnavailable("AccessRefused", f"{cluster} refused the placement identity "
                                            f"({exc.status} {exc.reason})") from None
                if exc.status is None or exc.status >= 500 or exc.status == 0:
                    self.clients.drop(cluster, api)
                    raise MemberUnavailable("Unreachable", f"{cluster}: {exc.status} {exc.reason}") from None
                # Any other refusal (a 422 from the member's CRD or an admission webhook there, a 400, a
                # 409) repeats itself on every retry: an answer the source is told about (Member
                # Refused), tried again on the workflow's next pass, never an activity retried for ever.
                raise MemberUnavailable("Refused", f"{cluster} refused the request: {exc.status} {exc.reason}"
                                        f"{_status_message(exc)}") from None
            except (HTTPError, OSError) as exc:
                self.clients.drop(cluster, api)  # a broken connection is not kept for the next call
                raise MemberUnavailable("Unreachable", f"{cluster} cannot be reached: {_cause(exc)}") from None

    # -- a member -------------------------------------------------------------------------

    @activity.defn(name="placement.apply_member")
    def apply_member(self, inp: ApplyMemberInput) -> MemberWrite:
        """Create or update the derived InferenceService in the member (server-side apply)."""
        source = self.objects.get(inp.source)
        target = inp.target
        if source is None:
            # An answer, not an error to retry: the workflow's next read sees the source gone and withdraws.
            return MemberWrite(done=False, reason="SourceGone", message=(
                f"InferenceService {inp.source.namespace}/{inp.source.name} is gone; nothing was written"))
        body = derived_service(source, target, inp.execution, inp.queue, inp.replica_floors)
        try:
            with self._session(target.cluster) as member:
                current = member.service(target.namespace, target.name)
                if current is not None and not _owned(current, target):
                    return MemberWrite(done=False, reason="NameInUse", message=(
                        f"{target.cluster} already has InferenceService {target.namespace}/{target.name} not "
                        f"derived from this source; it is left alone (annotate the source {ADOPT_ANNOTATION}="
                        f"{ADOPT_VALUE} to adopt it as a home)"))
                try:
                    member.apply_service(body)
                except ApiException as exc:
                    if absent(exc):
                        return MemberWrite(done=False, reason="NamespaceMissing", message=(
                            f"namespace {target.namespace} does not exist in {target.cluster}"))
                    raise
        except MemberUnavailable as exc:
            return MemberWrite(done=False, reason=exc.reason, message=exc.message)
        return MemberWrite(done=True)

    @activity.defn(name="placement.observe_member")
    def observe_member(self, target: MemberTarget) -> MemberObservation:
        """The derived service in the member: does it exist (as ours), each component's admitted
        Instances confirmed by live pods, its ready count, its url."""
        try:
            with self._session(target.cluster) as member:
                current = member.service(target.namespace, target.name)
                if current is None or not _owned(current, target):
                    return MemberObservation(reachable=True, exists=False)
                return _observation(member, target, current)
        except MemberUnavailable as exc:
            return MemberObservation(reachable=False, reason=exc.reason, message=exc.message)

    @activity.defn(name="placement.inventory_member")
    def inventory_member(self, target: MemberTarget) -> MemberInventory:
        """What stands in the member under the source's name, read before placement plans a home there:
        nothing, the source's own copy, or a standing copy (its uid, origin and the Instances its Kueue
        admitted: the resources it holds). Read-only; an unreachable member is an answer (pending)."""
        try:
            with self._session(target.cluster) as member:
                current = member.service(target.namespace, target.name)
                if current is None:
                    return MemberInventory(identified=True)
                if _origin(current) == target.source_uid:
                    return MemberInventory(identified=True, ours=True)  # its counts are the observation's
                seen = _observation(member, target, current)
        except MemberUnavailable as exc:
            return MemberInventory(identified=False, reason=exc.reason, message=exc.message)
        counted = seen.counted
        return MemberInventory(identified=True, standing_uid=(current.get("metadata") or {}).get("uid"),
                               standing_origin=_origin(current), replicas=counted.admitted if counted else 0,
                               admitted=seen.admitted)

    @activity.defn(name="placement.delete_member")
    def delete_member(self, target: MemberTarget) -> MemberWrite:
        """Delete the derived service, only while it is this source's (its origin label); gone is done."""
        try:
            with self._session(target.cluster) as member:
                current = member.service(target.namespace, target.name)
                if current is None:
                    return MemberWrite(done=True)
                if not _owned(current, target):
                    return MemberWrite(done=True, reason="NameInUse", message=(
                        f"{target.cluster}'s {target.namespace}/{target.name} is not derived from this source: kept"))
                try:
                    member.delete_service(target.namespace, target.name, current["metadata"]["uid"])
                except ApiException as exc:
                    if not (absent(exc) or conflict(exc)):  # gone, or a new object by that name (not ours)
                        raise
        except MemberUnavailable as exc:
            return MemberWrite(done=False, reason=exc.reason, message=exc.message)
        return MemberWrite(done=True)


    @activity.defn(name="placement.member_gateway_addresses")
    def member_gateway_addresses(self, inp: GatewayAddressesInput) -> GatewayAddresses:
        """Routing's EndpointSlice fallback: per member, the IP addresses its serving Gateway reports for the
        derived service (the parent Gateway of the service's HTTPRoute there). A member that cannot be read, or
        reports no IP address, is a failure named per member (upstream OME: one failure holds every update)."""
        found = GatewayAddresses()
        namespace = inp.isvc.namespace or ""
        for cluster in inp.clusters:
            try:
                with self._session(cluster) as member:
                    route = next((r for r in (member.route(namespace, route_name(inp.isvc.name, c.value))
                                              for c in (ComponentType.ROUTER, ComponentType.ENGINE)) if r), None)
                    if route is None:
                        found.failures[cluster] = f"{cluster} has no HTTPRoute for {namespace}/{inp.isvc.name}"
                        continue
                    parent = ((route.get("spec") or {}).get("parentRefs") or [{}])[0]
                    gateway = member.gateway(str(parent.get("namespace") or namespace), str(parent.get("name") or ""))
            except MemberUnavailable as exc:
                found.failures[cluster] = exc.message
                continue
            addresses = [str(a["value"]) for a in ((gateway or {}).get("status") or {}).get("addresses") or []
                         if a.get("type", "IPAddress") == "IPAddress" and a.get("value")]
            if addresses:
                found.addresses[cluster] = addresses
            else:
                found.failures[cluster] = (f"{cluster}'s Gateway {parent.get('namespace') or namespace}/"
                                           f"{parent.get('name')} reports no IP address in status.addresses")
        return found

    # -- the AcceleratorQuota projection (rendering/quota_projection.py) -------------------------------

    def _hold_for_copies(self, cluster: str) -> None:
        """PROJECTION_FINALIZER on the WorkloadCluster before a copy is written there: its deregistration then
        waits for `release_quota_hold` to delete the copies. MemberUnavailable when it is being deregistered
        (no copy is written into a cluster on its way out)."""
        registration = self._registration(cluster)
        meta = registration.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            raise MemberUnavailable("Deregistering", f"WorkloadCluster {cluster} is being deregistered")
        finalizers = list(meta.get("finalizers") or [])
        if PROJECTION_FINALIZER in finalizers:
            return
        meta["finalizers"] = [*finalizers, PROJECTION_FINALIZER]
        try:  # under the resourceVersion read: a 409 raises and the activity's retry reads again
            call(self.custom.replace_cluster_custom_object, GROUP, VERSION, "workloadclusters", cluster,
                 registration)
        except ApiException as exc:
            if forbidden(exc):
                raise MemberUnavailable("AccessRefused", f"the worker may not update WorkloadCluster {cluster} "
                                        f"({exc.status} {exc.reason})") from None
            raise

    @activity.defn(name="placement.release_quota_hold")
    def release_quota_hold(self, inp: QuotaReleaseInput) -> ClusterOutcome:
        """A WorkloadCluster being deregistered: delete every projected AcceleratorQuota copy in it (label
        ome.io/quota-projected; the member's own nodes are never touched), then remove PROJECTION_FINALIZER so
        the deregistration completes. An unreachable or refusing member keeps the finalizer, and the answer
        (`error`) says so on the nodes' rows; an administrator may remove the finalizer by hand to leave the
        copies behind."""
        out = ClusterOutcome(cluster=inp.cluster)
        try:
            registration = self._registration(inp.cluster)
        except MemberUnavailable as exc:
            if exc.reason == "RegistrationNotFound":
                return out  # already gone: nothing holds it
            out.error = exc.message
            return out
        meta = registration.get("metadata") or {}
        if not meta.get("deletionTimestamp") or PROJECTION_FINALIZER not in (meta.get("finalizers") or []):
            return out
        try:
            with self._session(inp.cluster) as member:
                for copy in member.projected_copies():
                    copy_meta = copy.get("metadata") or {}
                    if copy_meta.get("deletionTimestamp"):
                        continue
                    try:
                        member.delete_quota_copy(str(copy_meta["name"]), str(copy_meta.get("uid", "")))
                    except ApiException as exc:
                        if not absent(exc) and not conflict(exc):
                            raise
                    out.wrote = True
        except MemberUnavailable as exc:
            out.error = (f"{inp.cluster} is being deregistered, but its projected copies could not be deleted: "
                         f"{exc.message}; its WorkloadCluster keeps the finalizer {PROJECTION_FINALIZER} until they "
                         "are (remove it by hand to leave them there)")
            return out

        def drop(obj: dict[str, Any]) -> bool:
            finalizers = list(obj["metadata"].get("finalizers") or [])
            if PROJECTION_FINALIZER not in finalizers:
                return False
            obj["metadata"]["finalizers"] = [f for f in finalizers if f != PROJECTION_FINALIZER]
            return True

        if drop(registration):
            try:
                call(self.custom.replace_cluster_custom_object, GROUP, VERSION, "workloadclusters", inp.cluster,
                     registration)
            except ApiException as exc:
                if not absent(exc):
                    raise  # a 409: the activity's retry reads it again
        return out

    @activity.defn(name="placement.read_member_capacity")
    def read_member_capacity(self, inp: MemberCapacityInput) -> MemberCapacityReading:
        """Each registered WorkloadCluster's own root report (its root AcceleratorQuota's status.capacity),
        read through the registration, for the management plane's perCluster rows. A member that cannot be
        read, or has no single root, is a row saying why, never an exception: the others are still read."""
        try:
            listed = cast(dict[str, Any], call(self.custom.list_cluster_custom_object, GROUP, VERSION,
                                               "workloadclusters"))
        except ApiException as exc:
            if forbidden(exc):
                # An answer, as for a registration the role may not read: the worker's interceptor would make it a
                # permanent failure of the capacity report's sample, retried forever with nobody saying why.
                return MemberCapacityReading(refused=f"the worker may not list WorkloadClusters: {exc.status} "
                                                     f"{exc.reason}: {str(exc.body)[:400]}")
            raise
        out = MemberCapacityReading()
        for item in sorted(listed.get("items") or [], key=lambda i: str((i.get("metadata") or {}).get("name"))):
            meta = item.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                continue
            report = MemberCapacityReport(cluster=str(meta.get("name", "")), cluster_uid=str(meta.get("uid", "")))
            try:
                with self._session(report.cluster) as member:
                    root = capacity.root_quota(member.accelerator_quotas())
            except MemberUnavailable as exc:
                report.reason, report.message = exc.reason, exc.message
            except capacity.CapacityUnknown as exc:
                report.reason, report.message = exc.reason, exc.message
            else:
                root_meta = root.get("metadata") or {}
                entries = ((root.get("status") or {}).get("capacity")) or []
                try:
                    report.capacity = [AcceleratorCapacityStatus.model_validate(e).model_copy(
                        update={"per_cluster": None}) for e in entries]
                except ValidationError as exc:
                    report.reason, report.message = "ReportInvalid", f"{report.cluster}'s root report: {_cause(exc)}"
                else:
                    report.available = True
                    report.report_uid = str(root_meta.get("uid", ""))
                    report.report_resource_version = str(root_meta.get("resourceVersion", ""))
            out.members.append(report)
        activity.logger.debug("capacity of %d member(s) read for %s", len(out.members), inp.root)
        return out

    @activity.defn(name="placement.project_quota")
    def project_quota(self, inp: QuotaProjectInput) -> ClusterOutcome:
        """Write a node's projected copy into one member unless it already holds it (an AcceleratorQuota of
        that name without the projection label is the member's own: never written), then read the copy back
        (its status is what the member's own controller made of it). An unreachable member or a refusal is
        an answer (`error`), never an exception: the other members go on."""
        out = ClusterOutcome(cluster=inp.cluster, unresolved=inp.unresolved)
        try:
            with self._session(inp.cluster) as member:
                found = member.quota_copy(inp.name)
            # Held only once the member answered: a member never reached holds no copy, so its deregistration
            # is not kept waiting for one. This plane's object: outside the member's session, whose errors
            # are the member's.
            if inp.body is not None:
                self._hold_for_copies(inp.cluster)
            with self._session(inp.cluster) as member:
                existing = CopyView.from_object(found) if found is not None else None
                out.conflict = copy_conflict(inp.cluster, existing)
                if not out.conflict and inp.body is not None and not copy_in_sync(inp.body, existing):
                    member.apply_quota_copy(inp.body)
                    out.wrote = True
                    found = member.quota_copy(inp.name)
                    existing = CopyView.from_object(found) if found is not None else None
        except MemberUnavailable as exc:
            out.error = exc.message
            return out
        out.copy_ = existing
        return out

    @activity.defn(name="placement.unproject_quota")
    def unproject_quota(self, inp: QuotaUnprojectInput) -> ClusterOutcome:
        """Delete a node's projected copy from one member: only a copy carrying the projection label and this
        source's origin (a copy someone else projected, or the member's own node, is left alone)."""
        out = ClusterOutcome(cluster=inp.cluster)
        try:
            with self._session(inp.cluster) as member:
                found = member.quota_copy(inp.name)
                existing = CopyView.from_object(found) if found is not None else None
                if existing is not None and existing.projected and existing.origin == inp.origin:
                    try:
                        member.delete_quota_copy(inp.name, existing.uid)
                    except ApiException as exc:
                        if not absent(exc) and not conflict(exc):
                            raise
                    out.wrote = True
        except MemberUnavailable as exc:
            out.error = exc.message
        return out

    @activity.defn(name="placement.read_capacity")
    def read_capacity(self, inp: CapacityInput) -> CapacityReading:
        """SplitByCapacity: resolve the derived service as the member would render it (its runtimes and
        models), then normalize the member's own capacity report by what one replica demands
        (capacity.py says how)."""
        source = self.objects.get(inp.source)
        target = inp.target
        if source is None:
            return CapacityReading(reason="SourceGone", message=(
                f"InferenceService {inp.source.namespace}/{inp.source.name} is gone"))
        body = derived_service(source, target, {}, inp.queue)
        try:
            with self._session(target.cluster) as member:
                resolved = resolve_service(member.reader(self.controller_namespace), body)
                root = capacity.root_quota(member.accelerator_quotas())
            spec = InferenceServiceSpec.model_validate(resolved.spec)
            shapes = [component_shape(c.value, multinode.runner_templates(target.name, c, cspec))
                      for c in (ComponentType.ENGINE, ComponentType.DECODER)
                      if (cspec := render.component_spec(spec, c)) is not None]
            normalized = capacity.normalize(shapes, root, datetime.now(UTC))
        except MemberUnavailable as exc:
            return CapacityReading(reason=exc.reason, message=exc.message)
        except Unresolvable as exc:
            return CapacityReading(reason="DemandUnresolvable", message=(
                f"the service cannot be rendered there to learn its demand: {exc.message}"))
        except (ValidationError, ValueError) as exc:
            # A resolved spec that does not parse or render (render.Unservable is a ValueError): the same
            # answer on every attempt, so an answer now, never an activity the MEMBER policy retries for ever.
            return CapacityReading(reason="DemandUnresolvable", message=(
                f"the service cannot be rendered there to learn its demand: {_cause(exc)}"))
        except capacity.CapacityUnknown as exc:
            return CapacityReading(reason=exc.reason, message=exc.message)
        contract = PlacementDemandContract(fingerprint=normalized.fingerprint, components=[
            PlacementComponentDemand(component=ComponentType(s.component), rendering_hash=s.rendering_hash)
            for s in shapes])
        return CapacityReading(sample=PlacementCapacitySample(
            demand_fingerprint=normalized.fingerprint, demand_contract=contract, replicas=normalized.replicas,
            pools=[PlacementCapacityPool(
                resource_name=p.resource_name, resource_flavor=p.resource_flavor, demand=p.demand,
                allocatable=p.allocatable, observed_at=p.observed_at, report_uid=normalized.report_uid,
                report_resource_version=normalized.report_resource_version,
                attribution=AcceleratorCapacityAttribution.model_validate(p.attribution)) for p in normalized.pools]))


# --- pure helpers ---------------------------------------------------------------------------------


def _registration(item: dict[str, Any]) -> ClusterRegistration:
    meta = item["metadata"]
    conditions = (item.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return ClusterRegistration(name=meta["name"], uid=meta.get("uid", ""), labels=dict(meta.get("labels") or {}),
                               ready=ready)


def _autoscaler_policy_consumers(spec: dict[str, Any]) -> list[str]:
    """The components whose spec names an autoscalerPolicyRef (the source's, or a derived copy's)."""
    return [c.value for c in _COMPONENTS if isinstance(spec.get(c.value), dict)
            and (spec[c.value].get("autoscalerPolicyRef") or {}).get("name")]


def _origin(obj: dict[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(ORIGIN_LABEL)


def _owned(obj: dict[str, Any], target: MemberTarget) -> bool:
    """The object is this source's to write, read and delete: derived from it (its origin label), or the
    very standing copy an inventory identified for adoption (its uid; a same-named object made since is not)."""
    if _origin(obj) == target.source_uid:
        return True
    return bool(target.adopt_uid) and (obj.get("metadata") or {}).get("uid") == target.adopt_uid


def _observation(member: MemberClient, target: MemberTarget, current: dict[str, Any]) -> MemberObservation:
    """The service in the member as placement counts it: each component's admitted Instances confirmed by
    live pods, its ready count, its url and the mirrors."""
    pods = member.pods(target.namespace)
    spec = current.get("spec") or {}
    components = [_admission(member, target, c, spec.get(c.value) or {}, pods)
                  for c in _COMPONENTS if spec.get(c.value)]
    status = current.get("status") or {}
    return MemberObservation(reachable=True, exists=True, components=components, url=status.get("url"),
                             rollout=mirrors.rollout_mirror(status),
                             autoscaling=mirrors.autoscaling_mirror(status, _autoscaler_policy_consumers(spec)))


def derived_service(source: dict[str, Any], target: MemberTarget, execution: dict[str, Any],
                    queue: str, floors: dict[str, int] | None = None) -> dict[str, Any]:
    """The member's copy: the source's spec without placement, each component's pods in `queue`
    (unless the source names a queue for that component itself); with `floors` (All / Split), each
    component runs its floor in this home as minReplicas (maxReplicas raised to it when lower)."""
    spec = {k: v for k, v in (source.get("spec") or {}).items() if k != "placement"}
    for component in _COMPONENTS:
        if isinstance(spec.get(component.value), dict):
            block = dict(spec[component.value])
            if floors is not None and component.value in floors:
                block["minReplicas"] = floors[component.value]
                if block.get("maxReplicas") is not None and int(block["maxReplicas"]) < floors[component.value]:
                    block["maxReplicas"] = floors[component.value]
            block["labels"] = {QUEUE_LABEL: queue, **(block.get("labels") or {})}  # the source's own queue wins
            spec[component.value] = block
    meta = source.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != ORIGIN_LABEL}
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
        "metadata": {"name": target.name, "namespace": target.namespace,
                     "labels": {**labels, ORIGIN_LABEL: target.source_uid},
                     "annotations": {EXECUTION_ANNOTATION: json.dumps(execution, sort_keys=True)}},
        "spec": spec,
    }


def _admission(member: MemberClient, target: MemberTarget, component: ComponentType,
               cspec: dict[str, Any], pods: list[client.V1Pod]) -> ComponentAdmission:
    """OMENative: the replica's admitted rows, each confirmed by its Instance's live pods (present,
    none gated). RawDeployment: the component's live pods that left Kueue's gate."""
    live = [p for p in pods if p.metadata is not None and p.metadata.deletion_timestamp is None]
    desired = int(cspec.get("minReplicas") or 0) if cspec.get("minReplicas") is not None else 1
    replica_name = f"{target.name}-{component.value}"
    replica = member.replica(target.namespace, replica_name)
    if replica is not None:
        status = InferenceReplicaStatus.model_validate(replica.get("status") or {})
        by_instance: dict[str, list[client.V1Pod]] = {}
        for pod in live:
            labels = _labels(pod)
            if labels.get(keys.REPLICA_LABEL) == replica_name and keys.INSTANCE_LABEL in labels:
                by_instance.setdefault(labels[keys.INSTANCE_LABEL], []).append(pod)
        admitted = sum(1 for row in status_rows(status) if row.admitted and by_instance.get(str(row.index))
                       and not any(_gated(p) for p in by_instance[str(row.index)]))
        desired = int((replica.get("spec") or {}).get("replicas") or desired)
        return ComponentAdmission(component=component.value, admitted=admitted, ready=status.ready_replicas or 0,
                                  desired=desired)
    mine = [p for p in live if _labels(p).get(_RAW_NAME) == target.name
            and _labels(p).get(_RAW_COMPONENT) == component.value]
    return ComponentAdmission(component=component.value, admitted=sum(1 for p in mine if not _gated(p)),
                              ready=sum(1 for p in mine if _ready(p)), desired=desired)


def _labels(pod: client.V1Pod) -> dict[str, str]:
    return dict((pod.metadata.labels if pod.metadata else None) or {})


def _gated(pod: client.V1Pod) -> bool:
    return any(g.name == ADMISSION_GATE for g in (pod.spec.scheduling_gates if pod.spec else None) or [])


def _ready(pod: client.V1Pod) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)
