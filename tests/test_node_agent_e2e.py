"""Node agents as processes, under the chart's agent identity, against the real apiserver and registry.

Two kwok nodes of the test's own, each with an agent (`servingops agent`) whose node disk is a directory;
a BaseModel carrying the artifact annotation selects one node by label: only that node gets the copy, its
label and its report; relabelling the node takes the copy away; deleting the model too. Then an agent is
SIGKILLed while a large layer streams and restarted: it resumes with a Range request, and a proxy in front
of the registry shows the bytes read stayed under twice the artifact's size.

The model kinds' CRDs are the project's (deploy/crds/) when they exist, else test-only ones (any spec),
created here and removed afterwards.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.services import OciRegistry
from servingops.agents.store import PARTIAL_DIR
from servingops.api_models.ome.model_keys import ModelKey, ModelKind
from servingops.clients.oci.registry_client import MiB
from testkit.node_agent import (
    CountingProxy,
    agent_process,
    create_model,
    delete_model,
    delete_node,
    make_node,
    model_crds,
    model_object,
    node_labels,
    push_artifact,
    report,
    sha256_file,
    tree,
    unique,
    wait_for,
    write_content,
)
from tests.crd_helpers import new_namespace

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def crds(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient) -> Iterator[list[str]]:
    with model_crds(kube_api) as made:
        yield made


@pytest.fixture(scope="module")
def proxy(oci_registry: OciRegistry) -> Iterator[CountingProxy]:
    host, port = oci_registry.address.rsplit(":", 1)
    counting = CountingProxy((host, int(port)))
    yield counting
    counting.close()


@pytest.fixture
def nodes(kube_api: client.ApiClient) -> Iterator[dict[str, str]]:
    made = {"a": unique("agent-a"), "b": unique("agent-b")}
    make_node(kube_api, made["a"], {"pool": "gpu-a"})
    make_node(kube_api, made["b"], {"pool": "gpu-b"})
    yield made
    for name in made.values():
        delete_node(kube_api, name)


def _entry(api: client.ApiClient, namespace: str, node: str, key: ModelKey) -> dict[str, Any] | None:
    raw = report(api, namespace, node).get(key.configmap_key)
    return json.loads(raw) if raw else None


def test_only_the_selected_node_gets_the_copy_label_and_report(
        crds: list[str], kube_api: client.ApiClient, chart_identities: Identities, proxy: CountingProxy,
        nodes: dict[str, str], tmp_path: Path, stack_logs: Path) -> None:
    assert chart_identities.agent is not None
    files = {"config.json": write_content(tmp_path / "src/config.json", 500, 41),
             "model.safetensors": write_content(tmp_path / "src/model.safetensors", 3 * MiB, 42)}
    artifact = push_artifact(proxy.address, files)
    digest = artifact.rsplit("@", 1)[1]
    roots = {which: tmp_path / f"node-{which}" for which in nodes}
    procs = [agent_process(f"agent-{name}", name, roots[which], chart_identities.namespace, chart_identities.agent,
                           proxy.address, stack_logs)
             for which, name in nodes.items()]
    ns = new_namespace(kube_api, "agent-e2e")
    name = unique("llama")
    key = ModelKey(ModelKind.BASE_MODEL, ns, name)
    storage = {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct", "path": "/mnt/models/llama",
               "nodeSelector": {"pool": "gpu-a"}}
    report_ns = chart_identities.namespace
    try:
        create_model(kube_api, model_object(ModelKind.BASE_MODEL, name, ns, storage, artifact))
        copy_a, copy_b = roots["a"] / "mnt/models/llama", roots["b"] / "mnt/models/llama"
        entry = wait_for("node a's report Ready", lambda: (_entry(kube_api, report_ns, nodes["a"], key) or {}).get(
            "status") == "Ready" and _entry(kube_api, report_ns, nodes["a"], key), proc=procs[0])
        assert entry["digest"] == digest and entry["kind"] == "BaseModel" and entry["namespace"] == ns
        assert tree(copy_a) == {rel: sha256_file(path) for rel, path in files.items()}
        assert node_labels(kube_api, nodes["a"])[f"models.ome.io/{ns}.basemodel.{name}"] == "Ready"
        # Node b has seen the model and left it alone. A negative is observed over a window: two of its
        # resyncs (2 s each) after it came up, on top of the watch event it got when the model was created.
        wait_for("node b's agent up", lambda: _ready(procs[1].log_path), proc=procs[1])
        time.sleep(4)
        assert not copy_b.exists()
        assert key.label_key not in node_labels(kube_api, nodes["b"])
        assert _entry(kube_api, report_ns, nodes["b"], key) is None

        # Node a leaves the selection: its copy, label and report entry go.
        client.CoreV1Api(kube_api).patch_node(nodes["a"], {"metadata": {"labels": {"pool": "gpu-c"}}})
        wait_for("node a's copy removed", lambda: not (copy_a / "model.safetensors").exists(), proc=procs[0])
        wait_for("node a's label removed", lambda: key.label_key not in node_labels(kube_api, nodes["a"]))
        wait_for("node a's entry removed", lambda: _entry(kube_api, report_ns, nodes["a"], key) is None)

        # Back in the selection, then the model is deleted: the copy comes back, then goes for good.
        client.CoreV1Api(kube_api).patch_node(nodes["a"], {"metadata": {"labels": {"pool": "gpu-a"}}})
        wait_for("node a's copy back", lambda: (copy_a / "model.safetensors").exists(), proc=procs[0])
        wait_for("node a Ready again", lambda: node_labels(kube_api, nodes["a"]).get(key.label_key) == "Ready")
        delete_model(kube_api, ModelKind.BASE_MODEL, name, ns)
        wait_for("copy removed after delete", lambda: not (copy_a / "model.safetensors").exists(), proc=procs[0])
        wait_for("label removed after delete", lambda: key.label_key not in node_labels(kube_api, nodes["a"]))
        assert all(proc.alive for proc in procs)
    finally:
        delete_model(kube_api, ModelKind.BASE_MODEL, name, ns)
        for proc in procs:
            proc.stop()


def _ready(log: Path) -> bool:
    """The agent is up (it logs `ready` once every watch has listed)."""
    return "ready: root" in log.read_text()


def test_a_killed_agent_resumes_the_layer_with_a_range_request(
        crds: list[str], kube_api: client.ApiClient, chart_identities: Identities, proxy: CountingProxy,
        nodes: dict[str, str], tmp_path: Path, stack_logs: Path) -> None:
    assert chart_identities.agent is not None
    big = 48 * MiB
    files = {"model.safetensors": write_content(tmp_path / "src/model.safetensors", big, 51),
             "config.json": write_content(tmp_path / "src/config.json", 400, 52)}
    artifact = push_artifact(proxy.address, files)
    layer_hex = sha256_file(files["model.safetensors"]).removeprefix("sha256:")
    root = tmp_path / "node"
    name = unique("resume")
    key = ModelKey(ModelKind.CLUSTER_BASE_MODEL, "", name)
    copy = root / "mnt/models/resume"
    partial = copy / PARTIAL_DIR / layer_hex
    report_ns = chart_identities.namespace
    proxy.reset()
    # Throttled, so the kill lands mid-layer whatever the machine's speed.
    first = agent_process(f"agent-{name}-1", nodes["a"], root, report_ns, chart_identities.agent, proxy.address,
                          stack_logs, "--bandwidth-mb-per-second", "8")
    second = None
    try:
        create_model(kube_api, model_object(ModelKind.CLUSTER_BASE_MODEL, name, "", {
            "storageUri": "hf://org/repo", "path": "/mnt/models/resume", "nodeSelector": {"pool": "gpu-a"}},
            artifact))
        wait_for("a quarter of the layer on disk", lambda: partial.exists() and partial.stat().st_size > big // 4,
                 timeout=120, proc=first)
        first.kill()
        at_kill = partial.stat().st_size
        assert 0 < at_kill < big
        assert (_entry(kube_api, report_ns, nodes["a"], key) or {}).get("status") == "Updating"
        second = agent_process(f"agent-{name}-2", nodes["a"], root, report_ns, chart_identities.agent,
                               proxy.address, stack_logs)
        wait_for("Ready after the restart", lambda: (_entry(kube_api, report_ns, nodes["a"], key) or {}).get(
            "status") == "Ready", timeout=120, proc=second)
        assert tree(copy) == {rel: sha256_file(path) for rel, path in files.items()}
        resumed = re.search(rf"sha256:{layer_hex}: resuming at byte (\d+) of {big} \(HTTP 206\)",
                            second.log_path.read_text())
        assert resumed is not None, second.log_tail()
        assert int(resumed.group(1)) >= at_kill
        fetched = re.search(rf"sha256:{layer_hex} -> .*: (\d+) bytes fetched \(from byte (\d+)\)",
                            second.log_path.read_text())
        assert fetched is not None and int(fetched.group(1)) == big - int(fetched.group(2))
        artifact_size = big + 400
        assert proxy.reset() < 2 * artifact_size
    finally:
        delete_model(kube_api, ModelKind.CLUSTER_BASE_MODEL, name)
        first.stop()
        if second is not None:
            second.stop()


IDLE_WINDOW_SECONDS = 10.0
IDLE_NODE_REQUESTS = 6
"""An idle agent's GETs, LISTs and WATCHes of Nodes in the window, with room for the long-running watches
of kwok, the scheduler and the controller-manager, which each start again every few minutes. An agent
that re-watched its Node at once after each 410 made about 280 of each in 10 s."""


def _node_reads(cluster: LocalKubeCluster) -> int:
    return sum(count for labels, count in cluster.request_counts()
               if labels.get("resource") == "nodes" and not labels.get("subresource")
               and labels.get("verb") in {"GET", "LIST", "WATCH"})


def test_an_idle_agent_leaves_the_apiserver_alone(
        crds: list[str], kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, chart_identities: Identities,
        oci_registry: OciRegistry, tmp_path: Path, stack_logs: Path) -> None:
    """Counted by the apiserver itself over a window: an agent with nothing to do watches its Node, and does
    not read or watch it again and again."""
    assert chart_identities.agent is not None
    node = unique("agent-idle")
    make_node(kube_api, node, {"pool": "idle"})
    proc = agent_process(f"agent-{node}", node, tmp_path / "disk", chart_identities.namespace,
                         chart_identities.agent, oci_registry.address, stack_logs, "--resync-seconds", "60")
    try:
        wait_for("the idle agent up", lambda: _ready(proc.log_path), proc=proc)
        time.sleep(2)  # its first resync and the watches' first answers
        before = _node_reads(kube_cluster)
        time.sleep(IDLE_WINDOW_SECONDS)
        made = _node_reads(kube_cluster) - before
        assert proc.alive
        assert made <= IDLE_NODE_REQUESTS, f"{made} node GET/LIST/WATCH requests in {IDLE_WINDOW_SECONDS}s"
    finally:
        proc.stop()
        delete_node(kube_api, node)
