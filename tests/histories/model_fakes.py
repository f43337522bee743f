"""Fake activities for recording ModelWorkflow histories without the stack.

Each fake is registered under the real activity name and answers with the JSON shape of the real
output type (HostClaim, SourceListing, FetchedFile, PushedBlob, InspectionResult, ArtifactRef,
UploadSessionInfo, PreparedUpload, ...). They are plain dicts on purpose: the payload on the wire
is the same JSON the real pydantic types produce, and the recorder then depends only on activity
names and wire shapes, never on where a type lives in the code being refactored.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

REGISTRY = {"address": "registry.test:5000", "repository": "models", "insecure": True}
WEIGHT = "application/vnd.cncf.model.weight.v1.raw"
WEIGHT_CONFIG = "application/vnd.cncf.model.weight.config.v1.raw"
REVISION = "4f2d8c1e9b7a6d5c3e2f1a0b9c8d7e6f5a4b3c2d"
HEADER_BYTES = 256 * 1024
"""What a header-only fetch transfers (its first ranged read; at most the file's size)."""
SMALL_FILE = 1024 * 1024
"""Below this (or for a file without a safetensors / GGUF header) a header-only fetch takes the whole file."""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# The failures as the real activities raise them (type, retryability, wording: tests/test_model_conformance.py).


def source_not_found(locator: str) -> ApplicationError:
    """source.resolve of a repository the Hub does not have (or hides from the token): permanent."""
    return ApplicationError(f"Hugging Face repository {locator}: the repository does not exist, or it is private "
                            "and the token has no access to it", type="SourceNotFound", non_retryable=True)


def truncated_safetensors(path: str, end: int, size: int) -> ApplicationError:
    """model.inspect of a safetensors file whose tensor data should end at byte `end` of a file of `size`
    bytes: permanent."""
    return ApplicationError(f"{path}: tensor data should end at byte {end} but the file has only {size} bytes; "
                            f"{end - size} bytes are missing", type="TruncatedSafetensors", non_retryable=True)


def file_role(path: str) -> str:
    """The role model.inspect gives a file (the rule of clients/model_files/inspect.py, for the names a
    Hugging Face repository or an upload has)."""
    parts = path.split("/")
    name = parts[-1].lower()
    if name.endswith((".safetensors", ".gguf")):
        return "weight"
    if (name.startswith(("tokenizer", "vocab", "chat_template")) or name in ("special_tokens_map.json",
                                                                             "added_tokens.json", "merges.txt")
            or (len(parts) > 1 and parts[-2].startswith("tokenizer"))):
        return "tokenizer"
    if name in ("model_index.json", "params.json", "config.yaml") or name.endswith(("config.json", ".index.json")):
        return "config"
    return "other"


@dataclass
class SourceFile:
    path: str
    size: int
    sha256: str | None = None


# A small Llama-shaped Hugging Face repository: configs without a declared digest, one LFS weight.
HF_FILES = [
    SourceFile("config.json", 612),
    SourceFile("tokenizer.json", 1_842_000),
    SourceFile("model.safetensors", 2_200_000_000, sha("model.safetensors")),
]


@dataclass
class FakeModelWorld:
    """One Model object, its source and the registry, as the fakes see them."""

    uid: str
    namespace: str = "team-a"
    name: str = "tiny-llama"
    source: dict[str, Any] = field(default_factory=lambda: {"url": "https://huggingface.co/acme/tiny-llama"})
    task_queue: str = ""
    """The worker's queue, also handed out as the claimed host's queue."""
    hub_files: list[SourceFile] = field(default_factory=lambda: list(HF_FILES))
    """The files source.resolve lists (the Hub's repository, whatever the URL)."""
    in_registry: set[str] = field(default_factory=set)
    """sha256 hex digests the registry already holds."""
    resolve_error: ApplicationError | None = None
    inspect_error: ApplicationError | None = None
    shared_artifact: bool = False
    """Another model reports this model's published artifact (kube.artifact_referenced of its digest)."""
    shared_digests: set[str] = field(default_factory=set)
    """Digests other models report or are annotated with."""
    deleting: bool = False
    generation: int = 1
    finalizers: list[str] = field(default_factory=list)
    gone: bool = False
    """The object is deleted for good: the kube activities answer as the real ones do for a gone object."""
    manifests: set[str] = field(default_factory=set)
    """Manifest digests the registry holds (pushed by this world)."""
    disk: dict[str, int] = field(default_factory=dict)
    """The host's spool: path -> size of every file fetched or prepared there."""
    headers: set[str] = field(default_factory=set)
    """Paths of `disk` that hold only their header (a header-only fetch: a sparse file of full size)."""
    upload_files: list[dict[str, Any]] = field(default_factory=lambda: [
        {"path": "config.json", "size": 612}, {"path": "model.safetensors", "size": 48_000_000}])
    """What upload.prepare_model_dir finds in the uploaded archive (path, size)."""
    upload_session: dict[str, Any] | None = None
    """The open upload session (UploadSessionInfo), while its Secret exists."""
    statuses: list[dict[str, Any]] = field(default_factory=list)
    """Every status merge patch as sent."""
    condition_updates: list[dict[str, Any]] = field(default_factory=list)
    observed_generation: int | None = None
    calls: list[str] = field(default_factory=list)
    held: dict[str, int] = field(default_factory=dict)
    """Activity name -> which of its calls (1 = the first) does not finish on its own but heartbeats
    until cancelled: a long transfer or a slow spool cleanup, for a deletion to arrive in."""
    cancelled: list[str] = field(default_factory=list)

    def obj(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace, "uid": self.uid,
                                    "generation": self.generation}
        if self.finalizers:
            metadata["finalizers"] = list(self.finalizers)
        if self.deleting:
            metadata["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        obj: dict[str, Any] = {"apiVersion": "ai.deckhouse.io/v1alpha1", "kind": "Model", "metadata": metadata,
                               "spec": {"source": self.source}}
        status = self.status()
        if status:
            obj["status"] = status
        return obj

    def status(self) -> dict[str, Any]:
        """The status the patches made: fields merged (None removes one), conditions by type."""
        merged: dict[str, Any] = {}
        for patch in self.statuses:
            for key, value in patch.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
        conditions: dict[str, dict[str, Any]] = {}
        for update in self.condition_updates:
            conditions[update["type"]] = {**{k: update.get(k, "") for k in ("type", "status", "reason", "message")},
                                          "observedGeneration": self.generation}
        if conditions:
            merged["conditions"] = list(conditions.values())
        if self.observed_generation is not None:
            merged["observedGeneration"] = self.observed_generation
        return merged

    def start_deleting(self) -> None:
        """A user's delete held by the finalizer: deletionTimestamp set, and (as the apiserver does for a
        custom object) the generation moves with it."""
        self.deleting = True
        self.generation += 1

    @property
    def phase(self) -> str | None:
        for status in reversed(self.statuses):
            if "phase" in status:
                return str(status["phase"])
        return None

    def spool(self, relative: str) -> str:
        """Where the host keeps the model's files: `<spool>/<uid>/<path>` as the real spool (a fetched
        file at its path, an upload under upload/, its unpacked model under model/)."""
        return f"/var/lib/servingops/spool/{self.uid}/{relative}"

    def activities(self) -> list[Callable[..., Any]]:
        world = self

        def called(name: str) -> None:
            world.calls.append(name)

        async def hold(name: str) -> None:
            if world.held.get(name) != world.calls.count(name):
                return
            try:
                while True:
                    activity.heartbeat()
                    await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                world.cancelled.append(name)
                raise

        @activity.defn(name="kube.ensure_finalizer")
        async def ensure_finalizer(change: dict[str, Any]) -> bool:
            called("kube.ensure_finalizer")
            if world.gone:
                return False  # the real one: False once the object is gone
            if not world.deleting and change["finalizer"] not in world.finalizers:
                world.finalizers.append(change["finalizer"])  # none added to an object being deleted
            return True

        @activity.defn(name="kube.read_object")
        async def read_object(ref: dict[str, Any]) -> dict[str, Any] | None:
            called("kube.read_object")
            return None if world.gone else world.obj()

        @activity.defn(name="kube.patch_status")
        async def patch_status(patch: dict[str, Any]) -> bool:
            called("kube.patch_status")
            if world.gone:
                return False  # the real one: False once the object is gone, no Event recorded
            world.statuses.append(dict(patch.get("status") or {}))
            world.condition_updates.extend(patch.get("conditions") or [])
            if patch.get("observed_generation") is not None:
                world.observed_generation = patch["observed_generation"]
            return True

        @activity.defn(name="kube.artifact_referenced")
        async def artifact_referenced(query: dict[str, Any]) -> bool:
            called("kube.artifact_referenced")
            digest = query["digest"]
            return digest in world.shared_digests or (world.shared_artifact and digest in world.manifests)

        @activity.defn(name="kube.remove_finalizer")
        async def remove_finalizer(change: dict[str, Any]) -> bool:
            called("kube.remove_finalizer")
            if change["finalizer"] in world.finalizers:
                world.finalizers.remove(change["finalizer"])
            if world.deleting and not world.finalizers:
                world.gone = True  # the last finalizer of a deleted object: the apiserver completes the delete
            return True  # also once gone, as the real one

        @activity.defn(name="host.claim")
        async def claim() -> dict[str, Any]:  # HostClaim
            called("host.claim")
            return {"task_queue": world.task_queue, "registry": REGISTRY}

        @activity.defn(name="source.resolve")
        async def resolve(request: dict[str, Any]) -> dict[str, Any]:  # SourceListing
            called("source.resolve")
            if world.resolve_error is not None:
                raise world.resolve_error
            locator = "/".join(request["url"].split("/")[3:5])  # https://huggingface.co/<org>/<repo>
            return {"provider": "HuggingFace", "locator": locator, "requested_revision": None,
                    "resolved_revision": REVISION,
                    "files": [{"path": f.path, "size": f.size, "sha256": f.sha256,
                               "blob": sha(f.path)[:40]} for f in world.hub_files],
                    "provider_info": {"pipeline_tag": "text-generation", "tags": ["llama", "safetensors"],
                                      "library_name": "transformers",
                                      "config": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}},
                    "skipped": [".gitattributes"]}  # as the real one: hidden files; README.md is kept

        @activity.defn(name="oci.present_blobs")
        async def present_blobs(request: dict[str, Any]) -> list[str]:
            called("oci.present_blobs")
            return [d for d in request["digests"] if d.removeprefix("sha256:") in world.in_registry]

        @activity.defn(name="source.fetch_file")
        async def fetch_file(request: dict[str, Any]) -> dict[str, Any]:  # FetchedFile
            called("source.fetch_file")
            await hold("source.fetch_file")
            file = request["file"]
            path, size = world.spool(file["path"]), file["size"]
            # As the real spool: only a safetensors or GGUF file of 1 MiB or more is fetched header only, a
            # file already there (a whole one also answers a header-only ask) is not transferred again.
            header_only = (bool(request.get("header_only")) and size >= SMALL_FILE
                           and file["path"].lower().endswith((".safetensors", ".gguf")))
            if path in world.disk and (header_only or path not in world.headers):
                transferred, header_only = 0, path in world.headers
            elif header_only:
                transferred = min(HEADER_BYTES, size)
                world.headers.add(path)
            else:
                transferred = size
                world.headers.discard(path)
            world.disk[path] = size
            return {"path": path, "relative_path": file["path"], "size": size,
                    "sha256": file.get("sha256") or sha(file["path"]),
                    "transferred_bytes": transferred, "header_only": header_only}

        @activity.defn(name="oci.push_file")
        async def push_file(request: dict[str, Any]) -> dict[str, Any]:  # PushedBlob
            called("oci.push_file")
            path = request["path"]
            # The real one's refusals: a file not on this host's disk, a size other than expected.
            if path not in world.disk:
                raise ApplicationError(f"{path} is not a file", type="FileMissing", non_retryable=True)
            size = world.disk[path]
            if request.get("size") is not None and request["size"] != size:
                raise ApplicationError(f"{path} has {size} bytes, expected {request['size']}",
                                       type="LocalFileChanged", non_retryable=True)
            digest = (request.get("sha256") or sha(path.rsplit("/", 1)[-1])).removeprefix("sha256:")
            skipped = digest in world.in_registry  # as the real one: a blob the registry holds is not sent
            world.in_registry.add(digest)
            return {"digest": f"sha256:{digest}", "size": size,
                    "media_type": request.get("media_type") or WEIGHT, "transferred_bytes": 0 if skipped else size,
                    "skipped": skipped, "mounted": False, "resumed_from": 0}

        @activity.defn(name="model.inspect")
        async def inspect(request: dict[str, Any]) -> dict[str, Any]:  # InspectionResult
            called("model.inspect")
            if world.inspect_error is not None:
                raise world.inspect_error
            # As the real one: every file under the model directory, sorted by path.
            root = request["model_dir"].rstrip("/") + "/"
            files = sorted((p.removeprefix(root), size) for p, size in world.disk.items() if p.startswith(root))
            if not files:
                raise ApplicationError("the model has no files", type="EmptyModel", non_retryable=True)
            return {"format": "Safetensors",
                    "resolved": {"architecture": "LlamaForCausalLM", "family": "llama", "format": "Safetensors",
                                 "parameterCount": 1_100_048_384, "quantization": "BF16",
                                 "contextWindowTokens": 2048, "supportedEndpointTypes": ["Chat", "TextGeneration"]},
                    "files": [{"path": path, "role": file_role(path), "size_bytes": size} for path, size in files],
                    "total_size_bytes": sum(size for _, size in files)}

        @activity.defn(name="oci.push_manifest")
        async def push_manifest(request: dict[str, Any]) -> dict[str, Any]:  # ArtifactRef
            called("oci.push_manifest")
            missing = [layer["filepath"] for layer in request["layers"]
                       if layer["digest"].removeprefix("sha256:") not in world.in_registry]
            if missing:  # as the real one: the workflow has to push these files again
                raise ApplicationError(f"layers not in {request['target']['repository']}: {', '.join(missing)}",
                                       missing, type="LayerMissing", non_retryable=True)
            layers = sum(layer["size"] for layer in request["layers"])
            # One digest whatever the layers (tests/test_basemodel_workflow.py names it); the real one's is a
            # function of the layers and metadata, the same for the same request (not of the tag) either way.
            digest = f"sha256:{sha('manifest')}"
            world.manifests.add(digest)
            return {"digest": digest, "media_type": "application/vnd.oci.image.manifest.v1+json",
                    "artifact_type": "application/vnd.cncf.model.manifest.v1+json",
                    "size_bytes": layers + 2_048, "layers_size_bytes": layers, "manifest_size": 1_310,
                    "reference": f"{REGISTRY['address']}/{REGISTRY['repository']}@{digest}", "tag": request.get("tag")}

        @activity.defn(name="oci.delete_blobs")
        async def delete_blobs(request: dict[str, Any]) -> int:
            called("oci.delete_blobs")
            present = [d for d in request["digests"] if d.removeprefix("sha256:") in world.in_registry]
            world.in_registry.difference_update(d.removeprefix("sha256:") for d in present)
            return len(present)  # as the real one: how many were still there

        @activity.defn(name="oci.delete_artifact")
        async def delete_artifact(request: dict[str, Any]) -> bool:
            called("oci.delete_artifact")
            if request["digest"] not in world.manifests:
                return False  # as the real one: already gone
            world.manifests.discard(request["digest"])
            return True

        @activity.defn(name="source.clean_spool")
        async def clean_spool(request: dict[str, Any]) -> None:
            called("source.clean_spool")
            await hold("source.clean_spool")
            for path in [p for p in world.disk if p.startswith(world.spool(""))]:
                del world.disk[path]  # as the real one: the model's whole spool directory
                world.headers.discard(path)

        @activity.defn(name="upload.open_session")
        async def open_session(request: dict[str, Any]) -> dict[str, Any]:  # UploadSessionInfo
            called("upload.open_session")
            # As the real one: the session the model already has, else a new one of the asked lifetime.
            if world.upload_session is None:
                ttl = timedelta(seconds=request.get("ttl_seconds") or 24 * 3600)
                expires = (datetime.now(UTC).replace(microsecond=0) + ttl)
                world.upload_session = {"secret_name": f"{world.name}-upload", "secret_namespace": world.namespace,
                                        "expires_at": expires.isoformat(), "upload_path": f"/uploads/{world.uid}"}
            return dict(world.upload_session)

        @activity.defn(name="upload.prepare_model_dir")
        async def prepare_model_dir(request: dict[str, Any]) -> dict[str, Any]:  # PreparedUpload
            called("upload.prepare_model_dir")
            files = sorted(world.upload_files, key=lambda f: f["path"])
            model_dir = world.spool("model")
            world.disk.update({f"{model_dir}/{f['path']}": f["size"] for f in files})
            return {"model_dir": model_dir, "kind": request["upload"]["kind"], "files": files,
                    "total_bytes": sum(f["size"] for f in files)}

        @activity.defn(name="upload.close_session")
        async def close_session(request: dict[str, Any]) -> None:
            called("upload.close_session")
            world.upload_session = None
            if request.get("discard_files"):
                for path in [p for p in world.disk if p.startswith(world.spool("upload/"))]:
                    del world.disk[path]

        return [ensure_finalizer, read_object, patch_status, artifact_referenced, remove_finalizer, claim, resolve,
                present_blobs, fetch_file, push_file, inspect, push_manifest, delete_blobs, delete_artifact,
                clean_spool, open_session, prepare_model_dir, close_session]
