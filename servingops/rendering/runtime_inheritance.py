"""`ome.io/inherit-from`: a runtime that names a parent takes the parent's spec and overrides it.
Pure; the caller supplies a lookup over the runtimes it listed.

Seed 004 fixes the outcome (status.inheritanceChain root first, [self] without inheritance;
InheritanceReady True/False) but not the lookup or the merge; ours:
- a ServingRuntime's parent is the ServingRuntime of that name in its namespace, else the
  ClusterServingRuntime of that name; a ClusterServingRuntime's parent is a ClusterServingRuntime
  (a cluster-wide runtime must not depend on one namespace's objects);
- the effective spec is every spec of the chain merged root first, each child over its parent, with
  the same strategic merge as a service over its runtime (runtime_merge.strategic_merge);
- a missing parent, a cycle, or a chain deeper than MAX_DEPTH is not resolved, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from servingops.api_models.contract import RUNTIME_INHERIT_FROM as INHERIT_FROM
from servingops.rendering.runtime_merge import strategic_merge

MAX_DEPTH = 8


class InheritanceReason(StrEnum):
    RESOLVED = "Resolved"
    PARENT_NOT_FOUND = "ParentNotFound"
    CYCLE = "InheritanceCycle"
    TOO_DEEP = "InheritanceTooDeep"


@dataclass(frozen=True)
class RuntimeObject:
    kind: str
    """ServingRuntime or ClusterServingRuntime."""
    name: str
    namespace: str | None
    body: dict[str, Any]
    """The object as the apiserver returns it."""

    @property
    def parent_name(self) -> str | None:
        annotations = (self.body.get("metadata") or {}).get("annotations") or {}
        value = annotations.get(INHERIT_FROM)
        return value.strip() or None if isinstance(value, str) else None


Lookup = Callable[[str, str, str | None], RuntimeObject | None]
"""(kind, name, namespace) -> the runtime, or None."""


@dataclass(frozen=True)
class Resolution:
    chain: list[str]
    """Names walked, root first (on failure: as far as it got, still root first)."""
    reason: InheritanceReason
    message: str
    spec: dict[str, Any] | None
    """The effective spec; None unless resolved."""

    @property
    def ready(self) -> bool:
        return self.reason is InheritanceReason.RESOLVED


def parent_of(runtime: RuntimeObject, lookup: Lookup) -> RuntimeObject | None:
    name = runtime.parent_name
    if name is None:
        return None
    if runtime.kind == "ServingRuntime":
        found = lookup("ServingRuntime", name, runtime.namespace)
        if found is not None:
            return found
    return lookup("ClusterServingRuntime", name, None)


def resolve(runtime: RuntimeObject, lookup: Lookup) -> Resolution:
    walked = [runtime]
    seen = {(runtime.kind, runtime.namespace, runtime.name)}
    current = runtime
    while current.parent_name is not None:
        parent = parent_of(current, lookup)
        names = [r.name for r in reversed(walked)]
        if parent is None:
            return Resolution(chain=names, reason=InheritanceReason.PARENT_NOT_FOUND, spec=None,
                              message=f"{current.kind} {current.name} inherits from {current.parent_name!r}, "
                                      "which does not exist" + _where(current))
        key = (parent.kind, parent.namespace, parent.name)
        if key in seen:
            loop = " -> ".join([*(r.name for r in walked), parent.name])
            return Resolution(chain=names, reason=InheritanceReason.CYCLE, spec=None,
                              message=f"ome.io/inherit-from forms a cycle: {loop}")
        if len(walked) >= MAX_DEPTH:
            return Resolution(chain=names, reason=InheritanceReason.TOO_DEEP, spec=None,
                              message=f"the ome.io/inherit-from chain is deeper than {MAX_DEPTH} runtimes")
        seen.add(key)
        walked.append(parent)
        current = parent
    root_first = list(reversed(walked))
    spec: dict[str, Any] = {}
    for item in root_first:
        spec = strategic_merge(spec, item.body.get("spec") or {})
    chain = [r.name for r in root_first]
    message = "no inheritance" if len(chain) == 1 else "resolved " + " -> ".join(chain)
    return Resolution(chain=chain, reason=InheritanceReason.RESOLVED, message=message, spec=spec)


def _where(runtime: RuntimeObject) -> str:
    if runtime.kind == "ServingRuntime":
        return f" as a ServingRuntime in {runtime.namespace} or a ClusterServingRuntime"
    return " as a ClusterServingRuntime"
