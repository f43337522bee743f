"""Model import benchmark: a synthetic Llama-shaped safetensors model (several shards) from the
Hub-compatible server into the registry, beside what a user would do by hand, in one run.

    .venv/bin/python -m bench.model_import [--size-gb 4] [--shards 4] [--fill random|sparse]

(a) Baseline, in its own process: `huggingface_hub.snapshot_download` (the real client, endpoint the
    local Hub) into a temporary directory, then oras-py `OrasClient.push` of those files to the same
    registry (another repository). Wall time of each step.
(b) servingops: a worker process and a bridge process; `kubectl apply` a Model, wait for Ready. Wall
    time from the apply to Ready, and the worker's peak RSS (VmHWM).
(c) The same import into a fresh registry, with the worker SIGKILLed once the spool holds 55% of the
    weights (mid-shard, a push in flight) and restarted with the same host id and spool: the bytes the
    Hub served and the registry wrote beyond the model size.

Everything runs on loopback: Temporal dev server, the local Kubernetes cluster (project CRDs only),
Debian's docker-registry, the Hub-compatible server (in this process; like the Hub, it redirects the weights to a
second, CDN-like host). Exits 1 when a goal is missed (bench/goals.py). `--fill random` (default) writes
pseudo-random tensor data, as real weights are; `--fill sparse` makes holes (zeros), which costs nothing
to generate but lets the Hub serve from zero pages.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.goals import Goals
from bench.stack import admin_identities
from devstack import model_repos
from devstack.hub_server import HubServer
from devstack.kube import REPO_ROOT, LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.product import BridgeLauncher, start_worker
from devstack.services import OciRegistry, TemporalDevServer
from servingops.runtime.temporal import TemporalSettings, connect
from testkit.import_resume import (
    KILL_AT,
    TransferReport,
    hub_served_bytes,
    kill_mid_import,
    peak_rss_bytes,
    process_written_bytes,
)
from testkit.model_import import Stack

REPO_ID = "bench/llama-synthetic"
BASELINE_REPOSITORY = "baseline/llama-synthetic"
MB = 10**6
GB = 10**9


def llama_shapes(size_gb: float) -> dict[str, Any]:
    """Llama-3-8B-like widths (hidden 4096, MLP 11008, 32 heads, 8 KV heads, 32k vocab), with as many
    layers as make about `size_gb` GB in F16."""
    hidden, mlp, heads, kv_heads, vocab = 4096, 11008, 32, 8, 32000
    kv = hidden // heads * kv_heads
    per_layer = 2 * (2 * hidden * hidden + 2 * kv * hidden + 3 * hidden * mlp + 2 * hidden)
    fixed = 2 * (2 * vocab * hidden + hidden)
    layers = max(1, round((size_gb * GB - fixed) / per_layer))
    return {"hidden_size": hidden, "intermediate_size": mlp, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": vocab}


# -- (a) the baseline, run as its own process -------------------------------------------------------


def baseline_child(hub_url: str, registry: str, workdir: Path) -> dict[str, Any]:
    """snapshot_download, then oras push of the downloaded files; runs in the child process."""
    from huggingface_hub import snapshot_download
    from oras.client import OrasClient

    started = time.monotonic()
    local = Path(snapshot_download(REPO_ID, endpoint=hub_url, local_dir=workdir / "model",
                                   cache_dir=workdir / "cache"))
    downloaded = time.monotonic()
    files = sorted(str(p) for p in local.rglob("*")
                   if p.is_file() and ".cache" not in p.relative_to(local).parts)
    OrasClient(hostname=registry, insecure=True).push(
        target=f"{registry}/{BASELINE_REPOSITORY}:v1", files=files, disable_path_validation=True, quiet=True)
    pushed = time.monotonic()
    return {"download_s": downloaded - started, "push_s": pushed - downloaded, "files": len(files),
            "bytes": sum(os.path.getsize(f) for f in files),
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def run_baseline(hub: HubServer, registry: OciRegistry, workdir: Path) -> dict[str, Any]:
    home = workdir / "hf_home"
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env.update({"HF_HOME": str(home), "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    argv = [sys.executable, "-m", "bench.model_import", "--baseline-child", hub.url, registry.address, str(workdir)]
    done = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the baseline failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- (b), (c) servingops ----------------------------------------------------------------------------


def wait_done(stack: Stack, name: str, timeout: float, interval: float = 0.1) -> dict[str, Any]:
    """The Model once Ready (or Failed: then raise), polled every `interval` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        obj = stack.get("models", name)
        phase = ((obj or {}).get("status") or {}).get("phase")
        if obj is not None and phase == "Ready":
            return obj
        if phase == "Failed":
            raise RuntimeError(f"{name} Failed: {obj and obj.get('status')}")
        time.sleep(interval)
    raise TimeoutError(f"{name} not Ready after {timeout}s; worker log:\n{stack.worker.log_tail(40)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gb", type=float, default=4.0)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--fill", choices=("random", "sparse"), default="random")
    parser.add_argument("--baseline-child", nargs=3, metavar=("HUB_URL", "REGISTRY", "WORKDIR"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_child:
        hub_url, registry_address, workdir = args.baseline_child
        print(json.dumps(baseline_child(hub_url, registry_address, Path(workdir))), flush=True)
        return

    goals = Goals("bench.model_import")
    work = Path(tempfile.mkdtemp(prefix="bench-model-import-"))
    logs = work / "logs"
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        hub = HubServer(work / "hub").start()
        cleanup.callback(hub.stop)
        temporal_server = TemporalDevServer(work / "temporal", logs, headless=True).start()
        cleanup.callback(temporal_server.stop)
        cluster = LocalKubeCluster(work / "kube", logs, install_upstream_crds=False).start()
        cleanup.callback(cluster.stop)
        cluster.apply_crds(sorted((REPO_ROOT / "deploy" / "crds").glob("ai.deckhouse.io_*.yaml")))
        registry = OciRegistry(work / "registry", logs).start()
        cleanup.callback(registry.stop)
        api = cluster.api_client()
        cleanup.callback(api.close)
        temporal = asyncio.run(connect(TemporalSettings(address=temporal_server.address)))
        task_queue = f"bench-{uuid.uuid4().hex[:6]}"
        namespace = "bench"
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        identities = admin_identities(cluster, api)
        launcher = BridgeLauncher(identities, temporal_server.address, logs)
        cleanup.callback(launcher.stop_all)
        bridge = launcher.start(task_queue=task_queue, kinds="Model,ClusterModel")
        workers: list[ManagedProcess] = []

        def stop_workers() -> None:
            for w in workers:
                w.stop()

        cleanup.callback(stop_workers)

        began = time.monotonic()
        repo = model_repos.make_safetensors_repo(hub.root, REPO_ID, num_shards=args.shards, fill=args.fill,
                                                 **llama_shapes(args.size_gb))
        os.sync()
        files = {name: repo.snapshot / name for name in repo.files}
        weights = {n: p.stat().st_size for n, p in files.items() if n.endswith(".safetensors")}
        print(f"model: {REPO_ID}, {len(weights)} shards, {sum(p.stat().st_size for p in files.values())} bytes "
              f"in {len(files)} files ({args.fill} tensor data), generated in {time.monotonic() - began:.1f} s",
              flush=True)

        # (a) baseline
        baseline_dir = work / "baseline"
        base = run_baseline(hub, registry, baseline_dir)
        shutil.rmtree(baseline_dir, ignore_errors=True)
        os.sync()
        baseline_s = base["download_s"] + base["push_s"]
        print(f"baseline: snapshot_download {base['download_s']:.1f} s + oras push {base['push_s']:.1f} s = "
              f"{baseline_s:.1f} s for {base['bytes']} bytes in {base['files']} files "
              f"(peak RSS of that process {base['peak_rss'] / MB:.0f} MB)", flush=True)

        # (b) servingops, clean run
        worker = start_worker(cluster, temporal_server, registry, hub, task_queue, work / "spool-b", logs,
                              host_id="bench-b", identities=identities)
        workers.append(worker)
        stack = Stack(cluster, api, registry, hub, temporal, worker, bridge, task_queue, namespace)
        url = f"https://huggingface.co/{REPO_ID}"
        started = time.monotonic()
        stack.apply(stack.model("clean", {"url": url}))
        ready = wait_done(stack, "clean", timeout=3600)
        servingops_s = time.monotonic() - started
        assert worker.pid is not None
        worker_peak = peak_rss_bytes(worker.pid)
        state = asyncio.run(stack.workflow_state(ready))
        model_bytes = sum(f["size"] for f in state["files"])
        assert all(f["uploaded_here"] for f in state["files"]), "the registry had files already"
        assert ready["status"]["artifact"]["sizeBytes"] >= model_bytes
        worker.stop()
        os.sync()
        print(f"servingops: Model applied -> Ready in {servingops_s:.1f} s for {model_bytes} bytes in "
              f"{len(state['files'])} files", flush=True)

        # (c) killed half way, into a fresh registry so that nothing is skipped
        registry_c = OciRegistry(work / "registry-c", logs).start()
        cleanup.callback(registry_c.stop)
        assert registry_c.process is not None and registry_c.process.pid is not None
        spool_c = work / "spool-c"
        worker = start_worker(cluster, temporal_server, registry_c, hub, task_queue, spool_c, logs,
                              host_id="bench-c", identities=identities)
        workers.append(worker)
        stack = Stack(cluster, api, registry_c, hub, temporal, worker, bridge, task_queue, namespace)
        mark = hub.mark()
        registry_before = process_written_bytes(registry_c.process.pid)
        started = time.monotonic()
        stack.apply(stack.model("killed", {"url": url}))
        created = stack.get("models", "killed")
        assert created is not None

        def finished() -> bool:
            obj = stack.get("models", "killed")
            return bool(obj and (obj.get("status") or {}).get("phase") in ("Ready", "Failed"))

        kill = kill_mid_import(worker, spool_c / created["metadata"]["uid"], weights, finished, at=KILL_AT)
        killed_at = time.monotonic() - started
        worker = start_worker(cluster, temporal_server, registry_c, hub, task_queue, spool_c, logs,
                              host_id="bench-c", identities=identities)
        workers.append(worker)
        stack.worker = worker
        done = wait_done(stack, "killed", timeout=3600)
        killed_s = time.monotonic() - started
        state = asyncio.run(stack.workflow_state(done))
        report = TransferReport(
            model_bytes=sum(f["size"] for f in state["files"]),
            hub_served=hub_served_bytes(hub, REPO_ID, mark),
            registry_written=process_written_bytes(registry_c.process.pid) - registry_before,
            pushed_by_final_attempts=sum(f["pushed_bytes"] for f in state["files"]),
        )
        print(f"kill: SIGKILL {killed_at:.1f} s in, with {kill.fraction:.0%} of the weights in the spool "
              f"(mid-download: {kill.partial}); restarted with the same host id and spool; Ready "
              f"{killed_s:.1f} s after the apply (the heartbeat timeout, 60 s, is most of the difference)",
              flush=True)

        print("\n== results ==")
        print(f"wall time: servingops {servingops_s:.1f} s, baseline {baseline_s:.1f} s; ratio servingops / baseline "
              f"= {servingops_s / baseline_s:.2f} (goal <= 0.6)")
        print(f"worker peak RSS (VmHWM): {worker_peak / MB:.0f} MB (goal < 300 MB)")
        print(f"after a kill at {kill.fraction:.0%} of the spool:")
        for line in report.lines():
            print(f"  {line}")
        print(f"re-downloaded from the Hub: {report.redownloaded / report.model_bytes:.2%} of the model (goal < 5%); "
              f"download plus registry-side re-upload: "
              f"{(report.redownloaded + report.reuploaded) / report.model_bytes:.2%}", flush=True)
        goals.check("wall time servingops / baseline", servingops_s / baseline_s, "<=", 0.6)
        goals.check("worker peak RSS", worker_peak / MB, "<", 300, "MB")
        goals.check("re-downloaded from the Hub after a kill", 100 * report.redownloaded / report.model_bytes, "<", 5,
                    "% of the model")
    goals.finish()


if __name__ == "__main__":
    main()
