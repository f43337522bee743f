"""The one enumeration of application errors that cross the activity boundary.

Every error an activity raises on purpose is an `ErrorType` member, and each member is marked
permanent or transient once, here:

- permanent: bad input, not found, forbidden, refused. Retrying cannot help, so the activity
  raises it non-retryable; the workflow ends the attempt at once and reports it on the object as
  a condition (the member's value is the condition reason) and a Warning Event.
- transient: the world is not ready yet (apiserver conflict, a source that answered 5xx, a
  worker shutting down). Retried with backoff by the activity's retry policy.

Workflows compare members (`error_type_of(exc) is ErrorType.REVISION_SUPERSEDED`), never strings.
The values are also the condition reasons written to status, so they follow metav1.Condition's
reason pattern (checked when the module loads).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

# metav1.Condition.reason
CONDITION_REASON_PATTERN = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
# metav1.Condition.message is limited to 32768 bytes; stay well below so a wrapping prefix still fits.
MAX_MESSAGE_CHARS = 4096


class ErrorType(StrEnum):
    # -- sources (Hugging Face, Ollama) -------------------------------------------------------
    INVALID_SOURCE_URL = "InvalidSourceURL"
    SOURCE_NOT_FOUND = "SourceNotFound"
    REVISION_NOT_FOUND = "RevisionNotFound"
    SOURCE_ACCESS_DENIED = "SourceAccessDenied"
    SOURCE_FILE_NOT_FOUND = "SourceFileNotFound"
    SOURCE_CHECKSUM_MISMATCH = "SourceChecksumMismatch"
    SOURCE_SIZE_MISMATCH = "SourceSizeMismatch"
    SOURCE_REVISION_MISMATCH = "SourceRevisionMismatch"
    SOURCE_REQUEST_REJECTED = "SourceRequestRejected"
    UNSUPPORTED_SOURCE = "UnsupportedSource"
    AUTH_SECRET_NOT_FOUND = "AuthSecretNotFound"
    AUTH_SECRET_INVALID = "AuthSecretInvalid"
    INVALID_FETCH_INPUT = "InvalidFetchInput"
    SOURCE_UNAVAILABLE = "SourceUnavailable"
    SOURCE_TRUNCATED = "SourceTruncated"
    FETCH_IN_PROGRESS = "FetchInProgress"
    AUTH_SECRET_UNREADABLE = "AuthSecretUnreadable"
    """The token Secret exists but could not be read (RBAC 403, apiserver trouble): a deployment or
    passing problem, not the user's input, so it is retried."""

    # -- model files: what the files are -------------------------------------------------------
    UNKNOWN_FORMAT = "UnknownFormat"
    UNSUPPORTED_FORMAT = "UnsupportedFormat"
    """Recognised, but not one we serve (pickle .bin, .pt, .onnx, ...)."""
    AMBIGUOUS_MODEL = "AmbiguousModel"
    """Several models where one is expected (e.g. many GGUF quantizations)."""
    EMPTY_MODEL = "EmptyModel"
    TRUNCATED_SAFETENSORS = "TruncatedSafetensors"
    INVALID_SAFETENSORS_HEADER = "InvalidSafetensorsHeader"
    INVALID_SAFETENSORS_INDEX = "InvalidSafetensorsIndex"
    MISSING_SHARD = "MissingShard"
    MISSING_CONFIG = "MissingConfig"
    INVALID_CONFIG = "InvalidConfig"
    INVALID_GGUF = "InvalidGGUF"
    UNSUPPORTED_GGUF_VERSION = "UnsupportedGGUFVersion"
    UNSUPPORTED_GGUF_TYPE = "UnsupportedGGUFType"
    TRUNCATED_GGUF = "TruncatedGGUF"
    INVALID_DIFFUSERS = "InvalidDiffusers"
    # archives (uploads)
    UNSUPPORTED_ARCHIVE = "UnsupportedArchive"
    INVALID_ARCHIVE = "InvalidArchive"
    EMPTY_ARCHIVE = "EmptyArchive"
    ARCHIVE_PATH_ESCAPE = "ArchivePathEscape"
    INVALID_ARCHIVE_PATH = "InvalidArchivePath"
    ARCHIVE_LINK = "ArchiveLink"
    ARCHIVE_SPECIAL_FILE = "ArchiveSpecialFile"
    ARCHIVE_DUPLICATE_ENTRY = "ArchiveDuplicateEntry"
    ARCHIVE_BOMB = "ArchiveBomb"
    ARCHIVE_TOO_LARGE = "ArchiveTooLarge"
    ARCHIVE_TOO_MANY_FILES = "ArchiveTooManyFiles"
    ENCRYPTED_ARCHIVE = "EncryptedArchive"

    # -- registry (OCI) ------------------------------------------------------------------------
    NO_CREDENTIALS_RESOLVER = "NoCredentialsResolver"
    INVALID_INPUT = "InvalidInput"
    FILE_MISSING = "FileMissing"
    LOCAL_FILE_CHANGED = "LocalFileChanged"
    INVALID_MODEL_LAYERS = "InvalidModelLayers"
    LAYER_MISSING = "LayerMissing"
    LAYER_SIZE_MISMATCH = "LayerSizeMismatch"
    INVALID_DIGEST = "InvalidDigest"
    SECRET_UNAVAILABLE = "SecretUnavailable"
    BLOB_DIGEST_MISMATCH = "BlobDigestMismatch"
    """The bytes uploaded from a file do not hash to the digest declared for them."""
    REGISTRY_ERROR = "RegistryError"
    """The registry refused a request (a 4xx other than 408/429): asking again gets the same answer."""
    REGISTRY_UNAVAILABLE = "RegistryUnavailable"
    """The registry could not be reached or answered 5xx, 408 or 429."""
    WORKER_SHUTDOWN = "WorkerShutdown"

    # -- uploads -------------------------------------------------------------------------------
    UPLOAD_SECRET_CONFLICT = "UploadSecretConflict"
    UPLOAD_MISSING = "UploadMissing"
    UPLOAD_EXPIRED = "UploadExpired"
    """No upload arrived before the session expired (decided by the workflow, not an activity)."""
    CATALOG_IMPORT_UNAVAILABLE = "CatalogImportUnavailable"
    """A catalog entry this release does not import (a cluster-to-cluster catalog's)."""
    CATALOG_SOURCE_NOT_FOUND = "CatalogSourceNotFound"
    """spec.source.catalog.sourceName names no ModelCatalogSource."""
    CATALOG_SOURCE_AMBIGUOUS = "CatalogSourceAmbiguous"
    """No sourceName, and not exactly one Ready ModelCatalogSource to use."""
    CATALOG_SOURCE_NOT_READY = "CatalogSourceNotReady"
    """The named source has no stored index yet (its first refresh): retried."""
    CATALOG_ENTRY_NOT_FOUND = "CatalogEntryNotFound"
    """The source's index lists no such name (or not at that version)."""
    # -- a type Catalog source (another cluster's catalog endpoint, clients/catalog_remote.py) ------
    CATALOG_URL_INVALID = "CatalogURLInvalid"
    """Not an https://host[:port][/path] URL."""
    CATALOG_CA_INVALID = "CatalogCAInvalid"
    """The CA of caSecretName (ca.crt) is not a PEM certificate."""
    CATALOG_UNREACHABLE = "CatalogUnreachable"
    """No answer (DNS, connection, timeout, a TLS failure other than trust) or 5xx / 408 / 429: retried."""
    CATALOG_CERTIFICATE_UNTRUSTED = "CatalogCertificateUntrusted"
    """The endpoint's certificate is not signed by the CA (or not valid for the URL's host)."""
    CATALOG_CREDENTIALS_REJECTED = "CatalogCredentialsRejected"
    """The endpoint answered 401 / 403 to the credential of credentialsSecretName."""
    CATALOG_RESPONSE_MALFORMED = "CatalogResponseMalformed"
    CATALOG_RESPONSE_TOO_LARGE = "CatalogResponseTooLarge"
    CATALOG_ENDPOINT_ERROR = "CatalogEndpointError"
    """A redirect, 404 or another 4xx no call expects."""
    CATALOG_GRANT_REFUSED = "CatalogGrantRefused"
    CATALOG_ARTIFACT_NOT_FOUND = "CatalogArtifactNotFound"
    """The remote registry lacks the manifest or a blob (the entry vanished)."""
    CATALOG_ARTIFACT_UNSUPPORTED = "CatalogArtifactUnsupported"
    ARTIFACT_DIGEST_MISMATCH = "ArtifactDigestMismatch"
    """Copied bytes do not hash to their digest (or size)."""
    IMPORT_GAVE_UP = "ImportGaveUp"
    """A transient failure outlasted its retry policy (the message carries the last error)."""

    # -- Kubernetes ----------------------------------------------------------------------------
    INVALID_OBJECT = "Invalid"
    """The apiserver rejected what we wrote (422)."""
    CONFLICT = "Conflict"
    """resourceVersion conflicts that outlasted the activity's own re-reads."""
    OBJECT_GONE = "ObjectGone"
    NAME_IN_USE = "NameInUse"
    """An object we must own exists under its name and belongs to another owner (a replica's headless
    Service): retrying cannot free the name; the object says so."""
    FORBIDDEN = "Forbidden"
    """The apiserver refused the call (403): the process's role lacks a rule. Not retried: the
    object says so, and the next change of the object tries again."""

    # -- serving (rendering revisions, routes) -------------------------------------------------
    REVISION_SUPERSEDED = "RevisionSuperseded"
    """The spec no longer renders that revision: the run is overtaken, not broken."""
    REVISION_DELETING = "RevisionDeleting"
    INVALID_SPEC = "InvalidSpec"
    """The object's spec cannot be rendered (a field the renderer cannot serve, a missing part)."""
    INVALID_REVISION = "InvalidRevision"
    """The apiserver rejected (400/422) a revision's rendered Deployment or Service."""
    INVALID_TRAFFIC = "InvalidTraffic"
    """A traffic split that cannot be programmed (weights not adding up to 100, a revision
    without a Service, an HTTPRoute the apiserver rejected)."""
    REVISION_SERVING_TRAFFIC = "RevisionServingTraffic"
    INVALID_SCALING_POLICY = "InvalidScalingPolicy"
    """spec.scalingPolicy (or the runtime's default) breaks a rule of rendering/scaling_policy.py (an anchor
    the service does not set, a ratio <= 0, a follower that is the anchor or has a scaler of its own)."""
    """A revision asked to be deleted while its HTTPRoute still sends it traffic."""

    # -- metrics (Prometheus) ------------------------------------------------------------------
    INVALID_METRIC = "InvalidMetric"
    PROMETHEUS_ERROR = "PrometheusError"

    @property
    def permanent(self) -> bool:
        """Retrying cannot fix it: the activity raises it non-retryable."""
        return self not in _TRANSIENT


_TRANSIENT = frozenset(
    {
        ErrorType.CATALOG_SOURCE_NOT_READY,
        ErrorType.CATALOG_UNREACHABLE,
        ErrorType.SOURCE_UNAVAILABLE,
        ErrorType.SOURCE_TRUNCATED,
        ErrorType.FETCH_IN_PROGRESS,
        ErrorType.AUTH_SECRET_UNREADABLE,
        ErrorType.REGISTRY_UNAVAILABLE,
        ErrorType.WORKER_SHUTDOWN,
        ErrorType.CONFLICT,
        ErrorType.REVISION_DELETING,
    }
)

NON_RETRYABLE_TYPES: tuple[str, ...] = tuple(t.value for t in ErrorType if t.permanent)
"""For RetryPolicy.non_retryable_error_types: a permanent type is never retried even when an
activity forgot to set non_retryable."""

for _member in ErrorType:
    if not CONDITION_REASON_PATTERN.match(_member.value):  # pragma: no cover - a typo in this file
        raise ValueError(f"{_member.value!r} is not a valid condition reason")


def _bounded(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 3] + "..."


def application_error(error_type: ErrorType, message: str, *details: Any) -> ApplicationError:
    """The activity-boundary form of an error: retryable exactly when its type is transient."""
    return ApplicationError(_bounded(message), *details, type=error_type.value, non_retryable=error_type.permanent)


def _application_cause(exc: BaseException) -> ApplicationError | None:
    """The ApplicationError an activity or child workflow raised, through Temporal's wrappers."""
    seen: BaseException | None = exc
    while isinstance(seen, ActivityError | ChildWorkflowError):
        seen = seen.cause
    return seen if isinstance(seen, ApplicationError) else None


def error_type_of(exc: BaseException) -> ErrorType | None:
    """The member an activity failure carries, or None for anything else (a bug, a timeout, an
    error type that is not ours)."""
    cause = _application_cause(exc)
    if cause is None or not cause.type:
        return None
    try:
        return ErrorType(cause.type)
    except ValueError:
        return None


def error_message(exc: BaseException) -> str:
    """The message an activity failure carries (the ApplicationError's, not the wrapper's)."""
    cause = _application_cause(exc)
    return cause.message if cause is not None else str(exc)


def is_permanent(exc: BaseException) -> bool:
    error_type = error_type_of(exc)
    return error_type is not None and error_type.permanent
