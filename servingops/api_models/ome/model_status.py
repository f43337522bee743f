"""Model load state reported on an InferenceService."""

from __future__ import annotations

from servingops.api_models.base import ApiModel, Time
from servingops.api_models.ome.enums import FailureReason, ModelState, TransitionStatus


class FailureInfo(ApiModel):
    """FailureInfo"""

    location: str | None = None
    """Name of component to which the failure relates (usually Pod name)"""
    reason: FailureReason | None = None
    """High level class of failure"""
    message: str | None = None
    """Detailed error message"""
    model_revision_name: str | None = None
    """Internal Revision/ID of model, tied to specific Spec contents"""
    time: Time | None = None
    """Time failure occurred or was discovered"""
    exit_code: int | None = None
    """Exit status from the last termination of the container"""


class ModelRevisionStates(ApiModel):
    """ModelRevisionStates"""

    active_model_state: ModelState = ModelState.PENDING
    """High level state string: Pending, Standby, Loading, Loaded, FailedToLoad"""
    target_model_state: ModelState = ModelState.EMPTY
    """The state the model is transitioning to."""


class ModelCopies(ApiModel):
    """ModelCopies"""

    failed_copies: int = 0
    """How many copies of the model failed to load recently."""
    total_copies: int | None = None
    """How many copies of the model are loaded."""


class ModelStatus(ApiModel):
    """ModelStatus"""

    transition_status: TransitionStatus | None = None
    """Whether the pods serving the model reflect the current spec or are in transition. Empty when
    the InferenceService is "lean" (no spec.model is declared) and no model-loading lifecycle
    applies; the controller leaves this field unset in that case."""
    model_revision_states: ModelRevisionStates | None = None
    """The model's load state in the pods that serve it."""
    last_failure_info: FailureInfo | None = None
    """Details of last failure, when load of target model is failed or blocked."""
    model_copies: ModelCopies | None = None
    """How many copies of the model are loaded, and how many failed."""


class MountedOverlay(ApiModel):
    """MountedOverlay records one overlay the controller wired into the current pod spec."""

    name: str | None = None
    """Name of the overlay."""
    env_var: str | None = None
    """EnvVar is the environment variable carrying the overlay's model path."""
    mount_path: str | None = None
    """MountPath is empty for Sharded overlays (fetched at runtime)."""
    distribution: str | None = None
    """Distribution is how the overlay reaches the pod (PVC, PerNode or Sharded)."""
