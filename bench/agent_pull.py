"""Node agent benchmark: one model to three nodes, beside pulling it three times with the `oras` CLI.

    .venv/bin/python -m bench.agent_pull [--size-gb 4] [--small-gb 0.5] [--shards 4]

A generated ModelPack artifact (`--shards` weight files plus a config, deterministic content unique per
MiB, so no layer or block dedupes) is pushed once to Debian's docker-registry on loopback. A proxy in
front of the registry counts the bytes the registry sends, whoever reads them.

(a) servingops: three agent processes (`servingops agent`), one per kwok node of a local cluster, each
    with a directory of its own as the node's disk; one ClusterBaseModel selecting the three nodes. Wall
    time from the create to three Ready reports; bytes read from the registry; each agent's peak RSS
    (VmHWM). Run at two model sizes (`--small-gb`, then `--size-gb`): the peak RSS must not grow with it.
(b) baseline: `oras pull` of the same digest three times at once (three copies, as three nodes would),
    the CLI built from its Go module (deploy/local/bench/build-oras.sh, pinned). Wall time and bytes.

Exits 1 when a goal is missed (bench/goals.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench.goals import Goals
from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.process import find_binary
from devstack.services import OciRegistry
from servingops.api_models.ome.model_keys import ModelKey, ModelKind
from servingops.clients.oci.registry_client import MiB
from testkit.node_agent import (
    CountingProxy,
    agent_process,
    create_model,
    delete_model,
    model_crds,
    model_object,
    push_artifact,
    report,
    write_content,
)

GB = 1024**3
BUILD_ORAS = REPO_ROOT / "deploy" / "local" / "bench" / "build-oras.sh"


def oras_binary() -> str:
    subprocess.run(["bash", str(BUILD_ORAS)], check=True)
    found = find_binary("oras", "SERVINGOPS_KUBE_BIN_DIR")
    if found is None:
        raise RuntimeError(f"oras still missing after {BUILD_ORAS}")
    return found


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM")


def make_artifact(work: Path, registry: str, size: int, shards: int, seed: int) -> tuple[str, int]:
    """Generate, push, delete the source; (reference, layer bytes)."""
    src = work / f"src-{seed}"
    per = size // shards
    files = {f"model-{i + 1:05d}-of-{shards:05d}.safetensors": write_content(src / f"w{i}", per, seed * 100 + i)
             for i in range(shards)}
    files["config.json"] = write_content(src / "config.json", 1000, seed * 100 + 99)
    total = sum(p.stat().st_size for p in files.values())
    began = time.monotonic()
    reference = push_artifact(registry, files, name=f"bench-{seed}")
    print(f"artifact {reference}: {total} bytes in {len(files)} layers, pushed in {time.monotonic() - began:.1f} s",
          flush=True)
    shutil.rmtree(src)
    return reference, total


def run_agents(api: client.ApiClient, cluster: LocalKubeCluster, proxy: CountingProxy, reference: str,
               work: Path, logs: Path, label: str) -> dict[str, float]:
    """Three agents, one model selecting their nodes; wall time to three Ready reports, bytes, peak RSS."""
    namespace = "servingops-system"
    roots = {node: work / f"{label}-{node}" for node in cluster.node_names}
    procs = [agent_process(f"agent-{label}-{node}", node, root, namespace, cluster.kubeconfig_path, proxy.address,
                           logs) for node, root in roots.items()]
    name = f"bench-{label}"
    key = ModelKey(ModelKind.CLUSTER_BASE_MODEL, "", name)
    try:
        for proc in procs:
            proc.wait_ready(lambda p=proc: "ready: root" in p.log_path.read_text(), 60)  # type: ignore[misc]
        proxy.reset()
        began = time.monotonic()
        create_model(api, model_object(ModelKind.CLUSTER_BASE_MODEL, name, "", {
            "storageUri": "hf://bench/model", "path": f"/mnt/models/{name}", "nodeSelector": {"type": "kwok"}},
            reference))

        def ready() -> bool:
            states = [json.loads(report(api, namespace, node).get(key.configmap_key) or "{}").get("status")
                      for node in roots]
            if "Failed" in states:
                raise RuntimeError(f"an agent failed: {states}")
            return states == ["Ready"] * len(roots)

        while not ready():
            for proc in procs:
                if not proc.alive:
                    raise RuntimeError(f"{proc.name} died:\n{proc.log_tail()}")
            time.sleep(0.2)
        wall = time.monotonic() - began
        fetched = proxy.reset()
        rss = [peak_rss(proc.pid) for proc in procs if proc.pid is not None]
        delete_model(api, ModelKind.CLUSTER_BASE_MODEL, name)
        deadline = time.monotonic() + 300
        while any((root / "mnt/models" / name).exists() for root in roots.values()):
            if time.monotonic() > deadline:
                raise RuntimeError("copies not removed after the delete")
            time.sleep(0.5)
        return {"wall_s": wall, "bytes": fetched, "peak_rss_max": max(rss), "peak_rss_min": min(rss)}
    finally:
        for proc in procs:
            proc.stop()
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)


def run_oras(oras: str, proxy: CountingProxy, reference: str, work: Path, copies: int = 3) -> dict[str, float]:
    ref = reference.replace(reference.split("/", 1)[0], proxy.address, 1)
    dirs = [work / f"oras-{i}" for i in range(copies)]
    proxy.reset()
    began = time.monotonic()
    procs = [subprocess.Popen([oras, "pull", "--plain-http", "--no-tty", ref, "-o", str(d)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for d in dirs]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"oras pull failed: {err.decode(errors='replace')}")
    wall = time.monotonic() - began
    fetched = proxy.reset()
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    return {"wall_s": wall, "bytes": fetched}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gb", type=float, default=4.0)
    parser.add_argument("--small-gb", type=float, default=0.5)
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args()
    goals = Goals("bench.agent_pull")
    oras = oras_binary()
    work = Path(tempfile.mkdtemp(prefix="bench-agent-pull-"))
    logs = work / "logs"
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        cluster = LocalKubeCluster(work / "kube", logs, install_upstream_crds=False).start()
        cleanup.callback(cluster.stop)
        api = cluster.api_client()
        cleanup.callback(api.close)
        with contextlib.suppress(ApiException):
            client.CoreV1Api(api).create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name="servingops-system")))
        cleanup.enter_context(model_crds(api))
        registry = OciRegistry(work / "registry", logs).start()
        cleanup.callback(registry.stop)
        host, port = registry.address.rsplit(":", 1)
        proxy = CountingProxy((host, int(port)))
        cleanup.callback(proxy.close)

        results = {}
        for label, size_gb, seed in (("small", args.small_gb, 1), ("large", args.size_gb, 2)):
            reference, size = make_artifact(work, registry.address, int(size_gb * GB), args.shards, seed)
            reference = reference.replace(registry.address, proxy.address, 1)
            os.sync()
            agents = run_agents(api, cluster, proxy, reference, work, logs, label)
            results[label] = (size, agents)
            print(f"{label} ({size / GB:.2f} GiB): 3 agents {agents['wall_s']:.1f} s, "
                  f"{agents['bytes'] / GB:.3f} GiB read from the registry ({agents['bytes'] / (3 * size):.4f} x 3 "
                  f"copies), agent peak RSS {agents['peak_rss_min'] / MiB:.0f}-{agents['peak_rss_max'] / MiB:.0f} MiB",
                  flush=True)
        size, agents = results["large"]
        os.sync()
        baseline = run_oras(oras, proxy, reference, work)
        print(f"oras pull x3 ({size / GB:.2f} GiB): {baseline['wall_s']:.1f} s, "
              f"{baseline['bytes'] / GB:.3f} GiB read from the registry", flush=True)

        small_rss = results["small"][1]["peak_rss_max"]
        goals.check("agents' wall time / oras x3", agents["wall_s"] / baseline["wall_s"], "<=", 1.5)
        goals.check("bytes read by the agents / 3 copies", agents["bytes"] / (3 * size), "<=", 1.01)
        goals.check("bytes read by the agents / bytes read by oras x3", agents["bytes"] / baseline["bytes"], "<=",
                    1.01)
        goals.check(f"agent peak RSS, {size / GB:.1f} GiB model", agents["peak_rss_max"] / MiB, "<", 200, "MiB")
        goals.check(f"agent peak RSS, {results['small'][0] / GB:.1f} GiB model", small_rss / MiB, "<", 200, "MiB")
        goals.check("agent peak RSS growth from the small to the large model",
                    (agents["peak_rss_max"] - small_rss) / MiB, "<", 20, "MiB")
    goals.finish()


if __name__ == "__main__":
    main()
