"""WorkloadCluster connection health end to end: the worker and the bridge as processes under the
chart's identities (a controller namespace of their own, for its operator ConfigMap), the session's
local cluster as the control plane, and a SECOND local cluster (its own etcd and kube-apiserver, no
node) as the member.

The member is reached with the least rights there are: a ServiceAccount of the member bound to no
role at all, its token minted with devstack/identities.py (TokenRequest). The probe's
SelfSubjectReview needs no grant (system:basic-user), so Ready True shows credentials that work
without any privilege. Statuses are read where kubectl reads them: status.conditions, and the
`kubectl get wlc` table the apiserver renders from the CRD's Ready column.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.testing import ActivityEnvironment

from devstack import identities
from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.product import WORKER_READY_SECONDS, BridgeLauncher
from devstack.services import TemporalDevServer
from servingops.activities.workload_cluster.activities import (
    REFUSAL_IS_VERDICT_FROM,
    MemberRefusedDuringWarmUp,
    WorkloadClusterActivities,
)
from servingops.activities.workload_cluster.types import CheckInput
from servingops.api_models.contract.workload_cluster import RECHECK_ANNOTATION
from servingops.api_models.ome.workload_cluster import WorkloadCluster
from servingops.api_models.refs import ObjectRef
from testkit.waiting import wait_until
from tests.fixtures.kube import own_identities

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "workloadclusters"
PROBE_NAMESPACE, PROBE_ACCOUNT = "servingops-health", "health-probe"


@pytest.fixture(scope="module")
def member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKubeCluster]:
    workdir = tmp_path_factory.mktemp("member")
    cluster = LocalKubeCluster(workdir, workdir / "logs", nodes=0, install_upstream_crds=False)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def least_privilege_kubeconfig(member: LocalKubeCluster, directory: Path) -> str:
    """A kubeconfig for a ServiceAccount of the member that no RoleBinding names."""
    api = member.api_client()
    core = client.CoreV1Api(api)
    try:
        for create in (lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
                name=PROBE_NAMESPACE))),
                       lambda: core.create_namespaced_service_account(PROBE_NAMESPACE, client.V1ServiceAccount(
                           metadata=client.V1ObjectMeta(name=PROBE_ACCOUNT)))):
            try:
                create()
            except ApiException as exc:
                if exc.status != 409:
                    raise
        token = identities.request_token(api, PROBE_NAMESPACE, PROBE_ACCOUNT, seconds=3600)
    finally:
        api.close()  # type: ignore[no-untyped-call]
    path = identities.write_kubeconfig(directory / "probe.kubeconfig", member, PROBE_ACCOUNT, token, PROBE_NAMESPACE)
    return path.read_text()


@dataclass
class Health:
    api: client.ApiClient
    namespace: str
    """The controller namespace: the operator ConfigMap and the kubeconfig Secrets."""
    operator_config: str
    worker: ManagedProcess
    kubeconfig: str
    """The member's least-privilege kubeconfig."""
    created: list[str] = field(default_factory=list)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def set_interval(self, interval: str) -> None:
        """The health-check interval; a run reads it when it opens (and when a signal wakes it)."""
        self.core.patch_namespaced_config_map(self.operator_config, self.namespace,
                                              {"data": {"workloadClusters": f"healthCheckInterval: {interval}\n"}})

    def secret(self, name: str, data: dict[str, str]) -> None:
        body = client.V1Secret(metadata=client.V1ObjectMeta(name=name),
                               data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()})
        self.core.create_namespaced_secret(self.namespace, body)

    def register(self, suffix: str, source: dict[str, Any]) -> str:
        name = f"{self.namespace}-{suffix}"
        self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadCluster", "metadata": {"name": name},
            "spec": {"clusterSource": source}})
        self.created.append(name)
        return name

    def kube_config(self, secret: str, *, namespace: bool = True, key: str | None = None) -> dict[str, Any]:
        ref: dict[str, Any] = {"name": secret, **({"namespace": self.namespace} if namespace else {})}
        return {"kubeConfig": {"secretRef": ref, **({"key": key} if key else {})}}

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name))

    def ready(self, name: str) -> dict[str, Any] | None:
        conditions = (self.get(name).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"), None)

    def wait_ready(self, name: str, status: str, reason: str, timeout: float = 120) -> dict[str, Any]:
        condition: dict[str, Any] = wait_until(f"{name}: Ready {status} {reason}", lambda: (
            (c := self.ready(name)) and (c["status"], c["reason"]) == (status, reason) and c), self.worker, timeout)
        return condition

    def touch(self, name: str) -> None:
        """`kubectl annotate wlc <name> servingops.io/recheck=<new> --overwrite`."""
        self.custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, {
            "metadata": {"annotations": {RECHECK_ANNOTATION: uuid.uuid4().hex}}})

    def table_ready(self, name: str) -> str:
        """The Ready column of `kubectl get wlc <name>` (the apiserver renders the table)."""
        params = self.api.param_serialize(
            method="GET", resource_path=f"/apis/{GROUP}/{VERSION}/{PLURAL}/{name}",
            header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}, auth_settings=[])
        response = self.api.call_api(*params)
        response.read()  # type: ignore[no-untyped-call]
        table = json.loads(response.data)
        columns = [c["name"] for c in table["columnDefinitions"]]
        return str(table["rows"][0]["cells"][columns.index("Ready")])

    def event_messages(self, name: str) -> list[tuple[str, str, int, str]]:
        """(type, reason, count, message) of every Event about the WorkloadCluster, sorted."""
        found = self.core.list_event_for_all_namespaces(field_selector=f"involvedObject.name={name}").items
        return sorted((e.type or "", e.reason or "", e.count or 1, e.message or "") for e in found
                      if e.involved_object.kind == "WorkloadCluster")

    def events(self, name: str) -> list[tuple[str, str]]:
        return [(kind, reason) for kind, reason, _, _ in self.event_messages(name)]


@pytest.fixture(scope="module")
def health(kube_cluster: LocalKubeCluster, member: LocalKubeCluster, temporal_server: TemporalDevServer,
           stack_logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Health]:
    namespace = f"wlc-{uuid.uuid4().hex[:6]}"
    task_queue = f"wlc-{uuid.uuid4().hex[:6]}"
    api = kube_cluster.api_client()
    with own_identities(kube_cluster, namespace, tmp_path_factory.mktemp("identities")) as ids:
        client.CoreV1Api(api).create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=ids.operator_config),
            data={"workloadClusters": "healthCheckInterval: 1h\n"}))
        env = {**ids.worker_env(), "TEMPORAL_ADDRESS": temporal_server.address, "SERVINGOPS_TASK_QUEUE": task_queue,
               "SERVINGOPS_HOST_ID": f"host-{task_queue}",
               "SERVINGOPS_SPOOL_DIR": str(tmp_path_factory.mktemp("spool"))}
        worker = ManagedProcess(f"worker-{task_queue}", [sys.executable, "-m", "servingops.workers.main"], stack_logs,
                                env=env, cwd=REPO_ROOT).start()
        launcher = BridgeLauncher(ids, temporal_server.address, stack_logs)
        try:
            worker.wait_ready(lambda: "ready on" in worker.log_tail(20), timeout=WORKER_READY_SECONDS)
            launcher.start(task_queue=task_queue, kinds="WorkloadCluster")
            state = Health(api, namespace, ids.operator_config, worker,
                           least_privilege_kubeconfig(member, tmp_path_factory.mktemp("member-identity")))
            yield state
            # Cluster-scoped: a later module's bridge would otherwise start workflows for them.
            for name in state.created:
                try:
                    state.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
        finally:
            launcher.stop_all()
            worker.stop()
            client.CoreV1Api(api).delete_namespace(namespace)
            api.close()  # type: ignore[no-untyped-call]


def test_a_member_reached_with_least_privilege_credentials_is_ready(health: Health, member: LocalKubeCluster) -> None:
    health.secret("member-a", {"kubeconfig": health.kubeconfig})
    name = health.register("ready", health.kube_config("member-a"))
    condition = health.wait_ready(name, "True", "Connected")
    assert member.api_url in condition["message"]
    assert f"system:serviceaccount:{PROBE_NAMESPACE}:{PROBE_ACCOUNT}" in condition["message"]
    assert condition["observedGeneration"] == health.get(name)["metadata"]["generation"]
    assert health.table_ready(name) == "True"
    wait_until("the Normal Event", lambda: ("Normal", "Connected") in health.events(name), health.worker, 60)
    # Nothing of the kubeconfig is in status: the token never leaves its Secret.
    token = yaml.safe_load(health.kubeconfig)["users"][0]["user"]["token"]
    assert token not in json.dumps(health.get(name))


def test_a_client_certificate_kubeconfig_connects(health: Health, member: LocalKubeCluster) -> None:
    """The member's own admin kubeconfig (client-certificate-data and client-key-data): the key goes
    to TLS through an in-memory file, and the member knows who presented it."""
    health.secret("member-admin", {"kubeconfig": member.kubeconfig_path.read_text()})
    name = health.register("client-cert", health.kube_config("member-admin"))
    condition = health.wait_ready(name, "True", "Connected")
    assert "authenticated as servingops-admin" in condition["message"], condition


def test_a_missing_secret_is_reported_and_a_touch_picks_the_new_one_up(health: Health) -> None:
    # No namespace in the secretRef: the controller namespace (the interval is an hour: only the
    # touch below can make it probe again in this test's time).
    health.set_interval("1h")
    name = health.register("late-secret", health.kube_config("member-late", namespace=False))
    condition = health.wait_ready(name, "False", "SecretNotFound")
    assert f"Secret {health.namespace}/member-late does not exist" in condition["message"]
    assert health.table_ready(name) == "False"
    health.secret("member-late", {"kubeconfig": health.kubeconfig})
    health.touch(name)
    condition = health.wait_ready(name, "True", "Connected")
    wait_until("a Warning then a Normal Event", lambda: health.events(name) == [
        ("Normal", "Connected"), ("Warning", "SecretNotFound")], health.worker, 60)


def test_bad_registrations_say_why(health: Health, member: LocalKubeCluster) -> None:
    health.set_interval("1h")
    config = yaml.safe_load(health.kubeconfig)
    forged = json.loads(json.dumps(config))
    forged["users"][0]["user"]["token"] = "not-a-token-the-member-issued"
    plugin = json.loads(json.dumps(config))
    plugin["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh"}}
    health.secret("member-bad", {"kubeconfig": health.kubeconfig, "forged": yaml.safe_dump(forged),
                                 "plugin": yaml.safe_dump(plugin), "garbage": "clusters: [secret-ish {"})
    expected: dict[str, tuple[str, Callable[[str], bool]]] = {
        health.register("forged", health.kube_config("member-bad", key="forged")):
            ("Unauthorized", lambda m: "401" in m),
        health.register("plugin", health.kube_config("member-bad", key="plugin")):
            ("KubeConfigInvalid", lambda m: "exec plugins" in m and "/bin/sh" not in m),
        health.register("garbage", health.kube_config("member-bad", key="garbage")):
            ("KubeConfigInvalid", lambda m: "not YAML" in m and "secret-ish" not in m),
        health.register("no-key", health.kube_config("member-bad", key="missing")):
            ("KubeConfigKeyMissing", lambda m: "has no key 'missing'" in m),
        health.register("profile", {"clusterProfileRef": {"name": "gpu-east"}}):
            ("ClusterProfileUnsupported", lambda m: "not resolved" in m),
    }
    for name, (reason, says) in expected.items():
        condition = health.wait_ready(name, "False", reason)
        assert says(condition["message"]), condition
        assert "not-a-token-the-member-issued" not in condition["message"]


def test_an_apiserver_outage_is_seen_on_the_interval_and_so_is_its_return(health: Health,
                                                                          member: LocalKubeCluster) -> None:
    health.set_interval("2s")
    health.secret("member-outage", {"kubeconfig": health.kubeconfig})
    name = health.register("outage", health.kube_config("member-outage"))
    health.wait_ready(name, "True", "Connected")
    member.kill_apiserver()
    try:
        condition = health.wait_ready(name, "False", "Unreachable")
        assert "connection refused" in condition["message"], condition
    finally:
        member.start_apiserver()
    health.wait_ready(name, "True", "Connected")
    try:
        wait_until("one Warning for the outage", lambda: health.events(name) == [
            ("Normal", "Connected"), ("Warning", "Unreachable")], health.worker, 60)
    except AssertionError as exc:  # say which Events there were (a warm-up 403 was one: 1656ac3)
        raise AssertionError(f"events {health.event_messages(name)}") from exc


def test_a_member_refusal_is_retried_through_the_warm_up_and_then_is_the_verdict(health: Health) -> None:
    """The activity itself, against the real member: a 401 on attempts 1-4 raises (retried with the
    MEMBER backoff, in case the member's authorizer is still syncing after a restart), and from
    attempt REFUSAL_IS_VERDICT_FROM on it is the verdict Unauthorized, the member's answer in the message."""
    config = yaml.safe_load(health.kubeconfig)
    config["users"][0]["user"]["token"] = "a-token-the-member-never-issued"
    health.secret("member-refused", {"kubeconfig": yaml.safe_dump(config)})
    name = health.register("refused", health.kube_config("member-refused"))
    activities = WorkloadClusterActivities(health.api, health.namespace)
    ref = ObjectRef.of(WorkloadCluster, name)
    early, late = ActivityEnvironment(), ActivityEnvironment()
    early.info = dataclasses.replace(early.info, attempt=REFUSAL_IS_VERDICT_FROM - 1)
    late.info = dataclasses.replace(late.info, attempt=REFUSAL_IS_VERDICT_FROM)
    with pytest.raises(MemberRefusedDuringWarmUp, match="answered 401"):
        early.run(activities.check, CheckInput(cluster=ref))
    found = late.run(activities.check, CheckInput(cluster=ref))
    assert found.verdict is not None and found.verdict.reason == "Unauthorized", found
    assert "answered 401" in found.verdict.message and "never-issued" not in found.verdict.message
