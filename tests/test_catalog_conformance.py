"""The fake world behind the time-skipping catalog tests (tests/catalog_fakes.py, FakeCatalogWorld, used by
tests/test_catalog_workflow.py and the recorded catalog scenarios) answers as the real activities do: one
suite, run against both.

Each case drives a backend through the activities CatalogSourceWorkflow calls, by their names
(kube.read_object, kube.patch_status, catalog.index_huggingface, catalog.store_index,
catalog.fetch_remote_index, catalog.store_remote_index, catalog.refresh_remote_index, catalog.ensure_schedule,
catalog.delete_schedule), with the payloads as the data converter puts them on the wire, and checks what they
answer and refuse. The real backend is KubernetesActivities on a ModelCatalogSource of the session's
apiserver, CatalogIndexActivities on the Hub stand-in (a token from a real Secret), CatalogStoreActivities on
the session's OCI registry, CatalogRemoteActivities on a real catalog endpoint over TLS
(ingress/catalog_endpoint.py, its CA and credential in Secrets) and CatalogScheduleActivities on the session's
Temporal server. The fake is one FakeCatalogWorld per source; its Hub and remote are scripted with the helpers
the workflow tests use (complete, yielded, remote_index, token_rejected, hub_unreachable,
remote_credentials_rejected), so a case here is what proves those scripts say what the real side says.

Where they differed before this suite (the fake was changed to match the real activities):
- store_index / store_remote_index / refresh_remote_index: the fake's catalogRevision was a made-up hash; the real
  one is the manifest digest, a pure function of the document (store.index_manifest), which the fake now
  computes, so both answer the same revision for the same scan. The fake stored anything; the real one refuses
  (InvalidInput, permanent) an incomplete scan, a document that does not hash to the reported digest and an
  offloaded body the registry does not hold. The fake's offloaded scan body (`complete(offloaded=True)`) is now
  kept where its fake store reads it back, under the digest of the zlib bytes (it was the digest of the base64).
- patch_status: the fake stamped every condition update with a new lastTransitionTime (microseconds, +00:00);
  the real one keeps it while the condition's status does not change (RFC 3339, seconds, Z).
- index_huggingface: the fake scanned whatever policy it was given; the real one answers blocked (the
  policy's reason and message, nothing asked of the Hub) for a policy the rule refuses.
- ensure_schedule answered True for a world's first call whatever the id, delete_schedule always True; the
  real ones answer True only when they created, and False for a schedule already gone.
- the scripted failures' wording: the Hub down is `listing the models of <org>: ConnectError: ...`, a token it
  does not know `checking the source's token: HTTP 401, the token is invalid or lacks access`, a remote
  refusing the credential `catalog source <name>: GET <url>/catalog/v1/index: the endpoint rejected ...`.

Left as they are (not asserted here; docs/testing.md):
- the fake's Hub answers are scripted: entries, revisions and yield points are the script's, not a listing of
  an organisation; the suite holds their shape (complete, yielded, offloaded, blocked) to the real one's.
- a yielded scan from a worker with a registry comes back offloaded (packed_digest); the fake's `yielded` is
  inline, the form a worker without a registry returns: the workflow handles both and passes either back.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import inspect
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devstack import model_repos
from devstack.hub_server import HubServer
from devstack.services import OciRegistry, TemporalDevServer
from servingops.activities.catalog.artifacts import catalog_repository, sha256_of
from servingops.activities.catalog.huggingface_index import CatalogIndexActivities
from servingops.activities.catalog.index_document import index_of
from servingops.activities.catalog.remote_activities import CatalogRemoteActivities
from servingops.activities.catalog.scan_store import offload
from servingops.activities.catalog.schedule import CatalogScheduleActivities
from servingops.activities.catalog.store import (
    REMOTE_INDEX_MEDIA_TYPE,
    CatalogStoreActivities,
    index_manifest,
    remote_index_digest,
    remote_index_document,
)
from servingops.activities.catalog.types import CatalogEntry, ScanProgress
from servingops.activities.kubernetes import KubernetesActivities
from servingops.activities.oci.activities import RegistryTarget
from servingops.api_models.deckhouse.catalog_source import ModelCatalogSource
from servingops.api_models.errors import ErrorType
from servingops.clients.catalog_remote import RemoteIndex
from servingops.clients.oci.registry_client import ModelRegistry
from servingops.ingress.catalog_endpoint import CatalogEndpointServer, StaticClientCredentials
from servingops.runtime.temporal import TemporalSettings, connect
from tests.catalog_fakes import REGISTRY as FAKE_REGISTRY
from tests.catalog_fakes import (
    SCOPED,
    FakeCatalogWorld,
    complete,
    hub_unreachable,
    remote_credentials_rejected,
    remote_index,
    token_rejected,
    yielded,
)
from tests.catalog_fakes import (
    offload as fake_offload,
)
from tests.crd_helpers import new_namespace
from tests.fixtures.hub import HubRepos
from tests.secret_scan import register_token
from tests.support.catalog_remote import REPOSITORY, Pki, Pushed, catalog_cluster_model, catalog_secret, pki
from tests.support.conformance import FAKE_UNIT_AND_REAL, activity_name, chosen_backend, wire

__all__ = ["pki"]  # the fixture, reused

GROUP, VERSION, PLURAL = ModelCatalogSource.crd.group, ModelCatalogSource.crd.version, ModelCatalogSource.crd.plural
CREDENTIAL = f"conformance-cred-{uuid.uuid4().hex}"
WRONG_CREDENTIAL = f"conformance-wrong-{uuid.uuid4().hex}"
UNKNOWN_HUB_TOKEN = f"hf_conformance_unknown_{uuid.uuid4().hex}"
register_token(CREDENTIAL, WRONG_CREDENTIAL, UNKNOWN_HUB_TOKEN)
TOKEN_SECRET = "hub-token"
"""The HuggingFace source's token Secret in the controller namespace: a token the Hub does not know."""
CATALOG_SPEC = {"type": "Catalog", "url": "https://catalog.example.com", "caSecretName": "ca",
                "credentialsSecretName": "creds", "refreshInterval": "10m"}


class Backend(Protocol):
    """Catalog sources, the Hub and remote catalog behind them, and the activities that read and write them."""

    async def new_source(self, spec: dict[str, Any]) -> dict[str, Any]:
        """A ModelCatalogSource of `spec`: its ObjectRef as the workflow carries it."""
        ...

    async def change_spec(self, ref: dict[str, Any], spec: dict[str, Any]) -> None: ...

    async def delete(self, ref: dict[str, Any]) -> None:
        """The source is gone."""
        ...

    async def call(self, ref: dict[str, Any], activity: str, payload: dict[str, Any]) -> Any:
        """Run the named activity for the source `ref`; the answer as JSON (what the workflow decodes)."""
        ...

    async def organization(self, ref: dict[str, Any], count: int) -> str:
        """An organisation on the Hub with `count` models, which the source's index calls will list."""
        ...

    def budgeted(self, ref: dict[str, Any], steps: int) -> None:
        """From now on the source's scans run out of refresh budget (a refreshBudget of `steps` seconds)
        every few models, until complete."""
        ...

    def hub_down(self, ref: dict[str, Any], org: str) -> None:
        """The Hub stops answering."""
        ...

    def wrong_token(self, ref: dict[str, Any]) -> None:
        """The source's token (TOKEN_SECRET) is one the Hub does not know."""
        ...

    async def offloaded(self, ref: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any]:
        """`progress` with its body pushed to the registry as the index activity does (scan_store.offload)."""
        ...

    def publish(self, ref: dict[str, Any], names: list[str]) -> None:
        """The remote catalog endpoint publishes these models."""
        ...

    def remote(self, ref: dict[str, Any], *, credential_ok: bool = True) -> dict[str, Any]:
        """The CatalogRemoteSource of a type Catalog source (its Secrets' names), with the right or a wrong
        credential."""
        ...

    def registry(self) -> str:
        """The worker registry's address."""
        ...




# -- the fake ------------------------------------------------------------------------------------------


class FakeBackend:
    def __init__(self) -> None:
        self.worlds: dict[str, FakeCatalogWorld] = {}
        self.found: dict[str, list[CatalogEntry]] = {}

    def _world(self, ref: dict[str, Any]) -> FakeCatalogWorld:
        return self.worlds[ref["uid"]]

    async def new_source(self, spec: dict[str, Any]) -> dict[str, Any]:
        world = FakeCatalogWorld(name=f"conf-{uuid.uuid4().hex[:8]}", spec=copy.deepcopy(spec))
        self.worlds[world.uid] = world
        return world.ref()

    async def change_spec(self, ref: dict[str, Any], spec: dict[str, Any]) -> None:
        world = self._world(ref)
        world.spec = copy.deepcopy(spec)
        world.generation += 1

    async def delete(self, ref: dict[str, Any]) -> None:
        self._world(ref).present = False

    async def call(self, ref: dict[str, Any], activity: str, payload: dict[str, Any]) -> Any:
        fns = {activity_name(fn): fn for fn in self._world(ref).activities()}
        answer = await ActivityEnvironment().run(fns[activity], wire(payload, dict))
        return wire(answer, Any)

    async def organization(self, ref: dict[str, Any], count: int) -> str:
        org = f"cat-{uuid.uuid4().hex[:8]}"
        found = self.found[ref["uid"]] = [CatalogEntry(name=f"{org}/m{i}", revision="a" * 40) for i in range(count)]
        self._world(ref).answers = [complete(found, offloaded=True)]
        return org

    def budgeted(self, ref: dict[str, Any], steps: int) -> None:
        found = self.found[ref["uid"]]
        self._world(ref).answers = [*(yielded(found[:n], offset=n) for n in range(steps, len(found), steps)),
                                    complete(found, offloaded=True)]

    def hub_down(self, ref: dict[str, Any], org: str) -> None:
        self._world(ref).answers = [hub_unreachable(org)]

    def wrong_token(self, ref: dict[str, Any]) -> None:
        self._world(ref).answers = [token_rejected()]

    async def offloaded(self, ref: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any]:
        return fake_offload(progress)

    def publish(self, ref: dict[str, Any], names: list[str]) -> None:
        self._world(ref).remote_answers = [remote_index(*names, repository=REPOSITORY)]

    def remote(self, ref: dict[str, Any], *, credential_ok: bool = True) -> dict[str, Any]:
        world = self._world(ref)
        url = world.spec["url"]
        if not credential_ok:
            world.remote_answers = [remote_credentials_rejected(world.name, url)]
        return {"source": world.name, "url": url, "ca_secret_name": "ca",
                "credentials_secret_name": "creds" if credential_ok else "wrong-creds"}

    def registry(self) -> str:
        return FAKE_REGISTRY


# -- the local stack -------------------------------------------------------------------------------------


class Ticks:
    """A monotonic clock that advances one second per reading: a refreshBudget of N seconds is N readings."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class RealBackend:
    def __init__(self, api: client.ApiClient, namespace: str, hub: HubServer, hub_repos: HubRepos,
                 registry: OciRegistry, endpoint: CatalogEndpointServer, temporal: str) -> None:
        self.api, self.namespace, self.hub, self.hub_repos = api, namespace, hub, hub_repos
        self.oci, self.endpoint = registry, endpoint
        self.custom = client.CustomObjectsApi(api)
        self.target = RegistryTarget(address=registry.address, repository="unused", insecure=True)
        self.kube = KubernetesActivities(api)
        self.store = CatalogStoreActivities(self.target)
        self.remote_acts = CatalogRemoteActivities(api, namespace, self.target)
        self.temporal_address = temporal
        self.index: dict[str, CatalogIndexActivities] = {}
        self.published: list[dict[str, Any]] = []
        self.created: list[str] = []

    def _index(self, ref: dict[str, Any]) -> CatalogIndexActivities:
        return self.index.setdefault(ref["uid"], CatalogIndexActivities(
            self.api, self.namespace, self.hub.url, registry=self.target, heartbeat_interval=0))

    async def new_source(self, spec: dict[str, Any]) -> dict[str, Any]:
        name = f"conf-{uuid.uuid4().hex[:8]}"
        obj = self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ModelCatalogSource", "metadata": {"name": name},
            "spec": spec})
        self.created.append(name)
        return {"group": GROUP, "version": VERSION, "plural": PLURAL, "kind": "ModelCatalogSource", "name": name,
                "uid": obj["metadata"]["uid"]}

    async def change_spec(self, ref: dict[str, Any], spec: dict[str, Any]) -> None:
        obj = self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, ref["name"])
        obj["spec"] = spec
        self.custom.replace_cluster_custom_object(GROUP, VERSION, PLURAL, ref["name"], obj)

    async def delete(self, ref: dict[str, Any]) -> None:
        self.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, ref["name"])
        for _ in range(100):
            try:
                self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, ref["name"])
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            await asyncio.sleep(0.2)
        raise AssertionError(f"{ref['name']} never went away")

    async def call(self, ref: dict[str, Any], activity: str, payload: dict[str, Any]) -> Any:
        fns: list[Callable[..., Any]] = [
            self.kube.read_object, self.kube.patch_status, self._index(ref).index_huggingface, *self.store.all(),
            *self.remote_acts.all()]
        if activity.startswith("catalog.") and activity.endswith("_schedule"):
            # A client of this test's event loop (the worker's own client, activity.client(), in production).
            temporal = await connect(TemporalSettings(address=self.temporal_address))
            fns += CatalogScheduleActivities(temporal).all()
        fn = {activity_name(f): f for f in fns}[activity]
        arg = wire(payload, getattr(fn, "__temporal_activity_definition").arg_types[0])
        if inspect.iscoroutinefunction(fn):
            answer = await ActivityEnvironment().run(fn, arg)
        else:
            answer = await asyncio.to_thread(ActivityEnvironment().run, fn, arg)
        return wire(answer, Any)

    async def organization(self, ref: dict[str, Any], count: int) -> str:
        org = f"cat-{uuid.uuid4().hex[:8]}"
        for i in range(count):
            model_repos.make_blob_repo(self.hub.root, f"{org}/m{i}", {"model.safetensors": 16})
        return org

    def budgeted(self, ref: dict[str, Any], steps: int) -> None:
        self.index[ref["uid"]] = CatalogIndexActivities(self.api, self.namespace, self.hub.url, registry=self.target,
                                                        heartbeat_interval=0, clock=Ticks())

    def hub_down(self, ref: dict[str, Any], org: str) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]  # closed once bound and released: nothing listens there
        self.index[ref["uid"]] = CatalogIndexActivities(self.api, self.namespace, f"http://127.0.0.1:{port}",
                                                        registry=self.target, heartbeat_interval=0)

    def wrong_token(self, ref: dict[str, Any]) -> None:
        pass  # TOKEN_SECRET holds a token the Hub does not know; the source names it

    async def offloaded(self, ref: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any]:
        with ModelRegistry(self.oci.address, insecure=True) as registry:
            done = offload(registry, ref["name"], ScanProgress.model_validate(progress))
        return dict(done.model_dump(mode="json"))

    def publish(self, ref: dict[str, Any], names: list[str]) -> None:
        self.published[:] = [catalog_cluster_model(name, Pushed(digest=sha256_of(name.encode()), size=1000, blobs={}))
                             for name in names]

    def remote(self, ref: dict[str, Any], *, credential_ok: bool = True) -> dict[str, Any]:
        return {"source": ref["name"], "url": self.endpoint.url, "ca_secret_name": "ca",
                "credentials_secret_name": "creds" if credential_ok else "wrong-creds"}

    def registry(self) -> str:
        return self.oci.address

    def close(self) -> None:
        for name in self.created:
            try:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
            except ApiException:
                pass


@pytest.fixture(scope="module")
def real_backend(kube_api: client.ApiClient, hub_server: HubServer, oci_registry: OciRegistry,
                 temporal_server: TemporalDevServer, pki: Pki) -> Iterator[RealBackend]:
    namespace = new_namespace(kube_api, "catalog-conformance")
    catalog_secret(kube_api, namespace, "ca", {"ca.crt": pki.ca_pem})
    catalog_secret(kube_api, namespace, "creds", {"token": CREDENTIAL})
    catalog_secret(kube_api, namespace, "wrong-creds", {"token": WRONG_CREDENTIAL})
    catalog_secret(kube_api, namespace, TOKEN_SECRET, {"token": UNKNOWN_HUB_TOKEN})
    models: list[dict[str, Any]] = []
    endpoint = CatalogEndpointServer("127.0.0.1", 0, pki.cert_file, pki.key_file, models=lambda: list(models),
                                     clients=StaticClientCredentials({"cluster-b": CREDENTIAL}),
                                     registry=oci_registry.address, repository=REPOSITORY).start()
    backend = RealBackend(kube_api, namespace, hub_server, HubRepos(hub_server), oci_registry, endpoint,
                          temporal_server.address)
    backend.published = models
    try:
        yield backend
    finally:
        backend.close()
        endpoint.stop()
        client.CoreV1Api(kube_api).delete_namespace(namespace)


@pytest.fixture(params=FAKE_UNIT_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, FakeBackend)


# -- helpers ---------------------------------------------------------------------------------------------


def hf_spec(org: str = "devstack", **policy: Any) -> dict[str, Any]:
    return {"type": "HuggingFace", "policy": {**SCOPED, "allowedOrganizations": [org], **policy},
            "refreshInterval": "10m"}


async def refused(call: Awaitable[Any]) -> ApplicationError:
    """The permanent error a call is refused with (never a retryable failure)."""
    with pytest.raises(ApplicationError) as info:
        await call
    assert info.value.non_retryable, f"refused but retryable: {info.value}"
    return info.value


async def index(backend: Backend, ref: dict[str, Any], spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    request = {"source": ref["name"], "policy": spec.get("policy"),
               "token_secret_name": (spec.get("huggingFace") or {}).get("tokenSecretName"), **extra}
    result: dict[str, Any] = await backend.call(ref, "catalog.index_huggingface", request)
    return result


def condition(status: dict[str, Any]) -> dict[str, Any]:
    [ready] = [c for c in status.get("conditions") or [] if c["type"] == "Ready"]
    return dict(ready)


# -- the cases -------------------------------------------------------------------------------------------


async def test_read_and_patch_status_until_the_source_is_gone(backend: Backend) -> None:
    spec = hf_spec()
    ref = await backend.new_source(spec)
    obj = await backend.call(ref, "kube.read_object", ref)
    assert (obj["metadata"]["name"], obj["metadata"]["uid"], obj["metadata"]["generation"]) == (
        ref["name"], ref["uid"], 1)
    assert obj["spec"] == spec and not obj.get("status") and not obj["metadata"].get("deletionTimestamp")

    ready = {"type": "Ready", "status": "True", "reason": "Refreshed", "message": "Indexed 1 entries."}
    patch = {"ref": ref, "status": {"catalogRevision": "sha256:" + "1" * 64, "entryCount": 1,
                                    "lastSuccessfulRefreshTime": "2026-01-01T00:00:00Z", "nextRetryTime": None},
             "observed_generation": 1, "conditions": [ready],
             "events": [{"type": "Normal", "reason": "CatalogRefreshed", "message": "catalog revision x"}]}
    assert await backend.call(ref, "kube.patch_status", patch) is True
    status = (await backend.call(ref, "kube.read_object", ref))["status"]
    assert (status["catalogRevision"], status["entryCount"], status["observedGeneration"]) == (
        "sha256:" + "1" * 64, 1, 1)
    first = condition(status)
    assert {k: first[k] for k in ready} == ready and first["observedGeneration"] == 1
    assert first["lastTransitionTime"].endswith("Z") and len(first["lastTransitionTime"]) == 20

    # Ready's status unchanged: lastTransitionTime stays; a None removes a field.
    await asyncio.sleep(1.1)
    again = {**ready, "message": "Indexed 2 entries."}
    assert await backend.call(ref, "kube.patch_status", {
        "ref": ref, "status": {"entryCount": 2, "lastSuccessfulRefreshTime": None}, "conditions": [again]}) is True
    status = (await backend.call(ref, "kube.read_object", ref))["status"]
    kept = condition(status)
    assert kept["message"] == "Indexed 2 entries." and kept["lastTransitionTime"] == first["lastTransitionTime"]
    assert status["entryCount"] == 2 and "lastSuccessfulRefreshTime" not in status
    failed = {"type": "Ready", "status": "False", "reason": "SourceUnavailable", "message": "down"}
    assert await backend.call(ref, "kube.patch_status", {"ref": ref, "conditions": [failed]}) is True
    moved = condition((await backend.call(ref, "kube.read_object", ref))["status"])
    assert moved["status"] == "False" and moved["lastTransitionTime"] > first["lastTransitionTime"]

    changed = {**spec, "refreshInterval": "2h"}
    await backend.change_spec(ref, changed)
    obj = await backend.call(ref, "kube.read_object", ref)
    assert obj["metadata"]["generation"] == 2 and obj["spec"] == changed

    await backend.delete(ref)
    assert await backend.call(ref, "kube.read_object", ref) is None
    assert await backend.call(ref, "kube.patch_status", patch) is False


@pytest.mark.parametrize(("policy", "reason"), [
    (None, "PolicyScopeMissing"),
    ({"allowedOrganizations": ["devstack"]}, "PolicyBoundsMissing"),
    ({"allowedTags": ["chat"], "maxIndexedEntries": 10}, "PolicyScopeMissing"),
])
async def test_a_policy_the_rule_refuses_is_answered_blocked(backend: Backend, policy: dict[str, Any] | None,
                                                             reason: str) -> None:
    spec = {"type": "HuggingFace", "refreshInterval": "10m", **({"policy": policy} if policy else {})}
    ref = await backend.new_source(hf_spec())
    result = await index(backend, ref, spec)
    assert result["blocked_reason"] == reason and result["message"]
    assert (result["complete"], result["progress"], result["digest"], result["entry_count"]) == (False, None, None, 0)


async def test_a_complete_scan_is_offloaded_and_stored_as_the_revision_the_document_makes(backend: Backend) -> None:
    ref = await backend.new_source(hf_spec())
    org = await backend.organization(ref, 3)
    spec = hf_spec(org)
    await backend.change_spec(ref, spec)
    result = await index(backend, ref, spec)
    assert (result["complete"], result["blocked_reason"], result["entry_count"]) == (True, None, 3)
    assert result["message"] == "Indexed 3 entries." and result["digest"].startswith("sha256:")
    progress = result["progress"]
    assert progress["cursor"] is None and progress["entry_count"] == 3
    assert progress["packed"] == "" and progress["packed_digest"].startswith("sha256:"), "not offloaded"
    assert progress["summary"]["document_digest"] == result["digest"]

    request = {"source": ref["name"], "progress": progress, "digest": result["digest"]}
    stored = await backend.call(ref, "catalog.store_index", request)
    assert (stored["document_digest"], stored["entry_count"]) == (result["digest"], 3)
    assert stored["reference"] == f"{backend.registry()}/{catalog_repository(ref['name'])}@{stored['revision']}"
    assert await backend.call(ref, "catalog.store_index", request) == stored, "the same scan, the same revision"


async def test_store_index_refuses_what_it_cannot_store_whole(backend: Backend) -> None:
    ref = await backend.new_source(hf_spec())
    found = [CatalogEntry(name=f"devstack/m{i}", revision="b" * 40, tags=("text-generation",)) for i in range(2)]
    whole = complete(found)
    # An inline complete scan: the revision is the manifest of its document, on both sides.
    stored = await backend.call(ref, "catalog.store_index", {"source": ref["name"], "progress": whole["progress"],
                                                            "digest": whole["digest"]})
    document = _document_of(whole["progress"])
    assert stored["revision"] == sha256_of(index_manifest(ref["name"], whole["digest"], len(document), 2))
    # The same body offloaded stores the same revision.
    offloaded = await backend.offloaded(ref, whole["progress"])
    assert offloaded["packed"] == "" and offloaded["packed_digest"] == sha256_of(_zlib(whole["progress"]))
    assert await backend.call(ref, "catalog.store_index", {"source": ref["name"], "progress": offloaded,
                                                           "digest": whole["digest"]}) == stored

    partial = yielded(found[:1], offset=1)
    error = await refused(backend.call(ref, "catalog.store_index", {
        "source": ref["name"], "progress": partial["progress"], "digest": whole["digest"]}))
    assert (error.type, error.message) == ("InvalidInput", f"catalog {ref['name']}: the scan is not complete, "
                                                           "nothing is stored")
    wrong = "sha256:" + "0" * 64
    error = await refused(backend.call(ref, "catalog.store_index", {
        "source": ref["name"], "progress": whole["progress"], "digest": wrong}))
    assert error.type == "InvalidInput" and error.message.endswith(f"not the reported {wrong}; nothing is stored")
    lost = {**offloaded, "packed_digest": "sha256:" + "9" * 64}
    error = await refused(backend.call(ref, "catalog.store_index", {
        "source": ref["name"], "progress": lost, "digest": whole["digest"]}))
    assert error.type == "InvalidInput" and f"the scan body {lost['packed_digest']} is gone from the registry" in \
        error.message


async def test_a_spent_budget_yields_and_resume_continues_to_the_whole_index(backend: Backend) -> None:
    ref = await backend.new_source(hf_spec())
    org = await backend.organization(ref, 5)
    spec = hf_spec(org, refreshBudget="3s")
    await backend.change_spec(ref, spec)
    backend.budgeted(ref, 2)
    results = [await index(backend, ref, spec)]
    while not results[-1]["complete"]:
        last = results[-1]
        assert last["digest"] is None and last["blocked_reason"] is None
        assert last["progress"]["cursor"] is not None and last["progress"]["entry_count"] == last["entry_count"]
        assert last["message"] == (f"The refresh budget ran out after {last['entry_count']} entries; it continues "
                                   "where it stopped.")
        results.append(await index(backend, ref, spec, resume=last["progress"]))
        assert len(results) < 10
    assert len(results) >= 2 and results[-1]["entry_count"] == 5 and results[-1]["digest"].startswith("sha256:")
    counts = [r["entry_count"] for r in results]
    assert counts == sorted(counts), "a resumed scan lost entries"


async def test_hub_failures_are_their_reason_retryable_or_not(backend: Backend) -> None:
    ref = await backend.new_source(hf_spec())
    org = await backend.organization(ref, 1)
    spec = {**hf_spec(org), "huggingFace": {"tokenSecretName": TOKEN_SECRET}}
    await backend.change_spec(ref, spec)
    backend.wrong_token(ref)
    error = await refused(index(backend, ref, spec))
    expected = token_rejected()
    assert error.type == ErrorType.SOURCE_ACCESS_DENIED.value and error.message.startswith(expected.message)
    assert UNKNOWN_HUB_TOKEN not in error.message

    spec = hf_spec(org)
    await backend.change_spec(ref, spec)
    backend.hub_down(ref, org)
    with pytest.raises(ApplicationError) as info:
        await index(backend, ref, spec)
    down = hub_unreachable(org)
    assert (info.value.type, info.value.non_retryable) == (ErrorType.SOURCE_UNAVAILABLE.value, False)
    assert info.value.message.split(":")[:2] == down.message.split(":")[:2], info.value.message
    assert "Connection refused" in info.value.message


async def test_a_remote_index_is_fetched_refreshed_and_stored_only_when_it_moved(backend: Backend) -> None:
    ref = await backend.new_source(CATALOG_SPEC)
    backend.publish(ref, ["alpha", "beta"])
    remote = backend.remote(ref)
    fetched = await backend.call(ref, "catalog.fetch_remote_index", {"remote": remote})
    index_ = RemoteIndex.model_validate(fetched)
    assert [e.name for e in index_.entries] == ["alpha", "beta"] and index_.repository == REPOSITORY
    assert index_.revision.startswith("sha256:")
    digest = remote_index_digest(index_)

    first = await backend.call(ref, "catalog.refresh_remote_index", {"remote": remote})
    assert (first["remote_revision"], first["document_digest"], first["entry_count"]) == (index_.revision, digest, 2)
    revision = sha256_of(index_manifest(ref["name"], digest, len(remote_index_document(index_)), 2,
                                        REMOTE_INDEX_MEDIA_TYPE))
    assert first["stored"] == {"revision": revision, "document_digest": digest, "entry_count": 2,
                               "reference": f"{backend.registry()}/{catalog_repository(ref['name'])}@{revision}"}
    again = await backend.call(ref, "catalog.refresh_remote_index", {"remote": remote, "known_document_digest": digest})
    assert again == {**first, "stored": None}, "the same document stored again"
    # The legacy pair (fetch, then store_remote_index) stores the same revision.
    legacy = await backend.call(ref, "catalog.store_remote_index", {"source": ref["name"], "index": fetched,
                                                                    "digest": digest})
    assert legacy == first["stored"]
    error = await refused(backend.call(ref, "catalog.store_remote_index", {
        "source": ref["name"], "index": fetched, "digest": "sha256:" + "0" * 64}))
    assert error.type == "InvalidInput"


async def test_a_rejected_remote_credential_is_its_permanent_reason(backend: Backend) -> None:
    ref = await backend.new_source(CATALOG_SPEC)
    backend.publish(ref, ["alpha"])
    remote = backend.remote(ref, credential_ok=False)
    error = await refused(backend.call(ref, "catalog.refresh_remote_index", {"remote": remote}))
    assert error.type == ErrorType.CATALOG_CREDENTIALS_REJECTED.value
    assert error.message == remote_credentials_rejected(remote["source"], remote["url"]).message
    assert WRONG_CREDENTIAL not in error.message


async def test_the_schedule_is_created_once_updated_then_deleted_once(backend: Backend) -> None:
    ref = await backend.new_source(hf_spec())
    schedule = {"schedule_id": f"catalog/{ref['name']}/{ref['uid']}/refresh",
                "source_workflow_id": f"catalog/{ref['name']}/{ref['uid']}", "task_queue": "conformance",
                "interval_seconds": 600.0, "paused": False, "note": ""}
    assert await backend.call(ref, "catalog.ensure_schedule", schedule) is True
    assert await backend.call(ref, "catalog.ensure_schedule", {**schedule, "paused": True, "note": "blocked"}) is False
    assert await backend.call(ref, "catalog.delete_schedule", {"schedule_id": schedule["schedule_id"]}) is True
    assert await backend.call(ref, "catalog.delete_schedule", {"schedule_id": schedule["schedule_id"]}) is False


def _zlib(progress: dict[str, Any]) -> bytes:
    return base64.b64decode(progress["packed"])


def _document_of(progress: dict[str, Any]) -> bytes:
    return index_of(ScanProgress.model_validate(progress).unpack()).content

