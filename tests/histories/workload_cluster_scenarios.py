"""Recorded scenarios of WorkloadClusterWorkflow (tests/histories/record.py runs them): a fake probe
whose verdicts the scenario scripts, under the real activity names, spoken to only through the
wire contract (type, signal and annotation names, JSON payloads)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.worker import Worker

from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.rollout_fakes import until

if TYPE_CHECKING:
    from tests.histories.record import Recording

CONNECTED = {"connected": True, "reason": "Connected", "server_version": "v1.35.4",
             "message": "https://127.0.0.1:6443 is ready, Kubernetes v1.35.4, authenticated as "
                        "system:serviceaccount:servingops-member:probe"}
UNREACHABLE = {"connected": False, "reason": "Unreachable",
               "message": "https://127.0.0.1:6443: GET /readyz: connection refused"}
NO_SECRET = {"connected": False, "reason": "SecretNotFound",
             "message": "Secret servingops-system/gpu-east does not exist"}


@dataclass
class FakeMemberCluster:
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    name: str = "gpu-east"
    verdict: dict[str, Any] = field(default_factory=lambda: dict(NO_SECRET))
    generation: int = 1
    probes: int = 0
    patches: list[dict[str, Any]] = field(default_factory=list)

    def ref(self) -> dict[str, Any]:
        return {"group": "ome.io", "version": "v1beta1", "plural": "workloadclusters", "kind": "WorkloadCluster",
                "name": self.name, "uid": self.uid}

    def event(self, **extra: Any) -> dict[str, Any]:
        return {"uid": self.uid, "generation": self.generation, "resource_version": str(self.generation), **extra}

    def ready(self) -> str | None:
        conditions = [c for p in self.patches for c in p.get("conditions") or []]
        return f"{conditions[-1]['status']}/{conditions[-1]['reason']}" if conditions else None

    def activities(self) -> list[Any]:
        @activity.defn(name="workloadcluster.check")
        async def check(request: dict[str, Any]) -> dict[str, Any]:
            self.probes += 1
            return {"present": True, "verdict": {**self.verdict, "generation": self.generation}}

        @activity.defn(name="kube.patch_status")
        async def patch_status(patch: dict[str, Any]) -> bool:
            self.patches.append(patch)
            return True

        @activity.defn(name="operator.config")
        async def read() -> dict[str, Any]:
            return {"workload_clusters": {"healthCheckInterval": "30s"}}

        return [check, patch_status, read]


@asynccontextmanager
async def served(rec: Recording, member: FakeMemberCluster) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    queue = f"wlc-{uuid.uuid4().hex[:8]}"
    async with Worker(rec.env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=member.activities(),
                      workflow_runner=workflow_runner()):
        handle = await rec.env.client.start_workflow("WorkloadClusterWorkflow", {"ref": member.ref()},
                                                     id=f"workloadcluster/{member.name}/{member.uid}",
                                                     task_queue=queue)
        await rec.root(handle)
        await until(rec.env, lambda: member.patches != [], step=1, what="the first verdict")
        yield handle


async def workload_cluster_health(rec: Recording) -> None:
    """A WorkloadCluster whose Secret is missing (SecretNotFound), then created and picked up by the
    `servingops.io/recheck` annotation (Connected); interval re-checks that write nothing; the member
    unreachable (Warning) and back; a stale generation ignored, a newer one probed at once; delete."""
    member = FakeMemberCluster()
    env = rec.env
    async with served(rec, member) as handle:
        assert member.ready() == "False/SecretNotFound"
        member.verdict = dict(CONNECTED)
        await handle.signal("annotation", member.event(name="servingops.io/recheck", value="1"))
        await until(env, lambda: member.ready() == "True/Connected", step=1, what="connected")
        probes = member.probes
        await until(env, lambda: member.probes >= probes + 2, step=10, what="two quiet re-checks")
        member.verdict = dict(UNREACHABLE)
        await until(env, lambda: member.ready() == "False/Unreachable", step=10, what="unreachable")
        member.verdict = dict(CONNECTED)
        await until(env, lambda: member.ready() == "True/Connected", step=10, what="back")
        await handle.signal("object-changed", member.event())
        member.generation = 2
        await handle.signal("object-changed", member.event())
        await until(env, lambda: member.patches[-1]["conditions"] and member.probes >= probes + 5, step=1,
                    what="the new generation probed")
        await handle.signal("delete", member.event(deleting=True))
        await handle.result()
        await rec.save()


async def workload_cluster_continue_as_new(rec: Recording) -> None:
    """The health workflow continues as new after its bounded number of probes, carrying the last
    verdict: the continued run probes, finds the same verdict and writes nothing; then delete."""
    member = FakeMemberCluster(verdict=dict(CONNECTED))
    env = rec.env
    async with served(rec, member) as handle:
        first = (await handle.describe()).run_id
        latest = env.client.get_workflow_handle(handle.id)
        for _ in range(200):
            if (await latest.describe()).run_id != first:
                break
            await env.sleep(100 * 30)
        assert (await latest.describe()).run_id != first, "the health workflow never continued as new"
        probes = member.probes
        await until(env, lambda: member.probes >= probes + 2, step=10, what="the continued run probing")
        assert len(member.patches) == 1, "the continued run rewrote an unchanged verdict"
        await latest.signal("delete", member.event(deleting=True))
        await latest.result()
        await rec.save()


SCENARIOS = {"workload-cluster-health": workload_cluster_health,
             "workload-cluster-continue-as-new": workload_cluster_continue_as_new}
