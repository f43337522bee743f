"""Which AcceleratorClass serves an Engine or Decoder, and what that renders into its pods: pure, over the
classes and the runtime's accelerator requirements (upstream OME's pkg/acceleratorclassselector, whose
rules are kept where stated; where we differ it says so).

What a component asks for (`request_for`), the first that states it:
- a class by name: the component's `acceleratorOverride.acceleratorClass`, else the service's
  `acceleratorSelector.acceleratorClass`, else the annotation `ome.io/accelerator-class`;
- else a policy: the component's `acceleratorOverride.policy`, else the service's
  `acceleratorSelector.policy`; constraints: the component override's, else the service's.
Neither a name nor a policy: no class, nothing rendered (upstream does the same).

Choosing (`choose`):
- A named class must exist (else `AcceleratorClassNotFound`); the name takes precedence over
  constraints, as upstream (whether the runtime offers it is runtime selection's check).
- A policy chooses among candidates: the runtime's `acceleratorRequirements.acceleratorClasses` in their
  order (upstream's pool; names with no class are skipped), or, beyond upstream, every class by name when
  the runtime lists none (an inline spec has no runtime). Hard filters: constraints' excludedClasses,
  architectureFamilies (`vendor-family` when the entry has a dash, else the family; case-insensitive),
  minMemory / maxMemory (GB), requiredFeatures (all, case-insensitive), minArchitectureVersion (the
  computeCapability compared as a version); the runtime's minMemory, requiredFeatures and
  minArchitectureVersion filter the same way. No candidate left: `NoAcceleratorClassMatches`, naming
  why each was left out.
- BestFit: 0.7 memory fit (1 with no minMemory, else minMemory / memory) + 0.3 compute (TFLOPS at the first
  preferred precision the class states, capped at 1 against minComputePerformanceTFLOPS; 1 with no
  requirement when it states any); FirstAvailable: the first candidate; Cheapest: the lowest hourly
  cost (the lower of spotPerHour and perHour) among classes that state one, else per million tokens,
  else tier (low < medium < high); beyond upstream, no cost stated anywhere falls back to the first
  candidate instead of choosing nothing; MostCapable: half compute, half memory, each as a share of the
  best candidate's. Ties keep candidate order.
- Memory: `capabilities.memoryGB` read as a quantity; a plain number is GB, a suffixed one bytes / 2^30
  ("80Gi" is 80; upstream reads only the suffixed form, a plain "80" being 0 there).

Rendering (`apply`): the class's `discovery.nodeSelector` under the component's own nodeSelector (the
component's keys win; upstream's order runtime < class < service, here the runtime's and the service's
keys, already merged, both win); its `discovery.affinity` when the component states none (upstream
does the same); each of `spec.resources` as the main container's request and limit at its quantity
(default 1) where the container states neither (extended resources need request == limit).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any

from servingops.api_models.ome.accelerator import AcceleratorConstraints, AcceleratorSelection
from servingops.api_models.ome.accelerator_class import AcceleratorClassSpec
from servingops.api_models.ome.enums import AcceleratorSelectionPolicy
from servingops.api_models.ome.runtimes import AcceleratorRequirements
from servingops.api_models.quantity import quantity

ACCELERATOR_CLASS_ANNOTATION = "ome.io/accelerator-class"
SELECTED_COMPONENTS = ("engine", "decoder")
"""Upstream renders accelerators into these two only (the router serves no model)."""
GIB = Fraction(2**30)
_TIERS = {"low": 0, "medium": 1, "high": 2}
_PRECISION_FIELDS = {"fp32": "fp32_tflops", "fp16": "fp16_tflops", "bf16": "fp16_tflops", "int8": "int8_tops",
                     "int4": "int4_tops"}


class SelectionReason(StrEnum):
    """Why a request is held (the InferenceService's condition reason and Event reason)."""

    NOT_FOUND = "AcceleratorClassNotFound"
    NO_MATCH = "NoAcceleratorClassMatches"


class NoAcceleratorClass(Exception):
    def __init__(self, reason: SelectionReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class AcceleratorRequest:
    component: str
    named: str | None = None
    named_by: str = ""
    """Where the name came from, for the selection's reason."""
    policy: AcceleratorSelectionPolicy | None = None
    constraints: AcceleratorConstraints | None = None


@dataclass(frozen=True)
class Choice:
    name: str
    spec: AcceleratorClassSpec
    reason: str


def request_for(isvc: Mapping[str, Any], component: str) -> AcceleratorRequest | None:
    """What the component asks for (rules in the module docstring); None: no accelerator selection."""
    spec = isvc.get("spec") or {}
    override = (spec.get(component) or {}).get("acceleratorOverride") or {}
    selector = spec.get("acceleratorSelector") or {}
    annotation = ((isvc.get("metadata") or {}).get("annotations") or {}).get(ACCELERATOR_CLASS_ANNOTATION)
    named, named_by = next(((str(v), where) for v, where in (
        (override.get("acceleratorClass"), f"spec.{component}.acceleratorOverride"),
        (selector.get("acceleratorClass"), "spec.acceleratorSelector"),
        (annotation, f"annotation {ACCELERATOR_CLASS_ANNOTATION}")) if v), (None, ""))
    policy = override.get("policy") or selector.get("policy")
    if named is None and not policy:
        return None
    constraints = override.get("constraints") or selector.get("constraints")
    return AcceleratorRequest(
        component=component, named=named, named_by=named_by,
        policy=AcceleratorSelectionPolicy(policy) if policy else None,
        constraints=AcceleratorConstraints.model_validate(constraints) if constraints else None)


def memory_gb(spec: AcceleratorClassSpec) -> Fraction | None:
    value = spec.capabilities.memory_gb
    if value is None:
        return None
    if isinstance(value, int) or re.fullmatch(r"[+-]?[0-9.]+", value.strip()):
        return quantity(value)
    return quantity(value) / GIB


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"[0-9]+", text))


def _why_not(name: str, spec: AcceleratorClassSpec, constraints: AcceleratorConstraints | None,
             runtime: AcceleratorRequirements | None) -> str | None:
    """Why the class fails a hard filter, or None."""
    c = constraints or AcceleratorConstraints()
    if name in (c.excluded_classes or []):
        return "excluded"
    if c.architecture_families:
        vendor_family = f"{spec.vendor or ''}-{spec.family or ''}".lower()
        if not any(f.lower() == (vendor_family if "-" in f else (spec.family or "").lower())
                   for f in c.architecture_families):
            return f"family {spec.family or '(none)'} not in {', '.join(c.architecture_families)}"
    memory = memory_gb(spec)
    least = max([m for m in (c.min_memory, runtime.min_memory if runtime else None) if m is not None], default=None)
    if (least is not None or c.max_memory is not None) and memory is None:
        return "states no memoryGB"
    if least is not None and memory is not None and memory < least:
        return f"memory {float(memory):g}GB < {least}GB"
    if c.max_memory is not None and memory is not None and memory > c.max_memory:
        return f"memory {float(memory):g}GB > {c.max_memory}GB"
    has = {f.lower() for f in spec.capabilities.features or []}
    for feature in [*(c.required_features or []), *((runtime.required_features or []) if runtime else [])]:
        if feature.lower() not in has:
            return f"lacks feature {feature}"
    for floor in (c.min_architecture_version, runtime.min_architecture_version if runtime else None):
        if floor:
            have = spec.capabilities.compute_capability
            if not have:
                return "states no computeCapability"
            if _version(have) < _version(floor):
                return f"compute capability {have} < {floor}"
    return None


def _tflops(spec: AcceleratorClassSpec, precisions: Sequence[str]) -> int:
    performance = spec.capabilities.performance
    if performance is None:
        return 0
    for precision in [*precisions, "fp16", "fp32"]:
        field = _PRECISION_FIELDS.get(precision.lower())
        value = getattr(performance, field) if field else None
        if value:
            return int(value)
    return 0


def _best_fit(spec: AcceleratorClassSpec, c: AcceleratorConstraints, runtime: AcceleratorRequirements | None) -> float:
    memory = memory_gb(spec)
    least = c.min_memory or (runtime.min_memory if runtime else None)
    memory_score = 1.0 if not least else (float(least / memory) if memory else 0.0)
    tflops = _tflops(spec, c.preferred_precisions or [])
    need = c.min_compute_performance_tflops or (runtime.min_compute_performance_tflops if runtime else None)
    compute = 0.0 if tflops == 0 else 1.0 if not need else min(1.0, tflops / need)
    return 0.7 * memory_score + 0.3 * compute


def _cheapest(candidates: list[tuple[str, AcceleratorClassSpec]]) -> tuple[str, AcceleratorClassSpec] | None:
    def hourly(spec: AcceleratorClassSpec) -> Fraction | None:
        cost = spec.cost
        stated = [quantity(v) for v in (cost.spot_per_hour, cost.per_hour) if v is not None] if cost else []
        return min(stated) if stated else None

    def tokens(spec: AcceleratorClassSpec) -> Fraction | None:
        per_million = spec.cost.per_million_tokens if spec.cost else None
        return quantity(per_million) if per_million is not None else None

    def tier(spec: AcceleratorClassSpec) -> Fraction | None:
        level = _TIERS.get((spec.cost.tier or "").lower()) if spec.cost else None
        return Fraction(level) if level is not None else None

    price: Callable[[AcceleratorClassSpec], Fraction | None]
    for price in (hourly, tokens, tier):
        priced = [(p, i) for i, (_, spec) in enumerate(candidates) if (p := price(spec)) is not None]
        if priced:
            return candidates[min(priced)[1]]
    return None


def _most_capable(candidates: list[tuple[str, AcceleratorClassSpec]], precisions: Sequence[str]) -> int:
    compute = [_tflops(spec, precisions) for _, spec in candidates]
    memory = [memory_gb(spec) or Fraction(0) for _, spec in candidates]
    top_c, top_m = max(compute) or 1, max(memory) or Fraction(1)
    scores = [0.5 * c / top_c + 0.5 * float(m / top_m) for c, m in zip(compute, memory, strict=True)]
    return scores.index(max(scores))


def choose(request: AcceleratorRequest, classes: Mapping[str, AcceleratorClassSpec],
           runtime: AcceleratorRequirements | None) -> Choice:
    """The class that serves the request (rules in the module docstring); raises NoAcceleratorClass."""
    if request.named is not None:
        found = classes.get(request.named)
        if found is None:
            raise NoAcceleratorClass(SelectionReason.NOT_FOUND,
                                     f"{request.component}: AcceleratorClass {request.named} ({request.named_by}) "
                                     "does not exist")
        return Choice(request.named, found, f"named by {request.named_by}")
    policy = request.policy or AcceleratorSelectionPolicy.FIRST_AVAILABLE
    pool = list(dict.fromkeys(runtime.accelerator_classes)) if runtime and runtime.accelerator_classes \
        else sorted(classes)
    candidates, left_out = [], []
    for name in pool:
        spec = classes.get(name)
        why = "does not exist" if spec is None else _why_not(name, spec, request.constraints, runtime)
        if why is None and spec is not None:
            candidates.append((name, spec))
        else:
            left_out.append(f"{name}: {why}")
    if not candidates:
        where = "the runtime's acceleratorClasses" if runtime and runtime.accelerator_classes else "AcceleratorClasses"
        raise NoAcceleratorClass(SelectionReason.NO_MATCH,
                                 f"{request.component}: no {where} satisfy the {policy.value} request "
                                 f"({'; '.join(left_out) or 'none exist'})")
    constraints = request.constraints or AcceleratorConstraints()
    index = 0
    if policy is AcceleratorSelectionPolicy.BEST_FIT:
        scores = [_best_fit(spec, constraints, runtime) for _, spec in candidates]
        index = scores.index(max(scores))
    elif policy is AcceleratorSelectionPolicy.CHEAPEST:
        cheapest = _cheapest(candidates)
        index = candidates.index(cheapest) if cheapest is not None else 0
    elif policy is AcceleratorSelectionPolicy.MOST_CAPABLE:
        index = _most_capable(candidates, constraints.preferred_precisions or [])
    name, spec = candidates[index]
    return Choice(name, spec, f"{policy.value} among {', '.join(n for n, _ in candidates)}")


def _main_container(component: dict[str, Any], change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    runner = component.get("runner")
    if isinstance(runner, dict):
        component["runner"] = change(runner)
    elif component.get("containers"):
        component["containers"] = [change(component["containers"][0]), *component["containers"][1:]]


def _with_resources(container: dict[str, Any], wanted: Mapping[str, str]) -> dict[str, Any]:
    result = copy.deepcopy(container)
    resources = result.setdefault("resources", {})
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for name, value in wanted.items():
        if name in requests or name in limits:
            continue
        requests[name] = limits[name] = value
    resources["requests"], resources["limits"] = requests, limits
    return result


def resource_requests(choice: Choice) -> dict[str, str]:
    return {r.name: str(r.quantity if r.quantity is not None else 1) for r in choice.spec.resources or []}


def apply(component: dict[str, Any], choice: Choice) -> dict[str, Any]:
    """The component (and its leader / worker pieces) rendered for the class (rules in the module docstring)."""
    result = copy.deepcopy(component)
    wanted = resource_requests(choice)
    for part in [result, *(result[r] for r in ("leader", "worker") if isinstance(result.get(r), dict))]:
        selector = dict(choice.spec.discovery.node_selector or {})
        selector.update(part.get("nodeSelector") or {})
        if selector:
            part["nodeSelector"] = selector
        if not part.get("affinity") and choice.spec.discovery.affinity:
            part["affinity"] = copy.deepcopy(choice.spec.discovery.affinity)
        if wanted:
            _main_container(part, lambda c: _with_resources(c, wanted))
    return result


def selection(choice: Choice, rendered: Mapping[str, Any]) -> AcceleratorSelection:
    """status.components.<c>.selectedAccelerator."""
    return AcceleratorSelection(accelerator_class=choice.name, reason=choice.reason,
                                node_selector=dict(rendered.get("nodeSelector") or {}) or None,
                                resource_requests=resource_requests(choice) or None)


__all__ = ["ACCELERATOR_CLASS_ANNOTATION", "SELECTED_COMPONENTS", "AcceleratorRequest", "Choice", "NoAcceleratorClass",
           "SelectionReason", "apply", "choose", "memory_gb", "request_for", "resource_requests", "selection"]
