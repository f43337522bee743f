"""Upload sessions end to end: the session's Secret and record on the real apiserver, the worker's upload server
over real HTTP, and the `upload-complete` signal on the real Temporal dev server, received by a probe workflow that
stands in for the model workflow under the model's workflow id. The activities run as the chart's worker identity,
the server as the chart's uploads identity (which may read no Secret but the signing key)."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import http.client
import io
import json
import logging
import socket
import tarfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from devstack.identities import Identities
from devstack.model_repos import GGUF_STRING, GGUFTensor, make_gguf_repo, write_gguf
from devstack.process import free_port
from devstack.services import TemporalDevServer
from servingops.activities.uploads.sessions import (
    LABEL_MANAGED_BY,
    LABEL_SESSION,
    MANAGED_BY,
    UploadActivities,
    secret_name,
)
from servingops.activities.uploads.types import (
    CloseUploadInput,
    OpenUploadInput,
    PreparedUpload,
    PrepareUploadInput,
    UploadSessionInfo,
)
from servingops.api_models.contract import model_workflow_id
from servingops.api_models.contract.uploads import UploadComplete
from servingops.api_models.deckhouse import ClusterModel, Model
from servingops.api_models.errors import ErrorType
from servingops.api_models.refs import ObjectRef
from servingops.clients.upload_sessions import KEY_RECORD, KEY_SIGNATURE, record_name
from servingops.ingress.uploads import UploadServer
from servingops.runtime.temporal import TemporalSettings, connect
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as
from tests.upload_probe_workflow import UploadProbe

CONTROLLER_NS = "servingops-system"
MB = 1 << 20


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "uploads")


@pytest.fixture(scope="module")
async def temporal(temporal_server: TemporalDevServer) -> AsyncIterator[tuple[Client, str]]:
    """A client, and a task queue on which a worker runs the probe workflow."""
    temporal_client = await connect(TemporalSettings(address=temporal_server.address))
    queue = f"uploads-{uuid.uuid4().hex[:6]}"
    async with Worker(temporal_client, task_queue=queue, workflows=[UploadProbe]):
        yield temporal_client, queue


@pytest.fixture(scope="module")
def server(chart_identities: Identities, temporal_server: TemporalDevServer,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[UploadServer]:
    """The upload endpoint as the chart's uploads identity."""
    port = free_port()
    settings = TemporalSettings(address=temporal_server.address)
    with api_as(chart_identities.uploads) as uploads_api:
        upload_server = UploadServer(tmp_path_factory.mktemp("spool"), "127.0.0.1", port, f"http://127.0.0.1:{port}",
                                     uploads_api, lambda: connect(settings), notify_timeout=15)
        upload_server.start()
        try:
            yield upload_server
        finally:
            upload_server.stop()


@pytest.fixture(scope="module")
def acts(chart_identities: Identities, server: UploadServer) -> Iterator[UploadActivities]:
    """The upload activities as the chart's worker identity."""
    with api_as(chart_identities.worker) as worker_api:
        yield UploadActivities(worker_api, server.spool_root, server.public_base_url)


@pytest.fixture(autouse=True)
def _capture_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)


# -- helpers --------------------------------------------------------------------------------------


def _run(fn: Any, *args: Any) -> Any:
    return ActivityEnvironment().run(fn, *args)


def _model(kube_api: client.ApiClient, ns: str) -> ObjectRef:
    obj = create(kube_api, Model, manifest(Model, {"source": {"upload": {}}}), ns)
    return ObjectRef.of(Model, obj["metadata"]["name"], ns, obj["metadata"]["uid"])


def _cluster_model(kube_api: client.ApiClient) -> ObjectRef:
    obj = create(kube_api, ClusterModel, manifest(ClusterModel, {"source": {"upload": {}}}))
    return ObjectRef.of(ClusterModel, obj["metadata"]["name"], None, obj["metadata"]["uid"])


@dataclass
class Session:
    info: UploadSessionInfo
    url: str
    token: str
    secret: client.V1Secret


def _open(acts: UploadActivities, kube_api: client.ApiClient, ref: ObjectRef, **kw: Any) -> Session:
    info: UploadSessionInfo = _run(acts.open_session, OpenUploadInput(model=ref, **kw))
    secret = client.CoreV1Api(kube_api).read_namespaced_secret(info.secret_name, info.secret_namespace)
    data = secret.data or {}
    return Session(info, base64.b64decode(data["uploadURL"]).decode(), base64.b64decode(data["token"]).decode(),
                   secret)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: dict[str, Any] | None


def _http_sync(method: str, url: str, token: str | None = None, body: Any = None,
               headers: dict[str, str] | None = None) -> Answer:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60, blocksize=MB)
    all_headers = dict(headers or {})
    if token is not None:
        all_headers["Authorization"] = f"Bearer {token}"
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request(method, target, body=body, headers=all_headers)
        response = conn.getresponse()
        raw = response.read()
        found = {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()
    parsed = json.loads(raw) if raw and found.get("content-type") == "application/json" else None
    return Answer(response.status, found, parsed)


async def _http(method: str, url: str, token: str | None = None, body: Any = None,
                headers: dict[str, str] | None = None) -> Answer:
    # Off the event loop: the probe workflow's worker runs on it.
    return await asyncio.to_thread(_http_sync, method, url, token, body, headers)


async def _probe(temporal: tuple[Client, str], ref: ObjectRef) -> WorkflowHandle[Any, Any]:
    temporal_client, queue = temporal
    assert ref.uid
    return await temporal_client.start_workflow(
        UploadProbe.run, id=model_workflow_id(ref.namespace, ref.name, ref.uid), task_queue=queue)


async def _received(handle: WorkflowHandle[Any, Any]) -> UploadComplete:
    uploads: list[UploadComplete] = await asyncio.wait_for(handle.result(), timeout=30)
    assert len(uploads) == 1
    return uploads[0]


def _small_gguf(tmp_path: Path) -> Path:
    repo = make_gguf_repo(tmp_path / "hub", "t/small")
    return repo.snapshot / "small-F16.gguf"


def _big_gguf(path: Path, nbytes: int) -> Path:
    write_gguf(path, [("general.architecture", GGUF_STRING, "llama")],
               [GGUFTensor("weights", (nbytes // 4,), "F32")], seed=7)
    return path


def _tar_gz(path: Path, entries: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


# Sync helpers, so async tests read small local files without tripping the blocking-call lint.
def _bytes(path: str | Path) -> bytes:
    return Path(path).read_bytes()


def _exists(path: str | Path) -> bool:
    return Path(path).exists()


def _parts(directory: Path) -> list[Path]:
    return list(directory.glob("*.part"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _secret_or_none(kube_api: client.ApiClient, namespace: str, name: str) -> client.V1Secret | None:
    try:
        return client.CoreV1Api(kube_api).read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _record(kube_api: client.ApiClient, session_id: str | None) -> client.V1ConfigMap | None:
    assert session_id
    try:
        return client.CoreV1Api(kube_api).read_namespaced_config_map(record_name(session_id), CONTROLLER_NS)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _assert_no_token(token: str, *texts: str) -> None:
    for text in texts:
        assert token not in text


# -- sessions ---------------------------------------------------------------------------------------


@pytest.mark.integration
def test_open_session_for_a_model(kube_api: client.ApiClient, ns: str, acts: UploadActivities) -> None:
    ref = _model(kube_api, ns)
    before = dt.datetime.now(dt.UTC)
    session = _open(acts, kube_api, ref, ttl_seconds=3600, max_bytes=10 * MB)
    info, secret = session.info, session.secret
    assert (info.secret_name, info.secret_namespace) == (f"{ref.name}-upload", ns)
    assert info.upload_path == f"/uploads/{ref.uid}"
    assert session.url == f"{acts.public_base_url}/uploads/{ref.uid}"
    assert len(session.token) >= 40
    assert before + dt.timedelta(seconds=3590) < info.expires_at <= before + dt.timedelta(seconds=3601)
    meta = secret.metadata
    assert meta is not None
    labels = meta.labels or {}
    assert labels[LABEL_SESSION] == ref.uid and labels[LABEL_MANAGED_BY] == MANAGED_BY
    [owner] = meta.owner_references or []
    assert (owner.kind, owner.name, owner.uid, owner.api_version) == ("Model", ref.name, ref.uid,
                                                                      "ai.deckhouse.io/v1alpha1")
    # The user's Secret holds what the user needs and nothing else.
    assert set(secret.data or {}) == {"uploadURL", "token"} and not meta.annotations
    # The record, in the controller namespace under the session id: the token's hash, never the token.
    found = _record(kube_api, ref.uid)
    assert found is not None and found.metadata is not None
    assert (found.metadata.labels or {})[LABEL_SESSION] == ref.uid
    assert set(found.data or {}) == {KEY_RECORD, KEY_SIGNATURE}
    record = json.loads((found.data or {})[KEY_RECORD])
    assert record["token_sha256"] == hashlib.sha256(session.token.encode()).hexdigest()
    assert record["max_bytes"] == 10 * MB and record["model"]["uid"] == ref.uid
    _assert_no_token(session.token, info.model_dump_json(), json.dumps(found.data), json.dumps(labels))

    # Idempotent: the same model finds the same Secret, with the same token and expiry.
    again = _open(acts, kube_api, ref, ttl_seconds=60, max_bytes=1)
    assert again.info == info and again.token == session.token
    assert again.secret.metadata and again.secret.metadata.uid == meta.uid


@pytest.mark.integration
def test_close_session_is_idempotent(kube_api: client.ApiClient, ns: str, acts: UploadActivities) -> None:
    ref = _model(kube_api, ns)
    info = _open(acts, kube_api, ref).info
    _run(acts.close_session, CloseUploadInput(model=ref))
    assert _secret_or_none(kube_api, ns, info.secret_name) is None and _record(kube_api, ref.uid) is None
    _run(acts.close_session, CloseUploadInput(model=ref, discard_files=True))


@pytest.mark.integration
def test_a_foreign_secret_of_the_same_name_is_not_taken_over(kube_api: client.ApiClient, ns: str,
                                                              acts: UploadActivities) -> None:
    ref = _model(kube_api, ns)
    client.CoreV1Api(kube_api).create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name=f"{ref.name}-upload"), string_data={"mine": "yes"}))
    with pytest.raises(Exception) as caught:
        _run(acts.open_session, OpenUploadInput(model=ref))
    assert isinstance(caught.value, ApplicationError) and caught.value.type == ErrorType.UPLOAD_SECRET_CONFLICT
    assert caught.value.non_retryable


@pytest.mark.integration
def test_cluster_model_session_lives_in_the_controller_namespace(kube_api: client.ApiClient,
                                                                 acts: UploadActivities) -> None:
    ref = _cluster_model(kube_api)
    session = _open(acts, kube_api, ref)
    assert session.info.secret_namespace == CONTROLLER_NS
    assert session.info.secret_name == f"clustermodel-{ref.name}-upload"
    meta = session.secret.metadata
    assert meta is not None
    [owner] = meta.owner_references or []
    assert (owner.kind, owner.uid) == ("ClusterModel", ref.uid)
    assert _record(kube_api, ref.uid) is not None
    _run(acts.close_session, CloseUploadInput(model=ref))
    assert _secret_or_none(kube_api, CONTROLLER_NS, session.info.secret_name) is None
    assert _record(kube_api, ref.uid) is None


# -- uploads ------------------------------------------------------------------------------------------


@pytest.mark.integration
async def test_single_put_signals_the_model_workflow(
    kube_api: client.ApiClient, ns: str, acts: UploadActivities, server: UploadServer,
    temporal: tuple[Client, str], tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    ref = _model(kube_api, ns)
    gguf = _small_gguf(tmp_path)
    handle = await _probe(temporal, ref)
    session = _open(acts, kube_api, ref)

    answer = await _http("PUT", session.url, session.token, gguf.read_bytes(), {"X-Filename": "tiny.gguf"})
    assert answer.status == 201, answer
    assert answer.body and answer.body["sha256"] == _sha256(gguf) and answer.body["kind"] == "gguf"

    done = await _received(handle)
    assert done.sha256 == _sha256(gguf) and done.size == gguf.stat().st_size
    assert (done.filename, done.kind) == ("tiny.gguf", "gguf")
    assert Path(done.path) == (server.spool_root / str(ref.uid) / "upload" / "tiny.gguf").resolve()
    assert _bytes(done.path) == gguf.read_bytes()
    assert not _parts(Path(done.path).parent)

    # Single use: the session is marked in the spool, and nothing more is accepted.
    again = await _http("PUT", session.url, session.token, gguf.read_bytes(), {"X-Filename": "tiny.gguf"})
    assert again.status == 409
    head = await _http("HEAD", session.url, session.token)
    assert head.status == 200 and head.headers["upload-complete"] == "?1"
    assert head.headers["upload-offset"] == str(done.size)

    prepared: PreparedUpload = _run(acts.prepare_model_dir, PrepareUploadInput(model=ref, upload=done))
    assert [(f.path, f.size) for f in prepared.files] == [("tiny.gguf", done.size)]
    assert (Path(prepared.model_dir) / "tiny.gguf").read_bytes() == gguf.read_bytes()

    _run(acts.close_session, CloseUploadInput(model=ref, discard_files=True))
    assert not _exists(done.path) and _exists(Path(prepared.model_dir) / "tiny.gguf")
    # Closed: the record is gone, and the URL knows the session no more.
    assert (await _http("HEAD", session.url, session.token)).status == 401
    _assert_no_token(session.token, caplog.text, done.model_dump_json(), prepared.model_dump_json(),
                     json.dumps(answer.body))


@pytest.mark.integration
async def test_chunked_resumable_upload(
    kube_api: client.ApiClient, ns: str, acts: UploadActivities, server: UploadServer,
    temporal: tuple[Client, str], tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    ref = _model(kube_api, ns)
    big = _big_gguf(tmp_path / "big.gguf", 20 * MB)
    data = big.read_bytes()
    total = len(data)
    bounds = [0, 7 * MB, 14 * MB, total]
    handle = await _probe(temporal, ref)
    session = _open(acts, kube_api, ref)

    def chunk(i: int, start: int | None = None) -> tuple[bytes, dict[str, str]]:
        begin = bounds[i] if start is None else start
        end = bounds[i + 1]
        return data[begin:end], {"Content-Range": f"bytes {begin}-{end - 1}/{total}", "X-Filename": "big.gguf"}

    head = await _http("HEAD", session.url, session.token)
    assert head.status == 200 and head.headers["upload-offset"] == "0" and "range" not in head.headers

    body, headers = chunk(0)
    first = await _http("PUT", session.url, session.token, body, headers)
    assert first.status == 200 and first.body == {"offset": 7 * MB, "total": total, "complete": False}
    head = await _http("HEAD", session.url, session.token)
    assert head.headers["upload-offset"] == str(7 * MB) and head.headers["range"] == f"bytes=0-{7 * MB - 1}"
    assert head.headers["upload-length"] == str(total)

    # A wrong resume offset: 416, and the answer says where to resume.
    body, headers = chunk(1, start=bounds[1] + MB)
    wrong = await _http("PATCH", session.url, session.token, body, headers)
    assert wrong.status == 416
    assert wrong.headers["upload-offset"] == str(7 * MB) and wrong.headers["range"] == f"bytes=0-{7 * MB - 1}"
    assert wrong.body and wrong.body["offset"] == 7 * MB

    # The connection drops in the middle of the second chunk: what arrived is kept.
    url = urlsplit(session.url)
    with socket.create_connection((url.hostname or "", url.port or 80)) as sock:
        body, _ = chunk(1)
        request = (f"PATCH {url.path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {session.token}\r\n"
                   f"Content-Range: bytes {bounds[1]}-{bounds[2] - 1}/{total}\r\nContent-Length: {len(body)}\r\n\r\n")
        sock.sendall(request.encode() + body[: 3 * MB])
    deadline = time.monotonic() + 10
    while (offset := int((await _http("HEAD", session.url, session.token)).headers["upload-offset"])) < 10 * MB:
        assert time.monotonic() < deadline, f"the server kept only {offset} bytes of the dropped chunk"
        await asyncio.sleep(0.1)
    assert offset == 10 * MB

    # Resume from where the server says, then finish.
    body, headers = chunk(1, start=offset)
    second = await _http("PATCH", session.url, session.token, body, headers)
    assert second.status == 200 and second.body and second.body["offset"] == 14 * MB
    body, headers = chunk(2)
    last = await _http("PATCH", session.url, session.token, body, headers)
    assert last.status == 201 and last.body and last.body["sha256"] == hashlib.sha256(data).hexdigest()

    done = await _received(handle)
    assert done.sha256 == hashlib.sha256(data).hexdigest() and done.size == total
    assert _bytes(done.path) == data
    _assert_no_token(session.token, caplog.text, done.model_dump_json())


@pytest.mark.integration
async def test_resume_after_a_restart_of_the_server_rehashes_from_disk(
    kube_api: client.ApiClient, ns: str, acts: UploadActivities, server: UploadServer,
    temporal: tuple[Client, str], tmp_path: Path,
) -> None:
    ref = _model(kube_api, ns)
    data = _small_gguf(tmp_path).read_bytes()
    half = len(data) // 2
    handle = await _probe(temporal, ref)
    session = _open(acts, kube_api, ref)
    first = await _http("PUT", session.url, session.token, data[:half],
                        {"Content-Range": f"bytes 0-{half - 1}/{len(data)}", "X-Filename": "m.gguf"})
    assert first.status == 200
    server._progress.clear()  # what a worker restart loses: the running hash
    last = await _http("PUT", session.url, session.token, data[half:],
                       {"Content-Range": f"bytes {half}-{len(data) - 1}/{len(data)}"})
    assert last.status == 201
    assert (await _received(handle)).sha256 == hashlib.sha256(data).hexdigest()


@pytest.mark.integration
async def test_whole_file_with_chunked_transfer_coding(
    kube_api: client.ApiClient, ns: str, acts: UploadActivities, temporal: tuple[Client, str], tmp_path: Path,
) -> None:
    ref = _model(kube_api, ns)
    data = _small_gguf(tmp_path).read_bytes()
    handle = await _probe(temporal, ref)
    session = _open(acts, kube_api, ref)
    pieces = iter([data[i:i + 4096] for i in range(0, len(data), 4096)])
    answer = await _http("PUT", f"{session.url}?filename=streamed.gguf", session.token, pieces)
    assert answer.status == 201, answer
    done = await _received(handle)
    assert (done.filename, done.sha256) == ("streamed.gguf", hashlib.sha256(data).hexdigest())


@pytest.mark.integration
async def test_refusals(kube_api: client.ApiClient, ns: str, acts: UploadActivities, server: UploadServer,
                        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ref = _model(kube_api, ns)
    session = _open(acts, kube_api, ref)
    data = _small_gguf(tmp_path).read_bytes()
    wrong = await _http("PUT", session.url, "not-the-token", data)
    missing = await _http("PUT", session.url, None, data)
    basic = await _http("PUT", session.url, None, data, {"Authorization": "Basic " + session.token})
    unknown = await _http("PUT", f"{server.public_base_url}/uploads/{uuid.uuid4()}", session.token, data)
    malformed = await _http("HEAD", f"{server.public_base_url}/uploads/..%2F..%2Fetc", session.token)
    for answer in (wrong, missing, basic, unknown, malformed):
        assert answer.status == 401, answer
        assert answer.headers["www-authenticate"].startswith("Bearer")
        assert answer.body == (None if answer is malformed else wrong.body)  # HEAD answers have no body
    assert (await _http("PUT", f"{server.public_base_url}/elsewhere", session.token, data)).status == 404
    assert (await _http("POST", session.url, session.token, data)).status == 405
    bad_name = await _http("PUT", session.url, session.token, data, {"X-Filename": "../up.gguf"})
    assert bad_name.status == 400
    patch_whole = await _http("PATCH", session.url, session.token, data)
    assert patch_whole.status == 400
    bad_range = await _http("PUT", session.url, session.token, data, {"Content-Range": "bytes 5-1/10"})
    assert bad_range.status == 400
    assert not (server.spool_root / str(ref.uid) / "upload").exists() or not any(
        (server.spool_root / str(ref.uid) / "upload").glob("*.part"))
    _assert_no_token(session.token, caplog.text)


@pytest.mark.integration
async def test_content_that_is_not_a_model_is_refused_and_the_session_stays_open(
    kube_api: client.ApiClient, ns: str, acts: UploadActivities, server: UploadServer,
) -> None:
    ref = _model(kube_api, ns)
    session = _open(acts, kube_api, ref)
    answer = await _http("PUT", session.url, session.token, b"\x80\x04" + b"x" * 4000, {"X-Filename": "model.bin"})
    assert answer.status == 415 and answer.body and answer.body["reason"] == ErrorType.UNSUPPORTED_FORMAT
    assert not (server.spool_root / str(ref.uid)).exists()
    head = await _http("HEAD", session.url, session.token)
    assert head.status == 200 and head.headers["upload-offset"] == "0"


@pytest.mark.integration
async def test_expired_session(kube_api: client.ApiClient, ns: str, acts: UploadActivities, tmp_path: Path) -> None:
    ref = _model(kube_api, ns)
    session = _open(acts, kube_api, ref, ttl_seconds=1)
    await asyncio.sleep(1.5)
    data = _small_gguf(tmp_path).read_bytes()
    answer = await _http("PUT", session.url, session.token, data)
    assert answer.status == 410
    assert (await _http("HEAD", session.url, session.token)).status == 410
    # Opening it again renews it: a new token and expiry; the old token is worthless.
    renewed = _open(acts, kube_api, ref, ttl_seconds=600)
    assert renewed.token != session.token and renewed.info.expires_at > session.info.expires_at
    assert (await _http("HEAD", session.url, session.token)).status == 401
    assert (await _http("HEAD", renewed.url, renewed.token)).status == 200


@pytest.mark.integration
async def test_over_the_maximum_size_leaves_nothing_behind(kube_api: client.ApiClient, ns: str,
                                                           acts: UploadActivities, server: UploadServer) -> None:
    ref = _model(kube_api, ns)
    session = _open(acts, kube_api, ref, max_bytes=1000)
    spool = server.spool_root / str(ref.uid)
    declared = await _http("PUT", session.url, session.token, b"GGUF" + b"\0" * 1996)
    assert declared.status == 413 and not spool.exists()
    ranged = await _http("PUT", session.url, session.token, b"GGUF" + b"\0" * 96,
                         {"Content-Range": "bytes 0-99/5000"})
    assert ranged.status == 413 and not spool.exists()
    # Chunked transfer coding declares no size: the limit is enforced on the bytes as they arrive.
    streamed = await _http("PUT", session.url, session.token, iter([b"GGUF" + b"\0" * 508] * 4))
    assert streamed.status == 413 and not spool.exists()
    # A resumable upload that was going fine, then a whole-file PUT that is too large: the partial goes too.
    ok = await _http("PUT", session.url, session.token, b"GGUF" + b"\0" * 96, {"Content-Range": "bytes 0-99/1000"})
    assert ok.status == 200 and spool.exists()
    too_big = await _http("PUT", session.url, session.token, b"GGUF" + b"\0" * 1996)
    assert too_big.status == 413 and not spool.exists()


@pytest.mark.integration
async def test_forged_sessions_are_refused(kube_api: client.ApiClient, ns: str, acts: UploadActivities,
                                          server: UploadServer) -> None:
    ref = _model(kube_api, ns)
    token = "forged-token"
    record = {"v": 1, "session_id": ref.uid, "model": ref.model_dump(mode="json"),
              "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
              "expires_at": "2999-01-01T00:00:00Z", "max_bytes": 1 << 50}
    url = f"{server.public_base_url}/uploads/{ref.uid}"
    core = client.CoreV1Api(kube_api)
    # Someone who may create Secrets in the model's namespace makes a session Secret of the old kind:
    # the endpoint does not even look there any more.
    core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(
        name=f"{ref.name}-upload", labels={LABEL_SESSION: str(ref.uid), LABEL_MANAGED_BY: MANAGED_BY},
        annotations={"ai.deckhouse.io/upload-session": json.dumps(record),
                     "ai.deckhouse.io/upload-session-signature": "0" * 64})))
    assert (await _http("HEAD", url, token)).status == 401
    # Someone who may create ConfigMaps in the controller namespace writes a record without the key.
    assert ref.uid
    core.create_namespaced_config_map(CONTROLLER_NS, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=record_name(ref.uid)),
        data={KEY_RECORD: json.dumps(record), KEY_SIGNATURE: "0" * 64}))
    assert (await _http("HEAD", url, token)).status == 401
    core.delete_namespaced_config_map(record_name(ref.uid), CONTROLLER_NS)

    # A genuine record copied under another session's name: the signature covers the name, so it is worthless.
    other = _model(kube_api, ns)
    session = _open(acts, kube_api, other)
    genuine = _record(kube_api, other.uid)
    assert genuine is not None
    core.create_namespaced_config_map(CONTROLLER_NS, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=record_name(ref.uid)), data=genuine.data))
    assert (await _http("HEAD", url, session.token)).status == 401
    assert (await _http("HEAD", session.url, session.token)).status == 200
    core.delete_namespaced_config_map(record_name(ref.uid), CONTROLLER_NS)


@pytest.mark.integration
async def test_a_session_opened_before_records_left_the_secret(
    kube_api: client.ApiClient, ns: str, acts: UploadActivities, server: UploadServer,
) -> None:
    """A Secret written by the previous release (its record in annotations, no record ConfigMap): the endpoint
    does not know it (401) until the session is opened again, which renews it with a new token."""
    ref = _model(kube_api, ns)
    assert ref.uid
    old_token = "token-of-the-previous-release"
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name=secret_name(ref), labels={LABEL_SESSION: ref.uid,
                                                                     LABEL_MANAGED_BY: MANAGED_BY},
                                     annotations={"ai.deckhouse.io/upload-session": "{}"}),
        string_data={"uploadURL": f"{server.public_base_url}/uploads/{ref.uid}", "token": old_token}))
    assert (await _http("HEAD", f"{server.public_base_url}/uploads/{ref.uid}", old_token)).status == 401
    renewed = _open(acts, kube_api, ref)
    assert renewed.token != old_token and renewed.url == f"{server.public_base_url}/uploads/{ref.uid}"
    assert renewed.secret.metadata and not renewed.secret.metadata.annotations
    assert (await _http("HEAD", renewed.url, renewed.token)).status == 200
    assert (await _http("HEAD", renewed.url, old_token)).status == 401


@pytest.mark.integration
async def test_a_half_written_session_is_renewed(
    kube_api: client.ApiClient, ns: str, acts: UploadActivities,
) -> None:
    """The record was written but the Secret was not (the activity failed in between): the retry does not
    hand out a Secret whose token the record does not know."""
    ref = _model(kube_api, ns)
    first = _open(acts, kube_api, ref)
    # What a crash between the two writes of a renewal leaves: a record, and a Secret with another token.
    client.CoreV1Api(kube_api).patch_namespaced_secret(first.info.secret_name, ns,
                                                       {"stringData": {"token": "not-the-records"}})
    again = _open(acts, kube_api, ref)
    assert again.token not in (first.token, "not-the-records")
    assert (await _http("HEAD", again.url, again.token)).status == 200
    assert (await _http("HEAD", again.url, first.token)).status == 401


@pytest.mark.integration
async def test_a_failed_signal_is_sent_again_on_the_next_request(
    kube_api: client.ApiClient, ns: str, acts: UploadActivities, temporal: tuple[Client, str], tmp_path: Path,
) -> None:
    ref = _model(kube_api, ns)
    data = _small_gguf(tmp_path).read_bytes()
    session = _open(acts, kube_api, ref)
    # No workflow runs under the model's id yet: the bytes are kept, the answer says to retry.
    first = await _http("PUT", session.url, session.token, data, {"X-Filename": "late.gguf"})
    assert first.status == 503 and first.headers["retry-after"]
    handle = await _probe(temporal, ref)
    retry = await _http("PUT", session.url, session.token, data, {"X-Filename": "late.gguf"})
    assert retry.status == 409  # already used; and the workflow was told this time
    assert (await _received(handle)).sha256 == hashlib.sha256(data).hexdigest()


# -- preparing the model directory ----------------------------------------------------------------------


@pytest.mark.integration
async def test_archives_are_extracted_or_refused(
    kube_api: client.ApiClient, ns: str, acts: UploadActivities, temporal: tuple[Client, str], tmp_path: Path,
) -> None:
    gguf = _small_gguf(tmp_path).read_bytes()
    good = _tar_gz(tmp_path / "good.tar.gz", {"mymodel/model.gguf": gguf, "mymodel/README.md": b"# hi\n"})
    evil = _tar_gz(tmp_path / "evil.tar.gz", {"model.gguf": gguf, "../evil": b"boo"})

    async def upload(archive: Path) -> tuple[ObjectRef, UploadComplete]:
        ref = _model(kube_api, ns)
        handle = await _probe(temporal, ref)
        session = _open(acts, kube_api, ref)
        answer = await _http("PUT", session.url, session.token, _bytes(archive), {"X-Filename": archive.name})
        assert answer.status == 201, answer
        return ref, await _received(handle)

    ref, done = await upload(good)
    assert done.kind == "tar.gz"
    prepared: PreparedUpload = _run(acts.prepare_model_dir, PrepareUploadInput(model=ref, upload=done))
    assert Path(prepared.model_dir).name == "mymodel"
    assert {(f.path, f.size) for f in prepared.files} == {("model.gguf", len(gguf)), ("README.md", 5)}
    assert (Path(prepared.model_dir) / "model.gguf").read_bytes() == gguf
    # A retry of the activity replaces the directory whole.
    assert _run(acts.prepare_model_dir, PrepareUploadInput(model=ref, upload=done)) == prepared

    ref, done = await upload(evil)
    with pytest.raises(ApplicationError) as caught:
        _run(acts.prepare_model_dir, PrepareUploadInput(model=ref, upload=done))
    assert caught.value.type == ErrorType.ARCHIVE_PATH_ESCAPE and caught.value.non_retryable
    assert not (tmp_path / "evil").exists() and not (Path(done.path).parent.parent.parent / "evil").exists()


@pytest.mark.integration
def test_prepare_refuses_a_path_outside_the_models_upload_dir(kube_api: client.ApiClient, ns: str,
                                                              acts: UploadActivities, tmp_path: Path) -> None:
    ref = _model(kube_api, ns)
    elsewhere = _small_gguf(tmp_path)
    upload = UploadComplete(filename=elsewhere.name, size=elsewhere.stat().st_size, sha256="0" * 64,
                            path=str(elsewhere), kind="gguf")
    with pytest.raises(ApplicationError) as caught:
        _run(acts.prepare_model_dir, PrepareUploadInput(model=ref, upload=upload))
    assert caught.value.type == ErrorType.INVALID_INPUT and caught.value.non_retryable


@pytest.mark.integration
async def test_cluster_model_upload(kube_api: client.ApiClient, acts: UploadActivities,
                                    temporal: tuple[Client, str], tmp_path: Path) -> None:
    ref = _cluster_model(kube_api)
    data = _small_gguf(tmp_path).read_bytes()
    handle = await _probe(temporal, ref)
    assert handle.id == f"model/_cluster/{ref.name}/{ref.uid}"
    session = _open(acts, kube_api, ref)
    assert session.info.secret_namespace == CONTROLLER_NS
    answer = await _http("PUT", session.url, session.token, data, {"X-Filename": "c.gguf"})
    assert answer.status == 201
    assert (await _received(handle)).filename == "c.gguf"
    _run(acts.close_session, CloseUploadInput(model=ref, discard_files=True))


def _raw_exchange(url: str, head: str, body: bytes | None) -> list[bytes]:
    """Send request headers, read what the server answers before any body byte, then the body if asked."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10) as sock:
        sock.sendall(head.encode())
        answers = [sock.recv(65536)]
        if body is not None:
            sock.sendall(body)
            answers.append(sock.recv(65536))
    return answers


@pytest.mark.integration
async def test_expect_continue_is_answered_only_once_the_request_is_accepted(
    kube_api: client.ApiClient, ns: str, acts: UploadActivities, temporal: tuple[Client, str], tmp_path: Path,
) -> None:
    ref = _model(kube_api, ns)
    data = _small_gguf(tmp_path).read_bytes()
    handle = await _probe(temporal, ref)
    session = _open(acts, kube_api, ref)
    path = urlsplit(session.url).path

    def head(token: str) -> str:
        return (f"PUT {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nX-Filename: e.gguf\r\n"
                f"Content-Length: {len(data)}\r\nExpect: 100-continue\r\n\r\n")

    # Refused before a single body byte is sent: no 100 Continue, straight to the 401.
    [refused] = await asyncio.to_thread(_raw_exchange, session.url, head("wrong"), None)
    assert refused.startswith(b"HTTP/1.1 401 ")
    continued, created = await asyncio.to_thread(_raw_exchange, session.url, head(session.token), data)
    assert continued.startswith(b"HTTP/1.1 100 ")
    assert created.startswith(b"HTTP/1.1 201 ")
    assert (await _received(handle)).sha256 == hashlib.sha256(data).hexdigest()


@pytest.mark.unit
def test_secret_names_stay_valid_for_long_model_names() -> None:
    long_a, long_b = "a" * 250, "a" * 249 + "b"
    names = {secret_name(ObjectRef.of(Model, n, "ns", "u")) for n in (long_a, long_b)}
    names |= {secret_name(ObjectRef.of(ClusterModel, n, None, "u")) for n in (long_a, long_b)}
    assert len(names) == 4 and all(len(n) <= 253 and n.endswith("-upload") for n in names)
    assert secret_name(ObjectRef.of(Model, "m", "ns", "u")) == "m-upload"
