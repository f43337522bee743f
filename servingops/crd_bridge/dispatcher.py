"""Turn observed objects into workflow starts and signals.

Every dispatch is a signal-with-start on a deterministic workflow id with conflict policy
use-existing (a running workflow gets the signal, a missing one is created) and reuse policy
reject-duplicate (a workflow that already finished for this uid is never started again by a
stale event). Failures are retried with backoff and never dropped; the fingerprint of what was
sent is updated only after success, so a lost or duplicated event costs nothing.

Each dispatch is checked against the workflow types the worker serves: one that no worker
registers starts nothing and is recorded as a Warning Event on the object instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from datetime import timedelta

from kubernetes import client
from opentelemetry import trace
from temporalio.client import Client, WorkflowUpdateStage
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from servingops.api_models import contract
from servingops.api_models.contract import MigrationStart, StartObject, WorkflowType, search_attributes
from servingops.clients.kube.events import record_event
from servingops.crd_bridge.metrics import BridgeMetrics
from servingops.crd_bridge.queue import CoalescingQueue
from servingops.crd_bridge.routes import Dispatch, Fingerprint, not_served, plan
from servingops.crd_bridge.watcher import Observed

log = logging.getLogger("servingops.bridge.dispatch")
tracer = trace.get_tracer("servingops.bridge")

MAX_BACKOFF = 5.0
SHORTCUT_TIMEOUT = timedelta(seconds=2)
"""How long a running_only update may take to be accepted: the durable dispatches of the same change
wait for it (a worker that is down delays them by this much at most)."""


class Dispatcher:
    def __init__(self, temporal: Client, task_queue: str, queue: CoalescingQueue[Observed],
                 api_client: client.ApiClient, metrics: BridgeMetrics, concurrency: int = 64,
                 served: frozenset[WorkflowType] = contract.IMPLEMENTED_WORKFLOWS) -> None:
        self.temporal = temporal
        self.task_queue = task_queue
        self.queue = queue
        self.core = client.CoreV1Api(api_client)
        self.metrics = metrics
        self.concurrency = concurrency
        self.served = served
        self.fingerprints: dict[Hashable, Fingerprint] = {}
        self._failures: dict[Hashable, int] = {}

    async def run(self) -> None:
        await asyncio.gather(*(self._loop() for _ in range(self.concurrency)))

    async def _loop(self) -> None:
        while True:
            key, observed = await self.queue.get()
            self.metrics.queue_depth = len(self.queue)
            try:
                await self.handle(key, observed)
            except Exception as exc:
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                self.metrics.error(type(exc).__name__)
                delay = min(0.1 * 2 ** (failures - 1), MAX_BACKOFF)
                log.warning("dispatch of %s failed (%s: %s); retry %d in %.1fs", key, type(exc).__name__, exc,
                            failures, delay)
                await asyncio.sleep(delay)
                self.queue.done(key, retry=observed)
            else:
                self._failures.pop(key, None)
                self.queue.done(key)

    async def handle(self, key: Hashable, observed: Observed) -> None:
        result = plan(observed.route, observed.obj, self.fingerprints.get(key), gone=observed.gone)
        warnings = list(result.warnings)
        # The shortcuts go first, and the durable dispatches once they are accepted (or refused, or timed
        # out): a run accepts at the end of the workflow task the update wakes, which is a promote's scale
        # and weights, so the InferenceService workflow's task that the durable signal wakes (it records
        # the change and forwards it to the run again) does not compete with it for the worker. Measured:
        # the scale-and-weights call 17 ms instead of 24 (docs/metrics.md, "A promote's path").
        await asyncio.gather(*(self.update_running(d, observed) for d in result.dispatches if d.running_only))
        for dispatch in result.dispatches:
            if dispatch.running_only:
                continue
            if dispatch.workflow_type in self.served:
                await self.send(dispatch, observed)
            else:
                warnings.append(not_served(dispatch))
        if observed.gone:
            self.fingerprints.pop(key, None)
        elif result.fingerprint is not None:
            self.fingerprints[key] = result.fingerprint
        for reason, message in warnings:
            await asyncio.to_thread(self._warn, observed, reason, message)

    async def send(self, dispatch: Dispatch, observed: Observed) -> None:
        ref = dispatch.start_arg.ref if isinstance(dispatch.start_arg, StartObject) else None
        kind = ref.kind if ref else "Migration"
        if isinstance(dispatch.start_arg, MigrationStart):
            ref = dispatch.start_arg.isvc
        attributes = TypedSearchAttributes([
            SearchAttributePair(search_attributes.KIND, kind),
            SearchAttributePair(search_attributes.NAMESPACE, (ref.namespace if ref else None) or ""),
            SearchAttributePair(search_attributes.NAME, ref.name if ref else ""),
        ])
        signal = dispatch.signal.value if dispatch.signal else None
        with tracer.start_as_current_span(
            "bridge.dispatch",
            attributes={"workflow.id": dispatch.workflow_id, "workflow.type": dispatch.workflow_type.value,
                        "signal": signal or "start", "object.kind": observed.route.kind},
        ):
            try:
                handle = await self.temporal.start_workflow(
                    dispatch.workflow_type.value,
                    dispatch.start_arg,
                    id=dispatch.workflow_id,
                    task_queue=self.task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    search_attributes=attributes,
                    start_signal=signal,
                    start_signal_args=[dispatch.signal_arg] if signal else [],
                )
            except WorkflowAlreadyStartedError:
                # This uid's workflow already finished (e.g. cleanup after delete): a stale
                # event must not bring it back.
                log.debug("%s already closed; %s not delivered", dispatch.workflow_id, signal)
                return
        self.metrics.signal(dispatch.workflow_type.value, signal or "start", time.monotonic() - observed.seen_at)
        # The server says whether this signal-with-start started a run or reached a running one;
        # the SDK keeps its answer on the handle without a public accessor.
        response = getattr(handle, "_start_workflow_response", None)
        if getattr(response, "started", False):
            self.metrics.started(dispatch.workflow_type.value)

    async def update_running(self, dispatch: Dispatch, observed: Observed) -> None:
        """A running_only dispatch: the update if the workflow runs, else nothing. Never raises: a
        durable dispatch of the same change follows."""
        assert dispatch.update is not None
        try:
            # Bounded: the key's next change waits for this dispatch to end.
            await self.temporal.get_workflow_handle(dispatch.workflow_id).start_update(
                dispatch.update.value, dispatch.signal_arg, wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                rpc_timeout=SHORTCUT_TIMEOUT)
        except Exception as exc:  # best effort by design; NOT_FOUND is the usual answer (no such run)
            if not (isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND):
                log.debug("shortcut %s to %s not delivered: %s", dispatch.update.value, dispatch.workflow_id, exc)
            return
        self.metrics.signal(dispatch.workflow_type.value, dispatch.update.value, time.monotonic() - observed.seen_at)

    def _warn(self, observed: Observed, reason: str, message: str) -> None:
        meta = observed.obj["metadata"]
        route = observed.route
        try:
            record_event(self.core, api_version=f"{route.group}/{route.version}", kind=route.kind,
                         name=meta["name"], namespace=meta.get("namespace"), uid=meta.get("uid"),
                         event_type="Warning", reason=reason, message=message, component="servingops-bridge")
            self.metrics.warning(reason)
        except Exception:
            log.exception("could not record Warning %s on %s", reason, meta["name"])
