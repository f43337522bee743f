"""A pvc:// run's summary, made in its pod (rendering/benchmark_summary_step.py SUMMARIZE_SCRIPT, run here by
this interpreter as the benchmark image's python runs it) and read back from the termination message
(`read_summary_message`): the same figures as the oci:// summary (rendering/benchmark_results.py) of the same
genai-bench 0.0.5 files, within the kubelet's 4096 bytes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servingops.rendering.benchmark_results import is_iteration_file, summarize
from servingops.rendering.benchmark_summary_step import (
    MESSAGE_LIMIT,
    SUMMARIZE_SCRIPT,
    read_summary_message,
)

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures" / "genai_bench"


def run_step(folder: Path, out: Path, limit: int = MESSAGE_LIMIT) -> str:
    done = subprocess.run([sys.executable, "-c", SUMMARIZE_SCRIPT, str(folder), str(out), str(limit)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return out.read_text()


def test_the_step_gives_the_same_summary_as_the_oci_reading_of_the_same_files(tmp_path: Path) -> None:
    folder = tmp_path / "run-g1"
    shutil.copytree(FIXTURES, folder)
    (folder / "experiment_metadata.json").write_text(json.dumps({"cmd": "genai-bench benchmark ..."}))
    message = run_step(folder, tmp_path / "termination-log")
    reading = read_summary_message(message)
    files = [(p.name, json.loads(p.read_text())) for p in sorted(FIXTURES.glob("*.json")) if is_iteration_file(p.name)]
    assert reading.problem == ""
    assert reading.summary == summarize(files)
    assert reading.summary is not None and reading.summary[1].requests == 38
    assert len(message.encode()) < 300, message  # two iterations: compact


def test_rows_beyond_the_kubelet_s_limit_are_dropped_and_counted(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    body = json.loads(next(FIXTURES.glob("*_num_concurrency_2_*.json")).read_text())
    for level in range(1, 121):
        body["aggregated_metrics"]["num_concurrency"] = level
        (folder / f"D10_10_text-to-text_num_concurrency_{level}_time_1s.json").write_text(json.dumps(body))
    message = run_step(folder, tmp_path / "termination-log")
    assert len(message.encode()) <= MESSAGE_LIMIT
    reading = read_summary_message(message)
    assert reading.summary is not None and 40 < len(reading.summary) < 120
    assert [s.concurrency for s in reading.summary] == list(range(1, len(reading.summary) + 1))
    assert f"{len(reading.summary)} of 120 iterations fit" in reading.problem


def test_a_folder_without_iterations_or_with_a_foreign_file_says_so_and_the_step_still_succeeds(
        tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert read_summary_message(run_step(empty, tmp_path / "a")).problem == (
        "the summarize step: the results hold no genai-bench iteration file")
    (empty / "x_num_concurrency_1_time_1s.json").write_text("{}")
    reading = read_summary_message(run_step(empty, tmp_path / "b"))
    assert reading.summary is None and "no aggregated_metrics with a scenario" in reading.problem


@pytest.mark.parametrize(("message", "said"), [
    (None, "left no termination message"),
    ("", "left no termination message"),
    ("Traceback ...\nOSError: disk full", "is no summary: Traceback"),
    ('{"benchSummary":1,"rows":[["D(1,1)",1]]}', "rows do not read"),
])
def test_a_message_that_is_no_summary_is_named(message: str | None, said: str) -> None:
    reading = read_summary_message(message)
    assert reading.summary is None and said in reading.problem
