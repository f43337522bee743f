"""Which registered WorkloadClusters a PlacementSpec selects, and with what weight.

Pure and deterministic: the placement workflow calls it on every pass, so the answer depends only on
the spec and the registrations, and candidates come back sorted by cluster name (the order the
Single race fans out in).

Requirements on labels follow Kubernetes node-selector semantics (seed: "Operator follows Kubernetes
node-selector semantics for labels"): NotIn and DoesNotExist are satisfied by a missing label; Gt and
Lt parse the label and the single value as base-10 integers and a missing or non-integer label does
not match. A malformed requirement (which admission rejects) matches nothing, as an erroring
node-selector term does in Kubernetes. matchFields reads only the real metadata.name.

Readiness does not enter matching: WorkloadCluster Ready "report[s] connection health ONLY", and a
home whose reads fail keeps its place through the observation grace, so a plan must not follow a
flapping connection. A not-Ready registration is a matched candidate (`ready` False); the race only
fans out to Ready ones (`MatchResult.race_order`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from pydantic import BaseModel, ConfigDict, Field

from servingops.api_models.ome.enums import ComponentType, PlacementMode, PlacementPolicy
from servingops.api_models.ome.placement import ClusterAffinityTerm, ClusterSelectorRequirement, PlacementSpec
from servingops.api_models.ome.placement_status import CandidateAllocationStatus, ComponentAffinityMatch
from servingops.api_models.ome.workload_cluster import WorkloadCluster
from servingops.workflows.placement.held import COMPONENT_AFFINITY_MISMATCH, Held

NAME_FIELD = "metadata.name"
# The component whose match fills MatchingTerms and Weight; the others go to componentMatches.
PRIMARY_ORDER = (ComponentType.ENGINE, ComponentType.DECODER, ComponentType.ROUTER)
# strconv.ParseInt(s, 10, 64), which node affinity uses for Gt/Lt: optional sign, decimal digits.
_DECIMAL = re.compile(r"[+-]?[0-9]+")
_INT64 = (-(2**63), 2**63 - 1)


class Registration(BaseModel):
    """One WorkloadCluster as matching sees it."""

    model_config = ConfigDict(frozen=True)

    name: str
    uid: str
    labels: dict[str, str] = Field(default_factory=dict)
    ready: bool = False

    @classmethod
    def from_cluster(cls, cluster: WorkloadCluster) -> Registration:
        conditions = cluster.status.conditions if cluster.status else None
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions or [])
        labels = cluster.metadata.get("labels") or {}
        return cls(name=cluster.name, uid=cluster.uid, labels={str(k): str(v) for k, v in labels.items()},
                   ready=ready)


@dataclass(frozen=True)
class ComponentMatch:
    component: ComponentType
    matching_terms: tuple[int, ...]
    weight: int | None

    def status(self) -> ComponentAffinityMatch:
        return ComponentAffinityMatch(component=self.component, matching_terms=list(self.matching_terms) or None,
                                      weight=self.weight)


@dataclass(frozen=True)
class Candidate:
    cluster: str
    cluster_uid: str
    ready: bool
    matching_terms: tuple[int, ...]
    """The primary component's (or clusterAffinity's) matching term indexes; empty when no terms exist."""
    weight: int | None
    """Effective static weight, in Split mode only."""
    component_matches: tuple[ComponentMatch, ...] = ()
    """Under ComponentAffinity, the non-primary components' matches, in engine, decoder, router order."""

    def component_weight(self, component: ComponentType) -> int | None:
        """The static weight a component has here: the primary's is `weight`."""
        for match in self.component_matches:
            if match.component == component:
                return match.weight
        return self.weight

    def has_component_terms(self, component: ComponentType) -> bool:
        return any(m.component == component for m in self.component_matches)

    def allocation_status(self) -> CandidateAllocationStatus:
        """The matching half of this member's allocation row (floors are allocation's)."""
        return CandidateAllocationStatus(
            cluster_uid=self.cluster_uid,
            matched=True,
            matching_terms=list(self.matching_terms) or None,
            weight=self.weight,
            component_matches=[m.status() for m in self.component_matches] or None,
        )


@dataclass(frozen=True)
class ComponentClusters:
    component: ComponentType
    clusters: tuple[str, ...]


@dataclass(frozen=True)
class MatchResult:
    candidates: tuple[Candidate, ...]
    """Every matched registration, sorted by name (empty when held)."""
    held: Held | None = None
    primary: ComponentType | None = None
    """The component whose terms fill MatchingTerms and Weight (ComponentAffinity only)."""
    component_clusters: tuple[ComponentClusters, ...] = ()
    """What each listed component matched on its own (ComponentAffinity only), for the held message
    and the race query."""

    def race_order(self) -> tuple[Candidate, ...]:
        """The candidates a Single race fans out to, in order: Ready ones, by name."""
        return tuple(c for c in self.candidates if c.ready)

    def names(self) -> tuple[str, ...]:
        return tuple(c.cluster for c in self.candidates)


# --- requirements --------------------------------------------------------------------------------


def _int64(text: str) -> int | None:
    if not _DECIMAL.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64[0] <= value <= _INT64[1] else None


def label_requirement_matches(req: ClusterSelectorRequirement, labels: dict[str, str]) -> bool:
    values = req.values or []
    present = req.key in labels
    match req.operator:
        case "In":
            return bool(values) and present and labels[req.key] in values
        case "NotIn":
            return bool(values) and (not present or labels[req.key] not in values)
        case "Exists":
            return not values and present
        case "DoesNotExist":
            return not values and not present
        case "Gt" | "Lt":
            if len(values) != 1 or not present:
                return False
            have, bound = _int64(labels[req.key]), _int64(values[0])
            if have is None or bound is None:
                return False
            return have > bound if req.operator == "Gt" else have < bound
    return False


def field_requirement_matches(req: ClusterSelectorRequirement, name: str) -> bool:
    """matchFields: only metadata.name, only In/NotIn, compared with the registration's real name."""
    values = req.values or []
    if req.key != NAME_FIELD or not values:
        return False
    if req.operator == "In":
        return name in values
    if req.operator == "NotIn":
        return name not in values
    return False


def term_matches(term: ClusterAffinityTerm, registration: Registration) -> bool:
    expressions = term.match_expressions or []
    fields = term.match_fields or []
    if not expressions and not fields:
        # An empty term selects nothing (as an empty node-selector term); admission rejects it anyway.
        return False
    return all(label_requirement_matches(r, registration.labels) for r in expressions) and all(
        field_requirement_matches(r, registration.name) for r in fields
    )


def matching_terms(terms: Sequence[ClusterAffinityTerm], registration: Registration) -> tuple[int, ...]:
    return tuple(i for i, term in enumerate(terms) if term_matches(term, registration))


def effective_weight(terms: Sequence[ClusterAffinityTerm], matched: Sequence[int]) -> int:
    """The static Split weight of a cluster matched by `matched` (indexes into `terms`).

    Seed (ClusterAffinityTerm.weight): "If any term has an explicit weight, matching term weights add
    and omitted weights contribute one. Omission must be preserved to distinguish unweighted
    overlapping terms." So with no explicit weight anywhere in the list every matched cluster weighs
    one, however many terms it matches; with any explicit weight the matching terms' weights add.
    """
    if not any(term.weight is not None for term in terms):
        return 1
    return sum(terms[i].weight or 1 for i in matched)


# --- the spec ------------------------------------------------------------------------------------


def _ordered(registrations: Sequence[Registration]) -> list[Registration]:
    ordered = sorted(registrations, key=lambda r: r.name)
    for before, after in pairwise(ordered):
        if before.name == after.name:
            raise ValueError(f"two registrations are named {before.name!r}")
    return ordered


def _select(terms: Sequence[ClusterAffinityTerm] | None, registration: Registration,
            weighted: bool) -> tuple[tuple[int, ...], int | None] | None:
    """(matching term indexes, weight) when the registration matches, else None. No terms: match all."""
    if terms is None:
        return (), (1 if weighted else None)
    indexes = matching_terms(terms, registration)
    if not indexes:
        return None
    return indexes, (effective_weight(terms, indexes) if weighted else None)


def match_clusters(spec: PlacementSpec, registrations: Sequence[Registration]) -> MatchResult:
    """The candidates of `spec` among `registrations`, sorted by name."""
    ordered = _ordered(registrations)
    weighted = spec.mode == PlacementMode.SPLIT  # weights are "permitted only for static Split"
    if spec.policy == PlacementPolicy.CLUSTER_AFFINITY:
        candidates = []
        for registration in ordered:
            selected = _select(spec.cluster_affinity, registration, weighted)
            if selected is not None:
                candidates.append(Candidate(registration.name, registration.uid, registration.ready, *selected))
        return MatchResult(tuple(candidates))
    return _match_components(spec, ordered, weighted)


def _component_terms(spec: PlacementSpec) -> list[tuple[ComponentType, list[ClusterAffinityTerm]]]:
    affinity = spec.component_affinity
    if affinity is None:
        return []
    lists = {ComponentType.ENGINE: affinity.engine, ComponentType.DECODER: affinity.decoder,
             ComponentType.ROUTER: affinity.router}
    return [(component, terms) for component in PRIMARY_ORDER if (terms := lists[component]) is not None]


def _match_components(spec: PlacementSpec, ordered: list[Registration], weighted: bool) -> MatchResult:
    listed = _component_terms(spec)
    if not listed:
        # componentAffinity with no list constrains no component: like an omitted clusterAffinity.
        return MatchResult(tuple(Candidate(r.name, r.uid, r.ready, (), 1 if weighted else None) for r in ordered))
    per_component: dict[ComponentType, dict[str, tuple[tuple[int, ...], int | None]]] = {}
    for component, terms in listed:
        per_component[component] = {
            r.name: selected for r in ordered if (selected := _select(terms, r, weighted)) is not None
        }
    primary = listed[0][0]
    sets = tuple(ComponentClusters(component, tuple(per_component[component])) for component, _ in listed)
    if len({s.clusters for s in sets}) > 1:
        # Seed (ComponentClusterAffinity): "Every listed component must match the same clusters", and
        # (componentMatches) "The accepted plan keeps them so that member floors never follow
        # unaccepted label changes": a disagreement is held, keeping the accepted plan, never guessed.
        described = "; ".join(f"{s.component} matches [{', '.join(s.clusters)}]" for s in sets)
        held = Held(COMPONENT_AFFINITY_MISMATCH, f"every component must match the same clusters: {described}")
        return MatchResult((), held, primary, sets)
    candidates = []
    for registration in ordered:
        if registration.name not in per_component[primary]:
            continue
        indexes, weight = per_component[primary][registration.name]
        others = tuple(ComponentMatch(component, *per_component[component][registration.name])
                       for component, _ in listed[1:])
        candidates.append(Candidate(registration.name, registration.uid, registration.ready, indexes, weight, others))
    return MatchResult(tuple(candidates), None, primary, sets)
