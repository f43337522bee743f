"""The results summary (rendering/benchmark_results.py) read from genai-bench 0.0.5's own output: the two
iteration files under tests/fixtures/genai_bench/ were written by genai-bench 0.0.5 (PyPI) running the
renderer's command line against devstack.pod_server on loopback (2026-12-07; individual requests dropped)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servingops.rendering.benchmark_results import ResultsError, is_iteration_file, summarize

pytestmark = pytest.mark.unit

HERE = Path(__file__).parent / "fixtures" / "genai_bench"


def test_each_iteration_gives_requests_errors_ttft_and_output_throughput() -> None:
    files = [(p.name, json.loads(p.read_text())) for p in sorted(HERE.glob("*.json")) if is_iteration_file(p.name)]
    assert len(files) == 2
    one, two = summarize(reversed(files))
    assert (one.scenario, one.concurrency, two.concurrency) == ("D(10,10)", 1, 2)
    assert two.requests == 38 and two.errors == 0
    assert two.ttft_p50_ms == pytest.approx(26.304, abs=0.001) and two.ttft_p99_ms == pytest.approx(60.695, abs=0.001)
    assert two.output_tokens_per_second == pytest.approx(370.475, abs=0.001)
    assert one.requests > 0 and one.ttft_p50_ms is not None and one.ttft_p99_ms is not None
    assert one.ttft_p50_ms <= one.ttft_p99_ms


def test_a_file_that_is_not_an_iteration_is_named() -> None:
    assert not is_iteration_file("experiment_metadata.json") and not is_iteration_file("smoke_summary.xlsx")
    with pytest.raises(ResultsError, match=r"experiment_metadata\.json"):
        summarize([("experiment_metadata.json", {"task": "text-to-text"})])


def test_an_archive_as_oras_packs_the_folder_is_summarized() -> None:
    import io
    import tarfile

    from servingops.rendering.benchmark_results import summarize_archive

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(HERE.glob("*.json")):
            archive.add(path, arcname=f"run-g1/{path.name}")
        extra = b"{}"
        info = tarfile.TarInfo("run-g1/experiment_metadata.json")
        info.size = len(extra)
        archive.addfile(info, io.BytesIO(extra))
    summary = summarize_archive(buffer.getvalue())
    assert [(s.concurrency, s.requests) for s in summary] == [(1, summary[0].requests), (2, 38)]
    with pytest.raises(ResultsError, match="not a tar archive"):
        summarize_archive(b"plain bytes")
