"""An upload session's record: where the upload endpoint finds it, how it is signed and checked.

An upload URL names only a session id. The session record is a ConfigMap of the controller namespace named
after that id (`record_name`), holding a JSON `SessionRecord` (model reference, sha256 of the token, expiry,
maximum size) and an HMAC-SHA256 of it (with the ConfigMap's namespace and name) under a key only the
controller holds (`SigningKey`). The worker writes it when it opens a session (activities/uploads/sessions.py,
where the whole session and why it is kept this way are told); the upload endpoint (ingress/uploads.py) only
reads it and the key, and checks it with `verified_record`.

Shared by both, so the endpoint needs nothing of the activities package. Nothing here writes to the cluster.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import re
import time
from pathlib import Path

from kubernetes import client
from pydantic import BaseModel, ValidationError

from servingops.api_models.refs import ObjectRef
from servingops.clients.kube.calls import get_or_none

UPLOADS_PREFIX = "/uploads/"

RECORD_PREFIX = "upload-session-"
# ConfigMap data keys of a session record.
KEY_RECORD = "session"
KEY_SIGNATURE = "signature"

SIGNING_KEY_SECRET = "servingops-upload-signing-key"
SIGNING_KEY_DATA = "key"

# Session ids are Kubernetes uids; the pattern also keeps a URL's id from naming any other spool path.
SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")


class SessionRecord(BaseModel):
    """What the upload server needs to accept bytes for a session: stored signed, in the session's ConfigMap."""

    v: int = 1
    session_id: str
    model: ObjectRef
    token_sha256: str
    expires_at: dt.datetime
    max_bytes: int


# -- naming and paths ---------------------------------------------------------------------------


def record_name(session_id: str) -> str:
    """The session record's ConfigMap, in the controller namespace: found from the session id alone."""
    if not SESSION_ID.match(session_id):
        raise ValueError(f"{session_id!r} is not a session id")
    return f"{RECORD_PREFIX}{session_id}"


def upload_path(session_id: str) -> str:
    return f"{UPLOADS_PREFIX}{session_id}"


def session_spool(spool_root: Path, session_id: str) -> Path:
    """`<spool_root>/<model uid>`: everything this worker keeps for one model."""
    if not SESSION_ID.match(session_id):
        raise ValueError(f"{session_id!r} is not a session id")
    return Path(spool_root) / session_id


def upload_dir(spool_root: Path, session_id: str) -> Path:
    return session_spool(spool_root, session_id) / "upload"


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def rfc3339(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- signing --------------------------------------------------------------------------------------


def sign(key: bytes, namespace: str, name: str, record_json: str) -> str:
    # The record's own namespace and name are signed too: a record copied under another name is worthless.
    message = f"{namespace}\n{name}\n{record_json}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


class SigningKey:
    """The controller's session-signing key, kept in a Secret of the controller namespace; read only.

    Read once and cached; `refresh` re-reads it (after a rotation, signatures made with the old key fail
    and those sessions answer 401 until re-opened). The upload endpoint uses this class: it has no code
    that could create or change the key, and its identity may only read that one Secret. (The worker's
    view, which creates the key when there is none, is `OwnedSigningKey` in activities/uploads/sessions.py.)
    """

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core = core
        self.namespace = namespace
        self._key: bytes | None = None
        self._read_at = 0.0

    def get(self) -> bytes | None:
        """The key, or None while there is none yet."""
        if self._key is None:
            self._key = self._read()
            self._read_at = time.monotonic()
        return self._key

    def refresh(self, *, min_age: float = 30.0) -> bool:
        """Forget the cached key if it is older than `min_age` seconds; True when it was forgotten."""
        if self._key is not None and time.monotonic() - self._read_at >= min_age:
            self._key = None
            return True
        return False

    def _read(self) -> bytes | None:
        secret = get_or_none(self.core.read_namespaced_secret, SIGNING_KEY_SECRET, self.namespace)
        if secret is None:
            return None
        return base64.b64decode((secret.data or {})[SIGNING_KEY_DATA])


def verified_record(config_map: client.V1ConfigMap, key: bytes, controller_namespace: str) -> SessionRecord | None:
    """The session a record ConfigMap holds, if its signature holds and it is consistent.

    Consistent: the ConfigMap sits in the controller namespace under the name of the session it holds, and
    the session id is the uid of the model it names.
    """
    meta = config_map.metadata
    data = config_map.data or {}
    raw, signature = data.get(KEY_RECORD), data.get(KEY_SIGNATURE)
    namespace, name = (meta.namespace or "", meta.name or "") if meta else ("", "")
    if not raw or not signature:
        return None
    if not hmac.compare_digest(sign(key, namespace, name, raw), signature):
        return None
    try:
        record = SessionRecord.model_validate_json(raw)
    except ValidationError:
        return None
    if (record.session_id != record.model.uid or namespace != controller_namespace
            or not SESSION_ID.match(record.session_id) or name != record_name(record.session_id)):
        return None
    return record
