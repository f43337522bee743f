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

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from servingops.workflows import options
from servingops.workflows.entity import EntitySignals, EntityState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.catalog.remote_activities import (
        CatalogRemoteActivities,
        CatalogRemoteSource,
        CopyArtifactInput,
    )
    from servingops.activities.catalog.resolve import CatalogResolution, CatalogResolveActivities, CatalogResolveInput
    from servingops.activities.host import HostClaim
    from servingops.activities.kubernetes import (
        ArtifactReferences,
        EventNote,
        FinalizerChange,
        KubernetesActivities,
        StatusPatch,
    )
    from servingops.activities.oci.activities import ArtifactRef, DeleteArtifactInput, OciActivities
    from servingops.activities.sources.types import SourceFile
    from servingops.activities.uploads.sessions import UploadActivities
    from servingops.activities.uploads.types import (
        CloseUploadInput,
        OpenUploadInput,
        PrepareUploadInput,
        UploadSessionInfo,
    )
    from servingops.api_models.contract import Signal, StartObject, WorkflowType
    from servingops.api_models.contract.uploads import UploadComplete
    from servingops.api_models.deckhouse.enums import ArtifactKind, ModelPhase, ModelReason, SourceType
    from servingops.api_models.deckhouse.model import (
        Artifact,
        CatalogProvenance,
        ModelStatus,
        ResolvedModel,
        ResolvedSource,
        UploadSession,
    )
    from servingops.api_models.errors import ErrorType, error_message, error_type_of
    from servingops.api_models.refs import ConditionUpdate, ObjectRef
    from servingops.clients.model_files.inspect import InspectionResult, ProviderInfo
    from servingops.workflows.import_steps import (
        DELETE_CANCELS_IMPORT,
        FileProgress,
        ImportSteps,
        TokenSecret,
    )
    from servingops.workflows.visibility import Visibility

FINALIZER = "ai.deckhouse.io/model-cleanup"
CATALOG_IMPORTS = "catalog-imports"
"""A catalog source is resolved and imported (before: Failed CatalogImportUnavailable, no activity)."""
UPLOAD_TTL = timedelta(hours=24)
UPLOAD_MAX_BYTES = 512 * 1024**3



class ModelState(EntityState):
    """What the `state` query answers: what the import is doing and why."""

    phase: ModelPhase = ModelPhase.PENDING
    reason: str = ModelReason.PENDING
    message: str = ""
    source_type: SourceType | None = None
    resolved_revision: str | None = None
    host_task_queue: str | None = None
    files: list[FileProgress] = []
    progress_percent: int = 0
    artifact: ArtifactRef | None = None
    upload: UploadSessionInfo | None = None
    catalog: CatalogResolution | None = None
    """A catalog source's frozen resolution (status.source.catalog)."""


class ModelRun(StartObject):
    """The bridge starts the workflow with a StartObject; a continued run also carries its state.

    One argument, not two: Temporal drops argument types when a call passes fewer arguments than
    the run method declares, and the object would arrive as a plain dict.
    """

    carried: ModelState | None = None


class ImportFailed(Exception):
    def __init__(self, reason: ErrorType, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


_LEGACY_INVALID_MODEL = "InvalidModel"


def _cancelled(exc: ActivityError) -> bool:
    return isinstance(exc.cause, CancelledError)


def _failure(exc: ActivityError) -> ImportFailed:
    """Why an activity failed for good, as the Failed condition's reason and message.

    A permanent error names its reason in its type (TruncatedSafetensors, SourceNotFound, ...).
    Anything else reaching here outlasted its retry policy (a registry down for ten minutes, a
    host gone for good): the model ends Failed saying so, instead of the workflow failing with
    the status stuck at its last phase.
    """
    error_type = error_type_of(exc)
    if error_type is None and isinstance(exc.cause, ApplicationError) and exc.cause.type == _LEGACY_INVALID_MODEL:
        # Raised by a worker of the release before the one error enumeration: the reason was a detail.
        details = exc.cause.details
        error_type = ErrorType(details[0]) if details and details[0] in ErrorType.__members__.values() else None
    if error_type is not None and error_type.permanent:
        return ImportFailed(error_type, error_message(exc))
    cause = error_type.value if error_type is not None else type(exc.cause).__name__
    return ImportFailed(ErrorType.IMPORT_GAVE_UP, f"gave up after retries ({cause}): {error_message(exc)}")


@workflow.defn(name=WorkflowType.MODEL)
class ModelWorkflow(EntitySignals[ModelState]):
    def __init__(self) -> None:
        # Signal handlers may run before run(): everything they touch starts here.
        self.state = ModelState()
        self.upload_done: UploadComplete | None = None
        self.ref: ObjectRef | None = None
        self.steps: ImportSteps | None = None
        """The import machinery shared with BaseModelWorkflow (made in run(), once the state is final)."""
        self.visibility: Visibility | None = None

    # -- signals, queries ------------------------------------------------------------------------

    # object-changed, delete and the state query come from EntitySignals.

    @workflow.signal(name=Signal.UPLOAD_COMPLETE)
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
            self.steps = ImportSteps(ref, self.state, self._write_progress)
            self.visibility.publish(self.state.phase)
            return await self._await_deletion(start)
        self.steps = ImportSteps(ref, self.state, self._write_progress)
        self.visibility.publish(self.state.phase)
        present = await workflow.execute_activity_method(
            KubernetesActivities.ensure_finalizer, FinalizerChange(ref=ref, finalizer=FINALIZER), **options.KUBE
        )
        obj = (
            await workflow.execute_activity_method(KubernetesActivities.read_object, ref, **options.KUBE)
            if present
            else None
        )
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
            except ActivityError as exc:
                # A cancelled activity surfaces as ActivityError(CancelledError), not as
                # asyncio's CancelledError: the import was stopped, the cleanup goes on.
                if not _cancelled(exc):
                    raise

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
        await self._write(ModelPhase.PENDING, ModelReason.PENDING, "import queued")
        steps = self._steps
        try:
            claim = steps.claim = await steps.claim_host()
            self.state.host_task_queue = claim.task_queue
            if source.get("url"):
                model_dir, provider, info = await self._from_url(claim, source)
            elif "upload" in source:
                model_dir, provider, info = await self._from_upload(claim)
            elif source.get("catalog") and workflow.patched(CATALOG_IMPORTS):
                frozen = ((obj.get("status") or {}).get("source") or {}).get("catalog") or {}
                resolution = await self._resolve_catalog(source["catalog"], frozen)
                if resolution.remote_digest is not None:
                    # A type Catalog source's entry: copied by digest, nothing to inspect or assemble.
                    await self._copy_from_catalog(claim, resolution)
                    return
                model_dir, provider, info = await self._from_catalog(claim, resolution)
            else:
                raise ImportFailed(
                    ErrorType.CATALOG_IMPORT_UNAVAILABLE,
                    "catalog sources are imported by the catalog process, which this release "
                    "does not run yet; nothing was imported",
                )
            inspection = await steps.inspect(claim, model_dir, provider, info)
            artifact = await self._publish(claim, inspection)
        except ImportFailed as failed:
            await self._fail(failed)
            return
        except ActivityError as exc:
            if _cancelled(exc) and workflow.patched(DELETE_CANCELS_IMPORT):
                raise  # deleted mid-import: _cleanup removes what was pushed; nothing "failed"
            await self._fail(_failure(exc))
            return
        self.state.artifact = artifact
        self.state.progress_percent = 100
        await self._write(
            ModelPhase.READY,
            ModelReason.PUBLISHED,
            f"published {artifact.reference}",
            ModelStatus(
                artifact=Artifact(
                    kind=ArtifactKind.OCI,
                    digest=artifact.digest,
                    media_type=artifact.artifact_type,
                    size_bytes=artifact.size_bytes,
                ),
                resolved=inspection.resolved,
                progress="100%",
            ),
        )
        await steps.clean_spool(claim.task_queue)

    @property
    def ref_uid(self) -> str:
        assert self.ref is not None and self.ref.uid
        return self.ref.uid

    @property
    def _steps(self) -> ImportSteps:
        assert self.steps is not None
        return self.steps

    # -- sources ---------------------------------------------------------------------------------

    async def _from_url(self, claim: HostClaim, source: dict[str, Any]) -> tuple[str, SourceType, ProviderInfo]:
        auth = (source.get("authSecretRef") or {}).get("name")
        return await self._fetch(claim, source["url"], TokenSecret(name=auth) if auth else None)

    async def _resolve_catalog(self, catalog: dict[str, Any], frozen: dict[str, Any]) -> CatalogResolution:
        """Resolve the entry once and freeze it (status.source.catalog); a resolution already frozen on
        the object (a new run) is resolved again at that source and catalog revision, never the newest."""
        if self.state.catalog is None:
            assert self.ref is not None
            resolution = await workflow.execute_activity_method(
                CatalogResolveActivities.resolve,
                CatalogResolveInput(model=self.ref, name=str(frozen.get("name") or catalog["name"]),
                                    version=frozen.get("version") or catalog.get("version"),
                                    source_name=frozen.get("sourceName") or catalog.get("sourceName"),
                                    catalog_revision=frozen.get("catalogRevision")),
                **options.QUICK)
            self.state.catalog = resolution
            await self._write(
                ModelPhase.PENDING, ModelReason.PENDING,
                f"catalog {resolution.source_name} (revision {resolution.catalog_revision}): "
                f"{resolution.name}@{resolution.version}",
                ModelStatus(source=ResolvedSource(catalog=self._provenance())))
        return self.state.catalog

    async def _copy_from_catalog(self, claim: HostClaim, resolution: CatalogResolution) -> None:
        """A type Catalog entry: `catalog.copy_artifact` copies the remote artifact by digest into this cluster's
        model repository (blobs already present are skipped), then Ready with that digest."""
        assert resolution.remote_digest is not None
        remote = CatalogRemoteSource(source=resolution.source_name, url=resolution.remote_url or "",
                                     ca_secret_name=resolution.ca_secret_name,
                                     credentials_secret_name=resolution.credentials_secret_name)
        await self._write(
            ModelPhase.PUBLISHING, ModelReason.PUBLISHING,
            f"copying {resolution.remote_digest} from catalog {resolution.source_name}",
            ModelStatus(source=ResolvedSource(catalog=self._provenance()), progress="0%"))
        copied = await workflow.execute_activity_method(
            CatalogRemoteActivities.copy_artifact,
            CopyArtifactInput(remote=remote, digest=resolution.remote_digest, target=claim.registry,
                              tag=self._tag()),
            **options.CATALOG_COPY)
        media_type = resolution.media_type or copied.artifact_type or copied.media_type
        self.state.artifact = ArtifactRef(
            digest=copied.digest, media_type=copied.media_type, artifact_type=media_type,
            size_bytes=copied.size_bytes, layers_size_bytes=0, manifest_size=0, reference=copied.reference,
            tag=copied.tag)
        self.state.progress_percent = 100
        resolved = ResolvedModel.model_validate(resolution.resolved) if resolution.resolved else None
        await self._write(
            ModelPhase.READY, ModelReason.PUBLISHED,
            f"copied {copied.reference} from catalog {resolution.source_name} ({copied.blobs_copied} blobs "
            f"copied, {copied.blobs_skipped} already present)",
            ModelStatus(
                artifact=Artifact(kind=ArtifactKind.OCI, digest=copied.digest, media_type=media_type,
                                  size_bytes=copied.size_bytes or resolution.size_bytes),
                resolved=resolved, progress="100%"))

    async def _from_catalog(self, claim: HostClaim,
                            resolution: CatalogResolution) -> tuple[str, SourceType, ProviderInfo]:
        """A HuggingFace entry: the Hugging Face path at the indexed commit."""
        if resolution.url is None:
            raise ImportFailed(ErrorType.CATALOG_IMPORT_UNAVAILABLE,
                               f"catalog {resolution.source_name}: {resolution.name} has nothing to fetch")
        token = (TokenSecret(name=resolution.token_secret_name, namespace=resolution.token_secret_namespace,
                             key="token") if resolution.token_secret_name else None)
        return await self._fetch(claim, resolution.url, token)

    def _provenance(self) -> CatalogProvenance | None:
        resolution = self.state.catalog
        if resolution is None:
            return None
        return CatalogProvenance(source_name=resolution.source_name, name=resolution.name,
                                 version=resolution.version, catalog_revision=resolution.catalog_revision,
                                 remote_digest=resolution.remote_digest)

    async def _fetch(self, claim: HostClaim, url: str,
                     token: TokenSecret | None) -> tuple[str, SourceType, ProviderInfo]:
        steps = self._steps
        listing = await steps.resolve(url, token)
        self.state.source_type = listing.provider
        self.state.resolved_revision = listing.resolved_revision
        await self._write(
            ModelPhase.PUBLISHING,
            ModelReason.PUBLISHING,
            f"{listing.provider} {listing.locator}@{listing.resolved_revision}: "
            f"{len(listing.files)} files, {listing.total_size} bytes",
            ModelStatus(
                source=ResolvedSource(resolved_type=listing.provider, resolved_revision=listing.resolved_revision,
                                      catalog=self._provenance()),
                progress="0%",
            ),
        )
        await steps.plan_files(claim, listing)
        fetched_dir = await steps.transfer(claim, listing, token)
        return fetched_dir, listing.provider, listing.provider_info

    async def _from_upload(self, claim: HostClaim) -> tuple[str, SourceType, ProviderInfo]:
        assert self.ref is not None
        session = await workflow.execute_activity_method(
            UploadActivities.open_session,
            OpenUploadInput(model=self.ref, ttl_seconds=int(UPLOAD_TTL.total_seconds()), max_bytes=UPLOAD_MAX_BYTES),
            task_queue=claim.task_queue,
            **options.QUICK,
        )
        self.state.upload = session
        self.state.source_type = SourceType.UPLOAD
        await self._write(
            ModelPhase.WAIT_FOR_UPLOAD,
            ModelReason.WAIT_FOR_UPLOAD,
            f"upload to the URL in Secret {session.secret_namespace}/{session.secret_name}",
            ModelStatus(
                upload=UploadSession(
                    secret_name=session.secret_name,
                    secret_namespace=session.secret_namespace,
                    expires_at=session.expires_at.replace(microsecond=0),
                ),
                source=ResolvedSource(resolved_type=SourceType.UPLOAD),
            ),
        )
        remaining = session.expires_at - workflow.now()
        try:
            await workflow.wait_condition(
                lambda: self.upload_done is not None, timeout=max(remaining, timedelta(seconds=1))
            )
        except TimeoutError:
            await self._close_upload()
            raise ImportFailed(
                ErrorType.UPLOAD_EXPIRED, f"no upload arrived before {session.expires_at.isoformat()}"
            ) from None
        assert self.upload_done is not None
        await self._write(
            ModelPhase.PUBLISHING,
            ModelReason.PUBLISHING,
            f"received {self.upload_done.filename} ({self.upload_done.size} bytes)",
            ModelStatus(upload=None, progress="0%"),
        )
        prepared = await workflow.execute_activity_method(
            UploadActivities.prepare_model_dir,
            PrepareUploadInput(model=self.ref, upload=self.upload_done),
            task_queue=claim.task_queue,
            **options.TRANSFER,
        )
        await self._close_upload()
        self.state.files = [FileProgress(path=f.path, size=f.size, fetched=True) for f in prepared.files]
        for progress in self.state.files:
            await self._steps.push(claim, progress, f"{prepared.model_dir}/{progress.path}")
        return prepared.model_dir, SourceType.UPLOAD, ProviderInfo()

    # -- publishing ------------------------------------------------------------------------------

    async def _publish(self, claim: HostClaim, inspection: InspectionResult) -> ArtifactRef:
        """Push the manifest over the files the source or upload path pushed."""
        assert self.ref is not None
        return await self._steps.publish(claim, inspection, name=self.ref.name,
                                         revision=self.state.resolved_revision, tag=self._tag())

    def _tag(self) -> str:
        assert self.ref is not None
        return f"{self.ref.namespace or 'cluster'}.{self.ref.name}.{self.ref_uid}"[:128]

    async def _fail(self, failed: ImportFailed) -> None:
        """Failed, with nothing this import uploaded left in the registry."""
        await self._steps.delete_uploaded_blobs()
        await self._write(ModelPhase.FAILED, failed.reason, failed.message)

    # -- deletion --------------------------------------------------------------------------------

    async def _cleanup(self) -> None:
        assert self.ref is not None
        await self._write(ModelPhase.DELETING, ModelReason.DELETING, "removing the published artifact")
        artifact = self.state.artifact
        if artifact is None and workflow.patched(DELETE_CANCELS_IMPORT):
            await self._steps.delete_uploaded_blobs()
        if artifact is not None:
            shared = await workflow.execute_activity_method(
                KubernetesActivities.artifact_referenced,
                ArtifactReferences(digest=artifact.digest, except_uid=self.ref_uid),
                **options.KUBE,
            )
            if not shared:
                claim = self._steps.claim if self._steps.claim is not None else await self._steps.claim_host()
                await workflow.execute_activity_method(
                    OciActivities.delete_artifact,
                    DeleteArtifactInput(target=claim.registry, digest=artifact.digest),
                    **options.QUICK,
                )
        if self.state.upload is not None:
            await self._close_upload()
        if self.state.host_task_queue:
            await self._steps.clean_spool(self.state.host_task_queue)
        await workflow.execute_activity_method(
            KubernetesActivities.remove_finalizer, FinalizerChange(ref=self.ref, finalizer=FINALIZER), **options.KUBE
        )

    async def _close_upload(self) -> None:
        assert self.ref is not None
        await workflow.execute_activity_method(
            UploadActivities.close_session, CloseUploadInput(model=self.ref), **options.QUICK
        )

    # -- status ----------------------------------------------------------------------------------

    async def _write_progress(self, percent: int) -> None:
        """The import steps' progress, written with the current phase and reason."""
        await self._write(self.state.phase, self.state.reason, self.state.message, ModelStatus(progress=f"{percent}%"))

    async def _write(
        self, phase: ModelPhase, reason: str, message: str, fields: ModelStatus | None = None
    ) -> None:
        """Set the phase and the Ready condition, and the status fields set on `fields` (a field
        set to None is removed). A phase change is also an Event with the condition's reason:
        Warning when the model failed, Normal otherwise."""
        assert self.ref is not None and self.visibility is not None
        changed = phase != self.state.phase or reason != self.state.reason
        self.state.phase, self.state.reason, self.state.message = phase, reason, message
        self.visibility.publish(phase.value)
        status = fields if fields is not None else ModelStatus()
        status.phase = phase
        ready = "True" if phase == ModelPhase.READY else "False"
        kind = "Warning" if phase == ModelPhase.FAILED else "Normal"
        await workflow.execute_activity_method(
            KubernetesActivities.patch_status,
            StatusPatch(
                ref=self.ref,
                status=status.to_merge_patch(),
                conditions=[ConditionUpdate(type="Ready", status=ready, reason=reason, message=message)],
                observed_generation=self.state.generation,
                events=[EventNote(type=kind, reason=reason, message=message)] if changed else [],
            ),
            **options.KUBE,
        )


__all__ = ["FINALIZER", "ModelState", "ModelWorkflow", "SourceFile"]
