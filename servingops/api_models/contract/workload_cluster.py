"""What the WorkloadCluster health process decides and answers (docs/placement.md "WorkloadCluster
health"): one verdict per probe of a member cluster, with the reason the Ready condition carries.

The verdict travels in workflow history and in the `state` query, so it holds no secret: the
kubeconfig stays in its Secret, read by the activity, and messages name fields, never values.
Every field added later needs a default (stored histories decode old payloads).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel

from servingops.api_models.errors import CONDITION_REASON_PATTERN

RECHECK_ANNOTATION = "servingops.io/recheck"
"""On a WorkloadCluster: any new value asks for a probe now. A Secret's change reaches no workflow
(and an annotation moves no generation), so this is how an operator says "I fixed the Secret"
without waiting for the interval: `kubectl annotate wlc <name> servingops.io/recheck=$(date +%s)
--overwrite`. The bridge forwards it as the `annotation` signal."""


class ConnectionReason(StrEnum):
    """The Ready condition's reason: Connected when True, else why the member cannot be used."""

    CONNECTED = "Connected"
    SECRET_NOT_FOUND = "SecretNotFound"
    """The kubeconfig Secret named by spec.clusterSource.kubeConfig.secretRef does not exist."""
    SECRET_FORBIDDEN = "SecretForbidden"
    """The worker may not read that Secret (403 that outlived an apiserver restart's RBAC warm-up):
    the chart's rbac.secretNamespaces does not include its namespace."""
    KUBECONFIG_KEY_MISSING = "KubeConfigKeyMissing"
    """The Secret has no data under spec.clusterSource.kubeConfig.key."""
    KUBECONFIG_INVALID = "KubeConfigInvalid"
    """The kubeconfig does not parse, or needs what a worker will not do for it (exec plugins, auth
    providers, files on the worker's disk)."""
    UNREACHABLE = "Unreachable"
    """Connection refused, timeout, TLS failure, or an apiserver that answers but is not ready."""
    UNAUTHORIZED = "Unauthorized"
    """The member's apiserver refused the credentials (401) or the identity (403)."""
    CLUSTER_PROFILE_UNSUPPORTED = "ClusterProfileUnsupported"
    """spec.clusterSource.clusterProfileRef: the seed records the reference but does not resolve it."""


for _reason in ConnectionReason:
    assert CONDITION_REASON_PATTERN.match(_reason.value), _reason


class ConnectionVerdict(BaseModel):
    """One probe's answer."""

    connected: bool
    reason: ConnectionReason
    message: str
    server_version: str | None = None
    """The member's gitVersion (GET /version), when it answered."""
    generation: int = 0
    """The WorkloadCluster's generation the probe read its spec at."""


__all__ = ["RECHECK_ANNOTATION", "ConnectionReason", "ConnectionVerdict"]
