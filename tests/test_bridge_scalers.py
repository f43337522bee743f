"""The bridge wakes the InferenceService workflow when an HPA of one of its components moves what the
service mirrors of it (Owns(&HorizontalPodAutoscaler{})): status.components[c].autoscaler follows the HPA
controller within seconds instead of the service's next periodic look.

- the mapping (crd_bridge/scaler_events.py): which service workflow an HPA event wakes (ours by its owner,
  KEDA's by the labels it copies from our ScaledObject), and which events are no news;
- the scaler lane (crd_bridge/pod_signals.py, lane SCALERS) with a fake sender: replica-changed, counted apart;
- the bridge's rights: list and watch HPAs, nothing else (read from the code, and on the real apiserver as
  the chart's bridge identity);
- the watch (crd_bridge/scaler_watch.py) against the session's apiserver: an HPA's status written, then the
  HPA deleted, each wakes its service; a relist after the watch was down finds a vanished HPA.
End to end (bridge and worker as processes, KEDA's real HPA on a RawDeployment engine) in
tests/test_keda_service_e2e.py.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.identities import Identities
from servingops.api_models import contract
from servingops.crd_bridge.metrics import BridgeMetrics
from servingops.crd_bridge.pod_signals import SCALERS, WakeSignaller
from servingops.crd_bridge.scaler_events import (
    LABEL_SELECTOR,
    ScalerChange,
    ScalerState,
    fingerprint,
    scaler_change,
    service_workflow_of,
)
from servingops.crd_bridge.scaler_watch import ScalerWatcher
from testkit.waiting import wait_until
from tests import rbac_calls
from tests.crd_helpers import new_namespace
from tests.fixtures.kube import api_as

ISVC_UID = "5b1f7e2a-0000-4000-8000-000000000001"
WORKFLOW_ID = f"isvc/team/chat/{ISVC_UID}"


def _ours(**over: Any) -> dict[str, Any]:
    """The HPA the worker renders for component engine of service `chat` (activities/serving/autoscaler.py),
    as the apiserver serves it once the HPA controller has synced it."""
    hpa: dict[str, Any] = {
        "metadata": {
            "name": "chat-engine", "namespace": "team", "uid": "hpa-1", "resourceVersion": "10",
            "labels": {"app.kubernetes.io/name": "chat", "app.kubernetes.io/component": "engine",
                       "app.kubernetes.io/managed-by": "servingops", "ome.io/inferenceservice-uid": ISVC_UID},
            "ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "name": "chat",
                                 "uid": ISVC_UID, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat-engine-rev-1"},
                 "minReplicas": 1, "maxReplicas": 4},
        "status": {
            "currentReplicas": 1, "desiredReplicas": 1,
            "currentMetrics": [{"type": "External", "external": {"current": {"averageValue": "1"}}}],
            "conditions": [
                {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale",
                 "lastTransitionTime": "2026-12-07T10:00:00Z", "message": "recommended size matches"},
                {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound",
                 "lastTransitionTime": "2026-12-07T10:00:00Z", "message": "the HPA was able to compute"},
            ],
        },
    }
    for path, value in over.items():
        *parents, last = path.split(".")
        node = hpa
        for part in parents:
            node = node[part]
        node[last] = value
    return hpa


def _kedas() -> dict[str, Any]:
    """The HPA KEDA keeps for our ScaledObject: KEDA's own labels, then the ScaledObject's copied over them;
    its controller is the ScaledObject, not the service."""
    hpa = _ours()
    hpa["metadata"]["name"] = "keda-hpa-scaledobject-chat-engine"
    hpa["metadata"]["labels"] = {"app.kubernetes.io/version": "2.21.0",
                                 "app.kubernetes.io/part-of": "scaledobject-chat-engine",
                                 **_ours()["metadata"]["labels"]}
    hpa["metadata"]["ownerReferences"] = [{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                                           "name": "scaledobject-chat-engine", "uid": "so-1", "controller": True}]
    return hpa


def _seen(hpa: dict[str, Any]) -> ScalerState:
    change = scaler_change(hpa, None, gone=False)
    assert change.state is not None
    return change.state


# -- the mapping -----------------------------------------------------------------------------------


@pytest.mark.unit
def test_our_hpa_and_kedas_map_to_the_service_workflow() -> None:
    assert contract.inference_service_workflow_id("team", "chat", ISVC_UID) == WORKFLOW_ID
    for hpa in (_ours(), _kedas()):
        assert service_workflow_of(hpa) == WORKFLOW_ID
        change = scaler_change(hpa, None, gone=False)
        assert change == ScalerChange(ScalerState(WORKFLOW_ID, fingerprint(hpa)), (WORKFLOW_ID,))
    # Our HPA from before the uid label: its owner reference says whose it is.
    unlabelled = _ours()
    del unlabelled["metadata"]["labels"]["ome.io/inferenceservice-uid"]
    assert service_workflow_of(unlabelled) == WORKFLOW_ID


@pytest.mark.unit
@pytest.mark.parametrize("edit", [
    lambda h: h["metadata"].update(ownerReferences=[], labels={}),
    lambda h: h["metadata"].update(ownerReferences=[]) or h["metadata"]["labels"].pop("ome.io/inferenceservice-uid"),
    lambda h: h["metadata"].update(ownerReferences=[]) or h["metadata"]["labels"].update(
        {"app.kubernetes.io/managed-by": "someone-else"}),
    lambda h: h["metadata"].update(ownerReferences=[{"apiVersion": "example.com/v1", "kind": "InferenceService",
                                                     "name": "chat", "uid": ISVC_UID, "controller": True}], labels={}),
    lambda h: h["metadata"].update(ownerReferences=[{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                                                     "name": "chat", "uid": ISVC_UID}], labels={}),
], ids=["no-owner-no-labels", "no-uid-label", "managed-by-another", "other-group", "not-controller"])
def test_an_hpa_of_no_service_wakes_nobody(edit: Callable[[dict[str, Any]], Any]) -> None:
    hpa = _ours()
    edit(hpa)
    assert service_workflow_of(hpa) is None
    assert scaler_change(hpa, None, gone=False) == ScalerChange(None, ())
    assert scaler_change(hpa, None, gone=True).wake == ()


NO_NEWS: dict[str, Callable[[dict[str, Any]], None]] = {
    "resourceVersion": lambda h: h["metadata"].update(resourceVersion="11"),
    "managedFields": lambda h: h["metadata"].update(managedFields=[{"manager": "kube-controller-manager"}]),
    "current-metrics": lambda h: h["status"].update(currentMetrics=[
        {"type": "External", "external": {"current": {"averageValue": "3"}}}]),
    "condition-message": lambda h: h["status"]["conditions"][0].update(message="recommended size 1"),
    "condition-order": lambda h: h["status"]["conditions"].reverse(),
    "spec-max": lambda h: h["spec"].update(maxReplicas=5),
}
NEWS: dict[str, Callable[[dict[str, Any]], None]] = {
    "desired": lambda h: h["status"].update(desiredReplicas=4),
    "current": lambda h: h["status"].update(currentReplicas=4),
    "last-scale": lambda h: h["status"].update(lastScaleTime="2026-12-07T10:01:00Z"),
    "condition-status": lambda h: h["status"]["conditions"][1].update(status="False", reason="FailedGetExternalMetric"),
    "condition-added": lambda h: h["status"]["conditions"].append(
        {"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas"}),
    "recreated": lambda h: h["metadata"].update(uid="hpa-2"),
}


@pytest.mark.unit
@pytest.mark.parametrize("edit", NO_NEWS.values(), ids=NO_NEWS.keys())
def test_what_the_mirror_does_not_show_is_no_news(edit: Callable[[dict[str, Any]], None]) -> None:
    before = _seen(_ours())
    after = _ours()
    edit(after)
    assert scaler_change(after, before, gone=False) == ScalerChange(before, ())


@pytest.mark.unit
@pytest.mark.parametrize("edit", NEWS.values(), ids=NEWS.keys())
def test_what_the_mirror_shows_wakes_the_service(edit: Callable[[dict[str, Any]], None]) -> None:
    before = _seen(_ours())
    after = _ours()
    edit(after)
    change = scaler_change(after, before, gone=False)
    assert change.wake == (WORKFLOW_ID,)
    assert change.state is not None and change.state.fingerprint != before.fingerprint
    assert scaler_change(copy.deepcopy(after), change.state, gone=False).wake == (), "remembered"


@pytest.mark.unit
def test_a_deleted_or_vanished_hpa_wakes_its_service() -> None:
    before = _seen(_kedas())
    assert scaler_change(_kedas(), before, gone=True) == ScalerChange(None, (WORKFLOW_ID,))
    stand_in = {"metadata": {"namespace": "team", "name": "keda-hpa-scaledobject-chat-engine"}}
    assert scaler_change(stand_in, before, gone=True).wake == (WORKFLOW_ID,), "the relist's stand-in"
    assert scaler_change(stand_in, None, gone=True).wake == (), "never seen, nobody to tell"


@pytest.mark.unit
def test_an_hpa_that_changes_hands_wakes_the_service_it_left() -> None:
    before = _seen(_ours())
    other = "7e57ab1e-0000-4000-8000-000000000002"
    moved = _ours(**{"metadata.ownerReferences": [{"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
                                                   "name": "chat", "uid": other, "controller": True}]})
    assert scaler_change(moved, before, gone=False).wake == (WORKFLOW_ID, f"isvc/team/chat/{other}")


# -- the scaler lane, with a fake sender -----------------------------------------------------------


def _sample(metrics: BridgeMetrics, name: str) -> float:
    for line in metrics.render().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.unit
async def test_the_scaler_lane_sends_replica_changed_to_the_service() -> None:
    metrics = BridgeMetrics()
    answers = {"running": [True, True], "gone": [False]}
    sent: list[str] = []

    async def send(workflow_id: str) -> bool:
        sent.append(workflow_id)
        return answers[workflow_id].pop(0)

    lane = WakeSignaller(send, metrics, asyncio.get_running_loop(), lane=SCALERS, clock=lambda: 0.0)
    for workflow_id in ("running", "running", "gone"):
        lane.mark(workflow_id)
    await asyncio.sleep(0)
    while len(sent) < 2 or lane._sending:
        await lane.step()
    assert sorted(sent) == ["gone", "running"]
    sent_total = ('servingops_bridge_signals_sent_total{workflow_type="InferenceServiceWorkflow",'
                  'signal="replica-changed"}')
    assert _sample(metrics, sent_total) == 1
    assert _sample(metrics, "servingops_bridge_scaler_signals_coalesced_total") == 1
    assert _sample(metrics, "servingops_bridge_scaler_signals_dropped_total") == 1
    assert _sample(metrics, "servingops_bridge_pod_signals_dropped_total") == 0, "each lane counts its own"


@pytest.mark.unit
def test_the_bridge_asks_only_to_list_and_watch_hpas() -> None:
    """The scaler watch is reached from the bridge's entry point and needs nothing on HPAs but list and watch
    (the chart grants exactly what the code calls: tests/test_identities.py)."""
    hpas = {triple for triple in rbac_calls.used("bridge") if triple[1].startswith("horizontalpodautoscalers")}
    assert hpas == {("autoscaling", "horizontalpodautoscalers", "list"),
                    ("autoscaling", "horizontalpodautoscalers", "watch")}


# -- the watch and the rights on the real apiserver ------------------------------------------------

EVENTUALLY = 60.0
"""A bound for a wait on the session's apiserver, not a claim about speed."""


def _hpa_manifest(name: str, isvc: str, isvc_uid: str) -> dict[str, Any]:
    """A labelled HPA on a Deployment that does not exist (the HPA controller only writes conditions)."""
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": isvc,
                                                  "app.kubernetes.io/managed-by": "servingops",
                                                  "ome.io/inferenceservice-uid": isvc_uid}},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{isvc}-absent"},
                     "minReplicas": 1, "maxReplicas": 4,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": 80}}}]}}


@pytest.mark.integration
def test_the_watch_wakes_the_service_on_status_and_deletion(kube_api: client.ApiClient,
                                                           chart_identities: Identities) -> None:
    """As the chart's bridge identity: counts written to a labelled HPA's status wake its service, so does its
    deletion; an HPA deleted while the watch is down is found by the relist."""
    ns = new_namespace(kube_api, "bridge-hpas")
    autoscaling = client.AutoscalingV2Api(kube_api)
    isvc_uid = str(uuid.uuid4())
    service = contract.inference_service_workflow_id(ns, "chat", isvc_uid)
    woken: list[tuple[str, int | None]] = []
    """(workflow id, the desiredReplicas the watch had just seen) per wake."""
    stop = threading.Event()
    with api_as(chart_identities.bridge) as bridge:
        watcher: ScalerWatcher

        def wake(workflow_id: str) -> None:
            state = watcher.states.get((ns, "chat-engine"))
            woken.append((workflow_id, state.fingerprint.desired if state else None))

        watcher = ScalerWatcher(bridge, wake, stop)
        watcher.start()
        try:
            assert watcher.synced.wait(EVENTUALLY)
            autoscaling.create_namespaced_horizontal_pod_autoscaler(ns, _hpa_manifest("chat-engine", "chat", isvc_uid))
            wait_until("the new HPA wakes its service", lambda: any(w == service for w, _ in woken),
                       timeout=EVENTUALLY)
            # The HPA controller may write the status too (its target is absent): the wake asserted is the one
            # that carried this write's count.
            autoscaling.patch_namespaced_horizontal_pod_autoscaler_status(
                "chat-engine", ns, {"status": {"desiredReplicas": 3, "currentReplicas": 2}})
            wait_until("the counts wake the service", lambda: (service, 3) in woken, timeout=EVENTUALLY)
            woken.clear()
            autoscaling.delete_namespaced_horizontal_pod_autoscaler("chat-engine", ns)
            wait_until("the deletion wakes the service", lambda: (service, None) in woken, timeout=EVENTUALLY)

            # Down, then relisted: an HPA that vanished meanwhile still wakes its service.
            autoscaling.create_namespaced_horizontal_pod_autoscaler(ns, _hpa_manifest("chat-decoder", "chat", isvc_uid))
            wait_until("seen", lambda: (ns, "chat-decoder") in watcher.states, timeout=EVENTUALLY)
        finally:
            stop.set()
            watcher.join(EVENTUALLY)
        autoscaling.delete_namespaced_horizontal_pod_autoscaler("chat-decoder", ns)
        woken.clear()
        watcher.relist()
        assert [w for w, _ in woken] == [service] and (ns, "chat-decoder") not in watcher.states

        # The bridge identity lists and watches HPAs and does nothing else with them.
        theirs = client.AutoscalingV2Api(bridge)
        autoscaling.create_namespaced_horizontal_pod_autoscaler(ns, _hpa_manifest("chat-router", "chat", isvc_uid))
        refusals: dict[str, Callable[[], Any]] = {
            "get": lambda: theirs.read_namespaced_horizontal_pod_autoscaler("chat-router", ns),
            "create": lambda: theirs.create_namespaced_horizontal_pod_autoscaler(
                ns, _hpa_manifest("other", "chat", isvc_uid)),
            "patch": lambda: theirs.patch_namespaced_horizontal_pod_autoscaler(
                "chat-router", ns, {"spec": {"maxReplicas": 9}}),
            "status": lambda: theirs.patch_namespaced_horizontal_pod_autoscaler_status(
                "chat-router", ns, {"status": {"desiredReplicas": 9}}),
            "delete": lambda: theirs.delete_namespaced_horizontal_pod_autoscaler("chat-router", ns),
        }
        for verb, call in refusals.items():
            with pytest.raises(ApiException) as refused:
                call()
            assert refused.value.status == 403, (verb, refused.value.body)
    assert LABEL_SELECTOR == "app.kubernetes.io/managed-by=servingops"
