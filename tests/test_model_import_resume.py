"""A worker killed (SIGKILL) half way through a multi-GB import: a worker restarted with the same host
id and spool finishes it, the artifact is byte-identical, and the Hub is asked for almost nothing twice
(the spool resumes a cut file with a Range request). Reports what was transferred again on both sides.

The helpers here are shared with `bench/model_import.py` (its part (c) is this test at 4 GB).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.process import ManagedProcess
from devstack.product import start_worker
from devstack.services import OciRegistry, TemporalDevServer
from testkit.import_resume import (
    TEST_SHAPES,
    TransferReport,
    assert_artifact_matches,
    hub_served_bytes,
    kill_mid_import,
    process_written_bytes,
)
from testkit.model_import import REPOSITORY, Stack
from tests.fixtures.hub import HubRepos
from tests.support.model_import import stack

pytestmark = pytest.mark.e2e

__all__ = ["stack"]  # the e2e module's fixture, used here as is

REDOWNLOAD_LIMIT = 0.05



# -- helpers shared with bench/model_import.py ---------------------------------------------------------




















def file_table(state: Mapping[str, Any]) -> list[str]:
    rows = [f"  {'file':44} {'size':>11} {'fetched*':>11} {'pushed*':>11}"]
    rows += [f"  {f['path']:44} {f['size']:>11} {f['transferred_bytes']:>11} {f.get('pushed_bytes', 0):>11}"
             for f in state["files"]]
    rows.append("  (* by the attempt that succeeded)")
    return rows


# -- the test ---------------------------------------------------------------------------------------


@pytest.fixture
def restarted(stack: Stack) -> Iterator[list[ManagedProcess]]:
    """Workers this test starts; stopped at its end (the module fixture stops only its own)."""
    workers: list[ManagedProcess] = []
    original = stack.worker
    yield workers
    for worker in workers:
        worker.stop()
    stack.worker = original


def test_worker_killed_half_way_resumes_without_downloading_again(
    stack: Stack, hub_repos: HubRepos, restarted: list[ManagedProcess], kube_cluster: LocalKubeCluster,
    temporal_server: TemporalDevServer, oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path,
    chart_identities: Identities,
) -> None:
    repo = hub_repos.safetensors("resume-llama", num_shards=4, fill="sparse", **TEST_SHAPES)
    files = {name: repo.snapshot / name for name in repo.files}
    weights = {name: path.stat().st_size for name, path in files.items() if name.endswith(".safetensors")}
    assert len(weights) == 4 and sum(weights.values()) > 10**9
    assert oci_registry.process is not None and oci_registry.process.pid is not None
    registry_pid = oci_registry.process.pid
    spool = Path(stack.worker.env["SERVINGOPS_SPOOL_DIR"])
    host_id = stack.worker.env["SERVINGOPS_HOST_ID"]

    mark = hub_server.mark()
    registry_before = process_written_bytes(registry_pid)
    name = "killed-half-way"
    stack.apply(stack.model(name, {"url": f"https://huggingface.co/{repo.repo_id}"}))
    created = stack.get("models", name)
    assert created is not None

    def finished() -> bool:
        obj = stack.get("models", name)
        return bool(obj and (obj.get("status") or {}).get("phase") in ("Ready", "Failed"))

    kill = kill_mid_import(stack.worker, spool / created["metadata"]["uid"], weights, finished)
    print(f"\nkilled the worker with {kill.fetched_bytes} of {kill.total_bytes} weight bytes in the spool "
          f"({kill.fraction:.0%}); mid-download: {kill.partial}")

    restarted.append(start_worker(kube_cluster, temporal_server, oci_registry, hub_server, stack.task_queue, spool,
                                  stack_logs, host_id=host_id, identities=chart_identities))
    stack.worker = restarted[0]
    obj = stack.wait_phase("models", name, ("Ready", "Failed"), timeout=900)
    status = obj["status"]
    assert status["phase"] == "Ready", status
    assert status["progress"] == "100%"
    registry_written = process_written_bytes(registry_pid) - registry_before
    state = asyncio.run(stack.workflow_state(obj))
    assert not [f["path"] for f in state["files"] if f["in_registry"]], "the registry had the model already"

    layers = assert_artifact_matches(oci_registry.address, REPOSITORY, status["artifact"]["digest"], files)
    assert set(weights) <= set(layers) and "config.json" in layers

    report = TransferReport(
        model_bytes=sum(f["size"] for f in state["files"]),
        hub_served=hub_served_bytes(hub_server, repo.repo_id, mark),
        registry_written=registry_written,
        pushed_by_final_attempts=sum(f["pushed_bytes"] for f in state["files"]),
    )
    print("\n".join([*file_table(state), *report.lines()]))

    # The file cut by the kill continued where the spool stood: a Range request from past 0, and the
    # attempt that completed it fetched only the rest.
    for cut, had in kill.partial.items():
        resumed = [r for r in hub_server.downloads(repo.repo_id, mark) if r.file == (repo.repo_id, cut)]
        starts = [int(r.headers.get("range", "bytes=0-").removeprefix("bytes=").split("-")[0] or 0)
                  for r in resumed]
        assert any(start >= had for start in starts), f"{cut} was not resumed by range: {starts}"
        final = next(f for f in state["files"] if f["path"] == cut)
        assert final["transferred_bytes"] <= final["size"] - had
    assert report.hub_served >= report.model_bytes
    assert report.redownloaded < REDOWNLOAD_LIMIT * report.model_bytes, report.lines()
