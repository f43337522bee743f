"""What one replica of an InferenceService component is, as a cluster renders it: the hash of its
rendering (its Instance pod templates and their sizes) and what its pods request. Placement reads it
in a member to normalize the member's capacity (activities/placement/capacity.py, SplitByCapacity)
and records the hash in the plan it accepts; the member, before it projects anything of a placed
service, renders the component again and compares (activities/serving/placement_demand.py). Both
activity groups read the one shape from here, since neither imports the other.

A replica's demand of a resource is the sum over its pods (a gang: the leader and `size` workers) of
each pod's effective request: the larger of its containers' sum and its largest init container, a
request defaulting to its limit, as the scheduler counts it. Quantities are read with the kubernetes
package's parser (activities/capacity/attribution.py quantity_value), which is why this is not in the
rendering layer (it imports nothing of kubernetes); an unreadable quantity raises ValueError.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from servingops.activities.capacity.attribution import quantity_value
from servingops.api_models.canonical import canonical_json


@dataclass(frozen=True)
class ComponentShape:
    component: str
    rendering_hash: str
    """sha256 of the component's Instance pod templates and their sizes, as the member renders them."""
    demand: dict[str, Decimal]
    """Per resource, what one replica of this component requests in all its pods."""


def _container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    limits = {k: quantity_value(v) for k, v in (resources.get("limits") or {}).items()}
    requests = {k: quantity_value(v) for k, v in (resources.get("requests") or {}).items()}
    return {**limits, **requests}  # an unset request defaults to the limit


def pod_requests(template: Mapping[str, Any]) -> dict[str, Decimal]:
    """The effective request of one pod: max(sum of containers, largest init container) per resource."""
    spec = template.get("spec") or {}
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = total.get(name, Decimal(0)) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = max(total.get(name, Decimal(0)), amount)
    return total


def component_shape(component: str, instances: Sequence[tuple[str, int, dict[str, Any]]]) -> ComponentShape:
    """`instances`: (runner, size, pod template) of one replica, as rendering/multinode.py runner_templates gives."""
    demand: dict[str, Decimal] = {}
    for _, size, template in instances:
        for name, amount in pod_requests(template).items():
            demand[name] = demand.get(name, Decimal(0)) + amount * size
    hashed = hashlib.sha256(canonical_json([{"runner": runner, "size": size, "template": template}
                                            for runner, size, template in instances])).hexdigest()
    return ComponentShape(component=component, rendering_hash=hashed, demand=demand)
