"""The catalog endpoint: the publishing side of a `type: Catalog` ModelCatalogSource in another cluster.

An HTTPS server (TLS certificate and key given at start) that publishes this cluster's Ready ClusterModels and
lets a consumer with a catalog credential pull exactly the artifacts it was granted. The wire format (paths,
the index document and its revision) lives in clients/catalog_remote.py, shared with the consuming side.

HTTP contract:

- `GET /catalog/v1/index`, `Authorization: Bearer <catalog credential>`: 200 with the index document,
  canonical JSON `{"schemaVersion": "v1", "revision", "repository", "entries": [...]}`. An entry per Ready
  ClusterModel (phase Ready, its Ready condition True when present, an OCI artifact digest, not deleting, not
  annotated `ai.deckhouse.io/catalog-publish: "false"`): `name` (annotation `ai.deckhouse.io/catalog-name`,
  else metadata.name), `version` (annotation `ai.deckhouse.io/catalog-version`, else
  status.source.catalog.version, else status.source.resolvedRevision; left out when none), `digest`,
  `mediaType`, `sizeBytes` (status.artifact) and `resolved` (status.resolved). `revision` is the sha256 of the
  canonical entries array: the same inventory always gives the same revision.
- `POST /catalog/v1/grants`, the same credential, body `{"digests": ["sha256:...", ...]}` (1..64 digests,
  at most 64 KiB): 200 `{"token", "expiresAt", "expiresIn", "repository", "digests"}`, a read-only pull token
  for exactly those artifacts, valid `grant_ttl` (default 15 min). A digest not in the published index: 403
  `{"reason": "DigestNotPublished", "error", "digests": [the refused ones]}`; a malformed body 400; no
  Content-Length 411; too large 413.
- `GET`/`HEAD /v2/<repository>/manifests/<digest>` and `/v2/<repository>/blobs/<digest>`,
  `Authorization: Bearer <grant token>`: served from this cluster's own registry (plain http, given at start),
  only for the repository published in the index, only the manifests the token names (by digest, never by
  tag) and only the blobs those manifests reference (config and layers). `GET /v2/` answers 200 to a valid
  token. No token, a bad or expired one: 401 (`WWW-Authenticate: Bearer`); a valid token asking for anything
  else (another digest, a tag, another repository, a write method): 403 `DENIED`. Errors are OCI error bodies.
- `GET /healthz`: 200. Any other path: 404.

Why a proxy and not the registry's own tokens: a registry's token scopes are per repository
(`repository:<name>:pull`), and every model of this cluster lives in the same repository, so a registry token
would let its holder pull every artifact. The grant names digests and this endpoint enforces it per manifest and
per referenced blob, so a grant's scope is exactly the artifacts granted. Blob bytes pass through as the
registry sends them; the consumer verifies every digest before it commits anything.

The catalog credentials: the Secret `servingops-catalog-clients` (name configurable) in the controller
namespace; each key names one consuming cluster and its value is that cluster's bearer token (at least 16
visible ASCII characters; shorter values are ignored). A consumer's ModelCatalogSource names, in its own
controller namespace, a Secret (`credentialsSecretName`) whose key `token` holds the same value. Removing a key
revokes that consumer within `cache_seconds` (10 s). Tokens are compared in constant time (sha256 of each).

Grant tokens: `scg1.<base64url payload>.<base64url HMAC-SHA256>`, the payload naming the repository, the
digests, the issue and expiry times and the client's key name. The signing key is given at start (for several
replicas: the same key, e.g. from a Secret) or generated at start (one replica; grants die with the process,
which only costs the consumer a renewal).

Limits: request paths up to 2048 bytes (414), Authorization headers up to 16 KiB, grant bodies up to 64 KiB,
at most `max_connections` requests at once (beyond: the connection is closed), a TLS handshake and every read
within 10 s. Nothing here logs a header, a token, a credential or a body; the access log (debug) has method,
path, status and the client's key name.

The process needs, as its own identity: list/get on clustermodels and get on the clients Secret.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import datetime as dt
import hashlib
import hmac
import http.server
import json
import logging
import re
import secrets
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from urllib3.exceptions import HTTPError as Urllib3Error

from servingops.api_models.canonical import canonical_json
from servingops.api_models.deckhouse.model import ClusterModel, ResolvedModel
from servingops.clients.catalog_remote import (
    DIGEST,
    GRANT_TOKEN_PREFIX,
    GRANTS_PATH,
    INDEX_CONTENT_TYPE,
    INDEX_PATH,
    MAX_GRANT_DIGESTS,
    MAX_MANIFEST_BYTES,
    RemoteEntry,
    index_document,
)
from servingops.clients.kube.calls import call, get_or_none
from servingops.clients.kube.timeouts import CATALOG_LIST_TIMEOUT, CATALOG_SECRET_TIMEOUT
from servingops.clients.oci import media_types as mt
from servingops.runtime.kube import load_api_client
from servingops.runtime.process import DEFAULT_REPOSITORY, Flags, Process, listen_address, run_threaded

log = logging.getLogger("servingops.catalog.endpoint")

HEALTH_PATH = "/healthz"
DEFAULT_CLIENTS_SECRET = "servingops-catalog-clients"
DEFAULT_GRANT_TTL = dt.timedelta(minutes=15)
MAX_GRANT_TTL = dt.timedelta(hours=12)
MIN_CLIENT_TOKEN_CHARS = 16
MAX_PATH_BYTES = 2048
MAX_AUTH_HEADER = 16 << 10
MAX_GRANT_BODY = 64 << 10
DRAIN_LIMIT = 1 << 20
IO_TIMEOUT = 10.0
STREAM_BLOCK = 1 << 20
PUBLISH_ANNOTATION = "ai.deckhouse.io/catalog-publish"
NAME_ANNOTATION = "ai.deckhouse.io/catalog-name"
VERSION_ANNOTATION = "ai.deckhouse.io/catalog-version"
_SIGNATURE_CONTEXT = b"servingops-catalog-grant-v1."
_TOKEN_TEXT = re.compile(r"^[\x21-\x7e]+$")
_V2_PATH = re.compile(r"^/v2/(?P<repo>[a-z0-9]+(?:[._/-][a-z0-9]+)*)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")


# -- the published index -----------------------------------------------------------------------------------


ClusterModelLister = Callable[[], Iterable[Mapping[str, Any]]]
"""Every ClusterModel of the cluster, as the apiserver returns them (dicts)."""


class KubeClusterModels:
    """Lists ClusterModels page by page (500 a page); `label_selector` narrows what is published."""

    def __init__(self, api_client: client.ApiClient, *, label_selector: str | None = None,
                 page_size: int = 500) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.label_selector = label_selector
        self.page_size = page_size

    def __call__(self) -> list[Mapping[str, Any]]:
        info = ClusterModel.crd
        items: list[Mapping[str, Any]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size}
            if token:
                kwargs["_continue"] = token
            if self.label_selector:
                kwargs["label_selector"] = self.label_selector
            page = cast(dict[str, Any], call(self.custom.list_cluster_custom_object,
                                             info.group, info.version, info.plural, timeout=CATALOG_LIST_TIMEOUT,
                                             **kwargs))
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items


def published_entry(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The index entry of a ClusterModel (camelCase, canonical), None when it is not published."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    annotations = meta.get("annotations") or {}
    if str(annotations.get(PUBLISH_ANNOTATION, "")).lower() == "false" or meta.get("deletionTimestamp"):
        return None
    if status.get("phase") != "Ready":
        return None
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") != "True":
        return None
    artifact = status.get("artifact") or {}
    digest = artifact.get("digest")
    if not isinstance(digest, str) or not DIGEST.match(digest) or artifact.get("kind") not in (None, "OCI"):
        return None
    source: Mapping[str, Any] = status.get("source") or {}
    catalog: Mapping[str, Any] = source.get("catalog") or {}
    version = annotations.get(VERSION_ANNOTATION) or catalog.get("version") or source.get("resolvedRevision")
    entry: dict[str, Any] = {
        "name": annotations.get(NAME_ANNOTATION) or meta.get("name"),
        "digest": digest,
        "mediaType": artifact.get("mediaType") or mt.OCI_MANIFEST,
    }
    if version:
        entry["version"] = str(version)
    if isinstance(artifact.get("sizeBytes"), int) and artifact["sizeBytes"] >= 1:
        entry["sizeBytes"] = artifact["sizeBytes"]
    if isinstance(status.get("resolved"), dict):
        try:
            resolved = ResolvedModel.model_validate(status["resolved"]).to_api()
        except ValidationError:
            resolved = {}
        if resolved:
            entry["resolved"] = resolved
    try:
        RemoteEntry.model_validate(entry)
    except ValidationError:
        log.warning("ClusterModel %s is Ready but its catalog entry is not valid (name, version or media type): "
                    "not published", meta.get("name"))
        return None
    return entry


@dataclass(frozen=True)
class PublishedIndex:
    content: bytes
    revision: str
    digests: frozenset[str]
    entry_count: int


def build_index(objects: Iterable[Mapping[str, Any]], repository: str) -> PublishedIndex:
    """The index document of the Ready ClusterModels among `objects`."""
    entries = [e for e in (published_entry(o) for o in objects) if e is not None]
    content, revision = index_document(entries, repository)
    return PublishedIndex(content=content, revision=revision, digests=frozenset(e["digest"] for e in entries),
                          entry_count=len(json.loads(content)["entries"]))


# -- catalog credentials -------------------------------------------------------------------------------------


class ClientCredentials(Protocol):
    def identify(self, presented: str) -> str | None:
        """The name of the client whose token `presented` is, or None. Raises CredentialsUnavailable."""


class CredentialsUnavailable(Exception):
    """The credentials could not be read (apiserver trouble): answer 503, never 'accepted'."""


def _match(presented: str, tokens: Mapping[str, bytes]) -> str | None:
    """Constant time in the tokens' values: every stored digest is compared."""
    wanted = hashlib.sha256(presented.encode("utf-8")).digest()
    found: str | None = None
    for name, stored in tokens.items():
        if hmac.compare_digest(wanted, stored) and found is None:
            found = name
    return found


def _token_digests(values: Mapping[str, str]) -> dict[str, bytes]:
    return {name: hashlib.sha256(token.encode("utf-8")).digest() for name, token in values.items()
            if len(token) >= MIN_CLIENT_TOKEN_CHARS and _TOKEN_TEXT.match(token)}


class StaticClientCredentials:
    """Fixed client tokens (tests, or a process configured from a file)."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._tokens = _token_digests(tokens)

    def identify(self, presented: str) -> str | None:
        return _match(presented, self._tokens)


class KubeSecretClientCredentials:
    """The client tokens of Secret `<namespace>/<name>` (key: client name, value: its token), re-read at most
    every `cache_seconds`. Only the sha256 of each token is kept in memory."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str = DEFAULT_CLIENTS_SECRET, *,
                 cache_seconds: float = 10.0) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace, self.name, self.cache_seconds = namespace, name, cache_seconds
        self._lock = threading.Lock()
        self._tokens: dict[str, bytes] = {}
        self._read_at = float("-inf")

    def _load(self) -> dict[str, bytes]:
        with self._lock:
            if time.monotonic() - self._read_at < self.cache_seconds:
                return self._tokens
            try:
                secret = get_or_none(self.core.read_namespaced_secret, self.name, self.namespace,
                                     timeout=CATALOG_SECRET_TIMEOUT)
                data = (secret.data or {}) if secret is not None else {}  # no Secret: no client is allowed
            except ApiException as exc:  # anything but absent
                raise CredentialsUnavailable(f"Secret {self.namespace}/{self.name}: HTTP {exc.status}") from None
            except (Urllib3Error, OSError) as exc:
                raise CredentialsUnavailable(f"Secret {self.namespace}/{self.name}: {type(exc).__name__}") from None
            values: dict[str, str] = {}
            for key, raw in data.items():
                try:
                    values[key] = base64.b64decode(raw, validate=True).decode("utf-8").strip()
                except (binascii.Error, UnicodeDecodeError, ValueError):
                    log.warning("Secret %s/%s: the value of key %r is not text; ignored", self.namespace, self.name,
                                key)
            self._tokens = _token_digests(values)
            ignored = sorted(set(values) - set(self._tokens))
            if ignored:
                log.warning("Secret %s/%s: keys %s hold no usable token (at least %d visible ASCII characters); "
                            "ignored", self.namespace, self.name, ", ".join(ignored), MIN_CLIENT_TOKEN_CHARS)
            self._read_at = time.monotonic()
            return self._tokens

    def identify(self, presented: str) -> str | None:
        return _match(presented, self._load())


# -- grant tokens --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GrantClaims:
    repository: str
    digests: frozenset[str]
    expires_at: int
    subject: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class GrantSigner:
    """Issues and verifies grant tokens with one HMAC-SHA256 key."""

    def __init__(self, key: bytes | None = None, ttl: dt.timedelta = DEFAULT_GRANT_TTL, *,
                 clock: Callable[[], float] = time.time) -> None:
        if key is not None and len(key) < 32:
            raise ValueError("a grant signing key has at least 32 bytes")
        if not dt.timedelta(seconds=1) <= ttl <= MAX_GRANT_TTL:
            raise ValueError(f"the grant lifetime must be between 1 s and {MAX_GRANT_TTL}")
        self._key = key or secrets.token_bytes(32)
        self.ttl = ttl
        self._clock = clock

    def __repr__(self) -> str:
        return f"GrantSigner(ttl={self.ttl})"

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, _SIGNATURE_CONTEXT + payload.encode("ascii"), hashlib.sha256).digest())

    def issue(self, repository: str, digests: Iterable[str], subject: str) -> tuple[str, int]:
        """(token, expiry as unix seconds)."""
        now = int(self._clock())
        expires = now + int(self.ttl.total_seconds())
        claims = {"v": 1, "repo": repository, "d": sorted(set(digests)), "iat": now, "exp": expires, "sub": subject}
        payload = _b64(canonical_json(claims))
        return f"{GRANT_TOKEN_PREFIX}.{payload}.{self._sign(payload)}", expires

    def verify(self, token: str) -> GrantClaims | None:
        """The claims of a valid, unexpired token; None for anything else."""
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != GRANT_TOKEN_PREFIX:
            return None
        try:
            if not hmac.compare_digest(parts[2].encode("ascii"), self._sign(parts[1]).encode("ascii")):
                return None
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, UnicodeError, binascii.Error):
            return None
        if not isinstance(claims, dict) or claims.get("v") != 1:
            return None
        expires, digests = claims.get("exp"), claims.get("d")
        if not isinstance(expires, int) or expires <= self._clock() or not isinstance(digests, list):
            return None
        return GrantClaims(repository=str(claims.get("repo")), digests=frozenset(str(d) for d in digests),
                           expires_at=expires, subject=str(claims.get("sub")))


# -- the upstream registry -----------------------------------------------------------------------------------


class _UpstreamFailed(Exception):
    """This cluster's registry did not answer as it should (502 to the caller)."""


class _Upstream:
    """Reads from this cluster's own registry (plain http), with the blob sets of manifests cached."""

    def __init__(self, address: str, repository: str, *, cache_size: int = 1024) -> None:
        self.base = f"http://{address}/v2/{repository}"
        self.pool = urllib3.PoolManager(num_pools=4, maxsize=16, retries=False,
                                        timeout=urllib3.Timeout(connect=5.0, read=60.0))
        self._blob_sets: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._lock = threading.Lock()
        self._cache_size = cache_size

    def manifest(self, digest: str) -> tuple[bytes, str] | None:
        """(bytes, content type) of the manifest, verified against its digest; None when the registry lacks it."""
        try:
            response = self.pool.request("GET", f"{self.base}/manifests/{digest}", preload_content=False,
                                         headers={"Accept": ", ".join(mt.MANIFEST_ACCEPT)}, redirect=False)
        except Urllib3Error as exc:
            raise _UpstreamFailed(f"registry unreachable: {type(exc).__name__}") from None
        try:
            if response.status == 404:
                return None
            if response.status != 200:
                raise _UpstreamFailed(f"registry answered HTTP {response.status} for manifest {digest}")
            raw = response.read(MAX_MANIFEST_BYTES + 1)
        finally:
            response.release_conn()
        if len(raw) > MAX_MANIFEST_BYTES:
            raise _UpstreamFailed(f"manifest {digest} is larger than {MAX_MANIFEST_BYTES} bytes")
        if "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
            raise _UpstreamFailed(f"manifest {digest}: the registry's bytes do not hash to it")
        content_type = (response.headers.get("Content-Type") or mt.OCI_MANIFEST).split(";")[0].strip()
        self._remember(digest, raw)
        return raw, content_type

    def _remember(self, digest: str, raw: bytes) -> frozenset[str]:
        blobs: set[str] = set()
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            body = None
        if isinstance(body, dict):
            layers = body.get("layers")
            descriptors = [body.get("config"), *(layers if isinstance(layers, list) else [])]
            for d in descriptors:
                if isinstance(d, dict) and isinstance(d.get("digest"), str) and DIGEST.match(d["digest"]):
                    blobs.add(d["digest"])
        found = frozenset(blobs)
        with self._lock:
            self._blob_sets[digest] = found
            self._blob_sets.move_to_end(digest)
            while len(self._blob_sets) > self._cache_size:
                self._blob_sets.popitem(last=False)
        return found

    def blob_set(self, manifest_digest: str) -> frozenset[str]:
        with self._lock:
            cached = self._blob_sets.get(manifest_digest)
        if cached is not None:
            return cached
        found = self.manifest(manifest_digest)
        if found is None:
            return frozenset()
        with self._lock:
            return self._blob_sets.get(manifest_digest, frozenset())

    def blob(self, method: str, digest: str) -> urllib3.BaseHTTPResponse:
        try:
            return self.pool.request(method, f"{self.base}/blobs/{digest}", preload_content=False, redirect=True)
        except Urllib3Error as exc:
            raise _UpstreamFailed(f"registry unreachable: {type(exc).__name__}") from None

    def close(self) -> None:
        self.pool.clear()


# -- the server ----------------------------------------------------------------------------------------------


class _Reply(Exception):
    def __init__(self, status: int, body: Mapping[str, Any] | bytes | None = None,
                 headers: Mapping[str, str] | None = None, content_type: str = "application/json") -> None:
        super().__init__(status)
        self.status, self.body, self.headers, self.content_type = status, body, dict(headers or {}), content_type


def _oci_error(status: int, code: str, message: str, *, challenge: bool = False) -> _Reply:
    headers = {"WWW-Authenticate": 'Bearer realm="servingops-catalog"'} if challenge else {}
    return _Reply(status, {"errors": [{"code": code, "message": message}]}, headers)


def _catalog_unauthorized() -> _Reply:
    return _Reply(401, {"error": "missing or invalid catalog credential"},
                  {"WWW-Authenticate": 'Bearer realm="servingops-catalog"'})


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: CatalogEndpointServer, max_connections: int) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.app = app
        self.slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            log.warning("catalog endpoint: too many connections; closing one from %s", client_address[0])
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("catalog connection from %s ended with an error", client_address[0], exc_info=True)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer
    server_version = "servingops-catalog"
    client_name = "-"

    def version_string(self) -> str:
        return self.server_version

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(IO_TIMEOUT)
        self.connection.do_handshake()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _path(self) -> str:
        return self.path.split("?", 1)[0]

    def _dispatch(self, method: str) -> None:
        app = self.server.app
        self.client_name = "-"
        try:
            if len(self.path.encode("utf-8", "replace")) > MAX_PATH_BYTES:
                raise _Reply(414, {"error": f"the request path is longer than {MAX_PATH_BYTES} bytes"})
            if method != "POST" and (self.headers.get("Content-Length", "0") not in ("", "0")
                                     or self.headers.get("Transfer-Encoding")):
                self.close_connection = True
                raise _Reply(400, {"error": "this request takes no body"})
            path = self._path()
            if path == HEALTH_PATH and method in ("GET", "HEAD"):
                raise _Reply(200, {"status": "ok"})
            if path == INDEX_PATH:
                app.handle_index(self, method)
            elif path == GRANTS_PATH:
                app.handle_grant(self, method)
            elif path == "/v2" or path.startswith("/v2/"):
                app.handle_registry(self, method, path)
            else:
                raise _Reply(404, {"error": "not found"})
        except _Reply as reply:
            self._send(reply, head=method == "HEAD")
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception:
            log.exception("catalog endpoint: %s %s failed", method, self._path())
            self.close_connection = True
            self._send(_Reply(500, {"error": "internal error"}), head=method == "HEAD")

    def bearer(self) -> str | None:
        value = self.headers.get("Authorization") or ""
        if len(value) > MAX_AUTH_HEADER:
            return None
        scheme, _, token = value.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or not _TOKEN_TEXT.match(token):
            return None
        return token

    def _send(self, reply: _Reply, *, head: bool = False) -> None:
        if isinstance(reply.body, bytes):
            data = reply.body
        elif reply.body is None:
            data = b""
        else:
            data = json.dumps(reply.body).encode()
        try:
            self.send_response(reply.status)
            if data or reply.body is not None:
                self.send_header("Content-Type", reply.content_type)
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if not head and reply.status != 304:
                self.wfile.write(data)
        except (ConnectionError, TimeoutError):
            self.close_connection = True

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        log.debug("%s %s %s -> %s (client %s)", self.address_string(), self.command, self._path(), code,
                  self.client_name)

    def log_message(self, format: str, *args: Any) -> None:
        # BaseHTTPRequestHandler's own messages (bad request lines): no header ever reaches them.
        log.debug("%s %s", self.address_string(), format % args)


def _drain(handler: _Handler, length: int) -> None:
    """Read and drop up to DRAIN_LIMIT bytes of a refused body, so a client still sending it gets to read the
    answer instead of a reset; beyond that the connection is just closed."""
    left = min(length, DRAIN_LIMIT)
    try:
        while left > 0:
            piece = handler.rfile.read(min(left, 64 << 10))
            if not piece:
                return
            left -= len(piece)
    except (OSError, ValueError):
        return


class CatalogEndpointServer:
    """The catalog endpoint's HTTPS server; start() and stop() from a process (or a test).

    `models` lists the cluster's ClusterModels (KubeClusterModels, or a fixed function); `clients` checks
    catalog credentials (KubeSecretClientCredentials or StaticClientCredentials); `registry` is this cluster's
    registry (`host:port`, plain http) and `repository` the repository its models are published to."""

    def __init__(self, host: str, port: int, cert_file: Path | str, key_file: Path | str, *,
                 models: ClusterModelLister, clients: ClientCredentials, registry: str,
                 repository: str = DEFAULT_REPOSITORY, signing_key: bytes | None = None,
                 grant_ttl: dt.timedelta = DEFAULT_GRANT_TTL, max_connections: int = 64) -> None:
        self.host, self.requested_port = host, port
        self.cert_file, self.key_file = Path(cert_file), Path(key_file)
        self.models, self.clients = models, clients
        self.registry, self.repository = registry, repository
        self.signer = GrantSigner(signing_key, grant_ttl)
        self.upstream = _Upstream(registry, repository)
        self.max_connections = max_connections
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.requested_port if self._httpd is None else int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    def start(self) -> CatalogEndpointServer:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        httpd = _HTTPServer((self.host, self.requested_port), self, self.max_connections)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="catalog-https", daemon=True)
        self._thread.start()
        log.info("catalog endpoint listening on %s (registry %s/%s, grants valid %s)", self.url, self.registry,
                 self.repository, self.signer.ttl)
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.upstream.close()

    def __enter__(self) -> CatalogEndpointServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- the catalog API -----------------------------------------------------------------------------------

    def index(self) -> PublishedIndex:
        try:
            return build_index(self.models(), self.repository)
        except (ApiException, Urllib3Error, OSError) as exc:
            log.warning("catalog endpoint: cannot list ClusterModels: %s", type(exc).__name__)
            raise _Reply(503, {"error": "the cluster's models cannot be read right now; retry"}) from None

    def _client(self, handler: _Handler) -> str:
        presented = handler.bearer()
        if presented is None:
            raise _catalog_unauthorized()
        try:
            name = self.clients.identify(presented)
        except CredentialsUnavailable as exc:
            log.warning("catalog endpoint: %s", exc)
            raise _Reply(503, {"error": "the catalog credentials cannot be read right now; retry"}) from None
        if name is None:
            raise _catalog_unauthorized()
        handler.client_name = name
        return name

    def handle_index(self, handler: _Handler, method: str) -> None:
        if method not in ("GET", "HEAD"):
            raise _Reply(405, {"error": "GET only"}, {"Allow": "GET, HEAD"})
        self._client(handler)
        published = self.index()
        raise _Reply(200, published.content, {"ETag": f'"{published.revision}"'}, content_type=INDEX_CONTENT_TYPE)

    def handle_grant(self, handler: _Handler, method: str) -> None:
        if method != "POST":
            raise _Reply(405, {"error": "POST only"}, {"Allow": "POST"})
        if handler.headers.get("Transfer-Encoding"):
            handler.close_connection = True
            raise _Reply(411, {"error": "send the grant request with Content-Length"})
        try:
            length = int(handler.headers.get("Content-Length") or "-1")
        except ValueError:
            length = -1
        if length < 0:
            handler.close_connection = True
            raise _Reply(411, {"error": "send the grant request with Content-Length"})
        if length > MAX_GRANT_BODY:
            handler.close_connection = True
            _drain(handler, length)
            raise _Reply(413, {"error": f"a grant request is at most {MAX_GRANT_BODY} bytes"})
        raw = handler.rfile.read(length)
        client_name = self._client(handler)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            raise _Reply(400, {"error": "the body is not JSON"}) from None
        digests = body.get("digests") if isinstance(body, dict) else None
        if (not isinstance(digests, list) or not 1 <= len(digests) <= MAX_GRANT_DIGESTS
                or not all(isinstance(d, str) and DIGEST.match(d) for d in digests)):
            raise _Reply(400, {"error": f'the body is {{"digests": [1..{MAX_GRANT_DIGESTS} sha256 digests]}}'})
        published = self.index()
        refused = sorted({d for d in digests if d not in published.digests})
        if refused:
            log.info("catalog endpoint: grant refused to client %s: %d digest(s) not published", client_name,
                     len(refused))
            raise _Reply(403, {"reason": "DigestNotPublished",
                               "error": f"{len(refused)} digest(s) are not in the published index",
                               "digests": refused})
        wanted = sorted(set(digests))
        token, expires = self.signer.issue(self.repository, wanted, client_name)
        expires_at = dt.datetime.fromtimestamp(expires, dt.UTC)
        log.info("catalog endpoint: granted %d artifact(s) to client %s until %s", len(wanted), client_name,
                 expires_at.isoformat())
        raise _Reply(200, {"token": token, "expiresAt": expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                           "expiresIn": int(self.signer.ttl.total_seconds()), "repository": self.repository,
                           "digests": wanted})

    # -- the registry subset --------------------------------------------------------------------------------

    def _grant(self, handler: _Handler) -> GrantClaims:
        token = handler.bearer()
        claims = self.signer.verify(token) if token is not None else None
        if claims is None:
            raise _oci_error(401, "UNAUTHORIZED", "a valid grant token is required", challenge=True)
        handler.client_name = claims.subject
        return claims

    def handle_registry(self, handler: _Handler, method: str, path: str) -> None:
        claims = self._grant(handler)
        if method not in ("GET", "HEAD"):
            raise _oci_error(403, "DENIED", "this registry is read-only")
        if path in ("/v2", "/v2/"):
            raise _Reply(200, {}, {"Docker-Distribution-API-Version": "registry/2.0"})
        match = _V2_PATH.match(path)
        if match is None or match["repo"] != self.repository or claims.repository != self.repository:
            raise _oci_error(403, "DENIED", "not granted")
        ref = match["ref"]
        if not DIGEST.match(ref):
            raise _oci_error(403, "DENIED", "only digests that were granted can be pulled")
        try:
            if match["kind"] == "manifests":
                self._serve_manifest(handler, method, claims, ref)
            else:
                self._serve_blob(handler, method, claims, ref)
        except _UpstreamFailed as exc:
            log.warning("catalog endpoint: %s", exc)
            raise _oci_error(502, "UNAVAILABLE", "the registry behind this endpoint failed") from None

    def _serve_manifest(self, handler: _Handler, method: str, claims: GrantClaims, digest: str) -> None:
        if digest not in claims.digests:
            raise _oci_error(403, "DENIED", "this manifest was not granted")
        found = self.upstream.manifest(digest)
        if found is None:
            raise _oci_error(404, "MANIFEST_UNKNOWN", "manifest unknown")
        raw, content_type = found
        raise _Reply(200, raw, {"Docker-Content-Digest": digest}, content_type=content_type)

    def _serve_blob(self, handler: _Handler, method: str, claims: GrantClaims, digest: str) -> None:
        if not any(digest in self.upstream.blob_set(m) for m in sorted(claims.digests)):
            raise _oci_error(403, "DENIED", "this blob is not referenced by a granted manifest")
        response = self.upstream.blob(method, digest)
        try:
            if response.status == 404:
                raise _oci_error(404, "BLOB_UNKNOWN", "blob unknown")
            if response.status != 200:
                raise _UpstreamFailed(f"registry answered HTTP {response.status} for blob {digest}")
            length = response.headers.get("Content-Length")
            handler.send_response(200)
            handler.send_header("Content-Type", "application/octet-stream")
            handler.send_header("Docker-Content-Digest", digest)
            if length is not None and length.isdigit():
                handler.send_header("Content-Length", length)
            else:
                handler.close_connection = True
                handler.send_header("Connection", "close")
            handler.end_headers()
            if method == "HEAD":
                return
            sent = 0
            try:
                while piece := response.read(STREAM_BLOCK):
                    handler.wfile.write(piece)
                    sent += len(piece)
            except Urllib3Error:
                handler.close_connection = True  # the caller sees a short body and retries
                log.warning("catalog endpoint: the registry broke off blob %s after %d bytes", digest, sent)
        finally:
            response.release_conn()


def serve(host: str, port: int, cert_file: Path | str, key_file: Path | str, *, api_client: client.ApiClient,
          namespace: str, registry: str, repository: str = DEFAULT_REPOSITORY,
          clients_secret: str = DEFAULT_CLIENTS_SECRET, signing_key: bytes | None = None,
          grant_ttl: dt.timedelta = DEFAULT_GRANT_TTL, label_selector: str | None = None) -> CatalogEndpointServer:
    """The endpoint of a cluster, reading its ClusterModels and its clients Secret with `api_client`, started."""
    return CatalogEndpointServer(
        host, port, cert_file, key_file, models=KubeClusterModels(api_client, label_selector=label_selector),
        clients=KubeSecretClientCredentials(api_client, namespace, clients_secret), registry=registry,
        repository=repository, signing_key=signing_key, grant_ttl=grant_ttl).start()



# -- the process ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EndpointSettings:
    listen: str
    cert_file: Path
    key_file: Path
    kubeconfig: str | None
    namespace: str
    clients_secret: str
    registry: str
    repository: str
    signing_key_file: Path | None
    grant_ttl: dt.timedelta
    label_selector: str | None

    @property
    def host_port(self) -> tuple[str, int]:
        return listen_address(self.listen)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags = Flags(parser)
    flags.https_listener("SERVINGOPS_CATALOG", "0.0.0.0:8444", "/etc/servingops/catalog-tls")
    flags.kubeconfig()
    flags.controller_namespace(help="where the clients Secret lives")
    flags.value("--clients-secret", "SERVINGOPS_CATALOG_CLIENTS_SECRET", DEFAULT_CLIENTS_SECRET,
                help="the Secret of client tokens, one key per client")
    flags.registry(help="host:port of this cluster's registry, plain http")
    flags.registry_repository()
    flags.value("--signing-key-file", "SERVINGOPS_CATALOG_SIGNING_KEY_FILE",
                help="a file of at least 32 bytes that signs grants; the same for every replica; none: a key "
                     "generated at start")
    flags.value("--grant-ttl-seconds", "SERVINGOPS_CATALOG_GRANT_TTL", 900, kind=int,
                help="how long a grant is valid")
    flags.value("--label-selector", "SERVINGOPS_CATALOG_LABEL_SELECTOR",
                help="publish only the ClusterModels matching it")


def from_arguments(args: argparse.Namespace) -> EndpointSettings:
    return EndpointSettings(
        listen=args.listen, cert_file=Path(args.tls_cert), key_file=Path(args.tls_key), kubeconfig=args.kubeconfig,
        namespace=args.controller_namespace, clients_secret=args.clients_secret, registry=args.registry,
        repository=args.registry_repository,
        signing_key_file=Path(args.signing_key_file) if args.signing_key_file else None,
        grant_ttl=dt.timedelta(seconds=args.grant_ttl_seconds), label_selector=args.label_selector or None)


def run(settings: EndpointSettings, stop: threading.Event) -> None:
    """Serve until `stop` is set."""
    api_client = load_api_client(settings.kubeconfig)
    key = settings.signing_key_file.read_bytes() if settings.signing_key_file is not None else None
    host, port = settings.host_port
    server = serve(host, port, settings.cert_file, settings.key_file, api_client=api_client,
                   namespace=settings.namespace, registry=settings.registry, repository=settings.repository,
                   clients_secret=settings.clients_secret, signing_key=key, grant_ttl=settings.grant_ttl,
                   label_selector=settings.label_selector)
    try:
        stop.wait()
    finally:
        server.stop()
        api_client.close()  # type: ignore[no-untyped-call]
        log.info("catalog endpoint stopped")


PROCESS = Process("catalog-endpoint", __doc__ or "", add_arguments, from_arguments)


def main(argv: list[str] | None = None) -> None:
    run_threaded(PROCESS, argv, run)


if __name__ == "__main__":
    main()
