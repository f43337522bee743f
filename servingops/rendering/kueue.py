"""Kueue admission for an Instance's pods. Pure: names, the pod-group metadata a gang gets, and why a
Kueue Workload still holds its pods. The replica activities render and read pods by it, and placement
labels a derived service's pods with the queue and reads the admission gate by the same names.

A runner template carrying the `kueue.x-k8s.io/queue-name` label makes the Instance's pods Kueue's:
its pod webhook adds the `kueue.x-k8s.io/admission` scheduling gate at create, and its controller
removes the gate once the pods' Workload has quota. A single pod is its own Workload (owned by the
pod). A gang must be admitted as a whole, so its pods form one Kueue pod group: the label
`kueue.x-k8s.io/pod-group-name` (one group per Instance incarnation: a recreated gang asks afresh),
the annotation `kueue.x-k8s.io/pod-group-total-count` (the gang's size) and
`kueue.x-k8s.io/pod-group-serving: "true"` (serving pods never "finish"; a lost pod's replacement
rejoins the group). The Workload of a group is owned by every pod of the group.
"""

from __future__ import annotations

import hashlib
from typing import Any

from servingops.api_models.ome import instance_keys as keys

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
GROUP_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
GROUP_SERVING_ANNOTATION = "kueue.x-k8s.io/pod-group-serving"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
"""Names the WorkloadPriorityClass Kueue gives the pod's Workload (it wins over spec.priorityClassName)."""

KUEUE_PENDING, ADMISSION_GATED = keys.KUEUE_PENDING, keys.ADMISSION_GATED

_LABEL_MAX = 63


def queue_of(templates: list[dict[str, Any]]) -> str | None:
    """The LocalQueue the Instance's pods are submitted to: the first runner template (anchor first)
    that names one. Every pod of a gang gets it, so the group is whole in one queue."""
    for template in templates:
        queue = ((template.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
        if queue:
            return str(queue)
    return None


def group_name(anchor_pod: str, incarnation: int) -> str:
    """The gang's Kueue pod-group name (also its Workload's name): the anchor pod's name and the
    incarnation, cut to a label value's 63 characters with a hash of the whole when longer."""
    name = f"{anchor_pod}-i{incarnation}"
    if len(name) <= _LABEL_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[:_LABEL_MAX - 11].rstrip('-.')}-{digest}"


def group_metadata(queue: str, anchor_pod: str, incarnation: int, total: int) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) every pod of a Kueue-managed gang carries."""
    labels = {QUEUE_LABEL: queue, GROUP_NAME_LABEL: group_name(anchor_pod, incarnation)}
    annotations = {GROUP_TOTAL_ANNOTATION: str(total), GROUP_SERVING_ANNOTATION: "true"}
    return labels, annotations


def declares_priority(pod: dict[str, Any]) -> bool:
    """The pod names its own priority: Kueue's WorkloadPriorityClass label or a PriorityClass."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(PRIORITY_CLASS_LABEL) or (pod.get("spec") or {}).get("priorityClassName"))


def stamp_priority(rendered: list[dict[str, Any]], tier: str | None) -> list[dict[str, Any]]:
    """The leaf's priorityTier on an Instance's pods (seed 004: "PriorityTier names the WorkloadPriorityClass
    stamped on this leaf's workloads. It is a default, not a partition: a workload declaring its own priority
    keeps it"). `tier` is the tier of the leaf whose LocalQueue the pods name (None: no leaf, or no tier).
    The Instance's pods are one Workload (a single pod, or a gang's pod group), so the priority is decided for
    all of them at once: when any pod declares its own, none is stamped and the Workload keeps what it said."""
    if not tier or not rendered or any(declares_priority(p) for p in rendered):
        return rendered
    for pod in rendered:
        pod["metadata"].setdefault("labels", {})[PRIORITY_CLASS_LABEL] = tier
    return rendered


def _condition(workload: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def hold_message(workload: dict[str, Any]) -> str | None:
    """Why Kueue has not admitted the Workload, in Kueue's words: its QuotaReserved=False message (e.g.
    "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, ..."), else
    its Admitted=False message (quota reserved, admission checks pending); None while Kueue has said
    nothing yet (a Workload its scheduler has not tried)."""
    name = (workload.get("metadata") or {}).get("name", "")
    for kind in ("QuotaReserved", "Admitted"):
        condition = _condition(workload, kind)
        if condition is not None and condition.get("status") == "False" and condition.get("message"):
            return f"Workload {name}: {condition['message']}"
    return None


def holds_by_pod(workloads: list[dict[str, Any]]) -> dict[str, str]:
    """Pod uid -> why its Workload is not admitted, for every Workload Kueue has refused so far; a
    Workload names its pods as ownerReferences (one pod, or every pod of a group)."""
    out: dict[str, str] = {}
    for workload in workloads:
        admitted = _condition(workload, "Admitted")
        message = None if admitted is not None and admitted.get("status") == "True" else hold_message(workload)
        if message is None:
            continue
        for owner in (workload.get("metadata") or {}).get("ownerReferences") or []:
            if owner.get("kind") == "Pod" and owner.get("uid"):
                out[str(owner["uid"])] = message
    return out
