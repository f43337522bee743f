"""Name resolution for a benchmark pod's process run by devstack/bench_runner.py (devstack only; imported at
the start of the genai-bench venv's Python because bench_runner puts this folder on its PYTHONPATH).

In a cluster, a pod resolves an InferenceService's host (`<isvc>.<ns>.<domain>`) through DNS to the Gateway's
load balancer. The local stack has no such DNS: the Gateway listens on loopback on a port of its own. This
module plays that DNS record: a host name resolves to SERVINGOPS_BENCH_GATEWAY (`ip:port`, the Gateway's
address and listener port, read from the Gateway's status by the runner), the request's port 80 becoming the
listener's. The Host header stays the URL's, so the Gateway routes by it as it would in a cluster.

It also keeps the benchmark on the stack: an address other than loopback or the stack's pod range
(SERVINGOPS_BENCH_ALLOWED, comma-separated CIDRs) does not resolve, so nothing leaves the machine.
"""

from __future__ import annotations

import _socket
import ipaddress
import os
import socket

_GATEWAY = os.environ.get("SERVINGOPS_BENCH_GATEWAY", "")
_ALLOWED = [ipaddress.ip_network(c.strip()) for c in os.environ.get("SERVINGOPS_BENCH_ALLOWED", "").split(",")
            if c.strip()]
_original = _socket.getaddrinfo


def _allowed(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return address.is_loopback or any(address in net for net in _ALLOWED)


def _getaddrinfo(host, port, *args, **kwargs):  # type: ignore[no-untyped-def]
    name = host.decode() if isinstance(host, bytes) else host
    if name is None:
        return _original(host, port, *args, **kwargs)
    try:
        ipaddress.ip_address(name)
        literal = True
    except ValueError:
        literal = False
    if literal or name == "localhost":
        answers = _original(host, port, *args, **kwargs)
    elif _GATEWAY:
        gateway_ip, _, gateway_port = _GATEWAY.rpartition(":")
        wanted = int(port) if port not in (None, "http") else 80
        answers = _original(gateway_ip, int(gateway_port) if wanted == 80 else wanted, *args, **kwargs)
    else:
        raise socket.gaierror(socket.EAI_NONAME, f"{name}: no Gateway to resolve it to (devstack)")
    kept = [a for a in answers if _allowed(a[4][0])]
    if not kept:
        raise socket.gaierror(socket.EAI_NONAME, f"{name}: not on the local stack (devstack allows loopback and "
                                                 "the pod range only)")
    return kept


# Both: genai-bench runs under locust, whose gevent replaces socket.getaddrinfo with its resolver, which in
# turn calls _socket's (captured when gevent is imported, after this module).
socket.getaddrinfo = _getaddrinfo
_socket.getaddrinfo = _getaddrinfo  # type: ignore[assignment]
