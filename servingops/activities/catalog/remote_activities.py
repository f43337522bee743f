"""The Temporal activities of a `type: Catalog` ModelCatalogSource: `catalog.refresh_remote_index` (fetch the
remote index and store it when it moved, in one attempt), `catalog.fetch_remote_index` (the index as a result:
for histories recorded before the patch `catalog-remote-stored`, and for tools), `catalog.request_grant` and
`catalog.copy_artifact` (library calls in remote.py, copy.py and store.py).

The Secrets a source names live in the controller's namespace and are read here, by the activity, for the
calls of one attempt: `caSecretName` (key `ca.crt`, a PEM CA) and `credentialsSecretName` (key `token`, the
catalog credential the remote endpoint knows). They are never in an input, an output, a heartbeat, a log line
or an error message. For the same reason `catalog.request_grant` returns the grant without its token (what it
covers and until when): `catalog.copy_artifact` asks for its own grant, renewed once if it expires mid-copy,
so the pull token never enters Temporal's history either.

Failures are ApplicationErrors whose type is the reason (the ErrorType members of remote.py's errors, plus
the Secret reasons AuthSecretNotFound / AuthSecretInvalid / AuthSecretUnreadable and the local registry's
RegistryError / RegistryUnavailable); only CatalogUnreachable, AuthSecretUnreadable and RegistryUnavailable
are retryable.
All four activities are plain `def`s (blocking HTTP: the worker runs them in its thread pool).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, Field, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError
from urllib3.exceptions import HTTPError as Urllib3Error

from servingops.activities.catalog.artifacts import catalog_repository, sha256_of
from servingops.activities.catalog.copy import CopyProgress, CopyResult, copy_artifact
from servingops.activities.catalog.store import (
    REMOTE_INDEX_MEDIA_TYPE,
    StoredIndex,
    push_index,
    remote_index_document,
)
from servingops.activities.oci.activities import CredentialsResolver, RegistryTarget, _registry_failure, open_registry
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.operator_config import DEFAULT_CONTROLLER_NAMESPACE
from servingops.clients.catalog_remote import (
    DIGEST_PATTERN,
    MAX_GRANT_DIGESTS,
    MAX_INDEX_BYTES,
    CatalogRemoteError,
    Grant,
    RemoteCatalog,
    RemoteIndex,
    fetch_remote_index,
    request_grant,
)
from servingops.clients.kube.calls import call
from servingops.clients.kube.errors import absent
from servingops.clients.oci.registry_client import ModelRegistry, RegistryError

FETCH_INDEX_ACTIVITY = "catalog.fetch_remote_index"
REFRESH_INDEX_ACTIVITY = "catalog.refresh_remote_index"
REQUEST_GRANT_ACTIVITY = "catalog.request_grant"
COPY_ARTIFACT_ACTIVITY = "catalog.copy_artifact"

CA_KEY = "ca.crt"
"""The key of the caSecretName Secret (the seed: "a d8-system Secret with ca.crt")."""
CREDENTIAL_KEY = "token"
"""The key of the credentialsSecretName Secret: the bearer credential the remote endpoint accepts."""
MAX_CA_BYTES = 256 << 10
HEARTBEAT_INTERVAL = 2.0
ACTIVITY_MAX_INDEX_BYTES = 1_500_000
"""The default cap of `catalog.fetch_remote_index`: its RemoteIndex result travels in a Temporal payload, which
is limited to about 2 MB; a bigger remote index fails clearly (CatalogResponseTooLarge) instead of failing to
be serialized."""


class CatalogRemoteSource(BaseModel):
    """A ModelCatalogSource of type Catalog, as the activities need it: names of Secrets, never their values."""

    source: str = Field(min_length=1)
    """The ModelCatalogSource's name (messages)."""
    url: str
    """spec.url."""
    ca_secret_name: str | None = None
    """spec.caSecretName: a Secret of the controller namespace with key ca.crt."""
    credentials_secret_name: str | None = None
    """spec.credentialsSecretName: a Secret of the controller namespace with key token."""


class FetchRemoteIndexInput(BaseModel):
    remote: CatalogRemoteSource
    max_response_bytes: int = Field(default=ACTIVITY_MAX_INDEX_BYTES, ge=1024, le=MAX_INDEX_BYTES)
    """The index answer's cap (`CatalogResponseTooLarge` beyond). Raising it past Temporal's payload limit
    (about 2 MB) only moves the failure: the RemoteIndex travels back as the activity's result."""


class RefreshRemoteIndexInput(BaseModel):
    remote: CatalogRemoteSource
    known_document_digest: str | None = None
    """The document digest of the source's last stored index: an index that hashes the same is not pushed
    again. None stores whatever is fetched."""
    max_response_bytes: int = Field(default=MAX_INDEX_BYTES, ge=1024, le=MAX_INDEX_BYTES)
    """The index answer's cap (`CatalogResponseTooLarge` beyond): the index stays in this activity, so only
    the worker's memory bounds it, not Temporal's payload limit."""


class RemoteRefresh(BaseModel):
    """What a refresh of a type Catalog source found, without the index itself."""

    remote_revision: str
    """The remote's own revision of the index (its RemoteIndex.revision)."""
    document_digest: str
    """The digest of the stored document (`store.remote_index_document`)."""
    entry_count: int
    stored: StoredIndex | None = None
    """Set when the document differed from `known_document_digest` and was pushed: the new catalogRevision."""


class RequestGrantInput(BaseModel):
    remote: CatalogRemoteSource
    digests: list[str] = Field(min_length=1, max_length=MAX_GRANT_DIGESTS)


class GrantSummary(BaseModel):
    """What a grant covers, without its token."""

    repository: str
    digests: list[str]
    expires_at: dt.datetime


class CopyArtifactInput(BaseModel):
    remote: CatalogRemoteSource
    digest: str = Field(pattern=DIGEST_PATTERN)
    """The remote artifact's manifest digest (an index entry's digest, frozen in status.source.catalog)."""
    target: RegistryTarget | None = None
    """Where to copy to; None: this worker's own registry target."""
    tag: str | None = None
    """Tag the manifest once it is complete; None pushes it by digest only."""


class CatalogRemoteActivities:
    """The remote catalog activities, bound to this worker's Kubernetes client (Secrets of the controller
    namespace), its registry target and its spool directory."""

    def __init__(
        self,
        api_client: client.ApiClient | None = None,
        controller_namespace: str = DEFAULT_CONTROLLER_NAMESPACE,
        local_target: RegistryTarget | None = None,
        credentials: CredentialsResolver | None = None,
        *,
        spool_dir: str | os.PathLike[str] | None = None,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        timeout: float = 30.0,
    ) -> None:
        self._core = client.CoreV1Api(api_client) if api_client is not None else None
        self.controller_namespace = controller_namespace
        self.local_target = local_target
        self._credentials = credentials
        self.spool_dir = os.fspath(spool_dir) if spool_dir is not None else None
        self._heartbeat_interval = heartbeat_interval
        self._timeout = timeout

    def all(self) -> list[Callable[..., Any]]:
        return [self.fetch_remote_index, self.refresh_remote_index, self.request_grant, self.copy_artifact]

    # -- the Secrets -----------------------------------------------------------------------------------------

    def _secret_value(self, name: str, key: str, what: str) -> str:
        where = f"Secret {self.controller_namespace}/{name}"
        if self._core is None:
            raise application_error(ErrorType.AUTH_SECRET_NOT_FOUND, f"{where}: this worker has no Kubernetes client")
        try:
            secret = call(self._core.read_namespaced_secret, name, self.controller_namespace)
        except ApiException as exc:
            if absent(exc):
                raise application_error(ErrorType.AUTH_SECRET_NOT_FOUND, f"{where} ({what}) does not exist") from None
            raise application_error(ErrorType.AUTH_SECRET_UNREADABLE,
                                    f"{where}: HTTP {exc.status} {exc.reason}") from None
        except (Urllib3Error, OSError) as exc:
            raise application_error(ErrorType.AUTH_SECRET_UNREADABLE,
                                    f"{where}: the apiserver is unreachable ({type(exc).__name__})") from None
        data: Mapping[str, Any] = secret.data or {}
        if key not in data:
            raise application_error(ErrorType.AUTH_SECRET_INVALID, f"{where} ({what}) has no key {key!r}")
        try:
            return base64.b64decode(data[key], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            # The error text could quote the value's bytes: say nothing about them.
            raise application_error(ErrorType.AUTH_SECRET_INVALID,
                                    f"{where}: the value of key {key!r} is not UTF-8 text") from None

    def _ca(self, remote: CatalogRemoteSource) -> str | None:
        if not remote.ca_secret_name:
            return None
        pem = self._secret_value(remote.ca_secret_name, CA_KEY, "caSecretName")
        if len(pem) > MAX_CA_BYTES or "-----BEGIN CERTIFICATE-----" not in pem:
            raise application_error(ErrorType.AUTH_SECRET_INVALID,
                                    f"Secret {self.controller_namespace}/{remote.ca_secret_name}: {CA_KEY} is not "
                                    "a PEM certificate")
        return pem

    def _credential(self, remote: CatalogRemoteSource) -> str | None:
        if not remote.credentials_secret_name:
            return None
        return self._secret_value(remote.credentials_secret_name, CREDENTIAL_KEY, "credentialsSecretName").strip()

    @contextmanager
    def _failures(self, remote: CatalogRemoteSource) -> Iterator[None]:
        try:
            yield
        except CatalogRemoteError as exc:
            raise application_error_of(remote, exc) from None
        except RegistryError as exc:
            raise _registry_failure(exc) from None
        except ValueError as exc:
            # Our own validation of the local side (a repository name): bad input, not bad luck.
            raise application_error(ErrorType.INVALID_INPUT, str(exc)) from None

    # -- the activities --------------------------------------------------------------------------------------

    @activity.defn(name=FETCH_INDEX_ACTIVITY)
    def fetch_remote_index(self, req: FetchRemoteIndexInput) -> RemoteIndex:
        """The remote catalog's inventory at its current revision."""
        with self._failures(req.remote):
            index = fetch_remote_index(req.remote.url, self._ca(req.remote), self._credential(req.remote),
                                       max_bytes=req.max_response_bytes, timeout=self._timeout)
        activity.logger.info("catalog %s: remote index %s, %d entries", req.remote.source, index.revision,
                             len(index.entries))
        return index

    @activity.defn(name=REFRESH_INDEX_ACTIVITY)
    def refresh_remote_index(self, req: RefreshRemoteIndexInput) -> RemoteRefresh:
        """Fetch the remote's index and, when its document moved, store it as the source's index artifact,
        all in this attempt: the index never travels in a Temporal payload (the workflow gets digests and a
        count), so its size is bounded by `max_response_bytes` only. Nothing partial is stored: the document
        is pushed only once the whole answer parsed and validated."""
        target = self.local_target
        if target is None:
            raise application_error(ErrorType.INVALID_INPUT, "no registry target: this worker has none configured")
        with self._failures(req.remote):
            index = fetch_remote_index(req.remote.url, self._ca(req.remote), self._credential(req.remote),
                                       max_bytes=req.max_response_bytes, timeout=self._timeout)
        content = remote_index_document(index)
        digest = sha256_of(content)
        found = RemoteRefresh(remote_revision=index.revision, document_digest=digest,
                              entry_count=len(index.entries))
        if digest == req.known_document_digest:
            activity.logger.info("catalog %s: remote index %s unchanged (%d entries)", req.remote.source,
                                 index.revision, found.entry_count)
            return found
        repository = catalog_repository(req.remote.source)
        with self._registry(target.model_copy(update={"repository": repository})) as registry:
            revision = push_index(registry, req.remote.source, content, digest, found.entry_count,
                                  REMOTE_INDEX_MEDIA_TYPE)
        activity.logger.info("catalog %s: stored the remote index %s (%d entries) as %s", req.remote.source,
                             index.revision, found.entry_count, revision)
        stored = StoredIndex(revision=revision, document_digest=digest, entry_count=found.entry_count,
                             reference=target.model_copy(update={"repository": repository}).reference(revision))
        return found.model_copy(update={"stored": stored})

    @activity.defn(name=REQUEST_GRANT_ACTIVITY)
    def request_grant(self, req: RequestGrantInput) -> GrantSummary:
        """Whether the remote grants a pull of exactly these digests, and until when (the token stays here)."""
        with self._failures(req.remote):
            grant = request_grant(req.remote.url, self._ca(req.remote), self._credential(req.remote), req.digests,
                                  timeout=self._timeout)
        return GrantSummary(repository=grant.repository, digests=list(grant.digests), expires_at=grant.expires_at)

    @activity.defn(name=COPY_ARTIFACT_ACTIVITY)
    def copy_artifact(self, req: CopyArtifactInput) -> CopyResult:
        """Copy the artifact by digest into the local registry; heartbeats a CopyProgress after every blob."""
        target = req.target or self.local_target
        if target is None:
            raise application_error(ErrorType.INVALID_INPUT, "no registry target: none given and this worker has "
                                    "none configured")
        previous = _previous_progress(activity.info().heartbeat_details, req.digest)

        def beat(progress: CopyProgress) -> None:
            activity.heartbeat(progress.model_dump(mode="json"))
            if progress.current is None and activity.is_worker_shutdown():
                raise application_error(ErrorType.WORKER_SHUTDOWN,
                                        f"worker shutting down; the copy of {req.digest} resumes with "
                                        f"{len(progress.done)} blob(s) done")

        with self._failures(req.remote):
            ca, credential = self._ca(req.remote), self._credential(req.remote)
            remote = RemoteCatalog(req.remote.url, ca, timeout=self._timeout)

            def renew() -> Grant:
                return request_grant(req.remote.url, ca, credential, [req.digest], timeout=self._timeout)

            grant = renew()
            with self._registry(target) as registry:
                result = copy_artifact(remote, grant, req.digest, registry, target.repository, tag=req.tag,
                                       spool_dir=self.spool_dir, progress=previous, on_progress=beat,
                                       progress_interval=self._heartbeat_interval, renew=renew)
        activity.logger.info("catalog %s: copied %s (%d bytes in %d blobs, %d blobs already present)",
                             req.remote.source, req.digest, result.bytes_copied, result.blobs_copied,
                             result.blobs_skipped)
        return result

    def _registry(self, target: RegistryTarget) -> AbstractContextManager[ModelRegistry]:
        return open_registry(target, self._credentials)


def application_error_of(remote: CatalogRemoteSource, exc: CatalogRemoteError) -> ApplicationError:
    """The ApplicationError of a remote failure, its message prefixed with the source's name."""
    return application_error(exc.reason, f"catalog source {remote.source}: {exc}")


def _previous_progress(details: Sequence[Any], digest: str) -> CopyProgress | None:
    if not details:
        return None
    last = details[-1]
    try:
        progress = CopyProgress.model_validate(last.model_dump() if isinstance(last, BaseModel) else last)
    except ValidationError:
        return None
    return progress if progress.digest == digest else None
