"""A Hugging Face token, read from a Secret by the activity that uses it: for a model import (the model's
namespace, or the controller's for a cluster-scoped model) and for a catalog source (the controller's).

The token is used for the calls of one attempt and dropped: never in a payload, a heartbeat, a log line or
an error message (an undecodable value is refused without quoting its bytes).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.api_models.errors import ErrorType, application_error
from servingops.clients.kube.calls import call
from servingops.clients.kube.errors import absent

TOKEN_KEYS = ("token", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
"""Secret keys holding a Hugging Face token, in the order they are looked up."""
# A bearer token is one header value: visible ASCII, no spaces.
TOKEN = re.compile(r"^[\x21-\x7e]{1,4096}$")


def read_token(core: client.CoreV1Api | None, namespace: str, secret_name: str,
               keys: Sequence[str] = TOKEN_KEYS) -> str:
    """The token under the first of `keys` in Secret `namespace/secret_name`; AuthSecretNotFound,
    AuthSecretUnreadable (retried) or AuthSecretInvalid otherwise."""
    where = f"Secret {namespace}/{secret_name}"
    if core is None:
        raise application_error(ErrorType.AUTH_SECRET_NOT_FOUND,
                                f"{where}: this worker has no Kubernetes client to read it")
    try:
        secret = call(core.read_namespaced_secret, secret_name, namespace)
    except ApiException as exc:
        if absent(exc):
            raise application_error(ErrorType.AUTH_SECRET_NOT_FOUND, f"{where} does not exist") from None
        # 403 (RBAC) and server trouble: a deployment or transient problem, not the user's input.
        raise application_error(ErrorType.AUTH_SECRET_UNREADABLE, f"{where}: HTTP {exc.status} {exc.reason}") from None
    data = secret.data or {}
    for key in keys:
        if key not in data:
            continue
        try:
            token = base64.b64decode(data[key], validate=True).decode("utf-8").strip()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            token = ""  # the error text could quote token bytes: say nothing about them
        if not TOKEN.match(token):
            raise application_error(ErrorType.AUTH_SECRET_INVALID,
                                    f"{where}: the value of key {key!r} is not a token (empty, or not a single "
                                    "line of visible ASCII)")
        return token
    raise application_error(ErrorType.AUTH_SECRET_INVALID, f"{where} has none of the keys {', '.join(keys)}")
