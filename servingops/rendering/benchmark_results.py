"""The summary of a genai-bench experiment folder that `status.details` carries (pure: the files' JSON in, the
summary out). genai-bench 0.0.5 writes one JSON file per iteration (`<scenario>_<task>_num_concurrency_<n>_
time_<s>s.json`) whose `aggregated_metrics` hold the iteration's counts and statistics (seconds, `_time_unit`
"s"); the summary keeps, per scenario and concurrency: requests, errors, time to first token p50 and p99 (ms),
output tokens per second (the server's, over the iteration)."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class IterationSummary(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True)

    scenario: str
    concurrency: int
    requests: int
    errors: int
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    output_tokens_per_second: float | None = None


class ResultsError(ValueError):
    """A file that is not a genai-bench iteration result (the message names it)."""


def _ms(value: Any, unit: str) -> float | None:
    if not isinstance(value, (int, float)):
        return None
    return round(float(value) * (1000.0 if unit == "s" else 1.0), 3)


def iteration(name: str, body: Any) -> IterationSummary:
    """One iteration file's summary."""
    metrics = body.get("aggregated_metrics") if isinstance(body, dict) else None
    if not isinstance(metrics, dict) or "scenario" not in metrics:
        raise ResultsError(f"{name}: no aggregated_metrics with a scenario (not a genai-bench iteration result)")
    unit = str(body.get("_time_unit") or "s")
    ttft = (metrics.get("stats") or {}).get("ttft") or {}
    throughput = metrics.get("mean_output_throughput_tokens_per_s")
    return IterationSummary(
        scenario=str(metrics["scenario"]),
        concurrency=int(metrics.get("num_concurrency") or metrics.get("batch_size") or 0),
        requests=int(metrics.get("num_requests") or 0), errors=int(metrics.get("num_error_requests") or 0),
        ttft_p50_ms=_ms(ttft.get("p50"), unit), ttft_p99_ms=_ms(ttft.get("p99"), unit),
        output_tokens_per_second=round(float(throughput), 3) if isinstance(throughput, (int, float)) else None)


def summarize(files: Iterable[tuple[str, Any]]) -> list[IterationSummary]:
    """The iterations of an experiment folder, by scenario then concurrency; files other than iteration results
    (experiment_metadata.json, sheets, plots) are the caller's to leave out."""
    return sorted((iteration(name, body) for name, body in files), key=lambda s: (s.scenario, s.concurrency))


def is_iteration_file(name: str) -> bool:
    return name.endswith(".json") and ("_num_concurrency_" in name or "_batch_size_" in name)


MAX_ITERATION_FILE = 64 * 1024 * 1024
"""An iteration file larger than this is not read (genai-bench's hold every request's metrics: a few MB)."""


def summarize_archive(data: bytes) -> list[IterationSummary]:
    """The summary of an experiment folder packed as oras packs a directory (tar, gzip'd): its iteration files,
    wherever they sit in the archive."""
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except tarfile.TarError as exc:
        raise ResultsError(f"the results are not a tar archive: {exc}") from None
    files: list[tuple[str, Any]] = []
    with archive:
        for member in archive.getmembers():
            name = PurePosixPath(member.name).name
            if not member.isfile() or not is_iteration_file(name) or member.size > MAX_ITERATION_FILE:
                continue
            handle = archive.extractfile(member)
            if handle is None:
                continue
            try:
                files.append((name, json.loads(handle.read())))
            except ValueError as exc:
                raise ResultsError(f"{name}: not JSON: {exc}") from None
    if not files:
        raise ResultsError("the results hold no genai-bench iteration file")
    return summarize(files)


__all__ = ["IterationSummary", "ResultsError", "is_iteration_file", "iteration", "summarize",
           "summarize_archive"]
