"""A stand-in for the InferenceReplica engine that counts the bridge's pods-changed signals under the
replica's workflow id (tests/test_bridge_pods.py). Registered under the engine's type name, so a
bridge that starts the replica's workflow itself (once the worker serves the type) starts this one
on the test's task queue. Importable: the workflow sandbox refuses classes from __main__.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract import ObjectEvent, Signal, StartObject, WorkflowType

COUNT = "pods-changed-count"


@workflow.defn(name=WorkflowType.INFERENCE_REPLICA.value)
class PodsChangedCounter:
    def __init__(self) -> None:
        # Initialised here, not in run: under signal-with-start a handler can run first.
        self._pods_changed = 0
        self._deleted = False

    @workflow.run
    async def run(self, start: StartObject) -> int:
        await workflow.wait_condition(lambda: self._deleted)
        return self._pods_changed

    @workflow.signal(name=Signal.PODS_CHANGED)
    def pods_changed(self) -> None:
        self._pods_changed += 1

    @workflow.signal(name=Signal.OBJECT_CHANGED)
    def object_changed(self, event: ObjectEvent) -> None:
        """The bridge's CR lane, once it serves the type: accepted and ignored."""

    @workflow.signal(name=Signal.DELETE)
    def delete(self, event: ObjectEvent) -> None:
        self._deleted = True

    @workflow.query(name=COUNT)
    def count(self) -> int:
        return self._pods_changed
