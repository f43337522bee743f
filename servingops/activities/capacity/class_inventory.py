"""An AcceleratorClass's inventory, pure (no I/O, no clock): which nodes its `spec.discovery` matches,
how many accelerators they carry and how many the cluster's pods have not taken (seed 004,
AcceleratorClassStatus). Nodes are read as the capacity report reads them (attribution.NodeView).

Matching a node (`matches`), every stated part must hold:
- `nodeSelector`: every key=value is among the node's labels;
- `affinity`: its nodeAffinity's requiredDuringSchedulingIgnoredDuringExecution, as the scheduler reads
  it (the terms ORed, each term's matchExpressions and matchFields ANDed; operators In, NotIn, Exists,
  DoesNotExist, Gt, Lt; matchFields on metadata.name). Preferred terms and pod (anti-)affinity do not
  select nodes and are ignored here;
- `pciVendorID` / `deviceIDs`: the node reports the device as a node-feature-discovery PCI label
  (`feature.node.kubernetes.io/pci-<fields>.present: "true"`, the fields joined by `_`, for example
  `pci-0302_10de.present` or `pci-10de_2330.present`): the vendor is one of the fields, and, when
  deviceIDs are given, one of them is too. A node that reports no such label does not match: an id the
  node cannot confirm is not assumed.
A class that states none of them matches every node (upstream OME does the same).

Counting (`inventory`), over the matched nodes:
- the accelerator resource is the first of `spec.resources` (its `quantity` per accelerator, default
  1); a class that lists none counts `nvidia.com/gpu`;
- totalAccelerators: the sum of floor(allocatable / quantity) over every matched node (inventory,
  whatever its state);
- availableAccelerators: over matched nodes that are Ready and not cordoned, floor((allocatable - what
  the node's pods request) / quantity), never below 0. A pod takes its effective request (as the
  scheduler counts it: the larger of the sum over its containers and any one init container, plus
  overhead) while it is bound to the node and not Succeeded or Failed;
- availableNodes: the matched nodes with at least one available accelerator;
- nodes: the matched nodes' names, sorted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

from servingops.activities.capacity.attribution import NodeView, quantity_value
from servingops.api_models.ome.accelerator_class import AcceleratorClassSpec, AcceleratorDiscovery

DEFAULT_ACCELERATOR_RESOURCE = "nvidia.com/gpu"
PCI_LABEL_PREFIX = "feature.node.kubernetes.io/pci-"
PCI_LABEL_SUFFIX = ".present"


class PodView(BaseModel):
    """What the count reads of one pod."""

    name: str
    namespace: str
    node_name: str | None = None
    terminal: bool = False
    """Succeeded or Failed: it holds nothing any more."""
    requests: dict[str, str] = {}
    """Its effective request per resource (effective_requests)."""


class Inventory(BaseModel):
    """The status numbers of one class."""

    resource_name: str
    nodes: list[str]
    total_accelerators: int
    available_accelerators: int
    available_nodes: int


def _requirement_holds(expression: Mapping[str, Any], value: str | None) -> bool:
    operator = str(expression.get("operator", ""))
    values = [str(v) for v in expression.get("values") or []]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _term_holds(term: Mapping[str, Any], node: NodeView) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # the scheduler: an empty term matches no node
    return (all(_requirement_holds(e, node.labels.get(str(e.get("key")))) for e in expressions)
            and all(_requirement_holds(f, node.name if f.get("key") == "metadata.name" else None) for f in fields))


def affinity_holds(affinity: Mapping[str, Any] | None, node: NodeView) -> bool:
    required = ((affinity or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    return any(_term_holds(term, node) for term in required.get("nodeSelectorTerms") or [])


def pci_fields(labels: Mapping[str, str]) -> list[set[str]]:
    """The fields of each PCI device label the node reports as present."""
    found = []
    for key, value in labels.items():
        if key.startswith(PCI_LABEL_PREFIX) and key.endswith(PCI_LABEL_SUFFIX) and value == "true":
            body = key[len(PCI_LABEL_PREFIX):-len(PCI_LABEL_SUFFIX)]
            found.append({part.lower() for part in body.split("_") if part})
    return found


def pci_holds(discovery: AcceleratorDiscovery, node: NodeView) -> bool:
    vendor = (discovery.pci_vendor_id or "").lower()
    devices = {d.lower() for d in discovery.device_ids or []}
    if not vendor and not devices:
        return True
    for fields in pci_fields(node.labels):
        if vendor and vendor not in fields:
            continue
        if devices and not devices & fields:
            continue
        return True
    return False


def matches(discovery: AcceleratorDiscovery, node: NodeView) -> bool:
    """Whether the class's discovery selects the node (rules in the module docstring)."""
    if any(node.labels.get(k) != v for k, v in (discovery.node_selector or {}).items()):
        return False
    return affinity_holds(discovery.affinity, node) and pci_holds(discovery, node)


def accelerator_resource(spec: AcceleratorClassSpec) -> tuple[str, Decimal]:
    """(the resource one accelerator is counted in, its quantity per accelerator)."""
    if not spec.resources:
        return DEFAULT_ACCELERATOR_RESOURCE, Decimal(1)
    first = spec.resources[0]
    per = quantity_value(first.quantity if first.quantity is not None else 1)
    return first.name, per if per > 0 else Decimal(1)


def _sum(requests: Iterable[Mapping[str, Any]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for request in requests:
        for name, value in request.items():
            total[name] = total.get(name, Decimal(0)) + quantity_value(value)
    return total


def _container_requests(container: Mapping[str, Any]) -> dict[str, Any]:
    """A container's requests; a resource given only a limit is requested at the limit (the apiserver's
    defaulting, which extended resources always rely on)."""
    resources = container.get("resources") or {}
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def effective_requests(pod_spec: Mapping[str, Any]) -> dict[str, str]:
    """A pod's request per resource, as the scheduler counts it."""
    main = _sum(_container_requests(c) for c in pod_spec.get("containers") or [])
    for init in pod_spec.get("initContainers") or []:
        for name, value in _sum([_container_requests(init)]).items():
            main[name] = max(main.get(name, Decimal(0)), value)
    for name, value in _sum([pod_spec.get("overhead") or {}]).items():
        main[name] = main.get(name, Decimal(0)) + value
    return {name: str(value) for name, value in main.items()}


def inventory(spec: AcceleratorClassSpec, nodes: Sequence[NodeView], pods: Sequence[PodView]) -> Inventory:
    """The class's status numbers (rules in the module docstring)."""
    resource, per = accelerator_resource(spec)
    matched = sorted((n for n in nodes if matches(spec.discovery, n)), key=lambda n: n.name)
    taken: dict[str, Decimal] = {}
    for pod in pods:
        if pod.node_name and not pod.terminal and resource in pod.requests:
            taken[pod.node_name] = taken.get(pod.node_name, Decimal(0)) + quantity_value(pod.requests[resource])
    total = available = available_nodes = 0
    for node in matched:
        allocatable = quantity_value(node.allocatable.get(resource))
        total += int(allocatable // per)
        if not node.ready or node.unschedulable:
            continue
        free = max(Decimal(0), allocatable - taken.get(node.name, Decimal(0)))
        count = int(free // per)
        available += count
        available_nodes += 1 if count > 0 else 0
    return Inventory(resource_name=resource, nodes=[n.name for n in matched], total_accelerators=total,
                     available_accelerators=available, available_nodes=available_nodes)


__all__ = ["DEFAULT_ACCELERATOR_RESOURCE", "Inventory", "PodView", "accelerator_resource", "affinity_holds",
           "effective_requests", "inventory", "matches", "pci_fields", "pci_holds"]
