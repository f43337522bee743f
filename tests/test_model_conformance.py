"""The fake activities behind the time-skipping model import tests (tests/histories/model_fakes.py,
FakeModelWorld, used by tests/test_model_workflow.py, the base model world and the history recorder)
answer as the real ones do: one suite, run against both.

Each case drives a backend through the activities ModelWorkflow calls, by their names
(kube.ensure_finalizer, kube.read_object, kube.patch_status, kube.artifact_referenced,
kube.remove_finalizer, host.claim, source.resolve, oci.present_blobs, source.fetch_file, oci.push_file,
model.inspect, oci.push_manifest, oci.delete_blobs, oci.delete_artifact, source.clean_spool,
upload.open_session, upload.prepare_model_dir, upload.close_session), with the payloads as the data
converter puts them on the wire, and checks what they answer (the fields of the real output type, and
their values) and refuse (type, retryability, wording). The real backend is KubernetesActivities as the
chart's worker identity on a Model of the session's apiserver, SourceActivities on the Hub stand-in
(devstack/hub_server.py, repositories made by devstack/model_repos.py) with a spool of its own,
OciActivities on the session's OCI registry, model.inspect on that spool, UploadActivities as the worker
identity (its Secrets and session records) and HostActivities. The fake is one FakeModelWorld per model;
its scripted failures are the helpers the workflow tests use (source_not_found, truncated_safetensors), so
a case here is what proves those scripts say what the real side says.

Where they differed before this suite (the fake was changed to match the real activities):
- a deleted object: the fake had none. The real read_object answers None, ensure_finalizer and
  patch_status False, remove_finalizer True; the fake now does the same once `gone` is set, and the
  apiserver's completion of a delete when the last finalizer goes (remove_finalizer of a deleting world).
  The fake's object now carries its finalizers and the status its patches made (fields merged, a None
  removing one, the Ready condition, observedGeneration), and a delete moves its generation.
- the spool: the fake's files were nowhere. It now keeps the host's disk: `<spool>/<uid>/<path>` as the
  real spool (it was `<uid>/model/<path>`), an upload under `upload/`, its unpacked model under `model/`.
  A file already there is not transferred again (transferred_bytes 0; a whole file also answers a
  header-only ask); a header-only fetch is one for a safetensors / GGUF file of 1 MiB or more only (a
  smaller or other file comes whole, header_only False) and transfers the first 256 KiB (it said 64 000
  bytes); clean_spool empties the model's directory.
- push_file: the fake pushed whatever it was given. It now refuses a file not on the host's disk
  (FileMissing) and one whose size is not the expected one (LocalFileChanged), both permanent with the
  real wording, and skips a blob the registry holds (skipped, 0 bytes sent).
- push_manifest refused nothing; it now refuses layers the registry does not hold (LayerMissing,
  permanent, the missing paths as its detail). delete_blobs answered the number asked, delete_artifact
  always True; they answer how many blobs were still there and False for a manifest already gone.
- inspect answered a fixed file list whatever the directory held, tokenizer.json as a config file; it
  now lists the files under the model directory, sorted, with the real roles (tokenizer.json a tokenizer),
  and refuses an empty directory (EmptyModel). The truncated_safetensors helper had its own wording; it
  now has the real one (`<path>: tensor data should end at byte N but the file has only M bytes; ...`).
- resolve answered locator acme/tiny-llama for any URL and listed README.md as skipped; the real one
  answers the URL's repository and keeps README.md (only hidden files are skipped).
- artifact_referenced answered one flag for every digest; it now answers for the digests another model
  reports (shared_digests), never the asking model's own.
- open_session made a new expiry on every call, always 24 hours; the real one answers the session the
  model has (retries get the same one), of the lifetime asked. prepare_model_dir always answered a tar of
  two files; it answers the script's files (upload_files) under `model/`, of the kind the upload is.

Left as they are (not asserted here; docs/testing.md):
- the fake's Hub is one scripted listing (hub_files, by default HF_FILES: config.json, tokenizer.json, a
  2.2 GB model.safetensors) whatever the URL; the suite holds its shape (an LFS weight with its sha256, the
  small files by git blob id, only hidden files skipped) to a generated repository's. Its inspection's
  `resolved` is fixed too (the real one reads headers and config); the suite compares format, architecture
  and family.
- push_manifest's digest is one constant (sha256 of "manifest") whatever the layers:
  tests/test_basemodel_workflow.py names it in its node reports. Both answer the same digest for the
  same request, which is what the workflow relies on; the fake does not check layer sizes against the
  registry (LayerSizeMismatch) either.
- sha256 of a file fetched whole without a declared digest: the real one hashes the bytes, the fake
  makes one of the path; pushing a header-only file, a wrong digest or a registry that does not answer
  (BlobDigestMismatch, RegistryUnavailable) are not modelled: the workflow never does the first, and the
  fake has no bytes or network to get wrong.
- prepare_model_dir does not check the upload's path or size against the disk (InvalidInput,
  UploadMissing): the recorded upload scenario (tests/histories/record.py) names a path of its own.
- Events: the real patch_status records them, the fake keeps none (the base model world does).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import io
import os
import re
import shutil
import tarfile
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.services import OciRegistry
from servingops.activities.host import HostActivities, HostClaim
from servingops.activities.kubernetes import KubernetesActivities
from servingops.activities.model_files.activity import inspect as inspect_model
from servingops.activities.oci.activities import ArtifactRef, OciActivities, PushedBlob, RegistryTarget
from servingops.activities.sources.activities import SourceActivities
from servingops.activities.sources.spool import HEADER_WINDOW, SMALL_FILE
from servingops.activities.sources.types import FetchedFile, SourceFile, SourceListing
from servingops.activities.uploads.sessions import UploadActivities
from servingops.activities.uploads.types import PreparedFile, PreparedUpload, UploadSessionInfo
from servingops.api_models.deckhouse.enums import ArtifactKind, ModelPhase, ModelReason
from servingops.api_models.deckhouse.model import Artifact, ModelStatus
from servingops.api_models.errors import ErrorType
from servingops.clients.model_files.inspect import InspectionResult
from servingops.clients.oci.media_types import (
    ARTIFACT_TYPE_MODEL_MANIFEST,
    MODEL_WEIGHT_CONFIG_RAW,
    MODEL_WEIGHT_RAW,
    OCI_MANIFEST,
)
from servingops.workers.kubernetes_errors import classify
from servingops.workflows.model import FINALIZER
from testkit.waiting import wait_until_async
from tests.fixtures.hub import HubRepos
from tests.fixtures.kube import api_as
from tests.histories import model_fakes
from tests.histories.model_fakes import HF_FILES, FakeModelWorld, source_not_found, truncated_safetensors
from tests.histories.model_fakes import SourceFile as SourceFakeFile
from tests.support.conformance import FAKE_UNIT_AND_REAL, activity_name, chosen_backend, wire

GROUP, VERSION, PLURAL = "ai.deckhouse.io", "v1alpha1", "models"
SOURCE_URL = "https://huggingface.co/acme/tiny-llama"
"""The fake's one repository (the real backend makes a repository per case)."""
FAKE_QUEUE = "host-fake"
TTL = 3600
DEADLINE = 60.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


class Backend(Protocol):
    """Models, the Hub behind their sources, the host's spool and the registry, and the activities."""

    async def new_model(self) -> dict[str, Any]:
        """A Model (namespaced, source a Hugging Face URL): its ObjectRef as the workflow carries it."""
        ...

    async def call(self, model: dict[str, Any], activity: str, payload: Any = None) -> Any:
        """Run the named activity for `model` (the fake: that model's world); the answer as JSON."""
        ...

    async def start_deleting(self, model: dict[str, Any]) -> None:
        """The user deletes the model; its finalizer holds it, deleting."""
        ...

    async def gone(self, model: dict[str, Any]) -> None:
        """The object is deleted for good."""
        ...

    async def hub_repo(self, model: dict[str, Any], *, small: bool = False) -> tuple[str, str]:
        """A Llama-shaped safetensors repository on the Hub, its one weight file over 1 MiB (under it with
        `small`): its URL and id."""
        ...

    async def missing_repo(self, model: dict[str, Any]) -> tuple[str, str]:
        """The URL and id of a repository the Hub does not have."""
        ...

    async def truncated_repo(self, model: dict[str, Any]) -> tuple[str, str, int, int]:
        """A repository whose weight file is cut short (its hash that of the bytes served): URL, the
        weight's path, where its tensor data should end and the size it has."""
        ...

    async def spooled(self, model: dict[str, Any], path: str) -> tuple[str, str, int]:
        """A complete file at `path` of the model's spool, of bytes the registry has never seen: its
        absolute path, sha256 (hex) and size."""
        ...

    async def uploaded(self, model: dict[str, Any], files: dict[str, int]) -> dict[str, Any]:
        """A tar of files of these sizes uploaded for the model: the upload-complete payload."""
        ...

    async def hold(self, model: dict[str, Any], digest: str) -> None:
        """Another Model reports an artifact of this digest."""
        ...

    async def session_secret(self, model: dict[str, Any]) -> bool:
        """Whether the model's upload session Secret exists."""
        ...

    def host_queue(self) -> str:
        """The task queue host.claim offers."""
        ...

    def registry(self) -> RegistryTarget:
        """Where host.claim says models are published."""
        ...




# -- the fake ------------------------------------------------------------------------------------------


class FakeBackend:
    def __init__(self) -> None:
        self.worlds: dict[str, FakeModelWorld] = {}

    def _world(self, model: dict[str, Any]) -> FakeModelWorld:
        return self.worlds[model["uid"]]

    async def new_model(self) -> dict[str, Any]:
        world = FakeModelWorld(uid=str(uuid.uuid4()), namespace="conformance", name=unique("model"),
                               source={"url": SOURCE_URL}, task_queue=FAKE_QUEUE)
        self.worlds[world.uid] = world
        return {"group": GROUP, "version": VERSION, "plural": PLURAL, "kind": "Model", "name": world.name,
                "namespace": world.namespace, "uid": world.uid}

    async def call(self, model: dict[str, Any], activity: str, payload: Any = None) -> Any:
        fn = {activity_name(fn): fn for fn in self._world(model).activities()}[activity]
        args = [] if payload is None else [wire(payload, dict)]
        answer = await ActivityEnvironment().run(fn, *args)
        return wire(answer, Any)

    async def start_deleting(self, model: dict[str, Any]) -> None:
        self._world(model).start_deleting()

    async def gone(self, model: dict[str, Any]) -> None:
        self._world(model).gone = True

    async def hub_repo(self, model: dict[str, Any], *, small: bool = False) -> tuple[str, str]:
        if small:
            self._world(model).hub_files = [
                f if not f.path.endswith(".safetensors") else SourceFakeFile(f.path, 400_000, f.sha256)
                for f in HF_FILES]
        return SOURCE_URL, "acme/tiny-llama"

    async def missing_repo(self, model: dict[str, Any]) -> tuple[str, str]:
        repo_id = unique("acme/absent")
        self._world(model).resolve_error = source_not_found(repo_id)
        return f"https://huggingface.co/{repo_id}", repo_id

    async def truncated_repo(self, model: dict[str, Any]) -> tuple[str, str, int, int]:
        [weight] = [f for f in HF_FILES if f.path.endswith(".safetensors")]
        self._world(model).inspect_error = truncated_safetensors(weight.path, weight.size + 100, weight.size)
        return SOURCE_URL, weight.path, weight.size + 100, weight.size

    async def spooled(self, model: dict[str, Any], path: str) -> tuple[str, str, int]:
        world = self._world(model)
        size = 1000 + uuid.uuid4().int % 4000
        world.disk[world.spool(path)] = size
        return world.spool(path), model_fakes.sha(uuid.uuid4().hex), size

    async def uploaded(self, model: dict[str, Any], files: dict[str, int]) -> dict[str, Any]:
        world = self._world(model)
        world.upload_files = [{"path": path, "size": size} for path, size in files.items()]
        path = world.spool("upload/model.tar")
        world.disk[path] = 1024 * (len(files) + 2) + sum(files.values())
        return {"filename": "model.tar", "size": world.disk[path], "sha256": model_fakes.sha(path), "path": path,
                "kind": "tar", "worker_task_queue": None}

    async def hold(self, model: dict[str, Any], digest: str) -> None:
        self._world(model).shared_digests.add(digest)

    async def session_secret(self, model: dict[str, Any]) -> bool:
        return self._world(model).upload_session is not None

    def host_queue(self) -> str:
        return FAKE_QUEUE

    def registry(self) -> RegistryTarget:
        return RegistryTarget.model_validate(model_fakes.REGISTRY)


# -- the local stack -------------------------------------------------------------------------------------


class RealBackend:
    def __init__(self, admin: client.ApiClient, worker: client.ApiClient, controller_ns: str, hub: HubServer,
                 registry: OciRegistry, workdir: Path) -> None:
        self.admin, self.hub, self.hub_repos, self.workdir = admin, hub, HubRepos(hub), workdir
        self.custom = client.CustomObjectsApi(admin)
        self.core = client.CoreV1Api(admin)
        self.namespace = unique("model-conformance")
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace)))
        self.spool = workdir / "spool"
        self.target = RegistryTarget(address=registry.address, repository=f"conformance/{unique('models')}",
                                     insecure=True)
        self.queue = f"host-{unique('conformance')}"
        kube = KubernetesActivities(worker)
        fns: list[Any] = [
            kube.ensure_finalizer, kube.read_object, kube.patch_status, kube.artifact_referenced,
            kube.remove_finalizer,
            *HostActivities(self.queue, self.target).all(),
            *SourceActivities(worker, self.spool, hub.url, heartbeat_interval=0).all(),
            *OciActivities(heartbeat_interval=0, state_dir=workdir / "oci-uploads").all(),
            inspect_model,
            *UploadActivities(worker, self.spool, "http://127.0.0.1:1", controller_ns).all(),
        ]
        self.activities: dict[str, Callable[..., Any]] = {activity_name(fn): fn for fn in fns}
        self.models: list[dict[str, Any]] = []

    def _create(self, name: str) -> dict[str, Any]:
        obj = cast(dict[str, Any], self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Model", "metadata": {"name": name},
            "spec": {"source": {"url": SOURCE_URL}}}))
        ref = {"group": GROUP, "version": VERSION, "plural": PLURAL, "kind": "Model", "name": name,
               "namespace": self.namespace, "uid": obj["metadata"]["uid"]}
        self.models.append(ref)
        return ref

    async def new_model(self) -> dict[str, Any]:
        return self._create(unique("model"))

    async def call(self, model: dict[str, Any], activity: str, payload: Any = None) -> Any:
        fn = self.activities[activity]
        arg_types = getattr(fn, "__temporal_activity_definition").arg_types or []
        args = [] if payload is None else [wire(payload, arg_types[0])]
        try:
            answer = await asyncio.to_thread(ActivityEnvironment().run, fn, *args)
        except ApiException as exc:  # what the worker's interceptor makes of it (workers/kubernetes_errors.py)
            permanent = classify(exc)
            if permanent is None:
                raise
            raise permanent from exc
        return wire(answer, Any)

    def _delete(self, model: dict[str, Any]) -> None:
        with contextlib.suppress(ApiException):
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, model["name"])

    def _exists(self, model: dict[str, Any]) -> bool:
        try:
            obj = cast(dict[str, Any], self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace,
                                                                               PLURAL, model["name"]))
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return bool(obj["metadata"]["uid"] == model["uid"])

    async def start_deleting(self, model: dict[str, Any]) -> None:
        self._delete(model)

    async def gone(self, model: dict[str, Any]) -> None:
        with contextlib.suppress(ApiException):
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, model["name"],
                                                       {"metadata": {"finalizers": None}},
                                                       _content_type="application/merge-patch+json")
        self._delete(model)
        await wait_until_async("the model gone", lambda: not self._exists(model), DEADLINE)

    def _repo(self, name: str, *, small: bool = False) -> Any:
        # One weight file: about 3.6 MB, over SMALL_FILE, so a header-only fetch is one; the small one
        # about 900 KB, between HEADER_WINDOW and SMALL_FILE.
        if small:
            return self.hub_repos.safetensors(name, num_shards=1, hidden_size=128, intermediate_size=256,
                                              vocab_size=512)
        return self.hub_repos.safetensors(name, num_shards=1, hidden_size=256, intermediate_size=512,
                                          vocab_size=1024)

    async def hub_repo(self, model: dict[str, Any], *, small: bool = False) -> tuple[str, str]:
        repo = await asyncio.to_thread(self._repo, "conf-llama", small=small)
        return f"https://huggingface.co/{repo.repo_id}", repo.repo_id

    async def missing_repo(self, model: dict[str, Any]) -> tuple[str, str]:
        repo_id = self.hub_repos.unique_id("absent")
        return f"https://huggingface.co/{repo_id}", repo_id

    async def truncated_repo(self, model: dict[str, Any]) -> tuple[str, str, int, int]:
        good = await asyncio.to_thread(self._repo, "conf-whole")
        files = self.workdir / unique("truncated")
        shutil.copytree(good.snapshot, files)
        weight = files / "model.safetensors"
        end = weight.stat().st_size
        with weight.open("r+b") as fh:
            fh.truncate(end - 100)
        repo_id = self.hub_repos.unique_id("truncated")
        self.hub_repos.register(repo_id, files)
        return f"https://huggingface.co/{repo_id}", "model.safetensors", end, end - 100

    async def spooled(self, model: dict[str, Any], path: str) -> tuple[str, str, int]:
        file = self.spool / model["uid"] / path
        file.parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(1000 + uuid.uuid4().int % 4000)
        file.write_bytes(data)
        return str(file), hashlib.sha256(data).hexdigest(), len(data)

    async def uploaded(self, model: dict[str, Any], files: dict[str, int]) -> dict[str, Any]:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path, size in files.items():
                entry = tarfile.TarInfo(path)
                entry.size = size
                tar.addfile(entry, io.BytesIO(os.urandom(size)))
        data = buffer.getvalue()
        upload = self.spool / model["uid"] / "upload" / "model.tar"
        upload.parent.mkdir(parents=True, exist_ok=True)
        upload.write_bytes(data)
        return {"filename": "model.tar", "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                "path": str(upload), "kind": "tar", "worker_task_queue": None}

    async def hold(self, model: dict[str, Any], digest: str) -> None:
        holder = self._create(unique("holder"))
        status = ModelStatus(artifact=Artifact(kind=ArtifactKind.OCI, digest=digest, media_type=OCI_MANIFEST,
                                               size_bytes=4096)).to_merge_patch()
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, self.namespace, PLURAL, holder["name"],
                                                          {"status": status},
                                                          _content_type="application/merge-patch+json")

    async def session_secret(self, model: dict[str, Any]) -> bool:
        try:
            self.core.read_namespaced_secret(f"{model['name']}-upload", self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def host_queue(self) -> str:
        return self.queue

    def registry(self) -> RegistryTarget:
        return self.target

    def close(self) -> None:
        for model in self.models:
            with contextlib.suppress(ApiException):
                self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, model["name"],
                                                           {"metadata": {"finalizers": None}},
                                                           _content_type="application/merge-patch+json")
            self._delete(model)
        self.core.delete_namespace(self.namespace)


@pytest.fixture(scope="module")
def real_backend(kube_api: client.ApiClient, chart_identities: Identities, hub_server: HubServer,
                 oci_registry: OciRegistry, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealBackend]:
    with api_as(chart_identities.worker) as worker:
        backend = RealBackend(kube_api, worker, chart_identities.namespace, hub_server, oci_registry,
                              tmp_path_factory.mktemp("model-conformance"))
        try:
            yield backend
        finally:
            backend.close()


@pytest.fixture(params=FAKE_UNIT_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, FakeBackend)


# -- helpers ---------------------------------------------------------------------------------------------


def shaped(answer: Any, kind: type[BaseModel]) -> Any:
    """`answer` has exactly the fields of the real activity's output type; read back as that type."""
    assert isinstance(answer, dict), answer
    assert set(answer) == set(kind.model_fields), f"{kind.__name__}: {sorted(answer)}"
    return kind.model_validate(answer)


async def refused(call: Awaitable[Any]) -> ApplicationError:
    """The permanent error a call is refused with (never a retryable failure)."""
    with pytest.raises(ApplicationError) as info:
        await call
    assert info.value.non_retryable, f"refused but retryable: {info.value}"
    return info.value


async def read(backend: Backend, model: dict[str, Any]) -> dict[str, Any] | None:
    obj: dict[str, Any] | None = await backend.call(model, "kube.read_object", model)
    return obj


async def resolve(backend: Backend, model: dict[str, Any], url: str) -> SourceListing:
    answer = await backend.call(model, "source.resolve", {"model": model, "url": url})
    listing: SourceListing = shaped(answer, SourceListing)
    for file in answer["files"]:
        shaped(file, SourceFile)
    return listing


async def fetch(backend: Backend, model: dict[str, Any], listing: SourceListing, path: str, *,
                header_only: bool = False) -> FetchedFile:
    [file] = [f for f in listing.files if f.path == path]
    answer = await backend.call(model, "source.fetch_file", {
        "model": model, "provider": listing.provider.value, "locator": listing.locator,
        "resolved_revision": listing.resolved_revision, "file": file.model_dump(), "header_only": header_only})
    fetched: FetchedFile = shaped(answer, FetchedFile)
    assert (fetched.relative_path, fetched.size) == (path, file.size)
    assert fetched.path.endswith(f"/{model['uid']}/{path}"), f"not <spool>/<uid>/<path>: {fetched.path}"
    return fetched


async def target(backend: Backend, model: dict[str, Any]) -> dict[str, Any]:
    """The registry host.claim names, as the workflow passes it on."""
    registry: dict[str, Any] = (await backend.call(model, "host.claim"))["registry"]
    return registry


async def present(backend: Backend, model: dict[str, Any], registry: dict[str, Any], digests: list[str]) -> list[str]:
    answer: list[str] = await backend.call(model, "oci.present_blobs", {"target": registry, "digests": digests})
    return answer


async def push(backend: Backend, model: dict[str, Any], registry: dict[str, Any], path: str, sha256: str,
               size: int, media_type: str = MODEL_WEIGHT_RAW) -> PushedBlob:
    answer = await backend.call(model, "oci.push_file", {"target": registry, "path": path, "sha256": sha256,
                                                         "size": size, "media_type": media_type})
    pushed: PushedBlob = shaped(answer, PushedBlob)
    return pushed


def absent_digest() -> str:
    return f"sha256:{hashlib.sha256(uuid.uuid4().bytes).hexdigest()}"


# -- the cases -------------------------------------------------------------------------------------------


async def test_the_object_through_finalizer_status_delete_and_gone(backend: Backend) -> None:
    model = await backend.new_model()
    obj = await read(backend, model)
    assert obj is not None
    meta = obj["metadata"]
    assert (meta["name"], meta["namespace"], meta["uid"], meta["generation"]) == (
        model["name"], model["namespace"], model["uid"], 1)
    assert "deletionTimestamp" not in meta and not meta.get("finalizers") and not obj.get("status")
    assert obj["spec"]["source"]["url"].startswith("https://huggingface.co/")

    change = {"ref": model, "finalizer": FINALIZER}
    assert await backend.call(model, "kube.ensure_finalizer", change) is True
    assert await backend.call(model, "kube.ensure_finalizer", change) is True, "already there: still True"
    obj = await read(backend, model)
    assert obj is not None and obj["metadata"]["finalizers"].count(FINALIZER) == 1

    ready = {"type": "Ready", "status": "False", "reason": ModelReason.PUBLISHING.value,
             "message": "HuggingFace acme/tiny-llama: 3 files"}
    patch = {"ref": model, "status": ModelStatus(phase=ModelPhase.PUBLISHING, progress="5%").to_merge_patch(),
             "conditions": [ready], "observed_generation": 1,
             "events": [{"type": "Normal", "reason": ModelReason.PUBLISHING.value, "message": ready["message"]}]}
    assert await backend.call(model, "kube.patch_status", patch) is True
    obj = await read(backend, model)
    assert obj is not None
    status = obj["status"]
    assert (status["phase"], status["progress"], status["observedGeneration"]) == ("Publishing", "5%", 1)
    [condition] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert {k: condition[k] for k in ready} == ready and condition["observedGeneration"] == 1
    removed = ModelStatus(phase=ModelPhase.PUBLISHING, progress=None).to_merge_patch()
    assert await backend.call(model, "kube.patch_status", {"ref": model, "status": removed}) is True
    obj = await read(backend, model)
    assert obj is not None and "progress" not in obj["status"] and obj["status"]["phase"] == "Publishing"

    await backend.start_deleting(model)
    deleting = await read(backend, model)
    assert deleting is not None and deleting["metadata"].get("deletionTimestamp")
    assert deleting["metadata"]["generation"] == 2, "a deletionTimestamp moves a custom object's generation"
    assert await backend.call(model, "kube.ensure_finalizer", change) is True
    assert await backend.call(model, "kube.patch_status", patch) is True, "a deleting object takes its status"
    assert await backend.call(model, "kube.remove_finalizer", change) is True
    assert await read(backend, model) is None, "the last finalizer gone: the apiserver completes the delete"
    assert await backend.call(model, "kube.patch_status", patch) is False
    assert await backend.call(model, "kube.ensure_finalizer", change) is False
    assert await backend.call(model, "kube.remove_finalizer", change) is True


async def test_a_gone_object_reads_none_and_takes_no_writes(backend: Backend) -> None:
    model = await backend.new_model()
    await backend.gone(model)
    assert await read(backend, model) is None
    assert await backend.call(model, "kube.ensure_finalizer", {"ref": model, "finalizer": FINALIZER}) is False
    assert await backend.call(model, "kube.patch_status", {"ref": model, "status": {"phase": "Ready"}}) is False
    assert await backend.call(model, "kube.remove_finalizer", {"ref": model, "finalizer": FINALIZER}) is True


async def test_resolve_lists_the_repository_at_a_commit(backend: Backend) -> None:
    model = await backend.new_model()
    url, repo_id = await backend.hub_repo(model)
    listing = await resolve(backend, model, url)
    assert (listing.provider.value, listing.locator, listing.requested_revision) == ("HuggingFace", repo_id, None)
    assert re.fullmatch(r"[0-9a-f]{40}", listing.resolved_revision)
    paths = [f.path for f in listing.files]
    assert {"config.json", "tokenizer.json", "model.safetensors"} <= set(paths)
    assert not [p for p in paths if p.startswith(".")], "a hidden file listed"
    assert listing.skipped and all(p.startswith(".") for p in listing.skipped), listing.skipped
    for file in listing.files:
        # LFS weights declare their sha256; the other files are verified by their git blob id.
        if file.path.endswith(".safetensors"):
            assert file.sha256 is not None and re.fullmatch(r"[0-9a-f]{64}", file.sha256), file
        else:
            assert file.sha256 is None and file.blob is not None and re.fullmatch(r"[0-9a-f]{40}", file.blob), file
    info = listing.provider_info
    assert (info.pipeline_tag, info.library_name) == ("text-generation", "transformers")
    assert info.config is not None and info.config["architectures"] == ["LlamaForCausalLM"]
    assert info.config["model_type"] == "llama"


async def test_resolve_of_a_missing_repository_is_source_not_found(backend: Backend) -> None:
    model = await backend.new_model()
    url, repo_id = await backend.missing_repo(model)
    error = await refused(backend.call(model, "source.resolve", {"model": model, "url": url}))
    assert error.type == ErrorType.SOURCE_NOT_FOUND.value
    assert error.message == source_not_found(repo_id).message
    assert error.message == (f"Hugging Face repository {repo_id}: the repository does not exist, or it is private "
                             "and the token has no access to it")


async def test_fetch_whole_header_only_and_what_the_spool_already_holds(backend: Backend) -> None:
    assert (model_fakes.HEADER_BYTES, model_fakes.SMALL_FILE) == (HEADER_WINDOW, SMALL_FILE)
    model = await backend.new_model()
    url, _ = await backend.hub_repo(model)
    listing = await resolve(backend, model, url)
    [weight] = [f for f in listing.files if f.path == "model.safetensors"]
    assert weight.size >= SMALL_FILE

    header = await fetch(backend, model, listing, weight.path, header_only=True)
    assert (header.header_only, header.transferred_bytes, header.sha256) == (True, HEADER_WINDOW, weight.sha256)
    again = await fetch(backend, model, listing, weight.path, header_only=True)
    assert (again.header_only, again.transferred_bytes, again.path) == (True, 0, header.path)
    whole = await fetch(backend, model, listing, weight.path)
    assert (whole.header_only, whole.transferred_bytes, whole.sha256) == (False, weight.size, weight.sha256), \
        "a header-only file is fetched whole when the whole is asked"
    for header_only in (True, False):
        done = await fetch(backend, model, listing, weight.path, header_only=header_only)
        assert (done.header_only, done.transferred_bytes, done.sha256) == (False, 0, weight.sha256), \
            "a whole file already there answers any ask, nothing transferred"

    # Not a safetensors / GGUF file: header_only is not honoured, the file comes whole.
    config = await fetch(backend, model, listing, "config.json", header_only=True)
    [listed] = [f for f in listing.files if f.path == "config.json"]
    assert (config.header_only, config.transferred_bytes) == (False, listed.size)
    assert config.sha256 is not None and re.fullmatch(r"[0-9a-f]{64}", config.sha256)
    assert config.path.removesuffix("config.json") == whole.path.removesuffix("model.safetensors"), "one model dir"


async def test_a_weight_under_one_mebibyte_is_fetched_whole_when_its_header_is_asked(backend: Backend) -> None:
    model = await backend.new_model()
    url, _ = await backend.hub_repo(model, small=True)
    listing = await resolve(backend, model, url)
    [weight] = [f for f in listing.files if f.path == "model.safetensors"]
    assert HEADER_WINDOW < weight.size < SMALL_FILE
    fetched = await fetch(backend, model, listing, weight.path, header_only=True)
    assert (fetched.header_only, fetched.transferred_bytes, fetched.sha256) == (False, weight.size, weight.sha256)


async def test_push_file_sends_a_new_blob_once_and_refuses_a_missing_or_changed_file(backend: Backend) -> None:
    model = await backend.new_model()
    claim = shaped(await backend.call(model, "host.claim"), HostClaim)
    assert claim.task_queue == backend.host_queue()
    assert (claim.registry.address, claim.registry.repository) == (backend.registry().address,
                                                                   backend.registry().repository)
    registry = await target(backend, model)
    path, sha256, size = await backend.spooled(model, "model.safetensors")
    digest, other = f"sha256:{sha256}", absent_digest()
    assert await present(backend, model, registry, [digest, other]) == []

    pushed = await push(backend, model, registry, path, sha256, size)
    assert pushed == PushedBlob(digest=digest, size=size, media_type=MODEL_WEIGHT_RAW, transferred_bytes=size,
                                skipped=False, mounted=False, resumed_from=0)
    assert await present(backend, model, registry, [other, digest]) == [digest]
    again = await push(backend, model, registry, path, f"sha256:{sha256}", size)
    assert again == PushedBlob(digest=digest, size=size, media_type=MODEL_WEIGHT_RAW, transferred_bytes=0,
                               skipped=True), "a blob the registry holds is not sent again"

    missing = path.removesuffix("model.safetensors") + "absent.safetensors"
    error = await refused(push(backend, model, registry, missing, sha256, size))
    assert (error.type, error.message) == (ErrorType.FILE_MISSING.value, f"{missing} is not a file")
    error = await refused(push(backend, model, registry, path, sha256, size + 1))
    assert (error.type, error.message) == (ErrorType.LOCAL_FILE_CHANGED.value,
                                           f"{path} has {size} bytes, expected {size + 1}")


async def test_inspect_lists_the_model_directory_and_its_format(backend: Backend) -> None:
    model = await backend.new_model()
    url, _ = await backend.hub_repo(model)
    listing = await resolve(backend, model, url)
    fetched = [await fetch(backend, model, listing, f.path) for f in listing.files]
    model_dir = fetched[0].path.removesuffix(fetched[0].relative_path).rstrip("/")  # as the workflow derives it
    answer = await backend.call(model, "model.inspect", {"model_dir": model_dir, "provider": "HuggingFace",
                                                         "provider_info": listing.provider_info.model_dump()})
    result: InspectionResult = shaped(answer, InspectionResult)
    assert result.format.value == "Safetensors"
    assert (result.resolved.architecture, result.resolved.family, result.resolved.format) == (
        "LlamaForCausalLM", "llama", "Safetensors")
    assert [(f.path, f.size_bytes) for f in result.files] == sorted((f.path, f.size) for f in listing.files)
    assert result.total_size_bytes == sum(f.size for f in listing.files)
    roles = {f.path: f.role.value for f in result.files}
    assert (roles["model.safetensors"], roles["tokenizer.json"], roles["config.json"]) == (
        "weight", "tokenizer", "config")
    assert roles == {path: model_fakes.file_role(path) for path in roles}, "the fake's role rule"


async def test_inspect_refuses_a_truncated_safetensors_file(backend: Backend) -> None:
    model = await backend.new_model()
    url, path, end, size = await backend.truncated_repo(model)
    listing = await resolve(backend, model, url)
    assert [f.size for f in listing.files if f.path == path] == [size]
    fetched = [await fetch(backend, model, listing, f.path) for f in listing.files]
    model_dir = fetched[0].path.removesuffix(fetched[0].relative_path).rstrip("/")
    error = await refused(backend.call(model, "model.inspect", {"model_dir": model_dir, "provider": "HuggingFace"}))
    assert error.type == ErrorType.TRUNCATED_SAFETENSORS.value
    assert error.message == truncated_safetensors(path, end, size).message
    assert error.message == (f"{path}: tensor data should end at byte {end} but the file has only {size} bytes; "
                             "100 bytes are missing")


async def test_a_manifest_over_pushed_layers_then_deleted_with_its_blobs(backend: Backend) -> None:
    model = await backend.new_model()
    registry = await target(backend, model)
    layers: list[dict[str, Any]] = []
    for path, media_type in (("config.json", MODEL_WEIGHT_CONFIG_RAW), ("model.safetensors", MODEL_WEIGHT_RAW)):
        local, sha256, size = await backend.spooled(model, path)
        pushed = await push(backend, model, registry, local, sha256, size, media_type)
        layers.append({"filepath": path, "media_type": media_type, "digest": pushed.digest, "size": size})
    digests = [layer["digest"] for layer in layers]
    meta = {"name": model["name"], "family": "llama", "architecture": "LlamaForCausalLM", "format": "Safetensors"}
    tag = f"{model['namespace']}.{model['name']}.{model['uid']}"
    request = {"target": registry, "tag": tag, "layers": layers, "meta": meta}

    artifact: ArtifactRef = shaped(await backend.call(model, "oci.push_manifest", request), ArtifactRef)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", artifact.digest)
    assert (artifact.media_type, artifact.artifact_type, artifact.tag) == (OCI_MANIFEST,
                                                                          ARTIFACT_TYPE_MODEL_MANIFEST, tag)
    assert artifact.layers_size_bytes == sum(layer["size"] for layer in layers)
    assert 0 < artifact.manifest_size < artifact.size_bytes - artifact.layers_size_bytes, \
        "size_bytes counts the manifest, the config and every layer"
    assert artifact.reference == f"{registry['address']}/{registry['repository']}@{artifact.digest}"
    again = await backend.call(model, "oci.push_manifest", request)
    assert again["digest"] == artifact.digest, "the same request, the same manifest"

    lost = {"filepath": "extra.safetensors", "media_type": MODEL_WEIGHT_RAW, "digest": absent_digest(),
            "size": 10}
    error = await refused(backend.call(model, "oci.push_manifest", {**request, "layers": [*layers, lost]}))
    assert (error.type, error.message) == (ErrorType.LAYER_MISSING.value,
                                           f"layers not in {registry['repository']}: extra.safetensors")
    assert list(error.details) == [["extra.safetensors"]], "the paths the workflow has to push again"

    delete = {"target": registry, "digest": artifact.digest}
    assert await backend.call(model, "oci.delete_artifact", delete) is True
    assert await backend.call(model, "oci.delete_artifact", delete) is False, "already gone"
    assert await present(backend, model, registry, digests) == digests, "the blobs stay for the registry's GC"
    assert await backend.call(model, "oci.delete_blobs",
                              {"target": registry, "digests": [*digests, absent_digest()]}) == 2
    assert await backend.call(model, "oci.delete_blobs", {"target": registry, "digests": digests}) == 0
    assert await present(backend, model, registry, digests) == []


async def test_an_artifact_is_referenced_only_by_another_model(backend: Backend) -> None:
    model = await backend.new_model()
    own, shared = absent_digest(), absent_digest()
    status = ModelStatus(artifact=Artifact(kind=ArtifactKind.OCI, digest=own, media_type=OCI_MANIFEST,
                                           size_bytes=4096)).to_merge_patch()
    assert await backend.call(model, "kube.patch_status", {"ref": model, "status": status}) is True
    await backend.hold(model, shared)

    async def referenced(digest: str) -> bool:
        answer: bool = await backend.call(model, "kube.artifact_referenced",
                                          {"digest": digest, "except_uid": model["uid"]})
        return answer

    assert await referenced(shared) is True
    assert await referenced(own) is False, "its own artifact does not count"
    assert await referenced(absent_digest()) is False


async def test_clean_spool_empties_the_models_directory(backend: Backend) -> None:
    model = await backend.new_model()
    url, _ = await backend.hub_repo(model)
    listing = await resolve(backend, model, url)
    config = await fetch(backend, model, listing, "config.json")
    assert (await fetch(backend, model, listing, "config.json")).transferred_bytes == 0
    clean = {"model_uid": model["uid"]}
    assert await backend.call(model, "source.clean_spool", clean) is None
    assert await backend.call(model, "source.clean_spool", clean) is None, "nothing left: a no-op"

    model_dir = config.path.removesuffix("config.json").rstrip("/")
    error = await refused(backend.call(model, "model.inspect", {"model_dir": model_dir, "provider": "HuggingFace"}))
    assert (error.type, error.message) == (ErrorType.EMPTY_MODEL.value, "the model has no files")
    registry = await target(backend, model)
    error = await refused(push(backend, model, registry, config.path, config.sha256 or "", config.size))
    assert (error.type, error.message) == (ErrorType.FILE_MISSING.value, f"{config.path} is not a file")
    assert (await fetch(backend, model, listing, "config.json")).transferred_bytes == config.size, \
        "fetched again from the Hub"


async def test_an_upload_session_is_opened_once_prepared_and_closed(backend: Backend) -> None:
    model = await backend.new_model()
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    opened = await backend.call(model, "upload.open_session", {"model": model, "ttl_seconds": TTL,
                                                               "max_bytes": 1 << 30})
    after = dt.datetime.now(dt.UTC)
    session: UploadSessionInfo = shaped(opened, UploadSessionInfo)
    assert (session.secret_name, session.secret_namespace, session.upload_path) == (
        f"{model['name']}-upload", model["namespace"], f"/uploads/{model['uid']}")
    assert session.expires_at.utcoffset() == dt.timedelta(0) and session.expires_at.microsecond == 0
    assert before + dt.timedelta(seconds=TTL) <= session.expires_at <= after + dt.timedelta(seconds=TTL)
    assert await backend.session_secret(model)
    await asyncio.sleep(1.1)
    again = await backend.call(model, "upload.open_session", {"model": model, "ttl_seconds": TTL,
                                                              "max_bytes": 1 << 30})
    assert shaped(again, UploadSessionInfo) == session, "a retry gets the session the model has"

    files = {"model.safetensors": 3000, "config.json": 200}
    upload = await backend.uploaded(model, files)
    prepared: PreparedUpload = shaped(await backend.call(model, "upload.prepare_model_dir",
                                                         {"model": model, "upload": upload}), PreparedUpload)
    assert prepared.model_dir.endswith(f"/{model['uid']}/model"), prepared.model_dir
    assert prepared.kind == "tar"
    assert prepared.files == [PreparedFile(path=path, size=size) for path, size in sorted(files.items())]
    assert prepared.total_bytes == sum(files.values())
    registry = await target(backend, model)
    for file in prepared.files:  # what the workflow pushes next: the files are on the host's disk
        with pytest.raises(ApplicationError) as info:
            await push(backend, model, registry, f"{prepared.model_dir}/{file.path}", absent_digest(), file.size + 1)
        assert info.value.type == ErrorType.LOCAL_FILE_CHANGED.value, info.value

    close = {"model": model, "discard_files": True}
    assert await backend.call(model, "upload.close_session", close) is None
    assert not await backend.session_secret(model)
    assert await backend.call(model, "upload.close_session", close) is None, "already closed: a no-op"
    reopened = shaped(await backend.call(model, "upload.open_session", {"model": model, "ttl_seconds": TTL}),
                      UploadSessionInfo)
    assert reopened.secret_name == session.secret_name and reopened.expires_at > session.expires_at, "a new one"
    assert await backend.session_secret(model)
    assert await backend.call(model, "upload.close_session", {"model": model}) is None
