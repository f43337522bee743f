"""The replica plan of All, Split and SplitByCapacity (workflows/placement/allocation.py): the floor,
largest remainder with ties by name, weight zero, the maxReplicasPerCluster hold, unknown capacity, the
per-component floors and the input digest."""

from __future__ import annotations

import random
from typing import Any

import pytest

from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.api_models.ome.placement import PlacementSpec
from servingops.workflows.placement.allocation import (
    Components,
    KeepLast,
    Plan,
    allocate,
    largest_remainder,
)
from servingops.workflows.placement.held import (
    CAPACITY_UNKNOWN,
    CEILING_EXCEEDED,
    COMPONENT_AFFINITY_MISMATCH,
    NO_FLOOR,
)
from servingops.workflows.placement.matching import Registration, match_clusters

pytestmark = pytest.mark.unit

Spec = dict[str, Any]
ENGINE, DECODER, ROUTER = ComponentType.ENGINE, ComponentType.DECODER, ComponentType.ROUTER
ENGINE_ONLY = Components()

# Listed out of name order on purpose: ties go by name, never by list order.
MEMBERS = [
    Registration(name="c", uid="u-c", labels={"pool": "x", "zone": "2"}, ready=True),
    Registration(name="a", uid="u-a", labels={"pool": "x", "zone": "1"}, ready=True),
    Registration(name="b", uid="u-b", labels={"pool": "x", "zone": "1"}, ready=False),
]


def _name(*names: str, weight: int | None = None) -> Spec:
    term: Spec = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(names)}]}
    return term if weight is None else {**term, "weight": weight}


def _spec(mode: str, terms: list[Spec] | None = None, **split: int) -> PlacementSpec:
    body: Spec = {"policy": "ClusterAffinity", "mode": mode}
    if terms is not None:
        body["clusterAffinity"] = terms
    if split:
        body["split"] = split
    return PlacementSpec.model_validate(body)


def _plan(spec: PlacementSpec, components: Components = ENGINE_ONLY, members: list[Registration] = MEMBERS,
          capacities: dict[str, int | None] | None = None) -> Plan:
    plan = allocate(spec, match_clusters(spec, members), components, capacities)
    assert isinstance(plan, Plan)
    return plan


# --- largest remainder -----------------------------------------------------------------------------

# (id, total, weights in the order given, expected shares)
REMAINDERS: list[tuple[str, int, list[tuple[str, int]], dict[str, int]]] = [
    ("three-to-one", 4, [("a", 3), ("b", 1)], {"a": 3, "b": 1}),
    ("equal-extra-to-first-names", 5, [("c", 1), ("b", 1), ("a", 1)], {"a": 2, "b": 2, "c": 1}),
    ("tie-by-name-not-order", 1, [("b", 1), ("a", 1)], {"a": 1, "b": 0}),
    ("larger-remainder-beats-name", 2, [("a", 1), ("b", 2)], {"a": 1, "b": 1}),
    ("proportional", 10, [("a", 1), ("b", 2)], {"a": 3, "b": 7}),
    ("zero-weight-gets-nothing", 7, [("a", 0), ("b", 2), ("c", 5)], {"a": 0, "b": 2, "c": 5}),
    ("zero-weight-never-takes-the-extra", 3, [("a", 0), ("b", 1), ("c", 1)], {"a": 0, "b": 2, "c": 1}),
    ("all-zero-assigns-nothing", 3, [("a", 0), ("b", 0)], {"a": 0, "b": 0}),
    ("nobody", 3, [], {}),
]


@pytest.mark.parametrize(("total", "weights", "shares"), [(t, w, s) for _, t, w, s in REMAINDERS],
                         ids=[i for i, _, _, _ in REMAINDERS])
def test_largest_remainder(total: int, weights: list[tuple[str, int]], shares: dict[str, int]) -> None:
    assert largest_remainder(total, weights) == shares


def test_largest_remainder_refuses_negative_weights() -> None:
    with pytest.raises(ValueError, match="negative"):
        largest_remainder(2, [("a", -1), ("b", 3)])


def test_generated_cases_keep_the_floor_and_stay_within_one_of_the_quota() -> None:
    rng = random.Random(14)
    for _ in range(2000):
        names = rng.sample("abcdefghij", rng.randint(0, 6))
        weights = [(name, rng.choice([0, 0, 1, 2, 3, 7, 100])) for name in names]
        total = rng.randint(0, 40)
        shares = largest_remainder(total, weights)
        whole = sum(w for _, w in weights)
        unassigned = total if whole == 0 else 0
        assert sum(shares.values()) + unassigned == total, (total, weights, shares)
        for name, weight in weights:
            quota = total * weight / whole if whole else 0
            assert quota - 1 < shares[name] < quota + 1, (total, weights, shares)
        shuffled = list(weights)
        rng.shuffle(shuffled)
        assert largest_remainder(total, shuffled) == shares


# --- Split -----------------------------------------------------------------------------------------


def test_split_three_to_one_over_two_members() -> None:
    plan = _plan(_spec("Split", [_name("a", weight=3), _name("b")], replicas=4))
    assert plan.desired() == {"a": 3, "b": 1}
    assert [(h.cluster, h.cluster_uid, h.weight) for h in plan.homes] == [("a", "u-a", 3), ("b", "u-b", 1)]
    assert (plan.requested_replicas, plan.assigned_replicas, plan.unassigned_replicas, plan.held) == (4, 4, 0, None)
    assert plan.homes[0].desired_home(plan.input_digest).to_api() == {
        "inputDigest": plan.input_digest, "replicaFloors": [{"component": "engine", "replicas": 3}]}


def test_split_without_weights_divides_equally_with_the_extra_to_the_first_names() -> None:
    plan = _plan(_spec("Split", replicas=5))
    assert plan.desired() == {"a": 2, "b": 2, "c": 1}
    assert [h.weight for h in plan.homes] == [1, 1, 1]


# (id, split block, declared engine minReplicas, expected floor or None for held)
FLOORS: list[tuple[str, dict[str, int], int | None, int | None]] = [
    ("split-replicas", {"replicas": 6}, None, 6),
    ("split-replicas-beat-engine-min", {"replicas": 6}, 2, 6),
    ("engine-min-fallback", {}, 3, 3),
    ("ceiling-only-falls-back", {"maxReplicasPerCluster": 5}, 2, 2),
    ("engine-min-zero-is-no-floor", {}, 0, None),
    ("nothing-declared", {}, None, None),
]


@pytest.mark.parametrize(("split", "engine_min", "floor"), [(s, e, f) for _, s, e, f in FLOORS],
                         ids=[i for i, _, _, _ in FLOORS])
def test_the_floor(split: dict[str, int], engine_min: int | None, floor: int | None) -> None:
    plan = _plan(_spec("Split", **split), Components(engine_min_replicas=engine_min))
    if floor is None:
        assert plan.held is not None and plan.held.reason == NO_FLOOR
        assert plan.homes == () and plan.requested_replicas == 0
    else:
        assert plan.held is None
        assert (plan.requested_replicas, sum(plan.desired().values())) == (floor, floor)


# (id, ceiling, held?)
CEILINGS: list[tuple[str, int, bool]] = [
    ("exceeded", 2, True),
    ("exactly-met", 3, False),
    ("zero-means-none", 0, False),
]


@pytest.mark.parametrize(("ceiling", "held"), [(c, h) for _, c, h in CEILINGS], ids=[i for i, _, _ in CEILINGS])
def test_max_replicas_per_cluster_holds_the_plan_without_clamping(ceiling: int, held: bool) -> None:
    plan = _plan(_spec("Split", [_name("a", weight=3), _name("b")], replicas=4, maxReplicasPerCluster=ceiling))
    assert plan.desired() == {"a": 3, "b": 1}
    if held:
        assert plan.held is not None and plan.held.reason == CEILING_EXCEEDED
        assert "a=3" in plan.held.message and "b=" not in plan.held.message
    else:
        assert plan.held is None


def test_no_candidate_leaves_the_floor_unassigned() -> None:
    plan = _plan(_spec("Split", [_name("nowhere")], replicas=3))
    assert plan.homes == ()
    assert (plan.requested_replicas, plan.assigned_replicas, plan.unassigned_replicas) == (3, 0, 3)


# --- SplitByCapacity -------------------------------------------------------------------------------


def test_split_by_capacity_weighs_by_reported_capacity() -> None:
    plan = _plan(_spec("SplitByCapacity", [_name("a", "b")], replicas=4), capacities={"a": 6, "b": 2, "c": 99})
    assert plan.desired() == {"a": 3, "b": 1}
    assert [h.weight for h in plan.homes] == [6, 2]


@pytest.mark.parametrize(("capacities", "unknown"),
                         [({"a": 6, "b": None, "c": None}, "[b, c]"), ({"a": 6}, "[b, c]"), (None, "[a, b, c]")],
                         ids=["reported-none", "absent", "no-reports"])
def test_unknown_capacity_keeps_the_last_plan(capacities: dict[str, int | None] | None, unknown: str) -> None:
    spec = _spec("SplitByCapacity", replicas=4)
    verdict = allocate(spec, match_clusters(spec, MEMBERS), Components(), capacities)
    assert isinstance(verdict, KeepLast)
    assert verdict.held.reason == CAPACITY_UNKNOWN
    assert verdict.held.message.endswith(unknown)


def test_zero_capacity_everywhere_leaves_the_floor_unassigned() -> None:
    plan = _plan(_spec("SplitByCapacity", replicas=4), capacities={"a": 0, "b": 0, "c": 0})
    assert plan.desired() == {"a": 0, "b": 0, "c": 0}
    assert (plan.requested_replicas, plan.assigned_replicas, plan.unassigned_replicas) == (4, 0, 4)


def test_a_zero_capacity_home_gets_nothing_and_the_rest_is_assigned() -> None:
    plan = _plan(_spec("SplitByCapacity", replicas=5), capacities={"a": 0, "b": 1, "c": 4})
    assert plan.desired() == {"a": 0, "b": 1, "c": 4}
    assert plan.unassigned_replicas == 0


# --- All and Single --------------------------------------------------------------------------------


def test_all_gives_every_matched_cluster_the_full_per_home_policy() -> None:
    components = Components(engine_min_replicas=3, decoder=True, router=True, router_min_replicas=2)
    plan = _plan(_spec("All", [_name("a", "c")]), components)
    assert plan.desired() == {"a": 3, "c": 3}
    assert all(h.floors == ((ENGINE, 3), (DECODER, 3), (ROUTER, 2)) and h.weight is None for h in plan.homes)
    assert (plan.requested_replicas, plan.assigned_replicas, plan.unassigned_replicas, plan.held) == (6, 6, 0, None)


def test_all_defaults_the_engine_floor_to_one_and_keeps_a_declared_zero() -> None:
    assert _plan(_spec("All")).desired() == {"a": 1, "b": 1, "c": 1}
    assert _plan(_spec("All"), Components(engine_min_replicas=0)).desired() == {"a": 0, "b": 0, "c": 0}


def test_all_reads_no_split_even_where_component_affinity_admits_one() -> None:
    spec = PlacementSpec.model_validate({"policy": "ComponentAffinity", "mode": "All", "split": {"replicas": 9},
                                         "componentAffinity": {"engine": [_name("a", "b")]}})
    plan = _plan(spec, Components(engine_min_replicas=2))
    assert plan.desired() == {"a": 2, "b": 2} and plan.requested_replicas == 4


def test_single_has_no_allocation() -> None:
    spec = _spec("Single")
    with pytest.raises(ValueError, match="race"):
        allocate(spec, match_clusters(spec, MEMBERS), Components())


# --- component floors ------------------------------------------------------------------------------


def _components(mode: str, replicas: int, **lists: list[Spec]) -> PlacementSpec:
    return PlacementSpec.model_validate({"policy": "ComponentAffinity", "mode": mode, "split": {"replicas": replicas},
                                         "componentAffinity": lists})


ALL_THREE = _name("a", "b", "c")


def test_decoder_follows_the_engine_under_cluster_affinity() -> None:
    plan = _plan(_spec("Split", [_name("a", weight=3), _name("b")], replicas=4), Components(decoder=True))
    assert [h.floors for h in plan.homes] == [((ENGINE, 3), (DECODER, 3)), ((ENGINE, 1), (DECODER, 1))]


def test_decoder_weights_its_own_shares_of_the_same_floor() -> None:
    spec = _components("Split", 4, engine=[_name("a", "b")], decoder=[_name("a", weight=3), _name("a", "b")])
    plan = _plan(spec, Components(decoder=True))
    assert {h.cluster: (h.floor(ENGINE), h.floor(DECODER)) for h in plan.homes} == {"a": (2, 3), "b": (2, 1)}


def test_decoder_shares_only_go_to_clusters_holding_engine_replicas() -> None:
    # floor 1 over a and b (1:1): the engine replica goes to a; b's heavier decoder weight cannot take it.
    spec = _components("Split", 1, engine=[_name("a", "b")], decoder=[_name("b", weight=5), _name("a", "b")])
    plan = _plan(spec, Components(decoder=True))
    assert {h.cluster: (h.floor(ENGINE), h.floor(DECODER)) for h in plan.homes} == {"a": (1, 1), "b": (0, 0)}


def test_router_without_its_own_terms_runs_the_full_policy_where_the_engine_is() -> None:
    plan = _plan(_spec("Split", [_name("a", "b")], replicas=1), Components(router=True, router_min_replicas=2))
    assert {h.cluster: h.floor(ROUTER) for h in plan.homes} == {"a": 2, "b": 0}


def test_router_with_its_own_terms_divides_its_min_replicas_over_engine_holders() -> None:
    spec = _components("Split", 6, engine=[ALL_THREE, _name("c", weight=4)],
                       router=[_name("a", weight=2), ALL_THREE])
    plan = _plan(spec, Components(router=True, router_min_replicas=4))
    # engine 1:1:5 over 6 -> a 1, b 1, c 4; router 3:1:1 over 4 -> a 2, then b and c (equal remainders) 1 each.
    assert {h.cluster: (h.floor(ENGINE), h.floor(ROUTER)) for h in plan.homes} == {
        "a": (1, 2), "b": (1, 1), "c": (4, 1)}


def test_router_shares_skip_clusters_without_engine_replicas() -> None:
    # floor 1 over a and b: only a holds the engine, so a takes the whole router.minReplicas.
    spec = _components("Split", 1, engine=[_name("a", "b")], router=[_name("b", weight=9), _name("a", "b")])
    plan = _plan(spec, Components(router=True, router_min_replicas=2))
    assert {h.cluster: (h.floor(ENGINE), h.floor(ROUTER)) for h in plan.homes} == {"a": (1, 2), "b": (0, 0)}


def test_a_component_disagreement_is_a_held_plan() -> None:
    spec = _components("Split", 2, engine=[ALL_THREE], decoder=[_name("a")])
    plan = _plan(spec, Components(decoder=True))
    assert plan.held is not None and plan.held.reason == COMPONENT_AFFINITY_MISMATCH
    assert plan.homes == ()


def test_components_from_a_service_spec() -> None:
    spec = InferenceServiceSpec.model_validate({"engine": {"minReplicas": 2}, "decoder": {},
                                                "router": {"minReplicas": 0}})
    components = Components.from_spec(spec)
    assert components == Components(engine_min_replicas=2, decoder=True, router=True, router_min_replicas=0)
    assert components.full_policy_floors() == ((ENGINE, 2), (DECODER, 2), (ROUTER, 0))
    refs = InferenceServiceSpec.model_validate({"replicaRefs": {"engine": ["e"], "router": ["r"]}})
    assert Components.from_spec(refs) == Components(router=True)


# --- the input digest ------------------------------------------------------------------------------


def _digest(spec: PlacementSpec, members: list[Registration] = MEMBERS, components: Components = ENGINE_ONLY,
            capacities: dict[str, int | None] | None = None) -> str:
    return _plan(spec, components, members, capacities).input_digest


BASE = _spec("Split", [_name("a", weight=3), _name("b", "c")], replicas=4)


def test_the_digest_ignores_order_and_readiness() -> None:
    assert len(_digest(BASE)) == 64 and int(_digest(BASE), 16) >= 0
    assert _digest(BASE, list(reversed(MEMBERS))) == _digest(BASE)
    flipped = [m.model_copy(update={"ready": not m.ready}) for m in MEMBERS]
    assert _digest(BASE, flipped) == _digest(BASE)


@pytest.mark.parametrize(
    "changed",
    [
        lambda: _digest(_spec("Split", [_name("a", weight=2), _name("b", "c")], replicas=4)),
        lambda: _digest(_spec("Split", [_name("a", weight=3), _name("b", "c")], replicas=5)),
        lambda: _digest(_spec("Split", [_name("a", weight=3), _name("b", "c")], replicas=4, maxReplicasPerCluster=9)),
        lambda: _digest(_spec("Split", [_name("a", weight=3), _name("b")], replicas=4)),
        lambda: _digest(BASE, [m.model_copy(update={"uid": m.uid + "-new"}) if m.name == "b" else m
                               for m in MEMBERS]),
        lambda: _digest(BASE, components=Components(router=True)),
    ],
    ids=["weight", "floor", "ceiling", "clusters", "re-registered-uid", "components"],
)
def test_the_digest_changes_with_each_resolved_input(changed: Any) -> None:
    assert changed() != _digest(BASE)


def test_the_capacity_digest_follows_the_capacities() -> None:
    spec = _spec("SplitByCapacity", replicas=4)
    reported: dict[str, int | None] = {"a": 1, "b": 2, "c": 3}
    assert _digest(spec, capacities=reported) == _digest(spec, capacities=dict(reversed(reported.items())))
    assert _digest(spec, capacities={**reported, "c": 4}) != _digest(spec, capacities=reported)


def test_the_capacity_digest_follows_each_members_demand_fingerprint() -> None:
    """A member rendering the service otherwise at the same whole replicas is a new plan (a new contract
    for its copy); without fingerprints (plans accepted before they counted) the digest is as it was."""
    spec = _spec("SplitByCapacity", replicas=4)
    reported: dict[str, int | None] = {"a": 1, "b": 2, "c": 3}
    matches = match_clusters(spec, MEMBERS)

    def digest(demands: dict[str, str] | None) -> str:
        plan = allocate(spec, matches, ENGINE_ONLY, reported, demands)
        assert isinstance(plan, Plan)
        return plan.input_digest

    same = {"a": "1" * 64, "b": "2" * 64, "c": "3" * 64}
    assert digest(same) == digest(dict(reversed(same.items())))
    assert digest({**same, "b": "4" * 64}) != digest(same)
    assert digest(None) == _digest(spec, capacities=reported) != digest(same)
    assert _plan(spec, capacities=reported).homes == allocate(spec, matches, ENGINE_ONLY, reported, same).homes
