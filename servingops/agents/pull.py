"""Pull one ModelPack artifact into a copy on this node: streamed, verified, atomic, resumable, shared.

Per layer, in manifest order:
1. the file already at its path with the layer's digest is kept (a re-pull after corruption or a new
   digest fetches only what differs);
2. with `downloadPolicy: ReuseIfExists`, a verified file with the same digest in another model's copy is
   hard-linked (copied across filesystems) instead of downloaded;
3. otherwise the blob is streamed into `<copy>/.servingops-partial/<hex>`: when that file exists (a
   previous run was killed) the GET asks for `Range: bytes=<its size>-` and the bytes already on disk are
   hashed first; the whole is checked against the layer digest, then renamed to its path.

Memory is one read block per layer in flight, whatever the model size. Nothing marks the copy complete
here: the caller writes the marker once every layer is in place.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from servingops.agents.plan import ArtifactRef
from servingops.agents.registry import AgentRegistry, Layer, Manifest
from servingops.agents.store import PARTIAL_DIR, READ_BLOCK, FileEntry, Marker, Store
from servingops.clients.oci import media_types as mt
from servingops.clients.oci.modelpack import normalize_filepath
from servingops.clients.oci.registry_client import RegistryError

log = logging.getLogger("servingops.agent.pull")

RegistryFactory = Callable[[], AbstractContextManager[AgentRegistry]]

RAW_LAYER_TYPES = frozenset({mt.MODEL_WEIGHT_RAW, mt.MODEL_WEIGHT_CONFIG_RAW, mt.MODEL_DOC_RAW, mt.MODEL_CODE_RAW,
                             mt.MODEL_DATASET_RAW, "application/octet-stream"})
"""Layers that are one file each, as the import writes them. The spec's archived (.tar) variants would
need unpacking, which the import never produces; they are refused with a message naming the type."""


class BadArtifact(Exception):
    """The artifact cannot be laid out as files (no file path, a path escaping the copy, an archive layer)."""


class Cancelled(Exception):
    """The pull was stopped: the agent is shutting down or the model no longer belongs on this node."""


@dataclass
class PullStats:
    fetched_bytes: int = 0
    """Layer bytes read from the registry by this agent (every attempt, resumed ranges included)."""
    resumed_layers: int = 0
    linked_layers: int = 0
    kept_layers: int = 0
    downloaded_layers: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


class RateLimit:
    """At most `bytes_per_second` across every pull of this agent (0: no limit), so a node's link and
    disk are not saturated by one model; shared by the pulling threads."""

    def __init__(self, bytes_per_second: float) -> None:
        self.rate = bytes_per_second
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._sent = 0.0

    def consume(self, n: int) -> None:
        if self.rate <= 0:
            return
        with self._lock:
            self._sent += n
            due = self._start + self._sent / self.rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def layout(manifest: Manifest) -> list[tuple[Layer, str]]:
    """Each layer with its file path inside the copy; refuses what cannot be laid out as files."""
    seen: set[str] = set()
    result = []
    for layer in manifest.layers:
        if layer.media_type not in RAW_LAYER_TYPES:
            raise BadArtifact(f"layer {layer.digest} has media type {layer.media_type!r}: only raw (one file per "
                              "layer) ModelPack layers are laid out")
        if not layer.filepath:
            raise BadArtifact(f"layer {layer.digest} has no {mt.ANNOTATION_FILEPATH} annotation")
        try:
            path = normalize_filepath(layer.filepath)
        except ValueError as exc:
            raise BadArtifact(str(exc)) from exc
        if path in seen:
            raise BadArtifact(f"two layers write {path!r}")
        seen.add(path)
        result.append((layer, path))
    if not result:
        raise BadArtifact(f"manifest {manifest.digest} has no layers")
    return result


class Puller:
    def __init__(self, store: Store, stats: PullStats, limit: RateLimit, layers_in_flight: int = 3) -> None:
        self.store = store
        self.stats = stats
        self.limit = limit
        self.layers_in_flight = max(1, layers_in_flight)
        """Layers of one model downloaded at once (oras' default is 3): one stream rarely fills a link, and
        hashing and writing release the GIL, so layers overlap on several cores."""

    def pull(self, registry: AgentRegistry, artifact: ArtifactRef, manifest: Manifest, copy: Path, reuse: bool,
             stop: Callable[[], bool], open_registry: RegistryFactory | None = None) -> Marker:
        """`open_registry` gives each concurrent layer a client of its own (oras' auth state is per
        client); without it the layers share `registry`."""
        files = []
        to_fetch: list[tuple[Layer, Path]] = []
        for layer, rel in layout(manifest):
            if stop():
                raise Cancelled(f"pull of {artifact} stopped")
            target = self.store.file_path(copy, rel)
            if self._present(target, layer, stop):
                self.stats.add(kept_layers=1)
            elif reuse and (source := self.store.find_layer(layer.digest, exclude=copy)) is not None:
                _link(source, target)
                self.store.cache.remember(target, layer.digest)
                self.stats.add(linked_layers=1)
                log.info("%s: %s linked from %s", artifact, rel, source)
            else:
                to_fetch.append((layer, target))
            files.append(FileEntry(rel, layer.digest, layer.size))
        self._fetch_all(registry, artifact.repository, to_fetch, copy, stop, open_registry)
        with contextlib.suppress(OSError):
            (copy / PARTIAL_DIR).rmdir()
        return Marker(manifest.digest, str(artifact), tuple(files))

    def _fetch_all(self, registry: AgentRegistry, repository: str, layers: list[tuple[Layer, Path]], copy: Path,
                   stop: Callable[[], bool], open_registry: RegistryFactory | None) -> None:
        """Every layer, `layers_in_flight` at a time; the first failure stops the others (each keeps its
        partial file for the retry to resume) and is raised."""
        if len(layers) <= 1 or self.layers_in_flight == 1:
            for layer, target in layers:
                self._fetch(registry, repository, layer, copy, target, stop)
            return
        failed = threading.Event()

        def halted() -> bool:
            return failed.is_set() or stop()

        def one(layer: Layer, target: Path) -> None:
            try:
                if open_registry is None:
                    self._fetch(registry, repository, layer, copy, target, halted)
                else:
                    with open_registry() as own:
                        self._fetch(own, repository, layer, copy, target, halted)
            except BaseException:
                failed.set()
                raise

        with ThreadPoolExecutor(max_workers=self.layers_in_flight, thread_name_prefix="layer") as pool:
            futures = [pool.submit(one, layer, target) for layer, target in layers]
            errors = [exc for exc in (f.exception() for f in futures) if exc is not None]
        if errors:
            # The cause, not a sibling's Cancelled that the cause brought about.
            raise next((e for e in errors if not isinstance(e, Cancelled)), errors[0])

    def _present(self, target: Path, layer: Layer, stop: Callable[[], bool]) -> bool:
        try:
            if target.stat().st_size != layer.size:
                return False
        except FileNotFoundError:
            return False
        return self.store.cache.digest(target, stop) == layer.digest

    def _fetch(self, registry: AgentRegistry, repository: str, layer: Layer, copy: Path, target: Path,
               stop: Callable[[], bool]) -> None:
        partial = copy / PARTIAL_DIR / layer.digest.removeprefix("sha256:")
        partial.parent.mkdir(parents=True, exist_ok=True)
        offset = partial.stat().st_size if partial.exists() else 0
        if offset > layer.size:
            partial.unlink()
            offset = 0
        hasher = hashlib.sha256()
        if offset:
            # The bytes a killed run left are part of the digest: hash them from disk, not the network.
            with open(partial, "rb") as fd:
                while data := fd.read(READ_BLOCK):
                    hasher.update(data)
        fetched = 0
        if offset < layer.size:
            response = registry.open_blob(repository, layer.digest, offset)
            with response:
                if response.status_code == 416:
                    partial.unlink()
                    raise RegistryError(f"registry refused bytes {offset}- of {layer.digest} (HTTP 416)", status=416)
                if response.status_code == 200 and offset:
                    log.info("%s: registry ignored Range, fetching from byte 0", layer.digest)
                    offset, hasher = 0, hashlib.sha256()
                elif offset:
                    self.stats.add(resumed_layers=1)
                    log.info("%s: resuming at byte %d of %d (HTTP %d)", layer.digest, offset, layer.size,
                             response.status_code)
                with open(partial, "ab" if offset else "wb") as out:
                    for data in response.iter_content(chunk_size=READ_BLOCK):
                        if stop():  # before writing: what is on disk is always what was hashed
                            raise Cancelled(f"download of {layer.digest} stopped at byte {offset + fetched}")
                        out.write(data)
                        hasher.update(data)
                        fetched += len(data)
                        self.stats.add(fetched_bytes=len(data))
                        self.limit.consume(len(data))
                    out.flush()
                    os.fsync(out.fileno())
        total = offset + fetched
        got = "sha256:" + hasher.hexdigest()
        if total != layer.size or got != layer.digest:
            partial.unlink()
            raise RegistryError(f"layer {layer.digest}: got {total} bytes hashing to {got}, expected {layer.size} "
                                "bytes; the partial download is discarded", status=None)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial, target)
        self.store.cache.remember(target, layer.digest)
        self.stats.add(downloaded_layers=1)
        log.info("%s -> %s: %d bytes fetched (from byte %d)", layer.digest, target, fetched, offset)


def _link(source: Path, target: Path) -> None:
    """Hard-link `source` at `target` (atomically replacing it); a copy when they are on different filesystems."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.link")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)
