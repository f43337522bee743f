"""The AcceleratorClass kind (seed 004): a class of accelerators with similar capabilities, the nodes
that carry it (`spec.discovery`), what it exposes to pods (`spec.resources`), its Kueue flavor and its
cost. Its status is written by AcceleratorClassWorkflow (workflows/accelerator_class.py) from the
nodes its discovery matches and the pods that take their accelerators."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from servingops.api_models.base import (
    ApiModel,
    Condition,
    CrdInfo,
    KubeObject,
    KubeResource,
    PrinterColumn,
    Quantity,
    Time,
    condition_list_schema,
)
from servingops.api_models.ome.constants import GROUP, VERSION


class AcceleratorDiscovery(ApiModel):
    """AcceleratorDiscovery: patterns to identify nodes with this accelerator."""

    node_selector: dict[str, str] | None = None
    """NodeSelector to identify nodes with this accelerator"""
    affinity: KubeObject | None = None
    """Affinity for more complex node selection"""
    pci_vendor_id: str | None = Field(default=None, alias="pciVendorID")
    """PCIVendorID for device discovery (e.g., "10de" for NVIDIA)"""
    device_ids: list[str] | None = Field(default=None, alias="deviceIDs")
    """DeviceIDs list of PCI device IDs"""


class AcceleratorLatency(ApiModel):
    average_millis: int | None = None
    """Average latency in milliseconds"""
    maximum_millis: int | None = None
    """Maximum latency in milliseconds"""


class AcceleratorPerformance(ApiModel):
    fp32_tflops: int | None = Field(default=None, alias="fp32Tflops")
    """FP32 performance in TFLOPS"""
    fp16_tflops: int | None = Field(default=None, alias="fp16Tflops")
    """FP16 performance in TFLOPS"""
    int8_tops: int | None = Field(default=None, alias="int8Tops")
    """INT8 performance in TOPS"""
    int4_tops: int | None = Field(default=None, alias="int4Tops")
    """INT4 performance in TOPS"""
    latency: AcceleratorLatency | None = None
    """Latency metrics"""


class AcceleratorCapabilities(ApiModel):
    memory_gb: Quantity | None = Field(default=None, alias="memoryGB")
    """Memory capacity in GB"""
    compute_capability: str | None = None
    """Compute capability (NVIDIA) or equivalent"""
    level_zero_version: str | None = None
    """Level Zero version (for Intel accelerators)"""
    clock_speed_mhz: int | None = Field(default=None, alias="clockSpeedMHz")
    """Clock speeds"""
    memory_bandwidth_gbps: Quantity | None = Field(default=None, alias="memoryBandwidthGBps")
    """Memory bandwidth"""
    features: list[str] | None = None
    """Features supported by this accelerator"""
    performance: AcceleratorPerformance | None = None
    """Performance metrics"""


class AcceleratorResource(ApiModel):
    name: str
    """Name of the resource (e.g., nvidia.com/gpu)"""
    quantity: Quantity | None = "1"
    """Quantity per accelerator"""
    divisible: bool | None = None
    """Divisible indicates if the resource can be subdivided"""


class AcceleratorIntegration(ApiModel):
    kueue_resource_flavor: str | None = None
    """KueueResourceFlavor name to sync with"""
    volcano_gpu_type: str | None = Field(default=None, alias="volcanoGPUType")
    """VolcanoGPUType for Volcano integration"""


class AcceleratorCost(ApiModel):
    per_hour: Quantity | None = None
    """Cost per hour in dollars"""
    per_million_tokens: Quantity | None = None
    """Cost per million tokens (for usage-based pricing)"""
    spot_per_hour: Quantity | None = None
    """Spot instance pricing if available"""
    tier: str | None = None
    """Cost tier for simplified selection (low, medium, high)"""


class AcceleratorClassSpec(ApiModel):
    vendor: str | None = None
    """Vendor of the accelerator (nvidia, amd, intel, etc.)"""
    family: str | None = None
    """Family of the accelerator (ampere, hopper, cdna2, etc.)"""
    model: str | None = None
    """Model name (a100, h100, mi250x, etc.)"""
    discovery: AcceleratorDiscovery
    """Discovery patterns to identify nodes with this accelerator"""
    capabilities: AcceleratorCapabilities
    """Capabilities of this accelerator class"""
    resources: list[AcceleratorResource] | None = None
    """Resources exposed by this accelerator"""
    integration: AcceleratorIntegration | None = None
    """Integration with external systems"""
    cost: AcceleratorCost | None = None
    """Cost information for optimization decisions"""


class AcceleratorClassStatus(ApiModel):
    nodes: list[str] | None = None
    """Nodes that have this accelerator"""
    total_accelerators: int | None = None
    """Total number of accelerators in the cluster"""
    available_accelerators: int | None = None
    """Available accelerators (not allocated)"""
    last_updated: Time | None = None
    """Last update time"""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions represent the latest available observations"""
    available_nodes: int | None = None
    """AvailableNodes is the number of nodes that have this accelerator available"""


class AcceleratorClass(KubeResource):
    """AcceleratorClass defines a class of accelerators with similar capabilities"""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="AcceleratorClass",
        plural="acceleratorclasses",
        scope="Cluster",
        short_names=["ac"],
        categories=["ome"],
        printer_columns=[
            PrinterColumn(name="Vendor", type="string", json_path=".spec.vendor"),
            PrinterColumn(name="Model", type="string", json_path=".spec.model"),
            PrinterColumn(name="Nodes", type="integer", json_path=".status.availableNodes"),
            PrinterColumn(name="Total", type="integer", json_path=".status.totalAccelerators"),
            PrinterColumn(name="Available", type="integer", json_path=".status.availableAccelerators"),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )

    spec: AcceleratorClassSpec | None = None
    """The desired state of the `AcceleratorClass`."""
    status: AcceleratorClassStatus | None = None
    """The observed state of the `AcceleratorClass`."""


__all__ = [
    "AcceleratorCapabilities",
    "AcceleratorClass",
    "AcceleratorClassSpec",
    "AcceleratorClassStatus",
    "AcceleratorCost",
    "AcceleratorDiscovery",
    "AcceleratorIntegration",
    "AcceleratorLatency",
    "AcceleratorPerformance",
    "AcceleratorResource",
]
