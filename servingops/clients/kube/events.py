"""Events on an object: how transitions, failures and refused input reach `kubectl describe` and
`kubectl get events`, aggregated and rate-limited as client-go's EventCorrelator does."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import threading
import time

from kubernetes import client

from servingops.clients.kube.calls import call, create_unless_exists

log = logging.getLogger("servingops.events")


class _TokenBucket:
    """Per-object spam filter, as client-go's EventCorrelator keeps one: a burst, then a slow refill."""

    def __init__(self, burst: int, refill_seconds: float) -> None:
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.tokens = float(burst)
        self.at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) / self.refill_seconds)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


# One bucket per involved object and reporting component, for the life of the process. A workflow
# stuck in a retry loop can therefore not flood the apiserver: after EVENT_BURST Events on one
# object, at most one more per EVENT_REFILL_SECONDS is written and the rest are dropped.
EVENT_BURST = 25
EVENT_REFILL_SECONDS = 10.0
_buckets: dict[tuple[str, str], _TokenBucket] = {}
_buckets_lock = threading.Lock()


def _allowed(key: tuple[str, str]) -> bool:
    with _buckets_lock:
        bucket = _buckets.get(key)
        if bucket is None:
            if len(_buckets) > 10_000:  # objects come and go; forget the idle ones rather than grow
                _buckets.clear()
            bucket = _buckets[key] = _TokenBucket(EVENT_BURST, EVENT_REFILL_SECONDS)
        return bucket.take()


def event_name(name: str, uid: str | None, event_type: str, reason: str, message: str, component: str) -> str:
    """The Event's name, derived from what makes two Events the same one: a repeat (a retried
    activity, a loop reporting the same thing) finds the existing Event and bumps its count, as
    `kubectl get events` shows for the kubelet's, instead of adding a new object each time."""
    digest = hashlib.sha256("\0".join((uid or name, event_type, reason, message, component)).encode()).hexdigest()
    return f"{name[:200]}.{digest[:16]}"


def record_event(core: client.CoreV1Api, *, api_version: str, kind: str, name: str, namespace: str | None,
                 uid: str | None, event_type: str, reason: str, message: str,
                 component: str = "servingops") -> bool:
    """Record an Event on an object (how transitions, failures and refused input reach
    `kubectl describe` and `kubectl get events`). Aggregated: the same Event again increments its
    count and lastTimestamp. Rate-limited per object. False when the spam filter dropped it."""
    if not _allowed((uid or f"{kind}/{namespace}/{name}", component)):
        log.debug("event on %s %s/%s dropped by the spam filter: %s", kind, namespace, name, reason)
        return False
    now = dt.datetime.now(dt.UTC)
    where = namespace or "default"
    message = message[:1024]
    ev_name = event_name(name, uid, event_type, reason, message, component)
    body = client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=ev_name, namespace=where),
        involved_object=client.V1ObjectReference(api_version=api_version, kind=kind, name=name,
                                                 namespace=namespace, uid=uid),
        type=event_type, reason=reason, message=message,
        first_timestamp=now, last_timestamp=now, count=1,
        source=client.V1EventSource(component=component),
        reporting_component=component, reporting_instance=component,
    )
    if create_unless_exists(core.create_namespaced_event, where, body) is not None:
        return True
    # Seen before: one more occurrence. A lost race between two writers costs one count, no more.
    existing = call(core.read_namespaced_event, ev_name, where)
    call(core.patch_namespaced_event, ev_name, where,
         {"count": (existing.count or 1) + 1, "lastTimestamp": now.isoformat()})
    return True
