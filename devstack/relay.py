"""`python -m devstack.relay --netns NAME --listen ADDR:PORT --to HOST:PORT`: a TCP relay whose listening
socket lives inside a stack network namespace (devstack/netns.py) and whose connections go to a server on
the host's loopback. What the apiserver dials is then the namespace's address, while the server itself
stays on 127.0.0.1 (it needs the host's loopback for Prometheus and the apiserver).

A socket belongs to the network namespace its creating thread was in: the relay enters the namespace only
to create the listening socket (setns(2) on the calling thread), then returns to the host's. Bytes are
passed through untouched (TLS included).

`start_relay` runs one as a managed process and returns once it accepts connections.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from devstack.process import ManagedProcess, tcp_open

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def listen_in(netns_path: str, host: str, port: int) -> socket.socket:
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns_path, os.O_RDONLY)
    try:
        _setns(target)
        try:
            return socket.create_server((host, port), backlog=64)
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _serve(conn: socket.socket, target: tuple[str, int]) -> None:
    try:
        upstream = socket.create_connection(target, timeout=10)
    except OSError:
        conn.close()
        return
    upstream.settimeout(None)
    back = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
    back.start()
    _pump(conn, upstream)
    back.join()
    conn.close()
    upstream.close()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.relay", description=__doc__)
    parser.add_argument("--netns", required=True, help="the namespace's name (under /var/run/netns)")
    parser.add_argument("--listen", required=True, type=_address, help="ADDR:PORT inside the namespace")
    parser.add_argument("--to", required=True, type=_address, help="HOST:PORT on the host's side")
    args = parser.parse_args(argv)
    server = listen_in(f"/var/run/netns/{args.netns}", *args.listen)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"relaying {args.listen[0]}:{args.listen[1]} in {args.netns} to {args.to[0]}:{args.to[1]}", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve, args=(conn, args.to), daemon=True).start()


def start_relay(name: str, netns: str, listen: tuple[str, int], target_port: int, log_dir: Path,
                timeout: float = 30) -> ManagedProcess:
    """A relay listening at `listen` (an address of the stack namespace `netns`) to 127.0.0.1:`target_port`,
    as a managed process named `name` (its log in `log_dir`)."""
    host, port = listen
    relay = ManagedProcess(name, [sys.executable, "-m", "devstack.relay", "--netns", netns,
                                  "--listen", f"{host}:{port}", "--to", f"127.0.0.1:{target_port}"],
                           log_dir, cwd=Path(__file__).resolve().parent.parent).start()
    relay.wait_ready(lambda: tcp_open(host, port), timeout=timeout)
    return relay


if __name__ == "__main__":
    sys.exit(main())
