"""Names and labels of an InferenceReplica's Instances: the contract between the replica engine
(workflows/replica/), the activities that create the pods (activities/replica/), the bridge (which
maps a pod event to its replica) and anything an operator greps for.

Labels the seed fixes: `ome.io/instance-incarnation`, `ome.io/runner`, `ome.io/pairing-protocol` and
the readiness gate `ome.io/serving`. The rest are ours, named in the same domain.

Names derive from the parent InferenceService and the component when the replica is projected
(`<isvc>-<component>`, which is also the projected replica's own name) and from the replica's name
otherwise (seed: "Pod, Service and ControllerRevision names derive from the parent name when set").

- single-pod Instance `i`: slot 0 is `<base>-<i>`, slot 1 is `<base>-<i>-s1` (SurgeThenDrain
  alternates slots: the surge pod is created in the free slot while the old one still serves);
- gang Instance `i`: the leader is `<base>-<i>`, worker `k` (1..size) is `<base>-<i>-w<k>`;
  gangs do not alternate slots (they are recreated as a whole);
- the headless Service of the component is `<base>`; pods set hostname = pod name and
  subdomain = `<base>`, so `OME_LEADER_ADDRESS` is the short DNS name `<leader>.<base>`
  (LeaderWorkerSet's convention);
- ControllerRevisions are `<base>-<hash>`.
"""

from __future__ import annotations

REPLICA_LABEL = "ome.io/inferencereplica"
"""On every pod of a replica: the replica's name (the selector of its pods and of the /scale
subresource's labelSelector, together with COMPONENT_LABEL)."""
COMPONENT_LABEL = "ome.io/component"
INSTANCE_LABEL = "ome.io/instance"
"""The Instance index, decimal."""
INCARNATION_LABEL = "ome.io/instance-incarnation"
RUNNER_LABEL = "ome.io/runner"
SLOT_LABEL = "ome.io/slot"
"""0 or 1: which of the two naming slots of a single-pod Instance the pod is in."""
WORKER_LABEL = "ome.io/worker"
"""1..size on worker pods of a gang; absent on default and leader pods."""
REVISION_LABEL = "controller-revision-hash"
"""The ControllerRevision the pod was rendered from (StatefulSet's label name, so tools that read it
keep working)."""
PAIRING_LABEL = "ome.io/pairing-protocol"
SERVING_GATE = "ome.io/serving"
"""The controller-managed readiness gate: a pod is in rotation only while its condition of this type
is True. The engine sets it; kubelets never do."""
REPLICA_OWNER_ANNOTATION = "ome.io/inferencereplica-uid"

RUNNER_ENV = "OME_RUNNER"
LEADER_ADDRESS_ENV = "OME_LEADER_ADDRESS"
# Set on every pod of a gang with a LeaderWorkerSet's meaning, for upstream OME's multi-node runtimes.
LWS_LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
LWS_GROUP_SIZE_ENV = "LWS_GROUP_SIZE"
LWS_WORKER_INDEX_ENV = "LWS_WORKER_INDEX"

# InstanceOperation.waiting: why an operation's step clock is parked (its deadline null).
QUOTA_EXCEEDED = "QuotaExceeded"
"""A ResourceQuota refused a pod create (also the FailedScale reason)."""
KUEUE_PENDING = "KueuePending"
"""Kueue holds the Instance's pods at its admission gate (also the FailedScale reason and the Event)."""
ADMISSION_GATED = "AdmissionGated"
"""Another scheduling gate holds them."""

SURGE_SLOT_SUFFIX = "-s1"
WORKER_SUFFIX = "-w"


def base_name(replica_name: str, parent_name: str | None, component: str) -> str:
    """What the pods, the headless Service and the ControllerRevisions are named after."""
    return f"{parent_name}-{component}" if parent_name else replica_name


def pod_name(base: str, index: int, *, slot: int = 0, worker: int = 0) -> str:
    """The name of one pod of Instance `index`: slot only for single-pod Instances, worker only for
    gang workers (1..size)."""
    name = f"{base}-{index}"
    if worker:
        return f"{name}{WORKER_SUFFIX}{worker}"
    return f"{name}{SURGE_SLOT_SUFFIX}" if slot else name


def leader_address(base: str, index: int) -> str:
    """Short-form DNS of a gang's leader through the component's headless Service."""
    return f"{pod_name(base, index)}.{base}"


def revision_object_name(base: str, digest: str) -> str:
    return f"{base}-{digest}"


def selector_labels(replica_name: str, component: str) -> dict[str, str]:
    """The labels every pod of the replica carries and that select exactly its pods."""
    return {REPLICA_LABEL: replica_name, COMPONENT_LABEL: component}


def label_selector(replica_name: str, component: str) -> str:
    """status.labelSelector: the selector string the /scale subresource publishes for an HPA."""
    return ",".join(f"{key}={value}" for key, value in sorted(selector_labels(replica_name, component).items()))
