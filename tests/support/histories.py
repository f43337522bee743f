"""The stored workflow histories (tests/histories/) and how one is loaded; what a run's history says
about its local activities."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle, WorkflowHistory

HISTORIES = Path(__file__).parent.parent / "histories"


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"{path.parent.name}/{path.stem}", path.read_text())


async def local_activity_types(run: WorkflowHandle[Any, Any]) -> list[str]:
    """The activity types of the run's local activities, in the order its history recorded them (each
    one's marker; a patch is a marker too, of another name)."""
    types = []
    async for event in run.fetch_history_events():
        marker = event.marker_recorded_event_attributes
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and marker.marker_name == "core_local_activity":
            types.append(json.loads(marker.details["data"].payloads[0].data)["activity_type"])
    return types
