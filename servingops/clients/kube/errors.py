"""What an ApiException means, said once.

The call sites ask these questions instead of comparing status codes; what a site does with the answer (None,
a retry, an `ErrorType`) is its own contract with its workflow and stays at the site. The mappings the writers
share build the activity error (an `ErrorType` member through `application_error`, which also says whether
Temporal retries it): `rejected_write` (422: the apiserver refused the object itself, which no retry can fix)
and `conflicts_outlasted` (an optimistic write that kept losing its race, retried).
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from servingops.api_models.errors import ErrorType, application_error

ABSENT = 404
CONFLICT = 409
GONE = 410
"""A watch's resourceVersion is too old: list again."""
UNPROCESSABLE = 422
FORBIDDEN = 403
BAD_REQUEST = 400


def absent(exc: ApiException) -> bool:
    """The object (or its namespace, or its kind) does not exist."""
    return bool(exc.status == ABSENT)


def conflict(exc: ApiException) -> bool:
    """A write lost a race: the resourceVersion it carried is stale, or a create found the name taken."""
    return bool(exc.status == CONFLICT)


def forbidden(exc: ApiException) -> bool:
    return bool(exc.status == FORBIDDEN)


def invalid(exc: ApiException) -> bool:
    """The apiserver refused the object we wrote (400 malformed, 422 failed validation)."""
    return exc.status in (BAD_REQUEST, UNPROCESSABLE)


def apply_refused(exc: ApiException) -> bool:
    """A server-side apply the apiserver refused for the object's content: a 400 or 422, or the 500 it
    answers when a field's type does not match the schema (it cannot build the typed patch; measured
    on kube-apiserver 1.35 with a string where the schema says integer)."""
    return invalid(exc) or (exc.status == 500 and "failed to create typed patch object" in str(exc.body or ""))


def rejected_write(what: str, exc: ApiException) -> Exception:
    """A 422 on a write of `what`: permanent (ErrorType.INVALID_OBJECT, non-retryable)."""
    return application_error(ErrorType.INVALID_OBJECT, f"{what}: {exc.body}")


def conflicts_outlasted(what: str, tries: int) -> Exception:
    """An optimistic write that kept losing its race: transient (ErrorType.CONFLICT), Temporal retries it."""
    return application_error(ErrorType.CONFLICT, f"{what}: still conflicting after {tries} tries")
