"""priorityTier stamped on a leaf's workloads (rendering/kueue.py `stamp_priority`): the seed's "a default, not a
partition: a workload declaring its own priority keeps it". The real Kueue's reading of the stamp (the
Workload's priorityClassName and priority) is tests/test_kueue_admission_e2e.py's."""

from __future__ import annotations

from typing import Any

import pytest

from servingops.rendering.kueue import PRIORITY_CLASS_LABEL, QUEUE_LABEL, stamp_priority

pytestmark = pytest.mark.unit


def _pod(name: str, labels: dict[str, str] | None = None, priority_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main"}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"metadata": {"name": name, "labels": {QUEUE_LABEL: "team-a", **(labels or {})}}, "spec": spec}


def _stamps(pods: list[dict[str, Any]]) -> list[str | None]:
    return [p["metadata"]["labels"].get(PRIORITY_CLASS_LABEL) for p in pods]


def test_every_pod_of_the_instance_gets_the_leafs_tier() -> None:
    assert _stamps(stamp_priority([_pod("leader"), _pod("worker-1")], "serving-high")) == ["serving-high"] * 2


def test_a_pod_naming_its_own_workload_priority_class_keeps_it() -> None:
    assert _stamps(stamp_priority([_pod("p", {PRIORITY_CLASS_LABEL: "batch-low"})], "serving-high")) == ["batch-low"]


def test_a_pod_naming_a_priority_class_is_not_stamped() -> None:
    assert _stamps(stamp_priority([_pod("p", priority_class="system-high")], "serving-high")) == [None]


def test_a_gang_where_one_pod_declares_its_priority_is_not_stamped_at_all() -> None:
    # One Workload for the whole group: stamping the others would give it two priorities.
    pods = [_pod("leader", {PRIORITY_CLASS_LABEL: "batch-low"}), _pod("worker-1")]
    assert _stamps(stamp_priority(pods, "serving-high")) == ["batch-low", None]


def test_no_tier_stamps_nothing() -> None:
    assert _stamps(stamp_priority([_pod("p")], None)) == [None]
    assert _stamps(stamp_priority([_pod("p")], "")) == [None]
