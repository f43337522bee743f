"""The reconciler: per model key, make this node's disk and report agree with the cluster.

Level-triggered and idempotent (controller-runtime's discipline): watch events and a periodic resync only
put keys on a queue; a worker takes a key, decides from the current object and Node (`plan.decide`), and
acts: pull or keep the copy, remove it, report. A key is never worked on by two threads at once; an event
that arrives meanwhile re-queues it. A failed key is retried with backoff.

Verification: every start re-hashes every complete copy (the digest cache is empty), and every
`verify_seconds` each copy is checked again (unchanged files by the cache, changed ones re-hashed); a
corrupted or missing file is re-pulled and the model shows Updating meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servingops.agents.plan import Copy, Decision, Hold, Invalid, Local, Remove, decide
from servingops.agents.pull import BadArtifact, Cancelled, Puller, PullStats, RateLimit, RegistryFactory, layout
from servingops.agents.report import NodeState, Reporter
from servingops.agents.store import Record, Store
from servingops.api_models.ome.model_keys import ModelKey
from servingops.clients.oci.registry_client import RegistryError

log = logging.getLogger("servingops.agent")


@dataclass(frozen=True)
class AgentConfig:
    node_name: str
    root: Path
    state_dir: Path
    registry: str
    """host:port of the one registry the agent pulls from."""
    workers: int = 2
    resync_seconds: float = 60.0
    verify_seconds: float = 600.0
    retry_min_seconds: float = 2.0
    retry_max_seconds: float = 120.0
    bandwidth_bytes_per_second: float = 0.0
    layers_in_flight: int = 3


class KeyQueue:
    """Keys to reconcile: deduplicated, one worker per key at a time, re-queued if dirtied while in flight."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._order: list[ModelKey] = []
        self._waiting: set[ModelKey] = set()
        self._inflight: set[ModelKey] = set()
        self._dirty: set[ModelKey] = set()

    def add(self, key: ModelKey) -> None:
        with self._cond:
            if key in self._inflight:
                self._dirty.add(key)
            elif key not in self._waiting:
                self._waiting.add(key)
                self._order.append(key)
                self._cond.notify()

    def get(self, timeout: float) -> ModelKey | None:
        with self._cond:
            if not self._order and not self._cond.wait_for(lambda: bool(self._order), timeout):
                return None
            key = self._order.pop(0)
            self._waiting.discard(key)
            self._inflight.add(key)
            return key

    def done(self, key: ModelKey) -> None:
        with self._cond:
            self._inflight.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._waiting.add(key)
                self._order.append(key)
                self._cond.notify()

    def idle(self) -> bool:
        with self._cond:
            return not self._order and not self._inflight


@dataclass
class _KeyState:
    verified_at: float = 0.0
    failures: int = 0
    retry_timer: threading.Timer | None = None


@dataclass
class Agent:
    config: AgentConfig
    reporter: Reporter
    registry_factory: RegistryFactory
    stop_event: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.store = Store(self.config.root, self.config.state_dir)
        self.stats = PullStats()
        self.puller = Puller(self.store, self.stats, RateLimit(self.config.bandwidth_bytes_per_second),
                             self.config.layers_in_flight)
        self.queue = KeyQueue()
        self._objects: dict[ModelKey, dict[str, Any]] = {}
        self._node: dict[str, Any] | None = None
        self._node_seen = False
        self._lock = threading.Lock()
        self._keys: dict[ModelKey, _KeyState] = {}

    # -- inputs (watch threads) --------------------------------------------------------------------

    def on_object(self, key: ModelKey, obj: dict[str, Any] | None) -> None:
        with self._lock:
            if obj is None:
                self._objects.pop(key, None)
            else:
                self._objects[key] = obj
        self.queue.add(key)

    def on_node(self, node: dict[str, Any] | None) -> None:
        with self._lock:
            before = self._labels(self._node)
            self._node = node
            self._node_seen = True
        self.reporter.observe_node(node)
        if before != self._labels(node) or node is None:
            self.enqueue_all()

    @staticmethod
    def _labels(node: dict[str, Any] | None) -> dict[str, str]:
        return dict(((node or {}).get("metadata") or {}).get("labels") or {})

    def known_keys(self) -> set[ModelKey]:
        with self._lock:
            keys = set(self._objects)
        return keys | {r.key for r in self.store.records()}

    def enqueue_all(self) -> None:
        for key in sorted(self.known_keys()):
            self.queue.add(key)

    def resync(self, *, verify: bool) -> None:
        """Every key again, and the report's orphans (models gone while the agent was down) removed."""
        if verify:
            now = time.monotonic()
            with self._lock:
                for state in self._keys.values():
                    if now - state.verified_at >= self.config.verify_seconds:
                        state.verified_at = 0.0
        self.reporter.reload()
        with self._lock:
            node_known = self._node is not None
            keep = [k for k, obj in self._objects.items()
                    if not isinstance(decide(k, obj, self._node, self.config.registry), Remove)]
        if node_known:
            self.reporter.prune(keep)
        self.enqueue_all()

    # -- the work -------------------------------------------------------------------------------------

    def _decision(self, key: ModelKey) -> Decision:
        with self._lock:
            return decide(key, self._objects.get(key), self._node, self.config.registry)

    def _state(self, key: ModelKey) -> _KeyState:
        with self._lock:
            return self._keys.setdefault(key, _KeyState())

    def work(self) -> None:
        while not self.stop_event.is_set():
            key = self.queue.get(timeout=0.5)
            if key is None:
                continue
            try:
                self.reconcile(key)
            except Exception:
                log.exception("%s: reconcile failed", key)
                self._retry_later(key)
            finally:
                self.queue.done(key)

    def _retry_later(self, key: ModelKey) -> None:
        state = self._state(key)
        state.failures += 1
        delay = min(self.config.retry_min_seconds * 2 ** (state.failures - 1), self.config.retry_max_seconds)
        if state.retry_timer is not None:
            state.retry_timer.cancel()
        timer = threading.Timer(delay, self.queue.add, args=(key,))
        timer.daemon = True
        state.retry_timer = timer
        timer.start()

    def reconcile(self, key: ModelKey) -> None:
        decision = self._decision(key)
        if isinstance(decision, Remove):
            self._remove(key, decision.reason)
        elif isinstance(decision, Local):
            present = (self.config.root / decision.path).exists()
            self.reporter.set(key, NodeState.READY if present else NodeState.FAILED,
                              message="" if present else f"local path /{decision.path} does not exist on the node")
            self._ok(key)
        elif isinstance(decision, Invalid):
            self.reporter.set(key, NodeState.FAILED, message=decision.message)
        elif isinstance(decision, Hold):
            log.info("%s: left as it is: %s", key, decision.reason)
        else:
            self._ensure_copy(key, decision)

    def _ok(self, key: ModelKey) -> None:
        state = self._state(key)
        state.failures = 0

    def _remove(self, key: ModelKey, reason: str) -> None:
        record = self.store.record(key)
        if record is not None:
            log.info("%s: removing the copy at /%s (%s)", key, record.path, reason)
            self.store.remove_files(self.store.copy_dir(record.path), record.files)
            self.store.drop_record(key)
        self.reporter.clear(key)
        with self._lock:
            self._keys.pop(key, None)

    def _path_taken(self, key: ModelKey, path: str) -> ModelKey | None:
        for record in self.store.records():
            if record.key != key and record.path == path:
                return record.key
        return None

    def _ensure_copy(self, key: ModelKey, want: Copy) -> None:
        digest = want.artifact.digest
        owner = self._path_taken(key, want.path)
        if owner is not None:
            self.reporter.set(key, NodeState.FAILED, digest=digest,
                              message=f"storage.path /{want.path} already holds the copy of {owner}")
            return
        record = self.store.record(key)
        copy = self.store.copy_dir(want.path)
        state = self._state(key)
        marker = self.store.marker(copy)
        complete = (record is not None and record.path == want.path and record.digest == digest
                    and marker is not None and marker.manifest_digest == digest)
        if complete and marker is not None:
            if state.verified_at:
                self.reporter.set(key, NodeState.READY, digest=digest)
                return
            bad = self.store.verify(copy, marker, self._stopper(key, want))
            if not bad:
                state.verified_at = time.monotonic()
                self.reporter.set(key, NodeState.READY, digest=digest)
                self._ok(key)
                return
            names = ", ".join(entry.path for entry in bad[:5])
            log.warning("%s: %d file(s) corrupted or missing on disk (%s): re-pulling", key, len(bad), names)
            self.reporter.set(key, NodeState.UPDATING, digest=digest,
                              message=f"re-pulling {len(bad)} file(s) that failed verification: {names}")
            self.store.drop_marker(copy)
        else:
            self.reporter.set(key, NodeState.UPDATING, digest=digest, message=f"pulling {want.artifact}")
        try:
            self._pull(key, want, record, copy)
        except Cancelled as exc:
            log.info("%s: %s", key, exc)
            return
        except (RegistryError, BadArtifact, OSError, ValueError) as exc:
            log.warning("%s: pull of %s failed: %s", key, want.artifact, exc)
            self.reporter.set(key, NodeState.FAILED, digest=digest, message=f"pull of {want.artifact} failed: {exc}")
            self._retry_later(key)
            return
        state.verified_at = time.monotonic()
        self._ok(key)
        self.reporter.set(key, NodeState.READY, digest=digest)

    def _stopper(self, key: ModelKey, want: Copy) -> Callable[[], bool]:
        return lambda: self.stop_event.is_set() or self._decision(key) != want

    def _pull(self, key: ModelKey, want: Copy, record: Record | None, copy: Path) -> None:
        with self.registry_factory() as registry:
            manifest = registry.manifest(want.artifact.repository, want.artifact.digest)
            paths = [path for _, path in layout(manifest)]
            same_place = record is not None and record.path == want.path
            old_files = record.files if record is not None and same_place else []
            # Recorded before the first byte lands: whatever happens next, removal knows every file.
            pulling = Record(key.kind.value, key.namespace, key.name, want.path, digest="",
                             files=sorted(set(old_files) | set(paths)))
            if record is not None and not same_place:
                pulling.files = sorted(paths)
            self.store.drop_marker(copy)
            self.store.save_record(pulling)
            marker = self.puller.pull(registry, want.artifact, manifest, copy, want.reuse, self._stopper(key, want),
                                      self.registry_factory)
        leftovers = sorted(set(pulling.files) - set(paths))
        if leftovers:
            self.store.remove_files(copy, leftovers)
        self.store.write_marker(copy, marker)
        self.store.save_record(Record(key.kind.value, key.namespace, key.name, want.path, digest=manifest.digest,
                                      files=sorted(paths)))
        if record is not None and not same_place:
            log.info("%s: storage.path moved from /%s to /%s: removing the old copy", key, record.path, want.path)
            self.store.remove_files(self.store.copy_dir(record.path), record.files)
        log.info("%s: copy of %s complete at /%s (%d bytes)", key, want.artifact, want.path, manifest.size)
