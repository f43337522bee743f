"""A stand-in workflow for a policy's (or a service's) workflow in time-skipping tests: it counts the
nudges it receives (`refresh-now`, `autoscaler-policy-changed`). A module of its own, importing only
temporalio and the contract, so the sandbox validates it."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract import Signal


@workflow.defn(name="NudgeRecorder")
class NudgeRecorder:
    def __init__(self) -> None:
        self.refreshes = 0
        self.policy_changes = 0

    @workflow.signal(name=Signal.REFRESH_NOW)
    def refresh_now(self) -> None:
        self.refreshes += 1

    @workflow.signal(name=Signal.AUTOSCALER_POLICY_CHANGED)
    def policy_changed(self) -> None:
        self.policy_changes += 1

    @workflow.query(name="counts")
    def counts(self) -> list[int]:
        """[refresh-now received, autoscaler-policy-changed received]"""
        return [self.refreshes, self.policy_changes]

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)
