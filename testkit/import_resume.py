"""Measuring an import that is killed and resumed: kill points, bytes written and served, peak memory."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from devstack.hub_server import HubServer
from devstack.model_repos import sha256_file
from devstack.process import ManagedProcess
from servingops.clients.oci.registry_client import ModelRegistry

KILL_AT = 0.55
"""Kill once the spool holds this share of the weights and a shard is mid-download. With four shards
that is a fifth into the third one, while the second one's push is in flight: about half of the
import's transfer work (fetch plus push) is done."""

MiB = 1024 * 1024

# A Llama-shaped model of about 1.3 GB in F16, in four shards of about 330 MB; sparse, so making it
# costs no disk (the worker's spool and the registry still write every byte).
TEST_SHAPES: dict[str, Any] = {
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 12,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
}


def spool_weight_bytes(model_dir: Path, weights: Mapping[str, int]) -> tuple[int, dict[str, int]]:
    """Weight bytes the worker's spool holds for one model (complete files plus partial downloads),
    and the partial downloads by file. Reads only names and sizes, so it races the worker harmlessly:
    a file renamed between the listing and the stat just reads as absent until the next call."""
    complete = 0
    for rel, size in weights.items():
        try:
            if (model_dir / rel).stat().st_size == size:
                complete += size
        except OSError:
            pass
    partial: dict[str, int] = {}
    try:
        for part in model_dir.rglob("*.part"):
            rel = part.relative_to(model_dir).as_posix()
            name = next((w for w in weights if rel.endswith(f"/{w}.part")), None)
            if name is not None:
                partial[name] = part.stat().st_size
    except OSError:
        pass
    return complete + sum(partial.values()), partial


@dataclass(frozen=True)
class KillPoint:
    fetched_bytes: int
    """Weight bytes in the spool an instant before the SIGKILL (a little more had arrived by then)."""
    total_bytes: int
    partial: dict[str, int]
    """Files mid-download at the kill, with the bytes they had."""

    @property
    def fraction(self) -> float:
        return self.fetched_bytes / self.total_bytes


def kill_mid_import(worker: ManagedProcess, model_dir: Path, weights: Mapping[str, int],
                    finished: Callable[[], bool], *, at: float = KILL_AT, timeout: float = 900) -> KillPoint:
    """SIGKILL the worker once the spool holds `at` of the weights with a file mid-download."""
    total = sum(weights.values())
    deadline = time.monotonic() + timeout
    next_check = 0.0
    while True:
        fetched, partial = spool_weight_bytes(model_dir, weights)
        if fetched >= at * total and any(partial.values()):
            worker.kill()
            return KillPoint(fetched, total, {k: v for k, v in partial.items() if v})
        now = time.monotonic()
        if now >= next_check:
            assert worker.alive, f"the worker died by itself:\n{worker.log_tail(40)}"
            assert not finished(), f"the import ended before {at:.0%} could be caught mid-file"
            assert now < deadline, f"the spool never reached {at:.0%} of {total} bytes (has {fetched})"
            next_check = now + 1.0
        time.sleep(0.02)


def process_written_bytes(pid: int) -> int:
    """Bytes the process has passed to write(2)-like calls (its `wchar` in /proc/<pid>/io)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/io has no wchar")


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM")


def hub_served_bytes(hub: HubServer, repo_id: str, since: int = 0) -> int:
    """File bytes the Hub actually sent for a repo's downloads since the mark (cut bodies count what went out)."""
    return sum(r.body_bytes for r in hub.downloads(repo_id, since))  # from the Hub host or its CDN host


def blob_sha256(registry_address: str, repository: str, digest: str) -> tuple[str, int]:
    """sha256 and size of a blob as the registry serves it, streamed."""
    hasher = hashlib.sha256()
    size = 0
    url = f"http://{registry_address}/v2/{repository}/blobs/{digest}"
    with requests.get(url, stream=True, timeout=(10, 300)) as response:
        response.raise_for_status()
        for block in response.iter_content(chunk_size=MiB):
            hasher.update(block)
            size += len(block)
    return hasher.hexdigest(), size


def assert_artifact_matches(registry_address: str, repository: str, manifest_digest: str,
                            files: Mapping[str, Path]) -> dict[str, int]:
    """Pull every layer of the artifact (streamed, hashed) and compare it with the source file of the
    same `org.cncf.model.filepath`; returns the layer sizes by path."""
    with ModelRegistry(registry_address, insecure=True) as reg:
        manifest = reg.fetch_manifest(repository, manifest_digest)
    assert manifest is not None, f"{manifest_digest} is not in {repository}"
    assert manifest.json["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
    sizes: dict[str, int] = {}
    for layer in manifest.json["layers"]:
        path = layer["annotations"]["org.cncf.model.filepath"]
        pulled, size = blob_sha256(registry_address, repository, layer["digest"])
        assert path in files, f"the artifact has a layer {path} the source does not have"
        assert pulled == sha256_file(files[path]), f"{path}: pulled bytes differ from the source file"
        assert size == files[path].stat().st_size
        sizes[path] = size
    return sizes


@dataclass(frozen=True)
class TransferReport:
    model_bytes: int
    """Bytes of the files the model consists of (what one clean import moves each way)."""
    hub_served: int
    registry_written: int
    """What the registry process wrote while the import ran: uploaded blob data (cancelled uploads
    included), its small hash states, the config and manifest, and a few log lines."""
    pushed_by_final_attempts: int
    """Sum of the successful push attempts' sent bytes (workflow state, files[].pushed_bytes)."""

    @property
    def redownloaded(self) -> int:
        return self.hub_served - self.model_bytes

    @property
    def reuploaded(self) -> int:
        return self.registry_written - self.model_bytes

    def lines(self) -> list[str]:
        size = self.model_bytes

        def pct(n: int) -> str:
            return f"{n / size:.2%}"

        return [
            f"Hub served {self.hub_served} bytes for a model of {size} bytes: re-downloaded "
            f"{self.redownloaded} bytes = {pct(self.redownloaded)} of the model",
            f"registry wrote {self.registry_written} bytes for {size} bytes of layers: re-uploaded about "
            f"{self.reuploaded} bytes = {pct(self.reuploaded)} of the model "
            f"(the successful push attempts sent {self.pushed_by_final_attempts} bytes, "
            f"so attempts cut by the kill sent {self.registry_written - self.pushed_by_final_attempts} bytes)",
            f"re-transferred in total {self.redownloaded + self.reuploaded} bytes = "
            f"{pct(self.redownloaded + self.reuploaded)} of the model",
        ]
