"""The installed product works outside the checkout.

The wheel is built from a copy of the checkout's files and installed into a fresh venv in a temporary
directory; every console command then runs from another temporary directory, so nothing of the checkout is
on `sys.path` (a wheel that forgets a package fails here with ModuleNotFoundError, as `runtime` once did).

Why third-party packages come from the checkout's venv: installing temporalio, kubernetes, pydantic and the
rest into every fresh venv would download them on each run. The fresh venv is created *without* system site
packages and gets the wheel with `--no-deps`; a `.pth` file then appends the site-packages directories of the
interpreter running the tests (the checkout's .venv) to `sys.path`. A directory added that way is only
searched, its own `.pth` files are not run, so the editable install's finder there (which maps our packages
to the checkout) never loads: our packages can only come from the wheel, and the test checks that each one
does (and that devstack, tests and bench are not importable at all). The console script is the one pip wrote
into the fresh venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from devstack.identities import Identities
from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.process import ManagedProcess, free_port
from devstack.product import WORKER_READY_SECONDS
from devstack.services import TemporalDevServer
from servingops.api_models.ome import InferenceService
from servingops.api_models.registry import served_kinds
from testkit.waiting import wait_until
from tests.crd_helpers import create, manifest

CONSOLE_SCRIPT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]["servingops"]
NAMESPACE = CONSOLE_SCRIPT.split(":")[0].rpartition("cli")[0]
"""What the installed packages' names start with: "" for top-level packages, "servingops." under a namespace."""
PRODUCT = ("api_models", "workflows", "activities", "runtime", "workers", "crd_bridge", "sdk", "cli", "ingress",
           "agents", "clients", "rendering", "admission")
"""Every product package: each folder of servingops/ that the wheel must carry."""
NOT_INSTALLED = ("devstack", "tests", "bench")
"""The local stack, the test helpers and the benchmarks live in the checkout only."""
DEADLINE = 120.0


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    cwd: Path
    """An empty directory outside the checkout: where every command runs."""
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def servingops(self) -> Path:
        return self.venv / "bin" / "servingops"

    def run(self, *argv: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(arg) for arg in argv], cwd=self.cwd, env=self.env, capture_output=True,
                              text=True, timeout=timeout)


def _checkout_files() -> list[str]:
    """What a clone would hold, plus files not yet committed; nothing ignored (.venv, caches, egg-info)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                            check=True, capture_output=True, text=True).stdout
    return [name for name in listed.split("\0") if name and (REPO_ROOT / name).exists()]


def _copy_checkout(to: Path) -> None:
    for name in _checkout_files():
        source, target = REPO_ROOT / name, to / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # kept a link, as git keeps it
            target.symlink_to(source.readlink())
        elif source.is_file():
            shutil.copy2(source, target)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("packaging")
    source, wheels, venv, cwd = root / "source", root / "wheels", root / "venv", root / "elsewhere"
    cwd.mkdir()
    # A copy, so the build's own files (build/, *.egg-info) never land in the checkout.
    _copy_checkout(source)
    # The pinned setuptools of the checkout's venv builds it (constraints.txt): nothing is downloaded.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--wheel-dir", str(wheels), str(source)], check=True, cwd=root)
    [wheel] = wheels.glob("servingops-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, cwd=root)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True, cwd=root)
    fresh = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                 "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                check=True, capture_output=True, text=True).stdout.strip())
    third_party = [entry for entry in sys.path if entry.endswith("site-packages")]
    (fresh / "zz_third_party_from_checkout_venv.pth").write_text("".join(f"{entry}\n" for entry in third_party))
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return Installed(wheel, venv, cwd, env)


def _module(*parts: str) -> str:
    return NAMESPACE + ".".join(parts)


@pytest.mark.unit
def test_every_product_package_is_a_real_folder_of_the_package() -> None:
    """Issue 29: servingops/<pkg>/ holds the code itself, so a tool that walks files (mypy, import-linter, an
    editor) finds each module where the import system does. No link in servingops/, and no product folder left
    at the top of the checkout."""
    prefix = NAMESPACE.replace(".", "/")
    staged = subprocess.run(["git", "ls-files", "-z", "--stage", "--", prefix or "."], cwd=REPO_ROOT, check=True,
                            capture_output=True, text=True).stdout
    links = [entry.split("\t", 1)[1] for entry in staged.split("\0") if entry.startswith("120000 ")]
    assert links == [], "links in the package folder"
    assert [p for p in PRODUCT if not (REPO_ROOT / prefix / p / "__init__.py").is_file()] == []
    if prefix:  # what git tracks: a folder left behind with only __pycache__ in it is no product folder
        left = subprocess.run(["git", "ls-files", "--", *PRODUCT], cwd=REPO_ROOT, check=True, capture_output=True,
                              text=True).stdout.split()
        assert left == [], "product files outside the package folder"


@pytest.mark.integration
def test_the_wheel_carries_every_product_package_and_nothing_else(installed: Installed) -> None:
    prefix = NAMESPACE.replace(".", "/")
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = [name for name in wheel.namelist() if ".dist-info/" not in name]
    assert names and all(name.startswith(prefix) for name in names), names
    top_level = {name[len(prefix):].split("/", 1)[0] for name in names}
    assert top_level == set(PRODUCT)
    # Every package folder of the checkout (subpackages included) is in the wheel with all its modules.
    packaged = set(names)
    missing = [str(path.relative_to(REPO_ROOT)) for package in PRODUCT
               for path in sorted((REPO_ROOT / prefix / package).rglob("*.py"))
               if "__pycache__" not in path.parts and str(path.relative_to(REPO_ROOT)) not in packaged]
    assert missing == []


@pytest.mark.integration
def test_every_product_module_imports_from_the_fresh_venv(installed: Installed) -> None:
    """Importing every module proves no product module needs the checkout (devstack, tests) at import time."""
    script = textwrap.dedent("""
        import importlib, json, pkgutil, sys
        product, absent = json.loads(sys.argv[1]), json.loads(sys.argv[2])
        files, missing = {}, []
        for name in product:
            package = importlib.import_module(name)
            files[name] = package.__file__
            for info in pkgutil.walk_packages(package.__path__, name + "."):
                files[info.name] = importlib.import_module(info.name).__file__
        for name in absent:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError:
                missing.append(name)
        print(json.dumps({"files": files, "missing": missing}))
    """)
    # -I: no PYTHONPATH, no user site-packages, not even the current directory on sys.path.
    result = installed.run(installed.python, "-I", "-c", script, json.dumps([_module(n) for n in PRODUCT]),
                           json.dumps(list(NOT_INSTALLED)))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    outside = {name: path for name, path in report["files"].items()
               if not Path(path).resolve().is_relative_to(installed.venv.resolve())}
    assert outside == {}, "imported from outside the fresh venv"
    expected = {_module("runtime", "temporal"), _module("ingress", "uploads"), _module("cli", "main")}
    assert expected <= set(report["files"])
    assert report["missing"] == list(NOT_INSTALLED)


@pytest.mark.integration
def test_console_commands_answer_help_from_elsewhere(installed: Installed) -> None:
    for argv in ([], ["worker"], ["bridge"], ["admission"], ["rollout"], ["rollout", "status"], ["crds"]):
        result = installed.run(installed.servingops, *argv, "--help")
        assert result.returncode == 0, f"servingops {' '.join(argv)} --help: {result.stderr}"
        assert "usage:" in result.stdout


@pytest.mark.integration
def test_crds_are_printed_outside_a_checkout(installed: Installed) -> None:
    """No deploy/crds/ folder outside the checkout: the CRDs go to stdout, ready for `kubectl apply -f -`."""
    result = installed.run(installed.servingops, "crds")
    assert result.returncode == 0, result.stderr
    documents = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert sorted(doc["metadata"]["name"] for doc in documents) == sorted(
        f"{kind.crd.plural}.{kind.crd.group}" for kind in served_kinds())
    committed = {yaml.safe_load(path.read_text())["metadata"]["name"]: yaml.safe_load(path.read_text())
                 for path in (REPO_ROOT / "deploy" / "crds").glob("*.yaml")}
    assert {doc["metadata"]["name"]: doc for doc in documents} == committed
    assert list(installed.cwd.iterdir()) == [], "nothing is written where the command runs"


def _tail(process: ManagedProcess) -> str:
    return f"{process.name} log:\n{process.log_tail(40)}"


@pytest.fixture
def installed_processes(installed: Installed, kube_cluster: LocalKubeCluster, temporal_server: TemporalDevServer,
                        stack_logs: Path, chart_identities: Identities,
                        ) -> Iterator[tuple[str, str, ManagedProcess, ManagedProcess]]:
    """The installed worker and bridge on a task queue of their own, as the chart's identities;
    (task queue, the admin kubeconfig a user's CLI uses, worker, bridge)."""
    task_queue = f"packaging-{uuid.uuid4().hex[:6]}"
    kubeconfig = str(kube_cluster.kubeconfig_path)
    ids = chart_identities
    common = ["--temporal-address", temporal_server.address, "--task-queue", task_queue]
    spool = installed.cwd.parent / "spool"
    worker = ManagedProcess(f"installed-worker-{task_queue}", [
        str(installed.servingops), "worker", *common, "--kubeconfig", str(ids.worker),
        "--upload-kubeconfig", str(ids.uploads), "--controller-namespace", ids.namespace,
        "--host-id", f"host-{task_queue}", "--spool-dir", str(spool),
        "--upload-listen", "127.0.0.1:0"], stack_logs, env=installed.env, cwd=installed.cwd)
    metrics = free_port()
    bridge = ManagedProcess(f"installed-bridge-{task_queue}", [
        str(installed.servingops), "bridge", *common, "--kubeconfig", str(ids.bridge),
        "--lease-namespace", ids.namespace, "--kinds", "InferenceService",
        "--metrics-address", f"127.0.0.1:{metrics}", "--lease-name", f"bridge-{task_queue}",
        "--lease-seconds", "5"], stack_logs, env=installed.env, cwd=installed.cwd)
    try:
        worker.start().wait_ready(lambda: "ready on" in worker.log_tail(20), timeout=WORKER_READY_SECONDS)
        bridge.start().wait_ready(lambda: "servingops_bridge_leader 1" in _metrics(metrics), timeout=60)
        yield task_queue, kubeconfig, worker, bridge
    finally:
        bridge.stop()
        worker.stop()


def _metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            return str(response.read().decode())
    except OSError:
        return ""


@pytest.mark.e2e
def test_installed_worker_bridge_and_rollout_status_against_the_stack(
        installed: Installed, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
        installed_processes: tuple[str, str, ManagedProcess, ManagedProcess]) -> None:
    _, kubeconfig, worker, bridge = installed_processes
    namespace = f"packaging-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(kube_api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    status = [installed.servingops, "rollout", "status", "chat", "-n", namespace,
              "--temporal-address", temporal_server.address, "--kubeconfig", kubeconfig]

    missing = installed.run(*status)
    assert missing.returncode == 1, missing.stdout + missing.stderr
    assert missing.stderr.startswith("error:") and "Traceback" not in missing.stderr, missing.stderr

    spec = {"engine": {"minReplicas": 1, "runner": {"name": "engine", "image": "vllm/vllm-openai:v0.9",
                                                     "ports": [{"containerPort": 8000}]}}}
    create(kube_api, InferenceService, manifest(InferenceService, spec, name="chat"), namespace)
    runs: list[subprocess.CompletedProcess[str]] = []

    def answered() -> subprocess.CompletedProcess[str] | None:
        runs[:] = [installed.run(*status, "-o", "json")]
        return runs[0] if runs[0].returncode == 0 else None

    result = wait_until("`rollout status -o json` answering for the new InferenceService", answered, worker,
                        timeout=DEADLINE, interval=1, detail=lambda: f"{runs[-1].stderr}\n{_tail(bridge)}")
    state = json.loads(result.stdout)
    assert (state["namespace"], state["name"]) == (namespace, "chat")
    assert state["workflow_id"].startswith(f"isvc/{namespace}/chat/")

    text = installed.run(*status)
    assert text.returncode == 0, text.stderr
    assert "chat" in text.stdout and state["workflow_id"] in text.stdout
