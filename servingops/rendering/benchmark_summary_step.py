"""The summary of a pvc:// run, made inside its pod and read back from the pod's status (pure: no I/O here).

The worker does not mount claims, so the pod's last container, `summarize` (the benchmark image's own python,
SUMMARIZE_SCRIPT), reads genai-bench's iteration files in the claim and writes the run's summary to its
termination message (terminationMessagePath): the kubelet keeps that file's first MESSAGE_LIMIT bytes in the
container's terminated state, where `benchmark.job_state` reads it when the Job has completed
(`read_summary_message`). The same per scenario and concurrency figures as an oci:// run's summary
(rendering/benchmark_results.py, which the script follows field by field; tests/test_benchmark_summary_step.py
runs both on the same files), written compact: one array per iteration in SUMMARY_COLUMNS order, iterations
beyond the limit dropped from the end and counted in `total`.

The step never fails the run: what it could not read is said in the message (`problem`) and it exits 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from servingops.rendering.benchmark_results import IterationSummary

MESSAGE_LIMIT = 4096
"""The bytes of a termination message a kubelet keeps per container."""
TERMINATION_LOG = "/dev/termination-log"
"""The summarize container's terminationMessagePath (the Kubernetes default, said explicitly)."""
MARK = "benchSummary"
"""The key that tells a summary message from anything else a container may leave there (a log tail)."""
SUMMARY_COLUMNS = ("scenario", "concurrency", "requests", "errors", "ttft_p50_ms", "ttft_p99_ms",
                   "output_tokens_per_second")
"""The order of each row's values (IterationSummary's fields)."""

SUMMARIZE_SCRIPT = """\
import json, pathlib, sys
# genai-bench's iteration files -> one row per iteration (servingops/rendering/benchmark_results.py's reading),
# written compact to the termination message the kubelet keeps (4096 bytes): rows beyond it dropped, counted.
folder, out, limit = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3])
def ms(value, unit):
    return round(float(value) * (1000.0 if unit == "s" else 1.0), 3) if isinstance(value, (int, float)) else None
rows, problem = [], ""
try:
    for path in sorted(folder.rglob("*.json")):
        name = path.name
        if not ("_num_concurrency_" in name or "_batch_size_" in name) or path.stat().st_size > 64 * 1024 * 1024:
            continue
        body = json.loads(path.read_bytes())
        metrics = body.get("aggregated_metrics") if isinstance(body, dict) else None
        if not isinstance(metrics, dict) or "scenario" not in metrics:
            raise ValueError(name + ": no aggregated_metrics with a scenario (not a genai-bench iteration result)")
        unit = str(body.get("_time_unit") or "s")
        ttft = (metrics.get("stats") or {}).get("ttft") or {}
        rate = metrics.get("mean_output_throughput_tokens_per_s")
        rows.append([str(metrics["scenario"]),
                     int(metrics.get("num_concurrency") or metrics.get("batch_size") or 0),
                     int(metrics.get("num_requests") or 0), int(metrics.get("num_error_requests") or 0),
                     ms(ttft.get("p50"), unit), ms(ttft.get("p99"), unit),
                     round(float(rate), 3) if isinstance(rate, (int, float)) else None])
    if not rows:
        problem = "the results hold no genai-bench iteration file"
except Exception as exc:
    problem = (type(exc).__name__ + ": " + str(exc))[:500]
rows.sort(key=lambda row: (row[0], row[1]))
total = len(rows)
while True:
    body = {"benchSummary": 1, "problem": problem} if problem else {"benchSummary": 1, "total": total, "rows": rows}
    text = json.dumps(body, separators=(",", ":"))
    if len(text.encode()) <= limit or not rows:
        break
    rows.pop()
out.write_text(text)
"""
"""argv: the result folder, the termination message path, MESSAGE_LIMIT."""


@dataclass(frozen=True)
class SummaryReading:
    summary: list[IterationSummary] | None
    problem: str
    """Why there is no summary, or which part is missing ("" when whole)."""


def read_summary_message(message: str | None) -> SummaryReading:
    """The summarize container's termination message as the run's summary."""
    if not message:
        return SummaryReading(None, "the summarize step left no termination message")
    try:
        body = json.loads(message)
    except ValueError:
        body = None
    if not isinstance(body, dict) or body.get(MARK) != 1:
        return SummaryReading(None, f"the summarize step's termination message is no summary: {message[-300:]}")
    if body.get("problem"):
        return SummaryReading(None, f"the summarize step: {body['problem']}")
    try:
        rows = [IterationSummary.model_validate(dict(zip(SUMMARY_COLUMNS, row, strict=True)))
                for row in body.get("rows") or []]
    except (TypeError, ValueError) as exc:
        return SummaryReading(None, f"the summarize step's rows do not read: {exc}")
    total = body.get("total")
    if isinstance(total, int) and total > len(rows):
        return SummaryReading(rows, f"{len(rows)} of {total} iterations fit the pod's termination message "
                                    f"({MESSAGE_LIMIT} bytes); every iteration's file is in the claim")
    return SummaryReading(rows, "")


__all__ = ["MARK", "MESSAGE_LIMIT", "SUMMARIZE_SCRIPT", "SUMMARY_COLUMNS", "TERMINATION_LOG", "SummaryReading",
           "read_summary_message"]
