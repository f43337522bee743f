"""Helpers of the node agent's tests and benchmark: generated artifacts pushed to the real registry, a proxy
that counts what the registry sends, kwok nodes of a test's own, the model kinds' CRDs, agent processes."""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.kube import KWOK_NODE_ANNOTATION, REPO_ROOT
from devstack.process import ManagedProcess
from servingops.api_models.ome.model_keys import GROUP, VERSION, ModelKind
from servingops.clients.oci.modelpack import LayerFile, ModelPackMeta, build_artifact, role_for_path
from servingops.clients.oci.registry_client import MiB, ModelRegistry
from testkit.waiting import wait_until

REPOSITORY = "servingops/models"
TEST_TAINT = {"key": "servingops.io/agent-test", "value": "true", "effect": "NoSchedule"}
"""On the nodes the agent tests make, so no other test's pod is scheduled there."""


def write_content(path: Path, size: int, seed: int) -> Path:
    """Deterministic content, unique per seed and per MiB (so layers never dedupe by accident), written a
    block at a time; fast enough for gigabytes (no random generator in the loop)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    base = hashlib.sha256(f"{seed}".encode()).digest() * (MiB // 32)
    with open(path, "wb") as out:
        left, block = size, 0
        while left:
            piece = block.to_bytes(8, "big") + base[8:]
            out.write(piece[: min(left, MiB)])
            left -= min(left, MiB)
            block += 1
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fd:
        while data := fd.read(MiB):
            digest.update(data)
    return "sha256:" + digest.hexdigest()


def push_artifact(address: str, files: Mapping[str, Path], *, name: str = "agent-test",
                  repository: str = REPOSITORY) -> str:
    """Push the files as a ModelPack artifact, as the import does (one raw layer per file, the filepath
    annotation); returns `<address>/<repository>@<manifest digest>`."""
    layers = []
    with ModelRegistry(address, insecure=True) as registry:
        for rel, path in sorted(files.items()):
            digest, size = sha256_file(path), path.stat().st_size
            role, untested = role_for_path(rel)
            if not registry.blob_exists(repository, digest):
                registry.upload_blob_streaming(repository, path, digest, size)
            layers.append(LayerFile(path=rel, role=role, sha256=digest, size=size, role_untested=untested))
        built = build_artifact(layers, ModelPackMeta(name=name))
        registry.put_blob_bytes(repository, built.config)
        digest = registry.put_manifest(repository, built.manifest_descriptor.digest, built.manifest)
    return f"{address}/{repository}@{digest}"


class CountingProxy:
    """A TCP proxy in front of the registry that counts the bytes the registry sends back: what "bytes read
    from the registry" means, measured outside the client that reads them."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.received = 0
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def reset(self) -> int:
        with self._lock:
            value, self.received = self.received, 0
        return value

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            threading.Thread(target=self._pipe, args=(conn, up, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, conn, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        try:
            while data := src.recv(MiB):
                if count:
                    with self._lock:
                        self.received += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()


# -- cluster objects ------------------------------------------------------------------------------------


def make_node(api: client.ApiClient, name: str, labels: Mapping[str, str]) -> None:
    """A kwok node of the test's own (tainted: nothing else is scheduled there)."""
    client.CoreV1Api(api).create_node(client.V1Node(
        metadata=client.V1ObjectMeta(name=name, annotations={KWOK_NODE_ANNOTATION: "fake"},
                                     labels={"type": "kwok", "kubernetes.io/hostname": name, **labels}),
        spec=client.V1NodeSpec(taints=[client.V1Taint(**TEST_TAINT)])))


def delete_node(api: client.ApiClient, name: str) -> None:
    with contextlib.suppress(ApiException):
        client.CoreV1Api(api).delete_node(name)


def node_labels(api: client.ApiClient, name: str) -> dict[str, str]:
    return dict(client.CoreV1Api(api).read_node(name).metadata.labels or {})


def report(api: client.ApiClient, namespace: str, node: str) -> dict[str, str]:
    try:
        return dict(client.CoreV1Api(api).read_namespaced_config_map(node, namespace).data or {})
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise


PROJECT_CRD = {ModelKind.BASE_MODEL: "ome.io_basemodels.yaml", ModelKind.CLUSTER_BASE_MODEL:
               "ome.io_clusterbasemodels.yaml", ModelKind.FINE_TUNED_WEIGHT: "ome.io_finetunedweights.yaml"}


def minimal_crd(kind: ModelKind) -> dict[str, Any]:
    """A test-only CRD for a model kind whose generated CRD (deploy/crds/) does not exist yet: any spec."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{GROUP}", "labels": {"servingops.io/test-only": "true"}},
        "spec": {"group": GROUP, "scope": "Namespaced" if kind.namespaced else "Cluster",
                 "names": {"kind": kind.value, "plural": kind.plural, "singular": kind.value.lower(),
                           "listKind": f"{kind.value}List"},
                 "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


@contextlib.contextmanager
def model_crds(api: client.ApiClient) -> Iterator[list[str]]:
    """The three model kinds served: the project's CRDs when deploy/crds/ has them (the session applied
    them), else test-only ones, removed afterwards. Yields the names of those it made."""
    ext = client.ApiextensionsV1Api(api)
    made = []
    for kind in ModelKind:
        name = f"{kind.plural}.{GROUP}"
        try:
            ext.read_custom_resource_definition(name)
            continue
        except ApiException as exc:
            if exc.status != 404:
                raise
        crd = minimal_crd(kind)
        if (REPO_ROOT / "deploy" / "crds" / PROJECT_CRD[kind]).exists():
            crd = yaml.safe_load((REPO_ROOT / "deploy" / "crds" / PROJECT_CRD[kind]).read_text())
        ext.create_custom_resource_definition(crd)
        made.append(name)
    try:
        wait_until("the model CRDs Established",
                   lambda: all(_established(ext, f"{k.plural}.{GROUP}") for k in ModelKind), timeout=60, interval=0.2)
        yield made
    finally:
        for name in made:
            with contextlib.suppress(ApiException):
                ext.delete_custom_resource_definition(name)


def _established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    status = ext.read_custom_resource_definition(name).status
    return any(c.type == "Established" and c.status == "True" for c in (status.conditions or []) if status)


def model_object(kind: ModelKind, name: str, namespace: str, storage: dict[str, Any],
                 artifact: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if kind.namespaced else {})}
    if artifact:
        meta["annotations"] = {"servingops.io/artifact": artifact}
    spec: dict[str, Any] = {"storage": storage}
    if kind is ModelKind.FINE_TUNED_WEIGHT:
        spec.update(baseModelRef={"name": "base"}, modelType="Adapter", hyperParameters={})
    else:
        spec.update(modelFormat={"name": "safetensors"})
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind.value, "metadata": meta, "spec": spec}


def create_model(api: client.ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    kind = ModelKind(obj["kind"])
    custom = client.CustomObjectsApi(api)
    if kind.namespaced:
        return dict(custom.create_namespaced_custom_object(GROUP, VERSION, obj["metadata"]["namespace"],
                                                           kind.plural, obj))
    return dict(custom.create_cluster_custom_object(GROUP, VERSION, kind.plural, obj))


def delete_model(api: client.ApiClient, kind: ModelKind, name: str, namespace: str = "") -> None:
    custom = client.CustomObjectsApi(api)
    with contextlib.suppress(ApiException):
        if kind.namespaced:
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, kind.plural, name)
        else:
            custom.delete_cluster_custom_object(GROUP, VERSION, kind.plural, name)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# -- agent processes ------------------------------------------------------------------------------------


def agent_process(name: str, node: str, root: Path, namespace: str, kubeconfig: Path, registry: str,
                  log_dir: Path, *extra: str) -> ManagedProcess:
    """`servingops agent` for one node, as a process of its own (the console script's module)."""
    argv = [sys.executable, "-m", "servingops.cli.main", "agent", "--node", node, "--root", str(root),
            "--namespace", namespace, "--kubeconfig", str(kubeconfig), "--registry", registry,
            "--registry-insecure", "--resync-seconds", "2", *extra]
    return ManagedProcess(name, argv, log_dir, env={"PYTHONUNBUFFERED": "1"}, cwd=REPO_ROOT).start()


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60, interval: float = 0.2,
             proc: ManagedProcess | None = None) -> Any:
    """testkit/waiting.py's wait, polled every 0.2 s (an agent's file and label changes are quick)."""
    return wait_until(what, probe, proc, timeout=timeout, interval=interval)


def tree(root: Path) -> dict[str, str]:
    """Every regular file under `root` (relative path -> sha256), the agent's own bookkeeping left out."""
    found = {}
    for dirpath, _dirs, files in os.walk(root):
        for file in files:
            path = Path(dirpath) / file
            rel = path.relative_to(root).as_posix()
            if not rel.startswith(".servingops"):
                found[rel] = sha256_file(path)
    return found
