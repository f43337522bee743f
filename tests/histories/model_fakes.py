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


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


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
    in_registry: set[str] = field(default_factory=set)
    """sha256 hex digests the registry already holds."""
    resolve_error: ApplicationError | None = None
    inspect_error: ApplicationError | None = None
    shared_artifact: bool = False
    deleting: bool = False
    statuses: list[dict[str, Any]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    held: dict[str, int] = field(default_factory=dict)
    """Activity name -> which of its calls (1 = the first) does not finish on its own but heartbeats
    until cancelled: a long transfer or a slow spool cleanup, for a deletion to arrive in."""
    cancelled: list[str] = field(default_factory=list)

    def obj(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace, "uid": self.uid, "generation": 1}
        if self.deleting:
            metadata["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        return {"apiVersion": "ai.deckhouse.io/v1alpha1", "kind": "Model", "metadata": metadata,
                "spec": {"source": self.source}}

    @property
    def phase(self) -> str | None:
        for status in reversed(self.statuses):
            if "phase" in status:
                return str(status["phase"])
        return None

    def spool(self, relative: str) -> str:
        return f"/var/lib/servingops/spool/{self.uid}/model/{relative}"

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
            return True

        @activity.defn(name="kube.read_object")
        async def read_object(ref: dict[str, Any]) -> dict[str, Any] | None:
            called("kube.read_object")
            return world.obj()

        @activity.defn(name="kube.patch_status")
        async def patch_status(patch: dict[str, Any]) -> bool:
            called("kube.patch_status")
            world.statuses.append(dict(patch.get("status") or {}))
            return True

        @activity.defn(name="kube.artifact_referenced")
        async def artifact_referenced(query: dict[str, Any]) -> bool:
            called("kube.artifact_referenced")
            return world.shared_artifact

        @activity.defn(name="kube.remove_finalizer")
        async def remove_finalizer(change: dict[str, Any]) -> bool:
            called("kube.remove_finalizer")
            return True

        @activity.defn(name="host.claim")
        async def claim() -> dict[str, Any]:  # HostClaim
            called("host.claim")
            return {"task_queue": world.task_queue, "registry": REGISTRY}

        @activity.defn(name="source.resolve")
        async def resolve(request: dict[str, Any]) -> dict[str, Any]:  # SourceListing
            called("source.resolve")
            if world.resolve_error is not None:
                raise world.resolve_error
            return {"provider": "HuggingFace", "locator": "acme/tiny-llama", "requested_revision": None,
                    "resolved_revision": REVISION,
                    "files": [{"path": f.path, "size": f.size, "sha256": f.sha256,
                               "blob": sha(f.path)[:40]} for f in HF_FILES],
                    "provider_info": {"pipeline_tag": "text-generation", "tags": ["llama", "safetensors"],
                                      "library_name": "transformers",
                                      "config": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}},
                    "skipped": ["README.md", ".gitattributes"]}

        @activity.defn(name="oci.present_blobs")
        async def present_blobs(request: dict[str, Any]) -> list[str]:
            called("oci.present_blobs")
            return [d for d in request["digests"] if d.removeprefix("sha256:") in world.in_registry]

        @activity.defn(name="source.fetch_file")
        async def fetch_file(request: dict[str, Any]) -> dict[str, Any]:  # FetchedFile
            called("source.fetch_file")
            await hold("source.fetch_file")
            file = request["file"]
            header_only = bool(request.get("header_only"))
            return {"path": world.spool(file["path"]), "relative_path": file["path"], "size": file["size"],
                    "sha256": file.get("sha256") or sha(file["path"]),
                    "transferred_bytes": 64_000 if header_only else file["size"], "header_only": header_only}

        @activity.defn(name="oci.push_file")
        async def push_file(request: dict[str, Any]) -> dict[str, Any]:  # PushedBlob
            called("oci.push_file")
            digest = request.get("sha256") or sha(request["path"].rsplit("/", 1)[-1])
            size = request.get("size") or 1
            return {"digest": f"sha256:{digest.removeprefix('sha256:')}", "size": size,
                    "media_type": request.get("media_type") or WEIGHT, "transferred_bytes": size,
                    "skipped": False, "mounted": False, "resumed_from": 0}

        @activity.defn(name="model.inspect")
        async def inspect(request: dict[str, Any]) -> dict[str, Any]:  # InspectionResult
            called("model.inspect")
            if world.inspect_error is not None:
                raise world.inspect_error
            return {"format": "Safetensors",
                    "resolved": {"architecture": "LlamaForCausalLM", "family": "llama", "format": "Safetensors",
                                 "parameterCount": 1_100_048_384, "quantization": "BF16",
                                 "contextWindowTokens": 2048, "supportedEndpointTypes": ["Chat", "TextGeneration"]},
                    "files": [{"path": f.path, "role": "weight" if f.path.endswith(".safetensors") else "config",
                               "size_bytes": f.size} for f in HF_FILES],
                    "total_size_bytes": sum(f.size for f in HF_FILES)}

        @activity.defn(name="oci.push_manifest")
        async def push_manifest(request: dict[str, Any]) -> dict[str, Any]:  # ArtifactRef
            called("oci.push_manifest")
            layers = sum(layer["size"] for layer in request["layers"])
            digest = f"sha256:{sha('manifest')}"
            return {"digest": digest, "media_type": "application/vnd.oci.image.manifest.v1+json",
                    "artifact_type": "application/vnd.cncf.model.manifest.v1+json",
                    "size_bytes": layers + 2_048, "layers_size_bytes": layers, "manifest_size": 1_310,
                    "reference": f"{REGISTRY['address']}/{REGISTRY['repository']}@{digest}", "tag": request.get("tag")}

        @activity.defn(name="oci.delete_blobs")
        async def delete_blobs(request: dict[str, Any]) -> int:
            called("oci.delete_blobs")
            return len(request["digests"])

        @activity.defn(name="oci.delete_artifact")
        async def delete_artifact(request: dict[str, Any]) -> bool:
            called("oci.delete_artifact")
            return True

        @activity.defn(name="source.clean_spool")
        async def clean_spool(request: dict[str, Any]) -> None:
            called("source.clean_spool")
            await hold("source.clean_spool")

        @activity.defn(name="upload.open_session")
        async def open_session(request: dict[str, Any]) -> dict[str, Any]:  # UploadSessionInfo
            called("upload.open_session")
            expires = (datetime.now(UTC) + timedelta(hours=24)).replace(microsecond=0)
            return {"secret_name": f"{world.name}-upload", "secret_namespace": world.namespace,
                    "expires_at": expires.isoformat(), "upload_path": f"/uploads/{world.uid}"}

        @activity.defn(name="upload.prepare_model_dir")
        async def prepare_model_dir(request: dict[str, Any]) -> dict[str, Any]:  # PreparedUpload
            called("upload.prepare_model_dir")
            files = [{"path": "config.json", "size": 612}, {"path": "model.safetensors", "size": 48_000_000}]
            return {"model_dir": world.spool("upload"), "kind": "tar", "files": files,
                    "total_bytes": sum(f["size"] for f in files)}

        @activity.defn(name="upload.close_session")
        async def close_session(request: dict[str, Any]) -> None:
            called("upload.close_session")

        return [ensure_finalizer, read_object, patch_status, artifact_referenced, remove_finalizer, claim, resolve,
                present_blobs, fetch_file, push_file, inspect, push_manifest, delete_blobs, delete_artifact,
                clean_spool, open_session, prepare_model_dir, close_session]
