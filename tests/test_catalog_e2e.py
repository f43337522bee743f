"""ModelCatalogSource refresh end to end (issue #15): `kubectl apply` of a `type: HuggingFace` source ->
bridge -> CatalogSourceWorkflow -> the worker's activities, with the worker and the bridge as their own
processes under the chart's identities (a controller namespace of their own), against the session's local
cluster, Temporal dev server, registry and Hub-compatible server.

Held: a scoped source becomes Ready with entryCount and catalogRevision, and the index is in the registry
as the artifact that revision names; its Temporal Schedule exists at the refresh interval, and a tick of it
(triggered) refreshes without writing anything (same resourceVersion, same revision); a tags-only source
is blocked and says why, with its schedule paused; deleting a source deletes its schedule."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client
from temporalio.service import RPCError

from devstack import model_repos
from devstack.hub_server import HubServer
from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.product import WORKER_READY_SECONDS, BridgeLauncher
from devstack.services import OciRegistry, TemporalDevServer
from servingops.activities.catalog.index_document import INDEX_MEDIA_TYPE, parse_index
from servingops.activities.catalog.names import public_name
from servingops.activities.catalog.store import CURRENT_TAG, catalog_repository
from servingops.api_models.contract import Query, catalog_schedule_id, catalog_workflow_id
from servingops.clients.oci.registry_client import ModelRegistry
from servingops.runtime.temporal import TemporalSettings, connect
from testkit.waiting import wait_until
from tests.fixtures.hub import HubRepos
from tests.fixtures.kube import own_identities

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "ai.deckhouse.io", "v1alpha1", "modelcatalogsources"


@dataclass
class Catalogs:
    api: client.ApiClient
    namespace: str
    """The controller namespace: a source's token Secret lives here."""
    worker: ManagedProcess
    registry: OciRegistry
    hub: HubServer
    temporal: Client
    loop: asyncio.AbstractEventLoop
    created: list[str] = field(default_factory=list)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def create(self, suffix: str, spec: dict[str, Any]) -> str:
        name = f"e2e-{suffix}-{uuid.uuid4().hex[:6]}"
        self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ModelCatalogSource", "metadata": {"name": name},
            "spec": spec})
        self.created.append(name)
        return name

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return cast(dict[str, Any], self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def ready(self, name: str) -> dict[str, Any] | None:
        conditions = ((self.get(name) or {}).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"), None)

    def wait(self, what: str, probe: Callable[[], Any], timeout: float = 120) -> Any:
        return wait_until(what, probe, self.worker, timeout=timeout)

    def wait_ready(self, name: str, status: str, reason: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.wait(f"{name}: Ready {status} {reason}", lambda: (
            (c := self.ready(name)) and (c["status"], c["reason"]) == (status, reason) and c)))

    def workflow_state(self, obj: dict[str, Any]) -> dict[str, Any]:
        handle = self.temporal.get_workflow_handle(catalog_workflow_id(obj["metadata"]["name"], obj["metadata"]["uid"]))
        state: dict[str, Any] = self.run(handle.query(Query.STATE, result_type=dict))
        return state

    def schedule(self, obj: dict[str, Any]) -> Any:
        handle = self.temporal.get_schedule_handle(catalog_schedule_id(obj["metadata"]["name"],
                                                                       obj["metadata"]["uid"]))
        return handle, self.run(handle.describe())

    def events(self, name: str) -> list[tuple[Any, Any]]:
        found = client.CoreV1Api(self.api).list_event_for_all_namespaces(
            field_selector=f"involvedObject.name={name}").items
        return sorted((e.type, e.reason) for e in found if e.involved_object.kind == "ModelCatalogSource")


@pytest.fixture(scope="module")
def catalogs(kube_cluster: LocalKubeCluster, temporal_server: TemporalDevServer, oci_registry: OciRegistry,
             hub_server: HubServer, stack_logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Catalogs]:
    namespace = f"cat-{uuid.uuid4().hex[:6]}"
    task_queue = f"cat-{uuid.uuid4().hex[:6]}"
    api = kube_cluster.api_client()
    loop = asyncio.new_event_loop()
    with own_identities(kube_cluster, namespace, tmp_path_factory.mktemp("identities")) as ids:
        env = {**ids.worker_env(), "TEMPORAL_ADDRESS": temporal_server.address, "SERVINGOPS_TASK_QUEUE": task_queue,
               "SERVINGOPS_HOST_ID": f"host-{task_queue}", "HF_ENDPOINT": hub_server.url,
               "SERVINGOPS_REGISTRY": oci_registry.address, "HF_HUB_DISABLE_TELEMETRY": "1",
               "SERVINGOPS_SPOOL_DIR": str(tmp_path_factory.mktemp("spool"))}
        worker = ManagedProcess(f"worker-{task_queue}", [sys.executable, "-m", "servingops.workers.main"], stack_logs,
                                env=env, cwd=REPO_ROOT).start()
        launcher = BridgeLauncher(ids, temporal_server.address, stack_logs)
        try:
            worker.wait_ready(lambda: "ready on" in worker.log_tail(20), timeout=WORKER_READY_SECONDS)
            launcher.start(task_queue=task_queue, kinds="ModelCatalogSource,ClusterModel")
            temporal = loop.run_until_complete(connect(TemporalSettings(address=temporal_server.address)))
            state = Catalogs(api, namespace, worker, oci_registry, hub_server, temporal, loop)
            yield state
            for name in state.created:  # cluster-scoped: a later module's bridge would otherwise act on them
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
            loop.close()


def test_a_hugging_face_source_becomes_ready_with_its_index_in_the_registry(catalogs: Catalogs) -> None:
    org = f"cat-{uuid.uuid4().hex[:8]}"
    for name in ("m0", "m1", "m2"):
        model_repos.make_blob_repo(catalogs.hub.root, f"{org}/{name}", {"model.safetensors": 16})
    name = catalogs.create("hf", {"type": "HuggingFace", "refreshInterval": "1h",
                                  "policy": {"allowedOrganizations": [org], "maxIndexedEntries": 10}})
    condition = catalogs.wait_ready(name, "True", "Refreshed")
    obj = catalogs.get(name)
    assert obj is not None
    status = obj["status"]
    assert status["entryCount"] == 3 and status["catalogRevision"].startswith("sha256:")
    assert status["observedGeneration"] == obj["metadata"]["generation"] and "lastSuccessfulRefreshTime" in status
    assert "Indexed 3 entries" in condition["message"]
    # The index is in the registry, as the artifact the revision names.
    with ModelRegistry(catalogs.registry.address, insecure=True) as registry:
        manifest = registry.fetch_manifest(catalog_repository(name), status["catalogRevision"])
        assert manifest is not None and manifest.json["artifactType"] == INDEX_MEDIA_TYPE
        layer = manifest.json["layers"][0]["digest"]
        blob = registry._request("GET", f"{registry._repo_url(catalog_repository(name))}/blobs/{layer}")
        assert sorted(e.name for e in parse_index(blob.content)) == [f"{org}/m0", f"{org}/m1", f"{org}/m2"]
    catalogs.wait("the Normal Event", lambda: ("Normal", "CatalogRefreshed") in catalogs.events(name))
    # The schedule that drives refreshes: every hour, running; a tick of it refreshes, and finds nothing new:
    # no write to the object, nothing pushed.
    handle, described = catalogs.schedule(obj)
    assert described.schedule.spec.intervals[0].every.total_seconds() == 3600
    assert not described.schedule.state.paused
    before = catalogs.workflow_state(obj)
    catalogs.run(handle.trigger())
    catalogs.wait("the ticked refresh", lambda: catalogs.workflow_state(obj)["refreshes"] > before["refreshes"])
    after = catalogs.get(name)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"], "a no-change refresh wrote"
    assert catalogs.workflow_state(obj)["stores"] == before["stores"] == 1
    with ModelRegistry(catalogs.registry.address, insecure=True) as registry:
        tagged = registry.fetch_manifest(catalog_repository(name), CURRENT_TAG)
        assert tagged is not None and tagged.digest == status["catalogRevision"]
    # Deleting the source deletes its schedule.
    catalogs.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)

    def schedule_gone() -> bool:
        try:
            catalogs.schedule(obj)
        except RPCError:
            return True
        return False

    catalogs.wait("the schedule deleted", schedule_gone)


def test_a_source_without_scope_is_blocked_and_says_why(catalogs: Catalogs) -> None:
    name = catalogs.create("blocked", {"type": "HuggingFace", "policy": {"allowedTags": ["text-generation"]}})
    condition = catalogs.wait_ready(name, "False", "PolicyScopeMissing")
    assert "spec.policy.allowedOrganizations" in condition["message"]
    assert "allowedTags only narrows a scope" in condition["message"]
    obj = catalogs.get(name)
    assert obj is not None and "catalogRevision" not in obj["status"] and "nextRetryTime" not in obj["status"]
    _, described = catalogs.schedule(obj)
    assert described.schedule.state.paused and "PolicyScopeMissing" in (described.schedule.state.note or "")
    catalogs.wait("the Warning Event", lambda: ("Warning", "PolicyScopeMissing") in catalogs.events(name))
    with ModelRegistry(catalogs.registry.address, insecure=True) as registry:
        assert registry.fetch_manifest(catalog_repository(name), CURRENT_TAG) is None


def test_a_wrong_token_is_a_clear_condition_with_a_next_retry_time(catalogs: Catalogs) -> None:
    """The token Secret is read by name in the controller namespace; the Hub refuses the token: Ready False
    SourceAccessDenied with a nextRetryTime, nothing stored, and the token nowhere in the object."""
    bad = f"hf_not_a_token_{uuid.uuid4().hex[:8]}"
    secret = f"hub-token-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(catalogs.api).create_namespaced_secret(catalogs.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=secret), data={"token": base64.b64encode(bad.encode()).decode()}))
    org = f"cat-{uuid.uuid4().hex[:8]}"
    model_repos.make_blob_repo(catalogs.hub.root, f"{org}/m0", {"model.safetensors": 16})
    name = catalogs.create("token", {"type": "HuggingFace", "huggingFace": {"tokenSecretName": secret},
                                     "policy": {"allowedOrganizations": [org], "maxIndexedEntries": 5}})
    condition = catalogs.wait_ready(name, "False", "SourceAccessDenied")
    assert "token" in condition["message"] and "retrying at" in condition["message"]
    obj = catalogs.get(name)
    assert obj is not None and obj["status"].get("nextRetryTime") and "catalogRevision" not in obj["status"]
    assert bad not in json.dumps(obj)
    catalogs.wait("the Warning Event", lambda: ("Warning", "SourceAccessDenied") in catalogs.events(name))


def _cluster_model(catalogs: Catalogs, catalog: dict[str, str]) -> str:
    name = f"e2e-cat-model-{uuid.uuid4().hex[:6]}"
    catalogs.custom.create_cluster_custom_object(GROUP, VERSION, "clustermodels", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterModel", "metadata": {"name": name},
        "spec": {"source": {"catalog": catalog}}})
    return name


def _model_status(catalogs: Catalogs, name: str) -> dict[str, Any]:
    obj = catalogs.custom.get_cluster_custom_object(GROUP, VERSION, "clustermodels", name)
    return dict(cast(dict[str, Any], obj).get("status") or {})


def _settled(catalogs: Catalogs, name: str) -> dict[str, Any]:
    return cast(dict[str, Any], catalogs.wait(f"ClusterModel {name} Ready or Failed", lambda: (
        (s := _model_status(catalogs, name)).get("phase") in ("Ready", "Failed") and s), timeout=180))


def test_a_cluster_model_imports_a_catalog_entry_and_freezes_its_resolution(catalogs: Catalogs,
                                                                             hub_repos: HubRepos) -> None:
    """A ClusterModel naming a catalog entry resolves it against the source's stored index, freezes the
    resolution (sourceName, name, version = the indexed commit, catalogRevision) and imports through the
    Hugging Face path at that commit: Ready. An entry the index does not list, and an omitted sourceName
    with two Ready sources, each fail with their own reason."""
    repo = hub_repos.safetensors("catalog-import")
    policy = {"allowedRepositories": [repo.repo_id], "maxIndexedEntries": 5}
    source = catalogs.create("imp", {"type": "HuggingFace", "policy": policy})
    catalogs.wait_ready(source, "True", "Refreshed")
    revision = (catalogs.get(source) or {})["status"]["catalogRevision"]
    try:
        public = public_name(repo.repo_id)  # devstack/catalog-import-<hex>: devstack--catalog-import-<hex>
        model = _cluster_model(catalogs, {"name": public, "sourceName": source})
        status = _settled(catalogs, model)
        assert status["phase"] == "Ready", status
        assert status["source"]["catalog"] == {"sourceName": source, "name": public, "version": repo.commit,
                                               "catalogRevision": revision}
        assert status["source"]["resolvedRevision"] == repo.commit and status["artifact"]["digest"].startswith(
            "sha256:")

        missing = _cluster_model(catalogs, {"name": f"{public}-absent", "sourceName": source})
        failed = _settled(catalogs, missing)
        reasons = {c["type"]: c.get("reason") for c in failed.get("conditions") or []}
        assert failed["phase"] == "Failed" and "CatalogEntryNotFound" in reasons.values(), failed

        second = catalogs.create("imp2", {"type": "HuggingFace", "policy": policy})
        catalogs.wait_ready(second, "True", "Refreshed")
        ambiguous = _settled(catalogs, _cluster_model(catalogs, {"name": public}))
        said = [c for c in ambiguous.get("conditions") or [] if c.get("reason") == "CatalogSourceAmbiguous"]
        assert ambiguous["phase"] == "Failed" and said and source in said[0]["message"] and second in said[0][
            "message"], ambiguous
    finally:
        listed = catalogs.custom.list_cluster_custom_object(GROUP, VERSION, "clustermodels")
        for item in listed.get("items") or []:
            if item["metadata"]["name"].startswith("e2e-cat-model-"):
                catalogs.custom.delete_cluster_custom_object(GROUP, VERSION, "clustermodels", item["metadata"]["name"])
