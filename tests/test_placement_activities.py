"""The placement activities against the real control-plane apiserver, where no member is needed:
a source that is gone (or replaced by a same-named object) is an answer, never an error retried
forever, and a registration that names no usable Secret is said with its reason. A member's client
is kept between calls and rebuilt when its Secret rotates."""

from __future__ import annotations

import base64
import contextlib
import uuid
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.testing import ActivityEnvironment

from devstack import identities
from devstack.identities import Identities
from devstack.kube import apply_objects
from servingops.activities.placement.activities import PlacementActivities
from servingops.activities.placement.clients import SECRET_RECHECK, MemberClients
from servingops.activities.placement.member import MemberClient
from servingops.activities.placement.types import ApplyMemberInput, CapacityInput, MemberTarget, SourceInput
from servingops.activities.workload_cluster.kubeconfig import MemberAccess, api_client
from servingops.api_models.refs import ObjectRef
from servingops.rendering import multinode
from servingops.rendering.render import Unservable

pytestmark = pytest.mark.integration


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


def test_a_request_the_member_refuses_is_an_answer_not_an_endless_retry(
        kube_api: client.ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """A member that answers 422 (its CRD or an admission webhook refuses the derived service) answers
    Refused with the apiserver's message, which the workflow says on the source; before, the ApiException
    escaped and the activity was retried for ever. The member's answer is faked here (unit of the mapping):
    no real member of this suite refuses a valid service."""
    activities = PlacementActivities(kube_api, "servingops-system")

    @contextlib.contextmanager
    def member(_cluster: str) -> Iterator[client.ApiClient]:
        yield client.ApiClient()

    def refuse(*_args: object) -> None:
        raise ApiException(status=422, reason="Unprocessable Entity")

    monkeypatch.setattr(activities, "_member", member)
    monkeypatch.setattr(MemberClient, "service", refuse)
    target = MemberTarget(cluster="m1", namespace="default", name="chat", source_uid=str(uuid.uuid4()))
    deleted = ActivityEnvironment().run(activities.delete_member, target)
    assert (deleted.done, deleted.reason) == (False, "Refused")
    assert deleted.message == "m1 refused the request: 422 Unprocessable Entity"
    seen = ActivityEnvironment().run(activities.observe_member, target)
    assert (seen.reachable, seen.reason) == (False, "Refused")


def test_a_demand_that_does_not_render_is_an_answer_not_an_endless_retry(
        kube_api: client.ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """SplitByCapacity's read of a member: a resolved spec the renderer refuses (render.Unservable, a
    ValueError) answers DemandUnresolvable with the renderer's words; before, it escaped the activity
    and the MEMBER policy retried it for ever. The source and the member are faked (unit of the mapping)."""
    activities = PlacementActivities(kube_api, "servingops-system")

    @contextlib.contextmanager
    def member(_cluster: str) -> Iterator[client.ApiClient]:
        yield client.ApiClient()

    def unservable(*_args: object) -> list[object]:
        raise Unservable("spec.engine.worker.size", "is 0: a gang needs at least one worker")

    source = {"metadata": {"name": "chat", "namespace": "default", "uid": "u1"},
              "spec": {"engine": {"runner": {"name": "main", "image": "x"}}}}
    monkeypatch.setattr(activities.objects, "get", lambda _ref: source)
    monkeypatch.setattr(activities, "_member", member)
    monkeypatch.setattr(MemberClient, "accelerator_quotas", lambda _self: [{"metadata": {"name": "root"}, "spec": {}}])
    monkeypatch.setattr(multinode, "runner_templates", unservable)
    target = MemberTarget(cluster="m1", namespace="default", name="chat", source_uid="u1")
    ref = ObjectRef(group="ome.io", version="v1beta1", plural="inferenceservices", kind="InferenceService",
                    name="chat", namespace="default", uid="u1")
    reading = ActivityEnvironment().run(activities.read_capacity,
                                        CapacityInput(target=target, source=ref, queue="ome-placement"))
    assert (reading.sample, reading.reason) == (None, "DemandUnresolvable")
    assert reading.message and "a gang needs at least one worker" in reading.message


# -- the member client cache (activities/placement/clients.py) -----------------------------------------


class _Clock:
    """The cache's clock, moved by hand: the Secret recheck interval without waiting for it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _put_registration(api: client.ApiClient, name: str, kubeconfig: str) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": name, "namespace": identities.NAMESPACE},
              "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()}}
    registration = {"apiVersion": "ome.io/v1beta1", "kind": "WorkloadCluster", "metadata": {"name": name},
                    "spec": {"clusterSource": {"kubeConfig": {"secretRef": {
                        "name": name, "namespace": identities.NAMESPACE}}}}}
    apply_objects(api, [secret, registration])


@pytest.fixture
def self_member(kube_api: client.ApiClient, chart_identities: Identities) -> Iterator[tuple[str, str]]:
    """The control plane registered as its own member, reached as the chart's worker (a kubeconfig
    with an inline token): a real apiserver to count the cache's work against, no second cluster."""
    name = f"self-{uuid.uuid4().hex[:5]}"
    kubeconfig = chart_identities.worker.read_text()
    _put_registration(kube_api, name, kubeconfig)
    try:
        yield name, kubeconfig
    finally:
        with contextlib.suppress(ApiException):
            client.CustomObjectsApi(kube_api).delete_cluster_custom_object("ome.io", "v1beta1", "workloadclusters",
                                                                           name)
        with contextlib.suppress(ApiException):
            client.CoreV1Api(kube_api).delete_namespaced_secret(name, identities.NAMESPACE)


def test_a_member_client_is_reused_and_a_rotated_secret_is_picked_up(
        kube_api: client.ApiClient, self_member: tuple[str, str]) -> None:
    name, kubeconfig = self_member
    clock = _Clock()
    built: list[client.ApiClient] = []
    closed: list[client.ApiClient] = []

    def build(access: MemberAccess) -> client.ApiClient:
        api = api_client(access)
        built.append(api)
        close = api.close

        def counted_close() -> None:
            closed.append(api)
            close()  # type: ignore[no-untyped-call]

        api.close = counted_close  # type: ignore[method-assign]
        return api

    clients = MemberClients(build=build, clock=clock)
    activities = PlacementActivities(kube_api, identities.NAMESPACE, clients)
    env = ActivityEnvironment()
    target = MemberTarget(cluster=name, namespace="default", name=f"absent-{uuid.uuid4().hex[:5]}",
                          source_uid=str(uuid.uuid4()))

    for _ in range(10):
        seen = env.run(activities.observe_member, target)
        assert (seen.reachable, seen.exists) == (True, False), seen.message
    assert (clients.stats.secret_reads, len(built), clients.stats.reuses) == (1, 1, 9)

    # The Secret rotates to credentials the member refuses: within the recheck interval the client
    # built before is still used (the Secret is not read again)...
    refused = yaml.safe_load(kubeconfig)
    refused["users"][0]["user"]["token"] = "not-a-token"
    _put_registration(kube_api, name, yaml.safe_dump(refused))
    assert env.run(activities.observe_member, target).reachable is True
    assert (clients.stats.secret_reads, len(built)) == (1, 1)

    # ...and once it is over, the new Secret is read, a new client built (the old one closed), and the
    # member's 401 drops it.
    clock.now += SECRET_RECHECK + 1
    seen = env.run(activities.observe_member, target)
    assert (seen.reachable, seen.reason) == (False, "AccessRefused")
    assert (clients.stats.secret_reads, len(built)) == (2, 2) and closed == built
    assert clients.cached(name) is None, "refused credentials are not kept"

    # Put back: the next call reads the Secret at once (nothing cached) and works again.
    _put_registration(kube_api, name, kubeconfig)
    assert env.run(activities.observe_member, target).reachable is True
    assert (clients.stats.secret_reads, len(built)) == (3, 3) and built[2] not in closed

    # The WorkloadCluster changes (a new resourceVersion): the Secret is read again without waiting.
    client.CustomObjectsApi(kube_api).patch_cluster_custom_object(
        "ome.io", "v1beta1", "workloadclusters", name, {"metadata": {"annotations": {"test/touch": "1"}}})
    assert env.run(activities.observe_member, target).reachable is True
    assert clients.stats.secret_reads == 4

    # Deregistered: RegistrationNotFound, and its client closed.
    client.CustomObjectsApi(kube_api).delete_cluster_custom_object("ome.io", "v1beta1", "workloadclusters", name)
    seen = env.run(activities.observe_member, target)
    assert (seen.reachable, seen.reason) == (False, "RegistrationNotFound")
    assert clients.cached(name) is None and set(closed) == set(built)
