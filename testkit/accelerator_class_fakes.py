"""A fake cluster for AcceleratorClassWorkflow: AcceleratorClasses, Nodes and Pods in memory, serving
`acceleratorclass.observe` and `acceleratorclass.write_status` under their wire names and payloads.

Held to the real activities (activities/capacity/accelerator_class.py) by
tests/test_accelerator_class_conformance.py. What the fake does not model: the apiserver's field
selectors (the fake filters pods with the same rule), resourceVersions (it counts writes), a spec the CRD
schema would refuse (the fake stores what it is given), and a ResourceFlavor's other fields (only its
nodeLabels are kept)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from temporalio import activity

from servingops.activities.capacity.attribution import NodeView
from servingops.activities.capacity.class_flavor import FlavorState
from servingops.activities.capacity.class_inventory import PodView, inventory
from servingops.activities.capacity.class_types import (
    ClassEvent,
    ClassFlavorInput,
    ClassFlavorOutput,
    ClassObserveInput,
    ClassObserveOutput,
    ClassWriteInput,
    ClassWriteOutput,
)
from servingops.api_models.ome.accelerator_class import AcceleratorClass, AcceleratorClassSpec, AcceleratorClassStatus
from servingops.api_models.refs import ObjectRef


@dataclass
class StoredClass:
    name: str
    spec: dict[str, Any]
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    generation: int = 1
    status: dict[str, Any] | None = None
    deleting: bool = False

    def ref(self) -> ObjectRef:
        return ObjectRef.of(AcceleratorClass, self.name, uid=self.uid)


@dataclass
class FakeAcceleratorWorld:
    """What the two activities see and change; `clock` stamps observedAt (the test server's time in a
    time-skipping test)."""

    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    classes: dict[str, StoredClass] = field(default_factory=dict)
    nodes: dict[str, NodeView] = field(default_factory=dict)
    pods: dict[str, PodView] = field(default_factory=dict)
    writes: list[tuple[datetime, dict[str, Any]]] = field(default_factory=list)
    observes: int = 0
    flavors: dict[str, dict[str, str]] = field(default_factory=dict)
    """Kueue ResourceFlavors by name: their nodeLabels."""
    flavors_served: bool = True
    flavors_created: list[str] = field(default_factory=list)
    refuse_flavor: str = ""
    """Set: the apiserver refuses the flavor's create (a 403), as the real ensure_flavor answers it."""
    events: list[ClassEvent] = field(default_factory=list)

    # -- the world, as a test sets it ---------------------------------------------------------------

    def add_class(self, name: str, spec: dict[str, Any]) -> StoredClass:
        stored = self.classes[name] = StoredClass(name=name, spec=spec)
        return stored

    def add_node(self, name: str, labels: dict[str, str], gpus: int, *, resource: str = "nvidia.com/gpu",
                 ready: bool = True) -> None:
        self.nodes[name] = NodeView(name=name, labels=labels, ready=ready, allocatable={resource: str(gpus)})

    def run_pod(self, name: str, node: str, requests: dict[str, str]) -> None:
        self.pods[name] = PodView(name=name, namespace="default", node_name=node, requests=requests)

    def delete_pod(self, name: str) -> None:
        self.pods.pop(name, None)

    def _live(self, ref: ObjectRef) -> StoredClass | None:
        found = self.classes.get(ref.name)
        return found if found is not None and (not ref.uid or found.uid == ref.uid) else None

    # -- the activities -----------------------------------------------------------------------------

    def observe(self, request: ClassObserveInput) -> ClassObserveOutput:
        self.observes += 1
        found = self._live(request.accelerator_class)
        if found is None or found.deleting:
            return ClassObserveOutput(present=False)
        status = AcceleratorClassStatus.model_validate(found.status) if found.status else None
        known = ClassObserveOutput(present=True, generation=found.generation, status=status)
        try:
            spec = AcceleratorClassSpec.model_validate(found.spec)
        except ValidationError as exc:
            return known.model_copy(update={"problem": str(exc.errors()[0]["msg"])})
        flavor = None
        name = spec.integration.kueue_resource_flavor if spec.integration else None
        if name:
            flavor = FlavorState(name=name, desired_labels=dict(spec.discovery.node_selector or {}),
                                 served=self.flavors_served, exists=self.flavors_served and name in self.flavors,
                                 node_labels=dict(self.flavors.get(name) or {}) if self.flavors_served else {})
        return known.model_copy(update={
            "observed_at": self.clock().replace(microsecond=0),
            "inventory": inventory(spec, list(self.nodes.values()), [p for p in self.pods.values() if p.node_name]),
            "flavor": flavor})

    def ensure_flavor(self, request: ClassFlavorInput) -> ClassFlavorOutput:
        if not self.flavors_served:
            return ClassFlavorOutput(served=False)
        if request.flavor in self.flavors:
            return ClassFlavorOutput(served=True, created=False)
        if self.refuse_flavor:
            return ClassFlavorOutput(served=True, refused=self.refuse_flavor)
        self.flavors[request.flavor] = dict(request.node_labels)
        self.flavors_created.append(request.flavor)
        return ClassFlavorOutput(served=True, created=True)

    def write_status(self, request: ClassWriteInput) -> ClassWriteOutput:
        found = self._live(request.accelerator_class)
        if found is None:
            return ClassWriteOutput(present=False)
        found.status = request.status.to_api()
        self.writes.append((self.clock(), found.status))
        self.events.extend(request.events)
        return ClassWriteOutput(present=True, resource_version=str(len(self.writes)))

    def activities(self, now: Callable[[], Awaitable[datetime]] | None = None) -> list[Callable[..., Any]]:
        """The two activities, async; `now`: the clock to stamp with (a time-skipping server's time)."""

        async def tick() -> None:
            if now is not None:
                current = await now()
                self.clock = lambda: current

        @activity.defn(name="acceleratorclass.observe")
        async def observe(request: ClassObserveInput) -> ClassObserveOutput:
            await tick()
            return self.observe(request)

        @activity.defn(name="acceleratorclass.write_status")
        async def write_status(request: ClassWriteInput) -> ClassWriteOutput:
            await tick()
            return self.write_status(request)

        @activity.defn(name="acceleratorclass.ensure_flavor")
        async def ensure_flavor(request: ClassFlavorInput) -> ClassFlavorOutput:
            return self.ensure_flavor(request)

        return [observe, write_status, ensure_flavor]


__all__ = ["FakeAcceleratorWorld", "StoredClass"]
