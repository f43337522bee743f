"""A model stored on a PersistentVolumeClaim (storageUri pvc://<claim>/<sub-path>), as its serving pods
see it: the claim mounted read-only, the sub-path as the mount's subPath, at the path the runtime expects
(storage.path, else the model's default path). Pure: no I/O.

Which namespace the claim is in: a BaseModel's is its own; a ClusterBaseModel's is
storage.parameters.namespace, else the controller namespace (the rule the BaseModel workflow's claim
check follows, workflows/basemodel.py). A pod can mount only a claim of its own namespace, so a service
in another namespace than the claim cannot serve the model: `claim_refusal` says why, for the service's
Ready condition, rather than a pod stuck on a claim that is not there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PVC_PREFIX = "pvc://"
_CLAIM = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")


@dataclass(frozen=True)
class ModelClaim:
    claim: str
    sub_path: str
    """The directory inside the claim ("" for its root: no subPath)."""


def model_claim(storage_uri: str | None) -> ModelClaim | None:
    """The claim a pvc:// storageUri names; None for any other scheme or a URI with no valid claim name
    (the BaseModel workflow reports those; they never become Ready)."""
    uri = (storage_uri or "").strip()
    if not uri.startswith(PVC_PREFIX):
        return None
    name, _, sub_path = uri[len(PVC_PREFIX):].partition("/")
    if not _CLAIM.match(name):
        return None
    return ModelClaim(claim=name, sub_path=sub_path.strip("/"))


def claim_namespace(model_namespace: str | None, parameters: dict[str, str] | None,
                    controller_namespace: str | None) -> str | None:
    """Where the claim is: the BaseModel's namespace; a ClusterBaseModel's parameters.namespace, else the
    controller namespace (None when neither is known)."""
    if model_namespace:
        return model_namespace
    return (parameters or {}).get("namespace") or controller_namespace


def claim_refusal(description: str, claim: ModelClaim, claim_ns: str | None, service_ns: str,
                  consumer: str = "this service") -> str | None:
    """Why `consumer` (a service, a BenchmarkJob) in `service_ns` cannot mount the model's claim, or None when
    it can."""
    if claim_ns == service_ns:
        return None
    where = f"namespace {claim_ns}" if claim_ns else "the controller namespace (no storage.parameters.namespace)"
    return (f"{description} is stored on PersistentVolumeClaim {claim.claim} in {where}; a pod mounts only "
            f"claims of its own namespace, and {consumer} is in {service_ns}: serve it from that namespace, "
            f"or give the model a claim in {service_ns} (a BaseModel there, or storage.parameters.namespace)")
