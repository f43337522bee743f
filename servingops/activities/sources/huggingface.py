"""Hugging Face Hub sources: parse a model URL, resolve it to a commit and its files, fetch a file by range.

What we use from `huggingface_hub` (the real client, pointed at any Hub-compatible endpoint):
- `HfApi(endpoint=..., token=...).model_info(repo, revision=..., files_metadata=True)`: the commit sha, every
  file with its size, git blob id and LFS sha256, and the Hub's metadata (pipeline tag, tags, library, config
  summary, card data) in one request; `HfApi.auth_check` for gated repos, whose info is public but whose
  files are not (so a missing grant fails at resolve, not after the first download);
- `hf_hub_url` (the resolve URL, pinned to the commit sha), `build_hf_headers` (user agent and auth header,
  and `token=False` so a worker's own HF_TOKEN or saved login is never used for a user's model),
  `get_session()` (the client's configured httpx session: proxies, CA settings and request hooks set up for
  the Hub apply to our downloads too) and `hf_raise_for_status` (the Hub's error codes mapped to the
  client's exception classes, which we map to condition reasons).
Not `hf_hub_download`: it writes into its own cache layout, retries and resumes inside one call (hiding
progress from Temporal's heartbeats and retries) and hashes nothing; we need ranged streaming into our spool
with an incremental sha256 and a heartbeat per chunk, which its session gives us directly.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx2
from huggingface_hub import HfApi, get_session, hf_hub_url, hf_raise_for_status
from huggingface_hub.errors import (
    DisabledRepoError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import ModelInfo

# huggingface_hub.utils re-exports these lazily, which mypy cannot see; the names are its public API.
from huggingface_hub.utils import build_hf_headers, validate_repo_id  # type: ignore[attr-defined]
from temporalio.exceptions import ApplicationError

from servingops.activities.sources.spool import CHUNK_SIZE, Opener, RangeBody
from servingops.activities.sources.types import SourceFile, SourceListing
from servingops.api_models.deckhouse.enums import SourceType
from servingops.api_models.errors import ErrorType, application_error
from servingops.clients.model_files import InvalidModel, ProviderInfo

log = logging.getLogger(__name__)

DEFAULT_HF_ENDPOINT = "https://huggingface.co"
HF_ENDPOINT_ENV = "HF_ENDPOINT"
LIBRARY_NAME = "servingops"
API_TIMEOUT = 30.0
DOWNLOAD_TIMEOUT = httpx2.Timeout(60.0, connect=15.0)
"""Seconds without a byte before a download fails (the session's default is no timeout at all)."""

_HOSTS = frozenset({"huggingface.co", "www.huggingface.co", "hf.co"})
# First path segments of huggingface.co that are site pages, not user or organisation names.
_SITE_PAGES = frozenset(
    {
        "api", "blog", "buckets", "changelog", "chat", "collections", "docs", "enterprise", "join", "kernels",
        "learn", "login", "models", "new", "notifications", "organizations", "papers", "posts", "pricing",
        "search", "settings", "tasks",
    }
)  # fmt: skip
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


# -- URLs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HfRef:
    repo_id: str
    revision: str | None = None
    """From a tree/<revision> or blob/<revision>/<file> URL; None means the default branch."""
    file: str | None = None
    """From a blob/ URL: the one GGUF file (quantization) to import."""


def _invalid(url: str, why: str) -> ApplicationError:
    return application_error(ErrorType.INVALID_SOURCE_URL, f"{url[:300]!r} {why}")


def parse_hf_url(url: str) -> HfRef:
    """The accepted forms, nothing else:

        https://huggingface.co/<org>/<repo>                        (also hf.co, www.huggingface.co)
        https://huggingface.co/<repo>                              (repo ids without an organisation: gpt2)
        https://huggingface.co/<org>/<repo>/tree/<revision>        (a branch, tag or commit sha; "/" as %2F)
        https://huggingface.co/<org>/<repo>/blob/<revision>/<file>.gguf   (one quantization of a GGUF repo)
    """
    split = urlsplit(url)
    if split.scheme != "https" or (split.hostname or "").lower() not in _HOSTS:
        raise _invalid(url, "is not a Hugging Face URL (https://huggingface.co/<org>/<repo>)")
    if split.port is not None or split.username is not None or split.password is not None:
        raise _invalid(url, "must not carry a port or credentials; reference a Secret with authSecretRef instead")
    if split.query or split.fragment:
        raise _invalid(url, "must not have a query or fragment; use https://huggingface.co/<org>/<repo>")
    path = split.path[1:] if split.path.startswith("/") else split.path
    path = path[:-1] if path.endswith("/") else path
    segments = [unquote(s) for s in path.split("/")] if path else []
    if not segments:
        raise _invalid(url, "names no repository; use https://huggingface.co/<org>/<repo>")
    if segments[0] in ("datasets", "spaces"):
        raise _invalid(url, f"is a {segments[0][:-1]}, not a model repository")
    if segments[0] in _SITE_PAGES:
        raise _invalid(url, "is a page of the Hugging Face site, not a model repository")
    if len(segments) >= 2 and segments[1] not in ("tree", "blob", "resolve", "commit", "discussions"):
        repo_id, rest = f"{segments[0]}/{segments[1]}", segments[2:]
    else:
        repo_id, rest = segments[0], segments[1:]
    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise _invalid(url, f"does not name a valid repository id ({repo_id[:200]!r})") from None
    if not rest:
        return HfRef(repo_id)
    if rest[0] == "tree" and len(rest) == 2 and rest[1]:
        return HfRef(repo_id, revision=rest[1])
    if rest[0] == "tree" and len(rest) > 2:
        raise _invalid(url, "names a folder of the repository; import the whole repository (without the folder)")
    if rest[0] == "blob" and len(rest) >= 3 and rest[1] and all(rest[2:]):
        file = "/".join(rest[2:])
        if not file.lower().endswith(".gguf"):
            raise _invalid(
                url,
                "names a single file; only a .gguf file (one quantization) can be chosen this way, use the "
                "repository URL or tree/<revision> otherwise",
            )
        return HfRef(repo_id, revision=rest[1], file=file)
    raise _invalid(
        url,
        "is not a repository URL; accepted forms are https://huggingface.co/<org>/<repo>, .../tree/<revision> "
        "and .../blob/<revision>/<file>.gguf",
    )


# -- which files are the model -----------------------------------------------------------------------


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    sha256: str | None = None
    blob_id: str | None = None


@dataclass
class Selection:
    files: list[HubFile]
    skipped: list[str]


_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
_OTHER_WEIGHT_SUFFIXES = (
    ".onnx", ".onnx_data", ".h5", ".msgpack", ".tflite", ".ot", ".npz", ".mlmodel", ".keras", ".pb", ".nemo",
)  # fmt: skip
# Top-level folders holding exports for other runtimes, duplicates of the weights we import.
_EXPORT_DIRS = frozenset({"onnx", "openvino", "coreml", "tflite", "tensorrt", "flax"})
# Indexes of weights we skip: pytorch_model.bin.index.json, tf_model.h5.index.json, and diffusers'
# variant form diffusion_pytorch_model.bin.index.fp16.json.
_SKIPPED_INDEX = re.compile(r"\.(bin|pt|pth|ckpt|h5|msgpack)\.index(\.[A-Za-z0-9_]+)?\.json$", re.IGNORECASE)
_VARIANT = re.compile(
    r"^(model|diffusion_pytorch_model)(?:\.([A-Za-z0-9_]+)(?:-\d{5}-of-\d{5})?\.safetensors"
    r"|\.safetensors\.index\.([A-Za-z0-9_]+)\.json)$"
)
_CONSOLIDATED = re.compile(r"^consolidated(\.\d+)?(-\d{5}-of-\d{5})?\.safetensors$")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})$")
_QUANT = re.compile(
    r"(?:^|[-_.])((?:UD-)?(?:I?Q\d+(?:_[A-Z0-9]+)*|TQ\d_\d|MXFP4(?:_MOE)?|BF16|F16|F32|FP16|FP32))(?=[-_.]|$)",
    re.IGNORECASE,
)
QUANT_PREFERENCE = ("Q4_K_M", "Q8_0")
PROJECTOR_PREFERENCE = ("F16", "BF16", "F32", "Q8_0")
# Root files kept next to a GGUF model: documentation and licence, and what a runtime may read beside the
# GGUF (params, chat templates, a transformers config); never other weights, images or imatrix data.
_GGUF_COMPANIONS = re.compile(
    r"^(readme|license|licence|notice|copying|use_policy|params)([._-].*)?$"
    r"|^(config|generation_config|chat_template)\.json$|.*\.jinja$",
    re.IGNORECASE,
)


def _hidden(path: str) -> bool:
    # .gitattributes, .gitignore, .github/, ...: repository plumbing, never part of a model.
    return any(part.startswith(".") for part in path.split("/"))


def _lower_name(path: str) -> str:
    return path.rsplit("/", 1)[-1].lower()


def quantization_label(path: str) -> str | None:
    """The quantization a GGUF file name states (Q4_K_M, IQ4_XS, F16, ...), upper-case; None if it states none."""
    stem = _SPLIT.sub("", path.rsplit("/", 1)[-1][: -len(".gguf")] if path.lower().endswith(".gguf") else path)
    found = _QUANT.findall(stem)
    if not found:
        return None
    label: str = found[-1].upper()
    return label.removeprefix("UD-")


def _is_projector(path: str) -> bool:
    return "mmproj" in _lower_name(path)


def _gguf_group_key(path: str) -> tuple[str, str]:
    """Files of one model split by gguf-split share (folder, name without -0000N-of-0000M)."""
    folder, _, name = path.rpartition("/")
    return folder, _SPLIT.sub("", name[: -len(".gguf")])


def _prefer(groups: Sequence[list[HubFile]], preference: Sequence[str]) -> list[HubFile]:
    """The group whose quantization comes first in `preference`, else the smallest; ties by path."""

    def size(group: list[HubFile]) -> int:
        return sum(f.size for f in group)

    for wanted in preference:
        matching = [g for g in groups if quantization_label(g[0].path) == wanted]
        if matching:
            return min(matching, key=lambda g: (size(g), g[0].path))
    return min(groups, key=lambda g: (size(g), g[0].path))


def select_files(files: Sequence[HubFile], requested_file: str | None = None) -> Selection:
    """The files that make the model, by the rules documented in the module `activities.sources`."""
    visible = [f for f in files if not _hidden(f.path)]
    skipped = [f.path for f in files if _hidden(f.path)]
    paths = frozenset(f.path for f in visible)
    root = {p for p in paths if "/" not in p}

    if requested_file is not None:
        if requested_file not in paths:
            raise application_error(ErrorType.SOURCE_FILE_NOT_FOUND, f"the repository has no file {requested_file!r}")
        if _is_projector(requested_file):
            raise application_error(
                ErrorType.INVALID_SOURCE_URL,
                f"{requested_file!r} is a multimodal projector, not a model; point the URL at the model's .gguf file",
            )
        kept = _select_gguf(visible, requested_file)
    elif "model_index.json" in root:
        kept = [f for f in visible if _keep_weights_layout(f.path, paths, diffusers=True)]
    elif any(n.endswith((".safetensors", ".safetensors.index.json")) for n in root):
        kept = [f for f in visible if _keep_weights_layout(f.path, paths, diffusers=False)]
    elif any(f.path.lower().endswith(".gguf") for f in visible):
        kept = _select_gguf(visible, None)
    else:
        raise _no_model(visible)
    kept_paths = {f.path for f in kept}
    skipped += [f.path for f in visible if f.path not in kept_paths]
    return Selection(files=kept, skipped=sorted(skipped))


def _keep_weights_layout(path: str, paths: frozenset[str], *, diffusers: bool) -> bool:
    """Safetensors and Diffusers repos: everything but duplicates of the weights in other forms."""
    parts = path.split("/")
    name = parts[-1]
    lower = name.lower()
    folder = "/".join(parts[:-1])
    if len(parts) > 1 and parts[0].lower() in _EXPORT_DIRS:
        return False  # onnx/, openvino/, ...: the same model exported for another runtime
    if not diffusers and len(parts) > 1 and parts[0] == "original":
        return False  # Meta's original consolidated checkpoint, a duplicate of the root weights
    if lower.endswith(_PICKLE_SUFFIXES) or lower.endswith(_OTHER_WEIGHT_SUFFIXES) or lower.endswith(".gguf"):
        return False  # the same weights as pickles or another framework's format (also optimizer/args pickles)
    if _SKIPPED_INDEX.search(lower) or "tfevents" in lower:
        return False  # the index of skipped weights; training logs
    if diffusers and len(parts) == 1 and lower.endswith(".safetensors"):
        return False  # a single-file checkpoint next to the pipeline: the pipeline's weights are in its folders
    if not diffusers and len(parts) == 1 and _CONSOLIDATED.match(name) and _has_canonical(paths, "", "model"):
        return False  # Mistral's native-format copy next to the transformers weights
    variant = _VARIANT.match(name)
    if variant and (variant.group(2) or variant.group(3)) and _has_canonical(paths, folder, variant.group(1)):
        return False  # fp16 / non_ema variants when the canonical weights are there
    return True


def _has_canonical(paths: frozenset[str], folder: str, stem: str) -> bool:
    """Whether `folder` holds the canonical (non-variant) weights `<stem>.safetensors`, sharded or not."""
    prefix = f"{folder}/" if folder else ""
    if f"{prefix}{stem}.safetensors" in paths or f"{prefix}{stem}.safetensors.index.json" in paths:
        return True
    shard = re.compile(re.escape(f"{prefix}{stem}") + r"-\d{5}-of-\d{5}\.safetensors$")
    return any(shard.match(p) for p in paths)


def _select_gguf(files: Sequence[HubFile], requested: str | None) -> list[HubFile]:
    ggufs = [f for f in files if f.path.lower().endswith(".gguf")]
    groups: dict[tuple[str, str], list[HubFile]] = {}
    for f in ggufs:
        if not _is_projector(f.path):
            groups.setdefault(_gguf_group_key(f.path), []).append(f)
    if not groups:
        raise InvalidModel(
            ErrorType.UNKNOWN_FORMAT,
            "the repository's GGUF files are all multimodal projectors (mmproj); there is no model file",
        )
    if requested is not None:
        chosen = groups[_gguf_group_key(requested)]
    else:
        at_root = [g for key, g in groups.items() if key[0] == ""]
        chosen = _prefer(at_root or list(groups.values()), QUANT_PREFERENCE)
    chosen = sorted(chosen, key=lambda f: f.path)
    folder = _gguf_group_key(chosen[0].path)[0]
    projectors = [[f] for f in ggufs if _is_projector(f.path)]
    near = [g for g in projectors if _gguf_group_key(g[0].path)[0] == folder]
    extra = _prefer(near or projectors, PROJECTOR_PREFERENCE) if projectors else []
    companions = [f for f in files if "/" not in f.path and _GGUF_COMPANIONS.match(f.path)]
    return [*chosen, *extra, *companions]


def _no_model(files: Sequence[HubFile]) -> InvalidModel:
    """Fail at resolve, before downloading gigabytes the inspector would reject (same reasons and wording)."""
    pickles = [f.path for f in files if _lower_name(f.path).endswith(_PICKLE_SUFFIXES)]
    others = [f.path for f in files if _lower_name(f.path).endswith(_OTHER_WEIGHT_SUFFIXES)]
    if pickles or others:
        shown = ", ".join((pickles + others)[:5])
        return InvalidModel(
            ErrorType.UNSUPPORTED_FORMAT,
            f"the repository has weights only in formats that are not served ({shown}); supported formats are "
            "Safetensors, GGUF and Diffusers (PyTorch pickles are refused because loading one can run code)",
        )
    nested = [f.path for f in files if f.path.endswith((".safetensors", "model_index.json"))]
    if nested:
        return InvalidModel(
            ErrorType.UNKNOWN_FORMAT,
            f"no model at the root of the repository; model files were found only in subdirectories "
            f"({', '.join(nested[:5])})",
        )
    return InvalidModel(
        ErrorType.UNKNOWN_FORMAT,
        f"no Safetensors, GGUF or Diffusers model among the repository's files "
        f"({', '.join(f.path for f in files[:5]) or 'none'})",
    )


# -- errors ------------------------------------------------------------------------------------------


def hub_error(exc: BaseException, what: str) -> ApplicationError:
    """The client's exception as an ApplicationError whose type is a condition reason.

    Our own wording plus the Hub's one-line message: the client's full text embeds request ids and URLs.
    """
    server = getattr(exc, "server_message", None)
    detail = f" (the Hub said: {server.strip()[:300]})" if isinstance(server, str) and server.strip() else ""
    if isinstance(exc, GatedRepoError):
        return application_error(
            ErrorType.SOURCE_ACCESS_DENIED,
            f"{what}: the repository is gated and the token has not been granted access (or no token was given); "
            f"accept its conditions on the Hub and reference a Secret with that account's token{detail}",
        )
    if isinstance(exc, RepositoryNotFoundError):
        return application_error(
            ErrorType.SOURCE_NOT_FOUND,
            f"{what}: the repository does not exist, or it is private and the token has no access to it",
        )
    if isinstance(exc, RevisionNotFoundError):
        return application_error(ErrorType.REVISION_NOT_FOUND, f"{what}: the revision does not exist{detail}")
    if isinstance(exc, RemoteEntryNotFoundError):
        return application_error(ErrorType.SOURCE_FILE_NOT_FOUND, f"{what}: the file does not exist{detail}")
    if isinstance(exc, DisabledRepoError):
        return application_error(ErrorType.SOURCE_ACCESS_DENIED, f"{what}: the repository is disabled{detail}")
    if isinstance(exc, HFValidationError):
        return application_error(ErrorType.INVALID_SOURCE_URL, f"{what}: {str(exc)[:300]}")
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        status = exc.response.status_code
        if status in (401, 403):
            return application_error(
                ErrorType.SOURCE_ACCESS_DENIED,
                f"{what}: HTTP {status}, the token is invalid or lacks access{detail}",
            )
        if status == 404:
            return application_error(ErrorType.SOURCE_NOT_FOUND, f"{what}: HTTP 404{detail}")
        if 400 <= status < 500 and status not in (408, 429):
            return application_error(ErrorType.SOURCE_REQUEST_REJECTED, f"{what}: HTTP {status}{detail}")
        return application_error(ErrorType.SOURCE_UNAVAILABLE, f"{what}: HTTP {status}{detail}")
    # Network trouble, timeouts, a connection cut mid-body: the next attempt may well succeed.
    return application_error(ErrorType.SOURCE_UNAVAILABLE, f"{what}: {type(exc).__name__}: {str(exc)[:300]}")


# -- the source --------------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    """Plain JSON values only (card data may hold dates and other YAML types): payloads must round-trip."""
    if value is None:
        return None
    return json.loads(json.dumps(value, default=str))


def _provider_info(info: ModelInfo) -> ProviderInfo:
    card = info.card_data.to_dict() if info.card_data is not None else None  # type: ignore[no-untyped-call]
    return ProviderInfo.model_validate(
        {
            "pipeline_tag": info.pipeline_tag,
            "tags": list(info.tags or []),
            "library_name": info.library_name,
            "config": _jsonable(info.config),
            "cardData": _jsonable(card) or None,
        }
    )


def _guarded(chunks: Iterator[bytes], convert: Callable[[BaseException], ApplicationError]) -> Iterator[bytes]:
    # Errors while reading the body (a connection cut mid-file) come out as the same retryable errors.
    try:
        yield from chunks
    except Exception as exc:
        raise convert(exc) from None


def _content_range_start(header: str | None) -> int | None:
    match = re.match(r"^\s*bytes\s+(\d+)-\d+/(\d+|\*)\s*$", header or "")
    return int(match.group(1)) if match else None


class HuggingFaceSource:
    def __init__(self, endpoint: str = DEFAULT_HF_ENDPOINT) -> None:
        self.endpoint = endpoint.rstrip("/")

    def _api(self, token: str | None) -> HfApi:
        # token=False, never None: None would make the client use the worker's own HF_TOKEN or saved login.
        return HfApi(endpoint=self.endpoint, token=token or False, library_name=LIBRARY_NAME)

    def resolve(self, url: str, token: str | None) -> SourceListing:
        ref = parse_hf_url(url)
        api = self._api(token)
        what = f"Hugging Face repository {ref.repo_id}" + (f" at {ref.revision}" if ref.revision else "")
        try:
            info = api.model_info(ref.repo_id, revision=ref.revision, files_metadata=True, timeout=API_TIMEOUT)
            if info.gated:
                api.auth_check(info.id or ref.repo_id, token=token or False)
        except ApplicationError:
            raise
        except Exception as exc:
            raise hub_error(exc, what) from None
        if not info.sha or not _COMMIT.match(info.sha):
            raise application_error(ErrorType.SOURCE_UNAVAILABLE, f"{what}: the Hub named no commit")
        hub_files: list[HubFile] = []
        for sibling in info.siblings or []:
            lfs = sibling.lfs
            size = lfs.size if lfs is not None else sibling.size
            if size is None:
                raise application_error(ErrorType.SOURCE_UNAVAILABLE,
                                        f"{what}: the Hub gave no size for {sibling.rfilename}")  # fmt: skip
            sha256 = lfs.sha256.lower() if lfs is not None and _SHA256.match(lfs.sha256.lower()) else None
            hub_files.append(HubFile(sibling.rfilename, int(size), sha256, sibling.blob_id))
        selection = select_files(hub_files, ref.file)
        log.info("%s resolved to %s: %d files, %d skipped", what, info.sha, len(selection.files),
                 len(selection.skipped))
        return SourceListing(
            provider=SourceType.HUGGING_FACE,
            locator=info.id or ref.repo_id,
            requested_revision=ref.revision,
            resolved_revision=info.sha,
            files=[SourceFile(path=f.path, size=f.size, sha256=f.sha256, blob=f.blob_id) for f in selection.files],
            provider_info=_provider_info(info),
            skipped=selection.skipped,
        )

    def opener(self, repo_id: str, revision: str, path: str, token: str | None) -> Opener:
        """Ranged GETs of one file at one commit, through the client's session, with its headers."""
        try:
            validate_repo_id(repo_id)
        except HFValidationError:
            raise application_error(ErrorType.INVALID_FETCH_INPUT, f"{repo_id[:200]!r} is not a repo id") from None
        if not _COMMIT.match(revision):
            raise application_error(ErrorType.INVALID_FETCH_INPUT, f"{revision[:100]!r} is not a commit sha")
        url = hf_hub_url(repo_id, path, revision=revision, endpoint=self.endpoint)
        headers = build_hf_headers(token=token or False, library_name=LIBRARY_NAME)
        # A compressed body has other byte offsets than the file: ranges must count file bytes.
        headers["Accept-Encoding"] = "identity"
        what = f"{repo_id}@{revision[:12]}: {path}"

        def convert(exc: BaseException) -> ApplicationError:
            return hub_error(exc, what)

        @contextlib.contextmanager
        def open_range(start: int, last: int | None) -> Iterator[RangeBody]:
            request_headers = dict(headers)
            if start or last is not None:
                request_headers["Range"] = f"bytes={start}-{'' if last is None else last}"
            with contextlib.ExitStack() as stack:
                try:
                    response = stack.enter_context(
                        get_session().stream("GET", url, headers=request_headers, timeout=DOWNLOAD_TIMEOUT)
                    )
                    if response.status_code >= 400:
                        response.read()  # error bodies are small; the client's error mapping reads them
                    hf_raise_for_status(response)
                except Exception as exc:
                    raise convert(exc) from None
                _check_commit(response, revision, what)
                offset = 0
                if response.status_code == 206:
                    offset_or_none = _content_range_start(response.headers.get("Content-Range"))
                    if offset_or_none is None:
                        raise application_error(ErrorType.SOURCE_UNAVAILABLE,
                                                f"{what}: a partial answer without a valid Content-Range")
                    offset = offset_or_none
                yield RangeBody(offset, _guarded(response.iter_bytes(CHUNK_SIZE), convert))

        return open_range


def _check_commit(response: httpx2.Response, revision: str, what: str) -> None:
    """The Hub names the commit it served (on the redirect, when the file comes from a CDN): it must be ours."""
    commits = {r.headers.get("X-Repo-Commit") for r in [*response.history, response]} - {None}
    if commits != {revision}:
        raise application_error(
            ErrorType.SOURCE_REVISION_MISMATCH,
            f"{what}: the Hub served commit {', '.join(sorted(c for c in commits if c)) or '(none named)'} "
            f"instead of {revision}",
        )
