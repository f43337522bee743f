"""Accelerator selection: the preferences a service or component states, and the selection status reports."""

from __future__ import annotations

from pydantic import Field

from servingops.api_models.base import ApiModel
from servingops.api_models.ome.enums import AcceleratorSelectionPolicy


class AcceleratorConstraints(ApiModel):
    """AcceleratorConstraints defines requirements for accelerator selection"""

    min_memory: int | None = None
    """MinMemory in GB"""
    max_memory: int | None = None
    """MaxMemory in GB (useful for cost control)"""
    min_compute_performance_tflops: int | None = Field(default=None, alias="minComputePerformanceTFLOPS")
    """MinComputePerformanceTFLOPS in TFLOPS"""
    min_architecture_version: str | None = None
    """MinArchitectureVersion Compute capability (NVIDIA) or equivalent"""
    required_features: list[str] | None = None
    """RequiredFeatures that must be present"""
    excluded_classes: list[str] | None = None
    """ExcludedClasses lists AcceleratorClasses to avoid"""
    architecture_families: list[str] | None = None
    """ArchitectureFamilies limits selection to specific families. Examples: ["nvidia-hopper",
    "nvidia-ampere"]."""
    preferred_precisions: list[str] | None = None
    """PreferredPrecisions lists numeric precisions in order of preference. Examples: ["fp8",
    "fp16", "fp32"]."""


class AcceleratorSelector(ApiModel):
    """AcceleratorSelector defines how to select accelerators for the InferenceService"""

    accelerator_class: str | None = None
    """AcceleratorClass explicitly selects a specific AcceleratorClass. Takes precedence over other
    selectors."""
    constraints: AcceleratorConstraints | None = None
    """Constraints defines requirements that accelerators must meet"""
    policy: AcceleratorSelectionPolicy | None = None
    """Policy defines the selection policy when multiple accelerators match"""


class AcceleratorSelection(ApiModel):
    """AcceleratorSelection shows what accelerator was selected and why"""

    accelerator_class: str | None = None
    """AcceleratorClass that was selected"""
    reason: str | None = None
    """Reason explains why this accelerator was selected"""
    node_selector: dict[str, str] | None = None
    """NodeSelector that was applied to pods"""
    resource_requests: dict[str, str] | None = None
    """ResourceRequests that were applied to pods"""


class AcceleratorCapacityAttribution(ApiModel):
    """AcceleratorCapacityAttribution describes how nodes were assigned to a flavor."""

    flavor_uid: str | None = Field(default=None, alias="flavorUID")
    """FlavorUID identifies the observed ResourceFlavor object."""
    node_labels: dict[str, str] | None = None
    """NodeLabels is the flavor's node selector at observation time."""
    flavor_set_hash: str | None = None
    """FlavorSetHash identifies all flavor definitions and configured resource names used by the
    attribution rule, including more specific selectors."""
    complete: bool | None = None
    """Complete means every observed node advertising this resource was unambiguously attributed and
    every flavor had a verifiable identity."""
