"""Pure logic of the bridge: what an event becomes, and the coalescing queue."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from servingops.api_models.contract import (
    IMPLEMENTED_WORKFLOWS,
    AnnotationEvent,
    MigrationStart,
    ObjectEvent,
    Signal,
    StartObject,
    Update,
    WorkflowType,
)
from servingops.api_models.contract.routing import DRAIN_ANNOTATION, GLOBAL_HOST_ANNOTATION
from servingops.api_models.ome.traffic_annotations import TrafficAnnotation
from servingops.api_models.refs import ObjectRef
from servingops.crd_bridge.dispatcher import Dispatcher
from servingops.crd_bridge.metrics import BridgeMetrics
from servingops.crd_bridge.queue import CoalescingQueue
from servingops.crd_bridge.routes import NOT_SERVED, ROUTES, not_served, plan
from servingops.crd_bridge.watcher import Observed
from servingops.rendering import backend_traffic_policy as btp

pytestmark = pytest.mark.unit

MODEL = ROUTES["Model"]
ISVC = ROUTES["InferenceService"]
RUNTIME = ROUTES["ServingRuntime"]
REQUEST_KEY = "ome.io/migration-request-v1-6f1c2a4e-9d2b-4c1e-8f00-0123456789ab"


def obj(name: str = "m", uid: str = "u1", generation: int = 1, rv: str = "10", namespace: str | None = "ns",
        annotations: dict[str, str] | None = None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid, "generation": generation, "resourceVersion": rv,
                            "annotations": annotations or {}}
    if namespace:
        meta["namespace"] = namespace
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return {"metadata": meta}


def test_first_sight_starts_the_workflow_with_object_changed() -> None:
    result = plan(MODEL, obj(), None)
    [dispatch] = result.dispatches
    assert dispatch.workflow_type == WorkflowType.MODEL
    assert dispatch.workflow_id == "model/ns/m/u1"
    assert dispatch.signal == Signal.OBJECT_CHANGED
    assert dispatch.signal_arg == ObjectEvent(uid="u1", generation=1, resource_version="10")


def test_cluster_scoped_ids_cannot_collide_with_a_namespace() -> None:
    result = plan(ROUTES["ClusterModel"], obj(namespace=None), None)
    assert result.dispatches[0].workflow_id == "model/_cluster/m/u1"


def test_same_generation_and_annotations_send_nothing() -> None:
    first = plan(MODEL, obj(), None)
    again = plan(MODEL, obj(rv="11", annotations={"unrelated": "x"}), first.fingerprint)
    assert again.dispatches == []


def test_new_generation_and_deletion_are_signalled() -> None:
    first = plan(MODEL, obj(), None)
    second = plan(MODEL, obj(generation=2, rv="12"), first.fingerprint)
    assert [d.signal for d in second.dispatches] == [Signal.OBJECT_CHANGED]
    third = plan(MODEL, obj(generation=2, rv="13", deleting=True), second.fingerprint)
    assert [(d.signal, d.signal_arg.deleting) for d in third.dispatches] == [(Signal.DELETE, True)]
    gone = plan(MODEL, obj(generation=2, rv="13", deleting=True), third.fingerprint, gone=True)
    assert gone.dispatches == []  # already told


def test_a_placed_service_is_also_sent_to_its_placement_workflow_until_placement_is_removed() -> None:
    placed = {**obj(name="chat"), "spec": {"placement": {"policy": "ClusterAffinity", "mode": "Single"}}}
    first = plan(ISVC, placed, None)
    assert [(d.workflow_type, d.workflow_id, d.signal) for d in first.dispatches] == [
        (WorkflowType.INFERENCE_SERVICE, "isvc/ns/chat/u1", Signal.OBJECT_CHANGED),
        (WorkflowType.PLACEMENT, "placement/ns/chat/u1", Signal.OBJECT_CHANGED),
        (WorkflowType.TRAFFIC_MAP, "trafficmap/ns/chat/u1", Signal.OBJECT_CHANGED)]
    # spec.placement removed: the placement workflow hears it (it withdraws the member copies), and so
    # does the routing workflow (the service is no longer routed) ...
    unplaced = {**obj(name="chat", generation=2, rv="11"), "spec": {}}
    second = plan(ISVC, unplaced, first.fingerprint)
    assert [d.workflow_type for d in second.dispatches] == [
        WorkflowType.INFERENCE_SERVICE, WorkflowType.PLACEMENT, WorkflowType.TRAFFIC_MAP]
    # ... and, no longer placed, it hears nothing more.
    third = plan(ISVC, {**obj(name="chat", generation=3, rv="12"), "spec": {}}, second.fingerprint)
    assert [d.workflow_type for d in third.dispatches] == [WorkflowType.INFERENCE_SERVICE]
    never = plan(ISVC, {**obj(name="plain"), "spec": {}}, None)
    assert [d.workflow_type for d in never.dispatches] == [WorkflowType.INFERENCE_SERVICE]
    deleted = plan(ISVC, {**obj(name="chat", rv="13", deleting=True), "spec": placed["spec"]}, first.fingerprint)
    assert [(d.workflow_type, d.signal) for d in deleted.dispatches] == [
        (WorkflowType.INFERENCE_SERVICE, Signal.DELETE), (WorkflowType.PLACEMENT, Signal.DELETE),
        (WorkflowType.TRAFFIC_MAP, Signal.DELETE)]


PLACED_SPEC = {"placement": {"policy": "ClusterAffinity", "mode": "Split"}}
TRAFFIC_MAP = ROUTES["TrafficMap"]


def placed(generation: int = 1, rv: str = "10", annotations: dict[str, str] | None = None,
           spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**obj(name="chat", generation=generation, rv=rv, annotations=annotations),
            "spec": PLACED_SPEC if spec is None else spec}


def test_a_placed_service_starts_its_routing_workflow_with_the_service_itself() -> None:
    """The routing workflow is a per-service workflow like the placement one: started with the
    InferenceService's own ref (its uid), its id named after the service's uid."""
    first = plan(ISVC, placed(), None)
    [routing] = [d for d in first.dispatches if d.workflow_type == WorkflowType.TRAFFIC_MAP]
    assert routing.workflow_id == "trafficmap/ns/chat/u1" and routing.signal == Signal.OBJECT_CHANGED
    assert routing.signal_arg == ObjectEvent(uid="u1", generation=1, resource_version="10")
    assert routing.start_arg == StartObject(ref=ObjectRef(
        group="ome.io", version="v1beta1", plural="inferenceservices", kind="InferenceService", name="chat",
        namespace="ns", uid="u1"))
    assert routing.running_only is False, "a durable signal-with-start, not a best-effort update"
    # A new generation reaches it too; an event that moved nothing does not.
    second = plan(ISVC, placed(generation=2, rv="11"), first.fingerprint)
    assert [(d.workflow_type, d.signal) for d in second.dispatches if d.workflow_type == WorkflowType.TRAFFIC_MAP] == [
        (WorkflowType.TRAFFIC_MAP, Signal.OBJECT_CHANGED)]
    assert plan(ISVC, placed(generation=2, rv="12"), second.fingerprint).dispatches == []


def test_an_unplaced_service_sends_nothing_to_a_routing_workflow() -> None:
    """Never placed: neither its events nor a routing annotation on it reach a routing workflow (and the
    annotation is not the service workflow's either: it reads no routing annotation)."""
    first = plan(ISVC, obj(name="plain"), None)
    assert [d.workflow_type for d in first.dispatches] == [WorkflowType.INFERENCE_SERVICE]
    drained = plan(ISVC, obj(name="plain", rv="11", annotations={DRAIN_ANNOTATION: '{"d1": {"cluster": "a"}}'}),
                   first.fingerprint)
    assert drained.dispatches == []
    edited = plan(ISVC, obj(name="plain", generation=2, rv="12", annotations={GLOBAL_HOST_ANNOTATION: "chat.example"}),
                  drained.fingerprint)
    assert [d.workflow_type for d in edited.dispatches] == [WorkflowType.INFERENCE_SERVICE]
    gone = plan(ISVC, obj(name="plain", generation=2, rv="13", deleting=True), edited.fingerprint)
    assert [d.workflow_type for d in gone.dispatches] == [WorkflowType.INFERENCE_SERVICE]


def test_a_routing_annotation_on_a_placed_service_goes_only_to_its_routing_workflow() -> None:
    first = plan(ISVC, placed(), None)
    drain = '{"d1": {"cluster": "gpu-b", "reason": "maintenance"}}'
    drained = plan(ISVC, placed(rv="11", annotations={DRAIN_ANNOTATION: drain}), first.fingerprint)
    [dispatch] = drained.dispatches
    assert (dispatch.workflow_type, dispatch.workflow_id, dispatch.signal, dispatch.signal_arg) == (
        WorkflowType.TRAFFIC_MAP, "trafficmap/ns/chat/u1", Signal.ROUTING_CHANGED, f"annotation {DRAIN_ANNOTATION}")
    assert dispatch.start_arg == StartObject(ref=ISVC.ref(placed()))
    # The same value again is no news; its removal is.
    assert plan(ISVC, placed(rv="12", annotations={DRAIN_ANNOTATION: drain}), drained.fingerprint).dispatches == []
    undrained = plan(ISVC, placed(rv="13"), drained.fingerprint)
    assert [(d.workflow_type, d.signal, d.signal_arg) for d in undrained.dispatches] == [
        (WorkflowType.TRAFFIC_MAP, Signal.ROUTING_CHANGED, f"annotation {DRAIN_ANNOTATION}")]
    # Both routing annotations and a rollout annotation in one event: each goes to its own workflow.
    both = plan(ISVC, placed(rv="14", annotations={GLOBAL_HOST_ANNOTATION: "chat.example.com",
                                                   DRAIN_ANNOTATION: drain, "ome.io/rollout-paused": "true"}),
                undrained.fingerprint)
    assert sorted((d.workflow_type.value, d.signal, d.signal_arg if d.signal == Signal.ROUTING_CHANGED
                   else d.signal_arg.name) for d in both.dispatches) == [
        ("InferenceServiceWorkflow", Signal.ANNOTATION, "ome.io/rollout-paused"),
        ("TrafficMapWorkflow", Signal.ROUTING_CHANGED, f"annotation {GLOBAL_HOST_ANNOTATION}"),
        ("TrafficMapWorkflow", Signal.ROUTING_CHANGED, f"annotation {DRAIN_ANNOTATION}")]
    # A deleting service: the delete is the news, not the annotation.
    deleting = plan(ISVC, {**placed(rv="15"), "metadata": {**placed(rv="15")["metadata"],
                                                           "deletionTimestamp": "2026-12-07T00:00:00Z"}},
                    both.fingerprint)
    assert {d.signal for d in deleting.dispatches} == {Signal.DELETE}


def traffic_map(generation: int = 1, rv: str = "20", deleting: bool = False, uid: str = "tm1",
                owners: list[dict[str, Any]] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A TrafficMap `chat` in ns, controlled by InferenceService chat (uid isvc-uid) unless `owners` says."""
    body = obj(name="chat", uid=uid, generation=generation, rv=rv, deleting=deleting)
    body["metadata"]["ownerReferences"] = owners if owners is not None else [
        {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "name": "chat", "uid": "isvc-uid",
         "controller": True, "blockOwnerDeletion": True}]
    body["spec"] = {"entries": []}
    body["status"] = status or {}
    return body


def test_a_traffic_map_edit_wakes_its_owners_routing_workflow() -> None:
    """The map is the routing workflow's own output: a new generation (a hand edit, or its own write) and
    its deletion wake the owner's routing workflow, started with the owner (its uid, not the map's)."""
    first = plan(TRAFFIC_MAP, traffic_map(), None)
    [dispatch] = first.dispatches
    assert (dispatch.workflow_type, dispatch.workflow_id, dispatch.signal) == (
        WorkflowType.TRAFFIC_MAP, "trafficmap/ns/chat/isvc-uid", Signal.ROUTING_CHANGED)
    assert dispatch.start_arg == StartObject(ref=ObjectRef(
        group="ome.io", version="v1beta1", plural="inferenceservices", kind="InferenceService", name="chat",
        namespace="ns", uid="isvc-uid"))
    assert isinstance(dispatch.signal_arg, str) and "generation 1" in dispatch.signal_arg
    edited = plan(TRAFFIC_MAP, traffic_map(generation=2, rv="21"), first.fingerprint)
    assert [(d.workflow_id, d.signal) for d in edited.dispatches] == [
        ("trafficmap/ns/chat/isvc-uid", Signal.ROUTING_CHANGED)]
    assert "generation 2" in edited.dispatches[0].signal_arg
    deleting = plan(TRAFFIC_MAP, traffic_map(generation=2, rv="22", deleting=True), edited.fingerprint)
    assert [(d.workflow_id, d.signal) for d in deleting.dispatches] == [
        ("trafficmap/ns/chat/isvc-uid", Signal.ROUTING_CHANGED)]
    assert "deleting" in deleting.dispatches[0].signal_arg
    assert plan(TRAFFIC_MAP, traffic_map(generation=2, rv="23", deleting=True), deleting.fingerprint,
                gone=True).dispatches == [], "already told"


def test_a_status_only_change_of_a_traffic_map_sends_nothing() -> None:
    first = plan(TRAFFIC_MAP, traffic_map(), None)
    written = plan(TRAFFIC_MAP, traffic_map(rv="21", status={"observedGeneration": 1, "conditions": [
        {"type": "Routable", "status": "True"}]}), first.fingerprint)
    assert written.dispatches == []
    annotated = traffic_map(rv="22")
    annotated["metadata"]["annotations"] = {DRAIN_ANNOTATION: "{}", "ome.io/rollout-promote": "x"}
    assert plan(TRAFFIC_MAP, annotated, written.fingerprint).dispatches == [], "a map's annotations are nobody's"


@pytest.mark.parametrize("owners", [
    pytest.param([], id="no-owner"),
    pytest.param([{"kind": "InferenceService", "name": "chat", "uid": "isvc-uid", "controller": False}],
                 id="owner-not-controller"),
    pytest.param([{"kind": "InferenceService", "name": "chat", "uid": "isvc-uid"}], id="controller-unset"),
    pytest.param([{"kind": "Deployment", "name": "chat", "uid": "d-uid", "controller": True}],
                 id="controller-of-another-kind"),
    pytest.param([{"kind": "InferenceService", "name": "chat", "controller": True}], id="controller-without-uid"),
])
def test_a_traffic_map_without_an_inference_service_controller_is_ignored(owners: list[dict[str, Any]]) -> None:
    first = plan(TRAFFIC_MAP, traffic_map(owners=owners), None)
    assert first.dispatches == []
    assert plan(TRAFFIC_MAP, traffic_map(generation=2, rv="21", owners=owners), first.fingerprint).dispatches == []
    assert plan(TRAFFIC_MAP, traffic_map(generation=2, rv="22", owners=owners, deleting=True),
                first.fingerprint).dispatches == []


def test_a_traffic_map_never_starts_a_workflow_of_its_own_uid() -> None:
    """A reused map name (a new uid) with the same owner still goes to the owner's workflow; a map now
    owned by a new InferenceService of the same name goes to that one's."""
    first = plan(TRAFFIC_MAP, traffic_map(), None)
    recreated = plan(TRAFFIC_MAP, traffic_map(uid="tm2"), first.fingerprint)
    assert [d.workflow_id for d in recreated.dispatches] == ["trafficmap/ns/chat/isvc-uid"]
    reowned = plan(TRAFFIC_MAP, traffic_map(uid="tm3", owners=[
        {"kind": "InferenceService", "name": "chat", "uid": "isvc-uid-2", "controller": True}]),
        recreated.fingerprint)
    assert [d.workflow_id for d in reowned.dispatches] == ["trafficmap/ns/chat/isvc-uid-2"]
    assert all("tm" not in d.workflow_id.rsplit("/", 1)[1] for d in first.dispatches + recreated.dispatches)


def test_a_reused_name_is_a_new_workflow() -> None:
    first = plan(MODEL, obj(uid="u1"), None)
    second = plan(MODEL, obj(uid="u2"), first.fingerprint)
    assert [d.workflow_id for d in second.dispatches] == ["model/ns/m/u2"]


def test_watched_annotations_become_annotation_signals() -> None:
    first = plan(ISVC, obj(name="svc"), None)
    promoted = plan(ISVC, obj(name="svc", rv="11", annotations={"ome.io/rollout-promote": "abc123"}),
                    first.fingerprint)
    [dispatch] = promoted.dispatches
    assert dispatch.workflow_id == "isvc/ns/svc/u1"
    assert dispatch.signal == Signal.ANNOTATION
    assert dispatch.signal_arg == AnnotationEvent(uid="u1", generation=1, resource_version="11",
                                                  name="ome.io/rollout-promote", value="abc123")
    removed = plan(ISVC, obj(name="svc", rv="12"), promoted.fingerprint)
    assert [d.signal_arg.value for d in removed.dispatches] == [None]
    assert plan(ISVC, obj(name="svc", rv="13"), removed.fingerprint).dispatches == []


TRAFFIC_EDITS = {TrafficAnnotation.RETRY_ATTEMPTS.value: "3", TrafficAnnotation.RETRY_ON.value: "5xx",
                 TrafficAnnotation.TIMEOUT_IDLE.value: "30s", "ome.io/btp.retry.numRetries": "2",
                 "ome.io/dr.trafficPolicy.tls.mode": "ISTIO_MUTUAL"}


@pytest.mark.parametrize("name", sorted(TRAFFIC_EDITS))
def test_a_traffic_annotation_edit_wakes_the_service_workflow_with_an_annotation_signal(name: str) -> None:
    """A traffic annotation moves no generation; its addition, new value and removal each reach the
    service's workflow as `annotation` (which keeps the BackendTrafficPolicy), and nothing else."""
    spec = {"engine": {}}
    first = plan(ISVC, {**obj(name="svc"), "spec": spec}, None)
    added = plan(ISVC, {**obj(name="svc", rv="11", annotations={name: TRAFFIC_EDITS[name]}), "spec": spec},
                 first.fingerprint)
    [dispatch] = added.dispatches
    assert (dispatch.workflow_type, dispatch.workflow_id, dispatch.signal, dispatch.running_only) == (
        WorkflowType.INFERENCE_SERVICE, "isvc/ns/svc/u1", Signal.ANNOTATION, False)
    assert dispatch.signal_arg == AnnotationEvent(uid="u1", generation=1, resource_version="11", name=name,
                                                  value=TRAFFIC_EDITS[name])
    assert plan(ISVC, {**obj(name="svc", rv="12", annotations={name: TRAFFIC_EDITS[name]}), "spec": spec},
                added.fingerprint).dispatches == []  # the same value again is no news
    edited = plan(ISVC, {**obj(name="svc", rv="13", annotations={name: "7"}), "spec": spec}, added.fingerprint)
    assert [(d.signal, d.signal_arg.value) for d in edited.dispatches] == [(Signal.ANNOTATION, "7")]
    removed = plan(ISVC, {**obj(name="svc", rv="14"), "spec": spec}, edited.fingerprint)
    assert [(d.signal, d.signal_arg.name, d.signal_arg.value) for d in removed.dispatches] == [
        (Signal.ANNOTATION, name, None)]


def test_a_traffic_annotation_on_a_placed_service_goes_to_the_service_workflow_not_routing() -> None:
    first = plan(ISVC, placed(), None)
    edited = plan(ISVC, placed(rv="11", annotations={TrafficAnnotation.TIMEOUT_TCP_CONNECT.value: "5s"}),
                  first.fingerprint)
    assert [(d.workflow_type, d.signal) for d in edited.dispatches] == [
        (WorkflowType.INFERENCE_SERVICE, Signal.ANNOTATION)]


def test_the_bridge_watches_exactly_the_annotations_the_backend_policy_reads() -> None:
    """One set: every annotation the rendering takes as traffic intent is news to the bridge, and an
    ome.io/* annotation outside it (or a look-alike) is not."""
    typed = {a.value: "1" for a in TrafficAnnotation}
    others = {"ome.io/btp-not-a-passthrough": "x", "ome.io/dr": "x", "ome.io/deploymentMode": "RawDeployment",
              "example.com/btp.retry": "1", "ome.io/retry": "1"}
    everything = {**typed, **TRAFFIC_EDITS, **others}
    declared = btp.intent(None, everything)
    assert declared is not None
    assert set(declared.annotations) == set(typed) | set(TRAFFIC_EDITS)
    first = plan(ISVC, obj(name="svc"), None)
    woken = plan(ISVC, obj(name="svc", rv="11", annotations=everything), first.fingerprint)
    assert {d.signal_arg.name for d in woken.dispatches if d.signal == Signal.ANNOTATION} == set(declared.annotations)
    assert plan(ISVC, obj(name="svc", rv="12", annotations={**everything, "ome.io/retry": "2"}),
                woken.fingerprint).dispatches == []


def test_rollout_annotations_also_go_straight_to_the_rollout_runs() -> None:
    """A rollout annotation reaches the service workflow (the durable signal-with-start) and, as a
    best-effort shortcut, every rollout run the spec can have: one per group index and one per
    component set (a component in no group rolls alone). Other annotations do not."""
    spec = {"engine": {}, "decoder": {}, "rollout": {"groups": [{"components": ["engine"]}]}}
    first = plan(ISVC, {**obj(name="svc"), "spec": spec}, None)
    promoted = plan(ISVC, {**obj(name="svc", rv="11", annotations={"ome.io/rollout-promote": "abc123"}),
                           "spec": spec}, first.fingerprint)
    event = AnnotationEvent(uid="u1", generation=1, resource_version="11", name="ome.io/rollout-promote",
                            value="abc123")
    durable, *shortcuts = promoted.dispatches
    assert (durable.workflow_id, durable.signal, durable.update, durable.running_only) == (
        "isvc/ns/svc/u1", Signal.ANNOTATION, None, False)
    assert [(d.workflow_type, d.workflow_id, d.signal, d.update, d.running_only) for d in shortcuts] == [
        (WorkflowType.ROLLOUT, f"rollout/ns/svc/u1/{key}", None, Update.RUN_ANNOTATION, True)
        for key in ("0", "engine", "decoder")]
    assert shortcuts[0].describe() == "the run-annotation update"
    assert all(d.signal_arg == event for d in promoted.dispatches)
    runtime = plan(RUNTIME, {**obj(name="rt", annotations={"ome.io/inherit-from": "base"}), "spec": spec},
                   plan(RUNTIME, obj(name="rt"), None).fingerprint)
    assert [d.running_only for d in runtime.dispatches] == [False]


def test_migration_request_starts_its_own_workflow_once() -> None:
    value = json.dumps({"schemaVersion": "v1", "component": "engine", "instance": 2, "from_node": "node-a",
                        "hint_target_nodes": ["node-b"], "reason": "maintenance",
                        "requested_at": "2026-11-29T00:00:00Z", "requested_by": "ops"})
    first = plan(ISVC, obj(name="svc", annotations={REQUEST_KEY: value}), None)
    migration = [d for d in first.dispatches if d.workflow_type == WorkflowType.MIGRATION]
    assert [d.workflow_id for d in migration] == ["migration/ns/svc-engine/6f1c2a4e-9d2b-4c1e-8f00-0123456789ab"]
    start = migration[0].start_arg
    assert isinstance(start, MigrationStart) and start.request.from_node == "node-a"
    assert start.annotation == REQUEST_KEY and migration[0].signal is None
    assert plan(ISVC, obj(name="svc", rv="11", annotations={REQUEST_KEY: value}), first.fingerprint).dispatches == []


class RecordingTemporal:
    """Stands in for the Temporal client: records the starts the dispatcher makes."""

    def __init__(self) -> None:
        self.starts: list[tuple[str, str, str | None]] = []

    async def start_workflow(self, workflow: str, arg: Any, *, id: str, start_signal: str | None = None,
                             **_options: Any) -> None:
        self.starts.append((str(workflow), id, start_signal))


async def test_a_dispatch_no_worker_serves_becomes_a_warning_and_starts_nothing() -> None:
    """Decided per dispatch: the same object's served signals go out, its migration request
    (a worker that does not register MigrationWorkflow: `served` without it) becomes a
    WorkflowNotServed Warning, once."""
    from kubernetes import client

    temporal = RecordingTemporal()
    dispatcher = Dispatcher(temporal, "q", CoalescingQueue(asyncio.get_running_loop()),  # type: ignore[arg-type]
                            client.ApiClient(), BridgeMetrics(),
                            served=IMPLEMENTED_WORKFLOWS - {WorkflowType.MIGRATION})
    warned: list[tuple[str, str]] = []
    dispatcher._warn = lambda _observed, reason, message: warned.append((reason, message))  # type: ignore[method-assign]
    value = json.dumps({"schemaVersion": "v1", "component": "engine", "instance": 0, "from_node": "node-a"})
    isvc = obj(name="svc", annotations={REQUEST_KEY: value, "ome.io/rollout-paused": "true"})
    observed = Observed(ISVC, isvc, False, 0.0)
    await dispatcher.handle(observed.key, observed)
    assert temporal.starts == [("InferenceServiceWorkflow", "isvc/ns/svc/u1", "object-changed"),
                               ("InferenceServiceWorkflow", "isvc/ns/svc/u1", "annotation")]
    [(reason, message)] = warned
    assert reason == NOT_SERVED == "WorkflowNotServed"
    assert message.startswith("no worker serves MigrationWorkflow: migration request "
                              "6f1c2a4e-9d2b-4c1e-8f00-0123456789ab was not started")
    # The request is remembered as handled: the next event of the object does not repeat it.
    again = Observed(ISVC, obj(name="svc", rv="11", annotations={REQUEST_KEY: value, "ome.io/rollout-paused": "true"}),
                     False, 0.0)
    await dispatcher.handle(again.key, again)
    assert len(temporal.starts) == 2 and len(warned) == 1


def test_not_served_names_the_workflow_type_and_what_was_not_started() -> None:
    [dispatch] = plan(MODEL, obj(), None).dispatches
    reason, message = not_served(dispatch)
    assert reason == "WorkflowNotServed"
    assert message.startswith("no worker serves ModelWorkflow: the object-changed signal was not started")


def test_bad_migration_requests_become_warnings() -> None:
    bad = {
        REQUEST_KEY: "not json",
        "ome.io/migration-request-v1-6f1c2a4e-9d2b-4c1e-8f00-0123456789ac": json.dumps({"schemaVersion": "v2"}),
        "ome.io/migration-request-v1-6f1c2a4e-9d2b-4c1e-8f00-0123456789ad": json.dumps({"schemaVersion": "v1"}),
        "ome.io/migration-request-v1-not-a-uuid": json.dumps({"schemaVersion": "v1"}),
    }
    result = plan(ISVC, obj(name="svc", annotations=bad), None)
    assert [d.workflow_type for d in result.dispatches] == [WorkflowType.INFERENCE_SERVICE]
    messages = " | ".join(message for _, message in result.warnings)
    assert {reason for reason, _ in result.warnings} == {"InvalidMigrationRequest"}
    assert len(result.warnings) == 4
    assert "value is not JSON" in messages and 'schemaVersion must be "v1"' in messages
    assert "component: Field required" in messages and "suffix must be a lowercase UUID" in messages


async def test_queue_coalesces_and_serialises_per_object() -> None:
    queue: CoalescingQueue[int] = CoalescingQueue(asyncio.get_running_loop(), maxsize=10)
    for version in range(5):
        queue.put("a", version)
    queue.put("b", 0)
    key, item = await queue.get()
    assert (key, item) == ("a", 4) and queue.coalesced == 4
    queue.put("a", 5)  # arrives while "a" is in flight: waits for done()
    assert await queue.get() == ("b", 0)
    queue.done("b")
    waiter = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0.05)
    assert not waiter.done()
    queue.done("a")
    assert await waiter == ("a", 5)


async def test_queue_blocks_producers_when_full_and_keeps_retries() -> None:
    queue: CoalescingQueue[int] = CoalescingQueue(asyncio.get_running_loop(), maxsize=2)
    queue.put("a", 1)
    queue.put("b", 1)
    assert queue.put("a", 2, timeout=0.01)  # replacing never blocks
    assert not queue.put("c", 1, timeout=0.05)  # a third object must wait
    released = threading.Event()
    producer = threading.Thread(target=lambda: (queue.put("c", 1), released.set()))
    producer.start()
    key, _ = await queue.get()
    await asyncio.to_thread(released.wait, 5)
    assert released.is_set()
    queue.done(key, retry=99)  # a failed dispatch comes back even though the queue is full
    seen = {}
    for _ in range(3):
        k, v = await queue.get()
        seen[k] = v
        queue.done(k)
    assert seen == {"a": 99, "b": 1, "c": 1}
    producer.join()


def test_the_bridge_follows_by_default_exactly_what_the_worker_serves() -> None:
    """An object of a kind whose workflow no worker registers would get a workflow that never
    runs; so the default kinds come from the same set the worker is held to here."""
    from servingops.crd_bridge.routes import DEFAULT_KINDS, ROUTES
    from servingops.workers.registry import workflows

    registered = {getattr(cls, "__temporal_workflow_definition").name for cls in workflows()}
    assert registered == {t.value for t in IMPLEMENTED_WORKFLOWS}
    assert set(DEFAULT_KINDS) == {"Model", "ClusterModel", "InferenceService", "InferenceReplica", "RolloutPolicy",
                                  "AutoscalerPolicy", "ServingRuntime",
                                  "ClusterServingRuntime", "BaseModel", "ClusterBaseModel", "FineTunedWeight",
                                  "WorkloadCluster", "AcceleratorQuota", "AcceleratorClass", "ModelCatalogSource",
                                  "TrafficMap", "BenchmarkJob"}
    assert all(ROUTES[kind].workflow_type.value in registered for kind in DEFAULT_KINDS)


def test_a_catalog_source_goes_to_its_own_workflow_and_is_served() -> None:
    route = ROUTES["ModelCatalogSource"]
    [dispatch] = plan(route, obj(name="hub", namespace=None), None).dispatches
    assert (dispatch.workflow_type, dispatch.workflow_id) == (WorkflowType.CATALOG, "catalog/hub/u1")
    assert dispatch.signal == Signal.OBJECT_CHANGED and WorkflowType.CATALOG in IMPLEMENTED_WORKFLOWS
    [gone] = plan(route, obj(name="hub", namespace=None, deleting=True), None).dispatches
    assert gone.signal == Signal.DELETE


def test_a_benchmark_job_starts_its_workflow_and_a_status_write_sends_nothing() -> None:
    route = ROUTES["BenchmarkJob"]
    first = plan(route, obj(name="bench"), None)
    [dispatch] = first.dispatches
    assert (dispatch.workflow_type, dispatch.workflow_id, dispatch.signal) == (
        WorkflowType.BENCHMARK_JOB, "benchmarkjob/ns/bench/u1", Signal.OBJECT_CHANGED)
    assert plan(route, obj(name="bench", rv="11"), first.fingerprint).dispatches == []
    [edited] = plan(route, obj(name="bench", generation=2, rv="12"), first.fingerprint).dispatches
    assert edited.signal_arg == ObjectEvent(uid="u1", generation=2, resource_version="12")
