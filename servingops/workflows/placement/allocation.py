"""The replica plan of All, Split and SplitByCapacity over the matched candidates.

Pure and deterministic (the placement workflow calls it): largest remainder with ties by cluster
name, no clock, and an input digest over the resolved inputs only, so the workflow opens a new plan
revision exactly when what the plan was computed from changes.

What the seed fixes, and how it is read here:
- The floor: "split.replicas ... Unset falls back to the engine component's minReplicas" and "The
  floor falls back only to an explicitly declared positive engine.minReplicas"; no floor holds the
  plan (NoReplicaFloor).
- Split: the floor is divided over the candidates' static weights. SplitByCapacity: over the whole
  replicas each member reports; one unknown capacity keeps the last plan (CapacityUnknown). A total
  weight of zero (or no candidate) leaves the floor unassigned ("the part of the floor no home holds
  yet"); a zero-weight candidate is a matched home with a zero floor.
- maxReplicasPerCluster: "Plans exceeding it are held; zero follows the assigned allocation without
  an extra ceiling". The plan is computed as if unbounded and held, never clamped.
- All: every matched cluster serves the full per-home policy, so each home's engine floor is the
  engine's minReplicas (declared, else its documented default of one; zero is scale-to-zero).
  All has no fleet floor and no ceiling: it reads no `split` (ClusterAffinity rejects one there;
  ComponentAffinity admits one, and the seed gives it no meaning in All, so it is ignored).
- Components (PlacementComponentFloor): "Engine and Decoder use equal whole-replica floors; Router is
  independent". Read as: the decoder's fleet floor is the engine's, and its per-home floors follow
  the engine's, except that in Split under ComponentAffinity the decoder list "weights its shares
  over the clusters that hold engine replicas". The router: "In Split, it [componentAffinity.router]
  divides router.minReplicas across the clusters that hold engine replicas; without it, each such
  cluster runs the full router policy".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servingops.api_models.ome.enums import ComponentType, PlacementMode, PlacementPolicy
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.api_models.ome.placement import PlacementComponentFloor, PlacementSpec
from servingops.api_models.ome.placement_status import PlacementHomePolicy
from servingops.workflows.placement.held import CAPACITY_UNKNOWN, CEILING_EXCEEDED, NO_FLOOR, Held
from servingops.workflows.placement.matching import Candidate, MatchResult

DEFAULT_MIN_REPLICAS = 1
"""ComponentExtensionSpec.minReplicas: "defaults to 1 but can be set to 0"."""


@dataclass(frozen=True)
class Components:
    """What the service declares, as far as floors go."""

    engine_min_replicas: int | None = None
    """The engine's minReplicas as declared (None when not declared)."""
    decoder: bool = False
    router: bool = False
    router_min_replicas: int | None = None

    @classmethod
    def from_spec(cls, spec: InferenceServiceSpec) -> Components:
        refs = spec.replica_refs
        return cls(
            engine_min_replicas=spec.engine.min_replicas if spec.engine else None,
            decoder=spec.decoder is not None or bool(refs and refs.decoder),
            router=spec.router is not None or bool(refs and refs.router),
            router_min_replicas=spec.router.min_replicas if spec.router else None,
        )

    def home_engine_floor(self) -> int:
        return DEFAULT_MIN_REPLICAS if self.engine_min_replicas is None else self.engine_min_replicas

    def home_router_floor(self) -> int:
        return DEFAULT_MIN_REPLICAS if self.router_min_replicas is None else self.router_min_replicas

    def full_policy_floors(self) -> tuple[tuple[ComponentType, int], ...]:
        """The floors of a home that runs the whole per-home policy (an All home, a Single copy)."""
        engine = self.home_engine_floor()
        floors = [(ComponentType.ENGINE, engine)]
        if self.decoder:
            floors.append((ComponentType.DECODER, engine))
        if self.router:
            floors.append((ComponentType.ROUTER, self.home_router_floor()))
        return tuple(floors)


@dataclass(frozen=True)
class HomeAllocation:
    cluster: str
    cluster_uid: str
    weight: int | None
    """The weight the engine floor was divided by (static weight or capacity); None in All."""
    desired_replicas: int
    """The engine floor of this home: CandidateAllocationStatus.desiredReplicas."""
    floors: tuple[tuple[ComponentType, int], ...]

    def floor(self, component: ComponentType) -> int | None:
        return next((replicas for c, replicas in self.floors if c == component), None)

    def replica_floors(self) -> list[PlacementComponentFloor]:
        return [PlacementComponentFloor(component=c, replicas=replicas) for c, replicas in self.floors]

    def desired_home(self, input_digest: str) -> PlacementHomePolicy:
        """CandidateAllocationStatus.desiredHome: these floors, bound to the plan's input digest."""
        return PlacementHomePolicy(input_digest=input_digest, replica_floors=self.replica_floors())


@dataclass(frozen=True)
class Plan:
    mode: PlacementMode
    homes: tuple[HomeAllocation, ...]
    """One per candidate, sorted by cluster name; a zero-weight candidate has a zero floor."""
    requested_replicas: int
    assigned_replicas: int
    unassigned_replicas: int
    held: Held | None
    """Set when this plan must not be accepted: the workflow keeps the last accepted plan."""
    input_digest: str

    def desired(self) -> dict[str, int]:
        return {home.cluster: home.desired_replicas for home in self.homes}


@dataclass(frozen=True)
class KeepLast:
    """No new plan can be computed: keep the last accepted one."""

    held: Held


def resolve_floor(spec: PlacementSpec, components: Components) -> int | None:
    if spec.split is not None and spec.split.replicas is not None:
        return spec.split.replicas
    declared = components.engine_min_replicas
    return declared if declared is not None and declared > 0 else None


def largest_remainder(total: int, weights: Sequence[tuple[str, int]]) -> dict[str, int]:
    """Divide `total` in proportion to `weights`: each gets the floor of its quota, and what is left
    goes one each to the largest remainders, ties to the first name. A zero total weight assigns
    nothing."""
    if any(weight < 0 for _, weight in weights):
        raise ValueError(f"negative weight in {list(weights)}")
    shares = {name: 0 for name, _ in weights}
    whole = sum(weight for _, weight in weights)
    if whole == 0 or total <= 0:
        return shares
    remainders = []
    for name, weight in weights:
        shares[name], remainder = divmod(total * weight, whole)
        remainders.append((-remainder, name))
    left = total - sum(shares.values())
    for _, name in sorted(remainders)[:left]:
        shares[name] += 1
    return shares


def digest(inputs: Mapping[str, Any]) -> str:
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _component_inputs(components: Components) -> dict[str, Any]:
    return {"engineMinReplicas": components.engine_min_replicas, "decoder": components.decoder,
            "router": components.router, "routerMinReplicas": components.router_min_replicas}


def _candidate_inputs(candidate: Candidate, weight: int | None) -> dict[str, Any]:
    return {"cluster": candidate.cluster, "uid": candidate.cluster_uid, "weight": weight,
            "components": [{"component": m.component.value, "weight": m.weight} for m in candidate.component_matches]}


def _held_plan(spec: PlacementSpec, held: Held, inputs: Mapping[str, Any]) -> Plan:
    return Plan(spec.mode, (), 0, 0, 0, held, digest({**inputs, "held": held.reason, "heldMessage": held.message}))


def allocate(spec: PlacementSpec, matches: MatchResult, components: Components,
             capacities: Mapping[str, int | None] | None = None,
             demands: Mapping[str, str] | None = None) -> Plan | KeepLast:
    """The plan for `spec` over `matches`. `capacities` (SplitByCapacity only) maps a cluster name to
    the whole replicas it verifiably reports, None or absent when it has not. `demands` (SplitByCapacity)
    maps a cluster name to the demand fingerprint of its reading: part of the input digest, so a member
    that renders the service otherwise (a changed spec, or a runtime changed there) gets a new plan
    revision whose demand contract it can project under, even when its whole replicas stay the same."""
    if spec.mode == PlacementMode.SINGLE:
        raise ValueError("Single has no allocation: its admission race picks the home")
    base = {"mode": spec.mode.value, "policy": spec.policy.value, "components": _component_inputs(components)}
    if matches.held is not None:
        sets = [{"component": s.component.value, "clusters": list(s.clusters)} for s in matches.component_clusters]
        return _held_plan(spec, matches.held, {**base, "componentClusters": sets})
    if spec.mode == PlacementMode.ALL:
        return _all(spec, matches.candidates, components, base)
    if demands is not None:
        base = {**base, "demands": {c.cluster: demands.get(c.cluster) for c in matches.candidates}}
    return _split(spec, matches.candidates, components, capacities, base)


def _all(spec: PlacementSpec, candidates: Sequence[Candidate], components: Components,
         base: dict[str, Any]) -> Plan:
    floors = components.full_policy_floors()
    homes = tuple(HomeAllocation(c.cluster, c.cluster_uid, None, floors[0][1], floors) for c in candidates)
    total = sum(home.desired_replicas for home in homes)
    inputs = {**base, "floors": [[c.value, n] for c, n in floors],
              "candidates": [_candidate_inputs(c, None) for c in candidates]}
    return Plan(spec.mode, homes, total, total, 0, None, digest(inputs))


def _weights(spec: PlacementSpec, candidates: Sequence[Candidate],
             capacities: Mapping[str, int | None] | None) -> list[tuple[str, int]] | KeepLast:
    if spec.mode == PlacementMode.SPLIT:
        weights = []
        for candidate in candidates:
            if candidate.weight is None:
                raise ValueError(f"candidate {candidate.cluster} has no static weight: not matched for Split")
            weights.append((candidate.cluster, candidate.weight))
        return weights
    reported = capacities or {}
    unknown = [c.cluster for c in candidates if reported.get(c.cluster) is None]
    if unknown:
        return KeepLast(Held(CAPACITY_UNKNOWN, f"no verified capacity from [{', '.join(unknown)}]"))
    return [(c.cluster, int(reported[c.cluster] or 0)) for c in candidates]


def _split(spec: PlacementSpec, candidates: Sequence[Candidate], components: Components,
           capacities: Mapping[str, int | None] | None, base: dict[str, Any]) -> Plan | KeepLast:
    weights = _weights(spec, candidates, capacities)
    if isinstance(weights, KeepLast):
        return weights
    floor = resolve_floor(spec, components)
    ceiling = spec.split.max_replicas_per_cluster if spec.split is not None else None
    weight_of = dict(weights)
    inputs = {**base, "floor": floor, "ceiling": ceiling,
              "candidates": [_candidate_inputs(c, weight_of[c.cluster]) for c in candidates]}
    if floor is None:
        return _held_plan(spec, Held(NO_FLOOR, "split.replicas is unset and the engine declares no positive "
                                               "minReplicas"), inputs)
    engine = largest_remainder(floor, weights)
    holders = [c for c in candidates if engine[c.cluster] > 0]
    decoder = _decoder_floors(spec, candidates, holders, engine, floor) if components.decoder else {}
    router = _router_floors(spec, holders, components) if components.router else {}
    homes = []
    for candidate in candidates:
        floors = [(ComponentType.ENGINE, engine[candidate.cluster])]
        if components.decoder:
            floors.append((ComponentType.DECODER, decoder.get(candidate.cluster, 0)))
        if components.router:
            floors.append((ComponentType.ROUTER, router.get(candidate.cluster, 0)))
        homes.append(HomeAllocation(candidate.cluster, candidate.cluster_uid, weight_of[candidate.cluster],
                                    engine[candidate.cluster], tuple(floors)))
    assigned = sum(engine.values())
    held = None
    if ceiling:
        over = [f"{h.cluster}={max(n for c, n in h.floors if c != ComponentType.ROUTER)}" for h in homes
                if any(n > ceiling for c, n in h.floors if c != ComponentType.ROUTER)]
        if over:
            held = Held(CEILING_EXCEEDED, f"maxReplicasPerCluster is {ceiling}; the plan needs {', '.join(over)}")
    return Plan(spec.mode, tuple(homes), floor, assigned, floor - assigned, held, digest(inputs))


def _decoder_floors(spec: PlacementSpec, candidates: Sequence[Candidate], holders: Sequence[Candidate],
                    engine: Mapping[str, int], floor: int) -> dict[str, int]:
    own_weights = (spec.mode == PlacementMode.SPLIT and spec.policy == PlacementPolicy.COMPONENT_AFFINITY
                   and any(c.has_component_terms(ComponentType.DECODER) for c in candidates))
    if not own_weights:
        return dict(engine)
    return largest_remainder(floor, [(c.cluster, c.component_weight(ComponentType.DECODER) or 0) for c in holders])


def _router_floors(spec: PlacementSpec, holders: Sequence[Candidate], components: Components) -> dict[str, int]:
    router_floor = components.home_router_floor()
    if not any(c.has_component_terms(ComponentType.ROUTER) for c in holders):
        return {c.cluster: router_floor for c in holders}
    static = spec.mode == PlacementMode.SPLIT
    weights = [(c.cluster, (c.component_weight(ComponentType.ROUTER) or 0) if static else 1) for c in holders]
    return largest_remainder(router_floor, weights)
