"""Blue-green: surge the full new set beside the old one, wait until every component's new
revision is fully Ready, flip all traffic at once, drain the old set after the delay.

No traffic moves before the whole set is Ready, so a rollback, a retarget or a readiness
timeout before the flip only has to delete the new revisions."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from servingops.activities.serving.activities import ServingActivities
    from servingops.activities.serving.types import RevisionKey
    from servingops.api_models.errors import ErrorType, error_type_of
    from servingops.api_models.ome.enums import CoordinationPhase, RolloutRunOutcome
    from servingops.api_models.serving import TrafficWeight
    from servingops.workflows import options
    from servingops.workflows.rollout.progressions.driver import Driver
    from servingops.workflows.rollout.progressions.readiness import (
        all_ready,
        scale_down_delay,
        scale_revision,
        set_weights,
    )


async def run(driver: Driver) -> RolloutRunOutcome | None:
    """Completed, RolledBack (annotation), Superseded (retarget), or None when it failed Ready."""
    moving = driver.moving()
    await driver.coordinate(CoordinationPhase.SURGING, surge="100%")
    try:
        for target in moving:
            await scale_revision(driver.isvc, target.component, target.revision, target.desired_replicas)
    except ActivityError as error:
        if error_type_of(error) is not ErrorType.REVISION_SUPERSEDED:
            raise
        # The spec moved on before the surge: the parent retargets us.
        await driver.coordinate(CoordinationPhase.WAITING, "revision superseded; waiting for the new target")
        while not (driver.retarget_requested() or driver.rollback_requested()):
            await driver.wait(3600)
    await driver.coordinate(CoordinationPhase.WAITING, "waiting for the new revisions to be Ready")
    since = workflow.now()
    while True:
        if driver.rollback_requested() or driver.retarget_requested():
            return await _abandon(driver, RolloutRunOutcome.ROLLED_BACK if driver.rollback_requested()
                                  else RolloutRunOutcome.SUPERSEDED)
        if await all_ready(driver.isvc, moving):
            break
        elapsed = workflow.now() - since
        if elapsed >= driver.ready_timeout():
            await _abandon(driver, None)
            await driver.coordinate(CoordinationPhase.FAILED, "new revisions not Ready within the ready timeout; "
                                                              "the old revisions keep serving")
            return None
        await driver.wait(min(driver.poll_seconds(elapsed), (driver.ready_timeout() - elapsed).total_seconds()))
    for target in moving:
        driver.record_ready(target.component, target.revision)
    await driver.coordinate(CoordinationPhase.SHIFTING)
    for target in moving:
        weights = [TrafficWeight(revision=target.revision, weight=100)]
        await set_weights(driver.isvc, target.component, weights)
        driver.record_traffic(target.component, weights)
    await driver.coordinate(CoordinationPhase.DRAINING)
    await scale_down_delay(driver.scale_down_delay())
    await driver.coordinate(CoordinationPhase.SCALING_DOWN)
    for target in moving:
        await workflow.execute_activity_method(
            ServingActivities.delete_revision,
            RevisionKey(isvc=driver.isvc, component=target.component, revision=target.stable_revision), **options.KUBE)
    await driver.coordinate(CoordinationPhase.IDLE)
    return RolloutRunOutcome.COMPLETED


async def _abandon(driver: Driver, outcome: RolloutRunOutcome | None) -> RolloutRunOutcome | None:
    """Before the flip the old set still carries all traffic: only the new set goes."""
    await driver.coordinate(CoordinationPhase.ROLLING_BACK)
    for target in driver.moving():
        weights = [TrafficWeight(revision=target.stable_revision, weight=100)]
        await set_weights(driver.isvc, target.component, weights)
        driver.record_traffic(target.component, weights)
        await workflow.execute_activity_method(
            ServingActivities.delete_revision,
            RevisionKey(isvc=driver.isvc, component=target.component, revision=target.revision), **options.KUBE)
    if outcome is not None:
        await driver.coordinate(CoordinationPhase.IDLE, f"run closed: {outcome.value}")
    return outcome
