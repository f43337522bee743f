"""Inputs and outputs of the base model delivery activities (`basemodel.*`). Nothing secret travels
here: a token Secret is named, never read into a payload."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from servingops.activities.basemodels.metadata import DerivedMetadata
from servingops.activities.oci.activities import RegistryTarget
from servingops.api_models.refs import ObjectRef


class BaseModelView(BaseModel):
    """What the workflow needs of the live object."""

    generation: int
    deleting: bool
    storage: dict[str, Any]
    """spec.storage as stored (camelCase)."""
    artifact: str | None = None
    """The `servingops.io/artifact` annotation, when set."""
    secret_namespace: str
    """Where storage.key is read: the model's namespace, or the controller's for cluster-scoped kinds."""
    fills_metadata: bool
    """Whether the kind's spec has the model metadata fields (a FineTunedWeight's has not)."""


class FillSpecInput(BaseModel):
    ref: ObjectRef
    derived: DerivedMetadata


class FillSpecResult(BaseModel):
    generation: int | None
    """The object's generation after the write (None: the object is gone)."""
    filled: list[str] = []
    """The spec fields written (empty: the user had set them all)."""


class AnnotateInput(BaseModel):
    ref: ObjectRef
    value: str | None
    """The artifact reference to annotate, or None to remove the annotation."""


class NodeReportsInput(BaseModel):
    kind: str
    namespace: str | None
    name: str


class NodeEntry(BaseModel):
    """One node agent's report of this model (its entry in the node's report ConfigMap)."""

    node: str
    status: str
    """Ready, Updating or Failed (upstream OME's model agent states)."""
    digest: str = ""
    message: str = ""


class PvcInput(BaseModel):
    namespace: str
    name: str


class PvcCheck(BaseModel):
    found: bool
    phase: str | None = None
    """The claim's status.phase (Bound, Pending, Lost) when found."""


class ResolveTagInput(BaseModel):
    target: RegistryTarget
    """The registry and repository; credentials only when it is the worker's own registry."""
    tag: str
