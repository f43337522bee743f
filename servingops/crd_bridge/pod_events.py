"""Which InferenceReplica workflow a pod event wakes, if any. Pure mapping, no I/O.

Like controller-runtime's Owns(&Pod{}): a pod belongs to the replica named by its controller
ownerReference (kind InferenceReplica), whose uid is part of the replica workflow's id. The
engine re-reads all its pods when woken, so an event only matters when something the engine
reads moved; `PodFingerprint` is that something. A resourceVersion bump alone (an annotation,
a managedFields rewrite, a probe timestamp) wakes nobody.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servingops.api_models import contract
from servingops.api_models.ome import instance_keys

OWNER_KIND = "InferenceReplica"
OWNER_GROUP = "ome.io"
LABEL_SELECTOR = instance_keys.REPLICA_LABEL
"""The pod watch's selector: every pod a replica created carries the label (any value)."""

PodKey = tuple[str, str]
"""(namespace, name) of a pod."""

_STATE_KINDS = ("waiting", "running", "terminated")


@dataclass(frozen=True)
class PodFingerprint:
    """What the engine reads from a pod. Two events with equal fingerprints are the same news."""

    uid: str
    phase: str
    conditions: tuple[tuple[str, str], ...]
    """(type, status), sorted: Ready, ContainersReady, the ome.io/serving gate, PodScheduled..."""
    deleting: bool
    containers: tuple[tuple[str, int, str], ...]
    """(name, restartCount, state kind) of every container status, init containers included
    (a native sidecar's restart counts as one)."""
    node: str
    labels: tuple[tuple[str, str], ...]
    gated: bool
    """spec.schedulingGates is not empty (admission such as Kueue holds the pod)."""


@dataclass(frozen=True)
class PodState:
    """What the bridge remembers of one pod: whose it is and what was last seen of it."""

    workflow_id: str
    fingerprint: PodFingerprint


def replica_workflow_of(pod: dict[str, Any]) -> str | None:
    """The replica workflow id from the pod's InferenceReplica controller ownerReference."""
    meta = pod.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        group = str(owner.get("apiVersion", "")).split("/")[0]
        if owner.get("controller") and owner.get("kind") == OWNER_KIND and group == OWNER_GROUP:
            return contract.replica_workflow_id(meta.get("namespace") or "", owner["name"], owner["uid"])
    return None


def _state_kind(status: dict[str, Any]) -> str:
    state = status.get("state") or {}
    return next((kind for kind in _STATE_KINDS if state.get(kind) is not None), "")


def fingerprint(pod: dict[str, Any]) -> PodFingerprint:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    containers = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    return PodFingerprint(
        uid=str(meta.get("uid", "")),
        phase=str(status.get("phase", "")),
        conditions=tuple(sorted((str(c.get("type")), str(c.get("status"))) for c in status.get("conditions") or [])),
        deleting=bool(meta.get("deletionTimestamp")),
        containers=tuple((str(c.get("name")), int(c.get("restartCount") or 0), _state_kind(c)) for c in containers),
        node=str(spec.get("nodeName") or ""),
        labels=tuple(sorted((meta.get("labels") or {}).items())),
        gated=bool(spec.get("schedulingGates")),
    )


def pod_key(pod: dict[str, Any]) -> PodKey:
    meta = pod["metadata"]
    return meta.get("namespace") or "", meta["name"]


@dataclass(frozen=True)
class PodChange:
    state: PodState | None
    """What to remember of the pod from now on (None: forget it)."""
    wake: tuple[str, ...]
    """Replica workflow ids to send pods-changed to (none, one, or two when the pod changed hands)."""


def pod_change(pod: dict[str, Any], previous: PodState | None, *, gone: bool) -> PodChange:
    """Map one event of a pod (gone: DELETED, or vanished while the watch was down) given what
    was last remembered of it."""
    workflow_id = replica_workflow_of(pod)
    wake: list[str] = []
    # A pod that left a replica (orphaned, re-owned, deleted) is news to the replica it left.
    if previous is not None and (gone or previous.workflow_id != workflow_id):
        wake.append(previous.workflow_id)
    if gone:
        if workflow_id is not None and workflow_id not in wake:
            wake.append(workflow_id)  # DELETED always counts
        return PodChange(None, tuple(wake))
    if workflow_id is None:
        return PodChange(None, tuple(wake))
    state = PodState(workflow_id, fingerprint(pod))
    if state != previous:
        wake.append(workflow_id)
    return PodChange(state, tuple(dict.fromkeys(wake)))
