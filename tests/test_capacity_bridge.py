"""What the bridge makes of AcceleratorQuota events (crd_bridge/routes.py, pure): every node starts its
tree workflow (AcceleratorQuotaWorkflow); only a root (no spec.parentRef) also starts its capacity report;
a root that gains a parent is told once; a leaf that becomes the root starts one; deletion is always
delivered to both."""

from __future__ import annotations

from typing import Any

import pytest

from servingops.api_models.contract import ObjectEvent, Signal, WorkflowType
from servingops.crd_bridge.routes import DEFAULT_KINDS, ROUTES, plan

pytestmark = pytest.mark.unit

QUOTA = ROUTES["AcceleratorQuota"]


def quota(parent: str | None = None, generation: int = 1, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "fleet", "uid": "u1", "generation": generation, "resourceVersion": str(generation)}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    spec: dict[str, Any] = {"role": "Cohort"}
    if parent:
        spec["parentRef"] = {"name": parent}
    return {"metadata": meta, "spec": spec}


def test_the_route_is_followed_by_default_and_cluster_scoped() -> None:
    assert "AcceleratorQuota" in DEFAULT_KINDS
    assert (QUOTA.group, QUOTA.version, QUOTA.plural, QUOTA.namespaced) == ("ome.io", "v1beta1",
                                                                            "acceleratorquotas", False)


def capacity(dispatches: list[Any]) -> list[Any]:
    return [d for d in dispatches if d.workflow_type == WorkflowType.ACCELERATOR_CAPACITY]


def test_every_node_starts_its_tree_workflow() -> None:
    for obj in (quota(), quota(parent="fleet-root")):
        [tree] = [d for d in plan(QUOTA, obj, None).dispatches if d.workflow_type == WorkflowType.ACCELERATOR_QUOTA]
        assert tree.workflow_id == "acceleratorquota/fleet/u1" and tree.signal == Signal.OBJECT_CHANGED
    [tree] = [d for d in plan(QUOTA, quota(parent="p", deleting=True), None).dispatches
              if d.workflow_type == WorkflowType.ACCELERATOR_QUOTA]
    assert tree.signal == Signal.DELETE


def test_a_root_starts_its_report() -> None:
    [dispatch] = capacity(plan(QUOTA, quota(), None).dispatches)
    assert dispatch.workflow_type == WorkflowType.ACCELERATOR_CAPACITY
    assert dispatch.workflow_id == "capacity/fleet/u1"
    assert dispatch.signal == Signal.OBJECT_CHANGED
    assert dispatch.start_arg.ref.kind == "AcceleratorQuota" and dispatch.start_arg.ref.namespace is None


def test_a_node_with_a_parent_starts_nothing_until_it_becomes_the_root() -> None:
    first = plan(QUOTA, quota(parent="fleet-root"), None)
    assert capacity(first.dispatches) == []
    edited = plan(QUOTA, quota(parent="other", generation=2), first.fingerprint)
    assert capacity(edited.dispatches) == []
    promoted = plan(QUOTA, quota(generation=3), edited.fingerprint)
    [dispatch] = capacity(promoted.dispatches)
    assert dispatch.signal == Signal.OBJECT_CHANGED and dispatch.signal_arg.generation == 3


def test_a_root_that_gains_a_parent_is_told_once() -> None:
    root = plan(QUOTA, quota(), None)
    demoted = plan(QUOTA, quota(parent="p", generation=2), root.fingerprint)
    [dispatch] = capacity(demoted.dispatches)
    assert dispatch.signal_arg == ObjectEvent(uid="u1", generation=2, resource_version="2")
    assert capacity(plan(QUOTA, quota(parent="q", generation=3), demoted.fingerprint).dispatches) == []


def test_deletion_is_always_delivered() -> None:
    leaf = plan(QUOTA, quota(parent="p"), None)
    [dispatch] = capacity(plan(QUOTA, quota(parent="p", deleting=True), leaf.fingerprint).dispatches)
    assert dispatch.signal == Signal.DELETE
    gone = plan(QUOTA, quota(), plan(QUOTA, quota(), None).fingerprint, gone=True).dispatches
    assert [d.signal for d in gone] == [Signal.DELETE, Signal.DELETE]
    assert {d.workflow_type for d in gone} == {WorkflowType.ACCELERATOR_QUOTA, WorkflowType.ACCELERATOR_CAPACITY}


def test_other_routes_are_unchanged_by_the_predicate() -> None:
    model = {"metadata": {"name": "m", "uid": "u", "generation": 1, "resourceVersion": "1", "namespace": "n"}}
    assert len(plan(ROUTES["Model"], model, None).dispatches) == 1
