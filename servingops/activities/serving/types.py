"""Inputs and outputs of the serving activities (Deployments, Services, HTTPRoutes): the contract
between the rollout workflows and `ServingActivities`. Workflows import them, with the activity
class, inside `workflow.unsafe.imports_passed_through()`.

An InferenceService component in RawDeployment mode is served as one Deployment and one Service
per revision, both named `<isvc>-<component>-rev-<hash>`, and one HTTPRoute named
`<isvc>-<component>` whose weighted backendRefs carry the split (the names: rendering/names.py).
The revision hash is a stable hash of the rendered pod template. Activities observe and move
capacity and traffic; the workflow decides.

`TrafficWeight` is also part of the rollout messages, and `RouteStatus` and `IngressObservation`
are kept in the InferenceService workflow's memory, so they live in the API models
(api_models.serving) and are only used here.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.refs import ObjectRef
from servingops.api_models.serving import IngressObservation, RouteStatus, TrafficWeight


class RevisionKey(BaseModel):
    isvc: ObjectRef
    component: ComponentType
    revision: str


class RevisionObservation(BaseModel):
    revision: str
    replicas: int
    """spec.replicas of the revision's Deployment."""
    ready_replicas: int
    updated_replicas: int = 0


class ComponentObservation(BaseModel):
    component: ComponentType
    desired_revision: str
    """The hash of the pod template the current spec renders."""
    desired_replicas: int
    """What the spec asks for (minReplicas, else 1)."""
    revisions: list[RevisionObservation]
    """Every revision Deployment that exists for this component."""
    traffic: list[TrafficWeight]
    """The HTTPRoute's current split (empty before the first set_traffic)."""
    url: str | None = None
    """Once the HTTPRoute exists: `<urlScheme>://<the component's host>` when a Gateway is
    configured, else its cluster-local address (status.components[c].url)."""
    address: str | None = None
    """Once the HTTPRoute exists: the component's cluster-local address (render.component_url); the
    entrypoint's is status.address. A new field: older histories decode it as None."""
    route_status: RouteStatus | None = None
    """What the configured Gateway says of the component's HTTPRoute; None without a Gateway (or
    before the route exists, or while the ingress block does not parse). A new field."""
    ingress_drift: bool = False
    """The live HTTPRoute does not carry the parentRefs / hostnames the ingress configuration renders
    now: the InferenceService workflow applies it again with its current weights when no run is
    moving the component. A new field: older histories decode it as False."""
    replica: str | None = None
    """OMENative: the projected InferenceReplica serving the component (its /scale is the scale target)."""
    lifecycle: dict[str, object] | None = None
    """OMENative: the replica's status in the LifecycleStatus shape, projected verbatim onto
    status.components[c].lifecycle (a new field: older histories decode it as None)."""
    autoscaler_digest: str | None = None
    """OMENative: scaling.scaler_digest of the component (its autoscaler block and bounds)."""
    scale_replicas: int | None = None
    """OMENative: the projected replica's spec.replicas (its /scale: the count a scaler of the component set).
    A new field: older histories decode it as None."""
    max_replicas: int | None = None
    """spec.<component>.maxReplicas (a follower's upper bound under spec.scalingPolicy). A new field."""
    selected_accelerator: dict[str, object] | None = None
    """The AcceleratorClass the component renders for (AcceleratorSelection JSON, status.components.<c>.
    selectedAccelerator). A new field: older histories decode it as None."""


class ServingHold(BaseModel):
    """Why a spec that serves by reference cannot be rendered now (rendering/resolution.py
    UnresolvableReason): it may become servable without a new generation (a model turns Ready, a
    runtime appears), so it is re-observed, not refused."""

    reason: str
    message: str


class ServiceObservation(BaseModel):
    """One read of an InferenceService and what serves it."""

    uid: str
    generation: int
    resource_version: str
    deleting: bool
    annotations: dict[str, str]
    """Only the ome.io/rollout-* annotations."""
    spec_rollout: dict[str, object] | None
    """spec.rollout as the apiserver holds it (defaults applied); parse with RolloutSpec."""
    components: list[ComponentObservation]
    by_reference: bool = False
    """The spec names a model: what it renders also depends on the model and runtime objects, whose
    changes are no event of this object (so the workflow re-observes on a timer)."""
    mounted_overlays: list[dict[str, object]] = []
    """status.mountedOverlays (MountedOverlay JSON): the overlays wired into the pods."""
    skipped_overlays: list[str] = []
    """Overlays declared but left out, each with why (the OverlaysReady condition)."""
    pinned_revision: str | None = None
    """spec.runtime.autoSync false: the ControllerRevision (controller namespace) holding the runtime
    snapshot the pods render from (status.pinnedRevisionName)."""
    runtime_sync_token: str | None = None
    """The ome.io/runtime-sync value that pin was taken at (status.lastRuntimeSyncToken)."""
    held: ServingHold | None = None
    """Set when the spec names a model / runtime that cannot serve it yet (components then empty:
    what serves now keeps serving). A new field: histories recorded before it decode it as None."""
    placed: bool = False
    """spec.placement is set: member clusters serve it (the placement workflow), nothing is rendered
    here (components empty). A new field: histories recorded before it decode it as False."""
    ingress: IngressObservation | None = None
    """Where the service answers by the operator's ingress block as read now. A new field: histories
    recorded before it decode it as None, and the workflow then writes no IngressReady."""
    expires_at: datetime | None = None
    """creationTimestamp + spec.ttlSecondsAfterCreation as the object says now (rendering/expiry.py);
    None without a ttl and for a placement copy. A new field: older histories decode it as None."""
    traffic_declared: bool = False
    """spec.traffic or an ome.io/* traffic annotation declares traffic intent (the backend policy is
    kept). A new field: older histories decode it as False and schedule no policy call."""
    scaling_policy: dict[str, object] | None = None
    """The effective spec.scalingPolicy (the service's, else its runtime's default) when it coordinates
    (mode Proportional or Pinned), in API form, checked by rendering/scaling_policy.py. A new field:
    older histories decode it as None and coordinate nothing."""
    traffic_reported: bool = False
    """status.traffic is on the object: a policy of ours may be live and is to be cleaned up once the
    intent goes. A new field, decoded as False by older histories."""
    selects_accelerators: bool = False
    """An inline spec (no model) that asks for an AcceleratorClass (by name or by policy): what it renders
    also depends on the classes, whose edits are no event of this object, so the workflow re-observes it
    on the by-reference timer. A new field: older histories decode it as False and keep no such timer."""



class ObserveInput(BaseModel):
    isvc: ObjectRef


class EnsureRevisionInput(BaseModel):
    """Create the revision's Deployment and Service from the current spec when absent, else only
    set replicas. Refused, permanently: RevisionSuperseded when the revision does not exist and
    the current spec no longer renders to it; InvalidSpec when the spec cannot be rendered."""

    key: RevisionKey
    replicas: int
    component_replicas: int | None = None
    """OMENative: the projected replica's whole count (spec.replicas), written by a spec.scalingPolicy
    follower's ensure; None: the component's minReplicas, as before (older histories)."""


class SetTrafficInput(BaseModel):
    isvc: ObjectRef
    component: ComponentType
    weights: list[TrafficWeight]


class ScaleThenRouteInput(BaseModel):
    """A canary step's serving in one call: ensure each revision at its replicas (as
    EnsureRevisionInput), then, only when every one of them has that many Ready, program each
    route (as SetTrafficInput). Refused as those two are."""

    revisions: list[EnsureRevisionInput]
    routes: list[SetTrafficInput] = []


class ScaleThenRouteResult(BaseModel):
    scaled: list[RevisionObservation]
    """Each revision's Deployment as the scale left it, in the order asked."""
    routed: bool
    """Whether the routes were programmed: every revision had its replicas Ready (always False
    when no route was asked)."""
