"""Upload sessions of Models and ClusterModels with `spec.source.upload: {}`: where a session is kept, and
the activities that open it, close it and turn what was uploaded into a model directory.

A session is two objects, one for each reader:

- the user's Secret (see `secret_name`), in the model's namespace for a Model and in the controller namespace
  for a ClusterModel: the upload URL and its bearer token under the fixed keys `uploadURL` and `token`, nothing
  else. Reading it is the right to upload: besides those RBAC lets read the namespace's Secrets anyway, those
  who may read the model get `get` on that one Secret (a Role and RoleBinding per session, named after the
  Secret and owned by it: activities/uploads/readers.py).
- the session record (see `record_name`): a ConfigMap in the controller namespace named after the session
  id, holding only what the upload endpoint needs to accept bytes: a JSON SessionRecord (model reference,
  sha256 of the token, expiry, maximum size) and an HMAC-SHA256 of it (with the ConfigMap's namespace and
  name) under a key only the controller holds. The record, its signing and its check are
  clients/upload_sessions.py, which the endpoint shares; this module writes it.

Why the record is apart from the user's Secret: an upload URL names only a session id, so an endpoint that
found the session on the user's Secret had to list Secrets in every namespace. A record at a name derived from
the session id, in the one namespace the endpoint may read, needs only `get` on ConfigMaps there: the endpoint
holds no right on any Secret but the signing key, and none outside the controller namespace. A ConfigMap, not
a Secret, because the controller namespace also holds Secrets the endpoint must not read (registry
credentials, ClusterModel sessions) and RBAC cannot tell them apart by name; the record holds nothing secret
(the token's hash only, of 256 random bits). The signature stays: it keeps a record valid only at the place
the controller wrote it, whoever else may write ConfigMaps in that namespace.

The worker writes both (record first, so a user never sees a token the endpoint does not know yet) and deletes
both when the session closes. Single use is kept by the endpoint in the worker's spool (ingress/uploads.py);
the endpoint writes nothing to the cluster.

The token is generated inside `open_session`, written only into the Secret, and never returned, logged,
heartbeated, put in status or in an event: every payload here is a model without a field for it.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from servingops.activities.uploads.readers import grant_readers
from servingops.activities.uploads.types import (
    CloseUploadInput,
    OpenUploadInput,
    PreparedFile,
    PreparedUpload,
    PrepareUploadInput,
    UploadSessionInfo,
)
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.operator_config import DEFAULT_CONTROLLER_NAMESPACE
from servingops.api_models.refs import ObjectRef
from servingops.clients.kube.calls import call, create_unless_exists, delete_if_present, get_or_none
from servingops.clients.kube.errors import UNPROCESSABLE, absent, conflict
from servingops.clients.model_files.archive import ArchiveLimits, stage_upload
from servingops.clients.model_files.errors import InvalidModel
from servingops.clients.upload_sessions import (
    KEY_RECORD,
    KEY_SIGNATURE,
    SIGNING_KEY_DATA,
    SIGNING_KEY_SECRET,
    SessionRecord,
    SigningKey,
    record_name,
    rfc3339,
    session_spool,
    sign,
    token_digest,
    upload_dir,
    upload_path,
    verified_record,
)

log = logging.getLogger("servingops.uploads")

# Secret data keys: the controller contract that the seed leaves out of status.
KEY_UPLOAD_URL = "uploadURL"
KEY_TOKEN = "token"

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "servingops"
LABEL_SESSION = "ai.deckhouse.io/upload-session"
LABEL_MODEL_KIND = "ai.deckhouse.io/model-kind"
_MAX_NAME = 253
_HEARTBEAT_SECONDS = 2.0
# The file list rides in the activity result; stay far below Temporal's 2 MB payload limit.
_MAX_LISTED_BYTES = 512 * 1024
UPLOAD_LIMITS = ArchiveLimits(max_entries=10_000)
"""Archive limits for uploads: fewer entries than the library default, so the file list stays a small payload."""


# -- naming and paths ---------------------------------------------------------------------------


def secret_name(ref: ObjectRef) -> str:
    """`<name>-upload` for a Model; `clustermodel-<name>-upload` for a ClusterModel.

    The prefix keeps a ClusterModel's Secret (in the controller namespace) from colliding with the Secret of a
    Model of the same name created in that namespace. A name too long for a Secret is cut and given a hash
    of the full name, so two long names still get two Secrets.
    """
    base = ref.name if ref.namespace else f"clustermodel-{ref.name}"
    name = f"{base}-upload"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{base[: _MAX_NAME - 18].rstrip('.-')}-{digest}-upload"


def secret_namespace(ref: ObjectRef, controller_namespace: str) -> str:
    return ref.namespace or controller_namespace


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


# -- the signing key --------------------------------------------------------------------------------


class OwnedSigningKey(SigningKey):
    """The worker's view of the key: created (once, by whichever worker is first) when there is none."""

    def get(self) -> bytes:
        key = super().get()
        assert key is not None  # _read creates it or raises
        return key

    def _read(self) -> bytes | None:
        for _ in range(3):
            key = super()._read()
            if key is not None:
                return key
            body = client.V1Secret(
                metadata=client.V1ObjectMeta(name=SIGNING_KEY_SECRET, namespace=self.namespace,
                                             labels={LABEL_MANAGED_BY: MANAGED_BY}),
                type="Opaque",
                data={SIGNING_KEY_DATA: base64.b64encode(secrets.token_bytes(32)).decode()},
            )
            # None: another worker created it first; read theirs.
            create_unless_exists(self.core.create_namespaced_secret, self.namespace, body)
        raise RuntimeError(f"cannot read or create Secret {self.namespace}/{SIGNING_KEY_SECRET}")


# -- activities -------------------------------------------------------------------------------------


class UploadActivities:
    """Bound to one ApiClient and to this worker's spool for the life of the worker."""

    def __init__(self, api_client: client.ApiClient, spool_root: str | Path, public_base_url: str,
                 controller_namespace: str = DEFAULT_CONTROLLER_NAMESPACE, *,
                 archive_limits: ArchiveLimits = UPLOAD_LIMITS) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.spool_root = Path(spool_root)
        self.public_base_url = public_base_url.rstrip("/")
        self.controller_namespace = controller_namespace
        self.archive_limits = archive_limits
        self.signing_key = OwnedSigningKey(self.core, controller_namespace)

    # -- helpers

    def _read_secret(self, namespace: str, name: str) -> client.V1Secret | None:
        found: client.V1Secret | None = get_or_none(self.core.read_namespaced_secret, name, namespace)
        return found

    def _read_record(self, session_id: str) -> client.V1ConfigMap | None:
        found: client.V1ConfigMap | None = get_or_none(self.core.read_namespaced_config_map,
                                                       record_name(session_id), self.controller_namespace)
        return found

    @staticmethod
    def _labels(ref: ObjectRef) -> dict[str, str]:
        assert ref.uid is not None
        return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_SESSION: ref.uid, LABEL_MODEL_KIND: ref.kind}

    @staticmethod
    def _is_current(record: SessionRecord, secret: client.V1Secret) -> bool:
        """The record is unexpired and knows the token the user's Secret holds (both writes went through)."""
        raw = (secret.data or {}).get(KEY_TOKEN)
        if record.expires_at <= _now() or not raw:
            return False
        return hmac.compare_digest(record.token_sha256, token_digest(base64.b64decode(raw).decode()))

    def _put_record(self, record: SessionRecord, key: bytes, existing: client.V1ConfigMap | None) -> None:
        """Write the record; one read before goes first (a conflict with a concurrent change answers 409).

        Replaced by delete and create, not updated: the record it replaces is of no use any more (expired,
        half-written or signed with a rotated key), and the worker then needs no right to change a ConfigMap
        in place (the controller namespace also holds the operator ConfigMap).
        """
        name, namespace = record_name(record.session_id), self.controller_namespace
        if existing is not None and existing.metadata is not None:
            call(self.core.delete_namespaced_config_map, name, namespace, body=client.V1DeleteOptions(
                preconditions=client.V1Preconditions(uid=existing.metadata.uid,
                                                     resource_version=existing.metadata.resource_version)))
        record_json = record.model_dump_json()
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=self._labels(record.model)),
            data={KEY_RECORD: record_json, KEY_SIGNATURE: sign(key, namespace, name, record_json)},
        )
        call(self.core.create_namespaced_config_map, namespace, body)

    def _put_secret(self, ref: ObjectRef, namespace: str, name: str, token: str,
                    existing: client.V1Secret | None) -> client.V1Secret:
        """Create the user's Secret, or replace the one read; the Secret as written (its uid names it in RBAC)."""
        assert ref.uid is not None
        owner = client.V1OwnerReference(api_version=f"{ref.group}/{ref.version}", kind=ref.kind, name=ref.name,
                                        uid=ref.uid, controller=True, block_owner_deletion=False)
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(
                name=name, namespace=namespace, labels=self._labels(ref),
                resource_version=existing.metadata.resource_version if existing and existing.metadata else None,
                # A namespaced Secret may be owned by a cluster-scoped object, so a ClusterModel's Secret in
                # the controller namespace is garbage collected with it too.
                owner_references=[owner],
            ),
            type="Opaque",
            string_data={KEY_UPLOAD_URL: self.public_base_url + upload_path(ref.uid), KEY_TOKEN: token},
        )
        if existing is None:
            written: client.V1Secret = call(self.core.create_namespaced_secret, namespace, body)
        else:
            written = call(self.core.replace_namespaced_secret, name, namespace, body)
        return written

    @staticmethod
    def _info(record: SessionRecord, namespace: str, name: str) -> UploadSessionInfo:
        return UploadSessionInfo(secret_name=name, secret_namespace=namespace, expires_at=record.expires_at,
                                 upload_path=upload_path(record.session_id))

    def _delete(self, namespace: str, name: str, uid: str | None) -> None:
        # The uid precondition: never delete a Secret that replaced the one we looked at.
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None)
        try:
            delete_if_present(self.core.delete_namespaced_secret, name, namespace, body=options)
        except ApiException as exc:
            if not conflict(exc):  # the precondition failed: the name holds another Secret now
                raise

    def _delete_record(self, session_id: str) -> None:
        delete_if_present(self.core.delete_namespaced_config_map, record_name(session_id), self.controller_namespace)

    # -- activities

    @activity.defn(name="upload.open_session")
    def open_session(self, inp: OpenUploadInput) -> UploadSessionInfo:
        """Write the session record and the user's Secret, or return the session this model already has (its
        token kept).

        Idempotent for a retry: the same model uid finds the same record and Secret. A session that expired,
        or whose writes did not both go through, or whose record is missing (a session opened before records
        left the Secret) or signed with a key since rotated, is renewed with a fresh token and expiry. A Secret
        of the same name that is not this model's session is replaced if it is ours (a deleted model of the
        same name) and refused if it is not.
        """
        ref = inp.model
        if not ref.uid:
            raise application_error(ErrorType.INVALID_INPUT,
                                    f"{ref.describe()}: an upload session needs the model's uid")
        namespace, name = secret_namespace(ref, self.controller_namespace), secret_name(ref)
        # The controller namespace is the chart's (the worker may not create namespaces).
        key = self.signing_key.get()
        for _ in range(5):
            secret = self._read_secret(namespace, name)
            if secret is not None:
                meta = secret.metadata
                labels = (meta.labels if meta else None) or {}
                if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
                    raise application_error(
                        ErrorType.UPLOAD_SECRET_CONFLICT,
                        f"Secret {namespace}/{name} exists and is not an upload session of servingops; "
                        "delete or rename it so the controller can open the upload session")
                if labels.get(LABEL_SESSION) != ref.uid:
                    # The session of an earlier model of this name, not yet garbage collected.
                    self._delete(namespace, name, meta.uid if meta else None)
                    continue
            found = self._read_record(ref.uid)
            record = verified_record(found, key, self.controller_namespace) if found is not None else None
            if secret is not None and record is not None and self._is_current(record, secret):
                grant_readers(self.api_client, ref, secret)  # a retry after a crash finishes the grant
                return self._info(record, namespace, name)
            token = secrets.token_urlsafe(32)
            record = SessionRecord(session_id=ref.uid, model=ref, token_sha256=token_digest(token),
                                   expires_at=_now() + dt.timedelta(seconds=inp.ttl_seconds), max_bytes=inp.max_bytes)
            try:
                # The record first: the token in the Secret is then always one the endpoint knows.
                self._put_record(record, key, found)
                written = self._put_secret(ref, namespace, name, token, secret)
            except ApiException as exc:
                if absent(exc) or conflict(exc):  # created, changed or deleted concurrently: look again
                    continue
                if exc.status == UNPROCESSABLE:
                    raise application_error(ErrorType.INVALID_OBJECT,
                                            f"upload session of {ref.describe()}: {exc.reason}") from None
                raise
            readers = grant_readers(self.api_client, ref, written)
            log.info("opened upload session %s for %s (Secret %s/%s, record %s/%s, expires %s, readable by %d "
                     "subjects)", record.session_id, ref.describe(), namespace, name, self.controller_namespace,
                     record_name(record.session_id), rfc3339(record.expires_at), len(readers))
            return self._info(record, namespace, name)
        raise application_error(ErrorType.CONFLICT, f"Secret {namespace}/{name}: still conflicting")

    @activity.defn(name="upload.close_session")
    def close_session(self, inp: CloseUploadInput) -> None:
        """Delete the session record and the user's Secret (idempotent), and with discard_files the upload on
        this worker's spool."""
        ref = inp.model
        if not ref.uid:
            raise application_error(ErrorType.INVALID_INPUT,
                                    f"{ref.describe()}: closing an upload session needs the model's uid")
        # The record first: from then on the endpoint accepts nothing more for this session.
        self._delete_record(ref.uid)
        namespace, name = secret_namespace(ref, self.controller_namespace), secret_name(ref)
        existing = self._read_secret(namespace, name)
        if existing is not None and existing.metadata is not None:
            labels = existing.metadata.labels or {}
            # Only this model's session: a Secret of the same name may belong to a newer model.
            if labels.get(LABEL_MANAGED_BY) == MANAGED_BY and labels.get(LABEL_SESSION) == ref.uid:
                self._delete(namespace, name, existing.metadata.uid)
        if inp.discard_files:
            shutil.rmtree(upload_dir(self.spool_root, ref.uid), ignore_errors=True)

    @activity.defn(name="upload.prepare_model_dir")
    def prepare_model_dir(self, inp: PrepareUploadInput) -> PreparedUpload:
        """Stage a single weight file in its own directory, or extract an archive safely.

        Bad content ends as a non-retryable ApplicationError whose type is the condition reason (an
        ErrorType such as ArchivePathEscape). Retry-safe: the model directory is built aside and renamed
        into place.
        """
        ref, upload = inp.model, inp.upload
        if not ref.uid:
            raise application_error(ErrorType.INVALID_INPUT,
                                    f"{ref.describe()}: preparing an upload needs the model's uid")
        expected_dir = upload_dir(self.spool_root, ref.uid).resolve()
        path = Path(upload.path)
        # The path comes back through a workflow: accept only this model's upload directory.
        if path.resolve().parent != expected_dir:
            raise application_error(ErrorType.INVALID_INPUT,
                                    f"{ref.describe()}: {upload.filename} is not in this model's upload directory")
        if not path.is_file():
            raise application_error(
                ErrorType.UPLOAD_MISSING,
                f"{ref.describe()}: the upload {upload.filename} is not on this worker; upload it again")
        if path.stat().st_size != upload.size:
            raise application_error(
                ErrorType.UPLOAD_MISSING,
                f"{ref.describe()}: {upload.filename} is {path.stat().st_size} bytes on disk, the upload had "
                f"{upload.size}; upload it again")
        destination = session_spool(self.spool_root, ref.uid) / "model"
        try:
            kind, root = stage_upload(path, destination, filename=upload.filename, limits=self.archive_limits,
                                      progress=_heartbeater())
            files = _list_files(root, upload.filename)
        except InvalidModel as exc:
            raise application_error(exc.reason, exc.message) from None
        return PreparedUpload(model_dir=str(root), kind=kind.value, files=files,
                              total_bytes=sum(f.size for f in files))

    def all(self) -> list[Callable[..., Any]]:
        return [self.open_session, self.close_session, self.prepare_model_dir]


def _heartbeater() -> Callable[[int], None]:
    """A progress callback that heartbeats the bytes written at most every couple of seconds."""
    last = 0.0

    def progress(written: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= _HEARTBEAT_SECONDS:
            last = now
            activity.heartbeat(written)

    return progress


def _list_files(root: Path, shown: str) -> list[PreparedFile]:
    files: list[PreparedFile] = []
    listed = 0
    for dirpath, _dirs, names in os.walk(root):
        for filename in names:
            full = Path(dirpath) / filename
            relative = full.relative_to(root).as_posix()
            listed += len(relative) + 32
            if listed > _MAX_LISTED_BYTES:
                raise InvalidModel(ErrorType.ARCHIVE_TOO_MANY_FILES,
                                   f"{shown}: lists more files (or longer names) than a model import takes")
            files.append(PreparedFile(path=relative, size=full.stat().st_size))
    files.sort(key=lambda f: f.path)
    return files

