"""One ApiClient per member, kept for the life of the worker.

Building a client from the kubeconfig Secret costs a Secret read in the control plane and a new TLS
handshake with the member on its first request; a race observes every candidate every 2 s. So a
client is kept, keyed by what it was built from: the cluster's name, its WorkloadCluster's uid and
resourceVersion, and the Secret's resourceVersion.

The WorkloadCluster is read on every call by the caller (a deregistration must be seen at once); the
Secret is read again only when the WorkloadCluster changed or SECRET_RECHECK seconds after its last
read, so a rotated Secret is in use within that time. The caller drops a client the member refused
(401/403: credentials rotated under us) or could not be reached with (the connection may be
broken); the next call builds a fresh one. Activities run in a thread pool: a client is leased, and
one replaced while a call still uses it is closed when that call ends, never under it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kubernetes import client

from servingops.activities.workload_cluster.kubeconfig import MemberAccess, api_client
from servingops.activities.workload_cluster.registration import VersionedAccess

SECRET_RECHECK = 30.0
"""Seconds a Secret read is trusted while the WorkloadCluster is unchanged."""


@dataclass(frozen=True)
class ClientKey:
    cluster: str
    registration_uid: str
    registration_version: str
    secret_version: str


@dataclass(eq=False)
class _Entry:
    key: ClientKey
    api: client.ApiClient
    secret_read_at: float
    users: int = 0
    retired: bool = False


@dataclass
class CacheStats:
    """What the cache did, for tests and for a curious operator (nothing secret)."""

    secret_reads: int = 0
    builds: int = 0
    reuses: int = 0
    drops: int = 0


@dataclass
class MemberClients:
    """The clients of every member this worker talks to (thread-safe)."""

    build: Callable[[MemberAccess], client.ApiClient] = api_client
    clock: Callable[[], float] = time.monotonic
    recheck: float = SECRET_RECHECK
    stats: CacheStats = field(default_factory=CacheStats)
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def lease(self, cluster: str, uid: str, version: str,
              read_access: Callable[[], VersionedAccess]) -> Iterator[client.ApiClient]:
        """A client for `cluster` as registered at (uid, version); `read_access` reads the Secret
        when the cached client cannot be trusted without it (it may raise: nothing is cached then)."""
        entry = self._fresh(cluster, uid, version) or self._rebuild(cluster, uid, version, read_access)
        try:
            yield entry.api
        finally:
            self._release(entry)

    def drop(self, cluster: str, api: client.ApiClient | None = None) -> None:
        """Forget the cluster's client (only if it is still `api`, when given): the next call builds anew."""
        with self._lock:
            entry = self._entries.get(cluster)
            if entry is None or (api is not None and entry.api is not api):
                return
            del self._entries[cluster]
            self.stats.drops += 1
            closing = self._retire(entry)
        _close(closing)

    def close(self) -> None:
        """Close every client (the worker is shutting down)."""
        with self._lock:
            clusters = list(self._entries)
        for cluster in clusters:
            self.drop(cluster)

    def cached(self, cluster: str) -> ClientKey | None:
        with self._lock:
            entry = self._entries.get(cluster)
            return entry.key if entry is not None else None

    # -- inside the lock's care --

    def _fresh(self, cluster: str, uid: str, version: str) -> _Entry | None:
        """The cached entry, leased, when the registration is unchanged and its Secret read recent."""
        with self._lock:
            entry = self._entries.get(cluster)
            if entry is None or (entry.key.registration_uid, entry.key.registration_version) != (uid, version):
                return None
            if self.clock() - entry.secret_read_at >= self.recheck:
                return None
            entry.users += 1
            self.stats.reuses += 1
            return entry

    def _rebuild(self, cluster: str, uid: str, version: str,
                 read_access: Callable[[], VersionedAccess]) -> _Entry:
        """Read the Secret (outside the lock: it is a request) and keep the client when the Secret is
        the one it was built from; otherwise a new client replaces it."""
        with self._lock:
            self.stats.secret_reads += 1
        try:
            versioned = read_access()
        except BaseException:
            self.drop(cluster)  # the registration cannot be used: its old client must not outlive it
            raise
        key = ClientKey(cluster, uid, version, versioned.secret_version)
        now = self.clock()
        closing: _Entry | None = None
        with self._lock:
            entry = self._entries.get(cluster)
            if entry is not None and entry.key == key:
                entry.secret_read_at = now
            else:
                if entry is not None:
                    closing = self._retire(entry)
                entry = _Entry(key, self.build(versioned.access), now)
                self._entries[cluster] = entry
                self.stats.builds += 1
            entry.users += 1
        _close(closing)
        return entry

    def _release(self, entry: _Entry) -> None:
        with self._lock:
            entry.users -= 1
            closing = entry if entry.retired and entry.users == 0 else None
        _close(closing)

    @staticmethod
    def _retire(entry: _Entry) -> _Entry | None:
        """Mark an evicted entry; the one to close now when no call is using it (lock held)."""
        entry.retired = True
        return entry if entry.users == 0 else None


def _close(entry: _Entry | None) -> None:
    if entry is not None:
        entry.api.close()  # type: ignore[no-untyped-call]
