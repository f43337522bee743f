"""Classify what the Kubernetes client raises out of any activity, in one place.

Activities let the client's ApiException through when they have nothing better to say. Left as
is, every one of them is retried forever; this interceptor turns the answers retrying cannot
change into permanent errors of the one enumeration (api_models.errors), so the workflow reports
them on the object instead of looping:

- 403 Forbidden -> ErrorType.FORBIDDEN (the role lacks a rule: say so, do not hammer the apiserver),
  from the FORBIDDEN_AFTER-th attempt on: an apiserver that has just (re)started denies everything
  until its RBAC caches have synced (seen in tests/test_control_plane_outage_e2e.py on a loaded
  machine: an import failed Forbidden right after the apiserver came back), so the first few 403s
  are retried like any outage
- 400 / 422 (the apiserver rejected what we sent) -> ErrorType.INVALID_OBJECT

Everything else (401 while a token rotates, 404 that an activity did not expect, 409, 429, 5xx,
connection errors) stays an ordinary exception and is retried with backoff.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from servingops.api_models.errors import ErrorType, application_error

_PERMANENT = {403: ErrorType.FORBIDDEN, 400: ErrorType.INVALID_OBJECT, 422: ErrorType.INVALID_OBJECT}
FORBIDDEN_AFTER = 5
"""The attempt from which a 403 is permanent: attempts 1-4 span 1 + 2 + 4 + 8 = 15 s of the KUBE policy's
backoff, long enough for a restarted apiserver's authorizer to catch up."""


def _message(exc: ApiException) -> str:
    """The apiserver's own sentence (Status.message) when the body is a Status, else the reason."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        body = None
    said = body.get("message") if isinstance(body, dict) else None
    return f"{exc.status} {exc.reason}: {said}" if said else f"{exc.status} {exc.reason}"


def classify(exc: ApiException, attempt: int = FORBIDDEN_AFTER) -> ApplicationError | None:
    """The permanent error an ApiException stands for, or None when it is worth retrying (a 403
    before attempt FORBIDDEN_AFTER included)."""
    if exc.status == 403 and attempt < FORBIDDEN_AFTER:
        return None
    error_type = _PERMANENT.get(exc.status or 0)
    return application_error(error_type, _message(exc)) if error_type is not None else None


class _Classify(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await self.next.execute_activity(input)
        except ApiException as exc:
            permanent = classify(exc, activity.info().attempt)
            if permanent is None:
                raise
            raise permanent from exc


class KubernetesErrors(Interceptor):
    """Give it to the Worker after any interceptor that should see the classified error."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Classify(next)
