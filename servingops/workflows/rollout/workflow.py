"""RolloutWorkflow: one run of one rollout group (id rollout/<ns>/<isvc>/<uid>/<group>).

It pins nothing and decides little itself: it takes the group, targets and settings the
InferenceService workflow opened it with and hands itself, as the driver, to the group's
progression (`progressions.canary`, `progressions.bluegreen` or `progressions.rolling`, each a
`run(driver)`). Every transition is reported to the InferenceService workflow, which owns the
status write; the result closes the run there.

Annotations arrive with upstream OME's meaning as `run-annotation` events, twice: straight from
the bridge (the shortest path from a promote to its weights) and forwarded by the InferenceService
workflow (the path that cannot be lost); the run acts on each change once, by resourceVersion.
The SDK uses the `promote` / `rollback` updates, which act like the annotations but answer with the
resulting CanaryStatus (handlers.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract import WorkflowType
    from servingops.api_models.contract.rollout import Progression, progression_of
    from servingops.api_models.ome.enums import RolloutRunOutcome
    from servingops.workflows.rollout.handlers import RolloutHandlers
    from servingops.workflows.rollout.models import RolloutInput, RolloutResult
    from servingops.workflows.rollout.progressions import bluegreen, canary, rolling
    from servingops.workflows.rollout.progressions.readiness import LOCAL_SERVING_WRITES
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
            # Annotation changes acted on before run() began are newer than what was carried.
            acted = self.progress.annotation_versions
            self.progress = params.carried
            self.progress.annotation_versions = {**self.progress.annotation_versions, **acted}
        try:
            outcome = await _PROGRESSIONS[progression_of(params.pinned)](self)
        except Exception:
            # A report still in flight (reports leave without waiting) reaches the parent before the
            # run fails. With local serving writes a refused scale fails the run in the very workflow
            # task that sent the report, and the time-skipping test server never settled after such a
            # run (every later sleep timed out).
            if workflow.patched(LOCAL_SERVING_WRITES):
                with contextlib.suppress(Exception):  # the run's own error is the one to raise
                    await self.reports_delivered()
            raise
        self._finished = True
        await self.publish()
        await self.reports_delivered()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return RolloutResult(key=params.pinned.key, run_id=params.run_id, outcome=outcome, targets=self.targets,
                             last=self._report())
