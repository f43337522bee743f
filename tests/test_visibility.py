"""Search attributes (kind, namespace, name, phase) reach the real Temporal server's visibility
store, and the state query answers, through the pydantic data converter."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from temporalio.worker import Worker

from devstack.services import TemporalDevServer
from servingops.runtime.temporal import TemporalSettings, connect
from tests.visibility_workflow import PhaseWalk, WalkInput, WalkState

pytestmark = pytest.mark.integration


async def _count(client, query: str) -> int:  # type: ignore[no-untyped-def]
    return len([w async for w in client.list_workflows(query)])


async def _eventually(client, query: str, expected: int, wait_seconds: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + wait_seconds
    while await _count(client, query) != expected:
        assert time.monotonic() < deadline, f"visibility never answered {expected} for {query}"
        await asyncio.sleep(0.3)


async def test_phase_is_searchable_and_queryable(temporal_server: TemporalDevServer) -> None:
    client = await connect(TemporalSettings(address=temporal_server.address))
    queue = f"visibility-{uuid.uuid4().hex[:6]}"
    name = f"m-{uuid.uuid4().hex[:6]}"
    async with Worker(client, task_queue=queue, workflows=[PhaseWalk]):
        handle = await client.start_workflow(
            PhaseWalk.run, WalkInput(kind="Model", namespace="team-a", name=name, phases=["Pending", "Publishing"]),
            id=f"model/team-a/{name}/uid", task_queue=queue,
        )
        base = f'ServingopsKind = "Model" AND ServingopsNamespace = "team-a" AND ServingopsName = "{name}"'
        await _eventually(client, f'{base} AND ServingopsPhase = "Pending"', 1)
        assert await handle.query(PhaseWalk.state) == WalkState(phase="Pending", visited=["Pending"])
        await handle.signal(PhaseWalk.advance)
        await _eventually(client, f'{base} AND ServingopsPhase = "Publishing"', 1)
        assert await _count(client, f'{base} AND ServingopsPhase = "Pending"') == 0
        await handle.signal(PhaseWalk.advance)
        assert (await handle.result()).visited == ["Pending", "Publishing"]
