"""An in-memory control plane and fleet behind the placement activities' real names, for
time-skipping tests of PlacementWorkflow and for the recorded histories (tests/histories/
placement_scenarios.py). It speaks the wire contract only (activity names, JSON payloads), as the
real activities in activities/placement/ do against real clusters (tests/test_placement_e2e.py
shows every behaviour here once against three real member clusters with the real Kueue).

Each member holds at most one derived service per source; `admit` says whether the member's Kueue
admits it (a fake of "every component has an admitted Instance confirmed by live pods");
`reachable` False makes every call answer Unreachable, as the real activities do. A member's
`derived` whose `origin` is not the source's uid is a same-named object someone else made
(`foreign`): never written or deleted, NameInUse, unless the target names its uid for adoption
(`adopt_uid`, after `inventory_member` identified it; `standing()` makes one). A member dropped from
`members` is deregistered (its WorkloadCluster deleted): RegistrationNotFound.

tests/test_placement_conformance.py runs the same cases against these and against the real
activities on a real member cluster (what it changed here is listed there).
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity

NAMESPACE, NAME = "team-a", "chat"


@dataclass
class FakeMember:
    name: str
    labels: dict[str, str]
    ready: bool = True
    reachable: bool = True
    admit: bool = False
    url: str | None = None
    pods_ready: bool = True
    """Whether its admitted Instances' pods are Ready (False: admitted with a URL, nothing answers yet)."""
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    derived: dict[str, Any] | None = None
    """The derived service as last applied: its own uid, its origin (the source uid of its
    ome.io/placement-origin label), execution, queue, generation, floors."""
    applies: int = 0
    deletes: int = 0
    capacity: int | None = None
    """The whole replicas its capacity report holds for the source (SplitByCapacity); None: no root
    AcceleratorQuota reports anything (NoCapacityReport)."""
    capacity_reads: int = 0
    rendering: str = "1"
    """How the member renders the source's engine (a runtime changed there renders it otherwise): its
    reading's renderingHash and demand fingerprint follow it."""
    rollout: dict[str, Any] | None = None
    """What its derived service's rollout mirror says (CandidateRolloutStatus JSON), when it exists."""
    inventories: int = 0

    def standing(self, replicas: int, origin: str | None = None) -> str:
        """A same-named InferenceService made here without this source (by hand: no origin; or derived from
        an earlier source `origin`), running `replicas` engine Instances; returns its uid."""
        uid = str(uuid.uuid4())
        self.derived = {"uid": uid, "origin": origin, "execution": None, "queue": None, "generation": 0,
                        "floors": {"engine": replicas}}
        return uid


@dataclass
class FakeFleet:
    members: dict[str, FakeMember]
    placement: dict[str, Any] | None
    source_uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    generation: int = 1
    deleting: bool = False
    gone: bool = False
    status_placement: dict[str, Any] | None = None
    finalizers: list[str] = field(default_factory=list)
    """The source's metadata.finalizers: a deleting source is gone once the last one is removed."""
    rollout_policies: bool = False
    """A spec.rollout group of the source names a RolloutPolicy."""
    adopt: bool = False
    """The source carries servingops.io/placement-adopt: "true"."""
    observation_grace: str = "2m"
    min_replicas: dict[str, int] = field(default_factory=lambda: {"engine": 1})
    writes: list[dict[str, Any]] = field(default_factory=list)
    """Every kube.patch_status payload, in order."""
    log: list[str] = field(default_factory=list)
    """What happened, in order: "status <phase> winner=<w>", "apply <m>", "delete <m>"."""

    def ref(self) -> dict[str, Any]:
        return {"group": "ome.io", "version": "v1beta1", "plural": "inferenceservices", "kind": "InferenceService",
                "name": NAME, "namespace": NAMESPACE, "uid": self.source_uid}

    def event(self, **extra: Any) -> dict[str, Any]:
        return {"uid": self.source_uid, "generation": self.generation, "resource_version": str(self.generation),
                **extra}

    def placed(self) -> dict[str, Any]:
        return self.status_placement or {}

    def events(self) -> list[tuple[str, str, str]]:
        return [(e.get("type", "Normal"), e["reason"], e["message"])
                for write in self.writes for e in write.get("events") or []]

    def activities(self) -> list[Any]:
        fleet = self

        def member_of(target: dict[str, Any]) -> FakeMember | None:
            return fleet.members.get(target["cluster"])

        def unavailable(member: FakeMember | None, cluster: str) -> dict[str, Any] | None:
            """Why `cluster` cannot be talked to (as the real activities answer), None when it can."""
            if member is None:
                return {"reason": "RegistrationNotFound", "message": f"WorkloadCluster {cluster} does not exist"}
            if not member.reachable:
                return {"reason": "Unreachable", "message": f"{member.name} cannot be reached: connection refused"}
            return None

        def ours(member: FakeMember, target: dict[str, Any]) -> bool:
            if member.derived is None:
                return False
            return member.derived.get("origin") == target["source_uid"] or (
                bool(target.get("adopt_uid")) and member.derived.get("uid") == target["adopt_uid"])

        def engine_counts(member: FakeMember) -> tuple[int, int]:
            """(desired, admitted) of the copy there: Kueue admits every Instance of it or none."""
            derived = member.derived or {}
            desired = (derived.get("floors") or {}).get("engine", fleet.min_replicas.get("engine", 1))
            return desired, desired if member.admit else 0

        @activity.defn(name="placement.read_source")
        async def read_source(inp: dict[str, Any]) -> dict[str, Any] | None:
            if fleet.gone:
                return None
            return {"uid": fleet.source_uid, "generation": fleet.generation, "deleting": fleet.deleting,
                    "placement": copy.deepcopy(fleet.placement), "components": ["engine"],
                    "min_replicas": dict(fleet.min_replicas),
                    "registrations": [{"name": m.name, "uid": m.uid, "labels": m.labels, "ready": m.ready}
                                      for m in fleet.members.values()],
                    "status_placement": copy.deepcopy(fleet.status_placement),
                    "finalizers": list(fleet.finalizers), "rollout_policies": fleet.rollout_policies,
                    "adopt": fleet.adopt}

        @activity.defn(name="placement.apply_member")
        async def apply_member(inp: dict[str, Any]) -> dict[str, Any]:
            target = inp["target"]
            if fleet.gone:
                return {"done": False, "reason": "SourceGone",
                        "message": f"InferenceService {NAMESPACE}/{NAME} is gone; nothing was written"}
            member = member_of(target)
            why = unavailable(member, target["cluster"])
            if member is None or why is not None:
                return {"done": False, **(why or {})}
            if member.derived is not None and not ours(member, target):
                return {"done": False, "reason": "NameInUse", "message": (
                    f"{member.name} already has InferenceService {target['namespace']}/{target['name']} not "
                    "derived from this source; it is left alone (annotate the source "
                    "servingops.io/placement-adopt=true to adopt it as a home)")}
            member.applies += 1
            uid = (member.derived or {}).get("uid") or str(uuid.uuid4())
            member.derived = {"uid": uid, "origin": target["source_uid"], "execution": inp["execution"],
                              "queue": inp["queue"], "generation": fleet.generation,
                              "floors": inp.get("replica_floors")}
            fleet.log.append(f"apply {member.name}")
            return {"done": True}

        @activity.defn(name="placement.observe_member")
        async def observe_member(target: dict[str, Any]) -> dict[str, Any]:
            member = member_of(target)
            why = unavailable(member, target["cluster"])
            if member is None or why is not None:
                return {"reachable": False, **(why or {})}
            if member.derived is None or not ours(member, target):
                return {"reachable": True, "exists": False}
            desired, admitted = engine_counts(member)
            return {"reachable": True, "exists": True, "url": member.url if member.admit else None,
                    "rollout": copy.deepcopy(member.rollout),
                    "components": [{"component": "engine", "admitted": admitted,
                                    "ready": admitted if member.pods_ready else 0,
                                    "desired": desired}]}

        @activity.defn(name="placement.inventory_member")
        async def inventory_member(target: dict[str, Any]) -> dict[str, Any]:
            member = member_of(target)
            why = unavailable(member, target["cluster"])
            if member is None or why is not None:
                return {"identified": False, **(why or {})}
            member.inventories += 1
            if member.derived is None:
                return {"identified": True}
            if member.derived.get("origin") == target["source_uid"]:
                return {"identified": True, "ours": True}
            _, admitted = engine_counts(member)
            return {"identified": True, "standing_uid": member.derived["uid"],
                    "standing_origin": member.derived.get("origin"), "replicas": admitted, "admitted": admitted > 0}

        @activity.defn(name="placement.delete_member")
        async def delete_member(target: dict[str, Any]) -> dict[str, Any]:
            member = member_of(target)
            why = unavailable(member, target["cluster"])
            if member is None or why is not None:
                return {"done": False, **(why or {})}
            if member.derived is not None and not ours(member, target):
                return {"done": True, "reason": "NameInUse", "message": (
                    f"{member.name}'s {target['namespace']}/{target['name']} is not derived from this source: kept")}
            if member.derived is not None:
                member.deletes += 1
                member.derived = None
                fleet.log.append(f"delete {member.name}")
            return {"done": True}

        @activity.defn(name="placement.read_capacity")
        async def read_capacity(inp: dict[str, Any]) -> dict[str, Any]:
            target = inp["target"]
            if fleet.gone:
                return {"reason": "SourceGone", "message": f"InferenceService {NAMESPACE}/{NAME} is gone"}
            member = member_of(target)
            why = unavailable(member, target["cluster"])
            if member is None or why is not None:
                return dict(why or {})
            member.capacity_reads += 1
            if member.capacity is None:
                return {"reason": "NoCapacityReport", "message": (
                    "no root AcceleratorQuota (one without spec.parentRef) exists, so nothing "
                    "reports this cluster's capacity")}
            fingerprint = hashlib.sha256(f"{member.name}/{member.rendering}".encode()).hexdigest()
            rendering = hashlib.sha256(f"engine/{member.rendering}".encode()).hexdigest()
            return {"sample": {
                "demandFingerprint": fingerprint, "replicas": member.capacity,
                "demandContract": {"fingerprint": fingerprint, "components": [
                    {"component": "engine", "renderingHash": rendering}]},
                "pools": [{"resourceName": "nvidia.com/gpu", "resourceFlavor": "default", "demand": 1,
                           "allocatable": member.capacity, "observedAt": "2026-12-01T00:00:00Z",
                           "reportUID": member.uid, "reportResourceVersion": str(member.capacity),
                           "attribution": {"flavorUID": "f-" + member.name, "complete": True}}]}}

        @activity.defn(name="kube.patch_status")
        async def patch_status(patch: dict[str, Any]) -> bool:
            fleet.writes.append(copy.deepcopy(patch))
            if "placement" in (patch.get("status") or {}):
                fleet.status_placement = copy.deepcopy(patch["status"]["placement"])
            placed = fleet.status_placement or {}
            fleet.log.append(f"status {placed.get('phase')} winner={(placed.get('plan') or {}).get('winner')}")
            return not fleet.gone

        @activity.defn(name="kube.ensure_finalizer")
        async def ensure_finalizer(change: dict[str, Any]) -> bool:
            if fleet.gone:
                return False
            if change["finalizer"] not in fleet.finalizers and not fleet.deleting:
                fleet.finalizers.append(change["finalizer"])
                fleet.log.append(f"finalizer + {change['finalizer']}")
            return True

        @activity.defn(name="kube.remove_finalizer")
        async def remove_finalizer(change: dict[str, Any]) -> bool:
            if change["finalizer"] in fleet.finalizers:
                fleet.finalizers.remove(change["finalizer"])
                fleet.log.append(f"finalizer - {change['finalizer']}")
            fleet.gone = fleet.gone or (fleet.deleting and not fleet.finalizers)
            return True

        @activity.defn(name="operator.config")
        async def operator_config() -> dict[str, Any]:
            return {"placement": {"observationGrace": fleet.observation_grace}}

        return [read_source, apply_member, observe_member, delete_member, read_capacity, inventory_member,
                patch_status, ensure_finalizer, remove_finalizer, operator_config]


def single(*values: str, key: str = "tier") -> dict[str, Any]:
    """spec.placement: Single over the members whose `key` label is one of `values`."""
    return {"policy": "ClusterAffinity", "mode": "Single", "clusterAffinity": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}]}


def split(weights: dict[str, int], replicas: int | None = None, ceiling: int | None = None) -> dict[str, Any]:
    """spec.placement: Split over the named members with these static weights (one term each)."""
    placement: dict[str, Any] = {"policy": "ClusterAffinity", "mode": "Split", "clusterAffinity": [
        {"weight": weight, "matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
        for name, weight in weights.items()]}
    if replicas is not None or ceiling is not None:
        placement["split"] = {k: v for k, v in (("replicas", replicas), ("maxReplicasPerCluster", ceiling))
                              if v is not None}
    return placement


def split_by_capacity(*names: str, replicas: int | None = None, ceiling: int | None = None) -> dict[str, Any]:
    """spec.placement: SplitByCapacity over the named members."""
    placement = split(dict.fromkeys(names, 1), replicas, ceiling)
    placement["mode"] = "SplitByCapacity"
    for term in placement["clusterAffinity"]:
        term.pop("weight")
    return placement


def capacity_fleet() -> FakeFleet:
    """SplitByCapacity over gpu-a and gpu-b with a floor of 4; both admit and report 6 and 2 whole replicas (3/1)."""
    fleet = FakeFleet(three_members(), split_by_capacity("gpu-a", "gpu-b", replicas=4))
    a, b = fleet.members["gpu-a"], fleet.members["gpu-b"]
    a.admit = b.admit = True
    a.capacity, b.capacity = 6, 2
    return fleet


def three_members() -> dict[str, FakeMember]:
    """gpu-a and gpu-b match tier=gpu, cpu-c does not; race order is by name: gpu-a, gpu-b."""
    return {m.name: m for m in (FakeMember("gpu-a", {"tier": "gpu"}, url="http://chat.gpu-a.example"),
                                FakeMember("gpu-b", {"tier": "gpu"}, url="http://chat.gpu-b.example"),
                                FakeMember("cpu-c", {"tier": "cpu"}, url="http://chat.cpu-c.example"))}


def split_three_to_one() -> FakeFleet:
    """Split 3:1 of 4 replicas over gpu-a and gpu-b (of three_members), both admitting what they are given."""
    fleet = FakeFleet(three_members(), split({"gpu-a": 3, "gpu-b": 1}, replicas=4))
    fleet.members["gpu-a"].admit = fleet.members["gpu-b"].admit = True
    return fleet
