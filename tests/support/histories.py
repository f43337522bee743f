"""The stored workflow histories (tests/histories/) and how one is loaded."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import WorkflowHistory

HISTORIES = Path(__file__).parent.parent / "histories"


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"{path.parent.name}/{path.stem}", path.read_text())
