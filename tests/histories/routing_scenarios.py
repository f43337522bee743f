"""Recorded scenarios of TrafficMapWorkflow (tests/histories/record.py runs them), against the in-memory world
of testkit/routing_fakes.py under the real activity names; the placement workflow is played by the recorder of
`publication` signals (tests/support/publication_recorder.py), so the routing workflow's signal to it lands.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from temporalio.worker import Worker

from servingops.api_models.ome.enums import PlacementPhase
from servingops.api_models.ome.placement_status import (
    CandidateAllocationStatus,
    CandidatePlacement,
    PlacementPlanStatus,
    PlacementStatus,
)
from servingops.api_models.ome.routing import RoutingProbeSpec, RoutingSpec
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.rollout_fakes import until
from testkit.routing_fakes import FakeRoutingWorld, HomeAnswer
from tests.support.publication_recorder import TYPE as RECORDER
from tests.support.publication_recorder import PublicationRecorder, stop_recorder

if TYPE_CHECKING:
    from tests.histories.record import Recording


def _placement(homes: dict[str, int], withdrawn: tuple[str, ...] = (), plan: str = "plan-1") -> PlacementStatus:
    return PlacementStatus(phase=PlacementPhase.PLACED, plan=PlacementPlanStatus(id=plan), candidates=[
        CandidatePlacement(cluster=c, endpoint=None if c in withdrawn else f"http://chat.team-a.{c}.example.com",
                           admitted_replicas=n, ready_replicas=n,
                           allocation=CandidateAllocationStatus(drain_requested=True if c in withdrawn else None))
        for c, n in homes.items()])


async def traffic_map_split(rec: Recording) -> None:
    """A Split routed 3:1 and published, its probe gating one home and reopening it, a home withdrawn by
    placement (weight 0, then its entry gone), a drain annotation, then deletion."""
    env = rec.env
    probe = RoutingProbeSpec(path="/health", method="GET", accept_statuses=[200], gate_statuses=[503], period="10s",
                             timeout="2s", failure_threshold=2, success_threshold=1, all_failed_policy="Drain")
    world = FakeRoutingWorld(env=env, placement=_placement({"member-a": 3, "member-b": 1}),
                             routing=RoutingSpec(probe=probe))
    queue = f"tm-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=[*registry_workflows(), PublicationRecorder],
                      activities=world.activities(), workflow_runner=workflow_runner()):
        recorder = await env.client.start_workflow(RECORDER, id=f"placement/{world.namespace}/{world.name}/{world.uid}",
                                                   task_queue=queue)
        handle = await env.client.start_workflow(
            "TrafficMapWorkflow", {"ref": world.ref().model_dump(mode="json")},
            id=f"trafficmap/{world.namespace}/{world.name}/{world.uid}", task_queue=queue)
        await rec.root(handle)
        await until(env, lambda: world.weights() == {"member-a": 3, "member-b": 1}, what="published 3:1")
        world.answers["member-b"] = HomeAnswer(status=503)
        await until(env, lambda: world.weights() == {"member-a": 1, "member-b": 0}, what="member-b gated")
        world.answers["member-b"] = HomeAnswer(status=200)
        await until(env, lambda: world.weights() == {"member-a": 3, "member-b": 1}, what="member-b reopened")
        world.placement = _placement({"member-a": 3, "member-b": 1}, withdrawn=("member-b",), plan="plan-2")
        await handle.signal("routing-changed", "placement")
        await until(env, lambda: world.weights() == {"member-a": 1, "member-b": 0}, what="member-b withdrawn")
        world.placement = _placement({"member-a": 3}, plan="plan-2")
        await handle.signal("routing-changed", "placement")
        await until(env, lambda: world.weights() == {"member-a": 1}, what="member-b gone")
        world.annotations["ome.io/traffic-drain"] = '{"m": {"cluster": "member-a", "reason": "maintenance"}}'
        await handle.signal("routing-changed", "annotation")
        await until(env, lambda: world.weights() == {"member-a": 0}, what="member-a drained")
        world.deleting = True
        await handle.signal("delete", {"uid": world.uid, "generation": 1, "resource_version": "9", "deleting": True})
        await handle.result()
        await stop_recorder(recorder)
        await rec.save()


SCENARIOS = {"traffic-map-split": traffic_map_split}
