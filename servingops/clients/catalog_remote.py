"""The consuming side of a `type: Catalog` ModelCatalogSource: another cluster's catalog endpoint, over HTTPS.

The remote runs servingops' catalog endpoint (ingress/catalog_endpoint.py). This module holds the wire
format both sides share (paths, the index document, its revision) and the client calls:

- `fetch_remote_index(url, ca_pem, credential) -> RemoteIndex`: `GET <url>/catalog/v1/index`;
- `request_grant(url, ca_pem, credential, digests) -> Grant`: `POST <url>/catalog/v1/grants`, which trades the
  catalog credential for a short-lived, read-only pull token for exactly those artifact digests;
- `RemoteCatalog`: the HTTPS connection both use, and activities/catalog/copy.py for the `/v2/` pulls.

Transport rules: https only (an `http://` URL is refused before any connection, `CatalogURLInvalid`); the server
is verified with the CA of the source's `caSecretName` (`ca.crt`) when one is given, else with the system's
trust store; a CA given replaces the system store (only certificates it signs are trusted). Hostnames are
checked. Redirects are not followed. Every response body is read in pieces up to a cap: a body beyond it is
abandoned (`CatalogResponseTooLarge`), never loaded whole.

Every failure is a `CatalogRemoteError` subclass carrying its own reason (an `ErrorType` member,
api_models/errors.py), the value the workflow writes as the Ready condition's reason; `retryable` says
whether asking again may help. The activities (activities/catalog/remote_activities.py) raise it as an
activity error of that reason; nothing here knows Temporal.
The credential and any grant token are never part of a message, a log line or a repr.

Index document (canonical JSON: sorted keys, no whitespace, UTF-8):

    {"schemaVersion": "v1", "revision": "sha256:<hex>", "repository": "<repo on the remote's /v2/>",
     "entries": [{"name", "version"?, "digest", "mediaType", "sizeBytes"?, "artifactType"?, "resolved"?}, ...]}

`revision` is `sha256` of the canonical JSON of the `entries` array (entries sorted by name, version, digest):
the same inventory always gives the same revision. The client recomputes it and refuses a document whose
revision does not match its entries (`CatalogResponseMalformed`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
import json
import re
import socket
import ssl
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from servingops.api_models.base import DNS1123_SUBDOMAIN
from servingops.api_models.canonical import canonical_json
from servingops.api_models.errors import ErrorType

# -- the wire format (shared with ingress/catalog_endpoint.py) ---------------------------------------------

INDEX_PATH = "/catalog/v1/index"
GRANTS_PATH = "/catalog/v1/grants"
REGISTRY_PREFIX = "/v2/"
SCHEMA_VERSION = "v1"
INDEX_CONTENT_TYPE = "application/vnd.servingops.catalog.index.v1+json"
GRANT_TOKEN_PREFIX = "scg1"

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
DIGEST = re.compile(DIGEST_PATTERN)
MAX_GRANT_DIGESTS = 64
"""Artifacts one grant may name (the token names each of them, so it stays a few kilobytes)."""
MAX_INDEX_BYTES = 16 << 20
"""Default cap of an index response: 10,000 entries of about 1 KiB each, with room."""
MAX_SMALL_RESPONSE_BYTES = 1 << 20
"""Cap of a grant answer and of an error body."""
MAX_MANIFEST_BYTES = 4 << 20
"""Distribution's own limit on manifests."""
MAX_CREDENTIAL_CHARS = 4096
DEFAULT_TIMEOUT = 30.0
"""Seconds for the connection and for each read; a stalled server fails the call instead of hanging it."""

_TOKEN_TEXT = re.compile(r"^[\x21-\x7e]{1,4096}$")


def entry_sort_key(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(entry.get("name", "")), str(entry.get("version") or ""), str(entry.get("digest", "")))


def index_revision(entries: Sequence[Mapping[str, Any]]) -> str:
    """`sha256:<hex>` of the canonical JSON of the entries array, as the endpoint sends it (sorted)."""
    return "sha256:" + hashlib.sha256(canonical_json(list(entries))).hexdigest()


def index_document(entries: Iterable[Mapping[str, Any]], repository: str) -> tuple[bytes, str]:
    """The canonical index document of `entries` (sorted, duplicates of name+version+digest dropped) and its
    revision."""
    unique = {entry_sort_key(e): dict(e) for e in entries}
    ordered = [unique[key] for key in sorted(unique)]
    revision = index_revision(ordered)
    body = {"schemaVersion": SCHEMA_VERSION, "revision": revision, "repository": repository, "entries": ordered}
    return canonical_json(body), revision


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True,
                              extra="ignore", frozen=True)


class RemoteEntry(_Wire):
    """One published ClusterModel of the remote cluster."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)
    """The public catalog name (what `spec.source.catalog.name` selects)."""
    version: str | None = Field(default=None, min_length=1, max_length=128)
    digest: str = Field(pattern=DIGEST_PATTERN)
    """The artifact's manifest digest on the remote registry."""
    media_type: str = Field(min_length=1, max_length=256)
    """The manifest's media type."""
    size_bytes: int | None = Field(default=None, ge=1)
    """The artifact's size (manifest, config and layers) as the remote's status says."""
    artifact_type: str | None = Field(default=None, max_length=256)
    resolved: dict[str, Any] | None = None
    """The remote's `status.resolved` (camelCase keys, as the API writes it)."""


class RemoteIndex(_Wire):
    """A remote catalog's inventory at one revision."""

    revision: str = Field(pattern=DIGEST_PATTERN)
    repository: str = Field(min_length=1, max_length=255)
    """The repository under the endpoint's `/v2/` that serves the artifacts."""
    entries: list[RemoteEntry]

    def find(self, name: str, version: str | None = None) -> list[RemoteEntry]:
        """The entries of `name` (of `version` when given)."""
        return [e for e in self.entries if e.name == name and (version is None or e.version == version)]

    def digests(self) -> frozenset[str]:
        return frozenset(e.digest for e in self.entries)


@dataclass(frozen=True)
class Grant:
    """A short-lived, read-only pull credential for exactly `digests` on the remote's `/v2/<repository>`.

    `token` is a credential: it is never in a repr, a log line, a Temporal payload or an error message."""

    base_url: str
    repository: str
    digests: tuple[str, ...]
    expires_at: dt.datetime
    token: str = field(repr=False)

    def expired(self, *, margin: float = 0.0) -> bool:
        return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=margin) >= self.expires_at


# -- errors --------------------------------------------------------------------------------------------------


class CatalogRemoteError(Exception):
    """A remote catalog call failed; `reason` is the condition reason, `retryable` whether asking again may
    help without anything changing."""

    reason: ClassVar[ErrorType]

    @property
    def retryable(self) -> bool:
        return not self.reason.permanent


class CatalogURLInvalid(CatalogRemoteError):
    """Not an `https://host[:port][/path]` URL (http, userinfo, query or fragment)."""

    reason = ErrorType.CATALOG_URL_INVALID


class CatalogCAInvalid(CatalogRemoteError):
    """The CA given (`ca.crt` of caSecretName) is not a PEM certificate."""

    reason = ErrorType.CATALOG_CA_INVALID


class CatalogUnreachable(CatalogRemoteError):
    """No answer: DNS, refused or reset connection, timeout, TLS handshake failure other than an untrusted
    certificate, or the endpoint answered 5xx, 408 or 429."""

    reason = ErrorType.CATALOG_UNREACHABLE


class CatalogCertificateUntrusted(CatalogRemoteError):
    """The server's certificate is not signed by the CA (or not valid for the URL's host)."""

    reason = ErrorType.CATALOG_CERTIFICATE_UNTRUSTED


class CatalogCredentialsRejected(CatalogRemoteError):
    """The endpoint answered 401 or 403 to the catalog credential."""

    reason = ErrorType.CATALOG_CREDENTIALS_REJECTED


class CatalogResponseMalformed(CatalogRemoteError):
    """The answer is not JSON, not the schema, or its revision does not match its entries."""

    reason = ErrorType.CATALOG_RESPONSE_MALFORMED


class CatalogResponseTooLarge(CatalogRemoteError):
    """The answer is beyond the size cap (said by Content-Length, or seen while reading)."""

    reason = ErrorType.CATALOG_RESPONSE_TOO_LARGE


class CatalogEndpointError(CatalogRemoteError):
    """An answer no call expects: a redirect, 404 or another 4xx."""

    reason = ErrorType.CATALOG_ENDPOINT_ERROR


class CatalogGrantRefused(CatalogRemoteError):
    """The grant exchange refused the artifacts (403: not published, too many), or the grant does not cover
    what a pull needs."""

    reason = ErrorType.CATALOG_GRANT_REFUSED


class CatalogArtifactNotFound(CatalogRemoteError):
    """The remote's registry does not have the manifest or a blob it references (the entry vanished)."""

    reason = ErrorType.CATALOG_ARTIFACT_NOT_FOUND


class CatalogArtifactUnsupported(CatalogRemoteError):
    """The artifact is not a single OCI image manifest (an index, a schema 1 manifest)."""

    reason = ErrorType.CATALOG_ARTIFACT_UNSUPPORTED


class ArtifactDigestMismatch(CatalogRemoteError):
    """A blob's or the manifest's bytes do not hash to their digest (or not to their declared size)."""

    reason = ErrorType.ARTIFACT_DIGEST_MISMATCH


# -- the connection ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogURL:
    host: str
    port: int
    path: str
    """The base path without its trailing slash ('' at the root)."""

    @property
    def base(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}{self.path}"


def parse_catalog_url(url: str) -> CatalogURL:
    """The URL's parts; `CatalogURLInvalid` for anything but `https://host[:port][/path]`."""
    if not isinstance(url, str) or len(url) > 2048:
        raise CatalogURLInvalid("the catalog URL is missing or longer than 2048 characters")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise CatalogURLInvalid(f"the catalog URL {_quote(url)} is not a URL: {exc}") from None
    if parts.scheme.lower() != "https":
        raise CatalogURLInvalid(f"the catalog URL {_quote(url)} is not https: only https catalog endpoints are "
                                "reachable")
    if not parts.hostname or parts.username is not None or parts.password is not None:
        raise CatalogURLInvalid(f"the catalog URL {_quote(url)} needs a host and no user information")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise CatalogURLInvalid(f"the catalog URL {_quote(url)} may not have a query or a fragment")
    return CatalogURL(host=parts.hostname, port=port or 443, path=parts.path.rstrip("/"))


def _quote(url: str) -> str:
    """A URL for a message: bounded, without user information or query (they could carry a secret)."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2]
        shown = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    except ValueError:
        shown = "<unparseable>"
    return repr(shown[:200])


def tls_context(ca_pem: str | None) -> ssl.SSLContext:
    """Verification with exactly the CA given, or the system's trust store when none is; TLS 1.2 or newer."""
    try:
        context = ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
    except (ssl.SSLError, ValueError) as exc:
        raise CatalogCAInvalid(f"the CA (ca.crt) is not a PEM certificate: {type(exc).__name__}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def check_credential(credential: str | None) -> None:
    if credential is not None and not _TOKEN_TEXT.match(credential):
        # Say nothing about the value itself.
        raise CatalogCredentialsRejected("the catalog credential is not a single line of visible ASCII "
                                         f"(1..{MAX_CREDENTIAL_CHARS} characters)")


class RemoteCatalog:
    """HTTPS calls to one catalog endpoint, verified with one CA. One connection per call (thread-safe)."""

    def __init__(self, url: str, ca_pem: str | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = parse_catalog_url(url)
        self._context = tls_context(ca_pem)
        self.timeout = timeout

    @property
    def base_url(self) -> str:
        return self.url.base

    def __repr__(self) -> str:
        return f"RemoteCatalog({self.url.base!r})"

    @contextmanager
    def request(self, method: str, path: str, *, headers: Mapping[str, str] | None = None,
                body: bytes | None = None) -> Iterator[http.client.HTTPResponse]:
        """One request to `<base path><path>`; yields the response with its body unread. Transport failures
        become `CatalogUnreachable` / `CatalogCertificateUntrusted`."""
        target = self.url.path + path
        where = f"{method} {self.url.base}{path}"
        conn = http.client.HTTPSConnection(self.url.host, self.url.port, timeout=self.timeout,
                                           context=self._context)
        try:
            try:
                conn.request(method, target, body=body, headers=dict(headers or {}))
                response = conn.getresponse()
            except Exception as exc:
                raise transport_error(where, exc) from None
            yield response
        finally:
            conn.close()

    def read_body(self, response: http.client.HTTPResponse, limit: int, what: str) -> bytes:
        """The whole body, refused beyond `limit` bytes (Content-Length first, then while reading)."""
        declared = response.getheader("Content-Length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                raise CatalogResponseMalformed(f"{what}: Content-Length {declared[:40]!r} is not a number") from None
            if length > limit:
                raise CatalogResponseTooLarge(f"{what}: the answer has {length} bytes, more than the cap of {limit}")
        pieces: list[bytes] = []
        total = 0
        while True:
            try:
                piece = response.read(min(64 << 10, limit + 1 - total))
            except Exception as exc:
                raise transport_error(what, exc) from None
            if not piece:
                break
            total += len(piece)
            if total > limit:
                raise CatalogResponseTooLarge(f"{what}: the answer is longer than the cap of {limit} bytes")
            pieces.append(piece)
        return b"".join(pieces)

    def get_json(self, method: str, path: str, *, headers: Mapping[str, str], body: bytes | None, limit: int,
                 what: str) -> tuple[int, Any]:
        """(status, parsed JSON or None) of a call whose answer is JSON; the body is read only on 2xx/4xx."""
        with self.request(method, path, headers=headers, body=body) as response:
            status = response.status
            raise_for_server(status, what)
            raw = self.read_body(response, limit if 200 <= status < 300 else MAX_SMALL_RESPONSE_BYTES, what)
        if not 200 <= status < 300:
            return status, _loads_or_none(raw)
        try:
            return status, json.loads(raw)
        except (ValueError, RecursionError):
            raise CatalogResponseMalformed(f"{what}: the answer is not JSON") from None


def raise_for_server(status: int, what: str) -> None:
    """5xx, 408 and 429 (the server's trouble: retryable), and redirects (never followed)."""
    if status >= 500 or status in (408, 429):
        raise CatalogUnreachable(f"{what}: the endpoint answered HTTP {status}")
    if 300 <= status < 400:
        raise CatalogEndpointError(f"{what}: the endpoint answered a redirect (HTTP {status}); redirects are "
                                   "not followed: set the source's URL to the endpoint itself")


def _loads_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def transport_error(where: str, exc: BaseException) -> CatalogRemoteError:
    if isinstance(exc, CatalogRemoteError):
        return exc
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message or exc.reason or "verification failed"
        return CatalogCertificateUntrusted(f"{where}: the server's certificate is not trusted ({detail}); "
                                           "check the source's caSecretName (ca.crt)")
    if isinstance(exc, ssl.SSLError):
        return CatalogUnreachable(f"{where}: TLS handshake failed ({exc.reason or type(exc).__name__})")
    if isinstance(exc, socket.gaierror):
        return CatalogUnreachable(f"{where}: the host does not resolve ({exc.strerror})")
    if isinstance(exc, TimeoutError):
        return CatalogUnreachable(f"{where}: timed out")
    if isinstance(exc, OSError):
        return CatalogUnreachable(f"{where}: {exc.strerror or type(exc).__name__}")
    if isinstance(exc, http.client.HTTPException):
        return CatalogUnreachable(f"{where}: the connection broke ({type(exc).__name__})")
    return CatalogUnreachable(f"{where}: {type(exc).__name__}")


def _server_reason(body: Any) -> str:
    """The endpoint's own words from an error body, bounded and printable (it is a remote's text)."""
    if not isinstance(body, dict):
        return ""
    parts = [str(body.get(k)) for k in ("reason", "error") if isinstance(body.get(k), str)]
    text = ": ".join(parts)
    return "".join(c if c.isprintable() else "?" for c in text)[:300]


def _auth_headers(credential: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": "servingops-catalog"}
    if credential is not None:
        headers["Authorization"] = f"Bearer {credential}"
    return headers


# -- the calls -----------------------------------------------------------------------------------------------


def parse_index(body: Any, what: str = "catalog index") -> RemoteIndex:
    """A RemoteIndex from the parsed answer; `CatalogResponseMalformed` unless it is schema v1 and its revision
    is the digest of its entries."""
    if not isinstance(body, dict) or body.get("schemaVersion") != SCHEMA_VERSION:
        raise CatalogResponseMalformed(f"{what}: not a catalog index of schemaVersion {SCHEMA_VERSION}")
    entries = body.get("entries")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise CatalogResponseMalformed(f"{what}: entries is not a list of objects")
    try:
        index = RemoteIndex.model_validate(body)
    except ValidationError as exc:
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else "?"
        detail = errors[0]["msg"][:200] if errors else ""
        raise CatalogResponseMalformed(f"{what}: {exc.error_count()} schema error(s), first at {where}: "
                                       f"{detail}") from None
    computed = index_revision(entries)
    if computed != index.revision:
        raise CatalogResponseMalformed(f"{what}: revision {index.revision} is not the digest of its entries "
                                       f"({computed})")
    return index


def fetch_remote_index(url: str, ca_pem: str | None, credential: str | None, *,
                       max_bytes: int = MAX_INDEX_BYTES, timeout: float = DEFAULT_TIMEOUT) -> RemoteIndex:
    """The remote catalog's published inventory (`GET <url>/catalog/v1/index`).

    Raises CatalogURLInvalid, CatalogCAInvalid, CatalogUnreachable, CatalogCertificateUntrusted,
    CatalogCredentialsRejected, CatalogResponseMalformed, CatalogResponseTooLarge or CatalogEndpointError."""
    remote = RemoteCatalog(url, ca_pem, timeout=timeout)
    check_credential(credential)
    what = f"GET {remote.base_url}{INDEX_PATH}"
    status, body = remote.get_json("GET", INDEX_PATH, headers=_auth_headers(credential), body=None,
                                   limit=max_bytes, what=what)
    if status in (401, 403):
        raise CatalogCredentialsRejected(f"{what}: the endpoint rejected the catalog credential (HTTP {status}); "
                                         "check the source's credentialsSecretName (key token)")
    if status != 200:
        raise CatalogEndpointError(f"{what}: HTTP {status} {_server_reason(body)}".rstrip())
    return parse_index(body, what)


class _GrantAnswer(_Wire):
    token: str = Field(min_length=1, max_length=16384)
    expires_at: dt.datetime
    repository: str = Field(min_length=1, max_length=255)
    digests: list[str]


def request_grant(url: str, ca_pem: str | None, credential: str | None, digests: Sequence[str], *,
                  timeout: float = DEFAULT_TIMEOUT) -> Grant:
    """A pull credential for exactly `digests` (`POST <url>/catalog/v1/grants`).

    Raises CatalogGrantRefused (403: a digest not published, too many, or a grant narrower than asked), and
    the transport and credential errors of `fetch_remote_index`."""
    wanted = sorted(set(digests))
    if not wanted or len(wanted) > MAX_GRANT_DIGESTS or not all(DIGEST.match(d) for d in wanted):
        raise CatalogGrantRefused(f"a grant names 1..{MAX_GRANT_DIGESTS} sha256 digests; asked for {len(wanted)}"
                                  " or a digest that is not sha256:<64 hex>")
    remote = RemoteCatalog(url, ca_pem, timeout=timeout)
    check_credential(credential)
    what = f"POST {remote.base_url}{GRANTS_PATH}"
    headers = {**_auth_headers(credential), "Content-Type": "application/json"}
    status, body = remote.get_json("POST", GRANTS_PATH, headers=headers, body=canonical_json({"digests": wanted}),
                                   limit=MAX_SMALL_RESPONSE_BYTES, what=what)
    if status == 401:
        raise CatalogCredentialsRejected(f"{what}: the endpoint rejected the catalog credential (HTTP 401); "
                                         "check the source's credentialsSecretName (key token)")
    if status == 403:
        raise CatalogGrantRefused(f"{what}: the grant was refused: {_server_reason(body) or 'HTTP 403'}")
    if status != 200:
        raise CatalogEndpointError(f"{what}: HTTP {status} {_server_reason(body)}".rstrip())
    try:
        answer = _GrantAnswer.model_validate(body)
    except ValidationError:
        raise CatalogResponseMalformed(f"{what}: the answer is not a grant") from None
    if sorted(set(answer.digests)) != wanted:
        raise CatalogGrantRefused(f"{what}: the grant covers {len(answer.digests)} digest(s), not the "
                                  f"{len(wanted)} asked for")
    expires = answer.expires_at if answer.expires_at.tzinfo else answer.expires_at.replace(tzinfo=dt.UTC)
    return Grant(base_url=remote.base_url, repository=answer.repository, digests=tuple(wanted),
                 expires_at=expires, token=answer.token)
