"""The placement workflow's status write (workflows/placement/record.py) goes through the kind's status
model, InferenceServiceStatus, and writes the body it wrote as a plain dict before: the same JSON, key
for key and in the same order, so the activity inputs stored in the PlacementWorkflow histories are
the bytes the code writes today."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from servingops.api_models.ome.enums import PlacementPhase
from servingops.api_models.ome.placement_status import CandidateAllocationStatus, CandidatePlacement, PlacementStatus
from servingops.workflows.placement.record import placement_patch
from tests.support.histories import HISTORIES

pytestmark = pytest.mark.unit


def _recorded_bodies() -> list[tuple[str, dict[str, Any]]]:
    """Every status body the stored PlacementWorkflow histories wrote through kube.patch_status."""
    bodies = []
    for path in sorted((HISTORIES / "PlacementWorkflow").glob("*.json")):
        for event in json.loads(Path(path).read_text())["events"]:
            scheduled = event.get("activityTaskScheduledEventAttributes")
            if not scheduled or scheduled["activityType"]["name"] != "kube.patch_status":
                continue
            for payload in scheduled["input"]["payloads"]:
                bodies.append((path.stem, json.loads(base64.b64decode(payload["data"]))["status"]))
    return bodies


BODIES = _recorded_bodies()


def _plain_dict(status: PlacementStatus | None) -> dict[str, object]:
    """The body as record.py built it before it went through the model."""
    return {"placement": None if status is None else status.to_api()}


def test_the_histories_hold_placement_writes() -> None:
    assert len(BODIES) >= 40
    assert {stem for stem, _ in BODIES} == {p.stem for p in (HISTORIES / "PlacementWorkflow").glob("*.json")}


@pytest.mark.parametrize("body", [b for _, b in BODIES], ids=[f"{stem}-{i}" for i, (stem, _) in enumerate(BODIES)])
def test_a_recorded_write_is_written_byte_for_byte_through_the_model(body: dict[str, Any]) -> None:
    status = None if body["placement"] is None else PlacementStatus.model_validate(body["placement"])
    assert json.dumps(placement_patch(status)) == json.dumps(_plain_dict(status)) == json.dumps(body)


def test_a_cleared_placement_removes_the_field() -> None:
    assert placement_patch(None) == _plain_dict(None) == {"placement": None}


def test_a_status_built_up_in_place_is_written_as_before() -> None:
    # The workflow starts from PlacementStatus() and assigns fields pass by pass, nested rows included
    # (wire names that camel-casing would not give: clusterUID).
    status = PlacementStatus()
    assert placement_patch(status) == _plain_dict(status) == {"placement": {}}
    status.phase = PlacementPhase.RACING
    status.candidates = [CandidatePlacement(cluster="west")]
    status.candidates[0].allocation = CandidateAllocationStatus(cluster_uid="uid-west", desired_replicas=2)
    assert json.dumps(placement_patch(status)) == json.dumps(_plain_dict(status))
    assert placement_patch(status)["placement"]["candidates"][0]["allocation"]["clusterUID"] == "uid-west"
