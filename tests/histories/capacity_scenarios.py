"""Recorded scenarios of AcceleratorCapacityWorkflow (tests/histories/record.py runs them): fake
`capacity.observe` / `capacity.write_status` activities the scenario scripts, under the real activity
names, spoken to only through the wire contract (type and signal names, JSON payloads)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.rollout_fakes import until

if TYPE_CHECKING:
    from tests.histories.record import Recording

GPU = "nvidia.com/gpu"


@dataclass
class FakeWorkloadCluster:
    env: WorkflowEnvironment
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    name: str = "fleet-root"
    allocatable: int = 16
    root: bool = True
    generation: int = 1
    samples: int = 0
    writes: list[list[dict[str, Any]] | None] = field(default_factory=list)
    refused: str | None = None
    """observe's answer to a 403 on the WorkloadCluster list (None: not refused; older code ignores it)."""
    conditions: list[dict[str, Any] | None] = field(default_factory=list)

    def ref(self) -> dict[str, Any]:
        return {"group": "ome.io", "version": "v1beta1", "plural": "acceleratorquotas", "kind": "AcceleratorQuota",
                "name": self.name, "uid": self.uid}

    def event(self, **extra: Any) -> dict[str, Any]:
        return {"uid": self.uid, "generation": self.generation, "resource_version": str(self.generation), **extra}

    def activities(self) -> list[Any]:
        @activity.defn(name="capacity.observe")
        async def observe(request: dict[str, Any]) -> dict[str, Any]:
            self.samples += 1
            if not self.root:
                return {"present": True, "root": False, "generation": self.generation}
            now = (await self.env.get_current_time()).astimezone(UTC).replace(microsecond=0)
            return {"present": True, "root": True, "generation": self.generation, "resource_version": "7",
                    "observed_at": now.isoformat(), "resource_names": [GPU],
                    "capacity": [{"resource_name": GPU, "resource_flavor": "a100", "allocatable": self.allocatable,
                                  "attribution": {"flavorUID": "uid-a100", "nodeLabels": {"gpu": "a100"},
                                                  "flavorSetHash": "0" * 64, "complete": True}}],
                    "reported": [], **({"refused": self.refused} if self.refused else {})}

        @activity.defn(name="capacity.write_status")
        async def write_status(request: dict[str, Any]) -> dict[str, Any]:
            self.writes.append(request["capacity"])
            self.conditions.append(request.get("condition"))
            return {"present": True, "resource_version": str(100 + len(self.writes))}

        return [observe, write_status]


@asynccontextmanager
async def served(rec: Recording, cluster: FakeWorkloadCluster,
                 settings: dict[str, Any] | None = None) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    queue = f"cap-{uuid.uuid4().hex[:8]}"
    start: dict[str, Any] = {"ref": cluster.ref(), **({"settings": settings} if settings else {})}
    async with Worker(rec.env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=cluster.activities(), workflow_runner=workflow_runner()):
        handle = await rec.env.client.start_workflow("AcceleratorCapacityWorkflow", start,
                                                     id=f"capacity/{cluster.name}/{cluster.uid}", task_queue=queue)
        await rec.root(handle)
        await until(rec.env, lambda: cluster.writes != [], step=1, what="the first report")
        yield handle


async def accelerator_capacity(rec: Recording) -> None:
    """A root's capacity report: the first sample written; unchanged samples written again only when
    120 s old; a drain (written at once, the high-water mark held, then lowered after three samples);
    a newer generation sampled at once; demoted (the report removed, no timer) and promoted back;
    delete."""
    env = rec.env
    cluster = FakeWorkloadCluster(env=env)
    async with served(rec, cluster) as handle:
        await until(env, lambda: len(cluster.writes) >= 2, step=10, what="the 120 s refresh")
        cluster.allocatable = 8
        await until(env, lambda: (cluster.writes[-1] or [{}])[0].get("highWaterMark") == 8, step=10,
                    what="the mark lowered")
        cluster.generation = 2
        await handle.signal("object-changed", cluster.event())
        samples = cluster.samples
        await until(env, lambda: cluster.samples > samples, step=1, what="the new generation sampled")
        cluster.root, cluster.generation = False, 3
        await handle.signal("object-changed", cluster.event())
        await until(env, lambda: cluster.writes[-1] is None, step=1, what="the report removed")
        await env.sleep(300)
        cluster.root, cluster.generation = True, 4
        await handle.signal("object-changed", cluster.event())
        await until(env, lambda: cluster.writes[-1] is not None, step=1, what="reporting again")
        await handle.signal("delete", cluster.event(deleting=True))
        await handle.result()
        await rec.save()


async def accelerator_capacity_continue_as_new(rec: Recording) -> None:
    """The report continues as new after its bounded number of samples, carrying the marks and what
    it wrote: the continued run writes nothing for an unchanged sample; then delete."""
    env = rec.env
    cluster = FakeWorkloadCluster(env=env)
    async with served(rec, cluster, {"samples_per_run": 3}) as handle:
        first = (await handle.describe()).run_id
        latest = env.client.get_workflow_handle(handle.id)
        await until(env, lambda: cluster.samples >= 4, step=10, what="the continued run sampling")
        assert (await latest.describe()).run_id != first, "the report never continued as new"
        assert len(cluster.writes) == 1, "the continued run rewrote an unchanged report"
        await latest.signal("delete", cluster.event(deleting=True))
        await latest.result()
        await rec.save()


async def accelerator_capacity_access_refused(rec: Recording) -> None:
    """observe answers a 403 on the WorkloadCluster list: the report is written with CapacityReported False
    AccessRefused (and its Warning); sampling goes on; the role mended, the condition turns True; delete."""
    env = rec.env
    cluster = FakeWorkloadCluster(env=env, refused="the worker may not list WorkloadClusters: 403 Forbidden")
    async with served(rec, cluster) as handle:
        assert (cluster.conditions[0] or {}).get("reason") == "AccessRefused", cluster.conditions
        samples = cluster.samples
        await until(env, lambda: cluster.samples >= samples + 2, step=10, what="sampling on while refused")
        cluster.refused = None
        await until(env, lambda: (cluster.conditions[-1] or {}).get("status") == "True", step=10,
                    what="the mended role said")
        await handle.signal("delete", cluster.event(deleting=True))
        await handle.result()
        await rec.save()


SCENARIOS = {"accelerator-capacity": accelerator_capacity,
             "accelerator-capacity-access-refused": accelerator_capacity_access_refused,
             "accelerator-capacity-continue-as-new": accelerator_capacity_continue_as_new}
