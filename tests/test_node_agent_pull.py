"""The node agent's reconciler against the real registry and the real apiserver, in this process.

Generated ModelPack artifacts are pushed to the session's registry; the agent's reconciler is driven
directly (objects handed to it as the watches would), so each step is observed at once: files on its
node directory byte for byte, its Node label and its report ConfigMap on the apiserver, and the bytes it
read from the registry (its own count, and a proxy's in front of the registry).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devstack.services import OciRegistry
from servingops.agents.agent import Agent, AgentConfig
from servingops.agents.registry import AgentRegistry
from servingops.agents.report import Reporter
from servingops.agents.store import MARKER, PARTIAL_DIR
from servingops.agents.watch import KindWatcher
from servingops.api_models.ome.model_keys import ModelKey, ModelKind
from servingops.clients.oci.registry_client import MiB
from testkit.node_agent import (
    CountingProxy,
    delete_node,
    make_node,
    model_object,
    node_labels,
    push_artifact,
    report,
    sha256_file,
    tree,
    unique,
    write_content,
)
from tests.crd_helpers import new_namespace

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def proxy(oci_registry: OciRegistry) -> Iterator[CountingProxy]:
    host, port = oci_registry.address.rsplit(":", 1)
    counting = CountingProxy((host, int(port)))
    yield counting
    counting.close()


@pytest.fixture(scope="module")
def report_ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "agent-report")


@pytest.fixture
def node(kube_api: client.ApiClient) -> Iterator[str]:
    name = unique("agent-node")
    make_node(kube_api, name, {"pool": "gpu"})
    yield name
    delete_node(kube_api, name)


class Harness:
    """One agent for one node, reconciling on demand."""

    def __init__(self, api: client.ApiClient, node: str, namespace: str, root: Path, registry: str) -> None:
        self.api, self.node, self.namespace, self.root, self.registry = api, node, namespace, root, registry

        @contextlib.contextmanager
        def factory() -> Iterator[AgentRegistry]:
            with AgentRegistry(registry, insecure=True) as reg:
                yield reg

        config = AgentConfig(node_name=node, root=root, state_dir=root / "var/lib/servingops-agent",
                             registry=registry, verify_seconds=0)
        self.agent = Agent(config, Reporter(api, node, namespace), factory)
        self.refresh_node()

    def refresh_node(self) -> None:
        node = client.CoreV1Api(self.api).read_node(self.node)
        self.agent.on_node(self.api.sanitize_for_serialization(node))

    def apply(self, obj: dict[str, Any] | None, key: ModelKey) -> None:
        self.agent.on_object(key, obj)
        self.agent.reconcile(key)

    def entry(self, key: ModelKey) -> dict[str, Any] | None:
        raw = report(self.api, self.namespace, self.node).get(key.configmap_key)
        return json.loads(raw) if raw else None


@pytest.fixture
def harness(kube_api: client.ApiClient, node: str, report_ns: str, tmp_path: Path, proxy: CountingProxy) -> Harness:
    return Harness(kube_api, node, report_ns, tmp_path / "node", proxy.address)


def _files(tmp: Path, spec: dict[str, tuple[int, int]]) -> dict[str, Path]:
    return {rel: write_content(tmp / "src" / rel, size, seed) for rel, (size, seed) in spec.items()}


def _model(name: str, artifact: str, path: str, **storage: Any) -> tuple[ModelKey, dict[str, Any]]:
    obj = model_object(ModelKind.CLUSTER_BASE_MODEL, name, "", {
        "storageUri": "hf://org/repo", "path": path, "nodeSelector": {"pool": "gpu"}, **storage}, artifact)
    return ModelKey(ModelKind.CLUSTER_BASE_MODEL, "", name), obj


def test_pull_lays_out_verifies_and_reports(harness: Harness, proxy: CountingProxy, tmp_path: Path) -> None:
    files = _files(tmp_path, {"config.json": (3000, 1), "model-00001.safetensors": (5 * MiB + 7, 2),
                              "tokenizer/tokenizer.json": (2 * MiB, 3)})
    artifact = push_artifact(proxy.address, files)
    digest = artifact.rsplit("@", 1)[1]
    key, obj = _model(unique("pull"), artifact, "/mnt/models/llama")
    proxy.reset()
    harness.apply(obj, key)
    copy = harness.root / "mnt/models/llama"
    assert tree(copy) == {rel: sha256_file(path) for rel, path in files.items()}
    marker = json.loads((copy / MARKER).read_text())
    assert marker["manifestDigest"] == digest and len(marker["files"]) == 3
    entry = harness.entry(key)
    assert entry is not None
    assert (entry["status"], entry["digest"], entry["message"], entry["name"], entry["kind"]) == (
        "Ready", digest, "", key.name, "ClusterBaseModel")
    assert node_labels(harness.api, harness.node)[key.label_key] == "Ready"
    layer_bytes = sum(p.stat().st_size for p in files.values())
    assert harness.agent.stats.fetched_bytes == layer_bytes
    assert layer_bytes <= proxy.reset() < layer_bytes + 64 * 1024  # the layers, plus headers and the manifest
    # Level-triggered: reconciling again changes nothing and reads no layer.
    harness.apply(obj, key)
    assert harness.agent.stats.fetched_bytes == layer_bytes and proxy.reset() < 64 * 1024


def test_corrupted_or_missing_file_is_detected_and_repulled(harness: Harness, proxy: CountingProxy,
                                                            tmp_path: Path) -> None:
    files = _files(tmp_path, {"a.safetensors": (3 * MiB, 11), "b.safetensors": (4 * MiB, 12), "c.json": (100, 13)})
    key, obj = _model(unique("corrupt"), push_artifact(proxy.address, files), "/models/c")
    harness.apply(obj, key)
    copy = harness.root / "models/c"
    expected = tree(copy)
    with open(copy / "b.safetensors", "r+b") as fd:  # one flipped byte, same size
        fd.seek(MiB)
        byte = fd.read(1)
        fd.seek(MiB)
        fd.write(bytes([byte[0] ^ 0xFF]))
    (copy / "c.json").unlink()
    before = harness.agent.stats.fetched_bytes
    harness.agent.resync(verify=True)
    harness.agent.reconcile(key)
    assert tree(copy) == expected
    assert harness.agent.stats.fetched_bytes - before == 4 * MiB + 100  # only the two bad files
    assert harness.entry(key)["status"] == "Ready"  # type: ignore[index]


def test_reuse_if_exists_links_a_layer_another_model_has(harness: Harness, proxy: CountingProxy,
                                                         tmp_path: Path) -> None:
    shared = write_content(tmp_path / "shared.safetensors", 6 * MiB, 21)
    first = {"weights.safetensors": shared, "config.json": write_content(tmp_path / "c1.json", 200, 22)}
    second = {"weights.safetensors": shared, "config.json": write_content(tmp_path / "c2.json", 300, 23)}
    key_a, obj_a = _model(unique("reuse-a"), push_artifact(proxy.address, first), "/models/a")
    key_b, obj_b = _model(unique("reuse-b"), push_artifact(proxy.address, second), "/models/b",
                          downloadPolicy="ReuseIfExists")
    key_c, obj_c = _model(unique("reuse-c"), push_artifact(proxy.address, second), "/models/c")
    harness.apply(obj_a, key_a)
    before = harness.agent.stats.fetched_bytes
    harness.apply(obj_b, key_b)
    a, b = harness.root / "models/a/weights.safetensors", harness.root / "models/b/weights.safetensors"
    assert b.stat().st_ino == a.stat().st_ino  # a hard link, not a download
    assert harness.agent.stats.fetched_bytes - before == 300
    assert harness.agent.stats.linked_layers == 1
    # Control: without ReuseIfExists the same layer is downloaded into a file of its own.
    harness.apply(obj_c, key_c)
    c = harness.root / "models/c/weights.safetensors"
    assert c.stat().st_ino != a.stat().st_ino and sha256_file(c) == sha256_file(a)
    assert harness.agent.stats.fetched_bytes - before == 300 + 6 * MiB + 300


def test_deletion_and_leaving_the_selection_remove_the_copy(harness: Harness, proxy: CountingProxy,
                                                            tmp_path: Path) -> None:
    artifact = push_artifact(proxy.address, _files(tmp_path, {"w.safetensors": (MiB, 31)}))
    key_a, obj_a = _model(unique("gone"), artifact, "/models/gone")
    key_b, obj_b = _model(unique("away"), artifact, "/models/away")
    # A file of someone else's beside ours survives the removal.
    foreign = write_content(harness.root / "models/away/notes.txt", 10, 32)
    harness.apply(obj_a, key_a)
    harness.apply(obj_b, key_b)
    assert (harness.root / "models/gone/w.safetensors").exists()
    assert (harness.root / "models/away/w.safetensors").exists()

    harness.apply(None, key_a)  # deleted
    assert not (harness.root / "models/gone").exists()
    assert harness.entry(key_a) is None and key_a.label_key not in node_labels(harness.api, harness.node)

    client.CoreV1Api(harness.api).patch_node(harness.node, {"metadata": {"labels": {"pool": "cpu"}}})
    harness.refresh_node()
    harness.agent.reconcile(key_b)
    assert not (harness.root / "models/away/w.safetensors").exists() and foreign.exists()
    assert harness.entry(key_b) is None and key_b.label_key not in node_labels(harness.api, harness.node)


def test_local_models_are_ready_when_the_path_exists(harness: Harness) -> None:
    present, absent = unique("local-yes"), unique("local-no")
    (harness.root / "data/present").mkdir(parents=True)
    for name, uri in ((present, "local:///data/present"), (absent, "local:///data/absent")):
        key = ModelKey(ModelKind.CLUSTER_BASE_MODEL, "", name)
        harness.apply(model_object(ModelKind.CLUSTER_BASE_MODEL, name, "", {"storageUri": uri}), key)
    entries = {name: harness.entry(ModelKey(ModelKind.CLUSTER_BASE_MODEL, "", name)) for name in (present, absent)}
    assert entries[present]["status"] == "Ready"  # type: ignore[index]
    assert entries[absent]["status"] == "Failed" and "/data/absent" in entries[absent]["message"]  # type: ignore[index]
    labels = node_labels(harness.api, harness.node)
    assert labels[f"models.ome.io/clusterbasemodel.{present}"] == "Ready"
    assert labels[f"models.ome.io/clusterbasemodel.{absent}"] == "Failed"


def test_an_artifact_the_registry_lacks_fails_with_a_message(harness: Harness, proxy: CountingProxy) -> None:
    key, obj = _model(unique("missing"), f"{proxy.address}/servingops/models@sha256:{'0' * 64}", "/models/m")
    harness.apply(obj, key)
    entry = harness.entry(key)
    assert entry is not None and entry["status"] == "Failed" and "not found" in entry["message"]
    assert node_labels(harness.api, harness.node)[key.label_key] == "Failed"


def test_a_layer_missing_from_the_registry_fails_the_model_and_the_rest_is_kept(
        harness: Harness, proxy: CountingProxy, tmp_path: Path) -> None:
    files = _files(tmp_path, {"a.safetensors": (2 * MiB, 61), "b.safetensors": (3 * MiB, 62), "c.json": (50, 63)})
    reference = push_artifact(proxy.address, files, repository="servingops/agent-missing-layer")
    missing = sha256_file(files["b.safetensors"])
    with AgentRegistry(proxy.address, insecure=True) as registry:
        assert registry.delete_blob("servingops/agent-missing-layer", missing)
    key, obj = _model(unique("missing-layer"), reference, "/models/ml")
    harness.apply(obj, key)
    entry = harness.entry(key)
    assert entry is not None and entry["status"] == "Failed" and missing in entry["message"], entry
    copy = harness.root / "models/ml"
    assert not (copy / MARKER).exists() and not (copy / "b.safetensors").exists()
    # The other layers went on concurrently until the failure stopped them: each is whole in place or
    # partial, and the next reconcile (the blob back) fetches only what is missing.
    on_disk = sum(_bytes_on_disk(copy, rel, sha256_file(files[rel])) for rel in ("a.safetensors", "c.json"))
    with AgentRegistry(proxy.address, insecure=True) as registry:
        registry.upload_blob_streaming("servingops/agent-missing-layer", files["b.safetensors"], missing, 3 * MiB)
    before = harness.agent.stats.fetched_bytes
    harness.agent.reconcile(key)
    assert harness.entry(key)["status"] == "Ready"  # type: ignore[index]
    assert tree(copy) == {rel: sha256_file(path) for rel, path in files.items()}
    assert harness.agent.stats.fetched_bytes - before == 3 * MiB + (2 * MiB + 50 - on_disk)


def _bytes_on_disk(copy: Path, rel: str, digest: str) -> int:
    """A layer's bytes already on the node: its file in place, else its partial download."""
    if (copy / rel).exists():
        return (copy / rel).stat().st_size
    partial = copy / PARTIAL_DIR / digest.removeprefix("sha256:")
    return partial.stat().st_size if partial.exists() else 0


class _Unserved:
    """A model kind whose CRD is not installed."""

    plural = "nosuchmodels"
    value = "NoSuchModel"


def test_a_kind_without_its_crd_counts_as_empty(kube_api: client.ApiClient) -> None:
    seen: list[Any] = []
    stop = threading.Event()
    watcher = KindWatcher(kube_api, _Unserved(), lambda key, obj: seen.append(key), stop)  # type: ignore[arg-type]
    watcher.start()
    try:
        assert watcher.synced.wait(30)
        assert seen == []
    finally:
        stop.set()


def test_fine_tuned_weights_are_delivered_like_models(harness: Harness, proxy: CountingProxy,
                                                      tmp_path: Path) -> None:
    files = _files(tmp_path, {"adapter_model.safetensors": (MiB, 71), "adapter_config.json": (120, 72)})
    name = unique("adapter")
    key = ModelKey(ModelKind.FINE_TUNED_WEIGHT, "", name)
    obj = model_object(ModelKind.FINE_TUNED_WEIGHT, name, "", {"storageUri": "hf://org/adapter",
                                                               "path": "/mnt/adapters/a"},
                       push_artifact(proxy.address, files))
    harness.apply(obj, key)
    assert tree(harness.root / "mnt/adapters/a") == {rel: sha256_file(path) for rel, path in files.items()}
    assert node_labels(harness.api, harness.node)[f"models.ome.io/finetunedweight.{name}"] == "Ready"
    assert harness.entry(key)["kind"] == "FineTunedWeight"  # type: ignore[index]
