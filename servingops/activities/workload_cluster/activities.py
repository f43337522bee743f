"""`workloadcluster.check`: read a WorkloadCluster, its kubeconfig Secret, and probe the member.

The WorkloadCluster and the Secret are read with the control-plane client (the worker's own
identity); the member is probed with a client built in memory from the Secret's kubeconfig
(kubeconfig.py), closed when the probe ends. Neither the kubeconfig nor anything in it leaves
this activity: the output is a verdict whose messages name fields, never values.

Retries: the probe's outcome is data (an unreachable member is a normal answer), so nothing the
member does raises. What raises, and is retried by the KUBE policy, is a control-plane failure
reading the WorkloadCluster or the Secret (connection errors, 5xx, 409, 429): the verdict is not
known yet. A 403 on the Secret is retried for the first attempts, as every 403 is
(workers/kubernetes_errors.py: an apiserver that has just restarted denies until its RBAC caches
sync), then becomes the verdict SecretForbidden.

The member's own refusal (401/403, the verdict Unauthorized) gets the same warm-up: a member
apiserver that has just come back answers 403 even to GET /readyz, which every identity may
read, until its authorizer has synced (seen on a loaded machine in
tests/test_workload_cluster_e2e.py: an outage ended in a false Unauthorized Warning). So the
first attempts raise MemberRefusedDuringWarmUp, retried with the MEMBER backoff (1 + 2 + 4 + 8 s),
and only a refusal that outlives them is the verdict. Credentials that are really wrong are
therefore reported about 15 s later than they are seen; a false alarm after every member restart
would cost more.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from servingops.activities.workload_cluster.kubeconfig import secret_location
from servingops.activities.workload_cluster.probe import probe
from servingops.activities.workload_cluster.registration import RegistrationUnusable, member_access
from servingops.activities.workload_cluster.types import CheckInput, CheckOutput
from servingops.api_models.contract.workload_cluster import ConnectionReason, ConnectionVerdict
from servingops.clients.kube.custom_objects import CustomObjects
from servingops.clients.kube.errors import forbidden

REFUSAL_IS_VERDICT_FROM = 5
"""The attempt from which a refusal is the verdict rather than retried - a 403 on the Secret
(SecretForbidden) and the member's 401/403 (Unauthorized) alike: the same warm-up the worker's
error classifier allows every 403 (workers/kubernetes_errors.py FORBIDDEN_AFTER; activities cannot
import workers)."""


class MemberRefusedDuringWarmUp(Exception):
    """The member refused the probe on an early attempt: retried, in case its authorizer is still
    syncing after a restart. Carries the refusal the verdict would have said."""


def _verdict(reason: ConnectionReason, message: str) -> ConnectionVerdict:
    return ConnectionVerdict(connected=False, reason=reason, message=message)


class WorkloadClusterActivities:
    """Bound to the control-plane ApiClient; `controller_namespace` is where a secretRef without a
    namespace points (as Kueue's MultiKueue reads kubeconfig Secrets from its own namespace)."""

    def __init__(self, api_client: client.ApiClient, controller_namespace: str) -> None:
        self._objects = CustomObjects(client.CustomObjectsApi(api_client))
        self._core = client.CoreV1Api(api_client)
        self._namespace = controller_namespace

    @activity.defn(name="workloadcluster.check")
    def check(self, request: CheckInput) -> CheckOutput:
        obj = self._objects.get(request.cluster)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return CheckOutput(present=False)
        verdict = self._judge(obj.get("spec") or {})
        verdict.generation = int(obj["metadata"].get("generation", 0))
        return CheckOutput(present=True, verdict=verdict)

    def _judge(self, spec: dict[str, Any]) -> ConnectionVerdict:
        try:
            access = member_access(self._core, spec, self._namespace)
        except RegistrationUnusable as exc:
            return _verdict(exc.reason, exc.message)
        except ApiException as exc:
            location = secret_location(spec, self._namespace)
            if forbidden(exc) and location is not None and activity.info().attempt >= REFUSAL_IS_VERDICT_FROM:
                return _verdict(ConnectionReason.SECRET_FORBIDDEN,
                                f"the worker may not read Secret {location.namespace}/{location.name} (403): add "
                                f"{location.namespace} to the chart's rbac.secretNamespaces")
            raise
        verdict = probe(access)
        if verdict.reason is ConnectionReason.UNAUTHORIZED and activity.info().attempt < REFUSAL_IS_VERDICT_FROM:
            raise MemberRefusedDuringWarmUp(verdict.message)
        return verdict

    def all(self) -> list[object]:
        return [self.check]


__all__ = ["REFUSAL_IS_VERDICT_FROM", "MemberRefusedDuringWarmUp", "WorkloadClusterActivities"]
