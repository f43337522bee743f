"""Catalog refresh benchmark (issue #15): a 10,000-entry Hugging Face index, refreshed through the product's
own activity (`catalog.index_huggingface` in an `ActivityEnvironment`) with the real `huggingface_hub` client
against the Hub stand-in, in one run.

    .venv/bin/python -m bench.catalog_refresh [--entries 10000] [--repeat 3]

Setup (not timed): `--entries` model repos under one organisation are written straight into a Hub
stand-in root (each repo's `repo.json` and one tiny `config.json`, the layout `devstack.model_repos`
writes), and the stand-in (`python -m devstack.hub_server`) is started as its own process, so this process
holds only the client side: its peak memory is the refresh's.

(a) full refresh: no previous state (the first refresh of a source, or one after a spec change). Wall time
    and client CPU time (median of `--repeat`), peak memory: tracemalloc's peak of the refresh (a separate
    run, tracemalloc slows Python down) and the growth of this process's peak RSS (VmHWM) over it.
(b) no-change refresh right after, given the previous refresh's result (`IndexHuggingFaceInput.previous`:
    the incremental refresh, one organisation count and one short newest-first page): wall and CPU time, peak
    memory; its document digest must equal (a)'s: the workflow then stores nothing and writes no status
    (`CatalogSourceWorkflow` compares document digests; `catalog.store_index` runs only when they differ).
(c) a refresh after one repo got a new commit (incremental): its digest must differ, the index must hold the
    new sha and equal a full refresh's.
(d) a refresh after one repo was deleted (the count disagrees: a full listing): the entry must be gone and
    the index equal a full refresh's.
(e) the baseline of (b): the same no-change refresh without the previous result (a full re-listing).

Also printed: what the stand-in costs for (b)'s two requests with the smallest answers, a floor under any
refresh here whatever the client does. The stand-in answers listings from an index it rebuilds only when a
writer announces a change (`bump_generation`, as `generate` and `model_repos` do), as the Hub answers from
its database; each listing still filters and sorts all 10,000 entries. (a) makes eleven requests.

The ratio (b)/(a) is the issue's goal: a no-change refresh costs < 10% of a full one. Exits 1 when a goal is
missed (bench/goals.py).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from huggingface_hub import HfApi
from temporalio.testing import ActivityEnvironment

from bench.goals import Goals
from devstack import model_repos
from devstack.hub_server import COMMITS_DIR, REPO_META, bump_generation, repo_dir
from devstack.kube import REPO_ROOT
from servingops.activities.catalog.huggingface_index import CatalogIndexActivities
from servingops.activities.catalog.types import IndexHuggingFaceInput, IndexHuggingFaceResult
from servingops.api_models.deckhouse.catalog_source import CatalogPolicy

ORG = "bench-catalog"
SOURCE = "bench-hub"
MB = 2**20
BASE_DATE = datetime(2025, 1, 1, tzinfo=UTC)
T = TypeVar("T")
CONFIG = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}).encode()


# -- setup (not timed) -------------------------------------------------------------------------------


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def generate(root: Path, entries: int) -> list[str]:
    """`entries` repos `<ORG>/model-NNNNN`, each one commit of one small config.json, written in the layout
    `model_repos.register_repo` writes (repo.json + commits/<sha>/...) without its per-repo hashing cost."""
    config_oid = _git_blob_sha1(CONFIG)
    ids = []
    for i in range(entries):
        repo_id = f"{ORG}/model-{i:05d}"
        sha = hashlib.sha1(repo_id.encode()).hexdigest()
        date = (BASE_DATE + timedelta(seconds=i)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        base = repo_dir(root, repo_id)
        (base / COMMITS_DIR / sha).mkdir(parents=True)
        (base / COMMITS_DIR / sha / "config.json").write_bytes(CONFIG)
        meta = {
            "id": repo_id, "private": False, "gated": False, "tags": ["bench", f"shard-{i % 10}"],
            "created_at": date, "tokens": {}, "branches": {"main": sha},
            "commits": {sha: {"parents": [], "title": "initial commit", "message": "", "author": "bench",
                              "date": date, "files": {"config.json": {"oid": config_oid, "size": len(CONFIG)}},
                              "safetensors": None, "gguf": None}},
        }  # fmt: skip
        (base / REPO_META).write_text(json.dumps(meta))
        ids.append(repo_id)
    bump_generation(root)
    return ids


@contextlib.contextmanager
def hub_process(root: Path, logs: Path) -> Iterator[str]:
    """The Hub stand-in as its own process (its memory is not the refresh's); yields its URL."""
    log = (logs / "hub.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "devstack.hub_server", "--root", str(root)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=log, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("HF_ENDPOINT="):
            raise RuntimeError(f"the Hub stand-in did not start: {line!r}, see {logs / 'hub.log'}")
        yield line.split("=", 1)[1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


# -- measuring ---------------------------------------------------------------------------------------


def vm_hwm() -> int:
    """This process's peak RSS in bytes (VmHWM), reset by `reset_hwm` where the kernel allows it."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def vm_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (`/proc/self/clear_refs` 5): True when it worked."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class Refresher:
    def __init__(self, endpoint: str, entries: int) -> None:
        self.acts = CatalogIndexActivities(hf_endpoint=endpoint)
        self.policy = CatalogPolicy(allowed_organizations=[ORG], max_indexed_entries=entries, refresh_budget="1h")
        self.incremental = "previous" in IndexHuggingFaceInput.model_fields

    def __call__(self, previous: IndexHuggingFaceResult | None) -> IndexHuggingFaceResult:
        fields: dict[str, Any] = {"source": SOURCE, "policy": self.policy}
        if previous is not None and self.incremental:
            fields["previous"] = previous.progress
        result: IndexHuggingFaceResult = ActivityEnvironment().run(
            self.acts.index_huggingface, IndexHuggingFaceInput(**fields)
        )
        if not result.complete or result.digest is None:
            raise RuntimeError(f"the refresh did not complete: {result.message}")
        return result


def timed_any(run: Callable[[], T], repeat: int) -> tuple[float, float, T]:
    """Median wall and CPU seconds of `repeat` runs, and the last result."""
    walls, cpus = [], []
    result = None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        result = run()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    assert result is not None
    return statistics.median(walls), statistics.median(cpus), result


def timed(run: Callable[[], IndexHuggingFaceResult], repeat: int) -> tuple[float, float, IndexHuggingFaceResult]:
    return timed_any(run, repeat)


def peak_memory(run: Callable[[], IndexHuggingFaceResult]) -> tuple[int, int]:
    """(tracemalloc peak of `run`, growth of VmHWM over it): two separate runs."""
    reset = reset_hwm()
    before = vm_rss() if reset else vm_hwm()
    run()
    rss_growth = vm_hwm() - before
    tracemalloc.start()
    try:
        run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, rss_growth


def entries_of(result: IndexHuggingFaceResult) -> dict[str, str]:
    assert result.progress is not None
    return {e.name: e.revision for e in result.progress.unpack().entries.values()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

    goals = Goals("bench.catalog_refresh")
    work = Path(tempfile.mkdtemp(prefix="bench-catalog-refresh-"))
    root, logs = work / "hub", work / "logs"
    logs.mkdir(parents=True)
    with contextlib.ExitStack() as cleanup:
        if not args.keep:
            cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        began = time.monotonic()
        ids = generate(root, args.entries)
        print(
            f"setup: {len(ids)} repos under {ORG}/ written in {time.monotonic() - began:.1f} s (not timed)", flush=True
        )
        endpoint = cleanup.enter_context(hub_process(root, logs))
        refresh = Refresher(endpoint, args.entries)
        print(
            f"Hub stand-in {endpoint} (its own process); previous-state refresh "
            f"{'supported' if refresh.incremental else 'NOT supported'} by IndexHuggingFaceInput",
            flush=True,
        )
        refresh(None)  # warm-up: imports, the stand-in's caches, connections

        # (a) full refresh
        full_s, full_cpu, full = timed(lambda: refresh(None), args.repeat)
        full_peak, full_rss = peak_memory(lambda: refresh(None))
        assert full.entry_count == args.entries, full.message
        print(
            f"(a) full refresh: {full.entry_count} entries, {full_s:.3f} s wall, {full_cpu:.3f} s CPU "
            f"(median of {args.repeat}); peak memory: tracemalloc {full_peak / MB:.1f} MiB, "
            f"VmHWM growth {full_rss / MB:.1f} MiB; document {full.digest}",
            flush=True,
        )
        # A long scan's heartbeat carries its progress with the body inline (a retried attempt resumes from it).
        assert full.progress is not None
        heartbeat = len(json.dumps(full.progress.model_dump(mode="json")))
        print(f"    its progress with the body inline (a heartbeat's size): {heartbeat / MB:.2f} MiB", flush=True)

        # (b) no-change refresh given (a)'s result (when the activity's input can carry it)
        same_s, same_cpu, same = timed(lambda: refresh(full), args.repeat)
        same_peak, same_rss = peak_memory(lambda: refresh(full))
        how = "given (a)'s result" if refresh.incremental else "(no previous-state input: a full re-listing)"
        print(
            f"(b) no-change refresh {how}: {same_s:.3f} s wall, {same_cpu:.3f} s CPU; peak memory: tracemalloc "
            f"{same_peak / MB:.1f} MiB, VmHWM growth {same_rss / MB:.1f} MiB; same digest as (a): "
            f"{same.digest == full.digest}",
            flush=True,
        )
        api = HfApi(endpoint=endpoint, token=False)

        def bare_requests() -> bool:
            # The two requests of (b), with the smallest answers: what the stand-in costs per request.
            api.get_organization_overview(ORG)
            return bool(list(api.list_models(author=ORG, sort="last_modified", limit=1, expand=["lastModified"])))

        request_s, _, _ = timed_any(bare_requests, max(3, args.repeat))
        print(
            f"the stand-in's cost of (b)'s two requests, bare (an overview, a 1-model listing page): "
            f"{request_s:.3f} s wall",
            flush=True,
        )

        if refresh.incremental:
            again_s, again_cpu, again = timed(lambda: refresh(None), args.repeat)
            print(
                f"(e) no-change refresh without the previous result (full re-listing): {again_s:.3f} s wall, "
                f"{again_cpu:.3f} s CPU; same digest: {again.digest == full.digest}",
                flush=True,
            )

        # (c) one repo changed: a new commit
        changed = ids[len(ids) // 2]
        files = work / "update"
        files.mkdir()
        (files / "config.json").write_bytes(CONFIG.replace(b"llama", b"llama2"))
        new_sha = model_repos.register_repo(root, changed, files, date=datetime.now(UTC), title="update")
        changed_s, _, after_change = timed(lambda: refresh(same), 1)
        print(
            f"(c) after a new commit to {changed}: {changed_s:.3f} s wall; digest differs: "
            f"{after_change.digest != full.digest}; entry at the new sha: "
            f"{entries_of(after_change).get(changed) == new_sha}",
            flush=True,
        )
        full_after_change = refresh(None)

        # (d) one repo deleted
        deleted = ids[len(ids) // 3]
        model_repos.delete_repo(root, deleted)
        deleted_s, _, after_delete = timed(lambda: refresh(after_change), 1)
        print(
            f"(d) after deleting {deleted}: {deleted_s:.3f} s wall; digest differs: "
            f"{after_delete.digest != after_change.digest}; entry gone: {deleted not in entries_of(after_delete)}; "
            f"{after_delete.entry_count} entries",
            flush=True,
        )
        full_after_delete = refresh(None)

        ratio = same_s / full_s
        print("\n== results ==")
        print(
            f"full refresh of {args.entries} entries: {full_s:.3f} s wall ({full_cpu:.3f} s CPU in this process), "
            f"peak {full_peak / MB:.1f} MiB (tracemalloc), VmHWM +{full_rss / MB:.1f} MiB"
        )
        print(
            f"no-change refresh: {same_s:.3f} s wall ({same_cpu:.3f} s CPU); ratio no-change / full = {ratio:.3f} "
            f"(goal < 0.10); CPU ratio {same_cpu / full_cpu:.3f}; the stand-in's floor (its two requests, bare) "
            f"{request_s:.3f} s is {request_s / full_s:.3f} of the full refresh"
        )
        goals.check("no-change refresh / full refresh (wall)", ratio, "<", 0.10)
        goals.check(
            "no-change refresh: same document digest (1 = yes, nothing stored)",
            float(same.digest == full.digest),
            ">=",
            1,
        )
        goals.check(
            "changed repo: new digest, new sha, equal to a full refresh (1 = yes)",
            float(
                after_change.digest != full.digest
                and entries_of(after_change).get(changed) == new_sha
                and after_change.digest == full_after_change.digest
            ),
            ">=",
            1,
        )
        goals.check(
            "deleted repo: entry gone, equal to a full refresh (1 = yes)",
            float(deleted not in entries_of(after_delete) and after_delete.digest == full_after_delete.digest),
            ">=",
            1,
        )
    if args.keep:
        print(f"work directory kept: {work}")
    goals.finish()


if __name__ == "__main__":
    main()
