"""The replica planner's named pieces (workflows/replica/planner.py) that the workflow tests reach only
through whole passes: the operation ids a pass hands out across its steps, the indexes a new Instance
may take, and what pause stops. Pure: no Temporal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from servingops.activities.replica.types import PodView
from servingops.api_models.ome.enums import (
    InstanceOperationType,
    InstanceReadyPolicy,
    InstanceRestartPolicy,
    OMENativeInstancePhase,
    PauseMode,
    UpdateStrategyType,
)
from servingops.api_models.ome.instance_status import OMENativeInstanceStatus
from servingops.workflows.replica import planner
from servingops.workflows.replica.instances import InstanceView
from servingops.workflows.replica.settings import Lifecycle

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)
REV = "engine-set-1"


def life(desired: int = 1, *, paused: bool = False, pause_mode: PauseMode = PauseMode.RECOVER) -> Lifecycle:
    return Lifecycle(desired=desired, pods_per_instance=1, gang=False, strategy=UpdateStrategyType.RECREATE_POD,
                     max_unavailable=None, max_surge=None, partition=0, restart_policy=InstanceRestartPolicy.NONE,
                     ready_policy=InstanceReadyPolicy.NONE, ready_timeout=timedelta(minutes=5),
                     min_ready=timedelta(0), paused=paused, pause_mode=pause_mode, history_limit=None,
                     mark_not_ready=True)


def ready_row(index: int) -> OMENativeInstanceStatus:
    return OMENativeInstanceStatus(index=index, incarnation=0, active_ordinal=0, phase=OMENativeInstancePhase.READY,
                                   running_revision=REV, target_revision=REV, ready_since=NOW - timedelta(hours=1))


def inputs(rows: dict[int, OMENativeInstanceStatus], views: dict[int, InstanceView], lifecycle: Lifecycle
           ) -> planner.Inputs:
    return planner.Inputs(rows=rows, views=views, life=lifecycle, target=REV, blocks={}, now=NOW, op_prefix="g1p.0")


def test_operation_ids_count_up_across_the_steps_of_one_pass() -> None:
    # Instance 0 lost its pod (repair opens a Restart), two more are wanted (scale opens two Creates):
    # one sequence for the pass, so each id is unique and a replayed pass names them the same.
    decided = planner.plan(inputs({0: ready_row(0)}, {}, life(desired=3)))
    ops = {index: row.operation for index, row in decided.rows.items()}
    assert {index: (op.type, op.id) for index, op in ops.items() if op is not None} == {
        0: (InstanceOperationType.RESTART, "g1p.0-0-1"),
        1: (InstanceOperationType.CREATE, "g1p.0-1-2"),
        2: (InstanceOperationType.CREATE, "g1p.0-2-3"),
    }
    assert decided.opened == 3


def test_a_new_instance_takes_the_lowest_index_no_row_pod_or_surge_holds() -> None:
    # Index 3 has only a pod being deleted (no row, nothing to adopt) and index 4 is a migration's
    # surge: neither name is free yet.
    leaving = PodView(name="r-3", uid="u-3", index=3, revision=REV, deleting=True)
    pending = planner._Planner(inputs({0: ready_row(0), 2: ready_row(2)}, {3: InstanceView(3, [leaving])},
                                      life(desired=6)))
    pending.surges = {4}
    assert pending._free_indexes(3) == [1, 5, 6]
    assert pending._free_indexes(0) == []


@pytest.mark.parametrize(("paused", "mode", "stopped"), [
    (False, PauseMode.RECOVER, set()),
    (True, PauseMode.RECOVER, {InstanceOperationType.CREATE, InstanceOperationType.UPDATE,
                               InstanceOperationType.MIGRATE}),
    (True, PauseMode.FREEZE, {InstanceOperationType.CREATE, InstanceOperationType.UPDATE,
                              InstanceOperationType.MIGRATE, InstanceOperationType.RESTART}),
])
def test_pause_stops_rollout_work_freeze_stops_repairs_and_scale_down_always_runs(
        paused: bool, mode: PauseMode, stopped: set[InstanceOperationType]) -> None:
    pending = planner._Planner(inputs({}, {}, life(paused=paused, pause_mode=mode)))
    assert {kind for kind in InstanceOperationType if pending._stopped_by_pause(kind)} == stopped
