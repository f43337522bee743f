"""Temporal activities that publish a model directory as a ModelPack OCI artifact.

The workflow pushes each file with `oci.push_file` (one activity per file, so files upload in
parallel and each retries on its own), then `oci.push_manifest`, and removes an artifact with
`oci.delete_artifact`. All three are plain `def`s: they block on HTTP and disk, so the worker
runs them in its thread pool.

Retry safety: blobs are content addressed (an existing blob is skipped), an upload resumes from
what the registry has committed (the resume point rides in the heartbeat details), the manifest
bytes are deterministic (same inputs, same digest) and deleting a gone manifest answers False.

No secret crosses a payload: a target names a Secret; the worker resolves it when it connects. The
registry's upload URL is not heartbeated as is either (its query can authorise the session): the
details carry it without its query and the host keeps the full URL (`resume.py`).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from servingops.activities.oci.resume import DEFAULT_STATE_DIR, ResumeDetails, UploadLocations
from servingops.api_models.errors import ErrorType, application_error
from servingops.clients.kube.calls import call
from servingops.clients.kube.errors import absent, forbidden
from servingops.clients.oci import media_types as mt
from servingops.clients.oci.credentials import credentials_from_secret_data
from servingops.clients.oci.modelpack import LayerFile, ModelPackMeta, build_artifact, normalize_digest
from servingops.clients.oci.registry_client import (
    DEFAULT_CHUNK_SIZE,
    BlobDigestMismatch,
    LocalFileChanged,
    ModelRegistry,
    RegistryCredentials,
    RegistryError,
    UploadProgress,
    file_sha256,
)
from servingops.runtime.metrics import worker_metrics

HEARTBEAT_INTERVAL = 2.0
"""Seconds between heartbeats while hashing or while one chunk is on the wire; set the
activities' heartbeat timeout to several times this (30 s is comfortable)."""


class SecretRef(BaseModel):
    """A Kubernetes Secret holding registry credentials (dockerconfigjson or basic-auth)."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str


class RegistryTarget(BaseModel):
    """Where to publish: one repository of one registry."""

    address: str
    """host[:port] of the registry, no scheme."""
    repository: str
    insecure: bool = False
    """Plain HTTP (loopback and in-cluster registries without TLS)."""
    tls_verify: bool = True
    credentials_secret: SecretRef | None = None

    def reference(self, tag_or_digest: str) -> str:
        sep = "@" if tag_or_digest.startswith("sha256:") else ":"
        return f"{self.address}/{self.repository}{sep}{tag_or_digest}"


class PushFileInput(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    target: RegistryTarget = Field(validation_alias=AliasChoices("target", "registry"))
    path: str
    """Local path of the file on the worker."""
    sha256: str | None = None
    """Known digest (`<hex>` or `sha256:<hex>`); when None the activity hashes the file first."""
    size: int | None = Field(default=None, ge=0)
    """Expected size; a different size on disk fails the activity without retries."""
    media_type: str
    chunk_size: int = Field(default=DEFAULT_CHUNK_SIZE, ge=1)
    mount_from: str | None = None
    """Another repository of the same registry that may already hold the blob (cross-mount)."""


class PushedBlob(BaseModel):
    digest: str
    size: int
    media_type: str
    transferred_bytes: int
    """Bytes this attempt sent (0 when skipped or mounted; less than size when it resumed)."""
    skipped: bool
    mounted: bool = False
    resumed_from: int = 0


class PushedLayer(BaseModel):
    """One pushed file as the manifest needs it."""

    filepath: str
    """Path relative to the model directory (the `org.cncf.model.filepath` annotation)."""
    media_type: str
    digest: str
    size: int = Field(ge=0)
    role_untested: bool = False


class PushManifestInput(BaseModel):
    target: RegistryTarget
    tag: str | None = None
    """Tag to publish under; None publishes by digest only."""
    layers: list[PushedLayer]
    meta: ModelPackMeta
    annotations: dict[str, str] | None = None


class ArtifactRef(BaseModel):
    digest: str
    """Digest of the manifest: what identifies the artifact."""
    media_type: str
    """The manifest's media type (OCI image manifest), as a descriptor of it would carry."""
    artifact_type: str
    """The ModelPack artifactType."""
    size_bytes: int
    """Manifest + config + every layer: the bytes the artifact occupies in the registry and a
    full pull transfers, so Model status "sizeBytes" (the prepared artifact size) counts all of
    it; it differs from the sum of layers by the config and manifest, a few kilobytes."""
    layers_size_bytes: int
    manifest_size: int
    reference: str
    """`address/repository@digest`, immutable; `tag` may move later."""
    tag: str | None = None


class BlobsInput(BaseModel):
    target: RegistryTarget
    digests: list[str]


class DeleteArtifactInput(BaseModel):
    target: RegistryTarget
    digest: str


CredentialsResolver = Callable[[SecretRef, str], RegistryCredentials | None]
"""(secret reference, registry address) -> credentials; runs in the worker, never in a payload."""


def _registry_failure(exc: RegistryError) -> ApplicationError:
    """A registry failure as the workflow sees it. Whether the registry's answer may change (network,
    5xx, 408, 429) decides first, so what retried before still retries, whatever the error's class."""
    if exc.retryable:
        error_type = ErrorType.REGISTRY_UNAVAILABLE
    elif isinstance(exc, BlobDigestMismatch):
        error_type = ErrorType.BLOB_DIGEST_MISMATCH
    elif isinstance(exc, LocalFileChanged):
        error_type = ErrorType.LOCAL_FILE_CHANGED
    else:
        error_type = ErrorType.REGISTRY_ERROR
    return application_error(error_type, str(exc))


def _resume_point(details: Sequence[Any]) -> dict[str, Any]:
    """The last heartbeat of a previous attempt, as a dict (the converter hands back dicts)."""
    if not details:
        return {}
    last = details[-1]
    if isinstance(last, BaseModel):
        return last.model_dump()
    return dict(last) if isinstance(last, Mapping) else {}


@contextmanager
def open_registry(target: RegistryTarget, credentials: CredentialsResolver | None) -> Iterator[ModelRegistry]:
    """A client of `target`'s registry (its credential Secret resolved by `credentials`), closed after
    use; what it raises becomes an ErrorType member (a registry refusal, or bad input)."""
    creds = None
    if target.credentials_secret is not None:
        if credentials is None:
            raise application_error(ErrorType.NO_CREDENTIALS_RESOLVER,
                                    "this worker cannot read registry credential Secrets")
        creds = credentials(target.credentials_secret, target.address)
    registry = ModelRegistry(target.address, insecure=target.insecure, tls_verify=target.tls_verify,
                             credentials=creds)
    try:
        yield registry
    except RegistryError as exc:
        raise _registry_failure(exc) from exc
    except ValueError as exc:
        # Raised by our own validation (repository name, digest form): bad input, not bad luck.
        raise application_error(ErrorType.INVALID_INPUT, str(exc)) from exc
    finally:
        registry.close()


class OciActivities:
    """The OCI activities, bound to how this worker resolves credential Secrets."""

    def __init__(self, credentials: CredentialsResolver | None = None, *,
                 heartbeat_interval: float = HEARTBEAT_INTERVAL,
                 state_dir: str | os.PathLike[str] = DEFAULT_STATE_DIR) -> None:
        """`state_dir` keeps the full upload URLs of unfinished uploads: put it on the spool's
        volume, so a restarted worker finds them beside the files it is pushing."""
        self._credentials = credentials
        self._heartbeat_interval = heartbeat_interval
        self._locations = UploadLocations(state_dir)

    def _registry(self, target: RegistryTarget) -> AbstractContextManager[ModelRegistry]:
        return open_registry(target, self._credentials)

    @activity.defn(name="oci.push_file")
    def push_file(self, req: PushFileInput) -> PushedBlob:
        """Upload one file as a blob: skip if present, resume a previous attempt's upload."""
        path = req.path
        if not os.path.isfile(path):
            raise application_error(ErrorType.FILE_MISSING, f"{path} is not a file")
        size = os.stat(path).st_size
        if req.size is not None and req.size != size:
            raise application_error(ErrorType.LOCAL_FILE_CHANGED, f"{path} has {size} bytes, expected {req.size}")
        previous = _resume_point(activity.info().heartbeat_details)
        if req.sha256:
            digest = normalize_digest(req.sha256)
        else:
            # Keep re-sending the previous attempt's resume point while hashing: a crash now must
            # not make the next attempt forget where the upload stood.
            def hashing(done: int) -> None:
                activity.heartbeat({**previous, "hashed_bytes": done})

            digest, size = file_sha256(path, on_progress=hashing, progress_interval=self._heartbeat_interval)
        repo, address = req.target.repository, req.target.address
        with self._registry(req.target) as registry:
            if registry.blob_exists(repo, digest):
                self._locations.forget(address, repo, digest)
                return PushedBlob(digest=digest, size=size, media_type=req.media_type, transferred_bytes=0,
                                  skipped=True)
            try:
                resume = self._locations.resume(address, ResumeDetails.model_validate(previous))
            except ValidationError:
                resume = None
            recorded = [resume.upload_location if resume else None]
            counted = [0]
            pushed_bytes = worker_metrics().bytes_pushed

            def progress(p: UploadProgress) -> None:
                if p.transferred_bytes > counted[0]:
                    pushed_bytes.add(p.transferred_bytes - counted[0])
                    counted[0] = p.transferred_bytes
                point = p.resume_point(repo, digest)
                if point.upload_location != recorded[0]:
                    # The full URL stays on this host; the heartbeat gets it without its query.
                    self._locations.save(address, repo, digest, p.upload_location)
                    recorded[0] = p.upload_location
                activity.heartbeat(ResumeDetails.of(point).model_dump(exclude_none=True))
                if p.in_flight_bytes == 0 and activity.is_worker_shutdown():
                    # Stop on a chunk boundary: the upload state just heartbeated stays valid. A
                    # process killed inside a PATCH instead leaves distribution's signed upload
                    # state stale, and distribution then cancels the upload on the next touch.
                    raise application_error(
                        ErrorType.WORKER_SHUTDOWN,
                        f"worker shutting down; {digest} resumes at byte {p.committed_offset}")

            result = registry.upload_blob_streaming(
                repo, path, digest, size, chunk_size=req.chunk_size, resume=resume, on_progress=progress,
                progress_interval=self._heartbeat_interval, mount_from=req.mount_from,
            )
        self._locations.forget(address, repo, digest)
        activity.logger.info("pushed %s (%d bytes, %d sent, resumed at %d)", digest, size,
                             result.transferred_bytes, result.resumed_from)
        return PushedBlob(digest=digest, size=size, media_type=req.media_type,
                          transferred_bytes=result.transferred_bytes, skipped=False, mounted=result.mounted,
                          resumed_from=result.resumed_from)

    @activity.defn(name="oci.push_manifest")
    def push_manifest(self, req: PushManifestInput) -> ArtifactRef:
        """Upload the ModelPack config blob and the manifest (under the tag, if any)."""
        try:
            layers = [
                LayerFile(path=layer.filepath, role=_role_of(layer.media_type), sha256=layer.digest,
                          size=layer.size, role_untested=layer.role_untested)
                for layer in req.layers
            ]
            built = build_artifact(layers, req.meta, req.annotations)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError too
            raise application_error(ErrorType.INVALID_MODEL_LAYERS,
                                    f"cannot build the model manifest: {exc}") from exc
        repo = req.target.repository
        with self._registry(req.target) as registry:
            stored = {layer.path: registry.blob_size(repo, layer.sha256) for layer in built.layers}
            missing = [path for path, size in stored.items() if size is None]
            if missing:
                # Retrying this activity cannot help; the workflow has to push these files again.
                raise application_error(ErrorType.LAYER_MISSING, f"layers not in {repo}: {', '.join(missing)}",
                                        missing)
            # distribution checks only that referenced blobs exist; a wrong size would make
            # every later pull fail, so refuse it here.
            wrong = [f"{layer.path} ({layer.size} != {stored[layer.path]})" for layer in built.layers
                     if stored[layer.path] not in (layer.size, -1)]
            if wrong:
                raise application_error(ErrorType.LAYER_SIZE_MISMATCH,
                                        f"layer sizes differ from the registry's: {', '.join(wrong)}")
            registry.put_blob_bytes(repo, built.config, built.config_descriptor.digest)
            digest = registry.put_manifest(repo, req.tag or built.manifest_descriptor.digest, built.manifest,
                                           mt.OCI_MANIFEST)
        return ArtifactRef(
            digest=digest,
            media_type=mt.OCI_MANIFEST,
            artifact_type=mt.ARTIFACT_TYPE_MODEL_MANIFEST,
            size_bytes=built.total_size,
            layers_size_bytes=sum(layer.size for layer in built.layers),
            manifest_size=built.manifest_descriptor.size,
            reference=req.target.reference(digest),
            tag=req.tag,
        )

    @activity.defn(name="oci.delete_artifact")
    def delete_artifact(self, req: DeleteArtifactInput) -> bool:
        """Delete the manifest (and its tags); False when it was already gone.

        Blobs stay until the registry's garbage collector runs: they may be shared with other
        artifacts, and only the registry knows.
        """
        try:
            digest = normalize_digest(req.digest)
        except ValueError as exc:
            raise application_error(ErrorType.INVALID_DIGEST, str(exc)) from exc
        with self._registry(req.target) as registry:
            return registry.delete_manifest(req.target.repository, digest)

    @activity.defn(name="oci.present_blobs")
    def present_blobs(self, req: BlobsInput) -> list[str]:
        """Which of the digests the repository already holds (so they need no transfer)."""
        with self._registry(req.target) as registry:
            return [d for d in req.digests if registry.blob_exists(req.target.repository, normalize_digest(d))]

    @activity.defn(name="oci.delete_blobs")
    def delete_blobs(self, req: BlobsInput) -> int:
        """Delete blobs this process uploaded for an import that then failed validation, so a bad
        model leaves nothing behind. Idempotent: returns how many were still there."""
        with self._registry(req.target) as registry:
            return sum(registry.delete_blob(req.target.repository, d) for d in req.digests)

    def all(self) -> list[Callable[..., Any]]:
        return [self.push_file, self.push_manifest, self.delete_artifact, self.present_blobs, self.delete_blobs]


def _role_of(media_type: str) -> mt.FileRole:
    for role, raw in mt.RAW_LAYER_MEDIA_TYPE.items():
        if raw == media_type:
            return role
    raise ValueError(f"{media_type!r} is not a raw ModelPack layer media type")


# -- credentials from Kubernetes Secrets -----------------------------------------------------


def kubernetes_secret_credentials(core_v1: Any) -> CredentialsResolver:
    """A resolver reading Secrets through a `kubernetes.client.CoreV1Api`."""
    from kubernetes.client.exceptions import ApiException

    def resolve(ref: SecretRef, registry: str) -> RegistryCredentials | None:
        try:
            secret = call(core_v1.read_namespaced_secret, ref.name, ref.namespace)
        except ApiException as exc:
            if forbidden(exc) or absent(exc):
                raise application_error(ErrorType.SECRET_UNAVAILABLE,
                                        f"Secret {ref.namespace}/{ref.name}: HTTP {exc.status}") from exc
            raise
        data = {key: base64.b64decode(value).decode("utf-8") for key, value in (secret.data or {}).items()}
        creds = credentials_from_secret_data(data, registry)
        if creds is None:
            raise application_error(ErrorType.SECRET_UNAVAILABLE,
                                    f"Secret {ref.namespace}/{ref.name} has no credentials for {registry}")
        return creds

    return resolve
