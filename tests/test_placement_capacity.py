"""SplitByCapacity's normalization (activities/placement/capacity.py, over activities/component_shape.py):
what one replica demands as the member renders it, and how many whole replicas a member's capacity report
holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from servingops.activities.component_shape import ComponentShape, component_shape, pod_requests
from servingops.activities.placement import capacity
from servingops.api_models.ome.components import EngineSpec
from servingops.api_models.ome.enums import ComponentType
from servingops.rendering import multinode

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"spec": {"containers": list(containers), **({"initContainers": init} if init else {})}}


def _container(**resources: dict[str, str]) -> dict[str, Any]:
    return {"name": "c", "image": "x", "resources": resources}


def _entry(flavor: str, allocatable: str, *, resource: str = "nvidia.com/gpu", complete: bool = True,
           observed: datetime = NOW - timedelta(seconds=30)) -> dict[str, Any]:
    return {"resourceName": resource, "resourceFlavor": flavor, "allocatable": allocatable,
            "highWaterMark": allocatable, "observedAt": observed.isoformat().replace("+00:00", "Z"),
            "attribution": {"flavorUID": f"uid-{flavor}", "nodeLabels": {}, "flavorSetHash": "h", "complete": complete}}


def _root(*entries: dict[str, Any], parent: str | None = None, name: str = "root") -> dict[str, Any]:
    spec: dict[str, Any] = {"role": "Cohort"}
    if parent:
        spec["parentRef"] = {"name": parent}
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "42"}, "spec": spec,
            "status": {"capacity": list(entries)}}


def test_a_pod_requests_what_the_scheduler_counts() -> None:
    pod = _pod(_container(limits={"nvidia.com/gpu": "2"}),  # an unset request is its limit
               _container(requests={"cpu": "500m", "nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"}),
               init=[_container(requests={"nvidia.com/gpu": "4"})])
    assert pod_requests(pod) == {"nvidia.com/gpu": Decimal(4), "cpu": Decimal("0.5")}


def test_a_gang_replica_demands_its_leader_and_every_worker() -> None:
    engine = EngineSpec.model_validate({
        "leader": {"runner": {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}},
        "worker": {"size": 3, "runner": {"name": "main", "image": "x",
                                         "resources": {"limits": {"nvidia.com/gpu": "8"}}}}})
    shape = component_shape("engine", multinode.runner_templates("chat", ComponentType.ENGINE, engine))
    assert shape.demand["nvidia.com/gpu"] == 32
    assert len(shape.rendering_hash) == 64
    bigger = EngineSpec.model_validate({**engine.to_api(), "worker": {**engine.to_api()["worker"], "size": 4}})
    other = component_shape("engine", multinode.runner_templates("chat", ComponentType.ENGINE, bigger))
    assert other.rendering_hash != shape.rendering_hash, "the worker count is part of the rendering"


def _shape(gpus: int, nics: int = 0) -> ComponentShape:
    demand = {"nvidia.com/gpu": Decimal(gpus), **({"example.com/nic": Decimal(nics)} if nics else {})}
    return ComponentShape("engine", "0" * 64, demand)


def test_whole_replicas_sum_over_flavors_and_take_the_scarcest_resource() -> None:
    root = _root(_entry("h100", "16"), _entry("a100", "7"), _entry("default", "10", resource="example.com/nic"))
    found = capacity.normalize([_shape(4)], root, NOW)
    # 16 // 4 + 7 // 4: a replica never straddles two flavors; the nic is not demanded.
    assert found.replicas == 5
    assert [(p.resource_flavor, p.demand, p.allocatable) for p in found.pools] == [("a100", 4, 7), ("h100", 4, 16)]
    assert (found.report_uid, found.report_resource_version) == ("uid-root", "42")
    scarce = capacity.normalize([_shape(4, nics=5)], root, NOW)
    assert scarce.replicas == 2, "10 nics hold only 2 replicas of 5"
    with_decoder = capacity.normalize([_shape(4), ComponentShape("decoder", "1" * 64,
                                                                 {"nvidia.com/gpu": Decimal(4)})], root, NOW)
    assert with_decoder.replicas == 2, "a unit is an engine and a decoder replica: 8 GPUs"
    assert with_decoder.fingerprint != found.fingerprint


@pytest.mark.parametrize(("root", "shapes", "reason"), [
    (_root(), [_shape(1)], "NoCapacityReport"),
    (_root(_entry("h100", "8", complete=False)), [_shape(1)], "CapacityIncomplete"),
    (_root(_entry("h100", "8", observed=NOW - timedelta(minutes=6))), [_shape(1)], "CapacityStale"),
    (_root(_entry("h100", "8")), [ComponentShape("engine", "0" * 64, {"cpu": Decimal(2)})],
     "NoAcceleratorDemand"),
])
def test_what_cannot_be_verified_is_unknown_with_its_reason(root: dict[str, Any], shapes: list[Any],
                                                            reason: str) -> None:
    with pytest.raises(capacity.CapacityUnknown) as raised:
        capacity.normalize(shapes, root, NOW)
    assert raised.value.reason == reason and raised.value.message


def test_the_report_is_the_one_root() -> None:
    child = _root(_entry("h100", "8"), parent="root", name="team")
    with pytest.raises(capacity.CapacityUnknown) as raised:
        capacity.root_quota([child])
    assert raised.value.reason == "NoCapacityReport"
    with pytest.raises(capacity.CapacityUnknown) as raised:
        capacity.root_quota([_root(name="a"), _root(name="b"), child])
    assert raised.value.reason == "AmbiguousCapacityReport" and "a, b" in raised.value.message
    assert capacity.root_quota([child, _root(name="fleet")])["metadata"]["name"] == "fleet"
