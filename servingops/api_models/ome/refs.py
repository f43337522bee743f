"""References from OME objects to models, runtimes, parents and scale targets."""

from __future__ import annotations

from pydantic import Field

from servingops.api_models.base import ApiModel


class ModelOverlayRef(ApiModel):
    """ModelOverlayRef references a BaseModel attached as an overlay. Narrower than ModelRef on
    purpose: no nested Overlays (type-system forbids recursion) and no FineTunedWeights (weight
    composition lives on the primary)."""

    name: str
    """Name of the overlay BaseModel."""
    kind: str = "ClusterBaseModel"
    """Kind of the overlay model."""
    api_group: str = "ome.io"
    """APIGroup of the overlay model."""


class ModelRef(ApiModel):
    """ModelRef references the BaseModel or ClusterBaseModel served, with fine-tuned weights and
    overlays applied on top of it."""

    name: str
    """Name of the model being referenced. Identifies the specific model to be used for inference."""
    kind: str = "ClusterBaseModel"
    """Kind of the model being referenced. Specifies the Kubernetes resource kind of the referenced
    model."""
    api_group: str = "ome.io"
    """APIGroup of the resource being referenced. Specifies the Kubernetes API group of the
    referenced model."""
    fine_tuned_weights: list[str] | None = None
    """FineTunedWeights names the FineTunedWeight resources to apply to the base model."""
    overlays: list[ModelOverlayRef] | None = None
    """Overlays declares additional BaseModels attached to every serving pod alongside the primary.
    Each overlay is mounted (PVC/PerNode) or env-addressable (Sharded) at
    /opt/ml/model-overlays/<name> and exposed via OVERLAY_<UPPERCASED_NAME>_MODEL_PATH."""


class ServingRuntimeRef(ApiModel):
    """ServingRuntimeRef references the ServingRuntime or ClusterServingRuntime that renders the pods,
    optionally pinned to a ControllerRevision snapshot."""

    name: str
    """Name of the runtime being referenced. Identifies the specific runtime environment to be used
    for model execution."""
    kind: str = "ClusterServingRuntime"
    """Kind of the runtime being referenced. Specifies the Kubernetes resource kind of the
    referenced runtime. ClusterServingRuntime is a cluster-wide runtime, while ServingRuntime is
    namespace-scoped."""
    api_group: str = "ome.io"
    """APIGroup of the resource being referenced. Specifies the Kubernetes API group of the
    referenced runtime."""
    auto_sync: bool = True
    """AutoSync (default true) re-renders pod specs from the live runtime every reconcile. When
    false, the ISVC pins to a ControllerRevision snapshot; bump ome.io/runtime-sync or set
    spec.runtime.revision to roll forward."""
    revision: str | None = None
    """Revision pins to a named ControllerRevision in the OME namespace. Enables rollback; ignored
    when AutoSync is true."""


class ParentReference(ApiModel):
    """ParentReference holds the InferenceService owner reference info. Distinct from the
    OwnerReference list because the InferenceReplica controller composes the parent's name into per-
    IR label and Service names without re-reading the metadata field."""

    name: str = Field(min_length=1)
    """Name is the name of the parent InferenceService."""


class ScaleTargetRef(ApiModel):
    """ScaleTargetRef is a stripped-down reference to the canonical scale target for a Component —
    the InferenceReplica (for OMENative) or the underlying Deployment (for RawDeployment). Published
    on status.components.<comp>.scaleTargetRef so an external scaler knows which object to point at
    (the same GroupKind the user would target with kubectl scale <kind>/<name>)."""

    api_version: str | None = None
    """APIVersion of the scale target — e.g. "ome.io/v1beta1" for the IR-managed OMENative path;
    "apps/v1" for RawDeployment."""
    kind: str | None = None
    """Kind of the scale target — e.g. "InferenceReplica" for the IR-managed OMENative path;
    "Deployment" for RawDeployment."""
    name: str | None = None
    """Name of the scale target. Namespace is always the same as the owning ISVC."""
