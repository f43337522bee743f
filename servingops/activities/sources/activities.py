"""Temporal activities of the source side of model import: resolve a URL, fetch files into the spool, clean up.

All are plain `def`s (they block on HTTP and disk; the worker runs them in its thread pool). Retry safety:
resolve only reads; a fetch continues from what the spool holds and skips a file that is complete; cleaning
a missing directory is a no-op.

Secrets: a Hugging Face token is read by the activity from the Secret the Model names, used for the calls of
this attempt and dropped. It is never in a payload, a heartbeat or a log line, and error messages are
scrubbed of it before they leave the activity (with the original exception detached, since Temporal would
otherwise serialise it as the cause).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client
from temporalio import activity
from temporalio.exceptions import ApplicationError

from servingops.activities.sources.huggingface import DEFAULT_HF_ENDPOINT, HF_ENDPOINT_ENV, HuggingFaceSource
from servingops.activities.sources.ollama import DEFAULT_OLLAMA_REGISTRY, OLLAMA_REGISTRY_ENV, OllamaSource
from servingops.activities.sources.spool import HEARTBEAT_INTERVAL, Expected, FetchResult, Heartbeat, Spool
from servingops.activities.sources.tokens import TOKEN_KEYS, read_token
from servingops.activities.sources.types import (
    CleanSpoolInput,
    FetchedFile,
    FetchInput,
    ResolveInput,
    SourceListing,
)
from servingops.api_models.deckhouse.enums import SourceType
from servingops.api_models.deckhouse.model import HUGGING_FACE_URL_PREFIX
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.refs import ObjectRef
from servingops.clients.model_files import InvalidModel

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_HF_URL = re.compile(HUGGING_FACE_URL_PREFIX)
_OLLAMA_URL = re.compile(r"^https://(www[.])?ollama[.]com/")
_GIT_OID = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def source_type(url: str) -> SourceType:
    """Which provider a source URL belongs to (the CRD's pattern, checked again: input is input)."""
    if _HF_URL.match(url):
        return SourceType.HUGGING_FACE
    if _OLLAMA_URL.match(url):
        return SourceType.OLLAMA
    raise application_error(
        ErrorType.INVALID_SOURCE_URL,
        f"{url[:300]!r} is neither a Hugging Face (https://huggingface.co/<org>/<repo>) nor an Ollama "
        "(https://ollama.com/library/<name>[:<tag>]) URL",
    )


def _scrub(text: str, token: str) -> str:
    return text.replace(token, "***")


def _without_token_in_errors(token: str | None, call: Callable[[], _T]) -> _T:
    """Run `call`; its errors leave as ApplicationErrors whose text cannot contain the token.

    The replacement is raised here, outside any `except` block (a function, not a context manager: inside
    a `with` statement's exit the original is still "being handled" and would become the replacement's
    `__context__`). So nothing that walks the exception chain (Temporal's failure converter serialises
    causes and contexts, a traceback printer) can reach the original text.
    """
    replacement: ApplicationError | None = None
    try:
        return call()
    except InvalidModel as exc:
        replacement = application_error(exc.reason, exc.message)
    except ApplicationError as exc:
        if not token:
            raise
        replacement = exc
    except Exception as exc:
        if not token:
            raise
        # Unknown failures (bugs, I/O) are no ErrorType: they stay retryable under the type Temporal would
        # give the exception itself; only their scrubbed text travels.
        replacement = ApplicationError(f"{type(exc).__name__}: {exc}", type=type(exc).__name__)
    if token:
        details = [_scrub(d, token) if isinstance(d, str) else d for d in replacement.details]
        replacement = ApplicationError(_scrub(replacement.message, token), *details, type=replacement.type,
                                       non_retryable=replacement.non_retryable)  # fmt: skip
        log.warning("source activity failed: %s", replacement.message)
    raise replacement


class SourceActivities:
    """The source activities, bound to this worker's Kubernetes client, spool and provider endpoints."""

    def __init__(
        self,
        api_client: client.ApiClient | None = None,
        spool_root: str | os.PathLike[str] | None = None,
        hf_endpoint: str | None = None,
        ollama_registry: str | None = None,
        *,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
    ) -> None:
        self._core = client.CoreV1Api(api_client) if api_client is not None else None
        self.spool = Spool(spool_root)
        self.hf = HuggingFaceSource(hf_endpoint or os.environ.get(HF_ENDPOINT_ENV) or DEFAULT_HF_ENDPOINT)
        self.ollama = OllamaSource(ollama_registry or os.environ.get(OLLAMA_REGISTRY_ENV) or DEFAULT_OLLAMA_REGISTRY)
        self._heartbeat_interval = heartbeat_interval

    def all(self) -> list[Callable[..., Any]]:
        return [self.resolve, self.fetch_file, self.clean_spool]

    # -- secrets -------------------------------------------------------------------------------------

    def _token(self, model: ObjectRef, secret_name: str | None, secret_namespace: str | None = None,
               secret_key: str | None = None) -> str | None:
        """The token in the named Secret: in `secret_namespace` when given (a ClusterBaseModel's, in the
        controller namespace), else in the model's; under `secret_key` when given, else TOKEN_KEYS."""
        if not secret_name:
            return None
        namespace = secret_namespace or model.namespace
        if namespace is None:
            raise application_error(ErrorType.AUTH_SECRET_NOT_FOUND,
                                    f"{model.describe()} is cluster-scoped and cannot reference a Secret")  # fmt: skip
        return read_token(self._core, namespace, secret_name, (secret_key,) if secret_key else TOKEN_KEYS)

    # -- activities ----------------------------------------------------------------------------------

    @activity.defn(name="source.resolve")
    def resolve(self, req: ResolveInput) -> SourceListing:
        """The source's immutable revision and the files of the model at it, with the provider's metadata."""
        provider = source_type(req.url)
        token = (self._token(req.model, req.auth_secret_name, req.auth_secret_namespace, req.auth_secret_key)
                 if provider == SourceType.HUGGING_FACE else None)
        if provider == SourceType.HUGGING_FACE:
            return _without_token_in_errors(token, lambda: self.hf.resolve(req.url, token))
        return _without_token_in_errors(None, lambda: self.ollama.resolve(req.url))

    @activity.defn(name="source.fetch_file")
    def fetch_file(self, req: FetchInput) -> FetchedFile:
        """One file into `<spool>/<model uid>/<path>`: streamed, verified, resumed from a previous attempt."""
        uid = req.model.uid
        if not uid:
            raise application_error(ErrorType.INVALID_FETCH_INPUT, f"{req.model.describe()}: the reference has no uid")
        info = activity.info()
        if info.attempt > 1:
            # The resume point is the partial file on disk; the heartbeat only says where the last attempt was.
            log.info("fetching %s again (attempt %d, last heartbeat %s)", req.file.path, info.attempt,
                     info.heartbeat_details[-1] if info.heartbeat_details else None)
        heartbeat = Heartbeat(activity.heartbeat, self._heartbeat_interval)
        file = req.file
        sha256 = file.sha256.lower() if file.sha256 and _SHA256.match(file.sha256.lower()) else None
        if file.sha256 and sha256 is None:
            raise application_error(ErrorType.INVALID_FETCH_INPUT, f"{file.path}: {file.sha256[:80]!r} is no sha256")
        if req.provider == SourceType.HUGGING_FACE:
            token = self._token(req.model, req.auth_secret_name, req.auth_secret_namespace, req.auth_secret_key)
            git_oid = file.blob if file.blob and _GIT_OID.match(file.blob) else None
            expected = Expected(file.size, sha256, git_oid)

            def fetch_hf() -> FetchResult:
                opener = self.hf.opener(req.locator, req.resolved_revision, file.path, token)
                return self.spool.fetch(uid, file.path, expected, opener, heartbeat, header_only=req.header_only)

            result = _without_token_in_errors(token, fetch_hf)
        elif req.provider == SourceType.OLLAMA:
            digest = file.blob or (f"sha256:{sha256}" if sha256 else "")
            ollama_expected = Expected(file.size, sha256 or digest.removeprefix("sha256:"))

            def fetch_ollama() -> FetchResult:
                with self.ollama.blob_opener(req.locator, digest) as opener:
                    return self.spool.fetch(uid, file.path, ollama_expected, opener, heartbeat,
                                            header_only=req.header_only)  # fmt: skip

            result = _without_token_in_errors(None, fetch_ollama)
        else:
            raise application_error(ErrorType.INVALID_FETCH_INPUT, f"{req.provider} sources are not fetched here")
        log.info("fetched %s (%d bytes, %d transferred%s)", file.path, file.size, result.transferred_bytes,
                 ", header only" if result.header_only else "")
        return FetchedFile(
            path=str(result.path),
            relative_path=file.path,
            size=file.size,
            sha256=result.sha256,
            transferred_bytes=result.transferred_bytes,
            header_only=result.header_only,
        )

    @activity.defn(name="source.clean_spool")
    def clean_spool(self, req: CleanSpoolInput) -> None:
        """Remove the model's spool directory; nothing to do when it is gone already."""
        if self.spool.remove(req.model_uid):
            log.info("removed the spool of model %s", req.model_uid)
