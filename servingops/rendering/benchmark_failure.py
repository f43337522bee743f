"""A failed benchmark Job in words, for the BenchmarkJob's failureMessage (pure: the Job's Failed condition and
its pod's container terminations in, the sentence out).

The Job's reason and message come first (BackoffLimitExceeded, DeadlineExceeded, PodFailurePolicy: the last
names the container and exit code, rendering/benchmark_job.py POD_FAILURE_POLICY). Then every container that
ended non-zero, as the pod's status says: its exit code, the runtime's reason (Error, OOMKilled, ...), the
signal an exit above 128 stands for, and the last line of its termination message (a log tail: what the
container said last). When the pod is gone before it is read, the exit the Job's PodFailurePolicy message
names is said the same way, without what only the pod knew.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

LAST_LINE_CHARS = 200
"""How much of a container's last words go into the message."""
_POLICY_EXIT = re.compile(r"Container (?P<name>\S+) for pod \S+ failed with exit code (?P<code>\d+)")


@dataclass(frozen=True)
class ContainerExit:
    name: str
    exit_code: int
    reason: str = ""
    """The runtime's reason (Error, OOMKilled, ContainerCannotRun, ...); "" when unknown."""
    message: str = ""
    """The container's termination message (with FallbackToLogsOnError: its log's end)."""


def signal_name(exit_code: int) -> str:
    """SIGTERM for 143, SIGKILL for 137 (a runtime reports death by signal n as 128 + n); "" otherwise."""
    if exit_code <= 128:
        return ""
    try:
        return signal.Signals(exit_code - 128).name
    except ValueError:
        return f"signal {exit_code - 128}"


def _last_line(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1][-LAST_LINE_CHARS:] if lines else ""


def exit_words(ended: ContainerExit) -> str:
    """`container genai-bench exited 143 (Error, SIGTERM): <its last line>`."""
    notes = ", ".join(n for n in (ended.reason, signal_name(ended.exit_code)) if n)
    words = f"container {ended.name} exited {ended.exit_code}" + (f" ({notes})" if notes else "")
    last = _last_line(ended.message)
    return f"{words}: {last}" if last else words


def failure_message(job: str, reason: str, message: str, exits: list[ContainerExit]) -> str:
    """The Job's failure: its condition's reason and message, then each container's non-zero exit (from the
    pod; from the Job's PodFailurePolicy message when no pod said it)."""
    head = f"Job {job} failed: {reason or ''} {message or ''}".strip()
    ended = [e for e in exits if e.exit_code != 0]
    if not ended:
        found = _POLICY_EXIT.search(message or "")
        if found is not None:
            ended = [ContainerExit(found["name"], int(found["code"]))]
    return "; ".join([head, *(exit_words(e) for e in ended)])


__all__ = ["ContainerExit", "exit_words", "failure_message", "signal_name"]
