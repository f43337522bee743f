"""Worker affinity for imports: which worker host holds a model's spool.

Fetching and pushing a model's files happen on the host whose disk holds the spool, so every
worker also polls a task queue of its own. The import workflow first claims a host through the
shared queue (whichever worker picks the task offers its own queue), then sends every file
activity there. The host queue's name is stable across restarts of the same host, so a worker
killed mid-transfer picks its work up again with the partial files still on disk.
"""

from __future__ import annotations

from pydantic import BaseModel
from temporalio import activity

from servingops.activities.oci.activities import RegistryTarget


class HostClaim(BaseModel):
    task_queue: str
    """The claiming worker's own task queue."""
    registry: RegistryTarget
    """Where this installation publishes models (the repository is the shared model store)."""


class HostActivities:
    def __init__(self, host_task_queue: str, registry: RegistryTarget) -> None:
        self.claim_result = HostClaim(task_queue=host_task_queue, registry=registry)

    @activity.defn(name="host.claim")
    def claim(self) -> HostClaim:
        return self.claim_result

    def all(self) -> list[object]:
        return [self.claim]
