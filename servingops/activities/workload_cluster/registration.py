"""A WorkloadCluster's spec to the access its member is reached with: the kubeconfig Secret it
names, read with the control-plane client, parsed in memory (kubeconfig.py). One reading for every
activity that talks to a member: the health probe (activities.py) and placement
(activities/placement/activities.py)."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.activities.workload_cluster.kubeconfig import (
    KubeConfigError,
    MemberAccess,
    parse_kubeconfig,
    secret_location,
)
from servingops.api_models.contract.workload_cluster import ConnectionReason
from servingops.clients.kube.calls import call
from servingops.clients.kube.errors import absent


class RegistrationUnusable(Exception):
    """The registration cannot give an access: `reason` says why (a Ready condition reason), the
    message names fields and objects, never a value from the Secret."""

    def __init__(self, reason: ConnectionReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class VersionedAccess:
    """An access and the resourceVersion of the Secret it was read from: a caller that keeps a
    client (placement's per-worker cache) tells a rotated Secret from the one it built from."""

    access: MemberAccess
    secret_version: str


def member_access(core: client.CoreV1Api, spec: dict[str, Any], controller_namespace: str) -> MemberAccess:
    """The access of the member `spec` registers. Raises RegistrationUnusable for what the
    registration itself gets wrong; an ApiException other than a missing Secret (a 403, a
    control-plane outage) is left to the caller, whose retry policy decides."""
    return versioned_member_access(core, spec, controller_namespace).access


def versioned_member_access(core: client.CoreV1Api, spec: dict[str, Any],
                            controller_namespace: str) -> VersionedAccess:
    """member_access, with the Secret's resourceVersion."""
    source = spec.get("clusterSource") or {}
    if source.get("clusterProfileRef") is not None:
        name = (source["clusterProfileRef"] or {}).get("name", "")
        raise RegistrationUnusable(ConnectionReason.CLUSTER_PROFILE_UNSUPPORTED,
                                   f"clusterProfileRef {name!r} is recorded but not resolved: connect this cluster "
                                   "through spec.clusterSource.kubeConfig")
    location = secret_location(spec, controller_namespace)
    if location is None:
        raise RegistrationUnusable(ConnectionReason.SECRET_NOT_FOUND,
                                   "spec.clusterSource.kubeConfig.secretRef names no Secret")
    where = f"Secret {location.namespace}/{location.name}"
    try:
        secret = call(core.read_namespaced_secret, location.name, location.namespace)
    except ApiException as exc:
        if absent(exc):
            raise RegistrationUnusable(ConnectionReason.SECRET_NOT_FOUND, f"{where} does not exist") from None
        raise
    encoded = (secret.data or {}).get(location.key)
    if not encoded:
        keys = ", ".join(sorted(secret.data or {})) or "none"
        raise RegistrationUnusable(ConnectionReason.KUBECONFIG_KEY_MISSING,
                                   f"{where} has no key {location.key!r} (keys: {keys})")
    try:
        text = base64.b64decode(encoded).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise RegistrationUnusable(ConnectionReason.KUBECONFIG_INVALID,
                                   f"{where} key {location.key!r} is not UTF-8 text") from None
    try:
        access = parse_kubeconfig(text)
    except KubeConfigError as exc:
        raise RegistrationUnusable(ConnectionReason.KUBECONFIG_INVALID, f"{where} key {location.key!r}: {exc}") \
            from None
    return VersionedAccess(access=access, secret_version=str((secret.metadata.resource_version if secret.metadata
                                                               else None) or ""))

