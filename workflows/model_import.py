"""ModelWorkflow: one per Model / ClusterModel (id model/<ns>/<name>/<uid>).

Pending -> (WaitForUpload) -> Publishing -> Ready, or Failed; Deleting on delete, after which the
artifact leaves the registry (unless another model reports the same digest) and the finalizer is
removed. The workflow lives as long as its object so that deletion is handled durably.

Files move through the spool of one worker host: each file is fetched, then pushed while the
next one is fetched. A file whose sha256 is known in advance and already in the registry is
neither downloaded nor uploaded (only its header is fetched, for inspection). Nothing is
published until the whole model passes inspection; blobs uploaded for a model that fails are
deleted again.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from workflows.activity_calls import KUBE, ActivityOptions, call_activity
from workflows.entity import EntitySignals, EntityState

with workflow.unsafe.imports_passed_through():
    from activities.host import HostClaim
    from activities.kubernetes import ArtifactReferences, FinalizerChange, StatusPatch
    from activities.model_files.activity import InspectInput
    from activities.model_files.inspect import InspectionResult, ProviderInfo
    from activities.oci.activities import (
        ArtifactRef,
        BlobsInput,
        DeleteArtifactInput,
        PushedBlob,
        PushedLayer,
        PushFileInput,
        PushManifestInput,
    )
    from activities.oci.media_types import RAW_LAYER_MEDIA_TYPE
    from activities.oci.modelpack import ModelPackMeta, role_for_path
    from activities.sources.types import FetchedFile, FetchInput, ResolveInput, SourceFile, SourceListing
    from activities.uploads.types import (
        CloseUploadInput,
        OpenUploadInput,
        PreparedUpload,
        PrepareUploadInput,
        UploadComplete,
        UploadSessionInfo,
    )
    from api_models.contract import StartObject
    from api_models.deckhouse.enums import ModelPhase, SourceType
    from api_models.refs import ConditionUpdate, ObjectRef
    from workflows.visibility import Visibility

FINALIZER = "ai.deckhouse.io/model-cleanup"
UPLOAD_TTL = timedelta(hours=24)
UPLOAD_MAX_BYTES = 512 * 1024**3

_QUICK = ActivityOptions(timedelta(minutes=2), RetryPolicy(maximum_interval=timedelta(seconds=30), maximum_attempts=20))
# Transfers heartbeat every 2 s: a silent worker is presumed dead after 20 s (the SDK sends heartbeat
# details at most every 0.8 x the timeout, so a short timeout also keeps resume points fresh) and
# the retry resumes from the last heartbeat details. A host that never picks its task up (gone for good)
# ends the attempt after schedule_to_start.
_TRANSFER = ActivityOptions(
    timedelta(hours=6),
    RetryPolicy(maximum_interval=timedelta(seconds=30), maximum_attempts=50),
    heartbeat=timedelta(seconds=20),
    schedule_to_start=timedelta(minutes=10),
)


class FileProgress(BaseModel):
    path: str
    size: int
    sha256: str | None = None
    in_registry: bool = False
    """Already in the registry before this import: neither downloaded nor uploaded."""
    fetched: bool = False
    pushed_digest: str | None = None
    uploaded_here: bool = False
    transferred_bytes: int = 0
    pushed_bytes: int = 0
    """Bytes the successful push attempt sent to the registry (less than size when it resumed)."""


class ModelState(EntityState):
    """What the `state` query answers: what the import is doing and why."""

    phase: ModelPhase = ModelPhase.PENDING
    reason: str = "Pending"
    message: str = ""
    source_type: SourceType | None = None
    resolved_revision: str | None = None
    host_task_queue: str | None = None
    files: list[FileProgress] = []
    progress_percent: int = 0
    artifact: ArtifactRef | None = None
    upload: UploadSessionInfo | None = None


class ModelRun(StartObject):
    """The bridge starts the workflow with a StartObject; a continued run also carries its state.

    One argument, not two: Temporal drops argument types when a call passes fewer arguments than
    the run method declares, and the object would arrive as a plain dict.
    """

    carried: ModelState | None = None


class ImportFailed(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _failure(exc: BaseException) -> ImportFailed | None:
    """A non-retryable activity failure names its reason in its type: the model ends Failed."""
    cause = exc.cause if isinstance(exc, ActivityError) else exc
    if isinstance(cause, ApplicationError) and cause.non_retryable and cause.type:
        # Model-file errors carry their precise reason (TruncatedSafetensors, ...) as the detail.
        if cause.type == "InvalidModel" and cause.details and isinstance(cause.details[0], str):
            return ImportFailed(cause.details[0], cause.message)
        return ImportFailed(cause.type, cause.message)
    return None


@workflow.defn(name="ModelWorkflow")
class ModelWorkflow(EntitySignals[ModelState]):
    def __init__(self) -> None:
        # Signal handlers may run before run(): everything they touch starts here.
        self.state = ModelState()
        self.upload_done: UploadComplete | None = None
        self.ref: ObjectRef | None = None
        self.claim: HostClaim | None = None
        self.visibility: Visibility | None = None
        self._last_progress_write = -1

    # -- signals, queries ------------------------------------------------------------------------

    # object-changed, delete and the state query come from EntitySignals.

    @workflow.signal(name="upload-complete")
    def upload_complete(self, done: UploadComplete) -> None:
        self.upload_done = done

    # -- main ------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: ModelRun) -> ModelState:
        ref = self.ref = start.ref
        carried = start.carried
        self.visibility = Visibility(ref.kind, ref.namespace, ref.name)
        if carried is not None:
            # A continued run: the import is over; keep waiting for deletion with the same state.
            carried.deleting = carried.deleting or self.state.deleting
            self.state = carried
            self.visibility.publish(self.state.phase)
            return await self._await_deletion(start)
        self.visibility.publish(self.state.phase)
        present = await call_activity(
            "kube.ensure_finalizer", FinalizerChange(ref=ref, finalizer=FINALIZER), bool, KUBE
        )
        obj = await call_activity("kube.read_object", ref, dict, KUBE) if present else None
        if obj is None:
            return self.state  # gone before we started: nothing was made, nothing to clean
        if obj["metadata"].get("deletionTimestamp"):
            self.state.deleting = True
        self.state.generation = max(self.state.generation, int(obj["metadata"].get("generation", 0)))

        if not self.state.deleting:
            importing = asyncio.ensure_future(self._import(obj))
            await workflow.wait_condition(lambda: self.state.deleting or importing.done())
            if not importing.done():
                importing.cancel()
            try:
                await importing
            except asyncio.CancelledError:
                pass

        return await self._await_deletion(start)

    async def _await_deletion(self, start: ModelRun) -> ModelState:
        """Ready or Failed: the object stays until it is deleted, then clean up."""
        await workflow.wait_condition(lambda: self.state.deleting or workflow.info().is_continue_as_new_suggested())
        if not self.state.deleting:
            # Only signals arrive here, so this is rare; but history is never unbounded.
            workflow.continue_as_new(ModelRun(ref=start.ref, carried=self.state))
        await self._cleanup()
        return self.state

    async def _import(self, obj: dict[str, Any]) -> None:
        source = (obj.get("spec") or {}).get("source") or {}
        await self._set_phase(ModelPhase.PENDING, "Pending", "import queued")
        try:
            claim = self.claim = await call_activity("host.claim", None, HostClaim, _QUICK)
            self.state.host_task_queue = claim.task_queue
            if source.get("url"):
                model_dir, provider, info = await self._from_url(claim, source)
            elif "upload" in source:
                model_dir, provider, info = await self._from_upload(claim)
            else:
                raise ImportFailed(
                    "CatalogImportUnavailable",
                    "catalog sources are imported by the catalog process, which this release "
                    "does not run yet; nothing was imported",
                )
            inspection = await call_activity(
                "model.inspect",
                InspectInput(model_dir=model_dir, provider=provider, provider_info=info),
                InspectionResult,
                _TRANSFER,
                task_queue=claim.task_queue,
            )
            artifact = await self._publish(claim, inspection)
        except ImportFailed as failed:
            await self._fail(failed)
            return
        except ActivityError as exc:
            failed_import = _failure(exc)
            if failed_import is None:
                raise
            await self._fail(failed_import)
            return
        self.state.artifact = artifact
        self.state.progress_percent = 100
        await self._write(
            ModelPhase.READY,
            "Published",
            f"published {artifact.reference}",
            artifact={
                "kind": "OCI",
                "digest": artifact.digest,
                "mediaType": artifact.artifact_type,
                "sizeBytes": artifact.size_bytes,
            },
            resolved=inspection.resolved.to_api(),
            progress="100%",
        )
        await call_activity(
            "source.clean_spool", {"model_uid": self.ref_uid}, object, _QUICK, task_queue=claim.task_queue
        )

    @property
    def ref_uid(self) -> str:
        assert self.ref is not None and self.ref.uid
        return self.ref.uid

    # -- sources ---------------------------------------------------------------------------------

    async def _from_url(self, claim: HostClaim, source: dict[str, Any]) -> tuple[str, SourceType, ProviderInfo]:
        assert self.ref is not None
        auth = (source.get("authSecretRef") or {}).get("name")
        listing = await call_activity(
            "source.resolve",
            ResolveInput(model=self.ref, url=source["url"], auth_secret_name=auth),
            SourceListing,
            _QUICK,
        )
        self.state.source_type = listing.provider
        self.state.resolved_revision = listing.resolved_revision
        await self._write(
            ModelPhase.PUBLISHING,
            "Publishing",
            f"{listing.provider} {listing.locator}@{listing.resolved_revision}: "
            f"{len(listing.files)} files, {listing.total_size} bytes",
            source={"resolvedType": listing.provider.value, "resolvedRevision": listing.resolved_revision},
            progress="0%",
        )
        known = [f"sha256:{f.sha256}" for f in listing.files if f.sha256]
        present = (
            set(
                await call_activity("oci.present_blobs", BlobsInput(target=claim.registry, digests=known), list, _QUICK)
            )
            if known
            else set()
        )
        self.state.files = [
            FileProgress(path=f.path, size=f.size, sha256=f.sha256, in_registry=f"sha256:{f.sha256}" in present)
            for f in listing.files
        ]
        fetched_dir = await self._transfer(claim, listing, auth)
        return fetched_dir, listing.provider, listing.provider_info

    async def _transfer(self, claim: HostClaim, listing: SourceListing, auth: str | None) -> str:
        """Fetch each file, pushing the previous one meanwhile (one push in flight)."""
        assert self.ref is not None
        pushing: asyncio.Future[None] | None = None
        model_dir = ""
        for progress, file in zip(self.state.files, listing.files, strict=True):
            fetched = await call_activity(
                "source.fetch_file",
                FetchInput(
                    model=self.ref,
                    provider=listing.provider,
                    locator=listing.locator,
                    resolved_revision=listing.resolved_revision,
                    file=file,
                    auth_secret_name=auth,
                    header_only=progress.in_registry,
                ),
                FetchedFile,
                _TRANSFER,
                task_queue=claim.task_queue,
            )
            progress.fetched = True
            progress.transferred_bytes += fetched.transferred_bytes
            progress.sha256 = fetched.sha256 or progress.sha256
            model_dir = fetched.path[: len(fetched.path) - len(fetched.relative_path)].rstrip("/")
            if pushing is not None:
                await pushing
            if progress.in_registry:
                progress.pushed_digest = f"sha256:{progress.sha256}"
                await self._report_progress()
                pushing = None
            else:
                pushing = asyncio.ensure_future(self._push(claim, progress, fetched.path))
        if pushing is not None:
            await pushing
        return model_dir

    async def _push(self, claim: HostClaim, progress: FileProgress, path: str) -> None:
        role = role_for_path(progress.path)[0]
        pushed = await call_activity(
            "oci.push_file",
            PushFileInput(
                target=claim.registry,
                path=path,
                sha256=progress.sha256,
                size=progress.size,
                media_type=RAW_LAYER_MEDIA_TYPE[role],
            ),
            PushedBlob,
            _TRANSFER,
            task_queue=claim.task_queue,
        )
        progress.pushed_digest = pushed.digest
        progress.pushed_bytes += pushed.transferred_bytes
        progress.uploaded_here = not pushed.skipped and not pushed.mounted
        await self._report_progress()

    async def _from_upload(self, claim: HostClaim) -> tuple[str, SourceType, ProviderInfo]:
        assert self.ref is not None
        session = await call_activity(
            "upload.open_session",
            OpenUploadInput(model=self.ref, ttl_seconds=int(UPLOAD_TTL.total_seconds()), max_bytes=UPLOAD_MAX_BYTES),
            UploadSessionInfo,
            _QUICK,
            task_queue=claim.task_queue,
        )
        self.state.upload = session
        self.state.source_type = SourceType.UPLOAD
        await self._write(
            ModelPhase.WAIT_FOR_UPLOAD,
            "WaitForUpload",
            f"upload to the URL in Secret {session.secret_namespace}/{session.secret_name}",
            upload={
                "secretName": session.secret_name,
                "secretNamespace": session.secret_namespace,
                "expiresAt": session.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            source={"resolvedType": SourceType.UPLOAD.value},
        )
        remaining = session.expires_at - workflow.now()
        try:
            await workflow.wait_condition(
                lambda: self.upload_done is not None, timeout=max(remaining, timedelta(seconds=1))
            )
        except TimeoutError:
            await call_activity("upload.close_session", CloseUploadInput(model=self.ref), object, _QUICK)
            raise ImportFailed("UploadExpired", f"no upload arrived before {session.expires_at.isoformat()}") from None
        assert self.upload_done is not None
        await self._write(
            ModelPhase.PUBLISHING,
            "Publishing",
            f"received {self.upload_done.filename} ({self.upload_done.size} bytes)",
            upload=None,
            progress="0%",
        )
        prepared = await call_activity(
            "upload.prepare_model_dir",
            PrepareUploadInput(model=self.ref, upload=self.upload_done),
            PreparedUpload,
            _TRANSFER,
            task_queue=claim.task_queue,
        )
        await call_activity("upload.close_session", CloseUploadInput(model=self.ref), object, _QUICK)
        self.state.files = [FileProgress(path=f.path, size=f.size, fetched=True) for f in prepared.files]
        for progress in self.state.files:
            await self._push(claim, progress, f"{prepared.model_dir}/{progress.path}")
        return prepared.model_dir, SourceType.UPLOAD, ProviderInfo()

    # -- publishing ------------------------------------------------------------------------------

    async def _publish(self, claim: HostClaim, inspection: InspectionResult) -> ArtifactRef:
        """Push whatever the upload path has not pushed yet, then the manifest."""
        assert self.ref is not None
        resolved = inspection.resolved
        layers = []
        for progress in self.state.files:
            assert progress.pushed_digest, f"{progress.path} was never pushed"
            role, untested = role_for_path(progress.path)
            layers.append(
                PushedLayer(
                    filepath=progress.path,
                    media_type=RAW_LAYER_MEDIA_TYPE[role],
                    digest=progress.pushed_digest,
                    size=progress.size,
                    role_untested=untested,
                )
            )
        meta = ModelPackMeta(
            name=self.ref.name,
            family=resolved.family,
            architecture=resolved.architecture,
            format=inspection.format.value,
            quantization=resolved.quantization,
            revision=self.state.resolved_revision,
        )
        return await call_activity(
            "oci.push_manifest",
            PushManifestInput(target=claim.registry, tag=self._tag(), layers=layers, meta=meta),
            ArtifactRef,
            _QUICK,
        )

    def _tag(self) -> str:
        assert self.ref is not None
        return f"{self.ref.namespace or 'cluster'}.{self.ref.name}.{self.ref_uid}"[:128]

    async def _fail(self, failed: ImportFailed) -> None:
        """Failed, with nothing this import uploaded left in the registry."""
        uploaded = [p.pushed_digest for p in self.state.files if p.uploaded_here and p.pushed_digest]
        if uploaded and self.claim is not None:
            await call_activity(
                "oci.delete_blobs", BlobsInput(target=self.claim.registry, digests=uploaded), object, _QUICK
            )
        await self._write(ModelPhase.FAILED, failed.reason, failed.message)

    # -- deletion --------------------------------------------------------------------------------

    async def _cleanup(self) -> None:
        assert self.ref is not None
        await self._write(ModelPhase.DELETING, "Deleting", "removing the published artifact")
        artifact = self.state.artifact
        if artifact is not None:
            shared = await call_activity(
                "kube.artifact_referenced",
                ArtifactReferences(digest=artifact.digest, except_uid=self.ref_uid),
                bool,
                KUBE,
            )
            if not shared:
                claim = (
                    self.claim if self.claim is not None else await call_activity("host.claim", None, HostClaim, _QUICK)
                )
                await call_activity(
                    "oci.delete_artifact",
                    DeleteArtifactInput(target=claim.registry, digest=artifact.digest),
                    bool,
                    _QUICK,
                )
        if self.state.upload is not None:
            await call_activity("upload.close_session", CloseUploadInput(model=self.ref), object, _QUICK)
        if self.state.host_task_queue:
            await call_activity(
                "source.clean_spool",
                {"model_uid": self.ref_uid},
                type(None),
                _QUICK,
                task_queue=self.state.host_task_queue,
            )
        await call_activity("kube.remove_finalizer", FinalizerChange(ref=self.ref, finalizer=FINALIZER), object, KUBE)

    # -- status ----------------------------------------------------------------------------------

    async def _report_progress(self) -> None:
        """A bounded percentage that only rises, written when it moved by 5 points or more."""
        total = sum(p.size for p in self.state.files) or 1
        done = sum(p.size for p in self.state.files if p.pushed_digest)
        percent = min(99, max(self.state.progress_percent, done * 100 // total))
        self.state.progress_percent = percent
        if percent - self._last_progress_write >= 5:
            self._last_progress_write = percent
            await self._write(self.state.phase, self.state.reason, self.state.message, progress=f"{percent}%")

    async def _set_phase(self, phase: ModelPhase, reason: str, message: str) -> None:
        await self._write(phase, reason, message)

    async def _write(self, phase: ModelPhase, reason: str, message: str, **status: Any) -> None:
        assert self.ref is not None and self.visibility is not None
        self.state.phase, self.state.reason, self.state.message = phase, reason, message
        self.visibility.publish(phase.value)
        ready = "True" if phase == ModelPhase.READY else "False"
        await call_activity(
            "kube.patch_status",
            StatusPatch(
                ref=self.ref,
                status={"phase": phase.value, **status},
                conditions=[ConditionUpdate(type="Ready", status=ready, reason=reason, message=message)],
                observed_generation=self.state.generation,
            ),
            bool,
            KUBE,
        )


__all__ = ["FINALIZER", "ModelState", "ModelWorkflow", "SourceFile"]
