"""Network namespaces the stack makes for itself, so what the apiserver must dial is never on loopback
(Endpoints and EndpointSlices refuse 127.0.0.0/8) and never the machine's own address (tests send
traffic only to loopback and to addresses the stack made).

Each namespace gets a /24 of 10.250.0.0/16 on a veth pair: the host end `.1`, the namespace end `.2`.
The host reaches the namespace through the pair's connected route. Names carry the creating process's
pid, so a namespace left behind by a killed run is removed by the next one that creates any.

Facts checked on these machines: ../shared/notes/local-stack-facts.md (root may `ip netns add`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devstack.process import pid_alive

log = logging.getLogger(__name__)

PREFIX = "servingops"
SUBNET = "10.250"
POD_SUBNET = "10.244"
MAX_INDEX = 250
NETNS_DIR = Path("/var/run/netns")
LOCK_PATH = Path("/run/servingops-netns.lock")
_NAME = re.compile(rf"^{PREFIX}-(\d+)-(\d+)$")


def _ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Stacks started side by side (pytest-xdist workers) pick their subnets one at a time."""
    with open(LOCK_PATH, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _ours() -> dict[str, tuple[int, int]]:
    """Namespaces this project made: name -> (creator pid, subnet index)."""
    names = (line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip())
    return {name: (int(m.group(1)), int(m.group(2))) for name in names if (m := _NAME.match(name))}


@dataclass(frozen=True)
class NetworkNamespace:
    name: str
    index: int

    @property
    def host_address(self) -> str:
        return f"{SUBNET}.{self.index}.1"

    @property
    def address(self) -> str:
        """The namespace's own address: what the apiserver is given to dial."""
        return f"{SUBNET}.{self.index}.2"

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    @property
    def pod_cidr(self) -> str:
        """The pod range of a cluster whose pods answer in this namespace (devstack/pod_runtime.py): one
        /24 of kwok's 10.244.0.0/16 per namespace, so stacks side by side never share an address."""
        return f"{POD_SUBNET}.{self.index}.0/24"

    def route_pods(self) -> None:
        """A host route for pod_cidr into the namespace: the host (Traefik, Prometheus, a test) reaches
        a pod's address there. It goes with the veth pair when the namespace is deleted."""
        _ip("route", "replace", self.pod_cidr, "via", self.address)

    def add_address(self, ip: str) -> None:
        """Answer for `ip` inside the namespace (on its loopback; routed in by route_pods)."""
        if f" {ip}/32 " not in _ip("-n", self.name, "-o", "addr", "show", "dev", "lo"):
            _ip("-n", self.name, "addr", "add", f"{ip}/32", "dev", "lo")

    def remove_address(self, ip: str) -> None:
        _ip("-n", self.name, "addr", "del", f"{ip}/32", "dev", "lo", check=False)

    def exec_argv(self) -> list[str]:
        """The prefix that runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    @classmethod
    def create(cls) -> NetworkNamespace:
        with _locked():
            existing = _ours()
            for name, (pid, _) in existing.items():
                if not pid_alive(pid):
                    log.info("removing network namespace %s left by a run that is gone", name)
                    _ip("netns", "delete", name, check=False)
            used = {index for name, (pid, index) in existing.items() if pid_alive(pid)}
            index = next((i for i in range(1, MAX_INDEX + 1) if i not in used), None)
            if index is None:
                raise RuntimeError(f"all {MAX_INDEX} stack network namespaces are in use")
            namespace = cls(f"{PREFIX}-{os.getpid()}-{index}", index)
            namespace._make()
            return namespace

    def _make(self) -> None:
        host_end, ns_end = f"sov{self.index}h", f"sov{self.index}n"
        _ip("link", "delete", host_end, check=False)  # a pair whose namespace vanished under it
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _ip("link", "set", ns_end, "netns", self.name)
            _ip("addr", "add", f"{self.host_address}/24", "dev", host_end)
            _ip("link", "set", host_end, "up")
            _ip("-n", self.name, "addr", "add", f"{self.address}/24", "dev", ns_end)
            _ip("-n", self.name, "link", "set", ns_end, "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
        except Exception:
            self.delete()
            raise

    def delete(self) -> None:
        """Removes the namespace; the veth pair goes with its namespace end."""
        _ip("netns", "delete", self.name, check=False)
        _ip("link", "delete", f"sov{self.index}h", check=False)
