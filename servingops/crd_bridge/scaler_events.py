"""Which InferenceService workflow an event of a HorizontalPodAutoscaler wakes, if any. Pure mapping, no I/O.

The service mirrors its scaler's counts into status.components[c].autoscaler (activities/serving/autoscaler.py
reads them from the HPA: ours for class HPA, the one KEDA keeps for our ScaledObject for class KEDA). The HPA
controller writing them is no event of the InferenceService, so without this the mirror waited for the
service's next periodic look (minutes, for a RawDeployment component whose replicas no replica reports).

An HPA belongs to a service by:
- its controller ownerReference to an InferenceService (the HPA we render), else
- the `ome.io/inferenceservice-uid` label with the service's name in `app.kubernetes.io/name` (KEDA's HPA for
  our ScaledObject: KEDA copies the ScaledObject's labels onto it, but its owner is the ScaledObject).
Only what the mirror reads is news (`ScalerFingerprint`): a resourceVersion bump, a managedFields rewrite or
the HPA's current metric values (they move at every sync) wake nobody.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servingops.api_models import contract
from servingops.rendering.render import LABEL_ISVC_UID, LABEL_MANAGED_BY, LABEL_NAME, MANAGED_BY

LABEL_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
"""The HPA watch's selector: ours, and KEDA's for our ScaledObjects (it carries the ScaledObject's labels)."""

ScalerKey = tuple[str, str]
"""(namespace, name) of an HPA."""


@dataclass(frozen=True)
class ScalerFingerprint:
    """What the service mirrors of an HPA. Two events with equal fingerprints are the same news."""

    uid: str
    current: int
    desired: int
    last_scale: str
    conditions: tuple[tuple[str, str, str], ...]
    """(type, status, reason), sorted: AbleToScale, ScalingActive, ScalingLimited."""


@dataclass(frozen=True)
class ScalerState:
    """What the bridge remembers of one HPA: whose it is and what was last seen of it."""

    workflow_id: str
    fingerprint: ScalerFingerprint


def service_workflow_of(hpa: dict[str, Any]) -> str | None:
    """The InferenceService workflow id of the service the HPA scales a component of."""
    meta = hpa.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    for owner in meta.get("ownerReferences") or []:
        group = str(owner.get("apiVersion", "")).split("/")[0]
        if owner.get("controller") and owner.get("kind") == "InferenceService" and group == "ome.io":
            return contract.inference_service_workflow_id(namespace, owner["name"], owner["uid"])
    labels = meta.get("labels") or {}
    uid, name = labels.get(LABEL_ISVC_UID), labels.get(LABEL_NAME)
    if uid and name and labels.get(LABEL_MANAGED_BY) == MANAGED_BY:
        return contract.inference_service_workflow_id(namespace, str(name), str(uid))
    return None


def fingerprint(hpa: dict[str, Any]) -> ScalerFingerprint:
    status = hpa.get("status") or {}
    return ScalerFingerprint(
        uid=str((hpa.get("metadata") or {}).get("uid", "")),
        current=int(status.get("currentReplicas") or 0),
        desired=int(status.get("desiredReplicas") or 0),
        last_scale=str(status.get("lastScaleTime") or ""),
        conditions=tuple(sorted((str(c.get("type")), str(c.get("status")), str(c.get("reason") or ""))
                                for c in status.get("conditions") or [])),
    )


def scaler_key(hpa: dict[str, Any]) -> ScalerKey:
    meta = hpa["metadata"]
    return meta.get("namespace") or "", meta["name"]


@dataclass(frozen=True)
class ScalerChange:
    state: ScalerState | None
    """What to remember of the HPA from now on (None: forget it)."""
    wake: tuple[str, ...]
    """Service workflow ids to send replica-changed to (none, one, or two when the HPA changed hands)."""


def scaler_change(hpa: dict[str, Any], previous: ScalerState | None, *, gone: bool) -> ScalerChange:
    """Map one event of an HPA (gone: DELETED, or vanished while the watch was down) given what was last
    remembered of it."""
    workflow_id = service_workflow_of(hpa)
    wake: list[str] = []
    if previous is not None and (gone or previous.workflow_id != workflow_id):
        wake.append(previous.workflow_id)  # its mirror shows a scaler that went, or is no longer its own
    if gone or workflow_id is None:
        return ScalerChange(None, tuple(wake))
    state = ScalerState(workflow_id, fingerprint(hpa))
    if state != previous:
        wake.append(workflow_id)
    return ScalerChange(state, tuple(dict.fromkeys(wake)))
