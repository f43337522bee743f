"""`capacity.observe` and `capacity.write_status` against the session's real kube-apiserver, as the
chart's worker identity (so the RBAC they need is proven too).

The nodes here are plain Node objects created with their status (no kubelet, no kwok: their Ready
condition is what the test says for the few seconds the test takes), tainted NoSchedule so nothing
lands on them, and they advertise a resource name of their own so the session's kwok nodes do not
enter the numbers. The ResourceFlavors are Kueue's (kueue.x-k8s.io/v1beta2; the CRDs come with the
local cluster, the Kueue controller is not needed). Everything is removed afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from temporalio.testing import ActivityEnvironment

from devstack.identities import Identities
from servingops.activities.capacity.activities import CapacityActivities, _readable
from servingops.activities.capacity.types import ObserveInput, WriteInput
from servingops.api_models.ome import AcceleratorQuota
from servingops.api_models.ome.accelerator_quota import AcceleratorCapacityStatus
from servingops.api_models.refs import ObjectRef
from tests.crd_helpers import create, manifest
from tests.fixtures.kube import api_as
from tests.support.cleanup import ignore_404

KUEUE = ("kueue.x-k8s.io", "v1beta2")


@dataclass
class World:
    suffix: str
    resource: str
    other_resource: str
    root: dict[str, Any]
    leaf: dict[str, Any]
    flavors: dict[str, dict[str, Any]]

    def ref(self, obj: dict[str, Any], uid: str | None = None) -> ObjectRef:
        return ObjectRef.of(AcceleratorQuota, obj["metadata"]["name"], uid=uid or obj["metadata"]["uid"])


def _node(name: str, labels: dict[str, str], allocatable: dict[str, str], *, ready: bool,
          cordoned: bool = False) -> client.V1Node:
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1NodeSpec(unschedulable=cordoned or None, taints=[
            client.V1Taint(key="servingops.test/capacity", value="true", effect="NoSchedule")]),
        status=client.V1NodeStatus(capacity=allocatable, allocatable=allocatable, conditions=[
            client.V1NodeCondition(type="Ready", status="True" if ready else "False", reason="Test")]),
    )


def _flavor(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "/".join(KUEUE), "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": labels}}


@pytest.fixture
def world(kube_api: client.ApiClient) -> Iterator[World]:
    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    suffix = uuid.uuid4().hex[:6]
    resource, other = f"example.com/accel-{suffix}", f"example.com/other-{suffix}"
    tier, zone = f"capacity-test-{suffix}", "test.servingops.io/zone"
    a = {"test.servingops.io/tier": tier}
    nodes = [
        _node(f"cap-{suffix}-ready", a, {resource: "8", "cpu": "4"}, ready=True),
        _node(f"cap-{suffix}-ready2", a, {resource: "8"}, ready=True),
        _node(f"cap-{suffix}-notready", a, {resource: "8"}, ready=False),
        _node(f"cap-{suffix}-cordoned", a, {resource: "8"}, ready=True, cordoned=True),
        _node(f"cap-{suffix}-zone", {**a, zone: "z"}, {resource: "4"}, ready=True),
    ]
    flavors = {"a": _flavor(f"cap-{suffix}-a", a), "az": _flavor(f"cap-{suffix}-az", {**a, zone: "z"})}
    root = leaf = None
    try:
        for node in nodes:
            core.create_node(node)
        created = {key: custom.create_cluster_custom_object(*KUEUE, "resourceflavors", body)
                   for key, body in flavors.items()}
        root = create(kube_api, AcceleratorQuota, manifest(AcceleratorQuota, {"role": "Cohort"},
                                                           name=f"cap-{suffix}-root"))
        leaf = create(kube_api, AcceleratorQuota, manifest(AcceleratorQuota, {
            "role": "ClusterQueue", "parentRef": {"name": root["metadata"]["name"]},
            "budgets": [{"resourceName": other, "resourceFlavor": flavors["a"]["metadata"]["name"],
                         "nominal": 1}]}, name=f"cap-{suffix}-leaf"))
        yield World(suffix, resource, other, root, leaf, created)
    finally:
        for node in nodes:
            ignore_404(lambda n=node: core.delete_node(n.metadata.name))
        for body in flavors.values():
            ignore_404(lambda b=body: custom.delete_cluster_custom_object(*KUEUE, "resourceflavors",
                                                                           b["metadata"]["name"]))
        for quota in (leaf, root):
            if quota is not None:
                ignore_404(lambda q=quota: custom.delete_cluster_custom_object(
                    "ome.io", "v1beta1", "acceleratorquotas", q["metadata"]["name"]))


@pytest.fixture
def activities(chart_identities: Identities) -> Iterator[CapacityActivities]:
    with api_as(chart_identities.worker) as api:
        yield CapacityActivities(api)


def _mine(world: World, capacity: list[Any], resource: str | None = None) -> dict[str, tuple[Any, bool | None]]:
    names = {f["metadata"]["name"]: key for key, f in world.flavors.items()}
    return {names[c.resource_flavor]: (c.allocatable, c.attribution.complete) for c in capacity
            if c.resource_name == (resource or world.resource) and c.resource_flavor in names}


@pytest.mark.integration
def test_observe_attributes_nodes_and_sums_the_schedulable_ones(world: World,
                                                                 activities: CapacityActivities) -> None:
    seen = ActivityEnvironment().run(activities.observe,
                                     ObserveInput(quota=world.ref(world.root), resource_names=[world.resource]))
    assert seen.present and seen.root and seen.flavors_served and seen.observed_at is not None
    assert seen.generation == 1 and seen.resource_version
    # The configured name, and every budget resourceName of the tree (the leaf's).
    assert {world.resource, world.other_resource} <= set(seen.resource_names)
    # Ready, uncordoned nodes only; the zone node counts for the more specific flavor.
    assert _mine(world, seen.capacity) == {"a": (16, True), "az": (4, True)}
    assert _mine(world, seen.capacity, world.other_resource) == {"a": (0, True), "az": (0, True)}
    entry = next(c for c in seen.capacity if c.resource_flavor == world.flavors["az"]["metadata"]["name"]
                 and c.resource_name == world.resource)
    assert entry.attribution.flavor_uid == world.flavors["az"]["metadata"]["uid"]
    assert entry.attribution.node_labels == world.flavors["az"]["spec"]["nodeLabels"]
    assert len({c.attribution.flavor_set_hash for c in seen.capacity}) == 1


@pytest.mark.integration
def test_an_ambiguous_flavor_makes_the_sample_incomplete(kube_api: client.ApiClient, world: World,
                                                         activities: CapacityActivities) -> None:
    custom = client.CustomObjectsApi(kube_api)
    twin = _flavor(f"cap-{world.suffix}-twin", world.flavors["a"]["spec"]["nodeLabels"])
    custom.create_cluster_custom_object(*KUEUE, "resourceflavors", twin)
    try:
        seen = ActivityEnvironment().run(activities.observe, ObserveInput(quota=world.ref(world.root),
                                                                          resource_names=[world.resource]))
    finally:
        custom.delete_cluster_custom_object(*KUEUE, "resourceflavors", twin["metadata"]["name"])
    assert _mine(world, seen.capacity) == {"a": (0, False), "az": (4, True)}


@pytest.mark.integration
def test_observe_a_leaf_or_a_gone_quota(world: World, activities: CapacityActivities) -> None:
    env = ActivityEnvironment()
    leaf = env.run(activities.observe, ObserveInput(quota=world.ref(world.leaf)))
    assert leaf.present and not leaf.root and leaf.capacity == []
    reused = env.run(activities.observe, ObserveInput(quota=world.ref(world.root, uid=str(uuid.uuid4()))))
    assert not reused.present


@pytest.mark.integration
def test_write_status_merge_patches_capacity_and_returns_the_resource_version(
        kube_api: client.ApiClient, world: World, activities: CapacityActivities) -> None:
    env = ActivityEnvironment()
    seen = env.run(activities.observe, ObserveInput(quota=world.ref(world.root), resource_names=[world.resource]))
    entries = [AcceleratorCapacityStatus(resource_name=c.resource_name, resource_flavor=c.resource_flavor,
                                         allocatable=c.allocatable, high_water_mark=c.allocatable,
                                         observed_at=seen.observed_at, attribution=c.attribution)
               for c in seen.capacity]
    written = env.run(activities.write_status, WriteInput(quota=world.ref(world.root), capacity=entries))
    custom = client.CustomObjectsApi(kube_api)
    stored = custom.get_cluster_custom_object("ome.io", "v1beta1", "acceleratorquotas",
                                              world.root["metadata"]["name"])
    assert written.present and written.resource_version == stored["metadata"]["resourceVersion"]
    assert stored["status"]["capacity"] == [e.to_api() for e in entries]
    assert stored["metadata"]["generation"] == 1  # a status write moves no generation
    # What the apiserver stores reads back as the observation (the placement reader's contract).
    again = env.run(activities.observe, ObserveInput(quota=world.ref(world.root), resource_names=[world.resource]))
    assert [e.to_api() for e in again.reported] == stored["status"]["capacity"]

    # A same-named object of another uid is never written.
    stale = env.run(activities.write_status, WriteInput(quota=world.ref(world.root, uid=str(uuid.uuid4())),
                                                        capacity=[]))
    assert not stale.present
    assert custom.get_cluster_custom_object("ome.io", "v1beta1", "acceleratorquotas",
                                            world.root["metadata"]["name"])["status"]["capacity"]
    # None removes the report.
    removed = env.run(activities.write_status, WriteInput(quota=world.ref(world.root), capacity=None))
    assert removed.present
    assert "capacity" not in (custom.get_cluster_custom_object(
        "ome.io", "v1beta1", "acceleratorquotas", world.root["metadata"]["name"]).get("status") or {})
    gone = env.run(activities.write_status, WriteInput(
        quota=ObjectRef.of(AcceleratorQuota, f"cap-{world.suffix}-nothing", uid="x"), capacity=[]))
    assert not gone.present


@pytest.mark.unit
def test_an_unreadable_reported_entry_is_left_out_not_retried_for_ever() -> None:
    """The report already on the root only seeds a new run's high-water marks: an entry that does not parse
    (written by another version, say) is dropped, where a ValidationError would have been retried for ever
    under the KUBE policy with the report stuck."""
    good = {"resourceName": "nvidia.com/gpu", "resourceFlavor": "a100", "allocatable": 8, "highWaterMark": 8}
    kept = _readable([{"resourceName": ["not", "a", "name"]}, good])
    assert [(e.resource_name, e.resource_flavor) for e in kept] == [("nvidia.com/gpu", "a100")]
