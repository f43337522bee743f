"""Start, probe and stop the long-running processes of the local stack."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def cache_dir() -> Path:
    """Where built binaries and downloaded manifests are kept between runs (outside the repo)."""
    root = Path(os.environ.get("SERVINGOPS_CACHE", Path.home() / ".cache" / "servingops"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def find_binary(name: str, dir_env: str | None = None) -> str | None:
    """Look a binary up in $<dir_env>, then on PATH, then in the project's cache.

    A developer machine with its own binaries therefore starts without building anything.
    """
    candidates: list[Path] = []
    if dir_env and os.environ.get(dir_env):
        candidates.append(Path(os.environ[dir_env]) / name)
    found = shutil.which(name)
    if found:
        candidates.append(Path(found))
    candidates.append(cache_dir() / "bin" / name)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def built_binary(name: str, build_script: Path, dir_env: str | None = None) -> str:
    """find_binary, or have the pinned build script put just `name` in the cache (minutes when cold). The
    script takes a lock: two askers at once build it once (the second waits, then finds it)."""
    found = find_binary(name, dir_env)
    if found is None:
        print(f"building {name} with {build_script} (minutes on a cold cache)", flush=True)
        subprocess.run(["bash", str(build_script), name], check=True)
        found = find_binary(name, dir_env)
    if found is None:
        raise RuntimeError(f"{name} still missing after {build_script}")
    return found


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user's counts too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tcp_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def http_ok(url: str, *, ssl_context: object | None = None, headers: Mapping[str, str] | None = None) -> bool:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=2, context=ssl_context) as response:  # type: ignore[arg-type]
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


class ProcessFailed(RuntimeError):
    """A managed process exited or never became ready; the message carries its log tail."""


class ManagedProcess:
    """One child process with its output in `<log_dir>/<name>.log`.

    The child gets its own process group so that stop() also ends anything it spawned.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_dir: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = Path(log_dir) / f"{name}.log"
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )
        log.close()
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, probe: Callable[[], bool], timeout: float, interval: float = 0.2) -> None:
        """Poll `probe` until it answers True; fail fast if the process dies meanwhile."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise ProcessFailed(f"{self.name} exited early; log {self.log_path}:\n{self.log_tail()}")
            if probe():
                return
            time.sleep(interval)
        raise ProcessFailed(f"{self.name} not ready after {timeout}s; log {self.log_path}:\n{self.log_tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after `timeout`."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def kill(self) -> None:
        """SIGKILL at once: a crash, for tests of recovery."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=5)
