"""A `type: Catalog` ModelCatalogSource across two clusters (issue #15), end to end.

Cluster A: a second local apiserver (`LocalKubeCluster`, apiserver only) with the project's CRDs, its own
registry, a Ready ClusterModel whose artifact is in A's registry, and A's catalog endpoint (the product's
`ingress/catalog_endpoint.serve`, in-process, TLS from a test CA made here) reading A's ClusterModels and
A's clients Secret as the chart's catalog endpoint ServiceAccount of A's release. Cluster B: the session's
cluster, its registry and Temporal, with servingops' worker and bridge as their own processes under the
chart's identities (as tests/test_catalog_e2e.py runs them).

Held: B's source (type Catalog, url = A's endpoint, caSecretName, credentialsSecretName in B's controller
namespace) becomes Ready with A's entry count, and its index is stored in B's registry as the RemoteIndex
document the catalogRevision names; a ClusterModel in B naming A's model by catalog name becomes Ready with
A's digest, its resolution (remoteDigest included) frozen in status.source.catalog, and the artifact is in
B's registry. Wrong credentials: Ready False CatalogCredentialsRejected with a nextRetryTime; a CA that did
not sign A's certificate: CatalogCertificateUntrusted."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.members import PROJECT_CRDS
from devstack.process import ManagedProcess
from devstack.product import WORKER_READY_SECONDS, BridgeLauncher
from devstack.services import OciRegistry, TemporalDevServer
from servingops.activities.catalog.store import REMOTE_INDEX_MEDIA_TYPE, catalog_repository
from servingops.api_models.deckhouse.model import ClusterModel
from servingops.clients.catalog_remote import parse_index
from servingops.clients.oci.registry_client import ModelRegistry
from servingops.ingress.catalog_endpoint import DEFAULT_CLIENTS_SECRET, CatalogEndpointServer, serve
from testkit.waiting import wait_until
from tests.fixtures.kube import api_as, catalog_endpoint_identity, own_identities
from tests.secret_scan import register_token
from tests.support.catalog_remote import REPOSITORY, Pki, Pushed, catalog_cluster_model, catalog_secret, pki, push_model

__all__ = ["pki"]  # the fixture, reused

pytestmark = pytest.mark.e2e

GROUP, VERSION = "ai.deckhouse.io", "v1alpha1"
SOURCES, MODELS = "modelcatalogsources", "clustermodels"
CREDENTIAL = f"two-clusters-{uuid.uuid4().hex}"
WRONG_CREDENTIAL = f"two-clusters-wrong-{uuid.uuid4().hex}"
register_token(CREDENTIAL, WRONG_CREDENTIAL)


@dataclass
class ClusterSideA:
    api: client.ApiClient
    registry: OciRegistry
    endpoint: CatalogEndpointServer
    model: str
    pushed: Pushed


@dataclass
class ClusterSideB:
    api: client.ApiClient
    namespace: str
    registry: OciRegistry
    worker: ManagedProcess

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name))

    def ready(self, plural: str, name: str) -> dict[str, Any] | None:
        conditions = (self.get(plural, name).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"), None)

    def wait(self, what: str, probe: Callable[[], Any], timeout: float = 120) -> Any:
        return wait_until(what, probe, self.worker, timeout=timeout)

    def wait_ready(self, plural: str, name: str, status: str, reason: str, timeout: float = 120) -> dict[str, Any]:
        return cast(dict[str, Any], self.wait(f"{name}: Ready {status} {reason}", lambda: (
            (c := self.ready(plural, name)) and (c["status"], c["reason"]) == (status, reason) and c), timeout))

    def source(self, suffix: str, ca: str, credentials: str, url: str) -> str:
        name = f"peer-{suffix}-{uuid.uuid4().hex[:6]}"
        self.custom.create_cluster_custom_object(GROUP, VERSION, SOURCES, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ModelCatalogSource", "metadata": {"name": name},
            "spec": {"type": "Catalog", "url": url, "caSecretName": ca, "credentialsSecretName": credentials,
                     "refreshInterval": "1h"}})
        return name


@pytest.fixture(scope="module")
def cluster_a(tmp_path_factory: pytest.TempPathFactory, stack_logs: Path, pki: Pki) -> Iterator[ClusterSideA]:
    """A second apiserver with the project's CRDs, its registry, a Ready ClusterModel there and its endpoint."""
    workdir = tmp_path_factory.mktemp("cluster-a")
    cluster = LocalKubeCluster(workdir / "kube", stack_logs, nodes=0, controllers=False,
                               install_upstream_crds=False).start()
    registry = OciRegistry(tmp_path_factory.mktemp("registry-a"), stack_logs).start()
    api = cluster.api_client()
    try:
        cluster.apply_crds([PROJECT_CRDS])
        namespace = "servingops-catalog"
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        catalog_secret(api, namespace, DEFAULT_CLIENTS_SECRET, {"cluster-b": CREDENTIAL})
        pushed = push_model(registry, "published", b"weights of cluster A " * 4000)
        name = f"published-{uuid.uuid4().hex[:6]}"
        info = ClusterModel.crd
        custom = client.CustomObjectsApi(api)
        body = catalog_cluster_model(name, pushed)
        status = body.pop("status")
        for _ in range(60):  # the CRD may take a moment to be served
            try:
                custom.create_cluster_custom_object(info.group, info.version, info.plural, body)
                break
            except ApiException as exc:
                if exc.status != 404:
                    raise
                time.sleep(0.5)
        custom.patch_cluster_custom_object_status(info.group, info.version, info.plural, name, {"status": status})
        # A's endpoint as its chart ServiceAccount (catalogEndpoint enabled in A's release), as its pod would run.
        with catalog_endpoint_identity(cluster, namespace, workdir / "identities") as kubeconfig, \
                api_as(kubeconfig) as endpoint_api:
            endpoint = serve("127.0.0.1", 0, pki.cert_file, pki.key_file, api_client=endpoint_api,
                             namespace=namespace, registry=registry.address, repository=REPOSITORY)
            try:
                yield ClusterSideA(api=api, registry=registry, endpoint=endpoint, model=name, pushed=pushed)
            finally:
                endpoint.stop()
    finally:
        api.close()  # type: ignore[no-untyped-call]
        registry.stop()
        cluster.stop()


@pytest.fixture(scope="module")
def cluster_b(kube_cluster: LocalKubeCluster, temporal_server: TemporalDevServer, oci_registry: OciRegistry,
              stack_logs: Path, tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ClusterSideB]:
    namespace = f"peer-{uuid.uuid4().hex[:6]}"
    task_queue = f"peer-{uuid.uuid4().hex[:6]}"
    api = kube_cluster.api_client()
    created: list[tuple[str, str]] = []
    with own_identities(kube_cluster, namespace, tmp_path_factory.mktemp("identities")) as ids:
        catalog_secret(api, namespace, "peer-ca", {"ca.crt": pki.ca_pem})
        catalog_secret(api, namespace, "other-ca", {"ca.crt": pki.other_ca_pem})
        catalog_secret(api, namespace, "peer-credentials", {"token": CREDENTIAL})
        catalog_secret(api, namespace, "wrong-credentials", {"token": WRONG_CREDENTIAL})
        env = {**ids.worker_env(), "TEMPORAL_ADDRESS": temporal_server.address, "SERVINGOPS_TASK_QUEUE": task_queue,
               "SERVINGOPS_HOST_ID": f"host-{task_queue}", "SERVINGOPS_REGISTRY": oci_registry.address,
               "SERVINGOPS_SPOOL_DIR": str(tmp_path_factory.mktemp("spool"))}
        worker = ManagedProcess(f"worker-{task_queue}", [sys.executable, "-m", "servingops.workers.main"], stack_logs,
                                env=env, cwd=REPO_ROOT).start()
        launcher = BridgeLauncher(ids, temporal_server.address, stack_logs)
        side = ClusterSideB(api=api, namespace=namespace, registry=oci_registry, worker=worker)
        try:
            worker.wait_ready(lambda: "ready on" in worker.log_tail(20), timeout=WORKER_READY_SECONDS)
            launcher.start(task_queue=task_queue, kinds="ModelCatalogSource,ClusterModel")
            yield side
        finally:
            for plural in (MODELS, SOURCES):
                listed = side.custom.list_cluster_custom_object(GROUP, VERSION, plural)
                for item in listed.get("items") or []:
                    if item["metadata"]["name"].startswith(("peer-", "from-a-")):
                        created.append((plural, item["metadata"]["name"]))
            for plural, name in created:
                try:
                    side.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            launcher.stop_all()
            worker.stop()
            client.CoreV1Api(api).delete_namespace(namespace)
            api.close()  # type: ignore[no-untyped-call]


def test_b_indexes_a_and_imports_its_model_by_name(cluster_a: ClusterSideA, cluster_b: ClusterSideB) -> None:
    source = cluster_b.source("ok", "peer-ca", "peer-credentials", cluster_a.endpoint.url)
    condition = cluster_b.wait_ready(SOURCES, source, "True", "Refreshed")
    status = cluster_b.get(SOURCES, source)["status"]
    assert status["entryCount"] == 1 and status["catalogRevision"].startswith("sha256:"), status
    assert "1 entry from" in condition["message"]
    with ModelRegistry(cluster_b.registry.address, insecure=True) as registry:
        manifest = registry.fetch_manifest(catalog_repository(source), status["catalogRevision"])
        assert manifest is not None and manifest.json["artifactType"] == REMOTE_INDEX_MEDIA_TYPE
        layer = manifest.json["layers"][0]["digest"]
        blob = registry._request("GET", f"{registry._repo_url(catalog_repository(source))}/blobs/{layer}")
        stored = parse_index(blob.json())
        assert [(e.name, e.digest) for e in stored.entries] == [(cluster_a.model, cluster_a.pushed.digest)]

    model = f"from-a-{uuid.uuid4().hex[:6]}"
    cluster_b.custom.create_cluster_custom_object(GROUP, VERSION, MODELS, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterModel", "metadata": {"name": model},
        "spec": {"source": {"catalog": {"name": cluster_a.model, "sourceName": source}}}})
    settled = cluster_b.wait(f"ClusterModel {model} Ready or Failed", lambda: (
        (s := cluster_b.get(MODELS, model).get("status") or {}).get("phase") in ("Ready", "Failed") and s),
        timeout=180)
    assert settled["phase"] == "Ready", settled
    assert settled["artifact"]["digest"] == cluster_a.pushed.digest
    assert settled["artifact"]["sizeBytes"] == cluster_a.pushed.size
    assert settled["source"]["catalog"] == {"sourceName": source, "name": cluster_a.model, "version": "rev-1",
                                            "catalogRevision": status["catalogRevision"],
                                            "remoteDigest": cluster_a.pushed.digest}
    assert settled["resolved"]["format"] == "Safetensors"
    with ModelRegistry(cluster_b.registry.address, insecure=True) as registry:
        copied = registry.fetch_manifest("servingops/models", cluster_a.pushed.digest)
        assert copied is not None and copied.digest == cluster_a.pushed.digest
        for digest, data in cluster_a.pushed.blobs.items():
            assert registry.blob_size("servingops/models", digest) == len(data)


@pytest.mark.parametrize(("ca", "credentials", "reason"), [
    ("peer-ca", "wrong-credentials", "CatalogCredentialsRejected"),
    ("other-ca", "peer-credentials", "CatalogCertificateUntrusted"),
])
def test_a_refused_remote_is_its_reason_with_a_next_retry_time(cluster_a: ClusterSideA, cluster_b: ClusterSideB,
                                                                ca: str, credentials: str, reason: str) -> None:
    source = cluster_b.source("bad", ca, credentials, cluster_a.endpoint.url)
    condition = cluster_b.wait_ready(SOURCES, source, "False", reason)
    status = cluster_b.get(SOURCES, source)["status"]
    assert status.get("nextRetryTime") and not status.get("catalogRevision"), status
    assert WRONG_CREDENTIAL not in condition["message"] and CREDENTIAL not in condition["message"]
