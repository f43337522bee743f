"""RolloutWorkflow: one run of one rollout group (id rollout/<ns>/<isvc>/<uid>/<group>).

It pins nothing and decides little itself: it takes the group, targets and settings the
InferenceService workflow opened it with and hands itself, as the driver, to the group's
progression (`progressions.canary`, `progressions.bluegreen` or `progressions.rolling`, each a
`run(driver)`). Every transition is reported to the InferenceService workflow, which owns the
status write; the result closes the run there.

Annotations arrive as signals forwarded by the InferenceService workflow, with upstream OME's
meaning; the SDK uses the `promote` / `rollback` updates, which act like the annotations but
answer with the resulting CanaryStatus (handlers.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract import WorkflowType
    from servingops.api_models.contract.rollout import Progression, progression_of
    from servingops.api_models.ome.enums import RolloutRunOutcome
    from servingops.workflows.rollout.handlers import RolloutHandlers
    from servingops.workflows.rollout.models import RolloutInput, RolloutResult
    from servingops.workflows.rollout.progressions import bluegreen, canary, rolling
    from servingops.workflows.visibility import Visibility

_PROGRESSIONS: dict[Progression, Callable[[RolloutHandlers], Awaitable[RolloutRunOutcome | None]]] = {
    Progression.CANARY: canary.run,
    Progression.BLUE_GREEN: bluegreen.run,
    Progression.ROLLING_UPDATE: rolling.run,
}


@workflow.defn(name=WorkflowType.ROLLOUT)
class RolloutWorkflow(RolloutHandlers):
    @workflow.run
    async def run(self, params: RolloutInput) -> RolloutResult:
        self._params = params
        self.isvc = params.isvc
        self.pinned = params.pinned
        self.targets = list(params.targets)
        self.settings = params.settings
        # Signals that arrived before run() already updated the annotation state; the input only
        # fills what they did not touch.
        self.annotations = params.annotations.model_copy(update=self.annotations.model_dump(exclude_unset=True))
        self._visibility = Visibility("Rollout", params.isvc.namespace, f"{params.isvc.name}/{params.pinned.key}")
        if params.carried is not None:
            self.progress = params.carried
        outcome = await _PROGRESSIONS[progression_of(params.pinned)](self)
        self._finished = True
        await self.publish()
        await self.reports_delivered()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return RolloutResult(key=params.pinned.key, run_id=params.run_id, outcome=outcome, targets=self.targets,
                             last=self._report())
