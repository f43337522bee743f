"""Inputs and outputs of the InferenceReplica activities (`ReplicaActivities`, names `replica.*`):
the contract between the replica engine (workflows/replica/) and the cluster. Workflows import them,
with the activity class, inside `workflow.unsafe.imports_passed_through()`.

The activities observe and act on one Instance's pods at a time; the workflow decides. Pod
templates never travel through the workflow: a ControllerRevision holds the rendered runners, and
the activities that create or patch pods read it by name, so histories stay small at 200 Instances.
Names and labels come from api_models/ome/instance_keys.py.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from servingops.api_models.ome.instance_status import InstanceTermination
from servingops.api_models.ome.replica import InferenceReplicaSpec, InferenceReplicaStatus
from servingops.api_models.refs import ObjectRef


class PodView(BaseModel):
    """What the engine needs to know of one pod of an Instance (read from its labels and status)."""

    name: str
    uid: str
    index: int
    slot: int = 0
    runner: str = "default"
    worker: int = 0
    """1..size on a gang worker, 0 otherwise."""
    incarnation: int = 0
    revision: str = ""
    node: str | None = None
    phase: str = "Pending"
    """The pod's status.phase: Pending, Running, Succeeded, Failed, Unknown."""
    scheduled: bool = False
    unschedulable: bool = False
    """PodScheduled is False with reason Unschedulable (no node fits)."""
    gated: bool = False
    """The pod still has spec.schedulingGates (Kueue admission has not released it)."""
    queue: str | None = None
    """The Kueue LocalQueue the pod is submitted to (its kueue.x-k8s.io/queue-name label), if any."""
    admission: str | None = None
    """While Kueue holds the gated pod: why, in Kueue's words (its Workload's QuotaReserved=False
    message, rendering/kueue.py). Volatile: it goes to an Event and a condition, never into
    the Instance's row."""
    containers_ready: bool = False
    ready: bool = False
    """The PodReady condition is True."""
    ready_since: datetime | None = None
    """lastTransitionTime of PodReady when it is True."""
    serving: bool | None = None
    """The ome.io/serving condition: True, False, or None while the engine has not set it."""
    deleting: bool = False
    restart_count: int = 0
    """Sum of the containers' restartCount."""
    last_termination: InstanceTermination | None = None
    """The most recent container termination (last state or current state), if any."""
    created_at: datetime | None = None


class RevisionView(BaseModel):
    """A ControllerRevision this replica controls."""

    name: str
    revision: int
    """ControllerRevision.revision: the order revisions were minted in."""


class RevisionLookup(BaseModel):
    """What spec.pacing.rollbackToRevision names."""

    name: str
    exists: bool
    owned: bool
    """Controlled by this replica (a revision of another owner is ignored with a Warning)."""


class ReplicaObservation(BaseModel):
    """One read of the replica, its pods and its ControllerRevisions."""

    uid: str
    generation: int
    deleting: bool
    spec: InferenceReplicaSpec
    status: InferenceReplicaStatus | None = None
    """Not filled by replica.observe (replica.read_record reads the stored status once, to resume)."""
    base: str
    """What pods, the headless Service and revisions are named after (instance_keys.base_name)."""
    pods: list[PodView] = []
    revisions: list[RevisionView] = []
    rollback_target: RevisionLookup | None = None
    now: datetime
    """The activity's clock when it read the pods (readiness ages are measured against it)."""
    parent_uid: str | None = None
    """A projected replica: the uid of the InferenceService that controls it (its workflow is told
    when the replica's status moves, so status.components[c].lifecycle follows)."""


class ReplicaRef(BaseModel):
    """Which replica an activity acts on, and its naming base."""

    ref: ObjectRef
    base: str


class EnsureRevisionInput(BaseModel):
    replica: ReplicaRef
    collision_count: int = 0


class RevisionResult(BaseModel):
    """The ControllerRevision of the replica's current spec (created if absent)."""

    name: str
    revision: int
    collision_count: int
    """The salt that produced `name` (raised past every collision met on the way)."""
    generation: int
    """The replica generation whose spec was rendered."""
    runner_sizes: dict[str, int]
    """Pods per Instance by runner name: {"default": 1} or {"leader": 1, "worker": N}."""
    pairing_protocol: str | None = None


class CreatePodsInput(BaseModel):
    """Create the pods of one Instance from a revision. Idempotent: a pod that already exists under
    the same name is left alone and reported in `existed`."""

    replica: ReplicaRef
    index: int
    revision: str
    incarnation: int = 0
    slot: int = 0
    preferred_nodes: list[str] = []
    """Migration: preferred node affinity toward these nodes."""
    avoid_node: str | None = None
    """Migration: anti-affinity away from this node."""


class CreatePodsResult(BaseModel):
    created: list[str] = []
    existed: list[str] = []
    refused: str | None = None
    """Admission refused a create (a ResourceQuota, Kueue): the apiserver's message. The pods
    created before the refusal stay; a later pass retries the rest."""
    refused_reason: str | None = None
    """A short token for the refusal, e.g. QuotaExceeded."""


class DeletePodsInput(BaseModel):
    namespace: str
    pods: list[str]
    uids: dict[str, str] = {}
    """Name -> uid preconditions: a pod recreated under the same name since it was observed is not
    deleted."""


class SetServingInput(BaseModel):
    """Set the ome.io/serving readiness-gate condition of these pods (pods/status)."""

    namespace: str
    pods: list[str]
    serving: bool
    reason: str
    message: str = ""


class SetServingResult(BaseModel):
    changed: list[str] = []
    missing: list[str] = []


class InPlaceInput(BaseModel):
    """Move one pod to a revision without recreating it, when only in-place mutable fields differ
    (container images)."""

    replica: ReplicaRef
    pod: str
    revision: str


class InPlaceResult(BaseModel):
    applied: bool
    reason: str = ""
    """Why not, when not applied (e.g. "env of container main differs")."""


class PruneRevisionsInput(BaseModel):
    replica: ReplicaRef
    live: list[str]
    """Never deleted whatever the limit: current, update and every per-Instance running or target
    revision."""
    limit: int
    """How many non-live revisions to keep (the newest)."""


__all__ = [
    "CreatePodsInput",
    "CreatePodsResult",
    "DeletePodsInput",
    "EnsureRevisionInput",
    "InPlaceInput",
    "InPlaceResult",
    "PodView",
    "PruneRevisionsInput",
    "ReplicaObservation",
    "ReplicaRef",
    "RevisionLookup",
    "RevisionResult",
    "RevisionView",
    "SetServingInput",
    "SetServingResult",
]
