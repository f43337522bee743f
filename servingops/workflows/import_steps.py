"""The import machinery shared by ModelWorkflow (Model / ClusterModel) and BaseModelWorkflow (an hf://
BaseModel / ClusterBaseModel / FineTunedWeight): one code path from a source URL to a ModelPack
artifact in the registry.

Claim a worker host, resolve the source to an immutable revision and its files, skip the files whose
blobs the registry already holds (dedup), fetch each file into the host's spool (resumable) while
pushing the previous one, inspect the model, push the manifest. Status writing stays the caller's:
progress goes to the callback it passes, and the phases around these steps are its own.

Called from workflow code only. The commands issued (their order and options) are ModelWorkflow's
from before the extraction, so its stored histories replay unchanged (tests/test_replay.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from pydantic import BaseModel
from temporalio import workflow

from servingops.workflows import options

with workflow.unsafe.imports_passed_through():
    from servingops.activities.host import HostActivities, HostClaim
    from servingops.activities.model_files.activity import InspectInput
    from servingops.activities.model_files.activity import inspect as inspect_model
    from servingops.activities.oci.activities import (
        ArtifactRef,
        BlobsInput,
        OciActivities,
        PushedLayer,
        PushFileInput,
        PushManifestInput,
    )
    from servingops.activities.sources.activities import SourceActivities
    from servingops.activities.sources.types import CleanSpoolInput, FetchInput, ResolveInput, SourceListing
    from servingops.api_models.deckhouse.enums import SourceType
    from servingops.api_models.refs import ObjectRef
    from servingops.clients.model_files.inspect import InspectionResult, ProviderInfo
    from servingops.clients.oci.media_types import RAW_LAYER_MEDIA_TYPE
    from servingops.clients.oci.modelpack import ModelPackMeta, role_for_path

DELETE_CANCELS_IMPORT = "delete-cancels-import"
"""Patch: a delete mid-import used to write Failed ("gave up after retries (CancelledError)")
before Deleting; now the cancelled import goes straight to Deleting, whose cleanup deletes the
blobs the import had uploaded."""


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


class ImportProgress(Protocol):
    """The part of a workflow's state the import steps keep (the workflow's `state` query shows it)."""

    files: list[FileProgress]
    progress_percent: int


class TokenSecret(BaseModel):
    """The Secret holding a source's token, by reference (the activity reads it)."""

    name: str
    namespace: str | None = None
    """None: the model's namespace."""
    key: str | None = None
    """None: the usual token keys."""


ProgressWriter = Callable[[int], Awaitable[None]]
"""Writes a progress percentage to the object's status."""


class ImportSteps:
    """One import of one object. Holds the claimed host (`claim`) once claim_host has run."""

    def __init__(self, ref: ObjectRef, state: ImportProgress, write_progress: ProgressWriter) -> None:
        self.ref = ref
        self.state = state
        self.write_progress = write_progress
        self.claim: HostClaim | None = None
        self._last_progress_write = -1

    async def claim_host(self) -> HostClaim:
        """A worker host whose spool this import uses from now on (its task queue and registry)."""
        return await workflow.execute_activity_method(HostActivities.claim, **options.QUICK)

    async def resolve(self, url: str, token: TokenSecret | None) -> SourceListing:
        return await workflow.execute_activity_method(
            SourceActivities.resolve,
            ResolveInput(model=self.ref, url=url, **_token_fields(token)),
            **options.QUICK,
        )

    async def plan_files(self, claim: HostClaim, listing: SourceListing) -> None:
        """state.files from the listing, marking the blobs the registry already holds (dedup)."""
        known = [f"sha256:{f.sha256}" for f in listing.files if f.sha256]
        present = (
            set(
                await workflow.execute_activity_method(
                    OciActivities.present_blobs, BlobsInput(target=claim.registry, digests=known), **options.QUICK
                )
            )
            if known
            else set()
        )
        self.state.files = [
            FileProgress(path=f.path, size=f.size, sha256=f.sha256, in_registry=f"sha256:{f.sha256}" in present)
            for f in listing.files
        ]

    async def transfer(self, claim: HostClaim, listing: SourceListing, token: TokenSecret | None) -> str:
        """Fetch each file, pushing the previous one meanwhile (one push in flight)."""
        pushing: asyncio.Future[None] | None = None
        model_dir = ""
        try:
            for progress, file in zip(self.state.files, listing.files, strict=True):
                fetched = await workflow.execute_activity_method(
                    SourceActivities.fetch_file,
                    FetchInput(
                        model=self.ref,
                        provider=listing.provider,
                        locator=listing.locator,
                        resolved_revision=listing.resolved_revision,
                        file=file,
                        header_only=progress.in_registry,
                        **_token_fields(token),
                    ),
                    task_queue=claim.task_queue,
                    **options.TRANSFER,
                )
                progress.fetched = True
                progress.transferred_bytes += fetched.transferred_bytes
                progress.sha256 = fetched.sha256 or progress.sha256
                model_dir = fetched.path[: len(fetched.path) - len(fetched.relative_path)].rstrip("/")
                if pushing is not None:
                    await pushing
                if progress.in_registry:
                    progress.pushed_digest = f"sha256:{progress.sha256}"
                    await self.report_progress()
                    pushing = None
                else:
                    pushing = asyncio.ensure_future(self.push(claim, progress, fetched.path))
            if pushing is not None:
                await pushing
        except BaseException:
            # Cancelled by a delete, or failed: a push still in flight would upload a blob after
            # the cleanup listed what to delete, so it stops too.
            if pushing is not None and not pushing.done() and workflow.patched(DELETE_CANCELS_IMPORT):
                pushing.cancel()
            raise
        return model_dir

    async def push(self, claim: HostClaim, progress: FileProgress, path: str) -> None:
        role = role_for_path(progress.path)[0]
        pushed = await workflow.execute_activity_method(
            OciActivities.push_file,
            PushFileInput(
                target=claim.registry,
                path=path,
                sha256=progress.sha256,
                size=progress.size,
                media_type=RAW_LAYER_MEDIA_TYPE[role],
            ),
            task_queue=claim.task_queue,
            **options.TRANSFER,
        )
        progress.pushed_digest = pushed.digest
        progress.pushed_bytes += pushed.transferred_bytes
        progress.uploaded_here = not pushed.skipped and not pushed.mounted
        await self.report_progress()

    async def inspect(self, claim: HostClaim, model_dir: str, provider: SourceType,
                      info: ProviderInfo) -> InspectionResult:
        return await workflow.execute_activity(
            inspect_model,
            InspectInput(model_dir=model_dir, provider=provider, provider_info=info),
            task_queue=claim.task_queue,
            **options.TRANSFER,
        )

    async def publish(self, claim: HostClaim, inspection: InspectionResult, *, name: str,
                      revision: str | None, tag: str) -> ArtifactRef:
        """The manifest over every pushed file (all of them must be pushed by now)."""
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
            name=name,
            family=resolved.family,
            architecture=resolved.architecture,
            format=inspection.format.value,
            quantization=resolved.quantization,
            revision=revision,
        )
        return await workflow.execute_activity_method(
            OciActivities.push_manifest,
            PushManifestInput(target=claim.registry, tag=tag, layers=layers, meta=meta),
            **options.QUICK,
        )

    async def delete_uploaded_blobs(self) -> None:
        """Blobs this import uploaded (not those it found or mounted) that no manifest names."""
        uploaded = [p.pushed_digest for p in self.state.files if p.uploaded_here and p.pushed_digest]
        if uploaded and self.claim is not None:
            await workflow.execute_activity_method(
                OciActivities.delete_blobs, BlobsInput(target=self.claim.registry, digests=uploaded), **options.QUICK
            )

    async def clean_spool(self, task_queue: str) -> None:
        assert self.ref.uid
        await workflow.execute_activity_method(
            SourceActivities.clean_spool,
            CleanSpoolInput(model_uid=self.ref.uid),
            task_queue=task_queue,
            **options.QUICK,
        )

    async def report_progress(self) -> None:
        """A bounded percentage that only rises, written when it moved by 5 points or more."""
        total = sum(p.size for p in self.state.files) or 1
        done = sum(p.size for p in self.state.files if p.pushed_digest)
        percent = min(99, max(self.state.progress_percent, done * 100 // total))
        self.state.progress_percent = percent
        if percent - self._last_progress_write >= 5:
            self._last_progress_write = percent
            await self.write_progress(percent)


def _token_fields(token: TokenSecret | None) -> dict[str, str | None]:
    if token is None:
        return {"auth_secret_name": None}
    return {"auth_secret_name": token.name, "auth_secret_namespace": token.namespace,
            "auth_secret_key": token.key}


__all__ = ["DELETE_CANCELS_IMPORT", "FileProgress", "ImportProgress", "ImportSteps", "ProgressWriter",
           "TokenSecret"]
