"""Inputs and outputs of `acceleratorclass.observe` and `acceleratorclass.write_status`
(AcceleratorClassActivities)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from servingops.activities.capacity.class_flavor import FlavorState
from servingops.activities.capacity.class_inventory import Inventory
from servingops.api_models.ome.accelerator_class import AcceleratorClassStatus
from servingops.api_models.refs import ObjectRef


class ClassObserveInput(BaseModel):
    accelerator_class: ObjectRef
    """The AcceleratorClass (its uid set: a reused name reads as gone)."""


class ClassObserveOutput(BaseModel):
    present: bool
    """False when the class is gone or being deleted: nothing was observed."""
    generation: int = 0
    observed_at: datetime | None = None
    """When the Nodes and Pods were listed (the activity's clock)."""
    inventory: Inventory | None = None
    """The numbers of the nodes its discovery matches; None when the spec cannot be read."""
    problem: str = ""
    """Why the spec cannot be read (a spec the CRD schema let through but the model refuses)."""
    status: AcceleratorClassStatus | None = None
    """status as read (a new run starts from what is already written)."""
    flavor: FlavorState | None = None
    """The Kueue ResourceFlavor spec.integration.kueueResourceFlavor names, as read; None when it names none."""


class ClassEvent(BaseModel):
    type: str
    """Normal or Warning."""
    reason: str
    message: str


class ClassWriteInput(BaseModel):
    accelerator_class: ObjectRef
    status: AcceleratorClassStatus
    """The whole status (every field is replaced)."""
    events: list[ClassEvent] = []
    """Recorded on the class after the write."""


class ClassWriteOutput(BaseModel):
    present: bool
    """False when the class is gone (or its name now belongs to another uid): nothing written."""
    resource_version: str | None = None


class ClassFlavorInput(BaseModel):
    accelerator_class: ObjectRef
    """The class the flavor is made for (named in the flavor's annotation)."""
    flavor: str
    node_labels: dict[str, str]


class ClassFlavorOutput(BaseModel):
    served: bool
    """False when the cluster serves no ResourceFlavor kind: nothing was created."""
    created: bool = False
    """False when a flavor of that name was there already (it is left as it is)."""
    refused: str = ""
    """Why the apiserver refused the create (a 403 or a 422): nothing was created; the class says so and the
    next sample tries again."""


__all__ = ["ClassEvent", "ClassFlavorInput", "ClassFlavorOutput", "ClassObserveInput", "ClassObserveOutput",
           "ClassWriteInput", "ClassWriteOutput"]
