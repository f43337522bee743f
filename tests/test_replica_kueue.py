"""Kueue admission's pure parts (rendering/kueue.py): what a gang's pods carry to be one Kueue
pod group, why a Workload holds its pods (Kueue's own words, matched to pods by ownerReference), the
reading of a pod's queue, and the engine's side of it: the Waiting token, the FailedScale condition
and the once-per-operation announcement (workflows/replica/operations.py, status.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from servingops.activities.replica import pods
from servingops.activities.replica.observe import pod_view
from servingops.activities.replica.types import PodView
from servingops.api_models.ome.enums import InstanceOperationType
from servingops.api_models.ome.instance_status import InstanceOperation, OMENativeInstanceStatus
from servingops.api_models.ome.replica import Runner
from servingops.rendering import kueue
from servingops.workflows.replica import status
from servingops.workflows.replica.instances import InstanceView
from servingops.workflows.replica.operations import admission_wait, announce_admission

pytestmark = pytest.mark.unit

OWNER = pods.Owner(name="chat-engine", namespace="team", uid="uid-1")


def _template(queue: str | None) -> dict[str, Any]:
    labels = {"app": "chat", **({kueue.QUEUE_LABEL: queue} if queue else {})}
    return {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "main", "image": "r.invalid/e:v1"}]}}


def _render(leader_queue: str | None, worker_queue: str | None = None, *, incarnation: int = 0,
            base: str = "chat-engine") -> list[dict[str, Any]]:
    revision = pods.RevisionData(name="chat-engine-abc", runners=[
        Runner(name="leader", size=1, template=_template(leader_queue)),
        Runner(name="worker", size=2, template=_template(worker_queue))])
    return pods.render_instance(OWNER, "engine", base, revision, pods.InstanceKey(4, incarnation=incarnation),
                                pods.InstancePlacement())


def test_a_queued_gang_is_one_pod_group_per_incarnation() -> None:
    rendered = _render("serving", incarnation=3)
    assert [p["metadata"]["name"] for p in rendered] == ["chat-engine-4", "chat-engine-4-w1", "chat-engine-4-w2"]
    for pod in rendered:
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        assert labels[kueue.QUEUE_LABEL] == "serving", "every pod of the gang goes to the leader's queue"
        assert labels[kueue.GROUP_NAME_LABEL] == "chat-engine-4-i3"
        assert annotations[kueue.GROUP_TOTAL_ANNOTATION] == "3"
        assert annotations[kueue.GROUP_SERVING_ANNOTATION] == "true"


def test_without_a_queue_nothing_of_kueue_is_added() -> None:
    for pod in _render(None):
        assert not any(key.startswith("kueue.x-k8s.io/") for key in pod["metadata"]["labels"])
        assert not any(key.startswith("kueue.x-k8s.io/") for key in pod["metadata"]["annotations"])


def test_a_single_pod_keeps_its_template_queue_and_is_no_group() -> None:
    revision = pods.RevisionData(name="r", runners=[Runner(name="default", size=1, template=_template("serving"))])
    [pod] = pods.render_instance(OWNER, "engine", "chat-engine", revision, pods.InstanceKey(0),
                                 pods.InstancePlacement())
    assert pod["metadata"]["labels"][kueue.QUEUE_LABEL] == "serving"
    assert kueue.GROUP_NAME_LABEL not in pod["metadata"]["labels"]


def test_a_long_group_name_fits_a_label_value_and_stays_distinct() -> None:
    base = "a" * 60
    first = _render("q", base=base)[0]["metadata"]["labels"][kueue.GROUP_NAME_LABEL]
    second = _render("q", base=base, incarnation=1)[0]["metadata"]["labels"][kueue.GROUP_NAME_LABEL]
    assert len(first) <= 63 and len(second) <= 63 and first != second
    assert kueue.group_name("short-0", 2) == "short-0-i2"


def _workload(name: str, owners: list[str], *conditions: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "ownerReferences": [{"kind": "Pod", "name": o, "uid": f"uid-{o}"}
                                                           for o in owners]},
            "spec": {"queueName": "serving"}, "status": {"conditions": list(conditions)}}


def test_why_kueue_holds_a_pod_is_its_workloads_refusal() -> None:
    pending = _workload("pod-a-1f2e3", ["a"], {"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                              "message": "couldn't assign flavors to pod set main: insufficient "
                                                         "unused quota for cpu in flavor default, 1 more needed"})
    group = _workload("g-0-i0", ["g-0", "g-0-w1"], {"type": "QuotaReserved", "status": "True", "message": "ok"},
                      {"type": "Admitted", "status": "False", "message": "waiting for admission checks"})
    admitted = _workload("pod-b-9", ["b"], {"type": "QuotaReserved", "status": "True"},
                         {"type": "Admitted", "status": "True", "message": "The workload is admitted"})
    untried = _workload("pod-c-9", ["c"])
    holds = kueue.holds_by_pod([pending, group, admitted, untried])
    assert holds == {
        "uid-a": "Workload pod-a-1f2e3: couldn't assign flavors to pod set main: insufficient unused quota for cpu "
                 "in flavor default, 1 more needed",
        "uid-g-0": "Workload g-0-i0: waiting for admission checks",
        "uid-g-0-w1": "Workload g-0-i0: waiting for admission checks",
    }


def test_observe_reads_the_queue_of_a_gated_pod() -> None:
    pod = {"metadata": {"name": "chat-engine-0", "uid": "u", "labels": {"ome.io/instance": "0",
                                                                       kueue.QUEUE_LABEL: "serving"}},
           "spec": {"schedulingGates": [{"name": kueue.ADMISSION_GATE}]}, "status": {"phase": "Pending"}}
    view = pod_view(pod)
    assert view is not None and view.gated and view.queue == "serving" and view.admission is None


def _pod(name: str, *, gated: bool, queue: str | None, admission: str | None = None) -> PodView:
    return PodView(name=name, uid=name, index=2, gated=gated, queue=queue, admission=admission)


def _row(waiting: str | None, op_id: str = "op-1", announced: list[str] | None = None) -> OMENativeInstanceStatus:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    operation = InstanceOperation(id=op_id, type=InstanceOperationType.CREATE, step="WaitReady", started_at=now,
                                  waiting=waiting)
    return OMENativeInstanceStatus(index=2, operation=operation, announced=announced)


def test_the_waiting_token_names_kueue_only_for_pods_that_name_a_queue() -> None:
    assert admission_wait(InstanceView(2, [_pod("p", gated=True, queue="serving")])) == kueue.KUEUE_PENDING
    assert admission_wait(InstanceView(2, [_pod("p", gated=True, queue=None)])) == kueue.ADMISSION_GATED


def test_kueue_is_announced_once_per_operation_with_its_reason() -> None:
    said = "Workload pod-x: couldn't assign flavors to pod set main: insufficient unused quota"
    view = InstanceView(2, [_pod("p", gated=True, queue="serving", admission=said)])
    row = _row(kueue.KUEUE_PENDING, announced=["KueuePending@older-op", "OtherReason@op-1"])
    assert announce_admission(row, view) == f"Instance 2 waits for Kueue admission: {said}"
    assert row.announced == ["OtherReason@op-1", "KueuePending@op-1"], "an earlier operation's stamp goes"
    assert announce_admission(row, view) is None, "once per operation"
    untried = InstanceView(2, [_pod("p", gated=True, queue="serving")])
    assert announce_admission(_row(kueue.KUEUE_PENDING), untried) is None, "nothing until Kueue gives a reason"
    done = _row(None)
    done.operation = None
    done.announced = ["KueuePending@op-1"]
    assert announce_admission(done, view) is None and done.announced is None


def test_failed_scale_says_which_instances_kueue_holds_and_why() -> None:
    said = "Workload pod-x: couldn't assign flavors to pod set main: insufficient unused quota"
    views = {2: InstanceView(2, [_pod("p", gated=True, queue="serving", admission=said)]),
             5: InstanceView(5, [PodView(name="q", uid="q", index=5, gated=True, queue="serving")])}
    rows = [_row(kueue.KUEUE_PENDING), _row(kueue.KUEUE_PENDING).model_copy(update={"index": 5})]
    holds = status.kueue_holds(rows, views)
    assert holds == {2: said, 5: "queued in LocalQueue serving, not admitted yet"}
    condition = status._failed_scale(status.Problems(), holds)
    assert (condition.status, condition.reason) == ("True", "KueuePending")
    assert condition.message == f"Instance(s) 2, 5 wait for Kueue admission; Instance 2: {said}"
    quota = status._failed_scale(status.Problems(refused="exceeded quota: pods"), holds)
    assert (quota.reason, quota.message) == ("QuotaExceeded", "exceeded quota: pods"), "a refused create comes first"
    assert status._failed_scale(status.Problems(), {}).status == "False"
