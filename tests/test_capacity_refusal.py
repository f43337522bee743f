"""A 403 on the list of WorkloadClusters is an answer the capacity report says, not a failure retried forever:
`capacity.observe` and `placement.read_member_capacity` against the session's real kube-apiserver, talking as an
identity made here that may read everything the report reads except WorkloadClusters (a ServiceAccount, its
ClusterRole and a TokenRequest token, as devstack/identities.py issues the chart's). Then `capacity.write_status`
says it on the root (CapacityReported False AccessRefused and a Warning Event), and AcceleratorQuotaWorkflow's
own status write (`acceleratorquota.write_status`, as the chart's worker) keeps that condition. Last, the
workflow itself on Temporal's dev server with those real activities behind the worker's 403 interceptor: the
root says the refusal, and True once the role is mended. The same reaction on the time-skipping server, with
the fake: tests/test_capacity_workflow.py."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from devstack.identities import Identities, request_token, write_kubeconfig
from devstack.kube import LocalKubeCluster
from devstack.services import TemporalDevServer
from servingops.activities.capacity.accelerator_quota import AcceleratorQuotaActivities
from servingops.activities.capacity.activities import CapacityActivities
from servingops.activities.capacity.quota_types import QuotaWriteInput
from servingops.activities.capacity.types import CapacityEvent, ObserveInput, WriteInput
from servingops.activities.placement.activities import PlacementActivities
from servingops.activities.placement.quota_types import MemberCapacityInput
from servingops.api_models.contract import capacity_workflow_id
from servingops.api_models.ome import AcceleratorQuota
from servingops.api_models.ome.accelerator_quota import AcceleratorQuotaStatus
from servingops.api_models.refs import ConditionUpdate, ObjectRef
from servingops.runtime.temporal import TemporalSettings, connect
from servingops.workers.kubernetes_errors import KubernetesErrors
from servingops.workers.sandbox import workflow_runner
from servingops.workflows.capacity.report import AcceleratorCapacityWorkflow
from testkit.waiting import wait_until_async
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as
from tests.support.cleanup import ignore_404

pytestmark = pytest.mark.integration

RULES = [
    client.V1PolicyRule(api_groups=["ome.io"], resources=["acceleratorquotas"], verbs=["get", "list"]),
    client.V1PolicyRule(api_groups=["ome.io"], resources=["acceleratorquotas/status"], verbs=["patch"]),
    client.V1PolicyRule(api_groups=["kueue.x-k8s.io"], resources=["resourceflavors"], verbs=["list"]),
    client.V1PolicyRule(api_groups=[""], resources=["nodes"], verbs=["list"]),
    client.V1PolicyRule(api_groups=[""], resources=["events"], verbs=["create", "get", "patch"]),
]
"""What the capacity report reads and writes, WorkloadClusters left out."""


@dataclass
class Identity:
    api: client.ApiClient
    role: str
    """Its ClusterRole's name (a test mends the role by adding the missing rule)."""


@pytest.fixture
def identity(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, tmp_path: Path) -> Iterator[Identity]:
    """An identity that may do all the capacity report does except list WorkloadClusters."""
    ns = new_namespace(kube_api, "capacity-refusal")
    name = f"capacity-no-clusters-{uuid.uuid4().hex[:6]}"
    core, rbac = client.CoreV1Api(kube_api), client.RbacAuthorizationV1Api(kube_api)
    core.create_namespaced_service_account(ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    rbac.create_cluster_role(client.V1ClusterRole(metadata=client.V1ObjectMeta(name=name), rules=RULES))
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=name),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=ns)]))
    path = write_kubeconfig(tmp_path / f"{name}.kubeconfig", kube_cluster, name,
                            request_token(kube_api, ns, name), ns)
    try:
        with api_as(path) as api:
            yield Identity(api, name)
    finally:
        ignore_404(lambda: rbac.delete_cluster_role_binding(name))
        ignore_404(lambda: rbac.delete_cluster_role(name))


@pytest.fixture
def root(kube_api: client.ApiClient) -> Iterator[dict[str, object]]:
    name = f"refused-root-{uuid.uuid4().hex[:6]}"
    obj = create(kube_api, AcceleratorQuota, manifest(AcceleratorQuota, {"role": "Cohort"}, name=name))
    try:
        yield obj
    finally:
        ignore_404(lambda: client.CustomObjectsApi(kube_api).delete_cluster_custom_object(
            "ome.io", "v1beta1", "acceleratorquotas", name))


def test_a_refused_workload_cluster_list_is_an_answer_said_on_the_root(
        kube_api: client.ApiClient, identity: Identity, root: dict[str, object],
        chart_identities: Identities) -> None:
    no_clusters = identity.api
    meta = root["metadata"]
    assert isinstance(meta, dict)
    ref = ObjectRef.of(AcceleratorQuota, str(meta["name"]), uid=str(meta["uid"]))
    custom = client.CustomObjectsApi(no_clusters)
    with pytest.raises(ApiException) as refused:  # the control: this identity really lacks the rule
        custom.list_cluster_custom_object("ome.io", "v1beta1", "workloadclusters")
    assert refused.value.status == 403

    env = ActivityEnvironment()
    observed = env.run(CapacityActivities(no_clusters).observe, ObserveInput(quota=ref))
    assert observed.present and observed.root and observed.observed_at is not None, observed
    assert observed.refused is not None and "may not list WorkloadClusters: 403" in observed.refused, observed
    assert "workloadclusters" in observed.refused and observed.workload_clusters == 0

    members = env.run(PlacementActivities(no_clusters, "servingops-system").read_member_capacity,
                      MemberCapacityInput(root=ref.name))
    assert members.members == [] and members.refused is not None and "403" in members.refused, members

    condition = ConditionUpdate(type="CapacityReported", status="False", reason="AccessRefused",
                                message=f"capacity observed, but no member's report read: {observed.refused}"[:1000])
    written = env.run(CapacityActivities(no_clusters).write_status, WriteInput(
        quota=ref, capacity=[], condition=condition,
        events=[CapacityEvent(type="Warning", reason="AccessRefused", message=condition.message)]))
    assert written.present

    def conditions() -> dict[str, dict[str, object]]:
        got = client.CustomObjectsApi(kube_api).get_cluster_custom_object("ome.io", "v1beta1", "acceleratorquotas",
                                                                          ref.name)
        return {str(c["type"]): c for c in (got.get("status") or {}).get("conditions") or []}

    said = conditions()["CapacityReported"]
    assert (said["status"], said["reason"]) == ("False", "AccessRefused") and "403" in str(said["message"])
    warnings = client.CoreV1Api(kube_api).list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={ref.name},reason=AccessRefused").items
    assert [e.type for e in warnings] == ["Warning"], warnings

    # The tree's controller rewrites its own conditions whole; the report's stays.
    with api_as(chart_identities.worker) as worker:
        quota = env.run(AcceleratorQuotaActivities(worker).write_status, QuotaWriteInput(
            quota=ref, status=AcceleratorQuotaStatus.model_validate({"observedGeneration": 1, "conditions": [
                {"type": "Ready", "status": "True", "reason": "Materialized", "message": "",
                 "lastTransitionTime": "2026-12-07T10:00:00Z"}]})))
    assert quota.present
    after = conditions()
    assert set(after) == {"Ready", "CapacityReported"}, after
    assert after["CapacityReported"]["reason"] == "AccessRefused"


EVENTUALLY = 60.0
"""A bound for a wait on real servers (samples every second here), not a claim about speed."""


async def test_the_report_says_the_refusal_on_the_root_and_heals_when_the_role_is_mended(
        kube_api: client.ApiClient, identity: Identity, root: dict[str, object],
        temporal_server: TemporalDevServer) -> None:
    """AcceleratorCapacityWorkflow on Temporal's dev server, its real activities talking as the identity without
    the WorkloadCluster list behind the worker's own 403 interceptor: the root shows CapacityReported False
    AccessRefused and a Warning while the report goes on (status.capacity written); the role mended, True
    Reported follows at a later sample."""
    meta = root["metadata"]
    assert isinstance(meta, dict)
    name, uid = str(meta["name"]), str(meta["uid"])
    ref = ObjectRef.of(AcceleratorQuota, name, uid=uid)
    custom = client.CustomObjectsApi(kube_api)

    def root_status() -> dict[str, Any]:
        got = custom.get_cluster_custom_object("ome.io", "v1beta1", "acceleratorquotas", name)
        return dict(got.get("status") or {})

    def reported() -> dict[str, Any]:
        return next((c for c in root_status().get("conditions") or [] if c.get("type") == "CapacityReported"), {})

    temporal = await connect(TemporalSettings(address=temporal_server.address))
    queue = f"capacity-refusal-{uuid.uuid4().hex[:6]}"
    capacity = CapacityActivities(identity.api)
    placement = PlacementActivities(identity.api, "servingops-system")
    async with Worker(temporal, task_queue=queue, workflows=[AcceleratorCapacityWorkflow],
                      activities=[*capacity.all(), placement.read_member_capacity], interceptors=[KubernetesErrors()],
                      workflow_runner=workflow_runner(), activity_executor=_executor()):
        handle = await temporal.start_workflow(
            "AcceleratorCapacityWorkflow", {"ref": ref.model_dump(mode="json"), "settings": {"interval_seconds": 1}},
            id=capacity_workflow_id(name, uid), task_queue=queue)
        started = time.monotonic()
        said = await wait_until_async("CapacityReported False AccessRefused on the root", lambda: (
            c := reported()).get("reason") == "AccessRefused" and c, EVENTUALLY)
        refused_after = time.monotonic() - started
        assert said["status"] == "False" and "workloadclusters" in said["message"], said
        assert root_status().get("capacity") is not None, "the plane's own capacity is still reported"
        warnings = client.CoreV1Api(kube_api).list_event_for_all_namespaces(
            field_selector=f"involvedObject.name={name},reason=AccessRefused").items
        assert [e.type for e in warnings] == ["Warning"], warnings

        rbac = client.RbacAuthorizationV1Api(kube_api)
        role = rbac.read_cluster_role(identity.role)
        role.rules = [*(role.rules or []), client.V1PolicyRule(api_groups=["ome.io"], resources=["workloadclusters"],
                                                               verbs=["list"])]
        rbac.replace_cluster_role(identity.role, role)
        mended = time.monotonic()
        healed = await wait_until_async("CapacityReported True once the role is mended", lambda: (
            c := reported()).get("status") == "True" and c, EVENTUALLY)
        healed_after = time.monotonic() - mended
        assert healed["reason"] == "Reported"
        await handle.signal("delete", {"uid": uid, "generation": 1, "resource_version": "1", "deleting": True})
        await handle.result()
    print(f"\ncapacity report: CapacityReported False AccessRefused {refused_after:.1f} s after the start, "
          f"True Reported {healed_after:.1f} s after the role was mended (samples every 1 s)")


def _executor() -> ThreadPoolExecutor:
    """The activities are synchronous (the kubernetes client blocks): they run in threads, as in the worker."""
    return ThreadPoolExecutor(max_workers=4)
