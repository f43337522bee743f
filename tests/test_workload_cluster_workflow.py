"""WorkloadClusterWorkflow on Temporal's time-skipping server, its probe replaced by a fake whose
verdicts the tests script (the e2e twin, against a real member apiserver, is
tests/test_workload_cluster_e2e.py).

What is held: Ready follows the verdicts; an Event goes with a change of status or reason only,
never with a repeated probe; a repeated verdict writes nothing; the re-check comes after the
interval the operator ConfigMap sets (time skipped), at once on a newer generation and on the
recheck annotation, not on a stale generation; delete ends the workflow; the query answers the
last verdict."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models.contract import Query, Signal
from servingops.api_models.contract.workload_cluster import RECHECK_ANNOTATION, ConnectionReason
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from servingops.workflows.workload_cluster import transition_event
from testkit.rollout_fakes import until
from tests.histories.record import start_env

pytestmark = [pytest.mark.timeskip, pytest.mark.asyncio]

INTERVAL = 45.0
CONNECTED = {"connected": True, "reason": "Connected", "message": "https://m:6443 is ready, Kubernetes v1.35.4",
             "server_version": "v1.35.4"}
REFUSED = {"connected": False, "reason": "Unreachable", "message": "https://m:6443: GET /readyz: connection refused"}
TIMED_OUT = {"connected": False, "reason": "Unreachable", "message": "https://m:6443: GET /readyz: timed out"}
NO_SECRET = {"connected": False, "reason": "SecretNotFound", "message": "Secret servingops-system/m does not exist"}


@dataclass
class FakeMember:
    """The probe's answers, the status writes and the probes made (with the test clock's time)."""

    verdict: dict[str, Any] = field(default_factory=lambda: dict(CONNECTED))
    generation: int = 1
    present: bool = True
    interval: str = f"{int(INTERVAL)}s"
    probes: list[float] = field(default_factory=list)
    patches: list[dict[str, Any]] = field(default_factory=list)
    env: WorkflowEnvironment | None = None

    def activities(self) -> list[Any]:
        @activity.defn(name="workloadcluster.check")
        async def check(request: dict[str, Any]) -> dict[str, Any]:
            assert self.env is not None
            self.probes.append((await self.env.get_current_time()).timestamp())
            if not self.present:
                return {"present": False}
            return {"present": True, "verdict": {**self.verdict, "generation": self.generation}}

        @activity.defn(name="kube.patch_status")
        async def patch_status(patch: dict[str, Any]) -> bool:
            self.patches.append(patch)
            return self.present

        @activity.defn(name="operator.config")
        async def read() -> dict[str, Any]:
            return {"workload_clusters": {"healthCheckInterval": self.interval}}

        return [check, patch_status, read]

    @property
    def ready(self) -> list[tuple[str, str]]:
        return [(c["status"], c["reason"]) for p in self.patches for c in p["conditions"]]

    @property
    def events(self) -> list[tuple[str, str]]:
        return [(e["type"], e["reason"]) for p in self.patches for e in p.get("events") or []]


@dataclass
class Running:
    env: WorkflowEnvironment
    member: FakeMember
    handle: WorkflowHandle[Any, Any]
    uid: str

    async def changed(self, generation: int) -> None:
        await self.handle.signal(Signal.OBJECT_CHANGED,
                                 {"uid": self.uid, "generation": generation, "resource_version": str(generation)})

    async def probed(self, count: int, what: str) -> None:
        await until(self.env, lambda: len(self.member.probes) >= count, step=1, what=what)


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    env = await start_env()
    async with env:
        member = FakeMember(env=env)
        uid = str(uuid.uuid4())
        queue = f"wlc-{uuid.uuid4().hex[:8]}"
        ref = {"group": "ome.io", "version": "v1beta1", "plural": "workloadclusters", "kind": "WorkloadCluster",
               "name": "gpu-east", "uid": uid}
        async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                          activities=member.activities(),
                          workflow_runner=workflow_runner()):
            handle = await env.client.start_workflow("WorkloadClusterWorkflow", {"ref": ref},
                                                     id=f"workloadcluster/gpu-east/{uid}", task_queue=queue)
            run = Running(env, member, handle, uid)
            await until(env, lambda: len(member.patches) == 1, what="the first verdict written")
            yield run
            if not member.present:
                return
            await handle.signal(Signal.DELETE, {"uid": uid, "generation": member.generation,
                                                "resource_version": "99", "deleting": True})
            await handle.result()


async def test_ready_on_connect_then_a_flap_writes_false_with_one_warning_and_back(running: Running) -> None:
    member = running.member
    assert member.ready == [("True", "Connected")]
    assert member.events == [("Normal", "Connected")]
    state = await running.handle.query(Query.STATE)
    assert state["phase"] == "Ready" and state["verdict"]["server_version"] == "v1.35.4"

    member.verdict = dict(REFUSED)
    await until(running.env, lambda: len(member.patches) == 2, step=5, what="the flap written")
    assert member.ready[-1] == ("False", "Unreachable")
    assert member.patches[-1]["conditions"][0]["message"] == REFUSED["message"]
    assert member.events == [("Normal", "Connected"), ("Warning", "Unreachable")]

    # Still unreachable, for another reason's words: the message is rewritten, no new Event.
    member.verdict = dict(TIMED_OUT)
    await until(running.env, lambda: len(member.patches) == 3, step=5, what="the new message written")
    assert member.ready[-1] == ("False", "Unreachable")
    assert member.events == [("Normal", "Connected"), ("Warning", "Unreachable")]

    # The same verdict probe after probe: no write at all.
    probes = len(member.probes)
    await running.probed(probes + 3, "three more probes")
    assert len(member.patches) == 3

    member.verdict = dict(CONNECTED)
    await until(running.env, lambda: len(member.patches) == 4, step=5, what="back to Ready")
    assert member.ready[-1] == ("True", "Connected")
    assert member.events == [("Normal", "Connected"), ("Warning", "Unreachable"), ("Normal", "Connected")]
    state = await running.handle.query(Query.STATE)
    assert state["phase"] == "Ready" and state["verdict"]["reason"] == "Connected"


async def test_rechecks_on_the_configured_interval(running: Running) -> None:
    member = running.member
    await running.probed(4, "three re-checks")
    gaps = [round(b - a) for a, b in zip(member.probes, member.probes[1:], strict=False)]
    # Each re-check waits the interval the operator ConfigMap sets (no signal came in between).
    assert gaps[:3] == [INTERVAL] * 3, gaps


async def test_object_changed_and_the_recheck_annotation_probe_at_once(running: Running) -> None:
    member = running.member
    member.verdict = dict(NO_SECRET)
    await running.probed(2, "the interval re-check")
    await until(running.env, lambda: member.ready[-1] == ("False", "SecretNotFound"), step=1, what="SecretNotFound")
    assert member.events == [("Normal", "Connected"), ("Warning", "SecretNotFound")]

    # The Secret is created (no signal can say so); the annotation wakes the workflow before the interval.
    member.verdict = dict(CONNECTED)
    before = len(member.probes)
    await running.handle.signal(Signal.ANNOTATION, {"uid": running.uid, "generation": 1, "resource_version": "7",
                                                    "name": RECHECK_ANNOTATION, "value": "1"})
    await until(running.env, lambda: len(member.probes) > before, step=1, what="the annotation's probe")
    assert member.probes[-1] - member.probes[-2] < INTERVAL
    await until(running.env, lambda: member.ready[-1] == ("True", "Connected"), step=1, what="Ready again")

    # A stale generation wakes nothing; a newer one probes at once.
    before = len(member.probes)
    await running.changed(1)
    await running.env.sleep(INTERVAL / 3)
    assert len(member.probes) == before
    member.generation = 2
    member.verdict = {"connected": False, "reason": "ClusterProfileUnsupported", "message": "profile"}
    await running.changed(2)
    await until(running.env, lambda: len(member.probes) > before, step=1, what="the new generation's probe")
    assert member.probes[-1] - member.probes[-2] < INTERVAL
    await until(running.env, lambda: member.ready[-1] == ("False", "ClusterProfileUnsupported"), step=1,
                what="the new generation's verdict")
    state = await running.handle.query(Query.STATE)
    assert state["acted_generation"] == 2 and state["verdict"]["reason"] == ConnectionReason.CLUSTER_PROFILE_UNSUPPORTED


async def test_a_gone_cluster_ends_the_workflow(running: Running) -> None:
    running.member.present = False
    state = await running.handle.result()
    assert state["phase"] == "Deleted"
    assert len(running.member.patches) == 1


async def test_events_only_on_a_change_of_status_or_reason() -> None:
    from servingops.api_models.contract.workload_cluster import ConnectionVerdict

    up = ConnectionVerdict.model_validate(CONNECTED)
    down = ConnectionVerdict.model_validate(REFUSED)
    assert transition_event(None, up) is not None and transition_event(None, up).type == "Normal"  # type: ignore[union-attr]
    assert transition_event(None, down).type == "Warning"  # type: ignore[union-attr]
    assert transition_event(up, up) is None
    assert transition_event(down, ConnectionVerdict.model_validate(TIMED_OUT)) is None
    assert transition_event(down, ConnectionVerdict.model_validate(NO_SECRET)).reason == "SecretNotFound"  # type: ignore[union-attr]
