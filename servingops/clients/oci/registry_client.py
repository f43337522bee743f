"""An OCI distribution client for model-sized blobs: oras-py's Registry, extended.

oras-py keeps what we want to reuse: one requests session, the token / basic auth backends
(`oras.auth`) with their 401 challenge handling inside `Registry.do_request`, docker config
loading, plain-HTTP (`insecure`) registries. What it lacks for multi-gigabyte weights:

- `put_upload` reads the whole blob into memory (`data=fd.read()`);
- `chunked_upload` holds a whole chunk in memory, always starts a new upload session, and has
  no way to learn what the registry already committed, so a crash restarts from byte 0;
- `upload_manifest` serialises the manifest itself (we need the exact bytes we hashed) and
  always sends the default manifest Content-Type;
- `do_request` retries any exception up to five times with sleeps of 3 to 83 seconds; for a
  PATCH that is wrong (the registry may have appended part of the chunk, and distribution
  cancels an upload whose `_state` no longer matches), and it hides failures from the
  Temporal retry policy that owns retries in this project.

So `ModelRegistry` subclasses `oras.provider.Registry` and adds methods; it calls the undecorated
`do_request` (auth handling kept, blind retry dropped), and streams every request body from the
file in small blocks, so memory stays at one read block whatever the chunk size.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import oras.auth
import oras.utils
import requests
from oras.provider import Registry
from pydantic import BaseModel
from requests.adapters import HTTPAdapter

from servingops.api_models.canonical import canonical_json
from servingops.clients.oci import media_types as mt
from servingops.clients.oci.modelpack import normalize_digest, sha256_digest

log = logging.getLogger(__name__)

MiB = 1024 * 1024
DEFAULT_CHUNK_SIZE = 64 * MiB
"""Bytes per PATCH. Bigger chunks mean fewer round trips; it costs no memory (bodies are streamed
in READ_BLOCK pieces), only the work redone when a chunk is interrupted mid-way."""
READ_BLOCK = 1 * MiB
"""Bytes read from disk and handed to the socket at a time: the client's memory per upload."""
DEFAULT_TIMEOUT = (15.0, 300.0)
"""(connect, read) seconds for every request; requests has no timeout by default, and a hung
socket must fail the activity instead of leaving a thread blocked forever."""

# Repository names as the distribution spec defines them (path components, lowercase).
_REPOSITORY = re.compile(r"^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*$")
_SESSION_GONE_CODES = {"BLOB_UPLOAD_UNKNOWN", "BLOB_UPLOAD_INVALID"}

# oras wraps do_request in a retry decorator (functools.wraps keeps the original as __wrapped__).
_do_request_once: Callable[..., requests.Response] = Registry.do_request.__wrapped__


class RegistryError(Exception):
    """A registry answered with an error (status set) or could not be reached (status None)."""

    def __init__(self, message: str, *, status: int | None = None, codes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.codes = codes

    @property
    def retryable(self) -> bool:
        """Network trouble, 5xx, 408 and 429 may pass; other 4xx will not by retrying alone."""
        return self.status is None or self.status >= 500 or self.status in (408, 429)


class BlobDigestMismatch(RegistryError):
    """The bytes uploaded from the file do not hash to the digest we declared."""


class LocalFileChanged(RegistryError):
    """The file is not the size we were told (it changed, or the input is wrong)."""

    @property
    def retryable(self) -> bool:
        return False


class _SessionLost(Exception):
    """The upload session is unusable (expired, cancelled, out of step): start a new one."""


@dataclass(frozen=True)
class RegistryCredentials:
    username: str
    password: str = field(repr=False)


class UploadResume(BaseModel):
    """Where an interrupted upload stands, as this client needs it to continue.

    The location is the registry's upload URL after the last committed chunk (for distribution
    it carries a signed `_state` with the offset; a stale one makes the registry cancel the
    upload, which is why it is recorded after every chunk). Its query may authorise the session
    (a signed state, a token, a pre-signed signature), so this is never stored as is:
    `activities/oci/resume.py` heartbeats it without the query and keeps the full URL on the host.
    """

    upload_location: str | None = None
    committed_offset: int = 0
    digest: str | None = None
    repository: str | None = None


@dataclass(frozen=True)
class UploadProgress:
    upload_location: str
    committed_offset: int
    """Bytes the registry holds for this upload."""
    in_flight_bytes: int
    """Bytes of the current chunk already sent but not yet acknowledged."""
    transferred_bytes: int
    """Bytes sent by this call so far (includes any re-sent after a restart)."""
    size: int

    def resume_point(self, repository: str, digest: str) -> UploadResume:
        return UploadResume(upload_location=self.upload_location, committed_offset=self.committed_offset,
                            digest=digest, repository=repository)


@dataclass(frozen=True)
class UploadResult:
    digest: str
    size: int
    transferred_bytes: int
    resumed_from: int
    """Offset the registry already held when this call started (0 when it started fresh)."""
    mounted: bool = False
    restarts: int = 0


@dataclass
class _Session:
    location: str
    offset: int
    started_at: int


@dataclass(frozen=True)
class ManifestDocument:
    digest: str
    media_type: str
    raw: bytes

    @property
    def json(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.raw)
        return result


class _TimeoutAdapter(HTTPAdapter):
    """Gives every request on the session a default timeout (requests has none)."""

    def __init__(self, timeout: tuple[float, float]) -> None:
        super().__init__()
        self._timeout = timeout

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self._timeout
        return super().send(request, **kwargs)


class _ChunkMeter:
    """Counts the bytes of one PATCH as they go out and reports progress now and then."""

    def __init__(self, session: _Session, size: int, sent: list[int],
                 on_progress: Callable[[UploadProgress], None] | None, interval: float) -> None:
        self.session, self.size, self.sent = session, size, sent
        self.on_progress, self.interval = on_progress, interval
        self.in_flight = 0
        self.last_report = time.monotonic()

    def on_block(self, n: int) -> None:
        self.sent[0] += n
        self.in_flight += n
        if self.on_progress and time.monotonic() - self.last_report >= self.interval:
            self.last_report = time.monotonic()
            self.on_progress(UploadProgress(self.session.location, self.session.offset, self.in_flight,
                                            self.sent[0], self.size))


class _FileRange:
    """A request body that streams bytes [offset, offset+length) of a file in small blocks.

    Re-iterable on purpose: oras' auth handling re-sends the same `data` object after a 401
    challenge, and each iteration re-opens the file at the offset, so a re-send is complete.
    Having `__len__` lets requests set Content-Length (no chunked transfer encoding, which
    some registries refuse on PATCH).
    """

    def __init__(self, path: str, offset: int, length: int, block: int,
                 on_block: Callable[[int], None]) -> None:
        self.path, self.offset, self.length, self.block = path, offset, length, block
        self.on_block = on_block

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[bytes]:
        with open(self.path, "rb") as fd:
            fd.seek(self.offset)
            remaining = self.length
            while remaining:
                data = fd.read(min(self.block, remaining))
                if not data:
                    raise LocalFileChanged(f"{self.path} ended before byte {self.offset + self.length}")
                remaining -= len(data)
                self.on_block(len(data))
                yield data


def parse_range(header: str | None, *, hint: int | None = None) -> int | None:
    """Bytes committed, from an upload's `Range: 0-<last>` header (None if absent/garbled).

    distribution answers `0-0` both for an empty upload and for one holding a single byte; we
    read it as 0 unless we expect exactly 1. Reading it wrong is safe: the next PATCH's answer
    would not match and the upload restarts.
    """
    if not header:
        return None
    match = re.fullmatch(r"\s*(?:bytes=)?0-(\d+)\s*", header)
    if not match:
        return None
    last = int(match.group(1))
    if last == 0:
        return 1 if hint == 1 else 0
    return last + 1


def file_sha256(path: str, *, block: int = READ_BLOCK, on_progress: Callable[[int], None] | None = None,
                progress_interval: float = 2.0) -> tuple[str, int]:
    """(digest, size) of a file, read in blocks; `on_progress(bytes_hashed)` every interval."""
    digest = hashlib.sha256()
    done = 0
    last = time.monotonic()
    with open(path, "rb") as fd:
        while data := fd.read(block):
            digest.update(data)
            done += len(data)
            if on_progress and time.monotonic() - last >= progress_interval:
                last = time.monotonic()
                on_progress(done)
    return "sha256:" + digest.hexdigest(), done


class ModelRegistry(Registry):  # type: ignore[misc]  # oras ships no type information
    """oras' Registry bound to one registry host, with streaming, resumable blob uploads."""

    def __init__(self, address: str, *, insecure: bool = False, tls_verify: bool | str = True,
                 credentials: RegistryCredentials | None = None,
                 timeout: tuple[float, float] = DEFAULT_TIMEOUT) -> None:
        super().__init__(hostname=address, insecure=insecure, tls_verify=tls_verify, auth_backend="token")
        self._insecure = insecure
        self._credentials = credentials
        self._auth_ready = False
        adapter = _TimeoutAdapter(timeout)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        if credentials is not None:
            # The token backend trades these for a bearer token at the realm the registry names.
            self.auth.set_basic_auth(credentials.username, credentials.password)

    def __str__(self) -> str:
        return f"[model-registry {self.hostname}]"

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> ModelRegistry:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------------------------

    def _prepare_auth(self) -> None:
        """Pick oras' auth backend from the registry's challenge, once per client.

        oras defaults to the token backend, which answers a `Basic` challenge by treating its
        realm as a token endpoint; a registry with htpasswd auth needs the basic backend. Without
        explicit credentials we let oras read the docker config, as `oras push/pull` would.
        """
        if self._auth_ready:
            return
        try:
            ping = self.session.get(f"{self.prefix}://{self.hostname}/v2/", verify=self._tls_verify)
        except requests.RequestException as exc:
            raise RegistryError(f"registry {self.hostname} unreachable: {scrub_queries(str(exc))}") from exc
        self._auth_ready = True
        challenge = ping.headers.get("Www-Authenticate", "")
        if ping.status_code == 401 and challenge.lower().startswith("basic"):
            self.auth = oras.auth.get_auth_backend("basic", self.session, self._insecure,
                                                   tls_verify=self._tls_verify)
            if self._credentials is not None:
                self.auth.set_basic_auth(self._credentials.username, self._credentials.password)
        if self._credentials is None and ping.status_code == 401:
            self.auth.load_configs(self.get_container(f"{self.hostname}/library/ping"))

    def _request(self, method: str, url: str, *, headers: dict[str, str] | None = None,
                 data: Any = None, stream: bool = False) -> requests.Response:
        """One request through oras' auth handling, without its retry loop (see module doc)."""
        self._prepare_auth()
        all_headers = dict(self.headers)
        all_headers.update(headers or {})
        if isinstance(self.auth, oras.auth.BasicAuth) and getattr(self.auth, "_basic_auth", None):
            # oras sends basic credentials only after a 401; sending them up front avoids pushing
            # every chunk body twice.
            all_headers.update(self.auth.get_auth_header())
        try:
            response = _do_request_once(self, url, method, data=data, headers=all_headers, stream=stream)
        except requests.RequestException as exc:
            # requests names the full URL (query included) in its messages: scrub it.
            raise RegistryError(f"{method} {_redact(url)}: {scrub_queries(str(exc))}") from exc
        except ValueError as exc:  # oras: "Cannot respond to request for authentication."
            raise RegistryError(f"{method} {_redact(url)}: {scrub_queries(str(exc))}", status=401) from exc
        return response

    def _repo_url(self, repository: str) -> str:
        if not _REPOSITORY.match(repository):
            raise ValueError(f"invalid repository name {repository!r}")
        return f"{self.prefix}://{self.hostname}/v2/{repository}"

    def _location(self, response: requests.Response, fallback: str | None = None) -> str:
        location = response.headers.get("Location")
        if not location:
            if fallback is None:
                raise RegistryError(f"{response.request.method} {_redact(response.url)}: no Location header",
                                    status=response.status_code)
            return fallback
        # Relative locations are relative to the registry (distribution sends absolute ones).
        return urllib.parse.urljoin(f"{self.prefix}://{self.hostname}/", location)

    @staticmethod
    def _error(response: requests.Response, what: str) -> RegistryError:
        codes: list[str] = []
        detail = ""
        try:
            body = response.json()
            for err in body.get("errors", []) if isinstance(body, dict) else []:
                if isinstance(err, dict):
                    codes.append(str(err.get("code", "")))
                    detail = detail or str(err.get("message", ""))
        except ValueError:
            pass
        message = f"{what}: HTTP {response.status_code} {','.join(codes) or response.reason}"
        if detail:
            # The registry's own words, bounded; a URL it quotes loses its query.
            message += f" ({scrub_queries(detail)[:_MAX_DETAIL]})"
        return RegistryError(message, status=response.status_code, codes=tuple(codes))

    # -- blobs -------------------------------------------------------------------------------

    def blob_exists(self, repository: str | dict[str, Any], digest: Any) -> bool:
        """HEAD the blob. Also accepts oras' own `(layer, container)` call, which the inherited
        `upload_blob`/`push` make, so the stock methods keep working on this subclass."""
        if isinstance(repository, dict):
            return bool(super().blob_exists(repository, digest))
        return self.blob_size(repository, digest) is not None

    def blob_size(self, repository: str, digest: str) -> int | None:
        """Size of the blob in this repository (HEAD), None when the repository lacks it."""
        url = f"{self._repo_url(repository)}/blobs/{normalize_digest(digest)}"
        response = self._request("HEAD", url)
        if response.status_code == 200:
            return int(response.headers.get("Content-Length", -1))
        if response.status_code == 404:
            return None
        raise self._error(response, f"HEAD blob {digest}")

    def _start_session(self, repository: str, digest: str, mount_from: str | None) -> _Session | None:
        url = f"{self._repo_url(repository)}/blobs/uploads/"
        if mount_from:
            self._repo_url(mount_from)
            url += "?" + urllib.parse.urlencode({"mount": digest, "from": mount_from})
        response = self._request("POST", url)
        if response.status_code == 201 and mount_from:
            return None
        if response.status_code != 202:
            raise self._error(response, f"start upload to {repository}")
        return _Session(location=self._location(response), offset=0, started_at=0)

    def _resume_session(self, repository: str, resume: UploadResume, digest: str, size: int) -> _Session | None:
        """Ask the registry how much of an earlier upload it holds (GET on the upload URL)."""
        location = resume.upload_location
        if not location or resume.digest != digest or resume.repository not in (None, repository):
            return None
        expected_prefix = f"{self._repo_url(repository)}/blobs/uploads/"
        if not location.startswith(expected_prefix):
            # Only ever talk to the registry we were asked to; details from elsewhere are ignored.
            log.warning("ignoring resume location outside %s", expected_prefix)
            return None
        response = self._request("GET", location)
        if response.status_code not in (200, 204):
            log.info("upload session gone (HTTP %s), starting a new one", response.status_code)
            return None
        offset = parse_range(response.headers.get("Range"), hint=resume.committed_offset)
        new_location = self._location(response, fallback=location)
        if offset is None or offset > size:
            self._cancel(_Session(new_location, 0, 0))
            return None
        return _Session(location=new_location, offset=offset, started_at=offset)

    def _cancel(self, session: _Session) -> None:
        """Best effort: free the registry's partial upload."""
        try:
            self._request("DELETE", session.location)
        except RegistryError:
            pass

    def upload_blob_streaming(
        self,
        repository: str,
        path: str | os.PathLike[str],
        digest: str,
        size: int,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        resume: UploadResume | None = None,
        on_progress: Callable[[UploadProgress], None] | None = None,
        progress_interval: float = 2.0,
        mount_from: str | None = None,
        block_size: int = READ_BLOCK,
    ) -> UploadResult:
        """Upload a file as a blob with POST, PATCH chunks, PUT ?digest; resume when possible.

        `on_progress` runs after each committed chunk (a safe resume point) and, during a chunk,
        at most every `progress_interval` seconds, so a caller can heartbeat on slow links; an
        exception it raises aborts the upload. Returns once the registry has the blob under
        `digest` (it verifies the digest on the final PUT).
        """
        path = os.fspath(path)
        digest = normalize_digest(digest)
        if chunk_size < 1 or block_size < 1:
            raise ValueError("chunk_size and block_size must be positive")
        actual = os.stat(path).st_size
        if actual != size:
            raise LocalFileChanged(f"{path} has {actual} bytes, expected {size}")

        session = self._resume_session(repository, resume, digest, size) if resume else None
        resumed_from = session.offset if session else 0
        sent = [0]  # bytes handed to the socket by this call, every attempt included
        restarts = 0
        while True:
            if session is None:
                session = self._start_session(repository, digest, mount_from if restarts == 0 else None)
                if session is None:
                    return UploadResult(digest=digest, size=size, transferred_bytes=0, resumed_from=0, mounted=True)
            try:
                self._send_chunks(session, path, size, chunk_size, block_size, sent, on_progress,
                                  progress_interval)
                self._commit(session, digest)
                return UploadResult(digest=digest, size=size, transferred_bytes=sent[0],
                                    resumed_from=resumed_from, restarts=restarts)
            except _SessionLost as exc:
                if restarts >= 1:
                    raise RegistryError(f"upload of {digest} to {repository} lost twice: {exc}") from exc
                restarts += 1
                log.warning("upload of %s to %s restarts from 0: %s", digest, repository, exc)
                self._cancel(session)
                session = None

    def _send_chunks(self, session: _Session, path: str, size: int, chunk_size: int, block_size: int,
                     sent: list[int], on_progress: Callable[[UploadProgress], None] | None,
                     progress_interval: float) -> None:
        resyncs = 0
        while session.offset < size:
            start = session.offset
            length = min(chunk_size, size - start)
            meter = _ChunkMeter(session, size, sent, on_progress, progress_interval)
            body = _FileRange(path, start, length, block_size, meter.on_block)
            headers = {
                "Content-Type": "application/octet-stream",
                "Content-Range": f"{start}-{start + length - 1}",
                "Content-Length": str(length),
            }
            response = self._request("PATCH", session.location, data=body, headers=headers)
            if response.status_code == 416 and resyncs < 3:
                # A registry that checks ranges disagrees about the offset: ask it, continue there.
                resyncs += 1
                status = self._request("GET", session.location)
                held = parse_range(status.headers.get("Range"))
                if status.status_code not in (200, 204) or held is None or held > size:
                    raise _SessionLost(f"range rejected and status unreadable (HTTP {status.status_code})")
                session.location = self._location(status, fallback=session.location)
                session.offset = held
                continue
            if response.status_code == 404 or set(self._error_codes(response)) & _SESSION_GONE_CODES:
                raise _SessionLost(f"PATCH answered HTTP {response.status_code}")
            if response.status_code != 202:
                raise self._error(response, f"PATCH bytes {start}-{start + length - 1}")
            session.location = self._location(response, fallback=session.location)
            held = parse_range(response.headers.get("Range"), hint=start + length)
            if held is not None and held != start + length:
                # distribution 2.8 appends whatever it is sent, whatever Content-Range says; if
                # its total is not ours, the stored bytes are not the file's: start over.
                raise _SessionLost(f"registry holds {held} bytes after PATCH, expected {start + length}")
            session.offset = start + length
            if on_progress:
                on_progress(UploadProgress(session.location, session.offset, 0, sent[0], size))

    @staticmethod
    def _error_codes(response: requests.Response) -> list[str]:
        if response.status_code < 400:
            return []
        try:
            body = response.json()
        except ValueError:
            return []
        errors = body.get("errors", []) if isinstance(body, dict) else []
        return [str(err.get("code", "")) for err in errors if isinstance(err, dict)]

    def _commit(self, session: _Session, digest: str) -> None:
        url = oras.utils.append_url_params(session.location, {"digest": digest})
        response = self._request("PUT", url, headers={"Content-Type": "application/octet-stream"})
        if response.status_code in (201, 204):
            stored = response.headers.get("Docker-Content-Digest")
            if stored and stored != digest:
                raise RegistryError(f"registry stored {stored} for {digest}", status=response.status_code)
            return
        codes = self._error_codes(response)
        if "DIGEST_INVALID" in codes:
            if session.started_at > 0:
                # We continued someone else's partial upload and the result is wrong: redo it whole.
                raise _SessionLost("digest mismatch on a resumed upload")
            err = self._error(response, f"PUT {digest}")
            raise BlobDigestMismatch(str(err), status=err.status, codes=err.codes)
        if response.status_code == 404 or set(codes) & _SESSION_GONE_CODES:
            raise _SessionLost(f"PUT answered HTTP {response.status_code}")
        raise self._error(response, f"PUT {digest}")

    def put_blob_bytes(self, repository: str, data: bytes, digest: str | None = None) -> bool:
        """Monolithic upload of a small in-memory blob (the config); False if already there."""
        digest = normalize_digest(digest) if digest else sha256_digest(data)
        if self.blob_exists(repository, digest):
            return False
        session = self._start_session(repository, digest, None)
        assert session is not None  # no mount was asked for
        url = oras.utils.append_url_params(session.location, {"digest": digest})
        response = self._request("PUT", url, data=data, headers={"Content-Type": "application/octet-stream"})
        if response.status_code not in (201, 204):
            raise self._error(response, f"PUT blob {digest}")
        return True

    def read_blob_bytes(self, repository: str, digest: str, *, max_bytes: int) -> bytes | None:
        """A small blob's bytes, verified against its digest; None when the repository lacks it. A blob over
        `max_bytes` is refused (RegistryError) before it is read whole."""
        digest = normalize_digest(digest)
        url = f"{self._repo_url(repository)}/blobs/{digest}"
        response = self._request("GET", url, stream=True)
        with response:
            if response.status_code == 404:
                return None
            if response.status_code != 200:
                raise self._error(response, f"GET blob {digest}")
            data = bytearray()
            for block in response.iter_content(chunk_size=READ_BLOCK):
                data += block
                if len(data) > max_bytes:
                    raise RegistryError(f"GET blob {digest}: larger than {max_bytes} bytes")
        if sha256_digest(bytes(data)) != digest:
            raise BlobDigestMismatch(f"GET blob {digest}: content hashes to {sha256_digest(bytes(data))}")
        return bytes(data)

    def pull_blob_to(self, repository: str, digest: str, path: str | os.PathLike[str],
                     *, block_size: int = READ_BLOCK) -> int:
        """Stream a blob into `path` (via a temporary file), verifying its digest; returns its size."""
        digest = normalize_digest(digest)
        target = os.fspath(path)
        partial = target + ".part"
        url = f"{self._repo_url(repository)}/blobs/{digest}"
        response = self._request("GET", url, stream=True)
        with response:
            if response.status_code != 200:
                raise self._error(response, f"GET blob {digest}")
            hasher = hashlib.sha256()
            size = 0
            os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
            with open(partial, "wb") as out:
                for data in response.iter_content(chunk_size=block_size):
                    hasher.update(data)
                    size += len(data)
                    out.write(data)
        if "sha256:" + hasher.hexdigest() != digest:
            os.unlink(partial)
            raise BlobDigestMismatch(f"GET blob {digest}: content hashes to sha256:{hasher.hexdigest()}")
        os.replace(partial, target)
        return size

    # -- manifests ---------------------------------------------------------------------------

    def put_manifest(self, repository: str, reference: str, manifest: dict[str, Any] | bytes,
                     media_type: str | None = None) -> str:
        """PUT a manifest under a tag or digest; returns its digest.

        Unlike oras' `upload_manifest`, the body is bytes we control (so the digest is the one we
        computed) and Content-Type is the manifest's own mediaType; fields such as
        `artifactType` travel untouched.
        """
        body = manifest if isinstance(manifest, bytes) else canonical_json(manifest)
        content_type = media_type or json.loads(body).get("mediaType") or mt.OCI_MANIFEST
        digest = sha256_digest(body)
        url = f"{self._repo_url(repository)}/manifests/{reference}"
        response = self._request("PUT", url, data=body, headers={"Content-Type": content_type})
        if response.status_code not in (200, 201):
            raise self._error(response, f"PUT manifest {repository}:{reference}")
        stored = response.headers.get("Docker-Content-Digest")
        if stored and stored != digest:
            raise RegistryError(f"registry stored manifest {stored}, we sent {digest}", status=response.status_code)
        return digest

    def fetch_manifest(self, repository: str, reference: str) -> ManifestDocument | None:
        """The manifest under a tag or digest, with its exact bytes and digest; None if absent.

        (The inherited `get_manifest(container)` still works; it returns only the parsed JSON
        and raises on 404, which is why this exists.)
        """
        url = f"{self._repo_url(repository)}/manifests/{reference}"
        response = self._request("GET", url, headers={"Accept": ", ".join(mt.MANIFEST_ACCEPT)})
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._error(response, f"GET manifest {repository}:{reference}")
        raw = response.content
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        return ManifestDocument(digest=sha256_digest(raw), media_type=media_type, raw=raw)

    def delete_manifest(self, repository: str, digest: str) -> bool:
        """Delete a manifest by digest (its tags go with it); False when it was already gone."""
        url = f"{self._repo_url(repository)}/manifests/{normalize_digest(digest)}"
        response = self._request("DELETE", url)
        if response.status_code in (200, 202):
            return True
        if response.status_code == 404:
            return False
        raise self._error(response, f"DELETE manifest {repository}@{digest}")


    def delete_blob(self, repository: str, digest: str) -> bool:
        """Delete a blob (with registry deletes enabled); False when it was already gone."""
        url = f"{self._repo_url(repository)}/blobs/{normalize_digest(digest)}"
        response = self._request("DELETE", url)
        if response.status_code in (200, 202):
            return True
        if response.status_code == 404:
            return False
        raise self._error(response, f"DELETE blob {repository}@{digest}")


def _redact(url: str) -> str:
    """Drop the query (upload state, tokens some registries put there) from URLs we log."""
    return url.split("?", 1)[0]


_QUERY = re.compile(r"(/[^\s?'\"]*)\?[^\s'\")]*")
_MAX_DETAIL = 300


def scrub_queries(text: str) -> str:
    """Replace the query of every URL or path in `text` (an exception's message) with `?...`:
    error messages end up in activity failures, which Temporal stores."""
    return _QUERY.sub(r"\1?...", text)
