"""The in-place update's rotation rule (workflows/replica/operations.py, the `in-place-rejoin` patch):
with markNotReadyDuringLifecycle, an Instance's pods stay out of rotation while a patch is still to
land, and the pass that finds them all patched lets them rejoin. Kept out on that pass (as before the
patch) they stayed out until the next resync, 5 minutes later, when the update also finished there:
tests/test_replica_e2e.py showed it on the real apiserver (ome.io/serving False on a Ready Instance,
the rollout held). The time-skipping tests did not, since the test server skips over the resync wait."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from servingops.activities.replica.types import PodView
from servingops.api_models.ome.enums import (
    InstanceOperationType,
    InstanceReadyPolicy,
    InstanceRestartPolicy,
    PauseMode,
    UpdateStrategyType,
)
from servingops.api_models.ome.instance_status import InstanceOperation, OMENativeInstanceStatus
from servingops.workflows.replica.commands import PatchInPlace
from servingops.workflows.replica.instances import InstanceView
from servingops.workflows.replica.operations import advance
from servingops.workflows.replica.settings import Lifecycle

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
OLD, NEW = "rev-old", "rev-new"


def life(mark_not_ready: bool) -> Lifecycle:
    return Lifecycle(desired=1, pods_per_instance=1, gang=False, strategy=UpdateStrategyType.IN_PLACE_IF_POSSIBLE,
                     max_unavailable=1, max_surge=None, partition=0, restart_policy=InstanceRestartPolicy.NONE,
                     ready_policy=InstanceReadyPolicy.ALL_POD_READY, ready_timeout=timedelta(minutes=5),
                     min_ready=timedelta(0), paused=False, pause_mode=PauseMode.RECOVER,
                     history_limit=None, mark_not_ready=mark_not_ready)


def at_patch_step() -> OMENativeInstanceStatus:
    op = InstanceOperation(id="op-1", type=InstanceOperationType.UPDATE, step="Patch", started_at=NOW,
                           last_progress_at=NOW, target_revision=NEW, reason="Update", retry_count=0,
                           strategy=UpdateStrategyType.IN_PLACE_IF_POSSIBLE)
    return OMENativeInstanceStatus(index=0, incarnation=0, running_revision=OLD, operation=op)


def pod(revision: str) -> PodView:
    ready_since = NOW - timedelta(minutes=1)
    return PodView(name="r-0", uid="u-0", index=0, revision=revision, phase="Running", scheduled=True,
                   containers_ready=True, ready=True, ready_since=ready_since, serving=False)


def test_a_pod_still_to_patch_stays_out_of_rotation() -> None:
    out = advance(at_patch_step(), InstanceView(0, [pod(OLD)]), life(mark_not_ready=True), NOW)
    assert out.draining == {"r-0"} and not out.rejoining
    assert out.commands == [PatchInPlace(index=0, pod="r-0", revision=NEW)]
    assert not out.done


def test_the_pass_that_finds_every_pod_patched_lets_them_rejoin_and_may_finish() -> None:
    out = advance(at_patch_step(), InstanceView(0, [pod(NEW)]), life(mark_not_ready=True), NOW)
    assert out.rejoining == {"r-0"}
    assert not out.draining, "kept draining, nothing would wake a pass to let the pod back in"
    assert out.done and out.row.operation is None and out.row.running_revision == NEW


def test_without_mark_not_ready_nothing_drains_or_rejoins() -> None:
    behind = advance(at_patch_step(), InstanceView(0, [pod(OLD)]), life(mark_not_ready=False), NOW)
    assert not behind.draining and not behind.rejoining
    patched = advance(at_patch_step(), InstanceView(0, [pod(NEW)]), life(mark_not_ready=False), NOW)
    assert not patched.draining and not patched.rejoining and patched.done
