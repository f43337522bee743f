"""The routing probe's and the capacity poll's HTTP requests to each home's endpoint, side by side.

A request goes to the endpoint a client uses (its scheme, host and port), or, when the control plane
cannot resolve the members' hostnames, to the member Gateway's address with the endpoint's host in the
Host header (the EndpointSlice fallback: the same address the global route sends to). One request per
home, no retries: the probe's thresholds and the poll's quorum are the retry policy.
"""

from __future__ import annotations

import datetime as dt
import http.client
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from servingops.activities.routing.types import CheckTarget, ProbeAnswer

MAX_BODY = 64 * 1024
"""A capacity report is a few hundred bytes; more is read no further (and does not parse)."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def check_one(target: CheckTarget, path: str, method: str, timeout_s: float, *, keep_body: bool) -> ProbeAnswer:
    parts = urlsplit(target.endpoint)
    host = parts.hostname or ""
    if not host:
        return ProbeAnswer(cluster=target.cluster, error=f"endpoint {target.endpoint!r} has no host", at=_now())
    port = parts.port or (443 if parts.scheme == "https" else 80)
    connect_host, connect_port = host, port
    if target.connect:
        connect_host, _, connect_port_text = target.connect.rpartition(":")
        connect_port = int(connect_port_text)
    factory: Callable[..., http.client.HTTPConnection] = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection)
    connection = factory(connect_host, connect_port, timeout=timeout_s)
    prefix = parts.path.rstrip("/")
    try:
        connection.request(method, f"{prefix}{path}", headers={"Host": host if port in (80, 443) else f"{host}:{port}",
                                                              "User-Agent": "servingops-routing-probe"})
        response = connection.getresponse()
        body = response.read(MAX_BODY) if keep_body else b""
        return ProbeAnswer(cluster=target.cluster, status=response.status, at=_now(), body=body)
    except (TimeoutError, OSError, http.client.HTTPException) as exc:
        return ProbeAnswer(cluster=target.cluster, error=f"{type(exc).__name__}: {exc}" if str(exc)
                           else type(exc).__name__, at=_now())
    finally:
        connection.close()


def check_all(targets: list[CheckTarget], path: str, method: str, timeout_s: float, *,
              keep_body: bool = False) -> list[ProbeAnswer]:
    """One request per target, all at once; answers in the targets' order."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=min(len(targets), 16)) as pool:
        return list(pool.map(lambda t: check_one(t, path, method, timeout_s, keep_body=keep_body), targets))
