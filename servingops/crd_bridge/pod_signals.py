"""The wake-up lanes of the bridge: payload-less signals to running workflows, coalesced and paced per
workflow (pod_coalescer.py). The pod lane sends pods-changed to InferenceReplica workflows; the scaler lane
sends replica-changed ("observe again") to InferenceService workflows when an HPA of theirs moved.

Separate from the CR dispatcher (each lane its own state and tasks), so a storm of pod or scaler events
never delays a custom resource's dispatch. A plain signal, never signal-with-start: a pod or an HPA must
not start a workflow. A workflow that does not exist (not started yet, or already finished) is not an
error: the signal is dropped and counted, since the workflow reads what it needs when it starts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from opentelemetry import trace
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from servingops.api_models.contract import Signal, WorkflowType
from servingops.crd_bridge.metrics import BridgeMetrics
from servingops.crd_bridge.pod_coalescer import Coalescer, Due

log = logging.getLogger("servingops.bridge.pods")
tracer = trace.get_tracer("servingops.bridge")

Send = Callable[[str], Awaitable[bool]]
"""Signal one workflow; False when there is no such running workflow."""


@dataclass(frozen=True)
class Lane:
    """Which signal a lane sends to which workflow type, and the name its counters carry."""

    name: str
    workflow_type: WorkflowType
    signal: Signal


PODS = Lane("pods", WorkflowType.INFERENCE_REPLICA, Signal.PODS_CHANGED)
SCALERS = Lane("scalers", WorkflowType.INFERENCE_SERVICE, Signal.REPLICA_CHANGED)


def temporal_sender(temporal: Client, lane: Lane = PODS) -> Send:
    span = f"bridge.{lane.signal.value.replace('-', '_')}"

    async def send(workflow_id: str) -> bool:
        with tracer.start_as_current_span(span, attributes={"workflow.id": workflow_id}):
            try:
                await temporal.get_workflow_handle(workflow_id).signal(lane.signal.value)
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:  # never started, or already closed
                    return False
                raise
        return True

    return send


class WakeSignaller:
    def __init__(self, send: Send, metrics: BridgeMetrics, loop: asyncio.AbstractEventLoop, *,
                 coalescer: Coalescer | None = None, concurrency: int = 16,
                 clock: Callable[[], float] = time.monotonic, lane: Lane = PODS) -> None:
        self.lane = lane
        self.send = send
        self.metrics = metrics
        self.loop = loop
        self.coalescer = coalescer or Coalescer()
        self.clock = clock
        self._slots = asyncio.Semaphore(concurrency)
        self._wakeup = asyncio.Event()
        self._sending: set[asyncio.Task[None]] = set()

    def mark(self, workflow_id: str) -> None:
        """From any thread (the watch's): `workflow_id` should look again (its pods, its scaler)."""
        self.loop.call_soon_threadsafe(self._mark, workflow_id)

    def _mark(self, workflow_id: str) -> None:
        if not self.coalescer.mark(workflow_id, self.clock()):
            self.metrics.wake_coalesced(self.lane.name)
        self._wakeup.set()

    async def run(self) -> None:
        while True:
            await self.step()

    async def step(self) -> None:
        """Start every send that is due, then wait for the next due time or a new mark."""
        while isinstance(due := self.coalescer.take(self.clock()), Due):
            await self._slots.acquire()
            task = asyncio.ensure_future(self._send(due))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        self._wakeup.clear()
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout=due)
        except TimeoutError:
            pass

    async def _send(self, due: Due) -> None:
        failed = False
        try:
            if await self.send(due.workflow_id):
                self.metrics.signal(self.lane.workflow_type.value, self.lane.signal.value,
                                    self.clock() - due.pending_since)
            else:
                log.debug("%s: no running workflow; %s dropped", due.workflow_id, self.lane.signal.value)
                self.metrics.wake_dropped(self.lane.name)
        except Exception as exc:
            failed = True
            self.metrics.error(type(exc).__name__)
            log.warning("%s to %s failed (%s: %s); retrying", self.lane.signal.value, due.workflow_id,
                        type(exc).__name__, exc)
        finally:
            self._slots.release()
            self.coalescer.finish(due, self.clock(), failed=failed)
            self._wakeup.set()
