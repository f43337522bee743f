"""The Kubernetes activities against the real apiserver, run in Temporal's activity environment."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from servingops.activities.kubernetes import EventNote, EventSpec, FinalizerChange, KubernetesActivities, StatusPatch
from servingops.api_models.deckhouse import Model
from servingops.api_models.refs import ConditionUpdate, ObjectRef
from servingops.clients.kube import events as kube_events
from tests.crd_helpers import create, manifest, new_namespace

pytestmark = pytest.mark.integration

FINALIZER = "ai.deckhouse.io/model-cleanup"


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "kube-activities")


@pytest.fixture
def acts(kube_api: client.ApiClient) -> KubernetesActivities:
    return KubernetesActivities(kube_api)


def _model(kube_api: client.ApiClient, ns: str) -> ObjectRef:
    obj = create(kube_api, Model, manifest(Model, {"source": {"url": "https://huggingface.co/a/b"}}), ns)
    return ObjectRef.of(Model, obj["metadata"]["name"], ns, obj["metadata"]["uid"])


def _run(fn: Any, *args: Any) -> Any:
    return ActivityEnvironment().run(fn, *args)


def test_status_and_conditions(kube_api: client.ApiClient, ns: str, acts: KubernetesActivities) -> None:
    ref = _model(kube_api, ns)
    pending = ConditionUpdate(type="Ready", status="False", reason="Pending", message="queued")
    assert _run(acts.patch_status, StatusPatch(ref=ref, status={"phase": "Pending"}, conditions=[pending],
                                               observed_generation=1))
    first = _run(acts.read_object, ref)["status"]
    assert first["phase"] == "Pending" and first["observedGeneration"] == 1
    time.sleep(1.1)  # lastTransitionTime has one-second resolution
    publishing = ConditionUpdate(type="Ready", status="False", reason="Publishing", message="10%")
    _run(acts.patch_status, StatusPatch(ref=ref, status={"phase": "Publishing", "progress": "10%"},
                                        conditions=[publishing]))
    second = _run(acts.read_object, ref)["status"]
    assert second["conditions"][0]["reason"] == "Publishing"
    assert second["conditions"][0]["lastTransitionTime"] == first["conditions"][0]["lastTransitionTime"]
    ready = ConditionUpdate(type="Ready", status="True", reason="Published", message="")
    _run(acts.patch_status, StatusPatch(ref=ref, status={"phase": "Ready", "progress": None}, conditions=[ready]))
    third = _run(acts.read_object, ref)["status"]
    assert third["conditions"][0]["lastTransitionTime"] != first["conditions"][0]["lastTransitionTime"]
    assert "progress" not in third


def test_status_write_survives_concurrent_writers(kube_api: client.ApiClient, ns: str,
                                                  acts: KubernetesActivities) -> None:
    ref = _model(kube_api, ns)
    keys = [f"k{i}" for i in range(8)]

    def write(key: str) -> None:
        conditions = [ConditionUpdate(type=key.upper(), status="True", reason="Set")]
        _run(acts.patch_status, StatusPatch(ref=ref, conditions=conditions))

    threads = [threading.Thread(target=write, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    types = {c["type"] for c in _run(acts.read_object, ref)["status"]["conditions"]}
    assert types == {k.upper() for k in keys}, "a conflicting write was lost"


def test_a_reused_name_is_not_written(kube_api: client.ApiClient, ns: str, acts: KubernetesActivities) -> None:
    ref = _model(kube_api, ns)
    stale = ref.model_copy(update={"uid": "00000000-0000-0000-0000-000000000000"})
    assert _run(acts.read_object, stale) is None
    assert _run(acts.patch_status, StatusPatch(ref=stale, status={"phase": "Failed"})) is False


def test_finalizer_holds_deletion_until_removed(kube_api: client.ApiClient, ns: str,
                                                acts: KubernetesActivities) -> None:
    ref = _model(kube_api, ns)
    change = FinalizerChange(ref=ref, finalizer=FINALIZER)
    assert _run(acts.ensure_finalizer, change) and _run(acts.ensure_finalizer, change)
    assert _run(acts.read_object, ref)["metadata"]["finalizers"] == [FINALIZER]
    client.CustomObjectsApi(kube_api).delete_namespaced_custom_object(
        ref.group, ref.version, ns, ref.plural, ref.name)
    held = _run(acts.read_object, ref)
    assert held is not None and held["metadata"].get("deletionTimestamp")
    _run(acts.remove_finalizer, change)
    assert _run(acts.read_object, ref) is None
    _run(acts.remove_finalizer, change)  # idempotent once gone


def test_warning_event(kube_api: client.ApiClient, ns: str, acts: KubernetesActivities) -> None:
    ref = _model(kube_api, ns)
    _run(acts.emit_event, EventSpec(ref=ref, type="Warning", reason="BadAnnotation", message="not JSON"))
    events = client.CoreV1Api(kube_api).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={ref.name}").items
    assert [(e.type, e.reason, e.message) for e in events] == [("Warning", "BadAnnotation", "not JSON")]


def _events(kube_api: client.ApiClient, ns: str, ref: ObjectRef) -> list[client.CoreV1Event]:
    return list(client.CoreV1Api(kube_api).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={ref.name}").items)


def test_status_write_records_its_event_notes(kube_api: client.ApiClient, ns: str, acts: KubernetesActivities) -> None:
    ref = _model(kube_api, ns)
    failed = ConditionUpdate(type="Ready", status="False", reason="SourceNotFound", message="no such repo")
    patch = StatusPatch(ref=ref, status={"phase": "Failed"}, conditions=[failed],
                        events=[EventNote(type="Warning", reason="SourceNotFound", message="no such repo")])
    assert _run(acts.patch_status, patch)
    [event] = _events(kube_api, ns, ref)
    assert (event.type, event.reason, event.message, event.count) == ("Warning", "SourceNotFound", "no such repo", 1)
    assert event.involved_object.uid == ref.uid
    # The same write again (a retried activity, a loop) is the same Event, counted, not a new object.
    assert _run(acts.patch_status, patch)
    [event] = _events(kube_api, ns, ref)
    assert event.count == 2 and event.last_timestamp >= event.first_timestamp
    # A gone object gets no Event.
    gone = ref.model_copy(update={"uid": "00000000-0000-0000-0000-000000000000"})
    assert not _run(acts.patch_status, patch.model_copy(update={"ref": gone}))


def test_events_are_rate_limited_per_object(kube_api: client.ApiClient, ns: str, acts: KubernetesActivities,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_events, "EVENT_BURST", 3)
    monkeypatch.setattr(kube_events, "EVENT_REFILL_SECONDS", 3600.0)
    flooded, other = _model(kube_api, ns), _model(kube_api, ns)
    for i in range(6):
        _run(acts.emit_event, EventSpec(ref=flooded, type="Warning", reason="Loop", message=f"attempt {i}"))
    _run(acts.emit_event, EventSpec(ref=other, reason="Fine", message="unaffected"))
    assert sorted(e.message for e in _events(kube_api, ns, flooded)) == ["attempt 0", "attempt 1", "attempt 2"]
    assert [e.reason for e in _events(kube_api, ns, other)] == ["Fine"]
