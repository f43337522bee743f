"""Publishing a model directory as a ModelPack artifact to a real distribution registry.

Every registry call goes to the `oci_registry` session fixture (Debian's docker-registry on
loopback); the activities run in temporalio's ActivityEnvironment, which is how a resumed attempt
gets the previous attempt's heartbeat details.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import tracemalloc
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import oras.client
import pytest
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from devstack.services import OciRegistry, TemporalDevServer
from servingops.activities.oci.activities import (
    ArtifactRef,
    DeleteArtifactInput,
    OciActivities,
    PushedBlob,
    PushedLayer,
    PushFileInput,
    PushManifestInput,
    RegistryTarget,
)
from servingops.activities.oci.resume import ResumeDetails, UploadLocations
from servingops.api_models.errors import ErrorType
from servingops.clients.oci import media_types as mt
from servingops.clients.oci.credentials import credentials_from_secret_data
from servingops.clients.oci.modelpack import LayerFile, ModelPackMeta, build_artifact, role_for_path
from servingops.clients.oci.registry_client import MiB, ModelRegistry, UploadProgress, UploadResume, parse_range
from servingops.runtime.temporal import TemporalSettings, connect
from tests.secret_scan import register_token

_repo_ids = itertools.count()
REGISTRY_PASSWORD = f"registry-pw-{uuid.uuid4().hex}"
REGISTRY_BEARER = f"registry-bearer-{uuid.uuid4().hex}"
UPLOAD_TOKEN = f"upload-url-token-{uuid.uuid4().hex}"
register_token(REGISTRY_PASSWORD, REGISTRY_BEARER, UPLOAD_TOKEN)

META = ModelPackMeta(name="tiny-llama-test", family="llama", version="1.0", architecture="transformer",
                     format="safetensors", paramSize="1.1B", precision="bfloat16", quantization="none")


def _write_random(path: Path, size: int, seed: int) -> Path:
    """Deterministic content, different per seed and per MiB block, written a block at a time."""
    block = hashlib.sha256(str(seed).encode()).digest() * (MiB // 32)
    with open(path, "wb") as out:
        left = size
        counter = 0
        while left:
            piece = bytes([counter % 251]) + block[1:]
            out.write(piece[:left])
            left -= min(left, len(piece))
            counter += 1
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fd:
        while data := fd.read(MiB):
            h.update(data)
    return "sha256:" + h.hexdigest()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("model")
    _write_random(root / "model-00001-of-00002.safetensors", 3 * MiB + 17, seed=1)
    _write_random(root / "model-00002-of-00002.safetensors", 2 * MiB + 5, seed=2)
    (root / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}))
    return root


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_random(tmp_path_factory.mktemp("big") / "weights.safetensors", 64 * MiB + 123, seed=3)


@pytest.fixture(scope="module")
def big_file_facts(big_file: Path) -> tuple[int, str]:
    """(size, digest), computed once and outside the async tests (no blocking I/O there)."""
    return big_file.stat().st_size, _sha256(big_file)


def _target(registry: OciRegistry) -> RegistryTarget:
    return RegistryTarget(address=registry.address, repository=f"models/test-{next(_repo_ids)}", insecure=True)


def _client(target: RegistryTarget) -> ModelRegistry:
    return ModelRegistry(target.address, insecure=target.insecure)


def _publish(model_dir: Path, target: RegistryTarget, tag: str = "v1") -> tuple[list[PushedBlob], ArtifactRef]:
    acts = OciActivities()
    env = ActivityEnvironment()
    pushed: list[PushedBlob] = []
    layers: list[PushedLayer] = []
    for path in sorted(model_dir.iterdir()):
        role, untested = role_for_path(path.name)
        blob = env.run(acts.push_file, PushFileInput(target=target, path=str(path), sha256=None,
                                                     size=path.stat().st_size,
                                                     media_type=mt.layer_media_type(role), chunk_size=1 * MiB))
        pushed.append(blob)
        layers.append(PushedLayer(filepath=path.name, media_type=blob.media_type, digest=blob.digest,
                                  size=blob.size, role_untested=untested))
    ref = env.run(acts.push_manifest, PushManifestInput(target=target, tag=tag, layers=layers, meta=META))
    return pushed, ref


def _config_and_layers_size(manifest: dict[str, Any]) -> int:
    return int(manifest["config"]["size"]) + sum(int(layer["size"]) for layer in manifest["layers"])


@pytest.mark.integration
def test_publish_pull_back_republish_delete(oci_registry: OciRegistry, model_dir: Path, tmp_path: Path) -> None:
    target = _target(oci_registry)
    pushed, ref = _publish(model_dir, target)
    files = sorted(model_dir.iterdir())
    assert [b.skipped for b in pushed] == [False, False, False]
    assert [b.transferred_bytes for b in pushed] == [p.stat().st_size for p in files]

    with _client(target) as registry:
        doc = registry.fetch_manifest(target.repository, "v1")
        assert doc is not None and doc.digest == ref.digest
        manifest = doc.json
        assert doc.media_type == mt.OCI_MANIFEST == manifest["mediaType"]
        assert manifest["artifactType"] == mt.ARTIFACT_TYPE_MODEL_MANIFEST
        assert manifest["config"]["mediaType"] == mt.MODEL_CONFIG
        by_path = {layer["annotations"][mt.ANNOTATION_FILEPATH]: layer for layer in manifest["layers"]}
        assert set(by_path) == {p.name for p in files}
        assert by_path["config.json"]["mediaType"] == mt.MODEL_WEIGHT_CONFIG_RAW
        for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
            assert by_path[name]["mediaType"] == mt.MODEL_WEIGHT_RAW
        assert ref.size_bytes == _config_and_layers_size(manifest) + len(doc.raw)

        # The config blob: spec fields, diffIds in layer order.
        config_path = tmp_path / "config-blob"
        registry.pull_blob_to(target.repository, manifest["config"]["digest"], config_path)
        config = json.loads(config_path.read_bytes())
        assert set(config) == {"descriptor", "config", "modelfs"}
        assert config["descriptor"] == {"name": "tiny-llama-test", "family": "llama", "version": "1.0"}
        assert config["config"]["paramSize"] == "1.1B" and config["config"]["format"] == "safetensors"
        assert config["modelfs"] == {"type": "layers", "diffIds": [layer["digest"] for layer in manifest["layers"]]}

        # Every layer back through our streaming pull, byte for byte.
        for name, layer in by_path.items():
            out = tmp_path / "ours" / name
            assert registry.pull_blob_to(target.repository, layer["digest"], out) == layer["size"]
            assert out.read_bytes() == (model_dir / name).read_bytes()

    # ... and through stock oras-py, which names files after the title annotation.
    stock = oras.client.OrasClient(hostname=target.address, insecure=True)
    pulled = stock.pull(target=target.reference("v1"), outdir=str(tmp_path / "stock"))
    assert sorted(Path(p).name for p in pulled) == [p.name for p in files]
    for p in pulled:
        assert Path(p).read_bytes() == (model_dir / Path(p).name).read_bytes()

    # Publishing the same files again moves no byte and yields the same manifest.
    again, ref2 = _publish(model_dir, target)
    assert [b.skipped for b in again] == [True, True, True]
    assert sum(b.transferred_bytes for b in again) == 0
    assert ref2.digest == ref.digest

    # Delete: gone (by digest and by tag), and a second delete is a quiet False.
    env, acts = ActivityEnvironment(), OciActivities()
    assert env.run(acts.delete_artifact, DeleteArtifactInput(target=target, digest=ref.digest)) is True
    with _client(target) as registry:
        assert registry.fetch_manifest(target.repository, ref.digest) is None
        assert registry.fetch_manifest(target.repository, "v1") is None
    assert env.run(acts.delete_artifact, DeleteArtifactInput(target=target, digest=ref.digest)) is False


class _Crash(Exception):
    """Stands in for a worker dying right after a heartbeat."""


@pytest.mark.integration
def test_interrupted_push_resumes_from_committed_offset(oci_registry: OciRegistry, big_file: Path) -> None:
    target = _target(oci_registry)
    size = big_file.stat().st_size
    chunk = 8 * MiB
    digest = _sha256(big_file)
    request = PushFileInput(target=target, path=str(big_file), sha256=digest, size=size,
                            media_type=mt.MODEL_WEIGHT_RAW, chunk_size=chunk)
    acts = OciActivities(heartbeat_interval=0.05)

    beats: list[dict[str, Any]] = []

    def crash_after_three_chunks(*details: Any) -> None:
        beats.append(details[0])
        if details[0]["committed_offset"] >= 3 * chunk:
            raise _Crash

    first = ActivityEnvironment()
    first.on_heartbeat = crash_after_three_chunks
    with pytest.raises(_Crash):
        first.run(acts.push_file, request)
    last = beats[-1]
    assert last["committed_offset"] == 3 * chunk and last["digest"] == digest
    # The upload URL is heartbeated without its query (distribution's signed _state is in it).
    assert all("?" not in beat.get("upload_path", "") for beat in beats) and "_state" not in json.dumps(beats)
    with _client(target) as registry:
        assert not registry.blob_exists(target.repository, digest)

    # The retry: Temporal hands the last heartbeat details to the next attempt.
    second = ActivityEnvironment()
    second.info = dataclasses.replace(second.info, attempt=2, heartbeat_details=[last])
    result = second.run(acts.push_file, request)
    assert not result.skipped
    assert result.resumed_from == 3 * chunk
    assert result.transferred_bytes == size - 3 * chunk < size
    with _client(target) as registry:
        assert registry.blob_exists(target.repository, digest)
    print(f"\nresume: {size} byte file, first attempt committed {3 * chunk}, retry sent "
          f"{result.transferred_bytes} ({result.transferred_bytes / size:.0%})")


@pytest.mark.integration
def test_worker_shutdown_stops_on_a_chunk_boundary_and_resumes(oci_registry: OciRegistry,
                                                                big_file: Path) -> None:
    target = _target(oci_registry)
    size = big_file.stat().st_size
    chunk = 8 * MiB
    request = PushFileInput(target=target, path=str(big_file), sha256=_sha256(big_file), size=size,
                            media_type=mt.MODEL_WEIGHT_RAW, chunk_size=chunk)
    first = ActivityEnvironment()
    beats: list[dict[str, Any]] = []

    def shut_down_after_second_chunk(*details: Any) -> None:
        beats.append(details[0])
        if details[0]["committed_offset"] >= 2 * chunk:
            first.worker_shutdown()

    first.on_heartbeat = shut_down_after_second_chunk
    with pytest.raises(ApplicationError) as info:
        first.run(OciActivities(heartbeat_interval=0.05).push_file, request)
    assert info.value.type == ErrorType.WORKER_SHUTDOWN and not info.value.non_retryable
    # Shutdown began right after the second chunk was committed: nothing more was sent.
    assert beats[-1]["committed_offset"] == 2 * chunk

    second = ActivityEnvironment()
    second.info = dataclasses.replace(second.info, attempt=2, heartbeat_details=[beats[-1]])
    result = second.run(OciActivities().push_file, request)
    assert result.resumed_from == 2 * chunk and result.transferred_bytes == size - 2 * chunk


@pytest.mark.integration
def test_kill_mid_chunk_still_ends_with_the_right_blob(oci_registry: OciRegistry, big_file: Path,
                                                        tmp_path: Path) -> None:
    """A crash inside a PATCH leaves the registry's upload state stale; the retry must notice
    (distribution cancels such an upload) and upload again rather than publish wrong bytes."""
    target = _target(oci_registry)
    size = big_file.stat().st_size
    digest = _sha256(big_file)
    committed: list[UploadProgress] = []

    def crash_inside_second_chunk(p: UploadProgress) -> None:
        if p.in_flight_bytes == 0:
            committed.append(p)
        elif committed and p.in_flight_bytes >= 2 * MiB:
            raise _Crash

    with _client(target) as registry, pytest.raises(_Crash):
        registry.upload_blob_streaming(target.repository, big_file, digest, size, chunk_size=16 * MiB,
                                       on_progress=crash_inside_second_chunk, progress_interval=0)
    # What push_file would have left: the URL on this host, the query-less point in the heartbeat.
    point = committed[-1].resume_point(target.repository, digest)
    assert point.upload_location is not None
    UploadLocations(tmp_path / "state").save(target.address, target.repository, digest, point.upload_location)
    details = ResumeDetails.of(point).model_dump()

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, heartbeat_details=[details])
    result = env.run(OciActivities(state_dir=tmp_path / "state").push_file,
                     PushFileInput(target=target, path=str(big_file), sha256=digest, size=size,
                                   media_type=mt.MODEL_WEIGHT_RAW, chunk_size=16 * MiB))
    assert result.digest == digest
    assert result.transferred_bytes <= size
    with _client(target) as registry:
        out = tmp_path / "back"
        registry.pull_blob_to(target.repository, digest, out)
    assert _sha256(out) == digest
    print(f"\nmid-chunk kill: retry resumed at {result.resumed_from}, sent {result.transferred_bytes}")


@pytest.mark.integration
def test_streaming_upload_memory_is_bounded(oci_registry: OciRegistry, big_file: Path) -> None:
    target = _target(oci_registry)
    size = big_file.stat().st_size
    digest = _sha256(big_file)
    chunk = 16 * MiB
    with _client(target) as registry:
        registry.blob_exists(target.repository, digest)  # connect and pick auth outside the measurement
        tracemalloc.start()
        try:
            result = registry.upload_blob_streaming(target.repository, big_file, digest, size, chunk_size=chunk)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result.transferred_bytes == size
    assert peak < 2 * chunk
    # Bodies stream in 1 MiB reads, so memory does not grow with the chunk size at all.
    assert peak < 4 * MiB
    print(f"\npeak traced memory during a {size} byte upload with {chunk} byte chunks: {peak} bytes")


@pytest.mark.integration
def test_wrong_digest_is_a_non_retryable_failure(oci_registry: OciRegistry, model_dir: Path) -> None:
    target = _target(oci_registry)
    path = model_dir / "config.json"
    request = PushFileInput(target=target, path=str(path), sha256="0" * 64, media_type=mt.MODEL_WEIGHT_CONFIG_RAW)
    with pytest.raises(ApplicationError) as info:
        ActivityEnvironment().run(OciActivities().push_file, request)
    assert info.value.type == ErrorType.BLOB_DIGEST_MISMATCH and info.value.non_retryable


@pytest.mark.integration
def test_manifest_refuses_missing_layers(oci_registry: OciRegistry) -> None:
    target = _target(oci_registry)
    layer = PushedLayer(filepath="w.safetensors", media_type=mt.MODEL_WEIGHT_RAW, digest="1" * 64, size=3)
    with pytest.raises(ApplicationError) as info:
        ActivityEnvironment().run(OciActivities().push_manifest,
                                  PushManifestInput(target=target, tag="v1", layers=[layer], meta=META))
    assert info.value.type == ErrorType.LAYER_MISSING and info.value.non_retryable


@pytest.mark.integration
def test_cross_repository_mount_moves_no_bytes(oci_registry: OciRegistry, model_dir: Path) -> None:
    source, target = _target(oci_registry), _target(oci_registry)
    path = model_dir / "model-00002-of-00002.safetensors"
    env, acts = ActivityEnvironment(), OciActivities()
    first = env.run(acts.push_file, PushFileInput(target=source, path=str(path), media_type=mt.MODEL_WEIGHT_RAW))
    mounted = env.run(acts.push_file, PushFileInput(target=target, path=str(path), sha256=first.digest,
                                                    media_type=mt.MODEL_WEIGHT_RAW,
                                                    mount_from=source.repository))
    assert mounted.mounted and mounted.transferred_bytes == 0 and not mounted.skipped
    with _client(target) as registry:
        assert registry.blob_size(target.repository, first.digest) == path.stat().st_size


@pytest.mark.integration
def test_manifest_refuses_a_wrong_layer_size(oci_registry: OciRegistry, model_dir: Path) -> None:
    target = _target(oci_registry)
    path = model_dir / "config.json"
    blob = ActivityEnvironment().run(OciActivities().push_file,
                                     PushFileInput(target=target, path=str(path),
                                                   media_type=mt.MODEL_WEIGHT_CONFIG_RAW))
    layer = PushedLayer(filepath="config.json", media_type=blob.media_type, digest=blob.digest, size=blob.size + 1)
    with pytest.raises(ApplicationError) as info:
        ActivityEnvironment().run(OciActivities().push_manifest,
                                  PushManifestInput(target=target, tag="v1", layers=[layer], meta=META))
    assert info.value.type == ErrorType.LAYER_SIZE_MISMATCH and info.value.non_retryable


@pytest.mark.integration
def test_stale_resume_details_fall_back_to_a_fresh_upload(oci_registry: OciRegistry, model_dir: Path) -> None:
    target = _target(oci_registry)
    path = model_dir / "model-00002-of-00002.safetensors"
    digest = _sha256(path)
    bogus = UploadResume(upload_location=f"http://{target.address}/v2/{target.repository}/blobs/uploads/nope"
                                         "?_state=x", committed_offset=MiB, digest=digest,
                         repository=target.repository)
    with _client(target) as registry:
        result = registry.upload_blob_streaming(target.repository, path, digest, path.stat().st_size,
                                                chunk_size=MiB, resume=bogus)
    assert result.resumed_from == 0 and result.transferred_bytes == path.stat().st_size


# -- authentication, through oras' own backends --------------------------------------------


class _AuthProxy:
    """A loopback proxy in front of the registry that demands Basic or Bearer (token) auth.

    The registry fixture runs without auth; this adds the two challenge schemes the client must
    answer, with a token endpoint for the Bearer one. It counts 401s and the request-body bytes
    that arrived with them (bytes pushed twice). With `fail_patch=n` it answers the n-th PATCH
    with 503 without forwarding it, a registry hiccup the upload must survive. With
    `location_token`, upload URLs carry it in their query (as registries whose upload sessions are
    authorised by the URL do) and a request on an upload session without it is refused.
    """

    def __init__(self, upstream: str, scheme: str, user: str = "bob", password: str = REGISTRY_PASSWORD,
                 fail_patch: int | None = None, location_token: str | None = None) -> None:
        import base64
        import http.server
        import threading

        import requests

        self.scheme, self.unauthorized, self.wasted_body_bytes = scheme, 0, 0
        self.fail_patch, self.patches = fail_patch, 0
        self.location_token, self.refused_sessions = location_token, 0
        good_basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                auth = self.headers.get("Authorization", "")
                if self.path.startswith("/token"):
                    ok = auth == good_basic
                    payload = json.dumps({"token": REGISTRY_BEARER}).encode() if ok else b"{}"
                    self.send_response(200 if ok else 401)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if self.command == "PATCH":
                    proxy.patches += 1
                    if proxy.patches == proxy.fail_patch:
                        # The registry never sees this chunk: its upload state stays valid.
                        self.send_response(503)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                wanted = {"basic": good_basic, "token": f"Bearer {REGISTRY_BEARER}", "none": auth}[proxy.scheme]
                if auth != wanted:
                    proxy.unauthorized += 1
                    proxy.wasted_body_bytes += len(body)
                    challenge = ('Basic realm="registry"' if proxy.scheme == "basic" else
                                 f'Bearer realm="http://{proxy.address}/token",service="test",'
                                 'scope="repository:x:pull,push"')
                    self.send_response(401)
                    self.send_header("Www-Authenticate", challenge)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path = self.path
                if proxy.location_token is not None:
                    url = urllib.parse.urlsplit(path)
                    query = urllib.parse.parse_qsl(url.query)
                    on_session = "/blobs/uploads/" in url.path and not url.path.endswith("/blobs/uploads/")
                    if on_session and ("upload_token", proxy.location_token) not in query:
                        proxy.refused_sessions += 1
                        self.send_response(401)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    kept = urllib.parse.urlencode([(k, v) for k, v in query if k != "upload_token"])
                    path = urllib.parse.urlunsplit(("", "", url.path, kept, ""))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("authorization", "connection")}
                upstream_response = requests.request(self.command, upstream + path, headers=headers,
                                                     data=body, allow_redirects=False)
                content = upstream_response.content if self.command != "HEAD" else b""
                self.send_response(upstream_response.status_code)
                for key, value in upstream_response.headers.items():
                    if key.lower() == "location" and proxy.location_token is not None:
                        value += ("&" if "?" in value else "?") + f"upload_token={proxy.location_token}"
                    if key.lower() not in ("connection", "transfer-encoding", "content-length", "date"):
                        self.send_header(key, value)
                length_header = upstream_response.headers.get("Content-Length", str(len(content)))
                self.send_header("Content-Length", length_header if self.command == "HEAD" else str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.integration
@pytest.mark.parametrize("scheme", ["basic", "token"])
def test_publish_through_an_authenticating_registry(oci_registry: OciRegistry, model_dir: Path,
                                                    scheme: str) -> None:
    from servingops.activities.oci.activities import SecretRef
    from servingops.clients.oci.registry_client import RegistryCredentials

    proxy = _AuthProxy(oci_registry.url, scheme)
    try:
        secret = SecretRef(namespace="ns", name="pull-secret")
        target = RegistryTarget(address=proxy.address, repository=f"models/auth-{next(_repo_ids)}",
                                insecure=True, credentials_secret=secret)
        seen: list[tuple[SecretRef, str]] = []

        def resolve(ref: SecretRef, host: str) -> RegistryCredentials:
            seen.append((ref, host))
            return RegistryCredentials("bob", REGISTRY_PASSWORD)

        path = model_dir / "model-00001-of-00002.safetensors"
        request = PushFileInput(target=target, path=str(path), media_type=mt.MODEL_WEIGHT_RAW, chunk_size=MiB)
        blob = ActivityEnvironment().run(OciActivities(resolve).push_file, request)
        assert blob.transferred_bytes == path.stat().st_size and seen == [(secret, proxy.address)]
        # Basic credentials go out with every request, so no chunk body is ever sent twice.
        assert proxy.wasted_body_bytes == 0

        def wrong(ref: SecretRef, host: str) -> RegistryCredentials:
            return RegistryCredentials("bob", "nope")

        with pytest.raises(ApplicationError) as info:
            ActivityEnvironment().run(OciActivities(wrong).push_file, request)
        assert info.value.non_retryable
    finally:
        proxy.close()


def _crash_at(chunks: int, chunk: int, beats: list[dict[str, Any]]) -> Any:
    def heartbeat(*details: Any) -> None:
        beats.append(details[0])
        if details[0].get("committed_offset", 0) >= chunks * chunk:
            raise _Crash
    return heartbeat


@pytest.mark.integration
def test_an_upload_url_token_is_never_heartbeated_and_resume_still_works(
        oci_registry: OciRegistry, big_file: Path, big_file_facts: tuple[int, str], tmp_path: Path) -> None:
    """A registry whose upload URLs carry a token in their query: the heartbeat details (which
    Temporal stores) hold the URL without it, the host keeps the full URL (0600), and the retry
    re-derives it from there and resumes where the registry stands."""
    proxy = _AuthProxy(oci_registry.url, "none", location_token=UPLOAD_TOKEN)
    try:
        target = RegistryTarget(address=proxy.address, repository=f"models/url-token-{next(_repo_ids)}", insecure=True)
        size, digest = big_file_facts
        chunk = 8 * MiB
        request = PushFileInput(target=target, path=str(big_file), sha256=digest, size=size,
                                media_type=mt.MODEL_WEIGHT_RAW, chunk_size=chunk)
        state = tmp_path / "uploads"
        acts = OciActivities(heartbeat_interval=0.05, state_dir=state)
        beats: list[dict[str, Any]] = []
        first = ActivityEnvironment()
        first.on_heartbeat = _crash_at(2, chunk, beats)
        with pytest.raises(_Crash):
            first.run(acts.push_file, request)
        assert beats and UPLOAD_TOKEN not in json.dumps(beats)
        assert beats[-1]["upload_path"].startswith(f"http://{proxy.address}/v2/{target.repository}/blobs/uploads/")
        records = list(state.glob("*.json"))
        assert len(records) == 1 and UPLOAD_TOKEN in records[0].read_text()
        assert records[0].stat().st_mode & 0o077 == 0  # only the worker's user reads it

        second = ActivityEnvironment()
        second.info = dataclasses.replace(second.info, attempt=2, heartbeat_details=[beats[-1]])
        second.on_heartbeat = beats.append
        result = second.run(acts.push_file, request)
        assert result.resumed_from == 2 * chunk and result.transferred_bytes == size - 2 * chunk
        assert UPLOAD_TOKEN not in json.dumps(beats) + result.model_dump_json()
        assert proxy.refused_sessions == 0  # every session request carried the token it needs
        assert not list(state.glob("*.json"))  # done: nothing left on the host
        with _client(target) as registry:
            assert registry.blob_size(target.repository, digest) == size
    finally:
        proxy.close()


@pytest.mark.integration
def test_heartbeat_details_alone_cannot_resume(oci_registry: OciRegistry, big_file: Path,
                                               big_file_facts: tuple[int, str], tmp_path: Path) -> None:
    """Without the host's record (another disk, or a record for another upload) the query-less
    details resume nothing: the retry uploads from byte 0 and the blob is still right."""
    proxy = _AuthProxy(oci_registry.url, "none", location_token=UPLOAD_TOKEN)
    try:
        target = RegistryTarget(address=proxy.address, repository=f"models/no-record-{next(_repo_ids)}", insecure=True)
        size, digest = big_file_facts
        chunk = 8 * MiB
        request = PushFileInput(target=target, path=str(big_file), sha256=digest, size=size,
                                media_type=mt.MODEL_WEIGHT_RAW, chunk_size=chunk)
        beats: list[dict[str, Any]] = []
        first = ActivityEnvironment()
        first.on_heartbeat = _crash_at(2, chunk, beats)
        with pytest.raises(_Crash):
            first.run(OciActivities(heartbeat_interval=0.05, state_dir=tmp_path / "one").push_file, request)
        second = ActivityEnvironment()
        second.info = dataclasses.replace(second.info, attempt=2, heartbeat_details=[beats[-1]])
        result = second.run(OciActivities(state_dir=tmp_path / "other").push_file, request)
        assert result.resumed_from == 0 and result.transferred_bytes == size
        assert proxy.refused_sessions == 0  # the query-less path was never tried on its own
    finally:
        proxy.close()


@pytest.mark.unit
def test_registry_error_messages_lose_url_queries() -> None:
    from servingops.clients.oci.registry_client import scrub_queries

    text = ("HTTPConnectionPool(host='r', port=5000): Max retries exceeded with url: "
            f"/v2/m/blobs/uploads/1?_state=abc&upload_token={UPLOAD_TOKEN} (Caused by ReadTimeoutError())")
    assert UPLOAD_TOKEN not in scrub_queries(text) and "/v2/m/blobs/uploads/1?..." in scrub_queries(text)


# -- pure parts ------------------------------------------------------------------------------


@pytest.mark.unit
def test_manifest_bytes_are_deterministic() -> None:
    layers = [
        LayerFile(path="b.safetensors", role=mt.FileRole.WEIGHT, sha256="b" * 64, size=2),
        LayerFile(path="a/config.json", role=mt.FileRole.WEIGHT_CONFIG, sha256="sha256:" + "a" * 64, size=1),
    ]
    one = build_artifact(layers, META)
    two = build_artifact(list(reversed(layers)), META.model_copy())
    assert one.manifest == two.manifest and one.config == two.config
    assert one.manifest_descriptor.digest == "sha256:" + hashlib.sha256(one.manifest).hexdigest()
    assert [layer.path for layer in one.layers] == ["a/config.json", "b.safetensors"]
    with pytest.raises(ValueError):
        LayerFile(path="../etc/passwd", role=mt.FileRole.DOC, sha256="c" * 64, size=1)


@pytest.mark.unit
def test_file_roles() -> None:
    assert role_for_path("model.safetensors") == (mt.FileRole.WEIGHT, False)
    assert role_for_path("tokenizer.json") == (mt.FileRole.WEIGHT_CONFIG, False)
    assert role_for_path("model.safetensors.index.json") == (mt.FileRole.WEIGHT_CONFIG, False)
    assert role_for_path("README.md") == (mt.FileRole.DOC, False)
    assert role_for_path("modeling_foo.py") == (mt.FileRole.CODE, False)
    assert role_for_path("something.xyz") == (mt.FileRole.DOC, True)


@pytest.mark.unit
def test_range_header_parsing() -> None:
    assert parse_range("0-0") == 0
    assert parse_range("0-0", hint=1) == 1
    assert parse_range("0-1023") == 1024
    assert parse_range("bytes=0-9") == 10
    assert parse_range(None) is None and parse_range("junk") is None


@pytest.mark.unit
def test_credentials_from_secret_data() -> None:
    import base64

    docker = {"auths": {"https://reg.example:5000": {"auth": base64.b64encode(b"bob:s3cret").decode()}}}
    creds = credentials_from_secret_data({".dockerconfigjson": json.dumps(docker)}, "reg.example:5000")
    assert creds is not None and (creds.username, creds.password) == ("bob", "s3cret")
    assert "s3cret" not in repr(creds)
    assert credentials_from_secret_data({".dockerconfigjson": json.dumps(docker)}, "other:1") is None
    basic = credentials_from_secret_data({"username": "u", "password": "p"}, "any")
    assert basic is not None and basic.username == "u"



# -- through a real Temporal server: retry policy, throttled heartbeats ------------------------


@workflow.defn(sandboxed=False)  # imports this test module, which the sandbox would re-import
class _PushOneFile:
    @workflow.run
    async def run(self, request: PushFileInput) -> PushedBlob:
        result: PushedBlob = await workflow.execute_activity(
            "oci.push_file", request, result_type=PushedBlob,
            start_to_close_timeout=timedelta(minutes=2), heartbeat_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=5),
        )
        return result


@pytest.mark.integration
async def test_registry_hiccup_is_retried_by_temporal_and_resumes(
        temporal_server: TemporalDevServer, oci_registry: OciRegistry, big_file: Path,
        big_file_facts: tuple[int, str]) -> None:
    """The fourth PATCH fails with 503: the activity fails, Temporal retries it, and the retry
    starts where the registry stands, using the details the failed attempt heartbeated."""
    proxy = _AuthProxy(oci_registry.url, "none", fail_patch=4)
    try:
        target = RegistryTarget(address=proxy.address, repository=f"models/temporal-{next(_repo_ids)}",
                                insecure=True)
        size, digest = big_file_facts
        request = PushFileInput(target=target, path=str(big_file), sha256=digest, size=size,
                                media_type=mt.MODEL_WEIGHT_RAW, chunk_size=8 * MiB)
        client = await connect(TemporalSettings(address=temporal_server.address))
        queue = f"oci-{uuid.uuid4()}"
        with ThreadPoolExecutor(max_workers=4) as pool:
            async with Worker(client, task_queue=queue, workflows=[_PushOneFile],
                              activities=OciActivities().all(), activity_executor=pool):
                handle = await client.start_workflow(_PushOneFile.run, request, id=f"push-{uuid.uuid4()}",
                                                     task_queue=queue)
                result = await handle.result()
                attempts = [e.activity_task_started_event_attributes.attempt
                            async for e in handle.fetch_history_events()
                            if e.HasField("activity_task_started_event_attributes")]
        print(f"\ntemporal retry: attempts={attempts} resumed_from={result.resumed_from} "
              f"sent={result.transferred_bytes} of {size}")
        assert not result.skipped and result.digest == request.sha256
        assert result.resumed_from == 3 * 8 * MiB
        assert result.transferred_bytes == size - 3 * 8 * MiB
    finally:
        proxy.close()
