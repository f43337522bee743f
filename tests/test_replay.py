"""Every stored history (tests/histories/<workflow type>/<scenario>.json) replays against the
workflows the worker registers today. A change to workflow code that would make a running
workflow take a different path than its history records fails here: ship it behind
`workflow.patched(...)` or as a new workflow type (docs/durability.md), never as a plain edit.

No stack is needed: the Replayer runs the workflow code against the recorded events in process.
Histories are recorded by tests/histories/record.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from servingops.workers.registry import workflows

HISTORIES = Path(__file__).parent / "histories"
STORED = sorted(HISTORIES.glob("*/*.json"))
# Histories recorded at commit 1482aaa, before the InferenceService workflow read operator.config
# at run open and nudged RolloutPolicies: they replay only through the patches in that workflow.
BEFORE_PATCHES = {"before-operator-config", "before-refresh-now", "canary-promote"}
# canary-promote was recorded before `remove-consumed-annotations`: its promote is consumed while the
# annotation stays, so it replays only through that patch (annotation-cleanup holds the new branch).


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"{path.parent.name}/{path.stem}", path.read_text())


def test_every_workflow_type_has_stored_histories() -> None:
    registered = {getattr(w, "__temporal_workflow_definition").name for w in workflows()}
    stored = {path.parent.name for path in STORED}
    assert registered <= stored, f"no stored history for {sorted(registered - stored)}"


def test_stored_histories_are_of_registered_types() -> None:
    # A history of a type no worker registers anymore would never be replayed by anything: either
    # the type still runs somewhere (register it) or its histories are obsolete (delete them).
    registered = {getattr(w, "__temporal_workflow_definition").name for w in workflows()}
    assert {path.parent.name for path in STORED} <= registered


@pytest.mark.parametrize("path", STORED, ids=[f"{p.parent.name}/{p.stem}" for p in STORED])
async def test_history_replays(path: Path) -> None:
    history = load(path)
    assert history.events, f"{path} holds no events"
    replayer = Replayer(workflows=list(workflows()), data_converter=pydantic_data_converter)
    # raise_on_replay_failure (the default) raises on nondeterminism and on a failed workflow task.
    await replayer.replay_workflow(history)


def test_patched_histories_are_stored() -> None:
    """The histories that hold the InferenceService workflow's patches in place are kept until
    the patches are deprecated (see docs/durability.md)."""
    names = {path.stem.rsplit("-", 1)[0] if path.stem[-1].isdigit() else path.stem for path in STORED}
    assert BEFORE_PATCHES <= names


@pytest.mark.parametrize("scenario", sorted(BEFORE_PATCHES))
async def test_histories_before_the_patches_need_them(scenario: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without its patches (every `workflow.patched` taking the new branch, as the unpatched code
    did) the InferenceService workflow cannot replay a history recorded before them: the patches
    are what keeps those runs alive."""
    monkeypatch.setattr(workflow, "patched", lambda patch_id: True)
    replayer = Replayer(workflows=list(workflows()), data_converter=pydantic_data_converter)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(load(HISTORIES / "InferenceServiceWorkflow" / f"{scenario}.json"))
