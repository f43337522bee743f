"""A `type: Catalog` source end to end at the library level: the catalog endpoint of cluster A (a real
distribution registry behind it) and the consuming calls of cluster B (another real registry).

Most tests give the endpoint a fixed list of ClusterModels and fixed client tokens; `test_activities_*` run the
endpoint against the real apiserver (a Ready ClusterModel, the clients Secret) and the Temporal activities
with the consumer's Secrets read from the controller namespace. TLS comes from a test CA made here; a second
CA stands for "a CA that did not sign the server".
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import http.client
import http.server
import json
import logging
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devstack.kube import LocalKubeCluster
from devstack.services import OciRegistry
from servingops.activities.catalog.artifacts import catalog_repository
from servingops.activities.catalog.copy import CopyProgress, CopyResult, copy_artifact
from servingops.activities.catalog.remote_activities import (
    CatalogRemoteActivities,
    CatalogRemoteSource,
    CopyArtifactInput,
    FetchRemoteIndexInput,
    GrantSummary,
    RefreshRemoteIndexInput,
    RemoteRefresh,
    RequestGrantInput,
    application_error_of,
)
from servingops.activities.catalog.store import CURRENT_TAG, REMOTE_INDEX_MEDIA_TYPE
from servingops.activities.oci.activities import RegistryTarget
from servingops.api_models.deckhouse.model import ClusterModel
from servingops.clients.catalog_remote import (
    GRANTS_PATH,
    ArtifactDigestMismatch,
    CatalogCertificateUntrusted,
    CatalogCredentialsRejected,
    CatalogEndpointError,
    CatalogGrantRefused,
    CatalogResponseMalformed,
    CatalogResponseTooLarge,
    CatalogUnreachable,
    CatalogURLInvalid,
    Grant,
    RemoteCatalog,
    RemoteIndex,
    canonical_json,
    fetch_remote_index,
    index_revision,
    parse_index,
    request_grant,
)
from servingops.clients.oci import media_types as mt
from servingops.clients.oci.modelpack import sha256_digest
from servingops.clients.oci.registry_client import ModelRegistry
from servingops.ingress.catalog_endpoint import (
    DEFAULT_CLIENTS_SECRET,
    CatalogEndpointServer,
    GrantSigner,
    StaticClientCredentials,
    add_arguments,
    build_index,
    from_arguments,
    run,
    serve,
)
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as, catalog_endpoint_identity
from tests.secret_scan import register_token
from tests.support.catalog_remote import REPOSITORY, Pki, Pushed, catalog_cluster_model, catalog_secret, pki, push_model

__all__ = ["pki"]  # the fixture, reused

CREDENTIAL = f"catalog-cred-{uuid.uuid4().hex}"
OTHER_CREDENTIAL = f"catalog-other-{uuid.uuid4().hex}"
register_token(CREDENTIAL, OTHER_CREDENTIAL)


# -- a test PKI ------------------------------------------------------------------------------------------------














# -- two registries and the artifacts of cluster A -----------------------------------------------------------


@pytest.fixture(scope="module")
def registry_a(tmp_path_factory: pytest.TempPathFactory, stack_logs: Path) -> Iterator[OciRegistry]:
    registry = OciRegistry(tmp_path_factory.mktemp("registry-a"), stack_logs).start()
    yield registry
    registry.stop()


@pytest.fixture(scope="module")
def registry_b(tmp_path_factory: pytest.TempPathFactory, stack_logs: Path) -> Iterator[OciRegistry]:
    registry = OciRegistry(tmp_path_factory.mktemp("registry-b"), stack_logs).start()
    yield registry
    registry.stop()








def _corrupt(registry: OciRegistry, digest: str) -> None:
    """Flip the bytes of a stored blob, keeping its size: the registry serves them as they are."""
    hexpart = digest.removeprefix("sha256:")
    blobs = registry.workdir / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256"
    path = blobs / hexpart[:2] / hexpart / "data"
    data = path.read_bytes()
    path.write_bytes(bytes(b ^ 0xFF for b in data))


@dataclass(frozen=True)
class ClusterA:
    tiny: Pushed
    corrupt: Pushed
    hidden: Pushed
    models: list[dict[str, Any]]




@pytest.fixture(scope="module")
def cluster_a(registry_a: OciRegistry) -> ClusterA:
    tiny = push_model(registry_a, "tiny", b"tiny weights " * 5000)
    corrupt = push_model(registry_a, "corrupt", b"weights that will be damaged " * 3000)
    hidden = push_model(registry_a, "hidden", b"not published " * 100)
    weights = next(d for d, data in corrupt.blobs.items() if data.startswith(b"weights that"))
    _corrupt(registry_a, weights)
    models = [catalog_cluster_model("tiny", tiny), catalog_cluster_model("corrupt", corrupt),
              catalog_cluster_model("hidden", hidden, phase="Publishing", ready="False")]
    return ClusterA(tiny=tiny, corrupt=corrupt, hidden=hidden, models=models)


@pytest.fixture(scope="module")
def endpoint(pki: Pki, registry_a: OciRegistry, cluster_a: ClusterA) -> Iterator[CatalogEndpointServer]:
    server = CatalogEndpointServer("127.0.0.1", 0, pki.cert_file, pki.key_file, models=lambda: cluster_a.models,
                                   clients=StaticClientCredentials({"cluster-b": CREDENTIAL}),
                                   registry=registry_a.address, repository=REPOSITORY).start()
    yield server
    server.stop()


def _raw(server_url: str, ca_pem: str, method: str, path: str, headers: dict[str, str] | None = None,
         body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    remote = RemoteCatalog(server_url, ca_pem)
    with remote.request(method, path, headers=headers or {}, body=body) as response:
        data = response.read() if method != "HEAD" else b""
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data


# -- index, grant, copy ---------------------------------------------------------------------------------------


@pytest.mark.integration
def test_index_publishes_ready_models_at_a_stable_revision(endpoint: CatalogEndpointServer, pki: Pki,
                                                           cluster_a: ClusterA) -> None:
    index = fetch_remote_index(endpoint.url, pki.ca_pem, CREDENTIAL)
    assert [e.name for e in index.entries] == ["corrupt", "tiny"]  # hidden is not Ready
    tiny = index.find("tiny")[0]
    assert tiny.digest == cluster_a.tiny.digest and tiny.version == "rev-1"
    assert tiny.media_type == mt.OCI_MANIFEST and tiny.size_bytes == cluster_a.tiny.size
    assert tiny.resolved == {"format": "Safetensors", "family": "llama", "parameterCount": 1000,
                             "supportedEndpointTypes": ["Chat"]}
    assert index.repository == REPOSITORY
    # The same inventory, the same revision, in any order; a change moves it.
    again = fetch_remote_index(endpoint.url, pki.ca_pem, CREDENTIAL)
    assert again.revision == index.revision
    assert build_index(list(reversed(cluster_a.models)), REPOSITORY).revision == index.revision
    changed = [*cluster_a.models[:1], catalog_cluster_model("corrupt", cluster_a.corrupt, version="rev-2")]
    assert build_index(changed, REPOSITORY).revision != index.revision


@pytest.mark.integration
def test_grant_then_copy_into_another_registry(endpoint: CatalogEndpointServer, pki: Pki, cluster_a: ClusterA,
                                               registry_b: OciRegistry, tmp_path: Path) -> None:
    digest = cluster_a.tiny.digest
    grant = request_grant(endpoint.url, pki.ca_pem, CREDENTIAL, [digest])
    assert grant.digests == (digest,) and grant.repository == REPOSITORY
    assert grant.token not in repr(grant)
    assert grant.expires_at > dt.datetime.now(dt.UTC) + dt.timedelta(minutes=10)
    reports: list[CopyProgress] = []
    remote = RemoteCatalog(endpoint.url, pki.ca_pem)
    first = copy_artifact(remote, grant, digest, registry_b.address, "copies/tiny", tag="v1", spool_dir=tmp_path,
                          on_progress=reports.append)
    blob_bytes = sum(len(b) for b in cluster_a.tiny.blobs.values())
    assert first.digest == digest and first.blobs_copied == len(cluster_a.tiny.blobs) and first.blobs_skipped == 0
    assert first.bytes_copied == blob_bytes and first.size_bytes == cluster_a.tiny.size
    assert first.artifact_type == mt.ARTIFACT_TYPE_MODEL_MANIFEST
    assert reports and reports[-1].blobs_copied == len(cluster_a.tiny.blobs)
    assert list(tmp_path.iterdir()) == []  # the spool is cleaned
    with ModelRegistry(registry_b.address, insecure=True) as b:
        copied = b.fetch_manifest("copies/tiny", digest)
        tagged = b.fetch_manifest("copies/tiny", "v1")
        assert copied is not None and copied.digest == digest
        assert tagged is not None and tagged.digest == digest
        for blob, data in cluster_a.tiny.blobs.items():
            assert b.blob_size("copies/tiny", blob) == len(data)
    second = copy_artifact(remote, grant, digest, registry_b.address, "copies/tiny", spool_dir=tmp_path)
    assert second.digest == digest
    assert (second.blobs_copied, second.blobs_skipped, second.bytes_copied) == (0, len(cluster_a.tiny.blobs), 0)


@pytest.mark.integration
def test_wrong_credentials_are_rejected(endpoint: CatalogEndpointServer, pki: Pki, cluster_a: ClusterA) -> None:
    for credential in (OTHER_CREDENTIAL, None):
        with pytest.raises(CatalogCredentialsRejected) as index_error:
            fetch_remote_index(endpoint.url, pki.ca_pem, credential)
        with pytest.raises(CatalogCredentialsRejected):
            request_grant(endpoint.url, pki.ca_pem, credential, [cluster_a.tiny.digest])
        assert index_error.value.reason == "CatalogCredentialsRejected" and not index_error.value.retryable
        assert OTHER_CREDENTIAL not in str(index_error.value)
    # A catalog credential is not a pull token, and the other way round.
    status, headers, _ = _raw(endpoint.url, pki.ca_pem, "GET", f"/v2/{REPOSITORY}/manifests/{cluster_a.tiny.digest}",
                              {"Authorization": f"Bearer {CREDENTIAL}"})
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    grant = request_grant(endpoint.url, pki.ca_pem, CREDENTIAL, [cluster_a.tiny.digest])
    with pytest.raises(CatalogCredentialsRejected):
        fetch_remote_index(endpoint.url, pki.ca_pem, grant.token)


@pytest.mark.integration
def test_a_ca_that_did_not_sign_the_server_is_refused(endpoint: CatalogEndpointServer, pki: Pki) -> None:
    with pytest.raises(CatalogCertificateUntrusted) as error:
        fetch_remote_index(endpoint.url, pki.other_ca_pem, CREDENTIAL)
    assert error.value.reason == "CatalogCertificateUntrusted" and not error.value.retryable
    with pytest.raises(CatalogCertificateUntrusted):  # no CA: the system's trust store, which lacks ours
        fetch_remote_index(endpoint.url, None, CREDENTIAL)
    # The right CA, but a certificate for another name.
    with _Stub(pki, _json_answer(b"{}"), cert=(pki.elsewhere_cert_file, pki.elsewhere_key_file)) as url:
        with pytest.raises(CatalogCertificateUntrusted) as mismatch:
            fetch_remote_index(url, pki.ca_pem, CREDENTIAL)
    assert "127.0.0.1" in str(mismatch.value)


@pytest.mark.integration
def test_only_https_urls_are_reachable(endpoint: CatalogEndpointServer, pki: Pki) -> None:
    for url in (endpoint.url.replace("https://", "http://"), f"https://user:pw@127.0.0.1:{endpoint.port}",
                f"{endpoint.url}/?x=1", "ftp://example.com", "not a url"):
        with pytest.raises(CatalogURLInvalid) as error:
            fetch_remote_index(url, pki.ca_pem, CREDENTIAL)
        assert error.value.reason == "CatalogURLInvalid" and "pw" not in str(error.value)


@pytest.mark.unit
def test_an_unreachable_endpoint(pki: Pki) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(CatalogUnreachable) as error:
        fetch_remote_index(f"https://127.0.0.1:{port}", pki.ca_pem, CREDENTIAL)
    assert error.value.reason == "CatalogUnreachable" and error.value.retryable
    with pytest.raises(CatalogUnreachable):
        request_grant("https://no-such-host.invalid", pki.ca_pem, CREDENTIAL, ["sha256:" + "0" * 64])
    # The activity-boundary form, as the activities raise it (the clients know no Temporal).
    application = application_error_of(CatalogRemoteSource(source="unreachable", url=f"https://127.0.0.1:{port}"),
                                        error.value)
    assert application.type == "CatalogUnreachable" and not application.non_retryable


@pytest.mark.integration
def test_a_grant_for_an_unpublished_digest_is_refused(endpoint: CatalogEndpointServer, pki: Pki,
                                                      cluster_a: ClusterA) -> None:
    hidden = cluster_a.hidden.digest  # in the registry, but its ClusterModel is not Ready
    with pytest.raises(CatalogGrantRefused) as error:
        request_grant(endpoint.url, pki.ca_pem, CREDENTIAL, [cluster_a.tiny.digest, hidden])
    assert "DigestNotPublished" in str(error.value) and error.value.reason == "CatalogGrantRefused"
    body = canonical_json({"digests": [hidden]})
    status, _, answer = _raw(endpoint.url, pki.ca_pem, "POST", GRANTS_PATH,
                             {"Authorization": f"Bearer {CREDENTIAL}", "Content-Type": "application/json"}, body)
    assert status == 403 and json.loads(answer) == {
        "reason": "DigestNotPublished", "error": "1 digest(s) are not in the published index", "digests": [hidden]}
    # Malformed and oversized grant requests.
    auth = {"Authorization": f"Bearer {CREDENTIAL}"}
    assert _raw(endpoint.url, pki.ca_pem, "POST", GRANTS_PATH, auth, b"{not json")[0] == 400
    assert _raw(endpoint.url, pki.ca_pem, "POST", GRANTS_PATH, auth, b'{"digests": ["latest"]}')[0] == 400
    assert _raw(endpoint.url, pki.ca_pem, "POST", GRANTS_PATH, auth, b" " * (65 << 10))[0] == 413


@pytest.mark.integration
def test_the_registry_subset_serves_exactly_the_grant(endpoint: CatalogEndpointServer, pki: Pki,
                                                      cluster_a: ClusterA) -> None:
    tiny, corrupt = cluster_a.tiny, cluster_a.corrupt
    grant = request_grant(endpoint.url, pki.ca_pem, CREDENTIAL, [tiny.digest])
    auth = {"Authorization": f"Bearer {grant.token}"}

    def status(method: str, path: str, headers: dict[str, str] | None = None) -> int:
        return _raw(endpoint.url, pki.ca_pem, method, path, auth if headers is None else headers)[0]

    v2 = f"/v2/{REPOSITORY}"
    assert status("GET", "/v2/") == 200
    assert status("GET", f"{v2}/manifests/{tiny.digest}") == 200
    assert status("HEAD", f"{v2}/manifests/{tiny.digest}") == 200
    some_blob = next(iter(tiny.blobs))
    code, headers, data = _raw(endpoint.url, pki.ca_pem, "GET", f"{v2}/blobs/{some_blob}", auth)
    assert code == 200 and sha256_digest(data) == some_blob and headers["docker-content-digest"] == some_blob
    assert status("HEAD", f"{v2}/blobs/{some_blob}") == 200
    # Not granted: another artifact's manifest and blobs, a tag, another repository, a write.
    assert status("GET", f"{v2}/manifests/{corrupt.digest}") == 403
    only_corrupt = next(d for d in corrupt.blobs if d not in tiny.blobs)
    assert status("GET", f"{v2}/blobs/{only_corrupt}") == 403
    assert status("GET", f"{v2}/manifests/latest") == 403
    assert status("GET", f"/v2/other/repo/manifests/{tiny.digest}") == 403
    assert status("DELETE", f"{v2}/manifests/{tiny.digest}") == 403
    # No token, a forged one, an expired one: 401.
    assert status("GET", f"{v2}/manifests/{tiny.digest}", {}) == 401
    forged = grant.token[:-4] + ("AAAA" if not grant.token.endswith("AAAA") else "BBBB")
    assert status("GET", f"{v2}/manifests/{tiny.digest}", {"Authorization": f"Bearer {forged}"}) == 401
    expired = GrantSigner(b"k" * 32, clock=lambda: time.time() - 3600).issue(REPOSITORY, [tiny.digest], "x")[0]
    assert status("GET", f"{v2}/manifests/{tiny.digest}", {"Authorization": f"Bearer {expired}"}) == 401
    assert status("GET", "/nothing", {}) == 404


@pytest.mark.integration
def test_a_blob_that_does_not_match_its_digest_is_never_committed(endpoint: CatalogEndpointServer, pki: Pki,
                                                                  cluster_a: ClusterA, registry_b: OciRegistry,
                                                                  tmp_path: Path) -> None:
    digest = cluster_a.corrupt.digest
    grant = request_grant(endpoint.url, pki.ca_pem, CREDENTIAL, [digest])
    with pytest.raises(ArtifactDigestMismatch) as error:
        copy_artifact(RemoteCatalog(endpoint.url, pki.ca_pem), grant, digest, registry_b.address, "copies/corrupt",
                      tag="v1", spool_dir=tmp_path)
    assert error.value.reason == "ArtifactDigestMismatch" and not error.value.retryable
    assert list(tmp_path.iterdir()) == []
    with ModelRegistry(registry_b.address, insecure=True) as b:
        assert b.fetch_manifest("copies/corrupt", digest) is None
        assert b.fetch_manifest("copies/corrupt", "v1") is None
        damaged = next(d for d, data in cluster_a.corrupt.blobs.items() if data.startswith(b"weights that"))
        assert b.blob_size("copies/corrupt", damaged) is None


@pytest.mark.integration
def test_copy_refuses_a_digest_outside_its_grant(endpoint: CatalogEndpointServer, pki: Pki, cluster_a: ClusterA,
                                                 registry_b: OciRegistry) -> None:
    grant = request_grant(endpoint.url, pki.ca_pem, CREDENTIAL, [cluster_a.tiny.digest])
    with pytest.raises(CatalogGrantRefused):
        copy_artifact(RemoteCatalog(endpoint.url, pki.ca_pem), grant, cluster_a.corrupt.digest, registry_b.address,
                      "copies/other")


@pytest.mark.integration
def test_nothing_secret_is_logged(endpoint: CatalogEndpointServer, pki: Pki, cluster_a: ClusterA,
                                  registry_b: OciRegistry, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        fetch_remote_index(endpoint.url, pki.ca_pem, CREDENTIAL)
        grant = request_grant(endpoint.url, pki.ca_pem, CREDENTIAL, [cluster_a.tiny.digest])
        copy_artifact(RemoteCatalog(endpoint.url, pki.ca_pem), grant, cluster_a.tiny.digest, registry_b.address,
                      "copies/logged")
        with pytest.raises(CatalogCredentialsRejected):
            fetch_remote_index(endpoint.url, pki.ca_pem, OTHER_CREDENTIAL)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "client cluster-b" in logged  # the access log names the client by its key
    for secret in (CREDENTIAL, OTHER_CREDENTIAL, grant.token, grant.token.split(".")[2]):
        assert secret not in logged


@pytest.mark.integration
def test_an_expired_grant_is_renewed(pki: Pki, registry_a: OciRegistry, registry_b: OciRegistry,
                                     cluster_a: ClusterA) -> None:
    with CatalogEndpointServer("127.0.0.1", 0, pki.cert_file, pki.key_file, models=lambda: cluster_a.models,
                               clients=StaticClientCredentials({"cluster-b": CREDENTIAL}),
                               registry=registry_a.address, repository=REPOSITORY,
                               grant_ttl=dt.timedelta(seconds=1)) as short:
        digest = cluster_a.tiny.digest
        grant = request_grant(short.url, pki.ca_pem, CREDENTIAL, [digest])
        time.sleep(1.5)
        remote = RemoteCatalog(short.url, pki.ca_pem)
        with pytest.raises(CatalogGrantRefused) as error:
            copy_artifact(remote, grant, digest, registry_b.address, "copies/renewed")
        assert "expired" in str(error.value)
        renewals = []

        def renew() -> Grant:
            renewals.append(1)
            return request_grant(short.url, pki.ca_pem, CREDENTIAL, [digest])

        # renew_margin=0: no renewal ahead of time, so the 401 of the expired grant triggers it.
        result = copy_artifact(remote, grant, digest, registry_b.address, "copies/renewed", renew=renew,
                               renew_margin=0)
    assert result.digest == digest and renewals


@pytest.mark.integration
def test_activity_results_survive_the_data_converter(cluster_a: ClusterA) -> None:
    index = parse_index(json.loads(build_index(cluster_a.models, REPOSITORY).content))
    converter = pydantic_data_converter.payload_converter
    for value in (index, GrantSummary(repository=REPOSITORY, digests=[cluster_a.tiny.digest],
                                      expires_at=dt.datetime.now(dt.UTC)),
                  CopyProgress(digest=cluster_a.tiny.digest, done=[cluster_a.tiny.digest], bytes_copied=3)):
        [payload] = converter.to_payloads([value])
        assert converter.from_payloads([payload], [type(value)])[0] == value


# -- a remote that answers badly (a stub endpoint) ------------------------------------------------------------


class _Stub:
    """An HTTPS server with the test CA's certificate answering GET <INDEX_PATH> with what `answer` writes."""

    def __init__(self, pki: Pki, answer: Callable[[http.server.BaseHTTPRequestHandler], None], *,
                 cert: tuple[Path, Path] | None = None) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                try:
                    answer(self)
                except (ConnectionError, ssl.SSLError, TimeoutError):
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*(cert or (pki.cert_file, pki.key_file)))
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"https://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _json_answer(body: bytes, status: int = 200) -> Callable[[http.server.BaseHTTPRequestHandler], None]:
    def answer(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return answer


def _document(entries: list[dict[str, Any]], revision: str | None = None) -> bytes:
    return canonical_json({"schemaVersion": "v1", "repository": REPOSITORY, "entries": entries,
                           "revision": revision or index_revision(entries)})


GOOD_ENTRY = {"name": "m", "digest": "sha256:" + "a" * 64, "mediaType": mt.OCI_MANIFEST}


@pytest.mark.unit
@pytest.mark.parametrize("body", [
    b"<html>not json</html>",
    b'{"schemaVersion": "v2", "entries": []}',
    b'["an", "array"]',
    b"[" * 100000,
    _document([{"name": "Not A DNS Name!", "digest": "sha256:" + "a" * 64, "mediaType": "x"}]),
    _document([{"name": "m", "digest": "md5:abc", "mediaType": "x"}]),
    _document([GOOD_ENTRY], revision="sha256:" + "0" * 64),
], ids=["html", "schema-v2", "array", "deep-nesting", "bad-name", "bad-digest", "wrong-revision"])
def test_a_malformed_index_is_refused(pki: Pki, body: bytes) -> None:
    with _Stub(pki, _json_answer(body)) as url:
        with pytest.raises(CatalogResponseMalformed) as error:
            fetch_remote_index(url, pki.ca_pem, CREDENTIAL)
    assert error.value.reason == "CatalogResponseMalformed"


@pytest.mark.unit
def test_a_well_formed_stub_index_is_accepted(pki: Pki) -> None:
    with _Stub(pki, _json_answer(_document([GOOD_ENTRY]))) as url:
        index = fetch_remote_index(url + "/", pki.ca_pem, CREDENTIAL)
    assert [e.digest for e in index.entries] == [GOOD_ENTRY["digest"]]


@pytest.mark.unit
def test_an_oversized_index_is_abandoned_while_streaming(pki: Pki) -> None:
    sent = [0]

    def endless(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Connection", "close")  # no length: the body runs until the server stops
        handler.end_headers()
        handler.wfile.write(b'{"schemaVersion": "v1", "entries": [')
        piece = canonical_json(GOOD_ENTRY) + b","
        while sent[0] < 1 << 30:
            handler.wfile.write(piece * 1000)
            sent[0] += len(piece) * 1000

    with _Stub(pki, endless) as url:
        started = time.monotonic()
        with pytest.raises(CatalogResponseTooLarge) as error:
            fetch_remote_index(url, pki.ca_pem, CREDENTIAL, max_bytes=1 << 20)
        assert time.monotonic() - started < 10
    assert error.value.reason == "CatalogResponseTooLarge"
    assert sent[0] < 64 << 20  # the client stopped reading long before the server would have stopped

    def declared(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(1 << 40))
        handler.end_headers()

    with _Stub(pki, declared) as url, pytest.raises(CatalogResponseTooLarge):
        fetch_remote_index(url, pki.ca_pem, CREDENTIAL)


@pytest.mark.unit
def test_server_errors_are_retryable_and_redirects_are_not_followed(pki: Pki) -> None:
    with _Stub(pki, _json_answer(b'{"error": "boom"}', status=503)) as url:
        with pytest.raises(CatalogUnreachable):
            fetch_remote_index(url, pki.ca_pem, CREDENTIAL)

    def redirect(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(302)
        handler.send_header("Location", "https://elsewhere.invalid/")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    with _Stub(pki, redirect) as url:
        with pytest.raises(CatalogEndpointError) as error:
            fetch_remote_index(url, pki.ca_pem, CREDENTIAL)
    assert error.value.reason == "CatalogEndpointError" and "elsewhere" not in str(error.value)


# -- the real apiserver and the activities --------------------------------------------------------------------




@pytest.fixture(scope="module")
def kube_world(kube_api: client.ApiClient, pki: Pki, cluster_a: ClusterA) -> Iterator[dict[str, str]]:
    """A controller namespace with the publishing side's clients Secret and the consuming side's Secrets, and a
    Ready ClusterModel (labelled for this module) whose artifact is `tiny` in registry A."""
    namespace = new_namespace(kube_api, "catalog-remote")
    label = f"t{uuid.uuid4().hex[:8]}"
    catalog_secret(kube_api, namespace, DEFAULT_CLIENTS_SECRET, {"cluster-b": CREDENTIAL, "too-short": "abc"})
    catalog_secret(kube_api, namespace, "remote-ca", {"ca.crt": pki.ca_pem})
    catalog_secret(kube_api, namespace, "other-ca", {"ca.crt": pki.other_ca_pem})
    catalog_secret(kube_api, namespace, "remote-credentials", {"token": CREDENTIAL})
    catalog_secret(kube_api, namespace, "wrong-credentials", {"token": OTHER_CREDENTIAL})
    body = manifest(ClusterModel, {"source": {"url": "https://huggingface.co/org/tiny"}}, f"catalog-{label}")
    body["metadata"]["labels"] = {"servingops.io/catalog-remote-test": label}
    created = create(kube_api, ClusterModel, body)
    name = created["metadata"]["name"]
    status = catalog_cluster_model(name, cluster_a.tiny)["status"]
    custom = client.CustomObjectsApi(kube_api)
    info = ClusterModel.crd
    custom.patch_cluster_custom_object_status(info.group, info.version, info.plural, name, {"status": status})
    try:
        yield {"namespace": namespace, "label": label, "model": name}
    finally:
        custom.delete_cluster_custom_object(info.group, info.version, info.plural, name)
        client.CoreV1Api(kube_api).delete_namespace(namespace)


@pytest.fixture(scope="module")
def endpoint_kubeconfig(kube_cluster: LocalKubeCluster, kube_world: dict[str, str],
                        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The chart's catalog endpoint identity in the module's controller namespace: the endpoint runs as its pod."""
    with catalog_endpoint_identity(kube_cluster, kube_world["namespace"],
                                   tmp_path_factory.mktemp("catalog-endpoint")) as kubeconfig:
        yield kubeconfig


@pytest.fixture(scope="module")
def kube_endpoint(endpoint_kubeconfig: Path, kube_world: dict[str, str], pki: Pki,
                  registry_a: OciRegistry) -> Iterator[CatalogEndpointServer]:
    with api_as(endpoint_kubeconfig) as api:
        server = serve("127.0.0.1", 0, pki.cert_file, pki.key_file, api_client=api,
                       namespace=kube_world["namespace"], registry=registry_a.address, repository=REPOSITORY,
                       label_selector=f"servingops.io/catalog-remote-test={kube_world['label']}")
        yield server
        server.stop()


@pytest.mark.integration
def test_activities_index_grant_and_copy_with_secrets(kube_api: client.ApiClient, kube_world: dict[str, str],
                                                      kube_endpoint: CatalogEndpointServer, cluster_a: ClusterA,
                                                      registry_b: OciRegistry, tmp_path: Path) -> None:
    activities = CatalogRemoteActivities(
        kube_api, kube_world["namespace"],
        RegistryTarget(address=registry_b.address, repository="servingops/from-a", insecure=True),
        spool_dir=tmp_path, heartbeat_interval=0.01)
    remote = CatalogRemoteSource(source="cluster-a", url=kube_endpoint.url, ca_secret_name="remote-ca",
                                 credentials_secret_name="remote-credentials")
    env = ActivityEnvironment()
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.extend(details)

    index = env.run(activities.fetch_remote_index, FetchRemoteIndexInput(remote=remote))
    assert [(e.name, e.digest) for e in index.entries] == [(kube_world["model"], cluster_a.tiny.digest)]
    summary = env.run(activities.request_grant, RequestGrantInput(remote=remote, digests=[cluster_a.tiny.digest]))
    assert isinstance(summary, GrantSummary) and summary.digests == [cluster_a.tiny.digest]
    result = env.run(activities.copy_artifact, CopyArtifactInput(remote=remote, digest=cluster_a.tiny.digest,
                                                                 tag="tiny"))
    assert isinstance(result, CopyResult) and result.digest == cluster_a.tiny.digest
    assert result.reference == f"{registry_b.address}/servingops/from-a@{cluster_a.tiny.digest}"
    assert beats and all(CopyProgress.model_validate(b).digest == cluster_a.tiny.digest for b in beats)
    # Nothing the activities hand back or heartbeat carries a credential.
    carried = json.dumps([index.model_dump(mode="json"), summary.model_dump(mode="json"),
                          result.model_dump(mode="json"), beats])
    assert CREDENTIAL not in carried and "scg1." not in carried

    # A retried attempt continues from the last heartbeat: its counts survive, nothing is copied twice.
    resumed_env = ActivityEnvironment()
    resumed_env.info = dataclasses.replace(resumed_env.info, heartbeat_details=[beats[-1]])
    again = resumed_env.run(activities.copy_artifact, CopyArtifactInput(remote=remote, digest=cluster_a.tiny.digest))
    assert (again.blobs_copied, again.bytes_copied) == (result.blobs_copied, result.bytes_copied)
    assert again.blobs_skipped == 0


@pytest.mark.integration
@pytest.mark.parametrize(("ca", "credentials", "reason", "retryable"), [
    ("remote-ca", "wrong-credentials", "CatalogCredentialsRejected", False),
    ("other-ca", "remote-credentials", "CatalogCertificateUntrusted", False),
    ("remote-ca", "no-such-secret", "AuthSecretNotFound", False),
    ("missing-ca", "remote-credentials", "AuthSecretNotFound", False),
])
def test_activity_failures_carry_their_reason(kube_api: client.ApiClient, kube_world: dict[str, str],
                                              kube_endpoint: CatalogEndpointServer, ca: str, credentials: str,
                                              reason: str, retryable: bool) -> None:
    activities = CatalogRemoteActivities(kube_api, kube_world["namespace"])
    remote = CatalogRemoteSource(source="cluster-a", url=kube_endpoint.url, ca_secret_name=ca,
                                 credentials_secret_name=credentials)
    with pytest.raises(ApplicationError) as error:
        ActivityEnvironment().run(activities.fetch_remote_index, FetchRemoteIndexInput(remote=remote))
    assert error.value.type == reason and error.value.non_retryable is not retryable
    assert error.value.message.startswith(("catalog source cluster-a:", "Secret "))
    assert CREDENTIAL not in error.value.message and OTHER_CREDENTIAL not in error.value.message


@pytest.mark.integration
def test_the_endpoint_reads_the_clients_secret(kube_endpoint: CatalogEndpointServer, pki: Pki,
                                               kube_world: dict[str, str]) -> None:
    assert fetch_remote_index(kube_endpoint.url, pki.ca_pem, CREDENTIAL).entries
    with pytest.raises(CatalogCredentialsRejected):
        fetch_remote_index(kube_endpoint.url, pki.ca_pem, OTHER_CREDENTIAL)
    with pytest.raises(CatalogCredentialsRejected):  # a key whose value is too short to be a token
        fetch_remote_index(kube_endpoint.url, pki.ca_pem, "abc")



@pytest.mark.integration
def test_the_endpoint_process_serves_until_stopped(endpoint_kubeconfig: Path, kube_world: dict[str, str],
                                                   pki: Pki, registry_a: OciRegistry, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    key_file = tmp_path / "signing.key"
    key_file.write_bytes(b"s" * 32)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = from_arguments(parser.parse_args([
        "--listen", f"127.0.0.1:{port}", "--tls-cert", str(pki.cert_file), "--tls-key", str(pki.key_file),
        "--kubeconfig", str(endpoint_kubeconfig), "--controller-namespace", kube_world["namespace"],
        "--registry", registry_a.address, "--signing-key-file", str(key_file), "--grant-ttl-seconds", "60",
        "--label-selector", f"servingops.io/catalog-remote-test={kube_world['label']}"]))
    stop = threading.Event()
    thread = threading.Thread(target=run, args=(settings, stop), daemon=True)
    thread.start()
    try:
        unreachable: list[CatalogUnreachable] = []

        def served() -> RemoteIndex | None:
            try:
                return fetch_remote_index(f"https://127.0.0.1:{port}", pki.ca_pem, CREDENTIAL)
            except CatalogUnreachable as error:  # not listening yet
                unreachable[:] = [error]
                return None

        index = wait_until("the endpoint serving its index", served, timeout=20, interval=0.1,
                           detail=lambda: f"last error: {unreachable[-1]!r}" if unreachable else "")
        assert [e.name for e in index.entries] == [kube_world["model"]]
        grant = request_grant(f"https://127.0.0.1:{port}", pki.ca_pem, CREDENTIAL, [index.entries[0].digest])
        assert grant.expires_at <= dt.datetime.now(dt.UTC) + dt.timedelta(seconds=61)
        # Signed with the key from the file: another signer with that key accepts the token.
        assert GrantSigner(b"s" * 32).verify(grant.token) is not None
    finally:
        stop.set()
        thread.join(timeout=15)
    assert not thread.is_alive()


# -- catalog.refresh_remote_index: a large index stored without crossing Temporal's payload limit ---------------


def _many_entries(count: int) -> list[dict[str, Any]]:
    return [{"name": f"model-{i:05d}", "version": "v1", "digest": "sha256:" + hashlib.sha256(b"%d" % i).hexdigest(),
             "mediaType": mt.OCI_MANIFEST, "sizeBytes": 1000 + i} for i in range(count)]


@pytest.mark.integration
def test_a_large_remote_index_is_stored_in_the_activity_and_only_when_it_moved(
        kube_api: client.ApiClient, kube_world: dict[str, str], pki: Pki, registry_b: OciRegistry) -> None:
    """12,000 entries (about 2 MB of JSON, over Temporal's 2 MB payload limit once in a result): the index is
    parsed, validated and pushed inside the activity, which hands back digests and a count only. The same
    document again stores nothing; a malformed answer stores nothing."""
    source = f"peer-{uuid.uuid4().hex[:6]}"
    activities = CatalogRemoteActivities(
        kube_api, kube_world["namespace"],
        RegistryTarget(address=registry_b.address, repository="unused", insecure=True))
    entries = _many_entries(12_000)
    document = _document(entries)
    assert len(document) > 2 << 20
    env = ActivityEnvironment()
    with _Stub(pki, _json_answer(document)) as url:
        remote = CatalogRemoteSource(source=source, url=url, ca_secret_name="remote-ca",
                                     credentials_secret_name="remote-credentials")
        first = env.run(activities.refresh_remote_index, RefreshRemoteIndexInput(remote=remote))
        assert isinstance(first, RemoteRefresh) and first.entry_count == 12_000 and first.stored is not None
        assert first.remote_revision == index_revision(entries)
        assert first.stored.document_digest == first.document_digest
        assert first.stored.reference == f"{registry_b.address}/{catalog_repository(source)}@{first.stored.revision}"
        assert len(pydantic_data_converter.payload_converter.to_payloads([first])[0].data) < 2048
        with ModelRegistry(registry_b.address, insecure=True) as registry:
            stored = registry.fetch_manifest(catalog_repository(source), first.stored.revision)
            assert stored is not None and stored.json["artifactType"] == REMOTE_INDEX_MEDIA_TYPE
            (layer,) = stored.json["layers"]
            assert layer["digest"] == first.document_digest
            body = registry.read_blob_bytes(catalog_repository(source), layer["digest"], max_bytes=16 << 20)
        assert body is not None
        read_back = parse_index(json.loads(body))
        assert [e.name for e in read_back.entries] == [e["name"] for e in entries]
        assert read_back.revision == first.remote_revision

        again = env.run(activities.refresh_remote_index,
                        RefreshRemoteIndexInput(remote=remote, known_document_digest=first.document_digest))
        assert again.stored is None
        assert (again.document_digest, again.entry_count) == (first.document_digest, 12_000)

    bad = _document(entries[:10], revision="sha256:" + "0" * 64)
    other = f"peer-{uuid.uuid4().hex[:6]}"
    with _Stub(pki, _json_answer(bad)) as url, pytest.raises(ApplicationError) as refused:
        remote = CatalogRemoteSource(source=other, url=url, ca_secret_name="remote-ca",
                                     credentials_secret_name="remote-credentials")
        env.run(activities.refresh_remote_index, RefreshRemoteIndexInput(remote=remote))
    assert refused.value.type == "CatalogResponseMalformed"
    with ModelRegistry(registry_b.address, insecure=True) as registry:
        assert registry.fetch_manifest(catalog_repository(other), CURRENT_TAG) is None
