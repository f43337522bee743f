"""A Hugging Face Hub-compatible HTTP server on loopback.

It speaks the parts of the Hub's HTTP contract that `huggingface_hub` uses to read model repositories
(model info, tree listing, paths-info, refs, commits, resolve with HEAD/GET/Range, list_models, whoami,
get_collection, get_organization_overview), so the real client works against it unchanged through
`HF_ENDPOINT` or `endpoint=`.

Layout of `root` (written by `devstack.model_repos.register_repo`, read here):

    <root>/<org>/<name>/repo.json             metadata: flags, tokens, branches, commits with file manifests
    <root>/<org>/<name>/commits/<sha>/...     the files of each commit, as plain files
    <root>/<name>/...                         the same for a repo id without an organisation

    <root>/_collections/<namespace>/<slug>.json   a collection (`write_collection`): title, item ids, privacy

A collection's items are stored as references; `/api/collections/{namespace}/{slug}` derives each model item
from its repo at request time (as the Hub does), leaving out repos that are gone or private to the caller. A
private collection is visible only with one of its `tokens` (which must also be valid tokens: a repo's or a
user's).

Every devstack writer (`devstack.model_repos`) replaces `<root>/.generation` after it changes a repo
(`bump_generation`): the server keeps its repo index (what `list_models`, the organisation overview and the
token check read) until that marker or a namespace directory changes, as the Hub answers listings from an
index rather than by reading every repo. A root without the marker is rescanned on every listing.

A renamed repo leaves `{"moved_to": "<new id>"}` as the repo.json at its old place; the server answers
it with a relative 307, as the Hub does, which the client follows with its auth header.

Large (LFS) files are not served by the Hub host itself: as on huggingface.co, `resolve` answers them with
a 302 to a signed URL on a second host (`cdn_url`, another loopback port: another origin, so the client
drops its `Authorization` header), which serves the bytes with Range support. The CDN host, like a
presigned S3 URL, refuses a request that carries an `Authorization` header besides its signature, so a
client that leaks the token fails loudly, and every request it saw is recorded for tests to check.

The server never sends `X-Xet-Hash` nor a Xet link, so the client always takes the plain HTTP path.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import yaml

log = logging.getLogger(__name__)

REPO_META = "repo.json"
COMMITS_DIR = "commits"
COLLECTIONS_DIR = "_collections"
GENERATION = ".generation"  # replaced by every writer after a change: the server's index is stale
# The list_models parameters that choose and order the models (the others shape pages and fields).
_LISTING_QUERY = ("author", "direction", "filter", "gated", "pipeline_tag", "search", "sort")
_LISTINGS_KEPT = 32
MAX_PAGE = 1000  # the Hub's own cap on list pages
MAX_EXPANDED_TREE_PAGE = 50  # the Hub's cap on tree pages with expand=true
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)
# Words that follow a repo id in API paths; used to tell `gpt2/tree/...` from `org/name`.
_API_SUBPATHS = {"revision", "tree", "paths-info", "refs", "commits", "auth-check", "resolve"}
_CHUNK = 1 << 20
# The Hub's own wording; the client matches some of these strings.
_INVALID_CREDENTIALS = "Invalid credentials in Authorization header"


def bump_generation(root: Path) -> None:
    """Tell a server over `root` (in any process) that its repos changed: call it after every write."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{GENERATION}.{secrets.token_hex(8)}"  # a dot name: never taken for a repo
    tmp.write_text(secrets.token_hex(16))  # new content every time: inode numbers and mtimes can repeat
    os.replace(tmp, root / GENERATION)


def repo_dir(root: Path, repo_id: str) -> Path:
    """Where a repo lives under `root`; rejects ids that could escape it."""
    parts = repo_id.split("/")
    if not 1 <= len(parts) <= 2 or not all(_SEGMENT.match(p) and ".." not in p for p in parts):
        raise ValueError(f"invalid repo id {repo_id!r}")
    return root.joinpath(*parts)


def git_tree_oids(files: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Git tree object ids of every directory ("" is the root) of a manifest {path: {"oid": ...}}.

    Real git tree hashing, so directory oids in tree listings look and behave like the Hub's.
    """
    children: dict[str, dict[str, tuple[str, str]]] = {"": {}}
    for path, entry in files.items():
        parts = path.split("/")
        for depth in range(len(parts) - 1):
            parent, name = "/".join(parts[:depth]), parts[depth]
            children.setdefault(parent, {})[name] = ("40000", "")
            children.setdefault("/".join(parts[: depth + 1]), {})
        children["/".join(parts[:-1])][parts[-1]] = ("100644", str(entry["oid"]))

    oids: dict[str, str] = {}

    def tree(path: str) -> str:
        body = b""
        # git orders entries by name, comparing a directory as if its name ended with "/".
        for name, (mode, oid) in sorted(
            children[path].items(), key=lambda item: item[0] + ("/" if item[1][0] == "40000" else "")
        ):
            if mode == "40000":
                oid = tree(f"{path}/{name}" if path else name)
            body += f"{mode} {name}".encode() + b"\0" + bytes.fromhex(oid)
        oids[path] = hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()
        return oids[path]

    tree("")
    return oids


@dataclass
class RequestRecord:
    """One answered request, kept so tests can prove what the client did (ranges, no Xet, auth).

    Request header names are lower-cased; response headers are as sent.
    """

    method: str
    path: str
    headers: dict[str, str]
    status: int
    response_headers: dict[str, str]
    body_bytes: int = 0
    """Body bytes actually sent: short of Content-Length when the client went away mid-download."""
    host: str = "hub"
    """Which server answered: "hub" (the API and small files) or "cdn" (the signed URLs of LFS files)."""
    file: tuple[str, str] | None = None
    """(repo id, path) of the repo file whose headers or bytes the answer carried."""


class HubError(Exception):
    """An error answer in the Hub's shape: status, `X-Error-Code`, `X-Error-Message`, JSON body."""

    def __init__(self, status: int, code: str | None, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = dict(headers or {})


class _Redirect(Exception):
    def __init__(self, location: str):
        super().__init__(location)
        self.location = location


@dataclass
class _Fault:
    after_bytes: int
    times: int


@dataclass
class _Access:
    token: str | None
    user: str | None


@dataclass(frozen=True)
class _LfsObject:
    """A stored LFS object as the CDN finds it: by repo and sha256, like a content-addressed bucket."""

    disk_path: Path
    size: int
    paths: tuple[str, ...]
    """Every repo path (across commits) whose content it is."""


class _CdnError(Exception):
    """An error answer in the shape of the storage behind the Hub's CDN (S3): status and XML body."""

    def __init__(self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = dict(headers or {})


class _Store:
    """Reads repo.json files, cached by (inode, mtime, size) so writers can replace them atomically."""

    def __init__(self, root: Path):
        self.root = root
        self._lock = threading.Lock()
        self._cache: dict[Path, tuple[tuple[int, int, int], dict[str, Any]]] = {}
        self._trees: dict[tuple[str, str], dict[str, str]] = {}
        self._index: tuple[tuple[Any, ...], list[tuple[str, dict[str, Any]]]] | None = None

    def load(self, repo_id: str) -> dict[str, Any] | None:
        try:
            path = repo_dir(self.root, repo_id) / REPO_META
            st = path.stat()
        except (ValueError, OSError):
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            cached = self._cache.get(path)
            if cached and cached[0] == key:
                return cached[1]
        try:
            meta: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        with self._lock:
            self._cache[path] = (key, meta)
        return meta

    def repo_ids(self) -> list[str]:
        ids: list[str] = []
        if not self.root.is_dir():
            return ids
        for first in sorted(self.root.iterdir()):
            if not first.is_dir() or first.name.startswith((".", "_")):
                continue
            if (first / REPO_META).is_file():
                ids.append(first.name)
                continue
            ids.extend(f"{first.name}/{d.name}" for d in sorted(first.iterdir()) if (d / REPO_META).is_file())
        return ids

    def _index_key(self) -> tuple[Any, ...] | None:
        """What the index is valid for: the writers' generation marker, and the mtimes of the root and every
        namespace directory (a repo directory created or removed by hand changes its parent's). None without
        a marker: nothing announces changes, so nothing may be cached."""
        try:
            generation = (self.root / GENERATION).read_text()
            with os.scandir(self.root) as children:
                dirs = sorted(
                    (c.name, c.stat().st_mtime_ns)
                    for c in children
                    if c.is_dir() and not c.name.startswith((".", "_"))
                )
            return (generation, self.root.stat().st_mtime_ns, tuple(dirs))
        except OSError:
            return None

    def indexed(self) -> tuple[tuple[Any, ...] | None, list[tuple[str, dict[str, Any]]]]:
        """Every readable repo.json under the root as (repo id, meta), ordered by id, moved ones included, with
        the key it is valid for (None: valid for this call only). The key is taken before the scan, so a cached
        index is never older than the key it is kept under."""
        key = self._index_key()
        with self._lock:
            if key is not None and self._index is not None and self._index[0] == key:
                return self._index
        repos = [(repo_id, meta) for repo_id in self.repo_ids() if (meta := self.load(repo_id)) is not None]
        if key is not None:
            with self._lock:
                self._index = (key, repos)
        return key, repos

    def repos(self) -> list[tuple[str, dict[str, Any]]]:
        return self.indexed()[1]

    def tree_oids(self, repo_id: str, sha: str, files: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
        # A commit never changes, so its directory oids are computed once.
        key = (repo_id, sha)
        with self._lock:
            if key in self._trees:
                return self._trees[key]
        oids = git_tree_oids(files)
        with self._lock:
            self._trees[key] = oids
        return oids


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in {"1", "true", "yes"}


def _front_matter(text: str) -> dict[str, Any] | None:
    """The YAML metadata block of a model card, which the Hub returns as `cardData`."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    for end, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            try:
                data = yaml.safe_load("\n".join(lines[1:end]))
            except yaml.YAMLError:
                return None
            return data if isinstance(data, dict) else None
    return None


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"o": offset}).encode()).decode().rstrip("=")


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        return max(0, int(json.loads(base64.urlsafe_b64decode(padded))["o"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise HubError(400, None, f"Invalid cursor {cursor!r}") from exc


class _BaseHandler(BaseHTTPRequestHandler):
    """What the Hub and the CDN handlers share: keep-alive, recording every answer, serving file bytes."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the client's pooled connections expect
    timeout = 120  # an idle kept-alive connection ends by itself
    server: _HTTPServer
    host_name: ClassVar[str]

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s - %s", self.host_name, self.address_string(), format % args)

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        raise NotImplementedError

    @property
    def hub(self) -> HubServer:
        return self.server.hub

    def _respond(
        self, status: int, body: bytes, headers: Mapping[str, str], content_type: str = "application/json"
    ) -> RequestRecord:
        sent = {"Content-Type": content_type, "Content-Length": str(len(body)), **headers}
        # Recorded before the body goes out: a client that has read the whole answer finds it in the log
        # (recorded after, a test reading the log at once could miss it: seen under load).
        record = self._record(status, sent)
        record.body_bytes = 0 if self.command == "HEAD" else len(body)
        self.send_response(status)
        for key, value in sent.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        return record

    def _record(self, status: int, response_headers: Mapping[str, str]) -> RequestRecord:
        self._responded = True
        record = RequestRecord(
            self.command,
            self.path,
            {k.lower(): v for k, v in self.headers.items()},
            status,
            dict(response_headers),
            host=self.host_name,
        )
        self.hub._record(record)
        return record

    def _unsatisfiable(self, headers: Mapping[str, str]) -> Exception:
        """The error a range past the end raises, in this host's error shape."""
        raise NotImplementedError

    def _send_file(
        self, repo_id: str, paths: tuple[str, ...], disk_path: Path, size: int, headers: Mapping[str, str]
    ) -> None:
        """Answer GET/HEAD with a file's bytes (all, or the one range asked for) and `headers`.

        `paths` are the repo paths the bytes stand for (the first is recorded); a fault set on any of them
        by `fail_next_download` cuts the body short.
        """
        headers = dict(headers)
        start, end, status = 0, size - 1, 200
        wanted = self.headers.get("Range")
        if wanted:
            parsed = _parse_range(wanted, size)
            if not isinstance(parsed, tuple) and parsed is not None:
                raise self._unsatisfiable({**headers, "Content-Range": f"bytes */{size}"})
            if isinstance(parsed, tuple):
                start, end = parsed
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = end - start + 1 if size else 0
        headers["Content-Length"] = str(length)
        self.send_response(status)
        sent = {"Content-Type": "application/octet-stream", **headers}
        for key, value in sent.items():
            self.send_header(key, value)
        self.end_headers()
        record = self._record(status, sent)
        record.file = (repo_id, paths[0])
        if self.command == "HEAD" or not length:
            return
        to_send = length
        fault = self.hub._take_fault(repo_id, paths)
        if fault is not None:
            to_send = min(length, fault)
            self.close_connection = True  # the client then sees a body cut short and resumes with a Range
        with disk_path.open("rb") as fh:
            try:
                # sendfile streams from the page cache: a multi-GB file never sits in memory.
                self.connection.sendfile(fh, offset=start, count=to_send)
            finally:
                # socket.sendfile leaves the file positioned after what it sent, even when it fails
                # (and untouched when it sent nothing).
                record.body_bytes = max(0, fh.tell() - start)


class _Handler(_BaseHandler):
    host_name = "hub"

    # -- plumbing -------------------------------------------------------------------------------------

    def _unsatisfiable(self, headers: Mapping[str, str]) -> Exception:
        return HubError(416, None, "Requested Range Not Satisfiable", headers)

    def _dispatch(self) -> None:
        self._responded = False
        self._body = b""
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self._body = self.rfile.read(length)  # read it even when unused, to keep the connection in step
        try:
            self._route()
        except HubError as err:
            if self._responded:
                raise
            body = json.dumps({"error": err.message}).encode()
            headers = {**err.headers, "X-Error-Message": err.message}
            if err.code:
                headers["X-Error-Code"] = err.code
            self._respond(err.status, body, headers)
        except _Redirect as redirect:
            self._respond(307, b"", {"Location": redirect.location})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:
            log.exception("hub server failed on %s %s", self.command, self.path)
            if self._responded:
                self.close_connection = True  # headers are out: only cutting the connection is left
            else:
                self._respond(500, b'{"error":"Internal Error"}', {})

    def _json(self, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        self._respond(200, json.dumps(payload).encode(), headers or {})

    def _self_url(self, path: str, query: Mapping[str, list[str]]) -> str:
        host = self.headers.get("Host") or f"{self.hub.host}:{self.hub.port}"
        return f"http://{host}{path}?{urlencode(query, doseq=True)}"

    # -- auth and lookup ------------------------------------------------------------------------------

    def _access(self) -> _Access:
        auth = self.headers.get("Authorization") or ""
        if not auth:
            return _Access(None, None)
        scheme, _, token = auth.partition(" ")
        user = self.hub.known_tokens().get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise HubError(401, None, _INVALID_CREDENTIALS)
        return _Access(token.strip(), user)

    def _repo(self, repo_id: str, access: _Access, rest_path: str) -> dict[str, Any]:
        meta = self.hub.store.load(repo_id)
        if meta is not None and meta.get("moved_to"):
            raise _Redirect(rest_path.replace("{repo}", meta["moved_to"]))
        allowed = meta is not None and access.token in (meta.get("tokens") or {})
        if meta is None or (meta.get("private") and not allowed):
            # The Hub does not tell a private repo from a missing one; 401 when anonymous, 404 otherwise.
            raise HubError(401 if access.token is None else 404, "RepoNotFound", "Repository not found")
        return meta

    def _check_gate(self, meta: dict[str, Any], access: _Access) -> None:
        if not meta.get("gated") or access.token in (meta.get("tokens") or {}):
            return
        repo_id = meta["id"]
        if access.token is None:
            raise HubError(
                401,
                "GatedRepo",
                f"Access to model {repo_id} is restricted. You must have access to it and be authenticated "
                "to access it. Please log in.",
            )
        raise HubError(
            403,
            "GatedRepo",
            f"Access to model {repo_id} is restricted and you are not in the authorized list. "
            f"Visit {self.hub.url}/{repo_id} to ask for access.",
        )

    @staticmethod
    def _commit(meta: dict[str, Any], revision: str) -> tuple[str, dict[str, Any]]:
        commits: dict[str, Any] = meta.get("commits") or {}
        sha = (meta.get("branches") or {}).get(revision)
        if sha is None and _COMMIT_SHA.match(revision) and revision in commits:
            sha = revision
        if sha is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return sha, commits[sha]

    # -- routing --------------------------------------------------------------------------------------

    def _route(self) -> None:
        split = urlsplit(self.path)
        query = parse_qs(split.query, keep_blank_values=True)
        segs = split.path.lstrip("/").split("/")
        access = self._access()
        method = self.command
        if segs[0] == "api" and len(segs) >= 2:
            kind = segs[1]
            if kind == "whoami-v2" and method == "GET":
                return self._whoami(access)
            if kind in {"datasets", "spaces", "kernels"}:
                raise HubError(401 if access.token is None else 404, "RepoNotFound", "Repository not found")
            if kind == "models" and len(segs) == 2 and method == "GET":
                return self._list_models(access, split.path, query)
            if kind == "organizations" and len(segs) == 4 and segs[3] == "overview" and method == "GET":
                return self._organization_overview(unquote(segs[2]))
            if kind == "collections" and len(segs) == 4 and method == "GET":
                return self._collection(access, unquote(segs[2]), unquote(segs[3]))
            if kind == "models" and len(segs) >= 3:
                repo_id, rest = self._split_repo(segs[2:])
                tail = "/".join(segs[2 + len(repo_id.split("/")) :])
                relocated = (
                    "/api/models/{repo}" + (f"/{tail}" if tail else "") + (f"?{split.query}" if split.query else "")
                )
                return self._api_repo(method, repo_id, rest, access, query, relocated, split.path)
        elif len(segs) >= 4 and segs[0] not in {"datasets", "spaces", "api"} and method in {"GET", "HEAD"}:
            at = 1 if segs[1] == "resolve" else 2 if len(segs) >= 5 and segs[2] == "resolve" else 0
            if at:
                repo_id = "/".join(segs[:at])
                tail = "/".join(segs[at:])
                revision, filename = unquote(segs[at + 1]), unquote("/".join(segs[at + 2 :]))
                return self._resolve(repo_id, revision, filename, access, "/{repo}/" + tail)
        raise HubError(404, None, "Sorry, we can't find the page you are looking for.")

    @staticmethod
    def _split_repo(segs: list[str]) -> tuple[str, list[str]]:
        if len(segs) >= 2 and segs[1] not in _API_SUBPATHS:
            return f"{segs[0]}/{segs[1]}", segs[2:]
        return segs[0], segs[1:]

    def _api_repo(
        self,
        method: str,
        repo_id: str,
        rest: list[str],
        access: _Access,
        query: dict[str, list[str]],
        relocated: str,
        path: str,
    ) -> None:
        meta = self._repo(repo_id, access, relocated)
        word = rest[0] if rest else ""
        if method == "GET" and (not rest or (word == "revision" and len(rest) == 2)):
            revision = unquote(rest[1]) if rest else "main"
            sha, commit = self._commit(meta, revision)
            return self._json(self.hub.model_payload(meta, sha, commit, query))
        if method == "GET" and word == "tree" and len(rest) >= 2:
            sha, commit = self._commit(meta, unquote(rest[1]))
            return self._tree(meta, sha, commit, unquote("/".join(rest[2:])).strip("/"), query, path)
        if method == "POST" and word == "paths-info" and len(rest) == 2:
            sha, commit = self._commit(meta, unquote(rest[1]))
            return self._paths_info(meta, sha, commit)
        if method == "GET" and word == "refs" and len(rest) == 1:
            branches = [
                {"name": name, "ref": f"refs/heads/{name}", "targetCommit": sha}
                for name, sha in sorted((meta.get("branches") or {}).items())
            ]
            return self._json({"branches": branches, "converts": [], "tags": [], "pullRequests": []})
        if method == "GET" and word == "commits" and len(rest) == 2:
            sha, _ = self._commit(meta, unquote(rest[1]))
            return self._commits(meta, sha, query, path)
        if method == "GET" and word == "auth-check" and len(rest) == 1:
            self._check_gate(meta, access)
            return self._json({})
        raise HubError(404, None, "Sorry, we can't find the page you are looking for.")

    # -- endpoints ------------------------------------------------------------------------------------

    def _whoami(self, access: _Access) -> None:
        if access.user is None:
            raise HubError(401, None, "Invalid username or password.")
        self._json(
            {
                "type": "user",
                "id": hashlib.sha1(access.user.encode()).hexdigest()[:24],
                "name": access.user,
                "fullname": access.user,
                "email": None,
                "emailVerified": False,
                "canPay": False,
                "isPro": False,
                "periodEnd": None,
                "avatarUrl": "",
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "devstack", "role": "read"}},
            }
        )

    def _page(
        self, items: list[Any], query: dict[str, list[str]], path: str, size: int
    ) -> tuple[list[Any], dict[str, str]]:
        """A page of `items` and, when more follow, a `Link: <...>; rel="next"` header with a cursor."""
        start = _offset(query.get("cursor", [None])[0])
        page = items[start : start + size]
        if start + size >= len(items):
            return page, {}
        next_query = {k: v for k, v in query.items() if k != "cursor"}
        next_query["cursor"] = [_cursor(start + size)]
        return page, {"Link": f'<{self._self_url(path, next_query)}>; rel="next"'}

    def _list_models(self, access: _Access, path: str, query: dict[str, list[str]]) -> None:
        hub = self.hub
        first = {k: v[0] for k, v in query.items() if v}
        version, repos = hub.store.indexed()
        # The models a query selects, in order, kept per index version and query: while nothing is written,
        # a listing's later pages and a repeated query cost a slice, not a filter and sort of every repo.
        shape = (access.token, tuple((k, tuple(query[k])) for k in sorted(_LISTING_QUERY) if k in query))
        items = hub.cached_listing(version, shape)
        if items is None:
            items = self._matching_models(access, first, query, repos)
            hub.keep_listing(version, shape, items)
        limit = first.get("limit")
        size = min(int(limit), MAX_PAGE) if limit and limit.isdigit() and int(limit) > 0 else hub.list_page_size
        page, headers = self._page(items, query, path, size)
        self._json([_list_item(m, query) for m in page], headers)

    def _matching_models(
        self,
        access: _Access,
        first: dict[str, str],
        query: dict[str, list[str]],
        repos: list[tuple[str, dict[str, Any]]],
    ) -> list[dict[str, Any]]:
        hub = self.hub
        search = first.get("search", "").lower()
        author = first.get("author")
        filters = query.get("filter", [])
        items: list[dict[str, Any]] = []
        for repo_id, meta in repos:
            if meta.get("moved_to") or not meta.get("branches", {}).get("main"):
                continue
            if meta.get("private") and access.token not in (meta.get("tokens") or {}):
                continue
            if search and search not in repo_id.lower():
                continue
            if author and not repo_id.startswith(f"{author}/"):
                continue
            sha = meta["branches"]["main"]
            full = hub.listing_payload(meta, sha)
            if any(f not in full["tags"] for f in filters):
                continue
            if "gated" in first and bool(full["gated"]) != _truthy(first["gated"]):
                continue
            if "pipeline_tag" in first and full["pipeline_tag"] != first["pipeline_tag"]:
                continue
            items.append(full)
        sort = first.get("sort")
        if sort in {"lastModified", "createdAt", "downloads", "likes", "trendingScore", "id"}:
            # The Hub sorts descending unless told direction=1.
            items.sort(key=lambda m: (m.get(sort) or 0, m["id"]), reverse=first.get("direction") != "1")
        return items

    def _organization_overview(self, org: str) -> None:
        """`/api/organizations/{org}/overview` (`HfApi.get_organization_overview`): `numModels` counts the
        namespace's public models (the Hub calls it the organisation's public profile), whoever asks. Any
        namespace holding a repo answers as an organisation (the stand-in has no users' namespaces apart)."""
        count, found = 0, False
        if not _SEGMENT.match(org):
            raise HubError(404, None, "Organization not found")
        for repo_id, meta in self.hub.store.repos():
            if not repo_id.startswith(f"{org}/"):
                continue
            if meta.get("moved_to") or not meta.get("branches", {}).get("main"):
                continue
            found = True
            count += not meta.get("private")
        if not found:
            raise HubError(404, None, "Organization not found")
        self._json({"name": org, "fullname": org, "avatarUrl": "", "isVerified": False, "numModels": count,
                    "numDatasets": 0, "numSpaces": 0, "numUsers": 1, "numFollowers": 0, "numPapers": 0})

    def _collection(self, access: _Access, namespace: str, slug: str) -> None:
        hub = self.hub
        data = hub.load_collection(f"{namespace}/{slug}")
        if data is None or (data.get("private") and access.token not in (data.get("tokens") or {})):
            # As for repos, a private collection is not told from a missing one.
            raise HubError(404, None, "Collection not found")
        self._json(hub.collection_payload(data, access))

    def _entry(
        self, meta: dict[str, Any], sha: str, commit: dict[str, Any], path: str, expand: bool
    ) -> dict[str, Any] | None:
        files: dict[str, dict[str, Any]] = commit["files"]
        if path in files:
            f = files[path]
            entry: dict[str, Any] = {"type": "file", "oid": f["oid"], "size": f["size"], "path": path}
            if f.get("lfs"):
                entry["lfs"] = dict(f["lfs"])
        else:
            oids = self.hub.store.tree_oids(meta["id"], sha, files)
            if path not in oids:
                return None
            entry = {"type": "directory", "oid": oids[path], "size": 0, "path": path}
        if expand:
            last = self.hub.last_commit(meta, sha, path)
            entry["lastCommit"] = last
            if entry["type"] == "file":
                entry["securityFileStatus"] = {
                    "status": "safe",
                    "avScan": {"virusFound": False, "virusNames": None},
                    "pickleImportScan": None,
                }
        return entry

    def _tree(
        self,
        meta: dict[str, Any],
        sha: str,
        commit: dict[str, Any],
        base: str,
        query: dict[str, list[str]],
        path: str,
    ) -> None:
        files: dict[str, Any] = commit["files"]
        oids = self.hub.store.tree_oids(meta["id"], sha, files)
        if base not in oids:
            raise HubError(404, "EntryNotFound", f'{base} does not exist on "{sha}"', {"X-Repo-Commit": sha})
        recursive = _truthy(query.get("recursive", [None])[0])
        expand = _truthy(query.get("expand", [None])[0])
        prefix = f"{base}/" if base else ""
        names = [p for p in (*oids, *files) if p and p.startswith(prefix)]
        if not recursive:
            names = [p for p in names if "/" not in p[len(prefix) :]]
        size = min(self.hub.tree_page_size, MAX_EXPANDED_TREE_PAGE) if expand else self.hub.tree_page_size
        page, headers = self._page(sorted(names), query, path, size)
        entries = [self._entry(meta, sha, commit, p, expand) for p in page]
        self._json([e for e in entries if e is not None], headers)

    def _paths_info(self, meta: dict[str, Any], sha: str, commit: dict[str, Any]) -> None:
        ctype = self.headers.get("Content-Type") or ""
        if "json" in ctype:
            body = json.loads(self._body or b"{}")
            paths, expand = list(body.get("paths") or []), bool(body.get("expand"))
        else:
            form = parse_qs(self._body.decode(), keep_blank_values=True)
            paths, expand = form.get("paths", []), _truthy(form.get("expand", [None])[0])
        # As on the Hub, paths that do not exist are left out rather than failing the call.
        entries = [self._entry(meta, sha, commit, p.strip("/"), expand) for p in paths]
        self._json([e for e in entries if e is not None])

    def _commits(self, meta: dict[str, Any], sha: str, query: dict[str, list[str]], path: str) -> None:
        items = []
        current: str | None = sha
        while current:
            c = meta["commits"][current]
            items.append(
                {
                    "id": current,
                    "title": c["title"],
                    "message": c.get("message", ""),
                    "authors": [{"user": c.get("author", "devstack"), "avatar": ""}],
                    "date": c["date"],
                }
            )
            current = (c.get("parents") or [None])[0]
        page, headers = self._page(items, query, path, self.hub.list_page_size)
        self._json(page, headers)

    def _resolve(self, repo_id: str, revision: str, filename: str, access: _Access, relocated: str) -> None:
        split = urlsplit(self.path)
        meta = self._repo(repo_id, access, relocated + (f"?{split.query}" if split.query else ""))
        self._check_gate(meta, access)
        sha, commit = self._commit(meta, revision)
        entry = commit["files"].get(filename)
        if entry is None:
            raise HubError(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": sha})
        size: int = entry["size"]
        lfs = entry.get("lfs")
        name = filename.rsplit("/", 1)[-1]
        headers = {
            "X-Repo-Commit": sha,
            "Accept-Ranges": "bytes",
            "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\"",
            # Small files: the git blob sha1. LFS files: the sha256, like the Hub; the client names cache blobs
            # after it and checks a local_dir file against it.
            "ETag": f'"{lfs["oid"] if lfs else entry["oid"]}"',
        }
        if lfs:
            headers["X-Linked-Etag"] = f'"{lfs["oid"]}"'
            headers["X-Linked-Size"] = str(size)
            if self.hub.lfs_redirect:
                # As on the Hub: the metadata rides on the redirect, the bytes come from the CDN host.
                location = self.hub.signed_url(meta["id"], lfs["oid"], name)
                self._respond(302, b"", {**headers, "Location": location}, "text/plain; charset=utf-8").file = (
                    meta["id"], filename,
                )  # fmt: skip
                return
        disk_path = repo_dir(self.hub.root, meta["id"]) / COMMITS_DIR / sha / filename
        self._send_file(meta["id"], (filename,), disk_path, size, headers)


class _CdnHandler(_BaseHandler):
    """The CDN host: GET/HEAD of `/<repo id>/<sha256>` signed URLs, with Range; nothing else."""

    host_name = "cdn"

    def _dispatch(self) -> None:
        self._responded = False
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        try:
            self._serve()
        except _CdnError as err:
            if self._responded:
                raise
            body = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{err.code}</Code>'
                f"<Message>{err.message}</Message></Error>"
            ).encode()
            self._respond(err.status, body, err.headers, "application/xml")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:
            log.exception("cdn server failed on %s %s", self.command, self.path)
            if self._responded:
                self.close_connection = True
            else:
                self._respond(500, b"", {}, "application/xml")

    def _serve(self) -> None:
        if self.command not in {"GET", "HEAD"}:
            raise _CdnError(405, "MethodNotAllowed", "The specified method is not allowed against this resource.")
        if self.headers.get("Authorization"):
            # What S3 answers a presigned URL that also carries an Authorization header.
            raise _CdnError(
                400, "InvalidArgument",
                "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query "
                "string parameter or the Authorization header should be specified",
            )  # fmt: skip
        split = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(split.query, keep_blank_values=True).items() if v}
        disposition = self.hub.verify_signed_url(unquote(split.path), query)
        repo_id, _, oid = unquote(split.path).lstrip("/").rpartition("/")
        found = self.hub.lfs_object(repo_id, oid)
        if found is None:
            raise _CdnError(404, "NoSuchKey", "The specified key does not exist.")
        headers = {"ETag": f'"{oid}"', "Accept-Ranges": "bytes", "Content-Disposition": disposition}
        self._send_file(repo_id, found.paths, found.disk_path, found.size, headers)

    def _unsatisfiable(self, headers: Mapping[str, str]) -> Exception:
        return _CdnError(416, "InvalidRange", "The requested range is not satisfiable", headers)


def _parse_range(header: str, size: int) -> tuple[int, int] | str | None:
    """(start, end) of a single byte range, "unsatisfiable", or None to ignore it and send everything."""
    match = _RANGE.match(header)
    if not match or not (match.group(1) or match.group(2)):
        return None  # multiple or malformed ranges: RFC 9110 allows answering with the whole file
    first, last = match.groups()
    if not first:
        suffix = int(last)
        if suffix == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - suffix), size - 1
    start = int(first)
    if start >= size:
        return "unsatisfiable"
    end = min(int(last), size - 1) if last else size - 1
    return None if end < start else (start, end)


_LIST_DEFAULT_KEYS = (
    "_id", "id", "likes", "downloads", "trendingScore", "private", "tags", "pipeline_tag", "library_name",
    "createdAt", "modelId",
)  # fmt: skip
_LIST_FULL_KEYS = ("author", "sha", "lastModified", "gated", "disabled")


def _list_item(full: dict[str, Any], query: dict[str, list[str]]) -> dict[str, Any]:
    """A list_models item: as small as the Hub's unless full / config / cardData / expand ask for more."""
    expand = query.get("expand") or query.get("expand[]")
    if expand:
        return {"_id": full["_id"], "id": full["id"], **{k: full.get(k) for k in expand if k in full}}
    item = {k: full.get(k) for k in _LIST_DEFAULT_KEYS}
    if _truthy(query.get("full", [None])[0]):
        item.update({k: full.get(k) for k in _LIST_FULL_KEYS})
        item["siblings"] = [{"rfilename": s["rfilename"]} for s in full["siblings"]]
    if _truthy(query.get("config", [None])[0]):
        item["config"] = full.get("config")
    if _truthy(query.get("cardData", [None])[0]):
        item["cardData"] = full.get("cardData")
    return item


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    hub: HubServer

    def __init__(self, address: tuple[str, int], handler: type[_BaseHandler]) -> None:
        super().__init__(address, handler)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        # Tracked so stop() can end kept-alive connections too, not only the listening socket.
        with self._open_lock:
            self._open.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                self._open.discard(request)

    def close_connections(self) -> None:
        with self._open_lock:
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@dataclass
class HubServer:
    """The Hub-compatible server over `root`; `start()` serves it from a background thread.

    `users` maps extra bearer tokens to user names (valid tokens with access to nothing in particular);
    the tokens listed in each repo.json are valid too. Page sizes are small-able so tests can exercise
    the client's pagination without creating a thousand repos.

    With `lfs_redirect` (the default, as on the Hub) LFS files redirect to signed URLs on a second server,
    the CDN host at `cdn_url` (its own port: another origin). Signed URLs hold for `signed_url_ttl` seconds.
    """

    root: Path
    host: str = "127.0.0.1"
    port: int = 0
    users: dict[str, str] = field(default_factory=dict)
    tree_page_size: int = MAX_PAGE
    list_page_size: int = MAX_PAGE
    keep_requests: bool = True
    lfs_redirect: bool = True
    cdn_host: str = "127.0.0.1"
    cdn_port: int = 0
    signed_url_ttl: int = 3600

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.store = _Store(self.root)
        self.requests: list[RequestRecord] = []
        self._lock = threading.Lock()
        self._faults: dict[tuple[str, str], _Fault] = {}
        self._listing_cache: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {}
        self._listings: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self._servers: list[tuple[_HTTPServer, threading.Thread]] = []
        # Signs CDN URLs; fresh per server, so a URL from another run is refused like a forged one.
        self._url_key = secrets.token_bytes(32)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def cdn_url(self) -> str:
        return f"http://{self.cdn_host}:{self.cdn_port}"

    def start(self) -> HubServer:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.port = self._serve(self.host, self.port, _Handler, "hub-server")
            if self.lfs_redirect:
                self.cdn_port = self._serve(self.cdn_host, self.cdn_port, _CdnHandler, "hub-cdn-server")
        except BaseException:
            self.stop()
            raise
        return self

    def _serve(self, host: str, port: int, handler: type[_BaseHandler], name: str) -> int:
        httpd = _HTTPServer((host, port), handler)
        httpd.hub = self
        thread = threading.Thread(target=httpd.serve_forever, name=name, daemon=True)
        thread.start()
        self._servers.append((httpd, thread))
        return int(httpd.server_address[1])

    def stop(self) -> None:
        for httpd, thread in self._servers:
            httpd.shutdown()
            httpd.server_close()
            httpd.close_connections()
            thread.join(timeout=10)
        self._servers.clear()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def known_tokens(self) -> dict[str, str]:
        """token -> user name, for every token the server accepts."""
        tokens = dict(self.users)
        for _, meta in self.store.repos():
            tokens.update(meta.get("tokens") or {})
        return tokens

    def fail_next_download(self, repo_id: str, filename: str, after_bytes: int, times: int = 1) -> None:
        """Cut the next `times` GET bodies of a file after `after_bytes`: a dropped connection mid-download."""
        with self._lock:
            self._faults[(repo_id, filename)] = _Fault(after_bytes, times)

    def clear_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def mark(self) -> int:
        """A position in the request log, for `requests_for(..., since=mark)`."""
        with self._lock:
            return len(self.requests)

    def requests_for(self, needle: str, since: int = 0) -> list[RequestRecord]:
        with self._lock:
            return [r for r in self.requests[since:] if needle in r.path]

    def downloads(self, repo_id: str, since: int = 0) -> list[RequestRecord]:
        """GETs that answered with a repo file's bytes (200/206), from the Hub host or the CDN host."""
        with self._lock:
            return [
                r for r in self.requests[since:]
                if r.method == "GET" and r.status in (200, 206) and r.file is not None and r.file[0] == repo_id
            ]  # fmt: skip

    def _take_fault(self, repo_id: str, paths: tuple[str, ...]) -> int | None:
        with self._lock:
            key = next(((repo_id, p) for p in paths if (repo_id, p) in self._faults), None)
            if key is None:
                return None
            fault = self._faults[key]
            fault.times -= 1
            if fault.times <= 0:
                del self._faults[key]
            return fault.after_bytes

    # -- the CDN host ---------------------------------------------------------------------------------

    def _signature(self, path: str, expires: str, disposition: str) -> str:
        message = f"{path}\n{expires}\n{disposition}".encode()
        digest = hmac.new(self._url_key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def signed_url(self, repo_id: str, oid: str, name: str) -> str:
        """Where the CDN host serves an LFS object: `/<repo id>/<sha256>`, signed and expiring, the shape of
        the Hub's `cdn-lfs` links (a CloudFront canned-policy URL)."""
        path = f"/{repo_id}/{oid}"
        disposition = f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\";"
        expires = str(int(time.time()) + self.signed_url_ttl)
        query = {
            "response-content-disposition": disposition,
            "Expires": expires,
            "Signature": self._signature(path, expires, disposition),
            "Key-Pair-Id": "devstack",
        }
        return f"{self.cdn_url}{quote(path)}?{urlencode(query)}"

    def verify_signed_url(self, path: str, query: Mapping[str, str]) -> str:
        """The response Content-Disposition a valid, unexpired signed URL carries; raises 403 otherwise."""
        expires, disposition = query.get("Expires", ""), query.get("response-content-disposition", "")
        expected = self._signature(path, expires, disposition)
        if not hmac.compare_digest(expected, query.get("Signature", "")):
            raise _CdnError(403, "AccessDenied", "Access denied")
        if not expires.isdigit() or int(expires) < time.time():
            raise _CdnError(403, "AccessDenied", "Request has expired")
        return disposition

    def lfs_object(self, repo_id: str, oid: str) -> _LfsObject | None:
        """The LFS object `oid` of a repo, found in any commit (the bytes are the same wherever it is)."""
        try:
            meta = self.store.load(repo_id)
        except ValueError:
            return None
        if meta is None or meta.get("moved_to"):
            return None
        found: list[tuple[str, str, int]] = [
            (sha, path, int(entry["size"]))
            for sha, commit in (meta.get("commits") or {}).items()
            for path, entry in commit["files"].items()
            if (entry.get("lfs") or {}).get("oid") == oid
        ]
        if not found:
            return None
        sha, path, size = found[0]
        return _LfsObject(
            repo_dir(self.root, repo_id) / COMMITS_DIR / sha / path, size, tuple(dict.fromkeys(p for _, p, _ in found))
        )

    def _record(self, record: RequestRecord) -> None:
        if self.keep_requests:
            with self._lock:
                self.requests.append(record)

    # -- collections ----------------------------------------------------------------------------------

    def load_collection(self, slug: str) -> dict[str, Any] | None:
        try:
            path = collection_path(self.root, slug)
            data: dict[str, Any] = json.loads(path.read_text())
        except (ValueError, OSError):
            return None
        return data

    def collection_payload(self, data: dict[str, Any], access: _Access) -> dict[str, Any]:
        """The `/api/collections/{slug}` document, items derived live from the repos as on the Hub: a model
        item whose repo is gone, or private and not visible to this caller, is left out."""
        items: list[dict[str, Any]] = []
        for position, stored in enumerate(data.get("items") or []):
            item_type, item_id = stored["type"], stored["id"]
            base: dict[str, Any] = {
                "_id": hashlib.sha1(f"{data['slug']}:{item_type}:{item_id}".encode()).hexdigest()[:24],
                "position": position,
                "type": item_type,
                "id": item_id,
            }
            if stored.get("note"):
                base["note"] = {"html": stored["note"], "text": stored["note"]}
            if item_type != "model":
                items.append({**base, **(stored.get("extra") or {})})
                continue
            meta = self.store.load(item_id)
            if meta is not None and meta.get("moved_to"):
                meta = self.store.load(meta["moved_to"])
            if meta is None or not (meta.get("branches") or {}).get("main"):
                continue
            if meta.get("private") and access.token not in (meta.get("tokens") or {}):
                continue
            sha = meta["branches"]["main"]
            full = self.model_payload(meta, sha, meta["commits"][sha], {})
            items.append(
                {
                    **base,
                    "id": full["id"],
                    "author": full["author"],
                    "downloads": full["downloads"],
                    "gated": full["gated"],
                    "lastModified": full["lastModified"],
                    "likes": full["likes"],
                    "pipeline_tag": full["pipeline_tag"],
                    "private": full["private"],
                    "repoType": "model",
                    "isLikedByUser": False,
                    "availableInferenceProviders": [],
                    "widgetOutputUrls": [],
                }
            )
        owner = data["slug"].split("/", 1)[0]
        return {
            "slug": data["slug"],
            "title": data["title"],
            "description": data.get("description"),
            "lastUpdated": data["lastUpdated"],
            "gating": False,
            "owner": {
                "_id": hashlib.sha1(owner.encode()).hexdigest()[:24],
                "avatarUrl": "",
                "fullname": owner,
                "name": owner,
                "isHf": False,
                "isHfAdmin": False,
                "isMod": False,
                "type": "org",
                "isEnterprise": False,
            },
            "items": items,
            "position": int(data.get("position", 0)),
            "theme": data.get("theme", "green"),
            "private": bool(data.get("private")),
            "shareUrl": f"{self.url}/collections/{data['slug']}",
            "upvotes": int(data.get("upvotes", 0)),
            "isUpvotedByUser": False,
        }

    # -- model info -----------------------------------------------------------------------------------

    def cached_listing(self, version: tuple[Any, ...] | None, shape: tuple[Any, ...]) -> list[dict[str, Any]] | None:
        if version is None:
            return None
        with self._lock:
            return self._listings.get((version, shape))

    def keep_listing(
        self, version: tuple[Any, ...] | None, shape: tuple[Any, ...], items: list[dict[str, Any]]
    ) -> None:
        if version is None:
            return
        with self._lock:
            self._listings[(version, shape)] = items
            while len(self._listings) > _LISTINGS_KEPT:
                del self._listings[next(iter(self._listings))]

    def listing_payload(self, meta: dict[str, Any], sha: str) -> dict[str, Any]:
        """`model_payload(meta, sha, ..., {})` for listings, kept per repo while its repo.json and `sha` stay the
        same (`_Store.load` returns the same dict until the file changes; a commit's files never change), so a
        listing does not rebuild 10,000 payloads when its index is rebuilt. Read-only."""
        repo_id: str = meta["id"]
        with self._lock:
            cached = self._listing_cache.get(repo_id)
        if cached is not None and cached[0] is meta and cached[1] == sha:
            return cached[2]
        payload = self.model_payload(meta, sha, meta["commits"][sha], {})
        with self._lock:
            self._listing_cache[repo_id] = (meta, sha, payload)
        return payload

    def last_commit(self, meta: dict[str, Any], sha: str, path: str) -> dict[str, str]:
        """The newest first-parent ancestor of `sha` that changed `path` (a file or a directory)."""

        def oid_at(commit_sha: str) -> str | None:
            files = meta["commits"][commit_sha]["files"]
            if path in files:
                return str(files[path]["oid"])
            return self.store.tree_oids(meta["id"], commit_sha, files).get(path)

        current, mine = sha, oid_at(sha)
        while True:
            parent = (meta["commits"][current].get("parents") or [None])[0]
            if parent is None or oid_at(parent) != mine:
                break
            current = parent
        c = meta["commits"][current]
        return {"id": current, "title": c["title"], "date": c["date"]}

    def _read_small(self, meta: dict[str, Any], sha: str, commit: dict[str, Any], name: str) -> bytes | None:
        entry = commit["files"].get(name)
        if entry is None or entry["size"] > 4 << 20:
            return None
        try:
            return (repo_dir(self.root, meta["id"]) / COMMITS_DIR / sha / name).read_bytes()
        except OSError:
            return None

    def _json_file(self, meta: dict[str, Any], sha: str, commit: dict[str, Any], name: str) -> dict[str, Any]:
        raw = self._read_small(meta, sha, commit, name)
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def model_payload(
        self, meta: dict[str, Any], sha: str, commit: dict[str, Any], query: Mapping[str, list[str]]
    ) -> dict[str, Any]:
        """The `/api/models/{id}` document, derived the way the Hub derives it from the repo's files."""
        repo_id: str = meta["id"]
        files: dict[str, dict[str, Any]] = commit["files"]
        config = self._json_file(meta, sha, commit, "config.json")
        readme = self._read_small(meta, sha, commit, "README.md")
        card = _front_matter(readme.decode(errors="replace")) if readme else None
        model_index = self._json_file(meta, sha, commit, "model_index.json")

        # The Hub returns a digest of config.json, not the file itself.
        hub_config: dict[str, Any] = {
            k: config[k] for k in ("architectures", "model_type", "quantization_config") if k in config
        }
        tok = self._json_file(meta, sha, commit, "tokenizer_config.json")
        tok_keys = ("bos_token", "eos_token", "unk_token", "pad_token", "chat_template")
        if any(k in tok for k in tok_keys):
            hub_config["tokenizer_config"] = {k: tok[k] for k in tok_keys if k in tok}
        if model_index:
            hub_config["diffusers"] = {"_class_name": model_index.get("_class_name")}

        card = card or {}
        library = card.get("library_name") or meta.get("library_name")
        if library is None and model_index:
            library = "diffusers"
        elif library is None and config.get("architectures"):
            library = "transformers"
        pipeline = card.get("pipeline_tag") or meta.get("pipeline_tag")
        if pipeline is None and any(str(a).endswith("ForCausalLM") for a in config.get("architectures") or []):
            pipeline = "text-generation"
        elif pipeline is None and model_index:
            pipeline = "text-to-image"

        tags: list[str] = [*(meta.get("tags") or []), *(card.get("tags") or [])]
        if library:
            tags.append(str(library))
        if any(p.endswith(".safetensors") for p in files):
            tags.append("safetensors")
        if any(p.endswith(".gguf") for p in files):
            tags.append("gguf")
        if config.get("model_type"):
            tags.append(str(config["model_type"]))
        if pipeline:
            tags.append(str(pipeline))
        if card.get("license"):
            tags.append(f"license:{card['license']}")

        blobs = _truthy(next(iter(query.get("blobs") or []), None))
        siblings = []
        for path in sorted(files):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                f = files[path]
                sibling.update({"blobId": f["oid"], "size": f["size"]})
                if f.get("lfs"):
                    lfs = f["lfs"]
                    sibling["lfs"] = {"sha256": lfs["oid"], "size": lfs["size"], "pointerSize": lfs["pointerSize"]}
            siblings.append(sibling)

        payload: dict[str, Any] = {
            "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
            "id": repo_id,
            "modelId": repo_id,
            "author": repo_id.split("/")[0] if "/" in repo_id else None,
            "sha": sha,
            "lastModified": commit["date"],
            "createdAt": meta.get("created_at", commit["date"]),
            "private": bool(meta.get("private")),
            "gated": meta.get("gated") or False,
            "disabled": False,
            "downloads": int(meta.get("downloads", 0)),
            "likes": int(meta.get("likes", 0)),
            "trendingScore": 0,
            "library_name": library,
            "tags": list(dict.fromkeys(tags)),
            "pipeline_tag": pipeline,
            "config": hub_config or None,
            "cardData": card or None,
            "siblings": siblings,
            "spaces": [],
            "usedStorage": sum(int(f["size"]) for f in files.values()),
        }
        if commit.get("safetensors"):
            payload["safetensors"] = commit["safetensors"]
        if commit.get("gguf"):
            payload["gguf"] = commit["gguf"]
        expand = list(query.get("expand") or query.get("expand[]") or [])
        if expand:
            return {"_id": payload["_id"], "id": repo_id, **{k: payload[k] for k in expand if k in payload}}
        return payload


def collection_path(root: Path, slug: str) -> Path:
    """Where a collection lives: `<root>/_collections/<namespace>/<slug>.json` (no repo id starts with "_")."""
    parts = slug.split("/")
    if len(parts) != 2 or not all(_SEGMENT.match(p) and ".." not in p for p in parts):
        raise ValueError(f"invalid collection slug {slug!r}")
    return root / COLLECTIONS_DIR / parts[0] / f"{parts[1]}.json"


def write_collection(
    root: Path,
    namespace: str,
    title: str,
    items: Sequence[str | Mapping[str, Any]],
    *,
    slug: str | None = None,
    private: bool = False,
    tokens: Iterable[str] = (),
    description: str | None = None,
    last_updated: str | None = None,
) -> str:
    """Create (or, given its `slug`, replace) a collection; returns its slug, `<namespace>/<title>-<24 hex>` as on
    the Hub. An item is a model repo id, or `{"type": ..., "id": ..., "note": ..., "extra": {...}}`."""
    if slug is None:
        words = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "collection"
        slug = f"{namespace}/{words[:60]}-{secrets.token_hex(12)}"
    stored = [{"type": "model", "id": i} if isinstance(i, str) else dict(i) for i in items]
    data = {
        "slug": slug,
        "title": title,
        "description": description,
        "items": stored,
        "private": private,
        "tokens": {t: namespace for t in tokens},
        "lastUpdated": last_updated or time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
    }
    path = collection_path(Path(root), slug)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{secrets.token_hex(4)}")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)
    return slug


def iter_repo_files(root: Path, repo_id: str, revision: str = "main") -> Iterator[Path]:
    """Files of a repo at a revision on disk (for tests comparing downloads byte for byte)."""
    meta = _Store(root).load(repo_id)
    if meta is None:
        raise KeyError(repo_id)
    sha = meta["branches"].get(revision, revision)
    base = repo_dir(root, repo_id) / COMMITS_DIR / sha
    for name in sorted(meta["commits"][sha]["files"]):
        yield base / name


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a directory of model repos with the Hub's HTTP contract.")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cdn-port", type=int, default=0, help="the port of the host LFS files redirect to")
    parser.add_argument("--user", action="append", default=[], metavar="TOKEN=NAME", help="an extra valid token")
    parser.add_argument("--demo", action="store_true", help="create a small safetensors and a GGUF repo if absent")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    if args.demo:
        from devstack import model_repos  # late import: model_repos builds on this module

        for repo_id, make in (("devstack/tiny-llama", model_repos.make_safetensors_repo),
                              ("devstack/tiny-llama-gguf", model_repos.make_gguf_repo)):  # fmt: skip
            if _Store(args.root).load(repo_id) is None:
                make(args.root, repo_id)
    users = dict(u.split("=", 1) for u in args.user)
    server = HubServer(args.root, host=args.host, port=args.port, users=users, cdn_port=args.cdn_port).start()
    print(f"HF_ENDPOINT={server.url}", flush=True)
    log.info("LFS files redirect to %s", server.cdn_url)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    server.stop()


if __name__ == "__main__":
    main()
