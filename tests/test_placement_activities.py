"""The placement activities against the real control-plane apiserver, where no member is needed:
a source that is gone (or replaced by a same-named object) is an answer, never an error retried
forever, and a registration that names no usable Secret is said with its reason."""

from __future__ import annotations

import uuid

from kubernetes import client
from temporalio.testing import ActivityEnvironment

from servingops.activities.placement.activities import PlacementActivities
from servingops.activities.placement.types import ApplyMemberInput, MemberTarget, SourceInput
from servingops.api_models.refs import ObjectRef


def _ref(name: str, uid: str) -> ObjectRef:
    return ObjectRef(group="ome.io", version="v1beta1", plural="inferenceservices", kind="InferenceService",
                     name=name, namespace="default", uid=uid)


def test_a_gone_source_is_an_answer_for_read_and_apply(kube_api: client.ApiClient) -> None:
    activities = PlacementActivities(kube_api, "servingops-system")
    env = ActivityEnvironment()
    gone = _ref(f"gone-{uuid.uuid4().hex[:5]}", str(uuid.uuid4()))
    assert env.run(activities.read_source, SourceInput(isvc=gone)) is None
    target = MemberTarget(cluster="nowhere", namespace="default", name=gone.name, source_uid=gone.uid or "")
    written = env.run(activities.apply_member, ApplyMemberInput(target=target, source=gone, execution={},
                                                                queue="ome-placement"))
    assert (written.done, written.reason) == (False, "SourceGone")


def test_a_member_without_a_registration_is_said_not_raised(kube_api: client.ApiClient) -> None:
    activities = PlacementActivities(kube_api, "servingops-system")
    target = MemberTarget(cluster=f"unregistered-{uuid.uuid4().hex[:5]}", namespace="default", name="chat",
                          source_uid=str(uuid.uuid4()))
    seen = ActivityEnvironment().run(activities.observe_member, target)
    assert (seen.reachable, seen.reason) == (False, "RegistrationNotFound")
    deleted = ActivityEnvironment().run(activities.delete_member, target)
    assert (deleted.done, deleted.reason) == (False, "RegistrationNotFound")
