"""Fake activities for BaseModelWorkflow (time-skipping tests and the history recorder).

The import activities are tests/histories/model_fakes.py's (the same import steps run them); the
`basemodel.*` activities and the status write are faked here over one object held in memory, with
the real pure rule for which spec fields an inspection fills (activities/basemodels/metadata.py).
Payloads are plain dicts in the wire shape, as in model_fakes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from servingops.activities.basemodels.metadata import DerivedMetadata, spec_changes
from servingops.api_models.ome.model_keys import ARTIFACT_ANNOTATION
from tests.histories.model_fakes import FakeModelWorld

ARTIFACT = ARTIFACT_ANNOTATION
_REPLACED = {"kube.read_object", "kube.patch_status", "kube.artifact_referenced"}


@dataclass
class FakeBaseModelWorld(FakeModelWorld):
    """One (Cluster)BaseModel / FineTunedWeight, the node reports, PVCs and tags the fakes see."""

    kind: str = "ClusterBaseModel"
    storage_uri: str = "hf://acme/tiny-llama"
    spec: dict[str, Any] = field(default_factory=dict)
    generation: int = 1
    annotations: dict[str, str] = field(default_factory=dict)
    reports: list[dict[str, Any]] = field(default_factory=list)
    """NodeEntry dicts (node, status, digest, message) node_reports answers."""
    pvcs: dict[str, str] = field(default_factory=dict)
    """Claim name -> phase."""
    tags: dict[str, str] = field(default_factory=dict)
    """modelpack tag -> digest."""
    shared_digests: set[str] = field(default_factory=set)
    """Digests another model references (artifact_referenced)."""
    conditions: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    writes: list[dict[str, Any]] = field(default_factory=list)
    """Every StatusPatch as sent."""
    fill_calls: int = 0
    gone: bool = False
    """The object is deleted (its finalizer removed): read answers None, writes answer gone."""

    def __post_init__(self) -> None:
        if self.kind == "BaseModel":
            self.namespace = self.namespace or "team-a"
        self.spec = {"storage": {"storageUri": self.storage_uri}, **self.spec}

    @property
    def ref(self) -> dict[str, Any]:
        plural = self.kind.lower() + "s"
        return {"group": "ome.io", "version": "v1beta1", "plural": plural, "kind": self.kind, "name": self.name,
                "namespace": self.namespace if self.kind == "BaseModel" else None, "uid": self.uid}

    @property
    def state(self) -> str | None:
        for status in reversed(self.statuses):
            if "state" in status:
                return str(status["state"])
        return None

    def set_spec(self, **changes: Any) -> None:
        """A user's edit: the spec changes and the generation moves."""
        self.spec.update(changes)
        self.generation += 1

    def start_deleting(self) -> None:
        """A user's delete held by the finalizer: deletionTimestamp set, and (as the apiserver does for
        a custom object) the generation moves with it."""
        self.deleting = True
        self.generation += 1

    def activities(self) -> list[Callable[..., Any]]:
        world = self
        inherited = [a for a in super().activities()
                     if getattr(a, "__temporal_activity_definition").name not in _REPLACED]

        def called(name: str) -> None:
            world.calls.append(name)

        @activity.defn(name="kube.patch_status")
        async def patch_status(patch: dict[str, Any]) -> bool:
            called("kube.patch_status")
            if world.gone:
                return False  # the real one: False once the object is gone, no Event recorded
            world.writes.append(copy.deepcopy(patch))
            world.statuses.append(dict(patch.get("status") or {}))
            world.conditions.extend(patch.get("conditions") or [])
            world.events.extend(patch.get("events") or [])
            return True

        @activity.defn(name="kube.artifact_referenced")
        async def artifact_referenced(query: dict[str, Any]) -> bool:
            called("kube.artifact_referenced")
            return query["digest"] in world.shared_digests

        @activity.defn(name="basemodel.read")
        async def read(ref: dict[str, Any]) -> dict[str, Any] | None:
            called("basemodel.read")
            if world.gone:
                return None
            return {"generation": world.generation, "deleting": world.deleting,
                    "storage": copy.deepcopy(world.spec.get("storage") or {}),
                    "artifact": world.annotations.get(ARTIFACT),
                    "secret_namespace": world.namespace if world.kind == "BaseModel" else "servingops-system",
                    "fills_metadata": world.kind != "FineTunedWeight"}

        @activity.defn(name="basemodel.fill_spec")
        async def fill_spec(request: dict[str, Any]) -> dict[str, Any]:
            called("basemodel.fill_spec")
            world.fill_calls += 1
            if world.gone:
                return {"generation": None, "filled": []}
            changes = spec_changes(world.spec, DerivedMetadata.model_validate(request["derived"]))
            if changes:
                world.spec.update(changes)
                world.generation += 1
            return {"generation": world.generation, "filled": sorted(changes)}

        @activity.defn(name="basemodel.annotate")
        async def annotate(request: dict[str, Any]) -> bool:
            called("basemodel.annotate")
            if world.gone:
                return False
            if request.get("value") is None:
                world.annotations.pop(ARTIFACT, None)
            else:
                world.annotations[ARTIFACT] = request["value"]
            return True

        @activity.defn(name="basemodel.node_reports")
        async def node_reports(request: dict[str, Any]) -> list[dict[str, Any]]:
            called("basemodel.node_reports")
            # As the real one answers them: by node name, the message cut at 512 characters.
            return [{"node": r["node"], "status": str(r.get("status", "")), "digest": str(r.get("digest") or ""),
                     "message": str(r.get("message") or "")[:512]}
                    for r in sorted(world.reports, key=lambda r: r["node"])]

        @activity.defn(name="basemodel.check_pvc")
        async def check_pvc(request: dict[str, Any]) -> dict[str, Any]:
            called("basemodel.check_pvc")
            phase = world.pvcs.get(request["name"])
            return {"found": phase is not None, "phase": phase}

        @activity.defn(name="basemodel.resolve_tag")
        async def resolve_tag(request: dict[str, Any]) -> str:
            called("basemodel.resolve_tag")
            if request["tag"] not in world.tags:
                target = request["target"]
                raise ApplicationError(f"{target['address']}/{target['repository']}:{request['tag']}: no such tag "
                                       "in the registry", type="SourceNotFound", non_retryable=True)
            return world.tags[request["tag"]]

        return [*inherited, patch_status, artifact_referenced, read, fill_spec, annotate, node_reports, check_pvc,
                resolve_tag]
