"""Rolling update: replace pods gradually inside the maxSurge / maxUnavailable budget, with both
revisions serving meanwhile and traffic split in proportion to their Ready pods.

Each round scales the new revision up as far as the surge budget allows, then scales the old one
down only as far as keeps (ready new + ready old) >= desired - maxUnavailable. The pure budget
math is here so it can be checked on its own."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from servingops.activities.serving.activities import ServingActivities
    from servingops.activities.serving.types import RevisionKey
    from servingops.api_models.contract.rollout import ComponentTarget
    from servingops.api_models.ome.enums import ComponentType, CoordinationPhase, RolloutRunOutcome
    from servingops.api_models.ome.rollout import GroupRollingUpdate
    from servingops.api_models.serving import TrafficWeight
    from servingops.workflows import options
    from servingops.workflows.rollout.progressions.driver import Driver
    from servingops.workflows.rollout.progressions.readiness import all_ready, scale_revision, set_weights
    from servingops.workflows.rollout.steps import scaled

DEFAULT_BUDGET = "25%"
ROUTE_BEFORE_SHRINK = "rolling-route-before-shrink"
"""The patch that writes a round's weights before the old revision scales down, not after: the pods a
shrink stops leave the EndpointSlice at once, and a route still weighting the old revision to none of
them answers 503 until it changes (20 requests lost at 200 req/s through Traefik, tests/test_traffic_e2e.py).
Runs recorded before it (tests/histories/RolloutWorkflow/rolling.json) keep the old order."""


def budget(desired: int, spec: GroupRollingUpdate | None) -> tuple[int, int]:
    """(surge, unavailable) in pods: surge rounds up, unavailable rounds down (the Deployment
    convention). Both zero could never move, so unavailable becomes 1 then."""
    max_surge = spec.max_surge if spec is not None and spec.max_surge is not None else DEFAULT_BUDGET
    max_unavailable = spec.max_unavailable if spec is not None and spec.max_unavailable is not None \
        else DEFAULT_BUDGET
    surge = scaled(max_surge, desired, round_up=True)
    unavailable = scaled(max_unavailable, desired, round_up=False)
    if surge <= 0 and unavailable <= 0:
        unavailable = 1
    return max(0, surge), max(0, unavailable)


@dataclass(frozen=True)
class Counts:
    new: int
    old: int


def next_counts(desired: int, surge: int, unavailable: int, current: Counts, new_ready: int,
                old_ready: int) -> Counts:
    """One pacing round: grow new within desired + surge total pods, then shrink old (unready old
    pods first, they cost no availability) while ready pods stay >= desired - unavailable."""
    new = min(desired, max(current.new, desired + surge - current.old))
    unready_old = max(0, current.old - old_ready)
    spare = max(0, new_ready + old_ready - (desired - unavailable))
    old = max(0, current.old - unready_old - min(old_ready, spare))
    return Counts(new=new, old=old)


def split(new_ready: int, old_ready: int) -> int:
    """Traffic percentage for the new revision, in proportion to Ready pods."""
    total = new_ready + old_ready
    return 100 if total == 0 else round(100 * new_ready / total)


async def run(driver: Driver) -> RolloutRunOutcome | None:
    """Completed, RolledBack (annotation), Superseded (retarget), or None when no progress was
    made within the ready timeout (the old revision is restored)."""
    spec = driver.group().group.rolling_update
    moving = driver.moving()
    counts = {t.component: Counts(new=0, old=t.desired_replicas) for t in moving}
    budgets = {t.component: budget(t.desired_replicas, spec) for t in moving}
    weights: dict[ComponentType, int] = {}
    seen_ready: dict[ComponentType, int] = {}
    surge = spec.max_surge if spec is not None and spec.max_surge is not None else DEFAULT_BUDGET
    await driver.coordinate(CoordinationPhase.SURGING, surge=surge)
    last_progress = workflow.now()
    while True:
        if driver.rollback_requested() or driver.retarget_requested():
            return await _restore(driver, moving, RolloutRunOutcome.ROLLED_BACK if driver.rollback_requested()
                                  else RolloutRunOutcome.SUPERSEDED)
        done = True
        moved = False
        for target in moving:
            component = target.component
            new_seen = await workflow.execute_activity_method(
                ServingActivities.revision_status,
                RevisionKey(isvc=driver.isvc, component=component, revision=target.revision), **options.KUBE)
            old_seen = await workflow.execute_activity_method(
                ServingActivities.revision_status,
                RevisionKey(isvc=driver.isvc, component=component, revision=target.stable_revision), **options.KUBE)
            new_ready = new_seen.ready_replicas
            old_ready = old_seen.ready_replicas
            surge, unavailable = budgets[component]
            before = counts[component]
            after = next_counts(target.desired_replicas, surge, unavailable, before, new_ready, old_ready)
            if after.new != before.new:
                await scale_revision(driver.isvc, component, target.revision, after.new)
            weight = split(new_ready, min(old_ready, after.old))
            route_first = workflow.patched(ROUTE_BEFORE_SHRINK)
            if route_first and weights.get(component) != weight:
                await _route(driver, target, weight)
                weights[component] = weight
            if after.old != before.old:
                await scale_revision(driver.isvc, component, target.stable_revision, after.old)
            counts[component] = after
            if not route_first and weights.get(component) != weight:
                await _route(driver, target, weight)
                weights[component] = weight
            moved = moved or after != before or new_ready > seen_ready.get(component, 0)
            seen_ready[component] = new_ready
            if new_ready > 0:
                driver.record_ready(component, target.revision)
            done = done and after.old == 0 and new_ready >= target.desired_replicas
        if done:
            break
        if moved:
            last_progress = workflow.now()
            await driver.coordinate(CoordinationPhase.SHIFTING)
        elif workflow.now() - last_progress >= driver.ready_timeout():
            await _restore(driver, moving, None)
            await driver.coordinate(CoordinationPhase.FAILED, "no rolling progress within the ready timeout; "
                                                              "restored the old revision")
            return None
        await driver.wait(driver.poll_seconds(workflow.now() - last_progress))
    for target in moving:
        await _route(driver, target, 100)
        await workflow.execute_activity_method(
            ServingActivities.delete_revision,
            RevisionKey(isvc=driver.isvc, component=target.component, revision=target.stable_revision), **options.KUBE)
    await driver.coordinate(CoordinationPhase.IDLE)
    return RolloutRunOutcome.COMPLETED


async def _route(driver: Driver, target: ComponentTarget, weight: int) -> None:
    # A backend at 0% is left out: with no surge the new revision has no Service yet when the
    # first split is programmed, and set_traffic refuses a backend without one.
    weights = [TrafficWeight(revision=target.revision, weight=weight)] if weight > 0 else []
    if weight < 100:
        weights.insert(0, TrafficWeight(revision=target.stable_revision, weight=100 - weight))
    await set_weights(driver.isvc, target.component, weights)
    driver.record_traffic(target.component, weights)


async def _restore(driver: Driver, moving: list[ComponentTarget],
                   outcome: RolloutRunOutcome | None) -> RolloutRunOutcome | None:
    """Scale the old revision back to desired, wait for it (bounded), route to it, drop the new."""
    await driver.coordinate(CoordinationPhase.ROLLING_BACK)
    for target in moving:
        await scale_revision(driver.isvc, target.component, target.stable_revision, target.desired_replicas)
    since = workflow.now()
    while workflow.now() - since < driver.ready_timeout():
        if await all_ready(driver.isvc, moving, stable=True):
            break
        await workflow.sleep(driver.poll_seconds(workflow.now() - since))
    for target in moving:
        await _route(driver, target, 0)
        await workflow.execute_activity_method(
            ServingActivities.delete_revision,
            RevisionKey(isvc=driver.isvc, component=target.component, revision=target.revision), **options.KUBE)
    if outcome is not None:
        await driver.coordinate(CoordinationPhase.IDLE, f"run closed: {outcome.value}")
    return outcome
