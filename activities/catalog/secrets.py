"""The Hugging Face token of a ModelCatalogSource, read by the activity from the controller's namespace.

A source names the Secret (`spec.huggingFace.tokenSecretName`, key `token` per the seed; `HF_TOKEN` and
`HUGGING_FACE_HUB_TOKEN` are accepted too, as for model imports). The token is used for the calls of one
attempt and dropped: never in a payload, a heartbeat, a log line or an error message.
"""

from __future__ import annotations

import base64
import binascii
import re

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.activities.sources.activities import TOKEN_KEYS
from servingops.api_models.errors import ErrorType, application_error

_TOKEN = re.compile(r"^[\x21-\x7e]{1,4096}$")


def read_token(core: client.CoreV1Api | None, namespace: str, secret_name: str | None) -> str | None:
    """The token in Secret `namespace/secret_name`; None when no Secret is named (anonymous access)."""
    if not secret_name:
        return None
    where = f"Secret {namespace}/{secret_name}"
    if core is None:
        raise application_error(ErrorType.AUTH_SECRET_NOT_FOUND, f"{where}: this worker has no Kubernetes client")
    try:
        secret = core.read_namespaced_secret(secret_name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise application_error(ErrorType.AUTH_SECRET_NOT_FOUND, f"{where} does not exist") from None
        raise application_error(ErrorType.AUTH_SECRET_UNREADABLE, f"{where}: HTTP {exc.status} {exc.reason}") from None
    data = secret.data or {}
    for key in TOKEN_KEYS:
        if key not in data:
            continue
        try:
            token = base64.b64decode(data[key], validate=True).decode("utf-8").strip()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            token = ""  # the error text could quote token bytes: say nothing about them
        if not _TOKEN.match(token):
            raise application_error(
                ErrorType.AUTH_SECRET_INVALID,
                f"{where}: the value of key {key!r} is not a token (empty, or not a single line of visible ASCII)",
            )
        return token
    raise application_error(ErrorType.AUTH_SECRET_INVALID, f"{where} has none of the keys {', '.join(TOKEN_KEYS)}")
