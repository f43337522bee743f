"""Ollama sources: `https://ollama.com/library/<name>[:<tag>]`, read from an Ollama registry.

An Ollama registry speaks the OCI distribution API: `GET /v2/library/<name>/manifests/<tag>` returns a Docker
v2 manifest whose config blob holds {model_format, model_family, file_type, ...} and whose layers carry
Ollama media types. We read it with the project's `ModelRegistry` (oras-py's Registry: token/basic auth
challenges, plain HTTP for loopback registries, timeouts) and GET blobs by digest with a Range header.

Files of the listing, by layer media type (`application/vnd.ollama.image.<kind>`):

    model       -> model.gguf          (exactly one; the GGUF weights)
    projector   -> mmproj.gguf         (mmproj-2.gguf, ... when several)
    adapter     -> adapter.gguf        (adapter-2.gguf, ...)
    template    -> ollama/template     (also ProviderInfo.template)
    system      -> ollama/system       (also ProviderInfo.system)
    params      -> ollama/params.json  (also ProviderInfo.params)
    license     -> LICENSE             (LICENSE-2, ...; also ProviderInfo.license, joined)
    messages and any unknown kind: skipped (listed in `skipped` by media type)

The small text layers are read at resolve time for ProviderInfo (each bounded by TEXT_LIMIT, digest checked)
and still listed as files, so the published artifact keeps everything the model came with. The config
blob goes to ProviderInfo.config as is; its `capabilities` become ProviderInfo.capabilities only when they
state a task ("completion" or "embedding"): the inspector takes a non-empty list as the whole truth about
endpoints, and a list of features alone (e.g. ["vision"]) would erase them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from temporalio.exceptions import ApplicationError

from servingops.activities.sources.spool import CHUNK_SIZE, Opener, RangeBody
from servingops.activities.sources.types import SourceFile, SourceListing
from servingops.api_models.deckhouse.enums import SourceType
from servingops.api_models.errors import ErrorType, application_error
from servingops.clients.model_files import ProviderInfo
from servingops.clients.oci.media_types import DOCKER_MANIFEST_V2, OCI_MANIFEST
from servingops.clients.oci.registry_client import ModelRegistry, RegistryError

log = logging.getLogger(__name__)

DEFAULT_OLLAMA_REGISTRY = "https://registry.ollama.ai"
OLLAMA_REGISTRY_ENV = "SERVINGOPS_OLLAMA_REGISTRY"
DEFAULT_TAG = "latest"

MEDIA_PREFIX = "application/vnd.ollama.image."
MEDIA_MODEL = MEDIA_PREFIX + "model"
MEDIA_PROJECTOR = MEDIA_PREFIX + "projector"
MEDIA_ADAPTER = MEDIA_PREFIX + "adapter"
MEDIA_TEMPLATE = MEDIA_PREFIX + "template"
MEDIA_SYSTEM = MEDIA_PREFIX + "system"
MEDIA_PARAMS = MEDIA_PREFIX + "params"
MEDIA_LICENSE = MEDIA_PREFIX + "license"
CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json"

# Where each layer kind lands in the model directory: (first name, pattern for the n-th, n >= 2).
_LAYER_FILES: dict[str, tuple[str, str]] = {
    MEDIA_MODEL: ("model.gguf", "model-{n}.gguf"),
    MEDIA_PROJECTOR: ("mmproj.gguf", "mmproj-{n}.gguf"),
    MEDIA_ADAPTER: ("adapter.gguf", "adapter-{n}.gguf"),
    MEDIA_TEMPLATE: ("ollama/template", "ollama/template-{n}"),
    MEDIA_SYSTEM: ("ollama/system", "ollama/system-{n}"),
    MEDIA_PARAMS: ("ollama/params.json", "ollama/params-{n}.json"),
    MEDIA_LICENSE: ("LICENSE", "LICENSE-{n}"),
}
_TEXT_LAYERS = frozenset({MEDIA_TEMPLATE, MEDIA_SYSTEM, MEDIA_PARAMS, MEDIA_LICENSE})
TEXT_LIMIT = 256 * 1024
"""The most of one text layer that goes into ProviderInfo (a workflow payload); real ones are a few KB."""
CONFIG_LIMIT = 1024 * 1024
MANIFEST_LIMIT = 4 * 1024 * 1024
_TASK_CAPABILITIES = frozenset({"completion", "embedding"})

_HOSTS = frozenset({"ollama.com", "www.ollama.com"})
# A repository path component as the distribution spec defines it; Ollama names are lower case.
_NAME = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class OllamaRef:
    name: str
    tag: str

    @property
    def locator(self) -> str:
        return f"{self.name}:{self.tag}"

    @property
    def repository(self) -> str:
        return f"library/{self.name}"


def _invalid(url: str, why: str) -> ApplicationError:
    return application_error(ErrorType.INVALID_SOURCE_URL, f"{url[:300]!r} {why}")


def parse_ollama_url(url: str) -> OllamaRef:
    """`https://ollama.com/library/<name>[:<tag>]` (also www.), the tag defaulting to `latest`."""
    split = urlsplit(url)
    if split.scheme != "https" or (split.hostname or "").lower() not in _HOSTS:
        raise _invalid(url, "is not an Ollama library URL (https://ollama.com/library/<name>[:<tag>])")
    if split.port is not None or split.username is not None or split.password is not None:
        raise _invalid(url, "must not carry a port or credentials")
    if split.query or split.fragment:
        raise _invalid(url, "must not have a query or fragment; use https://ollama.com/library/<name>[:<tag>]")
    path = split.path[:-1] if split.path.endswith("/") else split.path
    match = re.fullmatch(r"/library/([^/:]+)(?::([^/:]+))?", path)
    if not match:
        raise _invalid(url, "is not an Ollama library model; use https://ollama.com/library/<name>[:<tag>]")
    # Ollama treats model names case-insensitively; registries want them lower case.
    name, tag = match.group(1).lower(), match.group(2) or DEFAULT_TAG
    if not _NAME.match(name):
        raise _invalid(url, f"names {name[:100]!r}, which is not a valid Ollama model name")
    if not _TAG.match(tag):
        raise _invalid(url, f"has the tag {tag[:100]!r}, which is not a valid tag")
    return OllamaRef(name, tag)


def parse_locator(locator: str) -> OllamaRef:
    name, _, tag = locator.partition(":")
    if not _NAME.match(name) or not _TAG.match(tag):
        raise application_error(ErrorType.INVALID_FETCH_INPUT, f"{locator[:200]!r} is not an Ollama <name>:<tag>")
    return OllamaRef(name, tag)


def registry_error(exc: RegistryError, what: str) -> ApplicationError:
    status = exc.status
    if status in (401, 403):
        return application_error(ErrorType.SOURCE_ACCESS_DENIED, f"{what}: the registry refused access ({exc})")
    if status == 404:
        return application_error(ErrorType.SOURCE_NOT_FOUND, f"{what}: not found ({exc})")
    if exc.retryable:
        return application_error(ErrorType.SOURCE_UNAVAILABLE, f"{what}: {exc}")
    return application_error(ErrorType.SOURCE_REQUEST_REJECTED, f"{what}: {exc}")


def _guarded(chunks: Iterator[bytes], convert: Callable[[BaseException], ApplicationError]) -> Iterator[bytes]:
    try:
        yield from chunks
    except Exception as exc:
        raise convert(exc) from None


@dataclass(frozen=True)
class _Layer:
    media_type: str
    digest: str
    size: int


class OllamaSource:
    def __init__(self, registry_url: str = DEFAULT_OLLAMA_REGISTRY) -> None:
        split = urlsplit(registry_url)
        if split.scheme not in ("http", "https") or not split.netloc or split.path not in ("", "/"):
            raise ValueError(f"{registry_url!r}: the Ollama registry must be given as http(s)://host[:port]")
        self.address = split.netloc
        self.insecure = split.scheme == "http"

    @contextlib.contextmanager
    def _registry(self) -> Iterator[ModelRegistry]:
        registry = ModelRegistry(self.address, insecure=self.insecure)
        try:
            yield registry
        finally:
            registry.close()

    # -- resolve -------------------------------------------------------------------------------------

    def resolve(self, url: str) -> SourceListing:
        ref = parse_ollama_url(url)
        what = f"Ollama model {ref.locator}"
        with self._registry() as registry:
            try:
                document = registry.fetch_manifest(ref.repository, ref.tag)
            except RegistryError as exc:
                raise registry_error(exc, what) from None
            if document is None:
                raise application_error(ErrorType.SOURCE_NOT_FOUND, f"{what}: the registry has no such model or tag")
            if len(document.raw) > MANIFEST_LIMIT:
                raise application_error(ErrorType.UNSUPPORTED_SOURCE, f"{what}: the manifest is implausibly large")
            config_layer, layers = _parse_manifest(document.raw, document.media_type, what)
            config = self._json_blob(registry, ref.repository, config_layer, CONFIG_LIMIT, what, "config")
            model_format = config.get("model_format")
            if isinstance(model_format, str) and model_format and model_format.lower() != "gguf":
                raise application_error(
                    ErrorType.UNSUPPORTED_FORMAT,
                    f"{what} is stored as {model_format[:50]!r}; only GGUF Ollama models can be imported",
                )
            files, skipped, texts = self._files(registry, ref.repository, layers, what)
        capabilities = config.get("capabilities")
        caps = [c for c in capabilities if isinstance(c, str)] if isinstance(capabilities, list) else []
        params: Any = None
        if texts.get(MEDIA_PARAMS):
            try:
                params = json.loads(texts[MEDIA_PARAMS][0])
            except ValueError:
                log.warning("%s: the params layer is not JSON; left out of the provider info", what)
        licenses = texts.get(MEDIA_LICENSE) or []
        info = ProviderInfo(
            template=_first(texts.get(MEDIA_TEMPLATE)),
            system=_first(texts.get(MEDIA_SYSTEM)),
            params=params if isinstance(params, dict) else None,
            license="\n\n".join(licenses) if licenses else None,
            capabilities=caps if _TASK_CAPABILITIES & set(caps) else [],
            config=config,
        )
        log.info("%s resolved to %s: %d files", what, document.digest, len(files))
        return SourceListing(
            provider=SourceType.OLLAMA,
            locator=ref.locator,
            requested_revision=ref.tag,
            resolved_revision=document.digest,
            files=files,
            provider_info=info,
            skipped=skipped,
        )

    def _files(
        self, registry: ModelRegistry, repository: str, layers: list[_Layer], what: str
    ) -> tuple[list[SourceFile], list[str], dict[str, list[str]]]:
        files: list[SourceFile] = []
        skipped: list[str] = []
        texts: dict[str, list[str]] = {}
        counts: dict[str, int] = {}
        for layer in layers:
            names = _LAYER_FILES.get(layer.media_type)
            if names is None:
                skipped.append(f"{layer.media_type} {layer.digest}")
                continue
            n = counts[layer.media_type] = counts.get(layer.media_type, 0) + 1
            path = names[0] if n == 1 else names[1].format(n=n)
            files.append(SourceFile(path=path, size=layer.size, sha256=layer.digest.split(":", 1)[1],
                                    blob=layer.digest))  # fmt: skip
            if layer.media_type in _TEXT_LAYERS:
                if layer.size > TEXT_LIMIT:
                    log.warning("%s: %s layer of %d bytes left out of the provider info", what, layer.media_type,
                                layer.size)
                    continue
                raw = self._blob(registry, repository, layer, TEXT_LIMIT, what, layer.media_type)
                texts.setdefault(layer.media_type, []).append(raw.decode("utf-8", errors="replace"))
        models = counts.get(MEDIA_MODEL, 0)
        if models != 1:
            raise application_error(
                ErrorType.UNKNOWN_FORMAT if models == 0 else ErrorType.AMBIGUOUS_MODEL,
                f"{what}: the manifest has {models} model layers ({MEDIA_MODEL}); exactly one is expected",
            )
        return files, skipped, texts

    def _blob(self, registry: ModelRegistry, repository: str, layer: _Layer, limit: int, what: str,
              kind: str) -> bytes:  # fmt: skip
        """A small blob, whole and verified against its digest."""
        if layer.size > limit:
            raise application_error(ErrorType.UNSUPPORTED_SOURCE, f"{what}: the {kind} blob has {layer.size} bytes")
        data = bytearray()
        with self._open(registry, repository, layer.digest, what)(0, None) as body:
            for chunk in body.chunks:
                data += chunk
                if len(data) > limit:
                    break
        if len(data) != layer.size or "sha256:" + hashlib.sha256(data).hexdigest() != layer.digest:
            raise application_error(ErrorType.SOURCE_CHECKSUM_MISMATCH,
                                    f"{what}: the {kind} blob does not match its digest")  # fmt: skip
        return bytes(data)

    def _json_blob(self, registry: ModelRegistry, repository: str, layer: _Layer, limit: int, what: str,
                   kind: str) -> dict[str, Any]:  # fmt: skip
        raw = self._blob(registry, repository, layer, limit, what, kind)
        try:
            data = json.loads(raw)
        except ValueError:
            raise application_error(ErrorType.UNSUPPORTED_SOURCE, f"{what}: the {kind} blob is not JSON") from None
        if not isinstance(data, dict):
            raise application_error(ErrorType.UNSUPPORTED_SOURCE, f"{what}: the {kind} blob is not a JSON object")
        return data

    # -- fetch ---------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def blob_opener(self, locator: str, digest: str) -> Iterator[Opener]:
        """An opener of one layer blob of `<name>:<tag>`, valid inside the `with`."""
        ref = parse_locator(locator)
        if not _DIGEST.match(digest):
            raise application_error(ErrorType.INVALID_FETCH_INPUT, f"{digest[:100]!r} is not a sha256 digest")
        with self._registry() as registry:
            yield self._open(registry, ref.repository, digest, f"Ollama model {ref.locator}: blob {digest[:19]}")

    def _open(self, registry: ModelRegistry, repository: str, digest: str, what: str) -> Opener:
        url = f"{registry._repo_url(repository)}/blobs/{digest}"

        def convert(exc: BaseException) -> ApplicationError:
            if isinstance(exc, RegistryError):
                return registry_error(exc, what)
            return application_error(ErrorType.SOURCE_UNAVAILABLE, f"{what}: {type(exc).__name__}: {exc}")  # fmt: skip

        @contextlib.contextmanager
        def open_range(start: int, last: int | None) -> Iterator[RangeBody]:
            # identity: requests would otherwise ask for gzip, and ranges must count stored bytes.
            headers = {"Accept-Encoding": "identity"}
            if start or last is not None:
                headers["Range"] = f"bytes={start}-{'' if last is None else last}"
            try:
                response = registry._request("GET", url, headers=headers, stream=True)
            except RegistryError as exc:
                raise convert(exc) from None
            with response:
                if response.status_code not in (200, 206):
                    error = registry._error(response, f"GET blob {digest}")
                    if response.status_code == 404:
                        raise application_error(ErrorType.SOURCE_FILE_NOT_FOUND, f"{what}: no such blob")
                    raise convert(error)
                offset = 0
                if response.status_code == 206:
                    match = re.match(r"^\s*bytes\s+(\d+)-\d+/(\d+|\*)\s*$", response.headers.get("Content-Range", ""))
                    if not match:
                        raise application_error(ErrorType.SOURCE_UNAVAILABLE,
                                                f"{what}: a partial answer without a valid Content-Range")
                    offset = int(match.group(1))
                yield RangeBody(offset, _guarded(response.iter_content(CHUNK_SIZE), convert))

        return open_range


def _first(values: list[str] | None) -> str | None:
    return values[0] if values else None


def _parse_manifest(raw: bytes, media_type: str, what: str) -> tuple[_Layer, list[_Layer]]:
    try:
        manifest = json.loads(raw)
    except ValueError:
        raise application_error(ErrorType.UNSUPPORTED_SOURCE, f"{what}: the manifest is not JSON") from None
    kind = (manifest.get("mediaType") if isinstance(manifest, dict) else None) or media_type
    if not isinstance(manifest, dict) or kind not in (DOCKER_MANIFEST_V2, OCI_MANIFEST):
        raise application_error(ErrorType.UNSUPPORTED_SOURCE,
                                f"{what}: the manifest ({kind or 'no media type'}) is not an image manifest")
    config = _layer(manifest.get("config"), what)
    raw_layers = manifest.get("layers")
    if not isinstance(raw_layers, list):
        raise application_error(ErrorType.UNSUPPORTED_SOURCE, f"{what}: the manifest lists no layers")
    return config, [_layer(item, what) for item in raw_layers]


def _layer(item: Any, what: str) -> _Layer:
    if not isinstance(item, dict):
        raise application_error(ErrorType.UNSUPPORTED_SOURCE, f"{what}: a manifest descriptor is not an object")
    media_type, digest, size = item.get("mediaType"), item.get("digest"), item.get("size")
    if (
        not isinstance(media_type, str)
        or not isinstance(digest, str)
        or not _DIGEST.match(digest)
        or not isinstance(size, int)
        or isinstance(size, bool)
        or size < 0
    ):
        raise application_error(ErrorType.UNSUPPORTED_SOURCE, f"{what}: a manifest descriptor is malformed")
    return _Layer(media_type, digest, size)
